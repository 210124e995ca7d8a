/*
 * gemm-i8.cu — the batched-decode products (9-64 tokens) on int8 tensor
 * cores: q4_K, q5_K, q6_K and q8_0 weights read in place, times q8_1
 * activations (k_quantize_q8_1: int8 values and a (d, d * sum) pair per
 * 32, the matrix-vector kernels' layout).
 *
 * gemm-q.cu turns every weight into an exact f16 before its f16 mma: 4-6
 * lane instructions per weight, so at 16 tokens it ran at a fifth of the
 * bandwidth whatever the type's bytes (docs/PERF.md). Here weights stay
 * integers: a mask takes 4 nibbles into 4 int8 lanes at once (q5_K adds
 * its fifth bit, q6_K its two and the offset of 32) and mma.sync m16n8k32
 * multiplies them with the activations. q6_K's scales cover 16 values, so
 * it runs the k16 mma. Two forms of the scaling:
 *   - group 32 (q8_0, and 64-token tiles): each block of activations has
 *     its own d_x, so every sub-block's int32 sums go to f32 at once:
 *     d sc d_x sum(q q_x) - dmin m (d_x sum(q_x));
 *   - group 256 (the K-quants up to 32 tokens): the activations are
 *     quantized with one d_x per 256 values (k_quantize_q8_1 group 256,
 *     the CPU's Q8_K rule), so sc sum(q q_x) adds up in int32 over the
 *     chunk, the mins by a second mma (chunk_k), and the chunk ends in
 *     one f32 step. The float work per mma was what bounded the kernel
 *     (docs/decisions/cuda-quantized-gemm.md, session 10).
 *
 * The k order: an mma sums over its k slots, so any bijection between a
 * sub-block's values and the slots works when the activations follow it.
 * Lane tig takes values [8 tig, 8 tig + 8) of each 32-value sub-block
 * (slots 4 tig.. and 16 + 4 tig..): 8 contiguous bytes of a q8_0 block,
 * of q4_K's nibbles, and of the activations in their natural order (one
 * 8-byte load). In q6_K's k16 form, values [4 tig, 4 tig + 4).
 *
 * Block: 8 warps x 16 weight rows, BM = 8 NJ tokens (16, 32 or 64); each
 * 256-value chunk of the rows travels raw by cp.async, with the chunk's
 * activations and their scales, into a 3-stage shared-memory ring (the
 * copy starts at the 16-byte unit holding the chunk's first byte, as in
 * gemm-q.cu, so q6_K's and q8_0's 2-byte aligned blocks need no
 * repacking). Too few tiles to fill the GPU split K over blockIdx.z; the
 * tile's last block to finish adds the split planes in split order
 * (gemm_split_finish, gemm.cuh: deterministic).
 */
#include <type_traits>

#include "common.cuh"
#include "gemm-q.cuh"
#include "gemm.cuh"
#include "mma.cuh"

#define I_WARPS 8
#define I_THREADS (32 * I_WARPS)
#define I_BN (16 * I_WARPS) /* weight rows per block */
#define I_STAGES 3
#define I_MAX_SPLITS 8
static_assert(I_MAX_SPLITS <= GSPLIT_MAX, "gemm_split_finish sums up to GSPLIT_MAX planes");
/* Shared bytes per token of a stage: its 256 int8 values plus 32, so the
 * 4 tokens of a half-warp's 8-byte loads fall on all 32 banks; its 8
 * (d, d * sum) pairs plus 16, so lanes tig (tokens 2 tig) are 40 words
 * apart, on 4 banks. */
#define I_XP 288
#define I_SP 80

template <int T> struct ishape {
    /* Row pitch in 16-byte units. A half-warp's 8-byte loads read 4 rows
     * at 8 consecutive words each: units % 8 == 2 puts those rows 8 words
     * apart modulo 32 banks. q6_K's lanes read single words of 8 rows,
     * which an odd count spreads. */
    static constexpr int U = qshape<T>::UNITS;
    static constexpr int PU = T == MINFER_TYPE_Q6_K ? (U | 1) : U + (10 - U % 8) % 8;
    static constexpr int PITCH = 16 * PU;
};

template <int T, int NJ> struct ismem {
    static constexpr int BM = 8 * NJ;
    static constexpr int A = I_BN * ishape<T>::PITCH;
    static constexpr int X = BM * I_XP;
    static constexpr int STAGE = A + X + BM * I_SP;
    static constexpr int BYTES = STAGE * I_STAGES;
    /* two blocks per SM where 9.0's 227 KiB of shared memory holds them:
     * registers for that many (128), else for one (up to 255). A 2-stage
     * ring at 3 blocks per SM (80 registers) ran the 16-token tile 2-10%
     * slower (docs/PERF.md, session 11). */
    static constexpr int MIN_BLOCKS = 2 * BYTES <= 227 * 1024 ? 2 : 1;
};

/* 8 bytes of shared memory at a 2-byte aligned address. */
__device__ __forceinline__ uint2 ld8(const uint8_t *p)
{
    if (((uintptr_t)p & 7) == 0)
        return *(const uint2 *)p;
    unsigned w[2];
    ldw(w, p);
    return make_uint2(w[0], w[1]);
}
__device__ __forceinline__ float ld_h(const uint8_t *p)
{
    return h2f(*(const uint16_t *)p);
}

/* What every type's chunk step reads: the stage's activations at token
 * gid (x) and its scale pairs at token 2 tig (s), n-tile j 8 tokens on. */
