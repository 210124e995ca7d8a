/*
 * attn-lists.cu — ATTENTION_LISTS (many sequences in one pass): causal
 * grouped-query attention where query token t reads entries
 * [range[t][0], range[t][1]) of cell list qlist[t] (the cells of its
 * sequence in position order; a sliding window moves the first entry).
 * Split-K like attn.cu: a block per (split, head, query token) walks its
 * slice of the list in tiles of 128 entries with an online softmax and
 * writes a partial (acc[hd], max, sum); a combine pass merges them. The
 * grid and the number of splits depend on the shapes only (n_head,
 * n_tokens, list length); counts, lists and cells are read from device
 * memory, so a captured launch replays for every step of a batched decode.
 * With up to L_MAX_G query heads per KV head (every GQA model minfer runs)
 * a block serves all the query heads of one KV head, so each K and V row
 * of a list is read once per (token, KV head) instead of once per query
 * head; a batched decode reads many lists, so that is most of its
 * attention traffic. Kept apart from attn.cu so the single-sequence
 * kernels stay untouched.
 */
#include "attn.cuh"

#define L_THREADS 128
static_assert(L_THREADS == 128, "block_max128, partial_store128");
#define L_TILE 128
#define L_MAX_HD 256
#define L_TARGET_BLOCKS 1024
#define L_MAX_G 8 /* query heads per KV head the grouped kernel takes */
/* Splits are whole multiples of L_CHUNK entries, not of the 128-entry
 * tile: a batched decode's lists are short (a few hundred cells) and few
 * (n_kv_head x n_tokens blocks per split), so 128-entry splits left the
 * H200 nearly idle (2 splits x 4 KV heads x 4 tokens = 32 blocks, 168 us
 * per layer). The number of splits is a function of the shapes only
 * (graph replay); lists_share deals each token's visible entries out. */
#define L_CHUNK 32

/* The cell of entry j (-1 past end): a cell outside the cache is flagged
 * and skipped (-1). */
__device__ __forceinline__ int lists_cell(const int32_t *list, int64_t j, int64_t end,
                                          int64_t n_cells, unsigned *flags)
{
    int c = -1;
    if (j < end) {
        c = list[j];
        if (c < 0 || c >= n_cells) {
            if (flags)
                atomicOr(flags, KFLAG_ATTN_LIST);
            c = -1;
        }
    }
    return c;
}

/* ---- cache element access (L: 0 = F32, 1 = F16, 2 = Q8_0) ---- */

/* q . K row (head hk), q in shared memory. vec (the launcher checked the
 * cache base, the row stride and head_dim): 16-byte loads of 4 f32 or 8
 * f16, a few wide loads per row instead of head_dim scalar ones (each
 * thread reads its own row, so the scalar loads were one memory
 * transaction per element); otherwise scalar loads, which need no
 * alignment beyond the element's. */
template <int L>
__device__ __forceinline__ float ldot(const float *q, const uint8_t *row, int hk, int hd,
                                      bool vec)
{
    float s = 0.0f;
    if (L == 0 && vec) {
        const float4 *r4 = (const float4 *)(row + (size_t)hk * hd * 4);
        for (int i = 0; i < hd / 4; i++) {
            float4 v = r4[i];
            s += q[4 * i] * v.x + q[4 * i + 1] * v.y + q[4 * i + 2] * v.z + q[4 * i + 3] * v.w;
        }
    } else if (L == 1 && vec) {
        const uint4 *r8 = (const uint4 *)(row + (size_t)hk * hd * 2);
        for (int i = 0; i < hd / 8; i++) {
            uint4 v = r8[i];
            uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int j = 0; j < 4; j++)
                s += q[8 * i + 2 * j] * h2f((uint16_t)w[j]) +
                     q[8 * i + 2 * j + 1] * h2f((uint16_t)(w[j] >> 16));
        }
    } else if (L == 2) {
        const bq8_0 *b = (const bq8_0 *)row + (size_t)hk * (hd / 32);
        for (int j = 0; j < hd / 32; j++) {
            float d = h2f(b[j].d), bs = 0.0f;
#pragma unroll 8
            for (int i = 0; i < 32; i++)
                bs += q[32 * j + i] * (float)b[j].qs[i];
            s += d * bs;
        }
    } else {
        for (int i = 0; i < hd; i++)
            s += q[i] * vload<L>(row, hk * hd + i);
    }
    return s;
}

/* ---- partials ---- */

