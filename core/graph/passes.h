/*
 * passes.h — the pipeline that turns an architecture's forward pass into
 * a graph a backend can run (core/graph/passes.c). Internal to the core.
 */
#ifndef MINFER_CORE_PASSES_H
#define MINFER_CORE_PASSES_H

#include "graph.h"
#include "scheduler.h"

/* What the pipeline needs from its caller (the context, or the loader's
 * dry run asking whether a backend accepts a model). */
struct graph_passes {
    /* Appends the forward pass to g; a failure marks g failed (graph_fail). */
    void (*build)(void *user, struct graph *g);
    /* Makes the compute arena hold size bytes and returns its base. NULL:
     * stop after placement (assign, fuse), nothing is allocated. */
    minfer_status (*reserve)(void *user, size_t size, void **base);
    void *user;
    const struct sched_backend *bes;
    int n_bes;
    bool fuse;
    size_t align;                      /* arena alignment of every tensor */
};

/* Runs build → assign → fuse → assign → alloc → reserve → bind. On success
 * *out is the graph, owned by the caller (graph_free); on failure *out is
 * NULL and err says which stage failed and why. */
minfer_status graph_passes_run(const struct graph_passes *p, struct graph **out, char *err,
                               size_t err_len);

/* The placement stages alone, on a built graph: assign, then (when fuse is
 * set) fuse gated by each node's backend and assign the result again. */
minfer_status sched_prepare(struct graph *g, const struct sched_backend *bes, int n_bes,
                            bool fuse, char *err, size_t err_len);

#endif /* MINFER_CORE_PASSES_H */
