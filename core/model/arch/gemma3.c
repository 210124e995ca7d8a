/*
 * gemma3.c — the Gemma 3 text architecture (`gemma3`; the language model
 * of the 4B/12B/27B multimodal files too). Per layer: attention and FFN
 * each between a pre-norm and a post-norm (four norms, all applied as
 * rms_norm(x) * w: llama.cpp's converter already stored Gemma's 1 + w),
 * per-head Q/K norms, a GELU (tanh) gated FFN. Embeddings are scaled by
 * sqrt(n_embd); the output is tied. Layers alternate local and global
 * attention: every 6th layer (or as attention.sliding_window_pattern
 * says) is global with rope.freq_base (and any rope.scaling), the others
 * see the last attention.sliding_window positions with rope.freq_base_swa.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>

#include "model/arch/arch-tables.h"
#include "runtime/error.h"

static const struct hparam_spec gemma3_hparams[] = {
    HP_DECODER(true, false, true),
    HP("rope.freq_base_swa", rope_base_swa, HP_FLOAT, false),
    HP("attention.sliding_window", n_swa, HP_INT, true),
    HP("attention.scale", attn_scale, HP_FLOAT, false),
    HP_END,
};

static const struct tensor_spec gemma3_tensors[] = {
    T_EMBED_OUTPUT,
    T_ATTN_QKV,
    T_ATTN_QK_NORM,
    T_ATTN_OUT,
    L("blk.%d.post_attention_norm.weight", W_ATTN_POST_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    T_FFN_NORM,
    T_FFN_GATED,
    L("blk.%d.post_ffw_norm.weight", W_FFN_POST_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    T_END,
};

/* Which layers are local: attention.sliding_window_pattern as one number
 * n (every n-th layer global) or one bool per layer (true: local), as
 * llama.cpp reads it; absent: Gemma 3's pattern, every 6th layer global. */
static minfer_status read_swa_layers(const struct minfer_gguf *g, struct model_hparams *hp,
                                     char *err, size_t err_len)
{
    static const char key[] = "gemma3.attention.sliding_window_pattern";
    int64_t pattern = 6;
    enum minfer_gguf_type et;
    uint64_t n;
    const void *data;
    if (minfer_gguf_get_arr(g, key, &et, &n, &data) == MINFER_OK) {
        if (et != MINFER_GGUF_BOOL || n != (uint64_t)hp->n_layer)
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "%s holds %llu %s values, expected %lld bools (one per layer) or one "
                        "integer", key, (unsigned long long)n, minfer_gguf_type_name(et),
                        (long long)hp->n_layer);
        for (int64_t il = 0; il < hp->n_layer; il++)
            hp->swa_layer[il] = ((const uint8_t *)data)[il] != 0;
        return MINFER_OK;
    }
    minfer_status st = minfer_gguf_get_i64(g, key, &pattern);
    if (st != MINFER_OK && st != MINFER_ERR_NOT_FOUND)
        return errf(err, err_len, MINFER_ERR_FORMAT, "%s is malformed (expected an integer "
                    "or an array of bools)", key);
    if (pattern < 1)
        return errf(err, err_len, MINFER_ERR_FORMAT, "%s is %lld, expected >= 1", key,
                    (long long)pattern);
    for (int64_t il = 0; il < hp->n_layer; il++)
        hp->swa_layer[il] = (il + 1) % pattern != 0;
    return MINFER_OK;
}

static minfer_status gemma3_check(const struct minfer_gguf *g, struct model_hparams *hp,
                                  char *err, size_t err_len)
{
    if (hp->n_swa > INT32_MAX)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "gemma3.attention.sliding_window %lld exceeds 2^31", (long long)hp->n_swa);
    if (hp->n_layer > MODEL_MAX_LAYERS) /* model.c says so with the numbers */
        return MINFER_OK;
    minfer_status st = read_swa_layers(g, hp, err, err_len);
    if (st != MINFER_OK)
        return st;
    /* llama.cpp's value for files written before the key existed */
    if (!hp->rope_base_swa)
        hp->rope_base_swa = 10000.0;
    /* Gemma scales queries by query_pre_attn_scalar^-1/2, which the converter
     * does not store: it is head_dim except for the 27B (62 layers), whose
     * n_embd / n_head llama.cpp uses too. attention.scale overrides both. */
    if (!hp->attn_scale)
        hp->attn_scale = hp->n_layer == 62 ? 1.0 / sqrt((double)(hp->n_embd / hp->n_head))
                                           : 1.0 / sqrt((double)hp->head_dim);
    return MINFER_OK;
}

static void gemma3_build(struct build *b)
{
    const struct model_hparams *hp = b->hp;
    struct graph *g = b->g;
    char lab[64];
    struct gtensor *x = build_inputs_embed(b);
    x = graph_scale(g, x, sqrtf((float)hp->n_embd), "token_embd_scale");
    for (int il = 0; il < (int)hp->n_layer; il++) {
        bool global = !hp->swa_layer[il];
        snprintf(lab, sizeof lab, "blk.%d.attn_norm", il);
        struct gtensor *h = build_norm(b, x, il, W_ATTN_NORM, lab);
        h = build_attn_ext(b, il, h, global ? hp->rope_base : hp->rope_base_swa,
                           global ? hp->rope_scale : 1.0, global ? 0 : (int)hp->n_swa,
                           (float)hp->attn_scale);
        snprintf(lab, sizeof lab, "blk.%d.post_attention_norm", il);
        h = build_norm(b, h, il, W_ATTN_POST_NORM, lab);
        snprintf(lab, sizeof lab, "blk.%d.attn_residual", il);
        x = graph_add(g, x, h, lab);
        snprintf(lab, sizeof lab, "blk.%d.ffn_norm", il);
        h = build_norm(b, x, il, W_FFN_NORM, lab);
        h = build_ffn_geglu(b, il, h);
        snprintf(lab, sizeof lab, "blk.%d.post_ffw_norm", il);
        h = build_norm(b, h, il, W_FFN_POST_NORM, lab);
        snprintf(lab, sizeof lab, "blk.%d.ffn_residual", il);
        x = graph_add(g, x, h, lab);
    }
    build_output(b, x);
}

const struct model_arch model_arch_gemma3 = {
    .name = "gemma3",
    .hparams = gemma3_hparams,
    .tensors = gemma3_tensors,
    .build = gemma3_build,
    .hparams_check = gemma3_check,
};
