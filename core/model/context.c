/*
 * context.c — inference contexts and the decode API. A context owns a
 * backend instance (weights registered with it), the KV cache, one compute
 * arena and a small cache of built graphs keyed by their parameters
 * (tokens per pass, KV-length bucket, logits rows, cell lists). Token ids,
 * positions, KV cells and the KV length (or the cell lists) are input
 * tensors written before each pass, so a cached graph — and its addresses —
 * serve every step of its key. Decode itself is batch.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "runtime/error.h"

#define CTX_ARENA_ALIGN 256
#define CTX_MIN_BUCKET 256

static uint64_t next_graph_uid(void)
{
    static uint64_t uid;
    return __atomic_add_fetch(&uid, 1, __ATOMIC_RELAXED);
}

/* ---- graphs ---- */

static void entry_clear(struct graph_entry *e)
{
    graph_free(e->g);
    memset(e, 0, sizeof *e);
}

/* Makes the arena at least size bytes; moving it rebinds every cached graph
 * and bumps the generation so a backend drops graphs captured on it. */
static minfer_status arena_reserve(struct minfer_ctx *c, size_t size)
{
    if (size <= c->arena_size)
        return MINFER_OK;
    const struct minfer_backend_iface *it = c->sb.plugin->iface;
    if (c->arena)
        it->buffer_free(c->sb.be, c->arena);
    c->arena = NULL;
    c->arena_size = 0;
    void *base = NULL;
    minfer_status st = it->buffer_alloc(c->sb.be, size, &base);
    if (st != MINFER_OK) {
        char what[96];
        snprintf(what, sizeof what, "buffer_alloc of a %zu-byte compute arena", size);
        return plugin_fail(c->sb.plugin, c->sb.be, st, what, c->err, sizeof c->err);
    }
    c->arena = base;
    c->arena_size = size;
    c->generation++;
    for (int i = 0; i < c->n_graphs; i++)
        graph_bind(c->graphs[i].g, base);
    return MINFER_OK;
}

/* The context's side of the pipeline (graph/passes.c): the architecture's
 * build with this context's weights and KV cache, and its arena. */
struct ctx_build {
    struct minfer_ctx *c;
    struct build b;
};

static void ctx_build(void *user, struct graph *g)
{
    struct ctx_build *cb = user;
    const struct model_arch *arch = cb->c->m->arch;
    g->uid = next_graph_uid();
    cb->b.g = g;
    arch->build(&cb->b);
    if (graph_ok(g) && (!cb->b.inp_tokens || (cb->b.n_out && !cb->b.out_logits)))
        graph_fail(g, "architecture %s built no inputs or no output", arch->name);
}

static minfer_status ctx_reserve(void *user, size_t size, void **base)
{
    struct ctx_build *cb = user;
    minfer_status st = arena_reserve(cb->c, size);
    *base = cb->c->arena;
    return st;
}

static minfer_status build_graph(struct minfer_ctx *c, struct graph_entry *e)
{
    struct minfer_model *m = c->m;
    struct gtensor **wt = calloc((size_t)m->n_weights + 1, sizeof *wt);
    if (!wt) {
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "out of memory building a graph");
    }
    struct ctx_build cb = {
        .c = c,
        .b = {.m = m, .hp = &m->hp, .kv = &c->kv, .wdata = c->wdata, .n_tokens = e->n_tokens,
              .n_kv = e->n_kv, .n_out = e->n_out, .n_lists = e->n_lists, .wt = wt},
    };
    struct graph_passes p = {
        .build = ctx_build, .reserve = ctx_reserve, .user = &cb, .bes = &c->sb, .n_bes = 1,
        .fuse = true, .align = CTX_ARENA_ALIGN,
    };
    struct graph *g = NULL;
    minfer_status st = graph_passes_run(&p, &g, c->err, sizeof c->err);
    free(wt);
    if (st != MINFER_OK)
        return st;
    e->g = g;
    struct gtensor *in[CTX_MAX_INPUTS] = {cb.b.inp_tokens, cb.b.inp_pos, cb.b.inp_cells,
                                          cb.b.inp_kv_len};
    e->n_in = 4;
    if (e->n_lists) {
        in[3] = cb.b.inp_range;
        in[4] = cb.b.inp_qlist;
        in[5] = cb.b.inp_lists;
        in[6] = cb.b.inp_range_w;
        e->n_in = cb.b.inp_range_w ? 7 : 6;
    }
    for (int k = 0; k < e->n_in; k++) {
        if (!in[k]) {
            graph_free(g);
            return errf(c->err, sizeof c->err, MINFER_ERR_STATE,
                        "architecture %s built no input %d", m->arch->name, k);
        }
        e->in[k] = in[k];
    }
    e->out = cb.b.out_logits;
    return MINFER_OK;
}

