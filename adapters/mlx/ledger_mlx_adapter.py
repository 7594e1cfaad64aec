#!/usr/bin/env python3
"""ledger-adapter/1 adapter for MLX's affine quantized matmul (CUDA, Metal or CPU).

Each case is run the way an MLX user runs a quantized linear layer:
mlx.core.quantized_matmul(x, w, scales, biases, transpose=True,
group_size=g, bits=b, stream=device) with x of shape (1, K). MLX's affine
layout is the protocol's layout: w is (N, K*bits/32) uint32, each row one
little-endian bit stream (for 3, 5 and 6 bits elements straddle words),
scales and biases (N, K/group_size) in the activation dtype,
w_hat = scale*q + bias. The conversion is therefore only a
reinterpretation of raw bits as MLX arrays (uint16/uint32 views), with no
arithmetic.

--device cpu runs MLX's CPU backend (the Linux wheels mlx + mlx-cpu, pinned
in requirements-cpu.txt and installed by `make mlx-deps` into
var/mlx-cpu/site, which --site puts first on sys.path); --device gpu runs
MLX's GPU stream: CUDA with the Linux wheels mlx + mlx-cuda-13 (run on the
GPU host: testdata/device/mlx), Metal on macOS (not yet run on Apple
hardware). The layout conversion is also tested against an exact stand-in
for mlx.core (testdata/fakemlx).

The adapter has the timing capability (Prepared): a throughput case's
operands stay in MLX arrays, in copies that products rotate through, and
groups of products are timed with time.perf_counter_ns around one mx.eval
(CPU and GPU streams alike: mx.eval returns when the results exist).

With LEDGER_MLX_DUMP=FILE in its environment the adapter also appends one
JSON line per case to FILE: the case id, its shape and the raw output bits
MLX returned (the per-case raw outputs of testdata/device/mlx).

The hello names what actually ran: mlx.core.__version__, the dist-info
versions of mlx and mlx-cpu, the path of the libmlx shared library mapped
into this process (read from /proc/self/maps, so the ledger can check it is
the file it pinned), and the source commit when the installed
distribution records one (direct_url.json of a VCS install; PyPI wheels
record none).

Usage: python3 ledger_mlx_adapter.py [--device gpu|cpu] [--site DIR]
"""

import argparse
import json
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ledger_adapter as la  # noqa: E402

mx = None  # mlx.core, imported in main() after --site is on sys.path
DEVICE = None
DUMP = None  # LEDGER_MLX_DUMP: per-case raw outputs, one JSON line each


def to_mlx(bits_array, dtype_code, shape):
    """Raw bit patterns -> an MLX array of the activation dtype (a view of
    uint16 or uint32 data: no rounding, no conversion)."""
    dtypes = {la.FLOAT16: mx.float16, la.BFLOAT16: mx.bfloat16, la.FLOAT32: mx.float32}
    raw = mx.uint16 if la.DTYPE_SIZE[dtype_code] == 2 else mx.uint32
    return mx.array(list(bits_array), dtype=raw).view(dtypes[dtype_code]).reshape(*shape)


def compute(case):
    w = mx.array(list(case.word_values()), dtype=mx.uint32).reshape(case.n, case.words_per_row)
    scales = to_mlx(case.scale_bits(), case.dtype, (case.n, case.groups))
    biases = to_mlx(case.bias_bits(), case.dtype, (case.n, case.groups))
    x = to_mlx(case.x_bits(), case.dtype, (1, case.k))
    y = mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=case.group_size, bits=case.bits, stream=DEVICE)
    mx.eval(y)
    raw = mx.uint16 if la.DTYPE_SIZE[case.dtype] == 2 else mx.uint32
    out = [int(v) for v in y.view(raw).reshape(-1).tolist()]
    if DUMP is not None:
        DUMP.write(json.dumps({"id": case.id, "dtype": la.DTYPE_NAMES[case.dtype], "bits": case.bits, "group_size": case.group_size,
                               "n": case.n, "k": case.k, "out": ["0x%0*x" % (2 * la.DTYPE_SIZE[case.dtype], v) for v in out]}) + "\n")
        DUMP.flush()
    return out


