// Command ledger is the evidence ledger's CLI and server: serve the API and
// dashboard, run hardware lanes, record evidence, verify signed heads and
// tree equivalence, define releases and check their readiness, audit and
// back up the log, manage tokens, list and show evidence. Configuration
// comes from flags, then LEDGER_* environment variables, then defaults;
// every duration takes the units of time.ParseDuration and d (days). An
// unknown subcommand or flag exits 2 with the closest names. See
// docs/reference/cli.md for every command, its exit codes and the
// configuration table.
package main
