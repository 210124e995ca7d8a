/*
 * minfer/ir.h — the graph IR types that cross the plugin boundary:
 * status codes, tensor element types, tensor descriptors, ops and nodes.
 *
 * This header only grows by appending (new enum values at the end, new
 * struct fields at the end behind a size or version check). Changing the
 * meaning of an existing value is an ABI major bump (see backend.h).
 * One exception: struct minfer_node travels as an array (a replay window's
 * nodes), indexed by the sizeof each side was compiled with, so its size
 * and layout are fixed for the whole major: a field added to it, even at
 * the end, is a major bump. A new op carries its extra parameters in the
 * spare iparams/fparams slots (unused slots are zero). struct
 * minfer_tensor is reached only through pointers the core owns, so it may
 * grow at the end (a minor bump; older plugins read the prefix they know).
 * docs/decisions/ir-node-layout-fixed-per-major.md says why.
 *
 * What each op accepts (types, shapes, source counts, params) is written
 * at its enum value below; minfer/ir-check.h enforces exactly that.
 *
 * Conventions (ggml's, so GGUF shapes map one to one):
 *   ne[0] is the innermost, contiguous dimension; ne[1..3] are outer.
 *   nb[i] is the byte stride of dimension i. Every tensor is contiguous in
 *   dimension 0 (nb[0] is the element or block size); outer strides may be
 *   larger than dense (views such as Q/K/V column slices of a fused QKV).
 *   For block-quantized types ne[0] is a multiple of the block size and
 *   nb[1] counts bytes of whole blocks.
 *   Every extent is in 1..2^40 and, when ne[1] > 1, nb[1] is at least one
 *   row's bytes (rows never overlap).
 */
#ifndef MINFER_IR_H
#define MINFER_IR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes and element types: minfer/types.h (shared with minfer.h). */

/* ---- tensors ---- */

/* MINFER_MAX_DIMS: minfer/types.h */
#define MINFER_MAX_SRC 6

/* Tensor flags: where a tensor's contents come from and live. */
#define MINFER_TENSOR_WEIGHT 0x1u  /* registered weight, read-only */
#define MINFER_TENSOR_INPUT 0x2u   /* written by the host before a pass */
#define MINFER_TENSOR_OUTPUT 0x4u  /* read by the host after a pass */
#define MINFER_TENSOR_KV 0x8u      /* persistent KV-cache region */

struct minfer_tensor {
    uint32_t type;                 /* enum minfer_type */
    uint32_t flags;                /* MINFER_TENSOR_* */
    int64_t ne[MINFER_MAX_DIMS];   /* elements per dimension, unused dims 1 */
    size_t nb[MINFER_MAX_DIMS];    /* byte strides */
    void *data;                    /* address in the executing backend's space */
    const char *name;              /* borrowed for the graph's life; may be NULL */
    uint64_t id;                   /* unique within one graph */
};

/* ---- ops ---- */

/* Shapes below use [ne0, ne1, ...]. "rows" means every index of ne1..ne3.
 * All activations are F32 unless stated. */
