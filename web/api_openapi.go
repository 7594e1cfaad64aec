package web

import (
	_ "embed"
	"net/http"
)

// openAPI is the OpenAPI 3 description of /api/v1; a test checks it
// against the router, route by route.
//
//go:embed openapi.yaml
var openAPI []byte

func (s *Server) handleOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
	w.Write(openAPI)
}
