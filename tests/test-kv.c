/*
 * test-kv.c — the KV cache's cost and limits (issue 20, item 6): a large
 * cache is allocated without being touched (no time, no resident memory
 * until passes reach its cells), cells are zeroed exactly as passes first
 * reach them, and a host-memory cache larger than the memory available is
 * refused by minfer with both sizes instead of being found by the OOM
 * killer.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minfer/minfer.h"
#include "model/kv.h"
#include "runtime/plugin.h"
#include "engine.h"
#include "testutil.h"

/* Under AddressSanitizer an allocation also maps shadow memory (an eighth
 * of its size) and everything runs slower: the limits below allow for it. */
#if defined(__SANITIZE_ADDRESS__)
#define ASAN_SHADOW_KIB(bytes) ((long)((bytes) / 8 / 1024))
#define SLOWDOWN 5.0
#else
#define ASAN_SHADOW_KIB(bytes) 0L
#define SLOWDOWN 1.0
#endif

/* 2 layers x (32 + 32) elements per cell: 512 bytes per f32 cell. */
#define SHAPE "custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=16,n_ff=96,n_vocab=320"
#define F32_CELL_BYTES 512u

static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    long kib = -1;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static struct minfer_model *tiny(struct minfer_runtime *rt, long n_ctx, void **mem)
{
    char spec[256];
    snprintf(spec, sizeof spec, SHAPE ",n_ctx=%ld", n_ctx);
    size_t size;
    *mem = ts_synth("qwen2", spec, MINFER_FTYPE_ALL_F32, 3, 1, &size);
    char err[512] = "";
    struct minfer_model *m = ts_load_mem(rt, *mem, size, "cpu", err, sizeof err);
    ck_assert_msg(m, "load: %s", err);
    return m;
}

START_TEST(large_cache_costs_nothing_until_used)
{
    /* Catches zeroing (or otherwise touching) the whole cache at context
     * creation: a 1 GiB f32 cache must add little resident memory and
     * time, and a 5-token prompt in it must give the same logits as in a
     * 256-cell cache (the cells it reads were cleared, the rest unread). */
    const int32_t cells = (1 << 30) / F32_CELL_BYTES;
    struct minfer_runtime *rt = ts_runtime(NULL);
    void *mem;
    struct minfer_model *m = tiny(rt, cells, &mem);
    long rss0 = rss_kib();
    double t0 = now_s();
    struct minfer_ctx *big = ts_ctx(m, cells, 64, MINFER_TYPE_F32, 0);
    double secs = now_s() - t0;
    long grew = rss_kib() - rss0;
    printf("1 GiB f32 cache: created in %.3f s, resident +%ld KiB\n", secs, grew);
    ck_assert_int_eq(minfer_ctx_n_ctx(big), cells);
    /* the cell table (16 bytes a cell) is the only part touched: 32 MiB */
    ck_assert_msg(grew < 96 * 1024 + ASAN_SHADOW_KIB(1u << 30),
                  "creating the context made %ld KiB resident", grew);
    ck_assert_msg(secs < 2.0 * SLOWDOWN, "creating the context took %.2f s", secs);

    const int32_t ids[5] = {10, 20, 30, 40, 50};
    ts_decode_ok(big, ids, 5, 0);
    struct minfer_ctx *small = ts_ctx(m, 256, 64, MINFER_TYPE_F32, 0);
    ts_decode_ok(small, ids, 5, 0);
    ck_assert(!memcmp(minfer_ctx_logits(big, 0), minfer_ctx_logits(small, 0),
                      320 * sizeof(float)));
    ck_assert_msg(rss_kib() - rss0 < 128 * 1024 + ASAN_SHADOW_KIB(1u << 30),
                  "a 5-token pass made %ld KiB resident", rss_kib() - rss0);
    minfer_ctx_free(small);
    minfer_ctx_free(big);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(cache_over_available_memory_is_refused)
{
    /* Catches a CPU cache larger than the machine's available memory being
     * allocated (the OOM killer finds it later) or refused without saying
     * how much was needed and how much there is. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    struct minfer_device_info di;
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    ck_assert_int_eq(minfer_runtime_device_info(rt, "cpu", 0, &di), MINFER_OK);
    if (!di.memory_free)
        MINFER_TEST_SKIP("the CPU plugin reports no available memory here");
    uint64_t want = di.memory_free / F32_CELL_BYTES * 2 + 1024;
    if (want > INT32_MAX)
        MINFER_TEST_SKIP("more than %llu bytes available: no context is large enough",
                         (unsigned long long)di.memory_free);
    int32_t cells = (int32_t)want;
    void *mem;
    struct minfer_model *m = tiny(rt, cells, &mem);
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = cells;
    cp.type_k = cp.type_v = MINFER_TYPE_F32;
    minfer_status st = MINFER_OK;
    char err[512] = "";
    double t0 = now_s();
    struct minfer_ctx *c = minfer_ctx_new(m, &cp, &st, err, sizeof err);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(st, MINFER_ERR_NO_MEMORY);
    ck_assert_msg(now_s() - t0 < 2.0 * SLOWDOWN, "the refusal took %.1f s", now_s() - t0);
    char need[64];
    snprintf(need, sizeof need, "needs %llu bytes",
             (unsigned long long)cells * F32_CELL_BYTES);
    ck_assert_msg(strstr(err, need), "err: %s (expected '%s')", err, need);
    ck_assert_msg(strstr(err, "bytes (") && strstr(err, "of memory are available"), "err: %s",
                  err);
    ck_assert_msg(strstr(err, "-c"), "err does not say what to do: %s", err);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* Whether every byte of p[n] is b. */
static bool all(const unsigned char *p, size_t n, unsigned char b)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != b)
            return false;
    return true;
}

