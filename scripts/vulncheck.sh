#!/usr/bin/env bash
# Known-vulnerability check of every package with govulncheck.
#
# The database is vuln.go.dev when it answers. Where it does not (this CI
# reaches only the Go module proxy and apt), the database is built offline
# from the newest golang.org/x/vulndb module on the proxy: its data/osv
# holds the same OSV entries vuln.go.dev serves, indexed by the vulndb
# project's own indexdb command. The module's version names the day of its
# data, which this script prints.
#
# Exit status: govulncheck's (3: a vulnerability the code reaches), or 1
# when no database could be had at all.
set -euo pipefail
cd "$(dirname "$0")/.."
GOVULNCHECK_VERSION=${GOVULNCHECK_VERSION:-v1.1.4}
gobin=$(go env GOPATH)/bin
go install "golang.org/x/vuln/cmd/govulncheck@$GOVULNCHECK_VERSION"

db=https://vuln.go.dev
if ! curl -fsS -m 10 -o /dev/null https://vuln.go.dev/index/db.json; then
  v=$(go list -m -json golang.org/x/vulndb@latest 2>/dev/null | sed -n 's/^\t"Version": "\(.*\)",$/\1/p')
  if [ -z "$v" ]; then
    echo "!! vulncheck: neither vuln.go.dev nor golang.org/x/vulndb on the module proxy could be reached" >&2
    exit 1
  fi
  # go list -m does not fetch the zip; go mod download does, into the module cache.
  dir=$(cd "$(mktemp -d)" && go mod download -json "golang.org/x/vulndb@$v" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  out=${VULNDB_DIR:-$PWD/var/vulndb-$v}
  if [ ! -f "$out/index/db.json" ]; then
    # indexdb needs the module's own go.mod: install it outside this module.
    (cd "$(mktemp -d)" && GOFLAGS=-mod=mod go install "golang.org/x/vulndb/cmd/indexdb@$v")
    rm -rf "$out.tmp"
    "$gobin/indexdb" -vulns "$dir/data/osv" -out "$out.tmp"
    mv "$out.tmp" "$out"
  fi
  echo "vulncheck: vuln.go.dev unreachable; offline database from golang.org/x/vulndb@$v ($(ls "$dir/data/osv" | wc -l) entries)"
  db=file://$out
fi
exec "$gobin/govulncheck" -db "$db" ./...
