package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/evidence-ledger/ledger/ledger"
)

// Queryer is what a query runs on: a *sql.DB, *sql.Tx, *sql.Conn or a
// driver's statement cache.
type Queryer interface {
	QueryContext(ctx context.Context, q string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, q string, args ...any) *sql.Row
}

// Scanner is a *sql.Row or *sql.Rows.
type Scanner interface{ Scan(dest ...any) error }

// Dialect is what differs between the SQL engines behind the drivers. A
// Dialect is set up once by its driver and never modified; its methods are
// safe for concurrent use.
type Dialect struct {
	// Numbered spells the n-th placeholder "$n" (PostgreSQL) instead of
	// "?" (SQLite).
	Numbered bool
	// True is the engine's literal for a condition that always holds.
	True string
	// Collate follows each placeholder of a prefix bound so that strings
	// compare bytewise whatever the database's collation ("" in SQLite,
	// whose default BINARY collation already does).
	Collate string
	// UnsignedIndex scans index and size columns straight into uint64 (the
	// SQLite driver's conversion); otherwise they scan as int64.
	UnsignedIndex bool
	// Unstorable reports whether any of vs is a string no stored text can
	// equal (PostgreSQL's TEXT holds no NUL and no invalid UTF-8), so that a
	// filter on it matches nothing instead of failing the query; nil: none.
	Unstorable func(vs ...string) bool
	// Engine translates an error that is the engine's own (a lost
	// connection, a full disk) for op, returning nil for any other; nil:
	// none are.
	Engine func(op string, err error) error
	// Lost translates a lost connection during op and returns any other
	// error as it is; nil: errors are returned as they are.
	Lost func(op string, err error) error

	rebound sync.Map // statement with "?" -> statement with "$n"
}

// SQL returns q, written with "?" placeholders, in the dialect's
// spelling. q must hold no "?" inside a string literal.
func (d *Dialect) SQL(q string) string {
	if !d.Numbered {
		return q
	}
	if v, ok := d.rebound.Load(q); ok {
		return v.(string)
	}
	var b strings.Builder
	n := 0
	for i := 0; i < len(q); i++ {
		if q[i] == '?' {
			n++
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(n))
			continue
		}
		b.WriteByte(q[i])
	}
	out := b.String()
	d.rebound.Store(q, out)
	return out
}

// unstorable reports whether a filter on vs matches nothing (Unstorable).
func (d *Dialect) unstorable(vs ...string) bool {
	return d.Unstorable != nil && d.Unstorable(vs...)
}

// lost applies Lost to err.
func (d *Dialect) lost(op string, err error) error {
	if d.Lost == nil || err == nil {
		return err
	}
	return d.Lost(op, err)
}

// Err translates database errors into ledger errors, in one place: nil
// stays nil, a ledger error and a cancelled or expired context pass
// through, sql.ErrNoRows is CodeNotFound, the engine's own errors are
// translated by Engine, a full disk is ledger.StorageFull and anything
// else is CodeInternal naming op.
func (d *Dialect) Err(op string, err error) error {
	if err == nil {
		return nil
	}
	var le *ledger.Error
	if errors.As(err, &le) {
		return err
	}
	if errors.Is(err, sql.ErrNoRows) {
		return ledger.NotFound("%s: not found", op)
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if d.Engine != nil {
		if e := d.Engine(op, err); e != nil {
			return e
		}
	}
	if ledger.IsStorageFull(err) {
		return ledger.StorageFull(op, err)
	}
	return &ledger.Error{Code: ledger.CodeInternal, Message: op + ": " + err.Error(), Err: err}
}
