/*
 * llama.c — the GGUF `llama` architecture: Llama 2 / 3.x, Mistral and the
 * fine-tunes stored as `llama`. Pre-norm decoder, grouped-query attention
 * without biases, SwiGLU FFN, untied or tied output. RoPE pairs adjacent
 * dimensions (llama.cpp's converter permutes Q/K rows for that layout);
 * Llama 3.1's frequency factors come as the rope_freqs.weight tensor and
 * linear scaling as rope.scaling.* (model.c reads both).
 */
#include <stddef.h>

#include "model/arch/arch-tables.h"
#include "runtime/error.h"

static const struct hparam_spec llama_hparams[] = {
    HP_DECODER(true, false, false),
    HP_END,
};

static const struct tensor_spec llama_tensors[] = {
    T_EMBED_OUTPUT,
    G("rope_freqs.weight", W_ROPE_FREQS, WK_VECTOR, false, DIM_ROT_HALF, DIM_1),
    T_ATTN_QKV,
    T_ATTN_OUT,
    T_FFN_NORM,
    T_FFN_GATED,
    T_END,
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
