// qmv.cu: the quantized matrix-vector kernels of the CUDA backend
// (github.com/evidence-ledger/ledger/backends/cuda), compiled at run time
// with NVRTC (no headers: float16 is widened with one cvt instruction in
// inline PTX, the other float16/bfloat16 conversions are written out below
// with integer operations and round-to-nearest-even, so the source needs
// neither cuda_fp16.h nor cuda_bf16.h).
//
// y = W x with M = 1 over affine-quantized weights (WORKLOADS.md section 1):
// W is N rows of K*BITS/32 uint32 words, each row one little-endian bit
// stream (element k at bits [k*BITS, (k+1)*BITS)); scales and biases are
// N x K/group values of the activation dtype T; x is K values of T; y is N
// values of T.
//
// One kernel per call, qmv_<T>_b<BITS>, one launch of a 1-D grid:
//
//   Thread t of a block owns the unit u = s + t of every row, for each K
//   slice s = 0, T, 2T, ... (T threads per block, a multiple of 32; a unit
//   is 32 consecutive values, 16 for 8 bits; see Unit). It widens its 32
//   x values to float32 once per slice and keeps them in registers.
//
//   Bias sums: chunks of P consecutive x values (P = 4 for bits 2, 4, 6;
//   8 for 3, 5; 1 for 8), each chunk added left to right,
//     promoted (narrow == 0): ((U(x0)+U(x1))+U(x2))+U(x3)   in float32
//     narrow   (narrow != 0): every add rounded to T, then widened
//   and the chunk results added to the group's float32 sum in order,
//   starting from 0. A group spans group/VALS consecutive units (lanes of
//   one warp); each lane continues the running sum of the lane before it
//   (a shuffle per step), so the last lane of the group ends with exactly
//   the sum of backends/cpu/qmv.go's biasSums.
//
//   Rows: block b takes the row chunks [b*C/G, (b+1)*C/G) (C = ceil(N/RB)
//   chunks of QMV_RB rows, G blocks). For each chunk every lane loads its
//   unit of the RB rows (16-byte loads for 4 and 8 bits, issued one chunk
//   ahead of the arithmetic, the first before x is read; see QMV_STAGES
//   for the shared-memory ring), turns each value into a float32 with one
//   LOP3 and one FADD (Unit::val), computes scale * dot(q, x) per row
//   and, in the last lane of each group, adds bias * bias-sum; a
//   transposing warp reduction leaves each row's warp sum in one lane,
//   which writes it to shared memory; at the end the first threads add
//   the warps' sums and round to T (RNE).
//
// The dot products and the sums over lanes, warps and groups are in an
// order of their own; on the lanes' exact-by-construction inputs every
// float32 step is exact, so the result is bit-identical to any order (the
// chunked bias sums are computed in exactly the reference order). Compile
// with --fmad=false so the compiler fuses no multiply-add by itself (the
// bias sums and the group terms round every product and sum, as in the Go
// reference); the dot part uses explicit fused multiply-adds (__fmaf_rn),
// whose products q*x are exact on those inputs.
//
// Batch: a grid of gridDim.y = B rows of blocks computes B products with
// the same weights at once; block row b reads x + b*K and writes y + b*N
// (x and y hold B vectors back to back). gridDim.y = 1 is the single
// product above. Built with QMV_NB_KERNELS=1 the file holds instead the
// multi-vector kernels qmv_<T>_b<BITS>_x<NB> (NB = 2, 4): block row b
// takes vectors b*NB .. b*NB+NB-1, and each lane turns each weight value
// into a float32 once and applies it to the NB vectors (NB bias sums, dot
// products and partial row sums; every vector's arithmetic is the
// single-vector kernel's). They take at most QMV_NB_MAXT threads per
// block (the NB vectors' x values take registers), so where K needs more
// threads than that their summation order differs from the single-vector
// kernel's; on exact inputs the result is the same.
//
// Concurrency: blocks write disjoint rows of y; nothing else is written.

typedef unsigned int u32;
typedef unsigned short u16;
typedef unsigned long long u64;

