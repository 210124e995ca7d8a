/*
 * graph.c — builds IR graphs (tensors, views, nodes) and runs the passes
 * that need only the graph itself: fusion (gated by a backend's
 * supports_op through a callback), liveness-based arena allocation and
 * binding tensors to an arena's addresses.
 */
#include "graph.h"
#include "runtime/error.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/minfer.h"
#include "minfer/quant.h"

/* ---- graph lifetime ---- */

struct graph *graph_new(void)
{
    return calloc(1, sizeof(struct graph));
}

void graph_free(struct graph *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->n_tensors; i++)
        free(g->tensors[i]);
    for (size_t i = 0; i < g->n_nodes; i++)
        free((char *)g->nodes[i].label);
    free(g->tensors);
    free(g->nodes);
    free(g->node_backend);
    free(g);
}

bool graph_ok(const struct graph *g)
{
    return g && !g->failed;
}

void graph_fail(struct graph *g, const char *fmt, ...)
{
    if (g->failed)
        return;
    g->failed = true;
    va_list ap;
    va_start(ap, fmt);
    verrf(g->err, sizeof g->err, MINFER_OK, fmt, ap);
    va_end(ap);
}

/* ---- tensors ---- */

static struct gtensor *new_tensor(struct graph *g, const char *name)
{
    if (g->failed)
        return NULL;
    if (g->n_tensors == g->cap_tensors) {
        size_t cap = g->cap_tensors ? g->cap_tensors * 2 : 256;
        struct gtensor **nt = realloc(g->tensors, cap * sizeof *nt);
        if (!nt) {
            graph_fail(g, "out of memory growing the graph to %zu tensors", cap);
            return NULL;
        }
        g->tensors = nt;
        g->cap_tensors = cap;
    }
    struct gtensor *t = calloc(1, sizeof *t);
    if (!t) {
        graph_fail(g, "out of memory allocating a graph tensor");
        return NULL;
    }
    t->t.id = g->n_tensors;
    t->producer = -1;
    t->last_use = -1;
    snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    t->t.name = t->name;
    for (int i = 0; i < MINFER_MAX_DIMS; i++)
        t->t.ne[i] = 1;
    g->tensors[g->n_tensors++] = t;
    return t;
}

/* Dense strides of type for ne; false when a row is not whole blocks or a
 * size overflows. */
static bool dense_strides(uint32_t type, const int64_t ne[4], size_t nb[4], size_t *size)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    if (!tr)
        return false;
    for (int i = 0; i < 4; i++)
        if (ne[i] < 1)
            return false;
    size_t row = minfer_row_size(type, ne[0]);
    if (!row)
        return false;
    nb[0] = tr->type_size;
    nb[1] = row;
    for (int i = 2; i < 4; i++) {
        if ((size_t)ne[i - 1] > SIZE_MAX / nb[i - 1])
            return false;
        nb[i] = nb[i - 1] * (size_t)ne[i - 1];
    }
    if ((size_t)ne[3] > SIZE_MAX / nb[3])
        return false;
    *size = nb[3] * (size_t)ne[3];
    return true;
}

struct gtensor *graph_leaf(struct graph *g, uint32_t type, int n_dims, const int64_t *ne,
                           uint32_t flags, const char *name)
{
    struct gtensor *t = new_tensor(g, name);
    if (!t)
        return NULL;
    for (int i = 0; i < n_dims && i < MINFER_MAX_DIMS; i++)
        t->t.ne[i] = ne[i];
    t->t.type = type;
    t->t.flags = flags;
    if (!dense_strides(type, t->t.ne, t->t.nb, &t->size)) {
        graph_fail(g, "tensor %s: shape [%lld, %lld, %lld, %lld] invalid for type %s", t->name,
                   (long long)t->t.ne[0], (long long)t->t.ne[1], (long long)t->t.ne[2],
                   (long long)t->t.ne[3], minfer_type_name(type));
        return NULL;
    }
    t->in_arena = true;
    return t;
}

