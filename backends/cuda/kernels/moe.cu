/*
 * moe.cu — the mixture-of-experts kernels: TOPK (the router's choice),
 * MOE_WEIGHTS (the chosen experts' softmax weights), MOE_SUM (their
 * weighted sum) and MUL_MAT_ID (the chosen experts' products).
 *
 * Routing never leaves the device: MUL_MAT_ID's first launch lists each
 * expert's slots (token, choice) in scratch, the second runs one block per
 * (row tile, expert, slot tile) that reads its expert's count from that
 * scratch and returns at once when the expert has no slot there. Every
 * grid is a function of the shapes only, so a captured graph replays for
 * any routing. An expert's rows are read once per tile of up to MI_COLS
 * gathered columns (a decode reads each chosen expert's rows once; a
 * prefill gathers the tokens that chose an expert); unchosen experts are
 * never read.
 */
#include "common.cuh"

#define TK_THREADS 128
#define TK_MAX_N 4096
#define MI_THREADS 128
#define MI_ROWS 16 /* weight rows per block (4 per warp) */
#define MI_COLS 8  /* gathered columns per block */

/* ---- TOPK ---- */

/* (v, i) is before (w, j): larger value first, the lower index on ties. */
static __device__ __forceinline__ bool tk_before(float v, int i, float w, int j)
{
    return v > w || (v == w && i < j && i >= 0) || j < 0;
}

__global__ void __launch_bounds__(TK_THREADS) topk_kernel(kview x, int kk, kview dst)
{
    k_dep_enter();
    __shared__ float v[TK_MAX_N];
    __shared__ unsigned char taken[TK_MAX_N];
    __shared__ float bv[TK_THREADS / 32];
    __shared__ int bi[TK_THREADS / 32];
    const int n = (int)x.ne[0], t = blockIdx.x, tid = threadIdx.x;
    const float *xr = (const float *)((const char *)x.data + t * x.nb[1]);
    for (int i = tid; i < n; i += TK_THREADS) {
        v[i] = xr[i];
        taken[i] = 0;
    }
    __syncthreads();
    int32_t *o = (int32_t *)((char *)dst.data + t * dst.nb[1]);
    for (int r = 0; r < kk; r++) {
        float best = 0.0f;
        int bidx = -1;
        for (int i = tid; i < n; i += TK_THREADS)
            if (!taken[i] && tk_before(v[i], i, best, bidx)) {
                best = v[i];
                bidx = i;
            }
        for (int off = 16; off; off >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, best, off);
            int oi = __shfl_xor_sync(0xffffffffu, bidx, off);
            if (oi >= 0 && tk_before(ov, oi, best, bidx)) {
                best = ov;
                bidx = oi;
            }
        }
        if (tid % 32 == 0) {
            bv[tid / 32] = best;
            bi[tid / 32] = bidx;
        }
        __syncthreads();
        if (tid == 0) {
            float b = bv[0];
            int w = bi[0];
            for (int j = 1; j < TK_THREADS / 32; j++)
                if (bi[j] >= 0 && tk_before(bv[j], bi[j], b, w)) {
                    b = bv[j];
                    w = bi[j];
                }
            o[r] = w;
            if (w >= 0)
                taken[w] = 1;
        }
        __syncthreads();
    }
}

extern "C" int k_topk(struct kctx *k, struct kview x, int kk, struct kview dst)
{
    if (x.ne[0] > TK_MAX_N || kk < 1 || kk > 64 || kk > x.ne[0] || x.ne[1] <= 0 ||
        x.ne[1] > 0x7fffffff)
        return k_fail(k, "topk", "n above 4096, k outside 1..min(64, n), or too many tokens");
    KLAUNCH(k, "topk", topk_kernel, (unsigned)x.ne[1], TK_THREADS, 0, x, kk, dst);
    return 0;
}

/* ---- MOE_WEIGHTS ---- */

