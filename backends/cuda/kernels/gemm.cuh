/*
 * gemm.cuh — what the prefill GEMMs share across translation units:
 * gemm.cu (the entry points; its own kernel takes weights dequantized to
 * f16 scratch, any readable type) picks one kernel per call (path()):
 * gemm-i8.cu's, gemm-q.cu's and gemm-wg.cu's in-place kernels for the
 * types they cover, or gemm-ss.cu's on f16 scratch in the core-matrix
 * order below.
 * All of them use gemm.cu's fixed-order reduction of split-K planes.
 */
#ifndef MINFER_CUDA_GEMM_CUH
#define MINFER_CUDA_GEMM_CUH

#include <cuda_fp16.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels.h"
#include "minfer/types.h"

/* K values per chunk of the in-place kernels: one K-quant block */
#define Q_CHUNK 256

/* The chunks [*c0, *c0 + *nc) of K's that split z of `splits` takes
 * (consecutive, as even as whole chunks allow). */
__device__ __forceinline__ void split_chunks(int K, int z, int splits, int *c0, int *nc)
{
    const int nch = K / Q_CHUNK;
    *c0 = (int)((int64_t)nch * z / splits);
    *nc = (int)((int64_t)nch * (z + 1) / splits) - *c0;
}

/* gemm-wg.cu's activations (k_gemm_act's order ACT_WG), in 16-byte units:
 * step s (16 values) of chunk c of 8-token group g is one wgmma core
 * matrix, its two halves h (values 8h..8h+7 of the step, each permuted
 * as gemm-wg.cu's fragments want) 128 bytes apart, token m % 8 its row.
 * The groups of one (chunk, step) are consecutive, so the tokens of a
 * tile need one contiguous bulk copy per step. Tokens are padded with
 * zeros to whole groups only: a tile past the last group copies nothing
 * for its missing tokens (a 64-token tile at 16 tokens copies 16), and
 * the stale shared memory there feeds only accumulator columns of tokens
 * that are never stored. */
#define WG_GROUP 8
__host__ __device__ static inline int64_t wg_act_tokens(int64_t M)
{
    return (M + WG_GROUP - 1) / WG_GROUP * WG_GROUP;
}
__host__ __device__ static inline int64_t wg_act_unit(int64_t m, int64_t c, int s, int h,
                                                      int64_t mp)
{
    return (((c * 16 + s) * (mp / 8) + m / 8) * 2 + h) * 8 + m % 8;
}
/* The inverse: unit u holds values [k, k + 8) of row m. The kernels that
 * write this order give each thread one unit, so a warp writes 512
 * contiguous bytes. */
__host__ __device__ static inline void wg_unit_pos(int64_t u, int64_t mp, int *m, int *k)
{
    int64_t q = u >> 4, groups = mp / 8;
    *m = (int)(q % groups * 8 + (u & 7));
    *k = (int)(q / groups * 16 + ((u >> 3) & 1) * 8);
}

/* The epilogue by value for the kernels (op 0: store the sum as it is). */
struct gepi {
    int op;
    const float *aux;
    int64_t aux_nb1;
};
static inline gepi gepi_of(const struct kgemm_epi *e)
{
    return e ? gepi{e->op, e->aux, e->aux_nb1} : gepi{0, nullptr, 0};
}
/* v as stored at output (n, m) given its addend a = aux[m][n] (kernels.h,
 * struct kgemm_epi). */
__device__ __forceinline__ float gepi_apply(const gepi &e, float v, float a)
{
    if (!e.op)
        return v;
    return e.op == KGEMM_ADD ? v + a : a / (1.0f + expf(-a)) * v;
}
__device__ __forceinline__ const float *gepi_at(const gepi &e, int64_t m, int64_t n)
{
    return (const float *)((const char *)e.aux + m * e.aux_nb1) + n;
}

/* Stores one warp's mma accumulators: acc[4 j + e] is output row
 * r + 8 (e / 2), token m0 + 8 j + 2 tig + e % 2 (the m16n8 C fragment of
 * lane (gid, tig), r = the warp's first row + gid), for NJ 8-token groups;
 * dst (=|+=) the sum, then ep. Every kernel stores through this. The
 * addends (and, accumulating, the old values) are loaded 16 at a time
 * before any of them is stored: a load after a store the compiler cannot
 * prove apart waits for it, and one dependent global round trip per
 * output (128 per thread in gemm-ss.cu) cost pp2048 a quarter of its
 * speed on the H200. All of the warp's addends are first asked into L2,
 * so only the first group waits on memory. */
