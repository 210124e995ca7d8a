/*
 * fuse.c — fusion inside a capture window (docs/decisions/cuda-capture-fusion.md).
 * Only a capture sees the nodes that follow, so only graph.c's
 * capture_window asks here; direct launches stay one node at a time.
 * Every pattern is decided from addresses and shapes alone, which are
 * fixed for the life of a captured graph, and each fused launch gives the
 * bits of the separate kernels (the replay-vs-direct e2e test checks it):
 *   - decode products of one x (Q, K, V; MUL_MAT or MUL_MAT_ADD): one
 *     multi-matrix matvec;
 *   - (q norm, k norm,) q RoPE, k RoPE (, K store, V store): one
 *     read-first launch, a block per token (and, without norms, per
 *     head), where no write lands on what another block reads; otherwise
 *     RoPE + RoPE or KV_STORE + KV_STORE pairs that do not overlap: one
 *     launch each;
 *   - an RMS norm, ATTENTION or ATTENTION_LISTS feeding a quantized
 *     product: it writes the product's q8_1 activations too (group 32,
 *     or 256 for gemm-i8.cu's K-quant tiles).
 */
#include <string.h>

#include "cuda-internal.h"

/* ---- patterns ---- */

/* The weight tensor of norm node n (RMS_NORM_MUL), or NULL (no weight,
 * or no node). */
static const struct minfer_tensor *norm_weight(const struct minfer_node *n)
{
    return n && n->op == MINFER_OP_RMS_NORM_MUL ? n->src[1] : NULL;
}

/* A node wrote t: drop be->xq if t may overlap the activations it holds. */
void cuda_xq_note_write(struct minfer_backend *be, const struct minfer_tensor *t)
{
    struct xq_cache *qc = &be->xq;
    if (!qc->valid || !t)
        return;
    if (qc->writer && qc->writer == t->data) { /* the write they were made beside */
        qc->writer = NULL;
        return;
    }
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
/* If n is an RMS norm whose output a (the next node) reads as q8_1
 * activations (a quantized matvec, or a GEMM on gemm-i8.cu: a batched
 * decode), returns their group: the norm can write the q8_1 blocks too;
 * else 0. */
static int norm_feeds_q(const struct kctx *k, const struct minfer_node *n,
                        const struct minfer_node *a)
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
    int group = w && x ? cuda_q8_1_group(k, w, x->ne[1]) : 0;
    if (!group || !is_plain_f32_2d(d) || d->ne[0] % group || n->src[0]->ne[2] != 1 ||
        n->src[0]->ne[3] != 1)
        return 0;
    return x->data == d->data && same_ne(x, d) && x->nb[1] == d->nb[1] && w->ne[0] == d->ne[0]
               ? group
               : 0;
}

/* Two nodes that may run in one launch: neither writes what the other
 * reads or writes. */
static int independent(const struct minfer_node *n, const struct minfer_node *a)
{
    return !overlaps(n->dst, a->src[0]) && !overlaps(a->dst, n->src[0]) &&
           !overlaps(n->dst, a->dst) && !overlaps(n->dst, a->src[1]) &&
           !overlaps(a->dst, n->src[1]);
}

/* A ROPE beyond NeoX with linear scaling (YaRN, the normal layout): it
 * runs alone (k_rope_ext), never fused. */
static int rope_yarn(const struct minfer_node *n)
{
    return n->iparams[1] != 0 || n->fparams[2] != 0.0f || n->fparams[3] != 0.0f ||
           n->fparams[4] != 0.0f || n->fparams[5] != 0.0f;
}

