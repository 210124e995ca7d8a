/*
 * test-api.c — the application API's conventions (issue 18, "Library
 * API"): minfer.h alone is enough and does not expose the graph IR,
 * version macros agree with the library, the log callback receives the
 * library's messages, a loaded model lends its tokenizer without parsing
 * the vocabulary again, and params structs carry struct_size.
 */
#include "minfer/minfer.h"

#ifdef MINFER_IR_H
#error "minfer/minfer.h exposes the graph IR (minfer/ir.h)"
#endif
#ifdef MINFER_BACKEND_H
#error "minfer/minfer.h exposes the plugin ABI (minfer/backend.h)"
#endif

#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine.h"
#include "testutil.h"

START_TEST(version_macros)
{
    /* Catches header macros that disagree with the library or the project
     * version (CMake reads them from minfer.h). */
    ck_assert_str_eq(MINFER_VERSION_STRING, minfer_version());
    ck_assert_str_eq(MINFER_VERSION_STRING, MINFER_VERSION_STRING_EXPECTED);
    char v[32];
    snprintf(v, sizeof v, "%d.%d.%d", MINFER_VERSION_MAJOR, MINFER_VERSION_MINOR,
             MINFER_VERSION_PATCH);
    ck_assert_str_eq(v, MINFER_VERSION_STRING);
    ck_assert_int_eq(MINFER_VERSION_NUMBER, MINFER_VERSION_MAJOR * 10000 +
                                                MINFER_VERSION_MINOR * 100 + MINFER_VERSION_PATCH);
}
END_TEST

struct log_seen {
    int n, max_level;
    int path_level; /* level of the note naming the missing directory, -1 none */
};

static void on_log(int level, const char *msg, void *user)
{
    struct log_seen *s = user;
    s->n++;
    s->max_level = level > s->max_level ? level : s->max_level;
    if (strstr(msg, "/nonexistent-minfer-plugin-dir"))
        s->path_level = level;
}

START_TEST(log_callback)
{
    /* Catches library messages that bypass minfer_log_set's callback, the
     * level filter not applying, and NULL not restoring the default. */
    struct log_seen seen = {0, -1, -1};
    minfer_log_set(on_log, &seen, 3);
    const char *paths[] = {"/nonexistent-minfer-plugin-dir"};
    struct minfer_runtime_opts ro = {.struct_size = sizeof ro, .plugin_paths = paths,
                                     .n_plugin_paths = 1,
                                     .flags = MINFER_RUNTIME_NO_ENV |
                                              MINFER_RUNTIME_NO_DEFAULT_DIRS};
    minfer_status st;
    struct minfer_runtime *rt = minfer_runtime_new(&ro, &st, NULL, 0);
    ck_assert_ptr_nonnull(rt);
    minfer_runtime_free(rt);
    ck_assert_msg(seen.n > 0, "no message reached the callback");
    ck_assert_int_eq(seen.path_level, 1); /* a path the caller gave: a warning */
    /* errors only: the warning no longer arrives */
    seen = (struct log_seen){0, -1, -1};
    minfer_log_set(on_log, &seen, 0);
    rt = minfer_runtime_new(&ro, &st, NULL, 0);
    minfer_runtime_free(rt);
    ck_assert_int_eq(seen.path_level, -1);
    ck_assert_int_le(seen.max_level, 0);
    minfer_log_set(NULL, NULL, -1);
}
END_TEST

struct tok_race {
    const struct minfer_model *m;
    const struct minfer_tokenizer *got;
};

static void *get_tok(void *arg)
{
    struct tok_race *r = arg;
    r->got = minfer_model_tokenizer(r->m, NULL, NULL, 0);
    return NULL;
}