struct iview {
    const uint8_t *x;
    const float2 *s;
};
__device__ __forceinline__ uint2 xfrag8(const iview &v, int j, int k)
{
    return *(const uint2 *)(v.x + j * 8 * I_XP + k);
}
/* the (d, d * sum) pairs of 32-block b for tokens 2 tig and 2 tig + 1 */
__device__ __forceinline__ void xscale(const iview &v, int j, int b, float2 &s0, float2 &s1)
{
    s0 = v.s[j * 8 * (I_SP / 8) + b];
    s1 = v.s[j * 8 * (I_SP / 8) + I_SP / 8 + b];
}

/* acc[j] += the int32 sums c of n-tile j scaled: rows gid (d0, m0) and
 * gid + 8 (d1, m1), tokens 2 tig (s0) and 2 tig + 1 (s1); MIN: the type
 * has mins (q4_K, q5_K), subtracted as m s.y. Written as fused
 * multiply-adds: the expression form compiled to a multiply, a
 * multiply-add and an add per output, and to a multiply by a zero min for
 * the types without. */
template <bool MIN>
__device__ __forceinline__ void iscale(float (&acc)[4], const int (&c)[4], float d0, float m0,
                                       float d1, float m1, float2 s0, float2 s1)
{
    if (MIN) {
        acc[0] = fmaf(-m0, s0.y, acc[0]);
        acc[1] = fmaf(-m0, s1.y, acc[1]);
        acc[2] = fmaf(-m1, s0.y, acc[2]);
        acc[3] = fmaf(-m1, s1.y, acc[3]);
    }
    acc[0] = fmaf((float)c[0], d0 * s0.x, acc[0]);
    acc[1] = fmaf((float)c[1], d0 * s1.x, acc[1]);
    acc[2] = fmaf((float)c[2], d1 * s0.x, acc[2]);
    acc[3] = fmaf((float)c[3], d1 * s1.x, acc[3]);
}

/* One 32-value sub-block sb of the lane's two rows (A fragment a, row
 * scales d, mins m) against every n-tile's activations. */
template <int NJ, bool MIN>
__device__ __forceinline__ void k32_step(const iview &v, const unsigned (&a)[4], int sb, int tig,
                                         float d0, float m0, float d1, float m1,
                                         float (&acc)[NJ][4])
{
#pragma unroll
    for (int j = 0; j < NJ; j++) {
        uint2 b = xfrag8(v, j, 32 * sb + 8 * tig);
        int c[4];
        mma_s8_k32(c, a, b.x, b.y);
        float2 s0, s1;
        xscale(v, j, sb, s0, s1);
        iscale<MIN>(acc[j], c, d0, m0, d1, m1, s0, s1);
    }
}

template <int T> struct i8w;

/* q4_K and q5_K: sub-block 2h + e is nibble e of qs[32h..32h+32) (q5_K:
 * plus bit 2h + e of qh[l] for value l, as its fifth bit). Lane tig
 * works out d sc and dmin m of sub-blocks 2 tig and 2 tig + 1 of both of
 * its rows; the others' come by shuffle. */
