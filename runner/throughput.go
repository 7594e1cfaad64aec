package runner

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/evidence-ledger/ledger/internal/stats"
	"github.com/evidence-ledger/ledger/ledger"
	"github.com/evidence-ledger/ledger/runner/quant"
)

// ThroughputLane is the name of the qmv throughput lane.
const ThroughputLane = "qmv-throughput/v1"

// ThroughputCase is one case of the throughput lane: Batch activation
// vectors of K values of DType times an N x K matrix of Bits-bit weights
// quantized in groups of GroupSize (the reference release's B1/B2/B4 are
// Batch 1, 2 and 4).
type ThroughputCase struct {
	ID        string
	Batch     int
	N, K      int
	DType     quant.DType
	Bits      int
	GroupSize int
	// Control marks the cases that also run the negative control (the
	// candidate launched twice per product must measure as slower).
	Control bool
}

// Throughput case matrix: every batch, shape, dtype and width, group 64
// (MLX's default group size).
var (
	ThroughputBatches = []int{1, 2, 4}
	ThroughputShapes  = [][2]int{{4096, 4096}, {8192, 8192}, {16384, 16384}} // N, K
	ThroughputBits    = []int{2, 3, 4, 5, 6, 8}
	ThroughputDTypes  = []quant.DType{quant.Float16, quant.BFloat16, quant.Float32}
)

// ThroughputGroup is the group size of every throughput case.
const ThroughputGroup = 64

// ThroughputCases returns the throughput lane's case matrix (batch x shape
// x dtype x bits; 162 cases), ids "batch1/n8192/k8192/f16/b4/g64" (ledger.ThroughputCaseID).
// The float16 4-bit 8192 x 8192 case of each batch is a control case.
func ThroughputCases() []ThroughputCase {
	var cs []ThroughputCase
	for _, b := range ThroughputBatches {
		for _, s := range ThroughputShapes {
			for _, d := range ThroughputDTypes {
				for _, bits := range ThroughputBits {
					cs = append(cs, ThroughputCase{
						ID:    ledger.ThroughputCaseID(b, s[0], s[1], d.String(), bits, ThroughputGroup),
						Batch: b, N: s[0], K: s[1], DType: d, Bits: bits, GroupSize: ThroughputGroup,
						Control: d == quant.Float16 && bits == 4 && s[0] == 8192,
					})
				}
			}
		}
	}
	return cs
}

// ThroughputOperands returns the operands of case c: a request whose X is
// the first activation vector, and all c.Batch vectors (xs[0] is r.X).
// Weights are uniformly random words (every bit pattern is a valid
// quantized value), scales uniform in [0, 0.01), biases in [-0.5, 0.5),
// activations standard normal, each rounded to the dtype; the generator is
// seeded by the case's shape, so every run measures the same operands.
// The request's Variant is Promoted.
func ThroughputOperands(c ThroughputCase) (*QMVRequest, []Vec, error) {
	if err := quant.CheckShape(c.Bits, c.GroupSize, c.N, c.K); err != nil {
		return nil, nil, fmt.Errorf("case %s: %w", c.ID, err)
	}
	if c.Batch < 1 {
		return nil, nil, fmt.Errorf("case %s: batch must be >= 1", c.ID)
	}
	rng := rand.New(rand.NewPCG(uint64(c.N)<<32|uint64(c.K), uint64(c.Bits)<<8|uint64(c.DType)))
	r := &QMVRequest{Variant: Promoted, DType: c.DType, Bits: c.Bits, GroupSize: c.GroupSize, N: c.N, K: c.K}
	r.W = make([]uint32, c.N*quant.WordsPerRow(c.Bits, c.K))
	for i := range r.W {
		r.W[i] = rng.Uint32()
	}
	groups := c.N * c.K / c.GroupSize
	r.Scales, r.Biases = NewVec(c.DType, groups), NewVec(c.DType, groups)
	for i := range groups {
		r.Scales.Set(i, quant.FromF32(c.DType, float32(rng.Float64()*0.01)))
		r.Biases.Set(i, quant.FromF32(c.DType, float32(rng.Float64()-0.5)))
	}
	xs := make([]Vec, c.Batch)
	for b := range xs {
		xs[b] = NewVec(c.DType, c.K)
		for k := range c.K {
			xs[b].Set(k, quant.FromF32(c.DType, float32(rng.NormFloat64())))
		}
	}
	r.X = xs[0]
	return r, xs, r.Validate()
}

