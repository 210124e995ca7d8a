/*
 * matvec.cu — decode matrix-vector products (nt = 1..8).
 *
 * Quantized weights: activations are first quantized on the device into
 * q8_1-style blocks (32 int8 + float2 (d, d*sum)); one warp computes one
 * output row for up to 8 activation columns with dp4a, each lane taking
 * one "unit" (a 32-element block, or 64 elements of a K-quant super-block)
 * per step, so the warp streams the row contiguously. F32/F16/BF16 weights
 * use f32 activations and FMA.
 *
 * Instantiations: 8 quantized types x NT in {1, 2, 4, 8} + 3 float types
 * x the same NT set (nt = 3 runs the NT = 4 kernel with a guard).
 */
#include "common.cuh"
#include "matvec-units.cuh"

/* ---- activation quantization ---- */

__global__ void quantize_q8_1_kernel(const float *x, int64_t K, int64_t M, int64_t x_nb1,
                                     uint8_t *out)
{
    k_dep_enter();
    int nb = (int)(K / 32);
    int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (int64_t)nb * M)
        return;
    int64_t m = w / nb;
    int blk = (int)(w % nb);
    float v = *(const float *)((const char *)x + m * x_nb1 + (blk * 32 + lane) * sizeof(float));
    q8_1_store_warp(out, m, nb, blk * 32 + lane, v, lane);
}

/* The same blocks with one scale per 256 values (the CPU's Q8_K rule,
 * quant_q8k: id = 127 / amax, q = rint(x id), d = amax / 127): one warp
 * per 256, lane l holding values l, l + 32, ... of it; each of the 8
 * blocks gets the pair (d, d * its sum). */
__global__ void quantize_q8_1_g256_kernel(const float *x, int64_t K, int64_t M, int64_t x_nb1,
                                          uint8_t *out)
{
    k_dep_enter();
    int nb = (int)(K / 32), ng = (int)(K / 256);
    int64_t w = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    int lane = threadIdx.x % 32;
    if (w >= (int64_t)ng * M)
        return;
    int64_t m = w / ng;
    int g = (int)(w % ng);
    const float *xr = (const float *)((const char *)x + m * x_nb1) + 256 * g;
    float v[8], amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        v[i] = xr[32 * i + lane];
        amax = fmaxf(amax, fabsf(v[i]));
    }
    amax = warp_max(amax);
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    uint8_t *row = out + (size_t)m * (size_t)nb * 40;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = __float2int_rn(v[i] * id);
        float s = warp_sum((float)q);
        ((int8_t *)row)[256 * g + 32 * i + lane] = (int8_t)q;
        if (lane == 0)
            ((float2 *)(row + 32 * (size_t)nb))[8 * g + i] = make_float2(d, d * s);
    }
}

extern "C" size_t k_q8_1_bytes(int64_t K, int64_t M)
{
    return (size_t)(K / 32) * 40 * (size_t)M;
}

extern "C" int k_quantize_q8_1(struct kctx *k, const float *x, int64_t K, int64_t M,
                               int64_t x_nb1, int group, void *xq)
{
    if (group != 32 && group != 256)
        return k_fail(k, "quantize_q8_1", "the group must be 32 or 256 values");
    if (group == 256) {
        if (K % 256)
            return k_fail(k, "quantize_q8_1", "K is not a multiple of 256");
        int64_t blocks = ((K / 256) * M + 7) / 8;
        KLAUNCH(k, "quantize_q8_1", quantize_q8_1_g256_kernel, (unsigned)blocks, 256, 0, x, K, M,
                x_nb1, (uint8_t *)xq);
        return 0;
    }
    if (K % 32)
        return k_fail(k, "quantize_q8_1", "K is not a multiple of 32");
    int64_t warps = (K / 32) * M;
    int64_t blocks = (warps + 7) / 8;
    KLAUNCH(k, "quantize_q8_1", quantize_q8_1_kernel, (unsigned)blocks, 256, 0, x, K, M, x_nb1,
            (uint8_t *)xq);
    return 0;
}

/* ---- the quantized kernel ---- */

#define MV_THREADS 128

/* Threads per output row (a power of two, 4..128): enough threads in
 * total to fill the GPU (~270K resident threads on 132 SMs) but no more
 * than the row has units, so short rows share a warp and few long rows
 * (ffn_down: 3584 rows) spread over a whole block. Measured on H200:
 * occupancy, not bytes in flight per thread, is what the quantized
 * kernels were short of. */
static int rows_tpr(int64_t N, int64_t nunits, int min_units = 1)
{
    int64_t fill = (2 * 270336 + N - 1) / N; /* 2x the resident threads */
    int tpr = 4;
    while (tpr < MV_THREADS && tpr < fill && tpr * min_units < nunits)
        tpr *= 2;
    /* Vocabulary heads (65,536 row groups and more; the rule above gives
     * them 8 threads) take twice the threads where that leaves no lane
     * idle that was busy: qwen3-8b's q6_K head, 64 units a row, went 8 ->
     * 16 for tg128 1.01-1.02x. Doubling where the last step then idles
     * lanes (the 1.5B's head, 24 units a row) lost 1-2%, and doubling
     * every product's threads lost on the 7B (docs/PERF.md, session 20). */
    const int64_t steps = (nunits + tpr - 1) / tpr, steps2 = (nunits + 2 * tpr - 1) / (2 * tpr);
    if (tpr < MV_THREADS && N >= 65536 && steps2 * 2 * tpr <= steps * tpr)
        tpr *= 2;
    return tpr;
}

static int g_pair_tpr = 0;

/* Benchmark hook: threads per row group of the nt = 1 two-row and gate/up
 * kernels (a power of two, 4..128; 0: rows_tpr's rule). */
extern "C" void k_tune_matvec_tpr(int tpr)
{
    g_pair_tpr = tpr >= 4 && tpr <= MV_THREADS && !(tpr & (tpr - 1)) ? tpr : 0;
}

/* Threads per row group of the nt = 1 kernels that take two rows a group
 * (groups: the row pairs, or the gate/up rows; U: values a unit). One
 * function for the single product and the Q/K/V group, so both sum in the
 * same order. Units of 32 values get two a lane at least: a 3584-value
 * Q8_0 row (112 units) on 128 threads left each lane one unit and a
 * 3584-row product 1,792 blocks, more than the SMs hold at once; on 64
 * threads its 896 blocks are all resident during the predecessor's tail
 * (7 blocks an SM at 72 registers), their units loaded before the wait
 * (First2). tg128 of the 7B Q8_0 file on the H200: 1.025x for this rule,
 * 1.03x with the two units (docs/PERF.md, session 29). Q4_0, Q4_1, Q5_0
 * and Q5_1 share the rule, unmeasured. */
static int pair_tpr(int64_t groups, int64_t nunits, int U)
{
    return g_pair_tpr ? g_pair_tpr : rows_tpr(groups, nunits, U == 32 ? 2 : 1);
}

/* Optional epilogue (kepi): dst2[row, t] = acc + add[row, t] written
 * instead of dst, add's columns add_nb1 bytes apart (0: one vector
 * broadcast). */
struct kepi_d {
    const float *add;
    int64_t add_nb1;
    float *dst2;
    int64_t dst2_nb1;
};