struct gtensor *graph_input(struct graph *g, uint32_t type, int64_t ne0, int64_t ne1,
                            const char *name)
{
    int64_t ne[2] = {ne0, ne1};
    return graph_leaf(g, type, 2, ne, MINFER_TENSOR_INPUT, name);
}

struct gtensor *graph_fixed(struct graph *g, uint32_t type, const int64_t ne[4],
                            const size_t nb[4], void *data, uint32_t flags, const char *name)
{
    struct gtensor *t = new_tensor(g, name);
    if (!t)
        return NULL;
    t->t.type = type;
    t->t.flags = flags;
    memcpy(t->t.ne, ne, sizeof t->t.ne);
    memcpy(t->t.nb, nb, sizeof t->t.nb);
    t->t.data = data;
    t->size = nb[3] * (size_t)ne[3];
    return t;
}

struct gtensor *gt_owner(struct gtensor *t)
{
    return t->view_src ? t->view_src : t;
}

struct gtensor *graph_view(struct graph *g, struct gtensor *src, const int64_t ne[4],
                           const size_t nb[4], size_t offs, const char *name)
{
    if (!src)
        return NULL;
    struct gtensor *t = new_tensor(g, name ? name : src->name);
    if (!t)
        return NULL;
    t->t.type = src->t.type;
    t->t.flags = src->t.flags & (MINFER_TENSOR_WEIGHT | MINFER_TENSOR_KV);
    memcpy(t->t.ne, ne, sizeof t->t.ne);
    memcpy(t->t.nb, nb, sizeof t->t.nb);
    /* Bytes spanned: the last element's row start plus one row. */
    size_t span = minfer_row_size(t->t.type, ne[0]);
    for (int i = 1; i < 4; i++)
        span += (size_t)(ne[i] - 1) * nb[i];
    if (offs > src->size || span > src->size - offs) {
        graph_fail(g, "view %s spans %zu bytes at offset %zu of %s's %zu", t->name, span, offs,
                   src->name, src->size);
        return NULL;
    }
    t->size = span;
    t->view_src = gt_owner(src);
    t->view_offs = (src->view_src ? src->view_offs : 0) + offs;
    if (!t->view_src->in_arena)
        t->t.data = (char *)t->view_src->t.data + t->view_offs;
    return t;
}

struct gtensor *graph_reshape(struct graph *g, struct gtensor *src, int64_t ne0, int64_t ne1,
                              int64_t ne2)
{
    if (!src)
        return NULL;
    int64_t ne[4] = {ne0, ne1, ne2, 1};
    size_t nb[4], size;
    if (!dense_strides(src->t.type, ne, nb, &size) || size != src->size ||
        src->t.nb[1] != minfer_row_size(src->t.type, src->t.ne[0])) {
        graph_fail(g, "cannot reshape %s to [%lld, %lld, %lld]", src->name, (long long)ne0,
                   (long long)ne1, (long long)ne2);
        return NULL;
    }
    return graph_view(g, src, ne, nb, 0, NULL);
}

struct gtensor *graph_cols(struct graph *g, struct gtensor *src, int64_t first, int64_t n)
{
    if (!src)
        return NULL;
    int64_t ne[4] = {src->t.ne[0], n, 1, 1};
    size_t nb[4] = {src->t.nb[0], src->t.nb[1], src->t.nb[1] * (size_t)n,
                    src->t.nb[1] * (size_t)n};
    return graph_view(g, src, ne, nb, (size_t)first * src->t.nb[1], NULL);
}

/* ---- nodes ---- */

/* Appends a node writing dst (created here as a dense F32 result of ne
 * unless dst_fixed is given). */
