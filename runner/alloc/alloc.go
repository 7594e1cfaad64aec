package alloc

import (
	"container/list"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
)

// Buffer is one piece of raw backend memory. Addr is the backend's address
// (a host pointer for CPU memory, a device pointer for CUDA), Size its
// length in bytes, Host the host-visible bytes (nil for device memory).
// A Size of 0 is the null buffer: it holds no memory.
type Buffer struct {
	Addr uintptr
	Size int
	Host []byte
}

// Raw is a backend's raw allocation: Alloc returns n > 0 bytes of fresh
// memory (or an error), Free returns it. Implementations must be safe for
// concurrent use; the allocator calls them under its lock.
type Raw interface {
	Alloc(n int) (Buffer, error)
	Free(b Buffer) error
}

// Options configure an Allocator. MemoryLimit (bytes, > 0) bounds active
// memory; CacheLimit bounds cached memory, and 0 means the rule set's
// default (DefaultCacheLimit).
type Options struct {
	Rules       RuleSet
	MemoryLimit int
	CacheLimit  int
}

// Errors of Malloc and Free.
var (
	ErrMemoryLimit = errors.New("memory limit exceeded")
	ErrUnknown     = errors.New("buffer not allocated by this allocator (or already freed)")
)

type cached struct {
	buf  Buffer
	elem *list.Element // in lru
}

// Allocator is a caching allocator over a Raw backend. See the package doc.
// All methods are safe for concurrent use.
type Allocator struct {
	raw   Raw
	rules RuleSet

	mu          sync.Mutex
	memoryLimit int
	cacheLimit  int
	live        map[uintptr]int   // addr -> size of handed-out buffers
	bySize      map[int][]*cached // size -> cached buffers, oldest first
	sizes       []int             // sorted distinct sizes in bySize
	lru         *list.List        // *cached, least recently freed first
	// The counters are written under mu but stored in atomics so that the
	// lockless single-counter getters are data-race free (and still
	// incoherent with each other).
	active, cache, peak      atomic.Int64
	rawBytes                 atomic.Int64
	liveCount, cachedCount   atomic.Int64
	rawCount                 atomic.Int64
	fresh, reuses, evictions atomic.Int64
	memLimitA, cacheLimitA   atomic.Int64
}

// New returns an allocator over raw with the given options.
func New(raw Raw, o Options) (*Allocator, error) {
	if raw == nil {
		return nil, fmt.Errorf("alloc: nil raw allocator")
	}
	if !o.Rules.Valid() {
		return nil, fmt.Errorf("alloc: invalid rule set %d", uint8(o.Rules))
	}
	if o.MemoryLimit <= 0 {
		return nil, fmt.Errorf("alloc: memory limit must be > 0, got %d", o.MemoryLimit)
	}
	if o.CacheLimit < 0 {
		return nil, fmt.Errorf("alloc: cache limit must be >= 0, got %d", o.CacheLimit)
	}
	if o.CacheLimit == 0 {
		o.CacheLimit = o.Rules.DefaultCacheLimit(o.MemoryLimit)
	}
	a := &Allocator{raw: raw, rules: o.Rules, memoryLimit: o.MemoryLimit, cacheLimit: o.CacheLimit,
		live: map[uintptr]int{}, bySize: map[int][]*cached{}, lru: list.New()}
	a.memLimitA.Store(int64(o.MemoryLimit))
	a.cacheLimitA.Store(int64(o.CacheLimit))
	return a, nil
}

// Rules returns the allocator's rule set.
func (a *Allocator) Rules() RuleSet { return a.rules }

