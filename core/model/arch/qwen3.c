/*
 * qwen3.c — the Qwen3 (dense) architecture: like Qwen2 but without Q/K/V
 * biases, with an RMS norm over head_dim applied to every Q and K head
 * before RoPE, and a head_dim (attention.key_length) that need not equal
 * n_embd / n_head.
 */
#include <stddef.h>

#include "model/model.h"

#define HP(k, f, kind, req) {k, offsetof(struct model_hparams, f), kind, req}

static const struct hparam_spec qwen3_hparams[] = {
    HP("block_count", n_layer, HP_INT, true),
    HP("context_length", n_ctx_train, HP_INT, true),
    HP("embedding_length", n_embd, HP_INT, true),
    HP("feed_forward_length", n_ff, HP_INT, true),
    HP("attention.head_count", n_head, HP_INT, true),
    HP("attention.head_count_kv", n_head_kv, HP_INT, false),
    HP("attention.key_length", head_dim, HP_INT, true),
    HP("attention.value_length", head_dim_v, HP_INT, false),
    HP("rope.dimension_count", n_rot, HP_INT, false),
    HP("rope.freq_base", rope_base, HP_FLOAT, true),
    HP("attention.layer_norm_rms_epsilon", norm_eps, HP_FLOAT, true),
    {NULL, 0, HP_INT, false},
};

#define G(name, slot, kind, req, d0, d1) {name, false, slot, kind, req, {d0, d1, DIM_1}}
#define L(name, slot, kind, req, d0, d1) {name, true, slot, kind, req, {d0, d1, DIM_1}}

static const struct tensor_spec qwen3_tensors[] = {
    G("token_embd.weight", W_TOKEN_EMBD, WK_MATRIX, true, DIM_EMBD, DIM_VOCAB),
    G("output_norm.weight", W_OUTPUT_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    G("output.weight", W_OUTPUT, WK_MATRIX, false, DIM_EMBD, DIM_VOCAB),
    L("blk.%d.attn_norm.weight", W_ATTN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    L("blk.%d.attn_q.weight", W_ATTN_Q, WK_MATRIX, true, DIM_EMBD, DIM_Q),
    L("blk.%d.attn_k.weight", W_ATTN_K, WK_MATRIX, true, DIM_EMBD, DIM_KV),
    L("blk.%d.attn_v.weight", W_ATTN_V, WK_MATRIX, true, DIM_EMBD, DIM_KV_V),
    L("blk.%d.attn_q_norm.weight", W_ATTN_Q_NORM, WK_VECTOR, true, DIM_HEAD, DIM_1),
    L("blk.%d.attn_k_norm.weight", W_ATTN_K_NORM, WK_VECTOR, true, DIM_HEAD, DIM_1),
    L("blk.%d.attn_output.weight", W_ATTN_OUT, WK_MATRIX, true, DIM_VO, DIM_EMBD),
    L("blk.%d.ffn_norm.weight", W_FFN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),
    L("blk.%d.ffn_gate.weight", W_FFN_GATE, WK_MATRIX, true, DIM_EMBD, DIM_FF),
    L("blk.%d.ffn_up.weight", W_FFN_UP, WK_MATRIX, true, DIM_EMBD, DIM_FF),
    L("blk.%d.ffn_down.weight", W_FFN_DOWN, WK_MATRIX, true, DIM_FF, DIM_EMBD),
    {NULL, false, 0, WK_MATRIX, false, {DIM_1, DIM_1, DIM_1}},
};

const struct model_arch model_arch_qwen3 = {
    .name = "qwen3",
    .hparams = qwen3_hparams,
    .tensors = qwen3_tensors,
    .build = build_prenorm_decoder,
};
