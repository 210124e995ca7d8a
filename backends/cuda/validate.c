/*
 * validate.c — what the CUDA plugin runs: one validator shared by
 * supports_op and execute_node (and by the capture path, which checks
 * each node again with real addresses), so "supported" means exactly
 * "executable". What ir.h documents for every op (types, shapes, source
 * counts, params) is checked by minfer/ir-check.h; this file adds only
 * the limits of the kernels (readable types, grid sizes, alignments).
 * A refusal says which tensor and which value blocked it.
 */
#include <stdio.h>

#include "cuda-internal.h"
#include "minfer/ir-check.h"

static const char *tname(uint32_t t)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(t);
    return tr ? tr->name : "unknown";
}

#define WHY(...)                                                                           \
    do {                                                                                   \
        if (why)                                                                           \
            snprintf(why, why_len, __VA_ARGS__);                                           \
        return -1;                                                                         \
    } while (0)

static int aligned(const void *p, size_t a)
{
    return ((uintptr_t)p % a) == 0;
}

/* Weight w [K, N] against activations x: a kernel for w's type, and the
 * strides and addresses the vector loads assume. */
static int check_matmul(const struct minfer_tensor *w, const struct minfer_tensor *x,
                        const struct minfer_tensor *d, int check_ptrs, char *why, size_t why_len)
{
    if (!k_matvec_q_supported(w->type) && !is_float_type(w->type))
        WHY("weight type %s has no CUDA matmul kernel", tname(w->type));
    if (k_matvec_q_supported(w->type)) {
        if (x->nb[1] % 4)
            WHY("activation row stride %zu is not a multiple of 4", x->nb[1]);
        int kq = w->type == MINFER_TYPE_Q4_K || w->type == MINFER_TYPE_Q5_K;
        if (kq && w->nb[1] % 16)
            WHY("%s weight row stride %zu is not a multiple of 16", tname(w->type), w->nb[1]);
        if (kq && check_ptrs && !aligned(w->data, 16))
            WHY("%s weight data %p is not 16-byte aligned", tname(w->type), w->data);
    }
    if (check_ptrs && (!aligned(x->data, 4) || !aligned(d->data, 4)))
        WHY("misaligned data (w %p, x %p, dst %p)", w->data, x->data, d->data);
    return 0;
}

static int check_attention(const struct minfer_node *n, int check_ptrs, char *why,
                           size_t why_len)
{
    const struct minfer_tensor *q = n->src[0], *kc = n->src[1], *vc = n->src[2];
    int64_t hd = q->ne[0], nh = q->ne[1], nt = q->ne[2];
    if (hd % 4 || hd > 256)
        WHY("head_dim = %lld (needs a multiple of 4, at most 256)", (long long)hd);
    if (nt > 65535 || nh > 65535)
        WHY("%lld tokens of %lld heads (each at most 65535 per launch)", (long long)nt,
            (long long)nh);
    size_t va = kc->type == MINFER_TYPE_F32 ? 16 : kc->type == MINFER_TYPE_F16 ? 8 : 2;
    if (kc->nb[1] % va || vc->nb[1] % va)
        WHY("cache row strides %zu/%zu are not multiples of %zu", kc->nb[1], vc->nb[1], va);
    if (check_ptrs && (!aligned(kc->data, va) || !aligned(vc->data, va)))
        WHY("cache data %p/%p not %zu-byte aligned", kc->data, vc->data, va);
    return 0;
}

int cuda_validate(const struct minfer_node *n, int check_ptrs, char *why, size_t why_len)
{
    if (minfer_ir_check_node(n, check_ptrs ? MINFER_IR_CHECK_DATA : 0, why, why_len))
        return -1;
    const struct minfer_tensor *s0 = n->src[0], *s1 = n->src[1], *d = n->dst;
    switch (n->op) {
    case MINFER_OP_GET_ROWS:
        if (!k_type_readable(s0->type))
            WHY("table type %s is not readable by the CUDA plugin", tname(s0->type));
        if (s1->ne[0] > 65535)
            WHY("%lld ids exceed 65535 per node", (long long)s1->ne[0]);
        return 0;
    case MINFER_OP_MUL_MAT:
        return check_matmul(s0, s1, d, check_ptrs, why, why_len);
    case MINFER_OP_MUL_MAT_ADD:
        if (check_matmul(s0, s1, d, check_ptrs, why, why_len))
            return -1;
        if (n->src[2]->nb[1] % 4 || d->nb[1] % 4)
            WHY("addend or dst row stride is not a multiple of 4");
        return 0;
    case MINFER_OP_FFN_GATE_UP:
        if (check_matmul(s1, n->src[2], d, check_ptrs, why, why_len))
            return -1;
        return check_matmul(s0, n->src[2], d, check_ptrs, why, why_len);
    case MINFER_OP_MUL_MAT_ID:
        if (!k_type_readable(s0->type) || s0->type == MINFER_TYPE_Q8_1 ||
            s0->type == MINFER_TYPE_Q8_K)
            WHY("expert weight type %s has no CUDA MUL_MAT_ID kernel", tname(s0->type));
        if (s0->ne[0] % 8 || s0->ne[2] > 8192)
            WHY("K %lld (needs a multiple of 8) or %lld experts (at most 8192)",
                (long long)s0->ne[0], (long long)s0->ne[2]);
        if (s1->nb[1] % 4 || s1->nb[2] % 4 || (check_ptrs && !aligned(s1->data, 4)))
            WHY("activations are not 4-byte aligned");
        return 0;
    case MINFER_OP_TOPK:
        if (s0->ne[0] > 4096)
            WHY("TOPK over %lld values (at most 4096)", (long long)s0->ne[0]);
        return 0;
    case MINFER_OP_ROPE:
    case MINFER_OP_ROPE_DIV:
        if (s0->ne[2] > 65535)
            WHY("%lld tokens exceed 65535 per launch", (long long)s0->ne[2]);
        return 0;
    case MINFER_OP_ATTENTION:
        return check_attention(n, check_ptrs, why, why_len);
    case MINFER_OP_ATTENTION_LISTS:
        return check_attention(n, check_ptrs, why, why_len);
    default: /* the other ops of ir.h run as the contract allows */
        return 0;
    }
}