template <bool Q5> struct i8kq {
    /* Calls f(a, sb, e, src) for each sub-block sb = 2h + e of the chunk:
     * A fragment a of the lane's two rows; src is the lane of this quad
     * that read sb's scales (lane tig reads sub-blocks 2 tig, 2 tig + 1). */
    template <typename F>
    static __device__ __forceinline__ void steps(const uint8_t *p0, const uint8_t *p1, int lane,
                                                 F &&f)
    {
        const int tig = lane & 3;
        uint2 qh[2];
        if (Q5) {
            qh[0] = ld8(p0 + 16 + 8 * tig);
            qh[1] = ld8(p1 + 16 + 8 * tig);
        }
        const int qo = (Q5 ? 48 : 16) + 8 * tig;
#pragma unroll
        for (int h = 0; h < 4; h++) {
            uint2 w0 = ld8(p0 + qo + 32 * h), w1 = ld8(p1 + qo + 32 * h);
            const int src = (lane & ~3) | h;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                const int sb = 2 * h + e;
                unsigned a[4] = {(w0.x >> 4 * e) & 0x0F0F0F0Fu, (w1.x >> 4 * e) & 0x0F0F0F0Fu,
                                 (w0.y >> 4 * e) & 0x0F0F0F0Fu, (w1.y >> 4 * e) & 0x0F0F0F0Fu};
                if (Q5) {
                    a[0] |= ((qh[0].x >> sb) & 0x01010101u) << 4;
                    a[1] |= ((qh[1].x >> sb) & 0x01010101u) << 4;
                    a[2] |= ((qh[0].y >> sb) & 0x01010101u) << 4;
                    a[3] |= ((qh[1].y >> sb) & 0x01010101u) << 4;
                }
                f(a, sb, e, src);
            }
        }
    }

    /* The group-32 form: d sc and dmin m as floats, each sub-block's sums
     * scaled at once (k32_step). */
    template <int NJ>
    static __device__ __forceinline__ void chunk(const uint8_t *p0, const uint8_t *p1, int lane,
                                                 const iview &v, float (&acc)[NJ][4])
    {
        const int tig = lane & 3;
        const uint8_t *p[2] = {p0, p1};
        float ds[2][2], dm[2][2];
#pragma unroll
        for (int r = 0; r < 2; r++) {
            float d = ld_h(p[r]), dmin = ld_h(p[r] + 2);
#pragma unroll
            for (int e = 0; e < 2; e++) {
                int sc, m;
                kscale(p[r] + 4, 2 * tig + e, sc, m);
                ds[r][e] = d * (float)sc;
                dm[r][e] = dmin * (float)m;
            }
        }
        steps(p0, p1, lane, [&](const unsigned (&a)[4], int sb, int e, int src) {
            float d0 = __shfl_sync(0xffffffffu, ds[0][e], src);
            float m0 = __shfl_sync(0xffffffffu, dm[0][e], src);
            float d1 = __shfl_sync(0xffffffffu, ds[1][e], src);
            float m1 = __shfl_sync(0xffffffffu, dm[1][e], src);
            k32_step<NJ, true>(v, a, sb, tig, d0, m0, d1, m1, acc);
        });
    }

    /* Sub-block scales and mins of the lane's two rows for chunk_k, all
     * eight of each row unpacked as bytes of four words (kscale's
     * unpacking, a word at a time; sc[0] scales 0-3, sc[1] 4-7, mn the
     * mins), each sub-block's then taken with one byte permute. The
     * per-lane unpacking of two sub-blocks and the shuffles that spread
     * them (kscale_pairs) cost 109 and 48 instructions per chunk, a
     * quarter of the 16-token loop (Nsight Compute, session 11); at 32
     * tokens the six more live registers spill, so that tile keeps the
     * pairs. */
    struct kscale_words {
        unsigned sc[2][2], mn[2][2]; /* [row][word] */
        __device__ __forceinline__ kscale_words(const uint8_t *p0, const uint8_t *p1, int)
        {
            const uint8_t *p[2] = {p0, p1};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                unsigned w[3];
                ldw(w, p[r] + 4);
                sc[r][0] = w[0] & 0x3F3F3F3Fu;
                mn[r][0] = w[1] & 0x3F3F3F3Fu;
                sc[r][1] = (w[2] & 0x0F0F0F0Fu) | ((w[0] >> 2) & 0x30303030u);
                mn[r][1] = ((w[2] >> 4) & 0x0F0F0F0Fu) | ((w[1] >> 2) & 0x30303030u);
            }
        }
        /* row r's scale of sub-block sb, and its min in all four bytes */
        __device__ __forceinline__ int scale(int r, int sb, int, int) const
        {
            return (int)__byte_perm(sc[r][sb >> 2], 0u, 0x4440u | (sb & 3));
        }
        __device__ __forceinline__ unsigned min4(int r, int sb, int, int) const
        {
            return __byte_perm(mn[r][sb >> 2], 0u, 0x1111u * (sb & 3));
        }
    };
    /* The same from lane tig's sub-blocks 2 tig and 2 tig + 1 only, as
     * the bytes (sc e0, sc e1, m e0, m e1) of one word per row, passed
     * around the quad by shuffle (src: the lane holding sub-block sb). */
    struct kscale_pairs {
        unsigned pk[2];
        __device__ __forceinline__ kscale_pairs(const uint8_t *p0, const uint8_t *p1, int tig)
        {
            const uint8_t *p[2] = {p0, p1};
#pragma unroll
            for (int r = 0; r < 2; r++) {
                int s0, m0, s1, m1;
                kscale(p[r] + 4, 2 * tig, s0, m0);
                kscale(p[r] + 4, 2 * tig + 1, s1, m1);
                pk[r] = (unsigned)s0 | (unsigned)s1 << 8 | (unsigned)m0 << 16 |
                        (unsigned)m1 << 24;
            }
        }
        __device__ __forceinline__ int scale(int r, int, int e, int src) const
        {
            return (int)((__shfl_sync(0xffffffffu, pk[r], src) >> 8 * e) & 0xFFu);
        }
        __device__ __forceinline__ unsigned min4(int r, int, int e, int src) const
        {
            return 0x01010101u * ((__shfl_sync(0xffffffffu, pk[r], src) >> (16 + 8 * e)) & 0xFFu);
        }
    };

    /* The group-256 form (the chunk's activations share one scale, the
     * pairs' d): per sub-block the int32 sums times the integer scale sc
     * add up in int32, and the mins come from a second mma whose A
     * operand is the sub-block's m in all 32 slots (sum over the
     * sub-block of m x = m times the token's sum there), accumulated
     * across the chunk by the mma itself; one float step per chunk:
     * d_x (d is - dmin im). 8 sub-blocks of 63 * 32 * 31 * 128 stay far
     * below 2^31. */
    template <int NJ>
    static __device__ __forceinline__ void chunk_k(const uint8_t *p0, const uint8_t *p1, int lane,
                                                   const iview &v, float (&acc)[NJ][4])
    {
        const int tig = lane & 3;
        using KS = typename std::conditional<NJ <= 2, kscale_words, kscale_pairs>::type;
        const KS ks(p0, p1, tig);
        int is[NJ][4] = {}, im[NJ][4] = {};
        steps(p0, p1, lane, [&](const unsigned (&a)[4], int sb, int e, int src) {
            const int s0 = ks.scale(0, sb, e, src), s1 = ks.scale(1, sb, e, src);
            const unsigned n0 = ks.min4(0, sb, e, src), n1 = ks.min4(1, sb, e, src);
            const unsigned am[4] = {n0, n1, n0, n1};
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                uint2 b = xfrag8(v, j, 32 * sb + 8 * tig);
                int c[4];
                mma_s8_k32(c, a, b.x, b.y);
                is[j][0] += s0 * c[0];
                is[j][1] += s0 * c[1];
                is[j][2] += s1 * c[2];
                is[j][3] += s1 * c[3];
                mma_s8_k32_acc(im[j], am, b.x, b.y);
            }
        });
        const float d0 = ld_h(p0), dm0 = ld_h(p0 + 2), d1 = ld_h(p1), dm1 = ld_h(p1 + 2);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float2 s0, s1;
            xscale(v, j, 0, s0, s1);
            acc[j][0] = fmaf(s0.x, fmaf(d0, (float)is[j][0], -dm0 * (float)im[j][0]), acc[j][0]);
            acc[j][1] = fmaf(s1.x, fmaf(d0, (float)is[j][1], -dm0 * (float)im[j][1]), acc[j][1]);
            acc[j][2] = fmaf(s0.x, fmaf(d1, (float)is[j][2], -dm1 * (float)im[j][2]), acc[j][2]);
            acc[j][3] = fmaf(s1.x, fmaf(d1, (float)is[j][3], -dm1 * (float)im[j][3]), acc[j][3]);
        }
    }
};

