/*
 * attn.cu — causal grouped-query attention over an F32, F16 or Q8_0 KV
 * cache, split-K: a block per (KV split, head, query token) walks its
 * slice of visible cells in tiles of 128 with an online softmax and writes
 * a partial (acc[hd], max, sum); a combine pass merges the partials. The
 * number of splits and the grid are functions of the shapes only (n_head,
 * n_tokens, n_cells); kv_len and positions are read from device memory in
 * the kernel, so one captured launch replays for every KV length. Decode
 * (few tokens) spreads one query over many splits; prefill (many tokens)
 * uses one split per query and gets its parallelism from the tokens.
 */
#include "common.cuh"

#define A_THREADS 128
#define A_TILE 128
#define A_MAX_HD 256
#define A_TARGET_BLOCKS 1024

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

template <int L> __device__ __forceinline__ float vload(const uint8_t *row, int idx)
{
    if (L == 0)
        return ((const float *)row)[idx];
    if (L == 1)
        return h2f(((const uint16_t *)row)[idx]);
    const bq8_0 *b = (const bq8_0 *)row + idx / 32;
    return h2f(b->d) * (float)b->qs[idx % 32];
}

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

/* ---- partials ---- */

template <int L>
__global__ void __launch_bounds__(A_THREADS)
    attn_partial(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                 int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                 const int32_t *kv_len, const int32_t *pos, float scale, int chunk,
                 int n_splits, float *__restrict__ part)
{
    const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int hd = (int)q.ne[0], hk = h / group, n_head = (int)q.ne[1];
    __shared__ float qs[A_MAX_HD];
    __shared__ float p[A_TILE];
    __shared__ float red[4];

    const float *qr = (const float *)((const char *)q.data + h * q.nb[1] + t * q.nb[2]);
    for (int d = tid; d < hd; d += A_THREADS)
        qs[d] = qr[d] * scale;

    int64_t nvis = kv_len[0];
    int64_t lim = (int64_t)pos[t] + 1;
    nvis = nvis < lim ? nvis : lim;
    nvis = nvis < n_cells ? nvis : n_cells;
    int64_t begin = (int64_t)split * chunk;
    int64_t end = begin + chunk < nvis ? begin + chunk : nvis;
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
    float *o = part + (((size_t)t * n_head + h) * n_splits + split) * (size_t)(hd + 2);
    if (tid < hd)
        o[tid] = acc0;
    if (tid + A_THREADS < hd)
        o[tid + A_THREADS] = acc1;
    if (tid == 0) {
        o[hd] = m;
        o[hd + 1] = l;
    }
}

/* xq (NULL: none): also the output as q8_1 blocks, rows of hd * n_head
 * values per token (needs hd % 32 == 0: every warp then holds whole
 * blocks), with k_quantize_q8_1's arithmetic, bit for bit. */
__global__ void attn_combine(const float *__restrict__ part, int hd, int n_head, int n_splits,
                             kview dst, uint8_t *xq)
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
        if (xq) {
            int nbq = hd * n_head / 32, col = h * hd + d, lane = d % 32;
            float amax = warp_max(fabsf(v));
            float qd = amax / 127.0f;
            int q = qd != 0.0f ? __float2int_rn(v / qd) : 0;
            float qs = warp_sum((float)q);
            uint8_t *row = xq + (size_t)t * (size_t)nbq * 40;
            ((int8_t *)row)[col] = (int8_t)q;
            if (lane == 0)
                ((float2 *)(row + 32 * (size_t)nbq))[col / 32] = make_float2(qd, qd * qs);
        }
    }
}

/* ---- prefill: tiles of queries against tiles of cells ---- */

/* A block takes AP_BQ consecutive query tokens of one head; each of its 4
 * warps owns 8 of those rows. Cells come in tiles of AP_BC: the K tile is
 * staged in shared memory (rows padded by 4 floats, so the lanes' float4
 * reads of 8 different rows fall in different banks), every lane scores
 * one cell against its warp's 8 rows (the query rows are broadcast reads),
 * an online softmax per row follows, then the V tile replaces the K tile
 * and every lane accumulates hd / 32 output dimensions of its 8 rows, the
 * probabilities passed by shuffle. Each K/V element read from the cache
 * serves 32 queries (the decode kernel reads it once per query); heavy
 * (late) query tiles start first. f32 arithmetic throughout. */
