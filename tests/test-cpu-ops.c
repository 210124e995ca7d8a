/*
 * test-cpu-ops.c — the CPU plugin, dlopen'd from MINFER_PLUGIN_DIR like the
 * core does: its ABI table, buffers and weights, and every IR op against
 * hand-computed values and an in-test double-precision reference, for every
 * weight type, odd shapes and tails, non-dense strides, thread counts 1..9,
 * long KV, and every kernel set (scalar, avx2, avxvnni, avx512) this CPU can run.
 * Outputs are poisoned with NaN first so an unwritten element fails.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/backend.h"
#include "minfer/quant.h"
#include "minfer/quant-ref.h"
#include "testutil.h"

/* ---- plugin ---- */

static void *g_dl;
static const struct minfer_backend_iface *IF;
typedef minfer_status (*set_isa_fn)(struct minfer_backend *, const char *);
static set_isa_fn g_set_isa;

static void setup(void)
{
    g_dl = dlopen(MINFER_PLUGIN_DIR "/libminfer-cpu.so", RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(g_dl, "dlopen: %s", dlerror());
    minfer_plugin_entry_fn entry = (minfer_plugin_entry_fn)dlsym(g_dl, MINFER_PLUGIN_ENTRY_SYMBOL);
    ck_assert_ptr_nonnull(entry);
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    IF = entry(&abi, NULL);
    ck_assert_ptr_nonnull(IF);
    g_set_isa = (set_isa_fn)IF->get_proc("minfer_cpu_set_isa");
    ck_assert_ptr_nonnull(g_set_isa);
}

/* ---- allocations freed at teardown (forked children run LeakSanitizer) ---- */

static void *g_allocs[4096];
static int g_nallocs;

static void *talloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_lt(g_nallocs, 4096);
    g_allocs[g_nallocs++] = p;
    return p;
}

static void teardown(void)
{
    for (int i = 0; i < g_nallocs; i++)
        free(g_allocs[i]);
    g_nallocs = 0;
    if (IF && IF->shutdown)
        IF->shutdown();
    if (g_dl)
        dlclose(g_dl);
    g_dl = NULL;
    IF = NULL;
}

static struct minfer_backend *make_be(int n_threads, const char *isa)
{
    struct minfer_backend_config cfg = {sizeof cfg, 0, n_threads, 0};
    struct minfer_backend *be = NULL;
    ck_assert_int_eq(IF->create(&cfg, &be), MINFER_OK);
    if (isa && g_set_isa(be, isa) != MINFER_OK) {
        IF->destroy(be);
        return NULL;
    }
    return be;
}

static const char *const ISAS[] = {"scalar", "avx2", "avxvnni", "avx512", "avx512bf16"};
#define N_ISAS 5

/* ---- tensors ---- */

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(void) /* roughly normal, mean 0, sd ~1 */
{
    float s = 0.0f;
    for (int i = 0; i < 4; i++) {
        g_rng ^= g_rng << 13;
        g_rng ^= g_rng >> 7;
        g_rng ^= g_rng << 17;
        s += (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) - 0.5f;
    }
    return s * 1.7f;
}

static struct minfer_tensor *tensor(uint32_t type, int64_t ne0, int64_t ne1, int64_t ne2,
                                    size_t row_pad)
{
    struct minfer_tensor *t = talloc(sizeof *t);
    memset(t, 0, sizeof *t);
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    t->type = type;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->ne[3] = 1;
    t->nb[0] = tr->type_size;
    t->nb[1] = minfer_row_size(type, ne0) + row_pad;
    t->nb[2] = t->nb[1] * (size_t)ne1;
    t->nb[3] = t->nb[2] * (size_t)ne2;
    t->data = talloc(t->nb[3]);
    memset(t->data, 0xff, t->nb[3]); /* NaN for f32, 0xffff for f16 (NaN) */
    t->name = "t";
    return t;
}

static float *frow(const struct minfer_tensor *t, int64_t r)
{
    return (float *)((char *)t->data + (size_t)(r % t->ne[1]) * t->nb[1] +
                     (size_t)(r / t->ne[1]) * t->nb[2]);
}

static void fill_f32(struct minfer_tensor *t)
{
    for (int64_t r = 0; r < t->ne[1] * t->ne[2]; r++)
        for (int64_t i = 0; i < t->ne[0]; i++)
            frow(t, r)[i] = frand();
}

/* weight [K, N] of type from random floats; deq gets the dequantized values */
static struct minfer_tensor *weight(uint32_t type, int K, int N, float **deq)
{
    struct minfer_tensor *t = tensor(type, K, N, 1, 0);
    float *row = talloc((size_t)K * sizeof(float));
    *deq = talloc((size_t)K * N * sizeof(float));
    for (int n = 0; n < N; n++) {
        for (int k = 0; k < K; k++)
            row[k] = frand() * (n % 3 == 1 ? 0.01f : 1.0f);
        void *dst = (char *)t->data + (size_t)n * t->nb[1];
        ck_assert_int_eq(minfer_quantize_row_ref(type, row, dst, K), MINFER_OK);
        ck_assert_int_eq(minfer_dequantize_row(type, dst, *deq + (size_t)n * K, K), MINFER_OK);
    }
    t->flags = MINFER_TENSOR_WEIGHT;
    return t;
}

static struct minfer_tensor *ids(int n, const int32_t *v)
{
    struct minfer_tensor *t = tensor(MINFER_TYPE_I32, n, 1, 1, 0);
    memcpy(t->data, v, (size_t)n * sizeof(int32_t));
    return t;
}

static struct minfer_node node_of(uint32_t op, struct minfer_tensor *dst, int n_src, ...)
{
    struct minfer_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = op;
    nd.n_src = (uint32_t)n_src;
    nd.dst = dst;
    nd.label = "test.node";
    nd.index = 7;
    va_list ap;
    va_start(ap, n_src);
    for (int i = 0; i < n_src; i++)
        nd.src[i] = va_arg(ap, const struct minfer_tensor *);
    va_end(ap);
    return nd;
}

