/*
 * qwen3.c — the Qwen3 (dense) architecture: like Qwen2 but without Q/K/V
 * biases, with an RMS norm over head_dim applied to every Q and K head
 * before RoPE, and a head_dim (attention.key_length) that need not equal
 * n_embd / n_head.
 */
#include "model/arch/arch-tables.h"

static const struct hparam_spec qwen3_hparams[] = {
    HP_DECODER(true, true, true),
    HP_END,
};

static const struct tensor_spec qwen3_tensors[] = {
    T_EMBED_OUTPUT,
    T_ATTN_QKV,
    T_ATTN_QK_NORM,
    T_ATTN_OUT,
    T_FFN_NORM,
    T_FFN_GATED,
    T_END,
};

const struct model_arch model_arch_qwen3 = {
    .name = "qwen3",
    .hparams = qwen3_hparams,
    .tensors = qwen3_tensors,
    .build = build_prenorm_decoder,
};
