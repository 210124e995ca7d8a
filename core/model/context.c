/*
 * context.c — inference contexts and the decode API. A context owns a
 * backend instance (weights registered with it), the KV cache, one compute
 * arena and a small cache of built graphs keyed by their parameters
 * (tokens per pass, KV-length bucket, logits rows). Token ids, positions,
 * KV cells and the KV length are input tensors written before each pass,
 * so a cached graph — and its addresses — serve every step of its key.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv.h"
#include "model.h"
#include "graph/passes.h"
#include "runtime/error.h"

#define CTX_MAX_GRAPHS 16
#define CTX_ARENA_ALIGN 256
#define CTX_MIN_BUCKET 256

struct graph_entry {
    int32_t n_tokens, n_kv, n_out;   /* the key */
    struct graph *g;
    struct gtensor *inp_tokens, *inp_pos, *inp_cells, *inp_kv_len, *out;
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
    int32_t n_logits, n_logits_cap;
    struct sched_profile prof;       /* $MINFER_PROFILE */
    char err[768];
};

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
              .n_kv = e->n_kv, .n_out = e->n_out, .wt = wt},
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
    e->inp_tokens = cb.b.inp_tokens;
    e->inp_pos = cb.b.inp_pos;
    e->inp_cells = cb.b.inp_cells;
    e->inp_kv_len = cb.b.inp_kv_len;
    e->out = cb.b.out_logits;
    return MINFER_OK;
}

static minfer_status get_graph(struct minfer_ctx *c, int32_t n_tokens, int32_t n_kv,
                               int32_t n_out, struct graph_entry **out)
{
    for (int i = 0; i < c->n_graphs; i++) {
        struct graph_entry *e = &c->graphs[i];
        if (e->n_tokens == n_tokens && e->n_kv == n_kv && e->n_out == n_out) {
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
static int32_t kv_bucket(const struct minfer_ctx *c, int32_t kv_len)
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
    st = register_weights(c);
    if (st != MINFER_OK)
        goto out_free;
    st = kv_init(&c->kv, m->plugin, c->sb.be, (int32_t)m->hp.n_layer,
                 m->hp.head_dim * m->hp.n_head_kv, m->hp.head_dim_v * m->hp.n_head_kv,
                 (uint32_t)c->p.n_ctx, c->p.type_k, c->p.type_v, c->err, sizeof c->err);
    if (st != MINFER_OK)
        goto out_free;
    c->logits = malloc(sizeof *c->logits * (size_t)m->hp.n_vocab);
    if (!c->logits) {
        st = errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                  "out of memory for the logits of %lld tokens", (long long)m->hp.n_vocab);
        goto out_free;
    }
    c->n_logits_cap = 1;
    st = MINFER_OK;
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
        kv_free(&c->kv);
        if (c->arena)
            c->sb.plugin->iface->buffer_free(c->sb.be, c->arena);
        c->sb.plugin->iface->destroy(c->sb.be);
    }
    free(c->wdata);
    free(c->stage);
    free(c->logits);
    free(c);
}

/* ---- decode ---- */

/* One forward pass of T tokens; keeps n_out logits rows at row out_row. */
static minfer_status decode_chunk(struct minfer_ctx *c, const int32_t *tokens, int32_t T,
                                  int32_t n_out, int32_t out_row)
{
    int32_t pos0 = (int32_t)c->kv.n_used;
    uint32_t first = 0;
    minfer_status st = kv_find_slot(&c->kv, 0, pos0, T, &first);
    if (st != MINFER_OK) {
        return errf(c->err, sizeof c->err, st,
                    "no room for %d tokens in the KV cache (%u of %u used)",
                    T, c->kv.n_used, c->kv.n_cells);
    }
    int32_t kv_len = (int32_t)first + T;
    int32_t n_kv = kv_bucket(c, kv_len);
    /* attention reads n_kv cells: zero those no pass has reached yet */
    st = kv_clear_to(&c->kv, (uint32_t)n_kv, c->err, sizeof c->err);
    if (st != MINFER_OK)
        return st;
    struct graph_entry *e = NULL;
    st = get_graph(c, T, n_kv, n_out, &e);
    if (st != MINFER_OK)
        return st;
    /* The inputs were placed first and side by side in the arena: stage
     * them in one host block and write it with one call (one host-to-device
     * copy per pass on an accelerator instead of four). */
    struct gtensor *in[4] = {e->inp_tokens, e->inp_pos, e->inp_cells, e->inp_kv_len};
    size_t lo = SIZE_MAX, hi = 0;
    for (int k = 0; k < 4; k++) {
        lo = in[k]->offs < lo ? in[k]->offs : lo;
        hi = in[k]->offs + in[k]->size > hi ? in[k]->offs + in[k]->size : hi;
    }
    if (hi - lo > c->stage_size) {
        free(c->stage);
        c->stage = malloc(hi - lo);
        c->stage_size = c->stage ? hi - lo : 0;
        if (!c->stage) {
            return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                        "out of memory staging %zu input bytes", hi - lo);
        }
    }
    char *stage = c->stage;
    memset(stage, 0, hi - lo);
    int32_t *tok = (int32_t *)(stage + (in[0]->offs - lo));
    int32_t *pos = (int32_t *)(stage + (in[1]->offs - lo));
    int32_t *cell = (int32_t *)(stage + (in[2]->offs - lo));
    int32_t *len = (int32_t *)(stage + (in[3]->offs - lo));
    memcpy(tok, tokens, sizeof *tokens * (size_t)T);
    for (int32_t i = 0; i < T; i++) {
        pos[i] = pos0 + i;
        cell[i] = (int32_t)first + i;
    }
    *len = kv_len;
    st = c->sb.plugin->iface->buffer_write(c->sb.be, (char *)c->arena + lo, stage, hi - lo);
    if (st != MINFER_OK)
        return plugin_fail(c->sb.plugin, c->sb.be, st, "buffer_write of the pass's inputs",
                           c->err, sizeof c->err);
    st = sched_execute(e->g, &c->sb, 1, c->generation, T, !(c->p.flags & MINFER_CTX_NO_GRAPHS),
                       &c->prof, c->err, sizeof c->err);
    if (st != MINFER_OK)
        return st;
    kv_commit(&c->kv, 0, first, pos0, T);
    if (n_out) {
        size_t row = (size_t)c->m->hp.n_vocab;
        st = c->sb.plugin->iface->buffer_read(c->sb.be, c->logits + (size_t)out_row * row,
                                               e->out->t.data, (size_t)n_out * row * sizeof(float));
        if (st != MINFER_OK)
            return plugin_fail(c->sb.plugin, c->sb.be, st, "buffer_read of the logits", c->err,
                               sizeof c->err);
    }
    return MINFER_OK;
}

