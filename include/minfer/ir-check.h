/*
 * minfer/ir-check.h — the node checker: does a node keep what ir.h
 * documents for its op (source count, element types, shapes, strides,
 * params)? Header-only and installed with the SDK, so every plugin,
 * in-tree or not, refuses a malformed node with the same words; a plugin
 * adds only its capability checks (which types and sizes its kernels run).
 *
 *   char why[256];
 *   minfer_status st = minfer_ir_check_node(node, MINFER_IR_CHECK_DATA, why, sizeof why);
 *   if (st != MINFER_OK) return fail(be, node, st, "%s", why);
 *   ... then the plugin's own "can my kernels run this" checks ...
 *
 * Returns MINFER_OK; MINFER_ERR_UNSUPPORTED for an op value this header
 * does not name (NONE, or one from a newer ir.h); MINFER_ERR_INVALID_ARG
 * for a node that breaks ir.h. On failure why[why_len] says what was
 * found and what ir.h expects, starting with the op name.
 */
#ifndef MINFER_IR_CHECK_H
#define MINFER_IR_CHECK_H

#include <stdarg.h>
#include <stdio.h>

#include "minfer/ir.h"
#include "minfer/quant.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Also require every tensor's data to be non-NULL (at execute time; the
 * core's supports_op calls pass placeholder addresses, never NULL). */
#define MINFER_IR_CHECK_DATA 0x1u

/* Largest extent of any dimension (2^40). */
#define MINFER_IR_MAX_NE ((int64_t)1 << 40)

/* ---- helpers (internal to this header) ---- */

#define MINFER_IRC_SHAPE_ "[%lld, %lld, %lld, %lld]"
#define MINFER_IRC_NE_(t)                                                                          \
    (long long)(t)->ne[0], (long long)(t)->ne[1], (long long)(t)->ne[2], (long long)(t)->ne[3]

/* Writes "<OP>: <message>" into why and returns MINFER_ERR_INVALID_ARG. */
#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static inline minfer_status
minfer_irc_bad_(char *why, size_t why_len, uint32_t op, const char *fmt, ...)
{
    if (why && why_len) {
        int w = snprintf(why, why_len, "%s: ", minfer_op_name(op));
        size_t off = w < 0 ? 0 : (size_t)w < why_len ? (size_t)w : why_len - 1;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why + off, why_len - off, fmt, ap);
        va_end(ap);
    }
    return MINFER_ERR_INVALID_ARG;
}

static inline const char *minfer_irc_tname_(uint32_t type)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    return t ? t->name : "unknown";
}

static inline bool minfer_irc_same_(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    for (int i = 0; i < MINFER_MAX_DIMS; i++)
        if (a->ne[i] != b->ne[i])
            return false;
    return true;
}

