/*
 * attn-dec.cu — decode attention over an F16 cache on tensor cores
 * (head_dim 64 or 128, more than A_SHORT_CELLS cells; attn.cu picks it).
 *
 * Why: the scalar GQA decode kernel (attn.cu, attn_decode) read K rows
 * lane-per-cell, 8 useful bytes of every 32-byte sector per load, and ran
 * at 13% of the H200's bandwidth at 32k cells. Here every K and V byte
 * comes in by 16-byte cp.async, two 256-byte rows per warp instruction,
 * and the arithmetic runs on mma.sync m16n8k16 (attn-mma.cu's fragment
 * layouts): the query heads of a KV head are the 16 rows of the A operand
 * (a group of 7 pads to 16: the tensor cores idle anyway, the kernel waits
 * on memory), the cells the columns of S = Q K^T, then O += P V with P
 * taken from the S accumulators. Softmax online, in base 2 (the scale
 * carries log2 e).
 *
 * Work split: grid (splits, KV head x chunk of 16 query heads, token). A
 * block is DM_WARPS warps over one contiguous share of the visible cells;
 * each warp streams its own tiles of DM_TC cells through its own K and V
 * buffers (no block barrier in the loop), K of the next tile loading while
 * P V runs and V of the next while S runs. At the end the warps merge in
 * shared memory and the block writes one split-K partial in attn.cu's
 * layout (values, max in natural-log units, sum), which dm_combine reduces
 * with 8 warps sharing the splits; with one split (short contexts) the
 * block writes the final rows itself, with more warps for that part. The
 * split count is a function of the shapes; each block's share is computed
 * from kv_len in the kernel, so a captured launch replays at every depth.
 */
#include "attn.cuh"

#define DM_WARPS 2
#define DM_TC 32                      /* cells per warp tile */
#define DM_ROWS 16                    /* query heads per block: the mma's M */
#define DM_STEP (DM_WARPS * DM_TC)    /* cells per block step */
#define DM_MAX_SPLITS 512             /* dm_combine's weight array */
/* Blocks in all: 2 per SM of an H200 (4 warps). minfer-cuda-bench --attn
 * on the H200, us per call at depths 1k/4k/16k/32k: 528 blocks 13.2/16.0/
 * 21.5/30.7, 264 blocks 11.3/13.6/20.1/29.2, 1056 blocks 16.2/19.0/29.0/
 * 38.4: more splits cost more in partials and combine than they gain in
 * bytes in flight. */
#define DM_TARGET_BLOCKS 264
/* A sequence's decode over at most this many cells (the smallest KV
 * bucket, forward-graph-cache-and-buckets.md) runs one split, whose block
 * writes the final rows: a 128-token generation from an empty cache has
 * at most two block steps of cells, and the partials and the combine
 * launch cost more than running them in one block (tg128 1.01-1.03x on
 * the H200; docs/PERF.md, session 21). */
#define DM_ONE_SPLIT_CELLS 256
/* Warps of that one-split block: DM_WARPS stream the cells, all of them
 * share the final rows and their q8_1 blocks (with 2 warps, 14 rows of
 * dependent shuffles a thread on the 7B cost more than the combine launch
 * saved; docs/PERF.md, session 21). */
#define DM_FIN_WARPS 8
#define DC_WARPS 8

/* 0: DM_TARGET_BLOCKS; > 0: that many blocks; < 0: the kernel is off
 * (attn.cu then takes its scalar decode kernel). minfer-cuda-bench only. */
static int g_dm_target;

extern "C" void k_tune_attn_dec(int blocks)
{
    g_dm_target = blocks;
}

/* Cells [c0, c0 + DM_TC) of KV head hk into s (rows LD halves apart);
 * rows at or past end are zeros (a V row must be finite: P = 0 times a
 * stale NaN is NaN). With a cell list (LIST), entry c is cell list[c]:
 * lane j reads entry c0 + j and the warp shares it by shuffle; an entry
 * naming no cell of the cache is a zero row, and the mask of such entries
 * (bit j) comes back so their scores can be masked. */