#define AP_BQ 32
#define AP_BC 32
#define AP_THREADS 128

/* Cells [c0, c0 + AP_BC) of kv head hk into smem rows ld floats apart, as
 * f32 (zeros past end). */
template <int HD, int L>
__device__ __forceinline__ void ap_stage(float *sm, int ld, const uint8_t *__restrict__ cache,
                                         int64_t nb1, int hk, int64_t c0, int64_t end)
{
    constexpr int CH = L == 0 ? 4 : L == 1 ? 8 : 32; /* values per load chunk */
    constexpr int PER_ROW = HD / CH;
    for (int e = threadIdx.x; e < AP_BC * PER_ROW; e += AP_THREADS) {
        int j = e / PER_ROW, k = e % PER_ROW;
        float *o = sm + j * ld + k * CH;
        int64_t c = c0 + j;
        if (c >= end) {
#pragma unroll
            for (int i = 0; i < CH; i++)
                o[i] = 0.0f;
            continue;
        }
        const uint8_t *row = cache + c * nb1;
        if (L == 0) {
            float4 v = ((const float4 *)(row + (size_t)hk * HD * 4))[k];
            *(float4 *)o = v;
        } else if (L == 1) {
            uint4 v = ((const uint4 *)(row + (size_t)hk * HD * 2))[k];
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int i = 0; i < 4; i++) {
                o[2 * i] = h2f((uint16_t)w[i]);
                o[2 * i + 1] = h2f((uint16_t)(w[i] >> 16));
            }
        } else {
            const bq8_0 *b = (const bq8_0 *)row + (size_t)hk * (HD / 32) + k;
            float d = h2f(b->d);
#pragma unroll
            for (int i = 0; i < 8; i++) {
                int v = ld_i32_a2(b->qs + 4 * i);
                o[4 * i] = d * (float)(int8_t)v;
                o[4 * i + 1] = d * (float)(int8_t)(v >> 8);
                o[4 * i + 2] = d * (float)(int8_t)(v >> 16);
                o[4 * i + 3] = d * (float)(int8_t)(v >> 24);
            }
        }
    }
}

template <int HD, int L>
__global__ void __launch_bounds__(AP_THREADS)
    attn_prefill(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                 int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                 const int32_t *kv_len, const int32_t *pos, float scale, kview dst)
{
    constexpr int DPL = HD / 32, LDK = HD + 4, RPW = AP_BQ / (AP_THREADS / 32);
    __shared__ __align__(16) float Qs[AP_BQ * HD];
    __shared__ __align__(16) float KV[AP_BC * LDK];
    __shared__ int32_t Pos[AP_BQ];
    const int T = (int)q.ne[2], n_qt = (T + AP_BQ - 1) / AP_BQ;
    const int t0 = (n_qt - 1 - (int)blockIdx.x) * AP_BQ, h = blockIdx.y, hk = h / group;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, r0 = warp * RPW;

    for (int e = threadIdx.x; e < AP_BQ * HD; e += AP_THREADS) {
        int r = e / HD, d = e % HD, t = t0 + r;
        Qs[e] = t < T ? ((const float *)((const char *)q.data + h * q.nb[1] + t * q.nb[2]))[d] *
                            scale
                      : 0.0f;
    }
    if (threadIdx.x < AP_BQ)
        Pos[threadIdx.x] = t0 + (int)threadIdx.x < T ? pos[t0 + threadIdx.x] : -1;
    __syncthreads();
    int64_t nvis = kv_len[0] < n_cells ? kv_len[0] : n_cells;
    int maxpos = -1, rpos[RPW];
    for (int r = 0; r < AP_BQ; r++)
        maxpos = Pos[r] > maxpos ? Pos[r] : maxpos;
#pragma unroll
    for (int i = 0; i < RPW; i++)
        rpos[i] = Pos[r0 + i];
    int64_t end = (int64_t)maxpos + 1 < nvis ? (int64_t)maxpos + 1 : nvis;

    float m[RPW], l[RPW], o[RPW][DPL];
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < DPL; k++)
            o[i][k] = 0.0f;
    }
    for (int64_t c0 = 0; c0 < end; c0 += AP_BC) {
        ap_stage<HD, L>(KV, LDK, kc, knb1, hk, c0, end);
        __syncthreads();
        float s[RPW];
#pragma unroll
        for (int i = 0; i < RPW; i++)
            s[i] = 0.0f;
        const float *kr = KV + lane * LDK;
#pragma unroll 4
        for (int d = 0; d < HD; d += 4) {
            float4 k4 = *(const float4 *)(kr + d);
#pragma unroll
            for (int i = 0; i < RPW; i++) {
                float4 q4 = *(const float4 *)(Qs + (r0 + i) * HD + d);
                s[i] += q4.x * k4.x + q4.y * k4.y + q4.z * k4.z + q4.w * k4.w;
            }
        }
        int64_t c = c0 + lane;
#pragma unroll
        for (int i = 0; i < RPW; i++) {
            bool ok = c < end && c <= rpos[i];
            float sv = ok ? s[i] : -INFINITY;
            float mn = fmaxf(m[i], warp_max(sv));
            float p = ok ? expf(sv - mn) : 0.0f;
            float corr = m[i] == mn ? 1.0f : expf(m[i] - mn);
            l[i] = l[i] * corr + p;
#pragma unroll
            for (int k = 0; k < DPL; k++)
                o[i][k] *= corr;
            m[i] = mn;
            s[i] = p;
        }
        __syncthreads(); /* the K tile is read */
        ap_stage<HD, L>(KV, HD, vc, vnb1, hk, c0, end);
        __syncthreads();
        int jn = end - c0 < AP_BC ? (int)(end - c0) : AP_BC;
        for (int j = 0; j < jn; j++) {
            float v[DPL];
            const float *vr = KV + j * HD + lane * DPL;
            if (DPL == 4) {
                float4 v4 = *(const float4 *)vr;
                v[0] = v4.x; v[1] = v4.y; v[2] = v4.z; v[3] = v4.w;
            } else {
#pragma unroll
                for (int k = 0; k < DPL; k++)
                    v[k] = vr[k];
            }
#pragma unroll
            for (int i = 0; i < RPW; i++) {
                float pj = __shfl_sync(0xffffffffu, s[i], j);
#pragma unroll
                for (int k = 0; k < DPL; k++)
                    o[i][k] += pj * v[k];
            }
        }
        __syncthreads(); /* the V tile is read before the next K tile lands */
    }