/* Sums acc[C] over the tpr threads of a row group; the sums are valid on
 * lane 0. tpr <= 32: a segmented shuffle inside the warp; 64/128: the
 * warps of the group meet in shared memory. Every thread of the block
 * must call it (a barrier when tpr > 32; rows past N are computed on row
 * N-1 so that all threads reach it). */
template <int C>
__device__ __forceinline__ void group_sum(float *acc, int tpr, int lane)
{
    __shared__ float red[C][MV_THREADS / 32];
    int span = tpr < 32 ? tpr : 32;
#pragma unroll
    for (int t = 0; t < C; t++)
        for (int o = span / 2; o > 0; o >>= 1)
            acc[t] += __shfl_xor_sync(0xffffffffu, acc[t], o);
    if (tpr > 32) {
        if (threadIdx.x % 32 == 0)
#pragma unroll
            for (int t = 0; t < C; t++)
                red[t][threadIdx.x / 32] = acc[t];
        __syncthreads();
        if (lane == 0) {
            int w0 = threadIdx.x / 32, nw = tpr / 32;
#pragma unroll
            for (int t = 0; t < C; t++) {
                float v = 0.0f;
                for (int w = 0; w < nw; w++)
                    v += red[t][w0 + w];
                acc[t] = v;
            }
        }
    }
}

/* Column t of row: v into dst, or v + add into dst2 with the epilogue. */
__device__ __forceinline__ void store_col(float v, int t, int row, float *dst, int64_t dst_nb1,
                                          const kepi_d &e)
{
    if (e.dst2)
        *(float *)((char *)e.dst2 + t * e.dst2_nb1 + (int64_t)row * 4) =
            v + *(const float *)((const char *)e.add + t * e.add_nb1 + (int64_t)row * 4);
    else
        *(float *)((char *)dst + t * dst_nb1 + (int64_t)row * 4) = v;
}

/* Sums acc[NT] over the tpr threads of a row; thread 0 of the row writes. */
template <int NT>
__device__ __forceinline__ void row_store(float *acc, int tpr, int lane, bool live, int M,
                                          int row, float *dst, int64_t dst_nb1, kepi_d e)
{
    group_sum<NT>(acc, tpr, lane);
    if (lane == 0 && live)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (NT == 1 || t < M)
                store_col(acc[t], t, row, dst, dst_nb1, e);
}

template <int T, int NT>
__global__ void __launch_bounds__(MV_THREADS, NT <= 2 ? 8 : 4)
    mmvq_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, const uint8_t *__restrict__ xq,
                int nb, int nunits, int N, int M, float *dst, int64_t dst_nb1,
                int tpr, kepi_d e)
{
    int row = blockIdx.x * (MV_THREADS / tpr) + threadIdx.x / tpr;
    int lane = threadIdx.x % tpr;
    bool live = row < N;
    const uint8_t *wr = W + (int64_t)(live ? row : N - 1) * w_nb1;
    k_dep_enter();
    const size_t xstride = (size_t)nb * 40;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    for (int u = lane; u < nunits; u += tpr) {
        Unit<T> w;
        w.load(wr, u);
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (NT == 1 || t < M)
                acc[t] += w.dot(xq + t * xstride, nb, u);
    }
    row_store<NT>(acc, tpr, lane, live, M, row, dst, dst_nb1, e);
}

/* acc[t] (row wa) and acc[NT + t] (row wb) for the first M of NT
 * activation columns, each activation block loaded once for both rows, by
 * the tpr threads of a row group (lane: index in it); then the group's
 * reduction, the sums valid on lane 0. Every thread of the block must
 * reach it (a barrier when tpr > 32). A macro, not a function: written as
 * an inline function, the same code left nvcc with other register numbers
 * and ptxas scheduled 48 of these kernels differently. */
#define MV_DOT2N(T, NT, acc, wa, wb, xq, nb, nunits, M, lane, tpr)                             \
    do {                                                                                       \
        const size_t xstride_ = (size_t)(nb) * 40;                                             \
        _Pragma("unroll")                                                                      \
        for (int t_ = 0; t_ < 2 * (NT); t_++)                                                  \
            (acc)[t_] = 0.0f;                                                                  \
        for (int u_ = (lane); u_ < (nunits); u_ += (tpr)) {                                    \
            Unit<T> w0_, w1_;                                                                  \
            w0_.load((wa), u_);                                                                \
            w1_.load((wb), u_);                                                                \
            _Pragma("unroll")                                                                  \
            for (int t_ = 0; t_ < (NT); t_++)                                                  \
                if (t_ < (M)) {                                                                \
                    const uint8_t *xr_ = (xq) + t_ * xstride_;                                 \
                    (acc)[t_] += w0_.dot(xr_, (nb), u_);                                       \
                    (acc)[(NT) + t_] += w1_.dot(xr_, (nb), u_);                                \
                }                                                                              \
        }                                                                                      \
        group_sum<2 * (NT)>((acc), (tpr), (lane));                                             \
    } while (0)

/* nt = 2..8 with two rows per thread group (rows ra and ra + rpb): each
 * activation block loaded for a column serves both rows. With one row per
 * group the kernel read NT activation blocks (80 bytes each for a
 * K-quant unit) per 36 weight bytes, from L1, and ran ~4x slower per
 * weight byte than nt = 1 on the H200 (36 us per 7B q4_K product at nt =
 * 4); two rows halve that traffic. Measured on the H200 (docs/PERF.md,
 * many sequences): 0-8% faster than one row (q6_K nt = 8 93.8 vs 100.6
 * us, q4_K nt = 4 48.9 vs 48.2), so that traffic was not what limits
 * these kernels. Same row split and epilogue as mmvq_kernel. */
template <int T, int NT>
__global__ void __launch_bounds__(MV_THREADS, 4)
    mmvqn2_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, const uint8_t *__restrict__ xq,
                  int nb, int nunits, int N, int M, float *dst, int64_t dst_nb1, int tpr,
                  kepi_d e)
{
    int rpb = MV_THREADS / tpr;
    int ra = blockIdx.x * 2 * rpb + threadIdx.x / tpr, rb = ra + rpb;
    int lane = threadIdx.x % tpr;
    bool la = ra < N, lb = rb < N;
    const uint8_t *wa = W + (int64_t)(la ? ra : N - 1) * w_nb1;
    const uint8_t *wb = W + (int64_t)(lb ? rb : N - 1) * w_nb1;
    k_dep_enter();
    float acc[2 * NT];
    MV_DOT2N(T, NT, acc, wa, wb, xq, nb, nunits, M, lane, tpr);
    if (lane != 0)
        return;
#pragma unroll
    for (int r = 0; r < 2; r++) {
        int row = r ? rb : ra;
        if (!(r ? lb : la))
            continue;
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= M)
                break;
            store_col(acc[r * NT + t], t, row, dst, dst_nb1, e);
        }
    }
}

