#!/usr/bin/env bash
# bench-pg-1m.sh: proof and readiness latency at 1,000,000 leaves on
# PostgreSQL and SQLite in one run. `ledger copy` moves gates' benchmark
# ledger ($TMPDIR/gates-bench-v1-s<schema>, 1,000,000 evidence records and 5 head
# verifications; `go test -run '^$' -bench 'Readiness$' -benchtime 1x
# ./gates` builds it) into a throwaway cluster (scripts/bench-pg-copy.sh,
# which times the copy and audits both), then on the copy and on the
# migrated SQLite source: gates.BenchmarkReadiness (50 gates) and
# BenchmarkInclusionProof1M (ledger/postgres, ledger/sqlite). The shared
# benchmark caches are not written: SQLite's benchmarks read hard links
# of the migrated copy in a TMPDIR of their own.
#
# Environment: READY_TIME (default 20x), PROOF_TIME (default 3000x).
set -euo pipefail
root=$(git rev-parse --show-toplevel)
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11}
bins=$(mktemp -d /tmp/bench-pg-1m.XXXXXX)
trap 'rm -rf "$bins"' EXIT
for p in gates ledger/postgres ledger/sqlite; do
  (cd "$root" && go test -c -o "$bins/$(basename $p).test" ./$p)
done
# The caches are named by schema version: this tree's.
schema=$(ls "$root"/migrations/ | sed -n 's/^0*\([0-9][0-9]*\)_.*/\1/p' | sort -n | tail -1)
export BINS=$bins READY_TIME=${READY_TIME:-20x} PROOF_TIME=${PROOF_TIME:-3000x} GDIR=gates-bench-v1-s$schema LDIR=ledger-bench-s$schema-1000000
"$root/scripts/bench-pg-copy.sh" "${TMPDIR:-/tmp}/$GDIR/ledger.db" bash -c '
  set -e
  t=$BINS/tmp; mkdir -p $t/$GDIR $t/$LDIR
  for d in $GDIR $LDIR; do
    ln "$LEDGER_BENCH_KEY_DIR/ledger.db" "$LEDGER_BENCH_KEY_DIR/ledger.key" "$LEDGER_BENCH_KEY_DIR/ledger.pub" $t/$d/
  done
  touch $t/$GDIR/complete $t/$LDIR/done
  for round in 1 2; do
    echo "round $round, load $(cut -d" " -f1-3 /proc/loadavg)"
    (cd gates && $BINS/gates.test -test.run "^$" -test.bench "^BenchmarkReadiness$" -test.benchtime $READY_TIME | grep ^Benchmark | sed "s/^/postgres /")
    (cd ledger/postgres && $BINS/postgres.test -test.run "^$" -test.bench "^BenchmarkInclusionProof1M$" -test.benchtime $PROOF_TIME | grep ^Benchmark | sed "s/^/postgres /")
    (cd gates && env -u LEDGER_BENCH_PG_DSN TMPDIR=$t $BINS/gates.test -test.run "^$" -test.bench "^BenchmarkReadiness$" -test.benchtime $READY_TIME | grep ^Benchmark | sed "s/^/sqlite /")
    (cd ledger/sqlite && TMPDIR=$t $BINS/sqlite.test -test.run "^$" -test.bench "^BenchmarkInclusionProof1M$" -test.benchtime $PROOF_TIME | grep ^Benchmark | sed "s/^/sqlite /")
  done'