#pragma unroll
    for (int i = 0; i < RPW; i++) {
        float lsum = warp_sum(l[i]);
        int t = t0 + r0 + i;
        if (t >= T)
            continue;
        float *out = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]) + lane * DPL;
#pragma unroll
        for (int k = 0; k < DPL; k++)
            out[k] = lsum > 0.0f ? o[i][k] / lsum : 0.0f; /* no visible cell: zeros */
    }
}

template <int HD>
static int launch_prefill(struct kctx *k, kview q, uint32_t kv_type, const uint8_t *K,
                          const uint8_t *V, int64_t knb1, int64_t vnb1, int64_t n_cells,
                          int group, const int32_t *kv_len, const int32_t *pos, float scale,
                          kview dst)
{
    int64_t nt = q.ne[2];
    dim3 grid((unsigned)((nt + AP_BQ - 1) / AP_BQ), (unsigned)q.ne[1]);
    switch (kv_type) {
    case MINFER_TYPE_F32: {
        auto kf = attn_prefill<HD, 0>;
        KLAUNCH(k, "attention.prefill<f32>", kf, grid, AP_THREADS, 0, q, K, V, knb1, vnb1,
                n_cells, group, kv_len, pos, scale, dst);
        return 0;
    }
    case MINFER_TYPE_F16: {
        auto kf = attn_prefill<HD, 1>;
        KLAUNCH(k, "attention.prefill<f16>", kf, grid, AP_THREADS, 0, q, K, V, knb1, vnb1,
                n_cells, group, kv_len, pos, scale, dst);
        return 0;
    }
    case MINFER_TYPE_Q8_0: {
        auto kf = attn_prefill<HD, 2>;
        KLAUNCH(k, "attention.prefill<q8_0>", kf, grid, AP_THREADS, 0, q, K, V, knb1, vnb1,
                n_cells, group, kv_len, pos, scale, dst);
        return 0;
    }
    default:
        return k_fail(k, "attention", "KV cache type is not F32, F16 or Q8_0");
    }
}

/* ---- launch ---- */

extern "C" int k_attn_splits(int64_t n_head, int64_t n_tokens, int64_t n_cells)
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

static int attn_chunk(int64_t n_cells, int splits)
{
    int64_t per = (n_cells + splits - 1) / splits;
    per = (per + A_TILE - 1) / A_TILE * A_TILE;
    return (int)(per > 0 ? per : A_TILE);
}

