/*
 * qwen3moe.c — the Qwen3 mixture-of-experts architecture (Qwen3-30B-A3B,
 * Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): Qwen3 attention (per-head Q/K
 * norms, no biases) and in every layer an MoE FFN: router softmax over
 * expert_count experts, the top expert_used_count with their weights
 * renormalised, each chosen expert a SwiGLU FFN of
 * expert_feed_forward_length stored in 3-D expert tensors.
 */
#include <stddef.h>

#include "model/model.h"
#include "runtime/error.h"

#define HP(k, f, kind, req) {k, offsetof(struct model_hparams, f), kind, req}

static const struct hparam_spec qwen3moe_hparams[] = {
    HP("block_count", n_layer, HP_INT, true),
    HP("context_length", n_ctx_train, HP_INT, true),
    HP("embedding_length", n_embd, HP_INT, true),
    HP("feed_forward_length", n_ff, HP_INT, false), /* dense FFN width: no layer uses it */
    HP("attention.head_count", n_head, HP_INT, true),
    HP("attention.head_count_kv", n_head_kv, HP_INT, false),
    HP("attention.key_length", head_dim, HP_INT, true),
    HP("attention.value_length", head_dim_v, HP_INT, false),
    HP("rope.dimension_count", n_rot, HP_INT, false),
    HP("rope.freq_base", rope_base, HP_FLOAT, true),
    HP("attention.layer_norm_rms_epsilon", norm_eps, HP_FLOAT, true),
    HP("expert_count", n_expert, HP_INT, true),
    HP("expert_used_count", n_expert_used, HP_INT, true),
    HP("expert_feed_forward_length", n_ff_exp, HP_INT, true),
    {NULL, 0, HP_INT, false},
};

#define G(name, slot, kind, req, d0, d1) {name, false, slot, kind, req, {d0, d1, DIM_1}}
#define L(name, slot, kind, req, d0, d1) {name, true, slot, kind, req, {d0, d1, DIM_1}}
#define X(name, slot, d0, d1) {name, true, slot, WK_EXPERTS, true, {d0, d1, DIM_EXPERTS}}

static const struct tensor_spec qwen3moe_tensors[] = {
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
    L("blk.%d.ffn_gate_inp.weight", W_FFN_GATE_INP, WK_MATRIX, true, DIM_EMBD, DIM_EXPERTS),
    X("blk.%d.ffn_gate_exps.weight", W_FFN_GATE_EXPS, DIM_EMBD, DIM_FF_EXP),
    X("blk.%d.ffn_up_exps.weight", W_FFN_UP_EXPS, DIM_EMBD, DIM_FF_EXP),
    X("blk.%d.ffn_down_exps.weight", W_FFN_DOWN_EXPS, DIM_FF_EXP, DIM_EMBD),
    {NULL, false, 0, WK_MATRIX, false, {DIM_1, DIM_1, DIM_1}},
};

static minfer_status qwen3moe_check(const struct minfer_gguf *g, struct model_hparams *hp,
                                    char *err, size_t err_len)
{
    if (hp->n_expert_used > hp->n_expert || hp->n_expert_used > 64)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "qwen3moe.expert_used_count %lld must be at most expert_count %lld and 64",
                    (long long)hp->n_expert_used, (long long)hp->n_expert);
    if (hp->n_expert > 4096)
        return errf(err, err_len, MINFER_ERR_FORMAT, "qwen3moe.expert_count %lld exceeds 4096",
                    (long long)hp->n_expert);
    /* Qwen3-MoE renormalises the chosen weights (norm_topk_prob); a file may say otherwise. */
    bool norm = true;
    minfer_status st = minfer_gguf_get_bool(g, "qwen3moe.expert_weights_norm", &norm);
    if (st != MINFER_OK && st != MINFER_ERR_NOT_FOUND)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "qwen3moe.expert_weights_norm is malformed (expected a bool)");
    hp->expert_norm = norm;
    return MINFER_OK;
}

const struct model_arch model_arch_qwen3moe = {
    .name = "qwen3moe",
    .hparams = qwen3moe_hparams,
    .tensors = qwen3moe_tensors,
    .build = build_prenorm_decoder,
    .hparams_check = qwen3moe_check,
};
