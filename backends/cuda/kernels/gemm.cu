/*
 * gemm.cu — the tensor-core prefill GEMM (nt > 8): dst[n, m] =
 * sum_k W[k, n] * x[k, m], f16 operands, f32 accumulation.
 *
 * Three stages, each a plain launch:
 *   1. k_gemm_act rounds the f32 activations to f16 once per call, token
 *      major ([M][K]), optionally with the f16 remainder (the hi/lo split
 *      of float-weight models, see exec.c's run_gemm).
 *   2. k_gemm dequantizes the weights to f16 rows ([N][K], in chunks of
 *      rows bounded by G_CHUNK_BYTES) into caller scratch; f16 weights
 *      with 16-byte aligned rows are read in place. This is the only
 *      per-type code (dq8, 11 small instantiations).
 *   3. One f16 x f16 kernel: 128 weight rows x 128 tokens per 256-thread
 *      block (8 warps of 64 x 32), 64-deep K slices (32 when K % 64 != 0)
 *      streamed by 16-byte cp.async through a 3-stage (4 at 32) shared
 *      ring, fragments read with ldmatrix, mma.sync m16n8k16 into f32
 *      registers, results stored (or added, for the second half of a
 *      split) straight from registers. When the tiles do not cover every
 *      SM once, K is split over blockIdx.z into partial planes that one
 *      more launch adds in a fixed order (deterministic).
 * Rounding is what the old fused kernel did (weights dequantized in f32
 * then rounded to f16, activations rounded to f16); only the summation
 * order differs. Dequantizing in a separate pass costs a write and a read
 * of 2 bytes per weight per call (~60 us of a 7B ffn matrix's ~335 us on
 * the H200); in exchange the inner loop is a pure f16 GEMM and the
 * template count stays small (11 dequant + 3 GEMM). A 256-row tile
 * (8 warps of 64 x 64, one block per SM) runs from 4096 tokens, where it
 * measured faster; at 512 it was slower on every 7B shape (docs/PERF.md).
 *
 * This file is also the one entry point of the other prefill kernels:
 * path() picks per call between this kernel, gemm-i8.cu's, gemm-q.cu's
 * and gemm-wg.cu's in-place ones and gemm-ss.cu's (Hopper), which takes
 * stages 1 and 2 in wgmma's core-matrix order (ACT_CM, w16's cm) instead
 * of row order.
 */
#include <stdlib.h>

#include "common.cuh"
#include "gemm.cuh"
#include "mma.cuh"

#define G_BN 128     /* weight rows per block (default tile) */
#define G_BM 128     /* tokens per block */
#define G_THREADS 256
#define G_MAX_SPLITS 8
/* Weight rows dequantized per GEMM launch: bounds the scratch (a 7B
 * model's largest matrix, 18944 x 3584 f16, is 136 MB and fits whole). */
#define G_CHUNK_BYTES ((size_t)256 << 20)

/* BN weight rows per block (128 or 256), BK deep K slices. Each warp
 * computes 64 rows: 2 x 4 warps (n x m) for 128 rows, 4 x 2 for 256. */
template <int BN, int BK> struct gshape {
    static constexpr int WARPS_N = BN / 64, WARPS_M = 8 / WARPS_N;
    static constexpr int STAGES = BK == 64 ? 3 : 4; /* cp.async ring depth */
    static constexpr int LDS = BK + 8; /* halves per shared row: +16 bytes keep ldmatrix conflict-free */
    static constexpr int CPR = BK / 8; /* 16-byte chunks per row of a slice */
    static constexpr int ACH = BN * CPR / G_THREADS; /* A chunks per thread */
    static constexpr int BCH = G_BM * CPR / G_THREADS; /* B chunks per thread */
    static constexpr int MI = 4;                /* m16 mma tiles per warp along n */
    static constexpr int WM = G_BM / WARPS_M;   /* tokens per warp */
    static constexpr int NJ = WM / 8;   /* n8 mma tiles per warp along m */
    static constexpr size_t STAGE = (size_t)(BN + G_BM) * LDS; /* halves */
    static constexpr size_t SMEM = STAGE * STAGES * sizeof(__half);
    /* resident blocks per SM the register budget is sized for */
    static constexpr int MIN_BLOCKS = BN == 256 ? 1 : 2;
};

/* ---- f16 GEMM ---- */

/* dst[m][n] (=|+=) sum_k Wh[n][k] * xh[m][k] over klen values of k.
 * Wh rows lda halves apart, xh rows ldx apart; 16-byte aligned, klen a
 * multiple of BK. Split z of a split-K launch (blockIdx.z) takes the
 * z-th klen of K and writes its own plane, split_nb bytes further on. */
