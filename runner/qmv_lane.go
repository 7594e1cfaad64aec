package runner

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// Pattern names (WORKLOADS.md section 2, "Inputs that make comparison
// exact").
const (
	PatternExact    = "exact-control"
	PatternMasked   = "masked-control"
	PatternThreeWay = "three-way"
	PatternOverflow = "overflow"
)

// Patterns lists the patterns in case-matrix order.
var Patterns = []string{PatternExact, PatternMasked, PatternThreeWay, PatternOverflow}

// patternLayout returns the x values of a pattern (laid out from an
// aligned chunk start, rest zero) and the bias of its group, as exact
// float64 values representable in dtype d. float32 uses the float16 rows.
func patternLayout(p string, d quant.DType) (x []float64, bias float64) {
	bf := d == quant.BFloat16
	switch p {
	case PatternExact:
		return []float64{1, 2, 3, 4}, 1
	case PatternMasked:
		if bf {
			return []float64{256, 1, 0, 0}, 1
		}
		return []float64{65504, 8, 0, 0}, math.Ldexp(1, -10)
	case PatternThreeWay:
		big := 2048.0
		if bf {
			big = 256
		}
		x = make([]float64, 16)
		x[0], x[8] = big, -big
		for i := 1; i < 8; i++ {
			x[i] = 1
		}
		return x, 1
	case PatternOverflow:
		if bf {
			bfMax := math.Ldexp(255, 120) // (2 - 2^-7) * 2^127
			return []float64{bfMax, math.Ldexp(1, 119), 0, 0}, math.Ldexp(1, -100)
		}
		return []float64{40000, 40000, 0, 0}, math.Ldexp(1, -10)
	}
	panic("unknown pattern " + p)
}

// predictedNarrowFailure reports whether the narrow kernel is predicted to
// fail a case: f16/bf16, bits != 8 (P > 1), pattern three-way or overflow.
func predictedNarrowFailure(d quant.DType, bits int, pattern string) bool {
	return d != quant.Float32 && bits != 8 && (pattern == PatternThreeWay || pattern == PatternOverflow)
}

// qmvCase is one case of a qmv lane.
type qmvCase struct {
	ID      string `json:"id"`
	DType   quant.DType
	Bits    int
	Group   int
	N, K    int
	Pattern string
	Pos     int // index of the pattern's first x value
}

// encode returns the raw bits of an exactly representable value.
func encode(d quant.DType, v float64) (uint32, error) {
	bits := quant.FromF32(d, float32(v))
	if float64(float32(v)) != v || float64(quant.ToF32(d, bits)) != v {
		return 0, fmt.Errorf("%v is not exactly representable in %v", v, d)
	}
	return bits, nil
}

