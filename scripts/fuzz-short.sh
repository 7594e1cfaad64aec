#!/usr/bin/env bash
# Runs every Fuzz* target of the module for FUZZTIME each (default 5s);
# FUZZ_ONLY, a regular expression over "package target" lines, picks some.
#
# Go's fuzz coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" at the -fuzztime boundary although no input
# failed (go.dev/issue/75804; the fix is in Go 1.27, not in 1.26.x). Such a
# run, and only such a run, is tried again, at most twice, with its output
# printed: its failure is that bare error line, with no failing seed or
# corpus entry, no log line from a source file, no panic, no failing input,
# and it wrote no new file under the target's testdata/fuzz. Any other
# failure prints the run's output and ends the script with exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# deadline_flake OUT: true when OUT is the coordinator's boundary race alone:
# the target's failure is the bare line "context deadline exceeded", and
# nothing failed a subtest (seed or corpus entry), logged from a source
# line, panicked, was minimized or written as a failing input.
deadline_flake() {
  grep -qx '    context deadline exceeded' "$1" || return 1
  ! grep -qE 'Failing input written|^panic:|\.go:[0-9]+:|fuzz: minimizing|--- FAIL: Fuzz[^ ]*/' "$1"
}

$GO test -list '^Fuzz' ./... |
  awk '/^Fuzz/ { f[n++] = $0; next } /^ok/ { for (i = 0; i < n; i++) print $2, f[i]; n = 0 }' |
  { grep -E -- "${FUZZ_ONLY:-.}" || true; } >"$tmp/targets"
echo "fuzz-short: $(wc -l <"$tmp/targets") targets, $FUZZTIME each"
while read -r pkg fn; do
  dir=$($GO list -f '{{.Dir}}' "$pkg")/testdata/fuzz/$fn
  for try in 1 2 3; do
    if [ "$try" = 1 ]; then echo "fuzz $pkg $fn"; else echo "fuzz $pkg $fn (try $try)"; fi
    before=$(ls "$dir" 2>/dev/null | sort | tr '\n' ' ' || true)
    if $GO test -run '^$' -fuzz "^$fn\$" -fuzztime "$FUZZTIME" "$pkg" >"$tmp/out" 2>&1; then
      continue 2
    fi
    after=$(ls "$dir" 2>/dev/null | sort | tr '\n' ' ' || true)
    if [ "$before" = "$after" ] && deadline_flake "$tmp/out" && [ "$try" -lt 3 ]; then
      sed 's/^/  | /' "$tmp/out"
      echo "fuzz $pkg $fn: the coordinator's deadline race (go.dev/issue/75804), no failing input; again"
      continue
    fi
    cat "$tmp/out"
    exit 1
  done
done <"$tmp/targets"
