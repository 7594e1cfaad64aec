package alloc

import "fmt"

// AllocationFootprintPolicy is an immutable description, captured from an
// allocator, of how much backing a request can receive: the rounding rule,
// the reuse page and the limits at capture time. It is a plain value,
// detached from the allocator (changing the allocator's limits afterwards
// does not change it) and safe for concurrent use. The allocator stays the
// authority: the policy describes its behaviour and changes nothing.
type AllocationFootprintPolicy struct {
	rules       RuleSet
	memoryLimit int
	cacheLimit  int
}

// Policy captures the allocator's footprint policy.
func (a *Allocator) Policy() AllocationFootprintPolicy {
	a.mu.Lock()
	defer a.mu.Unlock()
	return AllocationFootprintPolicy{rules: a.rules, memoryLimit: a.memoryLimit, cacheLimit: a.cacheLimit}
}

// Rules returns the captured rule set.
func (p AllocationFootprintPolicy) Rules() RuleSet { return p.rules }

// Page returns the page size of the reuse rule in bytes.
func (p AllocationFootprintPolicy) Page() int { return p.rules.Page() }

// MemoryLimit and CacheLimit return the limits captured with the policy.
func (p AllocationFootprintPolicy) MemoryLimit() int { return p.memoryLimit }

// CacheLimit returns the cache limit captured with the policy.
func (p AllocationFootprintPolicy) CacheLimit() int { return p.cacheLimit }

// Rounded returns the size a fresh allocation of n bytes receives.
func (p AllocationFootprintPolicy) Rounded(n int) (int, error) { return p.rules.Round(n) }

// UpperBound returns the largest backing, in bytes, that a request of n
// bytes can receive, fresh or reused: the rounded size r when no longer
// buffer can be reused, else min(2r, r+2*page) - 1. Arithmetic is checked:
// negative n is an error, and a request whose rounding or bound does not
// fit in an int fails with an error wrapping ErrOverflow (the allocator
// rejects the same requests before allocating anything).
func (p AllocationFootprintPolicy) UpperBound(n int) (int, error) {
	if !p.rules.Valid() {
		return 0, fmt.Errorf("upper bound: zero policy")
	}
	r, err := p.rules.Round(n)
	if err != nil {
		return 0, fmt.Errorf("upper bound of %d: %w", n, err)
	}
	limit, err := p.rules.reuseLimit(r)
	if err != nil {
		return 0, fmt.Errorf("upper bound of %d: %w", n, err)
	}
	if limit-1 > r {
		return limit - 1, nil
	}
	return r, nil
}
