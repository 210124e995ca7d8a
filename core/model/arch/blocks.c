/*
 * blocks.c — the graph blocks every decoder architecture is built from:
 * inputs and embedding, RMS norm, self-attention, SwiGLU FFN, output head.
 * What a block does depends only on which weights the model has (a bias,
 * a per-head norm), never on the architecture's name.
 */
#include <math.h>
#include <stdio.h>

#include "minfer/quant.h"
#include "model/model.h"

/* ---- weights and inputs ---- */

struct gtensor *build_weight(struct build *b, int il, int slot)
{
    int32_t idx = il < 0 ? b->m->global[slot] : b->m->layer[il][slot];
    if (idx < 0)
        return NULL;
    if (b->wt[idx])
        return b->wt[idx];
    const struct minfer_gguf_tensor *gt = b->m->weights[idx].gt;
    const struct minfer_type_traits *tr = minfer_type_traits_of(gt->type);
    int64_t ne[4] = {gt->ne[0], gt->ne[1], gt->ne[2], gt->ne[3]};
    size_t nb[4];
    nb[0] = tr->type_size;
    nb[1] = minfer_row_size(gt->type, ne[0]);
    nb[2] = nb[1] * (size_t)ne[1];
    nb[3] = nb[2] * (size_t)ne[2];
    b->wt[idx] = graph_fixed(b->g, gt->type, ne, nb, b->wdata[idx], MINFER_TENSOR_WEIGHT,
                             gt->name);
    return b->wt[idx];
}

struct gtensor *build_inputs_embed(struct build *b)
{
    int32_t T = b->n_tokens;
    b->inp_tokens = graph_input(b->g, MINFER_TYPE_I32, T, 1, "inp_tokens");
    b->inp_pos = graph_input(b->g, MINFER_TYPE_I32, T, 1, "inp_pos");
    b->inp_cells = graph_input(b->g, MINFER_TYPE_I32, T, 1, "inp_kv_cells");
    if (b->n_lists) {
        b->inp_range = graph_input(b->g, MINFER_TYPE_I32, 2, T, "inp_kv_range");
        /* windowed layers read their own ranges: made here, next to the
         * other inputs, whenever the model has a window */
        if (b->hp->n_swa > 0)
            b->inp_range_w = graph_input(b->g, MINFER_TYPE_I32, 2, T, "inp_kv_range_swa");
        b->inp_qlist = graph_input(b->g, MINFER_TYPE_I32, T, 1, "inp_qlist");
        b->inp_lists = graph_input(b->g, MINFER_TYPE_I32, b->n_kv, b->n_lists, "inp_kv_lists");
    } else {
        b->inp_kv_len = graph_input(b->g, MINFER_TYPE_I32, 1, 1, "inp_kv_len");
    }
    return graph_get_rows(b->g, build_weight(b, -1, W_TOKEN_EMBD), b->inp_tokens, "token_embd");
}

/* ---- norm ---- */

struct gtensor *build_norm(struct build *b, struct gtensor *x, int il, int slot,
                           const char *label)
{
    struct gtensor *n = graph_rms_norm(b->g, x, (float)b->hp->norm_eps, label);
    return graph_mul(b->g, n, build_weight(b, il, slot), label);
}

/* ---- attention ---- */

/* W x (+ bias when the layer has one). */
static struct gtensor *proj(struct build *b, int il, int w_slot, int bias_slot,
                            struct gtensor *x, const char *label)
{
    struct gtensor *y = graph_mul_mat(b->g, build_weight(b, il, w_slot), x, label);
    struct gtensor *bias = bias_slot >= 0 ? build_weight(b, il, bias_slot) : NULL;
    return bias ? graph_add(b->g, y, bias, label) : y;
}

/* The cache region of one layer as a tensor [row, n_cells], and the view
 * attention reads: [row, n_kv] (the bucket). */
static struct gtensor *kv_region(struct build *b, void *data, uint32_t type, int64_t row,
                                 size_t row_bytes, const char *name, struct gtensor **view)
{
    int64_t ne[4] = {row, b->kv->n_cells, 1, 1};
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    size_t nb[4] = {tr->type_size, row_bytes, row_bytes * b->kv->n_cells,
                    row_bytes * b->kv->n_cells};
    struct gtensor *full = graph_fixed(b->g, type, ne, nb, data, MINFER_TENSOR_KV, name);
    int64_t vne[4] = {row, b->n_kv, 1, 1};
    size_t vnb[4] = {tr->type_size, row_bytes, row_bytes * (size_t)b->n_kv,
                     row_bytes * (size_t)b->n_kv};
    *view = full ? graph_view(b->g, full, vne, vnb, 0, name) : NULL;
    return full;
}

