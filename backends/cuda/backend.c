/*
 * backend.c — libminfer-cuda.so's plugin table and the only code that
 * knows IR nodes: it validates each node (supports_op and execute_node use
 * one validator, so "supported" means exactly "executable"), picks the
 * kernel family and calls the launchers in kernels/ through the device
 * layer (device.c), which is the only code that calls the CUDA runtime.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kernels.h"
#include "minfer/backend.h"
#include "minfer/quant.h"

#ifndef MINFER_CUDA_PLUGIN_VERSION
#define MINFER_CUDA_PLUGIN_VERSION "0.1.0"
#endif

/* Scratch slots of an instance. */
enum { SLOT_XQ = 0, SLOT_FFN = 1, SLOT_ATTN = 2, SLOT_SPLIT = 3 };

/* Above this many tokens MUL_MAT / FFN_GATE_UP use the tensor-core GEMM. */
#define MMV_MAX_NT 8

/* Graph replay: passes a window runs directly before it is captured. */
#define GRAPH_WARMUP 2
/* Windows remembered per instance (least recently used one is dropped). */
#define GRAPH_CACHE 32

/* One replay window (uid, first, last): warm-up count, then a captured
 * and instantiated graph valid while both generations hold. */
struct gentry {
    uint64_t uid;
    uint32_t first, last;
    uint64_t win_gen;  /* the scheduler's generation (arena, KV layout) */
    uint64_t pool_gen; /* the plugin's pool generation (scratch growth) */
    int warm;          /* direct passes seen at these generations */
    void *exec;        /* cudaGraphExec_t once captured */
    uint64_t used;     /* LRU tick */
};

/* What SLOT_XQ holds: the q8_1 blocks of activations x [K, M] (rows nb1
 * bytes apart) at xq. Valid only inside one FFN_GATE_UP node (gate and up
 * share x) or one capture window, where every node's dst is checked
 * against x and a write anywhere into x drops it (xq_note_write). */
struct xq_cache {
    bool valid;
    const void *x;
    int64_t K, M, nb1;
    void *xq;
};

struct minfer_backend {
    struct cu_ctx *c;
    struct xq_cache xq;
    bool graphs_off;   /* config switch, $MINFER_CUDA_NO_GRAPHS, or a failed capture */
    bool fuse_off;     /* $MINFER_CUDA_NO_FUSE: captures keep every node separate */
    struct gentry gc[GRAPH_CACHE];
    uint64_t tick;
};

static const struct minfer_host *g_host;
static char g_err[512]; /* errors of create (be == NULL) */

/* Process-wide counters and the test hook (get_proc). */
struct minfer_cuda_graph_stats {
    uint64_t captures;  /* graphs captured and instantiated */
    uint64_t replays;   /* windows run from a captured graph */
    uint64_t aborts;    /* captures aborted (graphs then off for that instance) */
};
static uint64_t g_fused_adds; /* MUL_MAT + ADD pairs captured as one matvec */
static uint64_t g_fused_norm_ropes; /* (norm, norm, RoPE, RoPE) captured as one launch */
static uint64_t g_fused_rope_seq; /* RoPE pairs captured by the read-first kernel */
static uint64_t g_fused_rope_kv;  /* ... of which with the K and V stores in the same launch */
static uint64_t g_fused_groups;   /* decode products of one x (Q, K, V) captured as one launch */
static struct minfer_cuda_graph_stats g_stats;
static int g_fail_next_capture; /* atomic: captures still to fail on purpose */

/* ---- helpers ---- */

static const char *tname(uint32_t t)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(t);
    return tr ? tr->name : "unknown";
}

static const char *op_name(uint32_t op)
{
    static const char *names[] = {"NONE",     "GET_ROWS", "RMS_NORM",    "RMS_NORM_MUL",
                                  "ADD",      "MUL",      "MUL_MAT",     "ROPE",
                                  "SWIGLU",   "KV_STORE", "ATTENTION",   "FFN_GATE_UP",
                                  "COPY",     "SCALE"};
    return op < sizeof(names) / sizeof(names[0]) ? names[op] : "unknown op";
}

static int is_float_type(uint32_t t)
{
    return t == MINFER_TYPE_F32 || t == MINFER_TYPE_F16 || t == MINFER_TYPE_BF16;
}

static struct kview view_of(const struct minfer_tensor *t)
{
    struct kview v;
    v.data = t->data;
    for (int i = 0; i < 4; i++) {
        v.ne[i] = t->ne[i];
        v.nb[i] = (int64_t)t->nb[i];
    }
    return v;
}

static int same_ne(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    for (int i = 0; i < 4; i++)
        if (a->ne[i] != b->ne[i])
            return 0;
    return 1;
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

static int validate(const struct minfer_node *n, int check_ptrs, char *why, size_t why_len)
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
        WHY("op %s (%u) is not implemented by the CUDA plugin", op_name(n->op), n->op);
    }
}

/* ---- execution ---- */

static minfer_status node_fail(struct minfer_backend *be, const struct minfer_node *n,
                               minfer_status st, const char *what)
{
    return cu_ctx_fail(be->c, st, "cuda: node %u (%s, %s): %s", n->index,
                       n->label ? n->label : "?", op_name(n->op), what);
}

/* Runs a launcher's result: -1 -> BACKEND error naming the node and site. */
#define LAUNCH(expr)                                                                       \
    do {                                                                                   \
        if ((expr) != 0)                                                                   \
            return node_fail(be, n, MINFER_ERR_BACKEND, k->err);                           \
    } while (0)

static size_t round256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* The tensor-core GEMM (kernels/gemm.cu). Its f16 activations and
 * dequantized weights live in SLOT_SPLIT. Float weights keep the f32
 * activations: x = hi + lo with hi = f16(x) and lo = f16(x - hi), dst =
 * W.hi + W.lo. Rounding the activations to f16 alone costs ~3e-3 on
 * logits (fixture-A, a 24-token pass); the split brings prefill to the
 * f32 path's accuracy (relative error ~2^-22 per activation) for twice
 * the GEMM work. Quantized weights need none of this: both backends
 * quantize activations to 8 bits there. */
static minfer_status run_gemm(struct minfer_backend *be, const struct minfer_node *n,
                              struct kctx *k, const struct minfer_tensor *w,
                              const struct minfer_tensor *x, float *dst, int64_t dst_nb1)
{
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    bool split = is_float_type(w->type);
    if ((size_t)K > SIZE_MAX / 16 / (size_t)M)
        return node_fail(be, n, MINFER_ERR_RANGE, "GEMM scratch size overflows");
    size_t act = round256(k_gemm_act_bytes(K, M));
    size_t ws = k_gemm_scratch_bytes(k, w->type, w->data, K, N, M, (int64_t)w->nb[1]);
    if (ws > SIZE_MAX / 2 - 3 * act)
        return node_fail(be, n, MINFER_ERR_RANGE, "GEMM scratch size overflows");
    void *base = NULL;
    minfer_status st = cu_scratch(be->c, SLOT_SPLIT, (split ? 2 : 1) * act + ws, &base);
    if (st != MINFER_OK)
        return node_fail(be, n, st, cu_ctx_error(be->c));
    char *xh = base, *xl = split ? xh + act : NULL, *wh = xh + (split ? 2 : 1) * act;
    LAUNCH(k_gemm_act(k, x->data, K, M, (int64_t)x->nb[1], xh, xl));
    LAUNCH(k_gemm(k, w->type, w->data, K, N, (int64_t)w->nb[1], xh, xl, M, dst, dst_nb1,
                  ws ? wh : NULL));
    return MINFER_OK;
}