static void run_ok(struct minfer_backend *be, const struct minfer_node *nd)
{
    ck_assert_msg(IF->supports_op(be, nd), "supports_op refused op %u", nd->op);
    minfer_status st = IF->execute_node(be, nd);
    ck_assert_msg(st == MINFER_OK, "execute_node op %u: %d %s", nd->op, st, IF->last_error(be));
}

/* |got - want| <= tol, and got is a number (catches unwritten NaN poison) */
#define CLOSE(got, want, tol, ...)                                                          \
    ck_assert_msg(isfinite(got) && fabs((double)(got) - (double)(want)) <= (tol),           \
                  __VA_ARGS__)

/* ---- the plugin table ---- */

START_TEST(table_complete)
{
    /* Catches a missing mandatory slot, a wrong name/ABI, or a probe that
     * refuses a CPU every x86-64/arm64 machine has. */
    ck_assert_uint_eq(IF->struct_size, sizeof(struct minfer_backend_iface));
    ck_assert_uint_eq(IF->abi_major, MINFER_ABI_MAJOR);
    ck_assert_str_eq(IF->name, "cpu");
    ck_assert_ptr_nonnull(IF->version);
    void *const slots[] = {
        (void *)IF->probe, (void *)IF->device_count, (void *)IF->device_info,
        (void *)IF->create, (void *)IF->destroy, (void *)IF->supports_op,
        (void *)IF->buffer_alloc, (void *)IF->buffer_free, (void *)IF->buffer_write,
        (void *)IF->buffer_read, (void *)IF->weight_register, (void *)IF->execute_node,
        (void *)IF->synchronize, (void *)IF->last_error, (void *)IF->get_proc,
        (void *)IF->shutdown};
    for (size_t i = 0; i < sizeof slots / sizeof slots[0]; i++)
        ck_assert_msg(slots[i] != NULL, "slot %zu is NULL", i);
    char why[128] = "";
    ck_assert_int_gt(IF->probe(why, sizeof why), 0);
    ck_assert_int_eq(IF->device_count(), 1);
    struct minfer_device_info info;
    memset(&info, 0, sizeof info);
    info.struct_size = sizeof info;
    ck_assert_int_eq(IF->device_info(0, &info), MINFER_OK);
    ck_assert_int_gt((int)strlen(info.name), 0);
    ck_assert_ptr_nonnull(strstr(info.description, "kernels"));
    ck_assert_uint_gt(info.memory_total, 0);
    ck_assert_uint_eq(info.is_gpu, 0);
    ck_assert_int_ne(IF->device_info(1, &info), MINFER_OK);
    ck_assert_ptr_null(IF->get_proc("no_such_extension"));
}
END_TEST

START_TEST(abi_negotiation)
{
    /* Catches a plugin that accepts another major or answers a newer minor
     * than the core offered. */
    minfer_plugin_entry_fn entry = (minfer_plugin_entry_fn)dlsym(g_dl, MINFER_PLUGIN_ENTRY_SYMBOL);
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR + 1, 0);
    ck_assert_ptr_null(entry(&abi, NULL));
    ck_assert_uint_eq(MINFER_ABI_PACK_MAJOR(abi), MINFER_ABI_MAJOR);
    abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, 0);
    ck_assert_ptr_nonnull(entry(&abi, NULL));
    ck_assert_uint_eq(abi, MINFER_ABI_PACK(MINFER_ABI_MAJOR, 0));
}
END_TEST

START_TEST(create_config)
{
    /* Catches n_threads/device validation missing and create errors
     * without text. */
    struct minfer_backend *be = NULL;
    struct minfer_backend_config cfg = {sizeof cfg, 0, -3, 0};
    ck_assert_int_ne(IF->create(&cfg, &be), MINFER_OK);
    ck_assert_ptr_null(be);
    ck_assert_ptr_nonnull(strstr(IF->last_error(NULL), "-3"));
    cfg.n_threads = 0;
    cfg.device = 2;
    ck_assert_int_ne(IF->create(&cfg, &be), MINFER_OK);
    ck_assert_ptr_null(be);
    cfg.device = 0;
    ck_assert_int_eq(IF->create(&cfg, &be), MINFER_OK);
    ck_assert_ptr_nonnull(be);
    ck_assert_str_eq(IF->last_error(be), "");
    ck_assert_int_ne(g_set_isa(be, "mmx"), MINFER_OK);
    ck_assert_ptr_nonnull(strstr(IF->last_error(be), "mmx"));
    for (int i = 0; i < N_ISAS; i++) /* the refusal lists every set it knows */
        ck_assert_msg(strstr(IF->last_error(be), ISAS[i]), "'%s' missing from: %s", ISAS[i],
                      IF->last_error(be));
    IF->destroy(be);
    IF->destroy(NULL);
}
END_TEST

START_TEST(buffers_and_weights)
{
    /* Catches buffer copies that lose bytes, OOM that crashes instead of
     * failing, and weights copied instead of used in place. */
    struct minfer_backend *be = make_be(2, NULL);
    void *buf = NULL;
    ck_assert_int_eq(IF->buffer_alloc(be, 1000, &buf), MINFER_OK);
    ck_assert_uint_eq((uintptr_t)buf % 64, 0);
    char in[1000], out[1000];
    for (int i = 0; i < 1000; i++)
        in[i] = (char)(i * 7);
    ck_assert_int_eq(IF->buffer_write(be, buf, in, 1000), MINFER_OK);
    ck_assert_int_eq(IF->buffer_read(be, out, buf, 1000), MINFER_OK);
    ck_assert_mem_eq(in, out, 1000);
    IF->buffer_free(be, buf);
    void *huge = (void *)1;
    ck_assert_int_eq(IF->buffer_alloc(be, SIZE_MAX - 8, &huge), MINFER_ERR_NO_MEMORY);
    ck_assert_ptr_null(huge);
    ck_assert_int_gt((int)strlen(IF->last_error(be)), 0);

    static uint16_t w[64 * 3];
    struct minfer_weight_desc wd = {"blk.0.w", MINFER_TYPE_F16, {64, 3, 1, 1}, w, sizeof w};
    void *data = NULL;
    ck_assert_int_eq(IF->weight_register(be, &wd, &data), MINFER_OK);
    ck_assert_ptr_eq(data, w);
    wd.size = sizeof w - 2;
    ck_assert_int_ne(IF->weight_register(be, &wd, &data), MINFER_OK);
    wd.size = sizeof w;
    wd.type = MINFER_TYPE_IQ2_XS;
    ck_assert_int_eq(IF->weight_register(be, &wd, &data), MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(IF->last_error(be), "iq2_xs"));
    IF->destroy(be);
}
END_TEST

