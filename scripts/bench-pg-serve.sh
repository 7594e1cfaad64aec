#!/usr/bin/env bash
# bench-pg-serve.sh SIDE... : a real `ledger serve` per run under
# cmd/ledger-load's writers (WRITERS closed-loop clients, one record per
# POST /api/v1/evidence, no readers), the sides interleaved round by round
# (the order reversed every other round). A SIDE is NAME=BINARY:STORE,
# STORE being sqlite (a fresh file) or postgres (a fresh database on one
# throwaway cluster, scripts/pg-cluster.sh, with fsync and
# synchronous_commit on unless PG_DURABLE=0). Prints one line per run:
#
#   round side acks acks/s server_cpu_us/ack pg_cpu_us/ack load1
#
# where the CPU is utime+stime (/proc/PID/stat) over the load run of the
# server and of every process of the cluster (postmaster, its backends,
# WAL writer, checkpointer), divided by the acknowledged records.
#
# Environment: ROUNDS (default 3), WRITERS (64), SECS (10, the length of
# the measured run; ledger-load's --alone), LOAD_BIN (ledger-load binary;
# default: built from this tree into BENCH_WORK), BENCH_WORK (logs;
# default a temp dir), PG_STATS=1 (load pg_stat_statements and print each
# PostgreSQL run's statements by execution time, with the tables'
# sequential and index scans, into BENCH_WORK/NAME.ROUND/pg_stats.txt).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${ROUNDS:-3} writers=${WRITERS:-64} secs=${SECS:-10}
work=${BENCH_WORK:-$(mktemp -d /tmp/bench-pg-serve.XXXXXX)}
mkdir -p "$work"
loadbin=${LOAD_BIN:-}
if [ -z "$loadbin" ]; then
  loadbin="$work/ledger-load"
  (cd "$root" && GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11} go build -o "$loadbin" ./cmd/ledger-load)
fi
[ $# -gt 0 ] || { echo "usage: $0 NAME=BINARY:STORE ..." >&2; exit 2; }
export PG_DURABLE=${PG_DURABLE:-1}
[ "${PG_STATS:-0}" = 1 ] && export PG_OPTS="${PG_OPTS:-} -c shared_preload_libraries=pg_stat_statements"
. "$root/scripts/pg-cluster.sh"
need_pg=0
for s in "$@"; do case $s in *:postgres) need_pg=1 ;; esac; done
if [ $need_pg = 1 ]; then pg_cluster_start; fi
trap 'pg_cluster_stop' EXIT
PG_PM=$( [ -n "${PG_DIR:-}" ] && head -1 "$PG_DIR/data/postmaster.pid" || true)
tck=$(getconf CLK_TCK)

# ticks PID...: utime+stime of the processes (clock ticks).
ticks() { local t=0 p; for p in "$@"; do [ -r /proc/$p/stat ] && t=$((t + $(awk '{sub(/^.*\) /,""); print $12+$13}' /proc/$p/stat))); done; echo $t; }
# pg_ticks: of the cluster's processes (the postmaster and its children).
pg_ticks() { [ -n "$PG_PM" ] || { echo 0; return; }; ticks "$PG_PM" $(pgrep -P "$PG_PM" || true); }

n=0
run_one() { # round name bin store
  local r=$1 name=$2 bin=$3 store=$4 db dir
  n=$((n + 1)); dir="$work/$name.$r"; mkdir -p "$dir"
  if [ "$store" = postgres ]; then
    runuser -u postgres -- psql -h "$PG_DIR" -p "${PG_DSN##*port=}" -U postgres -qc "CREATE DATABASE b$n" postgres
    db="${PG_DSN/\/ledger\?//b$n?}"
  else
    db="$dir/ledger.db"
  fi
  local admin rec pid url=""
  admin=$("$bin" --db "$db" --data-dir "$dir" token create --name admin --scope admin --role release-manager 2>/dev/null)
  rec=$("$bin" --db "$db" --data-dir "$dir" token create --name load --scope record 2>/dev/null)
  "$bin" --db "$db" --data-dir "$dir" serve --addr 127.0.0.1:0 >"$dir/serve.out" 2>"$dir/serve.err" &
  pid=$!
  for _ in $(seq 1 200); do
    url=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$dir/serve.out")
    [ -n "$url" ] && break
    sleep 0.05
  done
  [ -n "$url" ] || { cat "$dir/serve.err"; exit 1; }
  "$bin" --server "$url" --token "$admin" release apply "$root/examples/release-0.9.0.yaml" >/dev/null
  local s0 p0 s1 p1 load
  local psq=(runuser -u postgres -- psql -h "${PG_DIR:-}" -p "${PG_DSN##*port=}" -U postgres -q)
  if [ "${PG_STATS:-0}" = 1 ] && [ "$store" = postgres ]; then
    "${psq[@]}" -c 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements' -c 'SELECT pg_stat_statements_reset()' -c 'SELECT pg_stat_reset()' "b$n" >/dev/null
  fi
  load=$(cut -d' ' -f1 /proc/loadavg)
  s0=$(ticks $pid) p0=$(pg_ticks)
  "$loadbin" --server "$url" --token "$rec" --release 0.9.0 --writers "$writers" --readers 0 --alone "${secs}s" --duration 1s >"$dir/report.json" || true
  s1=$(ticks $pid) p1=$(pg_ticks)
  if [ "${PG_STATS:-0}" = 1 ] && [ "$store" = postgres ]; then
    "${psq[@]}" -c "SELECT calls, round(total_exec_time::numeric) AS ms, rows, left(regexp_replace(query, '\s+', ' ', 'g'), 100) AS query FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) ORDER BY total_exec_time DESC LIMIT 15" \
      -c "SELECT relname, seq_scan, seq_tup_read, idx_scan FROM pg_stat_user_tables ORDER BY seq_tup_read DESC LIMIT 5" "b$n" >"$dir/pg_stats.txt"
  fi
  kill $pid; wait $pid 2>/dev/null || true
  python3 - "$dir/report.json" "$r" "$name" $(( (s1 - s0) * 1000000 / tck )) $(( (p1 - p0) * 1000000 / tck )) "$secs" "$load" <<'PY'
import json, sys
rep = json.load(open(sys.argv[1]))
r, name, scpu, pcpu, secs, load = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6]), sys.argv[7]
acks = round(rep["writes_alone_per_s"] * secs + rep["writes_mixed_per_s"] * 1)
err = rep["errors"]
print(f"{r} {name} {acks} {rep['writes_alone_per_s']:.0f} {scpu / max(acks, 1):.0f} {pcpu / max(acks, 1):.0f} {load}" + (f" errors={err}" if err else ""))
PY
  if [ "$store" = postgres ]; then
    runuser -u postgres -- psql -h "$PG_DIR" -p "${PG_DSN##*port=}" -U postgres -qc "DROP DATABASE b$n" postgres || true
  fi
}

echo "# round side acks acks/s server_us/ack pg_us/ack load1 (writers $writers, ${secs}s; PG_DURABLE=$PG_DURABLE)"
for r in $(seq 1 "$rounds"); do
  sides=("$@")
  if [ $((r % 2)) = 0 ]; then
    rev=(); for ((i = ${#sides[@]} - 1; i >= 0; i--)); do rev+=("${sides[i]}"); done; sides=("${rev[@]}")
  fi
  for s in "${sides[@]}"; do
    name=${s%%=*} rest=${s#*=}
    run_one "$r" "$name" "${rest%:*}" "${rest##*:}"
  done
done
echo "# logs: $work"