START_TEST(cells_are_cleared_as_passes_reach_them)
{
    /* Catches kv_clear_to clearing the wrong rows (another layer's, V
     * through K's row size), clearing past what it was asked, or not
     * clearing: the buffer starts as 0xFF bytes (NaN in f16 and f32), as
     * reused memory can. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    const struct minfer_plugin *p = runtime_find_backend(rt, "cpu");
    ck_assert_ptr_nonnull(p);
    struct minfer_backend *be = NULL;
    char err[512] = "";
    ck_assert_int_eq(plugin_create_instance(p, NULL, &be, err, sizeof err), MINFER_OK);
    struct kv_cache kv;
    /* K rows of 64 f16 (128 bytes), V rows of 32 f32 (128 bytes): distinct
     * types so V's offsets cannot be computed with K's row size by luck */
    ck_assert_int_eq(kv_init(&kv, p, be, 3, 64, 96, 1024, 1, MINFER_TYPE_F16, MINFER_TYPE_F32,
                             err, sizeof err), MINFER_OK);
    ck_assert_uint_eq(kv.n_clear, 0);
    unsigned char *ff = malloc(kv.size);
    memset(ff, 0xFF, kv.size);
    ck_assert_int_eq(p->iface->buffer_write(be, kv.base, ff, kv.size), MINFER_OK);

    const uint32_t steps[] = {256, 300, 100, 5000};
    const uint32_t expect[] = {256, 300, 300, 1024};
    unsigned char *host = malloc(kv.size);
    for (int s = 0; s < 4; s++) {
        ck_assert_int_eq(kv_clear_to(&kv, steps[s], err, sizeof err), MINFER_OK);
        ck_assert_uint_eq(kv.n_clear, expect[s]);
        ck_assert_int_eq(p->iface->buffer_read(be, host, kv.base, kv.size), MINFER_OK);
        for (int32_t il = 0; il < kv.n_layer; il++) {
            const unsigned char *k = host + ((char *)kv_k(&kv, il) - (char *)kv.base);
            const unsigned char *v = host + ((char *)kv_v(&kv, il) - (char *)kv.base);
            size_t n = expect[s];
            ck_assert_msg(all(k, kv.row_bytes_k * n, 0), "layer %d K not cleared", il);
            ck_assert_msg(all(v, kv.row_bytes_v * n, 0), "layer %d V not cleared", il);
            ck_assert_msg(all(k + kv.row_bytes_k * n, kv.row_bytes_k * (1024 - n), 0xFF),
                          "layer %d K cleared past cell %zu", il, n);
            ck_assert_msg(all(v + kv.row_bytes_v * n, kv.row_bytes_v * (1024 - n), 0xFF),
                          "layer %d V cleared past cell %zu", il, n);
        }
    }
    free(host);
    free(ff);
    kv_free(&kv);
    p->iface->destroy(be);
    minfer_runtime_free(rt);
}
END_TEST

Suite *kv_suite(void);
Suite *kv_suite(void)
{
    Suite *s = suite_create("kv");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, large_cache_costs_nothing_until_used);
    tcase_add_test(tc, cache_over_available_memory_is_refused);
    tcase_add_test(tc, cells_are_cleared_as_passes_reach_them);
    suite_add_tcase(s, tc);
    return s;
}
