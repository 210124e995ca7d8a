/*
 * passes.c — the one place a forward pass becomes a graph a backend runs.
 * In order:
 *   build    the architecture appends its nodes (core/model/arch/<name>.c)
 *   assign   each node goes to a backend that accepts it (sched.c)
 *   fuse     node patterns collapse where that backend accepts the fused
 *            op (graph.c: graph_fuse), and the result is assigned again
 *   alloc    every non-fixed tensor gets an offset in one arena by
 *            liveness (alloc.c)
 *   reserve  the caller makes its arena that large (the context's buffer)
 *   bind     every arena tensor points at base + its offset (alloc.c)
 * Execution is separate (sched.c: sched_execute): a prepared graph runs
 * for every pass with the same shape (core/model/context.c caches them).
 */
#include "passes.h"
#include "runtime/error.h"

#include <stdio.h>

/* ---- placement: assign, fuse, assign ---- */

struct fuse_gate {
    const struct graph *g;
    const struct sched_backend *bes;
};

/* The fused node replaces the node at its index: gate on that node's backend. */
static bool fuse_supports(void *user, const struct minfer_node *n)
{
    const struct fuse_gate *f = user;
    return sched_supports(&f->bes[f->g->node_backend[n->index]], n);
}

minfer_status sched_prepare(struct graph *g, const struct sched_backend *bes, int n_bes,
                            bool fuse, char *err, size_t err_len)
{
    if (!graph_ok(g)) {
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "graph construction failed: %s", g->err);
    }
    /* Until alloc places them, arena tensors point at a placeholder: a
     * backend's supports_op may insist on non-NULL data (the CPU plugin
     * validates nodes the same way for both calls). The addresses are
     * replaced by graph_bind after graph_alloc. */
    static _Alignas(256) unsigned char placeholder[256];
    graph_bind(g, placeholder);
    minfer_status st = sched_assign(g, bes, n_bes, err, err_len);
    if (st != MINFER_OK || !fuse)
        return st;
    struct fuse_gate gate = {g, bes};
    if (graph_fuse(g, fuse_supports, &gate))
        st = sched_assign(g, bes, n_bes, err, err_len);
    return st;
}

/* ---- the pipeline ---- */

minfer_status graph_passes_run(const struct graph_passes *p, struct graph **out, char *err,
                               size_t err_len)
{
    *out = NULL;
    struct graph *g = graph_new();
    if (!g) {
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory building a graph");
    }
    p->build(p->user, g);
    minfer_status st = sched_prepare(g, p->bes, p->n_bes, p->fuse, err, err_len);
    if (st != MINFER_OK || !p->reserve)
        goto out;
    graph_alloc(g, p->align);
    void *base = NULL;
    st = p->reserve(p->user, g->arena_size, &base);
    if (st != MINFER_OK)
        goto out;
    graph_bind(g, base);
out:
    if (st != MINFER_OK)
        graph_free(g);
    else
        *out = g;
    return st;
}