static struct gtensor *add_node(struct graph *g, uint32_t op, struct gtensor *const *src,
                                int n_src, const int64_t ne[4], struct gtensor *dst_fixed,
                                const char *label, struct minfer_node **out_node)
{
    for (int i = 0; i < n_src; i++)
        if (!src[i])
            return NULL;
    if (g->failed)
        return NULL;
    if (g->n_nodes == g->cap_nodes) {
        size_t cap = g->cap_nodes ? g->cap_nodes * 2 : 256;
        struct minfer_node *nn = realloc(g->nodes, cap * sizeof *nn);
        if (!nn) {
            graph_fail(g, "out of memory growing the graph to %zu nodes", cap);
            return NULL;
        }
        g->nodes = nn;
        g->cap_nodes = cap;
    }
    struct gtensor *dst = dst_fixed;
    if (!dst) {
        dst = graph_leaf(g, MINFER_TYPE_F32, 4, ne, 0, label);
        if (!dst)
            return NULL;
    }
    char *lab = strdup(label ? label : "");
    if (!lab) {
        graph_fail(g, "out of memory copying a node label");
        return NULL;
    }
    struct minfer_node *n = &g->nodes[g->n_nodes];
    memset(n, 0, sizeof *n);
    n->op = op;
    n->n_src = (uint32_t)n_src;
    for (int i = 0; i < n_src; i++)
        n->src[i] = &src[i]->t;
    n->dst = &dst->t;
    n->index = (uint32_t)g->n_nodes;
    n->label = lab;
    if (!dst_fixed)
        dst->producer = (int32_t)g->n_nodes;
    g->n_nodes++;
    if (out_node)
        *out_node = n;
    return dst;
}

static bool check(struct graph *g, bool ok, const char *what, const char *label)
{
    if (!ok && !g->failed)
        graph_fail(g, "building %s: %s", label ? label : "?", what);
    return ok;
}

struct gtensor *graph_get_rows(struct graph *g, struct gtensor *table, struct gtensor *ids,
                               const char *label)
{
    if (!table || !ids)
        return NULL;
    if (!check(g, ids->t.type == MINFER_TYPE_I32, "ids must be i32", label))
        return NULL;
    int64_t ne[4] = {table->t.ne[0], ids->t.ne[0], 1, 1};
    struct gtensor *src[2] = {table, ids};
    return add_node(g, MINFER_OP_GET_ROWS, src, 2, ne, NULL, label, NULL);
}

struct gtensor *graph_rms_norm(struct graph *g, struct gtensor *x, float eps, const char *label)
{
    if (!x)
        return NULL;
    struct minfer_node *n = NULL;
    struct gtensor *d = add_node(g, MINFER_OP_RMS_NORM, &x, 1, x->t.ne, NULL, label, &n);
    if (d)
        n->fparams[0] = eps;
    return d;
}

static struct gtensor *binary(struct graph *g, uint32_t op, struct gtensor *a, struct gtensor *b,
                              const char *label)
{
    if (!a || !b)
        return NULL;
    int64_t rows_a = a->t.ne[1] * a->t.ne[2] * a->t.ne[3];
    int64_t rows_b = b->t.ne[1] * b->t.ne[2] * b->t.ne[3];
    if (!check(g, a->t.ne[0] == b->t.ne[0] && (rows_b == 1 || rows_b == rows_a),
               "operands' shapes do not broadcast", label))
        return NULL;
    struct gtensor *src[2] = {a, b};
    return add_node(g, op, src, 2, a->t.ne, NULL, label, NULL);
}

struct gtensor *graph_add(struct graph *g, struct gtensor *a, struct gtensor *b,
                          const char *label)
{
    return binary(g, MINFER_OP_ADD, a, b, label);
}

struct gtensor *graph_mul(struct graph *g, struct gtensor *a, struct gtensor *b,
                          const char *label)
{
    return binary(g, MINFER_OP_MUL, a, b, label);
}

struct gtensor *graph_scale(struct graph *g, struct gtensor *a, float s, const char *label)
{
    if (!a)
        return NULL;
    struct minfer_node *n = NULL;
    struct gtensor *d = add_node(g, MINFER_OP_SCALE, &a, 1, a->t.ne, NULL, label, &n);
    if (d)
        n->fparams[0] = s;
    return d;
}