/* ---- hand-computed values ---- */

START_TEST(hand_values)
{
    /* Catches transposed matmul (ggml's ne order), a wrong RMS formula,
     * ROPE pairing other than NeoX's (i, i + n_rot/2), and attention
     * softmax or causal-mask mistakes, on numbers computed by hand. */
    struct minfer_backend *be = make_be(1, NULL);
    /* W [K=2, N=3] rows (1,2) (3,4) (5,6); x [K=2, M=1] = (1, -1) */
    struct minfer_tensor *w = tensor(MINFER_TYPE_F32, 2, 3, 1, 0);
    float wv[] = {1, 2, 3, 4, 5, 6};
    memcpy(w->data, wv, sizeof wv);
    struct minfer_tensor *x = tensor(MINFER_TYPE_F32, 2, 1, 1, 0);
    ((float *)x->data)[0] = 1;
    ((float *)x->data)[1] = -1;
    struct minfer_tensor *y = tensor(MINFER_TYPE_F32, 3, 1, 1, 0);
    struct minfer_node nd = node_of(MINFER_OP_MUL_MAT, y, 2, w, x);
    run_ok(be, &nd);
    ck_assert_float_eq(((float *)y->data)[0], -1.0f);
    ck_assert_float_eq(((float *)y->data)[1], -1.0f);
    ck_assert_float_eq(((float *)y->data)[2], -1.0f);

    /* rms_norm of (3, 4): mean square 12.5 -> (3, 4) / sqrt(12.5) */
    struct minfer_tensor *r = tensor(MINFER_TYPE_F32, 2, 1, 1, 0);
    ((float *)x->data)[0] = 3;
    ((float *)x->data)[1] = 4;
    nd = node_of(MINFER_OP_RMS_NORM, r, 1, x);
    run_ok(be, &nd);
    CLOSE(((float *)r->data)[0], 3 / sqrt(12.5), 1e-6, "rms 0");
    CLOSE(((float *)r->data)[1], 4 / sqrt(12.5), 1e-6, "rms 1");

    /* rope head_dim 4, n_rot 4, base 10000, pos 1: pairs (0,2) theta 1,
     * (1,3) theta 0.01 */
    struct minfer_tensor *q = tensor(MINFER_TYPE_F32, 4, 1, 1, 0);
    float qv[] = {1, 2, 3, 4};
    memcpy(q->data, qv, sizeof qv);
    int32_t p1 = 1;
    struct minfer_tensor *pos = ids(1, &p1);
    struct minfer_tensor *qo = tensor(MINFER_TYPE_F32, 4, 1, 1, 0);
    nd = node_of(MINFER_OP_ROPE, qo, 2, q, pos);
    nd.iparams[0] = 4;
    nd.fparams[0] = 10000.0f;
    nd.fparams[1] = 1.0f;
    run_ok(be, &nd);
    float *o = qo->data;
    CLOSE(o[0], 1 * cos(1.0) - 3 * sin(1.0), 1e-6, "rope 0");
    CLOSE(o[2], 1 * sin(1.0) + 3 * cos(1.0), 1e-6, "rope 2");
    CLOSE(o[1], 2 * cos(0.01) - 4 * sin(0.01), 1e-6, "rope 1");
    CLOSE(o[3], 2 * sin(0.01) + 4 * cos(0.01), 1e-6, "rope 3");

    /* attention, head_dim 2, one head, cells k0=(1,0) v0=(1,2), k1=(0,1)
     * v1=(3,4), q=(1,1), scale ln 2 -> both scores ln 2 -> mean of v. With
     * position 0 only cell 0 is visible -> v0. */
    struct minfer_tensor *K = tensor(MINFER_TYPE_F32, 2, 4, 1, 0);
    struct minfer_tensor *V = tensor(MINFER_TYPE_F32, 2, 4, 1, 0);
    float kv[] = {1, 0, 0, 1}, vv[] = {1, 2, 3, 4};
    memcpy(K->data, kv, sizeof kv);
    memcpy(V->data, vv, sizeof vv);
    struct minfer_tensor *Q = tensor(MINFER_TYPE_F32, 2, 1, 2, 0);
    float qq[] = {1, 1, 2, 0};
    memcpy(Q->data, qq, sizeof qq);
    int32_t kvl = 2, ps[2] = {1, 0};
    struct minfer_tensor *O = tensor(MINFER_TYPE_F32, 2, 1, 2, 0);
    nd = node_of(MINFER_OP_ATTENTION, O, 5, Q, K, V, ids(1, &kvl), ids(2, ps));
    nd.iparams[0] = 1;
    nd.fparams[0] = (float)log(2.0);
    run_ok(be, &nd);
    CLOSE(((float *)O->data)[0], 2.0, 1e-6, "attn t0 0");
    CLOSE(((float *)O->data)[1], 3.0, 1e-6, "attn t0 1");
    CLOSE(((float *)O->data)[2], 1.0, 1e-6, "attn t1 0 (causal)");
    CLOSE(((float *)O->data)[3], 2.0, 1e-6, "attn t1 1 (causal)");
    IF->destroy(be);
}
END_TEST

/* ---- matmul against a double reference, every type, every kernel set ---- */