enum minfer_op {
    MINFER_OP_NONE = 0,
    /* dst[:, i] = dequant(src0[:, src1[i]]).
     * src0: table [n, n_rows] any readable type; src1: I32 ids [n_ids];
     * dst: F32 [n, n_ids]. An id outside [0, n_rows) is an error. */
    MINFER_OP_GET_ROWS = 1,
    /* dst = x / sqrt(mean(x^2) + eps) per row; src0, dst same shape.
     * fparams[0] = eps (>= 0). */
    MINFER_OP_RMS_NORM = 2,
    /* dst = rms_norm(src0) * src1, src1: F32 [n] broadcast over rows.
     * fparams[0] = eps (>= 0). A fusion of RMS_NORM then MUL. */
    MINFER_OP_RMS_NORM_MUL = 3,
    /* dst = src0 + src1; src1 has ne0 == src0's and either the same rows or
     * one row broadcast to all. */
    MINFER_OP_ADD = 4,
    /* dst = src0 * src1, element-wise, same broadcast rule as ADD. */
    MINFER_OP_MUL = 5,
    /* dst[n, m] = sum_k src0[k, n] * src1[k, m].
     * src0: weight [K, N] any readable type; src1: F32 [K, M]; dst: F32 [N, M].
     * All 2-D; K, N and M below 2^31. */
    MINFER_OP_MUL_MAT = 6,
    /* Rotary embedding, NeoX layout (pairs (i, i + n_rot/2)).
     * src0: F32 [head_dim, n_head, n_tokens]; src1: I32 positions [n_tokens];
     * iparams[0] = n_rot (even, 2..head_dim; dims past n_rot pass through);
     * iparams[1] = layout (ABI 1.1): 0 NeoX, pairs (i, i + n_rot/2); 1 normal
     *   (GPT-J / GGUF llama), pairs (2i, 2i + 1); other values are refused;
     * fparams[0] = freq_base (> 0); fparams[1] = freq_scale (> 0, 1.0 = none).
     * Pair i turns by pos * freq_scale * freq_base^(-2i / n_rot).
     * YaRN (all zero = none): fparams[2] = ext_factor in [0, 1],
     * fparams[3] = mscale (>= 0; 0 reads as 1), fparams[4..5] = lo <= hi.
     * Pair i's angle: t_e = pos * freq_base^(-2i/n_rot), t_i = freq_scale *
     * t_e; r = (1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1)) *
     * ext_factor; angle = t_i * (1 - r) + t_e * r; cos and sin times mscale
     * (llama.cpp's rope_yarn). */
    MINFER_OP_ROPE = 7,
    /* dst = silu(src0) * src1, same shapes. */
    MINFER_OP_SWIGLU = 8,
    /* Write rows of src0 (F32 2-D [row_len, n_tokens]) into the cache dst
     * ([row_len, n_cells] of type F32, F16 or Q8_0) at cells src1 (I32
     * [n_tokens]). dst is both read and written; a cell outside
     * [0, n_cells) is an error. dst is not a fresh output: a backend must
     * write only the named cells. */
    MINFER_OP_KV_STORE = 9,
    /* Causal multi-head attention with grouped KV heads.
     * src0: Q F32 [head_dim, n_head, n_tokens];
     * src1: K cache [head_dim * n_kv_head, n_cells] (F32, F16 or Q8_0);
     * src2: V cache, same layout as K;
     * src3: I32 [1], kv_len — cells [0, kv_len) hold valid entries;
     * src4: I32 [n_tokens], the position of each query token; query t sees
     *       cell c iff c < kv_len and c <= src4[t] (cell index == position
     *       for a single sequence);
     * dst: F32 [head_dim, n_head, n_tokens].
     * iparams[0] = n_kv_head (divides n_head); fparams[0] = scale.
     * iparams[1] = sliding window (ABI 1.1; >= 0, 0 = none): with w > 0
     *   query t also needs src4[t] - c < w, and cells below src4[t] - w + 1
     *   are not read at all (Gemma's local layers).
     * K and V have one type; a Q8_0 cache needs head_dim % 32 == 0.
     * kv_len and positions are read at run time, never baked into a launch. */
    MINFER_OP_ATTENTION = 10,
    /* dst = silu(src0 . x) * (src1 . x) with x = src2: the FFN gate/up pair
     * fused. src0, src1: weights [K, N] of one type; src2: F32 [K, M];
     * dst: F32 [N, M]. */
    MINFER_OP_FFN_GATE_UP = 11,
    /* dst = src0 converted to dst's type, both F32, F16 or BF16, same shape. */
    MINFER_OP_COPY = 12,
    /* dst = src0 * fparams[0]. */
    MINFER_OP_SCALE = 13,
    /* dst[n, m] = sum_k src0[k, n] * src1[k, m] + src2[n, m]: MUL_MAT with
     * the ADD that consumes it fused (a bias or the residual stream).
     * src0, src1, dst as MUL_MAT; src2: F32 [N, M], or [N, 1] added to every
     * column. The core makes it only where the product has no other reader
     * and the backend's supports_op accepts it. */
    MINFER_OP_MUL_MAT_ADD = 14,
    /* Causal multi-head attention over cells named by lists: many sequences
     * in one pass (ABI minor 1). Each query token reads the cells of one
     * list (its sequence's cells in position order); the host resolves the
     * causal mask (and a sliding window) to the range of that list's
     * entries the token sees.
     * src0: Q F32 [head_dim, n_head, n_tokens];
     * src1, src2: K and V caches as for ATTENTION;
     * src3: I32 [2, n_tokens], the range — query t sees entries
     *       [src3[0, t], src3[1, t]) of its list, 0 <= first < end <= n_kv;
     * src4: I32 [n_tokens], the list of each query token (0..n_lists-1);
     * src5: I32 [n_kv, n_lists], cell index lists: entry j of list l is a
     *       cell in [0, n_cells); entries outside a query's range are not read;
     * dst: F32 [head_dim, n_head, n_tokens].
     * iparams[0] = n_kv_head (divides n_head); fparams[0] = scale;
     * iparams[1] = 0 (a window is in the ranges).
     * The softmax runs over a query's visible entries in list order, so a
     * list laid out as cells 0..n-1 gives ATTENTION's result. Counts, lists
     * and cells are read at run time, never baked into a launch; an entry
     * or count out of range is an error. */
    MINFER_OP_ATTENTION_LISTS = 15,
    /* ABI 1.1 — the ops of Gemma (GEGLU), mixtures of experts (TOPK,
     * MOE_WEIGHTS, MUL_MAT_ID, MOE_SUM) and Llama 3.1's RoPE (ROPE_DIV). */
    /* dst = gelu(src0) * src1, same shapes; gelu is the tanh form
     * 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))). */
    MINFER_OP_GEGLU = 16,
    /* dst[j, t] = index of the j-th largest of src0[:, t], largest first,
     * the lower index first among equal values.
     * src0: F32 [n, T]; dst: I32 [k, T]; iparams[0] = k (1..n, at most 64). */
    MINFER_OP_TOPK = 17,
    /* Router weights of the chosen experts. src0: F32 logits [n_expert, T];
     * src1: I32 chosen experts [k, T] (each in [0, n_expert)); dst: F32 [k, T].
     * iparams[0] = 0: dst[j, t] = softmax(src0[:, t])[src1[j, t]];
     *              1: the same renormalised to sum 1 over j (= a softmax over
     *                 the chosen logits only). */
    MINFER_OP_MOE_WEIGHTS = 18,
    /* The chosen experts' matrix products.
     * src0: expert weights [K, N, n_expert], any type MUL_MAT reads;
     * src1: F32 [K, B, T], B == 1 (every slot reads column t) or B == k
     *       (slot j reads src1[:, j, t]);
     * src2: I32 chosen experts [k, T];
     * dst[:, j, t] = expert src2[j, t]'s [K, N] matrix times that column;
     * dst: F32 [N, k, T]. An id outside [0, n_expert) is an error at run
     * time; only the chosen experts' weights are read. */
    MINFER_OP_MUL_MAT_ID = 19,
    /* dst[:, t] = sum_j src1[j, t] * src0[:, j, t].
     * src0: F32 [N, k, T]; src1: F32 [k, T]; dst: F32 [N, T]. */
    MINFER_OP_MOE_SUM = 20,
    /* ROPE whose pair i turns by angle / src2[i]: the frequency factors of
     * Llama 3.1 style scaling (rope_freqs.weight). src0, src1, dst, iparams
     * and fparams as ROPE; src2: F32 [n_rot / 2], each > 0. */
    MINFER_OP_ROPE_DIV = 21,
    MINFER_OP_COUNT /* one past the last op; grows by appending above */
};

