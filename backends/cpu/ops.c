/*
 * ops.c — validation of every IR node the CPU plugin runs (ir-check.h's
 * contract, then this plugin's kernel limits; shared by supports_op and
 * execute_node, so the two never disagree), the dispatch
 * of execute_node, and the row-wise ops: GET_ROWS, RMS_NORM(_MUL), ADD,
 * MUL, ROPE(_DIV), SWIGLU, GEGLU, KV_STORE, COPY, SCALE. MUL_MAT /
 * FFN_GATE_UP live in matmul.c, ATTENTION and ATTENTION_LISTS in
 * attention.c, the mixture-of-experts ops in moe.c.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"
#include "minfer/ir-check.h"
#include "minfer/quant-ref.h"

/* ---- validation ---- */

/* What ir.h documents is checked by minfer/ir-check.h; below are only the
 * limits of this plugin's kernels. */

#define UNSUP(...) return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, __VA_ARGS__)

static const char *tname(uint32_t type)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    return t ? t->name : "unknown";
}

/* Types the matmul / get_rows kernels read. */
static bool weight_type_ok(uint32_t type)
{
    switch (type) {
    case MINFER_TYPE_F32: case MINFER_TYPE_F16: case MINFER_TYPE_BF16:
    case MINFER_TYPE_Q4_0: case MINFER_TYPE_Q4_1: case MINFER_TYPE_Q5_0:
    case MINFER_TYPE_Q5_1: case MINFER_TYPE_Q8_0: case MINFER_TYPE_Q4_K:
    case MINFER_TYPE_Q5_K: case MINFER_TYPE_Q6_K:
        return true;
    default:
        return false;
    }
}

static minfer_status check_capability(struct minfer_backend *be, const struct minfer_node *node)
{
    const struct minfer_tensor *s0 = node->src[0], *s1 = node->src[1];
    switch (node->op) {
    case MINFER_OP_GET_ROWS:
        if (!weight_type_ok(s0->type))
            UNSUP("GET_ROWS table has type %s, not readable here", tname(s0->type));
        return MINFER_OK;
    case MINFER_OP_MUL_MAT:
    case MINFER_OP_MUL_MAT_ADD:
    case MINFER_OP_FFN_GATE_UP:
        if (!weight_type_ok(s0->type))
            UNSUP("weight has type %s, not readable here", tname(s0->type));
        if (node->op == MINFER_OP_FFN_GATE_UP && s1->nb[1] != s0->nb[1])
            UNSUP("FFN_GATE_UP gate and up rows are %zu and %zu bytes apart; this plugin "
                  "walks both with one stride", s0->nb[1], s1->nb[1]);
        return MINFER_OK;
    case MINFER_OP_ROPE:
    case MINFER_OP_ROPE_DIV:
        if (node->iparams[0] > 1024) /* rope_tokens' angle tables */
            UNSUP("n_rot %d exceeds this plugin's 1024", node->iparams[0]);
        return MINFER_OK;
    case MINFER_OP_ATTENTION:
    case MINFER_OP_ATTENTION_LISTS:
        if (s0->ne[0] > 1024)
            UNSUP("head_dim %lld exceeds this plugin's 1024", (long long)s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_MUL_MAT_ID:
        if (!weight_type_ok(s0->type))
            UNSUP("expert weights have type %s, not readable here", tname(s0->type));
        return MINFER_OK;
    default: /* every other op of ir.h runs as the contract allows */
        return MINFER_OK;
    }
}

minfer_status cpu_check_node(struct minfer_backend *be, const struct minfer_node *node)
{
    char why[400];
    minfer_status st = minfer_ir_check_node(node, MINFER_IR_CHECK_DATA, why, sizeof why);
    if (st != MINFER_OK)
        return cpu_fail(be, node, st, "%s", why);
    return check_capability(be, node);
}

/* ---- row-parallel helper ---- */

typedef void (*rows_fn)(const struct minfer_node *node, int64_t r0, int64_t r1);

struct rows_task {
    const struct minfer_node *node;
    rows_fn fn;
    int64_t n, chunk;
    atomic_llong next;
};

static void rows_worker(void *arg, int ith, int nth)
{
    struct rows_task *t = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        int64_t r0 = atomic_fetch_add_explicit(&t->next, t->chunk, memory_order_relaxed);
        if (r0 >= t->n)
            break;
        t->fn(t->node, r0, r0 + t->chunk < t->n ? r0 + t->chunk : t->n);
    }
}

