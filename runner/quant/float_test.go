package quant

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// exactF32 returns the exact value of a finite float32.
func exactF32(f float32) *big.Float {
	return NewExact().SetFloat64(float64(f))
}

func TestF16DecodeExhaustive(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		bits := uint16(b)
		f := F16ToF32(bits)
		class, v := FormatF16.Decode(uint32(bits))
		switch class {
		case NaN:
			if !math.IsNaN(float64(f)) {
				t.Fatalf("f16 %#04x: want NaN, got %v", bits, f)
			}
			if !math.IsNaN(float64(F16ToF32(F32ToF16(f)))) {
				t.Fatalf("f16 %#04x: NaN did not survive a round trip", bits)
			}
			continue
		case Inf:
			if !math.IsInf(float64(f), 0) || math.Signbit(float64(f)) != (bits&0x8000 != 0) {
				t.Fatalf("f16 %#04x: want signed inf, got %v", bits, f)
			}
		default:
			if exactF32(f).Cmp(v) != 0 || math.Signbit(float64(f)) != v.Signbit() {
				t.Fatalf("f16 %#04x: fast %v, exact %v", bits, f, v)
			}
			// The exact rounding of an exactly representable value is itself.
			if r, err := FormatF16.RoundExact(v); err != nil || r != uint32(bits) {
				t.Fatalf("f16 %#04x: RoundExact gave %#04x (%v)", bits, r, err)
			}
		}
		if got := F32ToF16(f); got != bits {
			t.Fatalf("f16 %#04x: round trip gave %#04x", bits, got)
		}
	}
}

func TestBF16DecodeExhaustive(t *testing.T) {
	for b := 0; b < 1<<16; b++ {
		bits := uint16(b)
		f := BF16ToF32(bits)
		class, v := FormatBF16.Decode(uint32(bits))
		switch class {
		case NaN:
			if !math.IsNaN(float64(f)) || !math.IsNaN(float64(BF16ToF32(F32ToBF16(f)))) {
				t.Fatalf("bf16 %#04x: NaN not preserved", bits)
			}
			continue
		case Inf:
			if !math.IsInf(float64(f), 0) {
				t.Fatalf("bf16 %#04x: want inf, got %v", bits, f)
			}
		default:
			if exactF32(f).Cmp(v) != 0 || math.Signbit(float64(f)) != v.Signbit() {
				t.Fatalf("bf16 %#04x: fast %v, exact %v", bits, f, v)
			}
		}
		if got := F32ToBF16(f); got != bits {
			t.Fatalf("bf16 %#04x: round trip gave %#04x", bits, got)
		}
	}
}

// checkNarrow compares the fast narrowing of f with the exact rounding.
func checkNarrow(t *testing.T, format Format, fast func(float32) uint16, f float32) {
	t.Helper()
	got := uint32(fast(f))
	if math.IsNaN(float64(f)) {
		if !format.IsNaNBits(got) {
			t.Fatalf("%s(%v): NaN became %#04x", format.Name, f, got)
		}
		return
	}
	var want uint32
	if math.IsInf(float64(f), 0) {
		want = uint32(1)<<(format.ExpBits+format.MantBits) - 1<<format.MantBits // +inf bits
		if f < 0 {
			want |= 1 << (format.ExpBits + format.MantBits)
		}
	} else {
		var err error
		if want, err = format.RoundExact(exactF32(f)); err != nil {
			t.Fatal(err)
		}
	}
	if got != want {
		t.Fatalf("%s(%v = %#08x): fast %#04x, exact rounding %#04x", format.Name, f, math.Float32bits(f), got, want)
	}
}

func TestNarrowTiesExhaustive(t *testing.T) {
	// Every midpoint between two adjacent finite values (and between the
	// largest finite and the overflow threshold) is a float32; RNE must
	// pick the even neighbour.
	for b := 0; b < 0x7c00; b++ {
		lo := exactF32(F16ToF32(uint16(b)))
		_, step := FormatF16.Decode(1) // smallest subnormal
		if b >= 0x0400 {
			e := b >> 10
			_, step = FormatF16.Decode(uint32(e) << 10)
			step.Quo(step, NewExact().SetInt64(1024))
		}
		mid := NewExact().Add(lo, NewExact().Quo(step, NewExact().SetInt64(2)))
		f, acc := mid.Float32()
		if acc != big.Exact {
			t.Fatalf("midpoint above %#04x not a float32", b)
		}
		want := uint16(b)
		if b&1 == 1 {
			want = uint16(b + 1) // 0x7bff+1 = 0x7c00 = inf
		}
		if got := F32ToF16(f); got != want {
			t.Fatalf("f16 tie %v above %#04x: got %#04x want %#04x", f, b, got, want)
		}
		if got := F32ToF16(-f); got != want|0x8000 {
			t.Fatalf("f16 tie %v: got %#04x want %#04x", -f, got, want|0x8000)
		}
		checkNarrow(t, FormatF16, F32ToF16, f)
	}
	for b := 0; b < 0x7f80; b++ {
		mid := math.Float32frombits(uint32(b)<<16 | 0x8000)
		want := uint16(b)
		if b&1 == 1 {
			want++
		}
		if got := F32ToBF16(mid); got != want {
			t.Fatalf("bf16 tie %v above %#04x: got %#04x want %#04x", mid, b, got, want)
		}
		checkNarrow(t, FormatBF16, F32ToBF16, mid)
		checkNarrow(t, FormatBF16, F32ToBF16, -mid)
	}
}

