/*
 * attn.cuh — device helpers shared by the attention kernels (attn.cu,
 * attn-lists.cu, attn-mma.cu, attn-dec.cu): the KV cache element loads,
 * the 128-thread block reductions, the few-split combine and the flash
 * steps on mma fragments (the PTX wrappers are mma.cuh's).
 */
#ifndef MINFER_CUDA_ATTN_CUH
#define MINFER_CUDA_ATTN_CUH

#include "common.cuh"
#include "mma.cuh"

/* Four consecutive values of a cache row, from element idx (idx % 4 == 0);
 * L: 0 = F32, 1 = F16, 2 = Q8_0 (read in place, no dequantize pass). */
template <int L> __device__ __forceinline__ float4 fa_load4(const uint8_t *row, int idx)
{
    if (L == 0)
        return *(const float4 *)(row + (size_t)idx * 4);
    if (L == 1) {
        uint2 v = *(const uint2 *)(row + (size_t)idx * 2);
        return make_float4(h2f((uint16_t)v.x), h2f((uint16_t)(v.x >> 16)), h2f((uint16_t)v.y),
                           h2f((uint16_t)(v.y >> 16)));
    }
    const bq8_0 *b = (const bq8_0 *)row + idx / 32;
    float d = h2f(b->d);
    int v = ld_i32_a2(b->qs + idx % 32);
    return make_float4(d * (float)(int8_t)v, d * (float)(int8_t)(v >> 8),
                       d * (float)(int8_t)(v >> 16), d * (float)(int8_t)(v >> 24));
}

/* One value of a cache row, element idx (L as fa_load4's). */
template <int L> __device__ __forceinline__ float vload(const uint8_t *row, int idx)
{
    if (L == 0)
        return ((const float *)row)[idx];
    if (L == 1)
        return h2f(((const uint16_t *)row)[idx]);
    const bq8_0 *b = (const bq8_0 *)row + idx / 32;
    return h2f(b->d) * (float)b->qs[idx % 32];
}

/* ---- the visible cells and a split's share of them ---- */

/* Cells token t sees: the first kv_len[0], none past its position (causal)
 * or the cache. */
__device__ __forceinline__ int64_t visible_cells(const int32_t *kv_len, const int32_t *pos, int t,
                                                 int64_t n_cells)
{
    int64_t nvis = kv_len[0];
    int64_t lim = (int64_t)pos[t] + 1;
    nvis = nvis < lim ? nvis : lim;
    return nvis < n_cells ? nvis : n_cells;
}

/* Cells [begin, end) of the visible ones that split `split` of n_splits
 * reads for token t: a share of ceil(window cells / n_splits) rounded
 * up to gran, computed from kv_len in the kernel (the grid is a function of
 * the shapes, so a captured launch replays, yet the splits share the work
 * evenly at every depth). A sliding window: cells below pos - window + 1
 * are not read. S: the split index's own type (int, or blockIdx.x's
 * unsigned), widened as such. */
template <typename S>
__device__ __forceinline__ void split_share(const int32_t *kv_len, const int32_t *pos, int t,
                                            int64_t n_cells, int window, S split, int n_splits,
                                            int gran, int64_t &begin, int64_t &end)
{
    const int64_t nvis = visible_cells(kv_len, pos, t, n_cells);
    int64_t lo = window > 0 ? (int64_t)pos[t] - window + 1 : 0;
    lo = lo > 0 ? lo : 0;
    const int64_t nwin = nvis > lo ? nvis - lo : 0;
    const int64_t chunk = ((nwin + n_splits - 1) / n_splits + gran - 1) / gran * gran;
    begin = lo + (int64_t)split * chunk;
    end = begin + chunk < nvis ? begin + chunk : nvis;
}

/* ---- cell lists (ATTENTION_LISTS: attn-lists.cu, and attn-dec.cu for F16 caches) ---- */

/* Entries [begin, end) of the visible [first, nv) that split `split` of
 * n_splits takes: whole multiples of gran entries from the front, so the splits share the
 * entries a token actually sees. (The grid is sized by the list capacity
 * n_kv for graph replay; slicing that capacity instead left every split
 * but the first idle on short lists: at 64 sequences of ~200 cells in a
 * 16k context, one busy block of four per token and KV head, 95 us per
 * layer on the H200.) */
