/*
 * scheduler.h — the scheduler (core/graph/sched.c): assigns a graph's
 * nodes to backends and executes the graph split by split (graph replay
 * offered first, execute_node otherwise). The pipeline that calls assign
 * is passes.h. Internal to the core. (Named scheduler.h, not sched.h, from
 * when core/ was flat and on the include path: it shadowed <sched.h>.)
 */
#ifndef MINFER_CORE_SCHED_H
#define MINFER_CORE_SCHED_H

#include "graph.h"
#include "runtime/plugin.h"

struct sched_profile;

/* One backend instance the scheduler may use. */
struct sched_backend {
    const struct minfer_plugin *plugin;
    struct minfer_backend *be;
};

/* Whether backend b accepts node n (its supports_op). */
bool sched_supports(const struct sched_backend *b, const struct minfer_node *n);

/* Assigns every node to a backend (bes[0] holds the weights and the KV
 * cache: a node reading a weight goes there; the others go to the first
 * backend that accepts them). A node no allowed backend accepts is an
 * error naming it. The pipeline around it is passes.c. */
minfer_status sched_assign(struct graph *g, const struct sched_backend *bes, int n_bes,
                           char *err, size_t err_len);

/* Runs the graph: per split (a run of nodes on one backend) offers
 * graph_replay when allowed and present, else calls execute_node per node,
 * then synchronises. A failure names the node, its backend and the
 * backend's own error; nothing falls back to another backend. */
minfer_status sched_execute(struct graph *g, const struct sched_backend *bes, int n_bes,
                            uint64_t generation, int32_t nt_hint, bool allow_replay,
                            struct sched_profile *prof, char *err, size_t err_len);

/* Per-op time when $MINFER_PROFILE is set: each node is followed by a
 * synchronize so its time is its own (replay is then not offered). */
struct sched_profile {
    bool on;
    double ms[MINFER_OP_COUNT];
    uint64_t count[MINFER_OP_COUNT];
    uint64_t passes;
};
/* Writes the table through the core's log (warn level, stderr). */
void sched_profile_report(const struct sched_profile *prof, const char *what);

#endif /* MINFER_CORE_SCHED_H */
