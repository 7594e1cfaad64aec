// Package runs keeps the bookkeeping of runs queued through the service
// (POST /api/v1/runs) and of the agents that take them: the queue, the
// leases, attempts, progress and the agents' registrations and
// heartbeats. It is mutable state in its own tables (migration 00009),
// not audited; what a run produces (its evidence and its final outcome, a
// ledger.KindRunOutcome leaf) is appended to the log by package web.
//
// The queue is a table with compare-and-set updates rather than a queue
// library: a run is taken by the first agent whose backend, labels, commit
// and token scope satisfy it, which a FIFO receive cannot express, and a
// lease is held by one (agent, lease id) pair that every extend and finish
// must name. See the README's "Runs and agents" section.
//
// A Store is safe for concurrent use; its methods that change a run are
// compare-and-set updates, so two agents claiming one run cannot both win.
package runs

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// The states of a run. Queued, leased, running and canceling are active;
// done, failed, canceled and expired are final (ledger.RunDone and the
// others).
const (
	Queued    = "queued"
	Leased    = "leased"
	Running   = "running"
	Canceling = "canceling"
	Done      = ledger.RunDone
	Failed    = ledger.RunFailed
	Canceled  = ledger.RunCanceled
	Expired   = ledger.RunExpired
)

// Final reports whether state is a final state.
func Final(state string) bool {
	switch state {
	case Done, Failed, Canceled, Expired:
		return true
	}
	return false
}

func active(state string) bool { return state == Leased || state == Running || state == Canceling }

// Progress is the latest progress an agent reported for a run: the lane
// running, its finished and total units, and how many of the run's lanes
// are finished; zero once the run is final.
type Progress struct {
	Lane      string `json:"lane,omitempty"`
	Done      int    `json:"done"`
	Total     int    `json:"total"`
	LanesDone int    `json:"lanes_done"`
}

// MaxProgressTotal is the most cases progress may count in one lane
// (lanes have at most tens of thousands).
const MaxProgressTotal = 1 << 30

// progressOf reports whether progress lane p is run lane l: l itself, l's
// name without its version, or, for an l named without a version, a lane
// name/vN of that name (ledger.ValidLane).
func progressOf(l, p string) bool {
	switch {
	case p == l || p == ledger.LaneName(l):
		return true
	case ledger.LaneName(l) == l:
		return ledger.ValidLane(p) && ledger.LaneName(p) == l
	}
	return false
}

// Validate checks progress p of a run of lanes: its lane is empty or a
// lane of the run (progressOf), and done,
// total and lanes_done are not negative, done at most total and lanes_done
// at most len(lanes), total at most MaxProgressTotal. Errors are
// CodeInvalid naming "progress." and the member; a lane is echoed cut to
// 64 bytes at a rune boundary and escaped.
func (p Progress) Validate(lanes []string) error {
	switch {
	case p.Lane != "" && !slices.ContainsFunc(lanes, func(l string) bool { return progressOf(l, p.Lane) }):
		return ledger.FieldError("progress.lane", "%q is not a lane of the run (%s)", Visible(cut(p.Lane, 64)), strings.Join(lanes, ", "))
	case p.Done < 0 || p.Total < 0 || p.LanesDone < 0:
		return ledger.FieldError("progress", "done, total and lanes_done must not be negative")
	case p.Total > MaxProgressTotal:
		return ledger.FieldError("progress.total", "%d is more than %d", p.Total, MaxProgressTotal)
	case p.Done > p.Total:
		return ledger.FieldError("progress.done", "%d is more than total %d", p.Done, p.Total)
	case p.LanesDone > len(lanes):
		return ledger.FieldError("progress.lanes_done", "%d is more than the run's %d lanes", p.LanesDone, len(lanes))
	}
	return nil
}

