/*
 * sched.c — assign and execute (passes.c runs assign in the pipeline).
 * Every node is placed on a backend that said it can run it (supports_op);
 * nodes that read weights go where the weights live. Execution walks
 * splits — maximal runs of nodes on one backend — offering each to
 * graph_replay first, and synchronises at every split boundary. Errors
 * are errors: a failed node fails the pass.
 */
#include "scheduler.h"
#include "runtime/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* ---- assign ---- */

static bool reads_weight(const struct minfer_node *n)
{
    for (uint32_t s = 0; s < n->n_src; s++)
        if (n->src[s]->flags & (MINFER_TENSOR_WEIGHT | MINFER_TENSOR_KV))
            return true;
    return (n->dst->flags & MINFER_TENSOR_KV) != 0;
}

/* Whether n needs what ABI 1.1 added: its ops (ATTENTION_LISTS .. ROPE_DIV)
 * or a meaning given to a parameter slot that 1.0 left zero (ROPE's layout,
 * ATTENTION's window). A 1.0 plugin would ignore such a slot silently. */
static bool needs_minor_1(const struct minfer_node *n)
{
    if (n->op >= MINFER_OP_ATTENTION_LISTS)
        return true;
    return (n->op == MINFER_OP_ROPE || n->op == MINFER_OP_ATTENTION) && n->iparams[1] != 0;
}

bool sched_supports(const struct sched_backend *b, const struct minfer_node *n)
{
    if (b->plugin->abi_minor < 1 && needs_minor_1(n))
        return false;
    return b->plugin->iface->supports_op &&
           b->plugin->iface->supports_op(b->be, n);
}

minfer_status sched_assign(struct graph *g, const struct sched_backend *bes, int n_bes,
                          char *err, size_t err_len)
{
    int32_t *nb = realloc(g->node_backend, sizeof *nb * (g->n_nodes ? g->n_nodes : 1));
    if (!nb) {
        return errf(err, err_len, MINFER_ERR_NO_MEMORY,
                    "out of memory assigning %zu nodes", g->n_nodes);
    }
    g->node_backend = nb;
    for (size_t i = 0; i < g->n_nodes; i++) {
        const struct minfer_node *n = &g->nodes[i];
        int limit = reads_weight(n) ? 1 : n_bes;
        nb[i] = -1;
        for (int b = 0; b < limit && nb[i] < 0; b++)
            if (sched_supports(&bes[b], n))
                nb[i] = b;
        if (nb[i] < 0) {
            char desc[320];
            graph_describe_node(n, desc, sizeof desc);
            const char *why = plugin_last_error(bes[0].plugin, bes[0].be);
            return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                        "backend '%s' does not support %s%s%s%.300s",
                        bes[0].plugin->name, desc,
                        limit < n_bes ? " (it holds the weights this node reads)" : "",
                        why[0] ? ": " : "", why);
        }
    }
    return MINFER_OK;
}

/* ---- execute ---- */

static minfer_status node_failed(const struct sched_backend *b, const struct minfer_node *n,
                                 minfer_status st, const char *what, char *err, size_t err_len)
{
    char desc[320];
    graph_describe_node(n, desc, sizeof desc);
    return errf(err, err_len, st, "backend '%s' failed %s %s: %s: %s", b->plugin->name, what, desc,
                minfer_status_str(st), plugin_last_error(b->plugin, b->be));
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

void sched_profile_report(const struct sched_profile *prof, const char *what)
{
    if (!prof->on || !prof->passes)
        return;
    double total = 0;
    for (int op = 0; op < MINFER_OP_COUNT; op++)
        total += prof->ms[op];
    plugin_log(MINFER_LOG_WARN, "profile %s: %llu passes, %.3f ms per pass", what,
               (unsigned long long)prof->passes, total / (double)prof->passes);
    for (int op = 0; op < MINFER_OP_COUNT; op++)
        if (prof->count[op])
            plugin_log(MINFER_LOG_WARN, "  %-13s %8llu nodes %10.3f ms/pass %5.1f%%",
                       minfer_op_name((uint32_t)op), (unsigned long long)prof->count[op],
                       prof->ms[op] / (double)prof->passes, 100.0 * prof->ms[op] / total);
}

minfer_status sched_execute(struct graph *g, const struct sched_backend *bes, int n_bes,
                            uint64_t generation, int32_t nt_hint, bool allow_replay,
                            struct sched_profile *prof, char *err, size_t err_len)
{
    (void)n_bes;
    bool profiling = prof && prof->on;
    if (profiling) {
        allow_replay = false;
        prof->passes++;
    }
    size_t i = 0;
    while (i < g->n_nodes) {
        int32_t bi = g->node_backend[i];
        size_t last = i;
        while (last + 1 < g->n_nodes && g->node_backend[last + 1] == bi)
            last++;
        const struct sched_backend *b = &bes[bi];
        const struct minfer_backend_iface *it = b->plugin->iface;
        bool replayed = false;
        if (allow_replay && PLUGIN_HAS(b->plugin, graph_replay)) {
            struct minfer_replay_window w = {
                .uid = g->uid, .first = (uint32_t)i, .last = (uint32_t)last,
                .nt_hint = nt_hint, .generation = generation, .nodes = g->nodes,
            };
            minfer_status st = it->graph_replay(b->be, &w, &replayed);
            if (st != MINFER_OK)
                return node_failed(b, &g->nodes[i], st, "replaying the split starting at", err,
                                   err_len);
        }
        for (size_t k = i; !replayed && k <= last; k++) {
            double t0 = profiling ? now_ms() : 0;
            minfer_status st = it->execute_node(b->be, &g->nodes[k]);
            if (st != MINFER_OK)
                return node_failed(b, &g->nodes[k], st, "executing", err, err_len);
            if (profiling) {
                st = it->synchronize ? it->synchronize(b->be) : MINFER_OK;
                if (st != MINFER_OK)
                    return node_failed(b, &g->nodes[k], st, "synchronizing after", err, err_len);
                uint32_t op = g->nodes[k].op < MINFER_OP_COUNT ? g->nodes[k].op : 0;
                prof->ms[op] += now_ms() - t0;
                prof->count[op]++;
            }
        }
        minfer_status st = it->synchronize ? it->synchronize(b->be) : MINFER_OK;
        if (st != MINFER_OK)
            return node_failed(b, &g->nodes[last], st, "synchronizing after", err, err_len);
        i = last + 1;
    }
    return MINFER_OK;
}