struct gtensor *graph_mul_mat(struct graph *g, struct gtensor *w, struct gtensor *x,
                              const char *label)
{
    if (!w || !x)
        return NULL;
    if (!check(g, w->t.ne[0] == x->t.ne[0], "inner dimensions differ", label))
        return NULL;
    int64_t ne[4] = {w->t.ne[1], x->t.ne[1], 1, 1};
    struct gtensor *src[2] = {w, x};
    return add_node(g, MINFER_OP_MUL_MAT, src, 2, ne, NULL, label, NULL);
}

struct gtensor *graph_rope_p(struct graph *g, struct gtensor *x, struct gtensor *pos,
                             struct gtensor *factors, const struct graph_rope_params *p,
                             const char *label)
{
    if (!x || !pos)
        return NULL;
    int n_rot = p->n_rot;
    if (!check(g, pos->t.ne[0] == x->t.ne[2] && n_rot <= x->t.ne[0] && n_rot % 2 == 0,
               "positions or n_rot do not fit", label))
        return NULL;
    if (factors && !check(g, factors->t.ne[0] == n_rot / 2, "frequency factors are not n_rot/2",
                          label))
        return NULL;
    struct minfer_node *n = NULL;
    struct gtensor *src[3] = {x, pos, factors};
    struct gtensor *d = add_node(g, factors ? MINFER_OP_ROPE_DIV : MINFER_OP_ROPE, src,
                                 factors ? 3 : 2, x->t.ne, NULL, label, &n);
    if (d) {
        n->iparams[0] = n_rot;
        n->iparams[1] = p->layout;
        n->fparams[0] = p->freq_base;
        n->fparams[1] = p->freq_scale;
        n->fparams[2] = p->ext_factor;
        n->fparams[3] = p->mscale;
        n->fparams[4] = p->corr_lo;
        n->fparams[5] = p->corr_hi;
    }
    return d;
}

struct gtensor *graph_rope_ext(struct graph *g, struct gtensor *x, struct gtensor *pos,
                               struct gtensor *factors, int n_rot, int layout, float freq_base,
                               float freq_scale, const char *label)
{
    struct graph_rope_params p = {.n_rot = n_rot, .layout = layout, .freq_base = freq_base,
                                  .freq_scale = freq_scale};
    return graph_rope_p(g, x, pos, factors, &p, label);
}

struct gtensor *graph_rope(struct graph *g, struct gtensor *x, struct gtensor *pos, int n_rot,
                           float freq_base, float freq_scale, const char *label)
{
    return graph_rope_ext(g, x, pos, NULL, n_rot, 0, freq_base, freq_scale, label);
}

/* act(gate) * up for the gated FFNs (SWIGLU, GEGLU): one shape in, same out. */
static struct gtensor *gated_product(struct graph *g, uint32_t op, struct gtensor *gate,
                                     struct gtensor *up, const char *label)
{
    if (!gate || !up)
        return NULL;
    if (!check(g, !memcmp(gate->t.ne, up->t.ne, sizeof gate->t.ne), "gate and up differ",
               label))
        return NULL;
    struct gtensor *src[2] = {gate, up};
    return add_node(g, op, src, 2, gate->t.ne, NULL, label, NULL);
}

struct gtensor *graph_geglu(struct graph *g, struct gtensor *gate, struct gtensor *up,
                            const char *label)
{
    return gated_product(g, MINFER_OP_GEGLU, gate, up, label);
}

struct gtensor *graph_topk(struct graph *g, struct gtensor *x, int k, const char *label)
{
    if (!x)
        return NULL;
    if (!check(g, k >= 1 && k <= x->t.ne[0] && x->t.ne[2] == 1, "k does not fit", label))
        return NULL;
    int64_t ne[4] = {k, x->t.ne[1], 1, 1};
    struct gtensor *dst = graph_leaf(g, MINFER_TYPE_I32, 2, ne, 0, label);
    struct minfer_node *n = NULL;
    struct gtensor *d = add_node(g, MINFER_OP_TOPK, &x, 1, NULL, dst, label, &n);
    if (d) {
        n->iparams[0] = k;
        dst->producer = n->index;
    }
    return d;
}