// Run is one run's state. LeaseID is the current attempt's lease
// (only the agent holding it sees it; it is not in list answers).
// LeaseUntil is when the lease ends unless extended. Attempts lists every
// ended attempt. Evidence is the content ids of the evidence recorded by
// the finishing attempt, OutcomeEntry the id of the run-outcome leaf.
type Run struct {
	ID           string              `json:"id"`
	State        string              `json:"state"`
	Backend      ledger.Backend      `json:"backend"`
	Lanes        []string            `json:"lanes"`
	Labels       map[string]string   `json:"labels"`
	Repository   string              `json:"repository,omitempty"`
	Commit       string              `json:"commit,omitempty"`
	Attempt      int                 `json:"attempt"`
	MaxAttempts  int                 `json:"max_attempts"`
	Agent        string              `json:"agent,omitempty"`
	LeaseID      string              `json:"-"`
	LeaseUntil   time.Time           `json:"lease_until,omitzero"`
	Progress     Progress            `json:"progress"`
	Attempts     []ledger.RunAttempt `json:"attempts"`
	Evidence     []string            `json:"evidence"`
	OutcomeEntry string              `json:"outcome_entry,omitempty"`
	Message      string              `json:"message,omitempty"`
	CreatedBy    string              `json:"created_by"`
	CreatedAt    time.Time           `json:"created_at"`
	UpdatedAt    time.Time           `json:"updated_at"`
}

// Outcome returns the run-outcome leaf body of a run in a final state.
func (r Run) Outcome(now time.Time) ledger.RunOutcome {
	return ledger.RunOutcome{Run: r.ID, State: r.State, Backend: r.Backend, Lanes: r.Lanes, Labels: r.Labels,
		Agent: r.Agent, Evidence: r.Evidence, Attempts: r.Attempts, By: r.CreatedBy, At: now.UTC()}
}

// Spec is what POST /api/v1/runs asks for: the lanes to run on backend,
// the agent labels required (an agent must have every one, with the same
// value), and optionally the repository and commit the agent's own build
// must be of. MaxAttempts (default 3, at most 10) bounds the attempts.
type Spec struct {
	Lanes       []string          `json:"lanes"`
	Backend     ledger.Backend    `json:"backend"`
	Labels      map[string]string `json:"labels,omitempty"`
	Repository  string            `json:"repository,omitempty"`
	Commit      string            `json:"commit,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
}

var (
	laneRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,95}(/v[1-9][0-9]{0,5})?$`)
	commitRe = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
)

// ValidateLabels checks agent or run labels (ledger.ValidateLabels).
func ValidateLabels(field string, l map[string]string) error { return ledger.ValidateLabels(field, l) }

// ParseLabels parses "k=v" flags into labels.
func ParseLabels(flags []string) (map[string]string, error) {
	out := map[string]string{}
	for _, f := range flags {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want key=value", clip(f))
		}
		out[k] = v
	}
	return out, ValidateLabels("label", out)
}

// Validate checks and normalizes s (lanes deduplicated in order, default
// attempts); a repository, when set, must be a repository name an agent
// can declare (ValidateRepository). Errors are CodeInvalid naming the
// field.
func (s *Spec) Validate() error {
	if len(s.Lanes) == 0 || len(s.Lanes) > 64 {
		return ledger.FieldError("lanes", "1 to 64 lanes required, got %d", len(s.Lanes))
	}
	var lanes []string
	for i, l := range s.Lanes {
		if !laneRe.MatchString(l) {
			return ledger.FieldError(fmt.Sprintf("lanes[%d]", i), "must be a lane name or name/vN, got %q", clip(l))
		}
		if !slices.Contains(lanes, l) {
			lanes = append(lanes, l)
		}
	}
	s.Lanes = lanes
	if !s.Backend.Valid() {
		return ledger.FieldError("backend", "must be one of %s, got %q", ledger.BackendList(), clip(string(s.Backend)))
	}
	if err := ValidateLabels("labels", s.Labels); err != nil {
		return err
	}
	if s.Labels == nil {
		s.Labels = map[string]string{}
	}
	if s.Repository != "" {
		if err := ValidateRepository("repository", s.Repository); err != nil {
			return err
		}
	}
	if s.Commit != "" && !commitRe.MatchString(s.Commit) {
		return ledger.FieldError("commit", "must be a 40- or 64-hex lowercase commit id")
	}
	switch {
	case s.MaxAttempts == 0:
		s.MaxAttempts = 3
	case s.MaxAttempts < 1 || s.MaxAttempts > ledger.MaxRunAttempts:
		return ledger.FieldError("max_attempts", "must be 1 to %d, got %d", ledger.MaxRunAttempts, s.MaxAttempts)
	}
	return nil
}