static const uint32_t WTYPES[] = {
    MINFER_TYPE_F32,  MINFER_TYPE_F16,  MINFER_TYPE_BF16, MINFER_TYPE_Q4_0,
    MINFER_TYPE_Q4_1, MINFER_TYPE_Q5_0, MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0,
    MINFER_TYPE_Q4_K, MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K};
#define N_WTYPES (sizeof WTYPES / sizeof WTYPES[0])

/* The activations as the plugin's kernels see them (its documented rule:
 * per block of 32, or 256 for K-quants, d = amax/127 and
 * q = nearest-even(x * 127/amax)); the avx512bf16 set rounds them to
 * bf16 for BF16 weights; other float weight types see x itself. */
static void act_ref(uint32_t wtype, const char *isa, const float *x, int K, double *out)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(wtype);
    if (wtype == MINFER_TYPE_BF16 && !strcmp(isa, "avx512bf16")) {
        for (int i = 0; i < K; i++)
            out[i] = minfer_bf16_to_fp32(minfer_fp32_to_bf16(x[i]));
        return;
    }
    if (!tr->quantized) {
        for (int i = 0; i < K; i++)
            out[i] = x[i];
        return;
    }
    int bs = tr->block_size == 256 ? 256 : 32;
    for (int b = 0; b < K; b += bs) {
        float amax = 0.0f;
        for (int i = b; i < b + bs; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        float d = amax / 127.0f;
        for (int i = b; i < b + bs; i++)
            out[i] = (double)d * nearbyintf(x[i] * id);
    }
}

static void check_matmul(uint32_t type, const char *isa, int nt, int K, int N, int M, bool ffn)
{
    struct minfer_backend *be = make_be(nt, isa);
    if (!be)
        return; /* the caller reports which sets were skipped */
    float *wd, *ud = NULL;
    struct minfer_tensor *w = weight(type, K, N, &wd);
    struct minfer_tensor *u = ffn ? weight(type, K, N, &ud) : NULL;
    struct minfer_tensor *x = tensor(MINFER_TYPE_F32, K, M, 1, 12); /* padded rows */
    fill_f32(x);
    struct minfer_tensor *y = tensor(MINFER_TYPE_F32, N, M, 1, 20);
    struct minfer_node nd = ffn ? node_of(MINFER_OP_FFN_GATE_UP, y, 3, w, u, x)
                                : node_of(MINFER_OP_MUL_MAT, y, 2, w, x);
    run_ok(be, &nd);
    double *xa = talloc((size_t)K * sizeof(double));
    for (int m = 0; m < M; m++) {
        act_ref(type, isa, frow(x, m), K, xa);
        for (int n = 0; n < N; n++) {
            double s = 0, sa = 0, s2 = 0, sa2 = 0;
            for (int k = 0; k < K; k++) {
                s += wd[(size_t)n * K + k] * xa[k];
                sa += fabs(wd[(size_t)n * K + k] * xa[k]);
                if (ffn) {
                    s2 += ud[(size_t)n * K + k] * xa[k];
                    sa2 += fabs(ud[(size_t)n * K + k] * xa[k]);
                }
            }
            double want = s, tol = 2e-5 * sa + 1e-6;
            if (ffn) {
                double sg = s / (1 + exp(-s));
                want = sg * s2;
                tol = 2e-5 * (sa * fabs(s2) + sa2 * fabs(sg)) + 1e-6;
            }
            float got = frow(y, m)[n];
            CLOSE(got, want, tol, "%s %s nt=%d K=%d N=%d M=%d: y[%d,%d] = %g, want %g (tol %g)",
                  minfer_type_traits_of(type)->name, isa, nt, K, N, M, n, m, (double)got, want,
                  tol);
        }
        /* the row padding past N stays untouched */
        uint32_t pad;
        memcpy(&pad, frow(y, m) + N, 4);
        ck_assert_uint_eq(pad, 0xffffffffu);
    }
    IF->destroy(be);
}

START_TEST(matmul_all_types)
{
    /* Catches any kernel (any type, any ISA) that misreads a block layout,
     * drops a tail column group (M % 4) or a tail row chunk, ignores the
     * activation/dst row strides, or leaves an output unwritten; for the
     * float types (any K) also a row tail past the last full vector step
     * (K = 7, 45, 301: under one step, one step + tail, many + tail). */
    uint32_t type = WTYPES[_i];
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    bool kq = tr->block_size == 256;
    const int Ks[] = {!tr->quantized ? 7 : kq ? 256 : 32, !tr->quantized ? 45 : kq ? 768 : 96,
                      !tr->quantized ? 301 : kq ? 1280 : 544};
    const int Ns[] = {1, 7, 37};
    const int Ms[] = {1, 3, 6, 9};
    int ran = 0;
    for (int ii = 0; ii < N_ISAS; ii++) {
        struct minfer_backend *probe = make_be(1, ISAS[ii]);
        if (!probe) {
            printf("SKIP matmul %s: kernel set %s not runnable on this CPU\n",
                   minfer_type_traits_of(type)->name, ISAS[ii]);
            continue;
        }
        IF->destroy(probe);
        ran++;
        for (int a = 0; a < 3; a++)
            for (int b = 0; b < 3; b++)
                for (int c = 0; c < 4; c++)
                    check_matmul(type, ISAS[ii], 1 + (a + b + c) % 3, Ks[a], Ns[b], Ms[c],
                                 false);
        check_matmul(type, ISAS[ii], 3, Ks[1], 33, 5, true);
        /* long matrices: decode chunks of hundreds of rows, FFN decode in
         * several gate/up runs, prefill FFN chunks in row sub-runs; catches
         * a run or sub-run boundary that skips, repeats or misplaces rows */
        check_matmul(type, ISAS[ii], 2, Ks[0], 600, 1, true);
        check_matmul(type, ISAS[ii], 2, Ks[0], 600, 1, false);
        check_matmul(type, ISAS[ii], 2, Ks[0], 600, 3, true);
    }
    ck_assert_int_ge(ran, 1);
}
END_TEST

