/*
 * test-backend-ops.c — the cross-backend op test (llama.cpp's
 * test-backend-ops idea): every plugin the build has — the CPU plugin, the
 * template plugin, the CUDA plugin when a device is present — runs every
 * IR op it accepts, for every weight type and a set of shapes (odd sizes,
 * tails, nt = 1..9 and beyond, strided views, long KV), against the CPU
 * plugin as the reference, compared by normalised MSE under a named
 * tolerance class per op family. The CPU under test runs its best kernel
 * set against a reference instance forced to the portable "scalar" set.
 * Outputs are poisoned (NaN bytes) on both sides first, so an unwritten
 * element fails. The CPU and CUDA plugins must accept every case; the
 * template runs the cases it accepts (and must accept some).
 * Also, per plugin: the weight registry returns the same address for the
 * same weight, supports_op agrees with execute_node on a malformed node;
 * on CUDA only: device info, device OOM is an error and the next op still
 * runs, a device-side id violation is reported at sync, every GEMM variant.
 *
 * Without a CUDA device (or without the CUDA plugin) the CUDA cases print
 * SKIP with the probe's reason and pass; the rest runs everywhere.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "minfer/backend.h"
#include "minfer/quant.h"
#include "minfer/quant-ref.h"
#include "testutil.h"

/* ---- tolerance classes (normalised MSE: sum (a-b)^2 / sum b^2) ---- */

/* Same arithmetic up to f32 summation order (element-wise, norms, gathers,
 * conversions, KV stores). */
#define TOL_F32 1e-10
/* RoPE angles for positions up to ~5000 computed in f32 by two different
 * formulas (pow per dim vs an iterated product) differ by ~1e-3 rad. */
#define TOL_ROPE 1e-6
/* Quantized weights: each side rounds the activations to 8 bits per block
 * (CPU q8_0/q8_K, CUDA q8_1) — expected NMSE ~3e-5 per side. */
#define TOL_Q8ACT 3e-4
/* Float weights: either side may round activations to f16/bf16 (the CUDA
 * GEMM uses f16 tensor cores; the CPU may use 2-byte dot products). */
#define TOL_FDOT 3e-5
/* Attention: f32 softmax in a different order, f16/q8_0 caches read by
 * both sides from the same bytes. */
#define TOL_ATTN 1e-6
/* CUDA's tensor-core attention (prefill, and decode over an F16 cache;
 * tol_attn says which shapes) rounds the scaled queries and the
 * probabilities to f16 (11-bit significand) for mma.sync, as llama.cpp's
 * flash attention does: the scores move by ~3e-4 relative, expected NMSE
 * ~1e-6. */
#define TOL_ATTN_MMA 3e-5

/* ---- plugins ---- */

/* The plugins under test; the reference is always the CPU plugin. */
enum { UT_CPU = 0, UT_TEMPLATE = 1, UT_CUDA = 2, UT_COUNT };

/* The attention shapes CUDA runs on tensor cores, under TOL_ATTN_MMA: many
 * query tokens (the prefill kernel; other head sizes take a scalar kernel
 * there, inside the looser bound too), and decodes of an F16 cache with
 * head_dim 64/128 over more than 512 cells (attn-dec.cu, which serves the
 * shorter decodes of those caches too, inside the tighter bound). */
static double tol_attn(int under, uint32_t kv, int hd, int n_cells, int nt)
{
    if (under != UT_CUDA)
        return TOL_ATTN;
    if (nt > 8 || (kv == MINFER_TYPE_F16 && (hd == 64 || hd == 128) && n_cells > 512))
        return TOL_ATTN_MMA;
    return TOL_ATTN;
}

static const char *const UT_FILE[UT_COUNT] = {
    MINFER_PLUGIN_DIR "/libminfer-cpu.so",
    MINFER_TEST_PLUGIN_DIR "/template/libminfer-template.so",
    MINFER_PLUGIN_DIR "/libminfer-cuda.so",
};

struct plug {
    void *dl;
    const struct minfer_backend_iface *t;
    struct minfer_backend *be;
};

static struct plug P[2];     /* 0 = under test, 1 = CPU (reference) */
static bool g_must_support;  /* the plugin under test must accept every case */
static int g_ran, g_refused; /* cases run / not accepted by the plugin under test */

/* Opens path; NULL with why when it cannot be loaded. */
static const struct minfer_backend_iface *open_plugin(const char *path, void **dl, char *why,
                                                      size_t why_len)
{
    *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!*dl) {
        snprintf(why, why_len, "cannot dlopen %.200s: %.300s", path, dlerror());
        return NULL;
    }
    minfer_plugin_entry_fn e = (minfer_plugin_entry_fn)dlsym(*dl, MINFER_PLUGIN_ENTRY_SYMBOL);
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    const struct minfer_backend_iface *t = e ? e(&abi, NULL) : NULL;
    if (!t)
        snprintf(why, why_len, "%.300s: no entry or the entry refused", path);
    return t;
}

static const char *ut_name(int ut)
{
    return ut == UT_CPU ? "cpu" : ut == UT_TEMPLATE ? "template" : "cuda";
}

/* Opens plugin ut (P[0]) and the CPU reference (P[1]). Returns NULL, or
 * why the plugin cannot run on this machine (the test then skips): only
 * the CUDA plugin may be absent or find no device. Each Check test runs in
 * its own fork, so CUDA is initialised here, in the test's process. */
static const char *open_pair(int ut)
{
    static char why[700];
    /* MINFER_OPS_ONLY=cpu|template|cuda: one plugin's cases (a short GPU
     * run of kernel changes; scripts/cuda-device-run.sh, TESTS=ops) */
    const char *only = getenv("MINFER_OPS_ONLY");
    ck_assert_msg(!only || !*only || !strcmp(only, "cpu") || !strcmp(only, "template") ||
                      !strcmp(only, "cuda"),
                  "MINFER_OPS_ONLY=%s names no plugin (cpu, template or cuda)", only);
    if (only && *only && strcmp(only, ut_name(ut))) {
        snprintf(why, sizeof why, "MINFER_OPS_ONLY=%s", only);
        return why;
    }
    if (ut == UT_CUDA && access(UT_FILE[ut], F_OK) != 0)
        return "the CUDA plugin was not built (libminfer-cuda.so is absent)";
    P[0].t = open_plugin(UT_FILE[ut], &P[0].dl, why, sizeof why);
    ck_assert_msg(P[0].t, "%s", why);
    if (ut == UT_CUDA && P[0].t->probe(why, sizeof why) <= 0)
        return why;
    P[1].t = open_plugin(UT_FILE[UT_CPU], &P[1].dl, why, sizeof why);
    ck_assert_msg(P[1].t, "%s", why);
    for (int i = 0; i < 2; i++) {
        struct minfer_backend_config cfg = {.struct_size = sizeof cfg, .device = 0};
        minfer_status st = P[i].t->create(&cfg, &P[i].be);
        ck_assert_msg(st == MINFER_OK, "%s create: %s", P[i].t->name, P[i].t->last_error(NULL));
    }
    if (ut == UT_CPU) { /* the best kernel set against the portable one */
        typedef minfer_status (*set_isa_fn)(struct minfer_backend *, const char *);
        set_isa_fn set_isa = (set_isa_fn)P[1].t->get_proc("minfer_cpu_set_isa");
        ck_assert_ptr_nonnull(set_isa);
        ck_assert_int_eq(set_isa(P[1].be, "scalar"), MINFER_OK);
    }
    g_must_support = ut != UT_TEMPLATE;
    g_ran = g_refused = 0;
    return NULL;
}

/* First line of every test: the plugin under test, or a printed skip. */
#define UNDER_TEST(ut)                                                                     \
    do {                                                                                   \
        const char *why_ = open_pair(ut);                                                  \
        if (why_)                                                                          \
            MINFER_TEST_SKIP("%s: %s", ut_name(ut), why_);                                 \
    } while (0)

static void setup(void)
{
    memset(P, 0, sizeof P);
}

#define MAX_ALLOCS 16384 /* per test: gemm_every_variant makes ~8,000 */
static void *g_allocs[MAX_ALLOCS];
static int g_nallocs;

static void *talloc(size_t n)
{
    void *p = calloc(1, n ? n : 1);
    ck_assert_ptr_nonnull(p);
    ck_assert_int_lt(g_nallocs, MAX_ALLOCS);
    g_allocs[g_nallocs++] = p;
    return p;
}

/* Buffers tt_place allocated on each plugin, freed in teardown (LSan in
 * the sanitizer suite reports what a test leaves behind). */
static struct {
    int plugin;
    void *p;
} g_bufs[8192];
static int g_nbufs;

static void teardown(void)
{
    for (int k = 0; k < g_nbufs; k++)
        if (P[g_bufs[k].plugin].t && P[g_bufs[k].plugin].be)
            P[g_bufs[k].plugin].t->buffer_free(P[g_bufs[k].plugin].be, g_bufs[k].p);
    g_nbufs = 0;
    for (int i = 0; i < 2; i++) {
        if (P[i].t) {
            if (P[i].be)
                P[i].t->destroy(P[i].be);
            P[i].t->shutdown();
        }
        if (P[i].dl)
            dlclose(P[i].dl);
        memset(&P[i], 0, sizeof P[i]);
    }
    for (int i = 0; i < g_nallocs; i++)
        free(g_allocs[i]);
    g_nallocs = 0;
}

/* ---- random data ---- */

static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (uint32_t)(g_rng >> 11);
}
static float rndf(void)
{
    return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f;
}

/* ---- test tensors ---- */

struct tt {
    uint32_t type;
    int64_t ne[4];
    size_t nb[4];
    size_t bytes;
    uint8_t *host;
    struct minfer_tensor t[2]; /* as seen by each plugin */
};

static size_t row_bytes(uint32_t type, int64_t n)
{
    size_t r = minfer_row_size(type, n);
    ck_assert_msg(r > 0 || n == 0, "row size of %lld %s", (long long)n,
                  minfer_type_traits_of(type)->name);
    return r;
}

/* A tensor with rows padded by pad bytes (a strided view), filled with
 * random values of its type (quantized from random floats). */
