/*
 * attention.c — causal grouped-query attention over the KV cache, for
 * decode and prefill alike: one task per (query token, kv head, up to 8
 * of its query heads), handed out by an atomic counter; each walks its
 * visible cells in chunks with an online softmax (running max and sum),
 * so nothing larger than one chunk of scores and one head_dim accumulator
 * per head is ever materialised. F16 and Q8_0 cache rows are read
 * directly, converted once per row for all the heads that share them.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu-internal.h"

#define CELL_CHUNK 64
#define HEADS_PER_TASK 8 /* query heads of one kv head handled together */

struct attn_task {
    const struct cpu_kernels *k;
    const struct minfer_tensor *q, *kc, *vc, *dst;
    const int32_t *pos;
    int kv_len, hd, nh, group, n_kv, subs; /* subs: tasks per kv head */
    size_t head_bytes; /* bytes of one kv head inside a cache row */
    float scale;
    int n_tasks;
    atomic_int next;
};

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

/* Query token tok, heads h0 .. h0 + nh - 1 (all reading kv head g): each
 * cache row is converted once and used by every head of the group. */
static void attn_heads(const struct attn_task *t, int tok, int h0, int nh)
{
    int g = h0 / t->group;
    int n_vis = t->pos[tok] + 1 < t->kv_len ? t->pos[tok] + 1 : t->kv_len;
    const char *kbase = (const char *)t->kc->data + (size_t)g * t->head_bytes;
    const char *vbase = (const char *)t->vc->data + (size_t)g * t->head_bytes;
    const float *q[HEADS_PER_TASK];
    float acc[HEADS_PER_TASK][1024], s[HEADS_PER_TASK][CELL_CHUNK];
    float m[HEADS_PER_TASK], l[HEADS_PER_TASK], kbuf[1024], vbuf[1024];
    for (int i = 0; i < nh; i++) {
        q[i] = (const float *)((const char *)t->q->data + (size_t)(h0 + i) * t->q->nb[1] +
                               (size_t)tok * t->q->nb[2]);
        memset(acc[i], 0, (size_t)t->hd * sizeof(float));
        m[i] = -INFINITY;
        l[i] = 0.0f;
    }
    for (int c0 = 0; c0 < n_vis; c0 += CELL_CHUNK) {
        int n = n_vis - c0 < CELL_CHUNK ? n_vis - c0 : CELL_CHUNK;
        for (int j = 0; j < n; j++) {
            const float *kr = kv_f32(t, t->kc->type, kbase + (size_t)(c0 + j) * t->kc->nb[1], kbuf);
            for (int i = 0; i < nh; i++)
                s[i][j] = t->scale * t->k->dot_f32(t->hd, kr, q[i]);
        }
        for (int i = 0; i < nh; i++) {
            float mx = -INFINITY;
            for (int j = 0; j < n; j++)
                mx = s[i][j] > mx ? s[i][j] : mx;
            if (mx > m[i]) {
                float corr = expf(m[i] - mx); /* 0 on the first chunk */
                for (int e = 0; e < t->hd; e++)
                    acc[i][e] *= corr;
                l[i] *= corr;
                m[i] = mx;
            }
            l[i] += t->k->exp_sum(n, s[i], m[i]);
        }
        for (int j = 0; j < n; j++) {
            const float *vr = kv_f32(t, t->vc->type, vbase + (size_t)(c0 + j) * t->vc->nb[1], vbuf);
            for (int i = 0; i < nh; i++)
                t->k->axpy_f32(t->hd, s[i][j], vr, acc[i]);
        }
    }
    for (int i = 0; i < nh; i++) {
        float *out = (float *)((char *)t->dst->data + (size_t)(h0 + i) * t->dst->nb[1] +
                               (size_t)tok * t->dst->nb[2]);
        float inv = 1.0f / l[i];
        for (int e = 0; e < t->hd; e++)
            out[e] = acc[i][e] * inv;
    }
}

static void attn_worker(void *arg, int ith, int nth)
{
    struct attn_task *t = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        int i = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (i >= t->n_tasks)
            break;
        int per_tok = t->n_kv * t->subs;
        int tok = i / per_tok, g = i % per_tok / t->subs, sub = i % t->subs;
        int h0 = g * t->group + sub * HEADS_PER_TASK;
        int nh = t->group - sub * HEADS_PER_TASK;
        attn_heads(t, tok, h0, nh < HEADS_PER_TASK ? nh : HEADS_PER_TASK);
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
    memset(&t, 0, sizeof t);
    t.k = be->k;
    t.q = q;
    t.kc = kc;
    t.vc = node->src[2];
    t.dst = node->dst;
    t.pos = pos;
    t.kv_len = kv_len;
    t.hd = (int)q->ne[0];
    t.nh = (int)q->ne[1];
    t.group = (int)(q->ne[1] / node->iparams[0]);
    t.head_bytes = minfer_row_size(kc->type, q->ne[0]);
    t.scale = node->fparams[0];
    t.n_kv = node->iparams[0];
    t.subs = (t.group + HEADS_PER_TASK - 1) / HEADS_PER_TASK;
    t.n_tasks = (int)(nt * t.n_kv * t.subs);
    atomic_init(&t.next, 0);
    int nth = t.n_tasks > 1 ? be->n_threads : 1;
    cpu_pool_run(be->pool, nth, attn_worker, &t);
    return MINFER_OK;
}
