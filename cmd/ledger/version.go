package main

import (
	"runtime/debug"
	"strings"
)

// versionString is what `ledger --version` prints after "ledger ": the
// main module's version ("(devel)" for a build from a checkout, a tag such
// as v0.9.0 for `go install …@v0.9.0`), then the VCS commit the binary was
// built from and its time when the build recorded them (vcs.revision,
// vcs.time), with "+modified" when the work tree had uncommitted changes
// (vcs.modified), then the Go version: "(devel) commit 049962a1… (2026-12-06T09:12:00Z)+modified go1.26.11".
// A binary without build information prints "unknown".
func versionString() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	return formatVersion(bi)
}

// formatVersion formats bi as versionString does.
func formatVersion(bi *debug.BuildInfo) string {
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var rev, at string
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	var b strings.Builder
	b.WriteString(v)
	if rev != "" {
		b.WriteString(" commit ")
		b.WriteString(rev)
		if at != "" {
			b.WriteString(" (" + at + ")")
		}
		if modified {
			b.WriteString("+modified")
		}
	}
	if bi.GoVersion != "" {
		b.WriteString(" " + bi.GoVersion)
	}
	return b.String()
}
