package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The bodies and answers of the agents' routes (POST /api/v1/agent/...)
// and of GET /api/v1/agents, shared by package web and client.

// RegisterRequest is the body of POST /api/v1/agent/register: the
// agent's name, its Ed25519 public key (OpenSSH line), backend, labels,
// what it declares (AgentSpec) and its health probe's verdict.
type RegisterRequest struct {
	Name      string            `json:"name"`
	PublicKey string            `json:"public_key"`
	Backend   ledger.Backend    `json:"backend"`
	Labels    map[string]string `json:"labels"`
	Spec      AgentSpec         `json:"spec"`
	Health    string            `json:"health"`
}

// LeaseAnswer is the answer of a poll that took a run: the run (with its
// case selection, which the agent passes to its lanes), the attempt and
// lease the agent holds, when the lease ends and the lease
// length (the agent extends well before it).
type LeaseAnswer struct {
	Run        Run       `json:"run"`
	Attempt    int       `json:"attempt"`
	Lease      string    `json:"lease"`
	LeaseUntil time.Time `json:"lease_until"`
	LeaseTTLMS int64     `json:"lease_ttl_ms"`
}

// HeartbeatRequest is the body of POST /api/v1/agent/runs/{id}/heartbeat:
// the attempt and lease the agent holds, and its progress (nil: none
// new).
type HeartbeatRequest struct {
	Attempt  int       `json:"attempt"`
	Lease    string    `json:"lease"`
	Progress *Progress `json:"progress,omitempty"`
}

// HeartbeatAnswer tells the agent the run's state (canceling: stop at the
// next case boundary and finish as canceled) and the lease's new end.
type HeartbeatAnswer struct {
	State      string    `json:"state"`
	Cancel     bool      `json:"cancel"`
	LeaseUntil time.Time `json:"lease_until"`
}

// FinishRequest is the body of POST /api/v1/agent/runs/{id}/finish. Status
// "completed": Evidence holds one DSSE envelope of evidence per lane of
// the run, signed by the agent's key (while the run is canceling the
// attempt is canceled instead and nothing is recorded); "canceled" (only while the run is
// canceling): no evidence, nothing is recorded as passed; "error": the
// attempt could not run (a failed health probe, say), Message says why, and
// it counts as an infrastructure failure (the run is queued again while
// attempts remain).
//
// Staged names evidence staged for this attempt before the finish (POST
// /api/v1/agent/runs/{id}/evidence), by the digests the staging answered;
// a completed finish carries one record per lane between Evidence and
// Staged. A digest the server no longer holds (it restarted, say) is
// refused with 409 naming staged[i], and nothing is appended: the agent
// sends the full envelopes in Evidence instead.
type FinishRequest struct {
	Attempt  int               `json:"attempt"`
	Lease    string            `json:"lease"`
	Status   string            `json:"status"`
	Message  string            `json:"message,omitempty"`
	Evidence []json.RawMessage `json:"evidence,omitempty"`
	Staged   []string          `json:"staged,omitempty"`
}

// StageRequest is the body of POST /api/v1/agent/runs/{id}/evidence: one
// lane's DSSE envelope of evidence, signed by the agent's key, sent as the
// lane ends, for the attempt and lease the agent holds. The server checks
// it as a finish would and keeps the prepared record staged for that
// (run, attempt, lease) only; nothing is appended until a completed finish
// names it.
type StageRequest struct {
	Attempt  int             `json:"attempt"`
	Lease    string          `json:"lease"`
	Envelope json.RawMessage `json:"envelope"`
}

// StageAnswer is the answer of a staging: the digest the finish names the
// staged record by ("sha256:" + 64 hex of the envelope bytes as received),
// the lane, and the content id the record will have once appended.
type StageAnswer struct {
	Digest   string `json:"digest"`
	Lane     string `json:"lane"`
	Evidence string `json:"evidence"`
}

// EnvelopeDigest is the digest a staged envelope is named by: "sha256:"
// and the hex SHA-256 of its bytes.
func EnvelopeDigest(env []byte) string {
	sum := sha256.Sum256(env)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// AgentInfo is an agent as GET /api/v1/agents lists it.
type AgentInfo struct {
	Agent
	Online bool `json:"online"`
	// ApprovedSpec is the spec digest the approval leaf recorded ("" when
	// not approved, or approved before approvals recorded one). It
	// differs from SpecDigest when the approved agent registered since
	// with another commit, lanes, driver or host, which an approval allows.
	ApprovedSpec string `json:"approved_spec_digest,omitempty"`
}

// PollRequest is the body of POST /api/v1/agent/poll: how long to wait
// for a run (capped by the server's --poll-wait) and the agent's latest
// health verdict.
type PollRequest struct {
	WaitMS int64  `json:"wait_ms"`
	Health string `json:"health,omitempty"`
}

// ApproveRequest is the body of POST /api/v1/agents/{name}/approve (an
// empty body or {} approves the registration as it is when the request
// is served): KeyID, when set, is the key id ("SHA256:" + 43 base64) the
// admin checked out of band, and SpecDigest, when set, the spec digest
// (Agent.SpecDigest, all 64 hex digits: MatchSpecDigest) of the
// registration the admin checked (`ledger agent list`, or the agent's
// start log). The approval is refused (409, nothing appended) when the
// registration carries another key or another digest: a registration
// that changed after it was checked is not approved.
type ApproveRequest struct {
	KeyID      string `json:"key_id,omitempty"`
	SpecDigest string `json:"spec_digest,omitempty"`
}

// RemoveAnswer is the answer of POST /api/v1/agents/{name}/remove: the
// agent removed, whether a registration row was deleted, and the key id
// whose approval was revoked ("" when the agent was not approved) with
// the revocation's log entry id.
type RemoveAnswer struct {
	Name       string `json:"name"`
	Registered bool   `json:"registered"`
	Revoked    string `json:"revoked_key_id,omitempty"`
	Entry      string `json:"entry,omitempty"`
}