__device__ __forceinline__ void lists_share(int64_t first, int64_t nv, int split, int n_splits,
                                            int gran, int64_t &begin, int64_t &end)
{
    int64_t share = ((nv - first + n_splits - 1) / n_splits + gran - 1) / gran * gran;
    begin = first + (int64_t)split * share;
    end = begin + share < nv ? begin + share : nv;
    if (begin > nv)
        begin = nv;
}

/* Token t's list and the entries [begin, end) of it that split `split`
 * takes. A range or list index out of bounds is flagged and refused: no
 * entry is read. */
__device__ __forceinline__ const int32_t *lists_slice(const int32_t *__restrict__ range,
                                                      const int32_t *__restrict__ qlist,
                                                      const int32_t *__restrict__ lists,
                                                      int64_t n_kv, int64_t n_lists, int t,
                                                      int split, int n_splits, int gran,
                                                      unsigned *flags, int64_t &begin,
                                                      int64_t &end)
{
    int64_t first = range[2 * t], nv = range[2 * t + 1], li = qlist[t];
    if (first < 0 || nv <= first || nv > n_kv || li < 0 || li >= n_lists) {
        if (threadIdx.x == 0 && flags)
            atomicOr(flags, KFLAG_ATTN_LIST);
        first = nv = 0;
        li = 0;
    }
    const int32_t *list = lists + li * n_kv;
    lists_share(first, nv, split, n_splits, gran, begin, end);
    return list;
}

/* ---- 128-thread blocks: reductions and the split-K partial (attn.cu, attn-lists.cu) ---- */

/* The maximum and the sum of v over a block of 4 warps, on every thread;
 * red: 4 floats of shared memory. Every thread of the block must call
 * them (two barriers: red is free again when they return). */
__device__ __forceinline__ float block_max128(float v, float *red)
{
    v = warp_max(v);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    __syncthreads();
    return r;
}

__device__ __forceinline__ float block_sum128(float v, float *red)
{
    v = warp_sum(v);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = red[0] + red[1] + red[2] + red[3];
    __syncthreads();
    return r;
}

/* Writes the partial of split `split` of query head h and token t: rows
 * of hd + 2 floats (acc[hd], max, sum) per (token, head, split). Thread
 * threadIdx.x of the block of 128 holds dimensions threadIdx.x (acc0) and
 * threadIdx.x + 128 (acc1). */
__device__ __forceinline__ void partial_store128(float *part, int t, int n_head, int h,
                                                 int n_splits, int split, int hd, float acc0,
                                                 float acc1, float m, float l)
{
    const int tid = threadIdx.x;
    float *o = part + (((size_t)t * n_head + h) * n_splits + split) * (size_t)(hd + 2);
    if (tid < hd)
        o[tid] = acc0;
    if (tid + 128 < hd)
        o[tid + 128] = acc1;
    if (tid == 0) {
        o[hd] = m;
        o[hd + 1] = l;
    }
}

/* ---- the split-K combine for a few splits (attn.cu, attn-lists.cu) ---- */

/* Merges the n_splits partials (acc[hd], max, sum) of query head
 * blockIdx.x and token blockIdx.y into dst; every thread walks the splits
 * itself, no block reductions or barriers. xq (NULL: none): also the
 * output as q8_1 blocks, as attn_combine. */
__device__ __forceinline__ void combine_few(const float *__restrict__ part, int hd, int n_head,
                                            int n_splits, kview dst, uint8_t *xq)
{
    const int h = blockIdx.x, t = blockIdx.y;
    const float *base = part + ((size_t)t * n_head + h) * n_splits * (size_t)(hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_splits; s++)
        M = fmaxf(M, base[s * (size_t)(hd + 2) + hd]);
    float Lsum = 0.0f;
    for (int s = 0; s < n_splits; s++) {
        const float *ps = base + s * (size_t)(hd + 2);
        if (ps[hd] != -INFINITY)
            Lsum += ps[hd + 1] * expf(ps[hd] - M);
    }
    float *o = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
        for (int s = 0; s < n_splits; s++) {
            const float *ps = base + s * (size_t)(hd + 2);
            if (ps[hd] != -INFINITY)
                a += ps[d] * expf(ps[hd] - M);
        }
        float v = Lsum > 0.0f ? a / Lsum : 0.0f; /* no visible cell: zeros */
        o[d] = v;
        if (xq)
            q8_1_store_warp(xq, t, hd * n_head / 32, h * hd + d, v, d % 32);
    }
}

/* ---- flash-attention steps on mma fragments (attn-mma.cu, attn-dec.cu) ---- */

