#!/usr/bin/env bash
# Summarizes a `go test -v` log (make test): package results, the output of
# failing tests, and LOUDLY every skipped test with its reason, because a
# skip is not a pass (a browser test without Chromium, the disk-full test
# without root, the corpus tests without ../shared/corpus).
#
# In `go test -v` output a skip's reason comes BEFORE its `--- SKIP` line:
#   === RUN   TestKernelCompiles
#       cuda_test.go:204: NVRTC not available on this host, ...
#   --- SKIP: TestKernelCompiles (0.00s)
# (a multi-line message continues on lines indented deeper; with parallel
# tests, `=== CONT` / `=== NAME` say whose output follows). So the reason
# printed is the last message the skipped test logged.
set -uo pipefail
log=$1
grep -E '^(ok|FAIL|---)\s|^panic:' "$log" | grep -v -- '--- PASS' | grep -v -- '--- SKIP' || true
if grep -q -- '--- FAIL' "$log"; then
  echo; echo "== failing tests (their output):"
  grep -B2 -A25 -- '--- FAIL' "$log" | head -400
fi
skips=$(grep -c -- '--- SKIP' "$log" || true)
if [ "${skips:-0}" -gt 0 ]; then
  echo
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  echo "!! $skips TEST(S) SKIPPED: they did not run; a skip is not a pass."
  echo "!! (CI sets LEDGER_REQUIRE_BROWSER=1, LEDGER_REQUIRE_DISKFULL=1, LEDGER_REQUIRE_POSTGRES=1 and LEDGER_REQUIRE_MLX=1 so those fail instead)"
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  awk '
    function indent(s) { match(s, /^ */); return RLENGTH }
    /^=== (RUN|CONT|NAME|PAUSE) / { cur = $3; inmsg = 0; next }
    /^ *--- SKIP: / {
      name = $3
      reason = (name in msg) ? msg[name] : "(no reason logged)"
      printf "   %s: %s\n", name, reason
      inmsg = 0; next
    }
    /^ *--- (PASS|FAIL): / { inmsg = 0; next }
    /^ +[^ ]+\.go:[0-9]+: / {
      line = $0; sub(/^ +/, "", line)
      msg[cur] = line; depth = indent($0); inmsg = 1; next
    }
    inmsg && indent($0) > depth && $0 !~ /^ *(===|---) / {
      line = $0; sub(/^ +/, "", line)
      msg[cur] = msg[cur] " / " line; next
    }
    { inmsg = 0 }
  ' "$log"
fi
