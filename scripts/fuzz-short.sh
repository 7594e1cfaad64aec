#!/usr/bin/env bash
# Runs every Fuzz* target of the module for FUZZTIME each (default 5s).
#
# Go's fuzz coordinator can end a duration-bounded run with a bare
# "context deadline exceeded" at the -fuzztime boundary although no input
# failed (go.dev/issue/75804; the fix is in Go 1.27, not in 1.26.x). Such a
# run, and only such a run, is tried again, at most twice: its output names
# that error, no "Failing input written", no panic and no failing check, and
# it wrote no new file under the target's testdata/fuzz. Any other failure
# prints the run's output and ends the script with exit 1.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
FUZZTIME=${FUZZTIME:-5s}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# deadline_flake OUT: true when OUT is the coordinator's boundary race alone.
deadline_flake() {
  grep -q 'context deadline exceeded' "$1" || return 1
  ! grep -qE 'Failing input written|^panic:|_test\.go:[0-9]+:|fuzz: minimizing' "$1"
}

$GO test -list '^Fuzz' ./... |
  awk '/^Fuzz/ { f[n++] = $0; next } /^ok/ { for (i = 0; i < n; i++) print $2, f[i]; n = 0 }' >"$tmp/targets"
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
      echo "fuzz $pkg $fn: the coordinator's deadline race (go.dev/issue/75804), no failing input; again"
      continue
    fi
    cat "$tmp/out"
    exit 1
  done
done <"$tmp/targets"
