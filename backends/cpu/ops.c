/*
 * ops.c — validation of every IR node the CPU plugin runs (shared by
 * supports_op and execute_node, so the two never disagree), the dispatch
 * of execute_node, and the row-wise ops: GET_ROWS, RMS_NORM(_MUL), ADD,
 * MUL, ROPE, SWIGLU, KV_STORE, COPY, SCALE. MUL_MAT / FFN_GATE_UP live in
 * matmul.c, ATTENTION in attention.c.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"
#include "minfer/quant-ref.h"

/* ---- validation ---- */

#define FAIL(...) return cpu_fail(be, node, MINFER_ERR_INVALID_ARG, __VA_ARGS__)
#define UNSUP(...) return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, __VA_ARGS__)

static const char *tname(uint32_t type)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    return t ? t->name : "unknown";
}

static const char *op_name(uint32_t op)
{
    static const char *names[MINFER_OP_COUNT] = {
        "NONE", "GET_ROWS", "RMS_NORM", "RMS_NORM_MUL", "ADD", "MUL", "MUL_MAT",
        "ROPE", "SWIGLU", "KV_STORE", "ATTENTION", "FFN_GATE_UP", "COPY", "SCALE",
        "MUL_MAT_ADD"};
    return op < MINFER_OP_COUNT && names[op] ? names[op] : "unknown";
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

static bool kv_type_ok(uint32_t type)
{
    return type == MINFER_TYPE_F32 || type == MINFER_TYPE_F16 || type == MINFER_TYPE_Q8_0;
}

/* Shape/stride sanity of one tensor: dims >= 1, dense in dim 0, rows not
 * overlapping, ne0 a whole number of blocks. */
static minfer_status check_tensor(struct minfer_backend *be, const struct minfer_node *node,
                                  const struct minfer_tensor *t, const char *what)
{
    if (!t)
        FAIL("%s is NULL", what);
    if (!t->data)
        FAIL("%s (%s) has no data", what, t->name ? t->name : "?");
    const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
    if (!tr)
        FAIL("%s has unknown type id %u", what, t->type);
    for (int i = 0; i < MINFER_MAX_DIMS; i++)
        if (t->ne[i] < 1 || t->ne[i] > ((int64_t)1 << 40))
            FAIL("%s has ne%d = %lld, expected 1..2^40", what, i, (long long)t->ne[i]);
    if (t->ne[0] % tr->block_size)
        FAIL("%s: ne0 %lld is not a multiple of %s's block of %u", what, (long long)t->ne[0],
             tr->name, tr->block_size);
    if (t->nb[0] != tr->type_size)
        UNSUP("%s: nb0 %zu but %s is dense with %u bytes per %s", what, t->nb[0], tr->name,
              tr->type_size, tr->block_size > 1 ? "block" : "element");
    size_t row = (size_t)(t->ne[0] / tr->block_size) * tr->type_size;
    if (t->ne[1] > 1 && t->nb[1] < row)
        UNSUP("%s: nb1 %zu is smaller than a row of %zu bytes", what, t->nb[1], row);
    return MINFER_OK;
}

static bool same_shape(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    for (int i = 0; i < MINFER_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i])
            return false;
    return true;
}

#define SHAPE_FMT "[%lld, %lld, %lld, %lld]"
#define SHAPE(t) (long long)(t)->ne[0], (long long)(t)->ne[1], (long long)(t)->ne[2], \
                 (long long)(t)->ne[3]

#define NEED_TYPE(t, ty, what)                                                              \
    do {                                                                                    \
        if ((t)->type != (ty))                                                              \
            UNSUP("%s has type %s, expected %s", what, tname((t)->type), tname(ty));        \
    } while (0)

/* A 1-D I32 vector of n elements. */
static minfer_status check_ids(struct minfer_backend *be, const struct minfer_node *node,
                               const struct minfer_tensor *t, int64_t n, const char *what)
{
    NEED_TYPE(t, MINFER_TYPE_I32, what);
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        FAIL("%s has shape " SHAPE_FMT ", expected [%lld]", what, SHAPE(t), (long long)n);
    return MINFER_OK;
}

