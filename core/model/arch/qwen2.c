/*
 * qwen2.c — the Qwen2 / Qwen2.5 architecture: pre-norm decoder with
 * grouped-query attention whose Q/K/V projections carry biases, RoPE
 * (NeoX), SwiGLU FFN, and an output head tied to the embeddings when
 * output.weight is absent.
 */
#include "model/arch/arch-tables.h"

static const struct hparam_spec qwen2_hparams[] = {
    HP_DECODER(true, false, true),
    HP_END,
};

static const struct tensor_spec qwen2_tensors[] = {
    T_EMBED_OUTPUT,
    T_ATTN_QKV,
    L("blk.%d.attn_q.bias", W_ATTN_Q_BIAS, WK_VECTOR, true, DIM_Q, DIM_1),
    L("blk.%d.attn_k.bias", W_ATTN_K_BIAS, WK_VECTOR, true, DIM_KV, DIM_1),
    L("blk.%d.attn_v.bias", W_ATTN_V_BIAS, WK_VECTOR, true, DIM_KV_V, DIM_1),
    T_ATTN_OUT,
    T_FFN_NORM,
    T_FFN_GATED,
    T_END,
};

const struct model_arch model_arch_qwen2 = {
    .name = "qwen2",
    .hparams = qwen2_hparams,
    .tensors = qwen2_tensors,
    .build = build_prenorm_decoder,
};