/* Each thread's first PRE weight units (0, 1 or 2) of rows wa and wb,
 * loaded before the kernel's dependent-launch wait (weights are memory no
 * kernel writes, common.cuh's rule): a block resident during the
 * predecessor's tail then has them in registers when x is ready. Only
 * Q8_0 does: tg128 of the 7B Q8_0 file 1.06-1.07x with one unit, where
 * the same order took q4_K's kernels from 71 to 80 registers and lost
 * 3-7% (docs/PERF.md, session 22; the switch over types of the Q/K/V
 * group spilled with it). Two units: the plain Q8_0 product, whose
 * 3584-value rows (112 units) take 64 threads a row (pair_tpr), so the
 * whole row pair is in registers before the wait. */
template <int T, int PRE> struct First2 {
    static_assert(PRE == 1, "0, 1 or 2 units before the wait");
    Unit<T> w0, w1;
    __device__ __forceinline__ First2(const uint8_t *wa, const uint8_t *wb, int lane, int nunits,
                                      int)
    {
        if (lane < nunits) {
            w0.load(wa, lane);
            w1.load(wb, lane);
        }
    }
};
template <int T> struct First2<T, 2> {
    Unit<T> w0, w1, v0, v1; /* units lane and lane + tpr */
    __device__ __forceinline__ First2(const uint8_t *wa, const uint8_t *wb, int lane, int nunits,
                                      int tpr)
    {
        if (lane < nunits) {
            w0.load(wa, lane);
            w1.load(wb, lane);
        }
        if (lane + tpr < nunits) {
            v0.load(wa, lane + tpr);
            v1.load(wb, lane + tpr);
        }
    }
};
template <int T> struct First2<T, 0> { /* holds nothing: the loop loads every unit */
    __device__ __forceinline__ First2(const uint8_t *, const uint8_t *, int, int, int) {}
};

/* Two weight rows' dot products with one x (the tpr threads of a row
 * group, lane = index in it), after the wait: the unit loop (with PRE
 * from f's units, each next unit loaded after the dots), then the group's
 * reduction; the sums are valid on lane 0. Every thread of the block must
 * call it (a barrier when tpr > 32). */
template <int T, int PRE>
__device__ __forceinline__ void dot2_rows(First2<T, PRE> &f, const uint8_t *wa,
                                          const uint8_t *wb, const uint8_t *__restrict__ xq,
                                          int nb, int nunits, int lane, int tpr, float &a0,
                                          float &a1)
{
    a0 = 0.0f;
    a1 = 0.0f;
    if constexpr (PRE == 2) { /* two units in flight; the same order of sums */
        for (int u = lane; u < nunits; u += 2 * tpr) {
            a0 += f.w0.dot(xq, nb, u);
            a1 += f.w1.dot(xq, nb, u);
            if (u + 2 * tpr < nunits) {
                f.w0.load(wa, u + 2 * tpr);
                f.w1.load(wb, u + 2 * tpr);
            }
            const int v = u + tpr;
            if (v < nunits) {
                a0 += f.v0.dot(xq, nb, v);
                a1 += f.v1.dot(xq, nb, v);
                if (v + 2 * tpr < nunits) {
                    f.v0.load(wa, v + 2 * tpr);
                    f.v1.load(wb, v + 2 * tpr);
                }
            }
        }
    } else if constexpr (PRE == 1) {
        for (int u = lane; u < nunits; u += tpr) {
            a0 += f.w0.dot(xq, nb, u);
            a1 += f.w1.dot(xq, nb, u);
            if (u + tpr < nunits) {
                f.w0.load(wa, u + tpr);
                f.w1.load(wb, u + tpr);
            }
        }
    } else {
        for (int u = lane; u < nunits; u += tpr) {
            Unit<T> w0, w1;
            w0.load(wa, u);
            w1.load(wb, u);
            a0 += w0.dot(xq, nb, u);
            a1 += w1.dot(xq, nb, u);
        }
    }
    __shared__ float red[2][MV_THREADS / 32];
    int span = tpr < 32 ? tpr : 32;
    for (int o = span / 2; o > 0; o >>= 1) {
        a0 += __shfl_xor_sync(0xffffffffu, a0, o);
        a1 += __shfl_xor_sync(0xffffffffu, a1, o);
    }
    if (tpr > 32) {
        if (threadIdx.x % 32 == 0) {
            red[0][threadIdx.x / 32] = a0;
            red[1][threadIdx.x / 32] = a1;
        }
        __syncthreads();
        if (lane == 0) {
            int w0 = threadIdx.x / 32, nw = tpr / 32;
            a0 = a1 = 0.0f;
            for (int w = 0; w < nw; w++) {
                a0 += red[0][w0 + w];
                a1 += red[1][w0 + w];
            }
        }
    }
}

/* nt = 1, two rows per thread: each activation block loaded once serves
 * both rows (halves the L1 traffic per weight byte). Rows ra and ra + rpb
 * of block blk (the kernel's blockIdx.x, or its index inside a segment of
 * the multi-matrix kernel): Rows2 picks them and loads the first units
 * (before the wait), mmvq2_body runs the rest (after it). */
template <int T, int PRE> struct Rows2 {
    int ra, rb, lane;
    bool la, lb;
    const uint8_t *wa, *wb;
    First2<T, PRE> f;
    /* rows ra and rb of the thread's group (either may be past N) */
    __device__ __forceinline__ Rows2(int ra_, int rb_, const uint8_t *W, int64_t w_nb1,
                                     int nunits, int N, int tpr)
        : ra(ra_), rb(rb_), lane((int)threadIdx.x % tpr), la(ra < N), lb(rb < N),
          wa(W + (int64_t)(la ? ra : N - 1) * w_nb1), wb(W + (int64_t)(lb ? rb : N - 1) * w_nb1),
          f(wa, wb, lane, nunits, tpr)
    {
    }
    /* the plain split: rows ra and ra + rpb of block blk */
    __device__ __forceinline__ Rows2(int blk, const uint8_t *W, int64_t w_nb1, int nunits, int N,
                                     int tpr)
        : Rows2(blk * 2 * (MV_THREADS / tpr) + (int)threadIdx.x / tpr,
                blk * 2 * (MV_THREADS / tpr) + (int)threadIdx.x / tpr + MV_THREADS / tpr, W,
                w_nb1, nunits, N, tpr)
    {
    }
};

template <int T, int PRE>
__device__ __forceinline__ void mmvq2_body(Rows2<T, PRE> &r, const uint8_t *__restrict__ xq,
                                           int nb, int nunits, float *dst, int tpr,
                                           const kepi_d &e)
{
    float a0, a1;
    dot2_rows<T, PRE>(r.f, r.wa, r.wb, xq, nb, nunits, r.lane, tpr, a0, a1);
    if (r.lane == 0) {
        if (r.la && !e.dst2)
            dst[r.ra] = a0;
        if (r.lb && !e.dst2)
            dst[r.rb] = a1;
        if (e.dst2 && r.la)
            e.dst2[r.ra] = a0 + e.add[r.ra];
        if (e.dst2 && r.lb)
            e.dst2[r.rb] = a1 + e.add[r.rb];
    }
}

template <int T>
__global__ void __launch_bounds__(MV_THREADS, 6)
    mmvq2_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, const uint8_t *__restrict__ xq,
                 int nb, int nunits, int N, float *dst, int tpr, kepi_d e)
{
    Rows2<T, T == MINFER_TYPE_Q8_0 ? 2 : 0> r(blockIdx.x, W, w_nb1, nunits, N, tpr);
    k_dep_enter();
    mmvq2_body(r, xq, nb, nunits, dst, tpr, e);
}

