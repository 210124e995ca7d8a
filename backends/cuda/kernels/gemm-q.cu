/*
 * gemm-q.cu — the tensor-core GEMM on quantized weights read in place
 * (q4_K, q5_K, q6_K, q8_0): dst[n, m] = sum_k W[k, n] * x[k, m] with f16
 * activations (k_gemm_act) and no f16 copy of the weights.
 *
 * gemm.cu's kernel first dequantizes a whole matrix to f16 scratch: 2
 * bytes written and read again per weight on every call, several times
 * the bytes of the quantized weight itself. At 16-64 tokens (batched
 * decode) that traffic is the whole cost. Here each 256-value chunk of a
 * weight row travels raw, by 16-byte cp.async, into a shared-memory ring
 * (the copy starts at the 16-byte unit that holds the chunk's first byte,
 * so any block alignment works: q6_K's and q8_0's blocks are only 2-byte
 * aligned), and the lanes dequantize it straight into mma.sync fragments.
 *
 * The fragment trick: an mma sums over k, so k may be permuted as long as
 * A and B agree. Lane tig of a warp owns values [64 tig, 64 tig + 64) of
 * each chunk of its two rows (gid and gid + 8); step s (16 per chunk) is
 * the k16 slice made of each lane's values 4s..4s+3. The lane therefore
 * reads whole words of its own blocks, and the activations are staged in
 * the matching order: shared unit (p, token, tig) holds x[64 tig + 8p ..
 * +8], the B fragments of steps 2p and 2p+1 in one 16-byte load. Inside
 * a step the pairs are values (0, 2) and (1, 3) of its 4 (k_gemm_act
 * stores the activations so), because a 32-bit word holds bytes 0 and 2
 * in the low bits of its two halves: one shift and one mask make a pair,
 * no byte permute.
 *
 * Block: 8 warps x 16 weight rows, BM = 8 * NJ tokens (16 or 64), 3-stage
 * ring. Too few tiles to fill the GPU (small N, few tokens) split K over
 * blockIdx.z into partial planes that gemm.cu's fixed-order reduction
 * adds (deterministic).
 */
#include "common.cuh"
#include "gemm-q.cuh"
#include "gemm.cuh"
#include "mma.cuh"

#define Q_WARPS 8
#define Q_THREADS (32 * Q_WARPS)
#define Q_BN (16 * Q_WARPS) /* weight rows per block */
#define Q_STAGES 3
#define Q_MAX_SPLITS 8

template <int T, int NJ> struct qsmem {
    static constexpr int BM = 8 * NJ;
    static constexpr int A = Q_BN * qshape<T>::PITCH;
    static constexpr int STAGE = A + BM * Q_CHUNK * 2;
    static constexpr int BYTES = STAGE * Q_STAGES;
};

template <int T, int NJ>
__global__ void __launch_bounds__(Q_THREADS, 1)
    gemm_q_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, const __half *__restrict__ xh,
                  int K, int N, int M, int splits, float *__restrict__ dst, int64_t dst_nb1,
                  int64_t split_nb, gepi ep)
{
    k_dep_enter();
    using Q = qgemm<T>;
    using S = qsmem<T, NJ>;
    constexpr int BM = S::BM, PITCH = qshape<T>::PITCH;
    extern __shared__ __align__(16) unsigned char smem[];

    const int m0 = blockIdx.x * BM, n0 = blockIdx.y * Q_BN, z = blockIdx.z;
    int c0, nc;
    split_chunks(K, z, splits, &c0, &nc);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
    dst = (float *)((char *)dst + z * split_nb);

    /* rows past N read row N - 1 (valid memory; never stored) */
    auto wrow = [&](int r) {
        int n = n0 + r;
        return W + (int64_t)(n < N ? n : N - 1) * w_nb1;
    };
    auto load = [&](int stage, int c) {
        unsigned char *As = smem + stage * S::STAGE;
        __half *Bs = (__half *)(As + S::A);
        q_copy_chunk<T, Q_BN, Q_THREADS, PITCH>(As, wrow, c, tid);
        for (int i = tid; i < BM * 32; i += Q_THREADS) {
            int p = i / (BM * 4), tok = (i >> 2) % BM, t = i & 3, m = m0 + tok;
            const __half *g = xh + (int64_t)(m < M ? m : 0) * K + (int64_t)c * Q_CHUNK + 64 * t + 8 * p;
            cp16(Bs + (size_t)i * 8, g, m < M);
        }
    };

    float acc[NJ][4];
#pragma unroll
    for (int j = 0; j < NJ; j++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            acc[j][e] = 0.0f;

    const int r0 = warp * 16 + gid;
    const uint8_t *g0 = wrow(r0), *g1 = wrow(r0 + 8);
    cp_ring<Q_STAGES>(c0, nc, load, [&](int stage, int i) {
        const unsigned char *As = smem + stage * S::STAGE;
        const __half *Bs = (const __half *)(As + S::A);
        size_t cb = (size_t)(c0 + i) * Q::BYTES;
        unsigned va[32], vb[32];
        Q::deq(As + r0 * PITCH + (((uintptr_t)g0 + cb) & 15), tig, va);
        Q::deq(As + (r0 + 8) * PITCH + (((uintptr_t)g1 + cb) & 15), tig, vb);
#pragma unroll
        for (int p = 0; p < 8; p++) {
            uint4 b[NJ];
#pragma unroll
            for (int j = 0; j < NJ; j++)
                b[j] = *(const uint4 *)(Bs + ((p * BM + 8 * j + gid) * 4 + tig) * 8);
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int s = 2 * p + h;
                unsigned a[4] = {va[2 * s], vb[2 * s], va[2 * s + 1], vb[2 * s + 1]};
#pragma unroll
                for (int j = 0; j < NJ; j++)
                    mma16816(acc[j], a, h ? b[j].z : b[j].x, h ? b[j].w : b[j].y);
            }
        }
    });

    gemm_store_frag<NJ>(ep, &acc[0][0], n0 + r0, m0, tig, N, M, dst, dst_nb1, 0);
}

