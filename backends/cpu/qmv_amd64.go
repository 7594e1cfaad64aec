package cpu

import "golang.org/x/sys/cpu"

// haveSIMD reports whether the AVX2/FMA/F16C kernels of qmv_amd64.s can
// run (CPUID and OS support for YMM state, through golang.org/x/sys/cpu).
var haveSIMD = cpu.X86.HasAVX2 && cpu.X86.HasFMA && cpu.X86.HasF16C

// dot4G64AVX2 returns sum over g of scales[g] * dot(q_g, x_g) for one row of
// 4-bit weights with group size 64*bpg (bpg = 1 or 2). w is the row's packed
// words (len 8*bpg*len(scales)), xp is permuteX(x, 8) (len
// 64*bpg*len(scales)); len(scales) >= 1. Each group's dot product is
// accumulated in 8 lanes x 4 partial sums with fused multiply-adds.
//
//go:noescape
func dot4G64AVX2(w []uint32, xp []float32, scales []float32, bpg int) float32

// dot4G32AVX2 is dot4G64AVX2 for group size 32: len(scales) is even and
// >= 2, len(w) = 4*len(scales), len(xp) = 32*len(scales).
//
//go:noescape
func dot4G32AVX2(w []uint32, xp []float32, scales []float32) float32

// dot8AVX2 is dot4G64AVX2 for 8-bit weights: groups of bpg = groupSize/32
// blocks of 32, len(w) = 8*bpg*len(scales), xp = permuteX(x, 4) (len
// 32*bpg*len(scales)); len(scales) >= 1.
//
//go:noescape
func dot8AVX2(w []uint32, xp []float32, scales []float32, bpg int) float32

// f16ToF32AVX widens float16 bits to float32 with VCVTPH2PS; len(dst) is a
// multiple of 8 and len(src) >= len(dst).
//
//go:noescape
func f16ToF32AVX(dst []float32, src []uint16)
