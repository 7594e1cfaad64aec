package cpu

import (
	"bufio"
	_ "embed"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runner/alloc"
)

func init() {
	runner.RegisterBackend(string(ledger.BackendCPU), func() (runner.Backend, error) { return New() })
}

//go:embed qmv.go
var srcQMV []byte

//go:embed qmv_amd64.go
var srcQMVAMD64 []byte

//go:embed qmv_amd64.s
var srcQMVAsm []byte

//go:embed mem_unix.go
var srcMem []byte

// Backend is the CPU backend. It is safe for concurrent use.
type Backend struct {
	device ledger.Device

	mu     sync.Mutex
	live   map[uintptr][]byte // raw allocations by address
	closed bool

	liveBytes atomic.Int64
	liveCount atomic.Int64
}

var _ runner.Backend = (*Backend)(nil)

// New returns a CPU backend describing this machine.
func New() (*Backend, error) {
	return &Backend{device: detectDevice(), live: map[uintptr][]byte{}}, nil
}

// Name returns ledger.BackendCPU.
func (b *Backend) Name() ledger.Backend { return ledger.BackendCPU }

// Device returns the CPU identity: model name from /proc/cpuinfo (Linux;
// GOARCH elsewhere), logical cores, and attributes goarch, goos,
// go_version, gomaxprocs.
func (b *Backend) Device() ledger.Device {
	d := b.device
	d.Attrs = map[string]string{}
	for k, v := range b.device.Attrs {
		d.Attrs[k] = v
	}
	d.Attrs["gomaxprocs"] = fmt.Sprint(runtime.GOMAXPROCS(0))
	return d
}

func detectDevice() ledger.Device {
	d := ledger.Device{Cores: runtime.NumCPU(), Attrs: map[string]string{
		"goarch": runtime.GOARCH, "goos": runtime.GOOS, "go_version": runtime.Version(),
	}}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			key, val, ok := strings.Cut(sc.Text(), ":")
			if !ok {
				continue
			}
			key, val = strings.TrimSpace(key), strings.TrimSpace(val)
			switch key {
			case "model name", "Model", "cpu model":
				if d.Model == "" {
					d.Model = val
				}
			case "vendor_id":
				d.Attrs["vendor"] = val
			case "flags", "Features":
				if strings.Contains(" "+val+" ", " avx2 ") {
					d.Attrs["avx2"] = "yes"
				}
			}
		}
	}
	if d.Model == "" {
		d.Model = runtime.GOARCH + " CPU"
	}
	if len(d.Model) > 512 {
		d.Model = d.Model[:512]
	}
	return d
}

// Alloc returns n > 0 bytes of fresh, zeroed host memory (anonymous mmap on
// Unix). Buffer.Addr is its address, Buffer.Host the bytes.
func (b *Backend) Alloc(n int) (alloc.Buffer, error) {
	if n <= 0 {
		return alloc.Buffer{}, fmt.Errorf("cpu alloc: size must be > 0, got %d", n)
	}
	mem, err := rawAlloc(n)
	if err != nil {
		return alloc.Buffer{}, fmt.Errorf("cpu alloc %d bytes: %w", n, err)
	}
	addr := addrOf(mem)
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		_ = rawFree(mem)
		return alloc.Buffer{}, fmt.Errorf("cpu alloc: backend closed")
	}
	b.live[addr] = mem
	b.mu.Unlock()
	b.liveBytes.Add(int64(n))
	b.liveCount.Add(1)
	return alloc.Buffer{Addr: addr, Size: n, Host: mem}, nil
}

// Free releases a buffer returned by Alloc; freeing an unknown or already
// freed buffer is an error.
func (b *Backend) Free(buf alloc.Buffer) error {
	b.mu.Lock()
	mem, ok := b.live[buf.Addr]
	if ok && len(mem) == buf.Size {
		delete(b.live, buf.Addr)
	}
	b.mu.Unlock()
	if !ok || len(mem) != buf.Size {
		return fmt.Errorf("cpu free: %#x (%d bytes) is not a live allocation", buf.Addr, buf.Size)
	}
	b.liveBytes.Add(-int64(buf.Size))
	b.liveCount.Add(-1)
	return rawFree(mem)
}

// Live returns the bytes and buffers currently allocated through Alloc
// (the backend's own count, independent of any allocator's counters).
func (b *Backend) Live() (bytes, buffers int64) { return b.liveBytes.Load(), b.liveCount.Load() }

// Sources returns the kernel, timer and raw-memory source files.
func (b *Backend) Sources() map[string][]byte {
	return map[string][]byte{"qmv.go": srcQMV, "qmv_amd64.go": srcQMVAMD64, "qmv_amd64.s": srcQMVAsm, "mem_unix.go": srcMem,
		"throughput.go": srcThroughput}
}

// Close frees every outstanding raw allocation.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	var first error
	for addr, mem := range b.live {
		if err := rawFree(mem); err != nil && first == nil {
			first = err
		}
		delete(b.live, addr)
	}
	b.liveBytes.Store(0)
	b.liveCount.Store(0)
	return first
}
