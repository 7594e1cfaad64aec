package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/evidence-ledger/ledger/runner"
	"github.com/evidence-ledger/ledger/runs"
)

// probe is the hardware health probe: the backend opens (for cuda: a
// device, its driver and memory), the device count (cuda: nvidia-smi)
// meets --expect-devices, and the host's cores and memory. It returns
// "ok" or what failed, and the spec found.
func (ag *agent) probe() (string, runs.AgentSpec) {
	spec := runs.AgentSpec{CPUs: runtime.NumCPU(), MemoryBytes: hostMemory(), Runner: runner.BuildRunner()}
	spec.Host, _ = os.Hostname()
	b, err := runner.OpenBackend(ag.c.Backend)
	if err != nil {
		return "backend " + ag.c.Backend + " does not open: " + err.Error(), spec
	}
	spec.Device = b.Device()
	_ = b.Close()
	spec.DeviceCount = 1
	if ag.c.Backend == "cuda" {
		n, mem, err := nvidiaSMI()
		if err == nil {
			spec.DeviceCount = n
			if mem > 0 && spec.Device.Attrs != nil {
				spec.Device.Attrs["smi_memory_mib"] = strconv.FormatUint(mem, 10)
			}
		} else if ag.c.ExpectDevices > 1 {
			return "cannot count devices: " + err.Error(), spec
		}
	}
	if ag.c.ExpectDevices > 0 && spec.DeviceCount != ag.c.ExpectDevices {
		return fmt.Sprintf("expected %d devices, found %d", ag.c.ExpectDevices, spec.DeviceCount), spec
	}
	return "ok", spec
}

// nvidiaSMI counts the GPUs nvidia-smi lists and returns the first one's
// total memory in MiB.
func nvidiaSMI() (int, uint64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "nvidia-smi", "--query-gpu=memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return 0, 0, fmt.Errorf("nvidia-smi: %w", err)
	}
	lines := strings.Fields(strings.TrimSpace(string(out)))
	var mem uint64
	if len(lines) > 0 {
		mem, _ = strconv.ParseUint(lines[0], 10, 64)
	}
	return len(lines), mem, nil
}

// hostMemory is MemTotal of /proc/meminfo in bytes (0 where absent).
func hostMemory() uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseUint(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	return 0
}
