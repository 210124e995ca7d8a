/*
 * attn.cu — causal grouped-query attention over an F32, F16 or Q8_0 KV
 * cache, and its dispatch. Many query tokens with head_dim 64/128 go to
 * the tensor-core flash-attention kernel (attn-mma.cu). Few tokens (a
 * decode, or a small batch) over an F16 cache with head_dim 64/128 go to
 * the tensor-core decode kernel (attn-dec.cu); other caches and head
 * sizes to the GQA decode kernel below: one pass
 * over the cells of a KV head serves all its query heads, split-K with a
 * combine pass. Other head sizes take the per-head split kernel, correct
 * for any head_dim the IR allows (a multiple of 4 up to 256). The number
 * of splits and the grid are functions of the shapes only (n_head,
 * n_tokens, n_cells); kv_len and positions are read from device memory in
 * the kernel, so one captured launch replays for every KV length.
 */
#include "attn.cuh"

#define A_THREADS 128
#define A_TILE 128
#define A_MAX_HD 256
#define A_TARGET_BLOCKS 1024
#define A_MAX_SPLITS 512 /* the combine pass's bound; both paths stay below */
static_assert(A_THREADS == 128, "block_max128, partial_store128");

/* ---- cache element access (L: 0 = F32, 1 = F16, 2 = Q8_0) ---- */

template <int L>
__device__ __forceinline__ float kdot(const float *q, const uint8_t *row, int hk, int hd)
{
    float s = 0.0f;
    if (L == 0) {
        const float4 *p = (const float4 *)(row + (size_t)hk * hd * 4);
        for (int i = 0; i < hd / 4; i++) {
            float4 v = p[i];
            s += q[4 * i] * v.x + q[4 * i + 1] * v.y + q[4 * i + 2] * v.z + q[4 * i + 3] * v.w;
        }
    } else if (L == 1) {
        const uint2 *p = (const uint2 *)(row + (size_t)hk * hd * 2);
        for (int i = 0; i < hd / 4; i++) {
            uint2 v = p[i];
            s += q[4 * i] * h2f((uint16_t)v.x) + q[4 * i + 1] * h2f((uint16_t)(v.x >> 16)) +
                 q[4 * i + 2] * h2f((uint16_t)v.y) + q[4 * i + 3] * h2f((uint16_t)(v.y >> 16));
        }
    } else {
        const bq8_0 *b = (const bq8_0 *)row + (size_t)hk * (hd / 32);
        for (int j = 0; j < hd / 32; j++) {
            float d = h2f(b[j].d), bs = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int v = ld_i32_a2(b[j].qs + 4 * i);
                const float *qq = q + 32 * j + 4 * i;
                bs += qq[0] * (float)(int8_t)v + qq[1] * (float)(int8_t)(v >> 8) +
                      qq[2] * (float)(int8_t)(v >> 16) + qq[3] * (float)(int8_t)(v >> 24);
            }
            s += d * bs;
        }
    }
    return s;
}

/* ---- partials ---- */