// Store is the run and agent state over a database handle (SQLite or,
// with the same SQL, PostgreSQL) migrated to schema 9 or later.
type Store struct {
	db  *sql.DB
	now func() time.Time
	// agentMu orders a registration against an approval (LockAgents).
	agentMu sync.Mutex
	// dollar: the driver takes $1, $2, ... placeholders (PostgreSQL); the
	// statements are written with ? (SQLite) and rebound once per call.
	dollar bool
}

// LockAgents takes the store's agent lock and returns its unlock: the
// server holds it from reading a registration to storing it (register)
// and from checking one to appending its approval (approve), so an
// approval is of the registration it checked. It orders callers of this
// Store in one process, not several servers on one database.
func (s *Store) LockAgents() (unlock func()) {
	s.agentMu.Lock()
	return s.agentMu.Unlock
}

// New returns a Store over db, a SQLite handle; now is the clock (nil:
// time.Now).
func New(db *sql.DB, now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{db: db, now: now}
}

// NewPostgres returns a Store over db, a PostgreSQL handle (pgx's
// database/sql driver) migrated to schema 9 or later.
func NewPostgres(db *sql.DB, now func() time.Time) *Store {
	s := New(db, now)
	s.dollar = true
	return s
}

// bind rewrites q's ? placeholders as $1, $2, ... for PostgreSQL. The
// statements of this package hold no ? inside string literals.
func (s *Store) bind(q string) string {
	if !s.dollar {
		return q
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	return b.String()
}

func (s *Store) exec(ctx context.Context, q string, args ...any) (sql.Result, error) {
	return s.db.ExecContext(ctx, s.bind(q), args...)
}

func (s *Store) query(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	return s.db.QueryContext(ctx, s.bind(q), args...)
}

func (s *Store) queryRow(ctx context.Context, q string, args ...any) *sql.Row {
	return s.db.QueryRowContext(ctx, s.bind(q), args...)
}

// Close closes the database handle.
func (s *Store) Close() error { return s.db.Close() }

// ErrLeaseNotHeld is the CodeConflict error of an extend, staging or
// finish that names a lease the caller does not hold (another agent's,
// another attempt's, an expired one, or one of a final run).
var ErrLeaseNotHeld = ledger.Errorf(ledger.CodeConflict, "lease not held: the run's lease belongs to another agent or attempt, or has expired; nothing was recorded")

// LeaseHolder returns the token id a lease id was bound to by ClaimFor
// ("" for a lease bound to none).
func LeaseHolder(lease string) string {
	if _, h, ok := strings.Cut(lease, "."); ok {
		return h
	}
	return ""
}

func newID(prefix string) string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func ms(t time.Time) int64 { return t.UnixMilli() }

func fromMS(v int64) time.Time {
	if v == 0 {
		return time.Time{}
	}
	return time.UnixMilli(v).UTC()
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

const runCols = "id, created_at, updated_at, created_by, state, backend, lanes, labels, repository, commit_id, attempt, max_attempts, agent, lease_id, lease_until, progress, attempts, evidence, outcome_entry, message"

type scanner interface{ Scan(...any) error }

func scanRun(sc scanner) (Run, error) {
	var r Run
	var created, updated, until int64
	var lanes, labels, progress, attempts, evidence, backend string
	if err := sc.Scan(&r.ID, &created, &updated, &r.CreatedBy, &r.State, &backend, &lanes, &labels, &r.Repository, &r.Commit,
		&r.Attempt, &r.MaxAttempts, &r.Agent, &r.LeaseID, &until, &progress, &attempts, &evidence, &r.OutcomeEntry, &r.Message); err != nil {
		return r, err
	}
	r.Backend = ledger.Backend(backend)
	r.CreatedAt, r.UpdatedAt, r.LeaseUntil = fromMS(created), fromMS(updated), fromMS(until)
	for _, p := range []struct {
		s string
		v any
	}{{lanes, &r.Lanes}, {labels, &r.Labels}, {progress, &r.Progress}, {attempts, &r.Attempts}, {evidence, &r.Evidence}} {
		if err := json.Unmarshal([]byte(p.s), p.v); err != nil {
			return r, fmt.Errorf("run %s: decode its state: %w", r.ID, err)
		}
	}
	if Final(r.State) {
		// The last heartbeat's figures of a run that ended would read as a
		// run stopped part-way: a final run's result is its state, attempts
		// and evidence.
		r.Progress = Progress{}
	}
	return r, nil
}

// Create queues a run of spec (validated by the caller with
// Spec.Validate) by the token named by.
func (s *Store) Create(ctx context.Context, spec Spec, by string) (Run, error) {
	now := s.now()
	r := Run{ID: newID("run_"), State: Queued, Backend: spec.Backend, Lanes: spec.Lanes, Labels: spec.Labels,
		Repository: spec.Repository, Commit: spec.Commit, MaxAttempts: spec.MaxAttempts, Attempts: []ledger.RunAttempt{},
		Evidence: []string{}, CreatedBy: by, CreatedAt: fromMS(ms(now)), UpdatedAt: fromMS(ms(now))}
	_, err := s.exec(ctx, `INSERT INTO runs (`+runCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, '', '', 0, ?, '[]', '[]', '', '')`,
		r.ID, ms(now), ms(now), by, Queued, string(r.Backend), mustJSON(r.Lanes), mustJSON(r.Labels), r.Repository, r.Commit, r.MaxAttempts, mustJSON(r.Progress))
	if err != nil {
		return Run{}, fmt.Errorf("queue run: %w", err)
	}
	return r, nil
}

// Get returns run id; CodeNotFound when there is none.
func (s *Store) Get(ctx context.Context, id string) (Run, error) {
	r, err := scanRun(s.queryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return Run{}, ledger.NotFound("no run %q", clip(id))
	}
	return r, err
}

// List returns up to limit runs, newest first; state "" lists every
// state, "active" the queued and active ones.
func (s *Store) List(ctx context.Context, state string, limit int) ([]Run, error) {
	if limit <= 0 || limit > 1000 {
		limit = 100
	}
	q := `SELECT ` + runCols + ` FROM runs`
	var args []any
	switch state {
	case "":
	case "active":
		q += ` WHERE state IN ('queued', 'leased', 'running', 'canceling')`
	default:
		q += ` WHERE state = ?`
		args = append(args, state)
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	args = append(args, limit)
	out, err := s.queryRuns(ctx, q, args...)
	if out == nil {
		out = []Run{}
	}
	return out, err
}

// queryRuns runs query q (columns runCols) and scans every row.
func (s *Store) queryRuns(ctx context.Context, q string, args ...any) ([]Run, error) {
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Run
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// Serves reports whether an agent with backend, labels and commit may
// take run r: same backend, every label of the run present with the same
// value, and the run's commit (when it names one) equal to the agent's.
func Serves(r Run, backend ledger.Backend, labels map[string]string, commit string) bool {
	if r.Backend != backend {
		return false
	}
	for k, v := range r.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return r.Commit == "" || r.Commit == commit
}

// Claim gives the oldest queued run that agent may take (filter reports
// that, Serves plus the token's scope) a lease of ttl: the run's attempt
// is incremented, its state becomes leased. It returns nil when no queued
// run matches, or when agent holds a lease already (an agent runs one run
// at a time). Two claims of one run cannot both win: the update is a
// compare-and-set on (state, attempt). The held-lease check is in the same
// statement, which on SQLite (one writer) makes two claims of one agent
// unable to both win; on PostgreSQL (read committed) the caller serializes
// one agent's claims.
func (s *Store) Claim(ctx context.Context, agent string, filter func(Run) bool, ttl time.Duration) (*Run, error) {
	return s.ClaimFor(ctx, agent, "", filter, ttl)
}

// ClaimFor is Claim with the lease bound to holder (the id of the token
// the agent polled with; "" binds none): the lease id carries it, and
// LeaseHolder gives it back, so that only requests with that token
// extend, stage under or finish the lease.
func (s *Store) ClaimFor(ctx context.Context, agent, holder string, filter func(Run) bool, ttl time.Duration) (*Run, error) {
	if strings.Contains(holder, ".") {
		return nil, fmt.Errorf("claim: holder %q has a dot", holder)
	}
	queued, err := s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state = 'queued' ORDER BY created_at, id LIMIT 200`)
	if err != nil {
		return nil, err
	}
	for _, r := range queued {
		if !filter(r) {
			continue
		}
		now := s.now()
		lease := newID("lease_")
		if holder != "" {
			lease += "." + holder
		}
		res, err := s.exec(ctx, `UPDATE runs SET state = 'leased', attempt = attempt + 1, agent = ?, lease_id = ?, lease_until = ?, updated_at = ?, progress = ?
			WHERE id = ? AND state = 'queued' AND attempt = ?
			AND NOT EXISTS (SELECT 1 FROM runs h WHERE h.agent = ? AND h.state IN ('leased', 'running', 'canceling') AND h.lease_until > ?)`,
			agent, lease, ms(now.Add(ttl)), ms(now), mustJSON(Progress{}), r.ID, r.Attempt, agent, ms(now))
		if err != nil {
			return nil, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			got, err := s.Get(ctx, r.ID)
			return &got, err
		}
	}
	return nil, nil
}

// HeldBy returns the active runs (leased, running, canceling) whose
// lease agent holds now (its end not passed), oldest first.
func (s *Store) HeldBy(ctx context.Context, agent string) ([]Run, error) {
	return s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state IN ('leased', 'running', 'canceling') AND agent = ? AND lease_until > ? ORDER BY created_at, id`, agent, ms(s.now()))
}

// held loads run id and checks that (agent, attempt, lease) holds its
// lease now.
func (s *Store) held(ctx context.Context, id, agent string, attempt int, lease string) (Run, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	if !active(r.State) || r.Agent != agent || r.Attempt != attempt || r.LeaseID != lease || !s.now().Before(r.LeaseUntil) {
		return r, ErrLeaseNotHeld
	}
	return r, nil
}

// Extend extends the lease (agent, attempt, lease) of run id by ttl from
// now and stores progress when not nil (a leased run becomes running). It
// returns the run, whose State is Canceling when a cancel was asked for;
// ErrLeaseNotHeld when the caller does not hold the lease; p.Validate's
// CodeInvalid error (nothing changed) when p is not progress of its lanes.
func (s *Store) Extend(ctx context.Context, id, agent string, attempt int, lease string, p *Progress, ttl time.Duration) (Run, error) {
	r, err := s.held(ctx, id, agent, attempt, lease)
	if err != nil {
		return r, err
	}
	now := s.now()
	state := r.State
	prog := r.Progress
	if p != nil {
		if err := p.Validate(r.Lanes); err != nil {
			return r, err
		}
		prog = *p
		if state == Leased {
			state = Running
		}
	}
	// The lease is checked again in the update: a lease that ran out
	// since the read above is not extended (a claim may have counted on
	// its end).
	res, err := s.exec(ctx, `UPDATE runs SET lease_until = ?, updated_at = ?, progress = ?, state = ?
		WHERE id = ? AND lease_id = ? AND state = ? AND lease_until > ?`, ms(now.Add(ttl)), ms(now), mustJSON(prog), state, id, lease, r.State, ms(now))
	if err != nil {
		return r, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return r, ErrLeaseNotHeld
	}
	return s.Get(ctx, id)
}

// CheckLease returns run id when (agent, attempt, lease) holds its lease
// now, else ErrLeaseNotHeld (see Finish).
func (s *Store) CheckLease(ctx context.Context, id, agent string, attempt int, lease string) (Run, error) {
	return s.held(ctx, id, agent, attempt, lease)
}

// Finish ends the attempt held by lease with final state (Done, Failed or
// Canceled), the evidence ids recorded and the run-outcome entry id.
// attempts is the run's attempts with this one added (as the outcome
// leaf carries them). It is a compare-and-set on the lease: ErrLeaseNotHeld
// when another change came first.
func (s *Store) Finish(ctx context.Context, id, lease, state string, attempts []ledger.RunAttempt, evidence []string, entry, message string) (Run, error) {
	now := s.now()
	res, err := s.exec(ctx, `UPDATE runs SET state = ?, attempts = ?, evidence = ?, outcome_entry = ?, message = ?, lease_until = 0, updated_at = ?
		WHERE id = ? AND lease_id = ? AND state IN ('leased', 'running', 'canceling')`,
		state, mustJSON(attempts), mustJSON(evidence), entry, clipN(message, 1024), ms(now), id, lease)
	if err != nil {
		return Run{}, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return Run{}, ErrLeaseNotHeld
	}
	return s.Get(ctx, id)
}

// Abandon ends the attempt held by lease as attempt (an infrastructure
// failure the agent reported: it could not run it). The run is queued
// again as the next attempt (its progress cleared), or expired when its
// attempts are used up, or canceled when it was canceling.
// ErrLeaseNotHeld when the lease changed.
func (s *Store) Abandon(ctx context.Context, id, lease string, attempt ledger.RunAttempt) (Run, error) {
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	if r.LeaseID != lease || !active(r.State) {
		return r, ErrLeaseNotHeld
	}
	att := append(slices.Clone(r.Attempts), attempt)
	next, agent := Queued, ""
	switch {
	case r.State == Canceling:
		next, agent = Canceled, r.Agent
	case r.Attempt >= r.MaxAttempts:
		next, agent = Expired, r.Agent
	}
	res, err := s.exec(ctx, `UPDATE runs SET state = ?, attempts = ?, agent = ?, lease_id = '', lease_until = 0, updated_at = ?, message = ?, progress = ?
		WHERE id = ? AND lease_id = ? AND state = ?`, next, mustJSON(att), agent, ms(s.now()), clipN(attempt.Reason, 1024), mustJSON(Progress{}), id, lease, r.State)
	if err != nil {
		return r, err
	}
	if n, _ := res.RowsAffected(); n != 1 {
		return r, ErrLeaseNotHeld
	}
	return s.Get(ctx, id)
}

// Adopt makes an active run final as its outcome leaf o (entry id entry)
// says: state, agent, attempts and evidence. It is for a run whose
// outcome reached the log while its row did not change (a crash between
// the two).
func (s *Store) Adopt(ctx context.Context, o ledger.RunOutcome, entry string) error {
	_, err := s.exec(ctx, `UPDATE runs SET state = ?, agent = ?, attempts = ?, evidence = ?, outcome_entry = ?, lease_id = '', lease_until = 0, updated_at = ?
		WHERE id = ? AND state IN ('queued', 'leased', 'running', 'canceling')`,
		o.State, o.Agent, mustJSON(o.Attempts), mustJSON(o.Evidence), entry, ms(s.now()), o.Run)
	return err
}

// SetOutcome stores the run-outcome entry id of a final run.
func (s *Store) SetOutcome(ctx context.Context, id, entry string) error {
	_, err := s.exec(ctx, `UPDATE runs SET outcome_entry = ?, updated_at = ? WHERE id = ?`, entry, ms(s.now()), id)
	return err
}

// Cancel asks run id to stop: a queued run becomes canceled at once
// (final reports it: the caller appends its outcome), an active one
// canceling (its agent sees it on the next heartbeat and stops at the next
// case boundary). A run already final or canceling is answered as it is.
func (s *Store) Cancel(ctx context.Context, id string) (r Run, final bool, err error) {
	for range 5 {
		r, err := s.Get(ctx, id)
		if err != nil {
			return r, false, err
		}
		var next string
		switch r.State {
		case Queued:
			next = Canceled
		case Leased, Running:
			next = Canceling
		default:
			return r, false, nil
		}
		res, err := s.exec(ctx, `UPDATE runs SET state = ?, updated_at = ? WHERE id = ? AND state = ? AND attempt = ?`, next, ms(s.now()), id, r.State, r.Attempt)
		if err != nil {
			return r, false, err
		}
		if n, _ := res.RowsAffected(); n == 1 {
			got, err := s.Get(ctx, id)
			return got, next == Canceled, err
		}
	}
	return Run{}, false, ledger.Errorf(ledger.CodeConflict, "run %s changed under the cancel five times: try again", id)
}

// ExpireLeases ends every lease past its end: the attempt is recorded as
// an infrastructure failure ("lease expired": the agent stopped extending
// it), never a failed lane. The run goes back to the queue as the next
// attempt (its progress cleared), unless it was canceling (then it is canceled) or its attempts
// are used up (then it is expired). It returns the runs that became final
// (the caller appends their outcomes) and how many were requeued.
func (s *Store) ExpireLeases(ctx context.Context) (final []Run, requeued int, err error) {
	now := s.now()
	due, err := s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state IN ('leased', 'running', 'canceling') AND lease_until <= ?`, ms(now))
	if err != nil {
		return nil, 0, err
	}
	for _, r := range due {
		att := append(slices.Clone(r.Attempts), ledger.RunAttempt{Attempt: r.Attempt, Agent: r.Agent, Outcome: "infrastructure",
			Reason: fmt.Sprintf("lease expired at %s: agent %s stopped extending it", r.LeaseUntil.Format(time.RFC3339Nano), r.Agent), At: now.UTC()})
		next, agent := Queued, ""
		switch {
		case r.State == Canceling:
			next, agent = Canceled, r.Agent
		case r.Attempt >= r.MaxAttempts:
			next, agent = Expired, r.Agent
		}
		res, err := s.exec(ctx, `UPDATE runs SET state = ?, attempts = ?, agent = ?, lease_id = '', lease_until = 0, updated_at = ?, progress = ?
			WHERE id = ? AND lease_id = ? AND state = ? AND lease_until <= ?`, next, mustJSON(att), agent, ms(now), mustJSON(Progress{}), r.ID, r.LeaseID, r.State, ms(now))
		if err != nil {
			return final, requeued, err
		}
		if n, _ := res.RowsAffected(); n != 1 {
			continue
		}
		if next == Queued {
			requeued++
			continue
		}
		got, err := s.Get(ctx, r.ID)
		if err != nil {
			return final, requeued, err
		}
		final = append(final, got)
	}
	return final, requeued, nil
}

