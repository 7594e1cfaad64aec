#!/usr/bin/env python3
"""ledger-adapter/1 adapter for PyTorch (CUDA or CPU).

Two implementations, chosen with --kernel:

  dequant   (implementation "pytorch-dequant-matmul"): what a PyTorch user
            writes for an affine-quantized linear layer: unpack q, dequantize
            in the activation dtype, w_hat = q.to(T) * scale + bias (scale and
            bias repeated over each group), then
            torch.nn.functional.linear(x[None], w_hat) in T (cuBLAS on CUDA).
            Every dtype, bit width and group size.
  int4pack  (implementation "pytorch-int4pack-mm"): PyTorch's int4
            weight-only kernel, torch._weight_int4pack_mm (CUDA) or
            torch._weight_int4pack_mm_for_cpu (CPU), bfloat16 and 4 bits only.
            Its format dequantizes (q - 8) * scale + zero, so the MLX affine
            bias converts to zero = bias + 8 * scale; where that zero is not
            exact in bfloat16 for a group that meets a nonzero x the case is
            answered unsupported (the format cannot hold the weights). N is
            padded to a multiple of 16 with zero rows (the CPU kernel's
            tiling; CUDA needs 8), K is used as is (inner K tiles 2: K must
            be a multiple of 32).

Both have the timing capability (Prepared): a throughput case's operands
(q, scales and biases for dequant; the packed weights and scale/zero
tensor for int4pack) stay on the device in copies that products rotate
through; groups of products are timed with CUDA events on CUDA and
time.perf_counter_ns on CPU.

Usage: python3 ledger_torch_adapter.py --kernel dequant|int4pack --device cuda|cpu
Only the protocol goes to stdout; diagnostics go to stderr.
"""

import argparse
import os
from fractions import Fraction
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ledger_adapter as la  # noqa: E402

import torch  # noqa: E402

DTYPES = {la.FLOAT16: torch.float16, la.BFLOAT16: torch.bfloat16, la.FLOAT32: torch.float32}
RAW = {2: torch.int16, 4: torch.int32}


def raw_tensor(raw, dtype_code, shape, device):
    """Little-endian raw bits -> a tensor of the activation dtype (a view,
    no rounding)."""
    size = la.DTYPE_SIZE[dtype_code]
    t = torch.frombuffer(bytearray(raw), dtype=RAW[size]).clone()
    return t.view(DTYPES[dtype_code]).reshape(shape).to(device)


def unpack_q(case, device):
    """q as an int64 tensor (N, K) from the packed rows: each row one
    little-endian bit stream."""
    b = torch.frombuffer(bytearray(case.words), dtype=torch.uint8).to(torch.int64).reshape(case.n, -1)
    bits = ((b.unsqueeze(-1) >> torch.arange(8)) & 1).reshape(case.n, case.k, case.bits)
    weights = (1 << torch.arange(case.bits)).to(torch.int64)
    return (bits * weights).sum(-1).to(device)


def out_bits(y, dtype_code):
    size = la.DTYPE_SIZE[dtype_code]
    v = y.reshape(-1).contiguous().cpu().view(RAW[size]).tolist()
    mask = 0xFFFF if size == 2 else 0xFFFFFFFF
    return [int(x) & mask for x in v]


class Dequant:
    name = "pytorch-dequant-matmul"

    def __init__(self, device):
        self.device = device

    def operands(self, case):
        """q (as uint8: every width fits), scales and biases on the device:
        what a timed product starts from."""
        d = self.device
        q = unpack_q(case, d).to(torch.uint8)
        scales = raw_tensor(case.scales, case.dtype, (case.n, case.groups), d)
        biases = raw_tensor(case.biases, case.dtype, (case.n, case.groups), d)
        return q, scales, biases

    def product(self, case, ops, x):
        """y = x w_hat^T for x of shape (batch, K), dequantizing w_hat in
        the activation dtype on every product (the user's code)."""
        q, scales, biases = ops
        g = case.group_size
        w = q.to(x.dtype) * scales.repeat_interleave(g, dim=1) + biases.repeat_interleave(g, dim=1)
        return torch.nn.functional.linear(x, w)

    def compute(self, case):
        x = raw_tensor(case.x, case.dtype, (1, case.k), self.device)
        return out_bits(self.product(case, self.operands(case), x), case.dtype)


