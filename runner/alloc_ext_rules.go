package runner

import (
	"fmt"
	"math"

	"github.com/evidence-ledger/ledger/runner/alloc"
)

// RuntimeAllocRules is what a real runtime's caching allocator does with a
// request, as read from that runtime's source: the rule set the external
// alloc-footprint/v1 checks the runtime against in place of WORKLOADS'
// rule set for its backend, with the differences and their sources.
// Values are immutable and safe for concurrent use.
type RuntimeAllocRules struct {
	// Name is the rule set's name ("mlx-cpu", "pytorch-cuda").
	Name string
	// Workloads is WORKLOADS' rule set for the runtime's backend, which
	// the lane also evaluates and reports (never part of the verdict).
	Workloads alloc.RuleSet
	// Sources are the file:line references each rule was read from.
	Sources []string
	// Differences says where the runtime differs from WORKLOADS.
	Differences []string

	round func(n int) (int, error)
	bound func(n int) (int, error)
	// reuse predicts, where the runtime's reuse rule is exact, whether a
	// request of n bytes takes a cached (otherwise unused) buffer of
	// cached bytes and what backing it then gets; nil when not modelled.
	reuse func(n, cached int) (bool, int)
	// reusePairs are the directed reuse case's (cached size, request)
	// pairs for a request n.
	reusePairs func(n int) []int
	// randomMax is the largest request of the reuse case's random traffic.
	randomMax int
}

// Round returns the size a fresh request of n bytes is rounded to.
func (r *RuntimeAllocRules) Round(n int) (int, error) { return r.round(n) }

// UpperBound returns the largest backing a request of n bytes can receive
// from the runtime, fresh or reused, with checked arithmetic: negative n is
// an error, and a bound that does not fit in an int wraps alloc.ErrOverflow.
func (r *RuntimeAllocRules) UpperBound(n int) (int, error) { return r.bound(n) }

const (
	mlxCPUPage = 4096 // mlx/backend/no_gpu/allocator.cpp:84 (BufferCache page_size 4096)

	// PyTorch c10/cuda/CUDACachingAllocator.cpp constants.
	ptMinBlockSize  = 512     // kMinBlockSize: all sizes are rounded to at least 512 bytes
	ptSmallSize     = 1 << 20 // kSmallSize: largest "small" allocation is 1 MiB
	ptSmallBuffer   = 2 << 20 // kSmallBuffer: small allocations are packed in 2 MiB segments
	ptLargeBuffer   = 20 << 20
	ptMinLargeAlloc = 10 << 20 // kMinLargeAlloc: 1..10 MiB requests may use a 20 MiB segment
	ptRoundLarge    = 2 << 20  // kRoundLarge: larger segments are rounded to 2 MiB
)

func checkedSize(n, extra int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("negative size %d", n)
	}
	if n > math.MaxInt-extra {
		return 0, fmt.Errorf("request of %d bytes: %w", n, alloc.ErrOverflow)
	}
	return n, nil
}

// MLXCPURules is MLX 0.32.4's CPU allocator (CommonAllocator in
// mlx/backend/no_gpu/allocator.cpp with BufferCache from
// mlx/backend/common/buffer_cache.h; the header is the one shipped in the
// mlx-cpu 0.32.4 wheel, the allocator source identical at v0.32.1 and
// 846d176): no rounding; a cached buffer of L bytes is reused for n only
// if n <= L < min(2n, n + 2*4096). It agrees with WORKLOADS' CPU rules on
// rounding and reuse; the differences are in the cache limit and in failed
// requests.
var MLXCPURules = &RuntimeAllocRules{
	Name:      "mlx-cpu",
	Workloads: alloc.RulesCPU,
	Sources: []string{
		"mlx/backend/no_gpu/allocator.cpp:102-107 (a fresh request takes std::malloc(size + sizeof(size_t)) and counts size: no rounding)",
		"mlx/backend/no_gpu/allocator.cpp:83-84 (BufferCache page size 4096; cache limit 32 MiB)",
		"mlx/backend/common/buffer_cache.h:30-36 (reuse the smallest cached buffer L >= n only if L < min(2n, n + 2*page))",
		"mlx/backend/no_gpu/allocator.cpp:93-97 (a reused buffer counts its full length in active memory)",
		"mlx/backend/no_gpu/allocator.cpp:44-49 (get_active_memory and get_peak_memory read without the lock); 129-132 (get_cache_memory locks)",
	},
	Differences: []string{
		"cache limit: a freed buffer that does not fit under the cache limit is itself released; cached buffers are not evicted least-recently-used first on free (allocator.cpp:117-122); LRU eviction happens only when the cache limit is lowered (allocator.cpp:134-143, buffer_cache.h:58-85)",
		"failed request: when std::malloc fails, active_memory_ still grows by the request and malloc returns a null buffer without throwing (allocator.cpp:102-109); WORKLOADS: a refused request allocates and counts nothing",
		"size arithmetic: std::malloc(size + sizeof(size_t)) is unchecked and wraps for size > SIZE_MAX-8 (allocator.cpp:102); the ledger's policy rejects such sizes before asking, so the lane never sends one",
		"no memory limit on the CPU: malloc never consults memory_limit_ (allocator.cpp:90-110)",
		"zero-byte requests are never cached (allocator.cpp:117: sz > 0)",
	},
	round: func(n int) (int, error) { return checkedSize(n, 2*mlxCPUPage) },
	bound: func(n int) (int, error) {
		r, err := checkedSize(n, 2*mlxCPUPage)
		if err != nil {
			return 0, err
		}
		if b := r + min(r, 2*mlxCPUPage) - 1; b > r {
			return b, nil
		}
		return r, nil
	},
	reuse: func(n, cached int) (bool, int) {
		if cached >= n && cached < min(2*n, n+2*mlxCPUPage) {
			return true, cached
		}
		return false, n
	},
	reusePairs: func(n int) []int {
		l := min(2*n, n+2*mlxCPUPage) - 1 // the largest length still reused
		return []int{l, l + 1}
	},
	randomMax: 1 << 17,
}