struct gtensor *graph_moe_weights(struct graph *g, struct gtensor *logits, struct gtensor *ids,
                                  bool renorm, const char *label)
{
    if (!logits || !ids)
        return NULL;
    if (!check(g, ids->t.ne[1] == logits->t.ne[1], "experts and logits differ in tokens",
               label))
        return NULL;
    struct minfer_node *n = NULL;
    struct gtensor *src[2] = {logits, ids};
    struct gtensor *d = add_node(g, MINFER_OP_MOE_WEIGHTS, src, 2, ids->t.ne, NULL, label, &n);
    if (d)
        n->iparams[0] = renorm ? 1 : 0;
    return d;
}

struct gtensor *graph_mul_mat_id(struct graph *g, struct gtensor *w, struct gtensor *x,
                                 struct gtensor *ids, const char *label)
{
    if (!w || !x || !ids)
        return NULL;
    if (!check(g, w->t.ne[0] == x->t.ne[0] && x->t.ne[2] == ids->t.ne[1] &&
                      (x->t.ne[1] == 1 || x->t.ne[1] == ids->t.ne[0]),
               "weights, activations and experts do not fit", label))
        return NULL;
    int64_t ne[4] = {w->t.ne[1], ids->t.ne[0], ids->t.ne[1], 1};
    struct gtensor *src[3] = {w, x, ids};
    return add_node(g, MINFER_OP_MUL_MAT_ID, src, 3, ne, NULL, label, NULL);
}

struct gtensor *graph_moe_sum(struct graph *g, struct gtensor *x, struct gtensor *weights,
                              const char *label)
{
    if (!x || !weights)
        return NULL;
    if (!check(g, weights->t.ne[0] == x->t.ne[1] && weights->t.ne[1] == x->t.ne[2],
               "weights do not fit the experts' outputs", label))
        return NULL;
    int64_t ne[4] = {x->t.ne[0], x->t.ne[2], 1, 1};
    struct gtensor *src[2] = {x, weights};
    return add_node(g, MINFER_OP_MOE_SUM, src, 2, ne, NULL, label, NULL);
}

struct gtensor *graph_swiglu(struct graph *g, struct gtensor *gate, struct gtensor *up,
                             const char *label)
{
    return gated_product(g, MINFER_OP_SWIGLU, gate, up, label);
}

struct gtensor *graph_kv_store(struct graph *g, struct gtensor *cache, struct gtensor *x,
                               struct gtensor *cells, const char *label)
{
    if (!cache || !x || !cells)
        return NULL;
    int64_t n_tok = cells->t.ne[0];
    if (!check(g, x->t.ne[0] * x->t.ne[1] * x->t.ne[2] * x->t.ne[3] == cache->t.ne[0] * n_tok,
               "rows do not match the cache's row length times the cell count", label))
        return NULL;
    /* Present x as [row_len, n_tokens]. */
    struct gtensor *x2 = x;
    if (x->t.ne[0] != cache->t.ne[0] || x->t.ne[1] != n_tok || x->t.ne[2] != 1)
        x2 = graph_reshape(g, x, cache->t.ne[0], n_tok, 1);
    struct gtensor *src[2] = {x2, cells};
    return add_node(g, MINFER_OP_KV_STORE, src, 2, NULL, cache, label, NULL);
}

struct gtensor *graph_attention(struct graph *g, struct gtensor *q, struct gtensor *k,
                                struct gtensor *v, struct gtensor *kv_len, struct gtensor *pos,
                                int n_kv_head, float scale, const char *label)
{
    return graph_attention_swa(g, q, k, v, kv_len, pos, n_kv_head, scale, 0, label);
}

