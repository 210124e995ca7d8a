/*
 * attention.c — causal grouped-query attention over the KV cache, for
 * decode and prefill alike. One task is (up to TOKENS_PER_TASK query
 * tokens, one kv head, up to HEADS_PER_TASK of its query heads), handed
 * out by an atomic counter. A task walks its visible cells in chunks of
 * CPU_ATTN_CHUNK: it converts the chunk's K rows once, transposed, and its
 * V rows once (F16 and Q8_0 caches are read directly; an F32 cache's V
 * rows are used in place), then for every query of the task scores the
 * chunk, updates its online softmax (running max and sum) and adds the
 * weighted V rows to its accumulator. Nothing larger than one chunk of
 * scores and one head_dim accumulator per query is ever materialised, and
 * the conversions are shared by all the queries of the task (up to 32 in
 * prefill, the heads of one group in decode). With a sliding window
 * (iparams[1]) a task starts at the lowest cell any of its queries still
 * sees; cells below a query's window are neither scored nor summed.
 *
 * Decode has only (kv heads x head groups) such tasks, too few to keep
 * many cores busy over a long cache; when the queries fit one token block,
 * the cells are also split into runs of SPLIT_CELLS, each task writes its
 * run's (max, sum, accumulator) per query, and the caller combines the
 * runs. The split depends on the cache length only, never on the thread
 * count, so the result's bits do not depend on -t.
 *
 * ATTENTION_LISTS (many sequences) runs the same blocks over cells named
 * by a list: queries are grouped by list, a token block holds queries of
 * one list, and a list with at most TOKENS_PER_TASK queries in the node is
 * split into runs exactly as ATTENTION splits a decode. Each query's
 * arithmetic (chunks, online softmax, runs, combine) is then the one
 * ATTENTION does for the same sequence and the same tokens per pass, so a
 * sequence's result inside a batch is bit-identical to its result alone.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"

#define HEADS_PER_TASK 8  /* query heads of one kv head handled together */
#define TOKENS_PER_TASK 4 /* prefill query tokens sharing each converted chunk */
#define QUERIES_PER_TASK (HEADS_PER_TASK * TOKENS_PER_TASK)
#define SPLIT_CELLS 512 /* decode: cells per task over a long cache */

/* ATTENTION_LISTS: a token block (queries of one list) and its tasks. */
struct list_block {
    int first, ntok;   /* queries order[first .. first + ntok) */
    int splits;        /* cell runs, 1 = unsplit */
    int task0;         /* its first task */
    size_t part0;      /* splits > 1: its first partial float */
    const int32_t *cells;
};

struct attn_task {
    const struct cpu_kernels *k;
    const struct minfer_tensor *q, *kc, *vc, *dst;
    const int32_t *pos;
    /* ATTENTION_LISTS (else NULL / 0) */
    const int32_t *range;   /* [nt][2]: first and end entry of each query */
    const int32_t *order;   /* [nt] queries grouped by list */
    struct list_block *blocks;
    int n_blocks;
    int nt, kv_len, hd, group, n_kv, subs; /* subs: tasks per kv head and token block */
    int window;        /* sliding window in positions, 0 = none */
    int tok_blocks;
    int splits;        /* cell runs per (token block, kv head, head group) */
    float *partial;    /* splits > 1: per (task, query) max, sum, hd accumulator */
    int task_queries;  /* splits > 1: partial slots per task (most queries a task has) */
    size_t head_bytes; /* bytes of one kv head inside a cache row */
    float scale;
    int n_tasks;
    float *scratch; /* per participant: scratch_floats floats */
    size_t scratch_floats;
    atomic_int next;
};

/* The fields ATTENTION and ATTENTION_LISTS share, from the node (src 0,
 * 1, 2: q, K cache, V cache; iparams[0]: KV heads; fparams[0]: scale);
 * the rest zero. */
