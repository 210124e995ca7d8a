/*
 * test-graph.c — the graph builder, fusion, the liveness allocator, the
 * scheduler and the KV cell table, driven through a stand-in backend
 * defined here (f32 element-wise ops, norms and a counting graph_replay)
 * so they are tested apart from any real plugin.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "graph/graph.h"
#include "model/kv.h"
#include "runtime/plugin.h"
#include "graph/passes.h"
#include "graph/scheduler.h"
#include "testutil.h"

/* ---- stand-in backend ---- */

struct minfer_backend {
    uint32_t supported;       /* bit per op */
    int executed;             /* execute_node calls */
    int replay_offers;
    bool replay_answers;      /* graph_replay claims it ran the window */
    int fail_at;              /* node index whose execution fails, -1 none */
    struct minfer_replay_window last_window;
    char err[128];
};

static struct minfer_backend stub_be;

static bool stub_supports(struct minfer_backend *be, const struct minfer_node *n)
{
    return n->op < 32 && (be->supported >> n->op & 1);
}

static minfer_status stub_alloc(struct minfer_backend *be, size_t size, void **base)
{
    *base = calloc(1, size);
    return *base ? MINFER_OK : MINFER_ERR_DEVICE_OOM;
}

static void stub_free(struct minfer_backend *be, void *base)
{
    free(base);
}

static minfer_status stub_write(struct minfer_backend *be, void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
    return MINFER_OK;
}

static minfer_status stub_read(struct minfer_backend *be, void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
    return MINFER_OK;
}

static float rms(const float *x, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    return 1.0f / sqrtf((float)(ss / (double)n) + eps);
}

static minfer_status stub_exec(struct minfer_backend *be, const struct minfer_node *n)
{
    if ((int)n->index == be->fail_at) {
        snprintf(be->err, sizeof be->err, "injected failure at %u", n->index);
        return MINFER_ERR_BACKEND;
    }
    be->executed++;
    const struct minfer_tensor *a = n->src[0], *b = n->n_src > 1 ? n->src[1] : NULL;
    int64_t ne0 = n->dst->ne[0], rows = n->dst->ne[1] * n->dst->ne[2] * n->dst->ne[3];
    for (int64_t r = 0; r < rows; r++) {
        const float *x = (const float *)((const char *)a->data + (size_t)r * a->nb[1]);
        const float *y = b ? (const float *)((const char *)b->data +
                                             (b->ne[1] == 1 ? 0 : (size_t)r * b->nb[1]))
                           : NULL;
        float *d = (float *)((char *)n->dst->data + (size_t)r * n->dst->nb[1]);
        float s = (n->op == MINFER_OP_RMS_NORM || n->op == MINFER_OP_RMS_NORM_MUL)
                      ? rms(x, ne0, n->fparams[0]) : 0;
        for (int64_t i = 0; i < ne0; i++) {
            switch (n->op) {
            case MINFER_OP_ADD: d[i] = x[i] + y[i]; break;
            case MINFER_OP_MUL: d[i] = x[i] * y[i]; break;
            case MINFER_OP_SCALE: d[i] = x[i] * n->fparams[0]; break;
            case MINFER_OP_RMS_NORM: d[i] = x[i] * s; break;
            case MINFER_OP_RMS_NORM_MUL: d[i] = x[i] * s * y[i]; break;
            default: return MINFER_ERR_UNSUPPORTED;
            }
        }
    }
    return MINFER_OK;
}

static minfer_status stub_replay(struct minfer_backend *be, const struct minfer_replay_window *w,
                                 bool *replayed)
{
    be->replay_offers++;
    be->last_window = *w;
    *replayed = be->replay_answers;
    return MINFER_OK;
}

static minfer_status stub_sync(struct minfer_backend *be)
{
    return MINFER_OK;
}

static const char *stub_last_error(struct minfer_backend *be)
{
    return be ? be->err : "";
}

static struct minfer_backend_iface stub_iface = {
    .struct_size = sizeof(struct minfer_backend_iface),
    .abi_major = MINFER_ABI_MAJOR,
    .abi_minor = MINFER_ABI_MINOR,
    .name = "stub",
    .supports_op = stub_supports,
    .buffer_alloc = stub_alloc,
    .buffer_free = stub_free,
    .buffer_write = stub_write,
    .buffer_read = stub_read,
    .execute_node = stub_exec,
    .graph_replay = stub_replay,
    .synchronize = stub_sync,
    .last_error = stub_last_error,
};

