package runner

import (
	"fmt"
	"math/big"

	"github.com/evidence-ledger/ledger/runner/quant"
)

// referenceQMV computes the expected raw output bits of a qmv request
// independently of any kernel: it decodes every raw value exactly
// (quant.Format.Decode), evaluates y[n] = sum_g scale*sum(q*x) +
// bias*sum(x) with exact big.Float arithmetic over the unpacked values q
// (n x k, as generated before packing) and rounds the exact result to the
// dtype with round-to-nearest-even (quant.Format.RoundExact). Terms with
// x == 0 are skipped (they are exactly zero). It fails when an input is not
// finite or an operation was not exact (the inputs were not exact by
// construction).
func referenceQMV(r *QMVRequest, q []uint8) ([]uint32, error) {
	f := r.DType.Format()
	type xv struct {
		k int
		v *big.Float
	}
	var xs []xv
	for k := 0; k < r.K; k++ {
		c, v := f.Decode(r.X.At(k))
		if c != quant.Finite {
			return nil, fmt.Errorf("reference: x[%d] is not finite", k)
		}
		if v.Sign() != 0 {
			xs = append(xs, xv{k, v})
		}
	}
	groups := r.K / r.GroupSize
	out := make([]uint32, r.N)
	acc, sumX, dot, term := quant.NewExact(), quant.NewExact(), quant.NewExact(), quant.NewExact()
	qv := quant.NewExact()
	exact := func(z *big.Float) error {
		if z.Acc() != big.Exact {
			return fmt.Errorf("reference: inexact operation (inputs not exact by construction)")
		}
		return nil
	}
	for n := 0; n < r.N; n++ {
		acc.SetInt64(0)
		for g, i := 0, 0; g < groups; g++ {
			dot.SetInt64(0)
			sumX.SetInt64(0)
			any := false
			for ; i < len(xs) && xs[i].k < (g+1)*r.GroupSize; i++ {
				any = true
				qv.SetInt64(int64(q[n*r.K+xs[i].k]))
				term.Mul(qv, xs[i].v)
				dot.Add(dot, term)
				sumX.Add(sumX, xs[i].v)
				if err := exact(dot); err != nil {
					return nil, err
				}
				if err := exact(sumX); err != nil {
					return nil, err
				}
			}
			if !any {
				continue
			}
			cs, s := f.Decode(r.Scales.At(n*groups + g))
			cb, b := f.Decode(r.Biases.At(n*groups + g))
			if cs != quant.Finite || cb != quant.Finite {
				return nil, fmt.Errorf("reference: scale or bias of row %d group %d is not finite", n, g)
			}
			term.Mul(s, dot)
			acc.Add(acc, term)
			term.Mul(b, sumX)
			acc.Add(acc, term)
			if err := exact(acc); err != nil {
				return nil, err
			}
		}
		bits, err := f.RoundExact(acc)
		if err != nil {
			return nil, err
		}
		out[n] = bits
	}
	return out, nil
}