static struct tt *tt_new(uint32_t type, int64_t n0, int64_t n1, int64_t n2, int64_t n3, size_t pad)
{
    struct tt *x = talloc(sizeof *x);
    x->type = type;
    int64_t ne[4] = {n0, n1, n2, n3};
    memcpy(x->ne, ne, sizeof ne);
    x->nb[0] = minfer_type_traits_of(type)->type_size;
    x->nb[1] = row_bytes(type, n0) + pad;
    x->nb[2] = x->nb[1] * (size_t)n1;
    x->nb[3] = x->nb[2] * (size_t)n2;
    x->bytes = x->nb[3] * (size_t)n3;
    x->host = talloc(x->bytes);
    float *tmp = talloc((size_t)n0 * sizeof(float));
    for (int64_t r = 0; r < n1 * n2 * n3; r++) {
        uint8_t *row = x->host + (size_t)r * x->nb[1];
        for (int64_t i = 0; i < n0; i++)
            tmp[i] = rndf();
        if (type == MINFER_TYPE_I32) {
            memset(row, 0, row_bytes(type, n0));
        } else {
            ck_assert_int_eq(minfer_quantize_row_ref(type, tmp, row, n0), MINFER_OK);
        }
        for (size_t p = 0; p < pad; p++)
            row[row_bytes(type, n0) + p] = (uint8_t)rnd();
    }
    return x;
}

static int32_t *tt_i32(struct tt *x)
{
    return (int32_t *)x->host;
}

/* Places x on both plugins: as a registered weight (name given) or a
 * buffer with the host bytes written. */
static void tt_place(struct tt *x, const char *weight_name)
{
    for (int i = 0; i < 2; i++) {
        void *d = NULL;
        minfer_status st;
        if (weight_name) {
            struct minfer_weight_desc w = {.name = weight_name, .type = x->type,
                                           .host_data = x->host, .size = x->bytes};
            memcpy(w.ne, x->ne, sizeof w.ne);
            st = P[i].t->weight_register(P[i].be, &w, &d);
        } else {
            st = P[i].t->buffer_alloc(P[i].be, x->bytes, &d);
            if (st == MINFER_OK) {
                ck_assert_int_lt(g_nbufs, 8192);
                g_bufs[g_nbufs].plugin = i;
                g_bufs[g_nbufs++].p = d;
                st = P[i].t->buffer_write(P[i].be, d, x->host, x->bytes);
            }
        }
        ck_assert_msg(st == MINFER_OK, "%s: placing %zu bytes: %s", P[i].t->name, x->bytes,
                      P[i].t->last_error(P[i].be));
        struct minfer_tensor *t = &x->t[i];
        memset(t, 0, sizeof *t);
        t->type = x->type;
        memcpy(t->ne, x->ne, sizeof t->ne);
        memcpy(t->nb, x->nb, sizeof t->nb);
        t->data = d;
        t->name = weight_name;
    }
}

static int g_wid; /* unique weight names */

/* A weight [n0, n1] of random content registered on both plugins under a
 * name no other test uses ("t<n>.<role>"; the name lives as long as the
 * test's allocations). */
static struct tt *tt_weight(uint32_t type, int64_t n0, int64_t n1, size_t pad, const char *role)
{
    struct tt *w = tt_new(type, n0, n1, 1, 1, pad);
    char *name = talloc(64);
    snprintf(name, 64, "t%d.%s", g_wid++, role);
    tt_place(w, name);
    return w;
}

/* An output: poisoned with 0xFF bytes (NaN for f32/f16/bf16) on both. */
static struct tt *tt_out(uint32_t type, int64_t n0, int64_t n1, int64_t n2, int64_t n3, size_t pad)
{
    struct tt *x = tt_new(type, n0, n1, n2, n3, pad);
    memset(x->host, 0xFF, x->bytes);
    tt_place(x, NULL);
    return x;
}

/* Reads x back from plugin i as floats (rows of ne0, padding skipped). */
static float *tt_read(struct tt *x, int i)
{
    uint8_t *raw = talloc(x->bytes);
    minfer_status st = P[i].t->synchronize(P[i].be);
    ck_assert_msg(st == MINFER_OK, "%s sync: %s", P[i].t->name, P[i].t->last_error(P[i].be));
    st = P[i].t->buffer_read(P[i].be, raw, x->t[i].data, x->bytes);
    ck_assert_msg(st == MINFER_OK, "%s read: %s", P[i].t->name, P[i].t->last_error(P[i].be));
    int64_t rows = x->ne[1] * x->ne[2] * x->ne[3];
    float *f = talloc((size_t)(x->ne[0] * rows) * sizeof(float));
    for (int64_t r = 0; r < rows; r++)
        ck_assert_int_eq(minfer_dequantize_row(x->type, raw + (size_t)r * x->nb[1],
                                               f + r * x->ne[0], x->ne[0]),
                         MINFER_OK);
    return f;
}

/* ---- running and comparing ---- */

struct stat_row {
    const char *family;
    int cases;
    double worst;
    char worst_case[160];
};
static struct stat_row g_stats[32];
static int g_nstats;

static void record(const char *family, const char *what, double nmse)
{
    struct stat_row *s = NULL;
    for (int i = 0; i < g_nstats; i++)
        if (strcmp(g_stats[i].family, family) == 0)
            s = &g_stats[i];
    if (!s) {
        ck_assert_int_lt(g_nstats, 32);
        s = &g_stats[g_nstats++];
        s->family = family;
    }
    s->cases++;
    if (nmse >= s->worst) {
        s->worst = nmse;
        snprintf(s->worst_case, sizeof s->worst_case, "%s", what);
    }
}

static void print_stats(const char *test)
{
    for (int i = 0; i < g_nstats; i++)
        printf("NMSE %-8s %-14s %-16s cases %4d  worst %.3e  (%s)\n", P[0].t->name, test,
               g_stats[i].family, g_stats[i].cases, g_stats[i].worst, g_stats[i].worst_case);
    printf("%s %s: %d cases run, %d not accepted by the plugin\n", P[0].t->name, test, g_ran,
           g_refused);
    fflush(stdout);
    g_nstats = 0;
}

static bool g_last_ran; /* whether the last run_both ran (compare skips otherwise) */

/* Runs node on both plugins (the node's tensors are filled per plugin).
 * A plugin under test that need not accept everything (the template) may
 * refuse; the case is then counted and not compared. */
static void run_both(struct minfer_node *n, struct tt **src, int nsrc, struct tt *dst,
                     const char *what)
{
    g_last_ran = false;
    for (int i = 0; i < 2; i++) {
        n->n_src = (uint32_t)nsrc;
        for (int s = 0; s < nsrc; s++)
            n->src[s] = &src[s]->t[i];
        n->dst = &dst->t[i];
        n->label = what;
        bool ok = P[i].t->supports_op(P[i].be, n);
        if (!ok && i == 0 && !g_must_support) {
            g_refused++;
            return;
        }
        ck_assert_msg(ok, "%s does not support %s", P[i].t->name, what);
        minfer_status st = P[i].t->execute_node(P[i].be, n);
        ck_assert_msg(st == MINFER_OK, "%s execute %s: %s", P[i].t->name, what,
                      P[i].t->last_error(P[i].be));
    }
    g_ran++;
    g_last_ran = true;
}

/* NMSE of the plugin under test vs the CPU reference over dst; an
 * unwritten (NaN) element fails. 0 when the last run_both did not run. */
static double compare(struct tt *dst, const char *family, const char *what, double tol)
{
    if (!g_last_ran)
        return 0;
    float *a = tt_read(dst, 0), *b = tt_read(dst, 1);
    int64_t n = dst->ne[0] * dst->ne[1] * dst->ne[2] * dst->ne[3];
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        ck_assert_msg(isfinite(a[i]), "%s: %s element %lld is %g (unwritten or overflow)",
                      what, P[0].t->name, (long long)i, (double)a[i]);
        ck_assert_msg(isfinite(b[i]), "%s: CPU reference element %lld is %g", what,
                      (long long)i, (double)b[i]);
        double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * (double)b[i];
    }
    double nmse = den > 0 ? num / den : num;
    record(family, what, nmse);
    ck_assert_msg(nmse <= tol, "%s: %s NMSE %.3e above the %s class %.1e", what, P[0].t->name,
                  nmse, family, tol);
    return nmse;
}

static const char *tn(uint32_t t)
{
    return minfer_type_traits_of(t)->name;
}

static const uint32_t WTYPES[] = {MINFER_TYPE_F32,  MINFER_TYPE_F16,  MINFER_TYPE_BF16,
                                  MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_1, MINFER_TYPE_Q5_0,
                                  MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0, MINFER_TYPE_Q4_K,
                                  MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K};
#define NWTYPES (sizeof WTYPES / sizeof WTYPES[0])

static int is_float(uint32_t t)
{
    return t == MINFER_TYPE_F32 || t == MINFER_TYPE_F16 || t == MINFER_TYPE_BF16;
}


/* ---- tests ---- */

/* Catches: a device_info that leaves fields empty or reports a non-GPU. */
START_TEST(device_info_is_real)
{
    UNDER_TEST(UT_CUDA);
    struct minfer_device_info d = {.struct_size = sizeof d};
    ck_assert_int_eq(P[0].t->device_info(0, &d), MINFER_OK);
    ck_assert_msg(d.name[0] != 0, "empty device name");
    ck_assert_msg(d.cc_major >= 7, "compute capability %d.%d", d.cc_major, d.cc_minor);
    ck_assert_msg(d.memory_total > 0 && d.memory_free > 0 && d.memory_free <= d.memory_total,
                  "memory %llu free of %llu", (unsigned long long)d.memory_free,
                  (unsigned long long)d.memory_total);
    ck_assert_uint_eq(d.is_gpu, 1);
    printf("device: %s, %s, cc %d.%d, %.1f GiB\n", d.name, d.description, d.cc_major,
           d.cc_minor, d.memory_total / 1073741824.0);
}
END_TEST

/* Catches: a dequantizer with a wrong block layout in any type, a gather
 * that ignores the table's row stride, odd-length plain rows. */
START_TEST(get_rows_every_type)
{
    UNDER_TEST(_i);
    for (size_t ti = 0; ti < NWTYPES; ti++) {
        uint32_t t = WTYPES[ti];
        int64_t ns[2] = {512, is_float(t) ? 13 : 256};
        for (int k = 0; k < 2; k++) {
            struct tt *tab = tt_weight(t, ns[k], 37, k ? 16 : 0, "tok_embd");
            struct tt *ids = tt_new(MINFER_TYPE_I32, 9, 1, 1, 1, 0);
            int32_t v[9] = {0, 36, 5, 5, 17, 1, 35, 20, 9};
            memcpy(ids->host, v, sizeof v);
            tt_place(ids, NULL);
            struct tt *dst = tt_out(MINFER_TYPE_F32, ns[k], 9, 1, 1, 0);
            struct minfer_node n = {.op = MINFER_OP_GET_ROWS};
            struct tt *src[2] = {tab, ids};
            char what[96];
            snprintf(what, sizeof what, "get_rows %s n=%lld", tn(t), (long long)ns[k]);
            run_both(&n, src, 2, dst, what);
            compare(dst, "get_rows", what, TOL_F32);
        }
    }
    print_stats("get_rows");
}
END_TEST

