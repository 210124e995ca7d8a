/*
 * ops.cu — the small kernels: GET_ROWS (every readable type), RMS_NORM
 * (optionally fused with the weight multiply), NeoX RoPE with positions
 * read from device memory, element-wise ADD / MUL / SWIGLU / GEGLU / SCALE, type
 * COPY, and KV_STORE into F32 / F16 / Q8_0 caches. Every kernel honours
 * the byte strides nb[1..3] of its views.
 */
#include "common.cuh"

/* Row r of a view flattened over ne[1..3]. */
static __device__ __forceinline__ char *view_row(const kview &v, int64_t r)
{
    int64_t i1 = r % v.ne[1], i23 = r / v.ne[1];
    int64_t i2 = i23 % v.ne[2], i3 = i23 / v.ne[2];
    return (char *)v.data + i1 * v.nb[1] + i2 * v.nb[2] + i3 * v.nb[3];
}

static int64_t nrows(const kview &v)
{
    return v.ne[1] * v.ne[2] * v.ne[3];
}

/* grid.x limit is 2^31-1; rows beyond that are not a real case here */
static int grid_ok(struct kctx *k, const char *site, int64_t rows)
{
    if (rows <= 0 || rows > 0x7fffffff)
        return k_fail(k, site, "row count outside 1..2^31-1");
    return 0;
}

/* ---- GET_ROWS ---- */

template <int T>
__global__ void get_rows_q(const uint8_t *table, int64_t n, int64_t n_rows, int64_t t_nb1,
                           const int32_t *ids, float *dst, int64_t dst_nb1, unsigned *flags)
{
    k_dep_enter();
    int64_t i = blockIdx.y;
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; /* group of 8 */
    if (8 * g >= n)
        return;
    int32_t id = ids[i];
    float *o = (float *)((char *)dst + i * dst_nb1) + 8 * g;
    if (id < 0 || id >= n_rows) {
        if (g == 0)
            atomicOr(flags, KFLAG_GET_ROWS_ID);
#pragma unroll
        for (int j = 0; j < 8; j++)
            o[j] = 0.0f;
        return;
    }
    float v[8];
    dq8<T>(table + (int64_t)id * t_nb1, 8 * g, v);
#pragma unroll
    for (int j = 0; j < 8; j++)
        o[j] = v[j];
}

/* plain types with any n: one thread per element */
template <int T>
__global__ void get_rows_plain(const uint8_t *table, int64_t n, int64_t n_rows, int64_t t_nb1,
                               const int32_t *ids, float *dst, int64_t dst_nb1, unsigned *flags)
{
    k_dep_enter();
    int64_t i = blockIdx.y;
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= n)
        return;
    int32_t id = ids[i];
    float *o = (float *)((char *)dst + i * dst_nb1);
    if (id < 0 || id >= n_rows) {
        if (e == 0)
            atomicOr(flags, KFLAG_GET_ROWS_ID);
        o[e] = 0.0f;
        return;
    }
    const uint8_t *r = table + (int64_t)id * t_nb1;
    float v;
    if (T == MINFER_TYPE_F32)
        v = ((const float *)r)[e];
    else if (T == MINFER_TYPE_F16)
        v = h2f(((const uint16_t *)r)[e]);
    else
        v = bf2f(((const uint16_t *)r)[e]);
    o[e] = v;
}

template <int T>
static int launch_get_rows(struct kctx *k, const void *table, int64_t n, int64_t n_rows,
                           int64_t t_nb1, const int32_t *ids, int64_t n_ids, float *dst,
                           int64_t dst_nb1)
{
    if (n_ids <= 0 || n_ids > 65535)
        return k_fail(k, "get_rows", "id count outside 1..65535");
    const uint8_t *t = (const uint8_t *)table;
    if (T == MINFER_TYPE_F32 || T == MINFER_TYPE_F16 || T == MINFER_TYPE_BF16) {
        dim3 grid((unsigned)((n + 127) / 128), (unsigned)n_ids);
        auto kf = get_rows_plain<T>;
        KLAUNCH(k, "get_rows", kf, grid, 128, 0, t, n, n_rows, t_nb1, ids, dst, dst_nb1,
                k->flags);
    } else {
        if (n % 8)
            return k_fail(k, "get_rows", "row length is not a multiple of 8");
        dim3 grid((unsigned)((n / 8 + 127) / 128), (unsigned)n_ids);
        auto kf = get_rows_q<T>;
        KLAUNCH(k, "get_rows", kf, grid, 128, 0, t, n, n_rows, t_nb1, ids, dst, dst_nb1,
                k->flags);
    }
    return 0;
}

extern "C" int k_type_readable(uint32_t type)
{
    switch (type) {
    case MINFER_TYPE_F32: case MINFER_TYPE_F16: case MINFER_TYPE_BF16:
    case MINFER_TYPE_Q4_0: case MINFER_TYPE_Q4_1: case MINFER_TYPE_Q5_0:
    case MINFER_TYPE_Q5_1: case MINFER_TYPE_Q8_0: case MINFER_TYPE_Q8_1:
    case MINFER_TYPE_Q4_K: case MINFER_TYPE_Q5_K: case MINFER_TYPE_Q6_K:
    case MINFER_TYPE_Q8_K:
        return 1;
    default:
        return 0;
    }
}

extern "C" int k_get_rows(struct kctx *k, uint32_t type, const void *table, int64_t n,
                          int64_t n_rows, int64_t t_nb1, const int32_t *ids, int64_t n_ids,
                          float *dst, int64_t dst_nb1)
{
#define GR(T) K_TYPE_CASE(T, launch_get_rows, k, table, n, n_rows, t_nb1, ids, n_ids, dst, dst_nb1)
    switch (type) {
        GR(MINFER_TYPE_F32) GR(MINFER_TYPE_F16) GR(MINFER_TYPE_BF16)
        GR(MINFER_TYPE_Q4_0) GR(MINFER_TYPE_Q4_1) GR(MINFER_TYPE_Q5_0) GR(MINFER_TYPE_Q5_1)
        GR(MINFER_TYPE_Q8_0) GR(MINFER_TYPE_Q8_1) GR(MINFER_TYPE_Q4_K) GR(MINFER_TYPE_Q5_K)
        GR(MINFER_TYPE_Q6_K) GR(MINFER_TYPE_Q8_K)
    default:
        return k_fail(k, "get_rows", "table type is not readable by this plugin");
    }
#undef GR
}

/* ---- RMS norm ---- */

/* The one order in which every kernel sums a row's squares, so a row's
 * scale has the same bits whichever kernel (whole block, one warp, fused
 * or not) computes it:
 *   chunk c = elements [C c, C c + C), C = 4 when n % 4 == 0 else 1, its
 *     squares fma-accumulated in element order;
 *   virtual thread t of NORM_VT sums its chunks t, t + NORM_VT, ...;
 *   each virtual warp of 32 threads reduces with warp_sum;
 *   the NORM_VT / 32 warp partials (warp w at lane w) reduce with warp_sum.
 * A block of fewer threads than NORM_VT is the same order when it has a
 * thread for every chunk (the missing warps' partials are exact zeros).
 * The first version reduced with 256 threads one element each: 16
 * dependent load steps per 4096-wide row, 16 us per decode norm on H200. */
#define NORM_VT 1024

static __device__ __forceinline__ int norm_chunk(int64_t n)
{
    return n % 4 == 0 ? 4 : 1;
}

/* The 4 values of chunk c (vec: the row is 16-byte aligned). */
static __device__ __forceinline__ float4 load4(const float *xr, int64_t c, bool vec)
{
    if (vec)
        return ((const float4 *)xr)[c];
    return make_float4(xr[4 * c], xr[4 * c + 1], xr[4 * c + 2], xr[4 * c + 3]);
}

static __device__ __forceinline__ float sq4(float4 v)
{
    float s = __fmul_rn(v.x, v.x);
    s = __fmaf_rn(v.y, v.y, s);
    s = __fmaf_rn(v.z, v.z, s);
    return __fmaf_rn(v.w, v.w, s);
}