struct gtensor *graph_attention_swa(struct graph *g, struct gtensor *q, struct gtensor *k,
                                    struct gtensor *v, struct gtensor *kv_len,
                                    struct gtensor *pos, int n_kv_head, float scale,
                                    int window, const char *label)
{
    if (!q || !k || !v || !kv_len || !pos)
        return NULL;
    if (!check(g, n_kv_head > 0 && q->t.ne[1] % n_kv_head == 0 &&
                      k->t.ne[0] == q->t.ne[0] * n_kv_head && pos->t.ne[0] == q->t.ne[2],
               "head counts or shapes do not fit", label))
        return NULL;
    struct minfer_node *n = NULL;
    struct gtensor *src[5] = {q, k, v, kv_len, pos};
    struct gtensor *d = add_node(g, MINFER_OP_ATTENTION, src, 5, q->t.ne, NULL, label, &n);
    if (d) {
        n->iparams[0] = n_kv_head;
        n->iparams[1] = window;
        n->fparams[0] = scale;
    }
    return d;
}

struct gtensor *graph_attention_lists(struct graph *g, struct gtensor *q, struct gtensor *k,
                                      struct gtensor *v, struct gtensor *n_vis,
                                      struct gtensor *qlist, struct gtensor *lists,
                                      int n_kv_head, float scale, const char *label)
{
    if (!q || !k || !v || !n_vis || !qlist || !lists)
        return NULL;
    if (!check(g, n_kv_head > 0 && q->t.ne[1] % n_kv_head == 0 &&
                      k->t.ne[0] == q->t.ne[0] * n_kv_head && n_vis->t.ne[0] == 2 &&
                      n_vis->t.ne[1] == q->t.ne[2] && qlist->t.ne[0] == q->t.ne[2],
               "head counts or shapes do not fit", label))
        return NULL;
    struct minfer_node *n = NULL;
    struct gtensor *src[6] = {q, k, v, n_vis, qlist, lists};
    struct gtensor *d = add_node(g, MINFER_OP_ATTENTION_LISTS, src, 6, q->t.ne, NULL, label, &n);
    if (d) {
        n->iparams[0] = n_kv_head;
        n->fparams[0] = scale;
    }
    return d;
}

void graph_set_output(struct graph *g, struct gtensor *t)
{
    if (t)
        gt_owner(t)->t.flags |= MINFER_TENSOR_OUTPUT;
    if (t && t->view_src)
        t->t.flags |= MINFER_TENSOR_OUTPUT;
}

/* ---- fusion ---- */

/* Recomputes producer, readers and last use after nodes moved. */
void graph_index(struct graph *g)
{
    for (size_t i = 0; i < g->n_tensors; i++) {
        g->tensors[i]->n_readers = 0;
        g->tensors[i]->last_use = -1;
        g->tensors[i]->producer = -1;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct minfer_node *n = &g->nodes[i];
        n->index = (uint32_t)i;
        for (uint32_t s = 0; s < n->n_src; s++) {
            struct gtensor *o = gt_owner(gt_of(n->src[s]));
            o->n_readers++;
            o->last_use = (int32_t)i;
        }
        struct gtensor *d = gt_owner(gt_of(n->dst));
        if (d->in_arena)
            d->producer = (int32_t)i;
    }
}

static bool single_use(const struct gtensor *t)
{
    return !t->view_src && t->n_readers == 1 && !(t->t.flags & MINFER_TENSOR_OUTPUT);
}

/* Replaces n by op(s0, s1, s2) into n's dst if the backend accepts that. */
static bool fuse3(struct minfer_node *n, uint32_t op, const struct minfer_tensor *s0,
                  const struct minfer_tensor *s1, const struct minfer_tensor *s2,
                  graph_supports_fn supports, void *user)
{
    struct minfer_node f = *n;
    f.op = op;
    f.n_src = 3;
    f.src[0] = s0;
    f.src[1] = s1;
    f.src[2] = s2;
    if (!supports(user, &f))
        return false;
    *n = f;
    return true;
}