template <int HD, bool LIST>
__device__ __forceinline__ unsigned dm_stage(uint16_t *s, const uint8_t *__restrict__ cache,
                                             int64_t nb1, int hk, int64_t c0, int64_t end,
                                             const int32_t *__restrict__ list, int64_t n_cells,
                                             int lane)
{
    constexpr int LD = HD + 8, PR = HD / 8; /* 16-byte chunks per row */
    static_assert(DM_TC == 32, "one list entry per lane");
    int mine = 0;
    unsigned bad = 0;
    if (LIST) {
        const int64_t c = c0 + lane;
        mine = c < end ? list[c] : 0;
        const bool out = c < end && (mine < 0 || (int64_t)mine >= n_cells);
        bad = __ballot_sync(0xffffffffu, out);
        mine = out ? 0 : mine;
    }
#pragma unroll
    for (int e = lane; e < DM_TC * PR; e += 32) {
        int j = e / PR, k = e % PR;
        int64_t c = c0 + j;
        bool ok = c < end;
        int64_t row = ok ? c : c0;
        if (LIST) {
            row = __shfl_sync(0xffffffffu, mine, j);
            ok = ok && !((bad >> j) & 1u);
        }
        cp16(s + j * LD + k * 8, cache + row * nb1 + (size_t)hk * HD * 2 + k * 16, ok);
    }
    return bad;
}

/* Value d of head h, token t: into dst and, with xq, into its q8_1 block
 * of 32 values (one scale per block, bit for bit k_quantize_q8_1's), which
 * the calling warp holds: lane = d % 32, every lane calling. */
template <int HD>
__device__ __forceinline__ void dm_out(const kview &dst, uint8_t *xq, int n_head, int t, int h,
                                       int d, float v, int lane)
{
    ((float *)((char *)dst.data + (int64_t)h * dst.nb[1] + (int64_t)t * dst.nb[2]))[d] = v;
    if (xq)
        q8_1_store_warp(xq, t, HD * n_head / 32, h * HD + d, v, lane);
}

/* LIST: ATTENTION_LISTS' form (attn-lists.cu's k_attention_lists calls
 * it for F16 caches): token t reads entries [range[t][0], range[t][1]) of
 * cell list qlist[t] instead of cells [0, visible) of the cache; kv_len,
 * pos and window are unused. Otherwise range .. flags are unused.
 * FIN (one split, DM_FIN_WARPS warps): the block writes the final rows
 * into dst (and xq, one scale per 32 values); otherwise its partial, for
 * dm_combine. */
