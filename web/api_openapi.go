package web

import (
	_ "embed"
	"net/http"

	"github.com/go-chi/chi/v5"
)

// openAPI is the OpenAPI 3 description of /api/v1; a test checks it
// against the router, route by route.
//
//go:embed openapi.yaml
var openAPI []byte

func init() {
	apiRegistrars = append(apiRegistrars, func(s *Server, r chi.Router) {
		r.Get("/openapi.yaml", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
			w.Write(openAPI)
		})
	})
}
