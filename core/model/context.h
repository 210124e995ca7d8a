/*
 * context.h — the context's state, shared by the files that implement
 * it: lifetime and graphs (context.c), batched decode and sequence
 * operations (batch.c), session files (session.c). Internal to the core.
 */
#ifndef MINFER_CORE_CONTEXT_H
#define MINFER_CORE_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "graph/passes.h"
#include "kv.h"
#include "model.h"

#define CTX_MAX_GRAPHS 16
#define CTX_MAX_INPUTS 7

/* A built graph and its key: tokens per pass, cells attention may read
 * (the KV-length bucket), logits rows, and cell lists (0: the
 * single-sequence layout). */
struct graph_entry {
    int32_t n_tokens, n_kv, n_out, n_lists;
    struct graph *g;
    /* tokens, positions, cells, then kv_len (single sequence) or ranges,
     * qlist, lists and (windowed models) the windowed ranges */
    struct gtensor *in[CTX_MAX_INPUTS];
    int n_in;
    struct gtensor *out;
    uint64_t last_used;
};

struct minfer_ctx {
    struct minfer_model *m;
    struct minfer_ctx_params p;
    struct sched_backend sb;
    void **wdata;                    /* [m->n_weights] backend addresses */
    struct kv_cache kv;
    void *arena;                     /* compute arena in the backend */
    size_t arena_size;
    uint64_t generation;             /* bumps when the arena moves */
    struct graph_entry graphs[CTX_MAX_GRAPHS];
    int n_graphs;
    uint64_t tick;
    char *stage;                     /* host staging of a pass's inputs */
    size_t stage_size;
    float *logits;                   /* [n_logits_cap][n_vocab] */
    bool logits_host;                /* logits from the plugin's host_alloc, not malloc */
    int32_t n_logits, n_logits_cap;
    int32_t *batch_row;              /* [batch_row_cap]: logits row of each token of the
                                        last batch, -1 when it kept none */
    int32_t n_batch_rows, batch_row_cap;
    bool pad_batches;                /* MINFER_CTX_PAD_BATCHES, or a GPU with replay */
    struct sched_profile prof;       /* $MINFER_PROFILE */
    char err[768];
};

/* The cached graph of this key, built on first use. */
minfer_status ctx_get_graph(struct minfer_ctx *c, int32_t n_tokens, int32_t n_kv, int32_t n_out,
                            int32_t n_lists, struct graph_entry **out);
/* The KV-length bucket for n cells: a power of two (at least 256) capped by
 * the cache. */
int32_t ctx_kv_bucket(const struct minfer_ctx *c, int32_t n);
/* Room for the logits of `rows` tokens (grows, keeping what is there):
 * the plugin's host_alloc memory where it has one, else malloc. */
minfer_status ctx_logits_reserve(struct minfer_ctx *c, int32_t rows);
/* Frees the logits; before the instance is destroyed. */
void ctx_logits_free(struct minfer_ctx *c);

#endif /* MINFER_CORE_CONTEXT_H */