// Unrecorded returns the final runs whose outcome leaf is not appended
// yet (a crash between the state change and the append), oldest first.
func (s *Store) Unrecorded(ctx context.Context) ([]Run, error) {
	return s.queryRuns(ctx, `SELECT `+runCols+` FROM runs WHERE state IN ('done', 'failed', 'canceled', 'expired') AND outcome_entry = '' ORDER BY created_at`)
}

// Agent is an agent's registration and last heartbeat. Spec is the
// hardware it reported (backend, device model, memory, driver, runner
// build, as the agent's probe found them), Health the last health
// probe's verdict ("ok" or what failed), CurrentRun the run it holds.
// Approved is set by the caller from the runner-key registry.
type Agent struct {
	Name         string            `json:"name"`
	KeyID        string            `json:"key_id"`
	PublicKey    string            `json:"public_key"`
	Backend      ledger.Backend    `json:"backend"`
	Labels       map[string]string `json:"labels"`
	Spec         AgentSpec         `json:"spec"`
	Health       string            `json:"health"`
	RegisteredAt time.Time         `json:"registered_at"`
	LastSeen     time.Time         `json:"last_seen"`
	CurrentRun   string            `json:"current_run,omitempty"`
	Approved     bool              `json:"approved"`
	// SpecDigest is SpecDigestOf(a), set in the server's answers (not
	// stored): the value `ledger agent approve --spec` takes.
	SpecDigest string `json:"spec_digest,omitempty"`
}

