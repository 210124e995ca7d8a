/*
 * exec.c — runs one validated node by direct launches: picks the kernel
 * family (dp4a matvec for decode, tensor-core GEMM for prefill, split-K
 * or flash attention) and calls the launchers in kernels/ on the
 * instance's stream. execute_node and the capture path (graph.c) both
 * end up here for every node that is not fused.
 */
#include <stdio.h>

#include "cuda-internal.h"

minfer_status cuda_node_fail(struct minfer_backend *be, const struct minfer_node *n,
                             minfer_status st, const char *what)
{
    /* what is often the instance's own error text (cu_ctx_error), the
     * buffer this call writes: copy it first, vsnprintf must not read the
     * bytes it is writing */
    char why[1024];
    snprintf(why, sizeof why, "%s", what ? what : "");
    return cu_ctx_fail(be->c, st, "cuda: node %u (%s, %s): %s", n->index,
                       n->label ? n->label : "?", minfer_op_name(n->op), why);
}

/* ---- products ---- */

static size_t round256(size_t n)
{
    return (n + 255) & ~(size_t)255;
}

/* Whether the product about to launch on be->xq may wait late
 * (common.cuh, k_dep_enter(late): gemm-i8.cu's kernel reads only the
 * weights and those activations before its wait): a kernel before the
 * last one wrote them, and the last one waited first (it did not wait
 * late itself), so they are complete when this one starts. A batched
 * decode's up product (the norm wrote its activations, then the gate
 * product ran) runs its main loop under the gate product's tail. */
static bool gemm_late(const struct minfer_backend *be, const struct kctx *k)
{
    return k->dep_launch && be->xq.valid && be->xq.seq < k->launches &&
           k->late_launch != k->launches;
}

/* be->xq's activations when it holds exactly x [K, M] in `form` (in
 * SLOT_XQ, or in SLOT_ACT beside the gate/up pair that wrote x), else
 * NULL. */
static void *xq_lookup(struct minfer_backend *be, const float *xd, int64_t K, int64_t M,
                       int64_t xnb1, int form)
{
    const struct xq_cache *qc = &be->xq;
    if (!(qc->valid && qc->x == (const void *)xd && qc->K == K && qc->M == M &&
          qc->nb1 == xnb1 && qc->form == form && qc->pool_gen == cu_pool_generation(be->c)))
        return NULL;
    CUDA_COUNT(shared_x);
    return qc->xq;
}

/* x [K, M] converted into SLOT_XQ in `form` (k_quantize_q8_1 for a
 * group, k_gemm_act for wtype's f16 order) and recorded in be->xq for
 * the products after it; the caller has looked it up (xq_lookup). */