static struct minfer_plugin stub_plugin = {
    .iface = &stub_iface,
    .iface_size = sizeof(struct minfer_backend_iface),
    .abi_minor = MINFER_ABI_MINOR,
    .name = "stub",
    .version = "0",
    .score = 1,
};

#define OPS(...) stub_ops((uint32_t[]){__VA_ARGS__, 0})
static uint32_t stub_ops(const uint32_t *ops)
{
    uint32_t m = 0;
    for (; *ops; ops++)
        m |= 1u << *ops;
    return m;
}

static void stub_reset(uint32_t supported)
{
    memset(&stub_be, 0, sizeof stub_be);
    stub_be.supported = supported;
    stub_be.fail_at = -1;
}

/* x [8, 3] input; w [8] weight; y = rms_norm(x) * w; z = (y + x) * 2. */
struct small {
    struct graph *g;
    struct gtensor *x, *w, *z;
    float wdata[8];
};

static void small_build(struct small *s)
{
    s->g = graph_new();
    ck_assert_ptr_nonnull(s->g);
    for (int i = 0; i < 8; i++)
        s->wdata[i] = 0.5f + 0.25f * (float)i;
    int64_t ne[4] = {8, 1, 1, 1};
    size_t nb[4] = {4, 32, 32, 32};
    s->x = graph_input(s->g, MINFER_TYPE_F32, 8, 3, "x");
    s->w = graph_fixed(s->g, MINFER_TYPE_F32, ne, nb, s->wdata, MINFER_TENSOR_WEIGHT, "w");
    struct gtensor *n = graph_rms_norm(s->g, s->x, 1e-6f, "norm");
    struct gtensor *y = graph_mul(s->g, n, s->w, "norm");
    struct gtensor *a = graph_add(s->g, y, s->x, "res");
    s->z = graph_scale(s->g, a, 2.0f, "scale");
    graph_set_output(s->g, s->z);
    ck_assert(graph_ok(s->g));
}

static void small_expect(const struct small *s, const float *x, const float *z)
{
    for (int r = 0; r < 3; r++) {
        float k = rms(x + 8 * r, 8, 1e-6f);
        for (int i = 0; i < 8; i++) {
            float want = 2.0f * (x[8 * r + i] * k * s->wdata[i] + x[8 * r + i]);
            ck_assert_float_eq_tol(z[8 * r + i], want, 1e-5f);
        }
    }
}

/* ---- builder ---- */

START_TEST(builder_shapes_and_views)
{
    /* Catches wrong result shapes, views that escape their storage, and
     * reshapes that change the element count being accepted. */
    struct graph *g = graph_new();
    struct gtensor *w = graph_leaf(g, MINFER_TYPE_Q8_0, 2, (int64_t[]){64, 10}, 0, "w");
    struct gtensor *x = graph_input(g, MINFER_TYPE_F32, 64, 5, "x");
    struct gtensor *y = graph_mul_mat(g, w, x, "mm");
    ck_assert_int_eq(y->t.ne[0], 10);
    ck_assert_int_eq(y->t.ne[1], 5);
    ck_assert_uint_eq(w->t.nb[1], 2 * 34);
    struct gtensor *r = graph_reshape(g, y, 5, 2, 5);
    ck_assert_ptr_nonnull(r);
    ck_assert_ptr_eq(r->view_src, y);
    struct gtensor *c = graph_cols(g, y, 4, 1);
    ck_assert_uint_eq(c->view_offs, 4 * 10 * sizeof(float));
    ck_assert(graph_ok(g));
    ck_assert_ptr_null(graph_reshape(g, y, 7, 7, 1));
    ck_assert(!graph_ok(g));
    ck_assert_ptr_nonnull(strstr(g->err, "reshape"));
    /* After a failure, builders return NULL instead of crashing. */
    ck_assert_ptr_null(graph_add(g, y, NULL, "x"));
    graph_free(g);
}
END_TEST

/* ---- fuse ---- */

