package quant

import "fmt"

// Bits lists the allowed quantization widths in case-matrix order.
var Bits = []int{2, 3, 4, 5, 6, 8}

// GroupSizes lists the allowed group sizes in case-matrix order.
var GroupSizes = []int{32, 64, 128}

// ValidBits reports whether bits is one of 2, 3, 4, 5, 6, 8.
func ValidBits(bits int) bool {
	switch bits {
	case 2, 3, 4, 5, 6, 8:
		return true
	}
	return false
}

// ValidGroupSize reports whether g is one of 32, 64, 128.
func ValidGroupSize(g int) bool { return g == 32 || g == 64 || g == 128 }

// ChunkSize is P, the number of consecutive x values one bias-sum chunk adds
// up: 4 for bits 2, 4, 6; 8 for bits 3, 5; 1 for 8 bits (WORKLOADS.md
// section 2, from MLX quantized.h load_vector). It returns 0 for invalid
// bits.
func ChunkSize(bits int) int {
	switch bits {
	case 2, 4, 6:
		return 4
	case 3, 5:
		return 8
	case 8:
		return 1
	}
	return 0
}

// CheckShape validates a quantized shape: bits and group size allowed, n
// >= 1, k >= 1 and a multiple of the group size.
func CheckShape(bits, groupSize, n, k int) error {
	if !ValidBits(bits) {
		return fmt.Errorf("bits %d not in {2,3,4,5,6,8}", bits)
	}
	if !ValidGroupSize(groupSize) {
		return fmt.Errorf("group size %d not in {32,64,128}", groupSize)
	}
	if n < 1 || k < 1 {
		return fmt.Errorf("shape %dx%d: n and k must be >= 1", n, k)
	}
	if k%groupSize != 0 {
		return fmt.Errorf("k %d is not a multiple of the group size %d", k, groupSize)
	}
	return nil
}

// WordsPerRow is the number of uint32 words of one packed row of k values:
// k*bits/32 (k a multiple of 32, as every valid group size is).
func WordsPerRow(bits, k int) int { return k * bits / 32 }

// PackRow packs q (len k, each value < 2^bits) into dst (len
// WordsPerRow(bits, k)) as one little-endian bit stream: element j occupies
// stream bits [j*bits, (j+1)*bits); stream bit i is bit i%32 of word i/32.
// Elements of 3, 5 and 6 bits straddle words. dst is overwritten.
func PackRow(dst []uint32, q []uint8, bits int) error {
	if !ValidBits(bits) {
		return fmt.Errorf("pack: bits %d not in {2,3,4,5,6,8}", bits)
	}
	if len(q)*bits%32 != 0 || len(dst) != len(q)*bits/32 {
		return fmt.Errorf("pack: %d values of %d bits need %d words, dst has %d", len(q), bits, len(q)*bits/32, len(dst))
	}
	clear(dst)
	lim := uint8(1<<bits - 1)
	for j, v := range q {
		if v > lim {
			return fmt.Errorf("pack: value %d at %d does not fit in %d bits", v, j, bits)
		}
		p := j * bits
		w, off := p>>5, uint(p&31)
		dst[w] |= uint32(v) << off
		if int(off)+bits > 32 {
			dst[w+1] |= uint32(v) >> (32 - off)
		}
	}
	return nil
}

// UnpackRow is the inverse of PackRow: it reads len(dst) values of bits
// bits from the stream in words.
func UnpackRow(dst []uint8, words []uint32, bits int) error {
	if !ValidBits(bits) {
		return fmt.Errorf("unpack: bits %d not in {2,3,4,5,6,8}", bits)
	}
	if len(dst)*bits > len(words)*32 {
		return fmt.Errorf("unpack: %d values of %d bits need %d bits, have %d words", len(dst), bits, len(dst)*bits, len(words))
	}
	mask := uint64(1)<<bits - 1
	for j := range dst {
		p := j * bits
		w, off := p>>5, uint(p&31)
		v := uint64(words[w])
		if w+1 < len(words) {
			v |= uint64(words[w+1]) << 32
		}
		dst[j] = uint8(v >> off & mask)
	}
	return nil
}

// Pack packs an n x k matrix of quantized values (row-major) into n rows
// of WordsPerRow(bits, k) words.
func Pack(q []uint8, n, k, bits int) ([]uint32, error) {
	if len(q) != n*k {
		return nil, fmt.Errorf("pack: %d values for a %dx%d matrix", len(q), n, k)
	}
	if k*bits%32 != 0 {
		return nil, fmt.Errorf("pack: row of %d values of %d bits is not a whole number of words", k, bits)
	}
	wpr := WordsPerRow(bits, k)
	out := make([]uint32, n*wpr)
	for r := 0; r < n; r++ {
		if err := PackRow(out[r*wpr:(r+1)*wpr], q[r*k:(r+1)*k], bits); err != nil {
			return nil, fmt.Errorf("row %d: %w", r, err)
		}
	}
	return out, nil
}
