// Command ledger-ref-adapter is the reference adapter of the ledger's
// adapter protocol (ledger-adapter/1, see
// docs/reference/implementations.md): it answers every case with the qmv kernel of the
// ledger's own CPU backend (backends/cpu), so `ledger run --impl` and the
// protocol itself are exercised on every CI run without outside software.
//
// Usage (the ledger starts it; stdin and stdout carry the protocol):
//
//	ledger-ref-adapter [--variant promoted|narrow]
//
// --variant narrow serves the original (narrow bias-sum) kernel: configured
// as an implementation's "original" build it must fail exactly the
// predicted cases. Diagnostics go to stderr; exit status 0 after a bye or
// the end of input, 1 on a protocol error, 2 on bad flags.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/evidence-ledger/ledger/backends/cpu"
	"github.com/evidence-ledger/ledger/runner"
)

func main() {
	variant := flag.String("variant", "promoted", "kernel variant to serve: promoted (corrected) or narrow (original)")
	flag.Parse()
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
	if err := runner.ServeAdapter(os.Stdin, os.Stdout, hello(b, v), func(_ string, req *runner.QMVRequest) (runner.Vec, error) {
		req.Variant = v
		return b.QMV(context.Background(), req)
	}); err != nil {
		fmt.Fprintln(os.Stderr, "ledger-ref-adapter:", err)
		os.Exit(1)
	}
}

// hello names the implementation "ledger-cpu-<variant>", its version the
// module version, and the CPU backend's device.
func hello(b *cpu.Backend, v runner.Variant) runner.AdapterHello {
	h := runner.AdapterHello{Implementation: "ledger-cpu-" + v.String(), Version: "devel", Device: b.Device(),
		Runtime: map[string]string{"go": runtime.Version(), "kernel": "backends/cpu qmv, " + v.String() + " bias sum"}}
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
