package web

import (
	"context"
	"sync"
	"time"
)

// freshCache shares the answers that cost the most CPU to build (a
// release's readiness, the overview, the release page's data) among
// concurrent readers. A value is computed from the log at a checkpoint
// size and keyed by a string; a reader that saw checkpoint size n on
// arrival gets a value computed at a size of at least n (so a client that
// appended and then asks sees its append) and younger than maxAge (values
// also depend on the clock: waivers expire).
//
// Per key at most one computation runs at a time. A reader that arrives
// while one runs at a size of at least its own joins it; any other reader
// waits for the next computation, which starts when the running one ends
// (and at least minGap after it started), at the then latest checkpoint,
// and answers every reader that queued for it. Under a stream of appends
// and readers the computations of a key therefore run back to back rather
// than once per reader: the CPU they take is bounded by the number of keys
// and minGap, not by the number of readers, and the single writer keeps
// the rest. A reader waits at most about minGap plus two computations.
//
// Computations run detached from the request that started them (a caller
// that gives up does not cancel what others wait for); an error is handed
// to the readers of that computation and not cached. Values are shared and
// must not be modified. Safe for concurrent use.
type freshCache[V any] struct {
	maxAge, minGap time.Duration
	// now is the clock values are computed for (Config.Now); latest reads
	// the current checkpoint size.
	now    func() time.Time
	latest func(context.Context) (uint64, error)

	mu   sync.Mutex
	keys map[string]*freshKey[V]
}

// freshKey is one key's newest value and its computations.
type freshKey[V any] struct {
	have bool
	val  V
	size uint64
	at   time.Time
	// running is the computation in progress (nil: none); next the one
	// readers queued for after it (nil: none yet).
	running, next *freshFlight[V]
}

// freshFlight is one computation. started, size and at are set under the
// cache's lock when it starts; val and err are written before done is
// closed and read only after.
type freshFlight[V any] struct {
	done    chan struct{}
	started bool
	size    uint64
	at      time.Time
	begun   time.Time // wall clock, for minGap
	val     V
	err     error
}

// get returns key's value at a checkpoint no older than the latest one at
// the call, computing it with compute(ctx, size, now) when needed (size is
// the checkpoint size to read at, now the clock to judge by). Errors are
// latest's, compute's, or ctx's when it ends first.
func (c *freshCache[V]) get(ctx context.Context, key string, compute func(ctx context.Context, size uint64, now time.Time) (V, error)) (V, error) {
	var zero V
	size, err := c.latest(ctx)
	if err != nil {
		return zero, err
	}
	now := c.now()
	c.mu.Lock()
	if c.keys == nil {
		c.keys = map[string]*freshKey[V]{}
	}
	k := c.keys[key]
	if k == nil {
		k = &freshKey[V]{}
		c.keys[key] = k
	}
	if age := now.Sub(k.at); k.have && k.size >= size && age >= 0 && age < c.maxAge {
		v := k.val
		c.mu.Unlock()
		return v, nil
	}
	var f *freshFlight[V]
	switch {
	case k.running != nil && k.running.started && k.running.size >= size:
		f = k.running
	case k.running != nil:
		if k.next == nil {
			k.next = &freshFlight[V]{done: make(chan struct{})}
		}
		f = k.next
	default:
		f = &freshFlight[V]{done: make(chan struct{}), started: true, size: size, at: now, begun: time.Now()}
		k.running = f
		go c.run(key, k, f, compute)
	}
	c.mu.Unlock()
	var done bool
	waiting(ctx, func() {
		select {
		case <-f.done:
			done = true
		case <-ctx.Done():
		}
	})
	if !done {
		return zero, ctx.Err()
	}
	return f.val, f.err
}

// run computes f, then each computation readers queued after it, until
// none is queued.
//
// A key whose computations only failed and that no reader waits for is
// dropped, so that requests naming things that do not exist (unknown
// release versions) leave nothing behind.
func (c *freshCache[V]) run(key string, k *freshKey[V], f *freshFlight[V], compute func(context.Context, uint64, time.Time) (V, error)) {
	ctx := context.Background()
	for f != nil {
		if f.err == nil {
			f.val, f.err = compute(ctx, f.size, f.at)
		}
		c.mu.Lock()
		if f.err == nil && (!k.have || f.size >= k.size) {
			k.have, k.val, k.size, k.at = true, f.val, f.size, f.at
		}
		close(f.done)
		next := k.next
		k.next, k.running = nil, next
		if next == nil && !k.have && c.keys[key] == k {
			delete(c.keys, key)
		}
		c.mu.Unlock()
		if next == nil {
			return
		}
		if wait := c.minGap - time.Since(f.begun); wait > 0 {
			time.Sleep(wait)
		}
		size, err := c.latest(ctx)
		c.mu.Lock()
		next.started, next.size, next.at, next.begun, next.err = true, size, c.now(), time.Now(), err
		c.mu.Unlock()
		f = next
	}
}