extern "C" size_t k_attn_scratch_bytes(int64_t hd, int64_t n_head, int64_t n_tokens,
                                       int64_t n_cells)
{
    int s = k_attn_splits(n_head, n_tokens, n_cells);
    return (size_t)n_tokens * (size_t)n_head * (size_t)s * (size_t)(hd + 2) * sizeof(float);
}

extern "C" int k_attention(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                           const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                           int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                           float scale, struct kview dst, void *scratch)
{
    return k_attention_q(k, q, kv_type, kc, vc, knb1, vnb1, n_cells, n_kv_head, kv_len, pos,
                         scale, dst, scratch, NULL);
}

extern "C" int k_attention_q(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                             const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                             int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                             float scale, struct kview dst, void *scratch, void *xq)
{
    int64_t hd = q.ne[0], n_head = q.ne[1], nt = q.ne[2];
    if (hd <= 0 || hd > A_MAX_HD || hd % 4)
        return k_fail(k, "attention", "head_dim must be a multiple of 4 in 4..256");
    if (n_kv_head <= 0 || n_head % n_kv_head)
        return k_fail(k, "attention", "n_kv_head does not divide n_head");
    if (n_head > 65535 || nt > 65535 || nt <= 0 || n_cells <= 0)
        return k_fail(k, "attention", "n_head/n_tokens/n_cells out of range");
    int group = (int)(n_head / n_kv_head);
    const uint8_t *Kp = (const uint8_t *)kc, *Vp = (const uint8_t *)vc;
    /* many tokens, no q8_1 output wanted (that is a decode's): the tiled
     * kernel, for the head sizes it is built for (vector loads of f32/f16 rows
     * need them 16-byte aligned) */
    bool aligned = kv_type == MINFER_TYPE_Q8_0 || /* 2-byte loads there */
                   ((uintptr_t)kc % 16 == 0 && (uintptr_t)vc % 16 == 0 && knb1 % 16 == 0 &&
                    vnb1 % 16 == 0);
    if (nt > 8 && !xq && aligned && nt <= 65535LL * AP_BQ) {
        if (hd == 128)
            return launch_prefill<128>(k, q, kv_type, Kp, Vp, knb1, vnb1, n_cells, group, kv_len,
                                       pos, scale, dst);
        if (hd == 64)
            return launch_prefill<64>(k, q, kv_type, Kp, Vp, knb1, vnb1, n_cells, group, kv_len,
                                      pos, scale, dst);
    }
    int splits = k_attn_splits(n_head, nt, n_cells);
    int chunk = attn_chunk(n_cells, splits);
    dim3 grid((unsigned)splits, (unsigned)n_head, (unsigned)nt);
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    float *part = (float *)scratch;
    switch (kv_type) {
    case MINFER_TYPE_F32: {
        auto kf = attn_partial<0>;
        KLAUNCH(k, "attention.partial<f32>", kf, grid, A_THREADS, 0, q, K, V, knb1, vnb1, n_cells,
                group, kv_len, pos, scale, chunk, splits, part);
        break;
    }
    case MINFER_TYPE_F16: {
        auto kf = attn_partial<1>;
        KLAUNCH(k, "attention.partial<f16>", kf, grid, A_THREADS, 0, q, K, V, knb1, vnb1, n_cells,
                group, kv_len, pos, scale, chunk, splits, part);
        break;
    }
    case MINFER_TYPE_Q8_0: {
        if (hd % 32)
            return k_fail(k, "attention", "a Q8_0 cache needs head_dim % 32 == 0");
        auto kf = attn_partial<2>;
        KLAUNCH(k, "attention.partial<q8_0>", kf, grid, A_THREADS, 0, q, K, V, knb1, vnb1,
                n_cells, group, kv_len, pos, scale, chunk, splits, part);
        break;
    }
    default:
        return k_fail(k, "attention", "KV cache type is not F32, F16 or Q8_0");
    }
    if (xq && hd % 32)
        return k_fail(k, "attention", "q8_1 output needs head_dim % 32 == 0");
    dim3 g2((unsigned)n_head, (unsigned)nt);
    KLAUNCH(k, "attention.combine", attn_combine, g2, 128, 0, (const float *)part, (int)hd,
            (int)n_head, splits, dst, (uint8_t *)xq);
    return 0;
}
