package quant

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// streamBytes packs values the "bytes" way described in WORKLOADS.md: a
// byte string where stream bit i is bit i%8 of byte i/8 (8 values per 3
// bytes for 3 bits, 8 per 5 bytes for 5, 4 per 3 bytes for 6). It shares
// no code with PackRow.
func streamBytes(q []uint8, bits int) []byte {
	out := make([]byte, (len(q)*bits+7)/8)
	i := 0
	for _, v := range q {
		for b := 0; b < bits; b++ {
			if v>>b&1 == 1 {
				out[i/8] |= 1 << (i % 8)
			}
			i++
		}
	}
	return out
}

func wordsLE(words []uint32) []byte {
	out := make([]byte, 4*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint32(out[4*i:], w)
	}
	return out
}

func TestPackLiterals(t *testing.T) {
	cases := []struct {
		bits int
		set  map[int]uint8 // index -> value, others zero
		want []uint32      // first words
	}{
		{4, map[int]uint8{0: 1, 1: 2, 2: 3, 3: 4, 4: 5, 5: 6, 6: 7, 7: 8}, []uint32{0x87654321}},
		{2, map[int]uint8{0: 3, 15: 2, 16: 1}, []uint32{0x80000003, 0x1}},
		{3, map[int]uint8{0: 7, 1: 7, 2: 7, 3: 7, 4: 7, 5: 7, 6: 7, 7: 7}, []uint32{0x00ffffff}},
		{3, map[int]uint8{10: 5}, []uint32{0x40000000, 0x1}}, // straddles words 0 and 1
		{5, map[int]uint8{6: 31}, []uint32{0xc0000000, 0x7}}, // bits 30..34
		{6, map[int]uint8{5: 63}, []uint32{0xc0000000, 0xf}}, // bits 30..35
		{8, map[int]uint8{0: 0xab, 3: 0x12, 4: 0xff}, []uint32{0x120000ab, 0xff}},
	}
	for _, c := range cases {
		q := make([]uint8, 32)
		for i, v := range c.set {
			q[i] = v
		}
		w := make([]uint32, WordsPerRow(c.bits, 32))
		if err := PackRow(w, q, c.bits); err != nil {
			t.Fatal(err)
		}
		for i, want := range c.want {
			if w[i] != want {
				t.Errorf("bits %d: word %d = %#08x, want %#08x", c.bits, i, w[i], want)
			}
		}
	}
}

func TestPackRoundTripAllShapes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, bits := range Bits {
		for _, g := range GroupSizes {
			for _, groups := range []int{1, 3} {
				n, k := 3, g*groups
				q := make([]uint8, n*k)
				for i := range q {
					q[i] = uint8(rng.IntN(1 << bits))
				}
				// Make sure the extremes appear at the word boundaries.
				q[0], q[k-1] = uint8(1<<bits-1), uint8(1<<bits-1)
				w, err := Pack(q, n, k, bits)
				if err != nil {
					t.Fatal(err)
				}
				wpr := WordsPerRow(bits, k)
				if len(w) != n*wpr || wpr*32 != k*bits {
					t.Fatalf("bits %d g %d: %d words", bits, g, len(w))
				}
				for r := 0; r < n; r++ {
					want := streamBytes(q[r*k:(r+1)*k], bits)
					got := wordsLE(w[r*wpr : (r+1)*wpr])
					if string(want) != string(got) {
						t.Fatalf("bits %d g %d row %d: packed bytes differ from the bit stream", bits, g, r)
					}
					back := make([]uint8, k)
					if err := UnpackRow(back, w[r*wpr:(r+1)*wpr], bits); err != nil {
						t.Fatal(err)
					}
					for j := range back {
						if back[j] != q[r*k+j] {
							t.Fatalf("bits %d g %d row %d: unpack[%d] = %d, want %d", bits, g, r, j, back[j], q[r*k+j])
						}
					}
				}
			}
		}
	}
}

func TestPackRejects(t *testing.T) {
	if err := PackRow(make([]uint32, 4), make([]uint8, 32), 7); err == nil {
		t.Error("bits 7 accepted")
	}
	q := make([]uint8, 32)
	q[3] = 16
	if err := PackRow(make([]uint32, 4), q, 4); err == nil {
		t.Error("value 16 accepted for 4 bits")
	}
	if err := PackRow(make([]uint32, 3), make([]uint8, 32), 4); err == nil {
		t.Error("short destination accepted")
	}
	if _, err := Pack(make([]uint8, 10), 1, 10, 4); err == nil {
		t.Error("row of 10 values accepted")
	}
	if err := CheckShape(4, 64, 2, 96); err == nil {
		t.Error("k=96 with group 64 accepted")
	}
}

func TestChunkSize(t *testing.T) {
	want := map[int]int{2: 4, 3: 8, 4: 4, 5: 8, 6: 4, 8: 1, 7: 0, 1: 0}
	for b, p := range want {
		if ChunkSize(b) != p {
			t.Errorf("ChunkSize(%d) = %d, want %d", b, ChunkSize(b), p)
		}
	}
}