/* Sum of the squares of chunk c. */
static __device__ __forceinline__ float chunk_sq(const float *xr, int64_t c, int C, bool vec)
{
    return C == 1 ? __fmul_rn(xr[c], xr[c]) : sq4(load4(xr, c, vec));
}

/* Virtual thread t's sum: its chunks t, t + NORM_VT, ... in order. */
static __device__ __forceinline__ float vthread_sq(const float *xr, int64_t n, int64_t t)
{
    int C = norm_chunk(n);
    int64_t nc = n / C;
    bool vec = ((uintptr_t)xr % 16) == 0;
    float s = 0.0f;
    for (int64_t c = t; c < nc; c += NORM_VT)
        s = __fadd_rn(s, chunk_sq(xr, c, C, vec));
    return s;
}

static __device__ __forceinline__ float rms_from_sum(float sum, int64_t n, float eps)
{
    return rsqrtf(sum / (float)n + eps);
}

/* Threads for a block-per-row norm kernel: one per chunk up to NORM_VT
 * (the canonical order above needs exactly this). */
static unsigned norm_threads(int64_t n)
{
    int64_t nc = n % 4 == 0 ? n / 4 : n;
    int64_t t = (nc + 31) / 32 * 32;
    return (unsigned)(t < NORM_VT ? t : NORM_VT);
}

/* The sum over the block of each thread's virtual-thread partial s
 * (launched with norm_threads(n) threads). */
static __device__ __forceinline__ float block_sum_sq(float s)
{
    __shared__ float red[32];
    s = warp_sum(s);
    if (threadIdx.x % 32 == 0)
        red[threadIdx.x / 32] = s;
    __syncthreads();
    float v = threadIdx.x % 32 < blockDim.x / 32 ? red[threadIdx.x % 32] : 0.0f;
    return warp_sum(v);
}

/* 1 / rms of the row at xr, reduced by the whole block. */
static __device__ __forceinline__ float rms_scale(const float *xr, int64_t n, float eps)
{
    return rms_from_sum(block_sum_sq(vthread_sq(xr, n, threadIdx.x)), n, eps);
}

/* The same scale computed by one warp alone: lane l plays virtual threads
 * l, l + 32, ... of each virtual warp that has chunks. */
static __device__ __forceinline__ float rms_scale_warp(const float *xr, int64_t n, float eps)
{
    int lane = threadIdx.x % 32;
    int64_t nc = n / norm_chunk(n);
    int64_t nvw = (nc + 31) / 32;
    if (nvw > NORM_VT / 32)
        nvw = NORM_VT / 32;
    float mine = 0.0f;
    for (int vw = 0; vw < nvw; vw++) {
        float s = warp_sum(vthread_sq(xr, n, 32 * vw + lane));
        if (lane == vw)
            mine = s;
    }
    return rms_from_sum(warp_sum(mine), n, eps);
}

/* y = x * scale (* w): the one expression of every norm output. */
static __device__ __forceinline__ float norm_apply(float x, float scale, bool has_w, float wv)
{
    float v = __fmul_rn(x, scale);
    return has_w ? __fmul_rn(v, wv) : v;
}

static __device__ __forceinline__ float norm_val(float x, float scale, const float *w, int64_t i)
{
    return norm_apply(x, scale, w != NULL, w ? w[i] : 0.0f);
}

/* norm_apply on a chunk's 4 values */
static __device__ __forceinline__ float4 norm_apply4(float4 x, float scale, bool has_w, float4 w)
{
    return make_float4(norm_apply(x.x, scale, has_w, w.x), norm_apply(x.y, scale, has_w, w.y),
                       norm_apply(x.z, scale, has_w, w.z), norm_apply(x.w, scale, has_w, w.w));
}

/* Chunk c's 4 values into o (vec: o is 16-byte aligned). */
static __device__ __forceinline__ void store4(float *o, int64_t c, float4 v, bool vec)
{
    if (vec) {
        ((float4 *)o)[c] = v;
        return;
    }
    o[4 * c] = v.x;
    o[4 * c + 1] = v.y;
    o[4 * c + 2] = v.z;
    o[4 * c + 3] = v.w;
}

/* A row of n <= 128 values (n % 4 == 0) held by one warp, chunk v on
 * each lane (live: the lane holds one), normalized: the canonical sum of
 * such rows (one virtual warp, as rms_norm_kernel's) and norm_apply per
 * value. Every lane of the warp must call it. */
static __device__ __forceinline__ float4 norm_row4(float4 v, bool live, float4 w, bool has_w,
                                                   int64_t n, float eps)
{
    float sw = warp_sum(live ? __fadd_rn(0.0f, sq4(v)) : 0.0f);
    float scale = rms_from_sum(warp_sum(threadIdx.x % 32 == 0 ? sw : 0.0f), n, eps);
    return norm_apply4(v, scale, has_w, w);
}

__global__ void rms_norm_kernel(kview x, const float *w, kview dst, float eps)
{
    k_dep_enter();
    int64_t r = blockIdx.x;
    const float *xr = (const float *)view_row(x, r);
    float *o = (float *)view_row(dst, r);
    int64_t n = x.ne[0];
    if (n % 4 == 0 && n / 4 <= NORM_VT) {
        /* one pass, a thread's chunk held in registers across the sum (the
         * same sum and products as below, so the same bits); the two-pass
         * loop read each row twice with scalar loads: 12.7 -> 11.1 us a
         * 512-token 7B norm on the H100 (docs/PERF.md, session 31) */
        const int64_t c = threadIdx.x;
        const bool live = c < n / 4;
        const float4 xv = live ? load4(xr, c, ((uintptr_t)xr % 16) == 0)
                               : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        const float scale =
            rms_from_sum(block_sum_sq(live ? __fadd_rn(0.0f, sq4(xv)) : 0.0f), n, eps);
        if (!live)
            return;
        const float4 wv = w ? load4(w, c, ((uintptr_t)w % 16) == 0)
                            : make_float4(1.0f, 1.0f, 1.0f, 1.0f);
        store4(o, c, norm_apply4(xv, scale, w != NULL, wv), ((uintptr_t)o % 16) == 0);
        return;
    }
    float scale = rms_scale(xr, n, eps);
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
        o[i] = norm_val(xr[i], scale, w, i);
}

extern "C" int k_rms_norm(struct kctx *k, struct kview x, const float *w, struct kview dst,
                          float eps)
{
    int64_t rows = nrows(x);
    if (grid_ok(k, "rms_norm", rows))
        return -1;
    KLAUNCH(k, "rms_norm", rms_norm_kernel, (unsigned)rows, norm_threads(x.ne[0]), 0, x, w, dst,
            eps);
    return 0;
}

/* One chunk's 4 outputs into dst and its share of a q8_1 block; every
 * thread of the block calls it (shuffles; group 256 also a barrier), live
 * or not. Group 32: k_quantize_q8_1's per-block rule; group 256: its
 * per-256 rule, the 64 chunks of a 256-value group being two whole warps
 * (c % 64 == thread % 64), which meet in shared memory. */
static __device__ __forceinline__ void norm_q8_1_chunk(float4 xv, float4 wv, bool has_w,
                                                       float scale, bool live, int64_t c,
                                                       float *o, bool vec, uint8_t *row, int nb,
                                                       int group)
{
    float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (live) {
        const float4 n4 = norm_apply4(xv, scale, has_w, wv);
        v[0] = n4.x, v[1] = n4.y, v[2] = n4.z, v[3] = n4.w;
        store4(o, c, n4, vec);
    }
    float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
    for (int off = 4; off > 0; off >>= 1)
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    int q[4], qs = 0;
    float d;
    if (group == 256) {
        __shared__ float wmax[NORM_VT / 32];
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 8));
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 16));
        const int warp = threadIdx.x / 32;
        if (threadIdx.x % 32 == 0)
            wmax[warp] = amax;
        __syncthreads();
        amax = fmaxf(wmax[warp], wmax[warp ^ 1]);
        __syncthreads(); /* wmax is rewritten by the next chunk's call */
        const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        d = amax / 127.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q[j] = __float2int_rn(v[j] * id);
            qs += q[j];
        }
    } else {
        d = amax / 127.0f;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            q[j] = d != 0.0f ? __float2int_rn(v[j] / d) : 0;
            qs += q[j];
        }
    }