template <int NJ>
__device__ __forceinline__ void gemm_store_frag(const gepi &ep, const float *acc, int r, int m0,
                                                int tig, int N, int M, float *dst,
                                                int64_t dst_nb1, int accumulate)
{
    /* 8-token groups per batch of loads (2 at 32: gemm-ss.cu has no registers to spare) */
    constexpr int G = NJ >= 32 ? 2 : NJ < 4 ? NJ : 4;
    if (!ep.op && !accumulate) { /* the plain store, the common case, reads nothing */
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int n = r + 8 * (e >> 1), m = m0 + 8 * j + 2 * tig + (e & 1);
                if (n < N && m < M)
                    ((float *)((char *)dst + (int64_t)m * dst_nb1))[n] = acc[4 * j + e];
            }
        return;
    }
    if (ep.op)
#pragma unroll
        for (int j = 0; j < NJ; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) { /* gid 0's lanes: 8 rows = one 32-byte piece */
                int n = r + 8 * (e >> 1), m = m0 + 8 * j + 2 * tig + (e & 1);
                if ((r & 7) == 0 && n < N && m < M)
                    asm volatile("prefetch.global.L2 [%0];" ::"l"(gepi_at(ep, m, n)));
            }
#pragma unroll
    for (int j0 = 0; j0 < NJ; j0 += G) {
        float a[4 * G], old[4 * G];
#pragma unroll
        for (int i = 0; i < 4 * G; i++) {
            int j = j0 + i / 4, e = i % 4;
            int n = r + 8 * (e >> 1), m = m0 + 8 * j + 2 * tig + (e & 1);
            bool ok = n < N && m < M;
            a[i] = ok && ep.op ? *gepi_at(ep, m, n) : 0.0f;
            old[i] = ok && accumulate ? ((const float *)((char *)dst + (int64_t)m * dst_nb1))[n]
                                      : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 4 * G; i++) {
            int j = j0 + i / 4, e = i % 4;
            int n = r + 8 * (e >> 1), m = m0 + 8 * j + 2 * tig + (e & 1);
            if (n < N && m < M)
                ((float *)((char *)dst + (int64_t)m * dst_nb1))[n] =
                    gepi_apply(ep, accumulate ? old[i] + acc[4 * j + e] : acc[4 * j + e], a[i]);
        }
    }
}

/* dst[m][n] (=|+=) the sum of `splits` planes part[s][m][n] (N * M floats
 * each), in split order, then e applied. */
int gemm_reduce(struct kctx *k, const float *part, int splits, int64_t N, int64_t M, float *dst,
                int64_t dst_nb1, int accumulate, gepi e);

/* The split-K sum done inside the GEMM launch (gemm-i8.cu): each tile's
 * last block to finish adds the tile's planes in split order (the sum
 * gemm_reduce makes, bit for bit) and stores the result with ep. count:
 * one arrival counter per tile (kctx.tile_count), zero between launches:
 * the last block puts it back. Saves the reduction launch, ~3.5 us of a
 * 16-token product's ~10-50 (docs/PERF.md, session 9). */
struct gsplit {
    float *dst;
    int64_t dst_nb1;
    gepi ep;
    unsigned *count;
};

/* Called by every thread of the block after its plane's stores: the
 * tile's last block (of `splits`, at most GSPLIT_MAX) sums planes part[s]
 * (plane floats apart, rows of N) over rows [n0, n0 + ROWS) and tokens
 * [m0, m0 + TOKS) into fs.dst. Each thread loads every split of 4 outputs
 * before adding any: one L2 round trip per 4 outputs, not one per split
 * and output (the first form, a plain loop, lengthened the kernel's tail
 * past the reduction launch it replaced). */
#define GSPLIT_MAX 8
#define GSPLIT_GROUP 4 /* outputs per thread per round of loads */
template <int THREADS, int ROWS, int TOKS>
__device__ __forceinline__ void gemm_split_finish(const gsplit &fs, const float *part,
                                                  int64_t plane, int splits, int N, int M,
                                                  int n0, int m0, unsigned tile)
{
    static_assert(ROWS * TOKS % (GSPLIT_GROUP * THREADS) == 0, "whole groups of outputs per thread");
    if (!k_block_arrives_last(fs.count + tile, 1u, (unsigned)splits))
        return; /* the last split to arrive sums them all */
#pragma unroll 1
    for (int g = 0; g < ROWS * TOKS / THREADS; g += GSPLIT_GROUP) {
        float a[GSPLIT_MAX][GSPLIT_GROUP], ad[GSPLIT_GROUP];
        int64_t at[GSPLIT_GROUP];
        bool ok[GSPLIT_GROUP];
#pragma unroll
        for (int i = 0; i < GSPLIT_GROUP; i++) {
            const int e = (g + i) * THREADS + threadIdx.x; /* consecutive threads, rows */
            const int n = n0 + e % ROWS, m = m0 + e / ROWS;
            ok[i] = n < N && m < M;
            at[i] = (int64_t)m * N + n;
#pragma unroll
            for (int s = 0; s < GSPLIT_MAX; s++) /* L2: other SMs wrote these */
                a[s][i] = ok[i] && s < splits ? __ldcg(part + at[i] + s * plane) : 0.0f;
            ad[i] = ok[i] && fs.ep.op ? *gepi_at(fs.ep, m, n) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < GSPLIT_GROUP; i++) {
            if (!ok[i])
                continue;
            float v = a[0][i];
#pragma unroll
            for (int s = 1; s < GSPLIT_MAX; s++)
                if (s < splits)
                    v += a[s][i];
            const int e = (g + i) * THREADS + threadIdx.x;
            ((float *)((char *)fs.dst + (int64_t)(m0 + e / ROWS) * fs.dst_nb1))[n0 + e % ROWS] =
                gepi_apply(fs.ep, v, ad[i]);
        }
    }
}