/* Several nt = 1 products of one x (Q, K and V) in one launch: segment i
 * owns blocks [first_block_i, first_block_{i+1}) and runs mmvq2_body of
 * its own weight type there. */
#define MV_MAX_SEGS 4
struct mv_seg {
    const uint8_t *W;
    int64_t w_nb1;
    float *dst;
    kepi_d e;
    int N, type, first_block, tpr;
};
struct mv_segs {
    mv_seg s[MV_MAX_SEGS];
    int n;
};

/* The index of the segment that owns this block (uniform over the block). */
__device__ __forceinline__ int seg_index(const mv_segs &S)
{
    int i = 0;
    while (i + 1 < S.n && (int)blockIdx.x >= S.s[i + 1].first_block)
        i++;
    return i;
}
__device__ __forceinline__ const mv_seg &seg_of_block(const mv_segs &S)
{
    return S.s[seg_index(S)];
}

template <int T>
__device__ __forceinline__ void multi_seg(int blk, const mv_seg &g, const uint8_t *xq, int nb)
{
    const int nunits = nb * 32 / Unit<T>::U;
    Rows2<T, 0> r(blk, g.W, g.w_nb1, nunits, g.N, g.tpr);
    mmvq2_body(r, xq, nb, nunits, g.dst, g.tpr, g.e);
}

__global__ void __launch_bounds__(MV_THREADS, 6)
    mmvq_multi_kernel(const mv_segs S, const uint8_t *__restrict__ xq, int nb)
{
    k_dep_enter();
    const mv_seg &g = seg_of_block(S);
    int blk = (int)blockIdx.x - g.first_block;
    switch (g.type) {
    case MINFER_TYPE_Q4_0: multi_seg<MINFER_TYPE_Q4_0>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q4_1: multi_seg<MINFER_TYPE_Q4_1>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q5_0: multi_seg<MINFER_TYPE_Q5_0>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q5_1: multi_seg<MINFER_TYPE_Q5_1>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q8_0: multi_seg<MINFER_TYPE_Q8_0>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q4_K: multi_seg<MINFER_TYPE_Q4_K>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q5_K: multi_seg<MINFER_TYPE_Q5_K>(blk, g, xq, nb); break;
    case MINFER_TYPE_Q6_K: multi_seg<MINFER_TYPE_Q6_K>(blk, g, xq, nb); break;
    default: break; /* refused by the launcher */
    }
}

/* The group when every product is Q8_0: the first weight units loaded
 * before the wait (First2), which the switch over types above cannot
 * take without spilling. */
__global__ void __launch_bounds__(MV_THREADS, 6)
    mmvq_multi_q8_0_kernel(const mv_segs S, const uint8_t *__restrict__ xq, int nb)
{
    const mv_seg &g = seg_of_block(S);
    Rows2<MINFER_TYPE_Q8_0, 1> r((int)blockIdx.x - g.first_block, g.W, g.w_nb1, nb, g.N, g.tpr);
    k_dep_enter();
    mmvq2_body(r, xq, nb, nb, g.dst, g.tpr, g.e);
}

/* ---- Q, K and V with the RoPE and the KV stores in the epilogue ---- */

/* The rows of the thread's group in segment si of a k_matvec_q_multi_rope
 * launch: for Q and K (si 0, 1) pair i of head h, rows h * hd + i and
 * h * hd + i + hd / 2, the two values one rotation mixes; for V the plain
 * split. Each row's sum is the same either way (same threads a row, same
 * units a lane), so the bits equal the plain launch's. */
__device__ __forceinline__ int2 rope_rows(int si, int blk, int tpr, int hd)
{
    const int rpb = MV_THREADS / tpr, g = (int)threadIdx.x / tpr;
    if (si == 2)
        return make_int2(blk * 2 * rpb + g, blk * 2 * rpb + g + rpb);
    const int half = hd / 2, grp = blk * rpb + g;
    const int ra = grp / half * hd + grp % half;
    return make_int2(ra, ra + half);
}

/* Value v of column col into cell row `cell` of a F32 or F16 cache, as
 * kv_store_row stores it. */
__device__ __forceinline__ void cache_put(void *c, uint32_t t, int64_t nb, int32_t cell, int col,
                                          float v)
{
    char *row = (char *)c + (int64_t)cell * nb;
    if (t == MINFER_TYPE_F16)
        ((uint16_t *)row)[col] = f2h(v);
    else
        ((float *)row)[col] = v;
}

/* The cell of the token in a cache of nc cells, or -1 (KFLAG_KV_CELL set:
 * kv_store_row's check). */
__device__ __forceinline__ int32_t cache_cell(const kqkv_rope &R, int64_t nc, unsigned *flags)
{
    const int32_t cell = R.cells[0];
    if (cell >= 0 && cell < nc)
        return cell;
    atomicOr(flags, KFLAG_KV_CELL);
    return -1;
}

/* Lane 0's epilogue of rows (ra, rb) with sums a0, a1 (la, lb: the rows
 * exist; a Q or K pair has both or neither): the bias as mmvq2_body adds
 * it; then v into the V cache (si 2), or the pair rotated by (cs, sn): q
 * into R.rq (si 0), k into R.rk and the K cache. */
__device__ __forceinline__ void qkv_rope_store(int si, int ra, int rb, bool la, bool lb,
                                               float a0, float a1, float cs, float sn,
                                               const kepi_d &e, const kqkv_rope &R,
                                               unsigned *flags)
{
    if (!la)
        return;
    if (e.dst2) {
        a0 = a0 + e.add[ra];
        a1 = lb ? a1 + e.add[rb] : a1;
    }
    if (si == 2) {
        const int32_t cell = cache_cell(R, R.vnc, flags);
        if (cell >= 0) {
            cache_put(R.vc, R.vt, R.vnb, cell, ra, a0);
            if (lb)
                cache_put(R.vc, R.vt, R.vnb, cell, rb, a1);
        }
        return;
    }
    const int h = ra / R.hd, i = ra % R.hd, half = R.hd / 2;
    float o0, o1;
    rope_rotate(a0, a1, cs, sn, o0, o1);
    if (si == 0) {
        float *o = (float *)((char *)R.rq + (int64_t)h * R.rq_nb1);
        o[i] = o0;
        o[i + half] = o1;
        return;
    }
    if (R.rk) {
        float *o = (float *)((char *)R.rk + (int64_t)h * R.rk_nb1);
        o[i] = o0;
        o[i + half] = o1;
    }
    const int32_t cell = cache_cell(R, R.knc, flags);
    if (cell >= 0) {
        cache_put(R.kc, R.kt, R.knb, cell, ra, o0);
        cache_put(R.kc, R.kt, R.knb, cell, rb, o1);
    }
}

/* What a thread of segment si does before the wait: its rows (rope_rows)
 * with weights of type T (Q8_0: the first units loaded, as the plain Q8_0
 * kernels), and a Q or K group's angle where the host wrote the position
 * (R.pos_fixed), as rope_kv_kernel did, so that powf and sincosf stay off
 * the path after the products. */