template <> struct i8w<MINFER_TYPE_Q4_K> : i8kq<false> {};
template <> struct i8w<MINFER_TYPE_Q5_K> : i8kq<true> {};

/* q8_0: 8 blocks of 34 bytes (d, 32 int8) per chunk, one per k32 step. */
template <> struct i8w<MINFER_TYPE_Q8_0> {
    template <int NJ>
    static __device__ __forceinline__ void chunk(const uint8_t *p0, const uint8_t *p1, int lane,
                                                 const iview &v, float (&acc)[NJ][4])
    {
        const int tig = lane & 3;
#pragma unroll
        for (int b = 0; b < 8; b++) {
            uint2 w0 = ld8(p0 + 34 * b + 2 + 8 * tig), w1 = ld8(p1 + 34 * b + 2 + 8 * tig);
            unsigned a[4] = {w0.x, w1.x, w0.y, w1.y};
            float d0 = ld_h(p0 + 34 * b), d1 = ld_h(p1 + 34 * b);
            k32_step<NJ, false>(v, a, b, tig, d0, 0.0f, d1, 0.0f, acc);
        }
    }
};

/* q6_K: ql[128], qh[64], 16 int8 scales, d. Value 128 n + 32 q + l (l <
 * 32) is nibble q / 2 of ql[64 n + 32 (q % 2) + l] with bits 2q, 2q+1 of
 * qh[32 n + l] above it, minus 32, scaled by scales[8 n + 2 q + l / 16].
 * One k16 step per 16 values; lane tig takes l = 16 i + 4 tig .. +3. */
template <> struct i8w<MINFER_TYPE_Q6_K> {
    /* int8(q - 32) of 4 6-bit values: flipping bit 5 gives q - 32 for q >=
     * 32 and q + 32 (bit 5 set) below, where adding 0xC0 makes it q - 32 */
    static __device__ __forceinline__ unsigned off32(unsigned q)
    {
        unsigned t = q ^ 0x20202020u;
        return t + (t & 0x20202020u) * 6u;
    }
    /* Calls f(a, k, si) for each k16 step of the lane's two rows: A
     * fragment a, the step's first value k, its scale index si. */
    template <typename F>
    static __device__ __forceinline__ void steps(const uint8_t *p0, const uint8_t *p1, int tig,
                                                 F &&f)
    {
#pragma unroll 1 /* unrolled, ptxas spilled a kilobyte at 64 tokens */
        for (int n = 0; n < 2; n++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                unsigned h0[1], h1[1];
                ldw(h0, p0 + 128 + 32 * n + 16 * i + 4 * tig);
                ldw(h1, p1 + 128 + 32 * n + 16 * i + 4 * tig);
#pragma unroll
                for (int qo = 0; qo < 2; qo++) {
                    unsigned l0[1], l1[1];
                    ldw(l0, p0 + 64 * n + 32 * qo + 16 * i + 4 * tig);
                    ldw(l1, p1 + 64 * n + 32 * qo + 16 * i + 4 * tig);
#pragma unroll
                    for (int hi = 0; hi < 2; hi++) {
                        const int q = qo + 2 * hi;
                        const unsigned a[2] = {
                            off32(((l0[0] >> 4 * hi) & 0x0F0F0F0Fu) |
                                  (((h0[0] >> 2 * q) & 0x03030303u) << 4)),
                            off32(((l1[0] >> 4 * hi) & 0x0F0F0F0Fu) |
                                  (((h1[0] >> 2 * q) & 0x03030303u) << 4))};
                        f(a, 128 * n + 32 * q + 16 * i, 8 * n + 2 * q + i);
                    }
                }
            }
    }
    template <int NJ>
    static __device__ __forceinline__ void chunk(const uint8_t *p0, const uint8_t *p1, int lane,
                                                 const iview &v, float (&acc)[NJ][4])
    {
        const int tig = lane & 3;
        const float d0 = ld_h(p0 + 208), d1 = ld_h(p1 + 208);
        steps(p0, p1, tig, [&](const unsigned (&a)[2], int k, int si) {
            float s0d = d0 * (float)(int8_t)p0[192 + si];
            float s1d = d1 * (float)(int8_t)p1[192 + si];
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                unsigned b = *(const unsigned *)(v.x + j * 8 * I_XP + k + 4 * tig);
                int c[4];
                mma_s8_k16(c, a, b);
                float2 s0, s1;
                xscale(v, j, k / 32, s0, s1);
                iscale<false>(acc[j], c, s0d, 0.0f, s1d, 0.0f, s0, s1);
            }
        });
    }
    /* The group-256 form (i8kq's chunk_k): the int8 scales times each
     * step's int32 sums add up in int32 (16 steps of 127 * 16 * 32 * 128
     * stay below 2^31), one float step per chunk. */
    template <int NJ>
    static __device__ __forceinline__ void chunk_k(const uint8_t *p0, const uint8_t *p1, int lane,
                                                   const iview &v, float (&acc)[NJ][4])
    {
        const int tig = lane & 3;
        int is[NJ][4] = {};
        steps(p0, p1, tig, [&](const unsigned (&a)[2], int k, int si) {
            const int s0 = (int8_t)p0[192 + si], s1 = (int8_t)p1[192 + si];
#pragma unroll
            for (int j = 0; j < NJ; j++) {
                unsigned b = *(const unsigned *)(v.x + j * 8 * I_XP + k + 4 * tig);
                int c[4];
                mma_s8_k16(c, a, b);
                is[j][0] += s0 * c[0];
                is[j][1] += s0 * c[1];
                is[j][2] += s1 * c[2];
                is[j][3] += s1 * c[3];
            }
        });
        const float d0 = ld_h(p0 + 208), d1 = ld_h(p1 + 208);
#pragma unroll
        for (int j = 0; j < NJ; j++) {
            float2 s0, s1;
            xscale(v, j, 0, s0, s1);
            acc[j][0] = fmaf(d0 * s0.x, (float)is[j][0], acc[j][0]);
            acc[j][1] = fmaf(d0 * s1.x, (float)is[j][1], acc[j][1]);
            acc[j][2] = fmaf(d1 * s0.x, (float)is[j][2], acc[j][2]);
            acc[j][3] = fmaf(d1 * s1.x, (float)is[j][3], acc[j][3]);
        }
    }
};