#pragma unroll
    for (int off = 4; off > 0; off >>= 1)
        qs += __shfl_xor_sync(0xffffffffu, qs, off);
    if (live) {
        ((uint32_t *)row)[c] = (uint32_t)(uint8_t)q[0] | (uint32_t)(uint8_t)q[1] << 8 |
                               (uint32_t)(uint8_t)q[2] << 16 | (uint32_t)(uint8_t)q[3] << 24;
        if (c % 8 == 0)
            ((float2 *)(row + 32 * (size_t)nb))[c / 8] = make_float2(d, d * (float)qs);
    }
}

/* RMS norm whose output also goes out as q8_1 blocks (the layout of
 * k_quantize_q8_1, row r at r * ne0/32 * 40 bytes). Thread t holds chunks
 * t, t + NORM_VT, ... of 4 values; a q8_1 block is 8 chunks, i.e. 8
 * neighbouring lanes. Same values and the same quantization arithmetic as
 * rms_norm_kernel followed by k_quantize_q8_1 with the same group (group
 * 32: amax, d = amax / 127, q = rint(v / d); group 256: the per-256 rule;
 * the integer sum exact in float), so both outputs are bit-identical to
 * the two separate kernels'. Rows of up to 4 * NORM_VT values (every
 * decode row) load x and w once, both before the reduction. */
__global__ void __launch_bounds__(NORM_VT)
    rms_norm_q8_1_kernel(kview x, const float *w, kview dst, float eps, int group, uint8_t *xq,
                         int w_fixed)
{
    int64_t n = x.ne[0], nc = n / 4;
    bool vw = w && ((uintptr_t)w % 16) == 0;
    float4 one = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    /* w_fixed: w is a registered weight, which no kernel writes, so a
     * one-pass row loads it before the wait: its DRAM latency runs under
     * the predecessor's tail instead of after it */
    const bool early = w_fixed && nc <= NORM_VT && w && (int64_t)threadIdx.x < nc;
    float4 wv = early ? load4(w, threadIdx.x, vw) : one;
    k_dep_enter();
    int64_t r = blockIdx.x;
    const float *xr = (const float *)view_row(x, r);
    float *o = (float *)view_row(dst, r);
    int nb = (int)(n / 32);
    uint8_t *row = xq + (size_t)r * (size_t)nb * 40;
    bool vx = ((uintptr_t)xr % 16) == 0, vo = ((uintptr_t)o % 16) == 0;
    if (nc <= NORM_VT) {
        int64_t c = threadIdx.x;
        bool live = c < nc; /* whole 8-lane groups are live or not: nc % 8 == 0 */
        float4 xv = live ? load4(xr, c, vx) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (!early)
            wv = live && w ? load4(w, c, vw) : one;
        float scale = rms_from_sum(block_sum_sq(live ? __fadd_rn(0.0f, sq4(xv)) : 0.0f), n, eps);
        norm_q8_1_chunk(xv, wv, w != NULL, scale, live, c, o, vo, row, nb, group);
        return;
    }
    float scale = rms_scale(xr, n, eps);
    for (int64_t base = 0; base < nc; base += NORM_VT) {
        int64_t c = base + threadIdx.x;
        bool live = c < nc;
        float4 xv = live ? load4(xr, c, vx) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        wv = live && w ? load4(w, c, vw) : one;
        norm_q8_1_chunk(xv, wv, w != NULL, scale, live, c, o, vo, row, nb, group);
    }
}

extern "C" int k_rms_norm_q8_1(struct kctx *k, struct kview x, const float *w, struct kview dst,
                               float eps, int group, void *xq, int w_fixed)
{
    int64_t rows = nrows(x);
    if (group != 32 && group != 256)
        return k_fail(k, "rms_norm_q8_1", "the group must be 32 or 256 values");
    if (x.ne[0] % group || dst.ne[2] != 1 || dst.ne[3] != 1)
        return k_fail(k, "rms_norm_q8_1", "rows not a multiple of the group or dst not 2-D");
    if (grid_ok(k, "rms_norm_q8_1", rows))
        return -1;
    KLAUNCH(k, "rms_norm_q8_1", rms_norm_q8_1_kernel, (unsigned)rows, norm_threads(x.ne[0]), 0,
            x, w, dst, eps, group, (uint8_t *)xq, w_fixed);
    return 0;
}

/* ---- RoPE (NeoX) ---- */

/* Every pair's cos and sin at position p into cs, sn [n_rot / 2], over
 * the block's threads (the table of the one-block-per-group kernels). */
static __device__ __forceinline__ void rope_angle_table(float p, int n_rot, float base,
                                                        float fscale, float *cs, float *sn)
{
    for (int i = threadIdx.x; i < n_rot / 2; i += blockDim.x)
        rope_angle(i, p, n_rot, base, fscale, &cs[i], &sn[i]);
}

static __device__ __forceinline__ void rope_rot(float a, float b, int i, float p, int n_rot,
                                                float base, float fscale, float *o)
{
    float cs, sn;
    rope_angle(i, p, n_rot, base, fscale, &cs, &sn);
    rope_apply(a, b, cs, sn, o, i, n_rot / 2);
}

static __device__ __forceinline__ void rope_row(const kview &x, const int32_t *pos,
                                                const kview &dst, int n_rot, float base,
                                                float fscale, int64_t h, int64_t t)
{
    const float *xr = (const float *)((const char *)x.data + h * x.nb[1] + t * x.nb[2]);
    float *o = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]);
    int half = n_rot / 2;
    float p = (float)pos[t];
    for (int i = threadIdx.x; i < x.ne[0]; i += blockDim.x) {
        if (i < half)
            rope_rot(xr[i], xr[i + half], i, p, n_rot, base, fscale, o);
        else if (i >= n_rot)
            o[i] = xr[i];
    }
}

__global__ void rope_kernel(kview x, const int32_t *pos, kview dst, int n_rot, float base,
                            float fscale)
{
    k_dep_enter();
    rope_row(x, pos, dst, n_rot, base, fscale, blockIdx.x, blockIdx.y);
}

/* Two RoPE nodes with the same positions and parameters in one launch:
 * heads [0, x0.ne[1]) of the first, then the second's. */
__global__ void rope2_kernel(kview x0, kview d0, kview x1, kview d1, const int32_t *pos,
                             int n_rot, float base, float fscale)
{
    k_dep_enter();
    int64_t h = blockIdx.x;
    if (h < x0.ne[1])
        rope_row(x0, pos, d0, n_rot, base, fscale, h, blockIdx.y);
    else
        rope_row(x1, pos, d1, n_rot, base, fscale, h - x0.ne[1], blockIdx.y);
}

/* Every head of one token per block: a thread keeps pair i's angle and
 * rotates that pair in heads h0, h0 + hs, ... (rope_row computes the
 * angle per head: a 512-token prefill's q, 28 heads, took 19 us for 7 MB
 * on the H200, mostly powf and sincosf). Same bits as rope_row. */
__global__ void rope_tok_kernel(kview x, const int32_t *pos, kview dst, int n_rot, float base,
                                float fscale)
{
    k_dep_enter();
    const int64_t t = blockIdx.x, heads = x.ne[1], hd = x.ne[0];
    const int half = n_rot / 2, hs = half < (int)blockDim.x ? (int)blockDim.x / half : 1;
    const float p = (float)pos[t];
    for (int u = threadIdx.x; u < half * hs; u += blockDim.x) {
        int i = u % half, h0 = u / half;
        float cs, sn;
        rope_angle(i, p, n_rot, base, fscale, &cs, &sn);
        for (int64_t h = h0; h < heads; h += hs) {
            const float *xr = (const float *)((const char *)x.data + h * x.nb[1] + t * x.nb[2]);
            float *o = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]);
            rope_apply(xr[i], xr[i + half], cs, sn, o, i, half);
        }
    }
    const int64_t pass = hd - n_rot; /* columns past the rotated ones, copied */
    for (int64_t u = threadIdx.x; u < pass * heads; u += blockDim.x) {
        int64_t h = u / pass, i = n_rot + u % pass;
        ((float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]))[i] =
            ((const float *)((const char *)x.data + h * x.nb[1] + t * x.nb[2]))[i];
    }
}

