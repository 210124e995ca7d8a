/*
 * gemm-wg.cu — the Hopper (sm_90a) GEMM on quantized weights read in
 * place (q4_K, q5_K, q6_K, q8_0; K a multiple of 256): dst[n, m] =
 * sum_k W[k, n] * x[k, m] with f16 activations and f32 accumulation, on
 * warpgroup MMA (wgmma) instead of mma.sync.
 *
 * Why: gemm.cu's kernel dequantizes every weight matrix to f16 scratch on
 * each call and runs a legacy mma.sync GEMM (~255 TFLOP/s at best on the
 * H200); gemm-q.cu reads the weights in place but keeps all of its
 * operands in registers, which caps its token tile at 64. wgmma reads the
 * B operand (the activations) straight from shared memory and runs
 * asynchronously, so a warp can unpack the next chunk of weights while
 * the tensor cores work on the current one, and one unpacked fragment
 * feeds 64 or 128 tokens.
 *
 * Block: 2 warpgroups (8 warps) x 64 weight rows = 128 rows, NT tokens
 * (64 or 128). Per 256-value chunk of K:
 *   - the raw weight blocks of the 128 rows (gemm-q.cuh's copy and
 *     unpacking: lane tig of a warp unpacks its 64 values of the chunk of
 *     its rows gid and gid + 8 into 16 steps of A fragments, which wgmma
 *     takes from registers with mma.sync's m16n8k16 A layout per warp);
 *   - the activations of NT tokens in wgmma's "core matrix" layout: an
 *     8-token x 16-byte block per 128 bytes, no swizzle; k_gemm_act stores
 *     each 256-value chunk so that every 16 bytes of it is one row of one
 *     core matrix (order WG below), so each is one 16-byte cp.async.
 * Rings of 2 stages (128 tokens) or 3 (64 tokens, where they fit).
 * Iteration i: wait for chunk i's activations and chunk i+1's weights,
 * start copying the next chunks', issue chunk i's 16 wgmmas, unpack chunk
 * i+1's weights into the other register set while they run, wait for
 * them.
 *
 * Split-K over whole chunks (blockIdx.z) into partial planes that gemm.cu's
 * fixed-order reduction adds, when the tiles do not cover the GPU once.
 *
 * Measured on the H200 (docs/PERF.md, ADR cuda-hopper-gemm): the wgmmas
 * alone would run a 2048-token ffn matrix at ~570 TFLOP/s, but copying
 * the activation tiles from L2 through this one-deep pipeline bounds the
 * kernel at ~210; it beats the f16-scratch kernel only at 65-256 tokens.
 *
 * Built only for sm_90a (CMakeLists.txt compiles this file for that one
 * target when the plugin's architectures include 9.0); gemm.cu calls it
 * only on a 9.0 device and only when it was built (MINFER_CUDA_WGMMA).
 */
#include "common.cuh"
#include "gemm-q.cuh"
#include "gemm.cuh"
#include "mma.cuh"

#define W_GROUPS 2                 /* warpgroups per block */
#define W_THREADS (128 * W_GROUPS)
#define W_BN (64 * W_GROUPS)       /* weight rows per block */
#define W_MAX_SPLITS 8

template <int T, int NT> struct wsmem {
    /* stages of each ring: chunk i + STAGES - 1's copies start while
     * chunk i computes (3 fit in shared memory only with 64 tokens) */
    static constexpr int STAGES = NT == 64 ? 3 : 2;
    static constexpr int XST = NT * Q_CHUNK * 2;           /* one activation stage */
    static constexpr int WST = W_BN * qshape<T>::PITCH;    /* one weight stage */
    static constexpr int BYTES = STAGES * (XST + WST);
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE 1
#endif

#ifdef WG_DEVICE
/* The shared-memory matrix descriptor of a K-major operand without
 * swizzle: core matrices of 8 rows x 16 bytes stored contiguously, the
 * two k halves of a k16 step 128 bytes apart (leading byte offset) and
 * successive 8-row groups 256 bytes apart (stride byte offset). */
__device__ __forceinline__ uint64_t wg_desc(const void *s)
{
    uint64_t a = smem_u32(s);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)(128 >> 4) << 16) | ((uint64_t)(256 >> 4) << 32);
}
__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Makes this thread's shared-memory writes (cp.async) visible to the
 * async proxy that wgmma reads its shared operand through. */