/* One warp per token. */
__global__ void moe_weights_kernel(kview lg, kview ids, int renorm, kview dst, unsigned *flags)
{
    k_dep_enter();
    const int t = blockIdx.x, lane = threadIdx.x, n = (int)lg.ne[0], kk = (int)ids.ne[0];
    const float *l = (const float *)((const char *)lg.data + t * lg.nb[1]);
    const int32_t *e = (const int32_t *)((const char *)ids.data + t * ids.nb[1]);
    float *w = (float *)((char *)dst.data + t * dst.nb[1]);
    float mx = -INFINITY;
    for (int i = lane; i < n; i += 32)
        mx = fmaxf(mx, l[i]);
    mx = warp_max(mx);
    float s = 0.0f;
    if (renorm) {
        for (int j = lane; j < kk; j += 32)
            if (e[j] >= 0 && e[j] < n)
                s += expf(l[e[j]] - mx);
    } else {
        for (int i = lane; i < n; i += 32)
            s += expf(l[i] - mx);
    }
    s = warp_sum(s);
    for (int j = lane; j < kk; j += 32) {
        if (e[j] < 0 || e[j] >= n) {
            atomicOr(flags, KFLAG_MOE_ID);
            w[j] = 0.0f;
            continue;
        }
        w[j] = expf(l[e[j]] - mx) / s;
    }
}

extern "C" int k_moe_weights(struct kctx *k, struct kview logits, struct kview ids, int renorm,
                             struct kview dst)
{
    if (logits.ne[1] <= 0 || logits.ne[1] > 0x7fffffff)
        return k_fail(k, "moe_weights", "token count outside 1..2^31-1");
    KLAUNCH(k, "moe_weights", moe_weights_kernel, (unsigned)logits.ne[1], 32, 0, logits, ids,
            renorm, dst, k->flags);
    return 0;
}

/* ---- MOE_SUM ---- */

__global__ void moe_sum_kernel(kview x, kview w, kview dst)
{
    k_dep_enter();
    const int t = blockIdx.x, kk = (int)x.ne[1];
    const float *wt = (const float *)((const char *)w.data + t * w.nb[1]);
    float *o = (float *)((char *)dst.data + t * dst.nb[1]);
    for (int64_t i = threadIdx.x; i < x.ne[0]; i += blockDim.x) {
        float acc = 0.0f;
        for (int j = 0; j < kk; j++)
            acc += wt[j] * ((const float *)((const char *)x.data + j * x.nb[1] + t * x.nb[2]))[i];
        o[i] = acc;
    }
}

extern "C" int k_moe_sum(struct kctx *k, struct kview x, struct kview w, struct kview dst)
{
    if (x.ne[2] <= 0 || x.ne[2] > 0x7fffffff)
        return k_fail(k, "moe_sum", "token count outside 1..2^31-1");
    KLAUNCH(k, "moe_sum", moe_sum_kernel, (unsigned)x.ne[2], 128, 0, x, w, dst);
    return 0;
}

/* ---- MUL_MAT_ID ---- */

extern "C" size_t k_mul_mat_id_scratch_bytes(int64_t n_expert, int64_t slots)
{
    return (size_t)n_expert * (size_t)(slots + 1) * sizeof(int32_t);
}

/* counts[e] (scratch[0..E)) and lists[e][0..counts[e]) (scratch[E + e*S])
 * of the slots s = t * k + j that chose expert e. One block; the order
 * inside a list varies, each slot's result does not. */
__global__ void __launch_bounds__(1024) mmid_route(kview ids, int n_expert, int32_t *scratch,
                                                   unsigned *flags)
{
    k_dep_enter();
    extern __shared__ int cnt[];
    const int kk = (int)ids.ne[0], S = kk * (int)ids.ne[1];
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
        cnt[e] = 0;
    __syncthreads();
    int32_t *lists = scratch + n_expert;
    for (int s = threadIdx.x; s < S; s += blockDim.x) {
        int j = s % kk, t = s / kk;
        int e = *(const int32_t *)((const char *)ids.data + t * ids.nb[1] + j * 4);
        if (e < 0 || e >= n_expert) {
            atomicOr(flags, KFLAG_MOE_ID);
            continue;
        }
        int p = atomicAdd(&cnt[e], 1);
        lists[(size_t)e * S + p] = s;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < n_expert; e += blockDim.x)
        scratch[e] = cnt[e];
}

