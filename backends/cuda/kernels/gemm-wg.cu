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
 *   - the raw weight blocks of the 128 rows, each warp copying the 16 it
 *     unpacks (gemm-q.cuh's unpacking: lane tig of a warp unpacks its 64
 *     values of the chunk of its rows gid and gid + 8 into 16 steps of A
 *     fragments, which wgmma takes from registers with mma.sync's
 *     m16n8k16 A layout per warp), so a weight stage is the warp's own;
 *   - the activations of NT tokens in wgmma's "core matrix" layout: an
 *     8-token x 16-byte block per 128 bytes, no swizzle; k_gemm_act stores
 *     them in that order already (gemm.cuh, wg_act_unit), so a stage is
 *     16 bulk copies (cp.async.bulk, one per k16 step) completing on the
 *     stage's mbarrier. They write through the async proxy, which wgmma
 *     reads through: no proxy fence. (The first kernel copied them by
 *     ordinary cp.async and fenced each chunk; by ncu's samples on the
 *     attention kernel, that fence waits for every copy the thread has in
 *     flight, which would make the ring one chunk deep.)
 * Rings of 2 stages (128 tokens) or 3 (64 tokens, where they fit); at
 * 128 tokens the activation ring is waited for and released by half
 * chunks. Iteration i: wait for chunk i+1's weights (the warp's cp.async
 * copies and __syncwarp), start copying a later chunk's; for each part of
 * chunk i's activations, wait for it, issue its wgmmas, wait for the same
 * part of chunk i - 1 (chunk i's keep the tensor cores busy) and release
 * its stage (the eighth warp to do so reloads it); then unpack chunk
 * i+1's weights into the register set chunk i - 1 used. No block-wide
 * barrier in the loop: session 17 measured each of these steps
 * (docs/PERF.md).
 *
 * Split-K over whole chunks (blockIdx.z) into partial planes that gemm.cu's
 * fixed-order reduction adds, when that shortens the busiest SM's work
 * (gemm.cuh, gemm_split_waves). A gate/up pair splits only the tiles of
 * its last, partial wave (wtail, w_plan).
 *
 * A gate/up pair (U non-NULL, k_gemm_glu): warpgroup 0 takes 64 rows of
 * the gate G, warpgroup 1 the same 64 rows of the up matrix U. Thread t
 * of warpgroup 1 holds the up sums of the very outputs thread t - 128
 * holds the gate sums of, so after the main loop it hands them over
 * through the idle rings and warpgroup 0 stores silu(gate) * up: one
 * launch, no gate product stored and read back, and twice the tiles (a
 * 512-token ffn at 1,184 tiles instead of 2 x 592 on 132 SMs). With xo,
 * it also stores those outputs as f16 in the ACT_WG order the down
 * product reads (w_store_act), which then converts nothing.
 *
 * Measured on the H200 (docs/PERF.md, ADR cuda-hopper-gemm): with the
 * first (fenced) copies the kernel ran a 2048-token ffn matrix at ~210
 * TFLOP/s and beat the f16-scratch kernel only at 17-256 tokens; with
 * the bulk copies, at 128-2048 tokens the 128-token tile runs 1.4-1.5x
 * faster than before (ffn up at 2048 tokens: 1,325 -> 885 us, 315
 * TFLOP/s; 713 us in session 17). Past 1,023 tokens gemm-ss.cu, on f16
 * scratch, is faster still: re-unpacking the weights for every token tile is what bounds
 * this kernel there (ncu: 8 warps per SM, issue-bound at 36% of the SM's
 * throughput).
 *
 * Built only for sm_90a (CMakeLists.txt compiles this file for that one
 * target when the plugin's architectures include 9.0); gemm.cu calls it
 * only on a 9.0 device and only when it was built (MINFER_CUDA_WGMMA).
 */
#include "common.cuh"
#include "gemm-q.cuh"
#include "gemm.cuh"
#include "mma.cuh"
#include "wgmma.cuh"

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


/* The tiles of a gate/up pair (U non-NULL): a linear grid, token tiles
 * fastest; tiles [0, full) whole, each later one (those of the last,
 * partial wave) in `splits` parts of K whose sums go to part, [tail
 * tile][part][gate, up][token][row], the last part to arrive on the
 * tile's counter (count: kctx.tile_count) adding them. W_plan decides. */
struct wtail {
    int full, splits;
    float *part;
    unsigned *count;
};

/* The down product's activations, written by the gate/up pair whose
 * outputs they are: k_gemm_act's ACT_WG order (gemm.cuh, wg_act_unit)
 * over K = the pair's N, so that product converts nothing. In a 256-value
 * chunk, value v = 64 j + 4 s + 2 e + h is element 2 j + e of the unit of
 * step s, half h (gemm_act_kernel's order). w_act_at: the f16 index of
 * output (n, m) among M tokens. */
__device__ __forceinline__ int64_t w_act_at(int n, int m, int M)
{
    const int v = n & (Q_CHUNK - 1), s = (v & 63) >> 2, h = v & 1, e = (v >> 1) & 1;
    return 8 * wg_act_unit(m, n / Q_CHUNK, s, h, wg_act_tokens(M)) + 2 * (v >> 6) + e;
}

/* A pair block's 64 output rows n0.. (n0 a multiple of 64: one j of each
 * chunk) for the NT tokens from m0, from warpgroup 0's fragments (rows r0
 * and r0 + 8, tokens 8 t + 2 tig + 0/1). Rows r and r + 2 are elements 2 j
 * and 2 j + 1 of one unit, so one 4-byte store takes both; r + 2 is lane
 * ^ 8's row. The lane of the lower row stores the even token, its partner
 * the odd one, each after one shuffle. A row's address is worked out once:
 * a token group further is 16 units on (an epilogue here costs SM time
 * one for one, as the kernel runs one block an SM). */
template <int NT>
__device__ __forceinline__ void w_store_act(__half *xo, const float (&acc)[NT / 2], int n0, int r0,
                                            int m0, int lane, int M)
{
    const int odd = (r0 >> 1) & 1; /* the upper row of its pair: stores the odd token */
    const int tok = 2 * (lane & 3) + odd;
#pragma unroll
    for (int rh = 0; rh < 2; rh++) {
        const int n = n0 + r0 + 8 * rh - 2 * odd; /* the pair's lower row */
        __half2 *p = (__half2 *)(xo + w_act_at(n, m0 + tok, M));
#pragma unroll
        for (int t = 0; t < NT / 8; t++) {
            const float a0 = acc[4 * t + 2 * rh], a1 = acc[4 * t + 2 * rh + 1];
            const float got = __shfl_xor_sync(0xffffffffu, odd ? a0 : a1, 8);
            if (m0 + 8 * t + tok < M)
                p[64 * t] = odd ? __floats2half2_rn(got, a1) : __floats2half2_rn(a0, got);
        }
    }
}

template <int T, int NT>
__global__ void __launch_bounds__(W_THREADS, 1)
    gemm_wg_kernel(const uint8_t *__restrict__ W, const uint8_t *__restrict__ U, int64_t w_nb1,
                   const __half *__restrict__ xh, int K, int N, int M, int splits,
                   float *__restrict__ dst, int64_t dst_nb1, int64_t split_nb, gepi ep,
                   wtail tl, __half *__restrict__ xo)
{
    k_dep_enter();
#ifdef WG_DEVICE
    using Q = qgemm<T>;
    using S = wsmem<T, NT>;
    constexpr int PITCH = qshape<T>::PITCH, UNITS = qshape<T>::UNITS;
    extern __shared__ __align__(128) unsigned char smem[];
    constexpr int ST = S::STAGES, D = ST - 1; /* D: chunks copied ahead */
    unsigned char *Xs = smem, *Ws = smem + ST * S::XST;
    /* The activation ring in parts of chunks (P parts of 16 / P k16
     * steps, XST / P bytes): part q of the block's K range (chunk q / P)
     * in part stage q % XP, where chunk i's parts are those of stage i %
     * ST, at the same addresses as whole stages. Each part has its own
     * barrier and is released on its own, so the reload of a chunk's first
     * half does not wait for its second half to land or be used. Halves at
     * 128 tokens, where the ring has two stages; whole chunks at 64, whose
     * three stages give a copy two chunks to land (halves there ran 2-7%
     * slower: docs/PERF.md, session 33). */
    constexpr int P = ST == 2 ? 2 : 1, XP = P * ST, PS = 16 / P;
    __shared__ __align__(8) uint64_t xbar[XP]; /* part stage h has landed */

    const bool glu = U != nullptr; /* rows 64.. of the block are U's rows 0.. */
    int mt = blockIdx.x, rb = blockIdx.y, z = blockIdx.z, tail = -1;
    if (glu) { /* a linear grid of tiles, token tiles fastest (wtail) */
        const int mtiles = (M + NT - 1) / NT;
        int t = blockIdx.x;
        if (t >= tl.full) {
            tail = (t - tl.full) / tl.splits;
            z = (t - tl.full) % tl.splits;
            splits = tl.splits;
            t = tl.full + tail;
        }
        mt = t % mtiles, rb = t / mtiles;
    }
    const int m0 = mt * NT, n0 = rb * (glu ? W_BN / 2 : W_BN);
    int c0, nc;
    split_chunks(K, z, splits, &c0, &nc);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, tig = lane & 3;
    dst = (float *)((char *)dst + z * split_nb);

    /* rows past N read row N - 1 (valid memory; never stored) */
    auto wrow = [&](int r) {
        const uint8_t *base = glu && r >= W_BN / 2 ? U : W;
        int n = n0 + (glu ? r % (W_BN / 2) : r);
        return base + (int64_t)(n < N ? n : N - 1) * w_nb1;
    };
    /* Weights: each warp copies the 16 rows it unpacks (rows 16 warp ..
     * 16 warp + 15), so a stage is private to its warp and needs only
     * __syncwarp. Lane l copies row 16 warp + l % 16, units l / 16, l / 16
     * + 2, ..: the row's address is computed once, a chunk's copies are a
     * pointer add each. (ncu, run 7 of session 16: the block-wide copy
     * loop's division and row selection a copy were ~30% of the stall
     * samples with the activations' offsets.) */
    const int cr = warp * 16 + (lane & 15), cu = lane >> 4;
    auto load_w_a_row_a_lane = [&](int stage, int c, const uint8_t *crow) {
        const uint8_t *src = crow + (size_t)c * Q::BYTES;
        const int off = (int)((uintptr_t)src & 15), lim = (off + Q::BYTES + 15) >> 4;
        const uint8_t *g = src - off + 16 * cu;
        unsigned char *d = Ws + stage * S::WST + cr * PITCH + 16 * cu;
#pragma unroll
        for (int u = 0; u < (UNITS + 1) / 2; u++)
            if (2 * u + 1 < UNITS || cu == 0) /* odd UNITS: lane half 1 has one fewer */
                cp16(d + 32 * u, g + 32 * u, cu + 2 * u < lim);
    };
    /* That order writes 16 rows an instruction: ncu (docs/PERF.md, session
     * 32) counted 32 shared wavefronts a warp for each of Q8_0's copies
     * where 4 would do, and 40% excess global sectors. For Q8_0 (18 units
     * a row) half-warp h copies units 0..15 of rows 2 u + h, 256
     * contiguous bytes of each, and one more instruction the last two
     * units of all 16 rows. Rows of one stride: every row of a chunk has
     * the same offset in its first unit, and units 0..15 are always
     * inside the chunk (it ends in unit 16 or 17). A warp with rows past N
     * (the last row block) keeps the order above, which clamps them. */
    constexpr bool ALONG = UNITS == 18;
    const int hu = lane & 15, hr = warp * 16 + (lane >> 4), tr = warp * 16 + (lane >> 1);
    const bool along =
        ALONG && (w_nb1 & 15) == 0 && n0 + (glu ? (warp * 16) % (W_BN / 2) : warp * 16) + 16 <= N;
    const uint8_t *crow = wrow(along ? hr : cr);
    auto load_w = [&](int stage, int c) {
        if (!along) {
            load_w_a_row_a_lane(stage, c, crow);
            return;
        }
        const uint8_t *src = crow + (size_t)c * Q::BYTES;
        const int off = (int)((uintptr_t)src & 15), lim = (off + Q::BYTES + 15) >> 4;
        const uint8_t *g = src - off + 16 * hu;
        unsigned char *d = Ws + stage * S::WST + hr * PITCH + 16 * hu;
#pragma unroll
        for (int u = 0; u < 8; u++)
            cp16(d + 2 * u * PITCH, g + 2 * u * w_nb1, true);
        const int tu = 16 + (lane & 1);
        cp16(Ws + stage * S::WST + tr * PITCH + 16 * tu,
             src - off + (int64_t)(tr - hr) * w_nb1 + 16 * tu, tu < lim);
    };
    /* Activations of chunk c into stage `stage`: per step s, the tile's
     * tokens' core matrices are contiguous in k_gemm_act's order
     * (gemm.cuh, wg_act_unit), 32 bytes a token, one bulk copy each, 16 *
     * mp values apart, all completing on the stage's barrier. One thread
     * issues them. Only the tokens up to the last 8-token group exist
     * (wg_act_tokens). */
    const int64_t mp = wg_act_tokens(M);
    const unsigned xbytes = (unsigned)(mp - m0 < NT ? mp - m0 : NT) * 32;
    auto load_x = [&](int q) { /* part q of the K range */
        const int hs = q % XP;
        unsigned char *Bs = Xs + hs * (S::XST / P);
        const __half *src =
            xh + 8 * wg_act_unit(m0, c0 + q / P, 0, 0, mp) + (q % P) * PS * 16 * mp;
        mbar_expect(&xbar[hs], PS * xbytes);
#pragma unroll 1
        for (int s = 0; s < PS; s++, src += 16 * mp)
            bulk_g2s(Bs + s * (NT * 32), src, xbytes, &xbar[hs]);
    };
    /* xdone[h]: warps done with the part in part stage h. The eighth to
     * finish part q reloads the stage with part q + XP (no block barrier:
     * a part q + XP arrival needs that copy, so the counts of two parts
     * never mix). */
    __shared__ unsigned xdone[XP];
    if (tid == 0) {
        for (int s = 0; s < XP; s++) {
            mbar_init(&xbar[s], 1);
            xdone[s] = 0;
        }
        mbar_init_fence();
    }
    __syncthreads();

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
     * (na, nb). Weight copy groups (cp.async, the warp's own rows): one per
     * chunk, W(i + 1 + D) committed in iteration i (the prologue's D groups
     * hold W(0..D)), so at the top of iteration i at most D - 1 newer
     * groups may still be in flight; W(i + 1 + D) replaces W(i), which the
     * warp unpacked in iteration i - 1. Activations: part q = P i + h on
     * barrier q % XP, its phase q / XP; part q + XP replaces part q once
     * all 8 warps have waited for part q's wgmmas (xdone), which each
     * does after issuing part q + P's. */
    auto step = [&](int i, unsigned (&ca)[32], unsigned (&cb)[32], unsigned (&na)[32],
                    unsigned (&nb)[32]) {
        cp_wait<D - 1>();
        __syncwarp(); /* chunk i+1's weights landed; this warp's stage i % ST free */
        if (i + 1 + D < nc)
            load_w((i + 1 + D) % ST, c0 + i + 1 + D);
        cp_commit();
        const unsigned char *Bs = Xs + (i % ST) * S::XST;
#pragma unroll
        for (int h = 0; h < P; h++) {
            const int q = P * i + h;
            mbar_wait(&xbar[q % XP], (unsigned)(q / XP) & 1); /* part q's activations */
            if (h == 0)
                wg_fence();
#pragma unroll
            for (int s = PS * h; s < PS * h + PS; s++) {
                unsigned a[4] = {ca[2 * s], cb[2 * s], ca[2 * s + 1], cb[2 * s + 1]};
                wg_mma<NT, 0>::run(acc, a, wg_desc(Bs + s * (NT * 32), 128, 256), 1);
            }
            wg_commit();
            /* part q - P's wgmmas are over (at most this part and the P - 1
             * before it pending; part q's keep the tensor cores busy): its
             * part stage can be reloaded. After the last part all of chunk
             * i - 1's are, so its fragments, (na, nb), can take chunk i +
             * 1's weights. */
            wg_wait<P>();
            if (lane == 0 && q >= P && q - P + XP < P * nc) {
                __threadfence_block(); /* the warp's reads of part stage (q - P) % XP are over */
                if (atomicAdd(&xdone[(q - P) % XP], 1u) % 8 == 7) {
                    __threadfence_block();
                    load_x(q - P + XP);
                }
            }
        }
        if (i + 1 < nc)
            unpack(c0 + i + 1, na, nb);
    };

    load_w(0, c0);
#pragma unroll
    for (int j = 0; j < D; j++) {
        if (tid == 0 && j < nc) {
            for (int h = 0; h < P; h++)
                load_x(P * j + h);
        }
        if (j + 1 < nc)
            load_w(j + 1, c0 + j + 1);
        cp_commit();
    }
    if (tid == 0 && D < nc) {
        for (int h = 0; h < P; h++)
            load_x(P * D + h);
    }
    cp_wait<D - 1>();
    __syncwarp();
    unsigned a0[32], b0[32], a1[32], b1[32];
    unpack(c0, a0, b0);
    for (int i = 0; i < nc; i += 2) {
        step(i, a0, b0, a1, b1);
        if (i + 1 < nc)
            step(i + 1, a1, b1, a0, b0);
    }
    wg_wait<0>();

    if (tail >= 0) { /* a part of a tail tile: gate or up sums, then the last part adds them */
        const int per = W_BN / 2 * NT, rl = (warp & 3) * 16 + gid;
        float *pt = tl.part + (size_t)tail * splits * 2 * per;
        float *pp = pt + (size_t)(z * 2 + (warp >> 2)) * per; /* [token][row] */
#pragma unroll
        for (int j = 0; j < NT / 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++)
                pp[(8 * j + 2 * tig + (e & 1)) * (W_BN / 2) + rl + 8 * (e >> 1)] = acc[4 * j + e];
        if (!k_block_arrives_last(tl.count + tail, 1u, (unsigned)splits))
            return; /* the last part to arrive adds them all */
        for (int e = tid; e < per; e += W_THREADS) { /* consecutive threads, rows */
            const int n = n0 + e % (W_BN / 2), m = m0 + e / (W_BN / 2);
            if (n >= N || m >= M)
                continue;
            float g = 0.0f, u = 0.0f; /* in part order: the sums do not depend on timing */
            for (int p = 0; p < splits; p++) {
                g += __ldcg(pt + (size_t)(2 * p) * per + e);
                u += __ldcg(pt + (size_t)(2 * p + 1) * per + e);
            }
            const float y = g / (1.0f + expf(-g)) * u;
            ((float *)((char *)dst + (int64_t)m * dst_nb1))[n] = y;
            if (xo)
                xo[w_act_at(n, m, M)] = __float2half_rn(y);
        }
        return;
    }
    if (glu) {
        cp_wait<0>(); /* only empty groups can be left; the rings are idle after this */
        __syncthreads();
        float *up = (float *)smem; /* [NT / 2][128]: a thread's sums 128 floats apart */
        if (tid >= 128)
#pragma unroll
            for (int e = 0; e < NT / 2; e++)
                up[e * 128 + tid - 128] = acc[e];
        __syncthreads();
        if (tid >= 128)
            return;
#pragma unroll
        for (int e = 0; e < NT / 2; e++) /* KGEMM_SILU_MUL's formula (gemm.cuh, gepi_apply) */
            acc[e] = acc[e] / (1.0f + expf(-acc[e])) * up[e * 128 + tid];
        if (xo)
            w_store_act<NT>(xo, acc, n0, r0, m0, lane, M);
    }
    gemm_store_frag<NT / 8>(ep, acc, n0 + r0, m0, tig, N, M, dst, dst_nb1, 0);
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

/* Splits of K (whole chunks): gemm_split_waves, one block per SM. A q4_K
 * chunk took ~3.5 us in the 128-token tile and ~3.2 in the 64-token one
 * (ncu on the H200: 7B ffn products at 512 and 64 tokens); a plane moves
 * at ~3 TB/s. */
static int w_splits(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    int64_t nt = w_nt(M), tiles = (N + W_BN - 1) / W_BN * ((M + nt - 1) / nt);
    double plane_us = (double)N * (double)M * 4.0 / 3e6;
    return gemm_split_waves(K / Q_CHUNK, tiles, k->sm_count, W_MAX_SPLITS, g_splits,
                            nt == 64 ? 3.2 : 3.5, plane_us);
}

size_t gemm_wg_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    return gemm_planes_bytes(w_splits(k, K, N, M), N, M);
}

/* A gate/up pair's tiles (wtail): with one block an SM, a last wave of
 * r < sms tiles takes as long as a full one. Splitting those r tiles in
 * s = sms / r parts of K runs that wave in about 1 / s of the time (a
 * 64-token 7B pair: 296 tiles on 132 SMs, two full waves and 32 tiles in
 * 4 parts, 35 chunk times instead of 45). Only where the wave loses at
 * least 3 of its chunks: each part pays a chunk of pipeline fill, and
 * the last one the sum. A forced split count (the op tests) keeps every
 * tile whole. */
/* A gate/up pair's tiles: 64 rows of each matrix by the token tile. */
static int64_t w_glu_tiles(int64_t N, int64_t M)
{
    return (N + W_BN / 2 - 1) / (W_BN / 2) * ((M + w_nt(M) - 1) / w_nt(M));
}

static wtail w_plan(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    const int64_t tiles = w_glu_tiles(N, M);
    const int64_t nch = K / Q_CHUNK, sms = k->sm_count, r = sms > 0 ? tiles % sms : 0;
    wtail p = {(int)tiles, 1, nullptr, nullptr};
    if (g_splits || r == 0 || r > KTILE_COUNTERS)
        return p;
    int64_t s = sms / r;
    s = s < W_MAX_SPLITS ? s : W_MAX_SPLITS;
    s = s < nch ? s : nch;
    if (s < 2 || nch - (nch + s - 1) / s < 3)
        return p;
    p.full = (int)(tiles - r);
    p.splits = (int)s;
    return p;
}

size_t gemm_wg_glu_part_bytes(const struct kctx *k, int64_t K, int64_t N, int64_t M)
{
    const wtail p = w_plan(k, K, N, M);
    if (p.splits < 2)
        return 0;
    return (size_t)(w_glu_tiles(N, M) - p.full) * (size_t)p.splits * 2 * (W_BN / 2) *
           (size_t)w_nt(M) * sizeof(float);
}

template <int T, int NT> static int w_optin_one(struct kctx *k)
{
    return k_smem_optin(k, (const void *)gemm_wg_kernel<T, NT>, wsmem<T, NT>::BYTES,
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

/* One launch: W alone (U NULL, N rows per 128-row block, a grid of
 * token tiles x row blocks x splits) or the gate/up pair W, U (64 rows of
 * each per block, the linear grid of tl). */
template <int T>
static int w_launch(struct kctx *k, const void *W, const void *U, int64_t w_nb1, const void *x,
                    int64_t K, int64_t N, int64_t M, int splits, float *out, int64_t out_nb1,
                    int64_t split_nb, gepi e, wtail tl, __half *xo)
{
    const char *site = U ? "gemm_wg (gate/up)" : "gemm_wg";
    const int nt = w_nt(M);
    const int64_t mt = (M + nt - 1) / nt;
    dim3 grid = U ? dim3((unsigned)(tl.full + (w_glu_tiles(N, M) - tl.full) * tl.splits))
                  : dim3((unsigned)mt, (unsigned)((N + W_BN - 1) / W_BN), (unsigned)splits);
    auto kf = nt == 64 ? gemm_wg_kernel<T, 64> : gemm_wg_kernel<T, 128>;
    const int smem64 = wsmem<T, 64>::BYTES, smem128 = wsmem<T, 128>::BYTES;
    KLAUNCH(k, site, kf, grid, W_THREADS, nt == 64 ? smem64 : smem128, (const uint8_t *)W,
            (const uint8_t *)U, w_nb1, (const __half *)x, (int)K, (int)N, (int)M, splits, out,
            out_nb1, split_nb, e, tl, xo);
    return 0;
}

/* The launcher of each covered type (inplace_pick's L::run<T>). */
struct w_launchers {
    template <int T>
    static int run(struct kctx *k, const void *W, int64_t w_nb1, const void *x, int64_t K,
                   int64_t N, int64_t M, int splits, float *out, int64_t out_nb1,
                   int64_t split_nb, gepi e, const gsplit *)
    {
        const wtail none = {0, 1, nullptr, nullptr};
        return w_launch<T>(k, W, nullptr, w_nb1, x, K, N, M, splits, out, out_nb1, split_nb, e,
                           none, nullptr);
    }
};

static bool w_fits(int64_t N, int64_t M)
{
    return (M + 63) / 64 <= 65535 && (N + W_BN / 2 - 1) / (W_BN / 2) <= 65535;
}

int gemm_wg(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
            const void *xh, int64_t M, float *dst, int64_t dst_nb1, void *part, gepi e)
{
    if (!w_fits(N, M))
        return k_fail(k, "gemm_wg", "too many tokens or rows for one launch");
    if (!q_rows_aligned(type, W, nullptr, w_nb1))
        return k_fail(k, "gemm_wg", "q4_K/q5_K weight rows must start on 16 bytes");
    gemm_inplace_launch fn = inplace_pick<w_launchers>(type);
    if (!fn)
        return k_fail(k, "gemm_wg", "weight type has no in-place GEMM");
    return gemm_inplace_run(k, "gemm_wg", fn, w_splits(k, K, N, M), W, w_nb1, xh, K, N, M,
                            dst, dst_nb1, part, e, 0);
}

bool gemm_wg_glu_ok(void)
{
    return g_splits <= 1; /* a forced split (the op tests) keeps the pair apart */
}

int gemm_wg_glu(struct kctx *k, uint32_t type, const void *G, const void *U, int64_t K,
                int64_t N, int64_t w_nb1, const void *xh, int64_t M, float *dst,
                int64_t dst_nb1, void *part, void *xo)
{
    if (!w_fits(N, M))
        return k_fail(k, "gemm_wg", "too many tokens or rows for one launch");
    if (!q_rows_aligned(type, G, U, w_nb1))
        return k_fail(k, "gemm_wg", "q4_K/q5_K weight rows must start on 16 bytes");
    if (xo && (N % Q_CHUNK || ((uintptr_t)xo & 15)))
        return k_fail(k, "gemm_wg", "f16 outputs need N a multiple of 256 and 16-byte alignment");
    wtail tl = w_plan(k, K, N, M);
    if (tl.splits > 1) {
        if (!part || !k->tile_count)
            return k_fail(k, "gemm_wg", "no scratch for the gate/up pair's split tiles");
        tl.part = (float *)part;
        tl.count = k->tile_count;
    }
    const gepi none = {0, nullptr, 0};
    auto run = [&](decltype(&w_launch<MINFER_TYPE_Q4_K>) launch) {
        return launch(k, G, U, w_nb1, xh, K, N, M, 1, dst, dst_nb1, 0, none, tl, (__half *)xo);
    };
    switch (type) {
    case MINFER_TYPE_Q4_K:
        return run(w_launch<MINFER_TYPE_Q4_K>);
    case MINFER_TYPE_Q5_K:
        return run(w_launch<MINFER_TYPE_Q5_K>);
    case MINFER_TYPE_Q6_K:
        return run(w_launch<MINFER_TYPE_Q6_K>);
    case MINFER_TYPE_Q8_0:
        return run(w_launch<MINFER_TYPE_Q8_0>);
    default:
        return k_fail(k, "gemm_wg", "weight type has no in-place GEMM");
    }
}