__device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* d[64 x NT] += a[64 x 16] (registers, per warp mma.sync's A layout) *
 * b[16 x NT] (shared, descriptor), f16 in, f32 accumulators: d[4j + e] of
 * a lane is (row 16 w + gid + 8 (e / 2), token 8j + 2 tig + e % 2). */
template <int NT> struct wg_mma;
template <> struct wg_mma<64> {
    static __device__ __forceinline__ void run(float (&d)[32], const unsigned (&a)[4], uint64_t b)
    {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{"
                     "%0, %1, %2, %3, %4, %5, %6, %7, "
                     "%8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, "
                     "%24, %25, %26, %27, %28, %29, %30, %31"
                     "}, {%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                       "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                       "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                       "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                       "+f"(d[30]), "+f"(d[31])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
template <> struct wg_mma<128> {
    static __device__ __forceinline__ void run(float (&d)[64], const unsigned (&a)[4], uint64_t b)
    {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{"
                     "%0, %1, %2, %3, %4, %5, %6, %7, "
                     "%8, %9, %10, %11, %12, %13, %14, %15, "
                     "%16, %17, %18, %19, %20, %21, %22, %23, "
                     "%24, %25, %26, %27, %28, %29, %30, %31, "
                     "%32, %33, %34, %35, %36, %37, %38, %39, "
                     "%40, %41, %42, %43, %44, %45, %46, %47, "
                     "%48, %49, %50, %51, %52, %53, %54, %55, "
                     "%56, %57, %58, %59, %60, %61, %62, %63"
                     "}, {%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}\n"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                       "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                       "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                       "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                       "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                       "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]),
                       "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]),
                       "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
                       "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]),
                       "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]),
                       "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1));
    }
};
#endif /* WG_DEVICE */

template <int T, int NT>
__global__ void __launch_bounds__(W_THREADS, 1)
    gemm_wg_kernel(const uint8_t *__restrict__ W, int64_t w_nb1, const __half *__restrict__ xh,
                   int K, int N, int M, int splits, float *__restrict__ dst, int64_t dst_nb1,
                   int64_t split_nb)
{
#ifdef WG_DEVICE
    using Q = qgemm<T>;
    using S = wsmem<T, NT>;
    constexpr int PITCH = qshape<T>::PITCH, UNITS = qshape<T>::UNITS;
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int ST = S::STAGES, D = ST - 1; /* D: chunks copied ahead */
    unsigned char *Xs = smem, *Ws = smem + ST * S::XST;

    const int m0 = blockIdx.x * NT, n0 = blockIdx.y * W_BN, z = blockIdx.z;
    const int nch = K / Q_CHUNK;
    const int c0 = (int)((int64_t)nch * z / splits);
    const int nc = (int)((int64_t)nch * (z + 1) / splits) - c0;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
    dst = (float *)((char *)dst + z * split_nb);

    /* rows past N read row N - 1 (valid memory; never stored) */
    auto wrow = [&](int r) {
        int n = n0 + r;
        return W + (int64_t)(n < N ? n : N - 1) * w_nb1;
    };
    auto load_w = [&](int stage, int c) {
        unsigned char *As = Ws + stage * S::WST;
        for (int i = tid; i < W_BN * UNITS; i += W_THREADS) {
            int r = i / UNITS, u = i % UNITS;
            const uint8_t *src = wrow(r) + (size_t)c * Q::BYTES;
            const uint8_t *g = (const uint8_t *)(((uintptr_t)src & ~(uintptr_t)15) + 16 * u);
            cp16(As + r * PITCH + 16 * u, g, g < src + Q::BYTES);
        }
    };
    /* shared unit i is row t % 8 of core matrix (t / 8, h) of step s, i =
     * ((s * NT / 8 + t / 8) * 2 + h) * 8 + t % 8, and holds 16-byte unit
     * 2 s + h of token t's chunk: consecutive lanes write consecutive
     * units (a lane order that follows the tokens' rows instead put a
     * warp's 32 writes on the same four banks, and the copies, not the
     * tensor cores, set the kernel's speed); tokens past M are zeros */
    auto load_x = [&](int stage, int c) {
        unsigned char *Bs = Xs + stage * S::XST;
        for (int i = tid; i < NT * 32; i += W_THREADS) {
            int t = (i >> 4) % (NT / 8) * 8 + (i & 7);
            int u = (i >> 4) / (NT / 8) * 2 + ((i >> 3) & 1);
            int m = m0 + t;
            const __half *g = xh + (int64_t)(m < M ? m : 0) * K + (int64_t)c * Q_CHUNK + 8 * u;
            cp16(Bs + 16 * i, g, m < M);
        }
    };

    float acc[NT / 2];
#pragma unroll
    for (int e = 0; e < NT / 2; e++)
        acc[e] = 0.0f;

    const int r0 = warp * 16 + gid;
    const uint8_t *g0 = wrow(r0), *g1 = wrow(r0 + 8);
    auto unpack = [&](int c, unsigned (&va)[32], unsigned (&vb)[32]) {
        const unsigned char *As = Ws + ((c - c0) % ST) * S::WST;
        size_t cb = (size_t)c * Q::BYTES;
        Q::deq(As + r0 * PITCH + (((uintptr_t)g0 + cb) & 15), tig, va);
        Q::deq(As + (r0 + 8) * PITCH + (((uintptr_t)g1 + cb) & 15), tig, vb);
    };
    /* chunk i: its weights are unpacked in (ca, cb); chunk i+1's go to
     * (na, nb). Copy groups: one per chunk, {X(i + D), W(i + 1 + D)}
     * committed in iteration i (the prologue's D groups hold X(0..D-1)
     * and W(0..D)), so at the top of iteration i at most D - 1 newer
     * groups may still be in flight. Stage reuse: X(i + D) replaces
     * X(i - 1), whose wgmmas were waited for in iteration i - 1; W(i + 1
     * + D) replaces W(i), unpacked in iteration i - 1. */
    auto step = [&](int i, unsigned (&ca)[32], unsigned (&cb)[32], unsigned (&na)[32],
                    unsigned (&nb)[32]) {
        cp_wait<D - 1>();
        fence_async_smem();
        __syncthreads(); /* chunk i's activations and chunk i+1's weights landed */
        if (i + D < nc)
            load_x((i + D) % ST, c0 + i + D);
        if (i + 1 + D < nc)
            load_w((i + 1 + D) % ST, c0 + i + 1 + D);
        cp_commit();
        const unsigned char *Bs = Xs + (i % ST) * S::XST;
        wg_fence();
#pragma unroll
        for (int s = 0; s < 16; s++) {
            unsigned a[4] = {ca[2 * s], cb[2 * s], ca[2 * s + 1], cb[2 * s + 1]};
            wg_mma<NT>::run(acc, a, wg_desc(Bs + s * (NT * 32)));
        }
        wg_commit();
        if (i + 1 < nc)
            unpack(c0 + i + 1, na, nb);
        wg_wait<0>();
    };

    load_w(0, c0);
#pragma unroll
    for (int j = 0; j < D; j++) {
        if (j < nc)
            load_x(j, c0 + j);
        if (j + 1 < nc)
            load_w(j + 1, c0 + j + 1);
        cp_commit();
    }
    cp_wait<D - 1>();
    __syncthreads();
    unsigned a0[32], b0[32], a1[32], b1[32];
    unpack(c0, a0, b0);
    for (int i = 0; i < nc; i += 2) {
        step(i, a0, b0, a1, b1);
        if (i + 1 < nc)
            step(i + 1, a1, b1, a0, b0);
    }

#pragma unroll
    for (int j = 0; j < NT / 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            int n = n0 + r0 + 8 * (e >> 1), m = m0 + 8 * j + 2 * tig + (e & 1);
            if (n < N && m < M)
                ((float *)((char *)dst + (int64_t)m * dst_nb1))[n] = acc[4 * j + e];
        }
#endif /* WG_DEVICE */
}

/* ---- dispatch ---- */

static int g_nt, g_splits; /* forced token tile (64 or 128) and split count; 0 = automatic */
void gemm_wg_tune(int nt, int splits)
{
    g_nt = nt == 64 || nt == 128 ? nt : 0;
    g_splits = splits >= 1 && splits <= W_MAX_SPLITS ? splits : 0;
}

static int w_nt(int64_t M)
{
    return g_nt ? g_nt : M <= 64 ? 64 : 128;
}

/* Splits of K (whole chunks) until the grid covers every SM once. */
static int w_splits(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    int64_t nch = K / Q_CHUNK, nt = w_nt(M);
    if (g_splits)
        return g_splits < nch ? g_splits : (int)nch;
    int64_t tiles = (N + W_BN - 1) / W_BN * ((M + nt - 1) / nt);
    int s = 1;
    while (s * 2 <= W_MAX_SPLITS && s * 2 <= nch && tiles * s < k->sm_count)
        s *= 2;
    return s;
}

size_t gemm_wg_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    return gemm_planes_bytes(w_splits(k, K, N, M), N, M);
}

template <int T, int NT> static int w_optin_one(struct kctx *k)
{
    return gemm_smem_optin(k, (const void *)gemm_wg_kernel<T, NT>, wsmem<T, NT>::BYTES,
                           "gemm_wg");
}
template <int T> static int w_optin(struct kctx *k)
{
    return w_optin_one<T, 64>(k) || w_optin_one<T, 128>(k);
}

int gemm_wg_prepare(struct kctx *k)
{
    const int a = wsmem<MINFER_TYPE_Q8_0, 64>::BYTES, b = wsmem<MINFER_TYPE_Q8_0, 128>::BYTES;
    const int need = a > b ? a : b; /* q8_0 has the widest weight rows */
    if (k->smem_optin < need) {
        snprintf(k->err, k->err_len,
                 "gemm_wg: needs %d bytes of dynamic shared memory but device %d allows %d",
                 need, k->device, k->smem_optin);
        return -1;
    }
    return w_optin<MINFER_TYPE_Q4_K>(k) || w_optin<MINFER_TYPE_Q5_K>(k) ||
           w_optin<MINFER_TYPE_Q6_K>(k) || w_optin<MINFER_TYPE_Q8_0>(k);
}

/* The launcher of each covered type (inplace_pick's L::run<T>). */
struct w_launchers {
    template <int T>
    static int run(struct kctx *k, const void *W, int64_t w_nb1, const __half *xh, int64_t K,
                   int64_t N, int64_t M, int splits, float *out, int64_t out_nb1,
                   int64_t split_nb)
    {
        const char *site = "gemm_wg";
        const int smem64 = wsmem<T, 64>::BYTES, smem128 = wsmem<T, 128>::BYTES;
        if (w_nt(M) == 64) {
            dim3 grid((unsigned)((M + 63) / 64), (unsigned)((N + W_BN - 1) / W_BN),
                      (unsigned)splits);
            KLAUNCH(k, site, (gemm_wg_kernel<T, 64>), grid, W_THREADS, smem64,
                    (const uint8_t *)W, w_nb1, xh, (int)K, (int)N, (int)M, splits, out, out_nb1,
                    split_nb);
        } else {
            dim3 grid((unsigned)((M + 127) / 128), (unsigned)((N + W_BN - 1) / W_BN),
                      (unsigned)splits);
            KLAUNCH(k, site, (gemm_wg_kernel<T, 128>), grid, W_THREADS, smem128,
                    (const uint8_t *)W, w_nb1, xh, (int)K, (int)N, (int)M, splits, out, out_nb1,
                    split_nb);
        }
        return 0;
    }
};

int gemm_wg(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part)
{
    if ((M + 63) / 64 > 65535 || (N + W_BN - 1) / W_BN > 65535)
        return k_fail(k, "gemm_wg", "too many tokens or rows for one launch");
    gemm_inplace_launch fn = inplace_pick<w_launchers>(type);
    if (!fn)
        return k_fail(k, "gemm_wg", "weight type has no in-place GEMM");
    return gemm_inplace_run(k, "gemm_wg", fn, w_splits(k, K, N, M), W, w_nb1, (const __half *)xh,
                            K, N, M, dst, dst_nb1, part);
}