/* From this many tokens a block per token (fewer angles) beats a block
 * per head and token (more blocks). */
#define ROPE_TOK_MIN 64

extern "C" int k_rope(struct kctx *k, struct kview x, const int32_t *pos, struct kview dst,
                      int n_rot, float freq_base, float freq_scale)
{
    if (x.ne[1] <= 0 || x.ne[1] > 0x7fffffff || x.ne[2] <= 0 || x.ne[2] > 65535 || x.ne[3] != 1)
        return k_fail(k, "rope", "shape outside [hd, 1..2^31-1, 1..65535, 1]");
    if (x.ne[2] >= ROPE_TOK_MIN && n_rot >= 2) {
        KLAUNCH(k, "rope", rope_tok_kernel, (unsigned)x.ne[2], 128, 0, x, pos, dst, n_rot,
                freq_base, freq_scale);
        return 0;
    }
    dim3 grid((unsigned)x.ne[1], (unsigned)x.ne[2]);
    KLAUNCH(k, "rope", rope_kernel, grid, 64, 0, x, pos, dst, n_rot, freq_base, freq_scale);
    return 0;
}

/* The general RoPE (MINFER_OP_ROPE / ROPE_DIV): NeoX or normal pairs,
 * Llama 3.1's frequency factors (fac, NULL: none) and YaRN (each pair's
 * angle mixes the scaled and the unscaled one by a ramp over pair
 * indices; cos and sin times mscale). The plain NeoX nodes keep the
 * kernels above, bit for bit. */
struct kyarn {
    float base, fscale, ext, mscale, lo, hi;
};

__global__ void rope_ext_kernel(kview x, const int32_t *pos, kview dst, int n_rot, int layout,
                                const float *fac, kyarn y)
{
    k_dep_enter();
    const int64_t h = blockIdx.x, t = blockIdx.y;
    const float *xr = (const float *)((const char *)x.data + h * x.nb[1] + t * x.nb[2]);
    float *o = (float *)((char *)dst.data + h * dst.nb[1] + t * dst.nb[2]);
    int half = n_rot / 2;
    float p = (float)pos[t];
    for (int i = threadIdx.x; i < x.ne[0]; i += blockDim.x) {
        if (i < half) {
            float te = p * powf(y.base, -2.0f * (float)i / (float)n_rot);
            if (fac)
                te /= fac[i];
            float th = te * y.fscale;
            if (y.ext > 0.0f) {
                float r = (i - y.lo) / fmaxf(0.001f, y.hi - y.lo);
                r = (1.0f - fminf(1.0f, fmaxf(0.0f, r))) * y.ext;
                th = th * (1.0f - r) + te * r;
            }
            float cs, sn;
            sincosf(th, &sn, &cs);
            cs *= y.mscale;
            sn *= y.mscale;
            int ia = layout ? 2 * i : i, ib = layout ? 2 * i + 1 : i + half;
            float a = xr[ia], b = xr[ib];
            o[ia] = a * cs - b * sn;
            o[ib] = a * sn + b * cs;
        } else if (i >= n_rot) {
            o[i] = xr[i];
        }
    }
}

extern "C" int k_rope_ext(struct kctx *k, struct kview x, const int32_t *pos, struct kview dst,
                          int n_rot, int layout, const float *factors, const float *fp)
{
    if (x.ne[1] <= 0 || x.ne[1] > 0x7fffffff || x.ne[2] <= 0 || x.ne[2] > 65535 || x.ne[3] != 1)
        return k_fail(k, "rope", "shape outside [hd, 1..2^31-1, 1..65535, 1]");
    kyarn y = {fp[0], fp[1], fp[2], fp[3] > 0.0f ? fp[3] : 1.0f, fp[4], fp[5]};
    dim3 grid((unsigned)x.ne[1], (unsigned)x.ne[2]);
    KLAUNCH(k, "rope_ext", rope_ext_kernel, grid, 64, 0, x, pos, dst, n_rot, layout, factors, y);
    return 0;
}

extern "C" int k_rope2(struct kctx *k, struct kview x0, struct kview d0, struct kview x1,
                       struct kview d1, const int32_t *pos, int n_rot, float freq_base,
                       float freq_scale)
{
    if (x0.ne[1] <= 0 || x1.ne[1] <= 0 || x0.ne[1] + x1.ne[1] > 0x7fffffff ||
        x0.ne[2] != x1.ne[2] || x0.ne[2] <= 0 || x0.ne[2] > 65535 || x0.ne[3] != 1 ||
        x1.ne[3] != 1)
        return k_fail(k, "rope2", "shapes outside [hd, heads, 1..65535 (equal), 1]");
    dim3 grid((unsigned)(x0.ne[1] + x1.ne[1]), (unsigned)x0.ne[2]);
    KLAUNCH(k, "rope2", rope2_kernel, grid, 64, 0, x0, d0, x1, d1, pos, n_rot, freq_base,
            freq_scale);
    return 0;
}

/* ---- element-wise ---- */

/* Block r * chunks + c covers elements c * blockDim.x + i * chunks *
 * blockDim.x of row r: a few rows of thousands of elements (a batched
 * decode's SwiGLU of gate and up, [18944, 4] for a 7B at nt = 4: exec.c,
 * FFN_GATE_UP past nt = 1) spread over many blocks instead of one block
 * per row, whose threads walked the row serially (85 us for 4 rows on
 * the H200, latency-bound; element-wise, so the same bits). */
__global__ void binary_kernel(int op, kview a, kview b, kview dst, int chunks)
{
    k_dep_enter();
    int64_t r = blockIdx.x / chunks;
    int c = (int)(blockIdx.x % chunks);
    int64_t i1 = r % a.ne[1], i23 = r / a.ne[1];
    int64_t i2 = i23 % a.ne[2], i3 = i23 / a.ne[2];
    const float *ar = (const float *)((const char *)a.data + i1 * a.nb[1] + i2 * a.nb[2] + i3 * a.nb[3]);
    const float *br = (const float *)((const char *)b.data + (i1 % b.ne[1]) * b.nb[1] +
                                      (i2 % b.ne[2]) * b.nb[2] + (i3 % b.ne[3]) * b.nb[3]);
    float *o = (float *)((char *)dst.data + i1 * dst.nb[1] + i2 * dst.nb[2] + i3 * dst.nb[3]);
    int64_t n = a.ne[0], nb0 = b.ne[0];
    for (int64_t i = (int64_t)c * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)chunks * blockDim.x) {
        float x = ar[i], y = br[nb0 == n ? i : i % nb0];
        float v;
        if (op == KBIN_ADD)
            v = x + y;
        else if (op == KBIN_MUL)
            v = x * y;
        else if (op == KBIN_GEGLU) /* tanh GELU (ir.h), in double like the CPU's */
            v = (float)(0.5 * (double)x *
                        (1.0 + tanh(0.7978845608028654 *
                                    ((double)x + 0.044715 * (double)x * x * x)))) * y;
        else
            v = x / (1.0f + expf(-x)) * y;
        o[i] = v;
    }
}

extern "C" int k_binary(struct kctx *k, int op, struct kview a, struct kview b, struct kview dst)
{
    int64_t rows = nrows(a);
    if (grid_ok(k, "binary", rows))
        return -1;
    /* enough blocks for ~2 per SM when there are few rows, at most one
     * per 128 elements of a row */
    int64_t per_row = (a.ne[0] + 127) / 128, want = (264 + rows - 1) / rows;
    int64_t chunks = per_row < want ? per_row : want;
    chunks = chunks < 1 ? 1 : chunks;
    while (chunks > 1 && rows * chunks > 0x7fffffff)
        chunks /= 2;
    KLAUNCH(k, op == KBIN_ADD ? "add" : op == KBIN_MUL ? "mul" : op == KBIN_GEGLU ? "geglu"
                                                                       : "swiglu",
            binary_kernel,
            (unsigned)(rows * chunks), 128, 0, op, a, b, dst, (int)chunks);
    return 0;
}