template <int HD, bool LIST, bool FIN>
__global__ void __launch_bounds__((FIN ? DM_FIN_WARPS : DM_WARPS) * 32)
    attn_decode_mma(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                    int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                    const int32_t *kv_len, const int32_t *pos, float scale, int window,
                    const int32_t *__restrict__ range, const int32_t *__restrict__ qlist,
                    const int32_t *__restrict__ lists, int64_t n_kv, int64_t n_lists,
                    unsigned *flags, int n_splits, float *__restrict__ part, kview dst,
                    uint8_t *xq)
{
    k_dep_enter();
    constexpr int LD = HD + 8, KS = HD / 16, NT = DM_TC / 8, OT = HD / 8;
    constexpr int TILE = DM_TC * LD; /* halves */
    __shared__ __align__(16) uint16_t sm[DM_WARPS * 2 * TILE];
    static_assert(DM_WARPS * DM_ROWS * (HD + 2) * 4 <= (int)sizeof(sm), "merge area");
    const int n_head = (int)q.ne[1];
    const int n_gc = (group + DM_ROWS - 1) / DM_ROWS;
    const int hk = blockIdx.y / n_gc, gc = blockIdx.y % n_gc;
    const int h0 = hk * group + gc * DM_ROWS;
    const int ng = group - gc * DM_ROWS < DM_ROWS ? group - gc * DM_ROWS : DM_ROWS;
    const int t = blockIdx.z, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane / 4, qd = lane % 4;
    uint16_t *Ks = sm + warp * 2 * TILE, *Vs = Ks + TILE;

    int64_t begin, end;
    const int32_t *list = NULL;
    if (LIST)
        list = lists_slice(range, qlist, lists, n_kv, n_lists, t, blockIdx.x, n_splits, DM_STEP,
                           flags, begin, end);
    else
        split_share(kv_len, pos, t, n_cells, window, blockIdx.x, n_splits, DM_STEP, begin, end);
    if (warp >= DM_WARPS) /* FIN's other warps: the final rows only */
        end = begin;

    /* the warp's first K and V tiles load while Q is read; kbad: the K
     * tile's entries that name no cell (LIST) */
    int64_t c0 = begin + warp * DM_TC;
    unsigned kbad = 0, kbad_next = 0;
    if (c0 < end) {
        kbad_next = dm_stage<HD, LIST>(Ks, kc, knb1, hk, c0, end, list, n_cells, lane);
        cp_commit();
        dm_stage<HD, LIST>(Vs, vc, vnb1, hk, c0, end, list, n_cells, lane);
        cp_commit();
    }
    if (LIST && kbad_next && lane == 0 && flags)
        atomicOr(flags, KFLAG_ATTN_LIST);

    /* Q as A fragments (rows g and g + 8 = query heads h0 + g, h0 + g + 8;
     * rows past the group are zeros), scaled into base-2 exponent units */
    const float qsc = scale * 1.4426950408889634f;
    const char *qt = (const char *)q.data + (int64_t)t * q.nb[2];
    const float *qa = g < ng ? (const float *)(qt + (int64_t)(h0 + g) * q.nb[1]) : NULL;
    const float *qb = g + 8 < ng ? (const float *)(qt + (int64_t)(h0 + g + 8) * q.nb[1]) : NULL;
    unsigned qf[KS][4];
#pragma unroll
    for (int ks = 0; ks < KS; ks++) {
        const int d = ks * 16 + 2 * qd;
        qf[ks][0] = qa ? pack_h2(qa[d] * qsc, qa[d + 1] * qsc) : 0u;
        qf[ks][1] = qb ? pack_h2(qb[d] * qsc, qb[d + 1] * qsc) : 0u;
        qf[ks][2] = qa ? pack_h2(qa[d + 8] * qsc, qa[d + 9] * qsc) : 0u;
        qf[ks][3] = qb ? pack_h2(qb[d + 8] * qsc, qb[d + 9] * qsc) : 0u;
    }

    float o[OT][4];
#pragma unroll
    for (int i = 0; i < OT; i++)
        o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
    for (; c0 < end; c0 += DM_STEP) {
        const int64_t cn = c0 + DM_STEP;
        cp_wait<1>(); /* this K tile (its V tile may still be in flight) */
        __syncwarp();
        float s[NT][4];
        mma_qk_tile<LD>(s, qf, Ks, lane);
        __syncwarp(); /* every lane has read the K tile */
        kbad = kbad_next;
        if (cn < end) {
            kbad_next = dm_stage<HD, LIST>(Ks, kc, knb1, hk, cn, end, list, n_cells, lane);
            if (LIST && kbad_next && lane == 0 && flags)
                atomicOr(flags, KFLAG_ATTN_LIST);
        }
        cp_commit(); /* possibly empty: keeps the group count uniform */

        if (c0 + DM_TC > end || kbad) { /* the share's last, partial tile; cells refused */
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int j = nt * 8 + 2 * qd + (e & 1);
                    if (c0 + j >= end || ((kbad >> j) & 1u))
                        s[nt][e] = -INFINITY;
                }
        }
        unsigned pf[NT / 2][4];
        mma_softmax_tile(s, m0, m1, l0, l1, o, pf);

        cp_wait<1>(); /* this V tile (the next K tile may still be in flight) */
        __syncwarp();
        mma_pv_tile<LD>(o, pf, Vs, lane);
        __syncwarp(); /* every lane has read the V tile */
        if (cn < end)
            dm_stage<HD, LIST>(Vs, vc, vnb1, hk, cn, end, list, n_cells, lane);
        cp_commit();
    }
    cp_wait<0>();
    l0 = quad_sum(l0);
    l1 = quad_sum(l1);

    /* merge the warps: rows of HD + 2 floats (values, max, sum) */
    __syncthreads(); /* every warp is done with its tiles */
    float *mg = (float *)sm;
    if (warp < DM_WARPS) {
        float *ra = mg + (warp * DM_ROWS + g) * (HD + 2), *rb = ra + 8 * (HD + 2);
#pragma unroll
        for (int i = 0; i < OT; i++) {
            const int d = i * 8 + 2 * qd;
            ra[d] = o[i][0];
            ra[d + 1] = o[i][1];
            rb[d] = o[i][2];
            rb[d + 1] = o[i][3];
        }
        if (qd == 0) {
            ra[HD] = m0;
            ra[HD + 1] = l0;
            rb[HD] = m1;
            rb[HD + 1] = l1;
        }
    }
    __syncthreads();
    /* ng * HD is whole warps (HD % 32 == 0), so a warp's lanes share each
     * iteration: dm_out's q8_1 blocks are per warp */
    for (int e = threadIdx.x; e < ng * HD; e += blockDim.x) {
        const int r = e / HD, d = e % HD;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++)
            M = fmaxf(M, mg[(w * DM_ROWS + r) * (HD + 2) + HD]);
        float a = 0.0f, L = 0.0f;
