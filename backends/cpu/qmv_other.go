//go:build !amd64

package cpu

// haveSIMD is false off amd64: qmv uses the portable Go loops only.
const haveSIMD = false

func dot4G64AVX2(w []uint32, xp []float32, scales []float32, bpg int) float32 {
	panic("cpu: dot4G64AVX2 without amd64")
}

func dot4G32AVX2(w []uint32, xp []float32, scales []float32) float32 {
	panic("cpu: dot4G32AVX2 without amd64")
}

func dot8AVX2(w []uint32, xp []float32, scales []float32, bpg int) float32 {
	panic("cpu: dot8AVX2 without amd64")
}

func f16ToF32AVX(dst []float32, src []uint16) { panic("cpu: f16ToF32AVX without amd64") }