/* Catches: norms over tails (ne0 not a multiple of the block), strided
 * rows, 3-D inputs, the fused weight multiply. */
START_TEST(rms_norm_shapes)
{
    UNDER_TEST(_i);
    int64_t shapes[][3] = {{13, 3, 1}, {4096, 5, 1}, {128, 7, 3}, {3584, 1, 1}, {1000, 9, 2}};
    for (size_t s = 0; s < 5; s++) {
        for (int fused = 0; fused < 2; fused++) {
            size_t pad = s % 2 ? 32 : 0;
            struct tt *x = tt_new(MINFER_TYPE_F32, shapes[s][0], shapes[s][1], shapes[s][2], 1, pad);
            tt_place(x, NULL);
            struct tt *w = tt_new(MINFER_TYPE_F32, shapes[s][0], 1, 1, 1, 0);
            tt_place(w, NULL);
            struct tt *dst = tt_out(MINFER_TYPE_F32, shapes[s][0], shapes[s][1], shapes[s][2], 1, 0);
            struct minfer_node n = {.op = fused ? MINFER_OP_RMS_NORM_MUL : MINFER_OP_RMS_NORM};
            n.fparams[0] = 1e-6f;
            struct tt *src[2] = {x, w};
            char what[96];
            snprintf(what, sizeof what, "%s [%lld,%lld,%lld] pad %zu", fused ? "rms_norm_mul" : "rms_norm",
                     (long long)shapes[s][0], (long long)shapes[s][1], (long long)shapes[s][2], pad);
            run_both(&n, src, fused ? 2 : 1, dst, what);
            compare(dst, "rms_norm", what, TOL_F32);
        }
    }
    print_stats("rms_norm");
}
END_TEST

/* Catches: broadcast of one src1 row, strided views, odd lengths, the
 * swiglu formula, scale, and every conversion of COPY; a long row of few
 * rows (5000 x 2) is split over many blocks with a partial last one. */
START_TEST(elementwise_ops)
{
    UNDER_TEST(_i);
    int64_t shapes[][3] = {{13, 5, 1}, {3584, 9, 1}, {128, 7, 3}, {5000, 2, 1}};
    uint32_t ops[] = {MINFER_OP_ADD, MINFER_OP_MUL, MINFER_OP_SWIGLU, MINFER_OP_SCALE};
    const char *names[] = {"add", "mul", "swiglu", "scale"};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        for (size_t o = 0; o < 4; o++) {
            for (int bc = 0; bc < 4; bc++) { /* bit 0: broadcast src1; bit 1: all dense */
                if ((bc & 1) && (ops[o] == MINFER_OP_SWIGLU || ops[o] == MINFER_OP_SCALE))
                    continue;
                int64_t *sh = shapes[s];
                bool dense = bc & 2;
                struct tt *a = tt_new(MINFER_TYPE_F32, sh[0], sh[1], sh[2], 1, dense ? 0 : 8);
                struct tt *b = tt_new(MINFER_TYPE_F32, sh[0], (bc & 1) ? 1 : sh[1],
                                      (bc & 1) ? 1 : sh[2], 1, 0);
                tt_place(a, NULL);
                tt_place(b, NULL);
                struct tt *dst = tt_out(MINFER_TYPE_F32, sh[0], sh[1], sh[2], 1, dense ? 0 : 4);
                struct minfer_node n = {.op = ops[o]};
                n.fparams[0] = 0.37f;
                struct tt *src[2] = {a, b};
                char what[96];
                snprintf(what, sizeof what, "%s [%lld,%lld,%lld]%s%s", names[o], (long long)sh[0],
                         (long long)sh[1], (long long)sh[2], (bc & 1) ? " bcast" : "",
                         dense ? " dense" : "");
                run_both(&n, src, ops[o] == MINFER_OP_SCALE ? 1 : 2, dst, what);
                compare(dst, names[o], what, TOL_F32);
            }
        }
    }
    uint32_t conv[][2] = {{MINFER_TYPE_F32, MINFER_TYPE_F16}, {MINFER_TYPE_F32, MINFER_TYPE_BF16},
                          {MINFER_TYPE_F16, MINFER_TYPE_F32}, {MINFER_TYPE_BF16, MINFER_TYPE_F32},
                          {MINFER_TYPE_F32, MINFER_TYPE_F32}};
    for (size_t c = 0; c < 5; c++) {
        struct tt *a = tt_new(conv[c][0], 257, 3, 1, 1, 0);
        tt_place(a, NULL);
        struct tt *dst = tt_out(conv[c][1], 257, 3, 1, 1, 0);
        struct minfer_node n = {.op = MINFER_OP_COPY};
        struct tt *src[1] = {a};
        char what[64];
        snprintf(what, sizeof what, "copy %s->%s", tn(conv[c][0]), tn(conv[c][1]));
        run_both(&n, src, 1, dst, what);
        compare(dst, "copy", what, TOL_F32);
    }
    /* every plugin runs element-wise ops (the template: the dense cases) */
    ck_assert_msg(g_ran > 0, "%s accepted no element-wise case", P[0].t->name);
    print_stats("elementwise");
}
END_TEST

/* Catches: wrong pair layout (neox is (i, i+n_rot/2)), dims past n_rot not
 * passed through, positions not read per token, freq_scale ignored, YaRN
 * parameters ignored or applied by another formula than the CPU's. */
START_TEST(rope_neox)
{
    UNDER_TEST(_i);
    /* hd, n_rot, base 10000 + linear scale 0.5, YaRN (Qwen2.5's 128k: factor 4,
     * ramp over pairs 23..40 of 64, magnitude 1 + 0.1 ln 4; a partial n_rot) */
    int cfg[][4] = {{128, 128, 0, 0}, {128, 64, 1, 0}, {64, 64, 0, 0}, {128, 128, 0, 1},
                    {64, 32, 1, 1}};
    int nts[] = {1, 5, 9, 70}; /* 70: the CUDA kernel of a block per token (ROPE_TOK_MIN) */
    for (int c = 0; c < 5; c++) {
        for (size_t ni = 0; ni < sizeof nts / sizeof nts[0]; ni++) {
            int hd = cfg[c][0], nrot = cfg[c][1], nt = nts[ni];
            struct tt *x = tt_new(MINFER_TYPE_F32, hd, 7, nt, 1, 0);
            tt_place(x, NULL);
            struct tt *pos = tt_new(MINFER_TYPE_I32, nt, 1, 1, 1, 0);
            for (int t = 0; t < nt; t++)
                tt_i32(pos)[t] = (int32_t)(rnd() % 5000);
            tt_place(pos, NULL);
            struct tt *dst = tt_out(MINFER_TYPE_F32, hd, 7, nt, 1, 0);
            struct minfer_node n = {.op = MINFER_OP_ROPE};
            n.iparams[0] = nrot;
            n.fparams[0] = cfg[c][2] ? 10000.0f : 1000000.0f;
            n.fparams[1] = cfg[c][2] ? 0.5f : 1.0f;
            if (cfg[c][3]) {
                n.fparams[1] = 0.25f;
                n.fparams[2] = 1.0f;
                n.fparams[3] = 1.1386294f;
                n.fparams[4] = nrot == 128 ? 23.0f : 2.0f;
                n.fparams[5] = nrot == 128 ? 40.0f : 10.0f;
            }
            struct tt *src[2] = {x, pos};
            char what[96];
            snprintf(what, sizeof what, "rope hd=%d n_rot=%d nt=%d%s", hd, nrot, nt,
                     cfg[c][3] ? " yarn" : "");
            run_both(&n, src, 2, dst, what);
            compare(dst, "rope", what, TOL_ROPE);
        }
    }
    print_stats("rope");
}
END_TEST

/* w [K, N] times M random tokens (rows padded by x_pad bytes) on both
 * backends, compared under `stat` with tolerance tol. */
static void mul_mat_case(struct tt *w, int64_t K, int64_t N, int M, size_t x_pad, const char *stat,
                         const char *what, double tol)
{
    struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, x_pad);
    tt_place(x, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_MUL_MAT};
    struct tt *src[2] = {w, x};
    run_both(&n, src, 2, dst, what);
    compare(dst, stat, what, tol);
}

/* Catches: matvec kernels (nt = 1..8) and the GEMM (nt > 8) with a wrong
 * block decode, wrong activation scale/sum term, missed tails in N or M,
 * strided activations, and the dispatch between the two families; the
 * long rows (16,384 values) give a lane of the nt = 1 kernels more units
 * than it loads before the dependent-launch wait (Q8_0 takes two), so a
 * unit reloaded into the wrong register set or skipped shows there. */
START_TEST(mul_mat_every_type)
{
    UNDER_TEST(_i);
    int64_t shapes[][2] = {{256, 33}, {768, 130}, {4096, 67}, {16384, 5}};
    int nts[] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 16, 67};
    for (size_t ti = 0; ti < NWTYPES; ti++) {
        uint32_t t = WTYPES[ti];
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
            int64_t K = shapes[s][0], N = shapes[s][1];
            struct tt *w = tt_weight(t, K, N, 0, "w");
            for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
                int M = nts[m];
                char what[96];
                snprintf(what, sizeof what, "mul_mat %s K=%lld N=%lld nt=%d", tn(t), (long long)K,
                         (long long)N, M);
                mul_mat_case(w, K, N, M, m % 3 == 1 ? 16 : 0,
                             is_float(t) ? "mul_mat_float" : "mul_mat_quant", what,
                             is_float(t) ? TOL_FDOT : TOL_Q8ACT);
            }
        }
        /* float weights with K not a multiple of 8 or 32 */
        if (is_float(t)) {
            int64_t K = 100, N = 9;
            struct tt *w = tt_weight(t, K, N, 0, "w");
            for (int M = 1; M <= 12; M += 11) {
                char what[96];
                snprintf(what, sizeof what, "mul_mat %s K=100 N=9 nt=%d", tn(t), M);
                mul_mat_case(w, K, N, M, 0, "mul_mat_float", what, TOL_FDOT);
            }
        }
    }
    print_stats("mul_mat");
}
END_TEST

/* One forced GEMM variant (the tune hook's bk, splits, bn) of w [K, N] on
 * M random tokens, against the CPU; stats under `stat`. */