static void task_init(struct attn_task *t, const struct minfer_backend *be,
                      const struct minfer_node *node, int64_t nt)
{
    const struct minfer_tensor *q = node->src[0], *kc = node->src[1];
    memset(t, 0, sizeof *t);
    t->k = be->k;
    t->q = q;
    t->kc = kc;
    t->vc = node->src[2];
    t->dst = node->dst;
    t->nt = (int)nt;
    t->hd = (int)q->ne[0];
    t->n_kv = node->iparams[0];
    t->group = (int)(q->ne[1] / t->n_kv);
    t->head_bytes = minfer_row_size(kc->type, q->ne[0]);
    t->scale = node->fparams[0];
    t->subs = (t->group + HEADS_PER_TASK - 1) / HEADS_PER_TASK;
}

/* Floats of one participant's scratch: the transposed K chunk, the
 * converted V chunk, one chunk of scores and one accumulator per query. */
static size_t scratch_floats(int hd)
{
    size_t f = (size_t)hd * CPU_ATTN_CHUNK * 2 + (size_t)QUERIES_PER_TASK * CPU_ATTN_CHUNK +
               (size_t)QUERIES_PER_TASK * hd + (size_t)hd;
    return (f + 15) & ~(size_t)15; /* keep each participant's block 64-byte aligned */
}

/* A cache row slice as f32: the row itself for an F32 cache, else
 * converted into buf. */
static const float *kv_f32(const struct attn_task *t, uint32_t type, const void *src, float *buf)
{
    if (type == MINFER_TYPE_F16) {
        t->k->cvt_f16(t->hd, src, buf);
        return buf;
    }
    if (type == MINFER_TYPE_Q8_0) {
        t->k->cvt_q8_0(t->hd, src, buf);
        return buf;
    }
    return src;
}

/* Floats of one (task, query) partial result: max, sum, accumulator. */
static size_t partial_floats(int hd)
{
    return (size_t)hd + 2;
}

/* Query tokens toks[0 .. ntok), heads h0 .. h0 + nh - 1 (all
 * reading kv head h0 / group), over the cells [cb, ce) of their visible
 * ones; the result goes to dst, or with part to part[query]. */