template <int L>
__global__ void __launch_bounds__(A_THREADS)
    attn_partial(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                 int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                 const int32_t *kv_len, const int32_t *pos, float scale, int window,
                 int chunk, int n_splits, float *__restrict__ part)
{
    k_dep_enter();
    const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int hd = (int)q.ne[0], hk = h / group, n_head = (int)q.ne[1];
    __shared__ float qs[A_MAX_HD];
    __shared__ float p[A_TILE];
    __shared__ float red[4];

    const float *qr = (const float *)((const char *)q.data + h * q.nb[1] + t * q.nb[2]);
    for (int d = tid; d < hd; d += A_THREADS)
        qs[d] = qr[d] * scale;

    const int64_t nvis = visible_cells(kv_len, pos, t, n_cells);
    int64_t begin = (int64_t)split * chunk;
    int64_t end = begin + chunk < nvis ? begin + chunk : nvis;
    int64_t wlo = window > 0 ? (int64_t)pos[t] - window + 1 : 0; /* sliding window */
    begin = begin > wlo ? begin : wlo;
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t c0 = begin; c0 < end; c0 += A_TILE) {
        int64_t c = c0 + tid;
        float s = -INFINITY;
        if (c < end)
            s = kdot<L>(qs, kc + c * knb1, hk, hd);
        float mn = fmaxf(m, block_max128(s, red));
        float e = c < end ? expf(s - mn) : 0.0f;
        p[tid] = e;
        float ps = block_sum128(e, red); /* its barriers publish p[] */
        float corr = expf(m - mn);
        l = l * corr + ps;
        acc0 *= corr;
        acc1 *= corr;
        int cnt = end - c0 < A_TILE ? (int)(end - c0) : A_TILE;
        int vi0 = hk * hd + tid, vi1 = hk * hd + tid + A_THREADS;
        for (int j = 0; j < cnt; j++) {
            const uint8_t *vr = vc + (c0 + j) * vnb1;
            float pj = p[j];
            if (tid < hd)
                acc0 += pj * vload<L>(vr, vi0);
            if (tid + A_THREADS < hd)
                acc1 += pj * vload<L>(vr, vi1);
        }
        m = mn;
        __syncthreads(); /* p[] is rewritten by the next tile */
    }
    partial_store128(part, t, n_head, h, n_splits, split, hd, acc0, acc1, m, l);
}

/* ---- decode: all query heads of a KV head in one pass over its cells ---- */

/* A block is D_WARPS warps of one (KV head, token); every warp is its own
 * split of the visible cells, so the partials and the combine pass are the
 * split-K ones above. The up to D_G query heads that share the KV head are
 * served together: each K and V row is read once for all of them (the
 * per-head kernel read it group times). D_G is 4 or 8, the group size
 * rounded up. Scores: a lane takes one cell of a tile of 32 and dots its K
 * row with the D_G queries held in shared memory (broadcast reads),
 * loading 64 values of the row before using them. The online softmax is
 * per head and warp. Values: the warp reads each V row whole (lane l: 4
 * consecutive values per 128), coalesced, D_VB rows loaded before any is
 * used. Decode is bound by memory latency as much as bandwidth: these
 * batches keep several KiB in flight per warp, where one dependent load
 * per row did not. The split share is ceil(visible / splits) cells,
 * computed in the kernel from kv_len: the grid is a function of the shapes
 * (so a captured launch replays), yet the splits share the work evenly at
 * every depth. DC: chunks of 128 dimensions. */
#define D_WARPS 4
#define D_MAX_SPLITS 512

/* 32 consecutive values of a cache row from element idx (idx % 32 == 0
 * for Q8_0: one block). */
template <int L> __device__ __forceinline__ void d_load32(const uint8_t *row, int idx, float *o)
{
    if (L == 2) {
        const bq8_0 *b = (const bq8_0 *)row + idx / 32;
        float d = h2f(b->d);
        int v[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = ld_i32_a2(b->qs + 4 * i);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            o[4 * i] = d * (float)(int8_t)v[i];
            o[4 * i + 1] = d * (float)(int8_t)(v[i] >> 8);
            o[4 * i + 2] = d * (float)(int8_t)(v[i] >> 16);
            o[4 * i + 3] = d * (float)(int8_t)(v[i] >> 24);
        }
    } else {
        float4 v[8];
#pragma unroll
        for (int i = 0; i < 8; i++)
            v[i] = fa_load4<L>(row, idx + 4 * i);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            o[4 * i] = v[i].x;
            o[4 * i + 1] = v[i].y;
            o[4 * i + 2] = v[i].z;
            o[4 * i + 3] = v[i].w;
        }
    }
}