static void gemm_variant_case(const int v[3], struct tt *w, uint32_t type, int64_t K, int64_t N,
                              int M, const char *stat)
{
    char what[128];
    snprintf(what, sizeof what, "gemm bk=%d splits=%d bn=%d %s K=%lld N=%lld nt=%d", v[0], v[1],
             v[2], tn(type), (long long)K, (long long)N, M);
    mul_mat_case(w, K, N, M, 0, stat, what, is_float(type) ? TOL_FDOT : TOL_Q8ACT);
}

/* Catches a prefill GEMM variant that is only right when the per-shape
 * choice happens to pick it (32-deep K slices, split-K partial planes and
 * their fixed-order sum, the 256-row tile): each is forced in turn through
 * the plugin's test hook and must match the CPU like the default. */
START_TEST(gemm_every_variant)
{
    UNDER_TEST(UT_CUDA);
    typedef void (*tune_fn)(int bk, int splits, int bn);
    tune_fn tune = (tune_fn)P[0].t->get_proc("minfer_cuda_test_tune_gemm");
    ck_assert_msg(tune, "the CUDA plugin lacks minfer_cuda_test_tune_gemm");
    /* bn 128/256: the f16-scratch kernel; bn 16/64: the in-place quantized
     * one (gemm-q.cu: q4_K, q5_K, q6_K, q8_0 with K % 256 == 0) with that
     * token tile, its 3-way split uneven over 2 or 3 chunks; bn 1064/1128:
     * the Hopper wgmma one (gemm-wg.cu, same types) with a 64/128-token
     * tile; bn 2256: the Hopper wgmma one on f16 scratch (gemm-ss.cu, any
     * type, K % 64 == 0; F16 runs it twice, hi and lo activations), its
     * splits even and uneven; bn 4016/4032/4064: the int8 one (gemm-i8.cu,
     * gemm-q.cu's types) with a 16/32/64-token tile. The Hopper ones run only on a 9.0 device
     * of an sm_90a build (elsewhere the hook leaves the choice automatic
     * and these repeat other rows) */
    static const int variants[][3] = {
        {32, 1, 128}, {64, 1, 128}, {64, 3, 128}, {64, 8, 128},   {64, 1, 256},
        {32, 4, 256}, {0, 1, 16},   {0, 3, 16},   {0, 1, 64},     {0, 3, 64},
        {0, 1, 1064}, {0, 3, 1064}, {0, 1, 1128}, {0, 2, 1128},   {0, 1, 2256},
        {0, 2, 2256}, {0, 3, 2256}, {0, 1, 4016}, {0, 3, 4016}, {0, 1, 4032}, {0, 1, 4064},
        {0, 2, 4064}};
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q8_0, MINFER_TYPE_Q6_K, MINFER_TYPE_Q5_K,
                        MINFER_TYPE_F16};
    /* K % 64 == 32 in the second; 3 chunks of 256 and a 300-row tail in the third */
    int64_t shapes[][2] = {{512, 200}, {288, 130}, {768, 300}};
    int Ms[] = {9, 67, 200};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        tune(variants[v][0], variants[v][1], variants[v][2]);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            for (size_t sh = 0; sh < 3; sh++) {
                int64_t K = shapes[sh][0], N = shapes[sh][1];
                if (K % 256 && types[ti] != MINFER_TYPE_Q8_0 && types[ti] != MINFER_TYPE_F16)
                    continue; /* K-quant rows are whole 256-blocks */
                struct tt *w = tt_weight(types[ti], K, N, 0, "w");
                for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++)
                    gemm_variant_case(variants[v], w, types[ti], K, N, Ms[m], "gemm_variant");
            }
        }
    }
    tune(0, 0, 0);
    print_stats("gemm_every_variant");
}
END_TEST

/* Catches the int8 GEMM (gemm-i8.cu) going wrong once its ring of stages
 * wraps, which gemm_every_variant's K of at most 768 (3 chunks) never
 * reaches: K = 2,304 is 9 chunks, whole and split 2 or 3 ways unevenly
 * (4 + 5, 3 + 3 + 3), for each token tile. */
START_TEST(gemm_i8_long_k)
{
    UNDER_TEST(UT_CUDA);
    typedef void (*tune_fn)(int bk, int splits, int bn);
    tune_fn tune = (tune_fn)P[0].t->get_proc("minfer_cuda_test_tune_gemm");
    ck_assert_msg(tune, "the CUDA plugin lacks minfer_cuda_test_tune_gemm");
    static const int variants[][3] = {{0, 1, 4016}, {0, 2, 4016}, {0, 1, 4032},
                                      {0, 3, 4032}, {0, 1, 4064}, {0, 2, 4064}};
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
    int Ms[] = {9, 32};
    const int64_t K = 2304, N = 136;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        struct tt *w = tt_weight(types[ti], K, N, 0, "w");
        for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
            tune(variants[v][0], variants[v][1], variants[v][2]);
            for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++)
                gemm_variant_case(variants[v], w, types[ti], K, N, Ms[m], "gemm_i8_long_k");
        }
    }
    tune(0, 0, 0);
    print_stats("gemm_i8_long_k");
}
END_TEST

/* Runs dst = w . x + a as one MUL_MAT_ADD node on the plugin under test
 * and as the MUL_MAT and ADD nodes it replaces on the CPU reference. */
static void run_mul_mat_add(struct tt *w, struct tt *x, struct tt *a, struct tt *dst,
                            const char *what)
{
    struct minfer_node n = {.op = MINFER_OP_MUL_MAT_ADD, .n_src = 3, .label = what};
    n.src[0] = &w->t[0];
    n.src[1] = &x->t[0];
    n.src[2] = &a->t[0];
    n.dst = &dst->t[0];
    g_last_ran = false;
    bool ok = P[0].t->supports_op(P[0].be, &n);
    if (!ok && !g_must_support) {
        g_refused++;
        return;
    }
    ck_assert_msg(ok, "%s does not support %s", P[0].t->name, what);
    minfer_status st = P[0].t->execute_node(P[0].be, &n);
    ck_assert_msg(st == MINFER_OK, "%s execute %s: %s", P[0].t->name, what,
                  P[0].t->last_error(P[0].be));
    struct tt *p = tt_out(MINFER_TYPE_F32, w->ne[1], x->ne[1], 1, 1, 0);
    struct minfer_node mm = {.op = MINFER_OP_MUL_MAT, .n_src = 2, .label = what};
    mm.src[0] = &w->t[1];
    mm.src[1] = &x->t[1];
    mm.dst = &p->t[1];
    struct minfer_node ad = {.op = MINFER_OP_ADD, .n_src = 2, .label = what};
    ad.src[0] = &p->t[1];
    ad.src[1] = &a->t[1];
    ad.dst = &dst->t[1];
    ck_assert_int_eq(P[1].t->execute_node(P[1].be, &mm), MINFER_OK);
    ck_assert_int_eq(P[1].t->execute_node(P[1].be, &ad), MINFER_OK);
    g_ran++;
    g_last_ran = true;
}

/* Catches: a fused product + addend that drops the addend, adds it to the
 * wrong rows or columns (a [N, 1] bias broadcast, an [N, M] residual), also
 * writes the bare product somewhere, or breaks when the addend is dst
 * itself (in place, both the matvec epilogue and the GEMM path). */
START_TEST(mul_mat_add)
{
    UNDER_TEST(_i);
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q8_0, MINFER_TYPE_Q6_K, MINFER_TYPE_Q5_0,
                        MINFER_TYPE_F16};
    int nts[] = {1, 2, 3, 5, 8, 9, 33};
    int64_t K = 512, N = 72;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        struct tt *w = tt_weight(types[ti], K, N, 0, "w");
        for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
            int M = nts[m];
            struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
            tt_place(x, NULL);
            for (int kind = 0; kind < 3; kind++) { /* residual, bias, in place */
                struct tt *a = tt_new(MINFER_TYPE_F32, N, kind == 1 ? 1 : M, 1, 1, 0);
                tt_place(a, NULL);
                struct tt *dst = kind == 2 ? a : tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
                char what[112];
                snprintf(what, sizeof what, "mul_mat_add %s nt=%d %s", tn(types[ti]), M,
                         kind == 0 ? "residual" : kind == 1 ? "bias" : "in place");
                run_mul_mat_add(w, x, a, dst, what);
                compare(dst, "mul_mat_add", what,
                        is_float(types[ti]) ? TOL_FDOT : TOL_Q8ACT);
            }
        }
    }
    /* an addend that fits neither [N, M] nor [N, 1] is refused up front */
    struct tt *w = tt_new(MINFER_TYPE_Q8_0, K, N, 1, 1, 0);
    tt_place(w, "mul_mat_add.bad");
    struct tt *x = tt_new(MINFER_TYPE_F32, K, 4, 1, 1, 0), *a = tt_new(MINFER_TYPE_F32, N, 2, 1, 1, 0);
    tt_place(x, NULL);
    tt_place(a, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, N, 4, 1, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_MUL_MAT_ADD, .n_src = 3, .label = "bad addend"};
    n.src[0] = &w->t[0];
    n.src[1] = &x->t[0];
    n.src[2] = &a->t[0];
    n.dst = &dst->t[0];
    ck_assert(!P[0].t->supports_op(P[0].be, &n));
    print_stats("mul_mat_add");
}
END_TEST

/* silu(g . x) * (u . x) for M random tokens on both plugins, compared. */
static void gate_up_case(struct tt *g, struct tt *u, int64_t K, int64_t N, int M,
                         const char *stat, const char *what, double tol)
{
    struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
    tt_place(x, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_FFN_GATE_UP};
    struct tt *src[3] = {g, u, x};
    run_both(&n, src, 3, dst, what);
    compare(dst, stat, what, tol);
}

/* Catches: a fused gate/up that swaps gate and up, forgets silu, or
 * breaks for nt past the matvec range. */
START_TEST(ffn_gate_up)
{
    UNDER_TEST(_i);
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q8_0, MINFER_TYPE_F16, MINFER_TYPE_Q4_0,
                        MINFER_TYPE_Q6_K};
    int nts[] = {1, 2, 4, 7, 9, 33}; /* 2..8: the batched decode's fused kernel */
    for (size_t ti = 0; ti < 5; ti++) {
        int64_t K = 512, N = 100; /* a partial last block of rows */
        struct tt *g = tt_weight(types[ti], K, N, 0, "gate");
        struct tt *u = tt_weight(types[ti], K, N, 0, "up");
        for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
            char what[96];
            snprintf(what, sizeof what, "ffn_gate_up %s nt=%d", tn(types[ti]), nts[m]);
            gate_up_case(g, u, K, N, nts[m], "ffn_gate_up", what,
                         is_float(types[ti]) ? TOL_FDOT : TOL_Q8ACT);
        }
    }
    print_stats("ffn_gate_up");
}
END_TEST

