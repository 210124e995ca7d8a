/*
 * attn-mma.cu — prefill attention on tensor cores, flash-attention style
 * (one pass over the cells, online softmax, nothing of size T x cells in
 * memory). A block takes FA_BQ consecutive query tokens of one head, each
 * of its 4 warps 16 of them. Per tile of FA_BC cells: S = Q K^T with
 * mma.sync m16n8k16 (f16 inputs, f32 accumulation), the causal mask only
 * on tiles that cross a row's position, the online softmax in base 2 (the
 * scale carries log2 e), then O += P V with P taken straight from the S
 * accumulators as A fragments. K and V tiles are staged in shared memory:
 * an F16 cache by cp.async, the K tile of the next step loading while P V
 * runs and the next V tile while the next S runs; F32 and Q8_0 caches are
 * converted to f16 on the way in (Q8_0 read in place, no dequantize pass).
 * Blocks run heaviest query tiles first and, within a tile, all heads in
 * turn, so the heads of one KV group read the same tiles from L2.
 */
#include "attn.cuh"

#define FA_BQ 64
#define FA_BC 64
#define FA_THREADS 128
#define FA_MINB 1

/* Four q8_0 values (packed int8) times d, as four halves. */
__device__ __forceinline__ uint2 fa_q8x4(float d, int v)
{
    return make_uint2(pack_h2(d * (float)(int8_t)v, d * (float)(int8_t)(v >> 8)),
                      pack_h2(d * (float)(int8_t)(v >> 16), d * (float)(int8_t)(v >> 24)));
}

/* Cells [c0, c0 + FA_BC) of KV head hk into sm (rows LD halves apart) as
 * f16; rows at or past end are zeros. */
template <int HD, int L>
__device__ __forceinline__ void fa_stage(uint16_t *sm, const uint8_t *__restrict__ cache,
                                         int64_t nb1, int hk, int64_t c0, int64_t end)
{
    constexpr int LD = HD + 8;
    if (L == 1) {
        constexpr int PR = HD / 8; /* 16-byte chunks per row */
        for (int e = threadIdx.x; e < FA_BC * PR; e += FA_THREADS) {
            int j = e / PR, k = e % PR;
            int64_t c = c0 + j;
            bool ok = c < end;
            const uint8_t *src = cache + (ok ? c : c0) * nb1 + (size_t)hk * HD * 2 + k * 16;
            cp16(sm + j * LD + k * 8, src, ok);
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
            *(uint2 *)(sm + j * LD + k * 4) = w;
        }
    } else {
        constexpr int PR = HD / 32; /* q8_0 blocks per row */
        for (int e = threadIdx.x; e < FA_BC * PR; e += FA_THREADS) {
            int j = e / PR, k = e % PR;
            int64_t c = c0 + j;
            uint4 *o = (uint4 *)(sm + j * LD + k * 32);
            if (c >= end) {
#pragma unroll
                for (int i = 0; i < 4; i++)
                    o[i] = make_uint4(0, 0, 0, 0);
                continue;
            }
            const bq8_0 *b = (const bq8_0 *)(cache + c * nb1) + (size_t)hk * PR + k;
            float d = h2f(b->d);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                uint2 lo = fa_q8x4(d, ld_i32_a2(b->qs + 8 * i));
                uint2 hi = fa_q8x4(d, ld_i32_a2(b->qs + 8 * i + 4));
                o[i] = make_uint4(lo.x, lo.y, hi.x, hi.y);
            }
        }
    }
}