static minfer_status convert_x(struct minfer_backend *be, const struct minfer_node *n,
                               struct kctx *k, uint32_t wtype, const float *xd, int64_t K,
                               int64_t M, int64_t xnb1, int form, void **out)
{
    struct xq_cache *qc = &be->xq;
    void *xq = NULL;
    bool f16 = form >= KGEMM_ACT_F16;
    minfer_status st = cu_scratch(be->c, SLOT_XQ, f16 ? k_gemm_act_bytes(K, M) : k_q8_1_bytes(K, M),
                                  &xq);
    if (st != MINFER_OK)
        return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
    qc->valid = false;
    if (f16)
        LAUNCH(k_gemm_act(k, wtype, xd, K, M, xnb1, xq, NULL));
    else
        LAUNCH(k_quantize_q8_1(k, xd, K, M, xnb1, form, xq));
    *qc = (struct xq_cache){true, xd, K, M, xnb1, xq, form, cu_pool_generation(be->c),
                            k->launches, NULL};
    *out = xq;
    return MINFER_OK;
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
                              const struct minfer_tensor *x, float *dst, int64_t dst_nb1,
                              const struct kgemm_epi *epi)
{
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    bool split = is_float_type(w->type);
    if ((size_t)K > SIZE_MAX / 16 / (size_t)M)
        return cuda_node_fail(be, n, MINFER_ERR_RANGE, "GEMM scratch size overflows");
    size_t ws = k_gemm_scratch_bytes(k, w->type, w->data, K, N, M, (int64_t)w->nb[1]);
    int form = split ? 0 : k_gemm_act_form(k, w->type, K, M);
    /* the activations in SLOT_SPLIT before the weights unless they come in
     * a shared form */
    size_t act = form ? 0 : round256(k_gemm_act_bytes(K, M));
    if (ws > SIZE_MAX / 2 - 3 * act)
        return cuda_node_fail(be, n, MINFER_ERR_RANGE, "GEMM scratch size overflows");
    /* shared with the other products of this x (Q, K, V; gate and up), or
     * written by the node before (q8_1 of group 32 by a fused norm, f16 by
     * a gate/up pair). Found before SLOT_SPLIT may grow, which moves the
     * pool's generation (SLOT_ACT's entry would be lost); converted after
     * it, so that the entry it leaves for the next product holds. */
    void *xs = form ? xq_lookup(be, x->data, K, M, (int64_t)x->nb[1], form) : NULL;
    void *base = NULL;
    minfer_status st;
    if (act + ws && (st = cu_scratch(be->c, SLOT_SPLIT, (split ? 2 : 1) * act + ws, &base)) !=
                        MINFER_OK)
        return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
    if (form && !xs &&
        (st = convert_x(be, n, k, w->type, x->data, K, M, (int64_t)x->nb[1], form, &xs)) !=
            MINFER_OK)
        return st;
    /* base is NULL when SLOT_SPLIT holds nothing (shared activations, no
     * weight scratch): no pointer is derived from it then */
    char *xh = form ? xs : base, *xl = split ? (char *)base + act : NULL;
    char *wh = ws ? (char *)base + (split ? 2 : 1) * act : NULL;
    if (!form)
        LAUNCH(k_gemm_act(k, w->type, x->data, K, M, (int64_t)x->nb[1], xh, xl));
    k->late_next = form && form < KGEMM_ACT_F16 && gemm_late(be, k);
    LAUNCH(k_gemm(k, w->type, w->data, K, N, (int64_t)w->nb[1], xh, xl, M, dst, dst_nb1, wh,
                  epi));
    return MINFER_OK;
}

/* x [K, M] in `form`: be->xq's (xq_lookup), else converted (convert_x).
 * The look-up comes first: growing SLOT_XQ moves the pool's generation,
 * which would lose SLOT_ACT's entry. */
minfer_status cuda_shared_x(struct minfer_backend *be, const struct minfer_node *n,
                            struct kctx *k, uint32_t wtype, const float *xd, int64_t K,
                            int64_t M, int64_t xnb1, int form, void **out)
{
    if ((*out = xq_lookup(be, xd, K, M, xnb1, form)) != NULL)
        return MINFER_OK;
    return convert_x(be, n, k, wtype, xd, K, M, xnb1, form, out);
}

static bool gemm_can_run(const struct kctx *k, const struct minfer_tensor *w)
{
    return k->gemm_optin_ok && k_gemm_supported(w->type) && w->ne[0] % 32 == 0;
}

/* The most tokens the nt = 1..8 matvec serves for weight w; more run the
 * GEMM. minfer-cuda-bench --crossover on the H200 (docs/PERF.md, session
 * 11): gemm-i8.cu's 16-token tile costs about the same from 2 to 16
 * tokens (q4_K ffn up 37.4-38.6 us, quantization included) while the
 * matvec's cost grows with each token (30.5 us at 2, 46.3 at 3, 90.6 at
 * 8). Where the GEMM won: q4_K and q6_K from 3 tokens on matrices of at
 * least 3584 x 3584 and from 6 on the 1.5B ffn (1536 x 8960); q5_K,
 * whose int8 kernel is slower, from 6 on the large ones; q8_0, whose
 * matvec is the fastest, at 8. Small matrices (3584 x 512, 1536 x 256)
 * stay on the matvec: the GEMM's floor there is ~11 us. */
