/*
 * gemm-q.cuh — the quantized-weight unpacking that gemm-q.cu (mma.sync,
 * 9-64 tokens) and gemm-wg.cu (Hopper wgmma, larger token tiles) share.
 *
 * Both kernels copy each 256-value chunk of a weight row raw into shared
 * memory (starting at the 16-byte unit that holds the chunk's first byte,
 * so q6_K's and q8_0's 2-byte aligned blocks need no repacking), and lane
 * tig of a warp unpacks values [64 tig, 64 tig + 64) of the chunk of its
 * rows straight into f16 mma A fragments: v[2s + e] holds values 4s + e
 * and 4s + e + 2 of the lane's 64 as a half2, the (0, 2) / (1, 3) pairs
 * one shift and one mask extract from a 32-bit word. The activations are
 * stored in the matching k order by k_gemm_act (gemm.cu).
 */
#ifndef MINFER_CUDA_GEMM_Q_CUH
#define MINFER_CUDA_GEMM_Q_CUH

#include <cuda_fp16.h>
#include <stdint.h>

#include "common.cuh"
#include "gemm.cuh"
#include "mma.cuh"

/* NW words from a 2-byte aligned address: the aligned words around it,
 * funnel-shifted. The word past the last is read only when p is not
 * 4-byte aligned (then it holds wanted bytes): reading it always cost
 * gemm-i8's kernels 14-36 registers. */
template <int NW> __device__ __forceinline__ void ldw(unsigned (&w)[NW], const uint8_t *p)
{
    const unsigned *a = (const unsigned *)((uintptr_t)p & ~(uintptr_t)3);
    unsigned sh = ((unsigned)(uintptr_t)p & 3) * 8, prev = a[0];
#pragma unroll
    for (int i = 0; i < NW; i++) {
        unsigned nx = i + 1 < NW || sh ? a[i + 1] : 0u;
        w[i] = __funnelshift_r(prev, nx, sh);
        prev = nx;
    }
}

/* Bits [sh, sh + 8) of bytes 0 and 2 of w >> 8e, i.e. of bytes e and e+2
 * of w, in the low bits of the two 16-bit lanes (masked by the caller). */
__device__ __forceinline__ unsigned lanes2(unsigned w, int e, int sh)
{
    return w >> (8 * e + sh);
}
/* Two 16-bit lanes holding integers below 1024, minus bias, as exact
 * halves: 0x6400 is 1024.0, so (q | 0x6400) is 1024 + q. */
__device__ __forceinline__ __half2 lanes_h2(unsigned q, float bias)
{
    unsigned u = q | 0x64006400u;
    return __hsub2(*(const __half2 *)&u, __float2half2_rn(1024.0f + bias));
}
__device__ __forceinline__ unsigned h2u(__half2 h)
{
    return *(const unsigned *)&h;
}

/* Per type: BYTES per 256-value chunk of a row, and deq(p, t, v): lane
 * t's 64 values of the chunk at shared address p, v[2s + e] = values
 * 4s + e and 4s + e + 2 as a half2. */
template <int T> struct qgemm;

/* The 6-bit scales and mins of sub-blocks 2t and 2t+1 (q4_K, q5_K) from
 * the 16-byte block header h: scale in sc[], -min in mn[]. Scales byte b
 * is byte b % 4 of word 1 + b / 4; lane t's bytes are the same halves (t
 * odd: the high one) of words 1-3, so no select over the words: sub-block
 * j < 4 keeps the low 6 bits of bytes j and j + 4, j >= 4 takes the
 * nibbles of byte j + 4 and the top 2 bits of bytes j - 4 and j. */
__device__ __forceinline__ void kq_scales(const unsigned (&h)[4], int t, __half2 (&sc)[2],
                                          __half2 (&mn)[2])
{
    float d = __half2float(__ushort_as_half((unsigned short)h[0]));
    float dmin = __half2float(__ushort_as_half((unsigned short)(h[0] >> 16)));
    const int sh = 16 * (t & 1);
    const unsigned lo = h[1] >> sh, hi = h[2] >> sh, nib = h[3] >> sh;
#pragma unroll
    for (int i = 0; i < 2; i++) {
        unsigned l = lo >> (8 * i), m6 = hi >> (8 * i), n = nib >> (8 * i);
        int s = t < 2 ? (int)(l & 63) : (int)((n & 0xF) | ((l >> 2) & 0x30));
        int m = t < 2 ? (int)(m6 & 63) : (int)(((n >> 4) & 0xF) | ((m6 >> 2) & 0x30));
        sc[i] = __float2half2_rn(d * (float)s);
        mn[i] = __float2half2_rn(-dmin * (float)m);
    }
}