START_TEST(matmul_threads_bitwise)
{
    /* Catches races and split errors: a product must be bitwise the same
     * with 1..9 threads (each output is one kernel call whatever the split). */
    const uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q8_0, MINFER_TYPE_F16};
    for (int ti = 0; ti < 3; ti++) {
        float *wd;
        struct minfer_tensor *w = weight(types[ti], 512, 301, &wd);
        struct minfer_tensor *x = tensor(MINFER_TYPE_F32, 512, 11, 1, 0);
        fill_f32(x);
        float *first = NULL;
        for (int nt = 1; nt <= 9; nt++) {
            struct minfer_backend *be = make_be(nt, NULL);
            struct minfer_tensor *y = tensor(MINFER_TYPE_F32, 301, 11, 1, 0);
            struct minfer_node nd = node_of(MINFER_OP_MUL_MAT, y, 2, w, x);
            run_ok(be, &nd);
            if (!first)
                first = y->data;
            else
                ck_assert_msg(!memcmp(first, y->data, y->nb[2]), "nt=%d differs from nt=1", nt);
            IF->destroy(be);
        }
    }
}
END_TEST

START_TEST(mul_mat_add_equals_mul_mat_then_add)
{
    /* Catches a fused product + addend that differs from the MUL_MAT and
     * ADD nodes it replaces (the core fuses them whenever the plugin
     * accepts it, so the bits must not move): the addend dropped, added
     * to the wrong column, a bias [N, 1] not broadcast, the decode and the
     * prefill paths, and an addend that is dst itself. */
    const uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q8_0, MINFER_TYPE_Q6_K,
                              MINFER_TYPE_F16};
    const int Ms[] = {1, 3, 17};
    struct minfer_backend *be = make_be(2, NULL);
    for (int ti = 0; ti < 4; ti++) {
        float *wd;
        struct minfer_tensor *w = weight(types[ti], 512, 301, &wd);
        for (int mi = 0; mi < 3; mi++) {
            int M = Ms[mi];
            struct minfer_tensor *x = tensor(MINFER_TYPE_F32, 512, M, 1, 0);
            fill_f32(x);
            for (int kind = 0; kind < 3; kind++) { /* residual, bias, in place */
                struct minfer_tensor *a = tensor(MINFER_TYPE_F32, 301, kind == 1 ? 1 : M, 1, 0);
                fill_f32(a);
                struct minfer_tensor *p = tensor(MINFER_TYPE_F32, 301, M, 1, 0);
                struct minfer_tensor *want = tensor(MINFER_TYPE_F32, 301, M, 1, 0);
                struct minfer_node mm = node_of(MINFER_OP_MUL_MAT, p, 2, w, x);
                run_ok(be, &mm);
                struct minfer_node ad = node_of(MINFER_OP_ADD, want, 2, p, a);
                run_ok(be, &ad);
                struct minfer_tensor *got = kind == 2 ? a : tensor(MINFER_TYPE_F32, 301, M, 1, 0);
                struct minfer_node f = node_of(MINFER_OP_MUL_MAT_ADD, got, 3, w, x, a);
                run_ok(be, &f);
                ck_assert_msg(!memcmp(want->data, got->data, want->nb[2]),
                              "type %u M=%d kind %d: MUL_MAT_ADD differs from MUL_MAT + ADD",
                              types[ti], M, kind);
            }
        }
    }
    /* an addend of another width is refused */
    float *wd;
    struct minfer_tensor *w = weight(MINFER_TYPE_Q8_0, 64, 10, &wd);
    struct minfer_tensor *x = tensor(MINFER_TYPE_F32, 64, 2, 1, 0);
    struct minfer_tensor *a = tensor(MINFER_TYPE_F32, 9, 2, 1, 0);
    struct minfer_tensor *y = tensor(MINFER_TYPE_F32, 10, 2, 1, 0);
    struct minfer_node f = node_of(MINFER_OP_MUL_MAT_ADD, y, 3, w, x, a);
    ck_assert(!IF->supports_op(be, &f));
    IF->destroy(be);
}
END_TEST

/* ---- GET_ROWS ---- */

START_TEST(get_rows_all_types)
{
    /* Catches a table row misaddressed or dequantized differently from the
     * reference, and an out-of-range id read instead of refused. */
    uint32_t type = WTYPES[_i];
    bool kq = minfer_type_traits_of(type)->block_size == 256;
    int K = kq ? 512 : 96, N = 13;
    float *wd;
    struct minfer_tensor *w = weight(type, K, N, &wd);
    int32_t idv[] = {12, 0, 5, 5, 7};
    struct minfer_tensor *y = tensor(MINFER_TYPE_F32, K, 5, 1, 8);
    struct minfer_backend *be = make_be(2, NULL);
    struct minfer_node nd = node_of(MINFER_OP_GET_ROWS, y, 2, w, ids(5, idv));
    run_ok(be, &nd);
    for (int r = 0; r < 5; r++)
        ck_assert_mem_eq(frow(y, r), wd + (size_t)idv[r] * K, (size_t)K * sizeof(float));
    int32_t bad[] = {3, 13};
    struct minfer_tensor *y2 = tensor(MINFER_TYPE_F32, K, 2, 1, 0);
    nd = node_of(MINFER_OP_GET_ROWS, y2, 2, w, ids(2, bad));
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_RANGE);
    const char *e = IF->last_error(be);
    ck_assert_msg(strstr(e, "test.node") && strstr(e, "13"), "error text: %s", e);
    IF->destroy(be);
}
END_TEST

/* ---- element-wise ops ---- */

