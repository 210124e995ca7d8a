/*
 * graph.c — CUDA Graph capture and replay of the scheduler's windows
 * (docs/decisions/cuda-graph-replay.md): a window (uid, first, last) runs
 * directly GRAPH_WARMUP times, is captured on the third pass and replayed
 * while the scheduler's and the pool's generations hold. A failure inside
 * a capture aborts it and turns graphs off for the instance, loudly.
 */
#include <stdio.h>
#include <string.h>

#include "cuda-internal.h"

/* Graph replay: passes a window runs directly before it is captured. */
#define GRAPH_WARMUP 2

static void gentry_drop(struct minfer_backend *be, struct gentry *e)
{
    cu_graph_destroy(be->c, e->exec);
    memset(e, 0, sizeof(*e));
}

/* The entry of (uid, first, last), or a free / least recently used slot
 * reset for it. */
static struct gentry *gentry_get(struct minfer_backend *be, const struct minfer_replay_window *w)
{
    struct gentry *victim = &be->gc[0];
    for (int i = 0; i < GRAPH_CACHE; i++) {
        struct gentry *e = &be->gc[i];
        if (e->used && e->uid == w->uid && e->first == w->first && e->last == w->last)
            return e;
        if (!e->used || (victim->used && e->used < victim->used))
            victim = e;
    }
    gentry_drop(be, victim);
    victim->uid = w->uid;
    victim->first = w->first;
    victim->last = w->last;
    return victim;
}

void cuda_graphs_drop(struct minfer_backend *be)
{
    for (int i = 0; i < GRAPH_CACHE; i++)
        gentry_drop(be, &be->gc[i]);
}

static void graphs_disable(struct minfer_backend *be, const char *why)
{
    be->graphs_off = true;
    CUDA_COUNT(graph.aborts);
    cuda_graphs_drop(be);
    if (cuda_host && cuda_host->log)
        cuda_host->log(MINFER_LOG_WARN,
                       "cuda: graph capture aborted: %s; CUDA graphs are now OFF for this "
                       "context (nodes run by direct launches, same results)",
                       why);
}

/* Runs nodes[first..last] on the capturing stream with the same results
 * as execute_node would give, fusing nodes where fuse.c finds a pattern
 * and reusing quantized activations between products of one x; returns
 * the first failure. */
static minfer_status capture_window(struct minfer_backend *be,
                                    const struct minfer_replay_window *w, struct kctx *k)
{
    char why[400];
    if (__atomic_load_n(&cuda_count.fail_next_capture, __ATOMIC_RELAXED) > 0 &&
        __atomic_sub_fetch(&cuda_count.fail_next_capture, 1, __ATOMIC_RELAXED) >= 0) {
        minfer_status st = cu_capture_poison(be->c);
        if (st == MINFER_OK)
            st = cu_ctx_fail(be->c, MINFER_ERR_BACKEND,
                             "cuda: injected capture fault (test hook) did not fail");
        return st;
    }
    be->xq.valid = false;
    minfer_status st = MINFER_OK;
    for (uint32_t i = w->first; i <= w->last && st == MINFER_OK; i++) {
        const struct minfer_node *n = &w->nodes[i];
        if (cuda_validate(n, 1, why, sizeof(why))) {
            st = cuda_node_fail(be, n, MINFER_ERR_UNSUPPORTED, why);
            break;
        }
        k->err[0] = 0;
        uint32_t used = be->fuse_off ? 0 : cuda_fuse_at(be, w, i, k, &st);
        if (used) {
            i += used - 1;
            continue;
        }
        st = cuda_exec(be, n, k);
        cuda_xq_note_write(be, n->dst);
    }
    be->xq.valid = false;
    return st;
}

minfer_status cuda_graph_replay(struct minfer_backend *be, const struct minfer_replay_window *w,
                                bool *replayed)
{
    if (!be || !w || !replayed || !w->nodes || w->first > w->last)
        return MINFER_ERR_INVALID_ARG;
    *replayed = false;
    if (be->graphs_off)
        return MINFER_OK;
    be->xq.valid = false; /* a replay writes what its nodes write, unseen */
    cu_ctx_clear_error(be->c);
    struct gentry *e = gentry_get(be, w);
    uint64_t pool_gen = cu_pool_generation(be->c);
    if (e->win_gen != w->generation || e->pool_gen != pool_gen) {
        /* addresses moved (arena, KV, scratch): what was captured is stale */
        cu_graph_destroy(be->c, e->exec);
        e->exec = NULL;
        e->warm = 0;
        e->win_gen = w->generation;
        e->pool_gen = pool_gen;
    }
    e->used = ++be->tick;
    if (e->exec) {
        minfer_status st = cu_graph_launch(be->c, e->exec);
        if (st != MINFER_OK)
            return st;
        CUDA_COUNT(graph.replays);
        *replayed = true;
        return MINFER_OK;
    }
    if (e->warm < GRAPH_WARMUP) { /* the scheduler runs this pass directly */
        if (++e->warm == GRAPH_WARMUP) {
            /* the capture's fusions may need scratch that no direct pass
             * sizes, and a capture may not grow it */
            cuda_fuse_reserve(be, w, cu_ctx_kctx(be->c));
            e->pool_gen = cu_pool_generation(be->c);
        }
        return MINFER_OK;
    }
    /* capture (the launch context is taken first: no device switch inside
     * the capture window) */
    struct kctx *k = cu_ctx_kctx(be->c);
    minfer_status st = cu_capture_begin(be->c);
    if (st == MINFER_OK) {
        st = capture_window(be, w, k);
        if (st == MINFER_OK) {
            st = cu_capture_end(be->c, &e->exec);
        } else {
            char keep[1024];
            snprintf(keep, sizeof(keep), "%s", cu_ctx_error(be->c));
            cu_capture_abort(be->c);
            cu_ctx_fail(be->c, st, "%s", keep);
        }
    }
    if (st != MINFER_OK || cu_pool_generation(be->c) != pool_gen) {
        char msg[1100];
        snprintf(msg, sizeof(msg), "window (graph %llu, nodes %u..%u): %s",
                 (unsigned long long)w->uid, w->first, w->last,
                 st != MINFER_OK ? cu_ctx_error(be->c) : "the pool grew during capture");
        cu_graph_destroy(be->c, e->exec);
        e->exec = NULL;
        graphs_disable(be, msg);
        cu_ctx_clear_error(be->c);
        return MINFER_OK; /* replayed = false: the scheduler runs the nodes directly */
    }
    CUDA_COUNT(graph.captures);
    st = cu_graph_launch(be->c, e->exec);
    if (st != MINFER_OK)
        return st;
    CUDA_COUNT(graph.replays);
    *replayed = true;
    return MINFER_OK;
}