/* NW words (a multiple of 4) from a 16-byte aligned address, 16 bytes a
 * load. */
template <int NW> __device__ __forceinline__ void ldw16(unsigned (&w)[NW], const uint8_t *p)
{
#pragma unroll
    for (int i = 0; i < NW / 4; i++) {
        uint4 u = ((const uint4 *)p)[i];
        w[4 * i] = u.x, w[4 * i + 1] = u.y, w[4 * i + 2] = u.z, w[4 * i + 3] = u.w;
    }
}

/* q4_K and q5_K: sub-block 2t is the low nibbles of qs[32t..32t+32),
 * 2t+1 the high ones; q5_K adds the fifth bit, bit j of qh[l] for value l
 * of sub-block j. Their 144- and 176-byte blocks are whole 16-byte units
 * and validate.c admits only 16-byte aligned rows of them, so a chunk in
 * shared memory starts on a unit (q_rows_aligned checks it at launch):
 * the header, the high bits and a lane's 32 quant bytes are whole units,
 * 16 bytes a load instead of gemm-q.cuh's funnel-shifted words. */
template <bool Q5>
__device__ __forceinline__ void kq_deq(const uint8_t *p, int t, unsigned (&v)[32])
{
    unsigned h[4], qh[8], q[8];
    __half2 sc[2], mn[2];
    ldw16(h, p);
    if (Q5)
        ldw16(qh, p + 16);
    ldw16(q, p + (Q5 ? 48 : 16) + 32 * t);
    kq_scales(h, t, sc, mn);
#pragma unroll
    for (int s = 0; s < 16; s++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            unsigned n = lanes2(q[s & 7], e, s < 8 ? 0 : 4) & 0x000F000Fu;
            if (Q5)
                n |= (lanes2(qh[s & 7], e, 2 * t + (s >> 3)) & 0x00010001u) << 4;
            v[2 * s + e] = h2u(__hfma2(lanes_h2(n, 0.0f), sc[s >> 3], mn[s >> 3]));
        }
}

template <> struct qgemm<MINFER_TYPE_Q4_K> {
    static constexpr int BYTES = 144;
    static __device__ __forceinline__ void deq(const uint8_t *p, int t, unsigned (&v)[32])
    {
        kq_deq<false>(p, t, v);
    }
};

template <> struct qgemm<MINFER_TYPE_Q5_K> {
    static constexpr int BYTES = 176;
    static __device__ __forceinline__ void deq(const uint8_t *p, int t, unsigned (&v)[32])
    {
        kq_deq<true>(p, t, v);
    }
};

template <> struct qgemm<MINFER_TYPE_Q6_K> {
    static constexpr int BYTES = 210;
    /* lane t: half hf = t / 2 of the block; t odd takes the high nibbles
     * of ql[64 hf ..] and bits 4-7 of qh[32 hf ..], t even the low ones;
     * one int8 scale per 16 values */
    static __device__ __forceinline__ void deq(const uint8_t *p, int t, unsigned (&v)[32])
    {
        int hf = t >> 1, u = t & 1;
        unsigned ql[16], qh[8], sw[1], dw[1];
        ldw(ql, p + 64 * hf);
        ldw(qh, p + 128 + 32 * hf);
        ldw(sw, p + 192 + 8 * hf + 4 * u);
        ldw(dw, p + 208);
        float d = __half2float(__ushort_as_half((unsigned short)dw[0]));
        __half2 sc[4];
#pragma unroll
        for (int j = 0; j < 4; j++)
            sc[j] = __float2half2_rn(d * (float)(int8_t)(sw[0] >> (8 * j)));
#pragma unroll
        for (int s = 0; s < 16; s++)
#pragma unroll
            for (int e = 0; e < 2; e++) {
                unsigned n = lanes2(ql[s], e, 4 * u) & 0x000F000Fu;
                unsigned hb = lanes2(qh[s & 7], e, 4 * u + 2 * (s >> 3)) & 0x00030003u;
                v[2 * s + e] = h2u(__hmul2(lanes_h2(n | hb << 4, 32.0f), sc[s >> 2]));
            }
    }
};