static inline int64_t minfer_irc_rows_(const struct minfer_tensor *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* ne[2] == ne[3] == 1 (a matrix or a vector). */
static inline bool minfer_irc_2d_(const struct minfer_tensor *t)
{
    return t->ne[2] == 1 && t->ne[3] == 1;
}

/* A 1-D vector of n elements. */
static inline bool minfer_irc_vec_(const struct minfer_tensor *t, int64_t n)
{
    return t->ne[0] == n && t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1;
}

static inline bool minfer_irc_kv_type_(uint32_t type)
{
    return type == MINFER_TYPE_F32 || type == MINFER_TYPE_F16 || type == MINFER_TYPE_Q8_0;
}

static inline bool minfer_irc_float_type_(uint32_t type)
{
    return type == MINFER_TYPE_F32 || type == MINFER_TYPE_F16 || type == MINFER_TYPE_BF16;
}

/* What every tensor keeps (ir.h's conventions): a known type, extents in
 * 1..2^40, dense in dimension 0, ne0 whole blocks, rows that do not
 * overlap. */
static inline minfer_status minfer_irc_tensor_(const struct minfer_tensor *t, const char *role,
                                               uint32_t op, uint32_t flags, char *why,
                                               size_t why_len)
{
    if (!t)
        return minfer_irc_bad_(why, why_len, op, "%s is NULL", role);
    if ((flags & MINFER_IR_CHECK_DATA) && !t->data)
        return minfer_irc_bad_(why, why_len, op, "%s (%s) has no data", role,
                               t->name ? t->name : "unnamed");
    const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
    if (!tr)
        return minfer_irc_bad_(why, why_len, op, "%s has unknown type id %u", role, t->type);
    for (int i = 0; i < MINFER_MAX_DIMS; i++)
        if (t->ne[i] < 1 || t->ne[i] > MINFER_IR_MAX_NE)
            return minfer_irc_bad_(why, why_len, op, "%s has ne%d = %lld, expected 1..2^40", role,
                                   i, (long long)t->ne[i]);
    if (t->ne[0] % tr->block_size)
        return minfer_irc_bad_(why, why_len, op,
                               "%s: ne0 %lld is not a multiple of %s's block of %u", role,
                               (long long)t->ne[0], tr->name, tr->block_size);
    if (t->nb[0] != tr->type_size)
        return minfer_irc_bad_(why, why_len, op, "%s: nb0 %zu but %s is dense with %u bytes per %s",
                               role, t->nb[0], tr->name, tr->type_size,
                               tr->block_size > 1 ? "block" : "element");
    size_t row = (size_t)(t->ne[0] / tr->block_size) * tr->type_size;
    if (t->ne[1] > 1 && t->nb[1] < row)
        return minfer_irc_bad_(why, why_len, op, "%s: nb1 %zu is smaller than a row of %zu bytes",
                               role, t->nb[1], row);
    return MINFER_OK;
}

#define MINFER_IRC_TYPE_(t, ty, role)                                                              \
    do {                                                                                           \
        if ((t)->type != (ty))                                                                     \
            return minfer_irc_bad_(why, why_len, op, "%s has type %s, expected %s", role,          \
                                   minfer_irc_tname_((t)->type), minfer_irc_tname_(ty));           \
    } while (0)

#define MINFER_IRC_IDS_(t, n, role)                                                                \
    do {                                                                                           \
        MINFER_IRC_TYPE_(t, MINFER_TYPE_I32, role);                                                \
        if (!minfer_irc_vec_(t, n))                                                                \
            return minfer_irc_bad_(why, why_len, op,                                               \
                                   "%s is " MINFER_IRC_SHAPE_ ", expected [%lld]", role,           \
                                   MINFER_IRC_NE_(t), (long long)(n));                             \
    } while (0)

/* MUL_MAT, MUL_MAT_ADD, FFN_GATE_UP: weight w [K, N], activations x [K, M],
 * dst d [N, M]; K, N, M below 2^31. */
static inline minfer_status minfer_irc_matmul_(const struct minfer_node *n, char *why,
                                               size_t why_len)
{
    uint32_t op = n->op;
    bool ffn = op == MINFER_OP_FFN_GATE_UP;
    const struct minfer_tensor *w = n->src[0], *x = n->src[ffn ? 2 : 1], *d = n->dst;
    if (!minfer_irc_2d_(w))
        return minfer_irc_bad_(why, why_len, op, "weight is " MINFER_IRC_SHAPE_ ", expected [K, N]",
                               MINFER_IRC_NE_(w));
    if (ffn && (n->src[1]->type != w->type || !minfer_irc_same_(w, n->src[1])))
        return minfer_irc_bad_(why, why_len, op,
                               "gate (%s " MINFER_IRC_SHAPE_ ") and up (%s " MINFER_IRC_SHAPE_
                               ") differ in type or shape",
                               minfer_irc_tname_(w->type), MINFER_IRC_NE_(w),
                               minfer_irc_tname_(n->src[1]->type), MINFER_IRC_NE_(n->src[1]));
    MINFER_IRC_TYPE_(x, MINFER_TYPE_F32, "activations");
    MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
    if (x->ne[0] != w->ne[0] || !minfer_irc_2d_(x))
        return minfer_irc_bad_(why, why_len, op,
                               "activations are " MINFER_IRC_SHAPE_ ", expected [K = %lld, M]",
                               MINFER_IRC_NE_(x), (long long)w->ne[0]);
    if (d->ne[0] != w->ne[1] || d->ne[1] != x->ne[1] || !minfer_irc_2d_(d))
        return minfer_irc_bad_(why, why_len, op,
                               "dst is " MINFER_IRC_SHAPE_ ", expected [%lld, %lld]",
                               MINFER_IRC_NE_(d), (long long)w->ne[1], (long long)x->ne[1]);
    if (w->ne[0] > INT32_MAX || w->ne[1] > INT32_MAX || x->ne[1] > INT32_MAX)
        return minfer_irc_bad_(why, why_len, op, "K %lld, N %lld, M %lld: each must be below 2^31",
                               (long long)w->ne[0], (long long)w->ne[1], (long long)x->ne[1]);
    if (op == MINFER_OP_MUL_MAT_ADD) {
        const struct minfer_tensor *a = n->src[2];
        MINFER_IRC_TYPE_(a, MINFER_TYPE_F32, "addend");
        if (a->ne[0] != d->ne[0] || !minfer_irc_2d_(a) || (a->ne[1] != 1 && a->ne[1] != d->ne[1]))
            return minfer_irc_bad_(why, why_len, op,
                                   "addend " MINFER_IRC_SHAPE_ " fits neither [N, M] nor [N, 1] "
                                   "of dst " MINFER_IRC_SHAPE_,
                                   MINFER_IRC_NE_(a), MINFER_IRC_NE_(d));
    }
    return MINFER_OK;
}

static inline minfer_status minfer_irc_attention_(const struct minfer_node *n, char *why,
                                                  size_t why_len)
{
    uint32_t op = n->op;
    const struct minfer_tensor *q = n->src[0], *k = n->src[1], *v = n->src[2], *d = n->dst;
    MINFER_IRC_TYPE_(q, MINFER_TYPE_F32, "Q");
    MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
    if (q->ne[3] != 1 || !minfer_irc_same_(q, d))
        return minfer_irc_bad_(why, why_len, op,
                               "Q " MINFER_IRC_SHAPE_ " and dst " MINFER_IRC_SHAPE_
                               " must be one 3-D shape",
                               MINFER_IRC_NE_(q), MINFER_IRC_NE_(d));
    if (!minfer_irc_kv_type_(k->type) || v->type != k->type)
        return minfer_irc_bad_(why, why_len, op,
                               "K cache %s / V cache %s; expected both f32, f16 or q8_0",
                               minfer_irc_tname_(k->type), minfer_irc_tname_(v->type));
    int32_t n_kv = n->iparams[0];
    int64_t hd = q->ne[0], nh = q->ne[1];
    if (n_kv < 1 || nh % n_kv)
        return minfer_irc_bad_(why, why_len, op, "n_kv_head %d must divide n_head %lld", n_kv,
                               (long long)nh);
    if (!minfer_irc_same_(k, v) || k->ne[0] != hd * n_kv || !minfer_irc_2d_(k))
        return minfer_irc_bad_(why, why_len, op,
                               "K " MINFER_IRC_SHAPE_ " / V " MINFER_IRC_SHAPE_
                               " must both be [%lld, n_cells]",
                               MINFER_IRC_NE_(k), MINFER_IRC_NE_(v), (long long)(hd * n_kv));
    if (k->type == MINFER_TYPE_Q8_0 && hd % MINFER_QK8_0)
        return minfer_irc_bad_(why, why_len, op,
                               "a q8_0 cache needs head_dim %% 32 == 0 (each head whole blocks), "
                               "head_dim is %lld",
                               (long long)hd);
    if (n->iparams[1] < 0)
        return minfer_irc_bad_(why, why_len, op, "sliding window %d must be >= 0 (0 = none)",
                               n->iparams[1]);
    if (op == MINFER_OP_ATTENTION_LISTS) {
        const struct minfer_tensor *l = n->src[5];
        if (n->iparams[1])
            return minfer_irc_bad_(why, why_len, op, "sliding window %d: lists take none (0)",
                                   n->iparams[1]);
        const struct minfer_tensor *r = n->src[3];
        MINFER_IRC_TYPE_(r, MINFER_TYPE_I32, "visible ranges");
        if (r->ne[0] != 2 || r->ne[1] != q->ne[2] || !minfer_irc_2d_(r))
            return minfer_irc_bad_(why, why_len, op,
                                   "visible ranges " MINFER_IRC_SHAPE_ " must be [2, %lld]",
                                   MINFER_IRC_NE_(r), (long long)q->ne[2]);
        MINFER_IRC_IDS_(n->src[4], q->ne[2], "query lists");
        MINFER_IRC_TYPE_(l, MINFER_TYPE_I32, "cell lists");
        bool dense = l->ne[1] == 1 || l->nb[1] == (size_t)l->ne[0] * sizeof(int32_t);
        if (!minfer_irc_2d_(l) || !dense)
            return minfer_irc_bad_(why, why_len, op,
                                   "cell lists " MINFER_IRC_SHAPE_
                                   " must be a dense 2-D [n_kv, n_lists]",
                                   MINFER_IRC_NE_(l));
        return MINFER_OK;
    }
    MINFER_IRC_IDS_(n->src[3], 1, "kv_len");
    MINFER_IRC_IDS_(n->src[4], q->ne[2], "query positions");
    return MINFER_OK;
}

/* TOPK, MOE_WEIGHTS, MUL_MAT_ID, MOE_SUM: the mixture-of-experts ops. */
static inline minfer_status minfer_irc_moe_(const struct minfer_node *n, char *why,
                                            size_t why_len)
{
    uint32_t op = n->op;
    const struct minfer_tensor *s0 = n->src[0], *s1 = n->src[1], *d = n->dst;
    if (op == MINFER_OP_TOPK) {
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "src0");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_I32, "dst");
        int32_t k = n->iparams[0];
        if (k < 1 || k > 64 || k > s0->ne[0])
            return minfer_irc_bad_(why, why_len, op, "k %d must be in 1..min(64, n = %lld)", k,
                                   (long long)s0->ne[0]);
        if (!minfer_irc_2d_(s0) || d->ne[0] != k || d->ne[1] != s0->ne[1] || !minfer_irc_2d_(d))
            return minfer_irc_bad_(why, why_len, op,
                                   "src0 " MINFER_IRC_SHAPE_ " / dst " MINFER_IRC_SHAPE_
                                   " must be [n, T] / [k = %d, T]",
                                   MINFER_IRC_NE_(s0), MINFER_IRC_NE_(d), k);
        return MINFER_OK;
    }
    if (op == MINFER_OP_MOE_WEIGHTS) {
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "logits");
        MINFER_IRC_TYPE_(s1, MINFER_TYPE_I32, "experts");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (!minfer_irc_2d_(s0) || !minfer_irc_2d_(s1) || s1->ne[1] != s0->ne[1] ||
            s1->ne[0] > s0->ne[0] || !minfer_irc_same_(s1, d))
            return minfer_irc_bad_(why, why_len, op,
                                   "logits " MINFER_IRC_SHAPE_ ", experts " MINFER_IRC_SHAPE_
                                   ", dst " MINFER_IRC_SHAPE_ " must be [n, T], [k, T], [k, T]",
                                   MINFER_IRC_NE_(s0), MINFER_IRC_NE_(s1), MINFER_IRC_NE_(d));
        if (n->iparams[0] != 0 && n->iparams[0] != 1)
            return minfer_irc_bad_(why, why_len, op, "renormalise flag %d must be 0 or 1",
                                   n->iparams[0]);
        return MINFER_OK;
    }
    if (op == MINFER_OP_MOE_SUM) {
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "src0");
        MINFER_IRC_TYPE_(s1, MINFER_TYPE_F32, "weights");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (s0->ne[3] != 1 || s1->ne[0] != s0->ne[1] || s1->ne[1] != s0->ne[2] ||
            !minfer_irc_2d_(s1) || d->ne[0] != s0->ne[0] || d->ne[1] != s0->ne[2] ||
            !minfer_irc_2d_(d))
            return minfer_irc_bad_(why, why_len, op,
                                   "src0 " MINFER_IRC_SHAPE_ ", weights " MINFER_IRC_SHAPE_
                                   ", dst " MINFER_IRC_SHAPE_ " must be [N, k, T], [k, T], [N, T]",
                                   MINFER_IRC_NE_(s0), MINFER_IRC_NE_(s1), MINFER_IRC_NE_(d));
        return MINFER_OK;
    }
    /* MUL_MAT_ID */
    const struct minfer_tensor *ids = n->src[2];
    MINFER_IRC_TYPE_(s1, MINFER_TYPE_F32, "activations");
    MINFER_IRC_TYPE_(ids, MINFER_TYPE_I32, "experts");
    MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
    int64_t k = ids->ne[0], T = ids->ne[1];
    if (s0->ne[3] != 1 || !minfer_irc_2d_(ids) || k > s0->ne[2])
        return minfer_irc_bad_(why, why_len, op,
                               "weights " MINFER_IRC_SHAPE_ " / experts " MINFER_IRC_SHAPE_
                               " must be [K, N, n_expert] / [k <= n_expert, T]",
                               MINFER_IRC_NE_(s0), MINFER_IRC_NE_(ids));
    if (s1->ne[0] != s0->ne[0] || (s1->ne[1] != 1 && s1->ne[1] != k) || s1->ne[2] != T ||
        s1->ne[3] != 1)
        return minfer_irc_bad_(why, why_len, op,
                               "activations are " MINFER_IRC_SHAPE_
                               ", expected [K = %lld, 1 or k = %lld, T = %lld]",
                               MINFER_IRC_NE_(s1), (long long)s0->ne[0], (long long)k,
                               (long long)T);
    if (d->ne[0] != s0->ne[1] || d->ne[1] != k || d->ne[2] != T || d->ne[3] != 1)
        return minfer_irc_bad_(why, why_len, op,
                               "dst is " MINFER_IRC_SHAPE_ ", expected [%lld, %lld, %lld]",
                               MINFER_IRC_NE_(d), (long long)s0->ne[1], (long long)k,
                               (long long)T);
    if (s0->ne[0] > INT32_MAX || s0->ne[1] > INT32_MAX || k * T > INT32_MAX)
        return minfer_irc_bad_(why, why_len, op, "K, N and k * T must each be below 2^31");
    return MINFER_OK;
}

