package ledger

import "strings"

// Backend names where a lane ran.
type Backend string

// The backends. BackendExternal marks results that CI brings (JUnit, go test
// -json, trajectories) rather than lanes this service ran itself.
const (
	BackendCPU      Backend = "cpu"
	BackendCUDA     Backend = "cuda"
	BackendMetal    Backend = "metal"
	BackendExternal Backend = "external"
)

// backends is every Backend, in the order listings and forms offer them.
var backends = [...]Backend{BackendCPU, BackendCUDA, BackendMetal, BackendExternal}

// Backends returns every backend the ledger knows, in the order listings
// and forms offer them (cpu, cuda, metal, external). The slice is new on
// each call; callers may modify it.
func Backends() []Backend { return append([]Backend(nil), backends[:]...) }

// Valid reports whether b is one of Backends. The empty string is not a
// backend; a filter that treats "" as "any" checks that itself.
func (b Backend) Valid() bool {
	for _, k := range backends {
		if b == k {
			return true
		}
	}
	return false
}

// BackendList returns the backends for messages: "cpu, cuda, metal,
// external".
func BackendList() string {
	names := make([]string, len(backends))
	for i, b := range backends {
		names[i] = string(b)
	}
	return strings.Join(names, ", ")
}