/* q8_1 blocks of x [K, M] in SLOT_XQ: launches the quantization unless
 * be->xq says the slot already holds exactly this x. */
static minfer_status quantized_x(struct minfer_backend *be, const struct minfer_node *n,
                                 struct kctx *k, const float *xd, int64_t K, int64_t M,
                                 int64_t xnb1, void **out)
{
    void *xq = NULL;
    *out = NULL;
    minfer_status st = cu_scratch(be->c, SLOT_XQ, k_q8_1_bytes(K, M), &xq);
    if (st != MINFER_OK)
        return node_fail(be, n, st, cu_ctx_error(be->c));
    struct xq_cache *qc = &be->xq;
    if (!(qc->valid && qc->x == (const void *)xd && qc->K == K && qc->M == M &&
          qc->nb1 == xnb1 && qc->xq == xq)) {
        qc->valid = false;
        LAUNCH(k_quantize_q8_1(k, xd, K, M, xnb1, xq));
        *qc = (struct xq_cache){true, xd, K, M, xnb1, xq};
    }
    *out = xq;
    return MINFER_OK;
}

/* dst[N, M] = W . x, choosing the kernel family by token count. epi
 * (NULL: none) asks the matvec for a fused ADD; the caller only passes
 * one when M <= MMV_MAX_NT. Quantized activations are reused from
 * be->xq when it holds exactly this x. */
static minfer_status run_matmul(struct minfer_backend *be, const struct minfer_node *n,
                                struct kctx *k, const struct minfer_tensor *w,
                                const struct minfer_tensor *x, float *dst, int64_t dst_nb1,
                                const struct kepi *epi)
{
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    const float *xd = x->data;
    int64_t xnb1 = (int64_t)x->nb[1];
    if (epi && M > MMV_MAX_NT)
        return node_fail(be, n, MINFER_ERR_STATE, "fused ADD on a GEMM-sized product");
    if (M > MMV_MAX_NT && k->gemm_optin_ok && k_gemm_supported(w->type) && K % 32 == 0)
        return run_gemm(be, n, k, w, x, dst, dst_nb1);
    if (is_float_type(w->type)) {
        LAUNCH(k_matvec_f_epi(k, w->type, w->data, K, N, (int64_t)w->nb[1], xd, xnb1, M, dst,
                              dst_nb1, epi));
        return MINFER_OK;
    }
    void *xq = NULL;
    minfer_status st = quantized_x(be, n, k, xd, K, M, xnb1, &xq);
    if (st != MINFER_OK)
        return st;
    size_t xrow = k_q8_1_bytes(K, 1);
    for (int64_t m0 = 0; m0 < M; m0 += MMV_MAX_NT) {
        int64_t mc = M - m0 < MMV_MAX_NT ? M - m0 : MMV_MAX_NT;
        LAUNCH(k_matvec_q_epi(k, w->type, w->data, K, N, (int64_t)w->nb[1],
                              (const char *)xq + (size_t)m0 * xrow, mc,
                              (float *)((char *)dst + m0 * dst_nb1), dst_nb1, epi));
    }
    return MINFER_OK;
}

/* Byte range a tensor's elements can touch (conservative for block types). */
static void byte_range(const struct minfer_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t b = (uintptr_t)t->data, span = (uintptr_t)t->ne[0] * t->nb[0];
    for (int i = 1; i < 4; i++)
        span += (uintptr_t)(t->ne[i] - 1) * t->nb[i];
    *lo = b;
    *hi = b + span;
}