START_TEST(fuse_is_gated_by_supports_op)
{
    /* Catches a fused node being given to a backend that never accepted the
     * fused op, and fusion that forgets to happen when it is accepted. */
    struct sched_backend sb = {&stub_plugin, &stub_be};
    char err[512];
    struct small s;

    stub_reset(OPS(MINFER_OP_RMS_NORM, MINFER_OP_MUL, MINFER_OP_ADD, MINFER_OP_SCALE));
    small_build(&s);
    ck_assert_int_eq(sched_prepare(s.g, &sb, 1, true, err, sizeof err), MINFER_OK);
    ck_assert_uint_eq(s.g->n_nodes, 4);
    graph_free(s.g);

    stub_reset(OPS(MINFER_OP_RMS_NORM, MINFER_OP_MUL, MINFER_OP_ADD, MINFER_OP_SCALE,
                   MINFER_OP_RMS_NORM_MUL));
    small_build(&s);
    ck_assert_int_eq(sched_prepare(s.g, &sb, 1, true, err, sizeof err), MINFER_OK);
    ck_assert_uint_eq(s.g->n_nodes, 3);
    ck_assert_uint_eq(s.g->nodes[0].op, MINFER_OP_RMS_NORM_MUL);
    ck_assert_ptr_eq(s.g->nodes[0].src[0], &s.x->t);
    ck_assert_ptr_eq(s.g->nodes[0].src[1], &s.w->t);
    graph_free(s.g);
}
END_TEST

