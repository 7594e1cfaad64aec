package quant

import (
	"fmt"
	"math"

	"github.com/x448/float16"
)

// DType is an activation dtype of the quantized kernels: x, scales, biases
// and the output share it; the accumulator is always float32.
type DType uint8

// The dtypes. Their String forms are the case-id labels "f16", "bf16", "f32".
const (
	Float16 DType = iota + 1
	BFloat16
	Float32
)

// DTypes lists the dtypes in case-matrix order.
var DTypes = []DType{Float16, BFloat16, Float32}

// String returns the short label used in case ids.
func (d DType) String() string {
	switch d {
	case Float16:
		return "f16"
	case BFloat16:
		return "bf16"
	case Float32:
		return "f32"
	}
	return fmt.Sprintf("dtype(%d)", uint8(d))
}

// Valid reports whether d is one of the three dtypes.
func (d DType) Valid() bool { return d >= Float16 && d <= Float32 }

// Size is the width of one raw value in bytes (2 or 4; 0 when invalid).
func (d DType) Size() int {
	switch d {
	case Float16, BFloat16:
		return 2
	case Float32:
		return 4
	}
	return 0
}

// Format returns the exact-arithmetic description of d.
func (d DType) Format() Format {
	switch d {
	case Float16:
		return FormatF16
	case BFloat16:
		return FormatBF16
	}
	return FormatF32
}

// ParseDType parses "f16", "bf16" or "f32".
func ParseDType(s string) (DType, error) {
	for _, d := range DTypes {
		if d.String() == s {
			return d, nil
		}
	}
	return 0, fmt.Errorf("unknown dtype %q (want f16, bf16 or f32)", s)
}

// F16ToF32 widens IEEE 754 binary16 bits to float32 (exact; NaN stays NaN).
func F16ToF32(b uint16) float32 { return float16.Frombits(b).Float32() }

// F32ToF16 narrows f to binary16 bits with round-to-nearest-even; values at
// or above 65520 in magnitude become infinity, NaN stays NaN.
func F32ToF16(f float32) uint16 { return float16.Fromfloat32(f).Bits() }

// BF16ToF32 widens bfloat16 bits to float32 (exact: bfloat16 is the upper
// half of a float32).
func BF16ToF32(b uint16) float32 { return math.Float32frombits(uint32(b) << 16) }

// F32ToBF16 narrows f to bfloat16 bits with round-to-nearest-even (ties go
// to the even 16-bit pattern); overflow rounds to infinity; NaN becomes a
// quiet NaN of the same sign.
func F32ToBF16(f float32) uint16 {
	u := math.Float32bits(f)
	if u&0x7fffffff > 0x7f800000 {
		return uint16(u>>16) | 0x0040
	}
	u += 0x7fff + (u>>16)&1
	return uint16(u >> 16)
}

// ToF32 widens one raw value of dtype d (low 16 bits used for f16/bf16).
func ToF32(d DType, bits uint32) float32 {
	switch d {
	case Float16:
		return F16ToF32(uint16(bits))
	case BFloat16:
		return BF16ToF32(uint16(bits))
	}
	return math.Float32frombits(bits)
}

// FromF32 narrows f to dtype d with round-to-nearest-even and returns the
// raw bits (in the low 16 bits for f16/bf16).
func FromF32(d DType, f float32) uint32 {
	switch d {
	case Float16:
		return uint32(F32ToF16(f))
	case BFloat16:
		return uint32(F32ToBF16(f))
	}
	return math.Float32bits(f)
}

// RoundTo rounds a float32 to the nearest value of dtype d (ties to even)
// and widens it back; it is the "one operation in T" step of the narrow
// bias sum. For a sum a+b of two T values computed in float32 the result
// is the correctly rounded T sum, because float32 has at least 2p+2
// significant bits for p = 11 (f16) and p = 8 (bf16), which makes double
// rounding innocuous for addition (Figueroa, "When is double rounding
// innocuous?", SIGNUM 1995).
func RoundTo(d DType, f float32) float32 {
	switch d {
	case Float16:
		return F16ToF32(F32ToF16(f))
	case BFloat16:
		return BF16ToF32(F32ToBF16(f))
	}
	return f
}
