// Package archtest holds the repository's architecture tests: the import
// boundaries of docs/ARCHITECTURE.md (its "may import" table, parsed, so
// the document and the test cannot disagree) checked against the module's
// real import graph from `go list`, and the 600-line limit on non-test Go
// files. It has no API: other packages never import it.
package archtest