// ThroughputTolerance is the largest relative L2 error (OutputCheck) a
// timed product's output may have: the output's rounding to the dtype and
// float32 accumulation stay far below it, a kernel that skips groups or
// rows is far above it.
func ThroughputTolerance(d quant.DType) float64 {
	if d == quant.Float32 {
		return 1e-3
	}
	return 2e-2
}

// ThroughputReference returns y = W x for every vector of xs in float64
// (batch rows of r.N values), from the values the raw bits decode to. It
// uses every CPU and is independent of any kernel's accumulation order.
func ThroughputReference(r *QMVRequest, xs []Vec) [][]float64 {
	groups := r.K / r.GroupSize
	dec := func(v Vec) []float64 {
		out := make([]float64, v.Len())
		for i := range out {
			out[i] = float64(quant.ToF32(r.DType, v.At(i)))
		}
		return out
	}
	scales, biases := dec(r.Scales), dec(r.Biases)
	x := make([][]float64, len(xs))
	sumX := make([][]float64, len(xs)) // per vector, per group
	for b, v := range xs {
		x[b] = dec(v)
		sumX[b] = make([]float64, groups)
		for k, xv := range x[b] {
			sumX[b][k/r.GroupSize] += xv
		}
	}
	out := make([][]float64, len(xs))
	for b := range out {
		out[b] = make([]float64, r.N)
	}
	wpr := quant.WordsPerRow(r.Bits, r.K)
	workers := runtime.GOMAXPROCS(0)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q := make([]uint8, r.K)
			dot := make([]float64, len(xs))
			for n := w; n < r.N; n += workers {
				_ = quant.UnpackRow(q, r.W[n*wpr:(n+1)*wpr], r.Bits)
				for g := range groups {
					clear(dot)
					for k := g * r.GroupSize; k < (g+1)*r.GroupSize; k++ {
						qv := float64(q[k])
						for b := range xs {
							dot[b] += qv * x[b][k]
						}
					}
					s, bi := scales[n*groups+g], biases[n*groups+g]
					for b := range xs {
						out[b][n] += s*dot[b] + bi*sumX[b][g]
					}
				}
			}
		}()
	}
	wg.Wait()
	return out
}

// CheckThroughputOutput compares got (batch rows of N raw values) with the
// float64 reference ref (ThroughputReference).
func CheckThroughputOutput(d quant.DType, ref [][]float64, got []Vec) (ledger.OutputCheck, error) {
	oc := ledger.OutputCheck{Tolerance: ThroughputTolerance(d)}
	if len(got) != len(ref) {
		return oc, fmt.Errorf("output has %d rows, want %d", len(got), len(ref))
	}
	var num, den float64
	for b := range ref {
		if got[b].DType != d || got[b].Len() != len(ref[b]) {
			return oc, fmt.Errorf("output row %d has %d values of %v, want %d of %v", b, got[b].Len(), got[b].DType, len(ref[b]), d)
		}
		for n, want := range ref[b] {
			g := float64(quant.ToF32(d, got[b].At(n)))
			num += (g - want) * (g - want)
			den += want * want
			if got[b].At(n) == quant.FromF32(d, float32(want)) {
				oc.BitExact++
			}
			oc.Values++
		}
	}
	switch {
	case math.IsNaN(num) || math.IsInf(num, 0):
		oc.RelL2 = math.MaxFloat64 // JSON has no infinity
	case den == 0:
		oc.RelL2 = math.Sqrt(num)
	default:
		oc.RelL2 = math.Sqrt(num / den)
	}
	return oc, nil
}