template <int T>
__global__ void __launch_bounds__(MI_THREADS)
    mmid_kernel(const uint8_t *__restrict__ W, int64_t K, int64_t N, int64_t w_nb1,
                int64_t w_nb2, kview x, int kk, int S, kview dst,
                const int32_t *__restrict__ scratch, int n_expert)
{
    k_dep_enter();
    __shared__ int slot[MI_COLS];
    const int e = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int cnt = scratch[e];
    const int32_t *list = scratch + n_expert + (size_t)e * S;
    const uint8_t *We = W + (size_t)e * w_nb2;
    const bool shared_x = x.ne[1] == 1;
    for (int c0 = blockIdx.z * MI_COLS; c0 < cnt; c0 += gridDim.z * MI_COLS) {
        const int nc = cnt - c0 < MI_COLS ? cnt - c0 : MI_COLS;
        __syncthreads(); /* slot[] of the previous tile is read */
        if (threadIdx.x < nc)
            slot[threadIdx.x] = list[c0 + threadIdx.x];
        __syncthreads();
        const float *xc[MI_COLS];
#pragma unroll
        for (int c = 0; c < MI_COLS; c++) {
            int s = slot[c < nc ? c : 0], j = s % kk, t = s / kk;
            xc[c] = (const float *)((const char *)x.data + t * x.nb[2] +
                                    (shared_x ? 0 : j) * x.nb[1]);
        }
        for (int r = 0; r < MI_ROWS / (MI_THREADS / 32); r++) {
            int64_t n = (int64_t)blockIdx.x * MI_ROWS + warp * (MI_ROWS / (MI_THREADS / 32)) + r;
            if (n >= N)
                break;
            const uint8_t *row = We + n * w_nb1;
            float acc[MI_COLS];
#pragma unroll
            for (int c = 0; c < MI_COLS; c++)
                acc[c] = 0.0f;
            for (int64_t k0 = (int64_t)lane * 8; k0 < K; k0 += 256) {
                float w8[8];
                dq8<T>(row, k0, w8);
#pragma unroll
                for (int c = 0; c < MI_COLS; c++) {
                    if (c >= nc)
                        break;
                    const float *xv = xc[c] + k0;
#pragma unroll
                    for (int i = 0; i < 8; i++)
                        acc[c] += w8[i] * xv[i];
                }
            }
#pragma unroll
            for (int c = 0; c < MI_COLS; c++) {
                if (c >= nc)
                    break;
                float v = warp_sum(acc[c]);
                if (lane == 0) {
                    int s = slot[c], j = s % kk, t = s / kk;
                    ((float *)((char *)dst.data + j * dst.nb[1] + t * dst.nb[2]))[n] = v;
                }
            }
        }
    }
}

template <int T>
static int launch_mmid(struct kctx *k, const void *W, int64_t K, int64_t N, int64_t E,
                       int64_t w_nb1, int64_t w_nb2, kview x, int kk, int S, kview dst,
                       const int32_t *scratch)
{
    int64_t tiles = (x.ne[2] + MI_COLS - 1) / MI_COLS; /* enough when each token picks e once */
    dim3 grid((unsigned)((N + MI_ROWS - 1) / MI_ROWS), (unsigned)E,
              (unsigned)(tiles < 65535 ? tiles : 65535));
    auto kf = mmid_kernel<T>;
    KLAUNCH(k, "mul_mat_id", kf, grid, MI_THREADS, 0, (const uint8_t *)W, K, N, w_nb1, w_nb2, x,
            kk, S, dst, scratch, (int)E);
    return 0;
}

extern "C" int k_mul_mat_id(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                            int64_t n_expert, int64_t w_nb1, int64_t w_nb2, struct kview x,
                            struct kview ids, struct kview dst, void *scratch)
{
    int64_t kk = ids.ne[0], S = kk * ids.ne[1];
    if (K % 8 || n_expert <= 0 || n_expert > 8192 || S <= 0 || S > 0x7fffffff ||
        (N + MI_ROWS - 1) / MI_ROWS > 0x7fffffff || n_expert > 65535)
        return k_fail(k, "mul_mat_id", "K % 8, expert count (1..8192) or slot count out of range");
    int32_t *sc = (int32_t *)scratch;
    KLAUNCH(k, "mul_mat_id.route", mmid_route, 1, 1024, (size_t)n_expert * sizeof(int), ids,
            (int)n_expert, sc, k->flags);
    switch (type) {
        K_FLOAT_CASES(launch_mmid, k, W, K, N, n_expert, w_nb1, w_nb2, x, (int)kk, (int)S, dst,
                      sc)
        K_QUANT_CASES(launch_mmid, k, W, K, N, n_expert, w_nb1, w_nb2, x, (int)kk, (int)S, dst,
                      sc)
    default:
        return k_fail(k, "mul_mat_id", "weight type has no CUDA dequantization");
    }
}
