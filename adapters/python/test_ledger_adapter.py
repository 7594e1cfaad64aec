"""Unit tests of the pure-Python protocol side (python3 -m unittest)."""

import io
import json
import struct
import unittest

import ledger_adapter as la


def case_payload(case_id, dtype, bits, group, n, k, words, scales, biases, x):
    size = la.DTYPE_SIZE[dtype]
    f = "<%d" + ("H" if size == 2 else "I")
    idb = case_id.encode()
    return (struct.pack("<H", len(idb)) + idb + struct.pack("<BBHII", dtype, bits, group, n, k)
            + struct.pack("<%dI" % len(words), *words) + struct.pack(f % len(scales), *scales)
            + struct.pack(f % len(biases), *biases) + struct.pack(f % len(x), *x))


class FrameTest(unittest.TestCase):
    def test_round_trip(self):
        buf = io.BytesIO()
        la.write_frame(buf, "Y", la.encode_output("a/b", la.FLOAT16, [0x3C00, 0x7C00]))
        buf.seek(0)
        typ, payload = la.read_frame(buf)
        self.assertEqual(typ, "Y")
        self.assertEqual(payload, b"\x03\x00a/b\x01\x02\x00\x00\x00\x00\x3c\x00\x7c")
        self.assertIsNone(la.read_frame(buf))

    def test_truncated(self):
        with self.assertRaises(la.ProtocolError):
            la.read_frame(io.BytesIO(b"Y\x05\x00\x00\x00ab"))
        with self.assertRaises(la.ProtocolError):
            la.read_frame(io.BytesIO(b"Y\x05"))

    def test_too_large(self):
        with self.assertRaises(la.ProtocolError):
            la.read_frame(io.BytesIO(b"C\xff\xff\xff\xff"))

    def test_parse_case(self):
        k, n, g, bits = 64, 2, 32, 4
        words = list(range(1, n * k * bits // 32 + 1))
        p = case_payload("c1", la.BFLOAT16, bits, g, n, k, words, [0x3F80] * 4, [0x4000] * 4, [0] * k)
        c = la.parse_case(p)
        self.assertEqual((c.id, c.dtype, c.bits, c.group_size, c.n, c.k), ("c1", la.BFLOAT16, 4, 32, 2, 64))
        self.assertEqual(list(c.word_values()), words)
        self.assertEqual(list(c.scale_bits()), [0x3F80] * 4)
        with self.assertRaises(la.ProtocolError):
            la.parse_case(p[:-1])
        with self.assertRaises(la.ProtocolError):
            la.parse_case(p + b"\x00")
        bad = bytearray(p)
        bad[2 + 2] = 9  # dtype code
        with self.assertRaises(la.ProtocolError):
            la.parse_case(bytes(bad))


def prepare_payload(case_id, batch, k=32, n=1):
    xs = [[0x3F800000 + b] * k for b in range(batch)]
    p = case_payload(case_id, la.FLOAT32, 8, 32, n, k, [0] * (n * k // 4), [0x3F800000] * n, [0] * n, xs[0])
    return p + struct.pack("<H", batch) + b"".join(struct.pack("<%dI" % k, *x) for x in xs[1:]), xs


def time_payload(case_id, n, repeat):
    idb = case_id.encode()
    return struct.pack("<H", len(idb)) + idb + struct.pack("<II", n, repeat)


class TimingCodecTest(unittest.TestCase):
    def test_prepare(self):
        p, xs = prepare_payload("t/1", 3)
        c, got = la.parse_prepare(p)
        self.assertEqual((c.id, c.n, c.k, len(got)), ("t/1", 1, 32, 3))
        self.assertEqual(got[0], c.x)
        self.assertEqual(list(struct.unpack("<32I", got[2])), xs[2])
        for bad in (p[:-1], p + b"\x00", p[:len(p) - 2 * 32 * 4 - 2]):
            with self.assertRaises(la.ProtocolError):
                la.parse_prepare(bad)
        zero = bytearray(p)
        struct.pack_into("<H", zero, len(p) - 2 * 32 * 4 - 2, 0)
        with self.assertRaises(la.ProtocolError):
            la.parse_prepare(bytes(zero))

    def test_prepare_cap(self):
        # A P frame may exceed 64 MiB (up to 512 MiB); a C frame may not.
        with self.assertRaises(la.ProtocolError) as e:
            la.read_frame(io.BytesIO(b"P\x01\x00\x00\x05"))
        self.assertIn("inside a frame payload", str(e.exception))
        with self.assertRaises(la.ProtocolError) as e:
            la.read_frame(io.BytesIO(b"C\x01\x00\x00\x05"))
        self.assertIn("exceeds", str(e.exception))
        with self.assertRaises(la.ProtocolError):
            la.read_frame(io.BytesIO(b"P\x01\x00\x00\x21"))

    def test_time(self):
        self.assertEqual(la.parse_time(time_payload("c", 5, 2)), ("c", 5, 2))
        for bad in (time_payload("c", 0, 1), time_payload("c", 1, 0), time_payload("c", 1001, 1), time_payload("c", 1, 65), time_payload("c", 1, 1)[:-1]):
            with self.assertRaises(la.ProtocolError):
                la.parse_time(bad)

    def test_samples(self):
        p = la.encode_samples("c", "perf_counter_ns", 7, [1.5e-5, 2e-5])
        # u16 2 bytes + id, u8 clock length, clock, u32 L, u32 n, n float64
        self.assertEqual(len(p), 2 + 1 + 1 + 15 + 4 + 4 + 16)
        self.assertEqual(la.decode_samples(p), ("c", "perf_counter_ns", 7, [1.5e-5, 2e-5]))
        with self.assertRaises(ValueError):
            la.encode_samples("c", "", 1, [1.0])


class FakePrepared:
    def __init__(self, case, xs):
        self.case, self.xs = case, xs
        self.closed = False

    def output(self):
        return [[0x3F800000] * self.case.n for _ in self.xs]

    def time(self, n, repeat):
        return "perf_counter_ns", 3, [1e-4 * repeat] * n

    def close(self):
        self.closed = True


class ServeTimingTest(unittest.TestCase):
    def test_prepare_and_time(self):
        inp = io.BytesIO()
        la.write_frame(inp, "H", json.dumps({"protocol": la.PROTOCOL}).encode())
        la.write_frame(inp, "P", prepare_payload("a", 2)[0])
        la.write_frame(inp, "T", time_payload("a", 4, 2))
        la.write_frame(inp, "T", time_payload("b", 4, 1))
        la.write_frame(inp, "Q")
        inp.seek(0)
        out = io.BytesIO()
        handles = []

        def prepare(case, xs):
            handles.append(FakePrepared(case, xs))
            return handles[-1]

        la.serve({"implementation": "t", "version": "1"}, lambda c: [], inp, out, prepare=prepare)
        out.seek(0)
        typ, hello = la.read_frame(out)
        self.assertTrue(json.loads(hello)["timing"])
        typ, ready = la.read_frame(out)
        self.assertEqual(typ, "R")
        self.assertEqual(struct.unpack_from("<BI", ready, 3), (la.FLOAT32, 2))
        typ, samples = la.read_frame(out)
        self.assertEqual(typ, "S")
        self.assertEqual(la.decode_samples(samples), ("a", "perf_counter_ns", 3, [2e-4] * 4))
        typ, err = la.read_frame(out)
        self.assertEqual(typ, "E")
        self.assertIn(b"not the prepared case", err)
        self.assertTrue(handles[0].closed)

    def test_no_timing_refuses_prepare(self):
        inp = io.BytesIO()
        la.write_frame(inp, "H", json.dumps({"protocol": la.PROTOCOL}).encode())
        la.write_frame(inp, "P", prepare_payload("a", 1)[0])
        inp.seek(0)
        out = io.BytesIO()
        with self.assertRaises(la.ProtocolError):
            la.serve({"implementation": "t", "version": "1", "timing": True}, lambda c: [], inp, out)
        out.seek(0)
        self.assertNotIn("timing", json.loads(la.read_frame(out)[1]))


class UnpackTest(unittest.TestCase):
    def test_every_width(self):
        import random
        rnd = random.Random(1)
        for bits in (2, 3, 4, 5, 6, 8):
            k, n = 64, 3
            q = [rnd.randrange(1 << bits) for _ in range(n * k)]
            words = []
            for r in range(n):
                stream = 0
                for j in range(k):
                    stream |= q[r * k + j] << (j * bits)
                raw = stream.to_bytes(k * bits // 8, "little")
                words.extend(struct.unpack("<%dI" % (len(raw) // 4), raw))
            self.assertEqual(la.unpack_q(words, bits, n, k), q, "bits %d" % bits)


class ValueTest(unittest.TestCase):
    def test_values(self):
        self.assertEqual(la.value(la.FLOAT16, 0x7BFF), 65504.0)
        self.assertEqual(la.value(la.BFLOAT16, 0x7F7F), float.fromhex("0x1.fep127"))
        self.assertEqual(la.value(la.FLOAT32, 0x3F800000), 1.0)


class ServeTest(unittest.TestCase):
    def test_answers_in_order(self):
        inp = io.BytesIO()
        la.write_frame(inp, "H", json.dumps({"protocol": la.PROTOCOL}).encode())
        for cid in ("a", "b", "c"):
            la.write_frame(inp, "C", case_payload(cid, la.FLOAT32, 8, 32, 1, 32, [0] * 8, [0x3F800000], [0], [0] * 32))
        la.write_frame(inp, "Q")
        inp.seek(0)
        out = io.BytesIO()

        def compute(c):
            if c.id == "b":
                raise la.Unsupported("no")
            if c.id == "c":
                raise ValueError("boom")
            return [0x3F800000]

        la.serve({"implementation": "t", "version": "1"}, compute, inp, out)
        out.seek(0)
        typ, hello = la.read_frame(out)
        self.assertEqual((typ, json.loads(hello)["protocol"]), ("H", la.PROTOCOL))
        self.assertEqual([la.read_frame(out)[0] for _ in range(3)], ["Y", "U", "E"])
        self.assertIsNone(la.read_frame(out))

    def test_refuses_other_protocol(self):
        inp = io.BytesIO()
        la.write_frame(inp, "H", json.dumps({"protocol": "ledger-adapter/0"}).encode())
        inp.seek(0)
        with self.assertRaises(la.ProtocolError):
            la.serve({}, lambda c: [], inp, io.BytesIO())


if __name__ == "__main__":
    unittest.main()