minfer_status ctx_get_graph(struct minfer_ctx *c, int32_t n_tokens, int32_t n_kv, int32_t n_out,
                            int32_t n_lists, struct graph_entry **out)
{
    for (int i = 0; i < c->n_graphs; i++) {
        struct graph_entry *e = &c->graphs[i];
        if (e->n_tokens == n_tokens && e->n_kv == n_kv && e->n_out == n_out &&
            e->n_lists == n_lists) {
            e->last_used = ++c->tick;
            *out = e;
            return MINFER_OK;
        }
    }
    int slot = c->n_graphs;
    if (slot == CTX_MAX_GRAPHS) {
        slot = 0;
        for (int i = 1; i < c->n_graphs; i++)
            if (c->graphs[i].last_used < c->graphs[slot].last_used)
                slot = i;
        entry_clear(&c->graphs[slot]);
        c->graphs[slot] = c->graphs[--c->n_graphs];
        memset(&c->graphs[c->n_graphs], 0, sizeof c->graphs[0]);
        slot = c->n_graphs;
    }
    struct graph_entry *e = &c->graphs[slot];
    e->n_tokens = n_tokens;
    e->n_kv = n_kv;
    e->n_out = n_out;
    e->n_lists = n_lists;
    minfer_status st = build_graph(c, e);
    if (st != MINFER_OK) {
        memset(e, 0, sizeof *e);
        return st;
    }
    e->last_used = ++c->tick;
    c->n_graphs++;
    *out = e;
    return MINFER_OK;
}

/* The KV-length bucket: cells attention may read, a power of two (at
 * least CTX_MIN_BUCKET) capped by the cache. */
int32_t ctx_kv_bucket(const struct minfer_ctx *c, int32_t kv_len)
{
    int64_t b = CTX_MIN_BUCKET;
    while (b < kv_len)
        b *= 2;
    return b > (int64_t)c->kv.n_cells ? (int32_t)c->kv.n_cells : (int32_t)b;
}

/* ---- lifetime ---- */

void minfer_ctx_params_default(struct minfer_ctx_params *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
    p->type_k = MINFER_TYPE_F16;
    p->type_v = MINFER_TYPE_F16;
    p->n_seq_max = 1;
}

static minfer_status register_weights(struct minfer_ctx *c)
{
    struct minfer_model *m = c->m;
    const struct minfer_backend_iface *it = c->sb.plugin->iface;
    c->wdata = calloc((size_t)m->n_weights + 1, sizeof *c->wdata);
    if (!c->wdata) {
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "out of memory");
    }
    uint64_t done = 0;
    for (int32_t i = 0; i < m->n_weights; i++) {
        const struct minfer_gguf_tensor *t = m->weights[i].gt;
        struct minfer_weight_desc d = {
            .name = t->name, .type = t->type, .host_data = t->data, .size = (size_t)t->size,
        };
        memcpy(d.ne, t->ne, sizeof d.ne);
        minfer_status st = it->weight_register(c->sb.be, &d, &c->wdata[i]);
        if (st != MINFER_OK) {
            char what[192];
            snprintf(what, sizeof what, "weight_register of %s (%s, %llu bytes)", t->name,
                     minfer_type_name(t->type), (unsigned long long)t->size);
            return plugin_fail(c->sb.plugin, c->sb.be, st, what, c->err, sizeof c->err);
        }
        done += t->size;
        if (m->params.progress && !m->params.progress(done, m->size_bytes, m->params.progress_user)) {
            return errf(c->err, sizeof c->err, MINFER_ERR_STATE, "loading cancelled");
        }
    }
    return MINFER_OK;
}