// Build parameters (the host, qmv.go, uses the same values; the
// benchmarks compile variants with -D):
//   QMV_RB      rows per chunk (a power of two, at most 32)
//   QMV_MAXT    threads per block at most
//   QMV_MINB    blocks per multiprocessor the register budget must allow
//               (__launch_bounds__)
//   QMV_L2PF    1: 16-byte weight loads with L1 no-allocate and the
//               256-byte L2 prefetch hint; 0: plain __ldg
//   QMV_STAGES  0: each lane double-buffers one chunk in registers;
//               n > 0: each warp streams weights, scales and biases through
//               a ring of n chunks in dynamic shared memory with cp.async
//               (n-1 chunks in flight)
//   QMV_MAXROWS rows per block at most (the host sizes the grid so that
//               no block gets more)
//   QMV_NB_KERNELS 0: the single-vector kernels qmv_<T>_b<BITS> and
//               qmv_hold; 1: instead the multi-vector kernels
//               qmv_<T>_b<BITS>_x2 and _x4 (2 and 4 vectors per block)
//   QMV_NB_MAXT threads per block at most of the multi-vector kernels
//               (fewer than QMV_MAXT: each thread holds NB vectors' x)
#ifndef QMV_RB
#define QMV_RB 4
#endif
#ifndef QMV_MAXT
#define QMV_MAXT 512
#endif
#ifndef QMV_MINB
#define QMV_MINB 1
#endif
#ifndef QMV_L2PF
#define QMV_L2PF 1
#endif
#ifndef QMV_STAGES
#define QMV_STAGES 0
#endif
#ifndef QMV_MAXROWS
#define QMV_MAXROWS 256
#endif
#ifndef QMV_NB_KERNELS
#define QMV_NB_KERNELS 0
#endif
#ifndef QMV_NB_MAXT
#define QMV_NB_MAXT 256
#endif

// ---- float16 / bfloat16 conversions (IEEE 754 binary16, bfloat16) ----

// f16_to_f32 widens exactly (cvt.f32.f16; subnormals become normal float32
// values, a NaN stays a NaN).
__device__ __forceinline__ float f16_to_f32(u16 h) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h));
    return f;
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
    // cvt.rn.f16.f32 rounds to nearest even like f32_to_f16, subnormal
    // and overflowing results included (PTX ISA, cvt: .rn without .ftz); a
    // NaN becomes the canonical NaN, which changes no sum (the FADDs that
    // follow return the canonical NaN for any NaN operand). One instruction
    // instead of f32_to_f16's integer sequence, so the narrow build's bias
    // sums are not slowed by the rounding's implementation.
    static __device__ __forceinline__ float round(float f) {
        u16 h;
        asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
        return f16_to_f32(h);
    }
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
#if QMV_L2PF
                asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                    : "=r"(w[4 * i]), "=r"(w[4 * i + 1]), "=r"(w[4 * i + 2]), "=r"(w[4 * i + 3])
                    : "l"(p + 4 * i));
#else
                const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
                w[4 * i] = v.x; w[4 * i + 1] = v.y; w[4 * i + 2] = v.z; w[4 * i + 3] = v.w;
#endif
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
    __device__ __forceinline__ void zero() {
#pragma unroll
        for (int i = 0; i < WORDS; i++) w[i] = 0u;
    }
    // val returns value j (0 .. VALS-1) as an exact float32; j must be a
    // compile-time constant after unrolling so that w stays in registers.
    // A field that lies in bits [off, off+BITS) with off+BITS <= 23 becomes
    // the mantissa bits of 2^(23-off) + q (its exponent ORed in), and one
    // subtraction leaves q: an AND/OR and an FADD per value. Fields above
    // bit 23 are taken from the word shifted right by 12 the same way;
    // fields across two words are assembled and converted with 2^23.
    // mag[o] must hold (150-o) << 23, the float 2^(23-o), in a register
    // (see Magic) so that the AND and the OR are one LOP3.
    __device__ __forceinline__ float val(int j, const u32 (&mag)[24]) const {
        constexpr u32 M = (1u << BITS) - 1u;
        const int bit = j * BITS;
        const int wi = bit >> 5;
        const int off = bit & 31;
        if (off + BITS > 32) {
            const u32 v = ((w[wi] >> off) | (w[wi + 1] << (32 - off))) & M;
            return __uint_as_float(0x4b000000u | v) - 8388608.0f;
        }
        const u32 src = off + BITS <= 23 ? w[wi] : w[wi] >> 12;
        const int o = off + BITS <= 23 ? off : off - 12;
        return __uint_as_float((src & (M << o)) | mag[o]) - __uint_as_float((150u - (u32)o) << 23);
    }
};

