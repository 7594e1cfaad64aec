#!/usr/bin/env bash
# Summarizes a `go test -v` log (make test): package results, the output of
# failing tests, and LOUDLY every skipped test with its reason, because a
# skip is not a pass (a browser test without Chromium, the disk-full test
# without root, the corpus tests without ../shared/corpus).
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
  echo "!! (CI sets LEDGER_REQUIRE_BROWSER=1, LEDGER_REQUIRE_DISKFULL=1 and LEDGER_REQUIRE_POSTGRES=1 so those fail instead)"
  echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"
  grep -A1 -- '--- SKIP' "$log" | grep -v '^--$' | sed 's/^/   /'
fi
