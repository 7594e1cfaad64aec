package client

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/ledger/auth"
	"github.com/evidence-ledger/ledger/runs"
)

type runAnswer struct {
	Run runs.Run `json:"run"`
}

// CreateRun queues a run through POST /runs (scope run; the token's
// lane, backend and repository scope must cover it).
func (c *Client) CreateRun(ctx context.Context, spec runs.Spec) (runs.Run, error) {
	body, err := json.Marshal(spec)
	if err != nil {
		return runs.Run{}, err
	}
	var a runAnswer
	err = c.do(ctx, request{method: http.MethodPost, path: "/runs", body: body, contentType: "application/json"}, &a, nil)
	return a.Run, err
}

// Runs lists up to limit runs, newest first (GET /runs); state "" is
// every state, "active" the unfinished ones.
func (c *Client) Runs(ctx context.Context, state string, limit int) ([]runs.Run, error) {
	q := url.Values{}
	set(q, "state", state)
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var a struct {
		Runs []runs.Run `json:"runs"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/runs", query: q}, &a, nil)
	return a.Runs, err
}

// Run returns run id (GET /runs/{id}); CodeNotFound when none.
func (c *Client) Run(ctx context.Context, id string) (runs.Run, error) {
	var a runAnswer
	err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + url.PathEscape(id)}, &a, nil)
	return a.Run, err
}

// RunWait returns run id and its version (GET /runs/{id}?wait=&since=):
// with since a version an earlier answer carried, the server answers as
// soon as the run's version differs from it, the run is final, or wait
// (at most 30 s on the server) ends. since "" answers at once. A server
// without the wait answers at once and with version "": the caller then
// polls. CodeNotFound when there is no run id.
func (c *Client) RunWait(ctx context.Context, id, since string, wait time.Duration) (runs.Run, string, error) {
	var a struct {
		Run     runs.Run `json:"run"`
		Version string   `json:"version"`
	}
	q := url.Values{}
	if since != "" && wait > 0 {
		q.Set("wait", wait.String())
		q.Set("since", since)
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/runs/" + url.PathEscape(id), query: q}, &a, nil)
	return a.Run, a.Version, err
}

// CancelRun asks run id to stop (POST /runs/{id}/cancel, scope run).
func (c *Client) CancelRun(ctx context.Context, id string) (runs.Run, error) {
	var a runAnswer
	err := c.do(ctx, request{method: http.MethodPost, path: "/runs/" + url.PathEscape(id) + "/cancel", body: []byte("{}"), contentType: "application/json"}, &a, nil)
	return a.Run, err
}

// Agents lists the registered agents (GET /agents).
func (c *Client) Agents(ctx context.Context) ([]runs.AgentInfo, error) {
	var a struct {
		Agents []runs.AgentInfo `json:"agents"`
	}
	err := c.do(ctx, request{method: http.MethodGet, path: "/agents"}, &a, nil)
	return a.Agents, err
}

// ApproveAgent approves the registration of agent name (POST
// /agents/{name}/approve, scope admin): a runner-key leaf of kind agent
// for its key. req.KeyID and req.SpecDigest, when set, must be the
// registered key's id and spec digest; the server refuses the approval
// (409, nothing appended) when either is another. It returns the leaf's
// state and entry and the registration approved.
func (c *Client) ApproveAgent(ctx context.Context, name string, req runs.ApproveRequest) (auth.RunnerState, ledger.AppendedEntry, runs.Agent, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, runs.Agent{}, err
	}
	var a struct {
		runnerAnswer
		Agent runs.Agent `json:"agent"`
	}
	if err := c.do(ctx, request{method: http.MethodPost, path: "/agents/" + url.PathEscape(name) + "/approve", body: body, contentType: "application/json"}, &a, nil); err != nil {
		return auth.RunnerState{}, ledger.AppendedEntry{}, runs.Agent{}, err
	}
	return a.Runner, a.entry(), a.Agent, nil
}

// RemoveAgent removes agent name (POST /agents/{name}/remove, scope
// admin): its approved key, if any, is revoked (a leaf) and its
// registration deleted, so the name can register again with another key.
func (c *Client) RemoveAgent(ctx context.Context, name string) (runs.RemoveAnswer, error) {
	var a runs.RemoveAnswer
	err := c.do(ctx, request{method: http.MethodPost, path: "/agents/" + url.PathEscape(name) + "/remove", body: []byte("{}"), contentType: "application/json"}, &a, nil)
	return a, err
}

// Agent is the agent side of the runs API: every request carries the
// client's token and is signed with the agent's key (runs.SignRequest).
// It is safe for concurrent use.
type Agent struct {
	c    *Client
	name string
	priv ed25519.PrivateKey
	now  func() time.Time
}

// NewAgent returns the agent name signing with priv over c.
func NewAgent(c *Client, name string, priv ed25519.PrivateKey) *Agent {
	return &Agent{c: c, name: name, priv: priv, now: time.Now}
}

func (a *Agent) post(ctx context.Context, path string, in, out any, timeout time.Duration) (int, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return 0, err
	}
	date, sig := runs.SignRequest(a.priv, http.MethodPost, path, a.name, a.now(), body)
	req := request{method: http.MethodPost, path: path, body: body, contentType: "application/json",
		header: map[string]string{runs.HeaderAgent: a.name, runs.HeaderAgentDate: date, runs.HeaderAgentSig: sig}}
	var raw []byte
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	if err := a.c.do(ctx, req, &raw, nil); err != nil {
		return 0, err
	}
	if len(raw) == 0 {
		return http.StatusNoContent, nil
	}
	return http.StatusOK, json.Unmarshal(raw, out)
}

// Register registers the agent (POST /agent/register): answered before
// approval too; an unapproved agent's other requests are refused.
func (a *Agent) Register(ctx context.Context, req runs.RegisterRequest) (runs.Agent, error) {
	var out struct {
		Agent runs.Agent `json:"agent"`
	}
	_, err := a.post(ctx, "/agent/register", req, &out, 0)
	return out.Agent, err
}

// Poll waits up to wait for a run the agent may take (POST /agent/poll)
// and returns its lease, or nil when none came.
func (a *Agent) Poll(ctx context.Context, wait time.Duration, health string) (*runs.LeaseAnswer, error) {
	var out runs.LeaseAnswer
	code, err := a.post(ctx, "/agent/poll", runs.PollRequest{WaitMS: wait.Milliseconds(), Health: health}, &out, wait+30*time.Second)
	if err != nil || code == http.StatusNoContent {
		return nil, err
	}
	return &out, nil
}

// Heartbeat extends the lease of run id (POST /agent/runs/{id}/heartbeat);
// the answer says whether the run is being canceled.
func (a *Agent) Heartbeat(ctx context.Context, id string, req runs.HeartbeatRequest) (runs.HeartbeatAnswer, error) {
	var out runs.HeartbeatAnswer
	_, err := a.post(ctx, "/agent/runs/"+url.PathEscape(id)+"/heartbeat", req, &out, 0)
	return out, err
}

// Stage sends one lane's DSSE envelope for the attempt held (POST
// /agent/runs/{id}/evidence): the server checks it as a finish would and
// keeps it staged, appending nothing; the answer's digest is what
// FinishRequest.Staged names it by. 409 when the lease is not held.
func (a *Agent) Stage(ctx context.Context, id string, req runs.StageRequest) (runs.StageAnswer, error) {
	var out runs.StageAnswer
	_, err := a.post(ctx, "/agent/runs/"+url.PathEscape(id)+"/evidence", req, &out, 0)
	return out, err
}

// Finish ends the attempt (POST /agent/runs/{id}/finish); idempotent per
// (run, attempt).
func (a *Agent) Finish(ctx context.Context, id string, req runs.FinishRequest) (runs.Run, error) {
	var out runAnswer
	_, err := a.post(ctx, "/agent/runs/"+url.PathEscape(id)+"/finish", req, &out, 0)
	return out.Run, err
}
