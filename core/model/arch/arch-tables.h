/*
 * arch-tables.h — the rows the architecture descriptors share (one file
 * per architecture in core/model/arch/). Every decoder here reads the
 * same core hyperparameters and names its
 * embedding, output, attention and FFN tensors the same way (llama.cpp's
 * converter writes them so); a descriptor lists these rows through the
 * macros below and adds only what is its own. Order matters for tensors:
 * `minfer synth` writes them in table order.
 */
#ifndef MINFER_MODEL_ARCH_TABLES_H
#define MINFER_MODEL_ARCH_TABLES_H

#include <stddef.h>

#include "model/model.h"

#define HP(k, f, kind, req) {k, offsetof(struct model_hparams, f), kind, req}
#define HP_END {NULL, 0, HP_INT, false}

/* The hyperparameters of every decoder. Whether feed_forward_length,
 * attention.key_length and rope.freq_base must be present differs. */
#define HP_DECODER(ff_req, key_length_req, rope_base_req)                                   \
    HP("block_count", n_layer, HP_INT, true),                                              \
    HP("context_length", n_ctx_train, HP_INT, true),                                       \
    HP("embedding_length", n_embd, HP_INT, true),                                          \
    HP("feed_forward_length", n_ff, HP_INT, ff_req),                                       \
    HP("attention.head_count", n_head, HP_INT, true),                                      \
    HP("attention.head_count_kv", n_head_kv, HP_INT, false),                               \
    HP("attention.key_length", head_dim, HP_INT, key_length_req),                          \
    HP("attention.value_length", head_dim_v, HP_INT, false),                               \
    HP("rope.dimension_count", n_rot, HP_INT, false),                                      \
    HP("rope.freq_base", rope_base, HP_FLOAT, rope_base_req),                              \
    HP("attention.layer_norm_rms_epsilon", norm_eps, HP_FLOAT, true)

/* G: a global tensor, L: one per layer ("blk.%d."), X: one 3-D expert
 * tensor per layer. */
#define G(name, slot, kind, req, d0, d1) {name, false, slot, kind, req, {d0, d1, DIM_1}}
#define L(name, slot, kind, req, d0, d1) {name, true, slot, kind, req, {d0, d1, DIM_1}}
#define X(name, slot, d0, d1) {name, true, slot, WK_EXPERTS, true, {d0, d1, DIM_EXPERTS}}
#define T_END {NULL, false, 0, WK_MATRIX, false, {DIM_1, DIM_1, DIM_1}}

/* Embeddings, the final norm and the (optional: tied) output head. */
#define T_EMBED_OUTPUT                                                                      \
    G("token_embd.weight", W_TOKEN_EMBD, WK_MATRIX, true, DIM_EMBD, DIM_VOCAB),             \
    G("output_norm.weight", W_OUTPUT_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),               \
    G("output.weight", W_OUTPUT, WK_MATRIX, false, DIM_EMBD, DIM_VOCAB)

/* The attention pre-norm and the Q/K/V projections. */
#define T_ATTN_QKV                                                                          \
    L("blk.%d.attn_norm.weight", W_ATTN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1),            \
    L("blk.%d.attn_q.weight", W_ATTN_Q, WK_MATRIX, true, DIM_EMBD, DIM_Q),                  \
    L("blk.%d.attn_k.weight", W_ATTN_K, WK_MATRIX, true, DIM_EMBD, DIM_KV),                 \
    L("blk.%d.attn_v.weight", W_ATTN_V, WK_MATRIX, true, DIM_EMBD, DIM_KV_V)

/* Per-head RMS norms of Q and K (Qwen3, Gemma 3). */
#define T_ATTN_QK_NORM                                                                      \
    L("blk.%d.attn_q_norm.weight", W_ATTN_Q_NORM, WK_VECTOR, true, DIM_HEAD, DIM_1),        \
    L("blk.%d.attn_k_norm.weight", W_ATTN_K_NORM, WK_VECTOR, true, DIM_HEAD, DIM_1)

#define T_ATTN_OUT L("blk.%d.attn_output.weight", W_ATTN_OUT, WK_MATRIX, true, DIM_VO, DIM_EMBD)

#define T_FFN_NORM L("blk.%d.ffn_norm.weight", W_FFN_NORM, WK_VECTOR, true, DIM_EMBD, DIM_1)

/* The gated FFN's three matrices (SwiGLU or GEGLU: the builder decides). */
#define T_FFN_GATED                                                                         \
    L("blk.%d.ffn_gate.weight", W_FFN_GATE, WK_MATRIX, true, DIM_EMBD, DIM_FF),             \
    L("blk.%d.ffn_up.weight", W_FFN_UP, WK_MATRIX, true, DIM_EMBD, DIM_FF),                 \
    L("blk.%d.ffn_down.weight", W_FFN_DOWN, WK_MATRIX, true, DIM_FF, DIM_EMBD)

#endif /* MINFER_MODEL_ARCH_TABLES_H */
