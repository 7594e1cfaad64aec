#include "textflag.h"

// AVX2 + FMA + F16C kernels of the CPU qmv (see qmv_amd64.go for the Go
// declarations, shapes and the callers' preconditions).
//
// 4-bit layout: one YMM register holds 8 packed words (64 weights); lane i
// is word i, nibble j of lane i is element 8i+j of the 64-element block.
// xp holds x permuted per block so that xp[b*64 + 8j + i] = x[b*64 + 8i + j]:
// nibble j of all 8 lanes is masked out after a shift by 4j, converted to
// float32 (exact: values 0..15) and multiplied-added into accumulator j%4
// against the 8 floats at xp[b*64 + 8j].

// func dot4G64AVX2(w []uint32, xp []float32, scales []float32, bpg int) float32
//
// Returns sum over groups g of scales[g] * dot_g, where dot_g is the dot
// product of group g's 4-bit values with x; each group is bpg blocks of 64
// (bpg = groupSize/64). len(scales) >= 1, len(w) = 8*bpg*len(scales),
// len(xp) = 64*bpg*len(scales).
TEXT ·dot4G64AVX2(SB), NOSPLIT, $0-84
	MOVQ w_base+0(FP), SI
	MOVQ xp_base+24(FP), DI
	MOVQ scales_base+48(FP), DX
	MOVQ scales_len+56(FP), CX
	MOVQ bpg+72(FP), R8
	VPCMPEQD Y15, Y15, Y15
	VPSRLD $28, Y15, Y15        // 0x0000000f in every lane
	VXORPS Y0, Y0, Y0           // row accumulator

g64group:
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	MOVQ R8, R9

g64block:
	VMOVDQU (SI), Y5
	VPAND Y15, Y5, Y6
	VCVTDQ2PS Y6, Y6
	VFMADD231PS (DI), Y6, Y1
	VPSRLD $4, Y5, Y7
	VPAND Y15, Y7, Y7
	VCVTDQ2PS Y7, Y7
	VFMADD231PS 32(DI), Y7, Y2
	VPSRLD $8, Y5, Y8
	VPAND Y15, Y8, Y8
	VCVTDQ2PS Y8, Y8
	VFMADD231PS 64(DI), Y8, Y3
	VPSRLD $12, Y5, Y9
	VPAND Y15, Y9, Y9
	VCVTDQ2PS Y9, Y9
	VFMADD231PS 96(DI), Y9, Y4
	VPSRLD $16, Y5, Y6
	VPAND Y15, Y6, Y6
	VCVTDQ2PS Y6, Y6
	VFMADD231PS 128(DI), Y6, Y1
	VPSRLD $20, Y5, Y7
	VPAND Y15, Y7, Y7
	VCVTDQ2PS Y7, Y7
	VFMADD231PS 160(DI), Y7, Y2
	VPSRLD $24, Y5, Y8
	VPAND Y15, Y8, Y8
	VCVTDQ2PS Y8, Y8
	VFMADD231PS 192(DI), Y8, Y3
	VPSRLD $28, Y5, Y9
	VCVTDQ2PS Y9, Y9
	VFMADD231PS 224(DI), Y9, Y4
	ADDQ $32, SI
	ADDQ $256, DI
	DECQ R9
	JNZ g64block

	VADDPS Y2, Y1, Y1
	VADDPS Y4, Y3, Y3
	VADDPS Y3, Y1, Y1
	VBROADCASTSS (DX), Y5
	VFMADD231PS Y5, Y1, Y0
	ADDQ $4, DX
	DECQ CX
	JNZ g64group

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VPSHUFD $1, X0, X1
	VADDSS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+80(FP)
	RET

// func dot4G32AVX2(w []uint32, xp []float32, scales []float32) float32
//
// Group size 32: each 64-element block holds two groups (lanes 0-3 are
// group 2b, lanes 4-7 group 2b+1), scaled by a vector of two broadcasts.
// len(scales) is even and >= 2, len(w) = 4*len(scales),
// len(xp) = 32*len(scales).
TEXT ·dot4G32AVX2(SB), NOSPLIT, $0-76
	MOVQ w_base+0(FP), SI
	MOVQ xp_base+24(FP), DI
	MOVQ scales_base+48(FP), DX
	MOVQ scales_len+56(FP), CX
	SHRQ $1, CX
	VPCMPEQD Y15, Y15, Y15
	VPSRLD $28, Y15, Y15
	VXORPS Y0, Y0, Y0