// Malloc returns a buffer of at least n bytes: a cached buffer when the
// reuse rule allows (smallest cached length L >= rounded n with
// L < min(2r, r+2*page)), otherwise fresh raw memory of the rounded size.
// A rounded size of 0 returns the null buffer without touching the
// backend. Errors: negative n; ErrOverflow when rounding overflows;
// ErrMemoryLimit when active + rounded would exceed the memory limit after
// evicting the whole cache; the backend's error. On error nothing is
// allocated and no counter changes.
func (a *Allocator) Malloc(n int) (buf Buffer, err error) {
	r, err := a.rules.Round(n)
	if err != nil {
		return Buffer{}, fmt.Errorf("malloc %d: %w", n, err)
	}
	if r == 0 {
		return Buffer{}, nil
	}
	limit, err := a.rules.reuseLimit(r)
	if err != nil {
		return Buffer{}, fmt.Errorf("malloc %d: %w", n, err)
	}
	var released []Buffer
	a.mu.Lock()
	defer func() {
		a.mu.Unlock()
		if ferr := a.freeRaw(released); ferr != nil && err == nil {
			err = ferr
		}
	}()
	if c := a.takeCached(r, limit); c != nil {
		a.reuses.Add(1)
		a.handOut(c.buf)
		return c.buf, nil
	}
	if r > a.memoryLimit || int(a.active.Load()) > a.memoryLimit-r {
		return Buffer{}, fmt.Errorf("malloc %d (rounded %d) with %d active: %w (limit %d)", n, r, a.active.Load(), ErrMemoryLimit, a.memoryLimit)
	}
	// Make room: active + cache + r must fit in the memory limit.
	for a.cache.Load() > 0 && int(a.active.Load()+a.cache.Load()) > a.memoryLimit-r {
		released = append(released, a.evictOldest())
	}
	b, err := a.raw.Alloc(r)
	if err != nil {
		return Buffer{}, fmt.Errorf("malloc %d: raw alloc: %w", n, err)
	}
	if b.Size != r {
		_ = a.raw.Free(b)
		return Buffer{}, fmt.Errorf("malloc %d: backend returned %d bytes for %d", n, b.Size, r)
	}
	if _, dup := a.live[b.Addr]; dup {
		return Buffer{}, fmt.Errorf("malloc %d: backend returned a live address %#x", n, b.Addr)
	}
	a.rawBytes.Add(int64(r))
	a.rawCount.Add(1)
	a.fresh.Add(1)
	a.handOut(b)
	return b, nil
}

// handOut records b as live; a.mu is held.
func (a *Allocator) handOut(b Buffer) {
	a.live[b.Addr] = b.Size
	a.liveCount.Add(1)
	act := a.active.Add(int64(b.Size))
	if act > a.peak.Load() {
		a.peak.Store(act)
	}
}

// takeCached removes and returns the smallest cached buffer with
// r <= size < limit, or nil; a.mu is held.
func (a *Allocator) takeCached(r, limit int) *cached {
	i := sort.SearchInts(a.sizes, r)
	if i == len(a.sizes) || a.sizes[i] >= limit {
		return nil
	}
	size := a.sizes[i]
	c := a.bySize[size][0]
	a.removeCached(c)
	return c
}

