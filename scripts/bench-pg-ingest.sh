#!/usr/bin/env bash
# bench-pg-ingest.sh BASE_COMMIT [ROUNDS]: interleaved runs of
# ledger/storetest/teststore's BenchmarkIngest (16 in-process writers,
# single-record and 64-record appends, SQLite and PostgreSQL on pgtest's
# throwaway cluster) in test binaries of BASE_COMMIT ("old") and of the
# working tree ("new"), old first in odd rounds and new first in even ones.
# Prints each run's records/s; the logs stay under BENCH_WORK.
#
# Environment: ROUNDS (default 3), BENCH_WORK (default a new directory
# under /tmp), BENCH_PATTERN (default BenchmarkIngest), BENCH_TIME
# (default 2000x). Needs PostgreSQL's initdb (Debian's postgresql).
set -euo pipefail
base=${1:?usage: scripts/bench-pg-ingest.sh BASE_COMMIT [ROUNDS]}
rounds=${2:-${ROUNDS:-3}}
root=$(git rev-parse --show-toplevel)
work=${BENCH_WORK:-$(mktemp -d /tmp/bench-pg-ingest.XXXXXX)}
pattern=${BENCH_PATTERN:-BenchmarkIngest}
benchtime=${BENCH_TIME:-2000x}
mkdir -p "$work"
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11} LEDGER_REQUIRE_POSTGRES=1
if [ ! -x "$work/old.test" ]; then
  git -C "$root" worktree add --detach "$work/old-src" "$base" >/dev/null
  (cd "$work/old-src" && go test -c -o "$work/old.test" ./ledger/storetest/teststore)
  git -C "$root" worktree remove --force "$work/old-src"
fi
(cd "$root" && go test -c -o "$work/new.test" ./ledger/storetest/teststore)
for r in $(seq 1 "$rounds"); do
  order="old new"; [ $((r % 2)) -eq 0 ] && order="new old"
  for side in $order; do
    echo "round $r $side load $(cut -d' ' -f1-3 /proc/loadavg)"
    "$work/$side.test" -test.run '^$' -test.bench "$pattern" -test.benchtime "$benchtime" >"$work/$side.$r.log" 2>&1 || { cat "$work/$side.$r.log"; exit 1; }
    awk -v s="$side" 'match($0,/^Benchmark[^ \t]+/){n=substr($0,RSTART,RLENGTH)} /records\/s/{for(i=1;i<=NF;i++) if($(i)=="records/s") print s, n, $(i-1)}' "$work/$side.$r.log"
  done
done
echo "logs: $work"