START_TEST(fuse_keeps_shared_intermediates)
{
    /* Catches fusing away an RMS_NORM whose result another node still reads. */
    struct sched_backend sb = {&stub_plugin, &stub_be};
    char err[512];
    stub_reset(OPS(MINFER_OP_RMS_NORM, MINFER_OP_MUL, MINFER_OP_ADD, MINFER_OP_RMS_NORM_MUL));
    struct graph *g = graph_new();
    float wd[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    struct gtensor *x = graph_input(g, MINFER_TYPE_F32, 8, 2, "x");
    struct gtensor *w = graph_fixed(g, MINFER_TYPE_F32, (int64_t[]){8, 1, 1, 1},
                                    (size_t[]){4, 32, 32, 32}, wd, MINFER_TENSOR_WEIGHT, "w");
    struct gtensor *n = graph_rms_norm(g, x, 1e-6f, "n");
    struct gtensor *y = graph_mul(g, n, w, "m");
    graph_set_output(g, graph_add(g, y, n, "a"));
    ck_assert_int_eq(sched_prepare(g, &sb, 1, true, err, sizeof err), MINFER_OK);
    ck_assert_uint_eq(g->n_nodes, 3);
    ck_assert_uint_eq(g->nodes[0].op, MINFER_OP_RMS_NORM);
    graph_free(g);
}
END_TEST

START_TEST(fuse_mul_mat_add)
{
    /* Catches a product's ADD (bias or residual, on either side) not being
     * folded into MUL_MAT_ADD when the backend accepts it, the wrong operand
     * taken as the addend, and fusing away a product that another node
     * still reads. */
    struct sched_backend sb = {&stub_plugin, &stub_be};
    char err[512];
    for (int variant = 0; variant < 4; variant++) {
        stub_reset(variant == 0 ? OPS(MINFER_OP_MUL_MAT, MINFER_OP_ADD, MINFER_OP_SCALE)
                                : OPS(MINFER_OP_MUL_MAT, MINFER_OP_ADD, MINFER_OP_SCALE,
                                      MINFER_OP_MUL_MAT_ADD));
        struct graph *g = graph_new();
        struct gtensor *w = graph_leaf(g, MINFER_TYPE_Q8_0, 2, (int64_t[]){64, 10}, 0, "w");
        struct gtensor *x = graph_input(g, MINFER_TYPE_F32, 64, 3, "x");
        struct gtensor *r = graph_input(g, MINFER_TYPE_F32, 10, 3, "residual");
        struct gtensor *b = graph_leaf(g, MINFER_TYPE_F32, 1, (int64_t[]){10}, 0, "bias");
        struct gtensor *y = graph_mul_mat(g, w, x, "mm");
        struct gtensor *addend = variant == 2 ? b : r;
        struct gtensor *z = variant == 3 ? graph_add(g, r, y, "add") : graph_add(g, y, addend, "add");
        graph_set_output(g, z);
        if (variant == 1)
            graph_set_output(g, graph_scale(g, y, 2.0f, "other reader"));
        ck_assert(graph_ok(g));
        ck_assert_int_eq(sched_prepare(g, &sb, 1, true, err, sizeof err), MINFER_OK);
        if (variant <= 1) {
            ck_assert_uint_eq(g->nodes[0].op, MINFER_OP_MUL_MAT);
            ck_assert_uint_eq(g->nodes[1].op, MINFER_OP_ADD);
        } else {
            ck_assert_uint_eq(g->n_nodes, 1);
            const struct minfer_node *n = &g->nodes[0];
            ck_assert_uint_eq(n->op, MINFER_OP_MUL_MAT_ADD);
            ck_assert_uint_eq(n->n_src, 3);
            ck_assert_ptr_eq(n->src[0], &w->t);
            ck_assert_ptr_eq(n->src[1], &x->t);
            ck_assert_ptr_eq(n->src[2], variant == 2 ? &b->t : &r->t);
            ck_assert_ptr_eq(n->dst, &z->t);
        }
        graph_free(g);
    }
}
END_TEST

/* ---- alloc ---- */

START_TEST(alloc_reuses_dead_buffers_without_overlap)
{
    /* Catches an allocator that never reuses memory (arena = sum of all
     * results) and one that hands a live tensor's bytes to another. */
    struct graph *g = graph_new();
    struct gtensor *x = graph_input(g, MINFER_TYPE_F32, 1024, 1, "x");
    struct gtensor *t = x;
    for (int i = 0; i < 20; i++)
        t = graph_scale(g, i % 3 == 2 ? graph_add(g, t, x, "a") : t, 1.5f, "s");
    graph_set_output(g, t);
    graph_alloc(g, 64);
    size_t sum = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        sum += g->tensors[i]->size;
    ck_assert_uint_lt(g->arena_size, sum / 3);
    /* Replay liveness: no node's result overlaps a tensor still live then. */
    for (size_t n = 0; n < g->n_nodes; n++) {
        struct gtensor *d = gt_of(g->nodes[n].dst);
        for (size_t j = 0; j < g->n_tensors; j++) {
            struct gtensor *o = g->tensors[j];
            if (o == d || o->view_src || !o->in_arena)
                continue;
            bool live = (o->t.flags & MINFER_TENSOR_INPUT) ||
                        (o->producer < (int32_t)n && o->producer >= 0 &&
                         (o->last_use >= (int32_t)n || (o->t.flags & MINFER_TENSOR_OUTPUT)));
            if (!live)
                continue;
            bool overlap = d->offs < o->offs + o->size && o->offs < d->offs + d->size;
            ck_assert_msg(!overlap, "node %zu result overlaps live %s", n, o->name);
        }
    }
    graph_free(g);
}
END_TEST

START_TEST(alloc_puts_inputs_first_side_by_side)
{
    /* Catches inputs placed among results: contexts write all inputs of a
     * pass with one buffer_write of the arena's first bytes. */
    struct graph *g = graph_new();
    struct gtensor *a = graph_input(g, MINFER_TYPE_I32, 7, 1, "a");
    struct gtensor *r = graph_scale(g, graph_input(g, MINFER_TYPE_F32, 100, 3, "x"), 2.0f, "s");
    struct gtensor *b = graph_input(g, MINFER_TYPE_I32, 1, 1, "b");
    graph_set_output(g, graph_add(g, r, r, "o"));
    (void)b;
    graph_alloc(g, 64);
    size_t end = 0;
    for (size_t i = 0; i < g->n_tensors; i++)
        if (g->tensors[i]->t.flags & MINFER_TENSOR_INPUT)
            end = g->tensors[i]->offs + 64 * ((g->tensors[i]->size + 63) / 64) > end
                      ? g->tensors[i]->offs + 64 * ((g->tensors[i]->size + 63) / 64)
                      : end;
    ck_assert_uint_eq(a->offs, 0);
    ck_assert_uint_eq(end, 64 + 1216 + 64); /* 7 i32, 300 f32, 1 i32, each 64-aligned */
    for (size_t i = 0; i < g->n_tensors; i++)
        if (!(g->tensors[i]->t.flags & MINFER_TENSOR_INPUT) && g->tensors[i]->producer >= 0)
            ck_assert_uint_ge(g->tensors[i]->offs, end);
    graph_free(g);
}
END_TEST

/* ---- sched ---- */

START_TEST(sched_executes_and_replays)
{
    /* Catches wrong results through the whole assign/alloc/bind/execute path,
     * a replay window that does not cover the split, and execute_node still
     * running after the backend said it replayed. */
    struct sched_backend sb = {&stub_plugin, &stub_be};
    char err[512];
    struct small s;
    stub_reset(OPS(MINFER_OP_RMS_NORM, MINFER_OP_MUL, MINFER_OP_ADD, MINFER_OP_SCALE,
                   MINFER_OP_RMS_NORM_MUL));
    small_build(&s);
    s.g->uid = 77;
    ck_assert_int_eq(sched_prepare(s.g, &sb, 1, true, err, sizeof err), MINFER_OK);
    graph_alloc(s.g, 64);
    void *arena = calloc(1, s.g->arena_size);
    graph_bind(s.g, arena);
    float x[24], z[24];
    for (int i = 0; i < 24; i++)
        x[i] = sinf((float)i);
    memcpy(s.x->t.data, x, sizeof x);
    ck_assert_int_eq(sched_execute(s.g, &sb, 1, 5, 3, true, NULL, err, sizeof err), MINFER_OK);
    memcpy(z, s.z->t.data, sizeof z);
    small_expect(&s, x, z);
    ck_assert_int_eq(stub_be.replay_offers, 1);
    ck_assert_uint_eq(stub_be.last_window.uid, 77);
    ck_assert_uint_eq(stub_be.last_window.first, 0);
    ck_assert_uint_eq(stub_be.last_window.last, s.g->n_nodes - 1);
    ck_assert_uint_eq(stub_be.last_window.generation, 5);
    ck_assert_int_eq(stub_be.executed, (int)s.g->n_nodes);

    stub_be.replay_answers = true;
    stub_be.executed = 0;
    ck_assert_int_eq(sched_execute(s.g, &sb, 1, 5, 3, true, NULL, err, sizeof err), MINFER_OK);
    ck_assert_int_eq(stub_be.executed, 0);
    /* Replay not allowed: never offered. */
    stub_be.replay_offers = 0;
    ck_assert_int_eq(sched_execute(s.g, &sb, 1, 5, 3, false, NULL, err, sizeof err), MINFER_OK);
    ck_assert_int_eq(stub_be.replay_offers, 0);
    ck_assert_int_eq(stub_be.executed, (int)s.g->n_nodes);
    free(arena);
    graph_free(s.g);
}
END_TEST

START_TEST(sched_errors_name_the_node)
{
    /* Catches a refused op being silently skipped, and a failed node being
     * reported without its name, op and the backend's own message. */
    struct sched_backend sb = {&stub_plugin, &stub_be};
    char err[512];
    struct small s;
    stub_reset(OPS(MINFER_OP_RMS_NORM, MINFER_OP_MUL, MINFER_OP_ADD));
    small_build(&s);
    ck_assert_int_eq(sched_prepare(s.g, &sb, 1, true, err, sizeof err), MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "SCALE"));
    ck_assert_ptr_nonnull(strstr(err, "stub"));
    graph_free(s.g);

    stub_reset(OPS(MINFER_OP_RMS_NORM, MINFER_OP_MUL, MINFER_OP_ADD, MINFER_OP_SCALE));
    small_build(&s);
    ck_assert_int_eq(sched_prepare(s.g, &sb, 1, true, err, sizeof err), MINFER_OK);
    graph_alloc(s.g, 64);
    void *arena = calloc(1, s.g->arena_size);
    graph_bind(s.g, arena);
    stub_be.fail_at = 2;
    ck_assert_int_eq(sched_execute(s.g, &sb, 1, 0, 3, false, NULL, err, sizeof err), MINFER_ERR_BACKEND);
    ck_assert_ptr_nonnull(strstr(err, "res"));
    ck_assert_ptr_nonnull(strstr(err, "ADD"));
    ck_assert_ptr_nonnull(strstr(err, "injected failure at 2"));
    ck_assert_int_eq(stub_be.executed, 2); /* nothing after the failure ran */
    free(arena);
    graph_free(s.g);
}
END_TEST