template <int T> struct QkvPre {
    static constexpr int PRE = T == MINFER_TYPE_Q8_0 ? 1 : 0;
    Rows2<T, PRE> r;
    float cs = 0.0f, sn = 0.0f;
    bool qk;
    __device__ __forceinline__ QkvPre(int si, int2 rr, const mv_seg &g, int nb, const kqkv_rope &R)
        : r(rr.x, rr.y, g.W, g.w_nb1, nb * 32 / Unit<T>::U, g.N, g.tpr), qk(si != 2)
    {
        if (qk && R.pos_fixed)
            angle(R);
    }
    __device__ __forceinline__ void angle(const kqkv_rope &R)
    {
        rope_angle(r.ra % R.hd, (float)R.pos[0], R.hd, R.base, R.fscale, &cs, &sn);
    }
};

/* After the wait: the angle if not yet computed, the products, then lane
 * 0's epilogue. */
template <int T>
__device__ __forceinline__ void qkv_rope_tail(QkvPre<T> &p, int si, const mv_seg &g,
                                              const uint8_t *__restrict__ xq, int nb,
                                              const kqkv_rope &R, unsigned *flags)
{
    if (p.qk && !R.pos_fixed)
        p.angle(R);
    const int nunits = nb * 32 / Unit<T>::U;
    float a0, a1;
    dot2_rows<T, QkvPre<T>::PRE>(p.r.f, p.r.wa, p.r.wb, xq, nb, nunits, p.r.lane, g.tpr, a0, a1);
    if (p.r.lane == 0)
        qkv_rope_store(si, p.r.ra, p.r.rb, p.r.la, p.r.lb, a0, a1, p.cs, p.sn, g.e, R, flags);
}

/* Q and K of type TQK, V of type TV: a kernel per pair of types, so each
 * keeps the registers of its own loops. The first form, one kernel
 * switching over every type with the angle computed after the products,
 * took 80 registers and spilled; on the 7B Q4_K_M file it ran 3.3 us
 * slower than the plain group, all the RoPE launch saved (docs/PERF.md,
 * session 23). */
template <int TQK, int TV>
__global__ void __launch_bounds__(MV_THREADS, 6)
    mmvq_qkv_rope_kernel(const mv_segs S, const uint8_t *__restrict__ xq, int nb,
                         const kqkv_rope R, unsigned *flags)
{
    const int si = seg_index(S);
    const mv_seg &g = S.s[si];
    const int2 rr = rope_rows(si, (int)blockIdx.x - g.first_block, g.tpr, R.hd);
    if (si == 2) {
        QkvPre<TV> p(si, rr, g, nb, R);
        k_dep_enter();
        qkv_rope_tail(p, si, g, xq, nb, R, flags);
    } else {
        QkvPre<TQK> p(si, rr, g, nb, R);
        k_dep_enter();
        qkv_rope_tail(p, si, g, xq, nb, R, flags);
    }
}

/* nt = 1 gate and up products of one row per thread group and SwiGLU in
 * the epilogue: dst[r] = silu(Wg[r] . x) * (Wu[r] . x), the expression of
 * the element-wise SWIGLU kernel (the dot products may be summed in
 * another order than the separate launches'). Structure of mmvq2_kernel
 * with the second row taken from the up matrix. */
template <int T>
__global__ void __launch_bounds__(MV_THREADS, 6)
    mmvq_glu_kernel(const uint8_t *__restrict__ Wg, const uint8_t *__restrict__ Wu,
                    int64_t w_nb1, const uint8_t *__restrict__ xq, int nb, int nunits, int N,
                    float *dst, int tpr)
{
    int row = blockIdx.x * (MV_THREADS / tpr) + threadIdx.x / tpr;
    int lane = threadIdx.x % tpr;
    bool live = row < N;
    const uint8_t *wa = Wg + (int64_t)(live ? row : N - 1) * w_nb1;
    const uint8_t *wb = Wu + (int64_t)(live ? row : N - 1) * w_nb1;
    First2<T, T == MINFER_TYPE_Q8_0 ? 1 : 0> f(wa, wb, lane, nunits, tpr);
    k_dep_enter();
    float a0, a1;
    dot2_rows(f, wa, wb, xq, nb, nunits, lane, tpr, a0, a1);
    if (lane == 0 && live)
        dst[row] = a0 / (1.0f + expf(-a0)) * a1;
}

/* nt = 2..8 gate and up of one row per thread group with SwiGLU in the
 * epilogue: mmvqn2_kernel's loop with the second row taken from the up
 * matrix (each activation block serves both), the expression of
 * mmvq_glu_kernel per column. Replaces two nt-column products, their
 * scratch planes and the element-wise SWIGLU launch of a batched decode. */
template <int T, int NT>
__global__ void __launch_bounds__(MV_THREADS, 4)
    mmvq_glun_kernel(const uint8_t *__restrict__ Wg, const uint8_t *__restrict__ Wu,
                     int64_t w_nb1, const uint8_t *__restrict__ xq, int nb, int nunits, int N,
                     int M, float *dst, int64_t dst_nb1, int tpr)
{
    int row = blockIdx.x * (MV_THREADS / tpr) + threadIdx.x / tpr;
    int lane = threadIdx.x % tpr;
    bool live = row < N;
    const uint8_t *wa = Wg + (int64_t)(live ? row : N - 1) * w_nb1;
    const uint8_t *wb = Wu + (int64_t)(live ? row : N - 1) * w_nb1;
    k_dep_enter();
    float acc[2 * NT];
    MV_DOT2N(T, NT, acc, wa, wb, xq, nb, nunits, M, lane, tpr);
    if (lane != 0 || !live)
        return;
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= M)
            break;
        float a0 = acc[t], a1 = acc[NT + t];
        *(float *)((char *)dst + t * dst_nb1 + (int64_t)row * 4) = a0 / (1.0f + expf(-a0)) * a1;
    }
}

/* The launchers' checks of the weights: K whole super-blocks for a
 * K-quant, and the 16-byte aligned rows the int4 loads of Q4_K/Q5_K need
 * (Wb: the second matrix of a fused product, or NULL). */
template <int T>
static int check_rows(struct kctx *k, const char *site, int64_t K, const void *Wa,
                      const void *Wb, int64_t w_nb1)
{
    if (K % 256 && Unit<T>::U == 64)
        return k_fail(k, site, "K is not a multiple of 256 for a K-quant");
    constexpr bool A16 = T == MINFER_TYPE_Q4_K || T == MINFER_TYPE_Q5_K;
    if (A16 && (((uintptr_t)Wa % 16) || ((uintptr_t)Wb % 16) || (w_nb1 % 16)))
        return k_fail(k, site, "K-quant weight rows are not 16-byte aligned");
    return 0;
}