template <int L, int DC, int D_G>
__global__ void __launch_bounds__(D_WARPS * 32)
    attn_decode(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                int64_t knb1, int64_t vnb1, int64_t n_cells, int group, const int32_t *kv_len,
                const int32_t *pos, float scale, int window, int n_splits,
                float *__restrict__ part)
{
    k_dep_enter();
    constexpr int D_VB = 16 / DC; /* V rows in flight per batch */
    const int hd = (int)q.ne[0], n_head = (int)q.ne[1];
    const int n_gc = (group + D_G - 1) / D_G, hk = blockIdx.y / n_gc, gc = blockIdx.y % n_gc;
    const int h0 = hk * group + gc * D_G;
    const int ng = group - gc * D_G < D_G ? group - gc * D_G : D_G;
    const int t = blockIdx.z, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int split = blockIdx.x * D_WARPS + warp;
    __shared__ __align__(16) float qs[D_G][128 * DC];
    __shared__ float ps[D_WARPS][D_G][32];

    for (int e = threadIdx.x; e < D_G * 128 * DC; e += D_WARPS * 32) {
        int g = e / (128 * DC), d = e % (128 * DC);
        float v = 0.0f;
        if (g < ng && d < hd)
            v = ((const float *)((const char *)q.data + (int64_t)(h0 + g) * q.nb[1] +
                                 (int64_t)t * q.nb[2]))[d] * scale;
        qs[g][d] = v;
    }
    __syncthreads();

    int64_t begin, end;
    split_share(kv_len, pos, t, n_cells, window, split, n_splits, 32, begin, end);

    float m[D_G], l[D_G], acc[D_G][DC][4];
#pragma unroll
    for (int g = 0; g < D_G; g++) {
        m[g] = -INFINITY;
        l[g] = 0.0f;
#pragma unroll
        for (int c = 0; c < DC; c++)
            acc[g][c][0] = acc[g][c][1] = acc[g][c][2] = acc[g][c][3] = 0.0f;
    }
    const int koff = hk * hd; /* element offset of this KV head in a row */
    const int hd32 = hd / 32 * 32;
    for (int64_t c0 = begin; c0 < end; c0 += 32) {
        const int64_t c = c0 + lane;
        const bool ok = c < end;
        float s[D_G];
#pragma unroll
        for (int g = 0; g < D_G; g++)
            s[g] = 0.0f;
        const uint8_t *row = kc + (ok ? c : c0) * knb1;
#pragma unroll 2
        for (int d0 = 0; d0 < hd32; d0 += 32) {
            float kv[32];
            d_load32<L>(row, koff + d0, kv);
#pragma unroll
            for (int g = 0; g < D_G; g++) {
#pragma unroll
                for (int i = 0; i < 32; i += 4) {
                    float4 q4 = *(const float4 *)&qs[g][d0 + i];
                    s[g] += q4.x * kv[i] + q4.y * kv[i + 1] + q4.z * kv[i + 2] +
                            q4.w * kv[i + 3];
                }
            }
        }
        for (int d = hd32; d < hd; d += 4) { /* head sizes not a multiple of 32 */
            float4 k4 = fa_load4<L>(row, koff + d);
#pragma unroll
            for (int g = 0; g < D_G; g++) {
                float4 q4 = *(const float4 *)&qs[g][d];
                s[g] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
            }
        }
#pragma unroll
        for (int g = 0; g < D_G; g++) {
            if (g >= ng)
                break;
            float sv = ok ? s[g] : -INFINITY;
            float mn = fmaxf(m[g], warp_max(sv));
            float base = mn == -INFINITY ? 0.0f : mn;
            float p = ok ? expf(sv - base) : 0.0f;
            float corr = expf(m[g] - base);
            l[g] = l[g] * corr + p; /* lane partial; summed over the warp at the end */
            ps[warp][g][lane] = p;
            m[g] = mn;
#pragma unroll
            for (int cc = 0; cc < DC; cc++) {
                acc[g][cc][0] *= corr;
                acc[g][cc][1] *= corr;
                acc[g][cc][2] *= corr;
                acc[g][cc][3] *= corr;
            }
        }
        __syncwarp();
        const int cnt = end - c0 < 32 ? (int)(end - c0) : 32;
        for (int j0 = 0; j0 < cnt; j0 += D_VB) {
            float4 v[D_VB][DC];
#pragma unroll
            for (int jj = 0; jj < D_VB; jj++) {
                const uint8_t *vr = vc + (c0 + j0 + jj) * vnb1;
#pragma unroll
                for (int cc = 0; cc < DC; cc++) {
                    int d = cc * 128 + lane * 4;
                    v[jj][cc] = j0 + jj < cnt && d < hd ? fa_load4<L>(vr, koff + d)
                                                        : make_float4(0.f, 0.f, 0.f, 0.f);
                }
            }
#pragma unroll
            for (int jj = 0; jj < D_VB; jj++) {
#pragma unroll
                for (int g = 0; g < D_G; g++) {
                    /* rows past cnt: p is 0 there (and v zeros) */
                    float pj = j0 + jj < cnt ? ps[warp][g][j0 + jj] : 0.0f;
#pragma unroll
                    for (int cc = 0; cc < DC; cc++) {
                        acc[g][cc][0] += pj * v[jj][cc].x;
                        acc[g][cc][1] += pj * v[jj][cc].y;
                        acc[g][cc][2] += pj * v[jj][cc].z;
                        acc[g][cc][3] += pj * v[jj][cc].w;
                    }
                }
            }
        }
        __syncwarp(); /* ps is rewritten by the next tile */
    }
    const bool empty = begin >= end;
#pragma unroll
    for (int g = 0; g < D_G; g++) {
        if (g >= ng)
            break;
        float lsum = warp_sum(l[g]);
        float *o = part + (((size_t)t * n_head + h0 + g) * n_splits + split) * (size_t)(hd + 2);
        if (!empty) { /* an empty split's weight is 0: combine never reads its values */
#pragma unroll
            for (int cc = 0; cc < DC; cc++) {
                int d = cc * 128 + lane * 4;
                if (d < hd) { /* rows of hd + 2 floats: 4-byte aligned only */
                    o[d] = acc[g][cc][0];
                    o[d + 1] = acc[g][cc][1];
                    o[d + 2] = acc[g][cc][2];
                    o[d + 3] = acc[g][cc][3];
                }
            }
        }
        if (lane == 0) {
            o[hd] = m[g];
            o[hd + 1] = lsum;
        }
    }
}