__global__ void scale_kernel(kview s, kview dst, float f)
{
    k_dep_enter();
    const float *sr = (const float *)view_row(s, blockIdx.x);
    float *o = (float *)view_row(dst, blockIdx.x);
    for (int64_t i = threadIdx.x; i < s.ne[0]; i += blockDim.x)
        o[i] = sr[i] * f;
}

extern "C" int k_scale(struct kctx *k, struct kview src, struct kview dst, float s)
{
    int64_t rows = nrows(src);
    if (grid_ok(k, "scale", rows))
        return -1;
    KLAUNCH(k, "scale", scale_kernel, (unsigned)rows, 128, 0, src, dst, s);
    return 0;
}

__global__ void copy_kernel(uint32_t st, kview s, uint32_t dt, kview dst)
{
    k_dep_enter();
    const char *sr = view_row(s, blockIdx.x);
    char *o = view_row(dst, blockIdx.x);
    for (int64_t i = threadIdx.x; i < s.ne[0]; i += blockDim.x) {
        float v;
        if (st == MINFER_TYPE_F32)
            v = ((const float *)sr)[i];
        else if (st == MINFER_TYPE_F16)
            v = h2f(((const uint16_t *)sr)[i]);
        else
            v = bf2f(((const uint16_t *)sr)[i]);
        if (dt == MINFER_TYPE_F32)
            ((float *)o)[i] = v;
        else if (dt == MINFER_TYPE_F16)
            ((uint16_t *)o)[i] = f2h(v);
        else
            ((uint16_t *)o)[i] = f2bf(v);
    }
}

extern "C" int k_copy(struct kctx *k, uint32_t src_type, struct kview src, uint32_t dst_type,
                      struct kview dst)
{
    int64_t rows = nrows(src);
    if (grid_ok(k, "copy", rows))
        return -1;
    KLAUNCH(k, "copy", copy_kernel, (unsigned)rows, 128, 0, src_type, src, dst_type, dst);
    return 0;
}

/* ---- KV store ---- */

/* One block per token; for Q8_0 one warp per 32-element block, with the
 * reference quantizer's arithmetic (amax/127, 1/d, roundf), so the cache
 * bytes equal the CPU's. */
static __device__ __forceinline__ void kv_store_row(const kview &src, const int32_t *cells,
                                                    uint32_t dt, uint8_t *dst, int64_t dst_nb1,
                                                    int64_t n_cells, unsigned *flags, int64_t t)
{
    int32_t c = cells[t];
    if (c < 0 || c >= n_cells) {
        if (threadIdx.x == 0)
            atomicOr(flags, KFLAG_KV_CELL);
        return;
    }
    const float *sr = (const float *)((const char *)src.data + t * src.nb[1]);
    uint8_t *o = dst + (int64_t)c * dst_nb1;
    int64_t n = src.ne[0];
    if (dt == MINFER_TYPE_F32) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            ((float *)o)[i] = sr[i];
    } else if (dt == MINFER_TYPE_F16) {
        for (int64_t i = threadIdx.x; i < n; i += blockDim.x)
            ((uint16_t *)o)[i] = f2h(sr[i]);
    } else {
        int lane = threadIdx.x % 32, nw = blockDim.x / 32;
        for (int64_t b = threadIdx.x / 32; b < n / 32; b += nw) {
            float v = sr[32 * b + lane];
            float amax = warp_max(fabsf(v));
            float d = amax / 127.0f;
            float id = d != 0.0f ? 1.0f / d : 0.0f;
            bq8_0 *blk = (bq8_0 *)o + b;
            blk->qs[lane] = (int8_t)roundf(v * id);
            if (lane == 0)
                blk->d = f2h(d);
        }
    }
}

__global__ void kv_store_kernel(kview src, const int32_t *cells, uint32_t dt, uint8_t *dst,
                                int64_t dst_nb1, int64_t n_cells, unsigned *flags)
{
    k_dep_enter();
    kv_store_row(src, cells, dt, dst, dst_nb1, n_cells, flags, blockIdx.x);
}

/* Two KV_STORE nodes with the same cells in one launch (blockIdx.y). */
__global__ void kv_store2_kernel(kview s0, uint32_t t0, uint8_t *d0, int64_t nb0, int64_t nc0,
                                 kview s1, uint32_t t1, uint8_t *d1, int64_t nb1, int64_t nc1,
                                 const int32_t *cells, unsigned *flags)
{
    k_dep_enter();
    if (blockIdx.y == 0)
        kv_store_row(s0, cells, t0, d0, nb0, nc0, flags, blockIdx.x);
    else
        kv_store_row(s1, cells, t1, d1, nb1, nc1, flags, blockIdx.x);
}

extern "C" int k_kv_store(struct kctx *k, struct kview src, const int32_t *cells,
                          uint32_t dst_type, void *dst, int64_t dst_nb1, int64_t n_cells)
{
    int64_t nt = src.ne[1];
    if (grid_ok(k, "kv_store", nt))
        return -1;
    if (dst_type == MINFER_TYPE_Q8_0 && src.ne[0] % 32)
        return k_fail(k, "kv_store", "Q8_0 cache row length is not a multiple of 32");
    KLAUNCH(k, "kv_store", kv_store_kernel, (unsigned)nt, 128, 0, src, cells, dst_type,
            (uint8_t *)dst, dst_nb1, n_cells, k->flags);
    return 0;
}

extern "C" int k_kv_store2(struct kctx *k, struct kview s0, uint32_t t0, void *d0, int64_t nb0,
                           int64_t nc0, struct kview s1, uint32_t t1, void *d1, int64_t nb1,
                           int64_t nc1, const int32_t *cells)
{
    int64_t nt = s0.ne[1];
    if (s1.ne[1] != nt)
        return k_fail(k, "kv_store2", "the two sources differ in token count");
    if (grid_ok(k, "kv_store2", nt))
        return -1;
    if ((t0 == MINFER_TYPE_Q8_0 && s0.ne[0] % 32) || (t1 == MINFER_TYPE_Q8_0 && s1.ne[0] % 32))
        return k_fail(k, "kv_store2", "Q8_0 cache row length is not a multiple of 32");
    dim3 grid((unsigned)nt, 2);
    KLAUNCH(k, "kv_store2", kv_store2_kernel, grid, 128, 0, s0, t0, (uint8_t *)d0, nb0, nc0, s1,
            t1, (uint8_t *)d1, nb1, nc1, cells, k->flags);
    return 0;
}

/* ---- RoPE of q and k with both KV stores, a block per token and head ---- */

/* The bytes before column col of a cache row of type t (F32, F16, Q8_0;
 * Q8_0 columns at whole blocks). */
static __device__ __forceinline__ int64_t cache_col_bytes(uint32_t t, int64_t col)
{
    return t == MINFER_TYPE_F32 ? 4 * col : t == MINFER_TYPE_F16 ? 2 * col : col / 32 * 34;
}

#define ROPE_KV_THREADS 64
#define ROPE_KV_MAX_HD 256

/* Block (t, j): head j of token t; q heads first (rope_row, rope_kernel's
 * own path), then k heads (rotated into shared memory, written to rk when
 * rk.data is set, and stored into the K cache's columns of that head),
 * then v heads (stored). kv_store_row stores each head as the whole row's
 * store would (F16 and F32 element-wise, Q8_0 by 32-value blocks inside
 * the head), so the caches get kv_store_kernel's bytes. */