template <int T>
static int launch_mmvq_glun(struct kctx *k, const void *Wg, const void *Wu, int64_t K,
                            int64_t N, int64_t w_nb1, const void *xq, int64_t M, float *dst,
                            int64_t dst_nb1)
{
    constexpr int U = Unit<T>::U;
    if (check_rows<T>(k, "matvec_q_glu", K, Wg, Wu, w_nb1))
        return -1;
    if (M < 2 || M > 8)
        return k_fail(k, "matvec_q_glu", "2 to 8 columns");
    int nb = (int)(K / 32), nunits = (int)(K / U);
    int tpr = rows_tpr(N, nunits);
    int rpb = MV_THREADS / tpr;
    unsigned grid = (unsigned)((N + rpb - 1) / rpb);
    const uint8_t *g = (const uint8_t *)Wg, *u = (const uint8_t *)Wu, *x = (const uint8_t *)xq;
    if (M == 2) {
        auto kf = mmvq_glun_kernel<T, 2>;
        KLAUNCH(k, "matvec_q_glu<nt=2>", kf, grid, MV_THREADS, 0, g, u, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr);
    } else if (M <= 4) {
        auto kf = mmvq_glun_kernel<T, 4>;
        KLAUNCH(k, "matvec_q_glu<nt=4>", kf, grid, MV_THREADS, 0, g, u, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr);
    } else {
        auto kf = mmvq_glun_kernel<T, 8>;
        KLAUNCH(k, "matvec_q_glu<nt=8>", kf, grid, MV_THREADS, 0, g, u, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr);
    }
    return 0;
}

extern "C" int k_matvec_q_glu_n(struct kctx *k, uint32_t type, const void *Wg, const void *Wu,
                                int64_t K, int64_t N, int64_t w_nb1, const void *xq, int64_t M,
                                float *dst, int64_t dst_nb1)
{
    switch (type) {
        K_QUANT_CASES(launch_mmvq_glun, k, Wg, Wu, K, N, w_nb1, xq, M, dst, dst_nb1)
    default:
        return k_fail(k, "matvec_q_glu", "weight type has no dp4a kernel");
    }
}

template <int T>
static int launch_mmvq_glu(struct kctx *k, const void *Wg, const void *Wu, int64_t K, int64_t N,
                           int64_t w_nb1, const void *xq, float *dst)
{
    constexpr int U = Unit<T>::U;
    if (check_rows<T>(k, "matvec_q_glu", K, Wg, Wu, w_nb1))
        return -1;
    int nb = (int)(K / 32), nunits = (int)(K / U);
    int tpr = pair_tpr(N, nunits, U);
    int rpb = MV_THREADS / tpr;
    auto kf = mmvq_glu_kernel<T>;
    KLAUNCH(k, "matvec_q_glu", kf, (unsigned)((N + rpb - 1) / rpb), MV_THREADS, 0,
            (const uint8_t *)Wg, (const uint8_t *)Wu, w_nb1, (const uint8_t *)xq, nb, nunits,
            (int)N, dst, tpr);
    return 0;
}

extern "C" int k_matvec_q_glu(struct kctx *k, uint32_t type, const void *Wg, const void *Wu,
                              int64_t K, int64_t N, int64_t w_nb1, const void *xq, float *dst)
{
    switch (type) {
        K_QUANT_CASES(launch_mmvq_glu, k, Wg, Wu, K, N, w_nb1, xq, dst)
    default:
        return k_fail(k, "matvec_q_glu", "weight type has no dp4a kernel");
    }
}

static int g_rows_per_thread = 2;

/* Benchmark hook: rows per thread group of the quantized kernels (1 or 2),
 * nt = 1 and nt = 2..8 alike. */
extern "C" void k_tune_matvec_rows(int r)
{
    g_rows_per_thread = r == 1 ? 1 : 2;
}

template <int T>
static int launch_mmvq(struct kctx *k, const void *W, int64_t K, int64_t N, int64_t w_nb1,
                       const void *xq, int64_t M, float *dst, int64_t dst_nb1, kepi_d e)
{
    constexpr int U = Unit<T>::U;
    if (check_rows<T>(k, "matvec_q", K, W, NULL, w_nb1))
        return -1;
    int nb = (int)(K / 32), nunits = (int)(K / U);
    int tpr = rows_tpr(N, nunits);
    int rpb = MV_THREADS / tpr;
    unsigned grid = (unsigned)((N + rpb - 1) / rpb);
    const uint8_t *w = (const uint8_t *)W;
    const uint8_t *x = (const uint8_t *)xq;
    if (M == 1 && g_rows_per_thread == 2) {
        int tpr2 = pair_tpr((N + 1) / 2, nunits, U);
        int rpb2 = 2 * (MV_THREADS / tpr2);
        auto kf = mmvq2_kernel<T>;
        KLAUNCH(k, "matvec_q<nt=1,2 rows>", kf, (unsigned)((N + rpb2 - 1) / rpb2), MV_THREADS,
                0, w, w_nb1, x, nb, nunits, (int)N, dst, tpr2, e);
    } else if (M >= 2 && M <= 8 && g_rows_per_thread == 2) {
        int tpr2 = rows_tpr((N + 1) / 2, nunits);
        int rpb2 = 2 * (MV_THREADS / tpr2);
        unsigned grid2 = (unsigned)((N + rpb2 - 1) / rpb2);
        if (M == 2) {
            auto kf = mmvqn2_kernel<T, 2>;
            KLAUNCH(k, "matvec_q<nt=2,2 rows>", kf, grid2, MV_THREADS, 0, w, w_nb1, x, nb,
                    nunits, (int)N, (int)M, dst, dst_nb1, tpr2, e);
        } else if (M <= 4) {
            auto kf = mmvqn2_kernel<T, 4>;
            KLAUNCH(k, "matvec_q<nt=4,2 rows>", kf, grid2, MV_THREADS, 0, w, w_nb1, x, nb,
                    nunits, (int)N, (int)M, dst, dst_nb1, tpr2, e);
        } else {
            auto kf = mmvqn2_kernel<T, 8>;
            KLAUNCH(k, "matvec_q<nt=8,2 rows>", kf, grid2, MV_THREADS, 0, w, w_nb1, x, nb,
                    nunits, (int)N, (int)M, dst, dst_nb1, tpr2, e);
        }
    } else if (M == 1) {
        auto kf = mmvq_kernel<T, 1>;
        KLAUNCH(k, "matvec_q<nt=1>", kf, grid, MV_THREADS, 0, w, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr, e);
    } else if (M == 2) {
        auto kf = mmvq_kernel<T, 2>;
        KLAUNCH(k, "matvec_q<nt=2>", kf, grid, MV_THREADS, 0, w, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr, e);
    } else if (M <= 4) {
        auto kf = mmvq_kernel<T, 4>;
        KLAUNCH(k, "matvec_q<nt=4>", kf, grid, MV_THREADS, 0, w, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr, e);
    } else if (M <= 8) {
        auto kf = mmvq_kernel<T, 8>;
        KLAUNCH(k, "matvec_q<nt=8>", kf, grid, MV_THREADS, 0, w, w_nb1, x, nb, nunits,
                (int)N, (int)M, dst, dst_nb1, tpr, e);
    } else {
        return k_fail(k, "matvec_q", "more than 8 columns");
    }
    return 0;
}

template <int T> static int unit_size()
{
    return Unit<T>::U;
}

/* Unit size of a quantized type (0: no dp4a kernel). */
static int unit_of(uint32_t type)
{
    switch (type) {
        K_QUANT_CASES(unit_size)
    default:
        return 0;
    }
}

extern "C" int k_matvec_q_supported(uint32_t type)
{
    return unit_of(type) != 0;
}