#pragma unroll
        for (int w = 0; w < DM_WARPS; w++) {
            const float *rw = mg + (w * DM_ROWS + r) * (HD + 2);
            const float ws = rw[HD] == -INFINITY ? 0.0f : exp2f(rw[HD] - M);
            a += ws * rw[d];
            L += ws * rw[HD + 1];
        }
        if (FIN) { /* the whole share: the final rows */
            dm_out<HD>(dst, xq, n_head, t, h0 + r, d, L > 0.0f ? a / L : 0.0f, lane);
            continue;
        }
        /* every block writes all its rows (an empty one: zeros, max -inf),
         * so dm_combine never reads a stale value */
        float *op = part + (((size_t)t * n_head + h0 + r) * n_splits + blockIdx.x) *
                               (size_t)(HD + 2);
        op[d] = a;
        if (d == 0) {
            op[HD] = M == -INFINITY ? -INFINITY : M * 0.6931471805599453f; /* natural log */
            op[HD + 1] = L;
        }
    }
}

/* The split-K combine for dm's partials: the weights per split as in
 * attn.cu's attn_combine, then 8 warps share the splits (lane l: values
 * 4l..4l+3), so a head's hundred-odd splits cost a few rounds of loads
 * instead of one per split. Returns head h's value d to thread d < HD
 * (others get 0); every thread of the block calls it. */
template <int HD>
__device__ __forceinline__ float dm_combine_head(const float *__restrict__ part, int n_head,
                                                 int n_splits, int h, int t, bool again)
{
    constexpr int RS = HD + 2;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __shared__ float w[DM_MAX_SPLITS];
    __shared__ float acc[DC_WARPS][HD];
    __shared__ float red[3][DC_WARPS];
    const float *base = part + ((size_t)t * n_head + h) * n_splits * (size_t)RS;
    float M = -INFINITY;
    for (int s = threadIdx.x; s < n_splits; s += DC_WARPS * 32)
        M = fmaxf(M, base[s * RS + HD]);
    M = warp_max(M);
    if (again)
        __syncthreads(); /* the previous head's readers of red, w and acc are done */
    if (lane == 0)
        red[0][warp] = M;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < DC_WARPS; i++)
        M = fmaxf(M, red[0][i]);
    float L = 0.0f, last = -1.0f; /* the last split with weight: cells go from split 0 */
    for (int s = threadIdx.x; s < n_splits; s += DC_WARPS * 32) {
        const float ms = base[s * RS + HD];
        const float ws = ms == -INFINITY ? 0.0f : expf(ms - M);
        w[s] = ws;
        L += ws * base[s * RS + HD + 1];
        last = ws != 0.0f ? (float)s : last;
    }
    L = warp_sum(L);
    last = warp_max(last);
    if (lane == 0) {
        red[1][warp] = L;
        red[2][warp] = last;
    }
    __syncthreads(); /* also publishes w[] */
    L = 0.0f;
    last = -1.0f;
#pragma unroll
    for (int i = 0; i < DC_WARPS; i++) {
        L += red[1][i];
        last = fmaxf(last, red[2][i]);
    }
    const int n_used = (int)last + 1;
    if (lane < HD / 4) {
        float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll 4
        for (int s = warp; s < n_used; s += DC_WARPS) {
            const float2 *p = (const float2 *)(base + s * RS + 4 * lane); /* RS even */
            const float2 x = p[0], y = p[1];
            const float ws = w[s];
            a0 += ws * x.x;
            a1 += ws * x.y;
            a2 += ws * y.x;
            a3 += ws * y.y;
        }
        acc[warp][4 * lane] = a0;
        acc[warp][4 * lane + 1] = a1;
        acc[warp][4 * lane + 2] = a2;
        acc[warp][4 * lane + 3] = a3;
    }
    __syncthreads();
    if (threadIdx.x >= HD)
        return 0.0f;
    const int d = threadIdx.x;
    float a = 0.0f;
