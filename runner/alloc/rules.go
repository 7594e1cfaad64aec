package alloc

import (
	"fmt"
	"math"
)

// KiB and MiB are byte units.
const (
	KiB = 1 << 10
	MiB = 1 << 20
)

// RuleSet is a rounding rule set: how a request of n bytes is rounded
// before the cache is searched or raw memory is allocated, and the page
// size of the reuse rule. Values are comparable and immutable.
type RuleSet uint8

// The rule sets (WORKLOADS.md section 3, from MLX's allocators):
//
//	RulesCPU:   no rounding; page 4 KiB (no_gpu/allocator.cpp).
//	RulesCUDA:  n <= 8 -> 8; n < 16 KiB -> next power of two; otherwise a
//	            16 KiB multiple; page 16 KiB (cuda/allocator.cpp).
//	RulesMetal: n > 16 KiB -> 16 KiB multiple, smaller requests keep their
//	            size; page 16 KiB (metal/allocator.cpp, vm_page_size).
const (
	RulesCPU RuleSet = iota + 1
	RulesCUDA
	RulesMetal
)

// AllRules lists the rule sets in lane order.
var AllRules = []RuleSet{RulesCPU, RulesCUDA, RulesMetal}

// String returns "cpu-rules", "cuda-rules" or "metal-rules": rule sets
// are labelled as rules, not as the backends they came from.
func (r RuleSet) String() string {
	switch r {
	case RulesCPU:
		return "cpu-rules"
	case RulesCUDA:
		return "cuda-rules"
	case RulesMetal:
		return "metal-rules"
	}
	return fmt.Sprintf("rules(%d)", uint8(r))
}

// Valid reports whether r is one of the three rule sets.
func (r RuleSet) Valid() bool { return r >= RulesCPU && r <= RulesMetal }

// RulesFor returns the native rule set of a backend name ("cpu", "cuda",
// "metal").
func RulesFor(backend string) (RuleSet, error) {
	switch backend {
	case "cpu":
		return RulesCPU, nil
	case "cuda":
		return RulesCUDA, nil
	case "metal":
		return RulesMetal, nil
	}
	return 0, fmt.Errorf("no allocator rule set for backend %q", backend)
}

// Page is the page size of the reuse rule in bytes.
func (r RuleSet) Page() int {
	if r == RulesCPU {
		return 4 * KiB
	}
	return 16 * KiB
}

// DefaultCacheLimit is the cache limit used when none is given: the memory
// limit for the CUDA and Metal rules, 32 MiB for CPU-only builds.
func (r RuleSet) DefaultCacheLimit(memoryLimit int) int {
	if r == RulesCPU {
		return min(32*MiB, memoryLimit)
	}
	return memoryLimit
}

// ErrOverflow is wrapped by errors of sizes whose rounding or bound does
// not fit in an int.
var ErrOverflow = fmt.Errorf("size overflows")

// Round returns the rounded size of a request of n bytes. It fails for
// negative n and, with ErrOverflow, when the rounded size does not fit in
// an int.
func (r RuleSet) Round(n int) (int, error) {
	if n < 0 {
		return 0, fmt.Errorf("negative size %d", n)
	}
	const page = 16 * KiB
	switch r {
	case RulesCPU:
		return n, nil
	case RulesCUDA:
		switch {
		case n <= 8:
			return 8, nil
		case n < page:
			p := 16
			for p < n {
				p <<= 1
			}
			return p, nil
		}
		return roundUp(n, page)
	case RulesMetal:
		if n > page {
			return roundUp(n, page)
		}
		return n, nil
	}
	return 0, fmt.Errorf("invalid rule set %d", uint8(r))
}

func roundUp(n, m int) (int, error) {
	if n > math.MaxInt-(m-1) {
		return 0, fmt.Errorf("%w: %d rounded up to a multiple of %d", ErrOverflow, n, m)
	}
	return (n + m - 1) / m * m, nil
}

// reuseLimit returns min(2r, r+2*page): a cached buffer of length L may
// serve a rounded request r only if r <= L < reuseLimit. Checked: it fails
// with ErrOverflow when r+min(r, 2*page) does not fit.
func (r RuleSet) reuseLimit(rounded int) (int, error) {
	add := min(rounded, 2*r.Page())
	if rounded > math.MaxInt-add {
		return 0, fmt.Errorf("%w: reuse bound of %d", ErrOverflow, rounded)
	}
	return rounded + add, nil
}
