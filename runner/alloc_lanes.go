package runner

import _ "embed" // the lanes' sources, digested into their definitions

//go:embed alloc_lanes.go
var srcAllocLanes []byte

//go:embed alloc_snapshot.go
var srcAllocSnapshot []byte

//go:embed alloc_footprint.go
var srcAllocFootprint []byte

//go:embed alloc/alloc.go
var srcAlloc []byte

//go:embed alloc/rules.go
var srcAllocRules []byte

//go:embed alloc/policy.go
var srcAllocPolicy []byte

// allocSources is the sha256 digest of every source file of
// alloc-snapshot/v1 and alloc-footprint/v1, by path from the module root.
func allocSources() map[string]string {
	return map[string]string{
		"runner/alloc_lanes.go": sha256Hex(srcAllocLanes), "runner/alloc/alloc.go": sha256Hex(srcAlloc),
		"runner/alloc_snapshot.go": sha256Hex(srcAllocSnapshot), "runner/alloc_footprint.go": sha256Hex(srcAllocFootprint),
		"runner/alloc/rules.go": sha256Hex(srcAllocRules), "runner/alloc/policy.go": sha256Hex(srcAllocPolicy),
	}
}
