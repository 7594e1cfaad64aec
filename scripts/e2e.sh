#!/usr/bin/env bash
# End to end (make e2e): the main job against a server on a random loopback
# port with a fresh database, then readiness (expect not ready, with
# reasons), an evidence file recorded by CLI, a backup that audits clean,
# the audit (expect pass) and a tamper step (expect the audit to fail).
set -euo pipefail
BIN=${LEDGER_BIN:-./bin/ledger}
REPO_NAME=github.com/evidence-ledger/ledger
WORK=$(mktemp -d)
DB="$WORK/ledger.db"
fail() { echo "E2E FAIL: $*"; exit 1; }
step() { printf '\n== e2e: %s\n' "$*"; }

TOKEN=$("$BIN" --db "$DB" token create --name e2e --scope admin --role release-manager 2>/dev/null)

step "serve on a random loopback port"
"$BIN" --db "$DB" serve --addr 127.0.0.1:0 >"$WORK/serve.out" 2>"$WORK/serve.err" &
PID=$!
trap 'kill $PID 2>/dev/null || true; rm -rf "$WORK"' EXIT
URL=""
for _ in $(seq 1 200); do
  URL=$(sed -n 's|^ledger: serving on \(http://[^/]*\)/$|\1|p' "$WORK/serve.out")
  [ -n "$URL" ] && break
  kill -0 $PID 2>/dev/null || { cat "$WORK/serve.err"; fail "server did not start"; }
  sleep 0.05
done
[ -n "$URL" ] || fail "no server URL"
echo "server at $URL"

step "CPU lanes against this checkout"
set +e
"$BIN" run --backend cpu --server "$URL" --token "$TOKEN" --repository "$REPO_NAME"
rc=$?
set -e
[ $rc -eq 0 ] || fail "ledger run exited $rc (every CPU lane should pass)"

step "the checkout's HEAD signature"
set +e
"$BIN" --db "$DB" verify head --repo . --ref HEAD --repository "$REPO_NAME" --policy examples/policy-self.yaml --record
rc=$?
set -e
[ $rc -le 1 ] || fail "verify head exited $rc"

step "releases"
COMMIT=$(git rev-parse HEAD); TREE=$(git rev-parse 'HEAD^{tree}'); SHORT=${COMMIT:0:12}
DIGEST="sha256:$(sha256sum "$BIN" | cut -d' ' -f1)"
sed -e "s/@COMMIT@/$COMMIT/g" -e "s/@TREE@/$TREE/g" -e "s/@SHORT@/$SHORT/g" -e "s/@BINARY_DIGEST@/$DIGEST/g" \
  examples/release-self.yaml >"$WORK/release-self.yaml"
"$BIN" --server "$URL" --token "$TOKEN" release apply examples/release-0.9.0.yaml
"$BIN" --server "$URL" --token "$TOKEN" release apply "$WORK/release-self.yaml"

step "readiness of 0.9.0 (expect exit 1 with reasons)"
set +e
"$BIN" --server "$URL" release check 0.9.0 >"$WORK/check.txt"
rc=$?
set -e
cat "$WORK/check.txt"
[ $rc -eq 1 ] || fail "release check 0.9.0 exited $rc, want 1 (not ready)"
grep -qi "open" "$WORK/check.txt" || fail "release check printed no open gate"

step "readiness of the self release (lane gates pass, signed head open)"
set +e
"$BIN" --server "$URL" --json release check "self-$SHORT" >"$WORK/self.json"
rc=$?
set -e
[ $rc -eq 1 ] || fail "release check self exited $rc, want 1"
if [ -z "$(git status --porcelain)" ]; then
  for g in qmv-bias-sum qmv-bias-sum-paths alloc-snapshot alloc-footprint; do
    grep -A3 "\"id\": \"$g\"" "$WORK/self.json" | grep -q '"state": "passed"' || fail "lane gate $g did not pass on a clean checkout"
  done
else
  echo "work tree is dirty: lane gates stay open by design (evidence is marked dirty)"
fi

step "record an evidence file with the CLI"
cat >"$WORK/ev.json" <<JSON
{"lane":"trajectory/v1","subject":{"repository":"d-inference","commit":"e1d68db84cb1a1e4a6dd10306383bd64bc5d6062","tree":"e1d68db84cb1a1e4a6dd10306383bd64bc5d6062"},
 "backend":"external","device":{"model":"e2e"},"runner":{"version":"e2e"},"cases_exact":1,"cases_total":1,"control":"none","status":"passed",
 "started_at":"2026-11-29T10:00:00Z","finished_at":"2026-11-29T10:00:01Z",
 "details":{"trajectory":"gemma-qat4-b1","mode":"ordinary","backend":"paged","tokens":[1,2,3]}}
JSON
"$BIN" --server "$URL" --token "$TOKEN" record "$WORK/ev.json"
if "$BIN" --server "$URL" --token "$TOKEN" record <(echo '{"lane":"bad"}') 2>"$WORK/bad.err"; then fail "bad evidence was accepted"; fi
grep -q "lane" "$WORK/bad.err" || fail "bad evidence error does not name the field: $(cat "$WORK/bad.err")"

step "backup (consistent online copy, audited)"
"$BIN" --db "$DB" backup "$WORK/backup/ledger.db"

step "audit (expect pass)"
kill $PID; wait $PID 2>/dev/null || true
"$BIN" --db "$DB" audit || fail "audit of an untouched log failed"

step "tamper with one leaf, audit (expect failure naming index 2)"
go run ./scripts/tamper "$DB" 2
set +e
"$BIN" --db "$DB" audit >"$WORK/audit.txt"
rc=$?
set -e
cat "$WORK/audit.txt"
[ $rc -eq 1 ] || fail "audit after tampering exited $rc, want 1"
grep -q "at index 2" "$WORK/audit.txt" || fail "audit did not name index 2"
echo
echo "e2e: 1 passed, 0 failed"
