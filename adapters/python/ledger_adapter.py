"""The adapter side of the ledger's adapter protocol, ledger-adapter/1.

Pure Python (3.8+, standard library only), shared by the PyTorch and MLX
adapters. The protocol is specified in the repository README ("External
implementations"); in short, every frame is a 1-byte type, a 4-byte
little-endian payload length and the payload:

  H  hello, both ways: UTF-8 JSON. The ledger speaks first.
  C  case, ledger -> adapter:
       u16 id length, id (UTF-8), u8 dtype (1 float16, 2 bfloat16,
       3 float32), u8 bits, u16 group size, u32 N, u32 K,
       N*K*bits/32 u32 weight words (each row one little-endian bit stream),
       N*K/group scales, N*K/group biases, K x values (raw IEEE bits:
       u16 for float16/bfloat16, u32 for float32)
  Y  output, adapter -> ledger: u16 id length, id, u8 dtype, u32 count,
       count raw values
  U  unsupported, adapter -> ledger: u16 id length, id, UTF-8 reason
  E  error, adapter -> ledger: u16 id length, id, UTF-8 message
  Q  bye, ledger -> adapter: no payload; the adapter exits 0

Answers come in the order of the cases. All integers are little-endian.
"""

import json
import struct
import sys
from array import array

PROTOCOL = "ledger-adapter/1"
MAX_PAYLOAD = 64 << 20

FLOAT16, BFLOAT16, FLOAT32 = 1, 2, 3
DTYPE_NAMES = {FLOAT16: "float16", BFLOAT16: "bfloat16", FLOAT32: "float32"}
DTYPE_SIZE = {FLOAT16: 2, BFLOAT16: 2, FLOAT32: 4}


class ProtocolError(Exception):
    """A frame or payload that breaks the protocol."""


class Unsupported(Exception):
    """Raised by a compute function for a case the implementation cannot
    run (answered with a U frame carrying the reason)."""


