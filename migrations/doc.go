// Package migrations holds the numbered, append-only SQL migrations of the
// SQLite store, embedded and applied with pressly/goose. Never edit a
// migration that has shipped; add a new file.
package migrations