/* cp.async of chunk c's activations of tokens [m0, m0 + BM) into Xs
 * (rows I_XP apart) and their scale pairs into Ss (I_SP apart): per token
 * 16 units of values, then 4 of pairs; tokens past M are zeros. */
template <int BM>
__device__ __forceinline__ void i8_copy_x(unsigned char *Xs, unsigned char *Ss,
                                          const uint8_t *__restrict__ xq, int K, int64_t c,
                                          int m0, int M, int tid)
{
    const int64_t xrow = (int64_t)K / 32 * 40; /* bytes of one token's q8_1 row */
    for (int i = tid; i < BM * 20; i += I_THREADS) {
        int tok = i / 20, u = i % 20, m = m0 + tok;
        const uint8_t *row = xq + (int64_t)(m < M ? m : 0) * xrow;
        if (u < 16)
            cp16(Xs + tok * I_XP + 16 * u, row + c * Q_CHUNK + 16 * u, m < M);
        else
            cp16(Ss + tok * I_SP + 16 * (u - 16), row + K + c * 64 + 16 * (u - 16), m < M);
    }
}

/* Weight row n0 + r; rows past N read row N - 1 (valid memory; never
 * stored). */
__device__ __forceinline__ const uint8_t *i8_row(const uint8_t *W, int64_t w_nb1, int n0, int r,
                                                 int N)
{
    int n = n0 + r;
    return W + (int64_t)(n < N ? n : N - 1) * w_nb1;
}

/* The weight copy of the ring for types whose 256-value chunk is whole
 * 16-byte units (q4_K 144 bytes, q5_K 176): chunk c of a row starts at
 * the same offset within its unit for every c, so each thread's units
 * (q_copy_chunk's, same shared layout and zero fill) are worked out once
 * per block: the unit's source offset from the tile's first unit and its
 * shared offset, with bit 31 set where it holds chunk bytes. A chunk
 * then costs an add and a cp.async per unit; q_copy_chunk redid the row
 * arithmetic every chunk, 123 instructions per warp (Nsight Compute,
 * session 11). At 16 tokens only: the 10-12 registers it holds push the
 * larger tiles past 128. */
template <int T> struct i8_wcopy {
    static constexpr int UNITS = qshape<T>::UNITS, BYTES = qgemm<T>::BYTES;
    static constexpr int TOTAL = I_BN * UNITS, PER = (TOTAL + I_THREADS - 1) / I_THREADS;
    const uint8_t *base;
    unsigned src[PER], dst[PER];
    __device__ __forceinline__ i8_wcopy(const uint8_t *W, int64_t w_nb1, int n0, int N, int tid)
    {
        base = (const uint8_t *)((uintptr_t)(W + (int64_t)n0 * w_nb1) & ~(uintptr_t)15);
#pragma unroll
        for (int k = 0; k < PER; k++) {
            const int i = tid + k * I_THREADS, r = i / UNITS, u = i % UNITS;
            const uint8_t *row = i8_row(W, w_nb1, n0, i < TOTAL ? r : 0, N);
            const uint8_t *g = (const uint8_t *)((uintptr_t)row & ~(uintptr_t)15) + 16 * u;
            src[k] = (unsigned)(g - base);
            dst[k] = (unsigned)(r * ishape<T>::PITCH + 16 * u) | (g < row + BYTES ? 1u << 31 : 0u);
        }
    }
    __device__ __forceinline__ void copy(unsigned char *As, int c, int tid) const
    {
        const uint8_t *b = base + (size_t)c * BYTES;
#pragma unroll
        for (int k = 0; k < PER; k++)
            if (TOTAL % I_THREADS == 0 || tid + k * I_THREADS < TOTAL)
                cp16(As + (dst[k] & 0x7FFFFFFFu), b + src[k], dst[k] >> 31);
    }
};
template <bool WC, int T>
__device__ __forceinline__ typename std::conditional<WC, i8_wcopy<T>, int>::type
i8_wcopy_make(const uint8_t *W, int64_t w_nb1, int n0, int N, int tid)
{
    if constexpr (WC)
        return i8_wcopy<T>(W, w_nb1, n0, N, tid);
    else
        return 0;
}
template <int T, int NJ> __host__ __device__ constexpr bool i_wcopy_used()
{
    return (T == MINFER_TYPE_Q4_K || T == MINFER_TYPE_Q5_K) && NJ == 2;
}