START_TEST(elementwise_ops)
{
    /* Catches wrong broadcast, strides ignored (padded rows), norms using
     * the wrong mean, SwiGLU on the wrong operand, and lossy COPY. */
    struct minfer_backend *be = make_be(3, NULL);
    const int n = 13, rows = 5;
    struct minfer_tensor *a = tensor(MINFER_TYPE_F32, n, rows, 1, 12);
    struct minfer_tensor *b = tensor(MINFER_TYPE_F32, n, rows, 1, 4);
    struct minfer_tensor *w = tensor(MINFER_TYPE_F32, n, 1, 1, 0);
    fill_f32(a);
    fill_f32(b);
    fill_f32(w);
    const uint32_t ops[] = {MINFER_OP_RMS_NORM, MINFER_OP_RMS_NORM_MUL, MINFER_OP_ADD,
                            MINFER_OP_ADD, MINFER_OP_MUL, MINFER_OP_MUL, MINFER_OP_SWIGLU,
                            MINFER_OP_SCALE};
    for (int oi = 0; oi < 8; oi++) {
        uint32_t op = ops[oi];
        bool bcast = oi == 3 || oi == 5 || op == MINFER_OP_RMS_NORM_MUL;
        struct minfer_tensor *y = tensor(MINFER_TYPE_F32, n, rows, 1, 8);
        struct minfer_node nd = node_of(op, y, 2, a, bcast ? w : b);
        if (op == MINFER_OP_RMS_NORM || op == MINFER_OP_SCALE)
            nd.n_src = 1;
        nd.fparams[0] = op == MINFER_OP_SCALE ? 0.37f : 1e-5f;
        run_ok(be, &nd);
        for (int r = 0; r < rows; r++) {
            const float *x = frow(a, r), *o = bcast ? frow(w, 0) : frow(b, r);
            double ss = 0;
            for (int i = 0; i < n; i++)
                ss += (double)x[i] * x[i];
            double rs = 1.0 / sqrt(ss / n + 1e-5);
            for (int i = 0; i < n; i++) {
                double want;
                switch (op) {
                case MINFER_OP_RMS_NORM: want = x[i] * rs; break;
                case MINFER_OP_RMS_NORM_MUL: want = x[i] * rs * o[i]; break;
                case MINFER_OP_ADD: want = (double)x[i] + o[i]; break;
                case MINFER_OP_MUL: want = (double)x[i] * o[i]; break;
                case MINFER_OP_SWIGLU: want = x[i] / (1 + exp(-x[i])) * o[i]; break;
                default: want = x[i] * 0.37; break;
                }
                CLOSE(frow(y, r)[i], want, 1e-5 * (1 + fabs(want)), "op %u row %d col %d", op,
                      r, i);
            }
        }
    }
    /* COPY f32 -> f16 -> f32 and -> bf16 -> f32 */
    const uint32_t mids[] = {MINFER_TYPE_F16, MINFER_TYPE_BF16};
    for (int mi = 0; mi < 2; mi++) {
        struct minfer_tensor *h = tensor(mids[mi], n, rows, 1, 6);
        struct minfer_tensor *back = tensor(MINFER_TYPE_F32, n, rows, 1, 0);
        struct minfer_node nd = node_of(MINFER_OP_COPY, h, 1, a);
        run_ok(be, &nd);
        nd = node_of(MINFER_OP_COPY, back, 1, h);
        run_ok(be, &nd);
        for (int r = 0; r < rows; r++)
            for (int i = 0; i < n; i++) {
                float x = frow(a, r)[i];
                float want = mids[mi] == MINFER_TYPE_F16
                                 ? minfer_fp16_to_fp32(minfer_fp32_to_fp16(x))
                                 : minfer_bf16_to_fp32(minfer_fp32_to_bf16(x));
                ck_assert_float_eq(frow(back, r)[i], want);
            }
    }
    IF->destroy(be);
}
END_TEST

START_TEST(rope_views)
{
    /* Catches ROPE that ignores nb1/nb2 (Q/K as column views of a fused
     * QKV row), rotates dims past n_rot, reads positions per head instead
     * of per token, or breaks when run in place. */
    struct minfer_backend *be = make_be(2, NULL);
    const int hd = 8, nh = 3, nt = 4, n_rot = 6, row = 40;
    struct minfer_tensor *qkv = tensor(MINFER_TYPE_F32, row, nt, 1, 0);
    fill_f32(qkv);
    float *orig = talloc(qkv->nb[2]);
    memcpy(orig, qkv->data, qkv->nb[2]);
    struct minfer_tensor view = *qkv; /* [hd, nh, nt] at column 4 */
    view.ne[0] = hd;
    view.ne[1] = nh;
    view.ne[2] = nt;
    view.nb[1] = hd * sizeof(float);
    view.nb[2] = row * sizeof(float);
    view.nb[3] = view.nb[2] * nt;
    view.data = (float *)qkv->data + 4;
    int32_t pv[] = {0, 5, 17, 1000};
    struct minfer_node nd = node_of(MINFER_OP_ROPE, &view, 2, &view, ids(nt, pv));
    nd.iparams[0] = n_rot;
    nd.fparams[0] = 10000.0f;
    nd.fparams[1] = 0.5f;
    run_ok(be, &nd);
    for (int t = 0; t < nt; t++) {
        const float *o = orig + t * row, *g = (float *)qkv->data + t * row;
        for (int i = 0; i < 4; i++)
            ck_assert_float_eq(g[i], o[i]);
        for (int i = 4 + hd * nh; i < row; i++)
            ck_assert_float_eq(g[i], o[i]);
        for (int h = 0; h < nh; h++) {
            const float *x = o + 4 + h * hd, *y = g + 4 + h * hd;
            for (int i = 0; i < n_rot / 2; i++) {
                double th = pv[t] * 0.5 * pow(10000.0, -2.0 * i / n_rot);
                CLOSE(y[i], x[i] * cos(th) - x[i + 3] * sin(th), 2e-5, "rope t%d h%d i%d", t,
                      h, i);
                CLOSE(y[i + 3], x[i] * sin(th) + x[i + 3] * cos(th), 2e-5, "rope t%d h%d", t, h);
            }
            for (int i = n_rot; i < hd; i++)
                ck_assert_float_eq(y[i], x[i]);
        }
    }
    IF->destroy(be);
}
END_TEST

/* ---- KV cache ---- */

static const uint32_t KVTYPES[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};