// Arm is one timed side of a throughput comparison over operands already
// prepared on its device.
type Arm interface {
	// Sample takes n samples, each the time of one group of back-to-back
	// products divided by the group's size, in seconds per product. It
	// honours ctx between samples.
	Sample(ctx context.Context, n int) ([]float64, error)
}

// ThroughputBackend is implemented by backends that time their own qmv
// kernel on their own clock. Implementations must be safe for use by one
// lane at a time.
type ThroughputBackend interface {
	Backend
	// PrepareQMV puts the operands of r with the activation vectors xs
	// (len(xs) = the batch; xs[0] is r.X) on the device, in enough copies
	// that the products rotate past the device's caches, and warms the
	// kernel up. Errors: invalid requests, shapes the kernel cannot run,
	// out of memory.
	PrepareQMV(ctx context.Context, r *QMVRequest, xs []Vec) (PreparedQMV, error)
	// Clock names the clock Sample uses ("cuda-events", "monotonic").
	Clock() string
	// DeviceState reads what moves timings now: clocks, temperature, power
	// state, other processes on the device (where visible). Keys are
	// dotted lower-case names ("clocks.sm_mhz"); values free text.
	DeviceState() map[string]string
}

// PreparedQMV is one case's operands on a device.
type PreparedQMV interface {
	// Arm returns the timed side of variant v. With repeat > 1 every timed
	// product launches the kernel repeat times (the negative control's
	// known slowdown).
	Arm(v Variant, repeat int) Arm
	// Output runs one product of variant v over every vector and returns
	// batch rows of N raw values.
	Output(ctx context.Context, v Variant) ([]Vec, error)
	// LaunchesPerSample is how many products one sample times.
	LaunchesPerSample() int
	// Close frees the device memory.
	Close() error
}

// MeasureOptions bound Measure.
type MeasureOptions struct {
	// Confidence of every interval (default 0.95) and the relative
	// half-width to reach (default 0.01).
	Confidence, TargetRel float64
	// Round is the samples each arm takes per round (default 5);
	// MaxSamples caps the samples per arm (default 200).
	Round, MaxSamples int
	// Budget caps the wall time of one case (default 5 s).
	Budget time.Duration
	// Now is the clock of the budget (default time.Now).
	Now func() time.Time
}