/* Runs fn over rows [0, n), on the pool when the work is worth a dispatch. */
static void run_rows(struct minfer_backend *be, const struct minfer_node *node, rows_fn fn,
                     int64_t n, int64_t elems_per_row)
{
    struct rows_task t;
    t.node = node;
    t.fn = fn;
    t.n = n;
    int nth = be->n_threads;
    if (n * elems_per_row < 32768 || n < 2)
        nth = 1;
    if (nth > n)
        nth = (int)n;
    t.chunk = (n + 4 * nth - 1) / (4 * nth);
    atomic_init(&t.next, 0);
    cpu_pool_run(be->pool, nth, rows_worker, &t);
}

/* ---- element-wise and norms ---- */

static float rms_scale(const float *x, int64_t n, float eps)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    return (float)(1.0 / sqrt(ss / (double)n + (double)eps));
}

static void rms_norm_rows(const struct minfer_node *node, int64_t r0, int64_t r1)
{
    const struct minfer_tensor *s0 = node->src[0], *d = node->dst;
    const float *w = node->op == MINFER_OP_RMS_NORM_MUL ? node->src[1]->data : NULL;
    int64_t n = s0->ne[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)cpu_row(s0, r);
        float *y = (float *)cpu_row(d, r);
        float sc = rms_scale(x, n, node->fparams[0]);
        if (w)
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] * sc * w[i];
        else
            for (int64_t i = 0; i < n; i++)
                y[i] = x[i] * sc;
    }
}

static void binary_rows(const struct minfer_node *node, int64_t r0, int64_t r1)
{
    const struct minfer_tensor *s0 = node->src[0], *s1 = node->src[1], *d = node->dst;
    int64_t n = s0->ne[0];
    bool bcast = cpu_nrows(s1) == 1;
    for (int64_t r = r0; r < r1; r++) {
        const float *a = (const float *)cpu_row(s0, r);
        const float *b = (const float *)cpu_row(s1, bcast ? 0 : r);
        float *y = (float *)cpu_row(d, r);
        switch (node->op) {
        case MINFER_OP_ADD:
            for (int64_t i = 0; i < n; i++)
                y[i] = a[i] + b[i];
            break;
        case MINFER_OP_MUL:
            for (int64_t i = 0; i < n; i++)
                y[i] = a[i] * b[i];
            break;
        case MINFER_OP_GEGLU:
            for (int64_t i = 0; i < n; i++)
                y[i] = cpu_gelu_tanh(a[i]) * b[i];
            break;
        default: /* SWIGLU */
            for (int64_t i = 0; i < n; i++)
                y[i] = a[i] / (1.0f + expf(-a[i])) * b[i];
            break;
        }
    }
}

static void scale_rows(const struct minfer_node *node, int64_t r0, int64_t r1)
{
    const struct minfer_tensor *s0 = node->src[0], *d = node->dst;
    float s = node->fparams[0];
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)cpu_row(s0, r);
        float *y = (float *)cpu_row(d, r);
        for (int64_t i = 0; i < s0->ne[0]; i++)
            y[i] = x[i] * s;
    }
}

