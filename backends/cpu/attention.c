/*
 * attention.c — causal grouped-query attention over the KV cache, for
 * decode and prefill alike: one task per (query token, head), handed out
 * by an atomic counter; each walks its visible cells in chunks with an
 * online softmax (running max and sum), so nothing larger than one chunk
 * of scores and one head_dim accumulator is ever materialised. F16 and
 * Q8_0 caches are read directly by the kernel set's row helpers.
 */
#include <math.h>
#include <stdatomic.h>
#include <string.h>

#include "cpu-internal.h"

#define CELL_CHUNK 64

struct attn_task {
    const struct cpu_kernels *k;
    const struct minfer_tensor *q, *kc, *vc, *dst;
    const int32_t *pos;
    int kv_len, hd, nh, group;
    size_t head_bytes; /* bytes of one kv head inside a cache row */
    float scale;
    int n_tasks;
    atomic_int next;
};

static float row_dot(const struct attn_task *t, const void *krow, const float *q)
{
    switch (t->kc->type) {
    case MINFER_TYPE_F16:
        return t->k->dot_f16(t->hd, krow, q);
    case MINFER_TYPE_Q8_0:
        return t->k->dot_q8_0(t->hd, krow, q);
    default:
        return t->k->dot_f32(t->hd, krow, q);
    }
}

static void row_axpy(const struct attn_task *t, float a, const void *vrow, float *acc)
{
    switch (t->vc->type) {
    case MINFER_TYPE_F16:
        t->k->axpy_f16(t->hd, a, vrow, acc);
        break;
    case MINFER_TYPE_Q8_0:
        t->k->axpy_q8_0(t->hd, a, vrow, acc);
        break;
    default:
        t->k->axpy_f32(t->hd, a, vrow, acc);
        break;
    }
}

static void attn_one(const struct attn_task *t, int tok, int h)
{
    const float *q = (const float *)((const char *)t->q->data + (size_t)h * t->q->nb[1] +
                                     (size_t)tok * t->q->nb[2]);
    float *out = (float *)((char *)t->dst->data + (size_t)h * t->dst->nb[1] +
                           (size_t)tok * t->dst->nb[2]);
    int g = h / t->group;
    int n_vis = t->pos[tok] + 1 < t->kv_len ? t->pos[tok] + 1 : t->kv_len;
    const char *kbase = (const char *)t->kc->data + (size_t)g * t->head_bytes;
    const char *vbase = (const char *)t->vc->data + (size_t)g * t->head_bytes;
    float acc[1024], s[CELL_CHUNK];
    memset(acc, 0, (size_t)t->hd * sizeof(float));
    float m = -INFINITY, l = 0.0f;
    for (int c0 = 0; c0 < n_vis; c0 += CELL_CHUNK) {
        int n = n_vis - c0 < CELL_CHUNK ? n_vis - c0 : CELL_CHUNK;
        float mx = -INFINITY;
        for (int j = 0; j < n; j++) {
            s[j] = t->scale * row_dot(t, kbase + (size_t)(c0 + j) * t->kc->nb[1], q);
            mx = s[j] > mx ? s[j] : mx;
        }
        if (mx > m) {
            float corr = expf(m - mx); /* 0 on the first chunk */
            for (int i = 0; i < t->hd; i++)
                acc[i] *= corr;
            l *= corr;
            m = mx;
        }
        for (int j = 0; j < n; j++) {
            float p = expf(s[j] - m);
            l += p;
            row_axpy(t, p, vbase + (size_t)(c0 + j) * t->vc->nb[1], acc);
        }
    }
    float inv = 1.0f / l;
    for (int i = 0; i < t->hd; i++)
        out[i] = acc[i] * inv;
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
        attn_one(t, i / t->nh, i % t->nh);
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
    t.n_tasks = (int)(nt * q->ne[1]);
    atomic_init(&t.next, 0);
    int nth = t.n_tasks > 1 ? be->n_threads : 1;
    cpu_pool_run(be->pool, nth, attn_worker, &t);
    return MINFER_OK;
}
