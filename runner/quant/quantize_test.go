package quant

import (
	"math"
	"math/rand/v2"
	"testing"
)

func repeatGroup(vals []float32, g int) []float32 {
	out := make([]float32, g)
	for i := range out {
		out[i] = vals[i%len(vals)]
	}
	return out
}

func TestQuantizeEdgeHandComputed(t *testing.T) {
	cases := []struct {
		name        string
		bits        int
		vals        []float32
		scale, bias float32
		q           []uint8 // per value of vals
	}{
		// |min| > |max|: edge = min = -3, scale = 3/3 = 1, q = w + 3.
		{"min-edge", 2, []float32{-3, -2, -1, 0}, 1, -3, []uint8{0, 1, 2, 3}},
		// max dominates: edge = max = 3, scale = -(3-0)/3 = -1, q = 3 - w.
		{"max-edge", 2, []float32{0, 1, 2, 3}, -1, 3, []uint8{3, 2, 1, 0}},
		// Equal magnitudes go to max (the mask is a strict >): min -3,
		// max 3, scale = -(6/3) = -2, q0 = round(3/-2) = round(-1.5) = -2
		// (ties to even), scale = 3/-2 = -1.5, bias 3,
		// q = clamp(round((w-3)/-1.5)): -3 -> 4 clamped to 3, 0 -> 2,
		// 1 -> round(1.33) = 1.
		{"tie-max", 2, []float32{-3, 3, 0, 1}, -1.5, 3, []uint8{3, 0, 2, 1}},
		// All zero: scale stays -1e-7, q0 = 0 so bias = 0, q = 0.
		{"zero", 8, []float32{0}, -1e-7, 0, []uint8{0}},
		// 8 bits: min -255, max 0: scale 1, bias -255, q = w + 255.
		{"8bit", 8, []float32{-255, 0, -128, -1}, 1, -255, []uint8{0, 255, 127, 254}},
	}
	for _, c := range cases {
		for _, g := range GroupSizes {
			w := repeatGroup(c.vals, g)
			qz, err := Quantize(w, 1, g, g, c.bits)
			if err != nil {
				t.Fatal(err)
			}
			if qz.Scales[0] != c.scale || qz.Biases[0] != c.bias {
				t.Errorf("%s g%d: scale %v bias %v, want %v %v", c.name, g, qz.Scales[0], qz.Biases[0], c.scale, c.bias)
			}
			for i := range w {
				if want := c.q[i%len(c.q)]; qz.Q[i] != want {
					t.Errorf("%s g%d: q[%d] = %d, want %d", c.name, g, i, qz.Q[i], want)
					break
				}
			}
		}
	}
}

func TestQuantizeProperties(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for _, bits := range Bits {
		for _, g := range GroupSizes {
			n, k := 4, 2*g
			w := make([]float32, n*k)
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			qz, err := Quantize(w, n, k, g, bits)
			if err != nil {
				t.Fatal(err)
			}
			back := make([]uint8, k)
			for r := 0; r < n; r++ {
				if err := UnpackRow(back, qz.W[r*WordsPerRow(bits, k):(r+1)*WordsPerRow(bits, k)], bits); err != nil {
					t.Fatal(err)
				}
				for j := range back {
					if back[j] != qz.Q[r*k+j] {
						t.Fatalf("packed and unpacked q differ")
					}
				}
			}
			for gi := 0; gi < n*k/g; gi++ {
				vals := w[gi*g : (gi+1)*g]
				s, b := float64(qz.Scales[gi]), float64(qz.Biases[gi])
				// The edge (larger magnitude of min and max) is the bias,
				// hit exactly by q = 0.
				lo, hi := vals[0], vals[0]
				for _, v := range vals {
					lo, hi = min(lo, v), max(hi, v)
				}
				edge := hi
				if math.Abs(float64(lo)) > math.Abs(float64(hi)) {
					edge = lo
				}
				if float32(b) != edge {
					t.Fatalf("bits %d g %d group %d: bias %v is not the edge %v", bits, g, gi, b, edge)
				}
				for i, v := range vals {
					q := float64(qz.Q[gi*g+i])
					if q > float64(int(1)<<bits-1) {
						t.Fatalf("q out of range")
					}
					if v == edge && q != 0 {
						t.Fatalf("edge value got q=%v", q)
					}
					// Inside the grid the error is at most half a step;
					// the far end may sit up to one step outside the grid
					// (scale was adjusted to hit the edge) and is clamped.
					bound := math.Abs(s)*0.5*(1+1e-5) + 1e-6
					if q == 0 || q == float64(int(1)<<bits-1) {
						bound = math.Abs(s)*(1+1e-5) + 1e-6
					}
					if err := math.Abs(s*q + b - float64(v)); err > bound {
						t.Fatalf("bits %d g %d: |deq - w| = %v > %v (q=%v)", bits, g, err, bound, q)
					}
				}
			}
		}
	}
}

func TestQuantizeRejects(t *testing.T) {
	if _, err := Quantize(make([]float32, 64), 1, 64, 64, 7); err == nil {
		t.Error("bits 7 accepted")
	}
	w := make([]float32, 64)
	w[5] = float32(math.Inf(1))
	if _, err := Quantize(w, 1, 64, 64, 4); err == nil {
		t.Error("inf weight accepted")
	}
	if _, err := Quantize(make([]float32, 10), 1, 64, 64, 4); err == nil {
		t.Error("wrong length accepted")
	}
}
