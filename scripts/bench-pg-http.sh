#!/usr/bin/env bash
# bench-pg-http.sh [BASE_COMMIT] [ROUNDS]: HTTP ingest benchmarks of web
# (BenchmarkHTTPAppendConcurrent16: 16 clients, one record per request;
# BenchmarkHTTPAppendBatch100: 100 records per request from 1 and 4
# clients; BenchmarkHTTPAppendTwoServers: the same through two servers on
# one PostgreSQL database) on SQLite and on PostgreSQL (pgtest's throwaway
# cluster, fsync off), the stores alternating in one run. With
# BASE_COMMIT, a test binary of it runs the PostgreSQL benchmarks it has
# in every round too, before or after the working tree's (alternating).
# Prints "side store benchmark records/s" lines; logs stay in BENCH_WORK.
#
# Environment: ROUNDS (default 2), BENCH_WORK, BENCH_SINGLE (default
# 3000x), BENCH_BATCH (default 150x).
set -euo pipefail
base=${1:-}
rounds=${2:-${ROUNDS:-2}}
root=$(git rev-parse --show-toplevel)
work=${BENCH_WORK:-$(mktemp -d /tmp/bench-pg-http.XXXXXX)}
mkdir -p "$work"
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11} LEDGER_REQUIRE_POSTGRES=1
(cd "$root" && go test -c -o "$work/new.test" ./web)
sides=new
if [ -n "$base" ]; then
  if [ ! -x "$work/old.test" ]; then
    git -C "$root" worktree add --detach "$work/old-src" "$base" >/dev/null
    (cd "$work/old-src" && go test -c -o "$work/old.test" ./web)
    git -C "$root" worktree remove --force "$work/old-src"
  fi
  sides="old new"
fi
run() { # side store pattern benchtime
  local log="$work/$1.$2.$r.$(echo "$3" | tr -c 'A-Za-z0-9' _).log"
  LEDGER_TEST_STORE=$2 "$work/$1.test" -test.run '^$' -test.bench "$3" -test.benchtime "$4" >"$log" 2>&1 || { tail -20 "$log"; exit 1; }
  # The server's access log interleaves with the result lines: a result's
  # name is the last "Benchmark..." seen before its records/s.
  awk -v s="$1" -v st="$2" 'match($0,/^Benchmark[^ \t]+/){n=substr($0,RSTART,RLENGTH)} /records\/s/{for(i=1;i<=NF;i++) if($(i)=="records/s") print s, st, n, $(i-1)}' "$log"
}
for r in $(seq 1 "$rounds"); do
  echo "round $r load $(cut -d' ' -f1-3 /proc/loadavg)"
  order=$sides; [ $((r % 2)) -eq 0 ] && order=$(echo "$sides" | awk '{for(i=NF;i>0;i--) printf "%s ", $i}')
  run new sqlite '^BenchmarkHTTPAppendConcurrent16$' "${BENCH_SINGLE:-3000x}"
  run new sqlite '^BenchmarkHTTPAppendBatch100$' "${BENCH_BATCH:-150x}"
  for side in $order; do
    run "$side" postgres '^BenchmarkHTTPAppendConcurrent16$' "${BENCH_SINGLE:-3000x}"
    run "$side" postgres '^BenchmarkHTTPAppendBatch100$' "${BENCH_BATCH:-150x}"
  done
  run new postgres '^BenchmarkHTTPAppendTwoServers$/^single' "${BENCH_SINGLE:-3000x}"
  run new postgres '^BenchmarkHTTPAppendTwoServers$/^batch100' "${BENCH_BATCH:-150x}"
  echo "  load $(cut -d' ' -f1-3 /proc/loadavg)"
done
echo "logs: $work"