size_t graph_fuse(struct graph *g, graph_supports_fn supports, void *user)
{
    if (g->failed || !g->n_nodes)
        return 0;
    graph_index(g);
    bool *dead = calloc(g->n_nodes, sizeof *dead);
    if (!dead)
        return 0;
    size_t removed = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        struct minfer_node *n = &g->nodes[i];
        if (n->op == MINFER_OP_MUL && n->src[0] && gt_of(n->src[0])->producer >= 0) {
            struct gtensor *a = gt_of(n->src[0]);
            struct minfer_node *p = &g->nodes[a->producer];
            struct gtensor *w = gt_of(n->src[1]);
            if (p->op != MINFER_OP_RMS_NORM || !single_use(a) || dead[a->producer] ||
                w->t.ne[1] * w->t.ne[2] * w->t.ne[3] != 1)
                continue;
            struct minfer_node f = *n;
            f.op = MINFER_OP_RMS_NORM_MUL;
            f.src[0] = p->src[0];
            f.src[1] = n->src[1];
            f.fparams[0] = p->fparams[0];
            if (!supports(user, &f))
                continue;
            *n = f;
            dead[a->producer] = true;
            removed++;
        } else if (n->op == MINFER_OP_SWIGLU) {
            struct gtensor *a = gt_of(n->src[0]), *b = gt_of(n->src[1]);
            if (a->producer < 0 || b->producer < 0 || !single_use(a) || !single_use(b))
                continue;
            struct minfer_node *pa = &g->nodes[a->producer], *pb = &g->nodes[b->producer];
            if (pa->op != MINFER_OP_MUL_MAT || pb->op != MINFER_OP_MUL_MAT ||
                pa->src[1] != pb->src[1] || pa->src[0]->type != pb->src[0]->type ||
                dead[a->producer] || dead[b->producer])
                continue;
            if (!fuse3(n, MINFER_OP_FFN_GATE_UP, pa->src[0], pb->src[0], pa->src[1], supports,
                       user))
                continue;
            dead[a->producer] = dead[b->producer] = true;
            removed += 2;
        } else if (n->op == MINFER_OP_ADD) {
            /* either operand may be the product; the other is the addend */
            for (int side = 0; side < 2; side++) {
                struct gtensor *p = gt_of(n->src[side]), *addend = gt_of(n->src[1 - side]);
                if (p->producer < 0 || !single_use(p) || dead[p->producer])
                    continue;
                struct minfer_node *mm = &g->nodes[p->producer];
                const struct minfer_tensor *pt = &p->t, *at = &addend->t;
                if (mm->op != MINFER_OP_MUL_MAT || at->type != MINFER_TYPE_F32 ||
                    at->ne[0] != pt->ne[0] || (at->ne[1] != pt->ne[1] && at->ne[1] != 1) ||
                    at->ne[2] != 1 || at->ne[3] != 1 || pt->ne[2] != 1 || pt->ne[3] != 1 ||
                    n->dst->ne[0] != pt->ne[0] || n->dst->ne[1] != pt->ne[1])
                    continue;
                if (!fuse3(n, MINFER_OP_MUL_MAT_ADD, mm->src[0], mm->src[1], n->src[1 - side],
                           supports, user))
                    continue;
                dead[p->producer] = true;
                removed++;
                break;
            }
        }
    }
    if (removed) {
        size_t j = 0;
        for (size_t i = 0; i < g->n_nodes; i++) {
            if (dead[i]) {
                free((char *)g->nodes[i].label);
                continue;
            }
            g->nodes[j++] = g->nodes[i];
        }
        g->n_nodes = j;
    }
    free(dead);
    graph_index(g);
    return removed;
}

/* ---- diagnostics ---- */

void graph_describe_node(const struct minfer_node *n, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "node %u %s (%s", n->index,
                                   n->label && *n->label ? n->label : "?", minfer_op_name(n->op));
    for (uint32_t s = 0; s < n->n_src && used < len; s++) {
        const struct minfer_tensor *t = n->src[s];
        used += (size_t)snprintf(buf + used, len - used, ", src%u %s [%lld, %lld, %lld]", s,
                                 minfer_type_name(t->type), (long long)t->ne[0],
                                 (long long)t->ne[1], (long long)t->ne[2]);
    }
    if (used < len)
        snprintf(buf + used, len - used, ")");
}