func (o MeasureOptions) withDefaults() MeasureOptions {
	if o.Confidence == 0 {
		o.Confidence = 0.95
	}
	if o.TargetRel == 0 {
		o.TargetRel = 0.01
	}
	if o.Round == 0 {
		o.Round = 5
	}
	if o.MaxSamples == 0 {
		o.MaxSamples = 200
	}
	if o.Budget == 0 {
		o.Budget = 5 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Measure takes interleaved rounds of samples from arms (arms[0] is the
// candidate): each round asks every arm for o.Round samples, the order of
// the arms rotating from round to round, so sample i of every arm comes
// from the same stretch of time. It stops when the median interval of
// every arm and the interval of every paired ratio arms[j]/arms[0] are
// within o.TargetRel of their estimates (converged), or when o.MaxSamples
// or o.Budget is reached. It returns each arm's samples (equal counts).
func Measure(ctx context.Context, arms []Arm, o MeasureOptions) (samples [][]float64, converged bool, err error) {
	o = o.withDefaults()
	if len(arms) == 0 {
		return nil, false, fmt.Errorf("measure: no arms")
	}
	samples = make([][]float64, len(arms))
	start := o.Now()
	for round := 0; ; round++ {
		for i := range arms {
			j := (i + round) % len(arms)
			s, err := arms[j].Sample(ctx, o.Round)
			if err != nil {
				return samples, false, err
			}
			if len(s) != o.Round {
				return samples, false, fmt.Errorf("measure: arm %d gave %d samples, asked for %d", j, len(s), o.Round)
			}
			for _, x := range s {
				if !ledger.ValidSampleSeconds(x) {
					return samples, false, fmt.Errorf("measure: arm %d gave a sample of %v s, outside %g..%g", j, x, ledger.MinSampleSeconds, ledger.MaxSampleSeconds)
				}
			}
			samples[j] = append(samples[j], s...)
		}
		if Converged(samples, o.Confidence, o.TargetRel) {
			return samples, true, nil
		}
		if len(samples[0]) >= o.MaxSamples || o.Now().Sub(start) >= o.Budget {
			return samples, false, nil
		}
		if err := ctx.Err(); err != nil {
			return samples, false, err
		}
	}
}

// Converged reports whether every arm's median interval and every paired
// ratio's (arms[j]/arms[0]) interval at confidence conf are within
// targetRel of their estimates.
func Converged(samples [][]float64, conf, targetRel float64) bool {
	for j, s := range samples {
		iv, ok := stats.MedianCI(s, conf)
		if !ok || iv.RelHalfWidth() > targetRel {
			return false
		}
		if j > 0 {
			iv, ok := stats.MedianCI(stats.Ratios(s, samples[0]), conf)
			if !ok || iv.RelHalfWidth() > targetRel {
				return false
			}
		}
	}
	return true
}

// SummarizeThroughput builds the record of case c from the samples of
// Measure (samples[0] the candidate, samples[1] the baseline when there is
// one; further arms, such as the negative control's, are not part of the
// case), the products per sample and the candidate's output check. The
// medians and the ratio carry intervals at confidence conf; a side with
// too few samples for an interval gets the samples' range (interval).
func SummarizeThroughput(c ThroughputCase, launches int, samples [][]float64, converged bool, conf float64, out ledger.OutputCheck) ledger.ThroughputCase {
	tc := ledger.ThroughputCase{
		ID: c.ID, Batch: c.Batch, N: c.N, K: c.K, DType: c.DType.String(), Bits: c.Bits, GroupSize: c.GroupSize,
		LaunchesPerSample: launches, CandidateS: samples[0], Converged: converged, Output: out,
		CandidateMedian: interval(samples[0], conf),
	}
	if len(samples) > 1 {
		tc.BaselineS = samples[1]
		b := interval(samples[1], conf)
		r := interval(stats.Ratios(samples[1], samples[0]), conf)
		tc.BaselineMedian, tc.Ratio = &b, &r
	}
	return tc
}

// interval is the median of xs with its interval at confidence conf, or,
// with too few samples for one, the median within the samples' whole
// range (no narrower claim than the data; empty xs: all zero).
func interval(xs []float64, conf float64) ledger.Interval {
	if iv, ok := stats.MedianCI(xs, conf); ok {
		return ledger.Interval(iv)
	}
	if len(xs) == 0 {
		return ledger.Interval{}
	}
	return ledger.Interval{Estimate: stats.Median(xs), Low: slices.Min(xs), High: slices.Max(xs)}
}

// ControlSlowdown bounds the negative control of the throughput lanes: the
// candidate launched twice per timed product must measure at this fraction
// of the candidate's speed, t_candidate/t_slowed with its whole interval
// inside [ControlLow, ControlHigh] (2x slower, within 20 %), or the lane
// has not shown that its clock and statistics see a known slowdown.
const (
	ControlLow  = 0.4
	ControlHigh = 0.6
)

// ControlCaught reports whether the paired ratios candidate[i]/slowed[i]
// have an interval (confidence conf) inside [ControlLow, ControlHigh],
// with the interval (with too few pairs for one: false, and their range).
func ControlCaught(candidate, slowed []float64, conf float64) (bool, ledger.Interval) {
	rs := stats.Ratios(candidate, slowed)
	iv, ok := stats.MedianCI(rs, conf)
	if !ok {
		return false, interval(rs, conf)
	}
	return iv.Low >= ControlLow && iv.High <= ControlHigh, ledger.Interval(iv)
}