/* Every op once: X(NAME, n_src). The one table of op names and source
 * counts (the core, the plugins and minfer/ir-check.h read it); a new op
 * appends a line here as well as its enum value above. */
#define MINFER_OP_TABLE(X)                                                   \
    X(NONE, 0)                                                               \
    X(GET_ROWS, 2)                                                           \
    X(RMS_NORM, 1)                                                           \
    X(RMS_NORM_MUL, 2)                                                       \
    X(ADD, 2)                                                                \
    X(MUL, 2)                                                                \
    X(MUL_MAT, 2)                                                            \
    X(ROPE, 2)                                                               \
    X(SWIGLU, 2)                                                             \
    X(KV_STORE, 2)                                                           \
    X(ATTENTION, 5)                                                          \
    X(FFN_GATE_UP, 3)                                                        \
    X(COPY, 1)                                                               \
    X(SCALE, 1)                                                              \
    X(MUL_MAT_ADD, 3)                                                        \
    X(ATTENTION_LISTS, 6)                                                        \
    X(GEGLU, 2)                                                              \
    X(TOPK, 1)                                                               \
    X(MOE_WEIGHTS, 2)                                                        \
    X(MUL_MAT_ID, 3)                                                         \
    X(MOE_SUM, 2)                                                            \
    X(ROPE_DIV, 3)

/* "ADD", "MUL_MAT", ...; "UNKNOWN" for a value this header does not name.
 * The string is static. */
static inline const char *minfer_op_name(uint32_t op)
{
    switch (op) {
#define MINFER_OP_NAME_CASE_(name, n_src) case MINFER_OP_##name: return #name;
    MINFER_OP_TABLE(MINFER_OP_NAME_CASE_)
#undef MINFER_OP_NAME_CASE_
    default: return "UNKNOWN";
    }
}

/* How many sources a node of op carries (node.n_src must equal it);
 * 0 for NONE and for a value this header does not name. */
static inline uint32_t minfer_op_n_src(uint32_t op)
{
    switch (op) {
#define MINFER_OP_NSRC_CASE_(name, n_src) case MINFER_OP_##name: return n_src;
    MINFER_OP_TABLE(MINFER_OP_NSRC_CASE_)
#undef MINFER_OP_NSRC_CASE_
    default: return 0;
    }
}

/* Size and layout fixed for ABI major 1 (see the top of this file). */
struct minfer_node {
    uint32_t op;                                 /* enum minfer_op */
    uint32_t n_src;                              /* == minfer_op_n_src(op) */
    const struct minfer_tensor *src[MINFER_MAX_SRC];
    struct minfer_tensor *dst;
    int32_t iparams[8];                          /* per-op; unused slots zero */
    float fparams[8];                            /* per-op; unused slots zero */
    uint32_t index;                              /* position in the graph */
    const char *label;                           /* e.g. "blk.3.attn_q"; may be NULL */
};

#ifdef __cplusplus
}
#endif

#endif /* MINFER_IR_H */
