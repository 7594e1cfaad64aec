package runs

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
)

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
