/*
 * model.h — models inside the core: the architecture descriptor every
 * core/model/arch/<arch>.c registers (hyperparameter keys, tensor table,
 * build function), the loaded model, and the shared graph blocks the
 * build functions are made of (core/model/arch/blocks.c).
 */
#ifndef MINFER_CORE_MODEL_H
#define MINFER_CORE_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/graph.h"
#include "kv.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "runtime/plugin.h"

#define MODEL_MAX_LAYERS 512

/* ---- hyperparameters ---- */

struct model_hparams {
    int64_t n_layer;
    int64_t n_ctx_train;
    int64_t n_embd;
    int64_t n_ff;
    int64_t n_head;
    int64_t n_head_kv;     /* default n_head */
    int64_t head_dim;      /* attention.key_length; default n_embd / n_head */
    int64_t head_dim_v;    /* attention.value_length; default head_dim */
    int64_t n_rot;         /* rope.dimension_count; default head_dim */
    int64_t n_vocab;       /* rows of token_embd.weight */
    double rope_base;      /* rope.freq_base */
    double rope_scale;     /* 1 / rope.scaling.factor; 1 = none (the RoPE freq_scale) */
    double norm_eps;       /* attention.layer_norm_rms_epsilon */
    /* RoPE scaling beyond linear (model_rope_scaling); all 0 = none. YaRN:
     * mix weight of the extrapolated angle (ext_factor), magnitude scale of
     * cos/sin, and the pair indices where the mix ramps from 1 to 0. */
    double rope_ext, rope_mscale, rope_corr_lo, rope_corr_hi;
    int64_t n_ctx_max;     /* longest context: n_ctx_train, or more with scaling */
    /* mixture of experts (qwen3moe) */
    int64_t n_expert;      /* expert_count */
    int64_t n_expert_used; /* expert_used_count */
    int64_t n_ff_exp;      /* expert_feed_forward_length */
    bool expert_norm;      /* renormalise the chosen experts' weights */
    /* sliding-window attention (gemma3) */
    int64_t n_swa;         /* attention.sliding_window; 0 = none */
    uint8_t swa_layer[MODEL_MAX_LAYERS]; /* 1: layer il uses the sliding window */
    double rope_base_swa;  /* rope.freq_base_swa: the local layers' base */
    double attn_scale;     /* attention.scale; 0 = the architecture's rule */
    int rope_layout;       /* ROPE iparams[1]: 0 NeoX, 1 normal (llama) */
};

/* Reads <arch>.rope.scaling.* into hp (rope_scale, rope_ext, rope_mscale,
 * rope_corr_lo/hi, n_ctx_max); needs n_ctx_train, n_rot and rope_base set.
 * A scaling type it does not implement is an error naming it
 * (rope-scaling.c). */
struct minfer_gguf;
minfer_status model_rope_scaling(const struct minfer_gguf *g, const char *arch,
                                 struct model_hparams *hp, char *err, size_t err_len);
/* The RoPE parameters of a ROPE node from the hyperparameters. */
struct graph_rope_params;
void model_rope_params(const struct model_hparams *hp, struct graph_rope_params *p);

enum hparam_kind { HP_INT, HP_FLOAT };

/* One key below "<arch>.", e.g. "block_count". */
struct hparam_spec {
    const char *key;
    size_t offset;          /* offsetof(struct model_hparams, field) */
    enum hparam_kind kind;
    bool required;
};

/* ---- tensor table ---- */

/* Symbolic dimensions of the tensor table, resolved from hparams. */
enum model_dim {
    DIM_1 = 0,
    DIM_EMBD,
    DIM_VOCAB,
    DIM_FF,
    DIM_Q,        /* n_head * head_dim */
    DIM_KV,       /* n_head_kv * head_dim */
    DIM_VO,       /* n_head * head_dim_v (attention output) */
    DIM_KV_V,     /* n_head_kv * head_dim_v */
    DIM_HEAD,     /* head_dim */
    DIM_ROT_HALF, /* n_rot / 2 (RoPE frequency factors) */
    DIM_EXPERTS,  /* n_expert */
    DIM_FF_EXP,   /* n_ff_exp */
};