#pragma unroll
    for (int i = 0; i < DC_WARPS; i++)
        a += acc[i][d];
    return L > 0.0f ? a / L : 0.0f; /* no visible cell: zeros */
}

/* dm_combine_head for G heads per block, heads blockIdx.x * G.., token
 * blockIdx.y, into dst. xq (NULL: none): dst's rows also as q8_1 blocks,
 * bit for bit what k_quantize_q8_1 gives: G = 1, one scale per 32 values
 * (HD % 32 == 0 holds); G = 256 / HD, the group-256 rule of
 * quantize_q8_1_g256_kernel over the block's 256 values (thread i holds
 * value i, so warp j is 32-block j of the group). */
template <int HD, int G>
__global__ void __launch_bounds__(DC_WARPS * 32)
    dm_combine(const float *__restrict__ part, int n_head, int n_splits, kview dst, uint8_t *xq)
{
    k_dep_enter();
    static_assert(G == 1 || G * HD == DC_WARPS * 32, "a group-256 block holds its 256 values");
    const int t = blockIdx.y, lane = threadIdx.x % 32;
    __shared__ float vals[G * HD];
    for (int g = 0; g < G; g++) {
        const int h = blockIdx.x * G + g;
        const float v = dm_combine_head<HD>(part, n_head, n_splits, h, t, g > 0);
        if (threadIdx.x < HD) {
            /* G = 1: whole warps (HD % 32 == 0) */
            dm_out<HD>(dst, G == 1 ? xq : NULL, n_head, t, h, threadIdx.x, v, lane);
            if (G > 1)
                vals[g * HD + threadIdx.x] = v;
        }
    }
    if (G == 1 || !xq)
        return;
    __shared__ float wmax[DC_WARPS];
    __syncthreads(); /* vals[i] was written by thread i % HD */
    const float v = vals[threadIdx.x];
    float amax = warp_max(fabsf(v));
    if (lane == 0)
        wmax[threadIdx.x / 32] = amax;
    __syncthreads();
#pragma unroll
    for (int i = 0; i < DC_WARPS; i++)
        amax = fmaxf(amax, wmax[i]);
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f, d = amax / 127.0f;
    const int q = __float2int_rn(v * id);
    const float qs = warp_sum((float)q);
    const int nb = HD * n_head / 32, col = blockIdx.x * G * HD + threadIdx.x;
    uint8_t *row = xq + (size_t)t * (size_t)nb * 40;
    ((int8_t *)row)[col] = (int8_t)q;
    if (lane == 0)
        ((float2 *)(row + 32 * (size_t)nb))[col / 32] = make_float2(d, d * qs);
}

extern "C" int k_attn_dec_ok(int64_t hd, uint32_t kv_type, const void *kc, const void *vc,
                             int64_t knb1, int64_t vnb1)
{
    if (g_dm_target < 0 || kv_type != MINFER_TYPE_F16 || (hd != 64 && hd != 128))
        return 0;
    /* 16-byte cp.async of every row */
    return (uintptr_t)kc % 16 == 0 && (uintptr_t)vc % 16 == 0 && knb1 % 16 == 0 &&
           vnb1 % 16 == 0;
}

extern "C" int k_attn_dec_splits(int64_t n_kv_head, int64_t group, int64_t n_tokens,
                                 int64_t n_cells)
{
    int64_t units = n_kv_head * ((group + DM_ROWS - 1) / DM_ROWS) * n_tokens;
    int64_t target = g_dm_target > 0 ? g_dm_target : DM_TARGET_BLOCKS;
    int64_t want = units > 0 ? (target + units - 1) / units : 1;
    int64_t maxs = (n_cells + DM_STEP - 1) / DM_STEP; /* a block step each at least */
    if (want > maxs)
        want = maxs;
    if (want > DM_MAX_SPLITS)
        want = DM_MAX_SPLITS;
    return (int)(want < 1 ? 1 : want);
}