/* MINB: blocks per SM the register budget must allow (launch bounds) */
template <int HD, int L, int MINB>
__global__ void __launch_bounds__(FA_THREADS, MINB)
    fa_prefill(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
               int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
               const int32_t *kv_len, const int32_t *pos, float scale, int window, kview dst)
{
    constexpr int LD = HD + 8, KS = HD / 16, NT = FA_BC / 8, OT = HD / 8;
    __shared__ __align__(16) uint16_t Ks[FA_BC * LD];
    __shared__ __align__(16) uint16_t Vs[FA_BC * LD]; /* first holds the Q tile */
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
        Vs[r * LD + d] = __half_as_ushort(__float2half_rn(v));
    }
    if (threadIdx.x < FA_BQ)
        Pos[threadIdx.x] = t0 + (int)threadIdx.x < T ? pos[t0 + threadIdx.x] : -1;
    __syncthreads();
    unsigned qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++)
        ldsm4(qf[ks], Vs + (warp * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD + ks * 16 +
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
    __syncthreads(); /* the Q tile is read before V tiles overwrite it */

    float o[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    if (start < end) {
        fa_stage<HD, L>(Ks, kc, knb1, hk, start, end);
        cp_commit();
        fa_stage<HD, L>(Vs, vc, vnb1, hk, start, end);
        cp_commit();
    }
    for (int64_t c0 = start; c0 < end; c0 += FA_BC) {
        cp_wait<1>(); /* this K tile (the V tile may still be in flight) */
        __syncthreads();
        float s[NT][4];
        mma_qk_tile<LD>(s, qf, Ks, lane);
        __syncthreads(); /* every warp has read the K tile */
        if (c0 + FA_BC < end)
            fa_stage<HD, L>(Ks, kc, knb1, hk, c0 + FA_BC, end);
        cp_commit(); /* possibly empty: keeps the group count uniform */

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

        cp_wait<1>(); /* this V tile (the next K tile may still be in flight) */
        __syncthreads();
        mma_pv_tile<LD>(o, pf, Vs, lane);
        __syncthreads(); /* every warp has read the V tile */
        if (c0 + FA_BC < end)
            fa_stage<HD, L>(Vs, vc, vnb1, hk, c0 + FA_BC, end);
        cp_commit();
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
}

/* minfer-cuda-bench and the op tests: the prefill kernel's blocks per SM
 * (0 = the default, FA_MINB) */
static int g_fa_minb;

extern "C" void k_tune_attn_prefill(int minb)
{
    g_fa_minb = minb;
}

template <int HD, int MINB>
static decltype(&fa_prefill<HD, 0, MINB>) fa_kernel(uint32_t kv_type)
{
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return fa_prefill<HD, 0, MINB>;
    case MINFER_TYPE_F16:
        return fa_prefill<HD, 1, MINB>;
    default:
        return fa_prefill<HD, 2, MINB>;
    }
}

template <int HD>
static int fa_launch(struct kctx *k, kview q, uint32_t kv_type, const uint8_t *K,
                     const uint8_t *V, int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                     const int32_t *kv_len, const int32_t *pos, float scale, int window,
                     kview dst)
{
    int64_t nt = q.ne[2];
    dim3 grid((unsigned)q.ne[1], (unsigned)((nt + FA_BQ - 1) / FA_BQ));
    const char *site;
    switch (kv_type) {
    case MINFER_TYPE_F32:
        site = "attention.prefill_mma<f32>";
        break;
    case MINFER_TYPE_F16:
        site = "attention.prefill_mma<f16>";
        break;
    case MINFER_TYPE_Q8_0:
        site = "attention.prefill_mma<q8_0>";
        break;
    default:
        return k_fail(k, "attention", "KV cache type is not F32, F16 or Q8_0");
    }
    int minb = g_fa_minb ? g_fa_minb : FA_MINB;
    auto kf = minb >= 4 ? fa_kernel<HD, 4>(kv_type)
              : minb == 3 ? fa_kernel<HD, 3>(kv_type)
                          : fa_kernel<HD, 1>(kv_type);
    KLAUNCH(k, site, kf, grid, FA_THREADS, 0, q, K, V, knb1, vnb1, n_cells, group, kv_len, pos,
            scale, window, dst);
    return 0;
}

extern "C" int k_attn_mma_ok(int64_t hd, int64_t n_head, int64_t n_tokens, uint32_t kv_type,
                             const void *kc, const void *vc, int64_t knb1, int64_t vnb1)
{
    if (hd != 64 && hd != 128)
        return 0;
    if (n_head > 2147483647LL || (n_tokens + FA_BQ - 1) / FA_BQ > 65535)
        return 0;
    if (kv_type == MINFER_TYPE_Q8_0)
        return knb1 % 2 == 0 && vnb1 % 2 == 0 && (uintptr_t)kc % 2 == 0 && (uintptr_t)vc % 2 == 0;
    /* 16-byte cp.async / vector reads of the rows */
    return (uintptr_t)kc % 16 == 0 && (uintptr_t)vc % 16 == 0 && knb1 % 16 == 0 && vnb1 % 16 == 0;
}

extern "C" int k_attn_mma(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                          const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                          int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                          float scale, int window, struct kview dst)
{
    int group = (int)(q.ne[1] / n_kv_head);
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    if (q.ne[0] == 128)
        return fa_launch<128>(k, q, kv_type, K, V, knb1, vnb1, n_cells, group, kv_len, pos,
                              scale, window, dst);
    return fa_launch<64>(k, q, kv_type, K, V, knb1, vnb1, n_cells, group, kv_len, pos, scale,
                         window, dst);
}