START_TEST(kv_store_cells)
{
    /* Catches a store writing cells other than those named (or rows past
     * the named cells), a conversion other than the reference one, and an
     * out-of-range cell written instead of refused. */
    uint32_t type = KVTYPES[_i];
    struct minfer_backend *be = make_be(2, NULL);
    const int rl = 64, cells = 10, nt = 3;
    struct minfer_tensor *x = tensor(MINFER_TYPE_F32, rl, nt, 1, 0);
    fill_f32(x);
    struct minfer_tensor *kv = tensor(type, rl, cells, 1, 0);
    memset(kv->data, 0x5a, kv->nb[2]);
    int32_t cv[] = {7, 2, 9};
    struct minfer_node nd = node_of(MINFER_OP_KV_STORE, kv, 2, x, ids(nt, cv));
    run_ok(be, &nd);
    size_t rb = kv->nb[1];
    unsigned char *want = talloc(rb);
    for (int c = 0; c < cells; c++) {
        const unsigned char *got = (unsigned char *)kv->data + (size_t)c * rb;
        int t = c == 7 ? 0 : c == 2 ? 1 : c == 9 ? 2 : -1;
        if (t < 0) {
            for (size_t i = 0; i < rb; i++)
                ck_assert_msg(got[i] == 0x5a, "cell %d byte %zu written", c, i);
            continue;
        }
        ck_assert_int_eq(minfer_quantize_row_ref(type, frow(x, t), want, rl), MINFER_OK);
        ck_assert_msg(!memcmp(got, want, rb), "cell %d differs from the reference", c);
    }
    int32_t bad[] = {1, 10, 0};
    nd = node_of(MINFER_OP_KV_STORE, kv, 2, x, ids(nt, bad));
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_RANGE);
    ck_assert_msg(strstr(IF->last_error(be), "10"), "%s", IF->last_error(be));
    IF->destroy(be);
}
END_TEST

static void check_attention(uint32_t type, const char *isa, int hd, int nh, int nkv, int nt,
                            int kv_len, int n_cells, int nthreads)
{
    struct minfer_backend *be = make_be(nthreads, isa);
    if (!be)
        return;
    int rl = hd * nkv;
    struct minfer_tensor *kf = tensor(MINFER_TYPE_F32, rl, n_cells, 1, 0);
    struct minfer_tensor *vf = tensor(MINFER_TYPE_F32, rl, n_cells, 1, 0);
    fill_f32(kf);
    fill_f32(vf);
    struct minfer_tensor *K = tensor(type, rl, n_cells, 1, 0);
    struct minfer_tensor *V = tensor(type, rl, n_cells, 1, 0);
    double *kd = talloc((size_t)rl * n_cells * sizeof(double));
    double *vd = talloc((size_t)rl * n_cells * sizeof(double));
    float *tmp = talloc((size_t)rl * sizeof(float));
    for (int c = 0; c < n_cells; c++) {
        char *kr = (char *)K->data + (size_t)c * K->nb[1], *vr = (char *)V->data + c * V->nb[1];
        minfer_quantize_row_ref(type, frow(kf, c), kr, rl);
        minfer_quantize_row_ref(type, frow(vf, c), vr, rl);
        minfer_dequantize_row(type, kr, tmp, rl);
        for (int i = 0; i < rl; i++)
            kd[(size_t)c * rl + i] = tmp[i];
        minfer_dequantize_row(type, vr, tmp, rl);
        for (int i = 0; i < rl; i++)
            vd[(size_t)c * rl + i] = tmp[i];
    }
    struct minfer_tensor *Q = tensor(MINFER_TYPE_F32, hd, nh, nt, 0);
    fill_f32(Q);
    struct minfer_tensor *O = tensor(MINFER_TYPE_F32, hd, nh, nt, 0);
    int32_t *pv = talloc((size_t)nt * sizeof(int32_t));
    for (int t = 0; t < nt; t++)
        pv[t] = kv_len - nt + t;
    struct minfer_node nd = node_of(MINFER_OP_ATTENTION, O, 5, Q, K, V, ids(1, &kv_len),
                                    ids(nt, pv));
    nd.iparams[0] = nkv;
    nd.fparams[0] = 1.0f / sqrtf((float)hd);
    run_ok(be, &nd);
    double *sc = talloc((size_t)n_cells * sizeof(double));
    for (int t = 0; t < nt; t++)
        for (int h = 0; h < nh; h++) {
            const float *q = (float *)((char *)Q->data + h * Q->nb[1] + t * Q->nb[2]);
            const float *o = (float *)((char *)O->data + h * O->nb[1] + t * O->nb[2]);
            int g = h / (nh / nkv), nv = pv[t] + 1;
            double mx = -INFINITY, l = 0;
            for (int c = 0; c < nv; c++) {
                double s = 0;
                for (int i = 0; i < hd; i++)
                    s += q[i] * kd[(size_t)c * rl + g * hd + i];
                sc[c] = s * nd.fparams[0];
                mx = fmax(mx, sc[c]);
            }
            for (int c = 0; c < nv; c++)
                l += (sc[c] = exp(sc[c] - mx));
            for (int i = 0; i < hd; i++) {
                double want = 0;
                for (int c = 0; c < nv; c++)
                    want += sc[c] / l * vd[(size_t)c * rl + g * hd + i];
                CLOSE(o[i], want, 2e-5 * (1 + fabs(want)),
                      "attn %s %s hd%d nh%d nkv%d t%d h%d i%d kv%d: %g want %g",
                      minfer_type_traits_of(type)->name, isa, hd, nh, nkv, t, h, i, kv_len,
                      (double)o[i], want);
            }
        }
    IF->destroy(be);
}