/* ---- the checker ---- */

/* Checks node against ir.h (see the top of this file for the results).
 * Never reads tensor contents; with MINFER_IR_CHECK_DATA it also requires
 * non-NULL data. */
static inline minfer_status minfer_ir_check_node(const struct minfer_node *n, uint32_t flags,
                                                 char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = 0;
    if (!n) {
        if (why && why_len)
            snprintf(why, why_len, "NULL node");
        return MINFER_ERR_INVALID_ARG;
    }
    uint32_t op = n->op;
    if (op == MINFER_OP_NONE || op >= MINFER_OP_COUNT) {
        if (why && why_len)
            snprintf(why, why_len, "op %u (%s) is not an op of this ABI", op, minfer_op_name(op));
        return MINFER_ERR_UNSUPPORTED;
    }
    uint32_t ns = minfer_op_n_src(op);
    if (n->n_src != ns)
        return minfer_irc_bad_(why, why_len, op, "has %u sources, expected %u", n->n_src, ns);
    static const char *const roles[MINFER_MAX_SRC] = {"src0", "src1", "src2",
                                                      "src3", "src4", "src5"};
    minfer_status st;
    for (uint32_t i = 0; i < ns; i++)
        if ((st = minfer_irc_tensor_(n->src[i], roles[i], op, flags, why, why_len)))
            return st;
    if ((st = minfer_irc_tensor_(n->dst, "dst", op, flags, why, why_len)))
        return st;

    const struct minfer_tensor *s0 = n->src[0], *s1 = n->src[1], *d = n->dst;
    switch (op) {
    case MINFER_OP_GET_ROWS:
        if (!minfer_irc_2d_(s0))
            return minfer_irc_bad_(why, why_len, op, "table is " MINFER_IRC_SHAPE_ ", expected 2-D",
                                   MINFER_IRC_NE_(s0));
        MINFER_IRC_IDS_(s1, s1->ne[0], "ids");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (d->ne[0] != s0->ne[0] || d->ne[1] != s1->ne[0] || !minfer_irc_2d_(d))
            return minfer_irc_bad_(why, why_len, op,
                                   "dst is " MINFER_IRC_SHAPE_ ", expected [%lld, %lld]",
                                   MINFER_IRC_NE_(d), (long long)s0->ne[0], (long long)s1->ne[0]);
        return MINFER_OK;
    case MINFER_OP_RMS_NORM:
    case MINFER_OP_SCALE:
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "src0");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (!minfer_irc_same_(s0, d))
            return minfer_irc_bad_(why, why_len, op,
                                   "dst " MINFER_IRC_SHAPE_ " differs from src0 " MINFER_IRC_SHAPE_,
                                   MINFER_IRC_NE_(d), MINFER_IRC_NE_(s0));
        if (op == MINFER_OP_RMS_NORM && !(n->fparams[0] >= 0.0f))
            return minfer_irc_bad_(why, why_len, op, "eps %g must be >= 0", (double)n->fparams[0]);
        return MINFER_OK;
    case MINFER_OP_RMS_NORM_MUL:
    case MINFER_OP_ADD:
    case MINFER_OP_MUL: {
        bool norm = op == MINFER_OP_RMS_NORM_MUL;
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "src0");
        MINFER_IRC_TYPE_(s1, MINFER_TYPE_F32, "src1");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (!minfer_irc_same_(s0, d))
            return minfer_irc_bad_(why, why_len, op,
                                   "dst " MINFER_IRC_SHAPE_ " differs from src0 " MINFER_IRC_SHAPE_,
                                   MINFER_IRC_NE_(d), MINFER_IRC_NE_(s0));
        if (s1->ne[0] != s0->ne[0] ||
            (minfer_irc_rows_(s1) != 1 && (norm || !minfer_irc_same_(s0, s1))))
            return minfer_irc_bad_(
                why, why_len, op, "src1 " MINFER_IRC_SHAPE_ " must be one row of %lld%s",
                MINFER_IRC_NE_(s1), (long long)s0->ne[0], norm ? "" : " or src0's shape");
        if (norm && !(n->fparams[0] >= 0.0f))
            return minfer_irc_bad_(why, why_len, op, "eps %g must be >= 0", (double)n->fparams[0]);
        return MINFER_OK;
    }
    case MINFER_OP_SWIGLU:
    case MINFER_OP_GEGLU:
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "src0");
        MINFER_IRC_TYPE_(s1, MINFER_TYPE_F32, "src1");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (!minfer_irc_same_(s0, d) || !minfer_irc_same_(s1, d))
            return minfer_irc_bad_(why, why_len, op,
                                   "shapes differ: src0 " MINFER_IRC_SHAPE_
                                   ", src1 " MINFER_IRC_SHAPE_ ", dst " MINFER_IRC_SHAPE_,
                                   MINFER_IRC_NE_(s0), MINFER_IRC_NE_(s1), MINFER_IRC_NE_(d));
        return MINFER_OK;
    case MINFER_OP_MUL_MAT:
    case MINFER_OP_MUL_MAT_ADD:
    case MINFER_OP_FFN_GATE_UP:
        return minfer_irc_matmul_(n, why, why_len);
    case MINFER_OP_ROPE:
    case MINFER_OP_ROPE_DIV: {
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "src0");
        MINFER_IRC_TYPE_(d, MINFER_TYPE_F32, "dst");
        if (s0->ne[3] != 1 || !minfer_irc_same_(s0, d))
            return minfer_irc_bad_(why, why_len, op,
                                   "src0 " MINFER_IRC_SHAPE_ " and dst " MINFER_IRC_SHAPE_
                                   " must be one 3-D shape",
                                   MINFER_IRC_NE_(s0), MINFER_IRC_NE_(d));
        MINFER_IRC_IDS_(s1, s0->ne[2], "positions");
        int32_t n_rot = n->iparams[0];
        if (n_rot < 2 || n_rot % 2 || n_rot > s0->ne[0])
            return minfer_irc_bad_(why, why_len, op,
                                   "n_rot %d must be even and in 2..head_dim %lld", n_rot,
                                   (long long)s0->ne[0]);
        if (!(n->fparams[0] > 0.0f) || !(n->fparams[1] > 0.0f))
            return minfer_irc_bad_(why, why_len, op, "freq_base %g and freq_scale %g must be > 0",
                                   (double)n->fparams[0], (double)n->fparams[1]);
        if (!(n->fparams[2] >= 0.0f && n->fparams[2] <= 1.0f) || !(n->fparams[3] >= 0.0f) ||
            !(n->fparams[4] >= 0.0f) || !(n->fparams[5] >= n->fparams[4]))
            return minfer_irc_bad_(why, why_len, op,
                                   "YaRN ext_factor %g (0..1), mscale %g (>= 0) and ramp "
                                   "%g..%g (0 <= lo <= hi) out of range",
                                   (double)n->fparams[2], (double)n->fparams[3],
                                   (double)n->fparams[4], (double)n->fparams[5]);
        if (n->iparams[1] != 0 && n->iparams[1] != 1)
            return minfer_irc_bad_(why, why_len, op, "layout %d must be 0 (NeoX) or 1 (normal)",
                                   n->iparams[1]);
        if (op == MINFER_OP_ROPE_DIV) {
            MINFER_IRC_TYPE_(n->src[2], MINFER_TYPE_F32, "frequency factors");
            if (!minfer_irc_vec_(n->src[2], n_rot / 2))
                return minfer_irc_bad_(why, why_len, op,
                                       "frequency factors are " MINFER_IRC_SHAPE_
                                       ", expected [n_rot / 2 = %d]",
                                       MINFER_IRC_NE_(n->src[2]), n_rot / 2);
        }
        return MINFER_OK;
    }
    case MINFER_OP_KV_STORE:
        MINFER_IRC_TYPE_(s0, MINFER_TYPE_F32, "rows");
        if (!minfer_irc_kv_type_(d->type))
            return minfer_irc_bad_(why, why_len, op, "cache type %s; expected f32, f16 or q8_0",
                                   minfer_irc_tname_(d->type));
        if (!minfer_irc_2d_(s0) || !minfer_irc_2d_(d) || s0->ne[0] != d->ne[0])
            return minfer_irc_bad_(why, why_len, op,
                                   "rows " MINFER_IRC_SHAPE_ " and cache " MINFER_IRC_SHAPE_
                                   " must be [row_len, n] and [row_len, n_cells]",
                                   MINFER_IRC_NE_(s0), MINFER_IRC_NE_(d));
        MINFER_IRC_IDS_(s1, s0->ne[1], "cells");
        return MINFER_OK;
    case MINFER_OP_ATTENTION:
    case MINFER_OP_ATTENTION_LISTS:
        return minfer_irc_attention_(n, why, why_len);
    case MINFER_OP_COPY:
        if (!minfer_irc_float_type_(s0->type) || !minfer_irc_float_type_(d->type))
            return minfer_irc_bad_(why, why_len, op,
                                   "%s -> %s; COPY converts among f32, f16 and bf16",
                                   minfer_irc_tname_(s0->type), minfer_irc_tname_(d->type));
        if (!minfer_irc_same_(s0, d))
            return minfer_irc_bad_(why, why_len, op,
                                   "dst " MINFER_IRC_SHAPE_ " differs from src0 " MINFER_IRC_SHAPE_,
                                   MINFER_IRC_NE_(d), MINFER_IRC_NE_(s0));
        return MINFER_OK;
    case MINFER_OP_TOPK:
    case MINFER_OP_MOE_WEIGHTS:
    case MINFER_OP_MUL_MAT_ID:
    case MINFER_OP_MOE_SUM:
        return minfer_irc_moe_(n, why, why_len);
    default: /* an op in the table without a rule here is a bug of this header */
        return minfer_irc_bad_(why, why_len, op, "no contract rule for op %u", op);
    }
}

#undef MINFER_IRC_TYPE_
#undef MINFER_IRC_IDS_

#ifdef __cplusplus
}
#endif

#endif /* MINFER_IR_CHECK_H */
