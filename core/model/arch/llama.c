/*
 * llama.c — the GGUF `llama` architecture: Llama 2 / 3.x, Mistral and the
 * fine-tunes stored as `llama`. Pre-norm decoder, grouped-query attention
 * without biases, SwiGLU FFN, untied or tied output. RoPE pairs adjacent
 * dimensions (llama.cpp's converter permutes Q/K rows for that layout);
 * Llama 3.1's frequency factors come as the rope_freqs.weight tensor and
 * linear scaling as rope.scaling.* (model.c reads both).
 */
#include <stddef.h>

#include "model/model.h"
#include "runtime/error.h"

#define HP(k, f, kind, req) {k, offsetof(struct model_hparams, f), kind, req}

static const struct hparam_spec llama_hparams[] = {
    HP("block_count", n_layer, HP_INT, true),
    HP("context_length", n_ctx_train, HP_INT, true),
    HP("embedding_length", n_embd, HP_INT, true),
    HP("feed_forward_length", n_ff, HP_INT, true),
    HP("attention.head_count", n_head, HP_INT, true),
    HP("attention.head_count_kv", n_head_kv, HP_INT, false),
    HP("attention.key_length", head_dim, HP_INT, false),
    HP("attention.value_length", head_dim_v, HP_INT, false),
    HP("rope.dimension_count", n_rot, HP_INT, false),
    HP("rope.freq_base", rope_base, HP_FLOAT, false),
    HP("attention.layer_norm_rms_epsilon", norm_eps, HP_FLOAT, true),
    {NULL, 0, HP_INT, false},
};

#define G(name, slot, kind, req, d0, d1) {name, false, slot, kind, req, {d0, d1, DIM_1}}
#define L(name, slot, kind, req, d0, d1) {name, true, slot, kind, req, {d0, d1, DIM_1}}

static const struct tensor_spec llama_tensors[] = {
    G("token_embd.weight", W_TOKEN_EMBD, WK_MATRIX, true, DIM_EMBD, DIM_VOCAB),
    G("output_norm.weight", W_OUTPUT_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    G("output.weight", W_OUTPUT, WK_MATRIX, false, DIM_EMBD, DIM_VOCAB),
    G("rope_freqs.weight", W_ROPE_FREQS, WK_VECTOR, false, DIM_ROT_HALF, DIM_1),
    L("blk.%d.attn_norm.weight", W_ATTN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    L("blk.%d.attn_q.weight", W_ATTN_Q, WK_MATRIX, true, DIM_EMBD, DIM_Q),
    L("blk.%d.attn_k.weight", W_ATTN_K, WK_MATRIX, true, DIM_EMBD, DIM_KV),
    L("blk.%d.attn_v.weight", W_ATTN_V, WK_MATRIX, true, DIM_EMBD, DIM_KV_V),
    L("blk.%d.attn_output.weight", W_ATTN_OUT, WK_MATRIX, true, DIM_VO, DIM_EMBD),
    L("blk.%d.ffn_norm.weight", W_FFN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    L("blk.%d.ffn_gate.weight", W_FFN_GATE, WK_MATRIX, true, DIM_EMBD, DIM_FF),
    L("blk.%d.ffn_up.weight", W_FFN_UP, WK_MATRIX, true, DIM_EMBD, DIM_FF),
    L("blk.%d.ffn_down.weight", W_FFN_DOWN, WK_MATRIX, true, DIM_FF, DIM_EMBD),
    {NULL, false, 0, WK_MATRIX, false, {DIM_1, DIM_1, DIM_1}},
};

static minfer_status llama_check(const struct minfer_gguf *g, struct model_hparams *hp,
                                 char *err, size_t err_len)
{
    int64_t v;
    /* Mixtral is stored as `llama` with expert tensors; its FFN is not this one. */
    if (minfer_gguf_get_i64(g, "llama.expert_count", &v) == MINFER_OK && v > 0)
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "llama.expert_count is %lld: mixture-of-experts models stored as `llama` "
                    "(Mixtral) are not supported by this build", (long long)v);
    if (!hp->rope_base) /* llama.cpp's default when a converter left it out */
        hp->rope_base = 10000.0;
    hp->rope_layout = 1;
    return MINFER_OK;
}

const struct model_arch model_arch_llama = {
    .name = "llama",
    .hparams = llama_hparams,
    .tensors = llama_tensors,
    .build = build_prenorm_decoder,
    .hparams_check = llama_check,
};