// load_widen reads N consecutive raw values of dtype D with 16-byte
// loads (N * sizeof(raw) is a multiple of 16 and the address 16-byte
// aligned), widened to float32.
template <int D, int N>
__device__ __forceinline__ void load_widen(const typename DTy<D>::raw* __restrict__ p, float (&out)[N]) {
    constexpr int BYTES = N * (int)sizeof(typename DTy<D>::raw);
    constexpr int V = BYTES / 16;
    u32 r[BYTES / 4];
#pragma unroll
    for (int i = 0; i < V; i++) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(p) + i);
        r[4 * i] = v.x; r[4 * i + 1] = v.y; r[4 * i + 2] = v.z; r[4 * i + 3] = v.w;
    }
#pragma unroll
    for (int j = 0; j < N; j++) {
        if constexpr (sizeof(typename DTy<D>::raw) == 2) {
            out[j] = DTy<D>::load((u16)((r[j >> 1] >> (16 * (j & 1))) & 0xffffu));
        } else {
            out[j] = DTy<D>::load(r[j]);
        }
    }
}

// Chunk<BITS>::P is quant.ChunkSize(BITS): the bias-sum chunk.
template <int BITS> struct Chunk {
    static constexpr int P = BITS == 8 ? 1 : (BITS == 3 || BITS == 5) ? 8 : 4;
};

// rows_reduce adds v[r] over the 32 lanes of a warp for R rows (R a power
// of two, at most 32) with R-1+log2(32/R) shuffles: each halving step
// sends half of the remaining rows to the partner lane and keeps the other
// half. Afterwards the lanes with lane % (32/R) == 0 hold the sums; the
// returned value is the sum of row row_of(lane) in those lanes.
template <int R>
__device__ __forceinline__ float rows_reduce(float (&v)[R], int lane) {
    int o = 16;
#pragma unroll
    for (int c = R; c > 1; c >>= 1, o >>= 1) {
        const bool up = (lane & o) != 0;
#pragma unroll
        for (int i = 0; i < c / 2; i++) {
            const float send = up ? v[i] : v[i + c / 2];
            const float keep = up ? v[i + c / 2] : v[i];
            v[i] = keep + __shfl_xor_sync(0xffffffffu, send, o);
        }
    }
    float s = v[0];
#pragma unroll
    for (; o > 0; o >>= 1) s = s + __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

// row_of is the row (0 .. R-1) whose sum rows_reduce leaves in lane.
template <int R>
__device__ __forceinline__ int row_of(int lane) {
    int row = 0, o = 16;
#pragma unroll
    for (int c = R; c > 1; c >>= 1, o >>= 1)
        if (lane & o) row += c / 2;
    return row;
}

// magic fills mag[o] = (150-o) << 23 ORed with opaque, a run-time zero:
// the compiler cannot fold the constants into immediates (a LOP3 takes one
// immediate, so it would split each AND/OR in two). Unused entries are
// dead and take no registers.
__device__ __forceinline__ void magic(u32 (&mag)[24], u32 opaque) {
#pragma unroll
    for (int o = 0; o < 24; o++) mag[o] = ((150u - (u32)o) << 23) | opaque;
}

// ---- asynchronous copies (QMV_STAGES > 0) ----

__device__ __forceinline__ u32 smem_u32(const void* p) {
    u32 a;
    asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p));
    return a;
}

// cp_unit copies WORDS words from global p to shared address s with
// cp.async in the widest size their alignment allows (as Unit::load).
template <int WORDS>
__device__ __forceinline__ void cp_unit(u32 s, const u32* p) {
    if constexpr (WORDS % 4 == 0) {
#pragma unroll
        for (int i = 0; i < WORDS / 4; i++)
            asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(s + 16 * i), "l"(p + 4 * i) : "memory");
    } else if constexpr (WORDS % 2 == 0) {
#pragma unroll
        for (int i = 0; i < WORDS / 2; i++)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" ::"r"(s + 8 * i), "l"(p + 2 * i) : "memory");
    } else {
#pragma unroll
        for (int i = 0; i < WORDS; i++)
            asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s + 4 * i), "l"(p + i) : "memory");
    }
}

// cp_word copies the aligned 4-byte word that holds the value at p.
__device__ __forceinline__ void cp_word(u32 s, const void* p) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(s), "l"((u64)p & ~3ull) : "memory");
}

__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }

template <int N>
__device__ __forceinline__ void cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

// Chunk registers: one unit of RB rows and the raw scale and bias of the
// unit's group in each row.
template <int D, int BITS> struct Rows {
    Unit<BITS> q[QMV_RB];
    typename DTy<D>::raw s[QMV_RB], b[QMV_RB];
};