/* ROPE, ROPE with the same positions and parameters, without YaRN. */
static int rope_same(const struct minfer_node *n, const struct minfer_node *a)
{
    if (n->op != MINFER_OP_ROPE || a->op != MINFER_OP_ROPE || n->n_src < 2 || a->n_src < 2 ||
        rope_yarn(n) || rope_yarn(a))
        return 0;
    if (n->iparams[1] || a->iparams[1]) /* the fused kernels rotate NeoX pairs only */
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
 * RoPE of q's norm, RoPE of k's norm (Qwen3's per-head norms): one
 * k_norm_rope2 launch (a token's checks; rope_group adds those between
 * tokens), when the norms' outputs are exactly the
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
    if (xq->ne[2] != xk->ne[2] || xq->ne[3] != 1 || xk->ne[3] != 1 ||
        !same_ne(xq, nq->dst) || !same_ne(xk, nk->dst) || xq->ne[0] != xk->ne[0] ||
        k_norm_rope2_smem(xq->ne[0], xq->ne[1] + xk->ne[1]) > 48 * 1024)
        return 0;
    const struct minfer_tensor *wk = norm_weight(nk);
    const struct minfer_tensor *pos = rq->src[1];
    /* what a node reads must not be written by one before it (rk's dst
     * may land on q's norm or x: the kernel has read them by then) */
    if (overlaps(nq->dst, xk) || (wk && overlaps(nq->dst, wk)) || overlaps(nq->dst, nk->dst) ||
        overlaps(nq->dst, pos) || overlaps(nk->dst, pos) || overlaps(rq->dst, nk->dst) ||
        overlaps(rq->dst, pos))
        return 0;
    return 1;
}

/* ROPE, ROPE with the same positions and parameters that k_norm_rope2
 * (without norms) can run as one launch: a token's block reads both
 * sources before writing, so the second's dst may land on the first's
 * source of that token (the arena reuses q's bytes once its RoPE has read
 * them, which rope_pair refuses). Refused when the first writes what the
 * second reads; rope_group adds the checks between tokens. */
static int rope_pair_seq(const struct minfer_node *n, const struct minfer_node *a)
{
    if (!rope_same(n, a))
        return 0;
    const struct minfer_tensor *x0 = n->src[0], *x1 = a->src[0];
    return x0->ne[2] == x1->ne[2] && x0->ne[3] == 1 && x1->ne[3] == 1 &&
           x0->ne[0] == x1->ne[0] &&
           k_norm_rope2_smem(x0->ne[0], x0->ne[1] + x1->ne[1]) <= 48 * 1024 &&
           !overlaps(n->dst, x1) && !overlaps(n->dst, a->src[1]) && !overlaps(a->dst, a->src[1]);
}

/* Whether x, the activations of product w, is the attention output d
 * [hd, n_head, T] read as [hd * n_head, T] in place, in whole q8_1 blocks
 * per head. */
static int reads_heads_as_rows(const struct minfer_tensor *d, const struct minfer_tensor *x,
                               const struct minfer_tensor *w)
{
    int64_t hd = d->ne[0], nh = d->ne[1], T = d->ne[2];
    if (!w || !x || hd % 32 || d->type != MINFER_TYPE_F32 || x->type != MINFER_TYPE_F32 ||
        d->ne[3] != 1)
        return 0;
    if (d->nb[0] != 4 || d->nb[1] != (size_t)hd * 4 || d->nb[2] != (size_t)(hd * nh) * 4)
        return 0;
    return x->data == d->data && x->ne[0] == hd * nh && x->ne[1] == T && x->ne[2] == 1 &&
           x->ne[3] == 1 && x->nb[0] == 4 && x->nb[1] == d->nb[2] && w->ne[0] == x->ne[0];
}

static int is_product(const struct minfer_node *a)
{
    return (a->op == MINFER_OP_MUL_MAT || a->op == MINFER_OP_MUL_MAT_ADD) && a->n_src >= 2;
}

/* ATTENTION whose output a (the next node) reads, reshaped to
 * [hd * n_head, T], as the activations of a quantized matvec. */
static int attn_feeds_q(const struct kctx *k, const struct minfer_node *n,
                        const struct minfer_node *a)
{
    if (n->op != MINFER_OP_ATTENTION || !is_product(a))
        return 0;
    const struct minfer_tensor *w = a->src[0];
    return w && k_matvec_q_supported(w->type) && n->dst->ne[2] <= cuda_matvec_tokens(k, w) &&
           reads_heads_as_rows(n->dst, a->src[1], w);
}

/* ATTENTION_LISTS (a batched decode) the same way, for the O product on
 * gemm-i8.cu or the matvec, where its tensor-core form writes q8_1 in the
 * product's group (32, or 256 for gemm-i8.cu's K-quant tiles). */
static int lists_feeds_q(const struct kctx *k, const struct minfer_node *n,
                         const struct minfer_node *a)
{
    if (n->op != MINFER_OP_ATTENTION_LISTS || !is_product(a))
        return 0;
    const struct minfer_tensor *kc = n->src[1], *vc = n->src[2], *w = a->src[0];
    return w && reads_heads_as_rows(n->dst, a->src[1], w) &&
           k_attn_lists_q8_1_ok(n->dst->ne[0], n->dst->ne[1],
                                cuda_q8_1_group(k, w, n->dst->ne[2]), kc->type, kc->data,
                                vc->data, (int64_t)kc->nb[1], (int64_t)vc->nb[1]);
}

/* ---- fused runners ---- */

/* The norm node n with its q8_1 output (that group) left in SLOT_XQ for
 * the next node. */
static minfer_status run_norm_q(struct minfer_backend *be, const struct minfer_node *n,
                                struct kctx *k, int group)
{
    const struct minfer_tensor *d = n->dst;
    void *xq = NULL;
    minfer_status st = cuda_xq_slot(be, n, d, &xq);
    if (st != MINFER_OK)
        return st;
    const struct minfer_tensor *wt = norm_weight(n);
    LAUNCH(k_rms_norm_q8_1(k, view_of(n->src[0]), wt ? wt->data : NULL, view_of(d),
                           n->fparams[0], group, xq,
                           wt && (wt->flags & MINFER_TENSOR_WEIGHT)));
    cuda_xq_written(be, d, xq, group);
    return MINFER_OK;
}

/* If kvk, kvv are the two KV stores right after a RoPE pair whose second
 * RoPE (dst rk, [hd, heads, T]) they store (kvk's source is rk's dst as
 * [hd * heads, T]), fills *kv and returns 1: k_norm_rope2 runs them last.
 * writes[] are the group's earlier writes, which must leave v alone. */
static int kv_after(const struct minfer_node *kvk, const struct minfer_node *kvv,
                    const struct minfer_tensor *rk, const struct minfer_tensor *const *writes,
                    int n_writes, struct kkv2 *kv)
{
    if (!kv_pair(kvk, kvv))
        return 0;
    const struct minfer_tensor *sk = kvk->src[0], *sv = kvv->src[0];
    if (sk->data != rk->data || sk->ne[0] != rk->ne[0] * rk->ne[1] || sk->ne[1] != rk->ne[2] ||
        rk->nb[1] != (size_t)rk->ne[0] * 4 || (sk->ne[1] > 1 && sk->nb[1] != rk->nb[2]) ||
        sv->ne[1] != sk->ne[1])
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

/* count, the nodes of a group from i, if those after i validate (the
 * separate path reports one that does not), else 0. */
static uint32_t group_checked(const struct minfer_replay_window *w, uint32_t i, uint32_t count)
{
    char why[400];
    for (uint32_t j = 1; j < count; j++)
        if (cuda_validate(&w->nodes[i + j], 1, why, sizeof(why)))
            return 0;
    return count;
}

/* A group's outputs as written, for the activation cache. */
static void group_written(struct minfer_backend *be, const struct minfer_replay_window *w,
                          uint32_t i, uint32_t count)
{
    for (uint32_t j = 0; j < count; j++)
        cuda_xq_note_write(be, w->nodes[i + j].dst);
}

/* Whether t's elements lie back to back (rows without gaps), so that a
 * node writing t as its dst rewrites its whole byte range. */
static int dense(const struct minfer_tensor *t)
{
    if (t->type != MINFER_TYPE_F32 || t->nb[0] != 4)
        return 0;
    size_t want = 4 * (size_t)t->ne[0];
    for (int d = 1; d < 4; want *= (size_t)t->ne[d], d++)
        if (t->ne[d] > 1 && t->nb[d] != want)
            return 0;
    return 1;
}

#define DEAD_SPANS 8
/* Whether no node from nodes[from] on reads t's bytes before they are
 * written again, so a fused launch may leave t unwritten. The bytes
 * still live are kept as up to DEAD_SPANS ranges, a node's dense dst
 * taking its range out of them. Bytes unread when the window ends prove
 * nothing (the host may read an output; another backend's window may
 * follow), so they count as live. */
int cuda_dead_from(const struct minfer_replay_window *w, uint32_t from,
                   const struct minfer_tensor *t)
{
    if (t->flags & MINFER_TENSOR_OUTPUT)
        return 0;
    uintptr_t lo[DEAD_SPANS], hi[DEAD_SPANS];
    int n = 1;
    byte_range(t, &lo[0], &hi[0]);
    for (uint32_t j = from; j <= w->last; j++) {
        const struct minfer_node *nd = &w->nodes[j];
        for (uint32_t s = 0; s < nd->n_src; s++) {
            if (!nd->src[s])
                continue;
            uintptr_t slo, shi;
            byte_range(nd->src[s], &slo, &shi);
            for (int k = 0; k < n; k++)
                if (slo < hi[k] && lo[k] < shi)
                    return 0;
        }
        if (!nd->dst || !dense(nd->dst))
            continue;
        uintptr_t dlo, dhi, nlo[DEAD_SPANS], nhi[DEAD_SPANS];
        byte_range(nd->dst, &dlo, &dhi);
        int m = 0;
        for (int k = 0; k < n; k++) {
            /* what of [lo, hi) dst leaves: all of it, or the parts before
             * and after dst */
            uintptr_t keep[2][2] = {{lo[k], hi[k]}, {0, 0}};
            if (dlo < hi[k] && lo[k] < dhi) {
                keep[0][1] = lo[k] < dlo ? dlo : lo[k];
                keep[1][0] = dhi, keep[1][1] = dhi < hi[k] ? hi[k] : dhi;
            }
            for (int e = 0; e < 2; e++) {
                if (keep[e][0] >= keep[e][1])
                    continue;
                if (m == DEAD_SPANS)
                    return 0;
                nlo[m] = keep[e][0], nhi[m++] = keep[e][1];
            }
        }
        n = m;
        memcpy(lo, nlo, sizeof(uintptr_t) * (size_t)m);
        memcpy(hi, nhi, sizeof(uintptr_t) * (size_t)m);
        if (n == 0)
            return 1;
    }
    return 0;
}

/* Whether t, written by a RoPE-group launch of several tokens, is apart
 * from everything another token's block reads (reads[]) or writes
 * (writes[], t itself skipped); own: a source t may equal exactly (each
 * block reads its token's plane before writing it), or NULL. */
static int apart_between_tokens(const struct minfer_tensor *t, const struct minfer_tensor *own,
                                const struct minfer_tensor *const *reads, int n_reads,
                                const struct minfer_tensor *const *writes, int n_writes)
{
    for (int j = 0; j < n_reads; j++)
        if (reads[j] && overlaps(t, reads[j]) && !(reads[j] == own && same_view(t, own)))
            return 0;
    for (int j = 0; j < n_writes; j++)
        if (writes[j] && writes[j] != t && overlaps(t, writes[j]))
            return 0;
    return 1;
}

/* Whether, with `blocks` blocks, every written row is apart from the
 * rows of other blocks, the shared rows and the other written rows. */
static int rows_apart(const struct cuda_rows *s, int n, int blocks)
{
    for (int a = 0; a < n; a++) {
        if (s[a].kind != CUDA_ROWS_WRITE)
            continue;
        for (int64_t i = 0; i < s[a].rows; i++) {
            uintptr_t lo = s[a].data + (uintptr_t)(i * s[a].stride), hi = lo + (uintptr_t)s[a].bytes;
            for (int b = 0; b < n; b++)
                for (int64_t j = 0; j < s[b].rows; j++) {
                    uintptr_t l2 = s[b].data + (uintptr_t)(j * s[b].stride);
                    if ((b == a && j == i) || !(lo < l2 + (uintptr_t)s[b].bytes && l2 < hi))
                        continue;
                    if (s[b].kind != CUDA_ROWS_READ || j % blocks != i % blocks)
                        return 0;
                }
        }
    }
    return 1;
}

int cuda_head_blocks(const struct cuda_rows *s, int n, int max_blocks)
{
    for (int g = max_blocks; g >= 2; g--)
        if (rows_apart(s, n, g))
            return g;
    return 0;
}

/* The whole of t as one shared row. */
static struct cuda_rows shared_rows(const struct minfer_tensor *t)
{
    uintptr_t lo, hi;
    byte_range(t, &lo, &hi);
    return (struct cuda_rows){lo, 1, 0, (int64_t)(hi - lo), CUDA_ROWS_SHARED};
}

/* The heads of a one-token [hd, heads] view, rows of hd floats. */
static struct cuda_rows head_rows(const struct minfer_tensor *t, int kind)
{
    return (struct cuda_rows){(uintptr_t)t->data, t->ne[1], (int64_t)t->nb[1], 4 * t->ne[0], kind};
}

/* One token's (q norm, k norm, q RoPE, k RoPE, K store, V store) at nd[0..5]
 * as k_norm_rope_kv's blocks of heads: their count (0: none apart, the one
 * block of k_norm_rope2 runs it), *q and *kx filled; outputs that no node
 * from `after` on reads are left unwritten. */
static int norm_rope_blocks(const struct minfer_replay_window *w, const struct minfer_node *nd,
                            uint32_t after, struct knr *q, struct knr *kx)
{
    const struct minfer_node *nq = &nd[0], *nk = &nd[1], *rq = &nd[2], *rk = &nd[3];
    const struct minfer_tensor *xq = nq->src[0], *xk = nk->src[0], *sv = nd[5].src[0];
    int64_t hd = xq->ne[0];
    if (xq->ne[2] != 1 || xk->ne[2] != 1 || sv->ne[1] != 1 || sv->ne[0] % hd || sv->nb[0] != 4)
        return 0;
    const struct minfer_tensor *nqo = cuda_dead_from(w, after, nq->dst) ? NULL : nq->dst;
    const struct minfer_tensor *nko = cuda_dead_from(w, after, nk->dst) ? NULL : nk->dst;
    const struct minfer_tensor *rko = cuda_dead_from(w, after, rk->dst) ? NULL : rk->dst;
    struct cuda_rows s[10];
    int n = 0;
    s[n++] = head_rows(xq, CUDA_ROWS_READ);
    s[n++] = head_rows(xk, CUDA_ROWS_READ);
    s[n++] = (struct cuda_rows){(uintptr_t)sv->data, sv->ne[0] / hd, 4 * hd, 4 * hd, CUDA_ROWS_READ};
    s[n++] = shared_rows(rq->src[1]);    /* positions */
    s[n++] = shared_rows(nd[4].src[1]); /* cells */
    const struct minfer_tensor *wq = norm_weight(nq), *wk = norm_weight(nk);
    if (wq)
        s[n++] = shared_rows(wq);
    if (wk)
        s[n++] = shared_rows(wk);
    s[n++] = head_rows(rq->dst, CUDA_ROWS_WRITE);
    if (nqo)
        s[n++] = head_rows(nqo, CUDA_ROWS_WRITE);
    if (nko)
        s[n++] = head_rows(nko, CUDA_ROWS_WRITE);
    if (rko)
        s[n++] = head_rows(rko, CUDA_ROWS_WRITE);
    int64_t most = xq->ne[1] < 64 ? xq->ne[1] : 64;
    int blocks = cuda_head_blocks(s, n, (int)most);
    struct kview none = {0};
    *q = (struct knr){view_of(xq), nqo ? view_of(nqo) : none, view_of(rq->dst),
                      wq ? wq->data : NULL, nq->fparams[0]};
    *kx = (struct knr){view_of(xk), nko ? view_of(nko) : none, rko ? view_of(rko) : none,
                       wk ? wk->data : NULL, nk->fparams[0]};
    return blocks;
}

/* (q norm, k norm,) q RoPE, k RoPE (, K store, V store) at nodes[i..] as
 * one k_norm_rope2 launch, a block per token (k_rope_kv, a block per token
 * and head, without norms; k_norm_rope_kv, blocks of heads, for one token
 * with norms where norm_rope_blocks finds some): returns how many nodes it
 * ran (0: no such group here; 2 only where rope_pair refuses, since
 * k_rope2 already does that case). A token's block orders its own reads
 * and writes; between tokens, every write must be apart from what the
 * other blocks read and write, except k's RoPE when only the K store
 * reads it (cuda_dead_from): it then stays in shared memory (the arena puts it
 * on q's bytes, which other tokens' blocks are still reading). *st gets
 * the launch's failure. */
static uint32_t rope_group(struct minfer_backend *be, const struct minfer_replay_window *w,
                           uint32_t i, struct kctx *k, minfer_status *st)
{
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
    const struct minfer_node *nq = r ? &nd[i] : NULL, *nk = r ? &nd[i + 1] : NULL;
    const struct minfer_tensor *xq = nq ? nq->src[0] : rq->src[0];
    const struct minfer_tensor *xk = nk ? nk->src[0] : rk->src[0];
    /* no norms: a block per token and head (several tokens: a block per
     * token ran the three kernels' work in about their time; one token:
     * that block ran 32 heads' angles and stores alone, 7.0 us on the
     * 7B; docs/PERF.md), when the blocks' writes are apart as below */
    bool per_head = !r && with_kv && k_rope_kv_ok(xq->ne[0], kv.t0, kv.t1) &&
                    xq->ne[1] + xk->ne[1] + kv.s1.ne[0] / xq->ne[0] <= 65535;
    bool k_kept = true; /* k's RoPE written out */
    if (xq->ne[2] > 1 || per_head) {
        /* blocks of other tokens, or of other heads of the token, run
         * unordered: each write must be apart from what they read and
         * write (a block reads its own row before writing it) */
        const struct minfer_tensor *reads[5] = {xq, xk, rq->src[1],
                                                with_kv ? nd[i + n].src[1] : NULL,
                                                with_kv ? nd[i + n + 1].src[0] : NULL};
        bool apart = true;
        for (int j = 0; j < nw && apart; j++) {
            const struct minfer_tensor *t = writes[j];
            const struct minfer_tensor *own = !r && t == rq->dst ? xq : NULL;
            if (apart_between_tokens(t, own, reads, 5, writes, nw))
                continue;
            if (t == rk->dst && with_kv && cuda_dead_from(w, i + used, t))
                k_kept = false;
            else
                apart = false;
        }
        if (!apart && xq->ne[2] > 1)
            return 0;
        if (!apart) { /* one token: its one block orders its own writes */
            per_head = false;
            k_kept = true;
        }
    }
    if (group_checked(w, i, used) != used)
        return 0; /* the separate path reports it */
    /* one token with norms: blocks of heads where its rows allow (the one
     * block of k_norm_rope2 took 9.5 us a qwen3-8b layer; docs/PERF.md) */
    struct knr bq, bk;
    int blocks = r && with_kv && xq->ne[2] == 1 && k_rope_kv_ok(xq->ne[0], kv.t0, kv.t1)
                     ? norm_rope_blocks(w, &nd[i], i + used, &bq, &bk)
                     : 0;
    struct kview none = {0}, rk_out = k_kept ? view_of(rk->dst) : none;
    const struct minfer_tensor *tq = norm_weight(nq), *tk = norm_weight(nk);
    const float *wq = tq ? tq->data : NULL, *wk = tk ? tk->data : NULL;
    /* what the kernels may read before their wait: no kernel writes it */
    unsigned fixed = (rq->src[1]->flags & MINFER_TENSOR_INPUT) ? K_FIXED_POS : 0u;
    if ((!tq || (tq->flags & MINFER_TENSOR_WEIGHT)) && (!tk || (tk->flags & MINFER_TENSOR_WEIGHT)))
        fixed |= K_FIXED_W;
    int fail = blocks ? k_norm_rope_kv(k, &bq, &bk, blocks, rq->src[1]->data, rq->iparams[0],
                                       rq->fparams[0], rq->fparams[1], &kv, fixed)
             : per_head ? k_rope_kv(k, view_of(xq), view_of(rq->dst), view_of(xk), rk_out,
                                    rq->src[1]->data, rq->iparams[0], rq->fparams[0],
                                    rq->fparams[1], &kv, fixed)
                        : k_norm_rope2(k, view_of(xq), wq, nq ? view_of(nq->dst) : none,
                                       view_of(rq->dst), nq ? nq->fparams[0] : 0.0f,
                                       view_of(xk), wk, nk ? view_of(nk->dst) : none, rk_out,
                                       nk ? nk->fparams[0] : 0.0f, rq->src[1]->data,
                                       rq->iparams[0], rq->fparams[0], rq->fparams[1],
                                       with_kv ? &kv : NULL, fixed);
    if (fail)
        *st = cuda_node_fail(be, &nd[i], MINFER_ERR_BACKEND, k->err);
    group_written(be, w, i, used);
    if (blocks)
        CUDA_COUNT(rope_head_blocks);
    if (r)
        CUDA_COUNT(norm_ropes);
    else
        CUDA_COUNT(rope_seq);
    if (with_kv)
        CUDA_COUNT(rope_kv);
    if (xq->ne[2] > 1)
        CUDA_COUNT(rope_tokens);
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

/* Whether the n products at g, all of x, may run as one launch: none
 * writes x or what another reads (its weight, its addend) or writes. */
static int products_apart(const struct minfer_node *g, uint32_t n, const struct minfer_tensor *x)
{
    for (uint32_t a = 0; a < n; a++) {
        if (overlaps(g[a].dst, x))
            return 0;
        for (uint32_t b = 0; b < n; b++)
            if (a != b && (overlaps(g[a].dst, g[b].dst) || overlaps(g[a].dst, g[b].src[0]) ||
                           (g[b].op == MINFER_OP_MUL_MAT_ADD && overlaps(g[a].dst, g[b].src[2]))))
                return 0;
    }
    return 1;
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
    return n >= 2 && products_apart(&nd[i], n, x) ? n : 0;
}

/* The count products at g as k_matvec_q_multi's segments (a
 * MUL_MAT_ADD's addend as the epilogue, in epis[j]). */
static void matvec_segs(const struct minfer_node *g, uint32_t count, struct kmv_seg *segs,
                        struct kepi *epis)
{
    for (uint32_t j = 0; j < count; j++) {
        const struct minfer_tensor *w = g[j].src[0];
        int sum = g[j].op == MINFER_OP_MUL_MAT_ADD;
        if (sum)
            epis[j] = cuda_sum_epi(&g[j]);
        segs[j] = (struct kmv_seg){w->type, w->data, (int64_t)w->nb[1], w->ne[1], g[j].dst->data,
                                   sum ? &epis[j] : NULL};
    }
}

/* The n products at g (a matvec_group) as one k_matvec_q_multi launch. */
static minfer_status run_matvec_group(struct minfer_backend *be, const struct minfer_node *g,
                                      uint32_t count, struct kctx *k)
{
    const struct minfer_node *n = &g[0]; /* named in errors */
    const struct minfer_tensor *x = n->src[1];
    void *xq = NULL;
    minfer_status st =
        cuda_shared_x(be, n, k, 0, x->data, x->ne[0], 1, (int64_t)x->nb[1], 32, &xq);
    if (st != MINFER_OK)
        return st;
    struct kmv_seg segs[4];
    struct kepi epis[4];
    matvec_segs(g, count, segs, epis);
    LAUNCH(k_matvec_q_multi(k, segs, (int)count, x->ne[0], xq));
    return MINFER_OK;
}

/* The Q, K and V products of one token (a matvec_group of three), the
 * RoPE of q and of k (NeoX, every dimension of a head) and the K and V
 * stores after them, as one k_matvec_q_multi_rope launch: the products'
 * rows stay in registers, so their outputs must be dead after the seven
 * nodes and are never written; k's RoPE is written only if a later node
 * reads it. Caches F32 or F16 (a Q8_0 cache quantizes 32 values of a head
 * together, which a thread group's two rows do not hold). Returns 7, or 0
 * when the nodes are not that. */
static uint32_t qkv_rope_group(struct minfer_backend *be, const struct minfer_replay_window *w,
                               uint32_t i, struct kctx *k, minfer_status *st)
{
    const struct minfer_node *nd = w->nodes;
    if (w->last - i + 1 < 7 || matvec_group(w, i) != 3)
        return 0;
    const struct minfer_node *rq = &nd[i + 3], *rk = &nd[i + 4];
    if (!rope_same(rq, rk))
        return 0;
    const struct minfer_tensor *xq = rq->src[0], *xk = rk->src[0], *pos = rq->src[1];
    const struct minfer_tensor *pq = nd[i].dst, *pk = nd[i + 1].dst, *pv = nd[i + 2].dst;
    const int64_t hd = xq->ne[0];
    /* the RoPE sources are the Q and K products' rows as [hd, heads, 1] */
    if (rq->iparams[0] != hd || xq->ne[2] != 1 || xq->nb[1] != (size_t)hd * 4 ||
        xk->nb[1] != (size_t)hd * 4 || xq->data != pq->data || xk->data != pk->data ||
        xq->ne[0] * xq->ne[1] != pq->ne[0] || xk->ne[0] * xk->ne[1] != pk->ne[0] ||
        rq->dst->ne[0] != hd || rk->dst->ne[0] != hd)
        return 0;
    struct kkv2 kv;
    if (!kv_after(&nd[i + 5], &nd[i + 6], rk->dst, NULL, 0, &kv) || kv.s1.data != pv->data ||
        kv.s1.ne[0] != pv->ne[0] || kv.s1.ne[1] != 1 ||
        !k_matvec_q_multi_rope_ok(hd, nd[i].src[0]->type, nd[i + 1].src[0]->type,
                                  nd[i + 2].src[0]->type, kv.t0, kv.t1))
        return 0;
    for (uint32_t j = 0; j < 3; j++)
        if (!cuda_dead_from(w, i + 7, nd[i + j].dst))
            return 0;
    const bool k_out = !cuda_dead_from(w, i + 7, rk->dst);
    /* what the launch reads besides weights and x's q8_1: the biases, the
     * position and the cell, none of which a write of it may touch */
    const struct minfer_tensor *writes[2] = {rq->dst, k_out ? rk->dst : NULL};
    const struct minfer_tensor *cells = nd[i + 5].src[1];
    for (int a = 0; a < 2; a++) {
        const struct minfer_tensor *t = writes[a];
        if (!t)
            continue;
        if (overlaps(t, pos) || overlaps(t, cells))
            return 0;
        for (uint32_t j = 0; j < 3; j++)
            if (nd[i + j].op == MINFER_OP_MUL_MAT_ADD && overlaps(t, nd[i + j].src[2]))
                return 0;
    }
    if (k_out && overlaps(rq->dst, rk->dst))
        return 0;
    if (group_checked(w, i, 7) != 7)
        return 0; /* the separate path reports it */
    const struct minfer_tensor *x = nd[i].src[1];
    void *xs = NULL;
    *st = cuda_shared_x(be, &nd[i], k, 0, x->data, x->ne[0], 1, (int64_t)x->nb[1], 32, &xs);
    if (*st != MINFER_OK)
        return 7;
    struct kmv_seg segs[3];
    struct kepi epis[3];
    matvec_segs(&nd[i], 3, segs, epis);
    struct kqkv_rope r = {rq->dst->data, k_out ? rk->dst->data : NULL, (int64_t)rq->dst->nb[1],
                          (int64_t)rk->dst->nb[1], pos->data, kv.cells, kv.d0, kv.d1, kv.nb0,
                          kv.nb1, kv.nc0, kv.nc1, kv.t0, kv.t1, (int)hd, rq->fparams[0],
                          rq->fparams[1], (pos->flags & MINFER_TENSOR_INPUT) != 0};
    if (k_matvec_q_multi_rope(k, segs, x->ne[0], xs, &r))
        *st = cuda_node_fail(be, &nd[i], MINFER_ERR_BACKEND, k->err);
    group_written(be, w, i, 7);
    CUDA_COUNT(groups);
    CUDA_COUNT(qkv_ropes);
    return 7;
}

/* A batched decode product gemm-i8.cu runs with its addend as the
 * epilogue: MUL_MAT, or MUL_MAT_ADD whose addend ([N, M] or a [N, 1]
 * bias) is apart from dst, of plain f32 x and dst. */
static int is_q_gemm(const struct kctx *k, const struct minfer_node *n)
{
    if ((n->op != MINFER_OP_MUL_MAT && n->op != MINFER_OP_MUL_MAT_ADD) || n->n_src < 2)
        return 0;
    const struct minfer_tensor *w = n->src[0], *x = n->src[1], *d = n->dst;
    int64_t M = x->ne[1];
    if (!w || !d || x->type != MINFER_TYPE_F32 || !is_plain_f32_2d(x) || !is_plain_f32_2d(d) ||
        d->ne[0] != w->ne[1] || d->ne[1] != M || M <= cuda_matvec_tokens(k, w) ||
        !k_gemm_takes_q8_1(k, w->type, w->ne[0], M))
        return 0;
    if (n->op == MINFER_OP_MUL_MAT_ADD) {
        const struct minfer_tensor *a = n->src[2];
        if (n->n_src < 3 || !a || a->type != MINFER_TYPE_F32 || a->nb[0] != sizeof(float) ||
            a->ne[0] != d->ne[0] || (a->ne[1] != 1 && a->ne[1] != M) || overlaps(a, d))
            return 0;
    }
    return 1;
}

/* How many nodes from i (2..3, 0: none) are batched products of the same
 * x and weight type that k_gemm_multi runs as one launch (Q, K and V, or
 * the two of them that share a type): none writes what another reads. */
static uint32_t gemm_group(const struct kctx *k, const struct minfer_replay_window *w,
                           uint32_t i, struct kgemm_seg *segs, struct kgemm_epi *epis)
{
    const struct minfer_node *nd = w->nodes;
    if (!is_q_gemm(k, &nd[i]))
        return 0;
    const struct minfer_tensor *x = nd[i].src[1], *w0 = nd[i].src[0];
    uint32_t n = 1;
    while (n < 3 && i + n <= w->last && is_q_gemm(k, &nd[i + n]) &&
           same_view(nd[i + n].src[1], x) && nd[i + n].src[0]->type == w0->type &&
           nd[i + n].src[0]->ne[0] == w0->ne[0])
        n++;
    if (n < 2 || !products_apart(&nd[i], n, x))
        return 0;
    for (uint32_t j = 0; j < n; j++) {
        const struct minfer_node *nj = &nd[i + j];
        const struct minfer_tensor *wj = nj->src[0], *a = nj->src[2];
        bool sum = nj->op == MINFER_OP_MUL_MAT_ADD;
        if (sum)
            epis[j] = (struct kgemm_epi){KGEMM_ADD, a->data, a->ne[1] == 1 ? 0 : (int64_t)a->nb[1]};
        segs[j] = (struct kgemm_seg){wj->data, wj->ne[1], (int64_t)wj->nb[1], nj->dst->data,
                                     (int64_t)nj->dst->nb[1], sum ? &epis[j] : NULL};
    }
    return k_gemm_multi_ok(k, w0->type, segs, (int)n, w0->ne[0], x->ne[1]) ? n : 0;
}

/* The split-K planes (SLOT_SPLIT) of the n products at g, a gemm_group. */
static size_t gemm_group_planes(const struct kctx *k, const struct minfer_node *g, uint32_t count,
                                const struct kgemm_seg *segs)
{
    const struct minfer_tensor *w = g->src[0];
    return k_gemm_multi_scratch_bytes(k, w->type, segs, (int)count, w->ne[0], g->src[1]->ne[1]);
}

void cuda_fuse_reserve(struct minfer_backend *be, const struct minfer_replay_window *w,
                       struct kctx *k)
{
    if (be->fuse_off)
        return;
    size_t need = 0;
    for (uint32_t i = w->first; i <= w->last; i++) {
        struct kgemm_seg segs[3];
        struct kgemm_epi epis[3];
        uint32_t group = gemm_group(k, w, i, segs, epis);
        if (!group)
            continue;
        size_t pb = gemm_group_planes(k, &w->nodes[i], group, segs);
        need = pb > need ? pb : need;
        i += group - 1;
    }
    void *p;
    if (need && cu_scratch(be->c, SLOT_SPLIT, need, &p) != MINFER_OK)
        cu_ctx_clear_error(be->c); /* the capture leaves the groups unfused */
}

/* The n products at g (a gemm_group) as one k_gemm_multi launch. */
static minfer_status run_gemm_group(struct minfer_backend *be, const struct minfer_node *g,
                                    uint32_t count, struct kctx *k,
                                    const struct kgemm_seg *segs)
{
    const struct minfer_node *n = &g[0]; /* named in errors */
    const struct minfer_tensor *x = n->src[1], *w = n->src[0];
    int64_t K = w->ne[0], M = x->ne[1];
    void *xq = NULL, *part = NULL;
    minfer_status st = cuda_shared_x(be, n, k, 0, x->data, K, M, (int64_t)x->nb[1],
                                        k_gemm_takes_q8_1(k, w->type, K, M), &xq);
    if (st != MINFER_OK)
        return st;
    size_t pb = gemm_group_planes(k, g, count, segs);
    if (pb) {
        st = cu_scratch(be->c, SLOT_SPLIT, pb, &part);
        if (st != MINFER_OK)
            return cuda_node_fail(be, n, st, cu_ctx_error(be->c));
    }
    LAUNCH(k_gemm_multi(k, w->type, segs, (int)count, K, xq, M, part));
    return MINFER_OK;
}

/* ---- the capture's entry ---- */

/* The patterns in the order capture_window always tried them: a group of
 * products first (Q, K, V), then the RoPE group, then pairs, then the
 * producers of quantized activations. */
uint32_t cuda_fuse_at(struct minfer_backend *be, const struct minfer_replay_window *w, uint32_t i,
                      struct kctx *k, minfer_status *st)
{
    const struct minfer_node *n = &w->nodes[i];
    struct kgemm_seg segs[3];
    struct kgemm_epi epis[3];
    uint32_t group = group_checked(w, i, gemm_group(k, w, i, segs, epis));
    /* a capture may not grow scratch: a group whose planes the warm-up
     * could not reserve (cuda_fuse_reserve) runs as its products */
    if (group && !cu_scratch_holds(be->c, SLOT_SPLIT, gemm_group_planes(k, n, group, segs)))
        group = 0;
    if (group) {
        *st = run_gemm_group(be, n, group, k, segs);
        group_written(be, w, i, group);
        CUDA_COUNT(gemm_groups);
        return group;
    }
    uint32_t used = qkv_rope_group(be, w, i, k, st);
    if (used)
        return used;
    group = group_checked(w, i, matvec_group(w, i));
    if (group) {
        *st = run_matvec_group(be, n, group, k);
        group_written(be, w, i, group);
        CUDA_COUNT(groups);
        return group;
    }
    used = rope_group(be, w, i, k, st);
    if (used)
        return used;
    const struct minfer_node *a = i < w->last ? &w->nodes[i + 1] : NULL;
    if (!a)
        return 0;
    if ((rope_pair(n, a) || kv_pair(n, a)) && group_checked(w, i, 2) == 2) {
        if (n->op == MINFER_OP_ROPE) {
            if (k_rope2(k, view_of(n->src[0]), view_of(n->dst), view_of(a->src[0]),
                        view_of(a->dst), n->src[1]->data, n->iparams[0], n->fparams[0],
                        n->fparams[1]))
                *st = cuda_node_fail(be, n, MINFER_ERR_BACKEND, k->err);
        } else {
            const struct minfer_tensor *d0 = n->dst, *d1 = a->dst;
            if (k_kv_store2(k, view_of(n->src[0]), d0->type, d0->data, (int64_t)d0->nb[1],
                            d0->ne[1], view_of(a->src[0]), d1->type, d1->data,
                            (int64_t)d1->nb[1], d1->ne[1], n->src[1]->data))
                *st = cuda_node_fail(be, n, MINFER_ERR_BACKEND, k->err);
        }
        group_written(be, w, i, 2);
        return 2;
    }
    if (attn_feeds_q(k, n, a)) {
        *st = cuda_run_attention(be, n, k, a); /* notes its own write */
        return 1;
    }
    if (lists_feeds_q(k, n, a)) {
        *st = cuda_run_attention_lists(be, n, k, a); /* notes its own write */
        return 1;
    }
    int q8_group = norm_feeds_q(k, n, a);
    if (q8_group) {
        *st = run_norm_q(be, n, k, q8_group); /* notes its own write */
        return 1;
    }
    return 0;
}