minfer_status minfer_ctx_decode(struct minfer_ctx *c, const int32_t *tokens, int32_t n,
                                uint32_t flags)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    c->err[0] = 0;
    if (!tokens || n <= 0) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "decode needs at least one token (got %d)", n);
    }
    if ((int64_t)c->kv.n_used + n > c->kv.n_cells) {
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                    "%d tokens after %u in the context exceed its length %u (use a larger -c, "
                    "at most the model's %lld)",
                    n, c->kv.n_used, c->kv.n_cells, (long long)c->m->hp.n_ctx_max);
    }
    for (int32_t i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= c->m->hp.n_vocab) {
            return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                        "token %d at index %d is outside the vocabulary [0, %lld)",
                        tokens[i], i, (long long)c->m->hp.n_vocab);
        }
    bool all = flags & MINFER_DECODE_ALL_LOGITS;
    int32_t rows = all ? n : 1;
    if (rows > c->n_logits_cap) {
        size_t bytes = sizeof(float) * (size_t)c->m->hp.n_vocab;
        if ((size_t)rows > SIZE_MAX / bytes) {
            return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                        "logits of %d rows overflow", rows);
        }
        float *l = realloc(c->logits, bytes * (size_t)rows);
        if (!l) {
            return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                        "out of memory for %d rows of logits", rows);
        }
        c->logits = l;
        c->n_logits_cap = rows;
    }
    c->n_logits = 0;
    for (int32_t s = 0; s < n; s += c->p.n_batch) {
        int32_t T = n - s < c->p.n_batch ? n - s : c->p.n_batch;
        bool last = s + T == n;
        int32_t n_out = all ? T : last ? 1 : 0;
        minfer_status st = decode_chunk(c, tokens + s, T, n_out, all ? s : 0);
        if (st != MINFER_OK)
            return st;
        if (c->p.progress && n > c->p.n_batch &&
            !c->p.progress((uint64_t)(s + T), (uint64_t)n, c->p.progress_user)) {
            return errf(c->err, sizeof c->err, MINFER_ERR_STATE,
                        "decode cancelled after %d of %d tokens", s + T, n);
        }
    }
    c->n_logits = rows;
    return MINFER_OK;
}

const float *minfer_ctx_logits(const struct minfer_ctx *c, int32_t i)
{
    if (!c || !c->n_logits)
        return NULL;
    if (i < 0)
        i += c->n_logits;
    if (i < 0 || i >= c->n_logits)
        return NULL;
    return c->logits + (size_t)i * (size_t)c->m->hp.n_vocab;
}

int32_t minfer_ctx_n_logits(const struct minfer_ctx *c)
{
    return c ? c->n_logits : 0;
}

int32_t minfer_ctx_n_past(const struct minfer_ctx *c)
{
    return c ? kv_seq_len(&c->kv, 0) : 0;
}

int32_t minfer_ctx_n_ctx(const struct minfer_ctx *c)
{
    return c ? (int32_t)c->kv.n_cells : 0;
}

minfer_status minfer_ctx_truncate(struct minfer_ctx *c, int32_t n_past)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    if (n_past < 0 || n_past > kv_seq_len(&c->kv, 0)) {
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                    "cannot truncate to %d: the context holds %d tokens",
                    n_past, kv_seq_len(&c->kv, 0));
    }
    kv_truncate(&c->kv, 0, n_past);
    c->n_logits = 0;
    return MINFER_OK;
}

const char *minfer_ctx_last_error(const struct minfer_ctx *c)
{
    return c ? c->err : "no context";
}