struct gtensor *build_attn(struct build *b, int il, struct gtensor *x)
{
    return build_attn_ext(b, il, x, b->hp->rope_base, b->hp->rope_scale, 0,
                          1.0f / sqrtf((float)b->hp->head_dim));
}

struct gtensor *build_attn_ext(struct build *b, int il, struct gtensor *x, double rope_base,
                               double rope_scale, int window, float scale)
{
    const struct model_hparams *hp = b->hp;
    struct graph *g = b->g;
    int32_t T = b->n_tokens;
    char lab[64];

    snprintf(lab, sizeof lab, "blk.%d.attn_q", il);
    struct gtensor *q = proj(b, il, W_ATTN_Q, W_ATTN_Q_BIAS, x, lab);
    snprintf(lab, sizeof lab, "blk.%d.attn_k", il);
    struct gtensor *k = proj(b, il, W_ATTN_K, W_ATTN_K_BIAS, x, lab);
    snprintf(lab, sizeof lab, "blk.%d.attn_v", il);
    struct gtensor *v = proj(b, il, W_ATTN_V, W_ATTN_V_BIAS, x, lab);

    q = graph_reshape(g, q, hp->head_dim, hp->n_head, T);
    k = graph_reshape(g, k, hp->head_dim, hp->n_head_kv, T);

    /* Per-head RMS norm over head_dim, when the layer has its weights. */
    if (build_weight(b, il, W_ATTN_Q_NORM)) {
        snprintf(lab, sizeof lab, "blk.%d.attn_q_norm", il);
        q = build_norm(b, q, il, W_ATTN_Q_NORM, lab);
    }
    if (build_weight(b, il, W_ATTN_K_NORM)) {
        snprintf(lab, sizeof lab, "blk.%d.attn_k_norm", il);
        k = build_norm(b, k, il, W_ATTN_K_NORM, lab);
    }

    /* Llama 3.1's frequency factors, when the model has them; YaRN only on
     * layers with the model's own RoPE (not Gemma 3's local layers) */
    struct gtensor *factors = build_weight(b, -1, W_ROPE_FREQS);
    struct graph_rope_params rp;
    model_rope_params(hp, &rp);
    if (rope_base != hp->rope_base || rope_scale != hp->rope_scale) {
        rp.freq_base = (float)rope_base;
        rp.freq_scale = (float)rope_scale;
        rp.ext_factor = rp.mscale = rp.corr_lo = rp.corr_hi = 0.0f;
    }
    snprintf(lab, sizeof lab, "blk.%d.rope_q", il);
    q = graph_rope_p(g, q, b->inp_pos, factors, &rp, lab);
    snprintf(lab, sizeof lab, "blk.%d.rope_k", il);
    k = graph_rope_p(g, k, b->inp_pos, factors, &rp, lab);

    struct gtensor *kview = NULL, *vview = NULL;
    snprintf(lab, sizeof lab, "cache_k.%d", il);
    struct gtensor *kc = kv_region(b, kv_k(b->kv, il), b->kv->type_k, b->kv->row_k,
                                   b->kv->row_bytes_k, lab, &kview);
    snprintf(lab, sizeof lab, "cache_v.%d", il);
    struct gtensor *vc = kv_region(b, kv_v(b->kv, il), b->kv->type_v, b->kv->row_v,
                                   b->kv->row_bytes_v, lab, &vview);
    snprintf(lab, sizeof lab, "blk.%d.kv_store_k", il);
    graph_kv_store(g, kc, k, b->inp_cells, lab);
    snprintf(lab, sizeof lab, "blk.%d.kv_store_v", il);
    graph_kv_store(g, vc, v, b->inp_cells, lab);

    snprintf(lab, sizeof lab, "blk.%d.attn", il);
    struct gtensor *a;
    if (b->n_lists && window > 0 && (window != hp->n_swa || !b->inp_range_w)) {
        /* the host computes one set of windowed ranges, for n_swa */
        graph_fail(g, "layer %d: a sliding window of %d positions, the model's is %lld", il,
                   window, (long long)hp->n_swa);
        return NULL;
    }
    /* many sequences: lists name cells anywhere in the cache, so attention
     * reads the whole region, not the bucket's prefix; a windowed layer
     * reads the ranges the host cut to the window */
    if (b->n_lists)
        a = graph_attention_lists(g, q, kc, vc, window > 0 ? b->inp_range_w : b->inp_range,
                                  b->inp_qlist, b->inp_lists, (int)hp->n_head_kv, scale, lab);
    else
        a = graph_attention_swa(g, q, kview, vview, b->inp_kv_len, b->inp_pos,
                                (int)hp->n_head_kv, scale, window, lab);
    a = graph_reshape(g, a, hp->head_dim * hp->n_head, T, 1);
    snprintf(lab, sizeof lab, "blk.%d.attn_output", il);
    return graph_mul_mat(g, build_weight(b, il, W_ATTN_OUT), a, lab);
}

