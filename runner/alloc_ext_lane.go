package runner

import (
	"context"
	_ "embed"
	"fmt"

	"github.com/evidence-ledger/ledger/ledger"
)

//go:embed alloc_ext.go
var srcAllocExt []byte

//go:embed alloc_ext_rules.go
var srcAllocExtRules []byte

//go:embed alloc_ext_lane.go
var srcAllocExtLane []byte

//go:embed alloc_ext_snapshot.go
var srcAllocExtSnapshot []byte

//go:embed alloc_ext_footprint.go
var srcAllocExtFootprint []byte

// extAllocLane is alloc-snapshot/v1 or alloc-footprint/v1 run against an
// external allocator through AllocAdapterProtocol. It is not registered:
// RunImpl runs it; Run refuses to run without an adapter.
type extAllocLane struct{ name string }

func (l extAllocLane) Name() string { return l.name }
func (l extAllocLane) Summary() string {
	return l.name + " against a runtime's own allocator through " + AllocAdapterProtocol
}
func (l extAllocLane) Run(context.Context, *Env) (*Result, error) {
	return nil, fmt.Errorf("%s against an external allocator runs only through ledger run --impl", l.name)
}

func (l extAllocLane) Definition() []byte {
	d := map[string]any{
		"lane": l.name, "against": "an external allocator through " + AllocAdapterProtocol,
		"sources": map[string]string{
			"runner/alloc_ext.go": sha256Hex(srcAllocExt), "runner/alloc_ext_rules.go": sha256Hex(srcAllocExtRules),
			"runner/alloc_ext_lane.go": sha256Hex(srcAllocExtLane), "runner/alloc_ext_snapshot.go": sha256Hex(srcAllocExtSnapshot),
			"runner/alloc_ext_footprint.go": sha256Hex(srcAllocExtFootprint),
		},
	}
	if l.name == LaneAllocSnap {
		d["readings"] = DefaultSnapshots
		d["invariants"] = extInvariants
		d["verdict"] = "every coherent reading satisfies the invariants (failed when the runtime has no coherent reading: every case unsupported); control: readings of each counter by its own call under the same traffic must violate one at least once in up to 10 rounds, with >= readings/10 mutator operations during the readings and the raw bytes held constant (no fresh buffer), else inconclusive"
	} else {
		d["cases"] = []string{"<rules>/fresh", "<rules>/reuse", "<rules>/overflow", "<rules>/detach"}
		d["verdict"] = "all four cases pass under the runtime's rule set (RuntimeAllocRules, from its source); WORKLOADS' rule set for the backend is evaluated on the same observations and reported; control: the naive bound (rounded size) must fail case reuse, else inconclusive"
	}
	b, _ := ledger.CanonicalBody(d)
	return b
}