template <> struct qgemm<MINFER_TYPE_Q8_0> {
    static constexpr int BYTES = 272;
    /* lane t: blocks 2t and 2t+1, 68 contiguous bytes (d, 32 qs, d, 32 qs) */
    static __device__ __forceinline__ void deq(const uint8_t *p, int t, unsigned (&v)[32])
    {
        unsigned w[17];
        ldw(w, p + 68 * t);
        __half2 d0 = __float2half2_rn(__half2float(__ushort_as_half((unsigned short)w[0])));
        __half2 d1 = __float2half2_rn(__half2float(__ushort_as_half((unsigned short)(w[8] >> 16))));
        const __half2 bias = __float2half2_rn(1024.0f + 128.0f);
#pragma unroll
        for (int s = 0; s < 16; s++) {
            /* int8 + 128 in every byte at once (offset binary), then one
             * byte permute a pair puts bytes e and e + 2 under the 0x64
             * exponent byte of two halves: 1024 + 128 + q, exact (in
             * place of a mask, a flip and an or a pair). */
            unsigned q = (s < 8 ? __funnelshift_r(w[s], w[s + 1], 16) : w[1 + s]) ^ 0x80808080u;
#pragma unroll
            for (int e = 0; e < 2; e++) {
                unsigned b = __byte_perm(q, 0x64646464u, e ? 0x4341u : 0x4240u);
                v[2 * s + e] = h2u(__hmul2(__hsub2(*(const __half2 *)&b, bias), s < 8 ? d0 : d1));
            }
        }
    }
};

template <int T> struct qshape {
    /* shared bytes per row of a stage: the chunk plus the bytes before it
     * in its first 16-byte unit, in whole units */
    static constexpr int UNITS = (qgemm<T>::BYTES + 15 + 15) / 16;
    /* an odd number of units between rows: lane (gid, tig) reads word
     * 4 tig' + PITCH / 4 * gid of its rows, and an even count of units
     * put 8 of a warp's 32 loads on one bank (4 is the least 16-byte
     * rows allow) */
    static constexpr int PITCH = 16 * (UNITS | 1);
};

/* Whether the rows of W (and U) can go to qgemm<T>::deq: q4_K and q5_K
 * rows must start on 16 bytes (kq_deq's loads). */
static inline bool q_rows_aligned(uint32_t type, const void *W, const void *U, int64_t w_nb1)
{
    if (type != MINFER_TYPE_Q4_K && type != MINFER_TYPE_Q5_K)
        return true;
    return (((uintptr_t)W | (uintptr_t)U | (uintptr_t)w_nb1) & 15) == 0;
}

/* gemm-q.cu's and gemm-i8.cu's copy of chunk c of ROWS weight rows into
 * shared rows PITCH bytes apart, by THREADS threads: UNITS 16-byte units
 * a row from the one holding the chunk's first byte; units past the
 * chunk's end are zeros, never read (nor from past the tensor). wrow(r):
 * row r's first byte. */
template <int T, int ROWS, int THREADS, int PITCH, class Row>
__device__ __forceinline__ void q_copy_chunk(unsigned char *As, const Row &wrow, int c, int tid)
{
    constexpr int UNITS = qshape<T>::UNITS, BYTES = qgemm<T>::BYTES;
    for (int i = tid; i < ROWS * UNITS; i += THREADS) {
        int r = i / UNITS, u = i % UNITS;
        const uint8_t *src = wrow(r) + (size_t)c * BYTES;
        const uint8_t *g = (const uint8_t *)(((uintptr_t)src & ~(uintptr_t)15) + 16 * u);
        cp16(As + r * PITCH + 16 * u, g, g < src + BYTES);
    }
}

#endif /* MINFER_CUDA_GEMM_Q_CUH */