/* One in-place kernel's launch for one weight type: out (dst, with e
 * applied, or split planes split_nb bytes apart) from W and the f16
 * activations xh; fs (NULL: a separate gemm_reduce pass follows) for a
 * kernel that sums its own planes. */
typedef int (*gemm_inplace_launch)(struct kctx *k, const void *W, int64_t w_nb1,
                                   const void *x, int64_t K, int64_t N, int64_t M,
                                   int splits, float *out, int64_t out_nb1, int64_t split_nb,
                                   gepi e, const gsplit *fs);
/* What gemm_q, gemm_wg and gemm_i8 share: the split-K scratch check, the
 * launch (into dst, or into `splits` planes of part) and the planes'
 * fixed-order sum into dst, by a gemm_reduce pass or, where the kernel
 * does it (tiles: its tile count, 0 for none), by gemm_split_finish. */
int gemm_inplace_run(struct kctx *k, const char *site, gemm_inplace_launch launch, int splits,
                     const void *W, int64_t w_nb1, const void *x, int64_t K, int64_t N,
                     int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e,
                     int64_t tiles);
/* The split-K count of the in-place kernels (gemm-q.cu, gemm-wg.cu,
 * gemm-i8.cu): `forced` (their tune hook; 0 = none) capped by the nch
 * chunks of K, else doubled from 1 while the grid of `tiles` blocks per
 * split stays under `target` blocks, at most maxs and nch. */
static inline int gemm_split_count(int64_t nch, int64_t tiles, int64_t target, int maxs,
                                   int forced)
{
    if (forced)
        return forced < nch ? forced : (int)nch;
    int s = 1;
    while (s * 2 <= maxs && s * 2 <= nch && tiles * s < target)
        s *= 2;
    return s;
}
/* The split-K count of a kernel that fits one block per SM (gemm-wg.cu:
 * ~254 registers x 256 threads), by an estimate of the time: the busiest
 * SM's ceil(tiles * s / sms) blocks of ceil(nch / s) chunks plus one of
 * pipeline fill each, chunk_us a chunk, and with a split the planes (s
 * written, s read and the sum written, plane_us each at HBM speed) and
 * the sum's launch. gemm_split_count's doubling cost a 512-token prefill
 * on the H200 (docs/PERF.md, session 15): Q and O (112 tiles on 132 SMs)
 * split in two ran two waves of half the chunks, the time of one wave of
 * all of them, plus the sum; ffn down split in seven saved 5 us of
 * chunks and paid 22 for its sum. */
static inline int gemm_split_waves(int64_t nch, int64_t tiles, int64_t sms, int maxs, int forced,
                                   double chunk_us, double plane_us)
{
    if (forced)
        return forced < nch ? forced : (int)nch;
    int best = 1;
    double best_us = 0;
    for (int s = 1; s <= maxs && s <= nch; s++) {
        int64_t waves = (tiles * s + sms - 1) / sms;
        double us = (double)(waves * ((nch + s - 1) / s + 1)) * chunk_us +
                    (s > 1 ? 4.0 + (double)(2 * s + 1) * plane_us : 0.0);
        if (s == 1 || us < best_us)
            best = s, best_us = us;
    }
    return best;
}
/* Bytes of `splits` partial planes of N x M floats (0 without a split). */
static inline size_t gemm_planes_bytes(int splits, int64_t N, int64_t M)
{
    return splits > 1 ? (size_t)splits * (size_t)N * (size_t)M * 4 : 0;
}
/* L::run<T> for the types both in-place kernels cover, NULL for others. */
template <class L> gemm_inplace_launch inplace_pick(uint32_t type)
{
    switch (type) {
    case MINFER_TYPE_Q4_K: return L::template run<MINFER_TYPE_Q4_K>;
    case MINFER_TYPE_Q5_K: return L::template run<MINFER_TYPE_Q5_K>;
    case MINFER_TYPE_Q6_K: return L::template run<MINFER_TYPE_Q6_K>;
    case MINFER_TYPE_Q8_0: return L::template run<MINFER_TYPE_Q8_0>;
    default: return NULL;
    }
}

