/*
 * gemm.cu — the tensor-core prefill GEMM (nt > 8): dst[n, m] =
 * sum_k W[k, n] * x[k, m]. A 256-thread block computes a 128 (weight
 * rows) x 128 (tokens) tile: each 32-deep K slice of W is dequantized to
 * f16 in shared memory (dq8, every readable type), the activations are
 * rounded to f16, and 8 warps run 16x16x16 wmma with f32 accumulation.
 * The epilogue goes through a 128x132 f32 shared tile so the stores are
 * coalesced along n and tails are bounds-checked; that tile (66 KiB) is
 * why the kernel needs the >48 KiB dynamic shared memory opt-in, done
 * once per device by k_prepare before any capture can exist.
 */
#include <mma.h>

#include "common.cuh"

using namespace nvcuda;

#define G_BN 128 /* weight rows per tile */
#define G_BM 128 /* tokens per tile */
#define G_BK 32
#define G_LDA 40 /* halves; 80-byte rows keep 16-byte stores aligned */
#define G_LDC 132
#define G_THREADS 256

static constexpr size_t G_SMEM_AB = (size_t)(G_BN + G_BM) * G_LDA * sizeof(__half);
static constexpr size_t G_SMEM_C = (size_t)G_BM * G_LDC * sizeof(float);
static constexpr size_t G_SMEM = G_SMEM_C > G_SMEM_AB ? G_SMEM_C : G_SMEM_AB;

template <int T>
__global__ void __launch_bounds__(G_THREADS)
    gemm_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, int64_t K, int N,
                const float *__restrict__ x, int64_t x_nb1, int M, float *__restrict__ dst,
                int64_t dst_nb1)
{
    extern __shared__ __align__(128) unsigned char smem[];
    __half *As = (__half *)smem;               /* [G_BN][G_LDA] */
    __half *Bs = As + G_BN * G_LDA;            /* [G_BM][G_LDA] */
    float *Cs = (float *)smem;                 /* [G_BM][G_LDC], after the K loop */

    const int n0 = blockIdx.x * G_BN, m0 = blockIdx.y * G_BM;
    const int tid = threadIdx.x, warp = tid / 32;
    const int wn = warp % 2, wm = warp / 2; /* warp tile: 64 n x 32 m */

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::fill_fragment(acc[i][j], 0.0f);

    for (int64_t k0 = 0; k0 < K; k0 += G_BK) {
        /* W slice: 128 rows x 32 k = 512 groups of 8 */
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int g = tid + G_THREADS * j;
            int r = g / 4, kg = g % 4;
            float v[8];
            if (n0 + r < N) {
                dq8<T>(W + (int64_t)(n0 + r) * w_nb1, k0 + 8 * kg, v);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    v[e] = 0.0f;
            }
            __align__(16) __half h[8];
#pragma unroll
            for (int e = 0; e < 8; e++)
                h[e] = __float2half_rn(v[e]);
            *(uint4 *)(As + r * G_LDA + 8 * kg) = *(const uint4 *)h;
        }
        /* x slice: 128 tokens x 32 k */
#pragma unroll
        for (int j = 0; j < 2; j++) {
            int g = tid + G_THREADS * j;
            int m = g / 4, kg = g % 4;
            __align__(16) __half h[8];
            if (m0 + m < M) {
                const float *xp = (const float *)((const char *)x + (int64_t)(m0 + m) * x_nb1) +
                                  k0 + 8 * kg;
#pragma unroll
                for (int e = 0; e < 8; e++)
                    h[e] = __float2half_rn(xp[e]);
            } else {
#pragma unroll
                for (int e = 0; e < 8; e++)
                    h[e] = __float2half_rn(0.0f);
            }
            *(uint4 *)(Bs + m * G_LDA + 8 * kg) = *(const uint4 *)h;
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < G_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[4];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 4; i++)
                wmma::load_matrix_sync(a[i], As + (wn * 64 + i * 16) * G_LDA + kk, G_LDA);
#pragma unroll
            for (int j = 0; j < 2; j++)
                wmma::load_matrix_sync(b[j], Bs + (wm * 32 + j * 16) * G_LDA + kk, G_LDA);
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 2; j++)
                    wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    /* C(n, m) stored column-major = Cs[m][n] */
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(Cs + (wm * 32 + j * 16) * G_LDC + wn * 64 + i * 16, acc[i][j],
                                    G_LDC, wmma::mem_col_major);
    __syncthreads();
    for (int e = tid; e < G_BN * G_BM; e += G_THREADS) {
        int m = e / G_BN, n = e % G_BN;
        if (m0 + m < M && n0 + n < N)
            *(float *)((char *)dst + (int64_t)(m0 + m) * dst_nb1 + (int64_t)(n0 + n) * 4) =
                Cs[m * G_LDC + n];
    }
}