static kepi_d epi_of(const struct kepi *epi)
{
    kepi_d e = {NULL, 0, NULL, 0};
    if (epi && epi->dst2 && epi->add) {
        e.add = epi->add;
        e.add_nb1 = epi->add_nb1;
        e.dst2 = epi->dst2;
        e.dst2_nb1 = epi->dst2_nb1;
    }
    return e;
}

/* The launch plan of products segs[0..n) of one x in one grid: each
 * segment's blocks, weight type and threads a row. *all_q8_0: whether
 * every product is Q8_0. */
static int plan_segs(struct kctx *k, const char *site, const struct kmv_seg *segs, int n,
                     int64_t K, mv_segs *S, int64_t *blocks, bool *all_q8_0)
{
    if (n < 1 || n > MV_MAX_SEGS)
        return k_fail(k, site, "1 to 4 products per launch");
    S->n = n;
    *blocks = 0;
    *all_q8_0 = true;
    for (int i = 0; i < n; i++) {
        const struct kmv_seg *g = &segs[i];
        *all_q8_0 = *all_q8_0 && g->type == MINFER_TYPE_Q8_0;
        int U = unit_of(g->type);
        if (!U)
            return k_fail(k, site, "weight type has no dp4a kernel");
        if (K % U || (U == 64 && K % 256))
            return k_fail(k, site, "K is not a whole number of blocks");
        bool a16 = g->type == MINFER_TYPE_Q4_K || g->type == MINFER_TYPE_Q5_K;
        if (a16 && (((uintptr_t)g->W % 16) || (g->w_nb1 % 16)))
            return k_fail(k, site, "K-quant weight rows are not 16-byte aligned");
        if (g->N < 1 || g->N > 0x7fffffff)
            return k_fail(k, site, "row count out of range");
        /* the thread count per row of a launch of this product alone, so
         * the sums (and bits) equal k_matvec_q's */
        int tpr = pair_tpr((g->N + 1) / 2, K / U, U);
        S->s[i] = (mv_seg){(const uint8_t *)g->W, g->w_nb1, g->dst, epi_of(g->epi),
                           (int)g->N, (int)g->type, (int)*blocks, tpr};
        int rpb2 = 2 * (MV_THREADS / tpr);
        *blocks += (g->N + rpb2 - 1) / rpb2;
    }
    if (*blocks > 0x7fffffff)
        return k_fail(k, site, "too many blocks");
    return 0;
}

extern "C" int k_matvec_q_multi(struct kctx *k, const struct kmv_seg *segs, int n, int64_t K,
                                const void *xq)
{
    mv_segs S;
    int64_t blocks;
    bool all_q8_0;
    if (plan_segs(k, "matvec_q_multi", segs, n, K, &S, &blocks, &all_q8_0))
        return -1;
    auto kf = all_q8_0 ? mmvq_multi_q8_0_kernel : mmvq_multi_kernel;
    KLAUNCH(k, "matvec_q_multi", kf, (unsigned)blocks, MV_THREADS, 0, S, (const uint8_t *)xq,
            (int)(K / 32));
    return 0;
}

/* The (Q/K type, V type) pairs with a kernel: each type with itself, and
 * Q4_K_M's and Q5_K_M's q6_K V layers. */
#define QKV_ROPE_PAIRS(X)                                                                     \
    X(MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_0)                                                      \
    X(MINFER_TYPE_Q4_1, MINFER_TYPE_Q4_1)                                                      \
    X(MINFER_TYPE_Q5_0, MINFER_TYPE_Q5_0)                                                      \
    X(MINFER_TYPE_Q5_1, MINFER_TYPE_Q5_1)                                                      \
    X(MINFER_TYPE_Q8_0, MINFER_TYPE_Q8_0)                                                      \
    X(MINFER_TYPE_Q4_K, MINFER_TYPE_Q4_K)                                                      \
    X(MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K)                                                      \
    X(MINFER_TYPE_Q5_K, MINFER_TYPE_Q5_K)                                                      \
    X(MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K)                                                      \
    X(MINFER_TYPE_Q6_K, MINFER_TYPE_Q6_K)

typedef void (*qkv_rope_fn)(const mv_segs, const uint8_t *, int, const kqkv_rope, unsigned *);

static qkv_rope_fn qkv_rope_kernel_of(uint32_t tqk, uint32_t tv)
{
#define QKV_ROPE_PICK(A, B)                                                                    \
    if (tqk == (A) && tv == (B))                                                               \
        return mmvq_qkv_rope_kernel<A, B>;
    QKV_ROPE_PAIRS(QKV_ROPE_PICK)
#undef QKV_ROPE_PICK
    return NULL;
}

extern "C" int k_matvec_q_multi_rope_ok(int64_t hd, uint32_t tq, uint32_t tk, uint32_t tv,
                                        uint32_t kt, uint32_t vt)
{
    bool cache = (kt == MINFER_TYPE_F32 || kt == MINFER_TYPE_F16) &&
                 (vt == MINFER_TYPE_F32 || vt == MINFER_TYPE_F16);
    return cache && hd >= 2 && hd <= 1024 && hd % 2 == 0 && tq == tk &&
           qkv_rope_kernel_of(tq, tv) != NULL;
}

extern "C" int k_matvec_q_multi_rope(struct kctx *k, const struct kmv_seg *segs, int64_t K,
                                     const void *xq, const struct kqkv_rope *r)
{
    const char *site = "matvec_q_multi_rope";
    if (!k_matvec_q_multi_rope_ok(r->hd, segs[0].type, segs[1].type, segs[2].type, r->kt, r->vt))
        return k_fail(k, site, "heads of an odd size or over 1024, a cache not F32/F16, or "
                               "weight types without a kernel");
    const int64_t hd = r->hd;
    const int64_t ke = r->kt == MINFER_TYPE_F16 ? 2 : 4, ve = r->vt == MINFER_TYPE_F16 ? 2 : 4;
    if (segs[0].N % hd || segs[1].N % hd || segs[1].N > r->knb / ke || segs[2].N > r->vnb / ve)
        return k_fail(k, site, "Q and K rows not whole heads, or K/V rows past a cache row");
    mv_segs S;
    int64_t blocks;
    bool all_q8_0;
    if (plan_segs(k, site, segs, 3, K, &S, &blocks, &all_q8_0))
        return -1;
    auto kf = qkv_rope_kernel_of(segs[0].type, segs[2].type);
    KLAUNCH(k, site, kf, (unsigned)blocks, MV_THREADS, 0, S, (const uint8_t *)xq, (int)(K / 32),
            *r, k->flags);
    return 0;
}

extern "C" int k_matvec_q_epi(struct kctx *k, uint32_t type, const void *W, int64_t K,
                              int64_t N, int64_t w_nb1, const void *xq, int64_t M, float *dst,
                              int64_t dst_nb1, const struct kepi *epi)
{
    kepi_d e = epi_of(epi);
    switch (type) {
        K_QUANT_CASES(launch_mmvq, k, W, K, N, w_nb1, xq, M, dst, dst_nb1, e)
    default:
        return k_fail(k, "matvec_q", "weight type has no dp4a kernel");
    }
}

