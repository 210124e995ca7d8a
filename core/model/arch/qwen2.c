/*
 * qwen2.c — the Qwen2 / Qwen2.5 architecture: pre-norm decoder with
 * grouped-query attention whose Q/K/V projections carry biases, RoPE
 * (NeoX), SwiGLU FFN, and an output head tied to the embeddings when
 * output.weight is absent.
 */
#include <stddef.h>

#include "model/model.h"

#define HP(k, f, kind, req) {k, offsetof(struct model_hparams, f), kind, req}

static const struct hparam_spec qwen2_hparams[] = {
    HP("block_count", n_layer, HP_INT, true),
    HP("context_length", n_ctx_train, HP_INT, true),
    HP("embedding_length", n_embd, HP_INT, true),
    HP("feed_forward_length", n_ff, HP_INT, true),
    HP("attention.head_count", n_head, HP_INT, true),
    HP("attention.head_count_kv", n_head_kv, HP_INT, false),
    HP("attention.key_length", head_dim, HP_INT, false),
    HP("attention.value_length", head_dim_v, HP_INT, false),
    HP("rope.dimension_count", n_rot, HP_INT, false),
    HP("rope.freq_base", rope_base, HP_FLOAT, true),
    HP("attention.layer_norm_rms_epsilon", norm_eps, HP_FLOAT, true),
    {NULL, 0, HP_INT, false},
};

#define G(name, slot, kind, req, d0, d1) {name, false, slot, kind, req, {d0, d1, DIM_1}}
#define L(name, slot, kind, req, d0, d1) {name, true, slot, kind, req, {d0, d1, DIM_1}}

static const struct tensor_spec qwen2_tensors[] = {
    G("token_embd.weight", W_TOKEN_EMBD, WK_MATRIX, true, DIM_EMBD, DIM_VOCAB),
    G("output_norm.weight", W_OUTPUT_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    G("output.weight", W_OUTPUT, WK_MATRIX, false, DIM_EMBD, DIM_VOCAB),
    L("blk.%d.attn_norm.weight", W_ATTN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    L("blk.%d.attn_q.weight", W_ATTN_Q, WK_MATRIX, true, DIM_EMBD, DIM_Q),
    L("blk.%d.attn_k.weight", W_ATTN_K, WK_MATRIX, true, DIM_EMBD, DIM_KV),
    L("blk.%d.attn_v.weight", W_ATTN_V, WK_MATRIX, true, DIM_EMBD, DIM_KV_V),
    L("blk.%d.attn_q.bias", W_ATTN_Q_BIAS, WK_VECTOR, true, DIM_Q, DIM_1),
    L("blk.%d.attn_k.bias", W_ATTN_K_BIAS, WK_VECTOR, true, DIM_KV, DIM_1),
    L("blk.%d.attn_v.bias", W_ATTN_V_BIAS, WK_VECTOR, true, DIM_KV_V, DIM_1),
    L("blk.%d.attn_output.weight", W_ATTN_OUT, WK_MATRIX, true, DIM_VO, DIM_EMBD),
    L("blk.%d.ffn_norm.weight", W_FFN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    L("blk.%d.ffn_gate.weight", W_FFN_GATE, WK_MATRIX, true, DIM_EMBD, DIM_FF),
    L("blk.%d.ffn_up.weight", W_FFN_UP, WK_MATRIX, true, DIM_EMBD, DIM_FF),
    L("blk.%d.ffn_down.weight", W_FFN_DOWN, WK_MATRIX, true, DIM_FF, DIM_EMBD),
    {NULL, false, 0, WK_MATRIX, false, {DIM_1, DIM_1, DIM_1}},
};

const struct model_arch model_arch_qwen2 = {
    .name = "qwen2",
    .hparams = qwen2_hparams,
    .tensors = qwen2_tensors,
    .build = build_prenorm_decoder,
};