template <int BN, int BK>
__global__ void __launch_bounds__(G_THREADS, gshape<BN, BK>::MIN_BLOCKS)
    gemm_f16_kernel(const __half *__restrict__ Wh, int64_t lda, const __half *__restrict__ xh,
                    int64_t ldx, int klen, int N, int M, float *__restrict__ dst,
                    int64_t dst_nb1, int64_t split_nb, int accumulate, gepi ep)
{
    k_dep_enter();
    using S = gshape<BN, BK>;
    extern __shared__ __align__(128) unsigned char smem[];
    __half *ring = (__half *)smem; /* stage s: A [BN][LDS] then B [G_BM][LDS] */

    const int n0 = blockIdx.x * BN, m0 = blockIdx.y * G_BM;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wn = warp % S::WARPS_N, wm = warp / S::WARPS_N; /* warp tile: 64 x S::WM */
    const int64_t kz = (int64_t)blockIdx.z * klen;
    dst = (float *)((char *)dst + blockIdx.z * split_nb);

    /* Copy assignments: 16-byte chunk c = tid + 256 j of a slice covers
     * row c / CPR, halves 8 * (c % CPR). Rows past N or M copy zeros (from
     * a valid address). Addresses are recomputed per slice: keeping them
     * would cost two registers each and spill the 128 x 64 variant. */
    const int crow = tid / S::CPR, ccol = 8 * (tid % S::CPR);
    constexpr int RSTEP = G_THREADS / S::CPR; /* rows between a thread's chunks */
    const __half *wbase = Wh + kz + ccol, *xbase = xh + kz + ccol;

    auto load = [&](int stage, int k0) {
        __half *As = ring + stage * S::STAGE, *Bs = As + BN * S::LDS;
#pragma unroll
        for (int j = 0; j < S::ACH; j++) {
            int r = crow + RSTEP * j;
            bool ok = n0 + r < N;
            cp16(As + r * S::LDS + ccol, wbase + (int64_t)(ok ? n0 + r : 0) * lda + k0, ok);
        }
#pragma unroll
        for (int j = 0; j < S::BCH; j++) {
            int r = crow + RSTEP * j;
            bool ok = m0 + r < M;
            cp16(Bs + r * S::LDS + ccol, xbase + (int64_t)(ok ? m0 + r : 0) * ldx + k0, ok);
        }
    };

    float acc[S::MI][S::NJ][4];
#pragma unroll
    for (int i = 0; i < S::MI; i++)
#pragma unroll
        for (int j = 0; j < S::NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                acc[i][j][e] = 0.0f;

    const int nk = klen / BK;
#pragma unroll
    for (int s = 0; s < S::STAGES - 1; s++) {
        if (s < nk)
            load(s, s * BK);
        cp_commit();
    }

    /* ldmatrix lane addressing: A x4 = rows (q&1)*8 + l%8, k (q>>1)*8;
     * B x4 = tokens (q>>1)*8 + l%8, k (q&1)*8, with q = lane / 8. */
    const int q = lane >> 3, l8 = lane & 7;
    const int a_off = (wn * 64 + (q & 1) * 8 + l8) * S::LDS + (q >> 1) * 8;
    const int b_off = BN * S::LDS + (wm * S::WM + (q >> 1) * 8 + l8) * S::LDS + (q & 1) * 8;

    for (int kt = 0; kt < nk; kt++) {
        cp_wait<S::STAGES - 2>();
        __syncthreads(); /* slice kt landed; slice kt-1's buffer is free */
        int pf = kt + S::STAGES - 1;
        if (pf < nk)
            load(pf % S::STAGES, pf * BK);
        cp_commit();

        const __half *st = ring + (kt % S::STAGES) * S::STAGE;
#pragma unroll
        for (int kk = 0; kk < BK; kk += 16) {
            unsigned a[S::MI][4], b[S::NJ][2];
#pragma unroll
            for (int i = 0; i < S::MI; i++)
                ldsm4(a[i], st + a_off + i * 16 * S::LDS + kk);
#pragma unroll
            for (int j = 0; j < S::NJ; j += 2) {
                unsigned r[4];
                ldsm4(r, st + b_off + j * 8 * S::LDS + kk);
                b[j][0] = r[0];
                b[j][1] = r[1];
                b[j + 1][0] = r[2];
                b[j + 1][1] = r[3];
            }
#pragma unroll
            for (int i = 0; i < S::MI; i++)
#pragma unroll
                for (int j = 0; j < S::NJ; j++)
                    mma16816(acc[i][j], a[i], b[j][0], b[j][1]);
        }
    }
    cp_wait<0>();

    /* accumulator e of tile (i, j): row n = gid + 8*(e/2), token 2*tig + e%2 */
    const int gid = lane >> 2, tig = lane & 3;
#pragma unroll
    for (int i = 0; i < S::MI; i++)
        gemm_store_frag<S::NJ>(ep, &acc[i][0][0], n0 + wn * 64 + i * 16 + gid, m0 + wm * S::WM,
                               tig, N, M, dst, dst_nb1, accumulate);
}

/* dst[m][n] (=|+=) the sum of the split-K planes part[s][m][n] (N * M
 * floats each), added in split order so the result does not depend on
 * which split finished first, then ep applied. */
__global__ void gemm_reduce_kernel(const float *__restrict__ part, int splits, int N, int M,
                                   float *__restrict__ dst, int64_t dst_nb1, int accumulate,
                                   gepi ep)
{
    k_dep_enter();
    int64_t e = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, plane = (int64_t)N * M;
    if (e >= plane)
        return;
    int m = (int)(e / N), n = (int)(e % N);
    float v = part[e];
    for (int s = 1; s < splits; s++)
        v += part[s * plane + e];
    float *p = (float *)((char *)dst + (int64_t)m * dst_nb1) + n;
    *p = gepi_apply(ep, accumulate ? *p + v : v, ep.op ? *gepi_at(ep, m, n) : 0.0f);
}

int gemm_reduce(struct kctx *k, const float *part, int splits, int64_t N, int64_t M, float *dst,
                int64_t dst_nb1, int accumulate, gepi e)
{
    int64_t total = N * M;
    KLAUNCH(k, "gemm reduce", gemm_reduce_kernel, (unsigned)((total + 255) / 256), 256, 0, part,
            splits, (int)N, (int)M, dst, dst_nb1, accumulate, e);
    return 0;
}

int gemm_inplace_run(struct kctx *k, const char *site, gemm_inplace_launch launch, int splits,
                     const void *W, int64_t w_nb1, const void *x, int64_t K, int64_t N,
                     int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e,
                     int64_t tiles)
{
    if (splits > 1 && !part)
        return k_fail(k, site, "no scratch for the split-K planes was given");
    float *out = splits > 1 ? (float *)part : dst;
    int64_t out_nb1 = splits > 1 ? N * 4 : dst_nb1, split_nb = N * M * 4;
    const bool own = splits > 1 && tiles > 0 && k->tile_count && tiles <= KTILE_COUNTERS;
    const gsplit fs = {dst, dst_nb1, e, k->tile_count};
    if (launch(k, W, w_nb1, x, K, N, M, splits, out, out_nb1, split_nb,
               splits > 1 ? gepi{0, nullptr, 0} : e, own ? &fs : nullptr))
        return -1;
    return splits > 1 && !own ? gemm_reduce(k, out, splits, N, M, dst, dst_nb1, 0, e) : 0;
}

/* ---- activations and weights to f16 ---- */

/* Which kernel runs a call (path()), and so the form of its activations:
 * the f16-scratch kernel here, gemm-q.cu's in-place mma.sync kernel,
 * gemm-wg.cu's in-place wgmma one, gemm-ss.cu's wgmma one on f16
 * scratch (f16, each in its k order), or gemm-i8.cu's int8 one (q8_1). */
enum gpath { PATH_F16, PATH_Q, PATH_WG, PATH_SS, PATH_I8 };
enum act_order { ACT_PLAIN, ACT_PAIRS, ACT_WG, ACT_CM };

/* One thread per 8 values: xh[m][k] = f16(x[k, m]); xl (may be NULL) =
 * f16(x - xh), the part f16 cannot hold. order (enum act_order): plain,
 * each group of 4 stored as 0, 2, 1, 3 (gemm-q.cu's fragment order), or
 * core matrices (gemm.cuh, wg_act_unit; M padded to wg_act_tokens(M)
 * with zeros, mp tokens in all) with gemm-wg.cu's fragment order inside
 * each 256-value chunk (ACT_WG) or the natural one (ACT_CM, gemm-ss.cu). */
__global__ void gemm_act_kernel(const float *__restrict__ x, int64_t x_nb1, int K, int M, int mp,
                                __half *__restrict__ xh, __half *__restrict__ xl, int order)
{
    k_dep_enter();
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int kg = K / 8;
    bool cm = order == ACT_WG || order == ACT_CM;
    if (g >= (int64_t)kg * (cm ? mp : M))
        return;
    int m = (int)(g / kg), k = 8 * (int)(g % kg);
    if (cm) /* thread g writes unit g */
        wg_unit_pos(g, mp, &m, &k);
    const float *p = (const float *)((const char *)x + (int64_t)m * x_nb1) + k;
    float v[8];
    if (order == ACT_WG) {
        /* output unit k of a chunk: step s = (k % 256) / 16, half h; its
         * value 2 tig + e is the lane tig's value 4 s + h + 2 e */
        int c = k & ~(Q_CHUNK - 1), s = (k & (Q_CHUNK - 1)) >> 4, h = (k >> 3) & 1;
        p = (const float *)((const char *)x + (int64_t)m * x_nb1) + c + 4 * s + h;
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] = m < M ? p[64 * (e >> 1) + 2 * (e & 1)] : 0.0f;
        __align__(16) __half hv[8];
#pragma unroll
        for (int e = 0; e < 8; e++)
            hv[e] = __float2half_rn(v[e]);
        *(uint4 *)(xh + 8 * g) = *(const uint4 *)hv;
        return;
    } else if (m >= M) {
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] = 0.0f;
    } else if (((uintptr_t)p & 15) == 0) {
        float4 a = ((const float4 *)p)[0], b = ((const float4 *)p)[1];
        v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w;
        v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
        for (int e = 0; e < 8; e++)
            v[e] = p[e];
    }
    if (order == ACT_PAIRS) {
#pragma unroll
        for (int g = 0; g < 8; g += 4) {
            float t = v[g + 1];
            v[g + 1] = v[g + 2];
            v[g + 2] = t;
        }
    }
    __align__(16) __half h[8], lo[8];
