/*
 * validate.c — what the CUDA plugin runs: one validator shared by
 * supports_op and execute_node (and by the capture path, which checks
 * each node again with real addresses), so "supported" means exactly
 * "executable". A refusal says which tensor and which value blocked it.
 */
#include <stdio.h>

#include "cuda-internal.h"

static const char *tname(uint32_t t)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(t);
    return tr ? tr->name : "unknown";
}

const char *cuda_op_name(uint32_t op)
{
    static const char *names[] = {"NONE",     "GET_ROWS", "RMS_NORM",    "RMS_NORM_MUL",
                                  "ADD",      "MUL",      "MUL_MAT",     "ROPE",
                                  "SWIGLU",   "KV_STORE", "ATTENTION",   "FFN_GATE_UP",
                                  "COPY",     "SCALE"};
    return op < sizeof(names) / sizeof(names[0]) ? names[op] : "unknown op";
}

/* ---- validation (shared by supports_op and execute_node) ---- */

#define WHY(...)                                                                           \
    do {                                                                                   \
        if (why)                                                                           \
            snprintf(why, why_len, __VA_ARGS__);                                           \
        return -1;                                                                         \
    } while (0)

/* Basic sanity of a tensor: positive extents, dim 0 contiguous. */
static int check_tensor(const struct minfer_tensor *t, const char *role, char *why,
                        size_t why_len)
{
    if (!t)
        WHY("%s is missing", role);
    const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
    if (!tr)
        WHY("%s has unknown type id %u", role, t->type);
    for (int i = 0; i < 4; i++)
        if (t->ne[i] <= 0)
            WHY("%s has ne[%d] = %lld (must be >= 1)", role, i, (long long)t->ne[i]);
    if (t->nb[0] != tr->type_size)
        WHY("%s is not contiguous in dim 0 (nb[0] = %zu, %s needs %u)", role, t->nb[0],
            tr->name, tr->type_size);
    if (t->ne[0] % tr->block_size)
        WHY("%s ne[0] = %lld is not a multiple of %s's block of %u", role, (long long)t->ne[0],
            tr->name, tr->block_size);
    return 0;
}

static int want_type(const struct minfer_tensor *t, uint32_t type, const char *role, char *why,
                     size_t why_len)
{
    if (t->type != type)
        WHY("%s is %s, expected %s", role, tname(t->type), tname(type));
    return 0;
}

static int need_src(const struct minfer_node *n, uint32_t count, char *why, size_t why_len)
{
    if (n->n_src < count)
        WHY("has %u sources, needs %u", n->n_src, count);
    for (uint32_t i = 0; i < count; i++) {
        char role[16];
        snprintf(role, sizeof(role), "src%u", i);
        if (check_tensor(n->src[i], role, why, why_len))
            return -1;
    }
    return check_tensor(n->dst, "dst", why, why_len);
}

static int aligned(const void *p, size_t a)
{
    return ((uintptr_t)p % a) == 0;
}