/* Which activations a (type, n-tiles) kernel reads: the K-quants take
 * group-256 blocks (chunk_k); q8_0's scales are per 32 anyway. The
 * 64-token tile holds one block per SM in any case (its 3 stages take 129
 * KiB of shared memory), so chunk_k's two more int32 accumulators per
 * output cost it no occupancy; the wrong-result ceiling of session 10 had
 * the integer form 1.37x faster there (ffn up 81.2 against 111.1 us). */
__host__ __device__ constexpr bool i_group256(int T, int NJ)
{
    return T != MINFER_TYPE_Q8_0 && NJ <= 8;
}

/* One product of a launch: weight rows W (w_nb1 apart, N of them) whose
 * row tiles are blockIdx.y t0.. of the grid; out and out_nb1 the plane
 * (dst, or split-K planes split_nb bytes apart); ep applied at the
 * store, fs by the tile's last split. A launch runs up to I_SEGS
 * products of the same activations (a batched decode's Q, K and V:
 * k_gemm_multi), so the small K and V products ride in Q's waves. */
#define I_SEGS 3
struct iseg {
    const uint8_t *W;
    int64_t w_nb1;
    int N, t0;
    float *out;
    int64_t out_nb1, split_nb;
    gepi ep;
    gsplit fs;
};
struct igroup {
    int count;
    iseg s[I_SEGS];
};

/* GRP: the launch may hold several products (g.count > 1); the
 * one-product form keeps the registers it had before groups (picking a
 * product's fields cost up to 30 registers per thread). */
template <int T, int NJ, bool GRP>
__global__ void __launch_bounds__(I_THREADS, ismem<T, NJ>::MIN_BLOCKS)
    gemm_i8_kernel(const uint8_t *__restrict__ xq, int K, int M, int splits, igroup g, int late)
{
    k_dep_enter(late); /* late: the ring reads only weights and xq (gemm_i8's caller) */
    using S = ismem<T, NJ>;
    constexpr int BM = S::BM, PITCH = ishape<T>::PITCH;
    constexpr int BYTES = qgemm<T>::BYTES;
    extern __shared__ __align__(16) unsigned char smem[];

    int si = 0; /* this block's product; its fields are read where used (SEG) */
    if constexpr (GRP) {
#pragma unroll
        for (int q = 1; q < I_SEGS; q++)
            si = q < g.count && (int)blockIdx.y >= g.s[q].t0 ? q : si;
    }
#define SEG(f) (si == 0 ? g.s[0].f : si == 1 ? g.s[1].f : g.s[2].f)
    const uint8_t *__restrict__ W = SEG(W);
    const int64_t w_nb1 = SEG(w_nb1);
    const int N = SEG(N);
    const int m0 = blockIdx.x * BM, n0 = ((int)blockIdx.y - SEG(t0)) * I_BN, z = blockIdx.z;
    int c0, nc;
    split_chunks(K, z, splits, &c0, &nc);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;

    auto wrow = [&](int r) { return i8_row(W, w_nb1, n0, r, N); };
    constexpr bool WC = i_wcopy_used<T, NJ>();
    using WCopy = typename std::conditional<WC, i8_wcopy<T>, int>::type;
    const WCopy wc = i8_wcopy_make<WC, T>(W, w_nb1, n0, N, tid);
    auto load = [&](int stage, int c) {
        unsigned char *As = smem + stage * S::STAGE, *Xs = As + S::A, *Ss = Xs + S::X;
        if constexpr (WC)
            wc.copy(As, c, tid);
        else
            q_copy_chunk<T, I_BN, I_THREADS, PITCH>(As, wrow, c, tid);
        i8_copy_x<BM>(Xs, Ss, xq, K, c, m0, M, tid);
    };

    float acc[NJ][4] = {};

    const int r0 = warp * 16 + gid;
    const uint8_t *g0 = wrow(r0), *g1 = wrow(r0 + 8);
    cp_ring<I_STAGES>(c0, nc, load, [&](int stage, int i) {
        const unsigned char *As = smem + stage * S::STAGE;
        const iview v = {As + S::A + gid * I_XP,
                         (const float2 *)(As + S::A + S::X + 2 * tig * I_SP)};
        size_t cb = (size_t)(c0 + i) * BYTES;
        const uint8_t *p0 = As + r0 * PITCH + (((uintptr_t)g0 + cb) & 15);
        const uint8_t *p1 = As + (r0 + 8) * PITCH + (((uintptr_t)g1 + cb) & 15);
        if constexpr (i_group256(T, NJ))
            i8w<T>::template chunk_k<NJ>(p0, p1, lane, v, acc);
        else
            i8w<T>::template chunk<NJ>(p0, p1, lane, v, acc);
    });
    k_dep_late_wait(late); /* before the stores, the addend, the split planes */
    float *const planes = SEG(out);
    const int64_t split_nb = SEG(split_nb);
    gemm_store_frag<NJ>(SEG(ep), &acc[0][0], n0 + r0, m0, tig, N, M,
                        (float *)((char *)planes + z * split_nb), SEG(out_nb1), 0);
    if (SEG(fs.count))
        gemm_split_finish<I_THREADS, I_BN, BM>(SEG(fs), planes, split_nb / 4, splits, N, M, n0, m0,
                                               blockIdx.y * gridDim.x + blockIdx.x);
#undef SEG
}