/* The sum of v over the 4 lanes of a quad (the lanes that hold one row of
 * an mma accumulator fragment). */
__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v;
}

/* s = Q.K^T for one tile: Q as A fragments qf[KS] (16 of head_dim
 * each), the tile's K rows in shared memory LD halves apart, NT groups of
 * 8 cells. */
template <int LD, int NT, int KS>
__device__ __forceinline__ void mma_qk_tile(float (&s)[NT][4], const unsigned (&qf)[KS][4],
                                            const void *ks_, int lane)
{
    const uint16_t *Ks = (const uint16_t *)ks_;
#pragma unroll
    for (int i = 0; i < NT; i++)
        s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
#pragma unroll
        for (int nt = 0; nt < NT; nt += 2) {
            unsigned b[4];
            ldsm4(b, Ks + (nt * 8 + lane % 8 + (lane / 16) * 8) * LD + ks * 16 +
                            ((lane / 8) % 2) * 8);
            mma16816(s[nt], qf[ks], b[0], b[1]);
            mma16816(s[nt + 1], qf[ks], b[2], b[3]);
        }
    }
}

/* 2^x as the one MUFU instruction: exp2f's non-ftz form adds a range
 * fix-up for results below 2^-126, which P (rounded to f16 right after)
 * and the rescale factors never need: they flush to 0 here. */
__device__ __forceinline__ float ex2_ftz(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

/* The online softmax of one tile of scores in log2 units: s[nt] is an
 * m16n8 accumulator fragment (rows gid and gid+8 of the lane, NT tiles of
 * 8 cells). Updates the running row maxima m0/m1 and sums l0/l1,
 * rescales the output fragments o by the change of maximum, and returns
 * P = exp2(s - max) as f16 A fragments for the P.V product. A row with
 * nothing visible yet keeps a finite base: exp2(-inf) = 0. */
template <int NT, int OT>
__device__ __forceinline__ void mma_softmax_tile(const float (&s)[NT][4], float &m0, float &m1,
                                                 float &l0, float &l1, float (&o)[OT][4],
                                                 unsigned (&pf)[NT / 2][4])
{
    float mx0 = m0, mx1 = m1;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        mx0 = fmaxf(mx0, fmaxf(s[nt][0], s[nt][1]));
        mx1 = fmaxf(mx1, fmaxf(s[nt][2], s[nt][3]));
    }
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float b0 = mx0 == -INFINITY ? 0.0f : mx0, b1 = mx1 == -INFINITY ? 0.0f : mx1;
    const float cr0 = ex2_ftz(m0 - b0), cr1 = ex2_ftz(m1 - b1);
    m0 = mx0;
    m1 = mx1;
    float ls0 = 0.0f, ls1 = 0.0f;
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        float p0 = ex2_ftz(s[nt][0] - b0), p1 = ex2_ftz(s[nt][1] - b0);
        float p2 = ex2_ftz(s[nt][2] - b1), p3 = ex2_ftz(s[nt][3] - b1);
        ls0 += p0 + p1;
        ls1 += p2 + p3;
        pf[nt / 2][(nt % 2) * 2] = pack_h2(p0, p1);
        pf[nt / 2][(nt % 2) * 2 + 1] = pack_h2(p2, p3);
    }
    l0 = l0 * cr0 + ls0;
    l1 = l1 * cr1 + ls1;
#pragma unroll
    for (int i = 0; i < OT; i++) {
        o[i][0] *= cr0;
        o[i][1] *= cr0;
        o[i][2] *= cr1;
        o[i][3] *= cr1;
    }
}

/* o += P.V over one tile: P from mma_softmax_tile, V rows of the tile in
 * shared memory LD halves apart, read transposed as B fragments. */
template <int LD, int NP, int OT>
__device__ __forceinline__ void mma_pv_tile(float (&o)[OT][4], const unsigned (&pf)[NP][4],
                                            const void *vs, int lane)
{
    const uint16_t *Vs = (const uint16_t *)vs;
#pragma unroll
    for (int j = 0; j < NP; j++) {
#pragma unroll
        for (int ot = 0; ot < OT; ot += 2) {
            unsigned b[4];
            ldsm4t(b, Vs + (j * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD + ot * 8 +
                             (lane / 16) * 8);
            mma16816(o[ot], pf[j], b[0], b[1]);
            mma16816(o[ot + 1], pf[j], b[2], b[3]);
        }
    }
}

#endif /* MINFER_CUDA_ATTN_CUH */