/* Catches the single-token K-quant products (matvec.cu's two-row kernel,
 * the gate/up pair, the product + addend) going wrong past a thread's
 * first unit: K = 9472 gives 148 units a row against at most 128
 * threads, so some threads take a second, lone unit; q6_K rows of 37
 * blocks (7770 bytes) start 2 bytes into a word on every other row; the
 * gate/up pair with K = 2560 on 17,000 rows runs 32 threads a row over
 * 40 units, several rows a block. The shapes of the tests above give
 * every thread at most one unit. */
START_TEST(matvec_long_rows)
{
    UNDER_TEST(UT_CUDA);
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K};
    const int64_t shapes[][2] = {{9472, 37}, {2560, 17000}};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        for (size_t si = 0; si < 2; si++) {
            const int64_t K = shapes[si][0], N = shapes[si][1];
            char what[112];
            struct tt *w = tt_weight(types[ti], K, N, 0, "w");
            struct tt *u = tt_weight(types[ti], K, N, 0, "up");
            snprintf(what, sizeof what, "long-row mul_mat %s K=%lld N=%lld", tn(types[ti]),
                     (long long)K, (long long)N);
            mul_mat_case(w, K, N, 1, 0, "matvec_units", what, TOL_Q8ACT);
            snprintf(what, sizeof what, "long-row ffn_gate_up %s K=%lld N=%lld", tn(types[ti]),
                     (long long)K, (long long)N);
            gate_up_case(w, u, K, N, 1, "matvec_units", what, TOL_Q8ACT);
            struct tt *x = tt_new(MINFER_TYPE_F32, K, 1, 1, 1, 0);
            tt_place(x, NULL);
            struct tt *a = tt_new(MINFER_TYPE_F32, N, 1, 1, 1, 0);
            tt_place(a, NULL);
            snprintf(what, sizeof what, "long-row mul_mat_add %s K=%lld N=%lld in place",
                     tn(types[ti]), (long long)K, (long long)N);
            run_mul_mat_add(w, x, a, a, what);
            compare(a, "matvec_units", what, TOL_Q8ACT);
        }
    }
    print_stats("matvec_units");
}
END_TEST

/* Catches the batched-decode dispatch that sends 3..8-token products on
 * 7B-sized matrices to gemm-i8.cu instead of the matvec
 * (cuda_matvec_tokens): wrong activation groups at those counts, the ADD
 * epilogue or SwiGLU fusion lost on the way, or a token count where the
 * two families disagree on who quantizes. The small shapes of the tests
 * above never leave the matvec below 9 tokens. */
START_TEST(decode_gemm_crossover)
{
    UNDER_TEST(UT_CUDA);
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
    int nts[] = {2, 3, 5, 6, 8};
    const int64_t K = 3584, N = 3584;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        struct tt *w = tt_weight(types[ti], K, N, 0, "w");
        for (size_t m = 0; m < sizeof nts / sizeof nts[0]; m++) {
            int M = nts[m];
            char what[112];
            snprintf(what, sizeof what, "crossover mul_mat %s K=N=3584 nt=%d", tn(types[ti]), M);
            mul_mat_case(w, K, N, M, 0, "decode_crossover", what, TOL_Q8ACT);
            if (M != 3 && M != 8)
                continue;
            struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
            tt_place(x, NULL);
            struct tt *a = tt_new(MINFER_TYPE_F32, N, M, 1, 1, 0);
            tt_place(a, NULL);
            snprintf(what, sizeof what, "crossover mul_mat_add %s nt=%d in place", tn(types[ti]),
                     M);
            run_mul_mat_add(w, x, a, a, what);
            compare(a, "decode_crossover", what, TOL_Q8ACT);
            struct tt *u = tt_weight(types[ti], K, N, 0, "up");
            struct tt *dst = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
            struct minfer_node n = {.op = MINFER_OP_FFN_GATE_UP};
            struct tt *src[3] = {w, u, x};
            snprintf(what, sizeof what, "crossover ffn_gate_up %s nt=%d", tn(types[ti]), M);
            run_both(&n, src, 3, dst, what);
            compare(dst, "decode_crossover", what, TOL_Q8ACT);
        }
    }
    print_stats("decode_gemm_crossover");
}
END_TEST

/* Catches a GEMM epilogue (k_gemm's KGEMM_ADD for MUL_MAT_ADD, and
 * KGEMM_SILU_MUL for FFN_GATE_UP's up product) that is only right in the
 * kernel and split count the per-shape choice picks: every prefill GEMM
 * variant is forced in turn, with one split (the kernel's own store) and
 * with several (the fixed-order reduction's), on a residual, a bias and
 * an in-place addend, and on float weights (two passes, the epilogue on
 * the second). */
START_TEST(gemm_epilogues)
{
    UNDER_TEST(UT_CUDA);
    typedef void (*tune_fn)(int bk, int splits, int bn);
    tune_fn tune = (tune_fn)P[0].t->get_proc("minfer_cuda_test_tune_gemm");
    ck_assert_msg(tune, "the CUDA plugin lacks minfer_cuda_test_tune_gemm");
    static const int variants[][3] = {{64, 1, 128},  {64, 3, 128},  {0, 1, 16},   {0, 2, 16},
                                      {0, 1, 64},    {0, 1, 1064},  {0, 2, 1064}, {0, 1, 1128},
                                      {0, 2, 1128},  {0, 1, 2256},  {0, 2, 2256}, {0, 1, 4016},
                                      {0, 2, 4016},  {0, 1, 4064}};
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_F16};
    int Ms[] = {9, 67};
    const int64_t K = 512, N = 200;
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        tune(variants[v][0], variants[v][1], variants[v][2]);
        for (size_t ti = 0; ti < 2; ti++) {
            struct tt *w = tt_weight(types[ti], K, N, 0, "w");
            struct tt *u = tt_weight(types[ti], K, N, 0, "up");
            double tol = is_float(types[ti]) ? TOL_FDOT : TOL_Q8ACT;
            for (size_t m = 0; m < 2; m++) {
                int M = Ms[m];
                struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
                tt_place(x, NULL);
                char what[128];
                for (int kind = 0; kind < 3; kind++) { /* residual, bias, in place */
                    struct tt *a = tt_new(MINFER_TYPE_F32, N, kind == 1 ? 1 : M, 1, 1, 0);
                    tt_place(a, NULL);
                    struct tt *dst = kind == 2 ? a : tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
                    snprintf(what, sizeof what, "gemm epilogue add bk=%d splits=%d bn=%d %s nt=%d %s",
                             variants[v][0], variants[v][1], variants[v][2], tn(types[ti]), M,
                             kind == 0 ? "residual" : kind == 1 ? "bias" : "in place");
                    run_mul_mat_add(w, x, a, dst, what);
                    compare(dst, "gemm_epilogue", what, tol);
                }
                struct tt *dst = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
                struct minfer_node n = {.op = MINFER_OP_FFN_GATE_UP};
                struct tt *src[3] = {w, u, x};
                snprintf(what, sizeof what, "gemm epilogue swiglu bk=%d splits=%d bn=%d %s nt=%d",
                         variants[v][0], variants[v][1], variants[v][2], tn(types[ti]), M);
                run_both(&n, src, 3, dst, what);
                compare(dst, "gemm_epilogue", what, tol);
            }
        }
    }
    tune(0, 0, 0);
    print_stats("gemm_epilogues");
}
END_TEST

/* Catches a one-launch gate/up GEMM (k_gemm_glu: warpgroup 0 on gate
 * rows, warpgroup 1 on the same up rows, handed over in shared memory)
 * that pairs the wrong rows or threads, swaps gate and up, loses a row or
 * token tail, or breaks in either token tile; its tiles of a last,
 * partial wave run in parts of K (gemm-wg.cu's wtail) that a wrong part
 * index, sum order, counter or tail-tile position would break, alone
 * (every tile of a small pair) and after whole tiles (a pair of 141
 * 64-row tiles on 132 SMs); and, on a 9.0 device with the sm_90a
 * kernels, a dispatch that never takes either. */
START_TEST(ffn_gate_up_one_launch)
{
    UNDER_TEST(UT_CUDA);
    typedef void (*tune_fn)(int bk, int splits, int bn);
    typedef uint64_t (*count_fn)(void);
    typedef const char *(*archs_fn)(void);
    tune_fn tune = (tune_fn)P[0].t->get_proc("minfer_cuda_test_tune_gemm");
    count_fn glu = (count_fn)P[0].t->get_proc("minfer_cuda_glu_gemms");
    count_fn tails = (count_fn)P[0].t->get_proc("minfer_cuda_glu_tails");
    archs_fn archs = (archs_fn)P[0].t->get_proc("minfer_cuda_built_archs");
    ck_assert_msg(tune && glu && tails && archs,
                  "the CUDA plugin lacks its tune, glu, glu tails or archs hooks");
    struct minfer_device_info d = {.struct_size = sizeof d};
    ck_assert_int_eq(P[0].t->device_info(0, &d), MINFER_OK);
    uint64_t before = glu();
    static const int bns[] = {0, 1064, 1128}; /* by shape, 64- and 128-token tiles */
    uint32_t types[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
    int Ms[] = {40, 67, 200};
    const int64_t K = 768, N = 200; /* 3 chunks; 200 rows = 3 x 64 + 8 */
    for (size_t b = 0; b < sizeof bns / sizeof bns[0]; b++) {
        tune(0, bns[b] ? 1 : 0, bns[b]);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            struct tt *g = tt_weight(types[ti], K, N, 0, "gate");
            struct tt *u = tt_weight(types[ti], K, N, 0, "up");
            for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
                char what[96];
                snprintf(what, sizeof what, "one-launch ffn_gate_up bn=%d %s nt=%d", bns[b],
                         tn(types[ti]), Ms[m]);
                gate_up_case(g, u, K, N, Ms[m], "ffn_gate_up_one_launch", what, TOL_Q8ACT);
            }
        }
    }
    tune(0, 0, 0);
    /* automatic tiles on 8 chunks of K: the split tail (q4_K: 16-byte
     * aligned loads; q6_K: the unaligned ones) */
    uint64_t tails_before = tails();
    uint32_t ttypes[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K};
    const int64_t tK = 2048, tN[] = {200, 64 * 140 + 8};
    for (size_t ti = 0; ti < sizeof ttypes / sizeof ttypes[0]; ti++)
        for (size_t ni = 0; ni < 2; ni++) {
            struct tt *g = tt_weight(ttypes[ti], tK, tN[ni], 0, "gate");
            struct tt *u = tt_weight(ttypes[ti], tK, tN[ni], 0, "up");
            for (int M = 40; M <= 67; M += 27) {
                char what[96];
                snprintf(what, sizeof what, "one-launch ffn_gate_up split tail %s N=%lld nt=%d",
                         tn(ttypes[ti]), (long long)tN[ni], M);
                gate_up_case(g, u, tK, tN[ni], M, "ffn_gate_up_one_launch", what, TOL_Q8ACT);
            }
        }
    printf("ffn_gate_up_one_launch: %llu gate/up GEMM launches, %llu with split tails "
           "(cc %d.%d)\n",
           (unsigned long long)(glu() - before), (unsigned long long)(tails() - tails_before),
           d.cc_major, d.cc_minor);
    if (d.cc_major == 9 && d.cc_minor == 0 && strstr(archs(), "90")) {
        ck_assert_msg(glu() > before, "no gate/up pair ran as one launch on a 9.0 device");
        ck_assert_msg(tails() > tails_before, "no gate/up pair split its last wave's tiles");
    }
    print_stats("ffn_gate_up_one_launch");
}
END_TEST

