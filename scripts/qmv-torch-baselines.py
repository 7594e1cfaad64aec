#!/usr/bin/env python3
"""Device times of PyTorch's quantized and dense matrix-vector baselines
for backends/cuda's qmv benchmark (BENCHMARKS.md, CUDA qmv section).

For each square shape N = K (4096, 8192, 16384) and batch M (1, 2, 4):
  tinygemm   torch._weight_int4pack_mm: 4-bit weights, group 64, bfloat16
             activations, scales and zero points (innerKTiles 2, 4 and 8)
  compile    torch.compile of dequantize-then-matmul over MLX-layout
             operands (uint8 nibble pairs, float16 scales and biases)
  cublas     dense float16 x @ W.T
and the device-to-device copy rate of 1 GiB (bytes read plus written).

Each time is the median over 7 replays of a CUDA graph of 50 calls that
rotate over operand copies filling at least 256 MiB (past the L2 cache),
timed with CUDA events; microseconds per call. Inputs are random, never
zeros. Usage: python3 qmv-torch-baselines.py [--out FILE.json] [--quick]
(--quick: M = 1 only). torch.compile runs at 8192 and 16384 (M = 1 only
at 16384).
"""
import argparse
import json
import math
import statistics
import sys
import time

import torch

G = 64
CALLS = 50
REPLAYS = 7


def copies_for(nbytes):
    return max(2, math.ceil((256 << 20) / nbytes))


def graph_time(fn, sets):
    """Median microseconds per call of fn(*sets[i % len(sets)]) over
    REPLAYS replays of a CUDA graph of CALLS calls."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for a in sets[:3]:  # warm up outside the graph
            fn(*a)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(CALLS):
            fn(*sets[i % len(sets)])
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(REPLAYS):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1e3 / CALLS)
    return statistics.median(times), min(times), max(times)


def tinygemm_sets(n, k, m, inner, count):
    sets = []
    for _ in range(count):
        u8 = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        packed = torch._convert_weight_to_int4pack(u8, inner)
        sz = torch.empty(k // G, n, 2, dtype=torch.bfloat16, device="cuda")
        sz[..., 0].uniform_(0, 0.01)
        sz[..., 1].uniform_(-0.5, 0.5)
        x = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        sets.append((x, packed, sz))
    return sets


def dequant_matmul(x, q, scales, biases):
    lo = (q & 15).to(torch.float16)
    hi = (q >> 4).to(torch.float16)
    w = torch.stack((lo, hi), dim=-1).reshape(q.shape[0], -1)
    w = w.reshape(q.shape[0], -1, G) * scales[..., None] + biases[..., None]
    return x @ w.reshape(q.shape[0], -1).t()


def mlx_sets(n, k, m, count):
    sets = []
    for _ in range(count):
        q = torch.randint(0, 256, (n, k // 2), dtype=torch.uint8, device="cuda")
        s = torch.rand(n, k // G, dtype=torch.float16, device="cuda") * 0.01
        b = torch.rand(n, k // G, dtype=torch.float16, device="cuda") - 0.5
        x = torch.randn(m, k, dtype=torch.float16, device="cuda")
        sets.append((x, q, s, b))
    return sets


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    props = torch.cuda.get_device_properties(0)
    env = {
        "device": torch.cuda.get_device_name(0), "sms": props.multi_processor_count,
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "has_weight_int4pack_mm": hasattr(torch, "_weight_int4pack_mm"),
        "has_aten_weight_int4pack_mm": hasattr(torch.ops.aten, "_weight_int4pack_mm"),
        "has_convert_weight_to_int4pack": hasattr(torch, "_convert_weight_to_int4pack"),
    }
    print(json.dumps(env), flush=True)
    rows = []

    def rec(kind, n, m, t, extra=""):
        med, lo, hi = t
        rows.append({"kind": kind, "n": n, "k": n, "m": m, "us": med, "min": lo, "max": hi, "note": extra})
        print("%-22s %5d^2 M=%d  %8.2f us  (%.2f .. %.2f) %s" % (kind, n, m, med, lo, hi, extra), flush=True)

    # copy rate
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    t = graph_time(lambda a, b: b.copy_(a), [(src, dst)])
    rows.append({"kind": "copy-1GiB", "us": t[0], "read_plus_write_GBps": 2 * (1 << 30) / (t[0] * 1e-6) / 1e9})
    print("copy 1 GiB: %.1f us, %.0f GB/s read+write" % (t[0], rows[-1]["read_plus_write_GBps"]), flush=True)
    del src, dst

    sizes = [4096, 8192, 16384]
    batches = [1] if args.quick else [1, 2, 4]
    for n in sizes:
        k = n
        for m in batches:
            # tinygemm
            per = n * k // 2 + k // G * n * 4
            for inner in (2, 4, 8):
                try:
                    sets = tinygemm_sets(n, k, m, inner, copies_for(per))
                    t = graph_time(lambda x, p, sz: torch._weight_int4pack_mm(x, p, G, sz), sets)
                    rec("tinygemm-ikt%d" % inner, n, m, t)
                except Exception as e:  # report, keep going
                    print("tinygemm ikt%d %d M=%d failed: %s: %s" % (inner, n, m, type(e).__name__, e), flush=True)
                sets = None
                torch.cuda.empty_cache()
            # dense cuBLAS float16
            per = n * k * 2
            sets = [(torch.randn(m, k, dtype=torch.float16, device="cuda"),
                     torch.randn(n, k, dtype=torch.float16, device="cuda")) for _ in range(copies_for(per))]
            rec("cublas-f16-dense", n, m, graph_time(lambda x, w: x @ w.t(), sets))
            sets = None
            torch.cuda.empty_cache()
            # torch.compile dequant + matmul
            if n == 4096 or (m != 1 and n == 16384):
                continue
            per = n * k // 2 + 4 * n * k // G
            sets = mlx_sets(n, k, m, copies_for(per))
            try:
                t0 = time.time()
                f = torch.compile(dequant_matmul, dynamic=False)
                got = f(*sets[0])
                want = dequant_matmul(*sets[0])
                rel = ((got.float() - want.float()).norm() / want.float().norm()).item()
                rec("compile-dequant-mm", n, m, graph_time(f, sets), "compile %.0fs, rel diff vs eager %.1e" % (time.time() - t0, rel))
            except Exception as e:
                print("compile %d M=%d failed: %s: %s" % (n, m, type(e).__name__, e), flush=True)
            sets = None
            torch.cuda.empty_cache()
    if args.out:
        with open(args.out, "w") as fh:
            json.dump({"env": env, "rows": rows}, fh, indent=1)


if __name__ == "__main__":
    sys.exit(main())