// buildQMVInputs builds the request (without variant) and the unpacked
// weights of a case. Construction (all exact by design):
//   - x: the pattern at c.Pos, zero elsewhere;
//   - the pattern's group: bias from the pattern table, scale 2^-bits;
//     other groups: random power-of-two scales and biases (they meet x = 0);
//   - q: random in [0, 2^bits) except: row 0 has q = 0 wherever x != 0;
//     masked and overflow rows have q = 0 wherever x != 0 (the output cast
//     must stay masked, and q*bf16max would overflow float32); in
//     three-way rows the two large values get the same q so their dot
//     terms cancel. The dot part therefore adds at most a few units to the
//     bias sum and never hides the narrow rounding.
func buildQMVInputs(c qmvCase) (*QMVRequest, []uint8, error) {
	h := fnv.New64a()
	h.Write([]byte(c.ID))
	rng := rand.New(rand.NewPCG(h.Sum64(), 0x5eed))
	layout, bias := patternLayout(c.Pattern, c.DType)
	if c.Pos < 0 || c.Pos+len(layout) > c.K {
		return nil, nil, fmt.Errorf("case %s: pattern at %d does not fit in k=%d", c.ID, c.Pos, c.K)
	}
	pg := c.Pos / c.Group
	if (c.Pos+len(layout)-1)/c.Group != pg {
		return nil, nil, fmt.Errorf("case %s: pattern straddles groups", c.ID)
	}
	groups := c.K / c.Group
	r := &QMVRequest{DType: c.DType, Bits: c.Bits, GroupSize: c.Group, N: c.N, K: c.K,
		Scales: NewVec(c.DType, c.N*groups), Biases: NewVec(c.DType, c.N*groups), X: NewVec(c.DType, c.K)}
	xv := make([]float64, c.K)
	for i, v := range layout {
		xv[c.Pos+i] = v
	}
	for k, v := range xv {
		b, err := encode(c.DType, v)
		if err != nil {
			return nil, nil, err
		}
		r.X.Set(k, b)
	}
	nbins := 1<<c.Bits - 1
	q := make([]uint8, c.N*c.K)
	for n := 0; n < c.N; n++ {
		for k := 0; k < c.K; k++ {
			q[n*c.K+k] = uint8(rng.IntN(nbins + 1))
		}
		row := q[n*c.K : (n+1)*c.K]
		for i, v := range layout {
			if v == 0 {
				continue
			}
			if n == 0 || c.Pattern == PatternMasked || c.Pattern == PatternOverflow {
				row[c.Pos+i] = 0
			}
		}
		if c.Pattern == PatternThreeWay {
			row[c.Pos+8] = row[c.Pos]
		}
		for g := 0; g < groups; g++ {
			s := math.Ldexp(1, -c.Bits)
			b := bias
			if g != pg {
				s = math.Ldexp(1, rng.IntN(11)-8)
				b = math.Ldexp(float64(1-2*rng.IntN(2)), rng.IntN(11)-8)
			}
			sb, err := encode(c.DType, s)
			if err != nil {
				return nil, nil, err
			}
			bb, err := encode(c.DType, b)
			if err != nil {
				return nil, nil, err
			}
			r.Scales.Set(n*groups+g, sb)
			r.Biases.Set(n*groups+g, bb)
		}
	}
	var err error
	if r.W, err = quant.Pack(q, c.N, c.K, c.Bits); err != nil {
		return nil, nil, err
	}
	return r, q, nil
}

// describeBits renders raw bits of dtype d with their value.
func describeBits(d quant.DType, bits uint32) string {
	if d == quant.Float32 {
		return fmt.Sprintf("%#08x (%g)", bits, quant.ToF32(d, bits))
	}
	return fmt.Sprintf("%#04x (%g)", bits, quant.ToF32(d, bits))
}

// qmvOutcome is the comparison of one variant's output with the reference.
type qmvOutcome struct {
	exact    bool
	expected string
	got      string
	note     string
}

func compareQMV(d quant.DType, want []uint32, got Vec) qmvOutcome {
	if got.DType != d || got.Len() != len(want) {
		return qmvOutcome{note: fmt.Sprintf("backend returned %d values of %v, want %d of %v", got.Len(), got.DType, len(want), d)}
	}
	for i, w := range want {
		if g := got.At(i); g != w {
			return qmvOutcome{expected: describeBits(d, w), got: describeBits(d, g),
				note: fmt.Sprintf("row %d of %d differs", i, len(want))}
		}
	}
	return qmvOutcome{exact: true, expected: describeBits(d, want[0]), got: describeBits(d, got.At(0))}
}

// qmvLane is a qmv lane over a fixed case list.
type qmvLane struct {
	name, summary string
	cases         []qmvCase
	shape         string // description of the shape sweep for Definition
}

//go:embed qmv_lane.go
var srcQMVLane []byte

//go:embed reference.go
var srcReference []byte

//go:embed quant/exact.go
var srcQuantExact []byte

//go:embed quant/pack.go
var srcQuantPack []byte

//go:embed quant/float.go
var srcQuantFloat []byte

func (l *qmvLane) Name() string    { return l.name }
func (l *qmvLane) Summary() string { return l.summary }

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(s[:])
}