/* xq (NULL: none): also the output as q8_1 blocks, rows of hd * n_head
 * values per token (needs hd % 32 == 0: every warp then holds whole
 * blocks), with k_quantize_q8_1's arithmetic, bit for bit. The weight of
 * each split is computed once into shared memory; empty splits (no
 * visible cell: max -inf) weigh 0 and their partials are not read. */
__global__ void __launch_bounds__(128)
    attn_combine(const float *__restrict__ part, int hd, int n_head, int n_splits, kview dst,
                 uint8_t *xq)
{
    k_dep_enter();
    const int h = blockIdx.x, t = blockIdx.y;
    __shared__ float w[A_MAX_SPLITS];
    __shared__ float red[4];
    const float *base = part + ((size_t)t * n_head + h) * n_splits * (size_t)(hd + 2);
    float M = -INFINITY;
    for (int s = threadIdx.x; s < n_splits; s += blockDim.x)
        M = fmaxf(M, base[s * (size_t)(hd + 2) + hd]);
    M = block_max128(M, red);
    float Lsum = 0.0f;
    int last = -1; /* the last split with weight: the cells are dealt out from split 0 */
    for (int s = threadIdx.x; s < n_splits; s += blockDim.x) {
        const float *ps = base + s * (size_t)(hd + 2);
        float ws = ps[hd] == -INFINITY ? 0.0f : expf(ps[hd] - M);
        w[s] = ws;
        Lsum += ws * ps[hd + 1];
        last = ws != 0.0f ? s : last;
    }
    Lsum = block_sum128(Lsum, red); /* its barriers publish w[] */
    const int n_used = (int)block_max128((float)last, red) + 1;
    float *o = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float a = 0.0f;
#pragma unroll 4
        for (int s = 0; s < n_used; s++) {
            float x = base[s * (size_t)(hd + 2) + d]; /* unwritten when w[s] == 0 */
            a += w[s] != 0.0f ? w[s] * x : 0.0f;
        }
        float v = Lsum > 0.0f ? a / Lsum : 0.0f; /* no visible cell: zeros */
        o[d] = v;
        if (xq)
            q8_1_store_warp(xq, t, hd * n_head / 32, h * hd + d, v, d % 32);
    }
}