/* The launcher never asks for the opt-in: k_prepare does, once per
 * device, for every instantiation (device.c calls it at the first instance
 * creation, before any capture window of any instance can exist). */
template <int T> static int optin_one(struct kctx *k)
{
    cudaError_t e = cudaFuncSetAttribute(gemm_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         (int)G_SMEM);
    if (e != cudaSuccess) {
        snprintf(k->err, k->err_len,
                 "gemm<type %d>: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %zu) failed: "
                 "%s (%s); prefill GEMM disabled on this device",
                 T, G_SMEM, cudaGetErrorString(e), cudaGetErrorName(e));
        cudaGetLastError();
        return -1;
    }
    return 0;
}

extern "C" int k_prepare(struct kctx *k)
{
    k->gemm_optin_ok = 0;
    if (k->smem_optin < (int)G_SMEM) {
        snprintf(k->err, k->err_len,
                 "gemm: needs %zu bytes of dynamic shared memory but device %d allows %d per "
                 "block; prefill GEMM disabled (the matrix-vector kernels serve every nt)",
                 G_SMEM, k->device, k->smem_optin);
        return -1;
    }
    int rc = 0;
    rc |= optin_one<MINFER_TYPE_F32>(k);
    rc |= optin_one<MINFER_TYPE_F16>(k);
    rc |= optin_one<MINFER_TYPE_BF16>(k);
    rc |= optin_one<MINFER_TYPE_Q4_0>(k);
    rc |= optin_one<MINFER_TYPE_Q4_1>(k);
    rc |= optin_one<MINFER_TYPE_Q5_0>(k);
    rc |= optin_one<MINFER_TYPE_Q5_1>(k);
    rc |= optin_one<MINFER_TYPE_Q8_0>(k);
    rc |= optin_one<MINFER_TYPE_Q4_K>(k);
    rc |= optin_one<MINFER_TYPE_Q5_K>(k);
    rc |= optin_one<MINFER_TYPE_Q6_K>(k);
    if (rc)
        return -1;
    k->gemm_optin_ok = 1;
    return 0;
}

template <int T>
static int launch_gemm(struct kctx *k, const void *W, int64_t K, int64_t N, int64_t w_nb1,
                       const float *x, int64_t x_nb1, int64_t M, float *dst, int64_t dst_nb1)
{
    if (!k->gemm_optin_ok)
        return k_fail(k, "gemm", "the >48 KiB shared-memory opt-in was refused on this device "
                                 "(see the instance's creation message)");
    if (K % G_BK)
        return k_fail(k, "gemm", "K is not a multiple of 32");
    dim3 grid((unsigned)((N + G_BN - 1) / G_BN), (unsigned)((M + G_BM - 1) / G_BM));
    if (grid.y > 65535)
        return k_fail(k, "gemm", "too many tokens for one launch");
    auto kf = gemm_kernel<T>;
    KLAUNCH(k, "gemm", kf, grid, G_THREADS, G_SMEM, (const uint8_t *)W, w_nb1, K, (int)N, x,
            x_nb1, (int)M, dst, dst_nb1);
    return 0;
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

extern "C" int k_gemm(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                      int64_t w_nb1, const float *x, int64_t x_nb1, int64_t M, float *dst,
                      int64_t dst_nb1)
{
#define GC(T) K_TYPE_CASE(T, launch_gemm, k, W, K, N, w_nb1, x, x_nb1, M, dst, dst_nb1)
    switch (type) {
        GC(MINFER_TYPE_F32) GC(MINFER_TYPE_F16) GC(MINFER_TYPE_BF16)
        GC(MINFER_TYPE_Q4_0) GC(MINFER_TYPE_Q4_1) GC(MINFER_TYPE_Q5_0) GC(MINFER_TYPE_Q5_1)
        GC(MINFER_TYPE_Q8_0) GC(MINFER_TYPE_Q4_K) GC(MINFER_TYPE_Q5_K) GC(MINFER_TYPE_Q6_K)
    default:
        return k_fail(k, "gemm", "weight type has no GEMM instantiation");
    }
#undef GC
}