// AgentSpec is what an agent declares about itself at registration: the
// lanes in its own configuration (it takes only runs of these), the
// subject its build is of, and the hardware its health probe found.
type AgentSpec struct {
	Lanes       []string           `json:"lanes"`
	Repository  string             `json:"repository,omitempty"`
	Commit      string             `json:"commit,omitempty"`
	Device      ledger.Device      `json:"device"`
	DeviceCount int                `json:"device_count,omitempty"`
	MemoryBytes uint64             `json:"memory_bytes,omitempty"`
	CPUs        int                `json:"cpus,omitempty"`
	Runner      ledger.RunnerBuild `json:"runner"`
	Host        string             `json:"host,omitempty"`
}

const agentCols = "name, key_id, public_key, backend, labels, spec, health, registered_at, last_seen, current_run"

func scanAgent(sc scanner) (Agent, error) {
	var a Agent
	var backend, labels, spec string
	var reg, seen int64
	if err := sc.Scan(&a.Name, &a.KeyID, &a.PublicKey, &backend, &labels, &spec, &a.Health, &reg, &seen, &a.CurrentRun); err != nil {
		return a, err
	}
	a.Backend, a.RegisteredAt, a.LastSeen = ledger.Backend(backend), fromMS(reg), fromMS(seen)
	if err := json.Unmarshal([]byte(labels), &a.Labels); err != nil {
		return a, err
	}
	if err := json.Unmarshal([]byte(spec), &a.Spec); err != nil {
		return a, err
	}
	return a, nil
}

