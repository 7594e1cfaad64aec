#!/usr/bin/env bash
# The main job on the embedded SQLite default (make run): build is done by
# make; this starts `ledger serve` on localhost, runs the CPU lanes against
# this checkout through the API, verifies the checkout's HEAD signature,
# applies the reference release and a release of this checkout, records the
# reference release's published evidence (examples/reference-0.9.0-evidence.json,
# seeded from shared/REFERENCE-RELEASE.md) signed by a demo runner key it
# generates in var/ and registers as demo-runner, records the committed
# device runs kept in testdata/device (CUDA lanes, the qmv throughput run
# that feeds 0.9.0's qmv-throughput gate) when present, and prints the dashboard
# URL and the readiness summary. Running it again reuses the
# database. Interactive (a terminal on stdin): the server keeps running
# until Ctrl-C. Otherwise it stops after the summary (LEDGER_KEEP_SERVING=1
# keeps it up).
set -euo pipefail
BIN=${LEDGER_BIN:-./bin/ledger}
DB=${LEDGER_DB:-./var/ledger.db}
ADDR=${LEDGER_ADDR:-127.0.0.1:8080}
REPO_NAME=github.com/evidence-ledger/ledger
VAR=$(dirname "$DB")
mkdir -p "$VAR"
say() { printf '\n== %s\n' "$*"; }

# A token for this script (admin, role release-manager), kept in var/ (0600).
TOKEN_FILE="$VAR/make-run.token"
if [ ! -s "$TOKEN_FILE" ]; then
  umask 077
  "$BIN" --db "$DB" token create --name "make-run-$(date +%s)" --scope admin --role release-manager >"$TOKEN_FILE" 2>/dev/null
  echo "created an admin token for this script; its secret is in $TOKEN_FILE (mode 0600)"
fi
TOKEN=$(cat "$TOKEN_FILE")

say "starting ledger serve on http://$ADDR/ (database $DB)"
"$BIN" --db "$DB" serve --addr "$ADDR" >"$VAR/serve.log" 2>&1 &
SERVER_PID=$!
stop_server() { kill "$SERVER_PID" 2>/dev/null || true; wait "$SERVER_PID" 2>/dev/null || true; }
trap stop_server EXIT
for _ in $(seq 1 100); do
  if grep -q "serving on" "$VAR/serve.log"; then break; fi
  if ! kill -0 "$SERVER_PID" 2>/dev/null; then cat "$VAR/serve.log"; echo "ledger serve failed to start (is $ADDR in use? set LEDGER_ADDR)"; exit 2; fi
  sleep 0.1
done

COMMIT=$(git rev-parse HEAD 2>/dev/null || true)
TREE=$(git rev-parse 'HEAD^{tree}' 2>/dev/null || true)
if [ -z "$COMMIT" ]; then echo "not a git checkout: the lanes need a commit to pin evidence to"; exit 2; fi
if [ -n "$(git status --porcelain 2>/dev/null)" ]; then
  echo "note: the work tree has uncommitted changes: evidence is recorded as dirty and no release gate counts it"
fi

say "running the CPU lanes against $COMMIT"
set +e
"$BIN" run --backend cpu --server "http://$ADDR" --token "$TOKEN" --repository "$REPO_NAME"
LANES_RC=$?
set -e
[ $LANES_RC -le 1 ] || { echo "ledger run failed (exit $LANES_RC)"; exit 2; }

if [ -f testdata/device/cuda-evidence.json ]; then
  say "recording the real CUDA run kept in testdata/device (an NVIDIA H200; see its README)"
  "$BIN" record --server "http://$ADDR" --token "$TOKEN" testdata/device/cuda-evidence.json
fi

say "registering the trust policy the self release names (policy: self)"
"$BIN" --server "http://$ADDR" --token "$TOKEN" policy apply examples/policy-self.yaml --name self

say "verifying the signature of this checkout's HEAD"
set +e
"$BIN" --db "$DB" verify head --repo . --ref HEAD --repository "$REPO_NAME" --policy examples/policy-self.yaml --record
set -e

say "applying the releases"
DIGEST="sha256:$(sha256sum "$BIN" | cut -d' ' -f1)"
SHORT=${COMMIT:0:12}
sed -e "s/@COMMIT@/$COMMIT/g" -e "s/@TREE@/$TREE/g" -e "s/@SHORT@/$SHORT/g" -e "s/@BINARY_DIGEST@/$DIGEST/g" \
  examples/release-self.yaml >"$VAR/release-self.yaml"
"$BIN" --server "http://$ADDR" --token "$TOKEN" release apply examples/release-0.9.0.yaml
"$BIN" --server "http://$ADDR" --token "$TOKEN" release apply "$VAR/release-self.yaml"

say "recording the reference release's published evidence, signed by the demo runner key"
RUNNER_KEY="$VAR/demo-runner.key"
if [ ! -s "$RUNNER_KEY" ]; then
  "$BIN" runner keygen "$RUNNER_KEY"
fi
# Registering the same key again appends nothing; another live key of demo-runner is refused.
"$BIN" --server "http://$ADDR" --token "$TOKEN" runner add demo-runner "$RUNNER_KEY.pub"
"$BIN" record --server "http://$ADDR" --token "$TOKEN" --sign-key "$RUNNER_KEY" examples/reference-0.9.0-evidence.json
if [ -f testdata/device/throughput/evidence.json ]; then
  say "recording the committed GPU throughput run (corrected vs narrow qmv kernel; see testdata/device/throughput)"
  "$BIN" record --server "http://$ADDR" --token "$TOKEN" --sign-key "$RUNNER_KEY" testdata/device/throughput/evidence.json
fi

say "readiness"
for v in 0.9.0 "self-$SHORT"; do
  set +e
  "$BIN" --server "http://$ADDR" release check "$v"
  set -e
done

say "dashboard: http://$ADDR/   (release of this checkout: http://$ADDR/releases/self-$SHORT)"
if [ -t 0 ] || [ "${LEDGER_KEEP_SERVING:-}" = 1 ]; then
  echo "serving until Ctrl-C (log: $VAR/serve.log)"
  wait "$SERVER_PID"
else
  echo "not interactive: stopping the server. Serve again with: make serve"
fi