template <int L>
__global__ void __launch_bounds__(L_THREADS)
    lists_partial(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                  int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                  const int32_t *__restrict__ range, const int32_t *__restrict__ qlist,
                  const int32_t *__restrict__ lists, int64_t n_kv, int64_t n_lists, float scale,
                  int n_splits, float *__restrict__ part, unsigned *flags, int vec)
{
    k_dep_enter();
    const int split = blockIdx.x, h = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int hd = (int)q.ne[0], hk = h / group, n_head = (int)q.ne[1];
    __shared__ float qs[L_MAX_HD];
    __shared__ float p[L_TILE];
    __shared__ int cell[L_TILE];
    __shared__ float red[4];

    const float *qr = (const float *)((const char *)q.data + h * q.nb[1] + t * q.nb[2]);
    for (int d = tid; d < hd; d += L_THREADS)
        qs[d] = qr[d] * scale;
    int64_t begin, end;
    const int32_t *list = lists_slice(range, qlist, lists, n_kv, n_lists, t, split, n_splits,
                                      L_CHUNK, flags, begin, end);
    __syncthreads();

    float m = -INFINITY, l = 0.0f, acc0 = 0.0f, acc1 = 0.0f;
    for (int64_t c0 = begin; c0 < end; c0 += L_TILE) {
        int64_t j = c0 + tid;
        /* lists_cell's check, with the score in its valid branch: written
         * out, as calling lists_cell compiles to other branches here */
        float s = -INFINITY;
        int c = -1;
        if (j < end) {
            c = list[j];
            if (c < 0 || c >= n_cells) { /* a cell outside the cache: flagged, skipped */
                if (flags)
                    atomicOr(flags, KFLAG_ATTN_LIST);
                c = -1;
            } else {
                s = ldot<L>(qs, kc + (int64_t)c * knb1, hk, hd, vec != 0);
            }
        }
        cell[tid] = c;
        float mn = fmaxf(m, block_max128(s, red));
        float e = c >= 0 && mn != -INFINITY ? expf(s - mn) : 0.0f;
        p[tid] = e;
        float ps = block_sum128(e, red); /* its barriers publish p[] and cell[] */
        float corr = m != -INFINITY ? expf(m - mn) : 0.0f;
        l = l * corr + ps;
        acc0 *= corr;
        acc1 *= corr;
        int cnt = end - c0 < L_TILE ? (int)(end - c0) : L_TILE;
        int vi0 = hk * hd + tid, vi1 = hk * hd + tid + L_THREADS;
        for (int k = 0; k < cnt; k++) {
            if (cell[k] < 0)
                continue;
            const uint8_t *vr = vc + (int64_t)cell[k] * vnb1;
            float pk = p[k];
            if (tid < hd)
                acc0 += pk * vload<L>(vr, vi0);
            if (tid + L_THREADS < hd)
                acc1 += pk * vload<L>(vr, vi1);
        }
        m = mn;
        __syncthreads(); /* p[] and cell[] are rewritten by the next tile */
    }
    partial_store128(part, t, n_head, h, n_splits, split, hd, acc0, acc1, m, l);
}

/* Merges the partials of a query head and token: combine_few (no more than
 * 64 splits here, k_attn_lists_splits). */
__global__ void lists_combine(const float *__restrict__ part, int hd, int n_head, int n_splits,
                              kview dst)
{
    k_dep_enter();
    combine_few(part, hd, n_head, n_splits, dst, NULL);
}

/* The same for the G = group query heads of KV head blockIdx.y at once:
 * per tile every thread scores its entry against all G heads (one K row
 * read), the online softmax runs per head, and each V row read feeds the
 * G accumulators. Partials go where lists_partial puts them. */