static void convert_row(uint32_t st, const void *src, uint32_t dt, void *dst, int64_t n)
{
    float tmp[256];
    for (int64_t i0 = 0; i0 < n; i0 += 256) {
        int64_t m = n - i0 < 256 ? n - i0 : 256;
        const float *f;
        if (st == MINFER_TYPE_F32) {
            f = (const float *)src + i0;
        } else {
            const uint16_t *h = (const uint16_t *)src + i0;
            for (int64_t i = 0; i < m; i++)
                tmp[i] = st == MINFER_TYPE_F16 ? minfer_fp16_to_fp32(h[i])
                                               : minfer_bf16_to_fp32(h[i]);
            f = tmp;
        }
        if (dt == MINFER_TYPE_F32) {
            memmove((float *)dst + i0, f, (size_t)m * sizeof(float));
        } else {
            uint16_t *o = (uint16_t *)dst + i0;
            for (int64_t i = 0; i < m; i++)
                o[i] = dt == MINFER_TYPE_F16 ? minfer_fp32_to_fp16(f[i])
                                             : minfer_fp32_to_bf16(f[i]);
        }
    }
}

static void copy_rows(const struct minfer_node *node, int64_t r0, int64_t r1)
{
    const struct minfer_tensor *s0 = node->src[0], *d = node->dst;
    for (int64_t r = r0; r < r1; r++) {
        if (s0->type == d->type)
            memmove(cpu_row(d, r), cpu_row(s0, r), (size_t)s0->ne[0] * s0->nb[0]);
        else
            convert_row(s0->type, cpu_row(s0, r), d->type, cpu_row(d, r), s0->ne[0]);
    }
}

/* ---- GET_ROWS ---- */

static void get_rows_rows(const struct minfer_node *node, int64_t r0, int64_t r1)
{
    const struct minfer_tensor *tab = node->src[0], *d = node->dst;
    const int32_t *ids = node->src[1]->data;
    for (int64_t r = r0; r < r1; r++) {
        const void *src = (const char *)tab->data + (size_t)ids[r] * tab->nb[1];
        float *y = (float *)cpu_row(d, r);
        if (tab->type == MINFER_TYPE_F32 || tab->type == MINFER_TYPE_F16 ||
            tab->type == MINFER_TYPE_BF16)
            convert_row(tab->type, src, MINFER_TYPE_F32, y, tab->ne[0]);
        else
            minfer_dequantize_row(tab->type, src, y, tab->ne[0]);
    }
}

/* ---- ROPE ---- */

static void rope_tokens(const struct minfer_node *node, int64_t t0, int64_t t1)
{
    const struct minfer_tensor *s0 = node->src[0], *d = node->dst;
    const int32_t *pos = node->src[1]->data;
    int half = node->iparams[0] / 2;
    bool normal = node->iparams[1] == 1; /* pairs (2i, 2i + 1) instead of (i, i + half) */
    const float *div = node->op == MINFER_OP_ROPE_DIV ? node->src[2]->data : NULL;
    int64_t hd = s0->ne[0], nh = s0->ne[1];
    double base = node->fparams[0], fscale = node->fparams[1];
    double ext = node->fparams[2], ms = node->fparams[3] > 0 ? node->fparams[3] : 1.0;
    double lo = node->fparams[4], hi = node->fparams[5];
    float cs[512], sn[512];
    for (int64_t t = t0; t < t1; t++) {
        for (int i = 0; i < half; i++) {
            double f = pow(base, -2.0 * i / (2.0 * half));
            double theta = (double)pos[t] * fscale * f, te = (double)pos[t] * f;
            if (div) {
                theta /= (double)div[i];
                te /= (double)div[i];
            }
            if (ext > 0) { /* YaRN: toward the unscaled angle below the ramp */
                double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
                double r = (1.0 - (y < 0 ? 0 : y > 1 ? 1 : y)) * ext;
                theta = theta * (1.0 - r) + te * r;
            }
            cs[i] = (float)(cos(theta) * ms);
            sn[i] = (float)(sin(theta) * ms);
        }
        for (int64_t h = 0; h < nh; h++) {
            const float *x = (const float *)((const char *)s0->data + (size_t)h * s0->nb[1] +
                                             (size_t)t * s0->nb[2]);
            float *y = (float *)((char *)d->data + (size_t)h * d->nb[1] + (size_t)t * d->nb[2]);
            if (normal)
                for (int i = 0; i < half; i++) {
                    float x0 = x[2 * i], x1 = x[2 * i + 1];
                    y[2 * i] = x0 * cs[i] - x1 * sn[i];
                    y[2 * i + 1] = x0 * sn[i] + x1 * cs[i];
                }
            else
                for (int i = 0; i < half; i++) {
                    float x0 = x[i], x1 = x[i + half];
                    y[i] = x0 * cs[i] - x1 * sn[i];
                    y[i + half] = x0 * sn[i] + x1 * cs[i];
                }
            if (y != x)
                for (int64_t i = 2 * half; i < hd; i++)
                    y[i] = x[i];
        }
    }
}