/* Catches the gate/up pair's f16 outputs (k_gemm_glu's xo, which the down
 * product reads as its activations instead of converting them) in the
 * wrong unit, element or token, written past the last token, missing
 * from the split tail's stores, or read after they went stale; and a
 * down product that misses them on a 9.0 device with the sm_90a kernels.
 * The down product right after the pair must give the very bits of the
 * same product on a copy of the pair's f32 output (which converts), and
 * match the CPU; after an in-place write to that output, the CPU's
 * result again. Shapes: the split tail alone and after whole tiles, the
 * 64- and 128-token tiles, a partial token group and a second token
 * tile. */
START_TEST(down_reads_gate_up_outputs)
{
    UNDER_TEST(UT_CUDA);
    typedef uint64_t (*count_fn)(void);
    typedef const char *(*archs_fn)(void);
    typedef void (*tune_fn)(int bk, int splits, int bn);
    count_fn shared = (count_fn)P[0].t->get_proc("minfer_cuda_shared_x");
    archs_fn archs = (archs_fn)P[0].t->get_proc("minfer_cuda_built_archs");
    tune_fn tune = (tune_fn)P[0].t->get_proc("minfer_cuda_test_tune_gemm");
    ck_assert_msg(shared && archs && tune,
                  "the CUDA plugin lacks its shared_x, archs or tune hooks");
    struct minfer_device_info d = {.struct_size = sizeof d};
    ck_assert_int_eq(P[0].t->device_info(0, &d), MINFER_OK);
    const bool wg = d.cc_major == 9 && d.cc_minor == 0 && strstr(archs(), "90");
    tune(0, 0, 0);
    static const struct {
        uint32_t pair, down;
        int64_t K, N;
        int M;
    } cases[] = {
        {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, 2048, 256, 40},  /* split tail only */
        {MINFER_TYPE_Q4_K, MINFER_TYPE_Q4_K, 2048, 8704, 40}, /* whole tiles, then a split tail */
        {MINFER_TYPE_Q8_0, MINFER_TYPE_Q8_0, 512, 512, 67},   /* 128 tokens, 3 in the last group */
        {MINFER_TYPE_Q5_K, MINFER_TYPE_Q5_K, 768, 768, 200},  /* a second token tile */
        {MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0, 256, 1024, 130}, /* 2 tokens in the second tile */
    };
    const int64_t ND = 320; /* the down product's rows: 2.5 blocks */
    int hits = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t K = cases[c].K, N = cases[c].N;
        const int M = cases[c].M;
        struct tt *g = tt_weight(cases[c].pair, K, N, 0, "gate");
        struct tt *u = tt_weight(cases[c].pair, K, N, 0, "up");
        struct tt *w = tt_weight(cases[c].down, N, ND, 0, "down");
        struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
        tt_place(x, NULL);
        struct tt *a = tt_new(MINFER_TYPE_F32, N, M, 1, 1, 0);
        tt_place(a, NULL);
        /* every output before the pair: a buffer write drops what it left */
        struct tt *h = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
        struct tt *y = tt_out(MINFER_TYPE_F32, ND, M, 1, 1, 0);
        struct tt *y2 = tt_out(MINFER_TYPE_F32, ND, M, 1, 1, 0);
        struct tt *y3 = tt_out(MINFER_TYPE_F32, ND, M, 1, 1, 0);
        char what[128];
        snprintf(what, sizeof what, "%s pair K=%lld N=%lld nt=%d, %s down", tn(cases[c].pair),
                 (long long)K, (long long)N, M, tn(cases[c].down));
        struct minfer_node pair = {.op = MINFER_OP_FFN_GATE_UP}, mm = {.op = MINFER_OP_MUL_MAT};
        struct tt *ps[3] = {g, u, x}, *ds[2] = {w, h};
        run_both(&pair, ps, 3, h, what);
        uint64_t before = shared();
        run_both(&mm, ds, 2, y, what);
        bool hit = shared() > before;
        hits += hit;
        if (wg)
            ck_assert_msg(hit, "%s: the down product converted the pair's outputs again", what);
        compare(h, "gate_up_outputs", what, TOL_Q8ACT);
        compare(y, "down_after_pair", what, TOL_Q8ACT);

        /* the same product on a copy of h converts; its bits must be y's */
        struct tt *hc = tt_new(MINFER_TYPE_F32, N, M, 1, 1, 0);
        memcpy(hc->host, tt_read(h, 0), hc->bytes);
        tt_place(hc, NULL);
        struct tt *cs[2] = {w, hc};
        run_both(&mm, cs, 2, y2, what);
        ck_assert_msg(memcmp(tt_read(y, 0), tt_read(y2, 0), (size_t)(ND * M) * sizeof(float)) == 0,
                      "%s: the down product on the pair's f16 outputs differs from the one "
                      "on its converted f32 outputs",
                      what);

        /* h += a in place, then the down product: the CPU's, not the stale one */
        struct minfer_node add = {.op = MINFER_OP_ADD};
        struct tt *as[2] = {h, a};
        run_both(&pair, ps, 3, h, what);
        run_both(&add, as, 2, h, what);
        run_both(&mm, ds, 2, y3, what);
        snprintf(what + strlen(what), sizeof what - strlen(what), ", after h += a");
        compare(y3, "down_after_pair", what, TOL_Q8ACT);
    }
    printf("down_reads_gate_up_outputs: %d of %zu down products read the pair's outputs "
           "(cc %d.%d)\n",
           hits, sizeof cases / sizeof cases[0], d.cc_major, d.cc_minor);
    print_stats("down_reads_gate_up_outputs");
}
END_TEST

/* Catches activations converted for one product (f16 for the wgmma GEMM,
 * q8_1 for gemm-i8 and the matvec) and reused by the next product of the
 * same x after x changed: written in place by a node, or by a buffer
 * write between nodes. The CPU sees every change; a stale reuse would
 * multiply the old x. Also that products of an unchanged x do share. */
START_TEST(shared_activations_follow_writes)
{
    UNDER_TEST(UT_CUDA);
    typedef uint64_t (*count_fn)(void);
    count_fn shared = (count_fn)P[0].t->get_proc("minfer_cuda_shared_x");
    ck_assert_msg(shared, "the CUDA plugin lacks minfer_cuda_shared_x");
    const int64_t K = 512, N = 256;
    int Ms[] = {1, 16, 67};
    for (size_t m = 0; m < sizeof Ms / sizeof Ms[0]; m++) {
        int M = Ms[m];
        struct tt *w1 = tt_weight(MINFER_TYPE_Q4_K, K, N, 0, "w1");
        struct tt *w2 = tt_weight(MINFER_TYPE_Q4_K, K, N, 0, "w2");
        struct tt *x = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
        tt_place(x, NULL);
        struct tt *a = tt_new(MINFER_TYPE_F32, K, M, 1, 1, 0);
        tt_place(a, NULL);
        char what[96];
        struct minfer_node mm = {.op = MINFER_OP_MUL_MAT};
        struct tt *s1[2] = {w1, x}, *s2[2] = {w2, x};
        /* both outputs first: allocating one between the products would
         * drop the shared activations (a buffer write) */
        struct tt *y = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
        struct tt *y2 = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
        uint64_t before = shared();
        snprintf(what, sizeof what, "shared x nt=%d: first product", M);
        run_both(&mm, s1, 2, y, what);
        snprintf(what, sizeof what, "shared x nt=%d: second product of the same x", M);
        run_both(&mm, s2, 2, y2, what);
        ck_assert_msg(shared() > before, "nt=%d: the second product converted x again", M);
        compare(y, "shared_x", "first product", TOL_Q8ACT);
        compare(y2, "shared_x", what, TOL_Q8ACT);

        struct minfer_node add = {.op = MINFER_OP_ADD};
        struct tt *sa[2] = {x, a};
        snprintf(what, sizeof what, "shared x nt=%d: x += a in place", M);
        run_both(&add, sa, 2, x, what);
        y = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
        snprintf(what, sizeof what, "shared x nt=%d: product after an in-place write", M);
        run_both(&mm, s1, 2, y, what);
        compare(y, "shared_x", what, TOL_Q8ACT);

        float *h = (float *)x->host; /* new values through a buffer write */
        for (int64_t i = 0; i < K * M; i++)
            h[i] = -0.5f * h[i] + 0.25f;
        for (int i = 0; i < 2; i++)
            ck_assert_int_eq(P[i].t->buffer_write(P[i].be, x->t[i].data, x->host, x->bytes),
                             MINFER_OK);
        y = tt_out(MINFER_TYPE_F32, N, M, 1, 1, 0);
        snprintf(what, sizeof what, "shared x nt=%d: product after a buffer write", M);
        run_both(&mm, s2, 2, y, what);
        compare(y, "shared_x", what, TOL_Q8ACT);
    }
    print_stats("shared_x");
}
END_TEST

/* Catches: a store that writes cells other than the named ones, a Q8_0
 * quantizer that differs from the CPU's, strided source rows. */
START_TEST(kv_store_layouts)
{
    UNDER_TEST(_i);
    uint32_t kv[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        for (int nt = 1; nt <= 9; nt += 8) {
            int64_t row = 256, cells = 40;
            struct tt *cache = tt_new(kv[k], row, cells, 1, 1, 0);
            tt_place(cache, NULL); /* prior contents must survive */
            struct tt *x = tt_new(MINFER_TYPE_F32, row, nt, 1, 1, 64);
            tt_place(x, NULL);
            struct tt *ids = tt_new(MINFER_TYPE_I32, nt, 1, 1, 1, 0);
            for (int t = 0; t < nt; t++)
                tt_i32(ids)[t] = (int32_t)(3 + 4 * t);
            tt_place(ids, NULL);
            struct minfer_node n = {.op = MINFER_OP_KV_STORE};
            struct tt *src[2] = {x, ids};
            char what[64];
            snprintf(what, sizeof what, "kv_store %s nt=%d", tn(kv[k]), nt);
            run_both(&n, src, 2, cache, what);
            compare(cache, "kv_store", what, TOL_F32);
        }
    }
    print_stats("kv_store");
}
END_TEST