template <int L>
__global__ void __launch_bounds__(L_THREADS)
    lists_partial_g(kview q, const uint8_t *__restrict__ kc, const uint8_t *__restrict__ vc,
                    int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                    const int32_t *__restrict__ range, const int32_t *__restrict__ qlist,
                    const int32_t *__restrict__ lists, int64_t n_kv, int64_t n_lists,
                    float scale, int n_splits, float *__restrict__ part,
                    unsigned *flags, int vec)
{
    k_dep_enter();
    const int split = blockIdx.x, hk = blockIdx.y, t = blockIdx.z, tid = threadIdx.x;
    const int hd = (int)q.ne[0], n_head = (int)q.ne[1];
    __shared__ float qs[L_MAX_G * L_MAX_HD];
    __shared__ float p[L_MAX_G][L_TILE];
    __shared__ int cell[L_TILE];
    __shared__ float red[4];

    for (int g = 0; g < group; g++) {
        const float *qr = (const float *)((const char *)q.data + (hk * group + g) * q.nb[1] +
                                          t * q.nb[2]);
        for (int d = tid; d < hd; d += L_THREADS)
            qs[g * hd + d] = qr[d] * scale;
    }
    int64_t begin, end;
    const int32_t *list = lists_slice(range, qlist, lists, n_kv, n_lists, t, split, n_splits,
                                      L_CHUNK, flags, begin, end);
    __syncthreads();

    float m[L_MAX_G], l[L_MAX_G], acc0[L_MAX_G], acc1[L_MAX_G];
#pragma unroll
    for (int g = 0; g < L_MAX_G; g++) {
        m[g] = -INFINITY;
        l[g] = acc0[g] = acc1[g] = 0.0f;
    }
    for (int64_t c0 = begin; c0 < end; c0 += L_TILE) {
        int64_t j = c0 + tid;
        int c = lists_cell(list, j, end, n_cells, flags);
        cell[tid] = c;
#pragma unroll
        for (int g = 0; g < L_MAX_G; g++) {
            if (g >= group) /* uniform over the block: the barriers below stay matched */
                break;
            float s = c >= 0 ? ldot<L>(qs + g * hd, kc + (int64_t)c * knb1, hk, hd, vec != 0)
                             : -INFINITY;
            float mn = fmaxf(m[g], block_max128(s, red));
            float e = c >= 0 && mn != -INFINITY ? expf(s - mn) : 0.0f;
            p[g][tid] = e;
            float ps = block_sum128(e, red); /* its barriers publish p[g][] and cell[] */
            float corr = m[g] != -INFINITY ? expf(m[g] - mn) : 0.0f;
            l[g] = l[g] * corr + ps;
            acc0[g] *= corr;
            acc1[g] *= corr;
            m[g] = mn;
        }
        int cnt = end - c0 < L_TILE ? (int)(end - c0) : L_TILE;
        int vi0 = hk * hd + tid, vi1 = hk * hd + tid + L_THREADS;
        for (int k = 0; k < cnt; k++) {
            if (cell[k] < 0)
                continue;
            const uint8_t *vr = vc + (int64_t)cell[k] * vnb1;
            float v0 = tid < hd ? vload<L>(vr, vi0) : 0.0f;
            float v1 = tid + L_THREADS < hd ? vload<L>(vr, vi1) : 0.0f;
#pragma unroll
            for (int g = 0; g < L_MAX_G; g++) {
                if (g < group) {
                    acc0[g] += p[g][k] * v0;
                    acc1[g] += p[g][k] * v1;
                }
            }
        }
        __syncthreads(); /* p[][] and cell[] are rewritten by the next tile */
    }
#pragma unroll
    for (int g = 0; g < L_MAX_G; g++) {
        if (g >= group)
            break;
        partial_store128(part, t, n_head, hk * group + g, n_splits, split, hd, acc0[g], acc1[g],
                         m[g], l[g]);
    }
}

/* ---- launch ---- */


extern "C" int k_attn_lists_splits(int64_t n_head, int64_t n_tokens, int64_t n_kv)
{
    int64_t maxs = (n_kv + L_CHUNK - 1) / L_CHUNK;
    int64_t work = n_head * n_tokens;
    int64_t want = work > 0 ? (L_TARGET_BLOCKS + work - 1) / work : 1;
    want = want > maxs ? maxs : want;
    want = want > 64 ? 64 : want;
    return (int)(want < 1 ? 1 : want);
}

/* Blocks per split: one per KV head with the grouped kernel, else one per
 * query head. */
static int64_t lists_heads(int64_t n_head, int64_t n_kv_head)
{
    return n_kv_head > 0 && n_head % n_kv_head == 0 && n_head / n_kv_head <= L_MAX_G
               ? n_kv_head
               : n_head;
}

/* The scratch of either kernel (F16 caches of head_dim 64 or 128 take
 * attn-dec.cu's tensor-core kernel, the others lists_partial*): the
 * larger split count, as the cache type is not known here. */
extern "C" size_t k_attn_lists_scratch_bytes(int64_t hd, int64_t n_head, int64_t n_kv_head,
                                             int64_t n_tokens, int64_t n_kv)
{
    int s = k_attn_lists_splits(lists_heads(n_head, n_kv_head), n_tokens, n_kv);
    if (n_kv_head > 0 && n_head % n_kv_head == 0) {
        int sd = k_attn_dec_splits(n_kv_head, n_head / n_kv_head, n_tokens, n_kv);
        s = sd > s ? sd : s;
    }
    return (size_t)n_tokens * (size_t)n_head * (size_t)s * (size_t)(hd + 2) * sizeof(float);
}