static int overlaps(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    uintptr_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* The epilogue of a MUL_MAT_ADD node for the matvec kernels: dst = the
 * product + src2, the product itself not kept. */
static struct kepi sum_epi(const struct minfer_node *n)
{
    const struct minfer_tensor *a = n->src[2], *d = n->dst;
    return (struct kepi){a->data, a->ne[1] == 1 ? 0 : (int64_t)a->nb[1], d->data,
                         (int64_t)d->nb[1], 1};
}

/* MUL_MAT_ADD: the matvec adds in its epilogue (each output read-then-
 * written by one thread, so src2 may even be dst); GEMM-sized products
 * go to dst, or to scratch when src2 shares dst's bytes, then one ADD. */
static minfer_status run_matmul_add(struct minfer_backend *be, const struct minfer_node *n,
                                    struct kctx *k)
{
    const struct minfer_tensor *w = n->src[0], *x = n->src[1], *a = n->src[2], *d = n->dst;
    int64_t N = d->ne[0], M = d->ne[1];
    if (M <= MMV_MAX_NT) {
        struct kepi e = sum_epi(n);
        return run_matmul(be, n, k, w, x, d->data, (int64_t)d->nb[1], &e);
    }
    float *prod = d->data;
    int64_t prod_nb1 = (int64_t)d->nb[1];
    if (overlaps(a, d)) {
        void *tmp = NULL;
        minfer_status st = cu_scratch(be->c, SLOT_FFN, (size_t)N * (size_t)M * 4, &tmp);
        if (st != MINFER_OK)
            return node_fail(be, n, st, cu_ctx_error(be->c));
        prod = tmp;
        prod_nb1 = N * 4;
    }
    minfer_status st = run_matmul(be, n, k, w, x, prod, prod_nb1, NULL);
    if (st != MINFER_OK)
        return st;
    struct kview vp = {prod, {N, M, 1, 1}, {4, prod_nb1, prod_nb1 * M, prod_nb1 * M}};
    LAUNCH(k_binary(k, KBIN_ADD, vp, view_of(a), view_of(d)));
    return MINFER_OK;
}

/* ATTENTION; xq_next (NULL: none) is the MUL_MAT that reads its output
 * as quantized activations: the combine pass then writes the q8_1 blocks
 * into SLOT_XQ too and be->xq records them. */
static minfer_status run_attention(struct minfer_backend *be, const struct minfer_node *n,
                                   struct kctx *k, const struct minfer_node *xq_next)
{
    const struct minfer_tensor *s0 = n->src[0], *d = n->dst;
    const struct minfer_tensor *kc = n->src[1], *vc = n->src[2];
    size_t need = k_attn_scratch_bytes(s0->ne[0], s0->ne[1], s0->ne[2], kc->ne[1]);
    void *part = NULL, *xq = NULL;
    minfer_status st = cu_scratch(be->c, SLOT_ATTN, need, &part);
    if (st != MINFER_OK)
        return node_fail(be, n, st, cu_ctx_error(be->c));
    const struct minfer_tensor *x = xq_next ? xq_next->src[1] : NULL;
    if (x) {
        be->xq.valid = false;
        st = cu_scratch(be->c, SLOT_XQ, k_q8_1_bytes(x->ne[0], x->ne[1]), &xq);
        if (st != MINFER_OK)
            return node_fail(be, n, st, cu_ctx_error(be->c));
    }
    LAUNCH(k_attention_q(k, view_of(s0), kc->type, kc->data, vc->data, (int64_t)kc->nb[1],
                         (int64_t)vc->nb[1], kc->ne[1], n->iparams[0], n->src[3]->data,
                         n->src[4]->data, n->fparams[0], view_of(d), part, xq));
    if (x)
        be->xq = (struct xq_cache){true, x->data, x->ne[0], x->ne[1], (int64_t)x->nb[1], xq};
    return MINFER_OK;
}

static minfer_status exec(struct minfer_backend *be, const struct minfer_node *n,
                          struct kctx *k)
{
    const struct minfer_tensor *s0 = n->src[0], *s1 = n->src[1], *d = n->dst;
    switch (n->op) {
    case MINFER_OP_GET_ROWS:
        LAUNCH(k_get_rows(k, s0->type, s0->data, s0->ne[0], s0->ne[1], (int64_t)s0->nb[1],
                          s1->data, s1->ne[0], d->data, (int64_t)d->nb[1]));
        return MINFER_OK;
    case MINFER_OP_RMS_NORM:
        LAUNCH(k_rms_norm(k, view_of(s0), NULL, view_of(d), n->fparams[0]));
        return MINFER_OK;
    case MINFER_OP_RMS_NORM_MUL:
        LAUNCH(k_rms_norm(k, view_of(s0), s1->data, view_of(d), n->fparams[0]));
        return MINFER_OK;
    case MINFER_OP_ADD:
        LAUNCH(k_binary(k, KBIN_ADD, view_of(s0), view_of(s1), view_of(d)));
        return MINFER_OK;
    case MINFER_OP_MUL:
        LAUNCH(k_binary(k, KBIN_MUL, view_of(s0), view_of(s1), view_of(d)));
        return MINFER_OK;
    case MINFER_OP_SWIGLU:
        LAUNCH(k_binary(k, KBIN_SWIGLU, view_of(s0), view_of(s1), view_of(d)));
        return MINFER_OK;
    case MINFER_OP_SCALE:
        LAUNCH(k_scale(k, view_of(s0), view_of(d), n->fparams[0]));
        return MINFER_OK;
    case MINFER_OP_COPY:
        LAUNCH(k_copy(k, s0->type, view_of(s0), d->type, view_of(d)));
        return MINFER_OK;
    case MINFER_OP_MUL_MAT:
        return run_matmul(be, n, k, s0, s1, d->data, (int64_t)d->nb[1], NULL);
    case MINFER_OP_MUL_MAT_ADD:
        return run_matmul_add(be, n, k);
    case MINFER_OP_FFN_GATE_UP: {
        int64_t N = s0->ne[1], M = n->src[2]->ne[1];
        if (M == 1 && k_matvec_q_supported(s0->type) && s0->nb[1] == s1->nb[1] && !be->fuse_off) {
            /* decode: one launch for gate, up and SwiGLU */
            const struct minfer_tensor *x = n->src[2];
            int64_t K = s0->ne[0];
            void *xq = NULL;
            minfer_status st = quantized_x(be, n, k, x->data, K, 1, (int64_t)x->nb[1], &xq);
            if (st != MINFER_OK)
                return st;
            LAUNCH(k_matvec_q_glu(k, s0->type, s0->data, s1->data, K, N, (int64_t)s0->nb[1], xq,
                                  d->data));
            return MINFER_OK;
        }
        size_t plane = (size_t)N * (size_t)M * sizeof(float);
        void *gu = NULL;
        minfer_status st = cu_scratch(be->c, SLOT_FFN, 2 * plane, &gu);
        if (st != MINFER_OK)
            return node_fail(be, n, st, cu_ctx_error(be->c));
        float *g = gu, *u = (float *)((char *)gu + plane);
        /* gate and up quantize x once (be->xq: the second call finds it) */
        st = run_matmul(be, n, k, s0, n->src[2], g, N * 4, NULL);
        if (st == MINFER_OK)
            st = run_matmul(be, n, k, s1, n->src[2], u, N * 4, NULL);
        if (st != MINFER_OK)
            return st;
        struct kview vg = {g, {N, M, 1, 1}, {4, N * 4, N * 4 * M, N * 4 * M}};
        struct kview vu = {u, {N, M, 1, 1}, {4, N * 4, N * 4 * M, N * 4 * M}};
        LAUNCH(k_binary(k, KBIN_SWIGLU, vg, vu, view_of(d)));
        return MINFER_OK;
    }
    case MINFER_OP_ROPE:
        LAUNCH(k_rope(k, view_of(s0), s1->data, view_of(d), n->iparams[0], n->fparams[0],
                      n->fparams[1]));
        return MINFER_OK;
    case MINFER_OP_KV_STORE:
        LAUNCH(k_kv_store(k, view_of(s0), s1->data, d->type, d->data, (int64_t)d->nb[1],
                          d->ne[1]));
        return MINFER_OK;
    case MINFER_OP_ATTENTION:
        return run_attention(be, n, k, NULL);
    default:
        return node_fail(be, n, MINFER_ERR_UNSUPPORTED, "op not implemented");
    }
}

/* ---- graph replay ---- */

static void gentry_drop(struct minfer_backend *be, struct gentry *e)
{
    cu_graph_destroy(be->c, e->exec);
    memset(e, 0, sizeof(*e));
}

/* The entry of (uid, first, last), or a free / least recently used slot
 * reset for it. */
static struct gentry *gentry_get(struct minfer_backend *be, const struct minfer_replay_window *w)
{
    struct gentry *victim = &be->gc[0];
    for (int i = 0; i < GRAPH_CACHE; i++) {
        struct gentry *e = &be->gc[i];
        if (e->used && e->uid == w->uid && e->first == w->first && e->last == w->last)
            return e;
        if (!e->used || (victim->used && e->used < victim->used))
            victim = e;
    }
    gentry_drop(be, victim);
    victim->uid = w->uid;
    victim->first = w->first;
    victim->last = w->last;
    return victim;
}

static void graphs_disable(struct minfer_backend *be, const char *why)
{
    be->graphs_off = true;
    __atomic_add_fetch(&g_stats.aborts, 1, __ATOMIC_RELAXED);
    for (int i = 0; i < GRAPH_CACHE; i++)
        gentry_drop(be, &be->gc[i]);
    if (g_host && g_host->log)
        g_host->log(MINFER_LOG_WARN,
                    "cuda: graph capture aborted: %s; CUDA graphs are now OFF for this "
                    "context (nodes run by direct launches, same results)",
                    why);
}

/* ---- in-window fusion (capture only: the window shows the next nodes) ---- */

/* A node wrote t: drop be->xq if t may overlap the activations it holds. */
static void xq_note_write(struct minfer_backend *be, const struct minfer_tensor *t)
{
    struct xq_cache *qc = &be->xq;
    if (!qc->valid || !t)
        return;
    uintptr_t lo, hi;
    byte_range(t, &lo, &hi);
    uintptr_t xlo = (uintptr_t)qc->x, xhi = xlo + (uintptr_t)(qc->M - 1) * (uintptr_t)qc->nb1 +
                                                (uintptr_t)qc->K * 4;
    if (lo < xhi && xlo < hi)
        qc->valid = false;
}

static int is_plain_f32_2d(const struct minfer_tensor *t)
{
    return t && t->type == MINFER_TYPE_F32 && t->nb[0] == 4 && t->ne[2] == 1 && t->ne[3] == 1 &&
           t->data && ((uintptr_t)t->data % 4) == 0 && t->nb[1] % 4 == 0;
}

/* If a (the node after MUL_MAT m) is an ADD of m's product and a [N, M] or
 * broadcast [N, 1] f32 tensor that the matvec epilogue can apply, fills
 * *e and returns 1. m's dst is still written, so later readers of the
 * product see it as before. */
static int fusable_add(const struct minfer_node *m, const struct minfer_node *a, struct kepi *e)
{
    if (m->op != MINFER_OP_MUL_MAT || a->op != MINFER_OP_ADD || a->n_src < 2 || m->n_src < 2)
        return 0;
    const struct minfer_tensor *d = m->dst, *x = m->src[1], *a0 = a->src[0], *a1 = a->src[1];
    const struct minfer_tensor *ad = a->dst, *other;
    int64_t N = d->ne[0], M = d->ne[1];
    if (M > MMV_MAX_NT || !is_plain_f32_2d(d) || !is_plain_f32_2d(ad) || !is_plain_f32_2d(a0) ||
        !is_plain_f32_2d(a1))
        return 0;
    if (a0->ne[0] != N || a0->ne[1] != M || !same_ne(ad, a0))
        return 0; /* the ADD iterates over src0's shape */
    if (a0->data == d->data && same_ne(a0, d) && a0->nb[1] == d->nb[1])
        other = a1;
    else if (a1->data == d->data && same_ne(a1, d) && a1->nb[1] == d->nb[1])
        other = a0;
    else
        return 0;
    if (other->ne[0] != N || (other->ne[1] != M && other->ne[1] != 1))
        return 0;
    /* the epilogue reads other and writes ad while other threads write d
     * and (float path) read x: only exact aliasing of ad with d or other.
     * A quantized weight's matvec reads x only through its q8_1 blocks,
     * made before the launch, so ad may then land on x (the arena hands
     * the attention output's or the FFN hidden state's bytes, freed by
     * this product, to the residual sum). */
    int reads_x = is_float_type(m->src[0]->type);
    if (overlaps(other, d) || (reads_x && (overlaps(ad, x) || overlaps(other, x))))
        return 0;
    if (overlaps(ad, d) && !(ad->data == d->data && ad->nb[1] == d->nb[1]))
        return 0;
    if (overlaps(ad, other) && !(ad->data == other->data && ad->nb[1] == other->nb[1] &&
                                 other->ne[1] == M))
        return 0;
    e->add = other->data;
    e->add_nb1 = other->ne[1] == 1 ? 0 : (int64_t)other->nb[1];
    e->dst2 = ad->data;
    e->dst2_nb1 = (int64_t)ad->nb[1];
    return 1;
}

/* If n is an RMS norm whose output a (the next node) reads as the
 * activations of a quantized matvec, returns 1: the norm can write the
 * q8_1 blocks too. */
static int norm_feeds_q(const struct minfer_node *n, const struct minfer_node *a)
{
    if ((n->op != MINFER_OP_RMS_NORM && n->op != MINFER_OP_RMS_NORM_MUL) || !n->dst)
        return 0;
    const struct minfer_tensor *d = n->dst, *w, *x;
    if ((a->op == MINFER_OP_MUL_MAT || a->op == MINFER_OP_MUL_MAT_ADD) && a->n_src >= 2) {
        w = a->src[0];
        x = a->src[1];
    } else if (a->op == MINFER_OP_FFN_GATE_UP && a->n_src >= 3) {
        w = a->src[0];
        x = a->src[2];
    } else {
        return 0;
    }
    if (!w || !x || !k_matvec_q_supported(w->type) || !is_plain_f32_2d(d) || d->ne[0] % 32 ||
        n->src[0]->ne[2] != 1 || n->src[0]->ne[3] != 1)
        return 0;
    return x->data == d->data && same_ne(x, d) && x->nb[1] == d->nb[1] &&
           x->ne[1] <= MMV_MAX_NT && w->ne[0] == d->ne[0];
}

/* Two nodes that may run in one launch: neither writes what the other
 * reads or writes. */
static int independent(const struct minfer_node *n, const struct minfer_node *a)
{
    return !overlaps(n->dst, a->src[0]) && !overlaps(a->dst, n->src[0]) &&
           !overlaps(n->dst, a->dst) && !overlaps(n->dst, a->src[1]) &&
           !overlaps(a->dst, n->src[1]);
}

/* ROPE, ROPE with the same positions and parameters. */
static int rope_same(const struct minfer_node *n, const struct minfer_node *a)
{
    if (n->op != MINFER_OP_ROPE || a->op != MINFER_OP_ROPE || n->n_src < 2 || a->n_src < 2)
        return 0;
    return n->src[1]->data == a->src[1]->data && same_ne(n->src[1], a->src[1]) &&
           n->iparams[0] == a->iparams[0] && n->fparams[0] == a->fparams[0] &&
           n->fparams[1] == a->fparams[1] && n->src[0]->ne[2] == a->src[0]->ne[2];
}

/* ROPE, ROPE that may run as one launch (q and k). */
static int rope_pair(const struct minfer_node *n, const struct minfer_node *a)
{
    return rope_same(n, a) && independent(n, a);
}

/* KV_STORE, KV_STORE with the same cells (k and v). */
static int kv_pair(const struct minfer_node *n, const struct minfer_node *a)
{
    if (n->op != MINFER_OP_KV_STORE || a->op != MINFER_OP_KV_STORE || n->n_src < 2 ||
        a->n_src < 2)
        return 0;
    return n->src[1]->data == a->src[1]->data && same_ne(n->src[1], a->src[1]) &&
           n->src[0]->ne[1] == a->src[0]->ne[1] && independent(n, a);
}

static int is_norm(const struct minfer_node *n)
{
    if (n->op == MINFER_OP_RMS_NORM)
        return n->n_src >= 1 && n->src[0] && n->dst;
    return n->op == MINFER_OP_RMS_NORM_MUL && n->n_src >= 2 && n->src[0] && n->src[1] && n->dst;
}

/* The same tensor as a RoPE source: data, shape and strides. */
static int same_view(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    if (a->data != b->data || a->type != b->type || !same_ne(a, b))
        return 0;
    for (int i = 0; i < 4; i++)
        if (a->ne[i] > 1 && a->nb[i] != b->nb[i])
            return 0;
    return 1;
}

/* nq, nk, rq, rk (four consecutive nodes) = RMS norm of q, RMS norm of k,
 * RoPE of q's norm, RoPE of k's norm (Qwen3's per-head norms) for one
 * token: one k_norm_rope2 launch, when the norms' outputs are exactly the
 * RoPE sources, the RoPEs share positions and parameters, both have the
 * same head_dim and no node writes a source of a later one of the four. The kernel reads
 * everything first and writes in node order, so the overlaps the arena
 * makes by reusing freed bytes (k's norm inside q, a RoPE inside the
 * other pair's norm) are fine. */
static int norm_rope_quad(const struct minfer_node *nq, const struct minfer_node *nk,
                          const struct minfer_node *rq, const struct minfer_node *rk)
{
    if (!is_norm(nq) || !is_norm(nk) || !rope_same(rq, rk))
        return 0;
    if (!same_view(nq->dst, rq->src[0]) || !same_view(nk->dst, rk->src[0]))
        return 0;
    const struct minfer_tensor *xq = nq->src[0], *xk = nk->src[0];
    if (xq->ne[2] != 1 || xq->ne[3] != 1 || xk->ne[2] != 1 || xk->ne[3] != 1 ||
        !same_ne(xq, nq->dst) || !same_ne(xk, nk->dst) || xq->ne[0] != xk->ne[0] ||
        k_norm_rope2_smem(xq->ne[0], xq->ne[1] + xk->ne[1]) > 48 * 1024)
        return 0;
    const struct minfer_tensor *wk = nk->op == MINFER_OP_RMS_NORM_MUL ? nk->src[1] : NULL;
    const struct minfer_tensor *pos = rq->src[1];
    /* what a node reads must not be written by one before it (rk's dst
     * may land on q's norm or x: the kernel has read them by then) */
    if (overlaps(nq->dst, xk) || (wk && overlaps(nq->dst, wk)) || overlaps(nq->dst, nk->dst) ||
        overlaps(nq->dst, pos) || overlaps(nk->dst, pos) || overlaps(rq->dst, nk->dst) ||
        overlaps(rq->dst, pos))
        return 0;
    return 1;
}

/* ROPE, ROPE of one token with the same positions and parameters that
 * k_norm_rope2 (without norms) can run as one launch: it reads both
 * sources before writing, so the second's dst may land on the first's
 * source (the arena reuses q's bytes once its RoPE has read them, which
 * rope_pair refuses). Refused when the first writes what the second
 * reads. */
static int rope_pair_seq(const struct minfer_node *n, const struct minfer_node *a)
{
    if (!rope_same(n, a))
        return 0;
    const struct minfer_tensor *x0 = n->src[0], *x1 = a->src[0];
    return x0->ne[2] == 1 && x0->ne[3] == 1 && x1->ne[3] == 1 && x0->ne[0] == x1->ne[0] &&
           k_norm_rope2_smem(x0->ne[0], x0->ne[1] + x1->ne[1]) <= 48 * 1024 &&
           !overlaps(n->dst, x1) && !overlaps(n->dst, a->src[1]) && !overlaps(a->dst, a->src[1]);
}

/* ATTENTION whose output a (the next node) reads, reshaped to
 * [hd * n_head, T], as the activations of a quantized matvec. */
static int attn_feeds_q(const struct minfer_node *n, const struct minfer_node *a)
{
    if (n->op != MINFER_OP_ATTENTION ||
        (a->op != MINFER_OP_MUL_MAT && a->op != MINFER_OP_MUL_MAT_ADD) || a->n_src < 2)
        return 0;
    const struct minfer_tensor *d = n->dst, *w = a->src[0], *x = a->src[1];
    int64_t hd = d->ne[0], nh = d->ne[1], T = d->ne[2];
    if (!w || !x || !k_matvec_q_supported(w->type) || hd % 32 || d->type != MINFER_TYPE_F32 ||
        x->type != MINFER_TYPE_F32 || d->ne[3] != 1)
        return 0;
    if (d->nb[0] != 4 || d->nb[1] != (size_t)hd * 4 || d->nb[2] != (size_t)(hd * nh) * 4)
        return 0;
    return x->data == d->data && x->ne[0] == hd * nh && x->ne[1] == T && x->ne[2] == 1 &&
           x->ne[3] == 1 && x->nb[0] == 4 && x->nb[1] == d->nb[2] && T <= MMV_MAX_NT &&
           w->ne[0] == x->ne[0];
}

/* The norm node n with its q8_1 output left in SLOT_XQ for the next node. */
static minfer_status run_norm_q(struct minfer_backend *be, const struct minfer_node *n,
                                struct kctx *k)
{
    const struct minfer_tensor *d = n->dst;
    int64_t K = d->ne[0], M = d->ne[1];
    void *xq = NULL;
    be->xq.valid = false;
    minfer_status st = cu_scratch(be->c, SLOT_XQ, k_q8_1_bytes(K, M), &xq);
    if (st != MINFER_OK)
        return node_fail(be, n, st, cu_ctx_error(be->c));
    const float *w = n->op == MINFER_OP_RMS_NORM_MUL ? n->src[1]->data : NULL;
    LAUNCH(k_rms_norm_q8_1(k, view_of(n->src[0]), w, view_of(d), n->fparams[0], xq));
    be->xq = (struct xq_cache){true, d->data, K, M, (int64_t)d->nb[1], xq};
    return MINFER_OK;
}

/* If kvk, kvv are the two KV stores of one token right after a RoPE pair
 * whose second RoPE (dst rk) they store (kvk's source is rk's dst as
 * [hd * heads, 1]), fills *kv and returns 1: k_norm_rope2 runs them last.
 * writes[] are the group's earlier writes, which must leave v alone. */
static int kv_after(const struct minfer_node *kvk, const struct minfer_node *kvv,
                    const struct minfer_tensor *rk, const struct minfer_tensor *const *writes,
                    int n_writes, struct kkv2 *kv)
{
    if (!kv_pair(kvk, kvv))
        return 0;
    const struct minfer_tensor *sk = kvk->src[0], *sv = kvv->src[0];
    if (sk->data != rk->data || sk->ne[0] != rk->ne[0] * rk->ne[1] || sk->ne[1] != 1 ||
        rk->nb[1] != (size_t)rk->ne[0] * 4 || sv->ne[1] != 1)
        return 0;
    for (int j = 0; j < n_writes; j++)
        if (overlaps(writes[j], sv) || overlaps(writes[j], kvk->src[1]))
            return 0;
    const struct minfer_tensor *dk = kvk->dst, *dv = kvv->dst;
    *kv = (struct kkv2){view_of(sk), view_of(sv), kvk->src[1]->data, dk->type, dv->type,
                        dk->data, dv->data, (int64_t)dk->nb[1], (int64_t)dv->nb[1], dk->ne[1],
                        dv->ne[1]};
    return 1;
}

/* One token's (q norm, k norm,) q RoPE, k RoPE (, K store, V store) at
 * nodes[i..] as one k_norm_rope2 launch: returns how many nodes it ran
 * (0: no such group here; 2 only where rope_pair refuses, since k_rope2
 * already does that case). *st gets the launch's failure. */
static uint32_t rope_group(struct minfer_backend *be, const struct minfer_replay_window *w,
                           uint32_t i, struct kctx *k, minfer_status *st)
{
    char why[400];
    const struct minfer_node *nd = w->nodes;
    uint32_t avail = w->last - i + 1, r = 0, n = 0;
    if (avail >= 4 && norm_rope_quad(&nd[i], &nd[i + 1], &nd[i + 2], &nd[i + 3]))
        r = 2, n = 4;
    else if (avail >= 2 && rope_pair_seq(&nd[i], &nd[i + 1]))
        r = 0, n = 2;
    else
        return 0;
    const struct minfer_node *rq = &nd[i + r], *rk = &nd[i + r + 1];
    const struct minfer_tensor *writes[4];
    int nw = 0;
    for (uint32_t j = 0; j < n; j++)
        writes[nw++] = nd[i + j].dst;
    struct kkv2 kv;
    int with_kv = avail >= n + 2 &&
                  kv_after(&nd[i + n], &nd[i + n + 1], rk->dst, writes, nw, &kv);
    if (!with_kv && r == 0 && rope_pair(rq, rk))
        return 0; /* plain q + k RoPE: k_rope2 */
    uint32_t used = n + (with_kv ? 2 : 0);
    for (uint32_t j = 1; j < used; j++)
        if (validate(&nd[i + j], 1, why, sizeof(why)))
            return 0; /* the separate path reports it */
    const struct minfer_node *nq = r ? &nd[i] : NULL, *nk = r ? &nd[i + 1] : NULL;
    struct kview none = {0};
    const float *wq = nq && nq->op == MINFER_OP_RMS_NORM_MUL ? nq->src[1]->data : NULL;
    const float *wk = nk && nk->op == MINFER_OP_RMS_NORM_MUL ? nk->src[1]->data : NULL;
    if (k_norm_rope2(k, view_of(nq ? nq->src[0] : rq->src[0]), wq, nq ? view_of(nq->dst) : none,
                     view_of(rq->dst), nq ? nq->fparams[0] : 0.0f,
                     view_of(nk ? nk->src[0] : rk->src[0]), wk, nk ? view_of(nk->dst) : none,
                     view_of(rk->dst), nk ? nk->fparams[0] : 0.0f, rq->src[1]->data,
                     rq->iparams[0], rq->fparams[0], rq->fparams[1], with_kv ? &kv : NULL))
        *st = node_fail(be, &nd[i], MINFER_ERR_BACKEND, k->err);
    for (uint32_t j = 0; j < used; j++)
        xq_note_write(be, nd[i + j].dst);
    __atomic_add_fetch(r ? &g_fused_norm_ropes : &g_fused_rope_seq, 1, __ATOMIC_RELAXED);
    if (with_kv)
        __atomic_add_fetch(&g_fused_rope_kv, 1, __ATOMIC_RELAXED);
    return used;
}

/* A decode product that the multi-matrix matvec can run: MUL_MAT or
 * MUL_MAT_ADD of one token with a dp4a weight type. */
static int is_q_matvec(const struct minfer_node *n)
{
    if ((n->op != MINFER_OP_MUL_MAT && n->op != MINFER_OP_MUL_MAT_ADD) || n->n_src < 2)
        return 0;
    const struct minfer_tensor *w = n->src[0], *x = n->src[1];
    return k_matvec_q_supported(w->type) && x->ne[1] == 1 && n->dst->ne[1] == 1 &&
           x->type == MINFER_TYPE_F32;
}

/* How many nodes from i (2..4, 0: none) are decode products of the same x
 * that may run as one launch (Q, K and V): none writes what another reads
 * (x, a weight, an addend) or writes. */
static uint32_t matvec_group(const struct minfer_replay_window *w, uint32_t i)
{
    const struct minfer_node *nd = w->nodes;
    if (!is_q_matvec(&nd[i]))
        return 0;
    const struct minfer_tensor *x = nd[i].src[1];
    uint32_t n = 1;
    while (n < 4 && i + n <= w->last && is_q_matvec(&nd[i + n]) && same_view(nd[i + n].src[1], x))
        n++;
    if (n < 2)
        return 0;
    for (uint32_t a = 0; a < n; a++) {
        const struct minfer_node *na = &nd[i + a];
        if (overlaps(na->dst, x))
            return 0;
        for (uint32_t b = 0; b < n; b++) {
            const struct minfer_node *nb = &nd[i + b];
            if (a == b)
                continue;
            if (overlaps(na->dst, nb->dst) || overlaps(na->dst, nb->src[0]) ||
                (nb->op == MINFER_OP_MUL_MAT_ADD && overlaps(na->dst, nb->src[2])))
                return 0;
        }
    }
    return n;
}

/* The n products at g (a matvec_group) as one k_matvec_q_multi launch. */
static minfer_status run_matvec_group(struct minfer_backend *be, const struct minfer_node *g,
                                      uint32_t count, struct kctx *k)
{
    const struct minfer_node *n = &g[0]; /* named in errors */
    const struct minfer_tensor *x = n->src[1];
    void *xq = NULL;
    minfer_status st = quantized_x(be, n, k, x->data, x->ne[0], 1, (int64_t)x->nb[1], &xq);
    if (st != MINFER_OK)
        return st;
    struct kmv_seg segs[4];
    struct kepi epis[4];
    for (uint32_t j = 0; j < count; j++) {
        const struct minfer_tensor *w = g[j].src[0];
        int sum = g[j].op == MINFER_OP_MUL_MAT_ADD;
        if (sum)
            epis[j] = sum_epi(&g[j]);
        segs[j] = (struct kmv_seg){w->type, w->data, (int64_t)w->nb[1], w->ne[1], g[j].dst->data,
                                   sum ? &epis[j] : NULL};
    }
    LAUNCH(k_matvec_q_multi(k, segs, (int)count, x->ne[0], xq));
    return MINFER_OK;
}

/* Runs nodes[first..last] on the capturing stream with the same results
 * as execute_node would give, fusing MUL_MAT + ADD pairs into the matvec
 * epilogue and reusing quantized activations between products of one x;
 * returns the first failure. */
static minfer_status capture_window(struct minfer_backend *be,
                                    const struct minfer_replay_window *w, struct kctx *k)
{
    char why[400];
    if (__atomic_load_n(&g_fail_next_capture, __ATOMIC_RELAXED) > 0 &&
        __atomic_sub_fetch(&g_fail_next_capture, 1, __ATOMIC_RELAXED) >= 0) {
        minfer_status st = cu_capture_poison(be->c);
        if (st == MINFER_OK)
            st = cu_ctx_fail(be->c, MINFER_ERR_BACKEND,
                             "cuda: injected capture fault (test hook) did not fail");
        return st;
    }
    be->xq.valid = false;
    minfer_status st = MINFER_OK;
    for (uint32_t i = w->first; i <= w->last && st == MINFER_OK; i++) {
        const struct minfer_node *n = &w->nodes[i];
        if (validate(n, 1, why, sizeof(why))) {
            st = node_fail(be, n, MINFER_ERR_UNSUPPORTED, why);
            break;
        }
        k->err[0] = 0;
        uint32_t group = be->fuse_off ? 0 : matvec_group(w, i);
        for (uint32_t j = 1; j < group; j++)
            if (validate(&w->nodes[i + j], 1, why, sizeof(why)))
                group = 0; /* the separate path reports it */
        if (group) {
            st = run_matvec_group(be, n, group, k);
            for (uint32_t j = 0; j < group; j++)
                xq_note_write(be, w->nodes[i + j].dst);
            __atomic_add_fetch(&g_fused_groups, 1, __ATOMIC_RELAXED);
            i += group - 1;
            continue;
        }
        struct kepi e;
        const struct minfer_node *a = i < w->last ? &w->nodes[i + 1] : NULL;
        if (a && !be->fuse_off && fusable_add(n, a, &e) && !validate(a, 1, why, sizeof(why))) {
            st = run_matmul(be, n, k, n->src[0], n->src[1], n->dst->data,
                            (int64_t)n->dst->nb[1], &e);
            xq_note_write(be, n->dst);
            xq_note_write(be, a->dst);
            __atomic_add_fetch(&g_fused_adds, 1, __ATOMIC_RELAXED);
            i++;
            continue;
        }
        uint32_t used = be->fuse_off ? 0 : rope_group(be, w, i, k, &st);
        if (used) {
            i += used - 1;
            continue;
        }
        if (a && !be->fuse_off && (rope_pair(n, a) || kv_pair(n, a)) &&
            !validate(a, 1, why, sizeof(why))) {
            if (n->op == MINFER_OP_ROPE) {
                if (k_rope2(k, view_of(n->src[0]), view_of(n->dst), view_of(a->src[0]),
                            view_of(a->dst), n->src[1]->data, n->iparams[0], n->fparams[0],
                            n->fparams[1]))
                    st = node_fail(be, n, MINFER_ERR_BACKEND, k->err);
            } else {
                const struct minfer_tensor *d0 = n->dst, *d1 = a->dst;
                if (k_kv_store2(k, view_of(n->src[0]), d0->type, d0->data, (int64_t)d0->nb[1],
                                d0->ne[1], view_of(a->src[0]), d1->type, d1->data,
                                (int64_t)d1->nb[1], d1->ne[1], n->src[1]->data))
                    st = node_fail(be, n, MINFER_ERR_BACKEND, k->err);
            }
            xq_note_write(be, n->dst);
            xq_note_write(be, a->dst);
            i++;
            continue;
        }
        if (a && !be->fuse_off && attn_feeds_q(n, a)) {
            st = run_attention(be, n, k, a); /* notes its own write */
            continue;
        }
        if (a && !be->fuse_off && norm_feeds_q(n, a)) {
            st = run_norm_q(be, n, k); /* notes its own write */
            continue;
        }
        st = exec(be, n, k);
        xq_note_write(be, n->dst);
    }
    be->xq.valid = false;
    return st;
}

static minfer_status p_graph_replay(struct minfer_backend *be,
                                    const struct minfer_replay_window *w, bool *replayed)
{
    if (!be || !w || !replayed || !w->nodes || w->first > w->last)
        return MINFER_ERR_INVALID_ARG;
    *replayed = false;
    if (be->graphs_off)
        return MINFER_OK;
    cu_ctx_clear_error(be->c);
    struct gentry *e = gentry_get(be, w);
    uint64_t pool_gen = cu_pool_generation(be->c);
    if (e->win_gen != w->generation || e->pool_gen != pool_gen) {
        /* addresses moved (arena, KV, scratch): what was captured is stale */
        cu_graph_destroy(be->c, e->exec);
        e->exec = NULL;
        e->warm = 0;
        e->win_gen = w->generation;
        e->pool_gen = pool_gen;
    }
    e->used = ++be->tick;
    if (e->exec) {
        minfer_status st = cu_graph_launch(be->c, e->exec);
        if (st != MINFER_OK)
            return st;
        __atomic_add_fetch(&g_stats.replays, 1, __ATOMIC_RELAXED);
        *replayed = true;
        return MINFER_OK;
    }
    if (e->warm < GRAPH_WARMUP) {
        e->warm++; /* the scheduler runs this pass directly */
        return MINFER_OK;
    }
    /* capture (the launch context is taken first: no device switch inside
     * the capture window) */
    struct kctx *k = cu_ctx_kctx(be->c);
    minfer_status st = cu_capture_begin(be->c);
    if (st == MINFER_OK) {
        st = capture_window(be, w, k);
        if (st == MINFER_OK) {
            st = cu_capture_end(be->c, &e->exec);
        } else {
            char keep[1024];
            snprintf(keep, sizeof(keep), "%s", cu_ctx_error(be->c));
            cu_capture_abort(be->c);
            cu_ctx_fail(be->c, st, "%s", keep);
        }
    }
    if (st != MINFER_OK || cu_pool_generation(be->c) != pool_gen) {
        char msg[1100];
        snprintf(msg, sizeof(msg), "window (graph %llu, nodes %u..%u): %s",
                 (unsigned long long)w->uid, w->first, w->last,
                 st != MINFER_OK ? cu_ctx_error(be->c) : "the pool grew during capture");
        cu_graph_destroy(be->c, e->exec);
        e->exec = NULL;
        graphs_disable(be, msg);
        cu_ctx_clear_error(be->c);
        return MINFER_OK; /* replayed = false: the scheduler runs the nodes directly */
    }
    __atomic_add_fetch(&g_stats.captures, 1, __ATOMIC_RELAXED);
    st = cu_graph_launch(be->c, e->exec);
    if (st != MINFER_OK)
        return st;
    __atomic_add_fetch(&g_stats.replays, 1, __ATOMIC_RELAXED);
    *replayed = true;
    return MINFER_OK;
}

/* ---- KV cell copies ---- */

static minfer_status p_copy_cells(struct minfer_backend *be, void *kv_base, size_t row_bytes,
                                  uint32_t src, uint32_t dst, uint32_t n)
{
    if (!be || !kv_base)
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    if (n == 0 || src == dst || row_bytes == 0)
        return MINFER_OK;
    if ((uint64_t)n > SIZE_MAX / row_bytes ||
        (uint64_t)(src > dst ? src : dst) + n > SIZE_MAX / row_bytes)
        return cu_ctx_fail(be->c, MINFER_ERR_RANGE,
                           "cuda: copy_cells of %u cells of %zu bytes from %u to %u overflows", n,
                           row_bytes, src, dst);
    char *base = kv_base;
    uint32_t gap = src > dst ? src - dst : dst - src;
    /* overlapping ranges: copy in chunks of gap cells that never overlap,
     * from the end when moving up, from the start when moving down */
    uint32_t step = gap < n ? gap : n;
    for (uint32_t done = 0; done < n; done += step) {
        uint32_t m = n - done < step ? n - done : step;
        uint32_t off = dst > src ? n - done - m : done;
        minfer_status st = cu_copy_d2d(be->c, base + (size_t)(dst + off) * row_bytes,
                                       base + (size_t)(src + off) * row_bytes,
                                       (size_t)m * row_bytes);
        if (st != MINFER_OK)
            return st;
    }
    return MINFER_OK;
}

/* ---- extensions (get_proc) ---- */

/* "minfer_cuda_test_fail_next_capture": void f(int n) — the next n graph
 * captures (any instance) fail inside their window, as a real fault
 * would. "minfer_cuda_graph_stats": void f(struct minfer_cuda_graph_stats
 * *out) — process-wide capture/replay/abort counts. Tests only. */
static void x_fail_next_capture(int n)
{
    __atomic_store_n(&g_fail_next_capture, n, __ATOMIC_RELAXED);
}

/* "minfer_cuda_test_tune_gemm": void f(int bk, int splits, int bn) — forces
 * the prefill GEMM's variant process-wide (0, 0, 0: the per-shape choice),
 * so the op tests can check every one. Tests only. */
static void x_tune_gemm(int bk, int splits, int bn)
{
    k_tune_gemm(bk, splits, bn);
}

static void x_graph_stats(struct minfer_cuda_graph_stats *out)
{
    if (!out)
        return;
    out->captures = __atomic_load_n(&g_stats.captures, __ATOMIC_RELAXED);
    out->replays = __atomic_load_n(&g_stats.replays, __ATOMIC_RELAXED);
    out->aborts = __atomic_load_n(&g_stats.aborts, __ATOMIC_RELAXED);

}

/* "minfer_cuda_fused_adds": uint64_t f(void) — MUL_MAT + ADD pairs
 * captured as one matvec with an epilogue (process-wide). */
static uint64_t x_fused_adds(void)
{
    return __atomic_load_n(&g_fused_adds, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_norm_ropes": uint64_t f(void) — (q norm, k norm,
 * q RoPE, k RoPE) runs captured as one launch (process-wide). */
static uint64_t x_fused_norm_ropes(void)
{
    return __atomic_load_n(&g_fused_norm_ropes, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_rope_seq": uint64_t f(void) — RoPE q + k pairs whose
 * buffers overlap, captured as one read-first launch (process-wide). */
static uint64_t x_fused_rope_seq(void)
{
    return __atomic_load_n(&g_fused_rope_seq, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_rope_kv": uint64_t f(void) — norm/RoPE launches that
 * also ran the K and V stores after them (process-wide). */
static uint64_t x_fused_rope_kv(void)
{
    return __atomic_load_n(&g_fused_rope_kv, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_groups": uint64_t f(void) — runs of decode products
 * of one x (Q, K and V) captured as one launch (process-wide). */
static uint64_t x_fused_groups(void)
{
    return __atomic_load_n(&g_fused_groups, __ATOMIC_RELAXED);
}

static void *p_get_proc(const char *name)
{
    if (!name)
        return NULL;
    if (!strcmp(name, "minfer_cuda_test_tune_gemm"))
        return (void *)x_tune_gemm;
    if (!strcmp(name, "minfer_cuda_test_fail_next_capture"))
        return (void *)x_fail_next_capture;
    if (!strcmp(name, "minfer_cuda_graph_stats"))
        return (void *)x_graph_stats;
    if (!strcmp(name, "minfer_cuda_fused_adds"))
        return (void *)x_fused_adds;
    if (!strcmp(name, "minfer_cuda_fused_norm_ropes"))
        return (void *)x_fused_norm_ropes;
    if (!strcmp(name, "minfer_cuda_fused_rope_seq"))
        return (void *)x_fused_rope_seq;
    if (!strcmp(name, "minfer_cuda_fused_rope_kv"))
        return (void *)x_fused_rope_kv;
    if (!strcmp(name, "minfer_cuda_fused_groups"))
        return (void *)x_fused_groups;
    return NULL;
}

/* ---- plugin slots ---- */

static int p_probe(char *why, size_t why_len)
{
    int n = cu_probe(why, why_len);
    return n > 0 ? 100 : 0;
}

static int p_device_count(void)
{
    return cu_probe(NULL, 0);
}

static minfer_status p_device_info(int device, struct minfer_device_info *out)
{
    if (!out)
        return MINFER_ERR_INVALID_ARG;
    return cu_device_info(device, out, g_err, sizeof(g_err));
}

static minfer_status p_create(const struct minfer_backend_config *cfg, struct minfer_backend **out)
{
    if (!out)
        return MINFER_ERR_INVALID_ARG;
    *out = NULL;
    int device = cfg ? cfg->device : 0;
    struct minfer_backend *be = calloc(1, sizeof(*be));
    if (!be) {
        snprintf(g_err, sizeof(g_err), "cuda: out of host memory creating an instance");
        return MINFER_ERR_NO_MEMORY;
    }
    be->c = cu_ctx_new(device, g_err, sizeof(g_err));
    if (!be->c) {
        free(be);
        return strstr(g_err, "no CUDA device") ? MINFER_ERR_UNSUPPORTED : MINFER_ERR_BACKEND;
    }
    const char *off = getenv("MINFER_CUDA_NO_GRAPHS");
    be->graphs_off = (cfg && (cfg->flags & MINFER_BACKEND_CFG_NO_GRAPHS)) ||
                     (off && *off && strcmp(off, "0"));
    const char *nf = getenv("MINFER_CUDA_NO_FUSE");
    be->fuse_off = nf && *nf && strcmp(nf, "0");
    const char *note = cu_ctx_error(be->c);
    if (note[0] && g_host && g_host->log)
        g_host->log(MINFER_LOG_WARN, "%s", note);
    cu_ctx_clear_error(be->c);
    *out = be;
    return MINFER_OK;
}

static void p_destroy(struct minfer_backend *be)
{
    if (!be)
        return;
    for (int i = 0; i < GRAPH_CACHE; i++)
        gentry_drop(be, &be->gc[i]);
    cu_ctx_free(be->c);
    free(be);
}

static bool p_supports_op(struct minfer_backend *be, const struct minfer_node *node)
{
    (void)be;
    return node && validate(node, 0, NULL, 0) == 0;
}

static minfer_status p_execute_node(struct minfer_backend *be, const struct minfer_node *n)
{
    if (!be || !n)
        return MINFER_ERR_INVALID_ARG;
    char why[400];
    cu_ctx_clear_error(be->c);
    if (validate(n, 1, why, sizeof(why)))
        return node_fail(be, n, MINFER_ERR_UNSUPPORTED, why);
    be->xq.valid = false; /* direct launches share nothing between nodes */
    minfer_status st = exec(be, n, cu_ctx_kctx(be->c));
    be->xq.valid = false;
    return st;
}

static minfer_status p_buffer_alloc(struct minfer_backend *be, size_t size, void **base)
{
    if (!be || !base)
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    char what[64];
    snprintf(what, sizeof(what), "a %zu-byte buffer", size);
    return cu_pool_alloc(be->c, size, what, base);
}

static void p_buffer_free(struct minfer_backend *be, void *base)
{
    if (be)
        cu_pool_free(be->c, base);
}

static minfer_status p_buffer_write(struct minfer_backend *be, void *dst, const void *src,
                                    size_t size)
{
    if (!be || (size && (!dst || !src)))
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    return cu_write(be->c, dst, src, size);
}

static minfer_status p_buffer_read(struct minfer_backend *be, void *dst, const void *src,
                                   size_t size)
{
    if (!be || (size && (!dst || !src)))
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    return cu_read(be->c, dst, src, size);
}

static minfer_status p_weight_register(struct minfer_backend *be,
                                       const struct minfer_weight_desc *w, void **data)
{
    if (!be || !w || !data || !w->name || (w->size && !w->host_data))
        return MINFER_ERR_INVALID_ARG;
    *data = NULL;
    cu_ctx_clear_error(be->c);
    if (!minfer_type_traits_of(w->type))
        return cu_ctx_fail(be->c, MINFER_ERR_UNSUPPORTED, "cuda: weight '%s' has unknown type %u",
                           w->name, w->type);
    return cu_weight_register(be->c, w->name, w->host_data, w->size, data);
}

static minfer_status p_synchronize(struct minfer_backend *be)
{
    if (!be)
        return MINFER_ERR_INVALID_ARG;
    return cu_sync(be->c);
}

static const char *p_last_error(struct minfer_backend *be)
{
    return be ? cu_ctx_error(be->c) : g_err;
}

static void p_shutdown(void)
{
    cu_shutdown();
    g_host = NULL;
}

static const struct minfer_backend_iface g_iface = {
    .struct_size = sizeof(struct minfer_backend_iface),
    .abi_major = MINFER_ABI_MAJOR,
    .abi_minor = MINFER_ABI_MINOR,
    .name = "cuda",
    .version = MINFER_CUDA_PLUGIN_VERSION,
    .probe = p_probe,
    .device_count = p_device_count,
    .device_info = p_device_info,
    .create = p_create,
    .destroy = p_destroy,
    .supports_op = p_supports_op,
    .buffer_alloc = p_buffer_alloc,
    .buffer_free = p_buffer_free,
    .buffer_write = p_buffer_write,
    .buffer_read = p_buffer_read,
    .weight_register = p_weight_register,
    .execute_node = p_execute_node,
    .graph_replay = p_graph_replay,
    .synchronize = p_synchronize,
    .copy_cells = p_copy_cells,
    .last_error = p_last_error,
    .get_proc = p_get_proc,
    .shutdown = p_shutdown,
};

MINFER_PLUGIN_EXPORT const struct minfer_backend_iface *
minfer_plugin_entry(uint32_t *abi, const struct minfer_host *host)
{
    if (!abi)
        return NULL;
    uint32_t want = *abi;
    /* answer the lower of the two minors within our major, or refuse */
    uint32_t minor = MINFER_ABI_PACK_MINOR(want);
    if (minor > MINFER_ABI_MINOR)
        minor = MINFER_ABI_MINOR;
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, minor);
    if (MINFER_ABI_PACK_MAJOR(want) != MINFER_ABI_MAJOR) {
        *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
        return NULL;
    }
    g_host = host;
    return &g_iface;
}
