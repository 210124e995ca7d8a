/*
 * gemm-ss.cu — the Hopper (sm_90a) GEMM for long prefills: dst[n, m] =
 * sum_k W[k, n] * x[k, m] with both operands f16 in shared memory ("SS")
 * and f32 accumulation on warpgroup MMA.
 *
 * Why: at thousands of tokens per call, dequantizing the weights once to
 * f16 scratch costs little (a 7B ffn matrix: ~60 us against a GEMM of
 * several ms at 8,192 tokens), and what remains is a plain f16 GEMM.
 * gemm.cu's kernel runs it on mma.sync at ~280 TFLOP/s; gemm-wg.cu reads
 * quantized weights in place but unpacks them again for every token tile,
 * which bounds it near 320. Here nothing but the tensor cores and the
 * copies are in the loop.
 *
 * Operands: both in wgmma's K-major "core matrix" order without swizzle
 * (gemm.cuh, wg_act_unit, the values of each unit in natural k order):
 * for each 16-value step of K, the rows' 8-row groups are consecutive, so
 * one step of a 128-row or 256-token tile is one contiguous bulk copy.
 * gemm.cu's dequantization writes the weights so (rows padded to 8) and
 * k_gemm_act the activations (ACT_CM).
 *
 * Block: one producer warp and two consumer warpgroups. The producer's
 * lane 0 copies each 64-deep stage of K (4 steps, a 128-row weight tile
 * and a 256-token activation tile, 48 KiB) by cp.async.bulk into a 4-stage
 * ring, completing on the stage's "full" mbarrier; each consumer warpgroup
 * issues 4 wgmma m64n256k16 per stage on its 64 rows, keeps one stage's
 * products in flight and releases the stage before it on its "empty"
 * mbarrier. Tiles past the last 8-row group copy nothing there; the stale
 * shared memory feeds only accumulators that are never stored.
 *
 * Tile order: blocks walk GROUP_M token tiles at a time across every row
 * tile, so the blocks resident together share the activations of a few
 * token tiles and the weights of a few row tiles in L2.
 *
 * Split-K over whole stages (blockIdx.y) into partial planes that gemm.cu's
 * fixed-order reduction adds, when the tiles do not cover the GPU once.
 *
 * Built only for sm_90a (CMakeLists.txt); gemm.cu calls it only on a 9.0
 * device and only when it was built (MINFER_CUDA_WGMMA).
 */
#include "common.cuh"
#include "gemm.cuh"
#include "wgmma.cuh"

#define S_CONSUMERS 2                          /* consumer warpgroups */
#define S_THREADS (128 * S_CONSUMERS + 32)     /* + the producer warp */
#define S_BN (64 * S_CONSUMERS)                /* weight rows per block */
#define S_BM 256                               /* tokens per block */
#define S_BK 64                                /* K per stage */
#define S_STAGES 4
#define S_GROUP_M 8                            /* token tiles walked together */
#define S_MAX_SPLITS 8
#define S_ASTAGE (S_BN * S_BK * 2)
#define S_STAGE (S_ASTAGE + S_BM * S_BK * 2)
#define S_SMEM (S_STAGES * S_STAGE)

/* Wc: rp (a multiple of 8) weight rows, xc: mp tokens, both in the
 * core-matrix order; rows past n and tokens past M are not stored. Split
 * z = blockIdx.y takes K values [z klen, (z + 1) klen) and writes its own
 * plane, split_nb bytes further on. */
__global__ void __launch_bounds__(S_THREADS, 1)
    gemm_ss_kernel(const __half *__restrict__ Wc, int64_t rp, const __half *__restrict__ xc,
                   int64_t mp, int klen, int n, int M, float *__restrict__ dst,
                   int64_t dst_nb1, int64_t split_nb, int accumulate, gepi ep)
{
    k_dep_enter();
#ifdef WG_DEVICE
    extern __shared__ __align__(128) unsigned char smem[];
    __shared__ __align__(8) uint64_t full[S_STAGES], empty[S_STAGES];

    /* grouped tile order: GROUP_M token tiles, every row tile of them */
    const int tiles_n = (n + S_BN - 1) / S_BN, tiles_m = (M + S_BM - 1) / S_BM;
    const int b = blockIdx.x, per_group = S_GROUP_M * tiles_n;
    const int first_m = b / per_group * S_GROUP_M;
    const int gsize = tiles_m - first_m < S_GROUP_M ? tiles_m - first_m : S_GROUP_M;
    const int m0 = (first_m + b % per_group % gsize) * S_BM;
    const int n0 = b % per_group / gsize * S_BN;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int nk = klen / S_BK, step0 = blockIdx.y * klen / 16;
    dst = (float *)((char *)dst + blockIdx.y * split_nb);

    if (tid == 0) {
        for (int s = 0; s < S_STAGES; s++) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 4 * S_CONSUMERS); /* lane 0 of each consumer warp */
        }
        mbar_init_fence();
    }
    __syncthreads();

    if (warp == 4 * S_CONSUMERS) { /* the producer warp */
        if (lane != 0)
            return;
        const unsigned abytes = (unsigned)(rp - n0 < S_BN ? rp - n0 : S_BN) * 32;
        const unsigned bbytes = (unsigned)(mp - m0 < S_BM ? mp - m0 : S_BM) * 32;
        for (int kt = 0; kt < nk; kt++) {
            int s = kt % S_STAGES;
            if (kt >= S_STAGES)
                mbar_wait(&empty[s], (unsigned)(kt / S_STAGES - 1) & 1);
            unsigned char *As = smem + s * S_STAGE, *Bs = As + S_ASTAGE;
            mbar_expect(&full[s], 4 * (abytes + bbytes));
#pragma unroll
            for (int j = 0; j < 4; j++) {
                int64_t st = step0 + kt * 4 + j;
                bulk_g2s(As + j * S_BN * 32, Wc + 8 * wg_act_unit(n0, st / 16, (int)(st % 16), 0, rp),
                         abytes, &full[s]);
                bulk_g2s(Bs + j * S_BM * 32, xc + 8 * wg_act_unit(m0, st / 16, (int)(st % 16), 0, mp),
                         bbytes, &full[s]);
            }
        }
        return;
    }

    const int wg = warp >> 2;
    float acc[128];
