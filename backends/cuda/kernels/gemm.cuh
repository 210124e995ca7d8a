/*
 * gemm.cuh — what the two prefill GEMMs share across translation units:
 * gemm.cu (weights dequantized to f16 scratch, any readable type) calls
 * gemm-q.cu's and gemm-wg.cu's in-place kernels for the types they cover,
 * and both use gemm.cu's fixed-order reduction of split-K planes.
 */
#ifndef MINFER_CUDA_GEMM_CUH
#define MINFER_CUDA_GEMM_CUH

#include <stddef.h>
#include <stdint.h>

#include "kernels.h"

/* K values per chunk of the in-place kernels: one K-quant block */
#define Q_CHUNK 256

/* dst[m][n] (=|+=) the sum of `splits` planes part[s][m][n] (N * M floats
 * each), in split order. */
int gemm_reduce(struct kctx *k, const float *part, int splits, int64_t N, int64_t M, float *dst,
                int64_t dst_nb1, int accumulate);

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
           const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part);

/* gemm-wg.cu (sm_90a builds only; gemm.cu asks wg_ready first): the
 * same contract as gemm_q's, on Hopper's warpgroup MMA, 64 or 128 tokens
 * per block. */
size_t gemm_wg_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M);
int gemm_wg_prepare(struct kctx *k);
/* Forces the token tile (64 or 128) and split count; 0 = automatic. */
void gemm_wg_tune(int nt, int splits);
int gemm_wg(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part);

#endif /* MINFER_CUDA_GEMM_CUH */