enum weight_kind {
    WK_MATRIX,    /* 2-D, any type a backend can read (quantized, f16, bf16, f32) */
    WK_VECTOR,    /* 1-D, f32: norms and biases */
    WK_EXPERTS,   /* 3-D [ne0, ne1, n_expert], any matrix type: one matrix per expert */
};

/* Every weight any architecture uses; a descriptor names the ones its
 * models have. Slots hold an index into model->weights, -1 when absent. */
enum weight_slot {
    W_TOKEN_EMBD,
    W_OUTPUT_NORM,
    W_OUTPUT,
    W_ROPE_FREQS,  /* Llama 3.1 RoPE frequency factors */
    W_GLOBAL_COUNT,
    /* per layer, counted from 0 again */
    W_ATTN_NORM = 0,
    W_ATTN_Q,
    W_ATTN_K,
    W_ATTN_V,
    W_ATTN_Q_BIAS,
    W_ATTN_K_BIAS,
    W_ATTN_V_BIAS,
    W_ATTN_Q_NORM,
    W_ATTN_K_NORM,
    W_ATTN_OUT,
    W_FFN_NORM,
    W_FFN_GATE,
    W_FFN_UP,
    W_FFN_DOWN,
    W_ATTN_POST_NORM, /* gemma3: norm of the attention output */
    W_FFN_POST_NORM,  /* gemma3: norm of the FFN output */
    W_FFN_GATE_INP,   /* MoE router [n_embd, n_expert] */
    W_FFN_GATE_EXPS,  /* MoE experts, 3-D */
    W_FFN_UP_EXPS,
    W_FFN_DOWN_EXPS,
    W_LAYER_COUNT,
};

struct tensor_spec {
    const char *name;       /* GGUF name; "%d" stands for the layer of per-layer ones */
    bool per_layer;
    int slot;               /* enum weight_slot (global or per-layer numbering) */
    enum weight_kind kind;
    bool required;
    enum model_dim ne[3];   /* ne[0], ne[1] (DIM_1 for vectors), ne[2] (experts) */
};

/* The size of symbolic dimension d for hyperparameters hp. */
int64_t model_dim_value(const struct model_hparams *hp, enum model_dim d);

struct build; /* shared blocks' state, below */

struct model_arch {
    const char *name;                  /* general.architecture value */
    const struct hparam_spec *hparams; /* terminated by key NULL */
    const struct tensor_spec *tensors; /* terminated by name NULL */
    /* Appends the forward pass of b->n_tokens tokens to b->g. */
    void (*build)(struct build *b);
    /* Optional: reads what the key table cannot say (defaults that depend
     * on other keys, consistency between keys) after the table was read;
     * errors name the key. */
    minfer_status (*hparams_check)(const struct minfer_gguf *g, struct model_hparams *hp,
                                   char *err, size_t err_len);
};

/* The registry (core/model/model.c). */
const struct model_arch *model_arch_find(const char *name);
extern const struct model_arch model_arch_qwen2;
extern const struct model_arch model_arch_qwen3;
extern const struct model_arch model_arch_llama;
extern const struct model_arch model_arch_gemma3;
extern const struct model_arch model_arch_qwen3moe;

/* ---- loaded model ---- */

struct model_weight {
    const struct minfer_gguf_tensor *gt;
};

struct minfer_model {
    struct minfer_gguf *gguf;          /* owned */
    const struct model_arch *arch;
    struct model_hparams hp;
    const struct minfer_plugin *plugin; /* backend the model runs on */
    struct minfer_model_params params;
    struct model_weight *weights;      /* every tensor the descriptor matched */
    int32_t n_weights;
    int32_t global[W_GLOBAL_COUNT];    /* -> weights, -1 absent */
    int32_t (*layer)[W_LAYER_COUNT];   /* [n_layer] -> weights, -1 absent */
    char name[128];
    char type_desc[32];
    uint64_t n_params, size_bytes;
    /* minfer_model_tokenizer's, made on first use (model-tokenizer.c) */
    struct minfer_tokenizer *_Atomic tok;
};