// ptRound is round_size of c10/cuda/CUDACachingAllocator.cpp with the
// default configuration (no roundup_power2_divisions): at least 512 bytes,
// then a multiple of 512.
func ptRound(n int) (int, error) {
	if _, err := checkedSize(n, ptSmallSize+ptRoundLarge); err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, nil // torch.empty(0) asks the allocator for nothing
	}
	if n < ptMinBlockSize {
		return ptMinBlockSize, nil
	}
	return (n + ptMinBlockSize - 1) / ptMinBlockSize * ptMinBlockSize, nil
}

// PyTorchCUDARules is PyTorch's CUDA caching allocator (2.11, default
// configuration: no expandable segments, max_split_size unlimited), read
// from c10/cuda/CUDACachingAllocator.cpp: requests round up to a multiple
// of 512 bytes (at least 512); requests up to 1 MiB come from the small
// pool (2 MiB segments), larger ones from the large pool (a 20 MiB segment
// below 10 MiB, else the request rounded up to 2 MiB); a block found for a
// request is split only when the remainder is >= 512 bytes (small pool) or
// > 1 MiB (large pool), so a large request can receive up to its rounded
// size plus 1 MiB, fresh (a 2 MiB-rounded segment) or reused (any cached
// block of the pool, best fit).
var PyTorchCUDARules = &RuntimeAllocRules{
	Name:      "pytorch-cuda",
	Workloads: alloc.RulesCUDA,
	Sources: []string{
		"c10/cuda/CUDACachingAllocator.cpp: kMinBlockSize 512, kSmallSize 1 MiB, kSmallBuffer 2 MiB, kLargeBuffer 20 MiB, kMinLargeAlloc 10 MiB, kRoundLarge 2 MiB",
		"c10/cuda/CUDACachingAllocator.cpp round_size (512-byte multiples, at least 512)",
		"c10/cuda/CUDACachingAllocator.cpp get_pool (size <= kSmallSize: small pool)",
		"c10/cuda/CUDACachingAllocator.cpp get_allocation_size (segment: 2 MiB small; 20 MiB below 10 MiB; else 2 MiB multiple)",
		"c10/cuda/CUDACachingAllocator.cpp should_split (small: remainder >= kMinBlockSize; large: remainder > kSmallSize)",
		"c10/cuda/CUDACachingAllocator.cpp get_free_block (best fit: smallest cached block >= the rounded size in the pool)",
		"read at pytorch/pytorch 001074d25084fdb87a799823e395a50f5ec044d3 (the stored copy); the torch 2.11 wheel ships no allocator source",
	},
	Differences: []string{
		"rounding: 512-byte multiples (at least 512) instead of WORKLOADS' CUDA rule (8, next power of two below 16 KiB, 16 KiB multiples)",
		"reuse: best fit over the whole pool with no 2x / two-page bound; an unsplit large block can exceed the rounded request by up to 1 MiB (should_split), fresh or reused",
		"segments: cudaMalloc'd in 2 MiB (small pool), 20 MiB or 2 MiB-rounded (large pool) segments; reserved memory counts segments, allocated memory counts blocks",
		"counters: allocated/reserved/peak are read together under the allocator's lock by torch.cuda.memory_stats(); memory_allocated() and memory_reserved() are each one such call",
	},
	round: ptRound,
	bound: func(n int) (int, error) {
		r, err := ptRound(n)
		if err != nil {
			return 0, err
		}
		if r > ptSmallSize {
			return r + ptSmallSize, nil
		}
		return r, nil
	},
	reusePairs: func(n int) []int {
		if n > ptSmallSize {
			return []int{n + ptSmallSize/2, 2 * n}
		}
		return []int{n + n/2, 2 * n}
	},
	randomMax: 1 << 25,
}

// RuntimeRulesFor returns the rule set named by an allocator adapter's
// info reply.
func RuntimeRulesFor(name string) (*RuntimeAllocRules, error) {
	switch name {
	case MLXCPURules.Name:
		return MLXCPURules, nil
	case PyTorchCUDARules.Name:
		return PyTorchCUDARules, nil
	}
	return nil, fmt.Errorf("no allocator rule set for runtime %q", name)
}
