// Package ingest is the one ingestion seam of the ledger: it turns the
// files CI already produces into evidence records plus the original bytes,
// for the API (POST /api/v1/evidence, chosen by Content-Type) and the CLI
// (ledger record --format, or detected from the file) alike.
//
// One decoder per input format, each in its own file: native evidence
// JSON (native.go), JUnit XML (junit.go), go test -json streams
// (gotest.go), in-toto Statements v1 and DSSE envelopes (intoto.go). Every
// decoder but the native one yields a ledger.Original record kept byte for
// byte, and the evidence it yields names that original by entry id and
// digest in its details ("original"). Decode is the single dispatch by
// media type; Detect guesses the media type of a file.
//
// What a format lacks (lane, backend, repository, commit, tree, artifact
// pins) comes from Params; a format whose own subject disagrees with
// Params is refused. Decoders are pure functions of their input and Params
// and are safe for concurrent use.
package ingest
