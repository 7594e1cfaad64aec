"""An exact stand-in for the subset of mlx.core the MLX adapter uses.

It is NOT MLX: it implements MLX's documented affine quantized_matmul
semantics (w_hat = scale*q + bias, q read from each row's little-endian
bit stream of uint32 words, y = x @ w_hat.T) with exact rational
arithmetic and one round-to-nearest-even to the output dtype, so a test
through it checks the adapter's layout conversion and the protocol, never
MLX's kernel. Arrays hold raw bit patterns for float dtypes, so view()
between same-width dtypes is a reinterpretation, as in MLX.
"""

import struct
from fractions import Fraction

__version__ = "0.0.0-fake"


class Dtype:
    def __init__(self, name, size, kind):
        self.name, self.size, self.kind = name, size, kind

    def __repr__(self):
        return "mlx.core." + self.name


uint16 = Dtype("uint16", 2, "u")
uint32 = Dtype("uint32", 4, "u")
float16 = Dtype("float16", 2, "f")
bfloat16 = Dtype("bfloat16", 2, "f")
float32 = Dtype("float32", 4, "f")


class Device:
    def __init__(self, name):
        self.name = name

    def __repr__(self):
        return "Device(%s, 0)" % self.name


gpu, cpu = Device("gpu"), Device("cpu")
_default = [cpu]


def set_default_device(d):
    _default[0] = d


def default_device():
    return _default[0]


class metal:
    @staticmethod
    def is_available():
        return False

    @staticmethod
    def device_info():
        return {}


class array:
    def __init__(self, data, dtype=None, shape=None):
        if dtype is None or dtype.kind != "u":
            raise TypeError("the fake holds raw integer data only (uint16/uint32)")
        limit = 1 << (8 * dtype.size)
        data = list(data)
        for v in data:
            if not isinstance(v, int) or v < 0 or v >= limit:
                raise ValueError("value %r out of range for %r" % (v, dtype))
        self.data, self.dtype = data, dtype
        self.shape = tuple(shape) if shape else (len(data),)

    def view(self, dtype):
        if dtype.size != self.dtype.size:
            raise ValueError("the fake views only between dtypes of one width")
        out = array.__new__(array)
        out.data, out.dtype, out.shape = self.data, dtype, self.shape
        return out

    def reshape(self, *shape):
        n = 1
        for s in shape:
            if s != -1:
                n *= s
        shape = tuple(len(self.data) // n if s == -1 else s for s in shape)
        prod = 1
        for s in shape:
            prod *= s
        if prod != len(self.data):
            raise ValueError("cannot reshape %r to %r" % (self.shape, shape))
        out = array.__new__(array)
        out.data, out.dtype, out.shape = self.data, self.dtype, shape
        return out

    def tolist(self):
        if len(self.shape) != 1:
            raise ValueError("the fake lists only 1-D arrays")
        return list(self.data)


def eval(*arrays):
    return None


def _decode(dtype, b):
    if dtype is float16:
        return Fraction(struct.unpack("<e", struct.pack("<H", b))[0])
    if dtype is bfloat16:
        return Fraction(struct.unpack("<f", struct.pack("<I", b << 16))[0])
    if dtype is float32:
        return Fraction(struct.unpack("<f", struct.pack("<I", b))[0])
    raise TypeError("not a float dtype: %r" % dtype)


def _f32_bits(v):
    try:
        return struct.unpack("<I", struct.pack("<f", float(v)))[0]
    except OverflowError:
        return 0x7F800000 if v > 0 else 0xFF800000


def _encode(dtype, v):
    if dtype is float16:
        try:
            return struct.unpack("<H", struct.pack("<e", float(v)))[0]
        except OverflowError:
            return 0x7C00 if v > 0 else 0xFC00
    u = _f32_bits(v)
    if dtype is float32:
        return u
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF  # RNE to bfloat16


def quantized_matmul(x, w, scales, biases, transpose=True, group_size=64, bits=4, stream=None):
    if not transpose:
        raise ValueError("the fake implements transpose=True only")
    if w.dtype is not uint32 or len(w.shape) != 2:
        raise TypeError("w must be a 2-D uint32 array")
    n, wpr = w.shape
    k = wpr * 32 // bits
    if x.shape != (1, k):
        raise ValueError("x has shape %r, want (1, %d)" % (x.shape, k))
    if scales.shape != (n, k // group_size) or biases.shape != scales.shape:
        raise ValueError("scales/biases shape %r, want %r" % (scales.shape, (n, k // group_size)))
    if not (x.dtype is scales.dtype is biases.dtype):
        raise TypeError("x, scales and biases must share one dtype")
    xs = [(i, _decode(x.dtype, b)) for i, b in enumerate(x.data)]
    xs = [(i, v) for i, v in xs if v != 0]
    mask = (1 << bits) - 1
    out = []
    for r in range(n):
        row = w.data[r * wpr:(r + 1) * wpr]
        stream = int.from_bytes(struct.pack("<%dI" % wpr, *row), "little")
        acc = Fraction(0)
        for i, v in xs:
            g = r * (k // group_size) + i // group_size
            q = (stream >> (i * bits)) & mask
            acc += v * (_decode(scales.dtype, scales.data[g]) * q + _decode(biases.dtype, biases.data[g]))
        out.append(_encode(x.dtype, acc))
    res = array.__new__(array)
    res.data, res.dtype, res.shape = out, x.dtype, (1, n)
    return res