/* gemm-q.cu: types and depths it reads in place (K a multiple of 256). */
bool gemm_q_eligible(uint32_t type, int64_t K);
/* Scratch bytes of its split-K planes for this shape (0: no split). */
size_t gemm_q_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M);
/* The >48 KiB shared-memory opt-in of its kernels, once per device. */
int gemm_q_prepare(struct kctx *k);
/* Forces the token tile (16 or 64) and split count; 0 = automatic. */
void gemm_q_tune(int bm, int splits);
/* dst[m][n] = sum_k W[n][k] xh[m][k]; part: gemm_q_part_bytes of scratch. */
int gemm_q(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
           const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e);

/* gemm-i8.cu: the same contract and types as gemm_q's (gemm_q_eligible),
 * on int8 mma.sync with k_quantize_q8_1's activations xq of M tokens
 * instead of f16 ones; 16, 32 or 64 tokens per block. */
size_t gemm_i8_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M);
int gemm_i8_prepare(struct kctx *k);
/* The q8_1 group (k_quantize_q8_1) gemm_i8 reads for this type and token
 * count: 256 for the K-quants up to a 32-token tile, else 32. */
int gemm_i8_group(uint32_t type, int64_t M);
/* Forces the token tile (16, 32 or 64) and split count; 0 = automatic. */
void gemm_i8_tune(int bm, int splits);
int gemm_i8(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xq, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e);
/* k_gemm_multi on gemm-i8.cu: whether it takes these products (2-3, at
 * most 16 tokens), its split planes' bytes, and the launch. */
int gemm_i8_multi_ok(const struct kctx *k, uint32_t type, const struct kgemm_seg *segs,
                     int count, int64_t K, int64_t M);
size_t gemm_i8_multi_part_bytes(const struct kctx *k, const struct kgemm_seg *segs, int count,
                                int64_t K, int64_t M);
int gemm_i8_multi(struct kctx *k, uint32_t type, const struct kgemm_seg *segs, int count,
                  int64_t K, const void *xq, int64_t M, void *part);

/* gemm-wg.cu (sm_90a builds only; gemm.cu asks wg_ready first): the
 * same contract as gemm_q's, on Hopper's warpgroup MMA, 64 or 128 tokens
 * per block. */
size_t gemm_wg_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M);
int gemm_wg_prepare(struct kctx *k);
/* Forces the token tile (64 or 128) and split count; 0 = automatic. */
void gemm_wg_tune(int nt, int splits);
int gemm_wg(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e);
/* k_gemm_glu's gate/up pair (kernels.h) as one launch of the same kernel;
 * the tiles of a last, partial wave split in parts of K (part:
 * gemm_wg_glu_part_bytes of scratch, NULL when that is 0); xo (NULL:
 * none) also takes the outputs as f16 in ACT_WG order (N % 256 == 0).
 * gemm_wg_glu_ok is false while a forced split count (the op tests' hook)
 * asks for planes, and the caller keeps two launches. */
bool gemm_wg_glu_ok(void);
size_t gemm_wg_glu_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M);
int gemm_wg_glu(struct kctx *k, uint32_t type, const void *G, const void *U, int64_t K,
                int64_t N, int64_t w_nb1, const void *xh, int64_t M, float *dst,
                int64_t dst_nb1, void *part, void *xo);

/* gemm-ss.cu (sm_90a builds only): the wgmma GEMM on f16 operands in the
 * core-matrix order, for long prefills. wc: rp rows (a multiple of 8, n
 * of them real), xc: k_gemm_act's ACT_CM activations of M tokens; dst
 * (=|+=) wc . xc. part: gemm_ss_part_bytes of scratch. */
bool gemm_ss_eligible(int64_t K);
size_t gemm_ss_part_bytes(const struct kctx *k, int64_t K, int64_t n, int64_t M);
int gemm_ss_prepare(struct kctx *k);
/* Forces the split count (1..8); 0 = automatic. */
void gemm_ss_tune(int splits);
int gemm_ss(struct kctx *k, const __half *wc, int64_t rp, const __half *xc, int64_t K,
            int64_t n, int64_t M, float *dst, int64_t dst_nb1, int accumulate, void *part,
            gepi e);

#endif /* MINFER_CUDA_GEMM_CUH */