func TestNarrowSampled(t *testing.T) {
	n := 300000
	if testing.Short() {
		n = 30000
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < n; i++ {
		var f float32
		switch i % 4 {
		case 0: // any float32 bit pattern, NaN and inf included
			f = math.Float32frombits(rng.Uint32())
		case 1: // the f16 range, including subnormals (2^-24 .. 2^16)
			f = float32(math.Ldexp(rng.Float64()+0.5, rng.IntN(42)-25))
			if rng.IntN(2) == 0 {
				f = -f
			}
		case 2: // the f16 subnormal range
			f = float32(math.Ldexp(rng.Float64(), -14))
		default: // near the f16 overflow threshold 65520
			f = 65504 + float32(rng.IntN(64)) - 16 + float32(rng.Float64())
		}
		checkNarrow(t, FormatF16, F32ToF16, f)
		checkNarrow(t, FormatBF16, F32ToBF16, f)
	}
}

func TestNarrowEdges(t *testing.T) {
	cases := []struct {
		f        float32
		f16, b16 uint16
	}{
		{2049, 0x6800, 0x4500},                                      // f16 tie -> 2048; bf16 2049 -> 2048
		{2051, 0x6802, 0x4500},                                      // f16 tie -> 2052
		{65504, 0x7bff, 0x4780},                                     // f16 max; bf16 rounds to 65536
		{65519.996, 0x7bff, 0x4780},                                 // just below the threshold
		{65520, 0x7c00, 0x4780},                                     // f16 overflow to +inf
		{-70000, 0xfc00, 0xc789},                                    // f16 -inf
		{float32(math.Ldexp(1, -24)), 0x0001, 0x3380},               // smallest f16 subnormal
		{float32(math.Ldexp(1, -25)), 0x0000, 0x3300},               // tie between 0 and 2^-24 -> 0
		{float32(math.Ldexp(3, -26)), 0x0001, 0x3340},               // 0.75 ulp -> 1
		{257, 0x5c04, 0x4380},                                       // bf16 tie -> 256
		{float32(math.MaxFloat32), 0x7c00, 0x7f80},                  // bf16 overflow to inf
		{float32(math.Float32frombits(0x7f7f8000)), 0x7c00, 0x7f80}, // bf16 tie at the top -> inf (even)
		{float32(math.Inf(1)), 0x7c00, 0x7f80},
	}
	for _, c := range cases {
		if got := F32ToF16(c.f); got != c.f16 {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", c.f, got, c.f16)
		}
		if got := F32ToBF16(c.f); got != c.b16 {
			t.Errorf("F32ToBF16(%v) = %#04x, want %#04x", c.f, got, c.b16)
		}
		checkNarrow(t, FormatF16, F32ToF16, c.f)
		checkNarrow(t, FormatBF16, F32ToBF16, c.f)
	}
	nan := float32(math.NaN())
	if b := F32ToBF16(nan); !FormatBF16.IsNaNBits(uint32(b)) {
		t.Errorf("bf16 NaN -> %#04x", b)
	}
	if b := F32ToBF16(math.Float32frombits(0x7f800001)); !FormatBF16.IsNaNBits(uint32(b)) {
		t.Errorf("bf16 signalling NaN with low payload -> %#04x (became inf)", b)
	}
	if b := F32ToF16(nan); !FormatF16.IsNaNBits(uint32(b)) {
		t.Errorf("f16 NaN -> %#04x", b)
	}
}

func TestRoundExactF32(t *testing.T) {
	// RoundExact of exact float32 values to f32 is the identity, and of
	// float64 values matches Go's float64->float32 conversion (RNE).
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 100000; i++ {
		d := math.Float64frombits(rng.Uint64())
		if math.IsNaN(d) || math.IsInf(d, 0) || math.Abs(d) > math.MaxFloat32 || math.Abs(d) < 1e-50 {
			d = math.Ldexp(rng.Float64()-0.5, rng.IntN(300)-150)
		}
		if math.Abs(d) >= math.MaxFloat32 {
			continue
		}
		got, err := FormatF32.RoundExact(NewExact().SetFloat64(d))
		if err != nil {
			t.Fatal(err)
		}
		if want := math.Float32bits(float32(d)); got != want {
			t.Fatalf("RoundExact(%v) = %#08x, Go float32 %#08x", d, got, want)
		}
	}
}