static minfer_status check_op(struct minfer_backend *be, const struct minfer_node *node)
{
    const struct minfer_tensor *s0 = node->src[0], *s1 = node->src[1], *s2 = node->src[2];
    const struct minfer_tensor *d = node->dst;
    minfer_status st;
    switch (node->op) {
    case MINFER_OP_GET_ROWS:
        if (!weight_type_ok(s0->type))
            UNSUP("GET_ROWS table has type %s, not readable here", tname(s0->type));
        if (s0->ne[2] != 1 || s0->ne[3] != 1)
            UNSUP("GET_ROWS table is " SHAPE_FMT ", expected 2-D", SHAPE(s0));
        if ((st = check_ids(be, node, s1, s1->ne[0], "GET_ROWS ids")))
            return st;
        NEED_TYPE(d, MINFER_TYPE_F32, "GET_ROWS dst");
        if (d->ne[0] != s0->ne[0] || cpu_nrows(d) != s1->ne[0])
            FAIL("GET_ROWS dst is " SHAPE_FMT ", expected [%lld, %lld]", SHAPE(d),
                 (long long)s0->ne[0], (long long)s1->ne[0]);
        return MINFER_OK;
    case MINFER_OP_RMS_NORM:
    case MINFER_OP_SCALE:
        NEED_TYPE(s0, MINFER_TYPE_F32, "src0");
        NEED_TYPE(d, MINFER_TYPE_F32, "dst");
        if (!same_shape(s0, d))
            FAIL("dst " SHAPE_FMT " differs from src0 " SHAPE_FMT, SHAPE(d), SHAPE(s0));
        if (node->op == MINFER_OP_RMS_NORM && !(node->fparams[0] >= 0.0f))
            FAIL("eps %g must be >= 0", (double)node->fparams[0]);
        return MINFER_OK;
    case MINFER_OP_RMS_NORM_MUL:
    case MINFER_OP_ADD:
    case MINFER_OP_MUL:
        NEED_TYPE(s0, MINFER_TYPE_F32, "src0");
        NEED_TYPE(s1, MINFER_TYPE_F32, "src1");
        NEED_TYPE(d, MINFER_TYPE_F32, "dst");
        if (!same_shape(s0, d))
            FAIL("dst " SHAPE_FMT " differs from src0 " SHAPE_FMT, SHAPE(d), SHAPE(s0));
        if (s1->ne[0] != s0->ne[0] ||
            (cpu_nrows(s1) != 1 && (node->op == MINFER_OP_RMS_NORM_MUL || !same_shape(s0, s1))))
            FAIL("src1 " SHAPE_FMT " must be one row of %lld%s", SHAPE(s1),
                 (long long)s0->ne[0],
                 node->op == MINFER_OP_RMS_NORM_MUL ? "" : " or src0's shape");
        if (node->op == MINFER_OP_RMS_NORM_MUL && !(node->fparams[0] >= 0.0f))
            FAIL("eps %g must be >= 0", (double)node->fparams[0]);
        return MINFER_OK;
    case MINFER_OP_SWIGLU:
        NEED_TYPE(s0, MINFER_TYPE_F32, "src0");
        NEED_TYPE(s1, MINFER_TYPE_F32, "src1");
        NEED_TYPE(d, MINFER_TYPE_F32, "dst");
        if (!same_shape(s0, d) || !same_shape(s1, d))
            FAIL("SWIGLU shapes differ: src0 " SHAPE_FMT ", src1 " SHAPE_FMT ", dst " SHAPE_FMT,
                 SHAPE(s0), SHAPE(s1), SHAPE(d));
        return MINFER_OK;
    case MINFER_OP_MUL_MAT:
    case MINFER_OP_MUL_MAT_ADD:
    case MINFER_OP_FFN_GATE_UP: {
        bool ffn = node->op == MINFER_OP_FFN_GATE_UP;
        const struct minfer_tensor *x = ffn ? s2 : s1;
        if (!weight_type_ok(s0->type))
            UNSUP("weight has type %s, not readable here", tname(s0->type));
        if (s0->ne[2] != 1 || s0->ne[3] != 1)
            UNSUP("weight is " SHAPE_FMT ", expected 2-D", SHAPE(s0));
        if (ffn && (s1->type != s0->type || !same_shape(s0, s1) || s1->nb[1] != s0->nb[1]))
            UNSUP("FFN_GATE_UP gate (%s " SHAPE_FMT ") and up (%s " SHAPE_FMT
                  ") must match in type, shape and stride",
                  tname(s0->type), SHAPE(s0), tname(s1->type), SHAPE(s1));
        NEED_TYPE(x, MINFER_TYPE_F32, "activations");
        NEED_TYPE(d, MINFER_TYPE_F32, "dst");
        if (x->ne[0] != s0->ne[0])
            FAIL("activations have %lld elements per row, weight has K = %lld",
                 (long long)x->ne[0], (long long)s0->ne[0]);
        if (d->ne[0] != s0->ne[1] || cpu_nrows(d) != cpu_nrows(x))
            FAIL("dst is " SHAPE_FMT ", expected [%lld, %lld]", SHAPE(d),
                 (long long)s0->ne[1], (long long)cpu_nrows(x));
        if (cpu_nrows(x) > INT32_MAX || s0->ne[0] > INT32_MAX || s0->ne[1] > INT32_MAX)
            UNSUP("matrix too large: K %lld, N %lld, M %lld", (long long)s0->ne[0],
                  (long long)s0->ne[1], (long long)cpu_nrows(x));
        if (node->op == MINFER_OP_MUL_MAT_ADD) {
            NEED_TYPE(s2, MINFER_TYPE_F32, "addend");
            if (s2->ne[0] != d->ne[0] || s2->ne[2] != 1 || s2->ne[3] != 1 ||
                (s2->ne[1] != 1 && s2->ne[1] != cpu_nrows(d)) || d->ne[2] != 1 ||
                d->ne[3] != 1)
                FAIL("addend " SHAPE_FMT " fits neither [N, M] nor [N, 1] of dst " SHAPE_FMT,
                     SHAPE(s2), SHAPE(d));
        }
        return MINFER_OK;
    }
    case MINFER_OP_ROPE: {
        NEED_TYPE(s0, MINFER_TYPE_F32, "src0");
        NEED_TYPE(d, MINFER_TYPE_F32, "dst");
        if (s0->ne[3] != 1 || !same_shape(s0, d))
            FAIL("ROPE src0 " SHAPE_FMT " and dst " SHAPE_FMT " must be one 3-D shape",
                 SHAPE(s0), SHAPE(d));
        if ((st = check_ids(be, node, s1, s0->ne[2], "ROPE positions")))
            return st;
        int32_t n_rot = node->iparams[0];
        if (n_rot < 2 || n_rot % 2 || n_rot > s0->ne[0])
            FAIL("n_rot %d must be even and in 2..head_dim %lld", n_rot, (long long)s0->ne[0]);
        if (!(node->fparams[0] > 0.0f) || !(node->fparams[1] > 0.0f))
            FAIL("freq_base %g and freq_scale %g must be > 0", (double)node->fparams[0],
                 (double)node->fparams[1]);
        return MINFER_OK;
    }
    case MINFER_OP_KV_STORE:
        NEED_TYPE(s0, MINFER_TYPE_F32, "KV_STORE rows");
        if (!kv_type_ok(d->type))
            UNSUP("KV cache type %s; this plugin stores f32, f16 or q8_0", tname(d->type));
        if (d->ne[2] != 1 || d->ne[3] != 1 || s0->ne[2] != 1 || s0->ne[3] != 1)
            FAIL("KV_STORE needs 2-D src0 " SHAPE_FMT " and cache " SHAPE_FMT, SHAPE(s0),
                 SHAPE(d));
        if (s0->ne[0] != d->ne[0])
            FAIL("KV_STORE row of %lld into cache rows of %lld", (long long)s0->ne[0],
                 (long long)d->ne[0]);
        return check_ids(be, node, s1, s0->ne[1], "KV_STORE cells");
    case MINFER_OP_ATTENTION: {
        const struct minfer_tensor *s3 = node->src[3], *s4 = node->src[4];
        NEED_TYPE(s0, MINFER_TYPE_F32, "Q");
        NEED_TYPE(d, MINFER_TYPE_F32, "dst");
        if (!kv_type_ok(s1->type) || s2->type != s1->type)
            UNSUP("K cache %s / V cache %s; expected both f32, f16 or q8_0", tname(s1->type),
                  tname(s2->type));
        if (s0->ne[3] != 1 || !same_shape(s0, d))
            FAIL("Q " SHAPE_FMT " and dst " SHAPE_FMT " must be one 3-D shape", SHAPE(s0),
                 SHAPE(d));
        int32_t n_kv = node->iparams[0];
        int64_t hd = s0->ne[0], nh = s0->ne[1];
        if (n_kv < 1 || nh % n_kv)
            FAIL("n_kv_head %d must divide n_head %lld", n_kv, (long long)nh);
        if (!same_shape(s1, s2) || s1->ne[0] != hd * n_kv || s1->ne[2] != 1 || s1->ne[3] != 1)
            FAIL("K " SHAPE_FMT " / V " SHAPE_FMT " must both be [%lld, n_cells]", SHAPE(s1),
                 SHAPE(s2), (long long)(hd * n_kv));
        if (s1->type == MINFER_TYPE_Q8_0 && hd % MINFER_QK8_0)
            UNSUP("q8_0 KV cache needs head_dim %% 32 == 0, head_dim is %lld", (long long)hd);
        if (hd > 1024)
            UNSUP("head_dim %lld exceeds this plugin's 1024", (long long)hd);
        if ((st = check_ids(be, node, s3, 1, "kv_len")))
            return st;
        return check_ids(be, node, s4, s0->ne[2], "query positions");
    }
    case MINFER_OP_COPY:
        if ((s0->type != MINFER_TYPE_F32 && s0->type != MINFER_TYPE_F16 &&
             s0->type != MINFER_TYPE_BF16) ||
            (d->type != MINFER_TYPE_F32 && d->type != MINFER_TYPE_F16 &&
             d->type != MINFER_TYPE_BF16))
            UNSUP("COPY %s -> %s; this plugin copies among f32, f16 and bf16",
                  tname(s0->type), tname(d->type));
        if (!same_shape(s0, d))
            FAIL("dst " SHAPE_FMT " differs from src0 " SHAPE_FMT, SHAPE(d), SHAPE(s0));
        return MINFER_OK;
    default:
        UNSUP("op %u (%s) is not implemented by the CPU plugin", node->op, op_name(node->op));
    }
}