/* ---- KV_STORE ---- */

static void kv_store_rows(const struct minfer_node *node, int64_t r0, int64_t r1)
{
    const struct minfer_tensor *s0 = node->src[0], *d = node->dst;
    const int32_t *cells = node->src[1]->data;
    for (int64_t r = r0; r < r1; r++) {
        const float *x = (const float *)cpu_row(s0, r);
        void *y = (char *)d->data + (size_t)cells[r] * d->nb[1];
        if (d->type == MINFER_TYPE_Q8_0)
            minfer_quantize_row_ref(MINFER_TYPE_Q8_0, x, y, s0->ne[0]);
        else
            convert_row(MINFER_TYPE_F32, x, d->type, y, s0->ne[0]);
    }
}

/* ---- dispatch ---- */

minfer_status cpu_execute(struct minfer_backend *be, const struct minfer_node *node)
{
    const struct minfer_tensor *s0 = node->src[0], *d = node->dst;
    switch (node->op) {
    case MINFER_OP_GET_ROWS: {
        const int32_t *ids = node->src[1]->data;
        int64_t n = node->src[1]->ne[0];
        for (int64_t i = 0; i < n; i++)
            if (ids[i] < 0 || ids[i] >= s0->ne[1])
                return cpu_fail(be, node, MINFER_ERR_RANGE,
                                "GET_ROWS id %d at index %lld is outside the table's %lld rows",
                                ids[i], (long long)i, (long long)s0->ne[1]);
        run_rows(be, node, get_rows_rows, n, s0->ne[0]);
        return MINFER_OK;
    }
    case MINFER_OP_RMS_NORM:
    case MINFER_OP_RMS_NORM_MUL:
        run_rows(be, node, rms_norm_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_ADD:
    case MINFER_OP_MUL:
    case MINFER_OP_SWIGLU:
    case MINFER_OP_GEGLU:
        run_rows(be, node, binary_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_SCALE:
        run_rows(be, node, scale_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_COPY:
        run_rows(be, node, copy_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_ROPE:
    case MINFER_OP_ROPE_DIV:
        run_rows(be, node, rope_tokens, s0->ne[2], s0->ne[0] * s0->ne[1]);
        return MINFER_OK;
    case MINFER_OP_KV_STORE: {
        const int32_t *cells = node->src[1]->data;
        int64_t n = node->src[1]->ne[0];
        for (int64_t i = 0; i < n; i++)
            if (cells[i] < 0 || cells[i] >= d->ne[1])
                return cpu_fail(be, node, MINFER_ERR_RANGE,
                                "KV_STORE cell %d for token %lld is outside the cache's %lld "
                                "cells",
                                cells[i], (long long)i, (long long)d->ne[1]);
        run_rows(be, node, kv_store_rows, n, s0->ne[0]);
        return MINFER_OK;
    }
    case MINFER_OP_MUL_MAT:
    case MINFER_OP_MUL_MAT_ADD:
    case MINFER_OP_FFN_GATE_UP:
        return cpu_op_matmul(be, node);
    case MINFER_OP_ATTENTION:
        return cpu_op_attention(be, node);
    case MINFER_OP_ATTENTION_LISTS:
        return cpu_op_attention_lists(be, node);
    case MINFER_OP_TOPK:
    case MINFER_OP_MOE_WEIGHTS:
    case MINFER_OP_MUL_MAT_ID:
    case MINFER_OP_MOE_SUM:
        return cpu_op_moe(be, node);
    default:
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "op %u not implemented", node->op);
    }
}
