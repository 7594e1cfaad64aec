// Package web serves the evidence ledger over HTTP: the /api/v1 JSON API
// for CI and tools, and the server-rendered reviewer dashboard, on one chi
// router. Handlers are methods on *Server, one file per resource; errors
// map to HTTP statuses through the single table in errors.go. The server
// opens no path a request names except through serverPath (repo_roots.go),
// confined to the configured repository roots and observable through
// Config.FileAccess.
package web