/* attn_combine for a few splits (short contexts): every thread walks the
 * splits itself, no block reductions or barriers (measured the faster of
 * the two at decode depths up to a few hundred cells, where each layer's
 * attention is a few microseconds and fixed costs decide). */
__global__ void attn_combine_few(const float *__restrict__ part, int hd, int n_head, int n_splits,
                             kview dst, uint8_t *xq)
{
    k_dep_enter();
    combine_few(part, hd, n_head, n_splits, dst, xq);
}

/* ---- launch ---- */

static int attn_chunk(int64_t n_cells, int splits)
{
    int64_t per = (n_cells + splits - 1) / splits;
    per = (per + A_TILE - 1) / A_TILE * A_TILE;
    return (int)(per > 0 ? per : A_TILE);
}

/* Splits of the per-head path (many tokens, head sizes without a
 * tensor-core kernel). */
static int gen_splits(int64_t n_head, int64_t n_tokens, int64_t n_cells)
{
    int64_t maxs = (n_cells + A_TILE - 1) / A_TILE;
    int64_t work = n_head * n_tokens;
    int64_t want = work > 0 ? (A_TARGET_BLOCKS + work - 1) / work : 1;
    if (want > maxs)
        want = maxs;
    if (want > 64)
        want = 64;
    if (want < 1)
        want = 1;
    return (int)want;
}

/* Warps (= splits) per (KV head, query head chunk, token) of the decode
 * kernel: about D_TARGET_WARPS in all (one wave of its 3 blocks of 4 warps
 * per SM on an H200's 132 SMs at 168 registers), a multiple of D_WARPS, no
 * more than one per 32 cells. */
#define D_TARGET_WARPS 1536
static int dec_splits(int64_t n_kv_head, int64_t n_gc, int64_t n_tokens, int64_t n_cells)
{
    int64_t units = n_kv_head * n_gc * n_tokens;
    int64_t want = (D_TARGET_WARPS + units - 1) / units;
    int64_t maxs = (n_cells + 31) / 32;
    if (want > maxs)
        want = maxs;
    if (want > D_MAX_SPLITS)
        want = D_MAX_SPLITS;
    want = (want + D_WARPS - 1) / D_WARPS * D_WARPS;
    return (int)(want < D_WARPS ? D_WARPS : want);
}

static int dec_group(int64_t group)
{
    return group <= 4 ? 4 : 8;
}

/* Up to this many cells a decode over a cache without the tensor-core
 * decode kernel takes the per-head split kernel and the few-split combine
 * (the GQA kernel's per-warp chain of heads and its block-reducing combine
 * cost more there than the K/V they save). minfer-cuda-bench --attn,
 * 28/4 heads of 128, H200: a Q8_0 cache 12.2 us against 18.4 at 32 cells,
 * 26.2 against 19.7 at 128; an F16 cache's tensor-core kernel beats it at
 * every depth (8.4 / 8.7 / 9.0 us against 9.0 / 15.1 / 21.5 at 32 / 128 /
 * 512), so F16 caches of head_dim 64/128 never take it. */
#define A_SHORT_CELLS 64
/* 0: the rule above; > 0: the short kernel up to that many cells for every
 * cache; -1: never (minfer-cuda-bench --attn). */
static int g_short_cells;

extern "C" void k_tune_attn_short(int cells)
{
    g_short_cells = cells;
}

static bool attn_short(int64_t n_cells, bool dec_ok)
{
    if (g_short_cells)
        return n_cells <= g_short_cells;
    return !dec_ok && n_cells <= A_SHORT_CELLS;
}

/* Which kernel serves these shapes: 2 = tensor-core prefill, 4 = the
 * tensor-core decode kernel (attn-dec.cu: F16 caches, head_dim 64/128),
 * 1 = the GQA decode kernel, 3 = short decode (per-head split kernel,
 * few-split combine), 0 = the per-head split kernel. */