START_TEST(attention_kv_types)
{
    /* Catches wrong GQA head mapping (including groups split over several
     * tasks), a causal mask off by one, online softmax rescaling mistakes
     * across cell chunks (long KV), decode split into cell runs and
     * recombined wrongly (a run's scale, a run a token cannot see), a
     * prefill block of tokens whose
     * visible cells end in different chunks, head_dim over one register
     * slice or with a tail, and F16 / Q8_0 caches misread, on every
     * kernel set. */
    uint32_t type = KVTYPES[_i];
    for (int ii = 0; ii < N_ISAS; ii++) {
        check_attention(type, ISAS[ii], 64, 4, 2, 1, 300, 320, 2);   /* decode, long KV */
        check_attention(type, ISAS[ii], 32, 6, 3, 7, 70, 80, 3);     /* prefill */
        check_attention(type, ISAS[ii], 64, 2, 1, 1, 1, 4, 1);       /* one cell */
        check_attention(type, ISAS[ii], 32, 10, 1, 3, 40, 48, 2);    /* > 8 heads per kv head */
        check_attention(type, ISAS[ii], 128, 4, 2, 70, 130, 140, 2); /* prefill, 3 chunks */
        /* decode over runs of 512 cells combined afterwards: 3 runs, and 2
         * runs where the first query token sees none of the second */
        check_attention(type, ISAS[ii], 64, 4, 2, 1, 1500, 1600, 4);
        check_attention(type, ISAS[ii], 64, 6, 2, 4, 514, 520, 3);
        check_attention(type, ISAS[ii], 224, 2, 1, 6, 70, 72, 2);    /* head_dim > 128 */
        if (type != MINFER_TYPE_Q8_0) {
            check_attention(type, ISAS[ii], 40, 3, 1, 5, 133, 140, 9); /* odd head_dim */
            check_attention(type, ISAS[ii], 200, 3, 1, 5, 67, 70, 2);  /* 128 + 72 */
        }
    }
}
END_TEST

START_TEST(attention_refusals)
{
    /* Catches kv_len beyond the cache or negative positions being read
     * instead of refused with the node and the values named. */
    struct minfer_backend *be = make_be(1, NULL);
    struct minfer_tensor *K = tensor(MINFER_TYPE_F32, 8, 4, 1, 0);
    struct minfer_tensor *Q = tensor(MINFER_TYPE_F32, 8, 1, 1, 0);
    struct minfer_tensor *O = tensor(MINFER_TYPE_F32, 8, 1, 1, 0);
    fill_f32(K);
    fill_f32(Q);
    int32_t kvl = 5, p = 3;
    struct minfer_node nd = node_of(MINFER_OP_ATTENTION, O, 5, Q, K, K, ids(1, &kvl), ids(1, &p));
    nd.iparams[0] = 1;
    nd.fparams[0] = 1;
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_RANGE);
    const char *e = IF->last_error(be);
    ck_assert_msg(strstr(e, "test.node") && strstr(e, "5") && strstr(e, "4"), "%s", e);
    kvl = 0;
    nd.src[3] = ids(1, &kvl);
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_RANGE);
    kvl = 2;
    p = -1;
    nd.src[3] = ids(1, &kvl);
    nd.src[4] = ids(1, &p);
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_RANGE);
    nd.iparams[0] = 3; /* does not divide n_head 1 */
    ck_assert(!IF->supports_op(be, &nd));
    ck_assert_int_ne(IF->execute_node(be, &nd), MINFER_OK);
    IF->destroy(be);
}
END_TEST

START_TEST(supports_matches_execute)
{
    /* Catches supports_op accepting what execute_node refuses (or the
     * reverse): unreadable weight types, mismatched shapes, non-dense
     * dim 0, unknown ops. */
    struct minfer_backend *be = make_be(1, NULL);
    struct minfer_tensor *w = tensor(MINFER_TYPE_Q2_K, 256, 4, 1, 0);
    struct minfer_tensor *x = tensor(MINFER_TYPE_F32, 256, 1, 1, 0);
    struct minfer_tensor *y = tensor(MINFER_TYPE_F32, 4, 1, 1, 0);
    struct minfer_node nd = node_of(MINFER_OP_MUL_MAT, y, 2, w, x);
    ck_assert(!IF->supports_op(be, &nd));
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(IF->last_error(be), "q2_K") && strstr(IF->last_error(be), "test.node"),
                  "%s", IF->last_error(be));
    w->type = MINFER_TYPE_F32;
    w->nb[0] = 4;
    w->nb[1] = 1024;
    ck_assert(IF->supports_op(be, &nd));
    y->ne[0] = 5;
    ck_assert(!IF->supports_op(be, &nd));
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_INVALID_ARG);
    y->ne[0] = 4;
    x->nb[0] = 8;
    ck_assert(!IF->supports_op(be, &nd));
    x->nb[0] = 4;
    nd.op = MINFER_OP_COUNT + 3;
    ck_assert(!IF->supports_op(be, &nd));
    ck_assert_int_eq(IF->execute_node(be, &nd), MINFER_ERR_UNSUPPORTED);
    nd.op = MINFER_OP_MUL_MAT;
    nd.n_src = 1;
    ck_assert(!IF->supports_op(be, &nd));
    IF->destroy(be);
}
END_TEST

Suite *cpu_ops_suite(void);
Suite *cpu_ops_suite(void)
{
    Suite *s = suite_create("cpu_ops");
    TCase *tc = tcase_create("plugin");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, table_complete);
    tcase_add_test(tc, abi_negotiation);
    tcase_add_test(tc, create_config);
    tcase_add_test(tc, buffers_and_weights);
    tcase_add_test(tc, hand_values);
    tcase_add_loop_test(tc, matmul_all_types, 0, (int)N_WTYPES);
    tcase_add_test(tc, matmul_threads_bitwise);
    tcase_add_test(tc, mul_mat_add_equals_mul_mat_then_add);
    tcase_add_loop_test(tc, get_rows_all_types, 0, (int)N_WTYPES);
    tcase_add_test(tc, elementwise_ops);
    tcase_add_test(tc, rope_views);
    tcase_add_loop_test(tc, kv_store_cells, 0, 3);
    tcase_add_loop_test(tc, attention_kv_types, 0, 3);
    tcase_add_test(tc, attention_refusals);
    tcase_add_test(tc, supports_matches_execute);
    suite_add_tcase(s, tc);
    return s;
}
