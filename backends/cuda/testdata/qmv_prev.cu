// qmv.cu: the quantized matrix-vector kernels of the CUDA backend
// (github.com/evidence-ledger/ledger/backends/cuda), compiled at run time
// with NVRTC (no headers: the float16/bfloat16 conversions are written out
// below with integer operations and round-to-nearest-even, so the source
// needs neither cuda_fp16.h nor cuda_bf16.h).
//
// y = W x with M = 1 over affine-quantized weights (WORKLOADS.md section 1):
// W is N rows of K*BITS/32 uint32 words, each row one little-endian bit
// stream (element k at bits [k*BITS, (k+1)*BITS)); scales and biases are
// N x K/group values of the activation dtype T; x is K values of T.
//
// Two kernels per call:
//
//   prep_<T>: one block per group g. It widens x to float32 (xf) and builds
//     the group's bias sum: chunks of P consecutive x values (P = 4 for bits
//     2, 4, 6; 8 for 3, 5; 1 for 8), each chunk added left to right,
//       promoted (narrow == 0): ((U(x0)+U(x1))+U(x2))+U(x3)   in float32
//       narrow   (narrow != 0): every add rounded to T, then widened
//     and the chunk results added to the group's float32 sum in order.
//     This is the same chunk-first grouping as backends/cpu/qmv.go.
//
//   qmv_<T>_b<BITS>: one block of QMV_WARPS warps per QMV_ROWS consecutive
//     rows. Thread t takes the units (see Unit) t, t+T, ... of each of its
//     rows and accumulates scale[g] * dot(q, x) in float32, then the groups
//     t, t+T, ... add bias[g] * bsum[g]; a warp reduction (shuffle) and a
//     shared-memory sum over the warps add the threads, and the row sum is
//     rounded to T (RNE).
//
// The reduction order of the dot part differs from a left-to-right sum;
// on the lanes' exact-by-construction inputs every float32 step is exact,
// so the result is bit-identical to any order. Compile with --fmad=false
// so the compiler fuses no multiply-add by itself (the bias sums and the
// group terms round every product and sum, as in the Go reference); the
// dot part uses explicit fused multiply-adds (__fmaf_rn), whose products
// q*x are exact on those inputs.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

#define QMV_ROWS 8
#define QMV_WARPS 4

// ---- float16 / bfloat16 conversions (IEEE 754 binary16, bfloat16) ----

__device__ __forceinline__ float f16_to_f32(u16 h) {
    const u32 sign = (u32)(h & 0x8000u) << 16;
    const u32 exp = (h >> 10) & 0x1fu;
    const u32 man = h & 0x3ffu;
    if (exp == 0x1fu) return __uint_as_float(sign | 0x7f800000u | (man << 13)); // inf, nan
    if (exp != 0) return __uint_as_float(sign | ((exp + 112u) << 23) | (man << 13));
    // zero or subnormal: man * 2^-24, exact in float32
    const float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
}

__device__ __forceinline__ u16 f32_to_f16(float f) {
    const u32 x = __float_as_uint(f);
    const u32 sign = (x >> 16) & 0x8000u;
    const u32 ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (u16)(sign | 0x7e00u | ((ax >> 13) & 0x3ffu)); // quiet nan
    if (ax >= 0x477ff000u) return (u16)(sign | 0x7c00u); // >= 65520 rounds to inf
    if (ax >= 0x38800000u) { // normal binary16 (>= 2^-14)
        u32 r = ax - 0x38000000u; // rebias the exponent (127 -> 15)
        r += 0xfffu + ((r >> 13) & 1u); // round 23 -> 10 mantissa bits, ties to even
        return (u16)(sign | (r >> 13));
    }
    // subnormal binary16 or zero: round |f| * 2^24 to an integer, ties to even
    const u32 e = ax >> 23;
    if (e < 102u) return (u16)sign; // |f| < 2^-25: rounds to zero
    const u32 m = (ax & 0x7fffffu) | 0x800000u;
    const u32 shift = 126u - e; // 14 .. 24
    u32 q = m >> shift;
    const u32 rem = m & ((1u << shift) - 1u);
    const u32 half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (u16)(sign | q);
}

__device__ __forceinline__ float bf16_to_f32(u16 b) { return __uint_as_float((u32)b << 16); }

