// Command ledger is the evidence ledger's CLI and server: serve the API and
// dashboard, run hardware lanes, record evidence, verify signed heads and
// tree equivalence, define releases and check their readiness, audit and
// back up the log, manage tokens. Configuration comes from flags, then
// LEDGER_* environment variables, then defaults; see the README for every
// command, its exit codes and the configuration table.
package main
