// Command tamper edits one byte of a leaf of a ledger database behind the
// service's back, for the end-to-end test (make e2e) to prove that
// `ledger audit` catches it. Usage: go run ./scripts/tamper DB INDEX
package main
