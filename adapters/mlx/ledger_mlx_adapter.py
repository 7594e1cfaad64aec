#!/usr/bin/env python3
"""ledger-adapter/1 adapter for MLX's affine quantized matmul on Metal.

Each case is run the way an MLX user runs a quantized linear layer:
mlx.core.quantized_matmul(x, w, scales, biases, transpose=True,
group_size=g, bits=b) with x of shape (1, K). MLX's affine layout is the
protocol's layout: w is (N, K*bits/32) uint32, each row one little-endian
bit stream (for 3, 5 and 6 bits elements straddle words), scales and
biases (N, K/group_size) in the activation dtype, w_hat = scale*q + bias.
The conversion is therefore only a reinterpretation of raw bits as MLX
arrays (uint16/uint32 views), with no arithmetic.

Not yet run on Apple hardware: its layout conversion is tested on CPU
against the protocol with an exact stand-in for mlx.core
(testdata/fakemlx, adapters_test.go).

Usage: python3 ledger_mlx_adapter.py [--device gpu|cpu]
"""

import argparse
import os
import platform
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
import ledger_adapter as la  # noqa: E402

import mlx.core as mx  # noqa: E402

DTYPES = {la.FLOAT16: mx.float16, la.BFLOAT16: mx.bfloat16, la.FLOAT32: mx.float32}


def to_mlx(bits_array, dtype_code, shape):
    """Raw bit patterns -> an MLX array of the activation dtype (a view of
    uint16 or uint32 data: no rounding, no conversion)."""
    raw = mx.uint16 if la.DTYPE_SIZE[dtype_code] == 2 else mx.uint32
    return mx.array(list(bits_array), dtype=raw).view(DTYPES[dtype_code]).reshape(*shape)


def compute(case):
    w = mx.array(list(case.word_values()), dtype=mx.uint32).reshape(case.n, case.words_per_row)
    scales = to_mlx(case.scale_bits(), case.dtype, (case.n, case.groups))
    biases = to_mlx(case.bias_bits(), case.dtype, (case.n, case.groups))
    x = to_mlx(case.x_bits(), case.dtype, (1, case.k))
    y = mx.quantized_matmul(x, w, scales, biases, transpose=True, group_size=case.group_size, bits=case.bits)
    mx.eval(y)
    raw = mx.uint16 if la.DTYPE_SIZE[case.dtype] == 2 else mx.uint32
    return [int(v) for v in y.view(raw).reshape(-1).tolist()]


def hello(device):
    info = {}
    try:
        if mx.metal.is_available():
            info = mx.metal.device_info()
    except Exception:  # older MLX, or no Metal
        info = {}
    model = str(info.get("architecture") or info.get("device_name") or platform.machine())
    return {
        "implementation": "mlx-quantized-matmul",
        "version": mx.__version__,
        "device": {"model": model, "attrs": {"mlx.device": str(mx.default_device()), "platform": platform.platform()[:200]}},
        "runtime": {"mlx": mx.__version__, "python": platform.python_version(), "device": device},
        "source": {"repository": "github.com/ml-explore/mlx"},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", choices=["gpu", "cpu"], default="gpu")
    args = ap.parse_args()
    mx.set_default_device(mx.gpu if args.device == "gpu" else mx.cpu)
    la.serve(hello(args.device), compute)


if __name__ == "__main__":
    main()
