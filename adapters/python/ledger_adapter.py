"""The adapter side of the ledger's adapter protocol, ledger-adapter/1.

Pure Python (3.8+, standard library only), shared by the PyTorch and MLX
adapters. The protocol is specified in the repository README ("External
implementations" and
docs/reference/implementations.md); in short, every frame is a 1-byte type, a 4-byte
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

Timing capability (announced with "timing": true in the adapter's hello;
the ledger sends these frames only then, for its throughput lane):

  P  prepare, ledger -> adapter: a C payload (x = the first vector), then
       u16 batch, (batch-1)*K raw x values of the other vectors. The
       adapter keeps the operands where its products run (its own copies,
       enough to rotate past the device's caches), warms up and answers
  R  ready, adapter -> ledger: u16 id length, id, u8 dtype, u32 count
       (batch*N), the raw outputs of one product of every vector, row
       after row; or U / E as for a case. One case is prepared at a time;
       a new P frame releases the previous one. P payloads may be up to
       512 MiB (every other frame: 64 MiB).
  T  time, ledger -> adapter: u16 id length, id, u32 samples n (1..1000),
       u32 repeat (1..64: kernel launches per timed product; 2 is the
       negative control's known slowdown)
  S  samples, adapter -> ledger: u16 id length, id, u8 clock name length,
       clock name (ASCII, e.g. "torch.cuda.Event", "perf_counter_ns"),
       u32 launches per sample L, u32 n, n float64 samples (IEEE 754,
       little-endian): each the time of L back-to-back products divided by
       L, in seconds per product; finite and > 0. Or E.

The hello may carry "state": {key: text}, what the adapter reads at start
that moves timings (clocks, temperature, other processes on the device).

Answers come in the order of the requests. All integers are little-endian.
"""

import json
import struct
import sys
from array import array

PROTOCOL = "ledger-adapter/1"
MAX_PAYLOAD = 64 << 20
MAX_PREPARE_PAYLOAD = 512 << 20
MAX_BATCH = 64
MAX_SAMPLES = 1000
MAX_REPEAT = 64

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
    if n > (MAX_PREPARE_PAYLOAD if typ == "P" else MAX_PAYLOAD):
        raise ProtocolError("frame %r payload of %d bytes exceeds its cap" % (typ, n))
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
    c, off = _parse_case(payload)
    if len(payload) != off:
        raise ProtocolError("case %s: payload has %d bytes, want %d" % (c.id, len(payload), off))
    return c


def _parse_case(payload):
    """Decode a case payload up to the end of x: (Case, offset after x)."""
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
    if len(payload) < off + sum(sizes):
        raise ProtocolError("case %s: payload has %d bytes, want at least %d" % (c.id, len(payload), off + sum(sizes)))
    parts = []
    for s in sizes:
        parts.append(payload[off:off + s])
        off += s
    c.words, c.scales, c.biases, c.x = parts
    return c, off


def parse_prepare(payload):
    """Decode a P frame's payload: (Case, xs) where xs is the list of the
    batch's raw x vectors (bytes, xs[0] == case.x); raises ProtocolError."""
    c, off = _parse_case(payload)
    if len(payload) < off + 2:
        raise ProtocolError("prepare %s: payload ends before the batch" % c.id)
    (batch,) = struct.unpack_from("<H", payload, off)
    off += 2
    if batch < 1 or batch > MAX_BATCH:
        raise ProtocolError("prepare %s: batch %d not in 1..%d" % (c.id, batch, MAX_BATCH))
    xsize = c.value_size * c.k
    if len(payload) != off + (batch - 1) * xsize:
        raise ProtocolError("prepare %s: payload has %d bytes, want %d" % (c.id, len(payload), off + (batch - 1) * xsize))
    xs = [c.x] + [payload[off + i * xsize:off + (i + 1) * xsize] for i in range(batch - 1)]
    return c, xs


