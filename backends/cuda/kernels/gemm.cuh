/*
 * gemm.cuh — what the prefill GEMMs share across translation units:
 * gemm.cu (the entry points; its own kernel takes weights dequantized to
 * f16 scratch, any readable type) picks one kernel per call (path()):
 * gemm-q.cu's and gemm-wg.cu's in-place kernels for the types they
 * cover, or gemm-ss.cu's on f16 scratch in the core-matrix order below.
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
/* v as stored at output (n, m) (kernels.h, struct kgemm_epi). */
__device__ __forceinline__ float gepi_apply(const gepi &e, float v, int64_t m, int64_t n)
{
    if (!e.op)
        return v;
    float a = ((const float *)((const char *)e.aux + m * e.aux_nb1))[n];
    return e.op == KGEMM_ADD ? v + a : a / (1.0f + expf(-a)) * v;
}

/* dst[m][n] (=|+=) the sum of `splits` planes part[s][m][n] (N * M floats
 * each), in split order, then e applied. */
int gemm_reduce(struct kctx *k, const float *part, int splits, int64_t N, int64_t M, float *dst,
                int64_t dst_nb1, int accumulate, gepi e);

/* One in-place kernel's launch for one weight type: out (dst, with e
 * applied, or split planes split_nb bytes apart) from W and the f16
 * activations xh. */
typedef int (*gemm_inplace_launch)(struct kctx *k, const void *W, int64_t w_nb1,
                                   const __half *xh, int64_t K, int64_t N, int64_t M,
                                   int splits, float *out, int64_t out_nb1, int64_t split_nb,
                                   gepi e);
/* What gemm_q and gemm_wg share: the split-K scratch check, the launch
 * (into dst, or into `splits` planes of part) and the planes' fixed-order
 * sum into dst. */
int gemm_inplace_run(struct kctx *k, const char *site, gemm_inplace_launch launch, int splits,
                     const void *W, int64_t w_nb1, const __half *xh, int64_t K, int64_t N,
                     int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e);
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

/* gemm-wg.cu (sm_90a builds only; gemm.cu asks wg_ready first): the
 * same contract as gemm_q's, on Hopper's warpgroup MMA, 64 or 128 tokens
 * per block. */
size_t gemm_wg_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M);
int gemm_wg_prepare(struct kctx *k);
/* Forces the token tile (64 or 128) and split count; 0 = automatic. */
void gemm_wg_tune(int nt, int splits);
int gemm_wg(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e);

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