#pragma unroll
    for (int e = 0; e < 8; e++) {
        h[e] = __float2half_rn(v[e]);
        lo[e] = __float2half_rn(v[e] - __half2float(h[e]));
    }
    int64_t u = cm ? 8 * g : (int64_t)m * K + k;
    *(uint4 *)(xh + u) = *(const uint4 *)h;
    if (xl)
        *(uint4 *)(xl + u) = *(const uint4 *)lo;
}

/* Rows [0, rows) of W (w_nb1 bytes apart) to f16, K halves per row, or
 * with cm in gemm-ss.cu's core-matrix order (rows padded to 8 with
 * zeros; thread g writes unit g). */
template <int T>
__global__ void gemm_w16_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, int K, int rows,
                                __half *__restrict__ wh, int cm)
{
    k_dep_enter();
    int64_t g = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    int kg = K / 8;
    int64_t rp = cm ? wg_act_tokens(rows) : rows;
    if (g >= (int64_t)kg * rp)
        return;
    int r = (int)(g / kg), k = 8 * (int)(g % kg);
    if (cm)
        wg_unit_pos(g, rp, &r, &k);
    float v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (r < rows)
        dq8<T>(W + (int64_t)r * w_nb1, k, v);
    __align__(16) __half h[8];
#pragma unroll
    for (int e = 0; e < 8; e++)
        h[e] = __float2half_rn(v[e]);
    *(uint4 *)(wh + (cm ? 8 * g : (int64_t)r * K + k)) = *(const uint4 *)h;
}