/* ---- dispatch ---- */

static int g_bm, g_splits; /* forced token tile (16, 32, 64) and split count; 0 = automatic */

void gemm_i8_tune(int bm, int splits)
{
    g_bm = bm == 16 || bm == 32 || bm == 64 ? bm : 0;
    g_splits = splits >= 1 && splits <= I_MAX_SPLITS ? splits : 0;
}

static int i_nj(int64_t M)
{
    int bm = g_bm ? g_bm : M <= 16 ? 16 : M <= 32 ? 32 : 64;
    return bm / 8;
}

int gemm_i8_group(uint32_t type, int64_t M)
{
    return i_group256((int)type, i_nj(M)) ? 256 : 32;
}

/* Splits of K (in whole chunks) until there are 3 blocks per SM, at most
 * 8: the `minfer-cuda-bench --gemmq` sweep (docs/PERF.md, session 9) had
 * ffn up's 148 tiles 10-12% faster with 4 splits than with 2 at 16 and
 * 32 tokens (2 per SM ran 1.1 waves). */
static int i_splits(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    int64_t bm = 8 * i_nj(M), tiles = (N + I_BN - 1) / I_BN * ((M + bm - 1) / bm);
    return gemm_split_count(K / Q_CHUNK, tiles, 3LL * k->sm_count, I_MAX_SPLITS, g_splits);
}

size_t gemm_i8_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    return gemm_planes_bytes(i_splits(k, K, N, M), N, M);
}

template <int T, int NJ, bool GRP> static int i_optin_one(struct kctx *k)
{
    return k_smem_optin(k, (const void *)gemm_i8_kernel<T, NJ, GRP>, ismem<T, NJ>::BYTES,
                        "gemm_i8");
}
/* groups run the 16-token tile only (gemm_i8_multi_ok; at 32 tokens the
 * grouped q4_K kernel spilled) */
template <int T> static int i_optin(struct kctx *k)
{
    return i_optin_one<T, 2, false>(k) || i_optin_one<T, 4, false>(k) ||
           i_optin_one<T, 8, false>(k) || i_optin_one<T, 2, true>(k);
}

int gemm_i8_prepare(struct kctx *k)
{
    const int most = ismem<MINFER_TYPE_Q8_0, 8>::BYTES > ismem<MINFER_TYPE_Q5_K, 8>::BYTES
                         ? ismem<MINFER_TYPE_Q8_0, 8>::BYTES
                         : ismem<MINFER_TYPE_Q5_K, 8>::BYTES;
    if (k->smem_optin < most) {
        snprintf(k->err, k->err_len,
                 "gemm_i8: needs %d bytes of dynamic shared memory but device %d allows %d",
                 most, k->device, k->smem_optin);
        return -1;
    }
    return i_optin<MINFER_TYPE_Q4_K>(k) || i_optin<MINFER_TYPE_Q5_K>(k) ||
           i_optin<MINFER_TYPE_Q6_K>(k) || i_optin<MINFER_TYPE_Q8_0>(k);
}

struct i_launchers {
    template <int T, int NJ, bool GRP>
    static int launch(struct kctx *k, const igroup &g, int64_t tiles_y, const void *xq,
                      int64_t K, int64_t M, int splits)
    {
        dim3 grid((unsigned)((M + 8 * NJ - 1) / (8 * NJ)), (unsigned)tiles_y, (unsigned)splits);
        const int smem = ismem<T, NJ>::BYTES, late = k->late_next;
        KLAUNCH(k, "gemm_i8", (gemm_i8_kernel<T, NJ, GRP>), grid, I_THREADS, smem,
                (const uint8_t *)xq, (int)K, (int)M, splits, g, late);
        if (late)
            k->late_launch = k->launches;
        return 0;
    }
    template <int T>
    static int run_group(struct kctx *k, const igroup &g, int64_t tiles_y, const void *xq,
                         int64_t K, int64_t M, int splits)
    {
        int nj = i_nj(M);
        if (g.count > 1)
            return nj == 2 ? launch<T, 2, true>(k, g, tiles_y, xq, K, M, splits)
                           : k_fail(k, "gemm_i8", "a group of products takes at most 16 tokens");
        auto f = nj == 2   ? launch<T, 2, false>
                 : nj == 4 ? launch<T, 4, false>
                           : launch<T, 8, false>;
        return f(k, g, tiles_y, xq, K, M, splits);
    }
    /* the launcher of each covered type (inplace_pick's L::run<T>): one
     * product */
    template <int T>
    static int run(struct kctx *k, const void *W, int64_t w_nb1, const void *xq, int64_t K,
                   int64_t N, int64_t M, int splits, float *out, int64_t out_nb1,
                   int64_t split_nb, gepi e, const gsplit *fs)
    {
        const gsplit none = {nullptr, 0, {0, nullptr, 0}, nullptr};
        igroup g = {};
        g.count = 1;
        g.s[0] = {(const uint8_t *)W, w_nb1, (int)N, 0, out, out_nb1, split_nb, e,
                  fs ? *fs : none};
        return run_group<T>(k, g, (N + I_BN - 1) / I_BN, xq, K, M, splits);
    }
};

