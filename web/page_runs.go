package web

import (
	"net/http"

	"github.com/evidence-ledger/ledger/runs"
)

type runsPage struct {
	pageBase
	Active, Finished []runs.Run
	Disabled         bool
}

// pageRuns is GET /runs: the queued and running runs with their progress,
// then the latest finished ones with their evidence.
func (s *Server) pageRuns(w http.ResponseWriter, r *http.Request) {
	data := runsPage{pageBase: pageBase{Title: "Runs", Nav: "runs", JSON: "/api/v1/runs"}}
	if s.runs == nil {
		data.Disabled = true
		s.render(w, r, http.StatusOK, "runs", data)
		return
	}
	all, err := s.runs.store.List(r.Context(), "", 200)
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	for _, run := range all {
		run = run.Visible()
		if runs.Final(run.State) {
			data.Finished = append(data.Finished, run)
		} else {
			data.Active = append(data.Active, run)
		}
	}
	s.render(w, r, http.StatusOK, "runs", data)
}

type agentsPage struct {
	pageBase
	Agents   []runs.AgentInfo
	Disabled bool
}

// pageAgents is GET /agents: every registered agent with its spec, labels,
// approval, last heartbeat, health and current run.
func (s *Server) pageAgents(w http.ResponseWriter, r *http.Request) {
	data := agentsPage{pageBase: pageBase{Title: "Agents", Nav: "agents", JSON: "/api/v1/agents"}}
	if s.runs == nil {
		data.Disabled = true
		s.render(w, r, http.StatusOK, "agents", data)
		return
	}
	list, err := s.agentsWithApproval(r.Context())
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	data.Agents = list
	s.render(w, r, http.StatusOK, "agents", data)
}
