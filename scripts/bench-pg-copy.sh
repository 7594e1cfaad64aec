#!/usr/bin/env bash
# bench-pg-copy.sh SQLITE_DB [COMMAND...]: time `ledger copy` of a SQLite ledger into a
# fresh database of a throwaway PostgreSQL cluster (scripts/pg-cluster.sh),
# then audit both with the verifier key beside SQLITE_DB and print each
# audit's size and root. The source is copied first (a copy opens it at the
# newest schema). A 1,000,000-leaf source is ledger/sqlite's benchmark
# cache: `go test -run '^$' -bench BenchmarkAudit1M -benchtime 1x
# ./ledger/sqlite` builds $TMPDIR/ledger-bench-v8-1000000/ledger.db.
#
# COMMAND, when given, then runs with LEDGER_BENCH_PG_DSN (the copy) and
# LEDGER_BENCH_KEY_DIR (its key) set, before the cluster stops: the
# PostgreSQL benchmarks at that size, e.g.
#   scripts/bench-pg-copy.sh $TMPDIR/gates-bench-v1/ledger.db \
#     sh -c 'go test -run "^$" -bench "Readiness$" -benchtime 20x ./gates &&
#            go test -run "^$" -bench InclusionProof1M -benchtime 2000x ./ledger/postgres'
#
# Environment: LEDGER_BIN (default: go build ./cmd/ledger), PG_DURABLE.
set -euo pipefail
src=${1:?usage: scripts/bench-pg-copy.sh SQLITE_DB}
root=$(git rev-parse --show-toplevel)
export GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11}
work=$(mktemp -d /tmp/bench-pg-copy.XXXXXX)
bin=${LEDGER_BIN:-$work/ledger}
[ -x "$bin" ] || (cd "$root" && go build -o "$bin" ./cmd/ledger)
. "$root/scripts/pg-cluster.sh"
trap 'pg_cluster_stop; rm -rf "$work"' EXIT
cp "$src" "$work/ledger.db"; cp "$(dirname "$src")"/ledger.pub "$(dirname "$src")"/ledger.key "$work/"
# The benchmark cache has no signed-state journal, so migrate upgrades the
# schema and then refuses to sign; what matters here is the schema.
"$bin" --data-dir "$work" migrate --db "$work/ledger.db" >/dev/null 2>&1 || true
"$bin" --data-dir "$work" --json migrate --status --db "$work/ledger.db" | python3 -c 'import json,sys;r=json.load(sys.stdin);sys.exit(r["version"]!=r["newest"])'
pg_cluster_start
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
start=$(date +%s.%N)
"$bin" --data-dir "$work" copy --from "$work/ledger.db" --to "$PG_DSN"
end=$(date +%s.%N)
echo "copy (with its two audits): $(echo "$end - $start" | bc) s; load after: $(cut -d' ' -f1-3 /proc/loadavg)"
for db in "$work/ledger.db" "$PG_DSN"; do
  s=$(date +%s.%N)
  "$bin" --data-dir "$work" --json audit --db "$db" | python3 -c 'import json,sys;r=json.load(sys.stdin);print("audit", "ok" if r["ok"] else "FAILED", "size", r["leaves"], "root", r["root"])'
  echo "  $(echo "$(date +%s.%N) - $s" | bc) s (${db%%\?*})"
done
if [ $# -gt 1 ]; then
  shift
  echo "load before the benchmarks: $(cut -d' ' -f1-3 /proc/loadavg)"
  (cd "$root" && LEDGER_BENCH_PG_DSN=$PG_DSN LEDGER_BENCH_KEY_DIR=$work "$@")
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
fi
