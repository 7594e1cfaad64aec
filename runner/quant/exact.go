package quant

import (
	"fmt"
	"math/big"
)

// Format describes an IEEE-754-style binary format for exact decoding and
// rounding: ExpBits exponent bits, MantBits stored fraction bits, a sign
// bit on top. It is independent of the fast conversions in float.go.
type Format struct {
	Name     string
	ExpBits  uint
	MantBits uint
}

// The three formats of the quantized lanes.
var (
	FormatF16  = Format{Name: "f16", ExpBits: 5, MantBits: 10}
	FormatBF16 = Format{Name: "bf16", ExpBits: 8, MantBits: 7}
	FormatF32  = Format{Name: "f32", ExpBits: 8, MantBits: 23}
)

// ExactPrec is the precision (bits) of every big.Float this package
// produces; sums of a few hundred values spanning the whole float32
// exponent range stay exact at this precision.
const ExactPrec = 2048

func (f Format) bias() int { return 1<<(f.ExpBits-1) - 1 }
func (f Format) emin() int { return 1 - f.bias() }

// Class is the class of a decoded value.
type Class uint8

// The classes.
const (
	Finite Class = iota
	Inf
	NaN
)

// Decode returns the exact value of raw bits in format f: the class, and
// for finite values a big.Float (precision ExactPrec) equal to it. A zero
// keeps its sign.
func (f Format) Decode(bits uint32) (Class, *big.Float) {
	mmask := uint32(1)<<f.MantBits - 1
	emask := uint32(1)<<f.ExpBits - 1
	sign := bits>>(f.MantBits+f.ExpBits)&1 == 1
	e := bits >> f.MantBits & emask
	m := bits & mmask
	v := new(big.Float).SetPrec(ExactPrec)
	switch {
	case e == emask && m == 0:
		return Inf, nil
	case e == emask:
		return NaN, nil
	case e == 0:
		// subnormal: m * 2^(emin - M)
		v.SetMantExp(new(big.Float).SetPrec(ExactPrec).SetUint64(uint64(m)), f.emin()-int(f.MantBits))
	default:
		sig := uint64(m) | 1<<f.MantBits
		v.SetMantExp(new(big.Float).SetPrec(ExactPrec).SetUint64(sig), int(e)-f.bias()-int(f.MantBits))
	}
	if sign {
		v.Neg(v) // big.Float keeps the sign of zero
	}
	return Finite, v
}

// RoundExact rounds the exact value v to format f with round-to-nearest,
// ties-to-even, handling subnormals and overflow to infinity, and returns
// the raw bits. v must be finite. The rounding works on the integer
// significand of v (math/big), not on any float conversion.
func (f Format) RoundExact(v *big.Float) (uint32, error) {
	if v.IsInf() {
		return 0, fmt.Errorf("round %s: value is infinite", f.Name)
	}
	var sign uint32
	if v.Signbit() {
		sign = 1 << (f.MantBits + f.ExpBits)
	}
	if v.Sign() == 0 {
		return sign, nil
	}
	a := new(big.Float).Abs(v)
	// a = mi * 2^s exactly, mi an integer.
	mant := new(big.Float)
	exp := a.MantExp(mant) // a = mant * 2^exp, mant in [0.5, 1)
	prec := int(mant.MinPrec())
	mi, acc := new(big.Float).SetMantExp(mant, prec).Int(nil)
	if acc != big.Exact {
		return 0, fmt.Errorf("round %s: internal: significand not integral", f.Name)
	}
	s := exp - prec
	e := exp - 1 // 2^e <= a < 2^(e+1)
	M := int(f.MantBits)
	qe := e
	if qe < f.emin() {
		qe = f.emin()
	}
	qe -= M // value of one unit in the last place
	n := new(big.Int)
	if s >= qe {
		n.Lsh(mi, uint(s-qe))
	} else {
		d := uint(qe - s)
		n.Rsh(mi, d)
		rem := new(big.Int).Sub(mi, new(big.Int).Lsh(n, d))
		half := new(big.Int).Lsh(big.NewInt(1), d-1)
		switch c := rem.Cmp(half); {
		case c > 0, c == 0 && n.Bit(0) == 1:
			n.Add(n, big.NewInt(1))
		}
	}
	// n * 2^qe is the rounded magnitude; n < 2^(M+1) except after a carry.
	limit := new(big.Int).Lsh(big.NewInt(1), uint(M+1))
	if n.Cmp(limit) >= 0 {
		n.Rsh(n, 1)
		qe++
	}
	hidden := new(big.Int).Lsh(big.NewInt(1), uint(M))
	maxField := 1<<f.ExpBits - 1
	if n.Cmp(hidden) < 0 { // subnormal (qe == emin - M)
		return sign | uint32(n.Uint64()), nil
	}
	field := qe + M + f.bias()
	if field >= maxField {
		return sign | uint32(maxField)<<f.MantBits, nil
	}
	frac := new(big.Int).Sub(n, hidden).Uint64()
	return sign | uint32(field)<<f.MantBits | uint32(frac), nil
}

// IsNaNBits reports whether raw bits of format f encode a NaN.
func (f Format) IsNaNBits(bits uint32) bool {
	c, _ := f.Decode(bits)
	return c == NaN
}

// NewExact returns a zero big.Float with precision ExactPrec.
func NewExact() *big.Float { return new(big.Float).SetPrec(ExactPrec) }
