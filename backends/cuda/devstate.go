package cuda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// smiTimeout bounds each nvidia-smi call of DeviceState.
const smiTimeout = 5 * time.Second

// smiFields are the nvidia-smi --query-gpu fields DeviceState reads, with
// their DeviceState keys. The last field is the throttle reasons bit
// mask; smiThrottleFields are its names, newest driver first.
var smiFields = []struct{ key, field string }{
	{"clocks.sm_mhz", "clocks.sm"},
	{"clocks.mem_mhz", "clocks.mem"},
	{"clocks.max_sm_mhz", "clocks.max.sm"},
	{"temperature_c", "temperature.gpu"},
	{"power_w", "power.draw"},
	{"power_limit_w", "power.limit"},
	{"pstate", "pstate"},
	{"persistence_mode", "persistence_mode"},
}

var smiThrottleFields = []string{"clocks_event_reasons.active", "clocks_throttle_reasons.active"}

// throttleBits names the bits of nvidia-smi's clocks event (throttle)
// reasons mask (nvml.h, nvmlClocksEventReason*).
var throttleBits = []struct {
	bit  uint64
	name string
}{
	{0x1, "gpu_idle"},
	{0x2, "applications_clocks_setting"},
	{0x4, "sw_power_cap"},
	{0x8, "hw_slowdown"},
	{0x10, "sync_boost"},
	{0x20, "sw_thermal_slowdown"},
	{0x40, "hw_thermal_slowdown"},
	{0x80, "hw_power_brake_slowdown"},
	{0x100, "display_clock_setting"},
}

// smiRunner runs nvidia-smi with args and returns its standard output.
type smiRunner func(ctx context.Context, args ...string) ([]byte, error)

// runSMI runs nvidia-smi from PATH; a missing binary gives an error
// wrapping exec.ErrNotFound, a failing one an error with its output.
func runSMI(ctx context.Context, args ...string) ([]byte, error) {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + string(out))
		return nil, fmt.Errorf("nvidia-smi %s: %w: %s", strings.Join(args, " "), err, msg)
	}
	return out, nil
}

// DeviceState reads what moves timings now from nvidia-smi (each call
// bounded by 5 s) for this backend's GPU (by UUID): clocks.sm_mhz,
// clocks.mem_mhz, clocks.max_sm_mhz, temperature_c, power_w,
// power_limit_w, pstate, persistence_mode, clocks.throttle_reasons (the
// mask and its reasons, "none" when clear), other_processes (compute
// processes on the GPU besides this one: "pid name (MiB)" joined by "; ",
// or "none"), and driver, plus qmv.batch_kernel (which kernel PrepareQMV
// launches for a batch). Values are nvidia-smi's text ("[N/A]" where the
// device does not report one). Without nvidia-smi, or when it fails, the
// nvidia_smi key says why and only driver is set. It never fails.
func (b *Backend) DeviceState() map[string]string {
	st := deviceState(runSMI, b.uuid, os.Getpid(), b.device.Driver)
	st["qmv.batch_kernel"] = batchKernel(multiVector)
	return st
}

// deviceState is DeviceState with its nvidia-smi runner, GPU id ("" for
// nvidia-smi's first GPU), own process id and driver text as arguments.
func deviceState(run smiRunner, id string, self int, driver string) map[string]string {
	st := map[string]string{"driver": driver}
	sel := []string{}
	if id != "" {
		sel = []string{"-i", id}
	}
	query := func(args ...string) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), smiTimeout)
		defer cancel()
		return run(ctx, append(args, sel...)...)
	}
	var out []byte
	var err error
	for _, tf := range smiThrottleFields {
		fields := make([]string, 0, len(smiFields)+1)
		for _, f := range smiFields {
			fields = append(fields, f.field)
		}
		out, err = query("--query-gpu="+strings.Join(append(fields, tf), ","), "--format=csv,noheader,nounits")
		if err == nil || errors.Is(err, exec.ErrNotFound) {
			break
		}
	}
	switch {
	case errors.Is(err, exec.ErrNotFound):
		st["nvidia_smi"] = "not found on PATH"
		return st
	case err != nil:
		st["nvidia_smi"] = "failed: " + err.Error()
		return st
	}
	gpu, err := parseGPUQuery(out)
	if err != nil {
		st["nvidia_smi"] = "unreadable output: " + err.Error()
		return st
	}
	for k, v := range gpu {
		st[k] = v
	}
	out, err = query("--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader,nounits")
	if err != nil {
		st["other_processes"] = "unknown: " + err.Error()
	} else {
		st["other_processes"] = parseComputeApps(out, self)
	}
	return st
}

// parseGPUQuery reads the first line of nvidia-smi --query-gpu output in
// csv,noheader,nounits format with the fields of smiFields and a throttle
// reasons field, in that order, into DeviceState keys.
func parseGPUQuery(out []byte) (map[string]string, error) {
	line := ""
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	if line == "" {
		return nil, fmt.Errorf("no output")
	}
	vals := strings.Split(line, ",")
	if len(vals) != len(smiFields)+1 {
		return nil, fmt.Errorf("%d fields in %q, want %d", len(vals), line, len(smiFields)+1)
	}
	st := map[string]string{}
	for i, f := range smiFields {
		st[f.key] = strings.TrimSpace(vals[i])
	}
	st["clocks.throttle_reasons"] = throttleReasons(strings.TrimSpace(vals[len(smiFields)]))
	return st, nil
}

// throttleReasons returns nvidia-smi's reasons mask ("0x0000000000000004")
// with the names of its set bits: "0x0000000000000004 (sw_power_cap)",
// "0x0000000000000000 (none)"; unknown bits are named by value, and text
// that is not a hexadecimal mask is returned as is.
func throttleReasons(mask string) string {
	v, err := strconv.ParseUint(strings.TrimPrefix(strings.ToLower(mask), "0x"), 16, 64)
	if err != nil || !strings.HasPrefix(strings.ToLower(mask), "0x") {
		return mask
	}
	var names []string
	for _, t := range throttleBits {
		if v&t.bit != 0 {
			names = append(names, t.name)
			v &^= t.bit
		}
	}
	if v != 0 {
		names = append(names, fmt.Sprintf("%#x", v))
	}
	if len(names) == 0 {
		names = []string{"none"}
	}
	return mask + " (" + strings.Join(names, ", ") + ")"
}

// parseComputeApps reads nvidia-smi --query-compute-apps=pid,process_name,
// used_memory output (csv,noheader,nounits) into "pid name (N MiB)"
// entries joined by "; ", leaving out process self and lines that do not
// start with a numeric pid (such as "No running processes found");
// "none" when no entry remains.
func parseComputeApps(out []byte, self int) string {
	var procs []string
	for _, l := range strings.Split(string(out), "\n") {
		f := strings.Split(strings.TrimSpace(l), ",")
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil || pid == self {
			continue
		}
		name := strings.TrimSpace(strings.Join(f[1:len(f)-1], ","))
		mem := strings.TrimSpace(f[len(f)-1])
		if _, err := strconv.ParseFloat(mem, 64); err == nil {
			mem += " MiB"
		}
		procs = append(procs, fmt.Sprintf("%d %s (%s)", pid, name, mem))
	}
	if len(procs) == 0 {
		return "none"
	}
	return strings.Join(procs, "; ")
}

// formatUUID formats a CUDA device UUID as nvidia-smi names the GPU
// ("GPU-" and the 16 bytes as 8-4-4-4-12 hexadecimal digits).
func formatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}
