package sqlstore

import (
	"fmt"
	"log/slog"
	"time"
)

// The idempotency table's defaults in both drivers: how long a key's
// answer is replayed, and how many keys it holds at most.
const (
	DefaultIdempotencyTTL = 24 * time.Hour
	DefaultIdempotencyMax = 100_000
)

// FillDefaults sets the options both drivers have where they are unset:
// logger slog.Default(), now time.Now, ttl (not positive)
// DefaultIdempotencyTTL, max (not positive) DefaultIdempotencyMax.
func FillDefaults(logger **slog.Logger, now *func() time.Time, ttl *time.Duration, max *int) {
	if *logger == nil {
		*logger = slog.Default()
	}
	if *now == nil {
		*now = time.Now
	}
	if *ttl <= 0 {
		*ttl = DefaultIdempotencyTTL
	}
	if *max <= 0 {
		*max = DefaultIdempotencyMax
	}
}

// NeedsMigration decides what an open does with a database at schema
// version cur when the ledger knows versions up to latest: true to
// migrate it, false to use it as it is. Errors refuse a newer schema (its
// writer would not keep what newer migrations added) and, when readOnly,
// an older one, the message ending with hint (how to migrate safely).
func NeedsMigration(cur, latest int64, readOnly bool, hint string) (bool, error) {
	switch {
	case cur > latest:
		return false, fmt.Errorf("open store: database schema version %d is newer than this ledger knows (%d): use the ledger version that wrote it, or a newer one", cur, latest)
	case cur < latest && readOnly:
		return false, fmt.Errorf("open store: database schema version %d is older than this ledger's (%d): run `ledger migrate`%s", cur, latest, hint)
	}
	return cur < latest, nil
}