template <int T>
static int launch_w16(struct kctx *k, const void *W, int64_t w_nb1, int64_t K, int64_t rows,
                      void *wh, int cm)
{
    int64_t n = K / 8 * (cm ? wg_act_tokens(rows) : rows);
    unsigned blocks = (unsigned)((n + 255) / 256);
    auto kf = gemm_w16_kernel<T>;
    KLAUNCH(k, "gemm dequant", kf, blocks, 256, 0, (const uint8_t *)W, w_nb1, (int)K, (int)rows,
            (__half *)wh, cm);
    return 0;
}

static int w16(struct kctx *k, uint32_t type, const void *W, int64_t w_nb1, int64_t K,
               int64_t rows, void *wh, int cm)
{
#define WC(T) K_TYPE_CASE(T, launch_w16, k, W, w_nb1, K, rows, wh, cm)
    switch (type) {
        WC(MINFER_TYPE_F32) WC(MINFER_TYPE_F16) WC(MINFER_TYPE_BF16)
        WC(MINFER_TYPE_Q4_0) WC(MINFER_TYPE_Q4_1) WC(MINFER_TYPE_Q5_0) WC(MINFER_TYPE_Q5_1)
        WC(MINFER_TYPE_Q8_0) WC(MINFER_TYPE_Q4_K) WC(MINFER_TYPE_Q5_K) WC(MINFER_TYPE_Q6_K)
    default:
        return k_fail(k, "gemm", "weight type has no GEMM dequantization");
    }
#undef WC
}

/* ---- setup and launch ---- */

/* Forced configuration (0 = automatic): k_tune_gemm, called by the op
 * benchmark and, through the plugin's "minfer_cuda_test_tune_gemm"
 * extension, by the op tests, which run every kernel variant. */
static int g_bk, g_splits, g_bn;
/* The kernel forced for the types the in-place kernels cover (gpath + 1;
 * 0: by shape) */
static int g_path;

/* bn 128 or 256 forces this file's kernel with that tile; bn 16 or 64
 * forces gemm-q.cu's with that token tile; bn 4016, 4032 or 4064
 * gemm-i8.cu's with a 16-, 32- or 64-token tile; bn 1064 or 1128
 * gemm-wg.cu's with a 64- or 128-token tile, bn 2256 gemm-ss.cu's, where
 * they can run (a 9.0 device and a build with sm_90a), else the choice
 * stays automatic. */
extern "C" void k_tune_gemm(int bk, int splits, int bn)
{
    g_bk = bk == 32 || bk == 64 ? bk : 0;
    g_splits = splits >= 1 && splits <= G_MAX_SPLITS ? splits : 0;
    g_bn = bn == 128 || bn == 256 ? bn : 0;
    bool q = bn == 16 || bn == 64, wg = bn == 1064 || bn == 1128, ss = bn == 2256;
    bool i8 = bn == 4016 || bn == 4032 || bn == 4064;
    g_path = q      ? PATH_Q + 1
             : i8   ? PATH_I8 + 1
             : wg   ? PATH_WG + 1
             : ss   ? PATH_SS + 1
             : g_bn ? PATH_F16 + 1
                    : 0;
    gemm_q_tune(q ? bn : 0, q ? splits : 0);
    gemm_i8_tune(i8 ? bn - 4000 : 0, i8 ? splits : 0);
#ifdef MINFER_CUDA_WGMMA /* gemm-wg.cu and gemm-ss.cu are built (the sm_90a object) */
    gemm_wg_tune(wg ? bn - 1000 : 0, wg ? splits : 0);
    gemm_ss_tune(ss ? splits : 0);
#endif
}