/* ---- kv ---- */

/* Catches a plugin that negotiated ABI 1.0 being handed nodes it cannot
 * understand: the ops of 1.1, or ROPE / ATTENTION with parameter slots
 * that 1.0 left zero (it would ignore the layout or the window). */
START_TEST(sched_keeps_1_1_nodes_from_1_0_plugins)
{
    struct minfer_plugin old = stub_plugin;
    old.abi_minor = 0;
    struct minfer_backend be = {.supported = ~0u};
    struct sched_backend b_old = {&old, &be}, b_new = {&stub_plugin, &be};
    struct minfer_node n = {.op = MINFER_OP_GEGLU};
    ck_assert(sched_supports(&b_new, &n));
    ck_assert(!sched_supports(&b_old, &n));
    n.op = MINFER_OP_ROPE;
    ck_assert(sched_supports(&b_old, &n));
    n.iparams[1] = 1; /* normal layout */
    ck_assert(!sched_supports(&b_old, &n));
    ck_assert(sched_supports(&b_new, &n));
    n.op = MINFER_OP_ATTENTION; /* a window */
    ck_assert(!sched_supports(&b_old, &n));
    n.op = MINFER_OP_ATTENTION_LISTS;
    ck_assert(!sched_supports(&b_old, &n));
    ck_assert(sched_supports(&b_new, &n));
}
END_TEST