static int attn_path(struct kview q, uint32_t kv_type, const void *kc, const void *vc,
                     int64_t knb1, int64_t vnb1, int64_t n_cells, bool xq)
{
    int64_t hd = q.ne[0], nt = q.ne[2];
    if (nt > 8 && !xq && k_attn_mma_ok(hd, q.ne[1], nt, kv_type, kc, vc, knb1, vnb1))
        return 2;
    bool dec_ok = k_attn_dec_ok(hd, kv_type, kc, vc, knb1, vnb1);
    if ((nt <= 8 || xq) && attn_short(n_cells, dec_ok))
        return 3;
    if ((nt <= 8 || xq) && dec_ok)
        return 4;
    if (nt <= 8 || xq)
        return 1;
    return 0;
}

static int path_splits(int path, struct kview q, int64_t n_kv_head, int64_t n_cells)
{
    int64_t group = n_kv_head > 0 ? q.ne[1] / n_kv_head : 1;
    if (path == 4)
        return k_attn_dec_seq_splits(n_kv_head, group, q.ne[2], n_cells);
    if (path == 1)
        return dec_splits(n_kv_head, (group + dec_group(group) - 1) / dec_group(group), q.ne[2],
                          n_cells);
    return gen_splits(q.ne[1], q.ne[2], n_cells);
}

extern "C" size_t k_attn_scratch_bytes(struct kview q, uint32_t kv_type, const void *kc,
                                       const void *vc, int64_t knb1, int64_t vnb1,
                                       int64_t n_cells, int64_t n_kv_head, int xq)
{
    int path = attn_path(q, kv_type, kc, vc, knb1, vnb1, n_cells, xq != 0);
    if (path == 2 || n_kv_head <= 0)
        return 0;
    int s = path_splits(path, q, n_kv_head, n_cells);
    return (size_t)q.ne[2] * (size_t)q.ne[1] * (size_t)s * (size_t)(q.ne[0] + 2) * sizeof(float);
}

extern "C" int k_attention(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                           const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                           int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                           float scale, int window, struct kview dst, void *scratch)
{
    return k_attention_q(k, q, kv_type, kc, vc, knb1, vnb1, n_cells, n_kv_head, kv_len, pos,
                         scale, window, dst, scratch, NULL);
}

template <int L, int DC, int G>
static int dec_launch(struct kctx *k, const char *site, struct kview q, const uint8_t *K,
                      const uint8_t *V, int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                      int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos, float scale,
                      int window, int splits, float *part)
{
    int64_t n_gc = (group + G - 1) / G;
    dim3 grid((unsigned)(splits / D_WARPS), (unsigned)(n_kv_head * n_gc), (unsigned)q.ne[2]);
    auto kf = attn_decode<L, DC, G>;
    KLAUNCH(k, site, kf, grid, D_WARPS * 32, 0, q, K, V, knb1, vnb1, n_cells, group, kv_len, pos,
            scale, window, splits, part);
    return 0;
}

template <int L>
static int dec_launch_l(struct kctx *k, const char *site, struct kview q, const uint8_t *K,
                        const uint8_t *V, int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                        int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                        float scale, int window, int splits, float *part)
{
    bool wide = q.ne[0] > 128;
    if (dec_group(group) == 4)
        return wide ? dec_launch<L, 2, 4>(k, site, q, K, V, knb1, vnb1, n_cells, group,
                                          n_kv_head, kv_len, pos, scale, window, splits, part)
                    : dec_launch<L, 1, 4>(k, site, q, K, V, knb1, vnb1, n_cells, group,
                                          n_kv_head, kv_len, pos, scale, window, splits, part);
    return wide ? dec_launch<L, 2, 8>(k, site, q, K, V, knb1, vnb1, n_cells, group, n_kv_head,
                                      kv_len, pos, scale, window, splits, part)
                : dec_launch<L, 1, 8>(k, site, q, K, V, knb1, vnb1, n_cells, group, n_kv_head,
                                      kv_len, pos, scale, window, splits, part);
}