static void attn_block(const struct attn_task *t, float *scratch, const int *toks, int ntok,
                       int h0, int nh, int cb, int ce, float *part, const int32_t *cells)
{
    const int hd = t->hd, CC = CPU_ATTN_CHUNK;
    int g = h0 / t->group;
    const char *kbase = (const char *)t->kc->data + (size_t)g * t->head_bytes;
    const char *vbase = (const char *)t->vc->data + (size_t)g * t->head_bytes;
    float *kt = scratch;                    /* [hd][CC] */
    float *vbuf = kt + (size_t)hd * CC;      /* [CC][hd] */
    float *s = vbuf + (size_t)hd * CC;       /* [queries][CC] */
    float *acc = s + (size_t)QUERIES_PER_TASK * CC; /* [queries][hd] */
    float *row = acc + (size_t)QUERIES_PER_TASK * hd; /* [hd] */
    const float *q[QUERIES_PER_TASK];
    float m[QUERIES_PER_TASK], l[QUERIES_PER_TASK];
    /* token a sees cells [lo[a], n_vis[a]) of this run */
    int n_vis[TOKENS_PER_TASK], lo[TOKENS_PER_TASK], max_vis = 0, min_lo = ce;
    for (int a = 0; a < ntok; a++) {
        int tok = toks[a];
        if (t->range)
            n_vis[a] = t->range[2 * tok + 1];
        else
            n_vis[a] = t->pos[tok] + 1 < t->kv_len ? t->pos[tok] + 1 : t->kv_len;
        n_vis[a] = n_vis[a] < ce ? n_vis[a] : ce;
        max_vis = n_vis[a] > max_vis ? n_vis[a] : max_vis;
        /* a window's first entry (lists: from the host; cells: from the
         * position), as the lists mirror ATTENTION's arithmetic */
        int first = t->range ? t->range[2 * tok] : t->window ? t->pos[tok] - t->window + 1 : 0;
        lo[a] = first > cb ? first : cb;
        min_lo = lo[a] < min_lo ? lo[a] : min_lo;
        for (int i = 0; i < nh; i++) {
            int qi = a * nh + i;
            q[qi] = (const float *)((const char *)t->q->data + (size_t)(h0 + i) * t->q->nb[1] +
                                    (size_t)tok * t->q->nb[2]);
            memset(acc + (size_t)qi * hd, 0, (size_t)hd * sizeof(float));
            m[qi] = -INFINITY;
            l[qi] = 0.0f;
        }
    }
    bool v_in_place = t->vc->type == MINFER_TYPE_F32 && !cells;
    for (int c0 = min_lo; c0 < max_vis; c0 += CC) {
        int n = max_vis - c0 < CC ? max_vis - c0 : CC;
        /* K rows of the chunk, transposed (cells past n score zeros) */
        for (int j = 0; j < n; j++) {
            size_t cell = cells ? (size_t)cells[c0 + j] : (size_t)(c0 + j);
            const float *kr = kv_f32(t, t->kc->type, kbase + cell * t->kc->nb[1], row);
            for (int e = 0; e < hd; e++)
                kt[(size_t)e * CC + j] = kr[e];
        }
        if (n < CC)
            for (int e = 0; e < hd; e++)
                memset(kt + (size_t)e * CC + n, 0, (size_t)(CC - n) * sizeof(float));
        const void *v = vbase + (size_t)c0 * t->vc->nb[1];
        size_t v_stride = t->vc->nb[1];
        if (!v_in_place) {
            for (int j = 0; j < n; j++) {
                size_t cell = cells ? (size_t)cells[c0 + j] : (size_t)(c0 + j);
                const char *vr = vbase + cell * t->vc->nb[1];
                if (t->vc->type == MINFER_TYPE_F32) /* a gathered F32 row: copied as is */
                    memcpy(vbuf + (size_t)j * hd, vr, (size_t)hd * sizeof(float));
                else
                    kv_f32(t, t->vc->type, vr, vbuf + (size_t)j * hd);
            }
            v = vbuf;
            v_stride = (size_t)hd * sizeof(float);
        }
        for (int a = 0; a < ntok; a++) {
            int na = n_vis[a] - c0 < n ? n_vis[a] - c0 : n; /* this token's cells */
            int ja = lo[a] > c0 ? lo[a] - c0 : 0; /* below the window: not read */
            if (na <= ja)
                continue;
            for (int i = 0; i < nh; i++) {
                int qi = a * nh + i;
                float *sq = s + (size_t)qi * CC, *aq = acc + (size_t)qi * hd;
                t->k->attn_scores(hd, t->scale, q[qi], kt, sq);
                float mx = -INFINITY;
                for (int j = ja; j < na; j++)
                    mx = sq[j] > mx ? sq[j] : mx;
                if (mx > m[qi]) {
                    float corr = expf(m[qi] - mx); /* 0 on the first chunk */
                    if (m[qi] > -INFINITY)
                        for (int e = 0; e < hd; e++)
                            aq[e] *= corr;
                    l[qi] *= corr;
                    m[qi] = mx;
                }
                l[qi] += t->k->exp_sum(na - ja, sq + ja, m[qi]);
                t->k->attn_pv(hd, na - ja, sq + ja, (const char *)v + (size_t)ja * v_stride,
                              v_stride, aq);
            }
        }
    }
    for (int a = 0; a < ntok; a++)
        for (int i = 0; i < nh; i++) {
            int qi = a * nh + i;
            if (part) { /* a run of a split: the caller combines */
                float *pq = part + (size_t)qi * partial_floats(hd);
                pq[0] = m[qi];
                pq[1] = l[qi];
                memcpy(pq + 2, acc + (size_t)qi * hd, (size_t)hd * sizeof(float));
                continue;
            }
            float *out = (float *)((char *)t->dst->data + (size_t)(h0 + i) * t->dst->nb[1] +
                                   (size_t)toks[a] * t->dst->nb[2]);
            float inv = l[qi] > 0.0f ? 1.0f / l[qi] : 0.0f; /* 0: no cell in the window */
            for (int e = 0; e < hd; e++)
                out[e] = acc[(size_t)qi * hd + e] * inv;
        }
}

