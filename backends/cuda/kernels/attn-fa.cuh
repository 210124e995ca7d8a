/*
 * attn-fa.cuh — the prefill attention kernel on tensor cores, flash-
 * attention style (one pass over the cells, online softmax, nothing of
 * size T x cells in memory), for two instruction sets from one body:
 *   - WG = 0, mma.sync (attn-mma.cu, every sm_80+ build);
 *   - WG = 1, Hopper wgmma (attn-wg.cu, compiled for sm_90a only).
 *
 * A block takes FA_BQ = 64 consecutive query tokens of one head, each of
 * its 4 warps (one warpgroup) 16 of them. Per tile of FA_BC = 64 cells:
 * S = Q K^T (f16 inputs, f32 accumulation), the causal mask only on tiles
 * that cross a row's position, the online softmax in base 2 (the scale
 * carries log2 e), then O += P V with P taken straight from the S
 * accumulators as A fragments. K and V tiles are staged in shared memory:
 * an F16 cache by cp.async, the K tile of the next step loading while P V
 * runs and the next V tile while the next S runs; F32 and Q8_0 caches are
 * converted to f16 on the way in (Q8_0 read in place, no dequantize pass).
 * Blocks run heaviest query tiles first and, within a tile, all heads in
 * turn, so the heads of one KV group read the same tiles from L2.
 *
 * What WG changes: mma.sync reads K and V through ldmatrix from rows
 * padded to HD + 8 halves (no bank conflicts); wgmma reads them itself
 * from "core matrices" (8 cells x 16 bytes, 128 contiguous bytes, no
 * swizzle) and takes Q and P from registers, so one instruction does a
 * warpgroup's 64 x 64 x 16 step of S or 64 x HD x 16 step of P V. In
 * this schedule (S, softmax, P V in turn, each product waited for) that
 * made an F16 cache's attention slower on the H200, 180 against 250
 * TFLOP/s, and a Q8_0 cache's faster, 134 against 122 (docs/PERF.md):
 * beating mma.sync needs the softmax overlapped with the products of
 * another warpgroup, as FlashAttention-3 does.
 */
#ifndef MINFER_CUDA_ATTN_FA_CUH
#define MINFER_CUDA_ATTN_FA_CUH

#include "attn.cuh"
#include "wgmma.cuh"

#define FA_BQ 64
#define FA_BC 64
#define FA_THREADS 128

/* Four q8_0 values (packed int8) times d, as four halves. */
__device__ __forceinline__ uint2 fa_q8x4(float d, int v)
{
    return make_uint2(pack_h2(d * (float)(int8_t)v, d * (float)(int8_t)(v >> 8)),
                      pack_h2(d * (float)(int8_t)(v >> 16), d * (float)(int8_t)(v >> 24)));
}

/* Where the 16-byte unit c (halves 8c..8c+7) of tile row j lives: rows HD
 * + 8 halves apart (CM = 0), or row j % 8 of core matrix (j / 8, c), the
 * core matrices of 8 rows in order of c (CM = 1). */
template <int HD, int CM> __device__ __forceinline__ uint16_t *fa_at(uint16_t *sm, int j, int c)
{
    if (CM)
        return sm + ((((j >> 3) * (HD / 8) + c) << 3) + (j & 7)) * 8;
    return sm + j * (HD + 8) + c * 8;
}

/* Cells [c0, c0 + FA_BC) of KV head hk into sm (layout CM as fa_at's) as
 * f16; rows at or past end are zeros. */
