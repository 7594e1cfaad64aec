package web

import (
	"net/http"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes builds the router: every route of the server is in this one table.
// /api/v1 is JSON for CI and tools (web/openapi.yaml describes it; a test
// checks the two against each other); the rest is the HTML dashboard, its
// assets, /healthz and /metrics.
//
// Scopes: reads need scope read only when Config.ReadAuth is set. Writes
// need record (evidence, head and tree verifications from uploaded
// objects, sign-offs of manual gates, which also need the gate's role) or
// admin (release definitions, trust policies, head verifications of
// repositories under --repo-root, waivers, and the final approval, which also needs the release's approval_role when
// it has one and is refused with 409 unless the release is ready). A
// sign-off satisfies one manual gate; the approval is the decision on the
// whole release and is a separate record.
func (s *Server) routes() chi.Router {
	read, record, admin := s.require(ledger.ScopeRead), s.require(ledger.ScopeRecord), s.require(ledger.ScopeAdmin)
	run := s.require(ledger.ScopeRun)

	r := chi.NewRouter()
	r.Use(middleware.RequestID, s.recoverer, s.instrument, securityHeaders, s.refuseWhenTampered, s.admit)
	r.Get("/healthz", s.handleHealth)
	r.With(read).Method(http.MethodGet, "/metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{}))

	r.Route("/api/v1", func(api chi.Router) {
		api.Use(s.checkQuery)
		api.Get("/openapi.yaml", s.handleOpenAPI)

		api.With(s.requireAppend).Post("/evidence", s.handlePostEvidence)
		api.With(read).Get("/evidence", s.handleListEvidence)
		api.With(read).Get("/evidence/{id}", s.handleGetEvidence)
		api.With(read).Get("/evidence/{id}/proof", s.handleEvidenceProof)
		api.With(read).Get("/originals/{id}", s.handleGetOriginal)

		api.With(read).Get("/log/checkpoint", s.handleCheckpoint)
		api.With(read).Get("/log/checkpoints", s.handleCheckpoints)
		api.With(read).Get("/log/key", s.handleKey)
		api.With(read).Get("/log/keys", s.handleKeys)
		api.With(read).Get("/log/entries", s.handleListEntries)
		api.With(read).Get("/log/entries/{id}", s.handleEntry)
		api.With(read).Get("/log/leaves/{index}", s.handleLeaf)
		api.With(read).Get("/log/proof/inclusion", s.handleInclusion)
		api.With(read).Get("/log/proof/consistency", s.handleConsistency)
		api.With(read).Get("/log/witnesses", s.handleWitnesses)

		api.With(read).Get("/runners", s.handleListRunners)
		api.With(admin).Post("/runners", s.handleAddRunner)
		api.With(admin).Post("/runners/{name}/revoke", s.handleRevokeRunner)

		// Runs (api_runs.go): queued with a run token; agents take them
		// with a record token and a request signed by their approved key
		// (api_agents.go: the admin's list, approve and remove; the
		// agent's own routes in api_agent_{register,poll,heartbeat,stage,finish}.go).
		api.With(run).Post("/runs", s.handleCreateRun)
		api.With(read).Get("/runs", s.handleListRuns)
		api.With(read).Get("/runs/{id}", s.handleGetRun)
		api.With(run).Post("/runs/{id}/cancel", s.handleCancelRun)
		api.With(read).Get("/agents", s.handleListAgents)
		api.With(admin).Post("/agents/{name}/approve", s.handleApproveAgent)
		api.With(admin).Post("/agents/{name}/remove", s.handleRemoveAgent)
		api.With(record).Post("/agent/register", s.handleAgentRegister)
		api.With(record).Post("/agent/poll", s.handleAgentPoll)
		api.With(record).Post("/agent/runs/{id}/heartbeat", s.handleAgentHeartbeat)
		api.With(record).Post("/agent/runs/{id}/evidence", s.handleAgentStage)
		api.With(record).Post("/agent/runs/{id}/finish", s.handleAgentFinish)

		api.With(read).Get("/heads", s.handleListHeads)
		api.With(record).Post("/heads/verify", s.handleVerifyHead)
		api.With(record).Post("/trees/verify", s.handleVerifyTree)

		api.With(admin).Post("/policies", s.handleApplyPolicy)
		api.With(read).Get("/policies", s.handleListPolicies)
		api.With(read).Get("/policies/{ref}", s.handleGetPolicy)

		api.With(read).Get("/releases", s.handleListReleases)
		api.With(admin).Put("/releases/{version}", s.handlePutRelease)
		api.With(read).Get("/releases/{version}", s.handleGetRelease)
		api.With(read).Get("/releases/{version}/readiness", s.handleReadiness)
		api.With(admin).Post("/releases/{version}/waivers", s.handlePostWaiver)
		api.With(record).Post("/releases/{version}/signoffs", s.handlePostSignoff)
		api.With(admin).Post("/releases/{version}/approvals", s.handlePostApproval)
		api.With(admin).Post("/releases/{version}/supersedes", s.handlePostSupersede)

		api.With(read).Get("/overview", s.apiOverview)
		api.With(read).Get("/lanes/*", s.apiLane)
		api.With(read).Get("/trajectories/*", s.apiTrajectory)

		api.NotFound(func(w http.ResponseWriter, r *http.Request) {
			s.writeError(w, r, ledger.NotFound("no API route %s %s", r.Method, r.URL.Path))
		})
		api.MethodNotAllowed(func(w http.ResponseWriter, r *http.Request) {
			s.writeJSON(w, http.StatusMethodNotAllowed, APIError{Code: "method_not_allowed", Message: r.Method + " is not allowed on " + r.URL.Path})
		})
	})

	// The log as c2sp.org/tlog-tiles (tiles.go).
	r.With(read).Get("/checkpoint", s.handleTileCheckpoint)
	r.With(read).Get("/tile/*", s.handleTile)

	r.Get("/", s.pageAuth(s.pageOverview))
	r.Get("/evidence", s.pageAuth(s.pageEvidenceList))
	r.Get("/evidence/{id}", s.pageAuth(s.pageEvidence))
	r.Get("/entries/{id}", s.pageAuth(s.pageEntry))
	r.Get("/originals/{id}", s.pageAuth(s.pageOriginal))
	r.Get("/heads", s.pageAuth(s.pageHeads))
	r.Get("/runs", s.pageAuth(s.pageRuns))
	r.Get("/agents", s.pageAuth(s.pageAgents))
	r.Get("/lanes/*", s.pageAuth(s.pageLane))
	r.Get("/trajectories/*", s.pageAuth(s.pageTrajectory))
	r.Get("/releases", s.pageAuth(s.pageReleases))
	r.Get("/releases/{version}", s.pageAuth(s.pageRelease))
	// The release page's forms; see page_release_forms.go for their token
	// and CSRF checks.
	r.Post("/releases/{version}/waivers", s.postReleaseForm(formWaiver))
	r.Post("/releases/{version}/signoffs", s.postReleaseForm(formSignoff))
	r.Post("/releases/{version}/approvals", s.postReleaseForm(formApproval))
	r.Post("/releases/{version}/supersedes", s.postReleaseForm(formSupersede))
	r.Post("/releases/{version}/runs", s.postReleaseRuns)
	r.Get("/static/*", s.handleStatic)
	r.NotFound(func(w http.ResponseWriter, r *http.Request) {
		s.renderError(w, r, ledger.NotFound("no page at %s", r.URL.Path))
	})
	return r
}