/* One ATTENTION node over caches kc and vc (ncell rows of kv type): nt
 * query tokens at the last positions of kv_len visible cells, run on the
 * plugin under test and the CPU reference and compared. */
static void attention_case(int under, uint32_t kv, struct tt *kc, struct tt *vc, int hd, int nh,
                           int nkv, int ncell, int kvlen, int nt, int window)
{
    struct tt *q = tt_new(MINFER_TYPE_F32, hd, nh, nt, 1, 0);
    struct tt *len = tt_new(MINFER_TYPE_I32, 1, 1, 1, 1, 0);
    struct tt *pos = tt_new(MINFER_TYPE_I32, nt, 1, 1, 1, 0);
    tt_i32(len)[0] = kvlen;
    for (int t = 0; t < nt; t++)
        tt_i32(pos)[t] = kvlen - nt + t;
    tt_place(q, NULL);
    tt_place(len, NULL);
    tt_place(pos, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, hd, nh, nt, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_ATTENTION};
    n.iparams[0] = nkv;
    n.iparams[1] = window;
    n.fparams[0] = 1.0f / sqrtf((float)hd);
    struct tt *src[5] = {q, kc, vc, len, pos};
    char what[128];
    snprintf(what, sizeof what, "attention %s hd=%d h=%d/%d cells=%d kv_len=%d nt=%d window=%d",
             tn(kv), hd, nh, nkv, ncell, kvlen, nt, window);
    run_both(&n, src, 5, dst, what);
    compare(dst, "attention", what, tol_attn(under, kv, hd, ncell, nt));
}

/* attention_case over new random K and V caches of kv type (ncell rows
 * of nkv heads of hd values). */
static void attention_fresh(int under, uint32_t kv, int hd, int nh, int nkv, int ncell,
                            int kvlen, int nt, int window)
{
    struct tt *kc = tt_new(kv, (int64_t)hd * nkv, ncell, 1, 1, 0);
    struct tt *vc = tt_new(kv, (int64_t)hd * nkv, ncell, 1, 1, 0);
    tt_place(kc, NULL);
    tt_place(vc, NULL);
    attention_case(under, kv, kc, vc, hd, nh, nkv, ncell, kvlen, nt, window);
}

/* Catches: causal masking off by one, kv_len not read at run time, GQA
 * head mapping, split-K combine errors (long KV spreads over many
 * splits), each cache layout, prefill with many query tokens (the tiled
 * kernel: a dropped partial tile of queries or cells), a sliding window
 * ignored or cut one cell off. */
START_TEST(attention_layouts)
{
    UNDER_TEST(_i);
    /* hd, n_head, n_kv, n_cells, kv_len, nt */
    /* nt > 8 with hd 64/128 runs the tiled prefill kernel: a whole prompt
     * from an empty cache (517 tokens, a partial last query tile), a
     * continuation after 100 cached cells, and rows of one KV head (136-byte
     * q8_0 rows) */
    /* then the tensor-core tiles (64 queries x 64 cells): a query tile and
     * a cell tile one past a multiple (65 / 129), kv_len one short of a
     * tile, hd 64 with a group of 7; head sizes without a tensor-core
     * kernel (32, 96, 256: the per-head split kernel for many tokens, the
     * decode kernel's partial and double 128-wide chunks for few); a group
     * of 10 (two chunks of query heads in the decode kernel) and of 1;
     * past 512 cells (F16: the tensor-core decode kernel) a group of 20
     * (two chunks of 16 query heads, the second partial), a short
     * sequence in a large cache (most splits empty) and 8 tokens of a
     * group of 7; at most 256 cells (F16: one split writing the rows) a
     * group of 20 over two tokens */
    int cfg[][6] = {{128, 8, 2, 64, 1, 1},      {128, 8, 2, 64, 37, 1},   {128, 8, 2, 64, 37, 5},
                    {128, 8, 2, 1000, 999, 2},  {64, 4, 4, 4100, 4097, 1}, {128, 8, 1, 300, 33, 33},
                    {128, 28, 4, 512, 300, 9},  {128, 8, 2, 4100, 2500, 3},
                    {64, 14, 2, 600, 517, 517}, {128, 8, 2, 300, 200, 100},
                    {128, 4, 4, 64, 40, 40},    {128, 4, 2, 200, 129, 65},
                    {64, 7, 1, 300, 191, 127},  {128, 2, 1, 130, 129, 129},
                    {32, 4, 2, 300, 250, 40},   {96, 6, 2, 300, 280, 37},
                    {256, 4, 2, 700, 650, 20},  {256, 4, 2, 700, 650, 2},
                    {96, 6, 3, 300, 280, 1},    {64, 40, 4, 500, 400, 2},
                    {128, 5, 5, 300, 299, 3},   {64, 40, 4, 500, 400, 70},
                    {64, 40, 2, 1000, 777, 2},  {128, 28, 4, 4100, 50, 1},
                    {128, 7, 1, 2000, 1999, 8}, {128, 40, 2, 200, 150, 2}};
    /* sliding windows (iparams[1]): a prefill whose rows start in different
     * cell tiles, a window longer than the prefix, decodes */
    int win[][7] = {{128, 8, 2, 600, 517, 517, 128}, {64, 14, 2, 600, 517, 9, 100},
                    {128, 28, 4, 4100, 4097, 1, 1000}, {64, 4, 2, 300, 90, 90, 200},
                    {128, 4, 2, 300, 299, 70, 33}};
    int ncfg = (int)(sizeof cfg / sizeof cfg[0]), nwin = (int)(sizeof win / sizeof win[0]);
    uint32_t kv[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        for (int c = 0; c < ncfg + nwin; c++) {
            const int *cf = c < ncfg ? cfg[c] : win[c - ncfg];
            int hd = cf[0], nh = cf[1], nkv = cf[2], ncell = cf[3];
            int kvlen = cf[4], nt = cf[5], window = c < ncfg ? 0 : cf[6];
            attention_fresh(_i, kv[k], hd, nh, nkv, ncell, kvlen, nt, window);
        }
    }
    print_stats("attention");
}
END_TEST

/* Catches a tensor-core prefill attention variant that is only right
 * when the default picks it (its register budget, tile shapes or staging
 * differ): each is forced in turn through the plugin's test hook on
 * whole prompts with partial query and cell tiles, a continuation, a
 * window and every cache type, and must match the CPU like the default. */
START_TEST(attention_prefill_variants)
{
    UNDER_TEST(UT_CUDA);
    typedef void (*tune_fn)(int v);
    tune_fn tune = (tune_fn)P[0].t->get_proc("minfer_cuda_test_tune_attn_prefill");
    ck_assert_msg(tune, "the CUDA plugin lacks minfer_cuda_test_tune_attn_prefill");
    static const int variants[] = {1, 3, 9};
    /* hd, n_head, n_kv, n_cells, kv_len, nt, window */
    static const int cfg[][7] = {{128, 8, 2, 600, 517, 517, 0}, {64, 14, 2, 600, 517, 517, 0},
                                 {128, 4, 2, 300, 299, 130, 0}, {64, 7, 1, 300, 191, 127, 0},
                                 {128, 8, 2, 600, 517, 517, 128}};
    uint32_t kv[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        tune(variants[v]);
        for (int k = 0; k < 3; k++) {
            for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
                const int *cf = cfg[c];
                attention_fresh(UT_CUDA, kv[k], cf[0], cf[1], cf[2], cf[3], cf[4], cf[5], cf[6]);
            }
        }
    }
    tune(0);
    print_stats("attention_prefill_variants");
}
END_TEST

/* Catches: index arithmetic that overflows or drifts at long contexts
 * (32k cells), a split share or tile count wrong when the visible length
 * is not a multiple of it, the causal limit of a long prefill's last
 * rows. Per cache type: decodes at 32,768 and 32,700 visible cells, a
 * 3-token decode step, and the last 130 tokens of a 32,768-token prompt
 * (two whole query tiles and a partial one, against 512 cell tiles). */
START_TEST(attention_long)
{
    UNDER_TEST(_i);
    /* hd, n_head, n_kv (hd * n_kv = 256: one cache per type), kv_len, nt */
    enum { CELLS = 32768, ROW = 256 };
    /* hd, n_head, n_kv, kv_len, nt, sliding window */
    int cfg[][6] = {{128, 14, 2, 32768, 1, 0}, {128, 14, 2, 32700, 1, 0}, {64, 8, 4, 32767, 3, 0},
                    {128, 4, 2, 32768, 130, 0}, {128, 14, 2, 32768, 1, 4096},
                    {128, 4, 2, 32768, 130, 1024}};
    uint32_t kv[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        struct tt *kc = tt_new(kv[k], ROW, CELLS, 1, 1, 0);
        struct tt *vc = tt_new(kv[k], ROW, CELLS, 1, 1, 0);
        tt_place(kc, NULL);
        tt_place(vc, NULL);
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            int hd = cfg[c][0], nh = cfg[c][1], nkv = cfg[c][2], kvlen = cfg[c][3];
            int nt = cfg[c][4], window = cfg[c][5];
            attention_case(_i, kv[k], kc, vc, hd, nh, nkv, CELLS, kvlen, nt, window);
        }
    }
    print_stats("attention");
}
END_TEST

/* Catches: ATTENTION_LISTS reading a wrong cell (the list indirection),
 * another list's cells, entries outside a query's range (past its end or,
 * with a window, before its first), or a split over long lists combined
 * wrongly; lists hold scattered cells in random
 * order, so a kernel that assumes cell == position fails. */
