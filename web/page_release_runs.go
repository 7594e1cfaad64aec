package web

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"html/template"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/evidence-ledger/ledger/admit"
	"github.com/evidence-ledger/ledger/gates"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runs"
	"github.com/go-chi/chi/v5"
)

// The release page's "run the missing lanes" form (POST
// /releases/{version}/runs) queues, for a release manager, one run for
// every open lane gate that an online approved agent can serve, through
// queueRun (the path of POST /api/v1/runs). The page shows the plan
// (runPlan) before the button is pressed and after: what would be or was
// queued, and what cannot be, with why.

const formRuns = "run"

// Plan row states.
const (
	planQueue    = "queue"      // would be queued now
	planActive   = "active"     // a queued or running run already covers it
	planNoAgent  = "no-agent"   // no online approved agent serves it
	planInvalid  = "invalid"    // the gate's subject or case selection is not one a run can name
	planNotLane  = "not-needed" // satisfied, waived or failed: nothing to run
	maxPlanScans = 1000         // active runs read for the duplicate check
)

// planRow is one gate (and, for all_backends gates, one backend) of the
// run plan. Spec is the run it queues (State planQueue), Run the active
// run that already covers it (planActive), Agents the online agents that
// would serve it, Why the reason in words.
type planRow struct {
	Gate    string
	Lane    string
	Backend ledger.Backend
	State   string
	Why     string
	Agents  []string
	Run     string
	Spec    runs.Spec
	// Rule is, for planInvalid, the rule the subject breaks in words
	// (runs.Spec.Validate's message), shown once per page (runPlan.NameRule).
	Rule string
}

// runPlan is the run form's data: the rows, the form's action and CSRF
// token, how many runs the last press queued (Queued, from the redirect),
// and Problem, why the last press was refused.
type runPlan struct {
	Enabled bool      // the server runs a runs service
	Rows    []planRow // the rows that need a run (queue, active, no-agent)
	// Skipped lists the lane gates that need no run, "gate (why)", in one
	// line: a release whose gates mostly pass renders no row for each.
	Skipped string
	// NameRule is the rule an invalid row's subject breaks, written once
	// for every planInvalid row.
	NameRule string
	Action   string
	CSRF     string
	Role     string // the release's approval role ("" : admin scope)
	Queued   int    // -1: no press to report
	Problem  string
}

// Queueable counts the rows a press would queue.
func (p runPlan) Queueable() int {
	n := 0
	for _, r := range p.Rows {
		if r.State == planQueue {
			n++
		}
	}
	return n
}

// Unqueueable counts the rows that cannot be queued (no agent serves
// them, or a run cannot name their subject).
func (p runPlan) Unqueueable() int {
	n := 0
	for _, r := range p.Rows {
		if r.State == planNoAgent || r.State == planInvalid {
			n++
		}
	}
	return n
}