extern "C" int k_attn_lists_q8_1_ok(int64_t hd, int64_t n_head, int group, uint32_t kv_type,
                                    const void *kc, const void *vc, int64_t knb1, int64_t vnb1)
{
    if (group == 256 && (256 % hd || (hd * n_head) % 256)) /* whole heads per group */
        return 0;
    return (group == 32 || group == 256) && hd % 32 == 0 &&
           k_attn_dec_ok(hd, kv_type, kc, vc, knb1, vnb1);
}

extern "C" int k_attention_lists(struct kctx *k, struct kview q, uint32_t kv_type,
                                 const void *kc, const void *vc, int64_t knb1, int64_t vnb1,
                                 int64_t n_cells, int64_t n_kv_head, const int32_t *range,
                                 const int32_t *qlist, const int32_t *lists, int64_t n_kv,
                                 int64_t n_lists, float scale, struct kview dst, void *scratch,
                                 void *xq, int xq_group)
{
    int64_t hd = q.ne[0], n_head = q.ne[1], nt = q.ne[2];
    if (hd <= 0 || hd > L_MAX_HD || hd % 4)
        return k_fail(k, "attention_lists", "head_dim must be a multiple of 4 in 4..256");
    if (n_kv_head <= 0 || n_head % n_kv_head)
        return k_fail(k, "attention_lists", "n_kv_head does not divide n_head");
    if (n_head > 65535 || nt > 65535 || nt <= 0 || n_cells <= 0 || n_kv <= 0 || n_lists <= 0)
        return k_fail(k, "attention_lists", "n_head/n_tokens/n_cells/lists out of range");
    /* F16 caches, head_dim 64/128: the tensor-core decode kernel over the
     * lists (a 16-sequence decode of a 7B: 36.6 us per layer here, ~5
     * there; docs/PERF.md, session 9) */
    if (k_attn_dec_ok(hd, kv_type, kc, vc, knb1, vnb1))
        return k_attn_dec_lists(k, q, kc, vc, knb1, vnb1, n_cells, n_kv_head, range, qlist, lists,
                                n_kv, n_lists, scale,
                                k_attn_dec_splits(n_kv_head, n_head / n_kv_head, nt, n_kv),
                                scratch, dst, xq, xq_group);
    if (xq)
        return k_fail(k, "attention_lists", "q8_1 output asked of a cache the tensor-core form "
                                            "does not serve (k_attn_lists_q8_1_ok)");
    int group = (int)(n_head / n_kv_head);
    int64_t heads = lists_heads(n_head, n_kv_head);
    bool grouped = heads == n_kv_head && group > 1;
    int splits = k_attn_lists_splits(heads, nt, n_kv);
    dim3 grid((unsigned)splits, (unsigned)(grouped ? n_kv_head : n_head), (unsigned)nt);
    /* the wide K loads of ldot: every row start 16-byte aligned */
    int esz = kv_type == MINFER_TYPE_F32 ? 4 : 2, epv = 16 / esz;
    int vec = (kv_type == MINFER_TYPE_F32 || kv_type == MINFER_TYPE_F16) &&
              (uintptr_t)kc % 16 == 0 && knb1 % 16 == 0 && hd % epv == 0;
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    float *part = (float *)scratch;
    decltype(&lists_partial<0>) kf; /* the kernel of the cache type */
    const char *site;
    switch (kv_type) {
    case MINFER_TYPE_F32:
        kf = grouped ? lists_partial_g<0> : lists_partial<0>;
        site = "attention_lists.partial<f32>";
        break;
    case MINFER_TYPE_F16:
        kf = grouped ? lists_partial_g<1> : lists_partial<1>;
        site = "attention_lists.partial<f16>";
        break;
    case MINFER_TYPE_Q8_0:
        if (hd % 32)
            return k_fail(k, "attention_lists", "a Q8_0 cache needs head_dim % 32 == 0");
        kf = grouped ? lists_partial_g<2> : lists_partial<2>;
        site = "attention_lists.partial<q8_0>";
        break;
    default:
        return k_fail(k, "attention_lists", "KV cache type is not F32, F16 or Q8_0");
    }
    KLAUNCH(k, site, kf, grid, L_THREADS, 0, q, K, V, knb1, vnb1, n_cells, group, range, qlist,
            lists, n_kv, n_lists, scale, splits, part, k->flags, vec);
    dim3 g2((unsigned)n_head, (unsigned)nt);
    KLAUNCH(k, "attention_lists.combine", lists_combine, g2, 128, 0, (const float *)part, (int)hd,
            (int)n_head, splits, dst);
    return 0;
}