static int check_matmul(const struct minfer_tensor *w, const struct minfer_tensor *x,
                        const struct minfer_tensor *d, int check_ptrs, char *why, size_t why_len)
{
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    if (!k_matvec_q_supported(w->type) && !is_float_type(w->type))
        WHY("weight type %s has no CUDA matmul kernel", tname(w->type));
    if (w->ne[2] != 1 || w->ne[3] != 1 || x->ne[2] != 1 || x->ne[3] != 1)
        WHY("batched matmul (ne[2..3] > 1) is not supported");
    if (x->type != MINFER_TYPE_F32 || d->type != MINFER_TYPE_F32)
        WHY("activations must be f32 (src %s, dst %s)", tname(x->type), tname(d->type));
    if (x->ne[0] != K)
        WHY("weight K = %lld but activations have %lld", (long long)K, (long long)x->ne[0]);
    if (d->ne[0] != N || d->ne[1] != M || d->ne[2] != 1 || d->ne[3] != 1)
        WHY("dst is [%lld, %lld], expected [%lld, %lld]", (long long)d->ne[0],
            (long long)d->ne[1], (long long)N, (long long)M);
    if (N > 0x7fffffffLL || M > 0x7fffffffLL || K > 0x7fffffffLL)
        WHY("dimension beyond 2^31");
    if (k_matvec_q_supported(w->type)) {
        if (x->nb[1] % 4)
            WHY("activation row stride %zu is not a multiple of 4", x->nb[1]);
        int kq = w->type == MINFER_TYPE_Q4_K || w->type == MINFER_TYPE_Q5_K;
        if (kq && w->nb[1] % 16)
            WHY("%s weight row stride %zu is not a multiple of 16", tname(w->type), w->nb[1]);
        if (kq && check_ptrs && !aligned(w->data, 16))
            WHY("%s weight data %p is not 16-byte aligned", tname(w->type), w->data);
    }
    if (check_ptrs && (!aligned(x->data, 4) || !aligned(d->data, 4) || !w->data))
        WHY("misaligned or NULL data (w %p, x %p, dst %p)", w->data, x->data, d->data);
    return 0;
}

