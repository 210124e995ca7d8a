/*
 * engine.c — the end-to-end suites' shared helpers (see engine.h).
 */
#include "engine.h"

#include <check.h>
#include <string.h>

struct minfer_runtime *ts_runtime(const char *need)
{
    const char *paths[] = {MINFER_PLUGIN_DIR};
    struct minfer_runtime_opts o = {
        .struct_size = sizeof o, .plugin_paths = paths, .n_plugin_paths = 1,
        .flags = MINFER_RUNTIME_NO_ENV | MINFER_RUNTIME_NO_DEFAULT_DIRS,
    };
    minfer_status st;
    char err[512] = "";
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, err, sizeof err);
    ck_assert_msg(rt, "runtime: %s", err);
    if (need)
        ck_assert_msg(ts_backend_loaded(rt, need), "the %s plugin did not load", need);
    ck_assert_msg(ts_backend_loaded(rt, "cpu"), "the CPU plugin did not load");
    return rt;
}

int ts_backend_loaded(const struct minfer_runtime *rt, const char *name)
{
    size_t n = minfer_runtime_record_count(rt);
    for (size_t i = 0; i < n; i++) {
        struct minfer_plugin_record r = {.struct_size = sizeof r};
        if (minfer_runtime_record(rt, i, &r) && r.loaded && strcmp(r.name, name) == 0)
            return 1;
    }
    return 0;
}

void *ts_synth(const char *arch, const char *spec, uint32_t ftype, uint64_t seed,
               int n_threads, size_t *size)
{
    struct minfer_synth_opts so;
    memset(&so, 0, sizeof so);
    so.struct_size = sizeof so;
    so.seed = seed;
    so.ftype = ftype;
    so.n_threads = n_threads;
    char err[512] = "";
    ck_assert_msg(minfer_synth_shape_parse(arch, spec, &so.shape, err, sizeof err) == MINFER_OK,
                  "%s", err);
    void *mem = NULL;
    ck_assert_msg(minfer_synth(&so, NULL, &mem, size, err, sizeof err) == MINFER_OK, "synth: %s",
                  err);
    return mem;
}

struct minfer_model *ts_load_mem(struct minfer_runtime *rt, void *mem, size_t size,
                                 const char *backend, char *err, size_t err_len)
{
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(mem, size, &st, err, err_len);
    ck_assert_msg(g, "%s", err);
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    if (backend)
        mp.backend = backend;
    return minfer_model_load_gguf(rt, g, backend ? &mp : NULL, &st, err, err_len);
}

struct minfer_ctx *ts_ctx(struct minfer_model *m, int32_t n_ctx, int32_t n_batch, uint32_t kv,
                          uint32_t flags)
{
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    if (kv != TS_KV_DEFAULT)
        cp.type_k = cp.type_v = kv;
    cp.n_threads = 2;
    cp.flags = flags;
    minfer_status st;
    char err[512] = "";
    struct minfer_ctx *c = minfer_ctx_new(m, &cp, &st, err, sizeof err);
    ck_assert_msg(c, "ctx: %s", err);
    return c;
}

void ts_decode_ok(struct minfer_ctx *c, const int32_t *ids, int32_t n, uint32_t flags)
{
    minfer_status st = minfer_ctx_decode(c, ids, n, flags);
    ck_assert_msg(st == MINFER_OK, "decode: %s: %s", minfer_status_str(st),
                  minfer_ctx_last_error(c));
}

int32_t ts_argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}
