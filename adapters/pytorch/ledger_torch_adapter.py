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

    def compute(self, case):
        d = self.device
        T = DTYPES[case.dtype]
        q = unpack_q(case, d)
        scales = raw_tensor(case.scales, case.dtype, (case.n, case.groups), d)
        biases = raw_tensor(case.biases, case.dtype, (case.n, case.groups), d)
        x = raw_tensor(case.x, case.dtype, (1, case.k), d)
        g = case.group_size
        w = q.to(T) * scales.repeat_interleave(g, dim=1) + biases.repeat_interleave(g, dim=1)
        y = torch.nn.functional.linear(x, w)
        return out_bits(y, case.dtype)


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

    def compute(self, case):
        if case.dtype != la.BFLOAT16 or case.bits != 4:
            raise la.Unsupported("%s runs bfloat16 with 4 bits only" % self.name)
        if self.order is None:
            raise RuntimeError("int4pack layout probe failed: %s" % self.probe_error)
        if case.k % (self.inner_k_tiles * 16):
            raise la.Unsupported("K=%d is not a multiple of %d" % (case.k, self.inner_k_tiles * 16))
        d = self.device
        npad = (case.n + 15) // 16 * 16
        q = torch.zeros(npad, case.k, dtype=torch.int64)
        q[:case.n] = unpack_q(case, "cpu")
        scales = raw_tensor(case.scales, case.dtype, (case.n, case.groups), "cpu")
        biases = raw_tensor(case.biases, case.dtype, (case.n, case.groups), "cpu")
        zero_bf = (biases.double() + 8 * scales.double()).to(torch.bfloat16)
        x = raw_tensor(case.x, case.dtype, (1, case.k), "cpu")
        live = (x.reshape(case.groups, case.group_size) != 0).any(dim=1).tolist()  # groups that meet a nonzero x
        sl, bl, zl = scales.float().tolist(), biases.float().tolist(), zero_bf.float().tolist()
        for r in range(case.n):
            for gi in range(case.groups):
                # Exact rational check: float64 itself cannot hold e.g. 0.5 + 2**-100.
                if live[gi] and Fraction(zl[r][gi]) != Fraction(bl[r][gi]) + 8 * Fraction(sl[r][gi]):
                    raise la.Unsupported("zero point bias+8*scale = %r + 8*%r (row %d group %d) is not exact in bfloat16" % (bl[r][gi], sl[r][gi], r, gi))
        sz = torch.zeros(case.groups, npad, 2, dtype=torch.bfloat16)
        sz[:, :case.n, 0] = scales.t()
        sz[:, :case.n, 1] = zero_bf.t()
        sz[:, case.n:, 1] = 8  # padded rows: q = 0 -> w = -8 + 8 = 0
        sz[:, case.n:, 0] = 1
        y = self.mm(x.to(d), self.pack(q.to(d), self.order), case.group_size, sz.to(d))
        return out_bits(y[:, :case.n], case.dtype)


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
    h = {"implementation": impl.name, "version": torch.__version__, "device": dev, "runtime": runtime}
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
    la.serve(hello(impl, args.device), impl.compute)


if __name__ == "__main__":
    main()