START_TEST(model_lends_its_tokenizer)
{
    /* Catches a tokenizer rebuilt on every call (or per thread), one that
     * encodes differently from minfer_tokenizer_from_gguf, and a missing
     * tokenizer reported without a reason. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    size_t size;
    void *mem = ts_synth("qwen2", "custom:n_embd=64,n_layer=1,n_head=4,n_head_kv=2,head_dim=16,"
                                  "n_ff=128,n_ctx=256", 1 /* F16 */, 1, 1, &size);
    char err[512];
    struct minfer_model *m = ts_load_mem(rt, mem, size, NULL, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    struct tok_race r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i].m = m;
        ck_assert_int_eq(pthread_create(&th[i], NULL, get_tok, &r[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    minfer_status st;
    const struct minfer_tokenizer *t = minfer_model_tokenizer(m, &st, err, sizeof err);
    ck_assert_msg(t, "%s", err);
    ck_assert_int_eq(st, MINFER_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_ptr_eq(r[i].got, t);
    struct minfer_tokenizer *fresh = minfer_tokenizer_from_gguf(minfer_model_gguf(m), &st, err,
                                                                sizeof err);
    ck_assert_ptr_nonnull(fresh);
    static const char text[] = "Hello <|im_start|>world, 12345!";
    int32_t a[64], b[64];
    size_t na, nb;
    ck_assert_int_eq(minfer_tokenize(t, text, sizeof text - 1, true, a, 64, &na), MINFER_OK);
    ck_assert_int_eq(minfer_tokenize(fresh, text, sizeof text - 1, true, b, 64, &nb), MINFER_OK);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(a, b, na * sizeof a[0]);
    minfer_tokenizer_free(fresh);
    minfer_model_free(m);
    free(mem);
    ck_assert_ptr_null(minfer_model_tokenizer(NULL, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_INVALID_ARG);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(params_structs_carry_their_size)
{
    /* Catches a sampler params struct without struct_size (or one whose
     * size is ignored, so a struct from other headers would be misread). */
    struct minfer_sampler_params p = minfer_sampler_default_params();
    ck_assert_uint_eq(p.struct_size, sizeof p);
    minfer_status st;
    char err[256];
    struct minfer_sampler *s = minfer_sampler_new(&p, 16, &st, err, sizeof err);
    ck_assert_ptr_nonnull(s);
    minfer_sampler_free(s);
    p.struct_size = 4;
    ck_assert_ptr_null(minfer_sampler_new(&p, 16, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err, "struct_size"));
    /* the others: model and context params */
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    ck_assert_uint_eq(mp.struct_size, sizeof mp);
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    ck_assert_uint_eq(cp.struct_size, sizeof cp);
}
END_TEST

START_TEST(objects_keep_their_last_error)
{
    /* Catches a failing sampler or detokenizer call that returns a bare
     * status: the object must say what was wrong, with the numbers. */
    struct minfer_sampler_params p = minfer_sampler_default_params();
    minfer_status st;
    struct minfer_sampler *s = minfer_sampler_new(&p, 16, &st, NULL, 0);
    ck_assert_ptr_nonnull(s);
    float logits[32] = {0};
    int32_t id;
    ck_assert_str_eq(minfer_sampler_last_error(s), "");
    ck_assert_int_eq(minfer_sampler_sample(s, logits, 32, &id), MINFER_ERR_INVALID_ARG);
    ck_assert_msg(strstr(minfer_sampler_last_error(s), "32") &&
                  strstr(minfer_sampler_last_error(s), "16"), "%s", minfer_sampler_last_error(s));
    for (int i = 0; i < 16; i++)
        logits[i] = -1.0f / 0.0f;
    ck_assert_int_eq(minfer_sampler_sample(s, logits, 16, &id), MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(minfer_sampler_last_error(s), "finite"));
    logits[3] = 1.0f;
    ck_assert_int_eq(minfer_sampler_sample(s, logits, 16, &id), MINFER_OK);
    ck_assert_str_eq(minfer_sampler_last_error(s), "");
    minfer_sampler_free(s);

    struct minfer_runtime *rt = ts_runtime(NULL);
    size_t size;
    void *mem = ts_synth("qwen2", "custom:n_embd=64,n_layer=1,n_head=4,n_head_kv=2,head_dim=16,"
                                  "n_ff=128,n_ctx=256", 1, 1, 1, &size);
    char err[512];
    struct minfer_model *m = ts_load_mem(rt, mem, size, NULL, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    const struct minfer_tokenizer *t = minfer_model_tokenizer(m, NULL, NULL, 0);
    struct minfer_detok *d = minfer_detok_new(t, false);
    char out[64];
    size_t n;
    ck_assert_int_eq(minfer_detok_push(d, 999999999, out, sizeof out, &n), MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(minfer_detok_last_error(d), "999999999"));
    ck_assert_int_eq(minfer_detok_push(d, 'a' - 33, out, 0, &n), MINFER_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(minfer_detok_last_error(d), "needed"));
    minfer_detok_free(d);
    minfer_model_free(m);
    free(mem);
    minfer_runtime_free(rt);
}
END_TEST

Suite *api_suite(void);
Suite *api_suite(void)
{
    Suite *s = suite_create("api");
    TCase *tc = tcase_create("conventions");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, version_macros);
    tcase_add_test(tc, log_callback);
    tcase_add_test(tc, model_lends_its_tokenizer);
    tcase_add_test(tc, params_structs_carry_their_size);
    tcase_add_test(tc, objects_keep_their_last_error);
    suite_add_tcase(s, tc);
    return s;
}