class Int4Pack:
    name = "pytorch-int4pack-mm"
    inner_k_tiles = 2

    def __init__(self, device):
        self.device = device
        self.cuda = device.startswith("cuda")
        self.order = None
        self.probe_error = None
        try:
            self.order = self.probe()
        except Exception as e:  # reported per case and in the hello
            self.probe_error = "%s: %s" % (type(e).__name__, e)

    def pack(self, q, order):
        """q: int32 (Npad, K) in [0, 16) -> the kernel's packed weights."""
        if not self.cuda:
            return torch._convert_weight_to_int4pack_for_cpu(q.to(torch.int32).cpu(), self.inner_k_tiles)
        if order == "high-first":
            u8 = (q[:, ::2] << 4 | q[:, 1::2]).to(torch.uint8)
        else:
            u8 = (q[:, ::2] | q[:, 1::2] << 4).to(torch.uint8)
        return torch._convert_weight_to_int4pack(u8.to(self.device), self.inner_k_tiles)

    def mm(self, x, packed, group, sz):
        if self.cuda:
            return torch._weight_int4pack_mm(x, packed, group, sz)
        return torch._weight_int4pack_mm_for_cpu(x, packed, group, sz)

    def probe(self):
        """Find the nibble order for which the kernel returns W^T from an
        identity input (scale 1, zero 8: w = q exactly)."""
        n, k, g = 16, 64, 32
        gen = torch.Generator().manual_seed(7)
        q = torch.randint(0, 16, (n, k), generator=gen, dtype=torch.int32)
        sz = torch.empty(k // g, n, 2, dtype=torch.bfloat16)
        sz[:, :, 0] = 1
        sz[:, :, 1] = 8
        eye = torch.eye(k, dtype=torch.bfloat16, device=self.device)
        for order in (["high-first", "low-first"] if self.cuda else ["unpacked-int32"]):
            y = self.mm(eye, self.pack(q.to(self.device), order), g, sz.to(self.device))
            if torch.equal(y.float().cpu(), q.t().float()):
                return order
        raise RuntimeError("the identity probe matched no nibble order")

    def _host_operands(self, case):
        """The case's q (padded to a multiple of 16 rows), scales, biases
        and zero points bias + 8*scale rounded to bfloat16, on the host;
        Unsupported for what the kernel cannot run."""
        if case.dtype != la.BFLOAT16 or case.bits != 4:
            raise la.Unsupported("%s runs bfloat16 with 4 bits only" % self.name)
        if self.order is None:
            raise RuntimeError("int4pack layout probe failed: %s" % self.probe_error)
        if case.k % (self.inner_k_tiles * 16):
            raise la.Unsupported("K=%d is not a multiple of %d" % (case.k, self.inner_k_tiles * 16))
        npad = (case.n + 15) // 16 * 16
        q = torch.zeros(npad, case.k, dtype=torch.int64)
        q[:case.n] = unpack_q(case, "cpu")
        scales = raw_tensor(case.scales, case.dtype, (case.n, case.groups), "cpu")
        biases = raw_tensor(case.biases, case.dtype, (case.n, case.groups), "cpu")
        zero_bf = (biases.double() + 8 * scales.double()).to(torch.bfloat16)
        return q, scales, biases, zero_bf

    def _device_operands(self, case, q, scales, zero_bf):
        """The kernel's packed weights and scale/zero tensor on the device."""
        d = self.device
        npad = q.shape[0]
        sz = torch.zeros(case.groups, npad, 2, dtype=torch.bfloat16)
        sz[:, :case.n, 0] = scales.t()
        sz[:, :case.n, 1] = zero_bf.t()
        sz[:, case.n:, 1] = 8  # padded rows: q = 0 -> w = -8 + 8 = 0
        sz[:, case.n:, 0] = 1
        return self.pack(q.to(d), self.order), sz.to(d)

    def compute(self, case):
        q, scales, biases, zero_bf = self._host_operands(case)
        x = raw_tensor(case.x, case.dtype, (1, case.k), "cpu")
        live = (x.reshape(case.groups, case.group_size) != 0).any(dim=1).tolist()  # groups that meet a nonzero x
        sl, bl, zl = scales.float().tolist(), biases.float().tolist(), zero_bf.float().tolist()
        for r in range(case.n):
            for gi in range(case.groups):
                # Exact rational check: float64 itself cannot hold e.g. 0.5 + 2**-100.
                if live[gi] and Fraction(zl[r][gi]) != Fraction(bl[r][gi]) + 8 * Fraction(sl[r][gi]):
                    raise la.Unsupported("zero point bias+8*scale = %r + 8*%r (row %d group %d) is not exact in bfloat16" % (bl[r][gi], sl[r][gi], r, gi))
        y = self.product(case, self._device_operands(case, q, scales, zero_bf), x.to(self.device))
        return out_bits(y, case.dtype)

    def operands(self, case):
        """The kernel's packed weights and scale/zero tensor for a timed
        product. Unlike compute, the zero points bias + 8*scale are rounded
        to bfloat16 whether exact or not: the throughput lane checks the
        output against a tolerance, not bit for bit."""
        q, scales, _, zero_bf = self._host_operands(case)
        return self._device_operands(case, q, scales, zero_bf)

    def product(self, case, ops, x):
        packed, sz = ops
        return self.mm(x, packed, case.group_size, sz)[:, :case.n]


ROTATE_BYTES = 256 << 20  # operand copies a prepared case rotates through (past L2)
MIN_SAMPLE_S = 0.5e-3  # a sample times at least 0.5 ms of products


def _nbytes(ops):
    return sum(t.numel() * t.element_size() for t in ops)


class Prepared:
    """A throughput case held by torch (the timing capability): the
    implementation's operands in copies totalling at least ROTATE_BYTES
    (at most 64; products rotate through them, past the GPU's L2), x of
    shape (batch, K) on the device, warmed up. On CUDA a sample is
    torch.cuda.Event(enable_timing=True) elapsed time around L products
    launched back to back on the current stream; on CPU
    time.perf_counter_ns around them. L is chosen at prepare so a sample
    takes >= 0.5 ms."""

    def __init__(self, impl, device, case, xs):
        import time
        self.perf = time.perf_counter_ns
        self.impl, self.case, self.cuda = impl, case, device.startswith("cuda")
        first = impl.operands(case)
        copies = min(64, max(1, -(-ROTATE_BYTES // max(1, _nbytes(first)))))
        self.ops = [first] + [tuple(t.clone() for t in first) for _ in range(copies - 1)]
        self.x = raw_tensor(b"".join(xs), case.dtype, (len(xs), case.k), device)
        self.next = 0
        self.launches = 1
        with torch.inference_mode():
            for _ in range(copies + 3):  # warm-up: every copy, kernel selection
                self.products(1, 1)
            self._sync()
            best = min(self._group(1, 1) for _ in range(3))
        self.launches = max(1, min(1 << 16, int(-(-MIN_SAMPLE_S // max(best, 1e-9)))))

    def _sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def products(self, count, repeat):
        for _ in range(count):
            ops = self.ops[self.next]
            self.next = (self.next + 1) % len(self.ops)
            for _ in range(repeat):
                self.impl.product(self.case, ops, self.x)

    def _group(self, count, repeat):
        """Seconds of count products (each launched repeat times)."""
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            self.products(count, repeat)
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3
        t0 = self.perf()
        self.products(count, repeat)
        return (self.perf() - t0) / 1e9

    def output(self):
        with torch.inference_mode():
            y = self.impl.product(self.case, self.ops[0], self.x)
        flat = out_bits(y, self.case.dtype)
        return [flat[b * self.case.n:(b + 1) * self.case.n] for b in range(self.x.shape[0])]

    def time(self, n, repeat):
        clock = "torch.cuda.Event" if self.cuda else "perf_counter_ns"
        with torch.inference_mode():
            samples = [self._group(self.launches, repeat) / self.launches for _ in range(n)]
        return clock, self.launches, samples

    def close(self):
        self.ops, self.x = [], None
        if self.cuda:
            torch.cuda.empty_cache()


def hello(impl, device):
    cuda = device.startswith("cuda")
    dev = {"model": platform.processor() or platform.machine(), "cores": os.cpu_count() or 0, "attrs": {"torch.device": device}}
    runtime = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "kernel": impl.name,
    }
    if cuda:
        p = torch.cuda.get_device_properties(device)
        dev["model"] = p.name
        dev["attrs"]["compute_capability"] = "%d.%d" % (p.major, p.minor)
        dev["attrs"]["multiprocessors"] = str(p.multi_processor_count)
        dev["attrs"]["memory_bytes"] = str(p.total_memory)
        dev["driver"] = "cuda runtime " + str(torch.version.cuda)
        runtime["cuda"] = str(torch.version.cuda)
        runtime["cudnn"] = str(torch.backends.cudnn.version())
        m = torch.backends.cuda.matmul
        for flag in ("allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
            runtime["cuda.matmul." + flag] = str(getattr(m, flag, "n/a"))
    else:
        runtime["threads"] = str(torch.get_num_threads())
        runtime["mkldnn"] = str(torch.backends.mkldnn.is_available())
    if isinstance(impl, Int4Pack):
        runtime["int4pack.layout"] = impl.order or ("probe failed: " + str(impl.probe_error))[:200]
    gpu = None
    if cuda:
        gpu = torch.cuda.current_device() if device == "cuda" else int(device.split(":", 1)[1])
    h = {"implementation": impl.name, "version": torch.__version__, "device": dev, "runtime": runtime,
         "state": la.host_state(gpu)}
    git = getattr(torch.version, "git_version", "")
    if git:
        h["source"] = {"repository": "github.com/pytorch/pytorch", "commit": git}
    return h


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kernel", choices=["dequant", "int4pack"], required=True)
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    args = ap.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("ledger_torch_adapter: CUDA is not available to this torch", file=sys.stderr)
        sys.exit(2)
    impl = (Dequant if args.kernel == "dequant" else Int4Pack)(args.device)
    la.serve(hello(impl, args.device), impl.compute, prepare=lambda case, xs: Prepared(impl, args.device, case, xs))


if __name__ == "__main__":
    main()