/* The kernel for a call: one decision for the activation order, the
 * scratch size and the launch. By shape, from minfer-cuda-bench --gemmwg
 * and --gemm-one on the H200 (docs/PERF.md): gemm-i8.cu's int8 kernel up
 * to 32 tokens on every device (q4_K ffn up at 16 / 32 tokens: 46.6 /
 * 67.7 us against gemm-q.cu's 51.6 / 93.5 and gemm-wg.cu's 88.9 / 89.6;
 * at 64 it lost to gemm-wg.cu, 103 against 90); where the wgmma kernels
 * can run, gemm-wg.cu's (weights unpacked in place) at 33-1,023 tokens
 * (at 128-512 tokens 1.1-1.5x the f16 kernel) and gemm-ss.cu's (f16 scratch, both operands
 * by bulk copy) from 1,024 (at 1,024 tokens 1.15-1.25x gemm-wg.cu on the
 * ffn shapes, even on the attention one; at 8,192 1.5-1.85x the f16
 * kernel), for every type and for the hi/lo split of float weights too.
 * Without wgmma, gemm-q.cu at 33-64 tokens (1.3-3x the f16 kernel there)
 * and the f16 kernel beyond. */
#define GI8_MAX_M 32
#define GQ_MAX_M 64
#define GSS_MIN_M 1024
static enum gpath path(const struct kctx *k, uint32_t type, int64_t K, int64_t M, const void *xl)
{
    bool ss = false;
#ifdef MINFER_CUDA_WGMMA
    ss = wg_ready(k) && gemm_ss_eligible(K);
#endif
    if (ss && (g_path == PATH_SS + 1 || (!g_path && M >= GSS_MIN_M)))
        return PATH_SS;
    if (xl || !gemm_q_eligible(type, K))
        return PATH_F16;
    if (g_path == PATH_WG + 1 && wg_ready(k))
        return PATH_WG;
    if (g_path == PATH_Q + 1 || g_path == PATH_F16 + 1 || g_path == PATH_I8 + 1)
        return (enum gpath)(g_path - 1);
    if (M <= GI8_MAX_M)
        return PATH_I8;
    if (wg_ready(k))
        return PATH_WG;
    return M <= GQ_MAX_M ? PATH_Q : PATH_F16;
}

template <int BN, int BK> static int optin_one(struct kctx *k)
{
    return k_smem_optin(k, (const void *)gemm_f16_kernel<BN, BK>, (int)gshape<BN, BK>::SMEM,
                        "gemm (prefill GEMM disabled on this device)");
}

/* The launcher never asks for the opt-in: k_prepare does, once per
 * device, for both slice depths (device.c calls it at the first instance
 * creation, before any capture window of any instance can exist). */
extern "C" int k_prepare(struct kctx *k)
{
    k->gemm_optin_ok = 0;
    size_t need = gshape<256, 64>::SMEM;
    if (k->smem_optin < (int)need) {
        snprintf(k->err, k->err_len,
                 "gemm: needs %zu bytes of dynamic shared memory but device %d allows %d per "
                 "block; prefill GEMM disabled (the matrix-vector kernels serve every nt)",
                 need, k->device, k->smem_optin);
        return -1;
    }
    if (optin_one<128, 32>(k) || optin_one<128, 64>(k) || optin_one<256, 64>(k) ||
        gemm_q_prepare(k) || gemm_i8_prepare(k))
        return -1;
#ifdef MINFER_CUDA_WGMMA
    if (wg_ready(k) && (gemm_wg_prepare(k) || gemm_ss_prepare(k)))
        return -1;
#endif
    k->gemm_optin_ok = 1;
    return 0;
}

/* Slice depth and split count for n weight rows, M tokens, depth K.
 * Measured on the H200 (docs/PERF.md): 64-deep slices beat 32 on every
 * 7B shape; 128 x 128 tiles beat 128 x 64, 96 x 128 and 256 x 128 ones
 * (96 rows even where they fill the last wave better) up to 512 tokens,
 * 256 x 128 from 4096; splitting K pays when the tiles do not cover
 * every SM once. */
#define G_BN256_MIN_M 4096
struct gplan {
    int bn, bk, splits;
};

static struct gplan plan(const struct kctx *k, int64_t K, int64_t n, int64_t M)
{
    struct gplan p;
    p.bk = g_bk ? g_bk : 64;
    if (K % p.bk)
        p.bk = 32;
    p.bn = p.bk == 64 && g_bn ? g_bn : G_BN;
    /* 256-row tiles from 4096 tokens: they copy 25% fewer operand bytes
     * per product from L2, which bounds these long GEMMs (8192 tokens:
     * ffn 3874 vs 4126-4458 us, pp8192 +8%); at 512 tokens they lost */
    if (!g_bn && p.bk == 64 && M >= G_BN256_MIN_M)
        p.bn = 256;
    int64_t tiles = (n + p.bn - 1) / p.bn * ((M + G_BM - 1) / G_BM);
    if (g_splits) {
        p.splits = g_splits;
        while (p.splits > 1 && K % ((int64_t)p.splits * p.bk))
            p.splits /= 2;
    } else {
        /* split K until the grid covers every SM once, keeping slices of
         * at least 256 values so the pipeline fills */
        p.splits = 1;
        while (p.splits < G_MAX_SPLITS && tiles * p.splits < k->sm_count &&
               K % (2LL * p.splits * p.bk) == 0 && K / (2 * p.splits) >= 256)
            p.splits *= 2;
    }
    return p;
}

