#!/usr/bin/env bash
# Interleaved old/new `go test -bench` of the ingest/append benchmarks
# (bench/write/RESULTS.md). OLD_PREFIX/NEW_PREFIX name test binaries built
# with `go test -c -o PREFIX-{web,sqlite,teststore}.test` from each tree.
set -euo pipefail
ROUNDS=${ROUNDS:-4}
BT=${BENCHTIME:-1s}
run() { # prefix pkgdir bin bench
  (cd "$2" && "$1-$3.test" -test.run='^$' -test.bench="$4" -test.benchtime="$BT" 2>/dev/null | grep '^Benchmark' || true)
}
for r in $(seq 1 "$ROUNDS"); do
  for tag in old new; do
    p=$OLD_PREFIX; [ $tag = new ] && p=$NEW_PREFIX
    echo "# round=$r bin=$tag loadavg=$(cut -d' ' -f1-3 /proc/loadavg | tr ' ' /)"
    run "$p" web web 'HTTPAppendConcurrent16|HTTPAppendBatch100|PostEvidence100' | sed "s/^/$tag /"
    run "$p" ledger/sqlite sqlite 'BatchedAppend|ResubmitBatch100' | sed "s/^/$tag /"
    run "$p" ledger/storetest/teststore teststore 'Ingest/sqlite' | sed "s/^/$tag /"
  done
done
