package alloc

import (
	"errors"
	"math"
	"sync"
	"testing"
)

// heapRaw is test raw memory: Go byte slices with unique fake addresses.
type heapRaw struct {
	mu     sync.Mutex
	next   uintptr
	live   map[uintptr]int
	allocs int
}

func newHeapRaw() *heapRaw { return &heapRaw{next: 0x1000, live: map[uintptr]int{}} }

func (h *heapRaw) Alloc(n int) (Buffer, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if n <= 0 {
		return Buffer{}, errors.New("raw: n must be > 0")
	}
	addr := h.next
	h.next += uintptr(n) + 64
	h.live[addr] = n
	h.allocs++
	return Buffer{Addr: addr, Size: n, Host: make([]byte, n)}, nil
}

func (h *heapRaw) Free(b Buffer) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.live[b.Addr] != b.Size {
		return errors.New("raw: bad free")
	}
	delete(h.live, b.Addr)
	return nil
}

func TestRounding(t *testing.T) {
	cases := []struct {
		r       RuleSet
		n, want int
	}{
		{RulesCPU, 0, 0}, {RulesCPU, 1, 1}, {RulesCPU, 5000, 5000},
		{RulesCUDA, 0, 8}, {RulesCUDA, 8, 8}, {RulesCUDA, 9, 16}, {RulesCUDA, 1000, 1024},
		{RulesCUDA, 16383, 16384}, {RulesCUDA, 16384, 16384}, {RulesCUDA, 16385, 32768}, {RulesCUDA, 40000, 49152},
		{RulesMetal, 1, 1}, {RulesMetal, 16384, 16384}, {RulesMetal, 16385, 32768}, {RulesMetal, 40000, 49152},
	}
	for _, c := range cases {
		got, err := c.r.Round(c.n)
		if err != nil || got != c.want {
			t.Errorf("%v.Round(%d) = %d, %v; want %d", c.r, c.n, got, err, c.want)
		}
	}
	if _, err := RulesCUDA.Round(math.MaxInt - 100); !errors.Is(err, ErrOverflow) {
		t.Errorf("cuda rounding near MaxInt: %v", err)
	}
	if _, err := RulesCPU.Round(-1); err == nil {
		t.Error("negative size accepted")
	}
}

func TestReuseRuleAndCounters(t *testing.T) {
	raw := newHeapRaw()
	a, err := New(raw, Options{Rules: RulesCPU, MemoryLimit: 64 * MiB})
	if err != nil {
		t.Fatal(err)
	}
	b1, _ := a.Malloc(1999)
	b2, _ := a.Malloc(2000)
	if err := a.Free(b2); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(b1); err != nil {
		t.Fatal(err)
	}
	// 1000: limit min(2000, 1000+8192) = 2000 -> 1999 reusable, 2000 not.
	got, _ := a.Malloc(1000)
	if got.Addr != b1.Addr || got.Size != 1999 {
		t.Fatalf("Malloc(1000) = %d bytes at %#x, want the cached 1999", got.Size, got.Addr)
	}
	s := a.Snapshot()
	if s.Active != 1999 || s.Cache != 2000 || s.Peak != 3999 || s.Reuses != 1 || s.FreshAllocs != 2 {
		t.Fatalf("counters %+v", s)
	}
	if err := s.Check(); err != nil {
		t.Fatal(err)
	}
	// 900: 1999 is not < 1800 -> not reused; 2000 neither -> fresh.
	got2, _ := a.Malloc(900)
	if got2.Size != 900 {
		t.Fatalf("Malloc(900) got %d bytes", got2.Size)
	}
	if err := a.Free(got2); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(got2); !errors.Is(err, ErrUnknown) {
		t.Fatalf("double free: %v", err)
	}
	a.ResetPeak()
	if a.PeakMemory() != 0 {
		t.Fatal("peak not reset")
	}
	_ = a.Free(got)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if len(raw.live) != 0 {
		t.Fatalf("%d raw buffers leaked", len(raw.live))
	}
}

func TestLRUEvictionAndLimits(t *testing.T) {
	raw := newHeapRaw()
	a, _ := New(raw, Options{Rules: RulesCPU, MemoryLimit: 100 * KiB, CacheLimit: 10 * KiB})
	var bufs []Buffer
	for i := 0; i < 4; i++ {
		b, err := a.Malloc(4*KiB + i)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, b)
	}
	for _, b := range bufs {
		if err := a.Free(b); err != nil {
			t.Fatal(err)
		}
	}
	// Cache limit 10 KiB holds two 4 KiB buffers: the two oldest frees
	// were evicted.
	s := a.Snapshot()
	if s.CachedBuffers != 2 || s.Evictions != 2 {
		t.Fatalf("after frees: %+v", s)
	}
	if _, ok := raw.live[bufs[0].Addr]; ok {
		t.Fatal("least recently freed buffer was not evicted")
	}
	if _, ok := raw.live[bufs[3].Addr]; !ok {
		t.Fatal("most recently freed buffer was evicted")
	}
	if _, err := a.Malloc(101 * KiB); !errors.Is(err, ErrMemoryLimit) {
		t.Fatalf("over the memory limit: %v", err)
	}
	if s2 := a.Snapshot(); s2 != s {
		t.Fatalf("failed malloc changed counters: %+v -> %+v", s, s2)
	}
	// 95 KiB fits only after evicting the older cached buffer (LRU).
	big, err := a.Malloc(95 * KiB)
	if err != nil {
		t.Fatal(err)
	}
	if s := a.Snapshot(); s.Active+s.Cache > s.MemoryLimit || s.Evictions != 3 || s.Cache != 4*KiB+3 {
		t.Fatalf("cache not evicted (LRU, just enough) to make room: %+v", s)
	}
	_ = a.Free(big)
}

func TestPolicyBounds(t *testing.T) {
	cases := []struct {
		r       RuleSet
		n, want int
	}{
		{RulesCPU, 0, 0}, {RulesCPU, 1, 1}, {RulesCPU, 1000, 1999}, {RulesCPU, 8192, 16383}, {RulesCPU, 100000, 108191},
		{RulesCUDA, 0, 15}, {RulesCUDA, 9, 31}, {RulesCUDA, 16384, 32767}, {RulesCUDA, 40000, 81919},
		{RulesMetal, 1, 1}, {RulesMetal, 2, 3}, {RulesMetal, 40000, 81919},
	}
	for _, c := range cases {
		a, _ := New(newHeapRaw(), Options{Rules: c.r, MemoryLimit: MiB})
		got, err := a.Policy().UpperBound(c.n)
		if err != nil || got != c.want {
			t.Errorf("%v UpperBound(%d) = %d, %v; want %d", c.r, c.n, got, err, c.want)
		}
	}
	p := AllocationFootprintPolicy{rules: RulesCPU}
	if _, err := p.UpperBound(math.MaxInt - 4096); !errors.Is(err, ErrOverflow) {
		t.Errorf("bound near MaxInt: %v", err)
	}
	if _, err := (AllocationFootprintPolicy{}).UpperBound(1); err == nil {
		t.Error("zero policy answered")
	}
}