def parse_time(payload):
    """Decode a T frame's payload: (case id, n, repeat); raises
    ProtocolError."""
    if len(payload) < 2:
        raise ProtocolError("time payload too short")
    (idlen,) = struct.unpack_from("<H", payload, 0)
    if idlen == 0 or idlen > 256 or len(payload) != 2 + idlen + 8:
        raise ProtocolError("bad time frame")
    case_id = payload[2:2 + idlen].decode("utf-8")
    n, repeat = struct.unpack_from("<II", payload, 2 + idlen)
    if not 1 <= n <= MAX_SAMPLES or not 1 <= repeat <= MAX_REPEAT:
        raise ProtocolError("time %s: samples %d / repeat %d out of range" % (case_id, n, repeat))
    return case_id, n, repeat


def encode_samples(case_id, clock, launches, samples):
    """Payload of an S frame; samples are seconds per product (floats)."""
    cb = clock.encode("ascii")
    if not 1 <= len(cb) <= 64:
        raise ValueError("clock name must be 1..64 ASCII characters")
    return (_id(case_id) + struct.pack("<B", len(cb)) + cb + struct.pack("<II", launches, len(samples))
            + struct.pack("<%dd" % len(samples), *samples))


def decode_samples(payload):
    """Decode an S frame's payload (for tests and tools): (case id, clock,
    launches, samples)."""
    (idlen,) = struct.unpack_from("<H", payload, 0)
    off = 2 + idlen
    case_id = payload[2:off].decode("utf-8")
    cl = payload[off]
    clock = payload[off + 1:off + 1 + cl].decode("ascii")
    off += 1 + cl
    launches, n = struct.unpack_from("<II", payload, off)
    off += 8
    if len(payload) != off + 8 * n:
        raise ProtocolError("samples frame: count %d does not match %d bytes" % (n, len(payload) - off))
    return case_id, clock, launches, list(struct.unpack_from("<%dd" % n, payload, off))


def _id(case_id):
    b = case_id.encode("utf-8")
    return struct.pack("<H", len(b)) + b


def encode_output(case_id, dtype, values):
    """Payload of a Y frame (and of an R frame, with every row's values
    in order): values are raw bit patterns (ints)."""
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


def host_state(gpu=None):
    """What moves timings now, as hello "state" entries: CPU 0's frequency
    and governor and the load average where Linux shows them, and with
    gpu (an nvidia-smi index) that GPU's clocks, temperature, power, power
    state, throttle reasons and compute processes as nvidia-smi reports
    them."""
    import subprocess
    st = {}
    for key, path in (("cpu0.cur_khz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq"),
                      ("cpu0.max_khz", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq"),
                      ("cpu0.governor", "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"),
                      ("loadavg", "/proc/loadavg")):
        try:
            with open(path) as f:
                st[key] = f.read().strip()[:200]
        except OSError:
            pass
    if gpu is None:
        return st
    keys = ["clocks.sm", "clocks.mem", "clocks.max.sm", "temperature.gpu", "power.draw", "pstate",
            "clocks_throttle_reasons.active", "driver_version"]
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=" + ",".join(keys), "--format=csv,noheader", "-i", str(gpu)],
                             capture_output=True, text=True, timeout=30).stdout.strip()
        vals = [v.strip() for v in out.split(",")]
        if len(vals) == len(keys):
            st.update(("gpu." + k, v[:200]) for k, v in zip(keys, vals))
        apps = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader", "-i", str(gpu)],
                              capture_output=True, text=True, timeout=30).stdout.strip()
        st["gpu.processes"] = (apps.replace("\n", "; ") or "none")[:256]
    except Exception as e:  # no nvidia-smi
        st["gpu.state"] = ("nvidia-smi: %s" % e)[:256]
    return st