// removeCached unlinks c from the cache structures and counters; a.mu is
// held.
func (a *Allocator) removeCached(c *cached) {
	size := c.buf.Size
	list := a.bySize[size]
	for j, x := range list {
		if x == c {
			list = append(list[:j], list[j+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(a.bySize, size)
		i := sort.SearchInts(a.sizes, size)
		a.sizes = append(a.sizes[:i], a.sizes[i+1:]...)
	} else {
		a.bySize[size] = list
	}
	a.lru.Remove(c.elem)
	a.cachedCount.Add(-1)
	a.cache.Add(-int64(size))
}

// evictOldest removes the least recently freed cached buffer from the
// cache and the raw counters and returns it; a.mu is held. The caller
// hands it back to the backend (freeRaw) after releasing the lock, so slow
// unmapping does not stall other threads; the counters are already
// consistent.
func (a *Allocator) evictOldest() Buffer {
	c := a.lru.Front().Value.(*cached)
	a.removeCached(c)
	a.rawCount.Add(-1)
	a.rawBytes.Add(-int64(c.buf.Size))
	a.evictions.Add(1)
	return c.buf
}

// freeRaw returns evicted buffers to the backend; a.mu is not held.
func (a *Allocator) freeRaw(bufs []Buffer) error {
	var first error
	for _, b := range bufs {
		if err := a.raw.Free(b); err != nil && first == nil {
			first = fmt.Errorf("evict %d bytes: raw free: %w", b.Size, err)
		}
	}
	return first
}

// Free returns b to the cache (the null buffer is ignored), then evicts
// least recently used cached buffers while the cache exceeds the cache
// limit. It returns ErrUnknown for a buffer that is not live.
func (a *Allocator) Free(b Buffer) error {
	if b.Size == 0 && b.Addr == 0 {
		return nil
	}
	var released []Buffer
	a.mu.Lock()
	size, ok := a.live[b.Addr]
	if !ok || size != b.Size {
		a.mu.Unlock()
		return fmt.Errorf("free %#x (%d bytes): %w", b.Addr, b.Size, ErrUnknown)
	}
	delete(a.live, b.Addr)
	a.liveCount.Add(-1)
	a.active.Add(-int64(size))
	c := &cached{buf: b}
	c.elem = a.lru.PushBack(c)
	i := sort.SearchInts(a.sizes, size)
	if i == len(a.sizes) || a.sizes[i] != size {
		a.sizes = append(a.sizes, 0)
		copy(a.sizes[i+1:], a.sizes[i:])
		a.sizes[i] = size
	}
	a.bySize[size] = append(a.bySize[size], c)
	a.cachedCount.Add(1)
	a.cache.Add(int64(size))
	for int(a.cache.Load()) > a.cacheLimit {
		released = append(released, a.evictOldest())
	}
	a.mu.Unlock()
	return a.freeRaw(released)
}

// ClearCache releases every cached buffer to the backend.
func (a *Allocator) ClearCache() error {
	var released []Buffer
	a.mu.Lock()
	for a.lru.Len() > 0 {
		released = append(released, a.evictOldest())
	}
	a.mu.Unlock()
	return a.freeRaw(released)
}

// SetMemoryLimit sets the memory limit (bytes, > 0) and returns the old
// one. It does not release memory already active.
func (a *Allocator) SetMemoryLimit(n int) (int, error) {
	if n <= 0 {
		return 0, fmt.Errorf("memory limit must be > 0, got %d", n)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	old := a.memoryLimit
	a.memoryLimit = n
	a.memLimitA.Store(int64(n))
	return old, nil
}

// SetCacheLimit sets the cache limit (bytes, >= 0), evicts down to it, and
// returns the old one.
func (a *Allocator) SetCacheLimit(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("cache limit must be >= 0, got %d", n)
	}
	var released []Buffer
	a.mu.Lock()
	old := a.cacheLimit
	a.cacheLimit = n
	a.cacheLimitA.Store(int64(n))
	for int(a.cache.Load()) > n {
		released = append(released, a.evictOldest())
	}
	a.mu.Unlock()
	return old, a.freeRaw(released)
}

// ResetPeak sets the peak counter to 0 (it then tracks active again from
// the next allocation).
func (a *Allocator) ResetPeak() {
	a.mu.Lock()
	a.peak.Store(0)
	a.mu.Unlock()
}

// Close releases the cache. Live buffers stay the caller's to Free; Close
// reports an error naming how many are still live.
func (a *Allocator) Close() error {
	if err := a.ClearCache(); err != nil {
		return err
	}
	if n := a.liveCount.Load(); n > 0 {
		return fmt.Errorf("alloc: %d buffers still live at close", n)
	}
	return nil
}

// Snapshot is a coherent view of an allocator: every field was read under
// one acquisition of the allocator lock. Sizes are bytes.
type Snapshot struct {
	Active        int64 `json:"active"` // actual lengths of live buffers
	Cache         int64 `json:"cache"`  // lengths of cached buffers
	Peak          int64 `json:"peak"`   // max active since start or ResetPeak
	MemoryLimit   int64 `json:"memory_limit"`
	CacheLimit    int64 `json:"cache_limit"`
	LiveBuffers   int64 `json:"live_buffers"`
	CachedBuffers int64 `json:"cached_buffers"`
	RawBytes      int64 `json:"raw_bytes"`   // held from the backend
	RawBuffers    int64 `json:"raw_buffers"` // held from the backend
	FreshAllocs   int64 `json:"fresh_allocs"`
	Reuses        int64 `json:"reuses"`
	Evictions     int64 `json:"evictions"`
}

// Snapshot returns the counters read under one lock acquisition.
func (a *Allocator) Snapshot() Snapshot {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.readCounters()
}

// readCounters reads every counter; a.mu is held.
func (a *Allocator) readCounters() Snapshot {
	return Snapshot{
		Active: a.active.Load(), Cache: a.cache.Load(), Peak: a.peak.Load(),
		MemoryLimit: a.memLimitA.Load(), CacheLimit: a.cacheLimitA.Load(),
		LiveBuffers: a.liveCount.Load(), CachedBuffers: a.cachedCount.Load(),
		RawBytes: a.rawBytes.Load(), RawBuffers: a.rawCount.Load(),
		FreshAllocs: a.fresh.Load(), Reuses: a.reuses.Load(), Evictions: a.evictions.Load(),
	}
}

// ReadOneByOne reads the same counters as Snapshot but one by one without
// the lock, the way the original runtime exposed them (separate
// get_active_memory / get_cache_memory / get_peak_memory calls). between,
// when not nil, runs between two reads and stands for the gap between
// separate calls (the snapshot lane passes runtime.Gosched). While other
// goroutines allocate and free, the result can count a buffer twice or not
// at all. It exists as the snapshot lane's negative control. Every read is
// atomic, so it is free of data races; only the combination is incoherent.
func (a *Allocator) ReadOneByOne(between func()) Snapshot {
	if between == nil {
		between = func() {}
	}
	var s Snapshot
	s.Active = a.active.Load()
	between()
	s.Cache = a.cache.Load()
	between()
	s.Peak = a.peak.Load()
	between()
	s.MemoryLimit = a.memLimitA.Load()
	s.CacheLimit = a.cacheLimitA.Load()
	s.LiveBuffers = a.liveCount.Load()
	between()
	s.CachedBuffers = a.cachedCount.Load()
	between()
	s.RawBytes = a.rawBytes.Load()
	between()
	s.RawBuffers = a.rawCount.Load()
	s.FreshAllocs, s.Reuses, s.Evictions = a.fresh.Load(), a.reuses.Load(), a.evictions.Load()
	return s
}

// ActiveMemory returns the active counter alone (lockless; see
// ReadOneByOne).
func (a *Allocator) ActiveMemory() int64 { return a.active.Load() }

// CacheMemory returns the cache counter alone (lockless).
func (a *Allocator) CacheMemory() int64 { return a.cache.Load() }

// PeakMemory returns the peak counter alone (lockless).
func (a *Allocator) PeakMemory() int64 { return a.peak.Load() }

// Check reports the first coherence invariant s violates, or nil:
// active + cache == raw bytes held; live + cached buffers == raw buffers
// held; no counter negative; cache <= cache limit; active <= memory limit.
func (s Snapshot) Check() error {
	switch {
	case s.Active < 0 || s.Cache < 0 || s.RawBytes < 0 || s.LiveBuffers < 0 || s.CachedBuffers < 0 || s.RawBuffers < 0:
		return fmt.Errorf("negative counter in %+v", s)
	case s.Active+s.Cache != s.RawBytes:
		return fmt.Errorf("active %d + cache %d != raw bytes %d", s.Active, s.Cache, s.RawBytes)
	case s.LiveBuffers+s.CachedBuffers != s.RawBuffers:
		return fmt.Errorf("live %d + cached %d buffers != raw buffers %d", s.LiveBuffers, s.CachedBuffers, s.RawBuffers)
	case s.Cache > s.CacheLimit:
		return fmt.Errorf("cache %d over the cache limit %d", s.Cache, s.CacheLimit)
	case s.Active > s.MemoryLimit:
		return fmt.Errorf("active %d over the memory limit %d", s.Active, s.MemoryLimit)
	}
	return nil
}
