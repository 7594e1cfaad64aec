// Package alloc is the caching allocator of the allocator lanes: it hands
// out buffers from a backend's raw allocation (Raw), keeps freed buffers
// for reuse, keeps the active/cache/peak counters, enforces a memory limit
// and a cache limit with least-recently-used eviction, takes coherent
// snapshots under one lock, and captures an immutable
// AllocationFootprintPolicy with a checked UpperBound.
//
// The behaviour restates WORKLOADS.md section 3, which describes Apple's
// MLX v0.32.x (mlx/backend/common/buffer_cache.h and
// mlx/backend/{metal,cuda,no_gpu}/allocator.cpp). The rounding rule is a
// parameter (RuleSet: CPU, CUDA, Metal), so the same allocator logic runs
// over CPU memory with every rule set, and over device memory later.
//
// The allocator is safe for concurrent use. Its single-counter getters
// (ActiveMemory, CacheMemory, ...) read atomics without the lock on
// purpose: they reproduce the original, incoherent way of reading the
// counters and are the allocator lanes' negative control. Snapshot is the
// coherent way.
package alloc
