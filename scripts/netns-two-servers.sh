#!/usr/bin/env bash
# netns-two-servers.sh BINARY [ROUNDS]: one against two `ledger serve` on
# one PostgreSQL, each process in a network namespace of its own (ip netns
# and veth pairs from iproute2; run as root). PostgreSQL (fsync and
# synchronous_commit on) runs in namespace lpg35 and listens on TCP only
# there; server 1 runs in ls35a and server 2 in ls35b, each reaching
# PostgreSQL over its own veth pair (10.35.1.0/24, 10.35.2.0/24) and
# driven by its own cmd/ledger-load in its namespace (on its loopback).
# Rounds alternate "one" (server 1 alone, WRITERS clients) and "two" (both
# servers, WRITERS/2 clients each, one log: one data directory, one key),
# each run on a fresh database. Prints per run the acks/s of each server
# and in all, and the CPU seconds (utime+stime, /proc/PID/stat) that
# server 1, server 2, the PostgreSQL cluster and the load generators used
# over the run, with the machine's capacity (cores x seconds) beside it.
#
# Environment: WRITERS (default 64), SECS (default 8), LOAD_BIN (ledger-load;
# default: built from this tree into BENCH_WORK), BENCH_WORK (logs; default
# a temp dir).
set -euo pipefail
bin=${1:?usage: $0 BINARY [ROUNDS]} rounds=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
writers=${WRITERS:-64} secs=${SECS:-8}
work=${BENCH_WORK:-$(mktemp -d /tmp/netns-two.XXXXXX)}
mkdir -p "$work"; chmod 755 "$work"
loadbin=${LOAD_BIN:-}
if [ -z "$loadbin" ]; then
  loadbin="$work/ledger-load"
  (cd "$root" && GOTOOLCHAIN=${GOTOOLCHAIN:-go1.26.11} go build -o "$loadbin" ./cmd/ledger-load)
fi
[ "$(id -u)" = 0 ] || { echo "netns-two-servers.sh: must run as root (ip netns add)" >&2; exit 2; }
tck=$(getconf CLK_TCK)
pgbin=$(dirname "$(command -v initdb || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")

cleanup() {
  [ -n "${PG_DATA:-}" ] && ip netns exec lpg35 runuser -u postgres -- "$pgbin/pg_ctl" -D "$PG_DATA" -m fast -w stop >/dev/null 2>&1 || true
  for ns in ls35a ls35b lpg35; do ip netns del $ns 2>/dev/null || true; done
}
trap cleanup EXIT
cleanup
for ns in lpg35 ls35a ls35b; do ip netns add $ns; ip -n $ns link set lo up; done
# veth pairs: server 1 <-> postgres, server 2 <-> postgres.
ip link add v35a netns ls35a type veth peer name v35pa netns lpg35
ip link add v35b netns ls35b type veth peer name v35pb netns lpg35
ip -n ls35a addr add 10.35.1.1/24 dev v35a; ip -n lpg35 addr add 10.35.1.2/24 dev v35pa
ip -n ls35b addr add 10.35.2.1/24 dev v35b; ip -n lpg35 addr add 10.35.2.2/24 dev v35pb
for l in "ls35a v35a" "lpg35 v35pa" "ls35b v35b" "lpg35 v35pb"; do set -- $l; ip -n "$1" link set "$2" up; done

# PostgreSQL in lpg35: TCP on its two veth addresses, no Unix socket
# (a Unix socket is not confined by a network namespace).
PG_DATA="$work/pgdata"; mkdir -m 700 "$PG_DATA"; chown postgres "$PG_DATA"
runuser -u postgres -- "$pgbin/initdb" -D "$PG_DATA" -U postgres --auth=trust --no-sync -E UTF8 --locale=C >"$work/initdb.log"
echo "host all all 10.35.0.0/16 trust" >>"$PG_DATA/pg_hba.conf"
ip netns exec lpg35 runuser -u postgres -- "$pgbin/pg_ctl" -D "$PG_DATA" -l "$PG_DATA/server.log" \
  -o "-c listen_addresses=10.35.1.2,10.35.2.2 -c unix_socket_directories= -p 5432 -c max_connections=200 -c shared_buffers=256MB" -w start >/dev/null
PM=$(head -1 "$PG_DATA/postmaster.pid")
psqlc() { ip netns exec ls35a psql -h 10.35.1.2 -U postgres -qc "$1" postgres; }

ticks() { local t=0 p; for p in "$@"; do [ -r /proc/$p/stat ] && t=$((t + $(awk '{sub(/^.*\) /,""); print $12+$13}' /proc/$p/stat))); done; echo $t; }
pg_ticks() { ticks "$PM" $(pgrep -P "$PM" || true); }
us() { echo $(( $1 * 1000000 / tck )); }

