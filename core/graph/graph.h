/*
 * graph.h — the core's compute graph: IR tensors and nodes under
 * construction, views, and the passes that turn a built graph into one a
 * backend can run (fuse, alloc, bind). Internal to the core.
 *
 * A graph is a list of nodes in execution order. Each node writes one
 * tensor (its dst) and reads up to MINFER_MAX_SRC others. Tensors are
 * leafs (weights, inputs, KV regions), node results, or views of either.
 * Builder functions return NULL on failure and accept NULL sources (they
 * then return NULL too), so a builder checks graph_ok() once at the end.
 */
#ifndef MINFER_CORE_GRAPH_H
#define MINFER_CORE_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/ir.h"

/* A tensor of the graph. The public descriptor comes first so that node
 * src/dst pointers (struct minfer_tensor *) convert back. */
struct gtensor {
    struct minfer_tensor t;
    struct gtensor *view_src;  /* storage owner when this is a view, else NULL */
    size_t view_offs;          /* byte offset into view_src's storage */
    size_t size;               /* bytes spanned from data */
    int32_t producer;          /* index of the node writing it, -1 for leafs */
    int32_t last_use;          /* last node index reading it (after fuse) */
    int32_t n_readers;         /* nodes reading it (fuse) */
    size_t offs;               /* arena offset once allocated (owners only) */
    bool in_arena;             /* storage lives in the compute arena */
    char name[64];
};

struct graph {
    struct gtensor **tensors;  /* owned, stable addresses */
    size_t n_tensors, cap_tensors;
    struct minfer_node *nodes; /* execution order */
    size_t n_nodes, cap_nodes;
    int32_t *node_backend;     /* per node, set by assign (index into a backend list) */
    size_t arena_size;         /* bytes the compute arena must hold (alloc) */
    uint64_t uid;              /* identity for graph replay */
    bool failed;               /* a builder call failed (out of memory or bad shape) */
    char err[256];             /* why, when failed */
};

static inline struct gtensor *gt_of(const struct minfer_tensor *t)
{
    return (struct gtensor *)(uintptr_t)t;
}

/* ---- construction ---- */