static size_t part_bytes(const struct kctx *k, int64_t K, int64_t n, int64_t M)
{
    struct gplan p = plan(k, K, n, M);
    return p.splits > 1 ? (size_t)p.splits * (size_t)n * (size_t)M * 4 : 0;
}

template <int BN, int BK>
static int launch_t(struct kctx *k, const __half *Wh, int64_t lda, const __half *xh, int64_t K,
                    int64_t n, int64_t M, int splits, float *out, int64_t out_nb1,
                    int64_t split_nb, int accumulate, gepi e)
{
    dim3 grid((unsigned)((n + BN - 1) / BN), (unsigned)((M + G_BM - 1) / G_BM), (unsigned)splits);
    auto kf = gemm_f16_kernel<BN, BK>;
    const size_t smem = gshape<BN, BK>::SMEM;
    KLAUNCH(k, "gemm", kf, grid, G_THREADS, smem, Wh, lda, xh, K, (int)(K / splits), (int)n,
            (int)M, out, out_nb1, split_nb, accumulate, e);
    return 0;
}

/* dst (=|+=) Wh . xh for n rows, then e; part: split-K planes (part_bytes). */
static int launch_f16(struct kctx *k, const __half *Wh, int64_t lda, int64_t K, int64_t n,
                      const __half *xh, int64_t M, float *dst, int64_t dst_nb1, int accumulate,
                      float *part, gepi e)
{
    struct gplan p = plan(k, K, n, M);
    float *out = p.splits > 1 ? part : dst;
    int64_t out_nb1 = p.splits > 1 ? n * 4 : dst_nb1, split_nb = n * M * 4;
    int acc = p.splits > 1 ? 0 : accumulate;
    gepi ek = p.splits > 1 ? gepi{0, nullptr, 0} : e; /* the kernel's, or the reduction's */
    int rc;
    if (p.bn == 256)
        rc = launch_t<256, 64>(k, Wh, lda, xh, K, n, M, p.splits, out, out_nb1, split_nb, acc, ek);
    else if (p.bk == 64)
        rc = launch_t<128, 64>(k, Wh, lda, xh, K, n, M, p.splits, out, out_nb1, split_nb, acc, ek);
    else
        rc = launch_t<128, 32>(k, Wh, lda, xh, K, n, M, p.splits, out, out_nb1, split_nb, acc, ek);
    if (rc || p.splits == 1)
        return rc;
    return gemm_reduce(k, part, p.splits, n, M, dst, dst_nb1, accumulate, e);
}

extern "C" int k_gemm_supported(uint32_t type)
{
    switch (type) {
    case MINFER_TYPE_F32: case MINFER_TYPE_F16: case MINFER_TYPE_BF16:
    case MINFER_TYPE_Q4_0: case MINFER_TYPE_Q4_1: case MINFER_TYPE_Q5_0:
    case MINFER_TYPE_Q5_1: case MINFER_TYPE_Q8_0: case MINFER_TYPE_Q4_K:
    case MINFER_TYPE_Q5_K: case MINFER_TYPE_Q6_K:
        return 1;
    default:
        return 0;
    }
}

/* f16 weights whose rows the kernel can stream in place. */
static bool w_direct(uint32_t type, const void *W, int64_t w_nb1)
{
    return type == MINFER_TYPE_F16 && ((uintptr_t)W & 15) == 0 && w_nb1 % 16 == 0;
}

/* Weight rows per dequantization pass (N when the rows are read in
 * place); direct: whether they are. */
static int64_t chunk_rows(bool direct, int64_t K, int64_t N)
{
    if (direct)
        return N;
    int64_t rows = (int64_t)(G_CHUNK_BYTES / ((size_t)K * 2)) / 256 * 256; /* whole tiles */
    if (rows < 256)
        rows = 256;
    return rows < N ? rows : N;
}

static size_t round256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

extern "C" size_t k_gemm_act_bytes(int64_t K, int64_t M)
{
    return (size_t)K * (size_t)wg_act_tokens(M) * 2; /* the largest of the orders */
}

extern "C" size_t k_gemm_scratch_bytes(const struct kctx *k, uint32_t type, const void *W,
                                       int64_t K, int64_t N, int64_t M, int64_t w_nb1)
{
    enum gpath pa = path(k, type, K, M, NULL);
    if (pa == PATH_Q)
        return gemm_q_part_bytes(k, K, N, M);
    if (pa == PATH_I8)
        return gemm_i8_part_bytes(k, K, N, M);
#ifdef MINFER_CUDA_WGMMA
    if (pa == PATH_WG)
        return gemm_wg_part_bytes(k, K, N, M);
    if (pa == PATH_SS) { /* every chunk of rows dequantized, padded to 8 */
        int64_t rows = chunk_rows(false, K, N);
        size_t pb = gemm_ss_part_bytes(k, K, rows, M), pl = gemm_ss_part_bytes(k, K, N % rows, M);
        return round256((size_t)wg_act_tokens(rows) * (size_t)K * 2) + (pb > pl ? pb : pl);
    }
#endif
    int64_t rows = chunk_rows(w_direct(type, W, w_nb1), K, N);
    size_t wb = w_direct(type, W, w_nb1) ? 0 : round256((size_t)rows * (size_t)K * 2);
    size_t pb = part_bytes(k, K, rows, M), pl = part_bytes(k, K, N % rows, M);
    return wb + (pb > pl ? pb : pl);
}