__global__ void __launch_bounds__(ROPE_KV_THREADS)
    rope_kv_kernel(kview q, kview rq, kview kx, kview rk, const int32_t *pos, int n_rot,
                   float base, float fscale, struct kkv2 kv, unsigned *flags, int pos_fixed)
{
    const int64_t t = blockIdx.x, hq = q.ne[1], hk = kx.ne[1], hd = q.ne[0];
    const int half = n_rot / 2;
    /* pair threadIdx.x's angle, where one pass of the block covers the
     * pairs: before the wait when the host wrote pos (pos_fixed: no kernel
     * does), so powf and sincosf run under the predecessor's tail */
    const bool one = half <= (int)blockDim.x && (int)threadIdx.x < half;
    float cs = 0.0f, sn = 0.0f;
    if (pos_fixed && one)
        rope_angle((int)threadIdx.x, (float)pos[t], n_rot, base, fscale, &cs, &sn);
    k_dep_enter();
    if (!pos_fixed && one)
        rope_angle((int)threadIdx.x, (float)pos[t], n_rot, base, fscale, &cs, &sn);
    int64_t j = blockIdx.y;
    const bool k_head = j >= hq;
    if (k_head)
        j -= hq;
    if (!k_head || j < hk) {
        __shared__ float row[ROPE_KV_MAX_HD];
        /* scalars picked, not a reference to either parameter (which made
         * the compiler copy both views to the stack) */
        const char *xd = (const char *)(k_head ? kx.data : q.data);
        const int64_t xnb1 = k_head ? kx.nb[1] : q.nb[1], xnb2 = k_head ? kx.nb[2] : q.nb[2];
        const float *xr = (const float *)(xd + j * xnb1 + t * xnb2);
        /* a q head writes its row of rq; a k head rotates into shared memory */
        float *o = k_head ? row : (float *)((char *)rq.data + j * rq.nb[1] + t * rq.nb[2]);
        const float p = (float)pos[t];
        for (int i = threadIdx.x; i < hd; i += blockDim.x) {
            if (i < half && one) /* i is threadIdx.x: the angle above */
                rope_apply(xr[i], xr[i + half], cs, sn, o, i, half);
            else if (i < half)
                rope_rot(xr[i], xr[i + half], i, p, n_rot, base, fscale, o);
            else if (i >= n_rot)
                o[i] = xr[i];
        }
        if (!k_head)
            return;
        __syncthreads();
        if (rk.data) {
            float *o = (float *)((char *)rk.data + j * rk.nb[1] + t * rk.nb[2]);
            for (int i = threadIdx.x; i < hd; i += blockDim.x)
                o[i] = row[i];
        }
        kview s = {row, {hd, 1, 1, 1}, {4, 0, 0, 0}}; /* every token's row is this one */
        kv_store_row(s, kv.cells, kv.t0, (uint8_t *)kv.d0 + cache_col_bytes(kv.t0, j * hd),
                     kv.nb0, kv.nc0, flags, t);
        return;
    }
    j -= hk;
    kview s = kv.s1;
    s.data = (char *)s.data + j * hd * 4;
    s.ne[0] = hd;
    kv_store_row(s, kv.cells, kv.t1, (uint8_t *)kv.d1 + cache_col_bytes(kv.t1, j * hd), kv.nb1,
                 kv.nc1, flags, t);
}

extern "C" int k_rope_kv_ok(int64_t hd, uint32_t kt, uint32_t vt)
{
    bool ok = hd > 0 && hd <= ROPE_KV_MAX_HD && hd % 2 == 0;
    for (uint32_t t : {kt, vt})
        ok = ok && (t == MINFER_TYPE_F32 || t == MINFER_TYPE_F16 ||
                    (t == MINFER_TYPE_Q8_0 && hd % 32 == 0));
    return ok;
}

extern "C" int k_rope_kv(struct kctx *k, struct kview q, struct kview rq, struct kview kx,
                         struct kview rk, const int32_t *pos, int n_rot, float freq_base,
                         float freq_scale, const struct kkv2 *kv, unsigned fixed)
{
    const int64_t hd = q.ne[0], T = q.ne[2], hk = kx.ne[1];
    const int64_t hv = hd > 0 ? kv->s1.ne[0] / hd : 0;
    bool ok = k_rope_kv_ok(hd, kv->t0, kv->t1) && n_rot % 2 == 0 && n_rot <= hd &&
              kx.ne[0] == hd && q.ne[1] > 0 && hk > 0 && hv > 0 && kv->s1.ne[0] == hv * hd &&
              kv->s0.ne[0] == hk * hd && kx.ne[2] == T && rq.ne[2] == T && kv->s0.ne[1] == T &&
              kv->s1.ne[1] == T && T >= 1 && T <= 0x7fffffff && q.ne[3] == 1 && kx.ne[3] == 1 &&
              q.ne[1] + hk + hv <= 65535 && (!rk.data || rk.ne[2] == T);
    if (!ok)
        return k_fail(k, "rope_kv", "shapes outside [hd <= 256, heads, T] with K/V rows of "
                                    "whole heads in F32, F16 or Q8_0 (hd % 32 == 0)");
    dim3 grid((unsigned)T, (unsigned)(q.ne[1] + hk + hv));
    KLAUNCH(k, "rope_kv", rope_kv_kernel, grid, ROPE_KV_THREADS, 0, q, rq, kx, rk, pos, n_rot,
            freq_base, freq_scale, *kv, k->flags, (int)(fixed & K_FIXED_POS));
    return 0;
}

/* ---- per-head RMS norm + RoPE (+ KV store), one block per token ---- */

/* Two (RMS norm, RoPE) pairs of each token in one block: rows [0, h0) are
 * the first pair's heads, [h0, h0 + h1) the second's. Every read (x rows,
 * weights, position) happens before any write, and the writes go out in
 * the nodes' order (norms, rope 0, rope 1) with a barrier between them,
 * so any overlap of one token's buffers that the nodes run one after
 * another allow gives the same memory (the arena reuses freed tensors'
 * bytes for the next ones). Across tokens (blocks) nothing is ordered:
 * the caller keeps every write apart from what other tokens read
 * (fuse.c, rope_group). Values: the norm exactly as rms_norm_kernel (the
 * canonical sum, one warp per row), the rotation exactly as rope_kernel
 * (rope_angle once per pair index into shared memory, rope_apply). With
 * kv.cells set, the two KV stores that follow run last (kv_store_row, so
 * the cache bytes equal kv_store_kernel's), reading what the block wrote;
 * a second RoPE without r1.data (no later node reads it) rotates its rows
 * in shared memory, where the K store reads them. Each phase is one flat
 * pass over all threads: the first version looped per row and recomputed
 * the angles, 17 us per qwen3 layer. */
#define NORM_ROPE2_THREADS 1024

