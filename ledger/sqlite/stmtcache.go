package sqlite

import (
	"context"
	"database/sql"
	"sync"
)

// stmtDB is the read pool with a cache of prepared statements keyed by
// query text. modernc.org/sqlite does not cache statements itself, and
// preparing (parsing) a query costs more than running a point lookup, so
// the hot read paths (proofs, checkpoints, token checks) reuse statements.
// A *sql.Stmt prepared on a *sql.DB is safe for concurrent use; database/sql
// re-prepares it on each pooled connection as needed. The cache holds at
// most maxCached statements; other queries are run unprepared.
type stmtDB struct {
	*sql.DB
	mu    sync.RWMutex
	stmts map[string]*sql.Stmt
	nodes *nodeCache // recently committed tree nodes (nil: none)
}

const maxCached = 256

func newStmtDB(db *sql.DB) *stmtDB {
	return &stmtDB{DB: db, stmts: map[string]*sql.Stmt{}, nodes: newNodeCache(1 << 17)}
}

func (d *stmtDB) stmt(ctx context.Context, q string) *sql.Stmt {
	d.mu.RLock()
	st := d.stmts[q]
	d.mu.RUnlock()
	if st != nil {
		return st
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if st = d.stmts[q]; st != nil {
		return st
	}
	if len(d.stmts) >= maxCached {
		return nil
	}
	st, err := d.DB.PrepareContext(ctx, q)
	if err != nil {
		return nil // let the unprepared call report the error
	}
	d.stmts[q] = st
	return st
}

// QueryContext runs q through a cached prepared statement.
func (d *stmtDB) QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error) {
	if st := d.stmt(ctx, q); st != nil {
		return st.QueryContext(ctx, args...)
	}
	return d.DB.QueryContext(ctx, q, args...)
}

// QueryRowContext runs q through a cached prepared statement.
func (d *stmtDB) QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row {
	if st := d.stmt(ctx, q); st != nil {
		return st.QueryRowContext(ctx, args...)
	}
	return d.DB.QueryRowContext(ctx, q, args...)
}

// Close closes the cached statements and the pool.
func (d *stmtDB) Close() error {
	d.mu.Lock()
	for _, st := range d.stmts {
		st.Close()
	}
	d.stmts = map[string]*sql.Stmt{}
	d.mu.Unlock()
	return d.DB.Close()
}
