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
    int splits = k_attn_splits(n_head, nt, n_cells);
    int chunk = attn_chunk(n_cells, splits);
    int group = (int)(n_head / n_kv_head);
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