def serve(hello, compute, stdin=None, stdout=None, prepare=None):
    """Serve the protocol: read the ledger's hello, answer with hello (a
    dict; "protocol" is set here, and "timing" to whether prepare is
    given), then answer every case with compute(case) -> list of raw
    output bits (N values). Unsupported becomes a U frame, any other
    exception an E frame. Returns at bye or at the end of input.

    prepare(case, xs) -> handle gives the adapter the timing capability:
    xs are the batch's raw x vectors (bytes, xs[0] == case.x); the handle
    has output() -> batch rows of N raw output bits, time(n, repeat) ->
    (clock name, launches per sample, n samples in seconds per product),
    and optionally close(). One case is prepared at a time."""
    stdin = stdin or sys.stdin.buffer
    stdout = stdout or sys.stdout.buffer
    fr = read_frame(stdin)
    if fr is None or fr[0] != "H" or json.loads(fr[1].decode("utf-8")).get("protocol") != PROTOCOL:
        raise ProtocolError("the first frame is not a %s hello" % PROTOCOL)
    hello = dict(hello)
    hello["protocol"] = PROTOCOL
    if prepare is not None:
        hello["timing"] = True
    else:
        hello.pop("timing", None)
    write_frame(stdout, "H", json.dumps(hello).encode("utf-8"))
    stdout.flush()
    prepared = [None, None]  # case id, handle

    def release():
        if prepared[1] is not None and hasattr(prepared[1], "close"):
            try:
                prepared[1].close()
            except Exception:
                pass
        prepared[0] = prepared[1] = None

    try:
        while True:
            fr = read_frame(stdin)
            if fr is None or fr[0] == "Q":
                stdout.flush()
                return
            if fr[0] == "C":
                _answer_case(stdout, fr[1], compute)
            elif fr[0] == "P" and prepare is not None:
                release()
                case, xs = parse_prepare(fr[1])
                _answer_prepare(stdout, case, xs, prepare, prepared)
            elif fr[0] == "T" and prepare is not None:
                _answer_time(stdout, fr[1], prepared)
            else:
                raise ProtocolError("unexpected frame type %r" % fr[0])
            # One flush per answer: peeking for waiting input would block.
            stdout.flush()
    finally:
        release()


def _answer_case(stdout, payload, compute):
    case = parse_case(payload)
    try:
        out = compute(case)
        if len(out) != case.n:
            raise RuntimeError("adapter computed %d values, want %d" % (len(out), case.n))
        write_frame(stdout, "Y", encode_output(case.id, case.dtype, out))
    except Unsupported as e:
        write_frame(stdout, "U", encode_text(case.id, str(e)))
    except Exception as e:  # the case fails; the adapter goes on
        write_frame(stdout, "E", encode_text(case.id, "%s: %s" % (type(e).__name__, e)))


def _answer_prepare(stdout, case, xs, prepare, prepared):
    try:
        h = prepare(case, xs)
        rows = h.output()
        if len(rows) != len(xs) or any(len(r) != case.n for r in rows):
            raise RuntimeError("prepared case gave %s output values for %d vectors of N=%d" % ([len(r) for r in rows], len(xs), case.n))
        flat = [v for r in rows for v in r]
        write_frame(stdout, "R", encode_output(case.id, case.dtype, flat))
        prepared[0], prepared[1] = case.id, h
    except Unsupported as e:
        write_frame(stdout, "U", encode_text(case.id, str(e)))
    except Exception as e:
        write_frame(stdout, "E", encode_text(case.id, "%s: %s" % (type(e).__name__, e)))


def _answer_time(stdout, payload, prepared):
    case_id, n, repeat = parse_time(payload)
    if prepared[0] != case_id:
        write_frame(stdout, "E", encode_text(case_id, "case %s is not the prepared case" % case_id))
        return
    try:
        clock, launches, samples = prepared[1].time(n, repeat)
        if len(samples) != n:
            raise RuntimeError("took %d samples, asked for %d" % (len(samples), n))
        write_frame(stdout, "S", encode_samples(case_id, clock, launches, samples))
    except Exception as e:
        write_frame(stdout, "E", encode_text(case_id, "%s: %s" % (type(e).__name__, e)))
