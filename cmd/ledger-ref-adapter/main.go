// Command ledger-ref-adapter is the reference adapter of the ledger's
// adapter protocol (ledger-adapter/1, see
// docs/reference/implementations.md): it answers every case with the qmv kernel of the
// ledger's own CPU backend (backends/cpu), so `ledger run --impl` and the
// protocol itself are exercised on every CI run without outside software.
//
// Usage (the ledger starts it; stdin and stdout carry the protocol):
//
//	ledger-ref-adapter [--variant promoted|narrow] [--rotate-mib N]
//
// --variant narrow serves the original (narrow bias-sum) kernel: configured
// as an implementation's "original" build it must fail exactly the
// predicted cases. The adapter has the timing capability: a prepared
// throughput case keeps copies of its operands totalling at least
// --rotate-mib MiB (default 256, at most 64 copies; products rotate
// through them, past the CPU's caches) and times groups of products of
// at least 1 ms on Go's monotonic clock (clock name "monotonic"). Diagnostics go to stderr; exit status 0 after a bye or
// the end of input, 1 on a protocol error, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/runner"
)

func main() {
	variant := flag.String("variant", "promoted", "kernel variant to serve: promoted (corrected) or narrow (original)")
	rotate := flag.Int("rotate-mib", 256, "MiB of operand copies a prepared throughput case rotates through (1..4096)")
	flag.Parse()
	if *rotate < 1 || *rotate > 4096 {
		fmt.Fprintf(os.Stderr, "ledger-ref-adapter: --rotate-mib must be in 1..4096, got %d\n", *rotate)
		os.Exit(2)
	}
	var v runner.Variant
	switch *variant {
	case "promoted":
		v = runner.Promoted
	case "narrow":
		v = runner.Narrow
	default:
		fmt.Fprintf(os.Stderr, "ledger-ref-adapter: --variant must be promoted or narrow, got %q\n", *variant)
		os.Exit(2)
	}
	b, err := cpu.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, "ledger-ref-adapter:", err)
		os.Exit(1)
	}
	defer b.Close()
	srv := runner.AdapterServer{Hello: hello(b, v), Prepare: prepareFunc(b, v, *rotate<<20),
		Compute: func(_ string, req *runner.QMVRequest) (runner.Vec, error) {
			req.Variant = v
			return b.QMV(context.Background(), req)
		}}
	if err := srv.Serve(os.Stdin, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "ledger-ref-adapter:", err)
		os.Exit(1)
	}
}

// hello names the implementation "ledger-cpu-<variant>", its version the
// module version, and the CPU backend's device.
func hello(b *cpu.Backend, v runner.Variant) runner.AdapterHello {
	h := runner.AdapterHello{Implementation: "ledger-cpu-" + v.String(), Version: "devel", Device: b.Device(),
		Runtime: map[string]string{"go": runtime.Version(), "kernel": "backends/cpu qmv, " + v.String() + " bias sum"}}
	h.State = cpuState()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" {
			h.Version = bi.Main.Version
		}
		for _, kv := range bi.Settings {
			if kv.Key == "vcs.revision" {
				h.Runtime["build.commit"] = kv.Value
			}
		}
	}
	return h
}

// cpuState reads what moves CPU timings where Linux shows it: CPU 0's
// frequency and governor, and the load average.
func cpuState() map[string]string {
	m := map[string]string{}
	for k, f := range map[string]string{
		"cpu0.cur_khz":  "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq",
		"cpu0.max_khz":  "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq",
		"cpu0.governor": "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor",
		"loadavg":       "/proc/loadavg",
	} {
		if b, err := os.ReadFile(f); err == nil && len(b) < 200 {
			m[k] = strings.TrimSpace(string(b))
		}
	}
	return m
}