// qmv_body: see the file comment. Block geometry: blockDim.x = T threads
// (a multiple of 32, at most MAXT); grid: G blocks with
// ceil(ceil(N/RB)/G) * RB <= QMV_MAXROWS. NB vectors at once: x holds NB
// vectors of K values back to back, y NB vectors of N values; each lane
// turns its weight values into floats once and applies them to every
// vector, with a bias sum, dot products and a partial row sum per vector
// (NB = 1 is the single product).
template <int D, int BITS, int NB, int MAXT>
__device__ __forceinline__ void qmv_body(const u32* __restrict__ w, const typename DTy<D>::raw* __restrict__ scales,
                                         const typename DTy<D>::raw* __restrict__ biases,
                                         const typename DTy<D>::raw* __restrict__ x, typename DTy<D>::raw* __restrict__ y,
                                         int N, int K, int group, int narrow) {
    typedef Unit<BITS> U;
    typedef typename DTy<D>::raw R;
    constexpr int RB = QMV_RB;
    constexpr int VALS = U::VALS;
    constexpr int P = Chunk<BITS>::P;
    __shared__ float part[NB][MAXT / 32][QMV_MAXROWS];
    const int t = threadIdx.x;
    const int lane = t & 31;
    const int warp = t >> 5;
    const int T = blockDim.x;
    const int NW = T >> 5;
    const int chunks = (N + RB - 1) / RB;
    const int c0 = (int)((long long)blockIdx.x * chunks / gridDim.x);
    const int c1 = (int)((long long)(blockIdx.x + 1) * chunks / gridDim.x);
    const int r0 = c0 * RB;
    const int nrows = min(c1 * RB, N) - r0;
    if (nrows <= 0) return; // uniform across the block
    const int nch = (nrows + RB - 1) / RB;
    const u64 wpr = (u64)(K / 32) * BITS; // words per row
    const int groups = K / group;
    const int units = K / VALS;
    const int upg = group / VALS; // units per group: 1 .. 8, divides 32
    const int myrow = row_of<RB>(lane);
    const bool writer = (lane & (32 / RB - 1)) == 0;

    for (int ub = 0; ub < units; ub += T) {
        const int u = ub + t;
        const bool active = u < units;
        // Loads are unconditional (inactive lanes read unit 0, last-row
        // clamps repeat the last row) and selected afterwards, so they can
        // be issued before x is ready.
        const int uc = active ? u : 0;
        const int gc = uc * VALS / group;
        const u32* __restrict__ wp = w + (u64)r0 * wpr + (u64)uc * U::WORDS;
        const R* __restrict__ sp = scales + (u64)r0 * groups + gc;
        const R* __restrict__ bp = biases + (u64)r0 * groups + gc;
        const u32 wstride = (u32)wpr;
        const u32 gstride = (u32)groups;
#if QMV_STAGES > 0
        constexpr int WB = U::WORDS * 4;
        constexpr int STAGE = RB * 32 * (WB + 8); // bytes of one chunk of one warp
        extern __shared__ __align__(16) unsigned char ring[];
        unsigned char* const mine = ring + warp * QMV_STAGES * STAGE;
        const u32 mine_s = smem_u32(mine);
        // element index parity of the first row's scale (2-byte types)
        const u32 par0 = (u32)r0 * gstride + (u32)gc;
        auto issue = [&](int ch) {
            if (ch < nch) {
                const u32 base = mine_s + (ch % QMV_STAGES) * STAGE;
#pragma unroll
                for (int r = 0; r < RB; r++) {
                    const u32 i = (u32)min(ch * RB + r, nrows - 1);
                    cp_unit<U::WORDS>(base + (r * 32 + lane) * WB, wp + i * wstride);
                    cp_word(base + RB * 32 * WB + (r * 32 + lane) * 4, sp + i * gstride);
                    cp_word(base + RB * 32 * (WB + 4) + (r * 32 + lane) * 4, bp + i * gstride);
                }
            }
            cp_commit();
        };
        auto fetch = [&](Rows<D, BITS>& c, int ch) {
            const unsigned char* base = mine + (ch % QMV_STAGES) * STAGE;
#pragma unroll
            for (int r = 0; r < RB; r++) {
                const u32* q = reinterpret_cast<const u32*>(base + (r * 32 + lane) * WB);
                if constexpr (U::WORDS % 4 == 0) {
#pragma unroll
                    for (int k = 0; k < U::WORDS / 4; k++) {
                        const uint4 v = reinterpret_cast<const uint4*>(q)[k];
                        c.q[r].w[4 * k] = v.x; c.q[r].w[4 * k + 1] = v.y; c.q[r].w[4 * k + 2] = v.z; c.q[r].w[4 * k + 3] = v.w;
                    }
                } else if constexpr (U::WORDS % 2 == 0) {
#pragma unroll
                    for (int k = 0; k < U::WORDS / 2; k++) {
                        const uint2 v = reinterpret_cast<const uint2*>(q)[k];
                        c.q[r].w[2 * k] = v.x; c.q[r].w[2 * k + 1] = v.y;
                    }
                } else {
#pragma unroll
                    for (int k = 0; k < U::WORDS; k++) c.q[r].w[k] = q[k];
                }
                const u32 sw = *reinterpret_cast<const u32*>(base + RB * 32 * WB + (r * 32 + lane) * 4);
                const u32 bw = *reinterpret_cast<const u32*>(base + RB * 32 * (WB + 4) + (r * 32 + lane) * 4);
                if constexpr (sizeof(R) == 2) {
                    const u32 i = (u32)min(ch * RB + r, nrows - 1);
                    const u32 sh = ((par0 + i * gstride) & 1u) * 16u;
                    c.s[r] = (R)(sw >> sh);
                    c.b[r] = (R)(bw >> sh);
                } else {
                    c.s[r] = (R)sw;
                    c.b[r] = (R)bw;
                }
            }
        };
#pragma unroll
        for (int st = 0; st < QMV_STAGES - 1; st++) issue(st);
#else
        auto load = [&](Rows<D, BITS>& c, int ch) {
#pragma unroll
            for (int r = 0; r < RB; r++) {
                const u32 i = (u32)min(ch * RB + r, nrows - 1);
                c.q[r].load(wp + i * wstride);
                c.s[r] = __ldg(sp + i * gstride);
                c.b[r] = __ldg(bp + i * gstride);
            }
        };
        Rows<D, BITS> cur, nxt;
        load(cur, 0);
#endif
        float xv[NB][VALS];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            if (active) {
                load_widen<D, VALS>(x + (u64)nb * K + (u64)u * VALS, xv[nb]);
            } else {
#pragma unroll
                for (int j = 0; j < VALS; j++) xv[nb][j] = 0.0f;
            }
        }
        // the group's bias sum, continued lane by lane (p = u % upg; a
        // warp's units start at a multiple of 32, so p == lane % upg)
        const int p = lane % upg;
        float bs[NB];
#pragma unroll
        for (int nb = 0; nb < NB; nb++) {
            float run = 0.0f;
            for (int st = 0; st < upg; st++) {
                const float prev = __shfl_up_sync(0xffffffffu, run, 1);
                if (p == st) {
                    float sum = st == 0 ? 0.0f : prev;
#pragma unroll
                    for (int c = 0; c < VALS; c += P) {
                        float s = xv[nb][c];
#pragma unroll
                        for (int i = 1; i < P; i++) s = narrow ? DTy<D>::round(s + xv[nb][c + i]) : s + xv[nb][c + i];
                        sum = sum + s;
                    }
                    run = sum;
                }
            }
            bs[nb] = run;
        }
        const bool last = active && p == upg - 1;
        u32 mag[24];
        magic(mag, (u32)K >> 31);

        auto compute = [&](const Rows<D, BITS>& c, int ch) {
            float v[NB][RB];
#pragma unroll
            for (int r = 0; r < RB; r++) {
                float d[NB][4];
#pragma unroll
                for (int nb = 0; nb < NB; nb++) d[nb][0] = d[nb][1] = d[nb][2] = d[nb][3] = 0.0f;
#pragma unroll
                for (int j = 0; j < VALS; j++) {
                    const float q = c.q[r].val(j, mag);
#pragma unroll
                    for (int nb = 0; nb < NB; nb++) d[nb][j & 3] = __fmaf_rn(q, xv[nb][j], d[nb][j & 3]);
                }
#pragma unroll
                for (int nb = 0; nb < NB; nb++) {
                    const float dot = (d[nb][0] + d[nb][1]) + (d[nb][2] + d[nb][3]);
                    float a = active ? DTy<D>::load(c.s[r]) * dot : 0.0f;
                    if (last) a = a + DTy<D>::load(c.b[r]) * bs[nb];
                    v[nb][r] = a;
                }
            }
#pragma unroll
            for (int nb = 0; nb < NB; nb++) {
                const float sum = rows_reduce<RB>(v[nb], lane);
                const int slot = ch * RB + myrow;
                if (writer && slot < nrows) part[nb][warp][slot] = ub == 0 ? sum : part[nb][warp][slot] + sum;
            }
        };

#if QMV_STAGES > 0
        for (int ch = 0; ch < nch; ch++) {
            issue(ch + QMV_STAGES - 1);
            cp_wait<QMV_STAGES - 1>();
            Rows<D, BITS> c;
            fetch(c, ch);
            compute(c, ch);
        }
#else
        int ch = 0;
        for (; ch + 1 < nch; ch += 2) {
            load(nxt, ch + 1);
            compute(cur, ch);
            if (ch + 2 < nch) load(cur, ch + 2);
            compute(nxt, ch + 1);
        }
        if (ch < nch) compute(cur, ch);
#endif
    }
    __syncthreads();
    for (int nb = 0; nb < NB; nb++) {
        for (int i = t; i < nrows; i += T) {
            float v = 0.0f;
            for (int k = 0; k < NW; k++) v = v + part[nb][k][i];
            (y + (u64)nb * N)[r0 + i] = DTy<D>::store(v);
        }
    }
}