start_server() { # ns dsn dir out -> pid in SRV_PID, url in SRV_URL
  ip netns exec "$1" "$bin" --db "$2" --data-dir "$3" serve --addr 127.0.0.1:0 >"$4.out" 2>"$4.err" &
  SRV_PID=$! SRV_URL=""
  for _ in $(seq 1 200); do
    SRV_URL=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$4.out")
    [ -n "$SRV_URL" ] && return 0
    sleep 0.05
  done
  cat "$4.err"; exit 1
}

n=0
run() { # round mode
  local r=$1 mode=$2 db dir
  n=$((n + 1)); db=n$n; dir="$work/$mode.$r"; mkdir -p "$dir"
  psqlc "CREATE DATABASE $db"
  local dsn1="postgres://postgres@10.35.1.2:5432/$db" dsn2="postgres://postgres@10.35.2.2:5432/$db"
  local admin rec p1 u1 p2="" u2="" w=$writers
  admin=$(ip netns exec ls35a "$bin" --db "$dsn1" --data-dir "$dir" token create --name admin --scope admin --role release-manager 2>/dev/null)
  rec=$(ip netns exec ls35a "$bin" --db "$dsn1" --data-dir "$dir" token create --name load --scope record 2>/dev/null)
  start_server ls35a "$dsn1" "$dir" "$dir/s1"; p1=$SRV_PID u1=$SRV_URL
  ip netns exec ls35a "$bin" --server "$u1" --token "$admin" release apply "$root/examples/release-0.9.0.yaml" >/dev/null
  if [ "$mode" = two ]; then
    start_server ls35b "$dsn2" "$dir" "$dir/s2"; p2=$SRV_PID u2=$SRV_URL
    w=$((writers / 2))
  fi
  local load s1a s2a pga s1b s2b pgb t0 t1
  load=$(cut -d' ' -f1 /proc/loadavg)
  s1a=$(ticks $p1) s2a=$(ticks $p2) pga=$(pg_ticks) t0=$(date +%s.%N)
  /usr/bin/time -f "%U %S" -o "$dir/l1.time" ip netns exec ls35a "$loadbin" --server "$u1" --token "$rec" --release 0.9.0 --writers $w --readers 0 --alone "${secs}s" --duration 1s >"$dir/l1.json" &
  local l1=$! l2=""
  if [ "$mode" = two ]; then
    /usr/bin/time -f "%U %S" -o "$dir/l2.time" ip netns exec ls35b "$loadbin" --server "$u2" --token "$rec" --release 0.9.0 --writers $w --readers 0 --alone "${secs}s" --duration 1s >"$dir/l2.json" &
    l2=$!
  fi
  wait $l1 || true; [ -z "$l2" ] || wait $l2 || true
  s1b=$(ticks $p1) s2b=$(ticks $p2) pgb=$(pg_ticks) t1=$(date +%s.%N)
  kill $p1 $p2 2>/dev/null || true; wait $p1 2>/dev/null || true; [ -z "$p2" ] || wait $p2 2>/dev/null || true
  python3 - "$dir" "$r" "$mode" "$secs" "$load" "$(us $((s1b - s1a)))" "$(us $((s2b - s2a)))" "$(us $((pgb - pga)))" "$(nproc)" "$t0" "$t1" <<'PY'
import json, os, sys
d, r, mode, secs, load = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
s1, s2, pg, cores = int(sys.argv[6]) / 1e6, int(sys.argv[7]) / 1e6, int(sys.argv[8]) / 1e6, int(sys.argv[9])
wall = float(sys.argv[11]) - float(sys.argv[10])
rates, acks, lg, errs = [], 0, 0.0, 0
for i in (1, 2):
    p = os.path.join(d, "l%d.json" % i)
    if not os.path.exists(p):
        continue
    rep = json.load(open(p))
    rates.append(rep["writes_alone_per_s"])
    acks += round(rep["writes_alone_per_s"] * secs + rep["writes_mixed_per_s"])
    errs += rep["errors"]
    u, s = open(os.path.join(d, "l%d.time" % i)).read().split()[-2:]
    lg += float(u) + float(s)
tot = s1 + s2 + pg + lg
print(f"{r} {mode:3} acks/s {sum(rates):6.0f} (" + " + ".join(f"{x:.0f}" for x in rates) + f")  cpu s: server1 {s1:.2f} server2 {s2:.2f} postgres {pg:.2f} loadgen {lg:.2f} = {tot:.2f} of {cores * wall:.1f} ({cores} cores x {wall:.1f} s)  us/ack: servers {(s1 + s2) / max(acks, 1) * 1e6:.0f} postgres {pg / max(acks, 1) * 1e6:.0f}  load1 {load}" + (f" errors {errs}" if errs else ""))
PY
  psqlc "DROP DATABASE $db" || true
}

echo "# netns: postgres in lpg35 (10.35.1.2, 10.35.2.2), server 1 in ls35a, server 2 in ls35b; writers $writers, ${secs}s runs"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) = 1 ]; then run "$r" one; run "$r" two; else run "$r" two; run "$r" one; fi
done
echo "# logs: $work"