template <int HD, int L, int CM>
__device__ __forceinline__ void fa_stage(uint16_t *sm, const uint8_t *__restrict__ cache,
                                         int64_t nb1, int hk, int64_t c0, int64_t end)
{
    if (L == 1) {
        constexpr int PR = HD / 8; /* 16-byte units per row */
#pragma unroll /* distinct address registers: a copy in flight holds its own */
        for (int e = threadIdx.x; e < FA_BC * PR; e += FA_THREADS) {
            int j, k;
            if (CM) { /* a warp: 8 rows x 4 units, 64 bytes of each row (whole
                       * sectors) into 512 contiguous shared bytes */
                int r = e & 7, u = (e >> 3) & 3, rest = e >> 5;
                j = (rest / (PR / 4)) * 8 + r;
                k = (rest % (PR / 4)) * 4 + u;
            } else {
                j = e / PR;
                k = e % PR;
            }
            int64_t c = c0 + j;
            bool ok = c < end;
            const uint8_t *src = cache + (ok ? c : c0) * nb1 + (size_t)hk * HD * 2 + k * 16;
            cp16(fa_at<HD, CM>(sm, j, k), src, ok);
        }
    } else if (L == 0) {
        constexpr int PR = HD / 4;
        for (int e = threadIdx.x; e < FA_BC * PR; e += FA_THREADS) {
            int j = e / PR, k = e % PR;
            int64_t c = c0 + j;
            uint2 w = make_uint2(0, 0);
            if (c < end) {
                float4 v = ((const float4 *)(cache + c * nb1 + (size_t)hk * HD * 4))[k];
                w = make_uint2(pack_h2(v.x, v.y), pack_h2(v.z, v.w));
            }
            *(uint2 *)(fa_at<HD, CM>(sm, j, k / 2) + (k % 2) * 4) = w;
        }
    } else {
        constexpr int PR = HD / 32; /* q8_0 blocks per row */
        for (int e = threadIdx.x; e < FA_BC * PR; e += FA_THREADS) {
            int j = e / PR, k = e % PR;
            int64_t c = c0 + j;
            if (c >= end) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    *(uint4 *)fa_at<HD, CM>(sm, j, k * 4 + i) = make_uint4(0, 0, 0, 0);
                continue;
            }
            const bq8_0 *b = (const bq8_0 *)(cache + c * nb1) + (size_t)hk * PR + k;
            float d = h2f(b->d);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint2 lo = fa_q8x4(d, ld_i32_a2(b->qs + 8 * i));
                uint2 hi = fa_q8x4(d, ld_i32_a2(b->qs + 8 * i + 4));
                *(uint4 *)fa_at<HD, CM>(sm, j, k * 4 + i) = make_uint4(lo.x, lo.y, hi.x, hi.y);
            }
        }
    }
}

#ifdef WG_DEVICE
/* S = Q K^T of the warpgroup's 64 rows and the tile's 64 cells: K is
 * K-major (a cell's head dims contiguous), core matrices of one 8-cell
 * group HD / 8 x 128 bytes apart, the two k halves of a step 128 apart. */
template <int HD>
__device__ __forceinline__ void wg_qk_tile(float (&s)[FA_BC / 2], const unsigned (&qf)[HD / 16][4],
                                           const uint16_t *Ks)
{
    const uint64_t kd = wg_desc(Ks, 128, HD / 8 * 128);
    wg_fence();
#pragma unroll
    for (int ks = 0; ks < HD / 16; ks++)
        wg_mma<FA_BC, 0>::run(s, qf[ks], kd + ((ks * 256) >> 4), ks);
    wg_commit();
    wg_wait<0>();
}

/* O += P V: V is MN-major for this product (a cell's head dims, the N
 * side, contiguous): core matrices along the cells (K) HD / 8 x 128 bytes
 * apart, along N 128; step j covers cells 16j..16j+15. */
template <int HD>
__device__ __forceinline__ void wg_pv_tile(float (&o)[HD / 2], const unsigned (&pf)[FA_BC / 16][4],
                                           const uint16_t *Vs)
{
    const uint64_t vd = wg_desc(Vs, HD / 8 * 128, 128);
    wg_fence();
#pragma unroll
    for (int j = 0; j < FA_BC / 16; j++)
        wg_mma<HD, 1>::run(o, pf[j], vd + ((j * 2 * HD / 8 * 128) >> 4), 1);
    wg_commit();
    wg_wait<0>();
}
#endif

/* Halves of one staged K or V tile, and the dynamic shared memory of one
 * of each (the Q tile, FA_BQ rows HD + 8 halves apart, is staged over
 * them before the first K or V tile is); under 48 KiB: no opt-in. */