int gemm_i8(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xq, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e)
{
    if ((M + 15) / 16 > 65535 || (N + I_BN - 1) / I_BN > 65535)
        return k_fail(k, "gemm_i8", "too many tokens or rows for one launch");
    if (w_nb1 > (int64_t)(UINT32_MAX / I_BN) - 16) /* i8_wcopy's 32-bit offsets in a tile */
        return k_fail(k, "gemm_i8", "weight rows of more than 32 MiB");
    gemm_inplace_launch fn = inplace_pick<i_launchers>(type);
    if (!fn)
        return k_fail(k, "gemm_i8", "weight type has no int8 GEMM");
    const int64_t bm = 8 * i_nj(M), tiles = (M + bm - 1) / bm * ((N + I_BN - 1) / I_BN);
    return gemm_inplace_run(k, "gemm_i8", fn, i_splits(k, K, N, M), W, w_nb1, xq, K, N, M, dst,
                            dst_nb1, part, e, tiles);
}

/* A group's split count: the most splits (at most 8, whole chunks) that
 * keep its blocks within one wave of 2 per SM; a second, mostly empty
 * wave would cost what the group saves. */
static int i_group_splits(const struct kctx *k, int64_t K, int64_t tiles)
{
    int64_t s = g_splits ? g_splits : 2LL * k->sm_count / tiles;
    int64_t nch = K / Q_CHUNK;
    s = s < 1 ? 1 : s > I_MAX_SPLITS ? I_MAX_SPLITS : s;
    return (int)(s < nch ? s : nch);
}

static int64_t i_group_tiles(const struct kgemm_seg *segs, int count)
{
    int64_t t = 0;
    for (int i = 0; i < count; i++)
        t += (segs[i].N + I_BN - 1) / I_BN;
    return t;
}

int gemm_i8_multi_ok(const struct kctx *k, uint32_t type, const struct kgemm_seg *segs,
                     int count, int64_t K, int64_t M)
{
    if (count < 2 || count > I_SEGS || i_nj(M) != 2 || !inplace_pick<i_launchers>(type) ||
        !k->tile_count)
        return 0;
    int64_t tiles = i_group_tiles(segs, count);
    for (int i = 0; i < count; i++)
        if (segs[i].N < 1 || segs[i].N > INT32_MAX ||
            segs[i].w_nb1 > (int64_t)(UINT32_MAX / I_BN) - 16)
            return 0;
    return tiles <= 65535 && tiles <= KTILE_COUNTERS && K / Q_CHUNK >= 1;
}

size_t gemm_i8_multi_part_bytes(const struct kctx *k, const struct kgemm_seg *segs, int count,
                                int64_t K, int64_t M)
{
    int splits = i_group_splits(k, K, i_group_tiles(segs, count));
    size_t b = 0;
    for (int i = 0; i < count; i++)
        b += gemm_planes_bytes(splits, segs[i].N, M);
    return b;
}

int gemm_i8_multi(struct kctx *k, uint32_t type, const struct kgemm_seg *segs, int count,
                  int64_t K, const void *xq, int64_t M, void *part)
{
    if (!gemm_i8_multi_ok(k, type, segs, count, K, M))
        return k_fail(k, "gemm_i8", "these products cannot run as one launch");
    const int64_t tiles = i_group_tiles(segs, count);
    const int splits = i_group_splits(k, K, tiles);
    if (splits > 1 && !part)
        return k_fail(k, "gemm_i8", "no scratch for the split-K planes was given");
    const gepi none = {0, nullptr, 0};
    const gsplit nofs = {nullptr, 0, none, nullptr};
    igroup g = {};
    g.count = count;
    float *p = (float *)part;
    int t0 = 0;
    for (int i = 0; i < count; i++) {
        const kgemm_seg &q = segs[i];
        const gepi e = gepi_of(q.epi);
        iseg &s = g.s[i];
        s.W = (const uint8_t *)q.W;
        s.w_nb1 = q.w_nb1;
        s.N = (int)q.N;
        s.t0 = t0;
        s.split_nb = q.N * M * 4;
        if (splits > 1) {
            s.out = p;
            s.out_nb1 = q.N * 4;
            s.ep = none;
            s.fs = {q.dst, q.dst_nb1, e, k->tile_count};
            p += (size_t)splits * (size_t)q.N * (size_t)M;
        } else {
            s.out = q.dst;
            s.out_nb1 = q.dst_nb1;
            s.ep = e;
            s.fs = nofs;
        }
        t0 += (int)((q.N + I_BN - 1) / I_BN);
    }
    using F = int (*)(struct kctx *, const igroup &, int64_t, const void *, int64_t, int64_t,
                      int);
    const F f = type == MINFER_TYPE_Q4_K   ? i_launchers::run_group<MINFER_TYPE_Q4_K>
                : type == MINFER_TYPE_Q5_K ? i_launchers::run_group<MINFER_TYPE_Q5_K>
                : type == MINFER_TYPE_Q6_K ? i_launchers::run_group<MINFER_TYPE_Q6_K>
                                           : i_launchers::run_group<MINFER_TYPE_Q8_0>;
    return f(k, g, tiles, xq, K, M, splits); /* the type is one of these: gemm_i8_multi_ok */
}