#pragma unroll
    for (int i = 0; i < 128; i++)
        acc[i] = 0.0f;
    for (int kt = 0; kt < nk; kt++) {
        int s = kt % S_STAGES;
        mbar_wait(&full[s], (unsigned)(kt / S_STAGES) & 1);
        const unsigned char *As = smem + s * S_STAGE + wg * 64 * 32, *Bs = smem + s * S_STAGE + S_ASTAGE;
        wg_fence();
#pragma unroll
        for (int j = 0; j < 4; j++)
            wg_mma_ss256(acc, wg_desc(As + j * S_BN * 32, 128, 256),
                         wg_desc(Bs + j * S_BM * 32, 128, 256), 1);
        wg_commit();
        wg_wait<1>(); /* stage kt - 1's products are done: release it */
        if (kt > 0 && lane == 0)
            mbar_arrive(&empty[(kt - 1) % S_STAGES]);
    }
    wg_wait<0>();

    const int gid = lane >> 2, tig = lane & 3;
    const int r = n0 + wg * 64 + (warp & 3) * 16 + gid;
    gemm_store_frag<32>(ep, acc, r, m0, tig, n, M, dst, dst_nb1, accumulate);
#endif /* WG_DEVICE */
}

/* ---- dispatch ---- */

static int g_splits; /* forced split count; 0 = automatic */

void gemm_ss_tune(int splits)
{
    g_splits = splits >= 1 && splits <= S_MAX_SPLITS ? splits : 0;
}

bool gemm_ss_eligible(int64_t K)
{
    return K % S_BK == 0;
}

/* Splits of K (whole stages, at least 8 of them each) until the tiles
 * cover every SM once. */
static int ss_splits(const struct kctx *k, int64_t K, int64_t n, int64_t M)
{
    int64_t stages = K / S_BK;
    int s = 1;
    if (g_splits) {
        s = g_splits;
        while (s > 1 && stages % s)
            s--;
        return s;
    }
    int64_t tiles = (n + S_BN - 1) / S_BN * ((M + S_BM - 1) / S_BM);
    while (s * 2 <= S_MAX_SPLITS && tiles * s < k->sm_count && stages % (s * 2) == 0 &&
           stages / (s * 2) >= 8)
        s *= 2;
    return s;
}

size_t gemm_ss_part_bytes(const struct kctx *k, int64_t K, int64_t n, int64_t M)
{
    return gemm_planes_bytes(ss_splits(k, K, n, M), n, M);
}

int gemm_ss_prepare(struct kctx *k)
{
    if (k->smem_optin < S_SMEM) {
        snprintf(k->err, k->err_len,
                 "gemm_ss: needs %d bytes of dynamic shared memory but device %d allows %d",
                 S_SMEM, k->device, k->smem_optin);
        return -1;
    }
    return k_smem_optin(k, (const void *)gemm_ss_kernel, S_SMEM, "gemm_ss");
}

int gemm_ss(struct kctx *k, const __half *wc, int64_t rp, const __half *xc, int64_t K,
            int64_t n, int64_t M, float *dst, int64_t dst_nb1, int accumulate, void *part,
            gepi e)
{
    int64_t tiles = (n + S_BN - 1) / S_BN * ((M + S_BM - 1) / S_BM);
    if (tiles > INT32_MAX || K % S_BK || rp % 8)
        return k_fail(k, "gemm_ss", "shape out of range (K %% 64, rows %% 8, tile count)");
    int splits = ss_splits(k, K, n, M);
    if (splits > 1 && !part)
        return k_fail(k, "gemm_ss", "no scratch for the split-K planes was given");
    float *out = splits > 1 ? (float *)part : dst;
    int64_t out_nb1 = splits > 1 ? n * 4 : dst_nb1;
    dim3 grid((unsigned)tiles, (unsigned)splits);
    KLAUNCH(k, "gemm_ss", gemm_ss_kernel, grid, S_THREADS, S_SMEM, wc, rp, xc,
            wg_act_tokens(M), (int)(K / splits), (int)n, (int)M, out, out_nb1, n * M * 4,
            splits > 1 ? 0 : accumulate, splits > 1 ? gepi{0, nullptr, 0} : e);
    return splits > 1 ? gemm_reduce(k, (const float *)part, splits, n, M, dst, dst_nb1,
                                    accumulate, e)
                      : 0;
}