/* Task i: its token block, heads and cell run. */
struct task_at {
    int tok0, ntok, h0, nh, split;
};

static struct task_at task_at(const struct attn_task *t, int i)
{
    struct task_at a;
    int per_block = t->n_kv * t->subs * t->splits;
    /* the last token blocks see the most cells: hand them out first */
    int tb = t->tok_blocks - 1 - i / per_block;
    int j = i % per_block / t->splits;
    int g = j / t->subs, sub = j % t->subs;
    a.split = i % t->splits;
    a.tok0 = tb * TOKENS_PER_TASK;
    a.ntok = t->nt - a.tok0 < TOKENS_PER_TASK ? t->nt - a.tok0 : TOKENS_PER_TASK;
    a.h0 = g * t->group + sub * HEADS_PER_TASK;
    a.nh = t->group - sub * HEADS_PER_TASK < HEADS_PER_TASK ? t->group - sub * HEADS_PER_TASK
                                                           : HEADS_PER_TASK;
    return a;
}

/* ATTENTION_LISTS: the block of task i (the last whose task0 <= i). */
static const struct list_block *block_of(const struct attn_task *t, int i)
{
    int lo = 0, hi = t->n_blocks - 1;
    while (lo < hi) {
        int mid = lo + (hi - lo + 1) / 2;
        if (t->blocks[mid].task0 <= i)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &t->blocks[lo];
}

/* Task i of a block: its kv head, heads and run (as task_at orders them). */
static void list_task_at(const struct attn_task *t, const struct list_block *b, int i, int *h0,
                         int *nh, int *split)
{
    int j = (i - b->task0) / b->splits;
    int g = j / t->subs, sub = j % t->subs;
    *split = (i - b->task0) % b->splits;
    *h0 = g * t->group + sub * HEADS_PER_TASK;
    *nh = t->group - sub * HEADS_PER_TASK < HEADS_PER_TASK ? t->group - sub * HEADS_PER_TASK
                                                          : HEADS_PER_TASK;
}

/* Partial floats of one task of block b: each of its queries' max, sum and
 * accumulator. */
static size_t block_task_floats(const struct attn_task *t, const struct list_block *b)
{
    int heads = t->group < HEADS_PER_TASK ? t->group : HEADS_PER_TASK;
    return (size_t)b->ntok * heads * partial_floats(t->hd);
}

static void list_task(const struct attn_task *t, float *scratch, int i)
{
    const struct list_block *b = block_of(t, i);
    int h0, nh, split;
    list_task_at(t, b, i, &h0, &nh, &split);
    const int *toks = t->order + b->first;
    if (b->splits == 1) {
        attn_block(t, scratch, toks, b->ntok, h0, nh, 0, INT32_MAX, NULL, b->cells);
        return;
    }
    float *part = t->partial + b->part0 + (size_t)(i - b->task0) * block_task_floats(t, b);
    attn_block(t, scratch, toks, b->ntok, h0, nh, split * SPLIT_CELLS,
               (split + 1) * SPLIT_CELLS, part, b->cells);
}

static void attn_worker(void *arg, int ith, int nth)
{
    struct attn_task *t = arg;
    (void)nth;
    float *scratch = t->scratch + (size_t)ith * t->scratch_floats;
    for (;;) {
        int i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (i >= t->n_tasks)
            break;
        if (t->blocks) {
            list_task(t, scratch, i);
            continue;
        }
        struct task_at a = task_at(t, i);
        int toks[TOKENS_PER_TASK];
        for (int k = 0; k < a.ntok; k++)
            toks[k] = a.tok0 + k;
        if (t->splits == 1) {
            attn_block(t, scratch, toks, a.ntok, a.h0, a.nh, 0, t->kv_len, NULL, NULL);
            continue;
        }
        float *part = t->partial + (size_t)i * t->task_queries * partial_floats(t->hd);
        attn_block(t, scratch, toks, a.ntok, a.h0, a.nh, a.split * SPLIT_CELLS,
                   (a.split + 1) * SPLIT_CELLS, part, NULL);
    }
}

/* One query's output from its runs' partial results: p0 its first run's,
 * step floats to the next run's. */
static void combine_query(int hd, const float *p0, size_t step, int splits, float *out)
{
    float mx = -INFINITY, l = 0.0f;
    for (int s = 0; s < splits; s++)
        mx = p0[s * step] > mx ? p0[s * step] : mx;
    memset(out, 0, (size_t)hd * sizeof(float));
    for (int s = 0; s < splits; s++) {
        const float *ps = p0 + s * step;
        if (ps[1] == 0.0f) /* no visible cell in this run */
            continue;
        float w = expf(ps[0] - mx);
        l += ps[1] * w;
        for (int e = 0; e < hd; e++)
            out[e] += ps[2 + e] * w;
    }
    float inv = l > 0.0f ? 1.0f / l : 0.0f; /* 0: no cell in the window */
    for (int e = 0; e < hd; e++)
        out[e] *= inv;
}

static float *out_row(const struct attn_task *t, int head, int tok)
{
    return (float *)((char *)t->dst->data + (size_t)head * t->dst->nb[1] +
                     (size_t)tok * t->dst->nb[2]);
}

/* splits > 1: each query's output from its runs' partial results */
static void combine_splits(const struct attn_task *t)
{
    const int hd = t->hd;
    const size_t pf = partial_floats(hd);
    for (int i = 0; i < t->n_tasks; i += t->splits) {
        struct task_at a = task_at(t, i);
        for (int qi = 0; qi < a.ntok * a.nh; qi++) {
            const float *p0 = t->partial + ((size_t)i * t->task_queries + qi) * pf;
            size_t step = (size_t)t->task_queries * pf; /* the next run of this query */
            combine_query(hd, p0, step, t->splits,
                          out_row(t, a.h0 + qi % a.nh, a.tok0 + qi / a.nh));
        }
    }
}

/* ATTENTION_LISTS: combine_splits for every split block */
static void combine_list_splits(const struct attn_task *t)
{
    const size_t pf = partial_floats(t->hd);
    for (int bi = 0; bi < t->n_blocks; bi++) {
        const struct list_block *b = &t->blocks[bi];
        if (b->splits == 1)
            continue;
        size_t step = block_task_floats(t, b);
        int n_b = t->n_kv * t->subs * b->splits;
        for (int i = b->task0; i < b->task0 + n_b; i += b->splits) {
            int h0, nh, split;
            list_task_at(t, b, i, &h0, &nh, &split);
            const float *base = t->partial + b->part0 + (size_t)(i - b->task0) * step;
            for (int qi = 0; qi < b->ntok * nh; qi++)
                combine_query(t->hd, base + (size_t)qi * pf, step, b->splits,
                              out_row(t, h0 + qi % nh, t->order[b->first + qi / nh]));
        }
    }
}

minfer_status cpu_op_attention(struct minfer_backend *be, const struct minfer_node *node)
{
    const struct minfer_tensor *q = node->src[0], *kc = node->src[1];
    int32_t kv_len = *(const int32_t *)node->src[3]->data;
    const int32_t *pos = node->src[4]->data;
    int64_t n_cells = kc->ne[1], nt = q->ne[2];
    if (kv_len < 1 || kv_len > n_cells)
        return cpu_fail(be, node, MINFER_ERR_RANGE,
                        "ATTENTION kv_len %d outside 1..n_cells %lld", kv_len,
                        (long long)n_cells);
    for (int64_t i = 0; i < nt; i++)
        if (pos[i] < 0)
            return cpu_fail(be, node, MINFER_ERR_RANGE,
                            "ATTENTION query %lld has position %d; positions are >= 0",
                            (long long)i, pos[i]);
    if (nt * q->ne[1] > INT32_MAX)
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "too many (token, head) pairs");

    struct attn_task t;
    task_init(&t, be, node, nt);
    t.pos = pos;
    t.kv_len = kv_len;
    t.window = node->iparams[1];
    t.tok_blocks = (int)((nt + TOKENS_PER_TASK - 1) / TOKENS_PER_TASK);
    t.splits = t.tok_blocks == 1 ? (kv_len - 1) / SPLIT_CELLS + 1 : 1;
    int64_t n_tasks = (int64_t)t.tok_blocks * t.n_kv * t.subs * t.splits;
    if (n_tasks > INT32_MAX)
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED,
                        "too many attention tasks (%lld) for %d heads over %d cells",
                        (long long)n_tasks, t.n_kv * t.group, kv_len);
    t.n_tasks = (int)n_tasks;
    int nth = t.n_tasks > 1 ? be->n_threads : 1;
    t.scratch_floats = scratch_floats(t.hd);
    size_t per_threads = (size_t)nth * t.scratch_floats;
    /* splits happen with one token block: at most nt tokens x the heads of a task */
    t.task_queries = (int)nt * (t.group < HEADS_PER_TASK ? t.group : HEADS_PER_TASK);
    if (t.task_queries > QUERIES_PER_TASK)
        t.task_queries = QUERIES_PER_TASK;
    size_t parts = t.splits > 1 ? (size_t)t.n_tasks * t.task_queries * partial_floats(t.hd) : 0;
    size_t bytes = (per_threads + parts) * sizeof(float);
    t.scratch = cpu_scratch(be, bytes);
    if (!t.scratch)
        return cpu_fail(be, node, MINFER_ERR_NO_MEMORY,
                        "out of memory for %zu bytes of attention scratch", bytes);
    t.partial = t.scratch + per_threads;
    atomic_init(&t.next, 0);
    cpu_pool_run(be->pool, nth, attn_worker, &t);
    if (t.splits > 1)
        combine_splits(&t);
    return MINFER_OK;
}