// Register stores agent a's registration: a new name is inserted, and a
// name registered with a's key (an agent restarting) has its registration
// replaced, its registration and heartbeat times set to now. A name
// registered with another key is refused with CodeConflict naming the
// stored key id and `ledger agent remove` (nothing is changed): only an
// admin's RemoveAgent frees it. One statement decides, so two concurrent
// registrations of one name with different keys cannot both be stored.
func (s *Store) Register(ctx context.Context, a Agent) error {
	now := ms(s.now())
	res, err := s.exec(ctx, `UPDATE agents SET public_key = ?, backend = ?, labels = ?, spec = ?, health = ?, registered_at = ?, last_seen = ?, current_run = '' WHERE name = ? AND key_id = ?`,
		a.PublicKey, string(a.Backend), mustJSON(a.Labels), mustJSON(a.Spec), a.Health, now, now, a.Name, a.KeyID)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	res, err = s.exec(ctx, `INSERT INTO agents (`+agentCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, '') ON CONFLICT (name) DO NOTHING`,
		a.Name, a.KeyID, a.PublicKey, string(a.Backend), mustJSON(a.Labels), mustJSON(a.Spec), a.Health, now, now)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil || n == 1 {
		return err
	}
	cur, err := s.GetAgent(ctx, a.Name)
	if err != nil {
		return err
	}
	return &ledger.Error{Code: ledger.CodeConflict, Field: "public_key", Message: fmt.Sprintf(
		"agent %q is registered with another key (%s): a registration is never taken over; an admin removes it first (`ledger agent remove %s`), then this agent registers again", a.Name, cur.KeyID, a.Name)}
}

// RemoveAgent deletes agent name's registration and reports whether there
// was one. It changes nothing in the log (web's RemoveAgent revokes an
// approved key).
func (s *Store) RemoveAgent(ctx context.Context, name string) (bool, error) {
	res, err := s.exec(ctx, `DELETE FROM agents WHERE name = ?`, name)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n > 0, err
}

// GetAgent returns agent name's registration; CodeNotFound when none.
func (s *Store) GetAgent(ctx context.Context, name string) (Agent, error) {
	a, err := scanAgent(s.queryRow(ctx, `SELECT `+agentCols+` FROM agents WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		return a, ledger.NotFound("no agent %q registered", clip(name))
	}
	return a, err
}

// Agents returns every registered agent, by name.
func (s *Store) Agents(ctx context.Context) ([]Agent, error) {
	rows, err := s.query(ctx, `SELECT `+agentCols+` FROM agents ORDER BY name`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := []Agent{}
	for rows.Next() {
		a, err := scanAgent(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, rows.Err()
}

// Seen records a heartbeat of agent name: now, its health when not "",
// and the run it holds ("" none).
func (s *Store) Seen(ctx context.Context, name, health, run string) error {
	if health == "" {
		_, err := s.exec(ctx, `UPDATE agents SET last_seen = ?, current_run = ? WHERE name = ?`, ms(s.now()), run, name)
		return err
	}
	_, err := s.exec(ctx, `UPDATE agents SET last_seen = ?, current_run = ?, health = ? WHERE name = ?`, ms(s.now()), run, CleanHealth(health), name)
	return err
}

// SortedLabels renders labels as "k=v,k=v" sorted by key.
func SortedLabels(l map[string]string) string {
	keys := slices.Collect(maps.Keys(l))
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + l[k]
	}
	return strings.Join(parts, ",")
}

func clip(s string) string { return clipN(s, 64) }

func clipN(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