START_TEST(attention_lists_layouts)
{
    UNDER_TEST(_i);
    /* hd, n_head, n_kv_head, n_cells, n_lists, list length, nt */
    int cfg[][7] = {{128, 8, 2, 600, 3, 256, 5},   {64, 4, 4, 1100, 2, 1024, 2},
                    {128, 28, 4, 300, 8, 64, 8},   {128, 8, 2, 2100, 4, 2048, 33},
                    {64, 14, 2, 700, 1, 512, 1},   {128, 8, 1, 200, 16, 32, 16},
                    {128, 28, 4, 300, 4, 200, 4}}; /* a 7B batched decode, last split partial */
    uint32_t kv[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
            int hd = cfg[c][0], nh = cfg[c][1], nkv = cfg[c][2], ncell = cfg[c][3];
            int nl = cfg[c][4], len = cfg[c][5], nt = cfg[c][6];
            struct tt *q = tt_new(MINFER_TYPE_F32, hd, nh, nt, 1, 0);
            struct tt *kc = tt_new(kv[k], (int64_t)hd * nkv, ncell, 1, 1, 0);
            struct tt *vc = tt_new(kv[k], (int64_t)hd * nkv, ncell, 1, 1, 0);
            struct tt *vis = tt_new(MINFER_TYPE_I32, 2, nt, 1, 1, 0);
            struct tt *ql = tt_new(MINFER_TYPE_I32, nt, 1, 1, 1, 0);
            struct tt *ls = tt_new(MINFER_TYPE_I32, len, nl, 1, 1, 0);
            /* each list: distinct cells in a random order */
            int32_t *perm = malloc(sizeof *perm * (size_t)ncell);
            ck_assert_ptr_nonnull(perm);
            for (int l = 0; l < nl; l++) {
                for (int i = 0; i < ncell; i++)
                    perm[i] = i;
                for (int i = ncell - 1; i > 0; i--) {
                    int j = (int)(rnd() % (uint32_t)(i + 1)), x = perm[i];
                    perm[i] = perm[j];
                    perm[j] = x;
                }
                memcpy(tt_i32(ls) + (size_t)l * len, perm, sizeof *perm * (size_t)len);
            }
            free(perm);
            for (int t = 0; t < nt; t++) { /* odd queries: a window (a later first entry) */
                int end = t == 0 ? len : 1 + (int)(rnd() % (uint32_t)len);
                tt_i32(ql)[t] = t % nl;
                tt_i32(vis)[2 * t] = t % 2 ? (int)(rnd() % (uint32_t)end) : 0;
                tt_i32(vis)[2 * t + 1] = end;
            }
            tt_place(q, NULL);
            tt_place(kc, NULL);
            tt_place(vc, NULL);
            tt_place(vis, NULL);
            tt_place(ql, NULL);
            tt_place(ls, NULL);
            struct tt *dst = tt_out(MINFER_TYPE_F32, hd, nh, nt, 1, 0);
            struct minfer_node n = {.op = MINFER_OP_ATTENTION_LISTS};
            n.iparams[0] = nkv;
            n.fparams[0] = 1.0f / sqrtf((float)hd);
            struct tt *src[6] = {q, kc, vc, vis, ql, ls};
            char what[160];
            snprintf(what, sizeof what,
                     "attention_lists %s hd=%d h=%d/%d cells=%d lists=%dx%d nt=%d", tn(kv[k]),
                     hd, nh, nkv, ncell, nl, len, nt);
            run_both(&n, src, 6, dst, what);
            compare(dst, "attention", what, TOL_ATTN);
        }
    }
    print_stats("attention_lists");
}
END_TEST

/* Catches: device OOM that crashes or poisons the instance; the next op
 * must still run and be right. */
START_TEST(oom_then_next_op_runs)
{
    UNDER_TEST(UT_CUDA);
    void *p = NULL;
    size_t huge = (size_t)1 << 50;
    minfer_status st = P[0].t->buffer_alloc(P[0].be, huge, &p);
    ck_assert_int_eq(st, MINFER_ERR_DEVICE_OOM);
    ck_assert_ptr_null(p);
    const char *e = P[0].t->last_error(P[0].be);
    printf("OOM message: %s\n", e);
    ck_assert_msg(strstr(e, "1125899906842624") != NULL, "OOM message does not name the request: %s", e);
    struct tt *a = tt_new(MINFER_TYPE_F32, 77, 3, 1, 1, 0), *b = tt_new(MINFER_TYPE_F32, 77, 3, 1, 1, 0);
    tt_place(a, NULL);
    tt_place(b, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, 77, 3, 1, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_ADD};
    struct tt *src[2] = {a, b};
    run_both(&n, src, 2, dst, "add after OOM");
    compare(dst, "add", "add after OOM", TOL_F32);
}
END_TEST

/* Catches: an out-of-range id read silently (or crashing); the error must
 * surface at sync, and the instance must keep working. */
START_TEST(bad_id_reported_at_sync)
{
    UNDER_TEST(UT_CUDA);
    struct tt *tab = tt_new(MINFER_TYPE_F32, 64, 4, 1, 1, 0);
    tt_place(tab, NULL);
    struct tt *ids = tt_new(MINFER_TYPE_I32, 2, 1, 1, 1, 0);
    tt_i32(ids)[0] = 1;
    tt_i32(ids)[1] = 4; /* out of [0, 4) */
    tt_place(ids, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, 64, 2, 1, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_GET_ROWS, .n_src = 2, .label = "bad ids"};
    n.src[0] = &tab->t[0];
    n.src[1] = &ids->t[0];
    n.dst = &dst->t[0];
    ck_assert_int_eq(P[0].t->execute_node(P[0].be, &n), MINFER_OK);
    minfer_status st = P[0].t->synchronize(P[0].be);
    ck_assert_int_eq(st, MINFER_ERR_RANGE);
    printf("bad id message: %s\n", P[0].t->last_error(P[0].be));
    tt_i32(ids)[1] = 3;
    ck_assert_int_eq(P[0].t->buffer_write(P[0].be, ids->t[0].data, ids->host, 8), MINFER_OK);
    ck_assert_int_eq(P[0].t->execute_node(P[0].be, &n), MINFER_OK);
    ck_assert_int_eq(P[0].t->synchronize(P[0].be), MINFER_OK);
}
END_TEST

/* Catches: a registry that uploads the same weight twice, or returns the
 * old address for different bytes under the same name. */
START_TEST(weight_registry_reuses)
{
    UNDER_TEST(_i);
    uint8_t buf[4096], other[4096];
    for (int i = 0; i < 4096; i++) {
        buf[i] = (uint8_t)rnd();
        other[i] = (uint8_t)(buf[i] ^ 0x5a);
    }
    struct minfer_weight_desc w = {.name = "blk.0.attn_q.weight", .type = MINFER_TYPE_F32,
                                   .ne = {1024, 1, 1, 1}, .host_data = buf, .size = sizeof buf};
    void *a = NULL, *b = NULL, *c = NULL;
    ck_assert_int_eq(P[0].t->weight_register(P[0].be, &w, &a), MINFER_OK);
    ck_assert_int_eq(P[0].t->weight_register(P[0].be, &w, &b), MINFER_OK);
    ck_assert_ptr_eq(a, b);
    w.host_data = other;
    ck_assert_int_eq(P[0].t->weight_register(P[0].be, &w, &c), MINFER_OK);
    ck_assert_ptr_ne(a, c);
    uint8_t back[4096];
    ck_assert_int_eq(P[0].t->buffer_read(P[0].be, back, a, sizeof back), MINFER_OK);
    ck_assert_int_eq(memcmp(back, buf, sizeof buf), 0);
}
END_TEST

/* Catches: supports_op accepting what execute_node then cannot run, and
 * an execute error that does not name the node. */
START_TEST(unsupported_node_is_refused_by_both)
{
    UNDER_TEST(_i);
    struct tt *a = tt_new(MINFER_TYPE_F32, 16, 2, 1, 1, 0), *b = tt_new(MINFER_TYPE_F32, 8, 2, 1, 1, 0);
    tt_place(a, NULL);
    tt_place(b, NULL);
    struct tt *dst = tt_out(MINFER_TYPE_F32, 16, 2, 1, 1, 0);
    struct minfer_node n = {.op = MINFER_OP_ADD, .n_src = 2, .label = "blk.9.bad_add"};
    n.src[0] = &a->t[0];
    n.src[1] = &b->t[0]; /* ne0 8 vs 16: invalid */
    n.dst = &dst->t[0];
    ck_assert(!P[0].t->supports_op(P[0].be, &n));
    ck_assert_int_ne(P[0].t->execute_node(P[0].be, &n), MINFER_OK);
    const char *e = P[0].t->last_error(P[0].be);
    ck_assert_msg(strstr(e, "blk.9.bad_add") != NULL, "error does not name the node: %s", e);
}
END_TEST

/* the model families' ops (ABI 1.1) */
#include "backend-ops-models.inc"

Suite *backend_ops_suite(void);
Suite *backend_ops_suite(void)
{
    Suite *s = suite_create("backend_ops");
    TCase *tc = tcase_create("ops");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 900);
    /* each loop test runs once per plugin: _i is UT_CPU, UT_TEMPLATE, UT_CUDA */
    tcase_add_test(tc, device_info_is_real);
    tcase_add_loop_test(tc, get_rows_every_type, 0, UT_COUNT);
    tcase_add_loop_test(tc, rms_norm_shapes, 0, UT_COUNT);
    tcase_add_loop_test(tc, elementwise_ops, 0, UT_COUNT);
    tcase_add_loop_test(tc, rope_neox, 0, UT_COUNT);
    tcase_add_loop_test(tc, mul_mat_every_type, 0, UT_COUNT);
    tcase_add_loop_test(tc, ffn_gate_up, 0, UT_COUNT);
    tcase_add_loop_test(tc, mul_mat_add, 0, UT_COUNT);
    tcase_add_test(tc, gemm_every_variant);
    tcase_add_test(tc, gemm_i8_long_k);
    tcase_add_test(tc, gemm_epilogues);
    tcase_add_test(tc, decode_gemm_crossover);
    tcase_add_test(tc, matvec_long_rows);
    tcase_add_test(tc, ffn_gate_up_one_launch);
    tcase_add_test(tc, down_reads_gate_up_outputs);
    tcase_add_test(tc, shared_activations_follow_writes);
    tcase_add_loop_test(tc, kv_store_layouts, 0, UT_COUNT);
    tcase_add_loop_test(tc, attention_layouts, 0, UT_COUNT);
    tcase_add_loop_test(tc, attention_long, 0, UT_COUNT);
    tcase_add_test(tc, attention_prefill_variants);
    tcase_add_loop_test(tc, attention_lists_layouts, 0, UT_COUNT);
    tcase_add_test(tc, oom_then_next_op_runs);
    tcase_add_test(tc, bad_id_reported_at_sync);
    tcase_add_loop_test(tc, weight_registry_reuses, 0, UT_COUNT);
    tcase_add_loop_test(tc, unsupported_node_is_refused_by_both, 0, UT_COUNT);
    add_model_family_cases(tc);
    suite_add_tcase(s, tc);
    return s;
}