int cuda_validate(const struct minfer_node *n, int check_ptrs, char *why, size_t why_len)
{
    const struct minfer_tensor *s0 = n->src[0], *s1 = n->src[1], *d = n->dst;
    switch (n->op) {
    case MINFER_OP_GET_ROWS:
        if (need_src(n, 2, why, why_len))
            return -1;
        if (!k_type_readable(s0->type))
            WHY("table type %s is not readable by the CUDA plugin", tname(s0->type));
        if (want_type(s1, MINFER_TYPE_I32, "ids", why, why_len) ||
            want_type(d, MINFER_TYPE_F32, "dst", why, why_len))
            return -1;
        if (s0->ne[2] != 1 || s0->ne[3] != 1 || s1->ne[1] != 1 || s1->ne[2] != 1 ||
            s1->ne[3] != 1)
            WHY("table must be 2-D and ids 1-D");
        if (d->ne[0] != s0->ne[0] || d->ne[1] != s1->ne[0] || d->ne[2] != 1 || d->ne[3] != 1)
            WHY("dst is [%lld, %lld], expected [%lld, %lld]", (long long)d->ne[0],
                (long long)d->ne[1], (long long)s0->ne[0], (long long)s1->ne[0]);
        if (s1->ne[0] > 65535)
            WHY("%lld ids exceed 65535 per node", (long long)s1->ne[0]);
        return 0;
    case MINFER_OP_RMS_NORM:
    case MINFER_OP_RMS_NORM_MUL:
        if (need_src(n, n->op == MINFER_OP_RMS_NORM ? 1 : 2, why, why_len))
            return -1;
        if (want_type(s0, MINFER_TYPE_F32, "src0", why, why_len) ||
            want_type(d, MINFER_TYPE_F32, "dst", why, why_len))
            return -1;
        if (!same_ne(s0, d))
            WHY("dst shape differs from src0");
        if (n->op == MINFER_OP_RMS_NORM_MUL) {
            if (want_type(s1, MINFER_TYPE_F32, "src1 (weight)", why, why_len))
                return -1;
            if (s1->ne[0] != s0->ne[0] || s1->ne[1] * s1->ne[2] * s1->ne[3] != 1)
                WHY("weight must be [%lld] broadcast over rows", (long long)s0->ne[0]);
        }
        return 0;
    case MINFER_OP_ADD:
    case MINFER_OP_MUL:
    case MINFER_OP_SWIGLU:
        if (need_src(n, 2, why, why_len))
            return -1;
        if (want_type(s0, MINFER_TYPE_F32, "src0", why, why_len) ||
            want_type(s1, MINFER_TYPE_F32, "src1", why, why_len) ||
            want_type(d, MINFER_TYPE_F32, "dst", why, why_len))
            return -1;
        if (!same_ne(s0, d))
            WHY("dst shape differs from src0");
        if (n->op == MINFER_OP_SWIGLU) {
            if (!same_ne(s0, s1))
                WHY("src1 shape differs from src0");
        } else {
            if (s1->ne[0] != s0->ne[0])
                WHY("src1 ne[0] = %lld, src0 ne[0] = %lld", (long long)s1->ne[0],
                    (long long)s0->ne[0]);
            for (int i = 1; i < 4; i++)
                if (s1->ne[i] != 1 && s1->ne[i] != s0->ne[i])
                    WHY("src1 ne[%d] = %lld neither 1 nor %lld", i, (long long)s1->ne[i],
                        (long long)s0->ne[i]);
        }
        return 0;
    case MINFER_OP_SCALE:
        if (need_src(n, 1, why, why_len))
            return -1;
        if (want_type(s0, MINFER_TYPE_F32, "src0", why, why_len) ||
            want_type(d, MINFER_TYPE_F32, "dst", why, why_len))
            return -1;
        if (!same_ne(s0, d))
            WHY("dst shape differs from src0");
        return 0;
    case MINFER_OP_COPY:
        if (need_src(n, 1, why, why_len))
            return -1;
        if (!is_float_type(s0->type) || !is_float_type(d->type))
            WHY("copy %s -> %s: only f32/f16/bf16", tname(s0->type), tname(d->type));
        if (!same_ne(s0, d))
            WHY("dst shape differs from src0");
        return 0;
    case MINFER_OP_MUL_MAT:
        if (need_src(n, 2, why, why_len))
            return -1;
        return check_matmul(s0, s1, d, check_ptrs, why, why_len);
    case MINFER_OP_MUL_MAT_ADD: {
        if (need_src(n, 3, why, why_len) || check_matmul(s0, s1, d, check_ptrs, why, why_len))
            return -1;
        const struct minfer_tensor *a = n->src[2];
        if (want_type(a, MINFER_TYPE_F32, "addend", why, why_len))
            return -1;
        if (a->ne[0] != d->ne[0] || (a->ne[1] != d->ne[1] && a->ne[1] != 1) || a->ne[2] != 1 ||
            a->ne[3] != 1)
            WHY("addend [%lld, %lld] does not fit dst [%lld, %lld]", (long long)a->ne[0],
                (long long)a->ne[1], (long long)d->ne[0], (long long)d->ne[1]);
        if (a->nb[1] % 4 || d->nb[1] % 4)
            WHY("addend or dst row stride is not a multiple of 4");
        return 0;
    }
    case MINFER_OP_FFN_GATE_UP:
        if (need_src(n, 3, why, why_len))
            return -1;
        if (s0->type != s1->type || !same_ne(s0, s1))
            WHY("gate (%s) and up (%s) weights differ in type or shape", tname(s0->type),
                tname(s1->type));
        if (check_matmul(s1, n->src[2], d, check_ptrs, why, why_len))
            return -1;
        return check_matmul(s0, n->src[2], d, check_ptrs, why, why_len);
    case MINFER_OP_ROPE: {
        if (need_src(n, 2, why, why_len))
            return -1;
        if (want_type(s0, MINFER_TYPE_F32, "src0", why, why_len) ||
            want_type(s1, MINFER_TYPE_I32, "positions", why, why_len) ||
            want_type(d, MINFER_TYPE_F32, "dst", why, why_len))
            return -1;
        int n_rot = n->iparams[0];
        if (n_rot <= 0 || n_rot % 2 || n_rot > s0->ne[0])
            WHY("n_rot = %d must be even and in 2..head_dim (%lld)", n_rot,
                (long long)s0->ne[0]);
        if (s0->ne[3] != 1 || s0->ne[2] > 65535 || s1->ne[0] != s0->ne[2])
            WHY("positions [%lld] do not match %lld tokens (or ne[3] != 1)",
                (long long)s1->ne[0], (long long)s0->ne[2]);
        if (!same_ne(s0, d))
            WHY("dst shape differs from src0");
        return 0;
    }
    case MINFER_OP_KV_STORE:
        if (need_src(n, 2, why, why_len))
            return -1;
        if (want_type(s0, MINFER_TYPE_F32, "src0", why, why_len) ||
            want_type(s1, MINFER_TYPE_I32, "cells", why, why_len))
            return -1;
        if (d->type != MINFER_TYPE_F32 && d->type != MINFER_TYPE_F16 &&
            d->type != MINFER_TYPE_Q8_0)
            WHY("cache type %s (expected f32, f16 or q8_0)", tname(d->type));
        if (d->ne[0] != s0->ne[0] || s1->ne[0] != s0->ne[1] || s0->ne[2] != 1 ||
            s0->ne[3] != 1 || d->ne[2] != 1 || d->ne[3] != 1)
            WHY("shapes: rows [%lld, %lld], cells [%lld], cache [%lld, %lld]",
                (long long)s0->ne[0], (long long)s0->ne[1], (long long)s1->ne[0],
                (long long)d->ne[0], (long long)d->ne[1]);
        return 0;
    case MINFER_OP_ATTENTION: {
        if (need_src(n, 5, why, why_len))
            return -1;
        const struct minfer_tensor *kc = n->src[1], *vc = n->src[2];
        int64_t hd = s0->ne[0], nh = s0->ne[1], nt = s0->ne[2];
        int nkv = n->iparams[0];
        if (want_type(s0, MINFER_TYPE_F32, "q", why, why_len) ||
            want_type(n->src[3], MINFER_TYPE_I32, "kv_len", why, why_len) ||
            want_type(n->src[4], MINFER_TYPE_I32, "positions", why, why_len) ||
            want_type(d, MINFER_TYPE_F32, "dst", why, why_len))
            return -1;
        if (kc->type != vc->type || !same_ne(kc, vc))
            WHY("K (%s) and V (%s) caches differ in type or shape", tname(kc->type),
                tname(vc->type));
        if (kc->type != MINFER_TYPE_F32 && kc->type != MINFER_TYPE_F16 &&
            kc->type != MINFER_TYPE_Q8_0)
            WHY("cache type %s (expected f32, f16 or q8_0)", tname(kc->type));
        if (nkv <= 0 || nh % nkv)
            WHY("n_kv_head = %d does not divide n_head = %lld", nkv, (long long)nh);
        if (hd % 4 || hd > 256 || (kc->type == MINFER_TYPE_Q8_0 && hd % 32))
            WHY("head_dim = %lld (needs a multiple of 4, of 32 for q8_0, at most 256)",
                (long long)hd);
        if (kc->ne[0] != hd * nkv || kc->ne[2] != 1 || kc->ne[3] != 1)
            WHY("cache rows have %lld values, expected head_dim * n_kv_head = %lld",
                (long long)kc->ne[0], (long long)(hd * nkv));
        if (s0->ne[3] != 1 || nt > 65535 || nh > 65535 || n->src[4]->ne[0] != nt ||
            n->src[3]->ne[0] < 1)
            WHY("q is [%lld, %lld, %lld, %lld] with %lld positions", (long long)hd,
                (long long)nh, (long long)nt, (long long)s0->ne[3],
                (long long)n->src[4]->ne[0]);
        if (!same_ne(s0, d))
            WHY("dst shape differs from q");
        size_t va = kc->type == MINFER_TYPE_F32 ? 16 : kc->type == MINFER_TYPE_F16 ? 8 : 2;
        if (kc->nb[1] % va || vc->nb[1] % va)
            WHY("cache row strides %zu/%zu are not multiples of %zu", kc->nb[1], vc->nb[1],
                va);
        if (check_ptrs && (!aligned(kc->data, va) || !aligned(vc->data, va)))
            WHY("cache data %p/%p not %zu-byte aligned", kc->data, vc->data, va);
        return 0;
    }
    default:
        WHY("op %s (%u) is not implemented by the CUDA plugin", cuda_op_name(n->op), n->op);
    }
}