START_TEST(kv_cells_and_types)
{
    /* Catches KV rows that are not whole q8_0 blocks being accepted, a bad
     * sequence count, cells that overflow the cache, forks that copy cells
     * instead of sharing them, and removal that leaves stale cells. */
    struct kv_cache kv;
    char err[256];
    stub_reset(0);
    ck_assert_int_eq(kv_init(&kv, &stub_plugin, &stub_be, 2, 48, 48, 16, 1, MINFER_TYPE_Q8_0,
                             MINFER_TYPE_Q8_0, err, sizeof err),
                     MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "q8_0"));
    ck_assert_int_eq(kv_init(&kv, &stub_plugin, &stub_be, 2, 64, 64, 16, 0, MINFER_TYPE_F16,
                             MINFER_TYPE_F16, err, sizeof err),
                     MINFER_ERR_RANGE);
    ck_assert_int_eq(kv_init(&kv, &stub_plugin, &stub_be, 2, 64, 64, 16, 300, MINFER_TYPE_Q8_0,
                             MINFER_TYPE_F16, err, sizeof err),
                     MINFER_OK);
    ck_assert_uint_eq(kv.row_bytes_k, 2 * 34);
    ck_assert_uint_eq(kv.row_bytes_v, 128);
    ck_assert_ptr_eq(kv_v(&kv, 0), (char *)kv_k(&kv, 0) + 16 * 68);
    ck_assert_ptr_eq(kv_k(&kv, 1), (char *)kv_k(&kv, 0) + 16 * (68 + 128));
    uint32_t cells[16];
    ck_assert_int_eq(kv_pick_free(&kv, 10, cells), MINFER_OK);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(kv_seq_add(&kv, 0, i, cells[i]), MINFER_OK);
    ck_assert(kv_seq_is_identity(&kv, 0));
    ck_assert_int_eq(kv_seq_pos_max(&kv, 0), 9);
    ck_assert_int_eq(kv_pick_free(&kv, 7, cells), MINFER_ERR_FULL);
    /* a fork shares cells: no new cell is used, refs count both */
    ck_assert_int_eq(kv_seq_cp(&kv, 0, 299, 0, 6), MINFER_OK);
    ck_assert_uint_eq(kv.n_used, 10);
    ck_assert_uint_eq(kv.cells[3].refs, 2);
    ck_assert_int_eq(kv_seq_count_upto(&kv, 299, 3), 4);
    kv_seq_rm(&kv, 0, 4, -1);
    ck_assert_int_eq(kv_seq_pos_max(&kv, 0), 3);
    ck_assert_uint_eq(kv.n_used, 6); /* cells 4, 5 still held by sequence 299 */
    ck_assert_int_eq(kv_pick_free(&kv, 10, cells), MINFER_OK);
    ck_assert_uint_eq(cells[0], 6);
    kv_seq_rm(&kv, 299, 0, -1);
    ck_assert_uint_eq(kv.n_used, 4);
    ck_assert_uint_eq(kv.cells[3].refs, 1);
    ck_assert_int_eq(kv.cells[5].pos, -1);
    kv_free(&kv);
}
END_TEST

Suite *graph_suite(void);
Suite *graph_suite(void)
{
    Suite *s = suite_create("graph");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, builder_shapes_and_views);
    tcase_add_test(tc, fuse_is_gated_by_supports_op);
    tcase_add_test(tc, fuse_keeps_shared_intermediates);
    tcase_add_test(tc, fuse_mul_mat_add);
    tcase_add_test(tc, alloc_reuses_dead_buffers_without_overlap);
    tcase_add_test(tc, alloc_puts_inputs_first_side_by_side);
    tcase_add_test(tc, sched_executes_and_replays);
    tcase_add_test(tc, sched_errors_name_the_node);
    tcase_add_test(tc, kv_cells_and_types);
    tcase_add_test(tc, sched_keeps_1_1_nodes_from_1_0_plugins);
    suite_add_tcase(s, tc);
    return s;
}
