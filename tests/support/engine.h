/*
 * engine.h — helpers the end-to-end suites (test-model, test-cuda-e2e,
 * test-fixture, ...) share instead of each keeping a copy: a runtime that
 * loads only this build's plugins, a synthetic model in memory, loading it,
 * a context, a decode that must succeed, argmax. Each fails the calling
 * Check test (ck_assert) on what the test did not expect; none of them
 * hides a failure the test means to check (ts_load_mem returns NULL with
 * the error for tests of load refusals).
 */
#ifndef MINFER_TEST_ENGINE_H
#define MINFER_TEST_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include "minfer/gguf.h"
#include "minfer/minfer.h"

/* A runtime over MINFER_PLUGIN_DIR alone (no $MINFER_PLUGIN_PATH, no
 * default dirs). Fails the test unless the "cpu" backend and, when need is
 * not NULL, the backend named need loaded. Free with minfer_runtime_free. */
struct minfer_runtime *ts_runtime(const char *need);

/* True when rt loaded a plugin whose backend name is name. */
int ts_backend_loaded(const struct minfer_runtime *rt, const char *name);

/* A random model of arch and shape spec ("custom:n_embd=...", see
 * minfer_synth_shape_parse) in memory, weights of ftype, from seed. The
 * caller frees the returned buffer (*size bytes). */
void *ts_synth(const char *arch, const char *spec, uint32_t ftype, uint64_t seed,
               int n_threads, size_t *size);

/* Loads the GGUF image mem[size] on backend (NULL: the default choice).
 * Returns the model, or NULL with the loader's error in err[err_len]. The
 * image must outlive the model. */
struct minfer_model *ts_load_mem(struct minfer_runtime *rt, void *mem, size_t size,
                                 const char *backend, char *err, size_t err_len);

/* Keep the context's default KV type (for ts_ctx's kv). */
#define TS_KV_DEFAULT MINFER_TYPE_COUNT

/* A context of n_ctx cells, n_batch tokens per pass, KV cache of type kv
 * (TS_KV_DEFAULT keeps the default), 2 threads and flags; fails the test
 * if it cannot be made. */
struct minfer_ctx *ts_ctx(struct minfer_model *m, int32_t n_ctx, int32_t n_batch, uint32_t kv,
                          uint32_t flags);

/* minfer_ctx_decode that must succeed (the failure names status and text). */
void ts_decode_ok(struct minfer_ctx *c, const int32_t *ids, int32_t n, uint32_t flags);

/* Index of the largest of x[0..n) (the first on ties). */
int32_t ts_argmax(const float *x, int32_t n);

#endif