/* Validates g against its architecture and binds it to a backend. On
 * success the model owns g; on failure g is left to the caller. rt may be
 * NULL with plugin given directly (tests). */
minfer_status model_load_internal(struct minfer_runtime *rt, const struct minfer_plugin *plugin,
                                  struct minfer_gguf *g, const struct minfer_model_params *p,
                                  struct minfer_model **out, char *err, size_t err_len);

/* ---- shared graph blocks (core/model/arch/blocks.c) ---- */

struct build {
    struct graph *g;
    const struct minfer_model *m;
    const struct model_hparams *hp;
    const struct kv_cache *kv;
    void *const *wdata;         /* backend address of each model weight */
    int32_t n_tokens;           /* tokens in this pass */
    int32_t n_kv;               /* cells attention may see (the KV-length bucket) */
    int32_t n_out;              /* logits rows: the last n_out tokens (0 .. n_tokens) */
    int32_t n_lists;            /* 0: one sequence, cell == position (ATTENTION);
                                   else cell lists (ATTENTION_LISTS, n_kv cells each) */
    /* inputs, written before every pass */
    struct gtensor *inp_tokens; /* i32 [n_tokens] */
    struct gtensor *inp_pos;    /* i32 [n_tokens] */
    struct gtensor *inp_cells;  /* i32 [n_tokens] KV cell of each token */
    struct gtensor *inp_kv_len; /* i32 [1] (n_lists == 0) */
    struct gtensor *inp_range;  /* i32 [2, n_tokens] visible list entries (n_lists > 0) */
    struct gtensor *inp_range_w;/* the same within the sliding window (n_lists > 0 and
                                   windowed layers; made by the first such layer) */
    struct gtensor *inp_qlist;  /* i32 [n_tokens] list of each token (n_lists > 0) */
    struct gtensor *inp_lists;  /* i32 [n_kv, n_lists] cell lists (n_lists > 0) */
    struct gtensor *out_logits; /* f32 [n_vocab, n_out] or NULL when n_out == 0 */
    struct gtensor **wt;        /* per model weight, made on first use */
};

/* A weight of layer il (il < 0: a global slot); NULL when absent. */
struct gtensor *build_weight(struct build *b, int il, int slot);
/* Makes the input tensors; returns the embeddings [n_embd, n_tokens]. */
struct gtensor *build_inputs_embed(struct build *b);
/* rms_norm(x) * weight. */
struct gtensor *build_norm(struct build *b, struct gtensor *x, int il, int slot,
                           const char *label);
/* Self-attention of layer il over normalised input x: Q/K/V projections
 * (plus biases when the layer has them), per-head Q/K norms when it has
 * them, RoPE, KV store, attention, output projection. */
struct gtensor *build_attn(struct build *b, int il, struct gtensor *x);
/* SwiGLU feed-forward of layer il over normalised input x. */
struct gtensor *build_ffn(struct build *b, int il, struct gtensor *x);
/* Self-attention with the RoPE base/scale and sliding window given (the
 * layer's own; build_attn passes the model's and no window). */
struct gtensor *build_attn_ext(struct build *b, int il, struct gtensor *x, double rope_base,
                               double rope_scale, int window, float scale);
/* GEGLU (tanh GELU) feed-forward of layer il over normalised input x. */
struct gtensor *build_ffn_geglu(struct build *b, int il, struct gtensor *x);
/* Mixture-of-experts feed-forward of layer il over normalised input x:
 * router softmax, top n_expert_used, (renormalised) weights, the chosen
 * experts' SwiGLU FFNs, weighted sum. */
struct gtensor *build_ffn_moe(struct build *b, int il, struct gtensor *x);
/* Final norm, the rows that need logits, and the output projection (tied
 * to token_embd when output.weight is absent). */
void build_output(struct build *b, struct gtensor *x);
/* The pre-norm decoder stack: embeddings, per layer x += attn(norm(x)) and
 * x += ffn(norm(x)), then the output head. What differs between
 * architectures that share it (biases, Q/K norms) is in their tensor
 * tables, which the blocks read. */
void build_prenorm_decoder(struct build *b);

#endif /* MINFER_CORE_MODEL_H */
