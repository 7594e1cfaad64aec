package sqlstore

import (
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