def read_exact(f, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = f.read(n - len(buf))
        if not chunk:
            return bytes(buf)
        buf += chunk
    return bytes(buf)


def read_frame(f):
    """Read one frame; returns (type, payload) or None at a clean end."""
    head = read_exact(f, 5)
    if not head:
        return None
    if len(head) != 5:
        raise ProtocolError("stream ends inside a frame header")
    typ = chr(head[0])
    (n,) = struct.unpack("<I", head[1:])
    if n > MAX_PAYLOAD:
        raise ProtocolError("frame payload exceeds 64 MiB")
    payload = read_exact(f, n)
    if len(payload) != n:
        raise ProtocolError("stream ends inside a frame payload")
    return typ, payload


def write_frame(f, typ, payload=b""):
    f.write(struct.pack("<BI", ord(typ), len(payload)))
    f.write(payload)


def _values(raw, size):
    """Raw little-endian u16/u32 values of raw as an array('H'/'I')."""
    a = array("H" if size == 2 else "I")
    if a.itemsize != size:  # platforms where 'I' is not 4 bytes
        a = array("L")
    a.frombytes(raw)
    if sys.byteorder == "big":
        a.byteswap()
    return a


class Case:
    """One decoded case. words, scales, biases and x are the raw bytes
    (little-endian) as sent; the *_bits properties give them as arrays of
    integers."""

    __slots__ = ("id", "dtype", "bits", "group_size", "n", "k", "words", "scales", "biases", "x")

    @property
    def groups(self):
        return self.k // self.group_size

    @property
    def words_per_row(self):
        return self.k * self.bits // 32

    @property
    def value_size(self):
        return DTYPE_SIZE[self.dtype]

    def word_values(self):
        return _values(self.words, 4)

    def scale_bits(self):
        return _values(self.scales, self.value_size)

    def bias_bits(self):
        return _values(self.biases, self.value_size)

    def x_bits(self):
        return _values(self.x, self.value_size)


def parse_case(payload):
    """Decode a C frame's payload into a Case; raises ProtocolError."""
    if len(payload) < 2:
        raise ProtocolError("case payload too short")
    (idlen,) = struct.unpack_from("<H", payload, 0)
    off = 2 + idlen
    if idlen == 0 or idlen > 256 or len(payload) < off + 12:
        raise ProtocolError("bad case id or header")
    c = Case()
    c.id = payload[2:off].decode("utf-8")
    c.dtype, c.bits, c.group_size, c.n, c.k = struct.unpack_from("<BBHII", payload, off)
    off += 12
    if c.dtype not in DTYPE_NAMES:
        raise ProtocolError("case %s: dtype code %d" % (c.id, c.dtype))
    if c.bits not in (2, 3, 4, 5, 6, 8) or c.group_size not in (32, 64, 128):
        raise ProtocolError("case %s: bits %d / group size %d" % (c.id, c.bits, c.group_size))
    if c.n < 1 or c.k < 1 or c.k % c.group_size:
        raise ProtocolError("case %s: shape %dx%d" % (c.id, c.n, c.k))
    sizes = [4 * c.n * c.words_per_row, c.value_size * c.n * c.groups, c.value_size * c.n * c.groups, c.value_size * c.k]
    if len(payload) != off + sum(sizes):
        raise ProtocolError("case %s: payload has %d bytes, want %d" % (c.id, len(payload), off + sum(sizes)))
    parts = []
    for s in sizes:
        parts.append(payload[off:off + s])
        off += s
    c.words, c.scales, c.biases, c.x = parts
    return c


def _id(case_id):
    b = case_id.encode("utf-8")
    return struct.pack("<H", len(b)) + b


def encode_output(case_id, dtype, values):
    """Payload of a Y frame: values are raw bit patterns (ints)."""
    a = array("H" if DTYPE_SIZE[dtype] == 2 else "I", values)
    if DTYPE_SIZE[dtype] == 4 and a.itemsize != 4:
        a = array("L", values)
    if sys.byteorder == "big":
        a.byteswap()
    return _id(case_id) + struct.pack("<BI", dtype, len(values)) + a.tobytes()


def encode_text(case_id, text):
    return _id(case_id) + text.encode("utf-8", "replace")[:1024]


def unpack_q(words, bits, n, k):
    """Unpack N rows of packed weights (an array of u32 words, each row
    K*bits/32 words holding one little-endian bit stream) into a flat list
    of N*K integers q in [0, 2**bits)."""
    wpr = k * bits // 32
    mask = (1 << bits) - 1
    out = []
    for r in range(n):
        row = words[r * wpr:(r + 1) * wpr]
        stream = int.from_bytes(struct.pack("<%dI" % wpr, *row), "little")
        out.extend((stream >> (j * bits)) & mask for j in range(k))
    return out


def f16_value(b):
    return struct.unpack("<e", struct.pack("<H", b))[0]


def bf16_value(b):
    return struct.unpack("<f", struct.pack("<I", b << 16))[0]


def f32_value(b):
    return struct.unpack("<f", struct.pack("<I", b))[0]


def value(dtype, b):
    """The float value of raw bits b of dtype (exact: a Python float holds
    every float16, bfloat16 and float32 value)."""
    return (f16_value, bf16_value, f32_value)[dtype - 1](b)


def serve(hello, compute, stdin=None, stdout=None):
    """Serve the protocol: read the ledger's hello, answer with hello (a
    dict; "protocol" is set here), then answer every case with
    compute(case) -> list of raw output bits (N values). Unsupported
    becomes a U frame, any other exception an E frame. Returns at bye or at
    the end of input."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    fr = read_frame(stdin)
    if fr is None or fr[0] != "H" or json.loads(fr[1].decode("utf-8")).get("protocol") != PROTOCOL:
        raise ProtocolError("the first frame is not a %s hello" % PROTOCOL)
    hello = dict(hello)
    hello["protocol"] = PROTOCOL
    write_frame(stdout, "H", json.dumps(hello).encode("utf-8"))
    stdout.flush()
    while True:
        fr = read_frame(stdin)
        if fr is None or fr[0] == "Q":
            stdout.flush()
            return
        if fr[0] != "C":
            raise ProtocolError("unexpected frame type %r" % fr[0])
        case = parse_case(fr[1])
        try:
            out = compute(case)
            if len(out) != case.n:
                raise RuntimeError("adapter computed %d values, want %d" % (len(out), case.n))
            write_frame(stdout, "Y", encode_output(case.id, case.dtype, out))
        except Unsupported as e:
            write_frame(stdout, "U", encode_text(case.id, str(e)))
        except Exception as e:  # the case fails; the adapter goes on
            write_frame(stdout, "E", encode_text(case.id, "%s: %s" % (type(e).__name__, e)))
        # One flush per answer: peeking for waiting input would block.
        stdout.flush()