struct graph *graph_new(void);
void graph_free(struct graph *g); /* NULL is a no-op */
bool graph_ok(const struct graph *g);
/* Marks the graph failed with a message (first failure wins). */
void graph_fail(struct graph *g, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* A dense leaf of type with ne[0..n_dims-1] (others 1) and flags. */
struct gtensor *graph_leaf(struct graph *g, uint32_t type, int n_dims, const int64_t *ne,
                           uint32_t flags, const char *name);
/* 1-D/2-D shortcuts for inputs (MINFER_TENSOR_INPUT). */
struct gtensor *graph_input(struct graph *g, uint32_t type, int64_t ne0, int64_t ne1,
                            const char *name);
/* A leaf whose storage is fixed (a registered weight or a KV region). */
struct gtensor *graph_fixed(struct graph *g, uint32_t type, const int64_t ne[4],
                            const size_t nb[4], void *data, uint32_t flags, const char *name);
/* A view of src with its own shape and strides at byte offset offs. */
struct gtensor *graph_view(struct graph *g, struct gtensor *src, const int64_t ne[4],
                           const size_t nb[4], size_t offs, const char *name);
/* A contiguous src seen with another shape of the same element count. */
struct gtensor *graph_reshape(struct graph *g, struct gtensor *src, int64_t ne0, int64_t ne1,
                              int64_t ne2);
/* Columns [first, first + n) of a 2-D tensor (a view). */
struct gtensor *graph_cols(struct graph *g, struct gtensor *src, int64_t first, int64_t n);

/* ---- ops (each appends one node) ---- */

/* A ROPE node's parameters (MINFER_OP_ROPE's iparams/fparams): layout 0
 * NeoX, 1 normal. YaRN: ext_factor > 0 mixes each pair's interpolated and
 * original angle by a ramp over pair indices [corr_lo, corr_hi]; mscale
 * scales cos and sin (0 = 1). All YaRN fields 0: plain (linear) scaling. */
struct graph_rope_params {
    int n_rot, layout;
    float freq_base, freq_scale;
    float ext_factor, mscale, corr_lo, corr_hi;
};
/* ROPE, or ROPE_DIV when factors (F32 [n_rot / 2]) is given. */
struct gtensor *graph_rope_p(struct graph *g, struct gtensor *x, struct gtensor *pos,
                             struct gtensor *factors, const struct graph_rope_params *p,
                             const char *label);

struct gtensor *graph_get_rows(struct graph *g, struct gtensor *table, struct gtensor *ids,
                               const char *label);
struct gtensor *graph_rms_norm(struct graph *g, struct gtensor *x, float eps, const char *label);
struct gtensor *graph_add(struct graph *g, struct gtensor *a, struct gtensor *b,
                          const char *label);
struct gtensor *graph_mul(struct graph *g, struct gtensor *a, struct gtensor *b,
                          const char *label);
struct gtensor *graph_scale(struct graph *g, struct gtensor *a, float s, const char *label);
struct gtensor *graph_mul_mat(struct graph *g, struct gtensor *w, struct gtensor *x,
                              const char *label);
struct gtensor *graph_rope(struct graph *g, struct gtensor *x, struct gtensor *pos, int n_rot,
                           float freq_base, float freq_scale, const char *label);
/* ROPE, or ROPE_DIV when factors (F32 [n_rot / 2]) is given; layout 0 NeoX,
 * 1 normal (ir.h). */
struct gtensor *graph_rope_ext(struct graph *g, struct gtensor *x, struct gtensor *pos,
                               struct gtensor *factors, int n_rot, int layout, float freq_base,
                               float freq_scale, const char *label);
struct gtensor *graph_geglu(struct graph *g, struct gtensor *gate, struct gtensor *up,
                            const char *label);
/* Mixture of experts (ir.h): the k largest per column (I32 [k, T]), the
 * chosen experts' router weights, their products, the weighted sum. */
struct gtensor *graph_topk(struct graph *g, struct gtensor *x, int k, const char *label);
struct gtensor *graph_moe_weights(struct graph *g, struct gtensor *logits, struct gtensor *ids,
                                  bool renorm, const char *label);
struct gtensor *graph_mul_mat_id(struct graph *g, struct gtensor *w, struct gtensor *x,
                                 struct gtensor *ids, const char *label);
struct gtensor *graph_moe_sum(struct graph *g, struct gtensor *x, struct gtensor *weights,
                              const char *label);
struct gtensor *graph_swiglu(struct graph *g, struct gtensor *gate, struct gtensor *up,
                             const char *label);
/* Writes rows of x into cache at cells; returns the cache (for ordering). */
struct gtensor *graph_kv_store(struct graph *g, struct gtensor *cache, struct gtensor *x,
                               struct gtensor *cells, const char *label);
struct gtensor *graph_attention(struct graph *g, struct gtensor *q, struct gtensor *k,
                                struct gtensor *v, struct gtensor *kv_len, struct gtensor *pos,
                                int n_kv_head, float scale, const char *label);
/* ATTENTION_LISTS (minfer/ir.h): q's token t reads entries
 * [n_vis[0, t], n_vis[1, t]) of list qlist[t] of lists [n_kv, n_lists]. */
struct gtensor *graph_attention_lists(struct graph *g, struct gtensor *q, struct gtensor *k,
                                      struct gtensor *v, struct gtensor *n_vis,
                                      struct gtensor *qlist, struct gtensor *lists,
                                      int n_kv_head, float scale, const char *label);
/* The same with a sliding window of `window` positions (0 = none). */
struct gtensor *graph_attention_swa(struct graph *g, struct gtensor *q, struct gtensor *k,
                                    struct gtensor *v, struct gtensor *kv_len,
                                    struct gtensor *pos, int n_kv_head, float scale,
                                    int window, const char *label);
/* Marks t as a pass output (read by the host afterwards). */
void graph_set_output(struct graph *g, struct gtensor *t);

/* ---- passes ---- */

/* The tensor owning t's storage (t itself unless a view). */
struct gtensor *gt_owner(struct gtensor *t);
/* Recomputes node indices, producers, reader counts and last uses. */
void graph_index(struct graph *g);

/* Whether a backend accepts a node; user is the caller's. */
typedef bool (*graph_supports_fn)(void *user, const struct minfer_node *node);

/* Rewrites RMS_NORM·MUL into RMS_NORM_MUL and MUL_MAT gate + MUL_MAT up +
 * SWIGLU into FFN_GATE_UP wherever the intermediate results have no other
 * reader and supports() accepts the fused node. Returns nodes removed. */
size_t graph_fuse(struct graph *g, graph_supports_fn supports, void *user);

/* Liveness-based placement of every non-fixed tensor in one arena:
 * a result's bytes are reused once its last reader ran; inputs and outputs
 * stay live for the whole pass. Sets arena_size and each owner's offs. */
void graph_alloc(struct graph *g, size_t align);

/* Points every arena tensor (and view) at base + its offset. */
void graph_bind(struct graph *g, void *base);

/* Human description of a node for errors: "node 12 blk.0.attn_q
 * (MUL_MAT, src0 q4_K [896, 896], src1 f32 [896, 7])". */
void graph_describe_node(const struct minfer_node *n, char *buf, size_t len);

#endif /* MINFER_CORE_GRAPH_H */