static const uint32_t n_src_of[MINFER_OP_COUNT] = {
    [MINFER_OP_GET_ROWS] = 2, [MINFER_OP_RMS_NORM] = 1, [MINFER_OP_RMS_NORM_MUL] = 2,
    [MINFER_OP_ADD] = 2,      [MINFER_OP_MUL] = 2,      [MINFER_OP_MUL_MAT] = 2,
    [MINFER_OP_ROPE] = 2,     [MINFER_OP_SWIGLU] = 2,   [MINFER_OP_KV_STORE] = 2,
    [MINFER_OP_ATTENTION] = 5, [MINFER_OP_FFN_GATE_UP] = 3, [MINFER_OP_COPY] = 1,
    [MINFER_OP_SCALE] = 1,    [MINFER_OP_MUL_MAT_ADD] = 3,
};

minfer_status cpu_check_node(struct minfer_backend *be, const struct minfer_node *node)
{
    if (!node)
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG, "NULL node");
    if (node->op == MINFER_OP_NONE || node->op >= MINFER_OP_COUNT)
        UNSUP("op %u (%s) is not implemented by the CPU plugin", node->op, op_name(node->op));
    if (node->n_src < n_src_of[node->op] || node->n_src > MINFER_MAX_SRC)
        FAIL("%s has %u sources, expected %u", op_name(node->op), node->n_src,
             n_src_of[node->op]);
    minfer_status st;
    char what[16];
    for (uint32_t i = 0; i < n_src_of[node->op]; i++) {
        snprintf(what, sizeof what, "src%u", i);
        if ((st = check_tensor(be, node, node->src[i], what)))
            return st;
    }
    if ((st = check_tensor(be, node, node->dst, "dst")))
        return st;
    return check_op(be, node);
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
    int64_t hd = s0->ne[0], nh = s0->ne[1];
    double base = node->fparams[0], fscale = node->fparams[1];
    float cs[512], sn[512];
    for (int64_t t = t0; t < t1; t++) {
        for (int i = 0; i < half; i++) {
            double theta = (double)pos[t] * fscale * pow(base, -2.0 * i / (2.0 * half));
            cs[i] = (float)cos(theta);
            sn[i] = (float)sin(theta);
        }
        for (int64_t h = 0; h < nh; h++) {
            const float *x = (const float *)((const char *)s0->data + (size_t)h * s0->nb[1] +
                                             (size_t)t * s0->nb[2]);
            float *y = (float *)((char *)d->data + (size_t)h * d->nb[1] + (size_t)t * d->nb[2]);
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
        run_rows(be, node, binary_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_SCALE:
        run_rows(be, node, scale_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_COPY:
        run_rows(be, node, copy_rows, cpu_nrows(s0), s0->ne[0]);
        return MINFER_OK;
    case MINFER_OP_ROPE:
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
    default:
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "op %u not implemented", node->op);
    }
}