int cuda_matvec_tokens(const struct kctx *k, const struct minfer_tensor *w)
{
    if (!gemm_can_run(k, w))
        return MMV_MAX_NT;
    int64_t K = w->ne[0], N = w->ne[1];
    bool large = K >= 3584 && N >= 3584, mid = !large && K * N >= 12 * 1024 * 1024;
    switch (w->type) {
    case MINFER_TYPE_Q4_K:
    case MINFER_TYPE_Q6_K:
        return large ? 2 : mid ? 5 : MMV_MAX_NT;
    case MINFER_TYPE_Q5_K:
        return large ? 5 : MMV_MAX_NT;
    case MINFER_TYPE_Q8_0:
        return large ? 7 : MMV_MAX_NT;
    default:
        return MMV_MAX_NT;
    }
}

/* Whether a product of M tokens runs the tensor-core GEMM (run_gemm). */
static bool gemm_route(const struct kctx *k, const struct minfer_tensor *w, int64_t M)
{
    return M > cuda_matvec_tokens(k, w) && gemm_can_run(k, w);
}

int cuda_q8_1_group(const struct kctx *k, const struct minfer_tensor *w, int64_t M)
{
    if (M <= cuda_matvec_tokens(k, w))
        return k_matvec_q_supported(w->type) ? 32 : 0;
    return gemm_route(k, w, M) ? k_gemm_takes_q8_1(k, w->type, w->ne[0], M) : 0;
}

/* dst[N, M] = W . x, choosing the kernel family by token count. epi
 * (NULL: none) asks the matvec for a fused ADD; the caller only passes
 * one when M <= cuda_matvec_tokens. Quantized activations are reused
 * from be->xq when it holds exactly this x. */