#define QMV(NAME, D, BITS)                                                                             \
    extern "C" __global__ void __launch_bounds__(QMV_MAXT, QMV_MINB)                                   \
        NAME(const u32* w, const DTy<D>::raw* scales, const DTy<D>::raw* biases, const DTy<D>::raw* x, \
             DTy<D>::raw* y, int N, int K, int group, int narrow) {                                    \
        qmv_body<D, BITS, 1, QMV_MAXT>(w, scales, biases, x + (u64)blockIdx.y * K, y + (u64)blockIdx.y * N, \
                                       N, K, group, narrow);                                                 \
    }
#define QMV_ALL_BITS(T, D)                                                                             \
    QMV(qmv_##T##_b2, D, 2)                                                                            \
    QMV(qmv_##T##_b3, D, 3)                                                                            \
    QMV(qmv_##T##_b4, D, 4)                                                                            \
    QMV(qmv_##T##_b5, D, 5)                                                                            \
    QMV(qmv_##T##_b6, D, 6)                                                                            \
    QMV(qmv_##T##_b8, D, 8)
#if !QMV_NB_KERNELS
QMV_ALL_BITS(f16, 1)
QMV_ALL_BITS(bf16, 2)
QMV_ALL_BITS(f32, 3)

// qmv_hold keeps the stream busy for ns nanoseconds of the device's global
// timer (one thread spinning), so that the host can queue the launches of
// a timed sample before the device reaches them (see throughput.go).
extern "C" __global__ void qmv_hold(u64 ns) {
    u64 t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}
#else
// qmv_<T>_b<BITS>_x<NB>: NB vectors per block row (qmv_body with NB), a
// grid of gridDim.y block rows for a batch of NB * gridDim.y vectors.
#define QMVNB(NAME, D, BITS, NB)                                                                       \
    extern "C" __global__ void __launch_bounds__(QMV_NB_MAXT, 1)                                       \
        NAME(const u32* w, const DTy<D>::raw* scales, const DTy<D>::raw* biases, const DTy<D>::raw* x, \
             DTy<D>::raw* y, int N, int K, int group, int narrow) {                                    \
        qmv_body<D, BITS, NB, QMV_NB_MAXT>(w, scales, biases, x + (u64)blockIdx.y * NB * K,            \
                                           y + (u64)blockIdx.y * NB * N, N, K, group, narrow);         \
    }
#define QMVNB_ALL_BITS(T, D, NB)                                                                       \
    QMVNB(qmv_##T##_b2_x##NB, D, 2, NB)                                                                \
    QMVNB(qmv_##T##_b3_x##NB, D, 3, NB)                                                                \
    QMVNB(qmv_##T##_b4_x##NB, D, 4, NB)                                                                \
    QMVNB(qmv_##T##_b5_x##NB, D, 5, NB)                                                                \
    QMVNB(qmv_##T##_b6_x##NB, D, 6, NB)                                                                \
    QMVNB(qmv_##T##_b8_x##NB, D, 8, NB)
QMVNB_ALL_BITS(f16, 1, 2)
QMVNB_ALL_BITS(bf16, 2, 2)
QMVNB_ALL_BITS(f32, 3, 2)
QMVNB_ALL_BITS(f16, 1, 4)
QMVNB_ALL_BITS(bf16, 2, 4)
QMVNB_ALL_BITS(f32, 3, 4)
#endif