g32block:
	VMOVDQU (SI), Y5
	VPAND Y15, Y5, Y6
	VCVTDQ2PS Y6, Y6
	VMULPS (DI), Y6, Y1
	VPSRLD $4, Y5, Y7
	VPAND Y15, Y7, Y7
	VCVTDQ2PS Y7, Y7
	VMULPS 32(DI), Y7, Y2
	VPSRLD $8, Y5, Y8
	VPAND Y15, Y8, Y8
	VCVTDQ2PS Y8, Y8
	VMULPS 64(DI), Y8, Y3
	VPSRLD $12, Y5, Y9
	VPAND Y15, Y9, Y9
	VCVTDQ2PS Y9, Y9
	VMULPS 96(DI), Y9, Y4
	VPSRLD $16, Y5, Y6
	VPAND Y15, Y6, Y6
	VCVTDQ2PS Y6, Y6
	VFMADD231PS 128(DI), Y6, Y1
	VPSRLD $20, Y5, Y7
	VPAND Y15, Y7, Y7
	VCVTDQ2PS Y7, Y7
	VFMADD231PS 160(DI), Y7, Y2
	VPSRLD $24, Y5, Y8
	VPAND Y15, Y8, Y8
	VCVTDQ2PS Y8, Y8
	VFMADD231PS 192(DI), Y8, Y3
	VPSRLD $28, Y5, Y9
	VCVTDQ2PS Y9, Y9
	VFMADD231PS 224(DI), Y9, Y4
	VADDPS Y2, Y1, Y1
	VADDPS Y4, Y3, Y3
	VADDPS Y3, Y1, Y1
	VBROADCASTSS (DX), X5
	VBROADCASTSS 4(DX), X6
	VINSERTF128 $1, X6, Y5, Y5
	VFMADD231PS Y5, Y1, Y0
	ADDQ $32, SI
	ADDQ $256, DI
	ADDQ $8, DX
	DECQ CX
	JNZ g32block

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VPSHUFD $1, X0, X1
	VADDSS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+72(FP)
	RET

// func dot8AVX2(w []uint32, xp []float32, scales []float32, bpg int) float32
//
// 8-bit layout: lane i of a YMM register is word i of a block of 8 words
// (32 weights); byte j of lane i is element 4i+j, and xp holds x permuted
// per block so that xp[b*32 + 8j + i] = x[b*32 + 4i + j]. Each group is bpg
// blocks (bpg = groupSize/32). Returns sum over groups of
// scales[g] * dot_g; len(scales) >= 1, len(w) = 8*bpg*len(scales),
// len(xp) = 32*bpg*len(scales).
TEXT ·dot8AVX2(SB), NOSPLIT, $0-84
	MOVQ w_base+0(FP), SI
	MOVQ xp_base+24(FP), DI
	MOVQ scales_base+48(FP), DX
	MOVQ scales_len+56(FP), CX
	MOVQ bpg+72(FP), R8
	VPCMPEQD Y15, Y15, Y15
	VPSRLD $24, Y15, Y15        // 0x000000ff in every lane
	VXORPS Y0, Y0, Y0

b8group:
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	MOVQ R8, R9

b8block:
	VMOVDQU (SI), Y5
	VPAND Y15, Y5, Y6
	VCVTDQ2PS Y6, Y6
	VFMADD231PS (DI), Y6, Y1
	VPSRLD $8, Y5, Y7
	VPAND Y15, Y7, Y7
	VCVTDQ2PS Y7, Y7
	VFMADD231PS 32(DI), Y7, Y2
	VPSRLD $16, Y5, Y8
	VPAND Y15, Y8, Y8
	VCVTDQ2PS Y8, Y8
	VFMADD231PS 64(DI), Y8, Y3
	VPSRLD $24, Y5, Y9
	VCVTDQ2PS Y9, Y9
	VFMADD231PS 96(DI), Y9, Y4
	ADDQ $32, SI
	ADDQ $128, DI
	DECQ R9
	JNZ b8block

	VADDPS Y2, Y1, Y1
	VADDPS Y4, Y3, Y3
	VADDPS Y3, Y1, Y1
	VBROADCASTSS (DX), Y5
	VFMADD231PS Y5, Y1, Y0
	ADDQ $4, DX
	DECQ CX
	JNZ b8group

	VEXTRACTF128 $1, Y0, X1
	VADDPS X1, X0, X0
	VMOVHLPS X0, X0, X1
	VADDPS X1, X0, X0
	VPSHUFD $1, X0, X1
	VADDSS X1, X0, X0
	VZEROUPPER
	MOVSS X0, ret+80(FP)
	RET

// func f16ToF32AVX(dst []float32, src []uint16)
//
// Widens len(dst) float16 values (a multiple of 8, len(src) >= len(dst))
// with VCVTPH2PS: exact for every finite value and infinity; NaNs stay NaN
// with the payload kept and the quiet bit set.
TEXT ·f16ToF32AVX(SB), NOSPLIT, $0-48
	MOVQ dst_base+0(FP), DI
	MOVQ dst_len+8(FP), CX
	MOVQ src_base+24(FP), SI
	SHRQ $3, CX
	JZ f16done

f16loop:
	VCVTPH2PS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ $16, SI
	ADDQ $32, DI
	DECQ CX
	JNZ f16loop
	VZEROUPPER

f16done:
	RET