ROTATE_BYTES = 256 << 20  # operand copies a prepared case rotates through
MIN_SAMPLE_NS = 500_000  # a sample times at least 0.5 ms of products


def to_mlx_raw(raw, dtype_code, shape):
    """Little-endian raw bytes -> an MLX array of the activation dtype
    (a copy of the bytes viewed as the dtype: no rounding)."""
    dtypes = {la.FLOAT16: mx.float16, la.BFLOAT16: mx.bfloat16, la.FLOAT32: mx.float32}
    return mx.array(memoryview(la._values(raw, la.DTYPE_SIZE[dtype_code]))).view(dtypes[dtype_code]).reshape(*shape)


class Prepared:
    """A throughput case held by MLX (the timing capability): copies of
    the weights, scales and biases totalling at least ROTATE_BYTES (at
    most 64; products rotate through them, past the caches), the batch's
    vectors as x of shape (batch, K). A timed product is
    mx.quantized_matmul over the whole batch; a sample is the
    time.perf_counter_ns time of L products built and evaluated together
    (one mx.eval: back to back on the stream, one synchronization),
    divided by L, with L chosen at prepare so a sample takes >= 0.5 ms."""

    def __init__(self, case, xs):
        import time
        self.perf = time.perf_counter_ns
        self.case = case
        size = len(case.words) + len(case.scales) + len(case.biases)
        copies = min(64, max(1, -(-ROTATE_BYTES // size)))
        self.ops = []
        for _ in range(copies):
            w = mx.array(memoryview(case.word_values())).reshape(case.n, case.words_per_row)
            sc = to_mlx_raw(case.scales, case.dtype, (case.n, case.groups))
            bi = to_mlx_raw(case.biases, case.dtype, (case.n, case.groups))
            mx.eval(w, sc, bi)
            self.ops.append((w, sc, bi))
        self.x = to_mlx_raw(b"".join(xs), case.dtype, (len(xs), case.k))
        mx.eval(self.x)
        self.next = 0
        for _ in range(copies + 2):  # warm-up: every copy once
            mx.eval(self.products(1, 1))
        best = min(self._group(1, 1) for _ in range(3))
        self.launches = max(1, min(1 << 16, -(-MIN_SAMPLE_NS // max(best, 1))))

    def products(self, count, repeat):
        out = []
        for _ in range(count):
            w, sc, bi = self.ops[self.next]
            self.next = (self.next + 1) % len(self.ops)
            for _ in range(repeat):
                out.append(mx.quantized_matmul(self.x, w, sc, bi, transpose=True, group_size=self.case.group_size,
                                               bits=self.case.bits, stream=DEVICE))
        return out

    def _group(self, count, repeat):
        ys = self.products(count, repeat)
        t0 = self.perf()
        mx.eval(ys)
        return self.perf() - t0

    def output(self):
        w, sc, bi = self.ops[0]
        y = mx.quantized_matmul(self.x, w, sc, bi, transpose=True, group_size=self.case.group_size, bits=self.case.bits, stream=DEVICE)
        mx.eval(y)
        raw = mx.uint16 if la.DTYPE_SIZE[self.case.dtype] == 2 else mx.uint32
        flat = [int(v) for v in y.view(raw).reshape(-1).tolist()]
        return [flat[b * self.case.n:(b + 1) * self.case.n] for b in range(self.x.shape[0])]

    def time(self, n, repeat):
        return "perf_counter_ns", self.launches, [self._group(self.launches, repeat) / 1e9 / self.launches for _ in range(n)]

    def close(self):
        self.ops, self.x = [], None


def mapped_libmlx():
    """The path of the libmlx shared library mapped into this process, or
    "" where /proc/self/maps is unavailable (macOS) or none is mapped."""
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(None, 5)  # address perms offset dev inode [path]
                if len(fields) == 6 and os.path.basename(fields[5].strip()).startswith("libmlx."):
                    return fields[5].strip()
    except OSError:
        pass
    return ""


def dist_info(name):
    """(version, source commit) of the installed distribution name, read
    from its dist-info next to mlx (the commit only where direct_url.json
    records a VCS install)."""
    try:
        from importlib import metadata
        d = metadata.distribution(name)
    except Exception:
        return "", ""
    commit = ""
    try:
        du = json.loads(d.read_text("direct_url.json") or "{}")
        commit = (du.get("vcs_info") or {}).get("commit_id", "")
    except Exception:
        commit = ""
    return d.version or "", commit


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def nvidia_smi():
    """name, driver_version, memory.total and compute_cap of GPU 0 as
    nvidia-smi reports them, or {} where it is not there."""
    import subprocess
    keys = ["name", "driver_version", "memory.total", "compute_cap"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(keys), "--format=csv,noheader", "-i", "0"],
                             capture_output=True, text=True, timeout=30).stdout.strip()
    except Exception:
        return {}
    vals = [v.strip() for v in out.split(",")]
    return dict(zip(keys, vals)) if len(vals) == len(keys) else {}


def cuda_attrs():
    """What MLX and the driver say of the CUDA device: mx.device_info() on
    the GPU stream (device_name, architecture, memory_size, ...) and
    nvidia-smi's name, driver, memory and compute capability."""
    attrs = {}
    try:
        info = mx.device_info()
    except Exception as e:  # an MLX without device_info
        info = {"error": "%s: %s" % (type(e).__name__, e)}
    for k, v in sorted(info.items()):
        attrs["mlx.device_info." + str(k)[:64]] = str(v)[:200]
    for k, v in nvidia_smi().items():
        attrs["nvidia-smi." + k] = v[:200]
    return attrs


def hello(device):
    info = {}
    extra = {}
    if device == "gpu" and cuda_available():
        extra = cuda_attrs()
        model = extra.get("mlx.device_info.device_name") or extra.get("nvidia-smi.name") or "CUDA device"
    elif device == "gpu":
        try:
            if mx.metal.is_available():
                info = mx.metal.device_info()
        except Exception:  # older MLX, or no Metal
            info = {}
        model = str(info.get("architecture") or info.get("device_name") or platform.machine())
    else:
        model = cpu_model()
    runtime = {"mlx": mx.__version__, "python": platform.python_version(), "device": device,
               "mlx.core": os.path.abspath(getattr(mx, "__file__", "") or "")[:256]}
    source = {"repository": "github.com/ml-explore/mlx"}
    for dist in ("mlx", "mlx-cpu", "mlx-metal", "mlx-cuda-13"):
        version, commit = dist_info(dist)
        if version:
            runtime["dist." + dist] = version
        if commit:
            runtime["dist.%s.commit" % dist] = commit
            if dist == "mlx":
                source["commit"] = commit
    if "commit" not in source:
        runtime["source.commit"] = "not recorded by the installed distribution"
    lib = mapped_libmlx()
    if lib:
        runtime["libmlx"] = lib[:256]
    return {
        "state": la.host_state(0 if device == "gpu" and cuda_available() else None),
        "implementation": "mlx-quantized-matmul",
        "version": mx.__version__,
        "device": {"model": model[:512], "attrs": dict(extra, **{"mlx.device": str(mx.default_device()), "platform": platform.platform()[:200]})},
        "runtime": runtime,
        "source": source,
    }


def cuda_available():
    """Whether this MLX build has a usable CUDA backend."""
    try:
        return bool(mx.cuda.is_available())
    except Exception:  # an MLX without mx.cuda
        return False


def main():
    global mx, DEVICE, DUMP
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    ap.add_argument("--site", default="", help="directory put first on sys.path before importing mlx (make mlx-deps: var/mlx-cpu/site)")
    args = ap.parse_args()
    if args.site:
        sys.path.insert(0, os.path.abspath(args.site))
    import mlx.core  # noqa: E402

    mx = mlx.core
    DEVICE = mx.gpu if args.device == "gpu" else mx.cpu
    mx.set_default_device(DEVICE)
    if os.environ.get("LEDGER_MLX_DUMP"):
        DUMP = open(os.environ["LEDGER_MLX_DUMP"], "a")
    la.serve(hello(args.device), compute, prepare=Prepared)


if __name__ == "__main__":
    main()