struct minfer_ctx *minfer_ctx_new(struct minfer_model *m, const struct minfer_ctx_params *p,
                                  minfer_status *st_out, char *err, size_t err_len)
{
    minfer_status st = MINFER_ERR_INVALID_ARG;
    struct minfer_ctx *c = NULL;
    if (!m) {
        st = errf(err, err_len, MINFER_ERR_INVALID_ARG, "no model given");
        goto out;
    }
    c = calloc(1, sizeof *c);
    if (!c) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    c->m = m;
    minfer_ctx_params_default(&c->p);
    if (p)
        memcpy(&c->p, p, p->struct_size < sizeof c->p ? p->struct_size : sizeof c->p);
    c->p.struct_size = sizeof c->p;
    int64_t n_ctx = c->p.n_ctx > 0 ? c->p.n_ctx : 4096;
    if (n_ctx > m->hp.n_ctx_max) /* the trained context, or more with RoPE scaling */
        n_ctx = m->hp.n_ctx_max;
    c->p.n_ctx = (int32_t)n_ctx;
    if (c->p.n_batch <= 0)
        c->p.n_batch = 512;
    if (c->p.n_batch > c->p.n_ctx)
        c->p.n_batch = c->p.n_ctx;
    if (c->p.n_seq_max == 0)
        c->p.n_seq_max = 1;
    if (c->p.n_seq_max < 0 || c->p.n_seq_max > KV_SEQ_LIMIT) {
        st = errf(c->err, sizeof c->err, MINFER_ERR_RANGE, "n_seq_max %d is outside 1..%d",
                  c->p.n_seq_max, KV_SEQ_LIMIT);
        goto out_free;
    }
    if (c->p.n_threads < 0) {
        st = errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG, "n_threads %d is negative",
                  c->p.n_threads);
        goto out_free;
    }

    const char *prof = secure_getenv("MINFER_PROFILE");
    c->prof.on = prof && *prof && strcmp(prof, "0");
    c->sb.plugin = m->plugin;
    struct minfer_backend_config cfg = {
        .struct_size = sizeof cfg, .device = 0, .n_threads = c->p.n_threads,
        .flags = (c->p.flags & MINFER_CTX_NO_GRAPHS) ? MINFER_BACKEND_CFG_NO_GRAPHS : 0,
    };
    st = plugin_create_instance(m->plugin, &cfg, &c->sb.be, c->err, sizeof c->err);
    if (st != MINFER_OK)
        goto out_free;
    c->pad_batches = c->p.flags & MINFER_CTX_PAD_BATCHES;
    if (!(c->p.flags & MINFER_CTX_NO_GRAPHS) && PLUGIN_HAS(m->plugin, device_info) &&
        PLUGIN_HAS(m->plugin, graph_replay)) {
        struct minfer_device_info di = {.struct_size = sizeof di};
        if (m->plugin->iface->device_info(0, &di) == MINFER_OK && di.is_gpu)
            c->pad_batches = true;
    }
    st = register_weights(c);
    if (st != MINFER_OK)
        goto out_free;
    st = kv_init(&c->kv, m->plugin, c->sb.be, (int32_t)m->hp.n_layer,
                 m->hp.head_dim * m->hp.n_head_kv, m->hp.head_dim_v * m->hp.n_head_kv,
                 (uint32_t)c->p.n_ctx, c->p.n_seq_max, c->p.type_k, c->p.type_v, c->err,
                 sizeof c->err);
    if (st != MINFER_OK)
        goto out_free;
    st = ctx_logits_reserve(c, 1);
    if (st != MINFER_OK)
        goto out_free;
    goto out;

out_free:
    errf(err, err_len, st, "%s", c->err);
    minfer_ctx_free(c);
    c = NULL;
out:
    if (st_out)
        *st_out = st;
    return c;
}

void minfer_ctx_free(struct minfer_ctx *c)
{
    if (!c)
        return;
    sched_profile_report(&c->prof, c->m ? c->m->arch->name : "");
    for (int i = 0; i < c->n_graphs; i++)
        entry_clear(&c->graphs[i]);
    if (c->sb.be) {
        ctx_logits_free(c); /* host_alloc'd memory goes back before the instance */
        kv_free(&c->kv);
        if (c->arena)
            c->sb.plugin->iface->buffer_free(c->sb.be, c->arena);
        c->sb.plugin->iface->destroy(c->sb.be);
    }
    free(c->wdata);
    free(c->stage);
    free(c->batch_row);
    free(c);
}

const char *minfer_ctx_last_error(const struct minfer_ctx *c)
{
    return c ? c->err : "no context";
}
