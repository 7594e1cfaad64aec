// Package quant holds the host-side data formats shared by every backend of
// the quantized lanes: the activation dtypes (float16, bfloat16, float32) as
// raw bits and their conversions, the affine quantization of real-valued
// weights ("edge" formulation of MLX's affine_quantize), the little-endian
// bit-stream packing of quantized weights into uint32 words, and exact
// (arbitrary precision) decoding and round-to-nearest-even encoding used by
// the lanes' independent references.
//
// The formats follow WORKLOADS.md section 1, which restates the behaviour of
// Apple's MLX v0.32.x (mlx/ops.cpp affine_quantize and
// mlx/backend/metal/kernels/quantized.h).
//
// Two conversion families live here on purpose and share no code:
//   - fast conversions (F16ToF32, F32ToF16, BF16ToF32, F32ToBF16) used by
//     kernels; float16 goes through github.com/x448/float16;
//   - exact ones (Format.Decode, Format.RoundExact) on math/big values, used
//     only by references and tests, so a reference never trusts the code it
//     checks.
//
// All functions are pure and safe for concurrent use.
package quant