template <int HD, int WG> __host__ __device__ constexpr int fa_tile()
{
    return FA_BC * (WG ? HD : HD + 8);
}
template <int HD, int WG> __host__ __device__ constexpr int fa_smem()
{
    return 2 * fa_tile<HD, WG>() * 2 > FA_BQ * (HD + 8) * 2 ? 2 * fa_tile<HD, WG>() * 2
                                                          : FA_BQ * (HD + 8) * 2;
}

/* MINB: blocks per SM the register budget must allow (launch bounds);
 * dynamic shared memory fa_smem<HD, WG>() bytes. */
template <int HD, int L, int MINB, int WG>
__global__ void __launch_bounds__(FA_THREADS, MINB)
    fa_prefill(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
               int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
               const int32_t *kv_len, const int32_t *pos, float scale, int window, kview dst)
{
    k_dep_enter();
#if defined(WG_DEVICE) || !defined(FA_WG_ONLY)
    constexpr int LD = HD + 8, KS = HD / 16, NT = FA_BC / 8, OT = HD / 8;
    constexpr int TILE = fa_tile<HD, WG>();
    extern __shared__ __align__(128) uint16_t fa_dyn[];
    uint16_t *const Ks = fa_dyn, *const Vs = fa_dyn + TILE, *const Qs = fa_dyn;
    __shared__ int32_t Pos[FA_BQ];
    const int T = (int)q.ne[2], n_qt = (T + FA_BQ - 1) / FA_BQ;
    const int h = blockIdx.x, t0 = (n_qt - 1 - (int)blockIdx.y) * FA_BQ, hk = h / group;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, qd = lane % 4;

    /* Q, scaled into base-2 exponent units, as f16 */
    const float qscale = scale * 1.4426950408889634f;
    for (int e = threadIdx.x; e < FA_BQ * HD; e += FA_THREADS) {
        int r = e / HD, d = e % HD, t = t0 + r;
        float v = 0.0f;
        if (t < T)
            v = ((const float *)((const char *)q.data + h * q.nb[1] + (int64_t)t * q.nb[2]))[d] *
                qscale;
        Qs[r * LD + d] = __half_as_ushort(__float2half_rn(v));
    }
    if (threadIdx.x < FA_BQ)
        Pos[threadIdx.x] = t0 + (int)threadIdx.x < T ? pos[t0 + threadIdx.x] : -1;
    __syncthreads();
    unsigned qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        ldsm4(qf[ks], Qs + (warp * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD + ks * 16 +
                             (lane / 16) * 8);
    const int64_t nvis = kv_len[0] < n_cells ? kv_len[0] : n_cells;
    int maxpos = -1, minpos = 0x7fffffff;
    for (int r = 0; r < FA_BQ; r++) {
        int p = Pos[r];
        if (p >= 0) {
            maxpos = p > maxpos ? p : maxpos;
            minpos = p < minpos ? p : minpos;
        }
    }
    const int rp0 = Pos[warp * 16 + g], rp1 = Pos[warp * 16 + g + 8];
    const int64_t end = (int64_t)maxpos + 1 < nvis ? (int64_t)maxpos + 1 : nvis;
    /* a sliding window: row r sees cells [pos - window + 1, pos]; the block
     * starts at the tile holding its lowest row's first cell */
    const int64_t lo0 = window > 0 ? (int64_t)rp0 - window + 1 : 0;
    const int64_t lo1 = window > 0 ? (int64_t)rp1 - window + 1 : 0;
    int64_t start = window > 0 && minpos - window + 1 > 0 ? (int64_t)(minpos - window + 1) : 0;
    start = start / FA_BC * FA_BC;
    const int64_t wmax = window > 0 ? (int64_t)maxpos - window + 1 : 0; /* tiles below: full */
    __syncthreads(); /* the Q tile is read before K and V tiles overwrite it */

    float o[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    if (start < end) {
        fa_stage<HD, L, WG>(Ks, kc, knb1, hk, start, end);
        cp_commit();
        fa_stage<HD, L, WG>(Vs, vc, vnb1, hk, start, end);
        cp_commit();
    }
    /* Tile buffer b (K or V) has landed for every thread: at most one newer
     * copy group (the other operand's next tile) may be in flight. */
    auto landed = [&]() {
        cp_wait<1>();
#ifdef WG_DEVICE
        if (WG)
            fence_async_smem(); /* this thread's copies, to wgmma's proxy */
#endif
        __syncthreads();
    };
    /* Every warp has read buffer buf: refill it with the tile at c (an
     * empty group past the end keeps the group count uniform). */
    auto refill = [&](uint16_t *buf, const uint8_t *cache, int64_t nb1, int64_t c) {
        __syncthreads();
        if (c < end)
            fa_stage<HD, L, WG>(buf, cache, nb1, hk, c, end);
        cp_commit();
    };
    for (int64_t c0 = start; c0 < end; c0 += FA_BC) {
        landed(); /* this K tile (the V tile may still be in flight) */
        float s[NT][4];
#ifdef WG_DEVICE
        if (WG)
            wg_qk_tile<HD>(reinterpret_cast<float(&)[FA_BC / 2]>(s), qf, Ks);
        else
#endif
            mma_qk_tile<LD>(s, qf, Ks, lane);
        refill(Ks, kc, knb1, c0 + FA_BC);

        /* mask: only tiles past the first row's position or the end */
        if (c0 + FA_BC > nvis || c0 + FA_BC - 1 > minpos || c0 < wmax) {
#pragma unroll
            for (int nt = 0; nt < NT; nt++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    int64_t c = c0 + nt * 8 + 2 * qd + (e & 1);
                    int rp = e < 2 ? rp0 : rp1;
                    int64_t lo = e < 2 ? lo0 : lo1;
                    if (c >= nvis || c > rp || c < lo)
                        s[nt][e] = -INFINITY;
                }
            }
        }
        unsigned pf[NT / 2][4];
        mma_softmax_tile(s, m0, m1, l0, l1, o, pf);

        landed(); /* this V tile (the next K tile may still be in flight) */
#ifdef WG_DEVICE
        if (WG)
            wg_pv_tile<HD>(reinterpret_cast<float(&)[HD / 2]>(o), pf, Vs);
        else
#endif
            mma_pv_tile<LD>(o, pf, Vs, lane);
        refill(Vs, vc, vnb1, c0 + FA_BC);
    }
    cp_wait<0>();

    l0 = quad_sum(l0);
    l1 = quad_sum(l1);
    const int ta = t0 + warp * 16 + g, tb = ta + 8;
    const float ia = l0 > 0.0f ? 1.0f / l0 : 0.0f, ib = l1 > 0.0f ? 1.0f / l1 : 0.0f;
    float *oa = ta < T ? (float *)((char *)dst.data + h * dst.nb[1] + (int64_t)ta * dst.nb[2])
                       : NULL;
    float *ob = tb < T ? (float *)((char *)dst.data + h * dst.nb[1] + (int64_t)tb * dst.nb[2])
                       : NULL;
#pragma unroll
    for (int i = 0; i < OT; i++) {
        int d = i * 8 + 2 * qd;
        if (oa) { /* no visible cell: zeros */
            oa[d] = o[i][0] * ia;
            oa[d + 1] = o[i][1] * ia;
        }
        if (ob) {
            ob[d] = o[i][2] * ib;
            ob[d + 1] = o[i][3] * ib;
        }
    }
#endif
}

/* The wgmma kernel for head dim hd and a cache of kv_type (F32, F16 or
 * Q8_0), or NULL where there is none (hd != 128); from attn-wg.cu
 * (present when MINFER_CUDA_WGMMA). */
typedef void (*fa_kernel_fn)(kview, const uint8_t *, const uint8_t *, int64_t, int64_t, int64_t,
                             int, const int32_t *, const int32_t *, float, int, kview);
fa_kernel_fn fa_wg_kernel(int hd, uint32_t kv_type);

#endif /* MINFER_CUDA_ATTN_FA_CUH */