/* ---- ATTENTION_LISTS ---- */

static int list_cmp_order(const int32_t *qlist, int a, int b)
{
    return qlist[a] != qlist[b] ? (qlist[a] < qlist[b] ? -1 : 1) : (a < b ? -1 : a > b);
}

minfer_status cpu_op_attention_lists(struct minfer_backend *be, const struct minfer_node *node)
{
    const struct minfer_tensor *q = node->src[0], *kc = node->src[1], *ls = node->src[5];
    const int32_t *range = node->src[3]->data, *qlist = node->src[4]->data, *lists = ls->data;
    int64_t n_cells = kc->ne[1], nt = q->ne[2], n_kv = ls->ne[0], n_lists = ls->ne[1];
    if (nt * q->ne[1] > INT32_MAX || n_kv * n_lists > INT32_MAX)
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "too many queries or list entries");
    for (int64_t i = 0; i < nt; i++) {
        int32_t first = range[2 * i], end = range[2 * i + 1];
        if (qlist[i] < 0 || qlist[i] >= n_lists || first < 0 || end <= first || end > n_kv)
            return cpu_fail(be, node, MINFER_ERR_RANGE,
                            "ATTENTION_LISTS query %lld reads entries [%d, %d) of list %d; lists "
                            "are 0..%lld of %lld entries (a range is never empty)",
                            (long long)i, first, end, qlist[i], (long long)n_lists - 1,
                            (long long)n_kv);
        const int32_t *l = lists + (size_t)qlist[i] * (size_t)n_kv;
        for (int32_t j = first; j < end; j++)
            if (l[j] < 0 || l[j] >= n_cells)
                return cpu_fail(be, node, MINFER_ERR_RANGE,
                                "ATTENTION_LISTS list %d entry %d is cell %d, outside the "
                                "cache's %lld cells",
                                qlist[i], j, l[j], (long long)n_cells);
    }

    struct attn_task t;
    task_init(&t, be, node, nt);
    t.range = range;
    t.splits = 1;

    /* host bookkeeping: the query order, then the blocks */
    size_t order_bytes = (size_t)nt * sizeof(int32_t);
    size_t block_bytes = (size_t)nt * sizeof(struct list_block);
    int32_t *order = malloc(order_bytes);
    struct list_block *blocks = malloc(block_bytes);
    if (!order || !blocks) {
        free(order);
        free(blocks);
        return cpu_fail(be, node, MINFER_ERR_NO_MEMORY, "out of memory for %lld queries",
                        (long long)nt);
    }
    /* stable insertion by list: batches are small or already grouped */
    for (int i = 0; i < (int)nt; i++) {
        int j = i;
        while (j > 0 && list_cmp_order(qlist, order[j - 1], i) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    int n_blocks = 0;
    int64_t n_tasks = 0;
    size_t parts = 0;
    int heads = t.group < HEADS_PER_TASK ? t.group : HEADS_PER_TASK;
    for (int i = 0; i < (int)nt;) {
        int e = i;
        while (e < (int)nt && qlist[order[e]] == qlist[order[i]])
            e++;
        bool split = e - i <= TOKENS_PER_TASK; /* as ATTENTION splits a decode */
        for (int b0 = i; b0 < e; b0 += TOKENS_PER_TASK) {
            struct list_block *b = &blocks[n_blocks++];
            b->first = b0;
            b->ntok = e - b0 < TOKENS_PER_TASK ? e - b0 : TOKENS_PER_TASK;
            b->cells = lists + (size_t)qlist[order[b0]] * (size_t)n_kv;
            int max_vis = 0;
            for (int k = 0; k < b->ntok; k++)
                max_vis = range[2 * order[b0 + k] + 1] > max_vis ? range[2 * order[b0 + k] + 1]
                                                                  : max_vis;
            b->splits = split ? (max_vis - 1) / SPLIT_CELLS + 1 : 1;
            b->task0 = (int)(n_tasks < INT32_MAX ? n_tasks : INT32_MAX);
            b->part0 = parts;
            n_tasks += (int64_t)t.n_kv * t.subs * b->splits;
            if (b->splits > 1)
                parts += (size_t)t.n_kv * t.subs * b->splits * b->ntok * heads *
                         partial_floats(t.hd);
        }
        i = e;
    }
    if (n_tasks > INT32_MAX) {
        free(order);
        free(blocks);
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "too many attention tasks (%lld)",
                        (long long)n_tasks);
    }
    t.order = order;
    t.blocks = blocks;
    t.n_blocks = n_blocks;
    t.n_tasks = (int)n_tasks;
    int nth = t.n_tasks > 1 ? be->n_threads : 1;
    t.scratch_floats = scratch_floats(t.hd);
    size_t per_threads = (size_t)nth * t.scratch_floats;
    size_t bytes = (per_threads + parts) * sizeof(float);
    t.scratch = cpu_scratch(be, bytes);
    if (!t.scratch) {
        free(order);
        free(blocks);
        return cpu_fail(be, node, MINFER_ERR_NO_MEMORY,
                        "out of memory for %zu bytes of attention scratch", bytes);
    }
    t.partial = t.scratch + per_threads;
    atomic_init(&t.next, 0);
    cpu_pool_run(be->pool, nth, attn_worker, &t);
    combine_list_splits(&t);
    free(order);
    free(blocks);
    return MINFER_OK;
}