func (l *qmvLane) Definition() []byte {
	ids := make([]string, len(l.cases))
	for i, c := range l.cases {
		ids[i] = c.ID
	}
	def := map[string]any{
		"lane":    l.name,
		"shapes":  l.shape,
		"cases":   ids,
		"verdict": "promoted: every case bit-exact against the exact reference rounded to T (RNE); control: narrow must fail exactly the cases f16/bf16 x bits!=8 x {three-way, overflow}, else inconclusive",
		"sources": map[string]string{
			"runner/qmv_lane.go": sha256Hex(srcQMVLane), "runner/reference.go": sha256Hex(srcReference),
			"runner/quant/exact.go": sha256Hex(srcQuantExact), "runner/quant/pack.go": sha256Hex(srcQuantPack),
			"runner/quant/float.go": sha256Hex(srcQuantFloat),
		},
	}
	b, _ := ledger.CanonicalBody(def)
	return b
}

func (l *qmvLane) Run(ctx context.Context, env *Env) (*Result, error) {
	if env == nil || env.Backend == nil {
		return nil, fmt.Errorf("%s: no backend", l.name)
	}
	res := &Result{Total: len(l.cases)}
	var failing, passing []ledger.CaseResult
	var ctlFailing []string
	var unexpected, missed []string
	var tRef, tPromoted, tNarrow time.Duration
	for i, c := range l.cases {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		req, q, err := buildQMVInputs(c)
		if err != nil {
			return nil, err
		}
		t0 := time.Now()
		want, err := referenceQMV(req, q)
		if err != nil {
			return nil, fmt.Errorf("case %s: %w", c.ID, err)
		}
		t1 := time.Now()
		req.Variant = Promoted
		got, err := env.Backend.QMV(ctx, req)
		t2 := time.Now()
		var out qmvOutcome
		if err != nil {
			out = qmvOutcome{note: "kernel error: " + err.Error()}
		} else {
			out = compareQMV(c.DType, want, got)
		}
		req.Variant = Narrow
		ngot, nerr := env.Backend.QMV(ctx, req)
		t3 := time.Now()
		tRef += t1.Sub(t0)
		tPromoted += t2.Sub(t1)
		tNarrow += t3.Sub(t2)
		cr := ledger.CaseResult{ID: c.ID, Expected: out.expected, Got: out.got, Note: out.note}
		switch {
		case out.exact:
			cr.Result = "exact"
			res.Exact++
			passing = append(passing, cr)
		case err != nil:
			cr.Result = "error"
			failing = append(failing, cr)
			res.Failing = append(res.Failing, c.ID)
		default:
			cr.Result = "mismatch"
			failing = append(failing, cr)
			res.Failing = append(res.Failing, c.ID)
		}
		nexact := nerr == nil && compareQMV(c.DType, want, ngot).exact
		if !nexact {
			ctlFailing = append(ctlFailing, c.ID)
		}
		if pred := predictedNarrowFailure(c.DType, c.Bits, c.Pattern); pred && nexact {
			missed = append(missed, c.ID)
		} else if !pred && !nexact {
			unexpected = append(unexpected, c.ID)
		}
		env.progress(i+1, len(l.cases))
	}
	res.Cases = append(failing, passing...)
	predicted := 0
	for _, c := range l.cases {
		if predictedNarrowFailure(c.DType, c.Bits, c.Pattern) {
			predicted++
		}
	}
	ctl := ControlResult{Outcome: ledger.ControlCaught}
	if len(missed) > 0 || len(unexpected) > 0 {
		ctl.Outcome = ledger.ControlNotCaught
	}
	ctl.Summary = fmt.Sprintf("narrow: %d/%d exact, %d failing (predicted %d); %d predicted failures not observed, %d unexpected failures",
		len(l.cases)-len(ctlFailing), len(l.cases), len(ctlFailing), predicted, len(missed), len(unexpected))
	ctl.Details = map[string]any{
		"variant": Narrow.String(), "exact": len(l.cases) - len(ctlFailing), "total": len(l.cases),
		"predicted_failures": predicted, "failing_cases": ctlFailing,
		"missed_predictions": missed, "unexpected_failures": unexpected,
	}
	res.Control = ctl
	res.Details = map[string]any{
		"variant_under_test": Promoted.String(),
		"shapes":             l.shape,
		"timing_ms": map[string]float64{
			"reference": ms(tRef), "kernel_promoted": ms(tPromoted), "kernel_narrow": ms(tNarrow),
		},
	}
	return res, nil
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// coreCases is the 216-case matrix: dtype x bits x group size x pattern,
// shape N = 8, K = 512 (a multiple of every group size, of 512 and of
// 256), pattern at the start of the second group.
func coreCases() []qmvCase {
	var cs []qmvCase
	for _, d := range quant.DTypes {
		for _, b := range quant.Bits {
			for _, g := range quant.GroupSizes {
				for _, p := range Patterns {
					cs = append(cs, qmvCase{ID: fmt.Sprintf("%v/b%d/g%d/%s", d, b, g, p),
						DType: d, Bits: b, Group: g, N: 8, K: 512, Pattern: p, Pos: g})
				}
			}
		}
	}
	return cs
}

// pathKs returns the K values of the extended sweep for bits: small-K
// (64, 128), fast-path multiples (512, 1024 for bits 2-5; 256, 768 for
// bits 6 and 8) and unaligned general-path K (96, 192, 384).
func pathKs(bits int) []int {
	fast := []int{512, 1024}
	if bits == 6 || bits == 8 {
		fast = []int{256, 768}
	}
	return append(append([]int{64, 128}, fast...), 96, 192, 384)
}

// pathsCases is the extended shape sweep: dtype x bits x K (pathKs) x
// group size (those dividing K) x N {5, 8, 12} x position {first chunk,
// last chunk before K} x pattern {masked-control, three-way, overflow}.
func pathsCases() []qmvCase {
	var cs []qmvCase
	for _, d := range quant.DTypes {
		for _, b := range quant.Bits {
			for _, k := range pathKs(b) {
				for _, g := range quant.GroupSizes {
					if k%g != 0 {
						continue
					}
					for _, n := range []int{5, 8, 12} {
						for _, pos := range []string{"first", "last"} {
							for _, p := range []string{PatternMasked, PatternThreeWay, PatternOverflow} {
								at := 0
								if pos == "last" {
									l, _ := patternLayout(p, d)
									cp := quant.ChunkSize(b)
									at = k - (len(l)+cp-1)/cp*cp
								}
								cs = append(cs, qmvCase{ID: fmt.Sprintf("%v/b%d/g%d/k%d/n%d/%s/%s", d, b, g, k, n, pos, p),
									DType: d, Bits: b, Group: g, N: n, K: k, Pattern: p, Pos: at})
							}
						}
					}
				}
			}
		}
	}
	return cs
}

// Lane names.
const (
	LaneQMV       = "qmv-bias-sum/v1"
	LaneQMVPaths  = "qmv-bias-sum-paths/v1"
	LaneAllocSnap = "alloc-snapshot/v1"
	LaneAllocFoot = "alloc-footprint/v1"
)

// NewQMVLane returns qmv-bias-sum/v1, the 216-case core matrix.
func NewQMVLane() Lane {
	return &qmvLane{name: LaneQMV, cases: coreCases(),
		summary: "quantized qmv bias sum: 216 cases, promoted kernel exact, narrow kernel caught (156/216)",
		shape:   "N=8 K=512, pattern at the first chunk of group 1"}
}

// NewQMVPathsLane returns qmv-bias-sum-paths/v1, the extended shape sweep.
func NewQMVPathsLane() Lane {
	return &qmvLane{name: LaneQMVPaths, cases: pathsCases(),
		summary: "quantized qmv bias sum over the kernel paths: small-K, fast, general and tail shapes",
		shape:   "K in {64,128} + {512,1024 | 256,768 for bits 6,8} + {96,192,384}; N in {5,8,12}; pattern at the first and at the last chunk"}
}
