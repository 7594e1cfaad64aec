#!/usr/bin/env bash
# CPU per acknowledged entry: a real `ledger serve` (LEDGER_BIN) on a fresh
# SQLite database, release 0.9.0 defined, then cmd/ledger-load with
# WRITERS writers and no readers for ALONE (+1 s tail). Prints one line:
#   writers=N acks=N acks_per_s=R cpu_s=S us_per_ack=U loadavg=...
# where cpu_s is the server's utime+stime (/proc/PID/stat) over the load
# run alone (set-up excluded). Usage:
#   LEDGER_BIN=/tmp/x-ledger LEDGER_LOAD_BIN=/tmp/x-load bench/write/cpu.sh 64 20s
set -euo pipefail
BIN=${LEDGER_BIN:-./bin/ledger}
LOADBIN=${LEDGER_LOAD_BIN:-./bin/ledger-load}
WRITERS=${1:-64}
ALONE=${2:-20s}
WORK=$(mktemp -d)
DB="$WORK/ledger.db"
ADMIN=$("$BIN" --db "$DB" token create --name load-admin --scope admin --role release-manager 2>/dev/null)
REC=$("$BIN" --db "$DB" token create --name load --scope record 2>/dev/null)
: >"$WORK/serve.out"
"$BIN" --db "$DB" serve --addr 127.0.0.1:0 ${SERVE_FLAGS:-} >"$WORK/serve.out" 2>"$WORK/serve.err" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL=""
for _ in $(seq 1 200); do
  URL=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$WORK/serve.out")
  [ -n "$URL" ] && break
  kill -0 $PID 2>/dev/null || { cat "$WORK/serve.err"; echo "server did not start"; exit 1; }
  sleep 0.05
done
"$BIN" --server "$URL" --token "$ADMIN" release apply examples/release-0.9.0.yaml >/dev/null
tick=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' /proc/$PID/stat; }
c0=$(cpu)
"$LOADBIN" --server "$URL" --token "$REC" --release 0.9.0 --writers "$WRITERS" --readers 0 --duration 1s --alone "$ALONE" >"$WORK/report.json"
c1=$(cpu)
python3 - "$WORK/report.json" "$c0" "$c1" "$tick" "$WRITERS" "$(cut -d' ' -f1-3 /proc/loadavg)" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
c0, c1, tick, w, la = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]
alone = float(r["config"]["alone"].rstrip("s"))
acks = round(r["writes_alone_per_s"] * alone + r["writes_mixed_per_s"] * 1)
cpu = (c1 - c0) / tick
print("writers=%s acks=%d acks_per_s=%.0f cpu_s=%.2f us_per_ack=%.1f errors=%d loadavg=%s" % (
    w, acks, r["writes_alone_per_s"], cpu, cpu * 1e6 / max(acks, 1), r["errors"], la.replace(" ", "/")))
PY
