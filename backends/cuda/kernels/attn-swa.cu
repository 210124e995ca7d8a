/*
 * attn-swa.cu — ATTENTION with a sliding window (Gemma's local layers):
 * query t sees the cells c with pos[t] - window < c <= pos[t] and
 * c < kv_len, and no other cell is read. One block per (head, token) walks
 * that range (at most `window` cells) in tiles of SW_TILE with an online
 * softmax, the same arithmetic as attn.cu's partial kernel with one split,
 * and writes the output directly. kv_len and positions are read on the
 * device, so a captured launch replays for every length. Kept apart from
 * attn.cu so the unwindowed kernels stay as they are.
 */
#include "common.cuh"

#define SW_THREADS 128
#define SW_TILE 128
#define SW_MAX_HD 256

/* element idx of a cache row (L: 0 = F32, 1 = F16, 2 = Q8_0) */
template <int L> __device__ __forceinline__ float sw_load(const uint8_t *row, int idx)
{
    if (L == 0)
        return ((const float *)row)[idx];
    if (L == 1)
        return h2f(((const uint16_t *)row)[idx]);
    const bq8_0 *b = (const bq8_0 *)row + idx / 32;
    return h2f(b->d) * (float)b->qs[idx % 32];
}

__device__ __forceinline__ float sw_block_reduce(float v, float *red, bool max)
{
    v = max ? warp_max(v) : warp_sum(v);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = v;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < SW_THREADS / 32; i++)
        r = max ? fmaxf(r, red[i]) : r + red[i];
    __syncthreads();
    return r;
}

template <int L>
__global__ void __launch_bounds__(SW_THREADS)
    attn_swa_kernel(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                    int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                    const int32_t *kv_len, const int32_t *pos, float scale, int window,
                    kview dst)
{
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x;
    const int hd = (int)q.ne[0], hk = h / group;
    __shared__ float qs[SW_MAX_HD];
    __shared__ float p[SW_TILE];
    __shared__ float red[SW_THREADS / 32];
    const float *qr = (const float *)((const char *)q.data + h * q.nb[1] + t * q.nb[2]);
    for (int d = tid; d < hd; d += SW_THREADS)
        qs[d] = qr[d] * scale;
    int64_t hi = kv_len[0] < n_cells ? kv_len[0] : n_cells;
    hi = (int64_t)pos[t] + 1 < hi ? (int64_t)pos[t] + 1 : hi;
    int64_t lo = (int64_t)pos[t] - window + 1;
    lo = lo > 0 ? lo : 0;
    __syncthreads();
    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    const int off = hk * hd;
    for (int64_t c0 = lo; c0 < hi; c0 += SW_TILE) {
        int64_t c = c0 + tid;
        float s = -INFINITY;
        if (c < hi) {
            const uint8_t *kr = kc + c * knb1;
            s = 0.0f;
            for (int d = 0; d < hd; d++)
                s += qs[d] * sw_load<L>(kr, off + d);
        }
        float mn = fmaxf(m, sw_block_reduce(s, red, true));
        float e = c < hi ? expf(s - mn) : 0.0f;
        p[tid] = e;
        float ps = sw_block_reduce(e, red, false); /* its barriers publish p[] */
        float corr = expf(m - mn);
        l = l * corr + ps;
        acc0 *= corr;
        acc1 *= corr;
        int cnt = hi - c0 < SW_TILE ? (int)(hi - c0) : SW_TILE;
        for (int j = 0; j < cnt; j++) {
            const uint8_t *vr = vc + (c0 + j) * vnb1;
            if (tid < hd)
                acc0 += p[j] * sw_load<L>(vr, off + tid);
            if (tid + SW_THREADS < hd)
                acc1 += p[j] * sw_load<L>(vr, off + tid + SW_THREADS);
        }
        m = mn;
        __syncthreads(); /* p[] is rewritten by the next tile */
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f; /* 0: no cell in the window */
    float *o = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]);
    if (tid < hd)
        o[tid] = acc0 * inv;
    if (tid + SW_THREADS < hd)
        o[tid + SW_THREADS] = acc1 * inv;
}

extern "C" int k_attention_swa(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                               const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                               int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                               float scale, int window, struct kview dst)
{
    int64_t hd = q.ne[0], n_head = q.ne[1], nt = q.ne[2];
    if (hd <= 0 || hd > SW_MAX_HD)
        return k_fail(k, "attention.swa", "head_dim must be in 1..256");
    if (n_kv_head <= 0 || n_head % n_kv_head || window <= 0)
        return k_fail(k, "attention.swa", "n_kv_head does not divide n_head, or no window");
    if (n_head > 0x7fffffff || nt > 65535 || nt <= 0 || n_cells <= 0)
        return k_fail(k, "attention.swa", "n_head/n_tokens/n_cells out of range");
    int group = (int)(n_head / n_kv_head);
    dim3 grid((unsigned)n_head, (unsigned)nt);
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    switch (kv_type) {
    case MINFER_TYPE_F32: {
        auto kf = attn_swa_kernel<0>;
        KLAUNCH(k, "attention.swa<f32>", kf, grid, SW_THREADS, 0, q, K, V, knb1, vnb1, n_cells,
                group, kv_len, pos, scale, window, dst);
        return 0;
    }
    case MINFER_TYPE_F16: {
        auto kf = attn_swa_kernel<1>;
        KLAUNCH(k, "attention.swa<f16>", kf, grid, SW_THREADS, 0, q, K, V, knb1, vnb1, n_cells,
                group, kv_len, pos, scale, window, dst);
        return 0;
    }
    case MINFER_TYPE_Q8_0: {
        if (hd % 32)
            return k_fail(k, "attention.swa", "a Q8_0 cache needs head_dim % 32 == 0");
        auto kf = attn_swa_kernel<2>;
        KLAUNCH(k, "attention.swa<q8_0>", kf, grid, SW_THREADS, 0, q, K, V, knb1, vnb1, n_cells,
                group, kv_len, pos, scale, window, dst);
        return 0;
    }
    default:
        return k_fail(k, "attention.swa", "KV cache type is not F32, F16 or Q8_0");
    }
}
