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