extern "C" int k_gemm_multi_ok(const struct kctx *k, uint32_t type, const struct kgemm_seg *segs,
                               int count, int64_t K, int64_t M)
{
    return k->gemm_optin_ok && gemm_q_eligible(type, K) && path(k, type, K, M, NULL) == PATH_I8 &&
           gemm_i8_multi_ok(k, type, segs, count, K, M);
}

extern "C" size_t k_gemm_multi_scratch_bytes(const struct kctx *k, uint32_t type,
                                             const struct kgemm_seg *segs, int count, int64_t K,
                                             int64_t M)
{
    (void)type;
    return gemm_i8_multi_part_bytes(k, segs, count, K, M);
}

extern "C" int k_gemm_multi(struct kctx *k, uint32_t type, const struct kgemm_seg *segs,
                            int count, int64_t K, const void *xq, int64_t M, void *scratch)
{
    if (!k_gemm_multi_ok(k, type, segs, count, K, M))
        return k_fail(k, "gemm", "these products cannot run as one launch");
    if (((uintptr_t)scratch & 255))
        return k_fail(k, "gemm", "scratch must be 256-byte aligned");
    return gemm_i8_multi(k, type, segs, count, K, xq, M, scratch);
}

extern "C" int k_gemm_epi_pays(const struct kctx *k, uint32_t type, int64_t K, int64_t M)
{
    return path(k, type, K, M, NULL) != PATH_SS;
}

extern "C" int k_gemm_takes_q8_1(const struct kctx *k, uint32_t type, int64_t K, int64_t M)
{
    if (!gemm_q_eligible(type, K) || path(k, type, K, M, NULL) != PATH_I8)
        return 0;
    return gemm_i8_group(type, M);
}

/* The f16 order of each path's activations. */
static int act_order(enum gpath pa)
{
    return pa == PATH_Q ? ACT_PAIRS : pa == PATH_WG ? ACT_WG : pa == PATH_SS ? ACT_CM : ACT_PLAIN;
}

extern "C" int k_gemm_act_form(const struct kctx *k, uint32_t type, int64_t K, int64_t M)
{
    int group = k_gemm_takes_q8_1(k, type, K, M);
    return group ? group : KGEMM_ACT_F16 + act_order(path(k, type, K, M, NULL));
}

extern "C" int k_gemm_glu_ok(const struct kctx *k, uint32_t type, int64_t K, int64_t M)
{
#ifdef MINFER_CUDA_WGMMA
    return k->gemm_optin_ok && gemm_q_eligible(type, K) && path(k, type, K, M, NULL) == PATH_WG &&
           gemm_wg_glu_ok();
#else
    (void)k, (void)type, (void)K, (void)M;
    return 0;
#endif
}

extern "C" size_t k_gemm_glu_scratch_bytes(const struct kctx *k, uint32_t type, int64_t K,
                                           int64_t N, int64_t M)
{
#ifdef MINFER_CUDA_WGMMA
    return k_gemm_glu_ok(k, type, K, M) ? gemm_wg_glu_part_bytes(k, K, N, M) : 0;
#else
    (void)k, (void)type, (void)K, (void)N, (void)M;
    return 0;
#endif
}

extern "C" int k_gemm_glu_act_form(const struct kctx *k, uint32_t type, int64_t N, int64_t M)
{
    const int form = k_gemm_act_form(k, type, N, M);
    return N % Q_CHUNK == 0 && form == KGEMM_ACT_F16 + ACT_WG ? form : 0;
}

extern "C" int k_gemm_glu(struct kctx *k, uint32_t type, const void *G, const void *U, int64_t K,
                          int64_t N, int64_t w_nb1, const void *xh, int64_t M, float *dst,
                          int64_t dst_nb1, void *scratch, void *xo)
{
    if (!k_gemm_glu_ok(k, type, K, M))
        return k_fail(k, "gemm", "this gate/up pair cannot run as one launch");
    if (N > INT32_MAX || ((uintptr_t)xh & 15))
        return k_fail(k, "gemm", "N must be below 2^31 and xh 16-byte aligned");
#ifdef MINFER_CUDA_WGMMA
    return gemm_wg_glu(k, type, G, U, K, N, w_nb1, xh, M, dst, dst_nb1, scratch, xo);
#else
    (void)G, (void)U, (void)w_nb1, (void)dst, (void)dst_nb1, (void)scratch, (void)xo;
    return -1;
#endif
}