__device__ __forceinline__ u16 f32_to_bf16(float f) {
    const u32 x = __float_as_uint(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (u16)((x >> 16) | 0x40u); // quiet nan
    return (u16)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// DTy<D>: raw storage type, widening, narrowing (RNE) and rounding to T.
// D follows runner/quant.DType: 1 float16, 2 bfloat16, 3 float32.
template <int D> struct DTy;
template <> struct DTy<1> {
    typedef u16 raw;
    static __device__ __forceinline__ float load(u16 v) { return f16_to_f32(v); }
    static __device__ __forceinline__ u16 store(float f) { return f32_to_f16(f); }
    static __device__ __forceinline__ float round(float f) { return f16_to_f32(f32_to_f16(f)); }
};
template <> struct DTy<2> {
    typedef u16 raw;
    static __device__ __forceinline__ float load(u16 v) { return bf16_to_f32(v); }
    static __device__ __forceinline__ u16 store(float f) { return f32_to_bf16(f); }
    static __device__ __forceinline__ float round(float f) { return bf16_to_f32(f32_to_bf16(f)); }
};
template <> struct DTy<3> {
    typedef u32 raw;
    static __device__ __forceinline__ float load(u32 v) { return __uint_as_float(v); }
    static __device__ __forceinline__ u32 store(float f) { return __float_as_uint(f); }
    static __device__ __forceinline__ float round(float f) { return f; }
};

// ---- bias sums ----

// prep_body: one block per group g (blockDim.x >= group, at most 128).
// Thread t widens x[g*group + t]; the threads at chunk starts build one
// chunk each, left to right; thread 0 adds the chunk results in order.
template <int D>
__device__ __forceinline__ void prep_body(const typename DTy<D>::raw* __restrict__ x, float* __restrict__ xf,
                                          float* __restrict__ bsum, int K, int group, int chunk, int narrow) {
    __shared__ float sx[128];
    __shared__ float sc[128];
    const int g = blockIdx.x;
    const int t = threadIdx.x;
    const int base = g * group;
    if (t < group) {
        const float v = DTy<D>::load(x[base + t]);
        xf[base + t] = v;
        sx[t] = v;
    }
    __syncthreads();
    const int chunks = group / chunk;
    if (t < chunks) {
        const int c = t * chunk;
        float s = sx[c];
        for (int i = 1; i < chunk; i++) s = narrow ? DTy<D>::round(s + sx[c + i]) : s + sx[c + i];
        sc[t] = s;
    }
    __syncthreads();
    if (t == 0) {
        float sum = 0.0f;
        for (int i = 0; i < chunks; i++) sum = sum + sc[i];
        bsum[g] = sum;
    }
}

#define PREP(NAME, D)                                                                                  \
    extern "C" __global__ void __launch_bounds__(128)                                                  \
        NAME(const DTy<D>::raw* x, float* xf, float* bsum, int K, int group, int chunk, int narrow) {  \
        prep_body<D>(x, xf, bsum, K, group, chunk, narrow);                                            \
    }
PREP(prep_f16, 1)
PREP(prep_bf16, 2)
PREP(prep_f32, 3)

// ---- the matrix-vector product ----

// Unit<BITS>: the values one thread takes at a time from a row: 32 values
// (BITS words) for 2 to 6 bits, 16 values (4 words) for 8 bits, read with
// the widest aligned loads (16 bytes for 4 and 8 bits, 8 bytes for 2 and 6
// bits; 3 and 5 bits are only 4-byte aligned). VALS divides 32, so a unit
// never straddles a group.
template <int BITS> struct Unit {
    static constexpr int VALS = BITS == 8 ? 16 : 32;
    static constexpr int WORDS = VALS * BITS / 32;
    u32 w[WORDS];
    __device__ __forceinline__ void load(const u32* __restrict__ p) {
        if constexpr (WORDS % 4 == 0) {
#pragma unroll
            for (int i = 0; i < WORDS / 4; i++) {
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
                w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
            }
        } else if constexpr (WORDS % 2 == 0) {
#pragma unroll
            for (int i = 0; i < WORDS / 2; i++) {
                const uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i);
                w[2 * i] = v.x; w[2 * i + 1] = v.y;
            }
        } else {
#pragma unroll
            for (int i = 0; i < WORDS; i++) w[i] = __ldg(p + i);
        }
    }
    // at returns value j (0 .. VALS-1); j must be a compile-time constant
    // after unrolling so that w stays in registers.
    __device__ __forceinline__ u32 at(int j) const {
        const int bit = j * BITS;
        const int wi = bit >> 5;
        const int off = bit & 31;
        u32 v = w[wi] >> off;
        if (off + BITS > 32) v |= w[wi + 1] << (32 - off);
        return v & ((1u << BITS) - 1u);
    }
};

// u2f converts a quantized value (q < 2^23) to float32 exactly with an OR
// and a subtraction (2^23 + q has q in its mantissa), which runs at full
// rate where an integer-to-float conversion instruction does not.
__device__ __forceinline__ float u2f(u32 q) { return __uint_as_float(0x4b000000u | q) - 8388608.0f; }

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = v + __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// qmv_body: block b computes rows [b*QMV_ROWS, b*QMV_ROWS + QMV_ROWS).
// Its threads take units t, t+T, ... (T = threads per block) of every one
// of those rows, so neighbouring threads read neighbouring weight words
// and x values; then groups t, t+T, ... add bias * bias-sum; a warp
// shuffle reduction and a shared-memory step over the warps add the
// partial sums, and the first QMV_ROWS threads round and store.
template <int D, int BITS>
__device__ __forceinline__ void qmv_body(const u32* __restrict__ w, const typename DTy<D>::raw* __restrict__ scales,
                                         const typename DTy<D>::raw* __restrict__ biases,
                                         const float* __restrict__ xf, const float* __restrict__ bsum,
                                         typename DTy<D>::raw* __restrict__ y, int N, int K, int group) {
    typedef Unit<BITS> U;
    __shared__ float part[QMV_WARPS][QMV_ROWS];
    const int t = threadIdx.x;
    const int lane = t & 31;
    const int warp = t >> 5;
    const int T = blockDim.x;
    const int row0 = blockIdx.x * QMV_ROWS;
    if (row0 >= N) return; // uniform across the block
    const u64 wpr = (u64)(K / 32) * BITS; // words per row
    const int groups = K / group;
    const int units = K / U::VALS;
    float acc[QMV_ROWS];
#pragma unroll
    for (int r = 0; r < QMV_ROWS; r++) acc[r] = 0.0f;

    for (int u = t; u < units; u += T) {
        const int k0 = u * U::VALS;
        const int g = k0 / group;
        U p[QMV_ROWS];
#pragma unroll
        for (int r = 0; r < QMV_ROWS; r++) {
            if (row0 + r < N) p[r].load(w + (u64)(row0 + r) * wpr + (u64)u * U::WORDS);
        }
        float xv[U::VALS];
#pragma unroll
        for (int i = 0; i < U::VALS / 4; i++) {
            const float4 v = __ldg(reinterpret_cast<const float4*>(xf + k0) + i);
            xv[4 * i] = v.x; xv[4 * i + 1] = v.y; xv[4 * i + 2] = v.z; xv[4 * i + 3] = v.w;
        }
#pragma unroll
        for (int r = 0; r < QMV_ROWS; r++) {
            if (row0 + r < N) {
                float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int j = 0; j < U::VALS; j++) d[j & 3] = __fmaf_rn(u2f(p[r].at(j)), xv[j], d[j & 3]);
                const float dot = (d[0] + d[1]) + (d[2] + d[3]);
                const float s = DTy<D>::load(scales[(u64)(row0 + r) * groups + g]);
                acc[r] = acc[r] + s * dot;
            }
        }
    }
    for (int g = t; g < groups; g += T) {
        const float bs = bsum[g];
#pragma unroll
        for (int r = 0; r < QMV_ROWS; r++) {
            if (row0 + r < N) acc[r] = acc[r] + DTy<D>::load(biases[(u64)(row0 + r) * groups + g]) * bs;
        }
    }
#pragma unroll
    for (int r = 0; r < QMV_ROWS; r++) {
        const float v = warp_sum(acc[r]);
        if (lane == 0) part[warp][r] = v;
    }
    __syncthreads();
    if (t < QMV_ROWS && row0 + t < N) {
        float v = 0.0f;
#pragma unroll
        for (int i = 0; i < QMV_WARPS; i++) v = v + part[i][t];
        y[row0 + t] = DTy<D>::store(v);
    }
}

#define QMV(NAME, D, BITS)                                                                             \
    extern "C" __global__ void __launch_bounds__(32 * QMV_WARPS)                                       \
        NAME(const u32* w, const DTy<D>::raw* scales, const DTy<D>::raw* biases, const float* xf,      \
             const float* bsum, DTy<D>::raw* y, int N, int K, int group) {                             \
        qmv_body<D, BITS>(w, scales, biases, xf, bsum, y, N, K, group);                                \
    }
#define QMV_ALL_BITS(T, D)                                                                             \
    QMV(qmv_##T##_b2, D, 2)                                                                            \
    QMV(qmv_##T##_b3, D, 3)                                                                            \
    QMV(qmv_##T##_b4, D, 4)                                                                            \
    QMV(qmv_##T##_b5, D, 5)                                                                            \
    QMV(qmv_##T##_b6, D, 6)                                                                            \
    QMV(qmv_##T##_b8, D, 8)
QMV_ALL_BITS(f16, 1)
QMV_ALL_BITS(bf16, 2)
QMV_ALL_BITS(f32, 3)