/* ---- feed-forward ---- */

struct gtensor *build_ffn(struct build *b, int il, struct gtensor *x)
{
    char lab[64];
    snprintf(lab, sizeof lab, "blk.%d.ffn_gate", il);
    struct gtensor *gate = graph_mul_mat(b->g, build_weight(b, il, W_FFN_GATE), x, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_up", il);
    struct gtensor *up = graph_mul_mat(b->g, build_weight(b, il, W_FFN_UP), x, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_swiglu", il);
    struct gtensor *h = graph_swiglu(b->g, gate, up, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_down", il);
    return graph_mul_mat(b->g, build_weight(b, il, W_FFN_DOWN), h, lab);
}

struct gtensor *build_ffn_geglu(struct build *b, int il, struct gtensor *x)
{
    char lab[64];
    snprintf(lab, sizeof lab, "blk.%d.ffn_gate", il);
    struct gtensor *gate = graph_mul_mat(b->g, build_weight(b, il, W_FFN_GATE), x, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_up", il);
    struct gtensor *up = graph_mul_mat(b->g, build_weight(b, il, W_FFN_UP), x, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_geglu", il);
    struct gtensor *h = graph_geglu(b->g, gate, up, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_down", il);
    return graph_mul_mat(b->g, build_weight(b, il, W_FFN_DOWN), h, lab);
}

struct gtensor *build_ffn_moe(struct build *b, int il, struct gtensor *x)
{
    const struct model_hparams *hp = b->hp;
    struct graph *g = b->g;
    int32_t T = b->n_tokens;
    char lab[64];
    snprintf(lab, sizeof lab, "blk.%d.ffn_gate_inp", il);
    struct gtensor *logits = graph_mul_mat(g, build_weight(b, il, W_FFN_GATE_INP), x, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_moe_topk", il);
    struct gtensor *sel = graph_topk(g, logits, (int)hp->n_expert_used, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_moe_weights", il);
    struct gtensor *w = graph_moe_weights(g, logits, sel, hp->expert_norm, lab);
    struct gtensor *x3 = graph_reshape(g, x, hp->n_embd, 1, T);
    snprintf(lab, sizeof lab, "blk.%d.ffn_gate_exps", il);
    struct gtensor *gate = graph_mul_mat_id(g, build_weight(b, il, W_FFN_GATE_EXPS), x3, sel, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_up_exps", il);
    struct gtensor *up = graph_mul_mat_id(g, build_weight(b, il, W_FFN_UP_EXPS), x3, sel, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_moe_swiglu", il);
    struct gtensor *h = graph_swiglu(g, gate, up, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_down_exps", il);
    struct gtensor *down = graph_mul_mat_id(g, build_weight(b, il, W_FFN_DOWN_EXPS), h, sel, lab);
    snprintf(lab, sizeof lab, "blk.%d.ffn_moe_sum", il);
    return graph_moe_sum(g, down, w, lab);
}

/* ---- output ---- */

void build_output(struct build *b, struct gtensor *x)
{
    if (b->n_out == 0)
        return;
    /* Only the rows that need logits go through the norm and the head. */
    if (b->n_out < b->n_tokens)
        x = graph_cols(b->g, x, b->n_tokens - b->n_out, b->n_out);
    x = build_norm(b, x, -1, W_OUTPUT_NORM, "output_norm");
    struct gtensor *w = build_weight(b, -1, W_OUTPUT);
    if (!w)
        w = build_weight(b, -1, W_TOKEN_EMBD);
    b->out_logits = graph_mul_mat(b->g, w, x, "output");
    graph_set_output(b->g, b->out_logits);
}

/* ---- whole decoder ---- */

void build_prenorm_decoder(struct build *b)
{
    char lab[64];
    struct gtensor *x = build_inputs_embed(b);
    for (int il = 0; il < (int)b->hp->n_layer; il++) {
        snprintf(lab, sizeof lab, "blk.%d.attn_norm", il);
        struct gtensor *h = build_norm(b, x, il, W_ATTN_NORM, lab);
        snprintf(lab, sizeof lab, "blk.%d.attn_residual", il);
        x = graph_add(b->g, x, build_attn(b, il, h), lab);
        snprintf(lab, sizeof lab, "blk.%d.ffn_norm", il);
        h = build_norm(b, x, il, W_FFN_NORM, lab);
        snprintf(lab, sizeof lab, "blk.%d.ffn_residual", il);
        /* a layer with a router runs the mixture of experts */
        struct gtensor *f = build_weight(b, il, W_FFN_GATE_INP) ? build_ffn_moe(b, il, h)
                                                                 : build_ffn(b, il, h);
        x = graph_add(b->g, x, f, lab);
    }
    build_output(b, x);
}