static minfer_status run_matmul(struct minfer_backend *be, const struct minfer_node *n,
                                struct kctx *k, const struct minfer_tensor *w,
                                const struct minfer_tensor *x, float *dst, int64_t dst_nb1,
                                const struct kepi *epi)
{
    int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    const float *xd = x->data;
    int64_t xnb1 = (int64_t)x->nb[1];
    if (gemm_route(k, w, M)) {
        if (epi)
            return cuda_node_fail(be, n, MINFER_ERR_STATE, "fused ADD on a GEMM-sized product");
        return run_gemm(be, n, k, w, x, dst, dst_nb1, NULL);
    }
    if (is_float_type(w->type)) {
        LAUNCH(k_matvec_f_epi(k, w->type, w->data, K, N, (int64_t)w->nb[1], xd, xnb1, M, dst,
                              dst_nb1, epi));
        return MINFER_OK;
    }
    void *xq = NULL;
    minfer_status st = cuda_shared_x(be, n, k, 0, xd, K, M, xnb1, 32, &xq);
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

/* The epilogue of a MUL_MAT_ADD node for the matvec kernels: dst = the
 * product + src2, the product itself not kept. */
struct kepi cuda_sum_epi(const struct minfer_node *n)
{
    const struct minfer_tensor *a = n->src[2], *d = n->dst;
    return (struct kepi){a->data, a->ne[1] == 1 ? 0 : (int64_t)a->nb[1], d->data,
                         (int64_t)d->nb[1]};
}

/* MUL_MAT_ADD: the matvec adds in its epilogue (each output read-then-
 * written by one thread, so src2 may even be dst), and so does the GEMM
 * (k_gemm's KGEMM_ADD) when src2 is apart from dst or is dst laid out
 * alike, with rows of contiguous floats; otherwise the product goes to
 * dst, or to scratch when src2 shares dst's bytes, then one ADD. */
static minfer_status run_matmul_add(struct minfer_backend *be, const struct minfer_node *n,
                                    struct kctx *k)
{
    const struct minfer_tensor *w = n->src[0], *x = n->src[1], *a = n->src[2], *d = n->dst;
    int64_t N = d->ne[0], M = d->ne[1];
    if (M <= cuda_matvec_tokens(k, w)) {
        struct kepi e = cuda_sum_epi(n);
        return run_matmul(be, n, k, w, x, d->data, (int64_t)d->nb[1], &e);
    }
    /* a float-weight GEMM runs in two passes, the first writing dst */
    bool alike = a->data == d->data && a->nb[1] == d->nb[1] && a->ne[1] == M &&
                 !is_float_type(w->type);
    if (gemm_route(k, w, M) && k_gemm_epi_pays(k, w->type, w->ne[0], M) &&
        a->nb[0] == sizeof(float) && (!overlaps(a, d) || alike)) {
        struct kgemm_epi e = {KGEMM_ADD, a->data, a->ne[1] == 1 ? 0 : (int64_t)a->nb[1]};
        return run_gemm(be, n, k, w, x, d->data, (int64_t)d->nb[1], &e);
    }
    float *prod = d->data;
    int64_t prod_nb1 = (int64_t)d->nb[1];
    if (overlaps(a, d)) {
        void *tmp = NULL;
        minfer_status st = cu_scratch(be->c, SLOT_FFN, (size_t)N * (size_t)M * 4, &tmp);
        if (st != MINFER_OK)
            return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
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

/* ---- attention and the dispatch ---- */

minfer_status cuda_xq_slot(struct minfer_backend *be, const struct minfer_node *n,
                           const struct minfer_tensor *x, void **xq)
{
    *xq = NULL;
    be->xq.valid = false;
    minfer_status st = cu_scratch(be->c, SLOT_XQ, k_q8_1_bytes(x->ne[0], x->ne[1]), xq);
    return st == MINFER_OK ? st : cuda_node_fail(be, n, st, cu_ctx_error(be->c));
}

void cuda_xq_written(struct minfer_backend *be, const struct minfer_tensor *x, void *xq,
                     int group)
{
    be->xq = (struct xq_cache){true, x->data, x->ne[0], x->ne[1], (int64_t)x->nb[1], xq, group,
                               cu_pool_generation(be->c), cu_ctx_kctx(be->c)->launches, NULL};
}

/* ATTENTION; xq_next (NULL: none) is the MUL_MAT that reads its output
 * as quantized activations: the combine pass then writes the q8_1 blocks
 * into SLOT_XQ too and be->xq records them. */
minfer_status cuda_run_attention(struct minfer_backend *be, const struct minfer_node *n,
                                 struct kctx *k, const struct minfer_node *xq_next)
{
    const struct minfer_tensor *s0 = n->src[0], *d = n->dst;
    const struct minfer_tensor *kc = n->src[1], *vc = n->src[2];
    const struct minfer_tensor *x = xq_next ? xq_next->src[1] : NULL;
    size_t need = k_attn_scratch_bytes(view_of(s0), kc->type, kc->data, vc->data,
                                       (int64_t)kc->nb[1], (int64_t)vc->nb[1], kc->ne[1],
                                       n->iparams[0], x != NULL);
    void *part = NULL, *xq = NULL;
    minfer_status st = need ? cu_scratch(be->c, SLOT_ATTN, need, &part) : MINFER_OK;
    if (st != MINFER_OK)
        return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
    if (x && (st = cuda_xq_slot(be, n, x, &xq)) != MINFER_OK)
        return st;
    LAUNCH(k_attention_q(k, view_of(s0), kc->type, kc->data, vc->data, (int64_t)kc->nb[1],
                         (int64_t)vc->nb[1], kc->ne[1], n->iparams[0], n->src[3]->data,
                         n->src[4]->data, n->fparams[0], n->iparams[1], view_of(d), part,
                         xq));
    if (x)
        cuda_xq_written(be, x, xq, 32);
    return MINFER_OK;
}

/* ATTENTION_LISTS: kernels/attn-lists.cu, scratch sized by shapes only;
 * xq_next as cuda_run_attention's (the caller checked
 * k_attn_lists_q8_1_ok). */
minfer_status cuda_run_attention_lists(struct minfer_backend *be, const struct minfer_node *n,
                                       struct kctx *k, const struct minfer_node *xq_next)
{
    const struct minfer_tensor *s0 = n->src[0], *kc = n->src[1], *vc = n->src[2];
    const struct minfer_tensor *ls = n->src[5];
    const struct minfer_tensor *x = xq_next ? xq_next->src[1] : NULL;
    size_t need = k_attn_lists_scratch_bytes(s0->ne[0], s0->ne[1], n->iparams[0], s0->ne[2],
                                             ls->ne[0]);
    void *part = NULL, *xq = NULL;
    minfer_status st = cu_scratch(be->c, SLOT_ATTN, need, &part);
    if (st != MINFER_OK)
        return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
    if (x && (st = cuda_xq_slot(be, n, x, &xq)) != MINFER_OK)
        return st;
    int group = x ? cuda_q8_1_group(k, xq_next->src[0], x->ne[1]) : 32;
    LAUNCH(k_attention_lists(k, view_of(s0), kc->type, kc->data, vc->data, (int64_t)kc->nb[1],
                             (int64_t)vc->nb[1], kc->ne[1], n->iparams[0], n->src[3]->data,
                             n->src[4]->data, ls->data, ls->ne[0], ls->ne[1], n->fparams[0],
                             view_of(n->dst), part, xq, group));
    if (x)
        cuda_xq_written(be, x, xq, group);
    return MINFER_OK;
}

/* Runs one validated node by direct launches. */
minfer_status cuda_exec(struct minfer_backend *be, const struct minfer_node *n, struct kctx *k)
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
    case MINFER_OP_GEGLU:
        LAUNCH(k_binary(k, KBIN_GEGLU, view_of(s0), view_of(s1), view_of(d)));
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
        if (M <= cuda_matvec_tokens(k, s1) && k_matvec_q_supported(s0->type) &&
            s0->type == s1->type && s0->nb[1] == s1->nb[1] &&
            !be->fuse_off) {
            /* decode, one or a batch of up to 8 tokens: one launch for
             * gate, up and SwiGLU */
            const struct minfer_tensor *x = n->src[2];
            int64_t K = s0->ne[0];
            void *xq = NULL;
            minfer_status st =
                cuda_shared_x(be, n, k, 0, x->data, K, M, (int64_t)x->nb[1], 32, &xq);
            if (st != MINFER_OK)
                return st;
            if (M == 1)
                LAUNCH(k_matvec_q_glu(k, s0->type, s0->data, s1->data, K, N,
                                      (int64_t)s0->nb[1], xq, d->data));
            else
                LAUNCH(k_matvec_q_glu_n(k, s0->type, s0->data, s1->data, K, N,
                                        (int64_t)s0->nb[1], xq, M, d->data, (int64_t)d->nb[1]));
            return MINFER_OK;
        }
        size_t plane = (size_t)N * (size_t)M * sizeof(float);
        void *gu = NULL;
        bool fused = gemm_route(k, s1, M) && k_gemm_epi_pays(k, s1->type, s1->ne[0], M) &&
                     d->nb[0] == sizeof(float);
        int64_t K = s0->ne[0];
        if (fused && s0->type == s1->type && s0->nb[1] == s1->nb[1] && !be->fuse_off &&
            k_gemm_glu_ok(k, s0->type, K, M)) { /* gate, up and SwiGLU in one GEMM */
            const struct minfer_tensor *x = n->src[2];
            /* the outputs also as the down product's f16 activations, where
             * that product (taken to be of the pair's type) reads them; its
             * slot first: growing it would lose the inputs' entry */
            int act_form = k_gemm_glu_act_form(k, s0->type, N, M);
            void *xh = NULL, *xo = NULL;
            minfer_status st;
            if (act_form &&
                (st = cu_scratch(be->c, SLOT_ACT, k_gemm_act_bytes(N, M), &xo)) != MINFER_OK)
                return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
            st = cuda_shared_x(be, n, k, s0->type, x->data, K, M, (int64_t)x->nb[1],
                               k_gemm_act_form(k, s0->type, K, M), &xh);
            if (st != MINFER_OK)
                return st;
            if (xh == xo) /* x itself came from SLOT_ACT (a pair's output): keep it */
                xo = NULL;
            size_t pb = k_gemm_glu_scratch_bytes(k, s0->type, K, N, M);
            void *part = NULL;
            if (pb && (st = cu_scratch(be->c, SLOT_FFN, pb, &part)) != MINFER_OK)
                return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
            LAUNCH(k_gemm_glu(k, s0->type, s0->data, s1->data, K, N, (int64_t)s0->nb[1], xh, M,
                              d->data, (int64_t)d->nb[1], part, xo));
            CUDA_COUNT(glu_gemms);
            if (pb)
                CUDA_COUNT(glu_tails);
            if (xo)
                be->xq = (struct xq_cache){true,        d->data, N, M, (int64_t)d->nb[1], xo,
                                           act_form,    cu_pool_generation(be->c),
                                           k->launches, d->data};
            return MINFER_OK;
        }
        minfer_status st = cu_scratch(be->c, SLOT_FFN, (fused ? 1 : 2) * plane, &gu);
        if (st != MINFER_OK)
            return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
        float *g = gu, *u = (float *)((char *)gu + plane);
        if (fused) { /* the gate product, then the up product with SwiGLU as its epilogue */
            st = run_gemm(be, n, k, s0, n->src[2], g, N * 4, NULL);
            struct kgemm_epi e = {KGEMM_SILU_MUL, g, N * 4};
            return st != MINFER_OK ? st
                                   : run_gemm(be, n, k, s1, n->src[2], d->data,
                                              (int64_t)d->nb[1], &e);
        }
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
    case MINFER_OP_ROPE_DIV:
        if (n->op == MINFER_OP_ROPE_DIV || n->iparams[1] != 0 || n->fparams[2] != 0.0f ||
            n->fparams[3] != 0.0f || n->fparams[4] != 0.0f || n->fparams[5] != 0.0f) {
            LAUNCH(k_rope_ext(k, view_of(s0), s1->data, view_of(d), n->iparams[0],
                              n->iparams[1],
                              n->op == MINFER_OP_ROPE_DIV ? n->src[2]->data : NULL,
                              n->fparams));
            return MINFER_OK;
        }
        LAUNCH(k_rope(k, view_of(s0), s1->data, view_of(d), n->iparams[0], n->fparams[0],
                      n->fparams[1]));
        return MINFER_OK;
    case MINFER_OP_TOPK:
        LAUNCH(k_topk(k, view_of(s0), n->iparams[0], view_of(d)));
        return MINFER_OK;
    case MINFER_OP_MOE_WEIGHTS:
        LAUNCH(k_moe_weights(k, view_of(s0), view_of(s1), n->iparams[0], view_of(d)));
        return MINFER_OK;
    case MINFER_OP_MOE_SUM:
        LAUNCH(k_moe_sum(k, view_of(s0), view_of(s1), view_of(d)));
        return MINFER_OK;
    case MINFER_OP_MUL_MAT_ID: {
        const struct minfer_tensor *ids = n->src[2];
        size_t need = k_mul_mat_id_scratch_bytes(s0->ne[2], ids->ne[0] * ids->ne[1]);
        void *sc = NULL;
        /* SLOT_FFN holds only one node's temporaries; routing lists here */
        minfer_status st = cu_scratch(be->c, SLOT_FFN, need, &sc);
        if (st != MINFER_OK)
            return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
        LAUNCH(k_mul_mat_id(k, s0->type, s0->data, s0->ne[0], s0->ne[1], s0->ne[2],
                            (int64_t)s0->nb[1], (int64_t)s0->nb[2], view_of(s1), view_of(ids),
                            view_of(d), sc));
        return MINFER_OK;
    }
    case MINFER_OP_KV_STORE:
        LAUNCH(k_kv_store(k, view_of(s0), s1->data, d->type, d->data, (int64_t)d->nb[1],
                          d->ne[1]));
        return MINFER_OK;
    case MINFER_OP_ATTENTION:
        return cuda_run_attention(be, n, k, NULL);
    case MINFER_OP_ATTENTION_LISTS:
        return cuda_run_attention_lists(be, n, k, NULL);
    default:
        return cuda_node_fail(be, n, MINFER_ERR_UNSUPPORTED, "op not implemented");
    }
}
