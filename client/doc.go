// Package client is the HTTP client of the ledger's /api/v1: the one way the
// CLI and the hardware agents talk to a ledger server.
//
// A *Client implements ledger.LogWriter, ledger.LogReader and
// ledger.Queries (so ledger.Reader) over the API, the same interfaces the
// SQLite store implements, so a caller is written once for a local ledger
// and a remote one (the shape of WTF Dial's http.DialService). It also has
// the release operations of the API (definitions, readiness, waivers,
// sign-offs, approvals), whose authority comes from the bearer token.
//
// Every method takes a context and every request has a timeout
// (Options.Timeout). An API error answer ({code, message, field}) comes back
// as a *ledger.Error with the same Code, Field and message the server's
// store gave, so errors.Is(err, ledger.ErrNotFound), errors.As and
// ledger.ErrorCode read the same locally and remotely. Transport failures
// (refused connection, timeout, cancelled context) are plain wrapped errors
// (errors.Is(err, context.Canceled) and net.Error's Timeout work on them).
package client