extern "C" int k_attention_q(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                             const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                             int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                             float scale, int window, struct kview dst, void *scratch, void *xq)
{
    int64_t hd = q.ne[0], n_head = q.ne[1], nt = q.ne[2];
    if (hd <= 0 || hd > A_MAX_HD || hd % 4)
        return k_fail(k, "attention", "head_dim must be a multiple of 4 in 4..256");
    if (n_kv_head <= 0 || n_head % n_kv_head)
        return k_fail(k, "attention", "n_kv_head does not divide n_head");
    if (window < 0)
        return k_fail(k, "attention", "sliding window is negative");
    if (n_head > 65535 || nt > 65535 || nt <= 0 || n_cells <= 0)
        return k_fail(k, "attention", "n_head/n_tokens/n_cells out of range");
    if (kv_type == MINFER_TYPE_Q8_0 && hd % 32)
        return k_fail(k, "attention", "a Q8_0 cache needs head_dim % 32 == 0");
    if (xq && hd % 32)
        return k_fail(k, "attention", "q8_1 output needs head_dim % 32 == 0");
    if (kv_type != MINFER_TYPE_F32 && kv_type != MINFER_TYPE_F16 && kv_type != MINFER_TYPE_Q8_0)
        return k_fail(k, "attention", "KV cache type is not F32, F16 or Q8_0");
    int group = (int)(n_head / n_kv_head);
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    int path = attn_path(q, kv_type, kc, vc, knb1, vnb1, n_cells, xq != NULL);
    if (path == 2)
        return k_attn_mma(k, q, kv_type, kc, vc, knb1, vnb1, n_cells, n_kv_head, kv_len, pos,
                          scale, window, dst);
    int splits = path_splits(path, q, n_kv_head, n_cells);
    if (path == 4)
        return k_attn_dec(k, q, kc, vc, knb1, vnb1, n_cells, n_kv_head, kv_len, pos, scale,
                          window, splits, scratch, dst, xq);
    float *part = (float *)scratch;
    if (path == 1) {
        int rc = kv_type == MINFER_TYPE_F32
                     ? dec_launch_l<0>(k, "attention.decode<f32>", q, K, V, knb1, vnb1, n_cells,
                                       group, n_kv_head, kv_len, pos, scale, window, splits, part)
                 : kv_type == MINFER_TYPE_F16
                     ? dec_launch_l<1>(k, "attention.decode<f16>", q, K, V, knb1, vnb1, n_cells,
                                       group, n_kv_head, kv_len, pos, scale, window, splits, part)
                     : dec_launch_l<2>(k, "attention.decode<q8_0>", q, K, V, knb1, vnb1,
                                       n_cells, group, n_kv_head, kv_len, pos, scale, window,
                                       splits, part);
        if (rc)
            return rc;
    } else {
        int chunk = attn_chunk(n_cells, splits);
        dim3 grid((unsigned)splits, (unsigned)n_head, (unsigned)nt);
        /* the kernel of the cache type (F32, F16 or Q8_0: checked above) */
        auto kf = kv_type == MINFER_TYPE_F32   ? attn_partial<0>
                  : kv_type == MINFER_TYPE_F16 ? attn_partial<1>
                                               : attn_partial<2>;
        const char *site = kv_type == MINFER_TYPE_F32   ? "attention.partial<f32>"
                           : kv_type == MINFER_TYPE_F16 ? "attention.partial<f16>"
                                                        : "attention.partial<q8_0>";
        KLAUNCH(k, site, kf, grid, A_THREADS, 0, q, K, V, knb1, vnb1, n_cells, group, kv_len,
                pos, scale, window, chunk, splits, part);
    }
    dim3 g2((unsigned)n_head, (unsigned)nt);
    if (path == 3) {
        KLAUNCH(k, "attention.combine", attn_combine_few, g2, 128, 0, (const float *)part,
                (int)hd, (int)n_head, splits, dst, (uint8_t *)xq);
        return 0;
    }
    KLAUNCH(k, "attention.combine", attn_combine, g2, 128, 0, (const float *)part, (int)hd,
            (int)n_head, splits, dst, (uint8_t *)xq);
    return 0;
}