extern "C" int k_gemm_act(struct kctx *k, uint32_t wtype, const float *x, int64_t K,
                          int64_t M, int64_t x_nb1, void *xh, void *xl)
{
    if (K % 32 || K > INT32_MAX || M > INT32_MAX - WG_GROUP)
        return k_fail(k, "gemm act", "K must be a multiple of 32 and K, M below 2^31 - 8");
    if (((uintptr_t)xh & 15) || ((uintptr_t)xl & 15))
        return k_fail(k, "gemm act", "f16 activation buffers must be 16-byte aligned");
    enum gpath pa = path(k, wtype, K, M, xl);
    if (pa == PATH_I8) /* k_gemm_act_bytes covers q8_1's 1.25 bytes per value */
        return k_quantize_q8_1(k, x, K, M, x_nb1, gemm_i8_group(wtype, M), xh);
    int order = act_order(pa);
    int64_t mp = wg_act_tokens(M), n = K / 8 * (order == ACT_WG || order == ACT_CM ? mp : M);
    KLAUNCH(k, "gemm act", gemm_act_kernel, (unsigned)((n + 255) / 256), 256, 0, x, x_nb1,
            (int)K, (int)M, (int)mp, (__half *)xh, (__half *)xl, order);
    return 0;
}

extern "C" int k_gemm(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                      int64_t w_nb1, const void *xh, const void *xl, int64_t M, float *dst,
                      int64_t dst_nb1, void *scratch, const struct kgemm_epi *epi)
{
    if (!k->gemm_optin_ok)
        return k_fail(k, "gemm", "the >48 KiB shared-memory opt-in was refused on this device "
                                 "(see the instance's creation message)");
    if (!k_gemm_supported(type))
        return k_fail(k, "gemm", "weight type has no GEMM dequantization");
    if (K % 32 || K > INT32_MAX || N > INT32_MAX)
        return k_fail(k, "gemm", "K must be a multiple of 32 and K, N below 2^31");
    if ((M + G_BM - 1) / G_BM > 65535)
        return k_fail(k, "gemm", "too many tokens for one launch");
    if (((uintptr_t)xh & 15) || ((uintptr_t)xl & 15) || ((uintptr_t)scratch & 255))
        return k_fail(k, "gemm", "f16 buffers must be 16-byte and scratch 256-byte aligned");
    if (epi && (epi->op != KGEMM_ADD && epi->op != KGEMM_SILU_MUL))
        return k_fail(k, "gemm", "unknown epilogue");
    const gepi e = gepi_of(epi), none = {0, nullptr, 0};
    /* the epilogue of output rows [r0, ...) of a chunk: its aux from r0 on */
    auto e_from = [&](int64_t r0) {
        gepi c = e;
        c.aux = c.op ? c.aux + r0 : nullptr;
        return c;
    };
    enum gpath pa = path(k, type, K, M, xl);
    if (pa == PATH_Q)
        return gemm_q(k, type, W, K, N, w_nb1, xh, M, dst, dst_nb1, scratch, e);
    if (pa == PATH_I8)
        return gemm_i8(k, type, W, K, N, w_nb1, xh, M, dst, dst_nb1, scratch, e);
#ifdef MINFER_CUDA_WGMMA
    if (pa == PATH_WG)
        return gemm_wg(k, type, W, K, N, w_nb1, xh, M, dst, dst_nb1, scratch, e);
    if (pa == PATH_SS) {
        if (!scratch)
            return k_fail(k, "gemm", "no scratch (k_gemm_scratch_bytes) was given");
        int64_t rows = chunk_rows(false, K, N);
        const __half *wc = (const __half *)scratch;
        void *part = (char *)scratch + round256((size_t)wg_act_tokens(rows) * (size_t)K * 2);
        for (int64_t r0 = 0; r0 < N; r0 += rows) {
            int64_t nc = N - r0 < rows ? N - r0 : rows, rp = wg_act_tokens(nc);
            if (w16(k, type, (const uint8_t *)W + r0 * w_nb1, w_nb1, K, nc, scratch, 1) ||
                gemm_ss(k, wc, rp, (const __half *)xh, K, nc, M, dst + r0, dst_nb1, 0, part,
                        xl ? none : e_from(r0)) ||
                (xl && gemm_ss(k, wc, rp, (const __half *)xl, K, nc, M, dst + r0, dst_nb1, 1,
                               part, e_from(r0))))
                return -1;
        }
        return 0;
    }
#endif
    bool direct = w_direct(type, W, w_nb1);
    int64_t rows = chunk_rows(w_direct(type, W, w_nb1), K, N);
    size_t wb = direct ? 0 : round256((size_t)rows * (size_t)K * 2);
    if ((!direct || part_bytes(k, K, rows, M) || part_bytes(k, K, N % rows, M)) && !scratch)
        return k_fail(k, "gemm", "no scratch (k_gemm_scratch_bytes) was given");
    float *part = (float *)((char *)scratch + wb);
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
        int64_t nc = N - r0 < rows ? N - r0 : rows;
        float *d = dst + r0; /* dst[m][r0 + n] */
        const __half *wh = (const __half *)scratch;
        int64_t lda = K;
        if (direct) {
            wh = (const __half *)((const char *)W + r0 * w_nb1);
            lda = w_nb1 / 2;
        } else if (w16(k, type, (const uint8_t *)W + r0 * w_nb1, w_nb1, K, nc, scratch, 0)) {
            return -1;
        }
        if (launch_f16(k, wh, lda, K, nc, (const __half *)xh, M, d, dst_nb1, 0, part,
                       xl ? none : e_from(r0)))
            return -1;
        if (xl && launch_f16(k, wh, lda, K, nc, (const __half *)xl, M, d, dst_nb1, 1, part,
                             e_from(r0)))
            return -1;
    }
    return 0;
}