// planRuns computes the run plan of release rel with readiness rd: for
// each lane and throughput gate in rel's order (a throughput gate's run
// selects the cases of its select globs), passed, waived and failed gates need no
// run; an open gate needs one run of its lane on a backend it lists (on
// each listed backend short of min_runs, with all_backends), at its
// subject (GateSubject), with no labels. A need already covered by an
// active run of the same lane, backend, repository and commit (or by an
// earlier row) is planActive; one that no online approved agent serves
// (admit.AgentServes: backend, build commit and repository, lanes in its own
// configuration; for a gate with signed_by, only the agents it names) is
// planNoAgent; one whose subject a run cannot name (a release
// repository that is not a repository name: runs.Spec.Validate; select
// globs the server's case lanes do not have: runs.Spec.CheckCases) is
// planInvalid, with the reason. Errors are the runs store's; CodeInternal when more than
// maxPlanScans runs are active (the duplicate check would be partial).
func (s *Server) planRuns(ctx context.Context, rel *gates.Release, rd *gates.Readiness) ([]planRow, error) {
	agents, err := s.agentsWithApproval(ctx)
	if err != nil {
		return nil, err
	}
	act, err := s.runs.store.List(ctx, "active", maxPlanScans)
	if err != nil {
		return nil, err
	}
	if len(act) >= maxPlanScans {
		return nil, ledger.Errorf(ledger.CodeInternal, "%d or more runs are active: the duplicate check cannot read them all", maxPlanScans)
	}
	results := map[string]gates.GateResult{}
	for _, g := range rd.Gates {
		results[g.ID] = g
	}
	covered := map[string]string{} // lane|backend|repo|commit -> gate of an earlier row
	var rows []planRow
	for i := range rel.Gates {
		g := &rel.Gates[i]
		if g.Kind != gates.KindLane && g.Kind != gates.KindThroughput {
			continue
		}
		res := results[g.ID]
		if res.State != gates.StateOpen {
			why := map[gates.State]string{gates.StatePassed: "satisfied", gates.StateWaived: "waived", gates.StateFailed: "failed: supersede or waive the failing run first"}[res.State]
			rows = append(rows, planRow{Gate: g.ID, Lane: g.Lane, State: planNotLane, Why: why})
			continue
		}
		repo, commit := rel.GateSubject(g)
		for _, backends := range laneNeeds(g, res) {
			row := planRow{Gate: g.ID, Lane: g.Lane}
			for _, b := range backends {
				spec := runs.Spec{Lanes: []string{g.Lane}, Backend: ledger.Backend(b), Labels: maps.Clone(g.AgentLabels), Repository: repo, Commit: commit}
				if g.Kind == gates.KindThroughput {
					spec.Cases = slices.Clone(g.Select)
				}
				err := spec.Validate()
				if err == nil {
					err = spec.CheckCases(s.cfg.CaseLanes)
				}
				if err != nil {
					var le *ledger.Error
					if !errors.As(err, &le) || le.Code != ledger.CodeInvalid {
						return nil, err
					}
					row.State, row.Backend = planInvalid, spec.Backend
					row.Why, row.Rule = "a run cannot name its "+le.Field, le.Field+" "+le.Message
					break
				}
				key := strings.Join([]string{g.Lane, b, repo, commit, runs.SortedLabels(spec.Labels), strings.Join(spec.Cases, ",")}, "|")
				if id := activeRun(act, spec); id != "" {
					row.State, row.Backend, row.Run, row.Why = planActive, spec.Backend, id, "run "+id+" is already queued or running for it"
					break
				}
				if other, ok := covered[key]; ok {
					row.State, row.Backend, row.Why = planActive, spec.Backend, "the run for gate "+other+" covers it"
					break
				}
				if names := servingAgents(agents, spec, g); len(names) > 0 {
					row.State, row.Backend, row.Spec, row.Agents = planQueue, spec.Backend, spec, names
					row.Why = "online agent(s) " + strings.Join(names, ", ") + " serve it"
					if len(spec.Labels) > 0 {
						row.Why += "; the run is queued with labels " + runs.SortedLabels(spec.Labels) + " (agent_labels)"
					}
					if len(spec.Cases) > 0 {
						row.Why += "; the run selects cases " + strings.Join(spec.Cases, ", ") + " (select)"
					}
					covered[key] = g.ID
					break
				}
			}
			if row.State == "" {
				row.State = planNoAgent
				row.Why = "no online approved agent for backend " + strings.Join(backends, " or ") + " with lane " + g.Lane + " at " + shortID(commit)
				if len(g.AgentLabels) > 0 {
					row.Why += ", with labels " + runs.SortedLabels(g.AgentLabels)
				}
				if len(g.SignedBy) > 0 {
					row.Why += " among the gate's signed_by (" + strings.Join(g.SignedBy, ", ") + ")"
				}
			}
			rows = append(rows, row)
		}
	}
	return rows, nil
}

// laneNeeds returns the backend choices of the runs open lane gate g
// still needs: with all_backends, one choice per listed backend with fewer
// than min_runs satisfying runs; otherwise one choice of any listed
// backend (the first one an agent serves).
func laneNeeds(g *gates.Gate, res gates.GateResult) [][]string {
	if !g.AllBackends {
		return [][]string{g.Backends}
	}
	have := map[string]int{}
	for _, e := range res.Satisfying {
		have[string(e.Backend)]++
	}
	var out [][]string
	for _, b := range g.Backends {
		if have[b] < max(g.MinRuns, 1) {
			out = append(out, []string{b})
		}
	}
	return out
}