__global__ void __launch_bounds__(NORM_ROPE2_THREADS)
    norm_rope2_kernel(kview x0, const float *w0, kview n0, kview r0, float eps0, kview x1,
                      const float *w1, kview n1, kview r1, float eps1, const int32_t *pos,
                      int n_rot, float base, float fscale, struct kkv2 kv, unsigned *flags,
                      unsigned fixed)
{
    extern __shared__ __align__(16) float sm[]; /* rows x hd values, then cos, sin [half] */
    const int64_t t = blockIdx.x; /* the token: every view moves to its plane */
    int64_t hd = x0.ne[0], h0 = x0.ne[1], rows = h0 + x1.ne[1];
    int half = n_rot / 2;
    float *cs = sm + rows * hd, *sn = cs + half;
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    /* Before the wait, what no kernel writes (fixed, K_FIXED_*): the angle
     * table of host-written positions, and each lane's chunk of the two
     * norm weights for the one-chunk-a-lane rows below; their latency then
     * runs under the predecessor's tail. */
    const bool vec = hd % 4 == 0 && hd <= 128;
    const float4 one = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    float4 wq = one, wk = one;
    const bool w_early = (fixed & K_FIXED_W) && vec && lane < hd / 4;
    if (w_early) {
        wq = w0 ? load4(w0, lane, ((uintptr_t)w0 % 16) == 0) : one;
        wk = w1 ? load4(w1, lane, ((uintptr_t)w1 % 16) == 0) : one;
    }
    const bool pos_early = fixed & K_FIXED_POS;
    if (pos_early)
        rope_angle_table((float)pos[t], n_rot, base, fscale, cs, sn);
    k_dep_enter();
    x0.data = (char *)x0.data + t * x0.nb[2];
    x1.data = (char *)x1.data + t * x1.nb[2];
    r0.data = (char *)r0.data + t * r0.nb[2];
    if (n0.data)
        n0.data = (char *)n0.data + t * n0.nb[2];
    if (n1.data)
        n1.data = (char *)n1.data + t * n1.nb[2];
    if (r1.data)
        r1.data = (char *)r1.data + t * r1.nb[2];
    if (!pos_early)
        rope_angle_table((float)pos[t], n_rot, base, fscale, cs, sn);
    if (vec) {
        /* a chunk of 4 per lane: each warp loads its two rows' x and w at
         * once, then reduces (the canonical order for rows of <= 32
         * chunks: one virtual warp) */
        int64_t nc = hd / 4;
        float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        for (int64_t ra = warp; ra < rows; ra += 2 * nw) {
            float4 xv[2], wv[2];
            bool live[2], normed[2], has_w[2];
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int64_t r = ra + j * nw;
                bool second = r >= h0;
                const float *w = second ? w1 : w0;
                const float *xr = second ? (const float *)((const char *)x1.data + (r - h0) * x1.nb[1])
                                         : (const float *)((const char *)x0.data + r * x0.nb[1]);
                live[j] = r < rows && lane < nc;
                normed[j] = (second ? n1.data : n0.data) != NULL;
                has_w[j] = w != NULL;
                xv[j] = live[j] ? load4(xr, lane, ((uintptr_t)xr % 16) == 0) : zero;
                wv[j] = w_early ? (second ? wk : wq)
                        : live[j] && w ? load4(w, lane, ((uintptr_t)w % 16) == 0) : one;
            }
#pragma unroll
            for (int j = 0; j < 2; j++) {
                int64_t r = ra + j * nw;
                if (r >= rows)
                    break; /* uniform over the warp */
                float4 v = xv[j];
                if (normed[j])
                    v = norm_row4(v, live[j], wv[j], has_w[j], hd, r >= h0 ? eps1 : eps0);
                if (live[j])
                    ((float4 *)(sm + r * hd))[lane] = v;
            }
        }
    } else {
        for (int64_t r = warp; r < rows; r += nw) {
            bool second = r >= h0;
            const float *w = second ? w1 : w0;
            const float *xr = second ? (const float *)((const char *)x1.data + (r - h0) * x1.nb[1])
                                     : (const float *)((const char *)x0.data + r * x0.nb[1]);
            float *s = sm + r * hd;
            bool normed = (second ? n1.data : n0.data) != NULL;
            float scale = normed ? rms_scale_warp(xr, hd, second ? eps1 : eps0) : 1.0f;
            for (int64_t i = lane; i < hd; i += 32)
                s[i] = normed ? norm_val(xr[i], scale, w, i) : xr[i];
        }
    }
    __syncthreads();
    int64_t all = rows * hd;
    if (n0.data || n1.data) {
        for (int64_t e = threadIdx.x; e < all; e += blockDim.x) {
            int64_t r = e / hd, i = e % hd;
            char *d = NULL;
            if (r < h0 && n0.data)
                d = (char *)n0.data + r * n0.nb[1];
            else if (r >= h0 && n1.data)
                d = (char *)n1.data + (r - h0) * n1.nb[1];
            if (d)
                ((float *)d)[i] = sm[e];
        }
        __syncthreads();
    }
    /* the second RoPE in place in shared memory when only the K store
     * reads it (each pair is read, then written, by one thread) */
    const bool k_in_smem = !r1.data && kv.cells;
    for (int second = 0; second < 2; second++) {
        char *d = (char *)(second ? r1.data : r0.data);
        int64_t dnb = second ? r1.nb[1] : r0.nb[1];
        if (second && k_in_smem) {
            d = (char *)(sm + h0 * hd);
            dnb = hd * (int64_t)sizeof(float);
        }
        int64_t lo = second ? h0 : 0, cnt = d ? (second ? rows - h0 : h0) : 0;
        for (int64_t e = threadIdx.x; e < cnt * hd; e += blockDim.x) {
            int64_t rr = e / hd;
            int i = (int)(e % hd);
            const float *v = sm + (lo + rr) * hd;
            float *o = (float *)(d + rr * dnb);
            if (i < half)
                rope_apply(v[i], v[i + half], cs[i], sn[i], o, i, half);
            else if (i >= n_rot)
                o[i] = v[i];
        }
        __syncthreads();
    }
    if (kv.cells) {
        kview s0 = kv.s0;
        if (k_in_smem) { /* row t of the source is the rotated rows */
            s0.data = sm + h0 * hd;
            s0.nb[1] = 0;
        }
        kv_store_row(s0, kv.cells, kv.t0, (uint8_t *)kv.d0, kv.nb0, kv.nc0, flags, t);
        kv_store_row(kv.s1, kv.cells, kv.t1, (uint8_t *)kv.d1, kv.nb1, kv.nc1, flags, t);
    }
}

extern "C" size_t k_norm_rope2_smem(int64_t hd, int64_t heads)
{
    return (size_t)hd * (size_t)(heads + 1) * sizeof(float); /* + the angle table */
}

extern "C" int k_norm_rope2(struct kctx *k, struct kview x0, const float *w0, struct kview n0,
                            struct kview r0, float eps0, struct kview x1, const float *w1,
                            struct kview n1, struct kview r1, float eps1, const int32_t *pos,
                            int n_rot, float freq_base, float freq_scale,
                            const struct kkv2 *kv, unsigned fixed)
{
    const int64_t T = x0.ne[2];
    const struct kview *planes[5] = {&x1, &n0, &r0, &n1, &r1};
    bool shape_ok = x0.ne[1] > 0 && x1.ne[1] > 0 && x0.ne[0] == x1.ne[0] && T >= 1 &&
                    T <= 65535 && x0.ne[3] == 1 && x1.ne[3] == 1 && n_rot <= x0.ne[0] &&
                    r0.data && k_norm_rope2_smem(x0.ne[0], x0.ne[1] + x1.ne[1]) <= 48 * 1024;
    for (const struct kview *v : planes)
        shape_ok = shape_ok && (!v->data || v->ne[2] == T);
    if (!shape_ok)
        return k_fail(k, "norm_rope2", "shapes outside [hd, heads, T, 1] (equal hd and T, "
                                       "<= 48 KiB per token)");
    struct kkv2 none = {};
    if (kv && (kv->s0.ne[1] != T || kv->s1.ne[1] != T || kv->s0.ne[0] != x1.ne[0] * x1.ne[1] ||
               (kv->t0 == MINFER_TYPE_Q8_0 && kv->s0.ne[0] % 32) ||
               (kv->t1 == MINFER_TYPE_Q8_0 && kv->s1.ne[0] % 32)))
        return k_fail(k, "norm_rope2", "KV stores of another token count or row, or a Q8_0 row "
                                       "not a multiple of 32");
    if (!r1.data && !kv)
        return k_fail(k, "norm_rope2", "the second RoPE writes nowhere");
    size_t smem = k_norm_rope2_smem(x0.ne[0], x0.ne[1] + x1.ne[1]);
    KLAUNCH(k, "norm_rope2", norm_rope2_kernel, (unsigned)T, NORM_ROPE2_THREADS, smem, x0, w0,
            n0, r0, eps0, x1, w1, n1, r1, eps1, pos, n_rot, freq_base, freq_scale,
            kv ? *kv : none, k->flags, fixed);
    return 0;
}

/* ---- one token's norm/RoPE group and KV stores, a block per group of heads ---- */

#define NORM_ROPE_KV_MAX_WARPS 32

/* Heads g, g + blocks, ... below n: how many. */
static __device__ __forceinline__ int heads_of_block(int64_t n, int g, int blocks)
{
    return n > g ? (int)((n - g + blocks - 1) / blocks) : 0;
}

/* Block g reads its q and k rows and its V heads into shared memory, and
 * only past one barrier writes (norm outputs, RoPE outputs, the caches),
 * so its writes may land on its own sources. Each row is a warp's: the
 * norm as norm_rope2_kernel's one-chunk-a-lane rows (rms_scale_warp for
 * other widths), the rotation by rope_angle and rope_apply; k rows rotate
 * in place for the K store, which with the V store runs last over the
 * block (kv_store_row, a head at a time). */
