/*
 * qwen3moe.c — the Qwen3 mixture-of-experts architecture (Qwen3-30B-A3B,
 * Qwen3-Coder-30B-A3B, Qwen3-235B-A22B): Qwen3 attention (per-head Q/K
 * norms, no biases) and in every layer an MoE FFN: router softmax over
 * expert_count experts, the top expert_used_count with their weights
 * renormalised, each chosen expert a SwiGLU FFN of
 * expert_feed_forward_length stored in 3-D expert tensors.
 */
#include <stddef.h>

#include "model/arch/arch-tables.h"
#include "runtime/error.h"

static const struct hparam_spec qwen3moe_hparams[] = {
    HP_DECODER(false, true, true), /* the dense FFN width: no layer uses it */
    HP("expert_count", n_expert, HP_INT, true),
    HP("expert_used_count", n_expert_used, HP_INT, true),
    HP("expert_feed_forward_length", n_ff_exp, HP_INT, true),
    HP_END,
};

static const struct tensor_spec qwen3moe_tensors[] = {
    T_EMBED_OUTPUT,
    T_ATTN_QKV,
    T_ATTN_QK_NORM,
    T_ATTN_OUT,
    T_FFN_NORM,
    L("blk.%d.ffn_gate_inp.weight", W_FFN_GATE_INP, WK_MATRIX, true, DIM_EMBD, DIM_EXPERTS),
    X("blk.%d.ffn_gate_exps.weight", W_FFN_GATE_EXPS, DIM_EMBD, DIM_FF_EXP),
    X("blk.%d.ffn_up_exps.weight", W_FFN_UP_EXPS, DIM_EMBD, DIM_FF_EXP),
    X("blk.%d.ffn_down_exps.weight", W_FFN_DOWN_EXPS, DIM_FF_EXP, DIM_EMBD),
    T_END,
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