// activeRun returns the id of an active run of act that runs spec's lane
// on its backend at its repository and commit, over the cases spec
// selects (a run selecting no cases runs them all), or "".
func activeRun(act []runs.Run, spec runs.Spec) string {
	for _, r := range act {
		if r.Backend == spec.Backend && r.Repository == spec.Repository && r.Commit == spec.Commit && hasLabels(r.Labels, spec.Labels) &&
			(len(r.Cases) == 0 || slices.Equal(slices.Sorted(slices.Values(r.Cases)), slices.Sorted(slices.Values(spec.Cases)))) &&
			(slices.Contains(r.Lanes, spec.Lanes[0]) || slices.Contains(r.Lanes, ledger.LaneName(spec.Lanes[0]))) {
			return r.ID
		}
	}
	return ""
}

// hasLabels reports whether have holds every label of want with the same
// value: a run requiring have is taken only by agents a run requiring want
// would accept.
func hasLabels(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// servingAgents names the online approved agents that would take a run of
// spec (admit.AgentServes, with the agent's token scope unknown here) and whose
// evidence gate g counts by signer (signed_by names them, when set).
func servingAgents(agents []runs.AgentInfo, spec runs.Spec, g *gates.Gate) []string {
	run := runs.Run{Backend: spec.Backend, Lanes: spec.Lanes, Labels: spec.Labels, Repository: spec.Repository, Commit: spec.Commit}
	var names []string
	for _, a := range agents {
		if !a.Online || !a.Approved || (len(g.SignedBy) > 0 && !slices.Contains(g.SignedBy, a.Name)) {
			continue
		}
		if admit.AgentServes(a.Agent, ledger.Token{})(run) {
			names = append(names, a.Name)
		}
	}
	return names
}

// fillRunPlan sets p.RunsHTML to the run form's section rendered for this
// request, its CSRF token bound to the cookie p.Forms set (call
// releaseForms first) (the plan changes with agents and runs, not with the log, so it
// is not part of the cached page). queued is the count to report (-1:
// none); problem why the last press was refused. A plan that cannot be
// computed is shown as the section's problem (logged when internal); the
// error returned is the template's.
func (s *Server) fillRunPlan(ctx context.Context, w http.ResponseWriter, r *http.Request, p *releasePage, queued int, problem string) error {
	plan := runPlan{Enabled: s.runs != nil, Action: actionPath(p.Rel.Version, formRuns), Role: p.Rel.ApprovalRole, Queued: queued, Problem: problem}
	if plan.Enabled {
		secret := p.Forms.secret
		if secret == "" {
			secret = s.csrfSecret(w, r)
		}
		plan.CSRF = s.csrfToken(secret, plan.Action)
		rows, err := s.planRuns(ctx, p.Rel, p.R)
		if err != nil {
			// The rest of the page does not depend on the run store.
			st, body := errorBody(err)
			if st >= 500 {
				s.log.Error("release page: run plan", "version", p.Rel.Version, "err", err)
			}
			plan.Problem = strings.TrimPrefix(plan.Problem+"; the run plan cannot be computed: "+body.Message, "; ")
		}
		var skipped []string
		for _, row := range rows {
			if row.State == planNotLane {
				skipped = append(skipped, row.Gate+" ("+row.Why+")")
				continue
			}
			if row.State == planInvalid && plan.NameRule == "" {
				plan.NameRule = row.Rule
			}
			plan.Rows = append(plan.Rows, row)
		}
		plan.Skipped = strings.Join(skipped, ", ")
	}
	var buf bytes.Buffer
	if err := s.pages.t.ExecuteTemplate(&buf, "release_runs", plan); err != nil {
		return err
	}
	p.RunsHTML = template.HTML(buf.String())
	return nil
}

// postReleaseRuns is POST /releases/{version}/runs, the "run the missing
// lanes" form. It takes the form's CSRF token and an API token of scope
// run (or admin) holding the release's approval role (admin scope when the
// release names none), then queues, under one lock so that a double press
// queues nothing twice, every planQueue row of the plan computed now,
// each through queueRun as created by the token. A row out of the token's
// scope refuses the whole press before anything is queued. Success
// redirects (303) to the release page with the count; a refusal
// re-renders it with the problem and the status of the error table.
func (s *Server) postReleaseRuns(w http.ResponseWriter, r *http.Request) {
	version := chi.URLParam(r, "version")
	r.Body = http.MaxBytesReader(w, r.Body, maxFormBody)
	if err := r.ParseForm(); err != nil {
		s.renderError(w, r, ledger.Errorf(ledger.CodeInvalid, "unreadable form: %v", err))
		return
	}
	p, err := s.loadReleasePage(r, version)
	if err != nil {
		s.renderError(w, r, err)
		return
	}
	n, tok, err := s.queueMissing(w, r, p)
	if err != nil {
		s.renderFormError(w, r, p, version, formValues{Form: formRuns}, err)
		return
	}
	s.log.Info("release form recorded", "form", formRuns, "version", version, "by", tok.Name, "queued", n)
	http.Redirect(w, r, "/releases/"+url.PathEscape(version)+"?queued="+strconv.Itoa(n)+"#runs", http.StatusSeeOther)
}

// queueMissing checks the run form's post and queues the plan's runs; it
// returns how many it queued and the token that queued them.
func (s *Server) queueMissing(w http.ResponseWriter, r *http.Request, p *releasePage) (int, ledger.Token, error) {
	if err := checkFormText(r.PostForm); err != nil {
		return 0, ledger.Token{}, err
	}
	if err := s.checkCSRF(r, actionPath(p.Rel.Version, formRuns)); err != nil {
		return 0, ledger.Token{}, err
	}
	rs, err := s.runsOrErr()
	if err != nil {
		return 0, ledger.Token{}, err
	}
	tok, err := s.formToken(w, r, ledger.ScopeRun)
	if err != nil {
		return 0, tok, err
	}
	if role := p.Rel.ApprovalRole; role != "" && !slices.Contains(tok.Roles, role) {
		return 0, tok, ledger.Errorf(ledger.CodeForbidden, "queueing runs for release %s needs a token holding its approval role %q; %q holds %v", p.Rel.Version, role, tok.Name, tok.Roles)
	} else if role == "" && tok.Scope != ledger.ScopeAdmin {
		return 0, tok, ledger.Errorf(ledger.CodeForbidden, "release %s names no approval role: queueing its runs needs an admin token; %q has scope %q", p.Rel.Version, tok.Name, tok.Scope)
	}
	rs.planMu.Lock()
	defer rs.planMu.Unlock()
	rows, err := s.planRuns(r.Context(), p.Rel, p.R)
	if err != nil {
		return 0, tok, err
	}
	for _, row := range rows {
		if row.State != planQueue {
			continue
		}
		if err := admit.RunInScope(tok, row.Spec.Repository, row.Spec.Lanes, row.Spec.Backend); err != nil {
			return 0, tok, rowError(row, "", err)
		}
	}
	n := 0
	for _, row := range rows {
		if row.State != planQueue {
			continue
		}
		if _, err := s.queueRun(r.Context(), tok, row.Spec); err != nil {
			return n, tok, rowError(row, fmt.Sprintf(" (%d queued before it)", n), err)
		}
		n++
	}
	return n, tok, nil
}

// rowError prefixes the message of err, an application error, with the
// gate and backend of row and note; other errors are returned as they are.
func rowError(row planRow, note string, err error) error {
	var le *ledger.Error
	if !errors.As(err, &le) {
		return err
	}
	return &ledger.Error{Code: le.Code, Field: le.Field, Message: fmt.Sprintf("gate %s on %s%s: %s", row.Gate, row.Backend, note, le.Message)}
}