extern "C" int k_attn_dec_seq_splits(int64_t n_kv_head, int64_t group, int64_t n_tokens,
                                     int64_t n_cells)
{
    return n_cells <= DM_ONE_SPLIT_CELLS ? 1
                                         : k_attn_dec_splits(n_kv_head, group, n_tokens, n_cells);
}

/* Cell source of a launch: the cache's first visible cells (kv_len, pos,
 * window) or, for ATTENTION_LISTS, per-token cell lists. */
struct dm_cells {
    const int32_t *kv_len, *pos;
    int window;
    const int32_t *range, *qlist, *lists;
    int64_t n_kv, n_lists;
};

template <int HD, bool LIST>
static int dm_launch(struct kctx *k, struct kview q, const uint8_t *K, const uint8_t *V,
                     int64_t knb1, int64_t vnb1, int64_t n_cells, int64_t n_kv_head,
                     const struct dm_cells &c, float scale, int splits, float *part,
                     struct kview dst, uint8_t *xq, int xq_group)
{
    const int group = (int)(q.ne[1] / n_kv_head);
    const int64_t n_gc = (group + DM_ROWS - 1) / DM_ROWS;
    dim3 grid((unsigned)splits, (unsigned)(n_kv_head * n_gc), (unsigned)q.ne[2]);
    /* one split: the kernel writes the rows itself, no combine launch */
    const bool fin = splits == 1 && (!xq || xq_group == 32);
    auto kf = fin ? attn_decode_mma<HD, LIST, true> : attn_decode_mma<HD, LIST, false>;
    KLAUNCH(k, LIST ? "attention_lists.decode_mma<f16>" : "attention.decode_mma<f16>", kf, grid,
            (fin ? DM_FIN_WARPS : DM_WARPS) * 32, 0, q, K, V, knb1, vnb1, n_cells, group,
            c.kv_len, c.pos, scale, c.window, c.range, c.qlist, c.lists, c.n_kv, c.n_lists,
            k->flags, splits, part, dst, xq);
    if (fin)
        return 0;
    const bool g256 = xq && xq_group == 256;
    if (g256 && (HD * q.ne[1]) % 256)
        return k_fail(k, "attention.combine_mma", "group-256 q8_1 rows of heads not 256 wide");
    dim3 g2((unsigned)(g256 ? q.ne[1] / (256 / HD) : q.ne[1]), (unsigned)q.ne[2]);
    auto cf = g256 ? dm_combine<HD, 256 / HD> : dm_combine<HD, 1>;
    KLAUNCH(k, LIST ? "attention_lists.combine_mma" : "attention.combine_mma", cf, g2,
            DC_WARPS * 32, 0, (const float *)part, (int)q.ne[1], splits, dst, xq);
    return 0;
}

extern "C" int k_attn_dec(struct kctx *k, struct kview q, const void *kc, const void *vc,
                          int64_t knb1, int64_t vnb1, int64_t n_cells, int64_t n_kv_head,
                          const int32_t *kv_len, const int32_t *pos, float scale, int window,
                          int splits, void *scratch, struct kview dst, void *xq)
{
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    const struct dm_cells c = {kv_len, pos, window, NULL, NULL, NULL, 0, 0};
    auto f = q.ne[0] == 128 ? dm_launch<128, false> : dm_launch<64, false>;
    return f(k, q, K, V, knb1, vnb1, n_cells, n_kv_head, c, scale, splits, (float *)scratch, dst,
             (uint8_t *)xq, 32);
}

extern "C" int k_attn_dec_lists(struct kctx *k, struct kview q, const void *kc, const void *vc,
                                int64_t knb1, int64_t vnb1, int64_t n_cells, int64_t n_kv_head,
                                const int32_t *range, const int32_t *qlist, const int32_t *lists,
                                int64_t n_kv, int64_t n_lists, float scale, int splits,
                                void *scratch, struct kview dst, void *xq, int xq_group)
{
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    const struct dm_cells c = {NULL, NULL, 0, range, qlist, lists, n_kv, n_lists};
    auto f = q.ne[0] == 128 ? dm_launch<128, true> : dm_launch<64, true>;
    return f(k, q, K, V, knb1, vnb1, n_cells, n_kv_head, c, scale, splits, (float *)scratch, dst,
             (uint8_t *)xq, xq_group);
}