__global__ void __launch_bounds__(NORM_ROPE_KV_MAX_WARPS * 32)
    norm_rope_kv_kernel(struct knr q, struct knr kx, const int32_t *pos, int n_rot, float base,
                        float fscale, struct kkv2 kv, unsigned *flags, unsigned fixed)
{
    extern __shared__ __align__(16) float sm[]; /* rows, V heads (hd each), cos, sin */
    const int blocks = gridDim.x, g = blockIdx.x;
    const int hd = (int)q.x.ne[0], half = n_rot / 2;
    const int nq = heads_of_block(q.x.ne[1], g, blocks), nk = heads_of_block(kx.x.ne[1], g, blocks);
    const int nv = heads_of_block(kv.s1.ne[0] / hd, g, blocks), rows = nq + nk;
    float *sv = sm + rows * hd, *cs = sv + nv * hd, *sn = cs + half;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nw = blockDim.x / 32;
    const bool vec = hd % 4 == 0 && hd <= 128; /* one 4-value chunk a lane */
    const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f), one = make_float4(1.0f, 1.0f, 1.0f, 1.0f);
    /* what no kernel writes (fixed) is read before the wait */
    const bool w_early = (fixed & K_FIXED_W) && vec && lane < hd / 4;
    float4 wq = one, wk = one;
    if (w_early) {
        wq = q.w ? load4(q.w, lane, ((uintptr_t)q.w % 16) == 0) : one;
        wk = kx.w ? load4(kx.w, lane, ((uintptr_t)kx.w % 16) == 0) : one;
    }
    if (fixed & K_FIXED_POS)
        rope_angle_table((float)pos[0], n_rot, base, fscale, cs, sn);
    k_dep_enter();
    if (!(fixed & K_FIXED_POS))
        rope_angle_table((float)pos[0], n_rot, base, fscale, cs, sn);
    for (int r = warp; r < rows; r += nw) {
        const struct knr &p = r < nq ? q : kx;
        const int64_t h = g + (int64_t)(r < nq ? r : r - nq) * blocks;
        const float *xr = (const float *)((const char *)p.x.data + h * p.x.nb[1]);
        float *s = sm + r * hd;
        if (vec && lane < hd / 4)
            ((float4 *)s)[lane] = load4(xr, lane, ((uintptr_t)xr % 16) == 0);
        else if (!vec)
            for (int i = lane; i < hd; i += 32)
                s[i] = xr[i];
    }
    for (int e = threadIdx.x; e < nv * hd; e += blockDim.x)
        sv[e] = ((const float *)kv.s1.data)[(g + (int64_t)(e / hd) * blocks) * hd + e % hd];
    __syncthreads(); /* every source of the block read: its writes may start */
    for (int r = warp; r < rows; r += nw) {
        const bool k_row = r >= nq;
        const struct knr &p = k_row ? kx : q;
        const int64_t h = g + (int64_t)(k_row ? r - nq : r) * blocks;
        float *s = sm + r * hd;
        float *no = p.n.data ? (float *)((char *)p.n.data + h * p.n.nb[1]) : NULL;
        if (vec) {
            const bool live = lane < hd / 4;
            float4 v = live ? ((const float4 *)s)[lane] : zero;
            float4 w = w_early ? (k_row ? wk : wq)
                       : live && p.w ? load4(p.w, lane, ((uintptr_t)p.w % 16) == 0) : one;
            v = norm_row4(v, live, w, p.w != NULL, hd, p.eps);
            if (live) {
                ((float4 *)s)[lane] = v;
                if (no) {
                    no[4 * lane] = v.x;
                    no[4 * lane + 1] = v.y;
                    no[4 * lane + 2] = v.z;
                    no[4 * lane + 3] = v.w;
                }
            }
        } else {
            float scale = rms_scale_warp(s, hd, p.eps);
            for (int i = lane; i < hd; i += 32) {
                s[i] = norm_val(s[i], scale, p.w, i);
                if (no)
                    no[i] = s[i];
            }
        }
        __syncwarp();
        /* q rows rotate into r; k rows in place (each pair is read, then
         * written, by one lane), copied out to r when a later node reads it */
        float *o = k_row ? s : (float *)((char *)p.r.data + h * p.r.nb[1]);
        for (int i = lane; i < half; i += 32)
            rope_apply(s[i], s[i + half], cs[i], sn[i], o, i, half);
        for (int i = n_rot + lane; i < hd && !k_row; i += 32)
            o[i] = s[i];
        if (k_row && p.r.data) {
            __syncwarp();
            float *ro = (float *)((char *)p.r.data + h * p.r.nb[1]);
            for (int i = lane; i < hd; i += 32)
                ro[i] = s[i];
        }
    }
    __syncthreads();
    for (int r = 0; r < nk + nv; r++) {
        const bool k_head = r < nk;
        const int64_t h = g + (int64_t)(k_head ? r : r - nk) * blocks;
        kview src = {k_head ? sm + (nq + r) * hd : sv + (r - nk) * hd, {hd, 1, 1, 1}, {4, 0, 0, 0}};
        if (k_head)
            kv_store_row(src, kv.cells, kv.t0, (uint8_t *)kv.d0 + cache_col_bytes(kv.t0, h * hd),
                         kv.nb0, kv.nc0, flags, 0);
        else
            kv_store_row(src, kv.cells, kv.t1, (uint8_t *)kv.d1 + cache_col_bytes(kv.t1, h * hd),
                         kv.nb1, kv.nc1, flags, 0);
    }
}

extern "C" int k_norm_rope_kv(struct kctx *k, const struct knr *q, const struct knr *kx,
                              int blocks, const int32_t *pos, int n_rot, float freq_base,
                              float freq_scale, const struct kkv2 *kv, unsigned fixed)
{
    const int64_t hd = q->x.ne[0], hq = q->x.ne[1], hk = kx->x.ne[1];
    const int64_t hv = hd > 0 ? kv->s1.ne[0] / hd : 0;
    bool ok = k_rope_kv_ok(hd, kv->t0, kv->t1) && kx->x.ne[0] == hd && n_rot % 2 == 0 &&
              n_rot <= hd && hq > 0 && hk > 0 && hv > 0 && kv->s1.ne[0] == hv * hd &&
              kv->s0.ne[0] == hk * hd && kv->s0.ne[1] == 1 && kv->s1.ne[1] == 1 &&
              q->x.ne[2] == 1 && kx->x.ne[2] == 1 && q->x.ne[3] == 1 && kx->x.ne[3] == 1 &&
              q->r.data && blocks >= 1 && blocks <= 65535;
    if (!ok)
        return k_fail(k, "norm_rope_kv", "shapes outside one token's [hd <= 256, heads] with K/V "
                                         "rows of whole heads in F32, F16 or Q8_0");
    /* block 0 has the most rows */
    int64_t rows = (hq + blocks - 1) / blocks + (hk + blocks - 1) / blocks;
    size_t smem = sizeof(float) * (size_t)((rows + (hv + blocks - 1) / blocks) * hd + n_rot);
    if (smem > 48 * 1024)
        return k_fail(k, "norm_rope_kv", "a block's rows need more than 48 KiB");
    unsigned threads = 32 * (unsigned)(rows < NORM_ROPE_KV_MAX_WARPS ? rows : NORM_ROPE_KV_MAX_WARPS);
    KLAUNCH(k, "norm_rope_kv", norm_rope_kv_kernel, (unsigned)blocks, threads, smem, *q, *kx, pos,
            n_rot, freq_base, freq_scale, *kv, k->flags, fixed);
    return 0;
}

/* ---- programmatic dependent launch (common.cuh) ---- */

int g_k_dep_launch = 1;

extern "C" void k_tune_dep_launch(int on)
{
    g_k_dep_launch = on != 0;
}

/* The device's capability, and the PTX target of the code that runs there
 * (rms_norm_kernel stands for every kernel: one build target): a kernel
 * JIT-compiled from PTX below 9.0 has no griddepcontrol.wait in it. */
extern "C" void k_dep_probe(struct kctx *k)
{
    struct cudaFuncAttributes a;
    k->dep_launch = 0;
    if (k->cc < 90)
        return;
    if (cudaFuncGetAttributes(&a, (const void *)rms_norm_kernel) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    k->dep_launch = a.ptxVersion >= 90;
}