extern "C" int k_matvec_q(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                          int64_t w_nb1, const void *xq, int64_t M, float *dst, int64_t dst_nb1)
{
    return k_matvec_q_epi(k, type, W, K, N, w_nb1, xq, M, dst, dst_nb1, NULL);
}

/* ---- float weights ---- */

template <int T> __device__ __forceinline__ float ldw(const uint8_t *row, int64_t i);
template <> __device__ __forceinline__ float ldw<MINFER_TYPE_F32>(const uint8_t *row, int64_t i)
{
    return ((const float *)row)[i];
}
template <> __device__ __forceinline__ float ldw<MINFER_TYPE_F16>(const uint8_t *row, int64_t i)
{
    return h2f(((const uint16_t *)row)[i]);
}
template <> __device__ __forceinline__ float ldw<MINFER_TYPE_BF16>(const uint8_t *row, int64_t i)
{
    return bf2f(((const uint16_t *)row)[i]);
}

/* 8 weights at k0 (k0 % 8 == 0) with vector loads; needs 16-byte rows
 * for the 2-byte types and 32-byte alignment of k0 for f32. */
template <int T> __device__ __forceinline__ void ldw8(const uint8_t *row, int64_t k0, float *o)
{
    if (T == MINFER_TYPE_F32) {
        const float4 *p = (const float4 *)((const float *)row + k0);
        float4 a = p[0], b = p[1];
        o[0] = a.x; o[1] = a.y; o[2] = a.z; o[3] = a.w;
        o[4] = b.x; o[5] = b.y; o[6] = b.z; o[7] = b.w;
    } else {
        uint4 v = *(const uint4 *)((const uint16_t *)row + k0);
        uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            uint16_t a = (uint16_t)w[i], b = (uint16_t)(w[i] >> 16);
            o[2 * i] = T == MINFER_TYPE_F16 ? h2f(a) : bf2f(a);
            o[2 * i + 1] = T == MINFER_TYPE_F16 ? h2f(b) : bf2f(b);
        }
    }
}

template <int T, int NT>
__global__ void __launch_bounds__(MV_THREADS, NT <= 2 ? 8 : 4)
    mmvf_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, int64_t K, const float *__restrict__ x,
                int64_t x_nb1, int N, int M, float *dst, int64_t dst_nb1, int vec,
                int tpr, kepi_d e)
{
    k_dep_enter();
    int row = blockIdx.x * (MV_THREADS / tpr) + threadIdx.x / tpr;
    int lane = threadIdx.x % tpr;
    bool live = row < N;
    const uint8_t *wr = W + (int64_t)(live ? row : N - 1) * w_nb1;
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; t++)
        acc[t] = 0.0f;
    int64_t kv = vec ? (K / 8) * 8 : 0;
    for (int64_t k0 = 8 * (int64_t)lane; k0 < kv; k0 += 8 * tpr) {
        float w[8];
        ldw8<T>(wr, k0, w);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (NT == 1 || t < M) {
                const float4 *xp = (const float4 *)((const char *)x + t * x_nb1) + k0 / 4;
                float4 a = xp[0], b = xp[1];
                acc[t] += w[0] * a.x + w[1] * a.y + w[2] * a.z + w[3] * a.w + w[4] * b.x +
                          w[5] * b.y + w[6] * b.z + w[7] * b.w;
            }
        }
    }
    for (int64_t i = kv + lane; i < K; i += tpr) {
        float w = ldw<T>(wr, i);
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (NT == 1 || t < M)
                acc[t] += w * ((const float *)((const char *)x + t * x_nb1))[i];
    }
    row_store<NT>(acc, tpr, lane, live, M, row, dst, dst_nb1, e);
}

template <int T>
static int launch_mmvf(struct kctx *k, const void *W, int64_t K, int64_t N, int64_t w_nb1,
                       const float *x, int64_t x_nb1, int64_t M, float *dst, int64_t dst_nb1,
                       kepi_d e0)
{
    int es = T == MINFER_TYPE_F32 ? 4 : 2;
    /* vector loads need every row start 16-byte aligned (weights and x) */
    int vec = ((uintptr_t)W % 16 == 0) && (w_nb1 % 16 == 0) && ((uintptr_t)x % 16 == 0) &&
              (x_nb1 % 16 == 0 || M == 1) && (K * es >= 16);
    int tpr = rows_tpr(N, vec ? K / 8 : K / 8 + 1);
    int rpb = MV_THREADS / tpr;
    unsigned grid = (unsigned)((N + rpb - 1) / rpb);
    const uint8_t *w = (const uint8_t *)W;
    for (int64_t m0 = 0; m0 < M; m0 += 8) {
        int64_t mc = M - m0 < 8 ? M - m0 : 8;
        const float *xs = (const float *)((const char *)x + m0 * x_nb1);
        float *ds = (float *)((char *)dst + m0 * dst_nb1);
        kepi_d e = e0;
        if (e.dst2) {
            e.add = (const float *)((const char *)e.add + m0 * e.add_nb1);
            e.dst2 = (float *)((char *)e.dst2 + m0 * e.dst2_nb1);
        }
        if (mc == 1) {
            auto kf = mmvf_kernel<T, 1>;
            KLAUNCH(k, "matvec_f<nt=1>", kf, grid, MV_THREADS, 0, w, w_nb1, K, xs, x_nb1,
                    (int)N, (int)mc, ds, dst_nb1, vec, tpr, e);
        } else if (mc == 2) {
            auto kf = mmvf_kernel<T, 2>;
            KLAUNCH(k, "matvec_f<nt=2>", kf, grid, MV_THREADS, 0, w, w_nb1, K, xs, x_nb1,
                    (int)N, (int)mc, ds, dst_nb1, vec, tpr, e);
        } else if (mc <= 4) {
            auto kf = mmvf_kernel<T, 4>;
            KLAUNCH(k, "matvec_f<nt=4>", kf, grid, MV_THREADS, 0, w, w_nb1, K, xs, x_nb1,
                    (int)N, (int)mc, ds, dst_nb1, vec, tpr, e);
        } else {
            auto kf = mmvf_kernel<T, 8>;
            KLAUNCH(k, "matvec_f<nt=8>", kf, grid, MV_THREADS, 0, w, w_nb1, K, xs, x_nb1,
                    (int)N, (int)mc, ds, dst_nb1, vec, tpr, e);
        }
    }
    return 0;
}

extern "C" int k_matvec_f_epi(struct kctx *k, uint32_t type, const void *W, int64_t K,
                              int64_t N, int64_t w_nb1, const float *x, int64_t x_nb1, int64_t M,
                              float *dst, int64_t dst_nb1, const struct kepi *epi)
{
    kepi_d e = epi_of(epi);
    switch (type) {
        K_FLOAT_CASES(launch_mmvf, k, W, K, N, w_nb1, x, x_nb1, M, dst, dst_nb1, e)
    default:
        return k_fail(k, "matvec_f", "weight type is not f32/f16/bf16");
    }
}

extern "C" int k_matvec_f(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                          int64_t w_nb1, const float *x, int64_t x_nb1, int64_t M, float *dst,
                          int64_t dst_nb1)
{
    return k_matvec_f_epi(k, type, W, K, N, w_nb1, x, x_nb1, M, dst, dst_nb1, NULL);
}
