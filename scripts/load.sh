#!/usr/bin/env bash
# Load run (make load; a short one in .ci/run): a real `ledger serve` on a
# fresh database on a random loopback port, release 0.9.0 defined, then
# cmd/ledger-load: writers alone for LOAD_ALONE, writers and readers for
# LOAD_DURATION. Prints the JSON report with the machine's load average
# and the server's peak RSS beside it; exits 1 on any error answer, and
# with LOAD_CHECK=1 also when a target of RELIABILITY.md is missed.
# LOAD_PROFILE=FILE writes the server's CPU profile of the whole run there
# (ledger serve --cpuprofile; read it with go tool pprof bin/ledger FILE).
set -euo pipefail
BIN=${LEDGER_BIN:-./bin/ledger}
LOADBIN=${LEDGER_LOAD_BIN:-./bin/ledger-load}
WRITERS=${LOAD_WRITERS:-64}
READERS=${LOAD_READERS:-64}
DURATION=${LOAD_DURATION:-60s}
ALONE=${LOAD_ALONE:-20s}
WORK=$(mktemp -d)
DB="$WORK/ledger.db"
ADMIN=$("$BIN" --db "$DB" token create --name load-admin --scope admin --role release-manager 2>/dev/null)
REC=$("$BIN" --db "$DB" token create --name load --scope record 2>/dev/null)
PROFILE_FLAGS=()
[ -n "${LOAD_PROFILE:-}" ] && PROFILE_FLAGS=(--cpuprofile "$WORK/cpu.prof")
: >"$WORK/serve.out"
"$BIN" --db "$DB" serve --addr 127.0.0.1:0 "${PROFILE_FLAGS[@]}" ${LOAD_SERVE_FLAGS:-} >"$WORK/serve.out" 2>"$WORK/serve.err" &
PID=$!
trap 'kill $PID 2>/dev/null || true; wait $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL=""
for _ in $(seq 1 200); do
  URL=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$WORK/serve.out")
  [ -n "$URL" ] && break
  kill -0 $PID 2>/dev/null || { cat "$WORK/serve.err"; echo "LOAD FAIL: server did not start"; exit 1; }
  sleep 0.05
done
"$BIN" --server "$URL" --token "$ADMIN" release apply examples/release-0.9.0.yaml >/dev/null
echo "load: $(nproc) cores, load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
set +e
"$LOADBIN" --server "$URL" --token "$REC" --release 0.9.0 --writers "$WRITERS" --readers "$READERS" --duration "$DURATION" --alone "$ALONE" >"$WORK/report.json"
rc=$?
set -e
cat "$WORK/report.json"
echo "load: load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "load: server peak RSS: $(sed -n 's/^VmHWM:\s*//p' /proc/$PID/status)"
if [ -n "${LOAD_PROFILE:-}" ]; then
  kill -TERM $PID && wait $PID || true
  cp "$WORK/cpu.prof" "$LOAD_PROFILE" && echo "load: server CPU profile: $LOAD_PROFILE"
fi
if [ $rc -ne 0 ]; then
  echo "load: the server's error lines:"; grep 'level=ERROR' "$WORK/serve.err" | head -20 || true
  echo "LOAD FAIL: ledger-load exited $rc (errors above)"; exit 1
fi
if [ "${LOAD_CHECK:-0}" = 1 ]; then
  python3 - "$WORK/report.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rt = r["routes"]
# (name, measured, limit, met): every target of RELIABILITY.md "Load".
targets = [("errors", r["errors"], "0", r["errors"] == 0),
           ("write ratio (mixed / writers alone)", round(r["write_ratio"], 2), ">= 0.7", r["write_ratio"] >= 0.7)]
for k, lim in (("GET /releases/{version}", 1000), ("GET /", 1000),
               ("GET /api/v1/releases/{version}/readiness", 1000), ("GET /api/v1/evidence/{id}/proof", 200)):
    p99 = rt.get(k, {}).get("p99_ms")
    targets.append((k + " p99 ms", p99, "< %d" % lim, p99 is not None and p99 < lim))
miss = [t for t in targets if not t[3]]
for name, got, lim, ok in targets:
    print("load: target %-52s %10s  (%s)  %s" % (name, got, lim, "met" if ok else "MISSED"))
print("LOAD TARGETS MISSED: " + "; ".join("%s %s, target %s" % (n, g, l) for n, g, l, _ in miss) if miss else "load: all targets met")
sys.exit(1 if miss else 0)
PY
fi
