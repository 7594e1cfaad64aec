package runs

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

// Store is the run and agent state over a database handle (SQLite or,
// with the same SQL, PostgreSQL) migrated to schema 10 or later (the
// runs' selection column: migration 00010).
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
// database/sql driver) migrated to schema 10 or later.
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

const runCols = "id, created_at, updated_at, created_by, state, backend, lanes, labels, repository, commit_id, attempt, max_attempts, agent, lease_id, lease_until, progress, attempts, evidence, outcome_entry, message, selection"

type scanner interface{ Scan(...any) error }

func scanRun(sc scanner) (Run, error) {
	var r Run
	var created, updated, until int64
	var lanes, labels, progress, attempts, evidence, backend, selection string
	if err := sc.Scan(&r.ID, &created, &updated, &r.CreatedBy, &r.State, &backend, &lanes, &labels, &r.Repository, &r.Commit,
		&r.Attempt, &r.MaxAttempts, &r.Agent, &r.LeaseID, &until, &progress, &attempts, &evidence, &r.OutcomeEntry, &r.Message, &selection); err != nil {
		return r, err
	}
	r.Backend = ledger.Backend(backend)
	r.CreatedAt, r.UpdatedAt, r.LeaseUntil = fromMS(created), fromMS(updated), fromMS(until)
	for _, p := range []struct {
		s string
		v any
	}{{lanes, &r.Lanes}, {labels, &r.Labels}, {progress, &r.Progress}, {attempts, &r.Attempts}, {evidence, &r.Evidence}, {selection, &r.CaseSelection}} {
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
	r := Run{ID: newID("run_"), State: Queued, Backend: spec.Backend, Lanes: spec.Lanes, Labels: spec.Labels, CaseSelection: spec.CaseSelection,
		Repository: spec.Repository, Commit: spec.Commit, MaxAttempts: spec.MaxAttempts, Attempts: []ledger.RunAttempt{},
		Evidence: []string{}, CreatedBy: by, CreatedAt: fromMS(ms(now)), UpdatedAt: fromMS(ms(now))}
	_, err := s.exec(ctx, `INSERT INTO runs (`+runCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0, ?, '', '', 0, ?, '[]', '[]', '', '', ?)`,
		r.ID, ms(now), ms(now), by, Queued, string(r.Backend), mustJSON(r.Lanes), mustJSON(r.Labels), r.Repository, r.Commit, r.MaxAttempts, mustJSON(r.Progress),
		mustJSON(r.CaseSelection))
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
