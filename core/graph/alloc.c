/*
 * alloc.c — places a graph's compute tensors in one arena by liveness: a
 * node's result takes the best-fitting free block; its bytes return to the
 * free list right after its last reader. Inputs and outputs stay live for
 * the whole pass. Weights and KV regions are fixed storage, never placed
 * here. The plan is made once per cached graph, so every decode step of a
 * graph sees the same addresses (graph replay depends on it).
 */
#include <stdlib.h>

#include "graph.h"

/* ---- allocation ---- */

struct free_block {
    size_t offs, size;
};

struct arena_plan {
    struct free_block *blocks;
    size_t n, cap;
    size_t top;
    bool oom;
};

static size_t align_up(size_t x, size_t a)
{
    return (x + a - 1) / a * a;
}

static size_t plan_take(struct arena_plan *p, size_t size)
{
    size_t best = SIZE_MAX;
    for (size_t i = 0; i < p->n; i++)
        if (p->blocks[i].size >= size && (best == SIZE_MAX || p->blocks[i].size < p->blocks[best].size))
            best = i;
    if (best != SIZE_MAX) {
        size_t offs = p->blocks[best].offs;
        p->blocks[best].offs += size;
        p->blocks[best].size -= size;
        if (!p->blocks[best].size)
            p->blocks[best] = p->blocks[--p->n];
        return offs;
    }
    /* Grow the top, merging a free block that ends there. */
    for (size_t i = 0; i < p->n; i++)
        if (p->blocks[i].offs + p->blocks[i].size == p->top) {
            size_t offs = p->blocks[i].offs;
            p->top = offs + size;
            p->blocks[i] = p->blocks[--p->n];
            return offs;
        }
    size_t offs = p->top;
    p->top += size;
    return offs;
}

static void plan_give(struct arena_plan *p, size_t offs, size_t size)
{
    for (size_t i = 0; i < p->n; i++) {
        struct free_block *b = &p->blocks[i];
        if (b->offs + b->size == offs) {
            b->size += size;
            /* Merge with a following block too. */
            for (size_t j = 0; j < p->n; j++)
                if (j != i && p->blocks[j].offs == b->offs + b->size) {
                    b->size += p->blocks[j].size;
                    p->blocks[j] = p->blocks[--p->n];
                    break;
                }
            return;
        }
        if (offs + size == b->offs) {
            b->offs = offs;
            b->size += size;
            return;
        }
    }
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64;
        struct free_block *nb = realloc(p->blocks, cap * sizeof *nb);
        if (!nb) {
            p->oom = true; /* the bytes are simply not reused */
            return;
        }
        p->blocks = nb;
        p->cap = cap;
    }
    p->blocks[p->n++] = (struct free_block){offs, size};
}

void graph_alloc(struct graph *g, size_t align)
{
    if (g->failed)
        return;
    if (!align)
        align = 64;
    graph_index(g);
    struct arena_plan p = {0};
    /* Inputs first: written before the pass, live throughout. */
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gtensor *t = g->tensors[i];
        if (t->in_arena && !t->view_src && (t->t.flags & MINFER_TENSOR_INPUT))
            t->offs = plan_take(&p, align_up(t->size, align));
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct gtensor *d = gt_owner(gt_of(g->nodes[i].dst));
        if (d->in_arena && d->producer == (int32_t)i && !(d->t.flags & MINFER_TENSOR_INPUT))
            d->offs = plan_take(&p, align_up(d->size, align));
        /* Free what this node read last (and its own result if unread). */
        for (uint32_t s = 0; s < g->nodes[i].n_src + 1; s++) {
            struct gtensor *o = gt_owner(gt_of(s < g->nodes[i].n_src ? g->nodes[i].src[s]
                                                                       : g->nodes[i].dst));
            if (!o->in_arena || (o->t.flags & (MINFER_TENSOR_INPUT | MINFER_TENSOR_OUTPUT)))
                continue;
            bool done = s < g->nodes[i].n_src ? o->last_use == (int32_t)i
                                              : o->last_use < (int32_t)i;
            if (done && o->producer >= 0 && o->producer <= (int32_t)i) {
                plan_give(&p, o->offs, align_up(o->size, align));
                o->producer = -2; /* freed; never give twice */
            }
        }
    }
    g->arena_size = align_up(p.top ? p.top : align, align);
    free(p.blocks);
    graph_index(g);
}

void graph_bind(struct graph *g, void *base)
{
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gtensor *t = g->tensors[i];
        if (!t->view_src && t->in_arena)
            t->t.data = (char *)base + t->offs;
    }
    for (size_t i = 0; i < g->n_tensors; i++) {
        struct gtensor *t = g->tensors[i];
        if (t->view_src)
            t->t.data = (char *)t->view_src->t.data + t->view_offs;
    }
}