/* ---- dispatch ---- */

static int g_bm, g_splits; /* forced token tile (16 or 64) and split count; 0 = automatic */

void gemm_q_tune(int bm, int splits)
{
    g_bm = bm == 16 || bm == 64 ? bm : 0;
    g_splits = splits >= 1 && splits <= Q_MAX_SPLITS ? splits : 0;
}

bool gemm_q_eligible(uint32_t type, int64_t K)
{
    switch (type) {
    case MINFER_TYPE_Q4_K: case MINFER_TYPE_Q5_K: case MINFER_TYPE_Q6_K: case MINFER_TYPE_Q8_0:
        return K % Q_CHUNK == 0;
    default:
        return false;
    }
}

static int q_nj(int64_t M)
{
    int bm = g_bm ? g_bm : M <= 16 ? 16 : 64;
    return bm / 8;
}

/* Splits of K (in whole chunks) until there are 3 blocks per SM with the
 * 16-token tile (at most 8 splits), 2 with the 64-token one (at most 4:
 * its planes are 4x larger). H200, q4_K (docs/PERF.md), us for 1/2/4/8
 * splits: 3584 x 18944 (148 tiles) 69/60/54/54 at 16 tokens, 128/112/111/
 * 117 at 64; 18944 x 3584 (28 tiles) 201/107/61/54 and 307/163/93/98;
 * 3584 x 3584 (28 tiles) 42/26/20/20 and 62/38/28/30. */
static int q_splits(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    int64_t bm = 8 * q_nj(M), tiles = (N + Q_BN - 1) / Q_BN * ((M + bm - 1) / bm);
    int64_t target = (bm == 16 ? 3LL : 2LL) * k->sm_count;
    return gemm_split_count(K / Q_CHUNK, tiles, target,
                            bm == 16 ? Q_MAX_SPLITS : Q_MAX_SPLITS / 2, g_splits);
}

size_t gemm_q_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    return gemm_planes_bytes(q_splits(k, K, N, M), N, M);
}

template <int T, int NJ> static int q_optin_one(struct kctx *k)
{
    return k_smem_optin(k, (const void *)gemm_q_kernel<T, NJ>, qsmem<T, NJ>::BYTES,
                           "gemm_q");
}
template <int T> static int q_optin(struct kctx *k)
{
    return q_optin_one<T, 2>(k) || q_optin_one<T, 8>(k);
}

int gemm_q_prepare(struct kctx *k)
{
    if (k->smem_optin < qsmem<MINFER_TYPE_Q8_0, 8>::BYTES) {
        snprintf(k->err, k->err_len,
                 "gemm_q: needs %d bytes of dynamic shared memory but device %d allows %d",
                 qsmem<MINFER_TYPE_Q8_0, 8>::BYTES, k->device, k->smem_optin);
        return -1;
    }
    return q_optin<MINFER_TYPE_Q4_K>(k) || q_optin<MINFER_TYPE_Q5_K>(k) ||
           q_optin<MINFER_TYPE_Q6_K>(k) || q_optin<MINFER_TYPE_Q8_0>(k);
}

/* The launcher of each covered type (inplace_pick's L::run<T>). */
struct q_launchers {
    template <int T>
    static int run(struct kctx *k, const void *W, int64_t w_nb1, const void *x, int64_t K,
                   int64_t N, int64_t M, int splits, float *out, int64_t out_nb1,
                   int64_t split_nb, gepi e, const gsplit *)
    {
        const char *site = "gemm_q";
        const int smem2 = qsmem<T, 2>::BYTES, smem8 = qsmem<T, 8>::BYTES;
        if (q_nj(M) == 2) {
            dim3 grid((unsigned)((M + 15) / 16), (unsigned)((N + Q_BN - 1) / Q_BN),
                      (unsigned)splits);
            KLAUNCH(k, site, (gemm_q_kernel<T, 2>), grid, Q_THREADS, smem2,
                    (const uint8_t *)W, w_nb1, (const __half *)x, (int)K, (int)N, (int)M, splits, out, out_nb1,
                    split_nb, e);
        } else {
            dim3 grid((unsigned)((M + 63) / 64), (unsigned)((N + Q_BN - 1) / Q_BN),
                      (unsigned)splits);
            KLAUNCH(k, site, (gemm_q_kernel<T, 8>), grid, Q_THREADS, smem8,
                    (const uint8_t *)W, w_nb1, (const __half *)x, (int)K, (int)N, (int)M, splits, out, out_nb1,
                    split_nb, e);
        }
        return 0;
    }
};

int gemm_q(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
           const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e)
{
    if ((M + 15) / 16 > 65535 || (N + Q_BN - 1) / Q_BN > 65535)
        return k_fail(k, "gemm_q", "too many tokens or rows for one launch");
    if (!q_rows_aligned(type, W, nullptr, w_nb1))
        return k_fail(k, "gemm_q", "q4_K/q5_K weight rows must start on 16 bytes");
    gemm_inplace_launch fn = inplace_pick<q_launchers>(type);
    if (!fn)
        return k_fail(k, "gemm_q", "weight type has no in-place GEMM");
    return gemm_inplace_run(k, "gemm_q", fn, q_splits(k, K, N, M), W, w_nb1, xh, K, N, M,
                            dst, dst_nb1, part, e, 0);
}
