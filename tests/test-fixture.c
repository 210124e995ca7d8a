/*
 * test-fixture.c — end-to-end accuracy against Hugging Face transformers:
 * fixture-A (a tiny random Qwen2 with QKV bias and tied embeddings, f16
 * weights) run through the dlopen'd CPU plugin. Prompt ids, every
 * position's logits, arg max and top-10, and 16 greedy tokens must match
 * the reference; f16 and q8_0 KV caches must stay close to the f32 one.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/minfer.h"
#include "engine.h"
#include "hf-fixture.h"
#include "testutil.h"

#define FIX_DIR MINFER_FIXTURES_DIR "/models"
#define FIX_GGUF FIX_DIR "/fixture-A-f16.gguf"
#define FIX_JSON FIX_DIR "/fixture-A.json"
#define FIX_BIN FIX_DIR "/fixture-A-P1-logits-f32le.bin"

/* Tolerance classes (absolute, on logits).
 * REF: the fixture README's bar for f16-weight models against the f32
 *   reference; our path accumulates in f32, so we also check FP32_PATH.
 * FP32_PATH: what an f32-accumulating path reaches (the reference's own
 *   f32-vs-f64 spread is ~2.5e-6; products of f16 weights with f32
 *   activations in another order add about as much again).
 * KV_F16, KV_Q8_0 are relative to the largest |logit| of the f32-KV run
 * (about 4 here). KV_F16: every cached value rounded to f16 (relative
 * step 2^-11 = 4.9e-4); a few such errors add up through two layers.
 * KV_Q8_0: every value rounded to 1/127 of its 32-value block's largest
 * magnitude (relative step up to 7.9e-3), adding up the same way.
 * (Measured on this fixture: 5.3e-4 and 1.1e-2.) */
#define TOL_REF 1e-2
#define TOL_FP32_PATH 1e-4
#define TOL_KV_F16_REL 2e-3
#define TOL_KV_Q8_0_REL 2e-2

const char *minfer_test_skip_reason(void)
{
    FILE *f = fopen(FIX_GGUF, "rb");
    if (!f)
        return "fixtures not found at " FIX_DIR " (../shared beside the checkout)";
    fclose(f);
    return NULL;
}

/* ---- helpers ---- */

struct env {
    struct minfer_runtime *rt;
    struct minfer_model *m;
    struct minfer_tokenizer *tok;
    int32_t n_vocab;
};

static void env_open(struct env *e)
{
    minfer_status st;
    char err[512] = "";
    e->rt = ts_runtime(NULL);
    e->m = hf_model_load(e->rt, FIX_GGUF);
    e->tok = minfer_tokenizer_from_gguf(minfer_model_gguf(e->m), &st, err, sizeof err);
    ck_assert_msg(e->tok, "tokenizer: %s", err);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(e->m, &info);
    e->n_vocab = info.n_vocab;
    ck_assert_int_eq(e->n_vocab, 151936);
}

static void env_close(struct env *e)
{
    minfer_tokenizer_free(e->tok);
    minfer_model_free(e->m);
    minfer_runtime_free(e->rt);
}

static struct minfer_ctx *ctx_new(struct env *e, uint32_t kv_type, int32_t n_batch)
{
    return ts_ctx(e->m, 256, n_batch, kv_type, 0);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = d; /* NaN propagates as a failure */
    }
    return m;
}

/* ---- prompts ---- */

/* Checks one prompt end to end; returns the max abs diff of the last row. */
static void check_prompt(const char *name)
{
    struct env e;
    env_open(&e);
    cJSON *j = hf_load_json(FIX_JSON);
    cJSON *p = hf_prompt(j, name);
    const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
    int n_ref;
    int32_t *ref_ids = hf_int_array(cJSON_GetObjectItem(p, "token_ids"), &n_ref);

    /* Token ids: ours must equal Hugging Face's. */
    int32_t ids[256];
    size_t n_ids = 0;
    ck_assert_int_eq(minfer_tokenize(e.tok, text, strlen(text), true, ids, 256, &n_ids),
                     MINFER_OK);
    ck_assert_uint_eq(n_ids, (size_t)n_ref);
    for (int i = 0; i < n_ref; i++)
        ck_assert_int_eq(ids[i], ref_ids[i]);

    /* n_batch 7 splits the prompt into several passes so the KV cache
     * carries across them. Fixture A has no near-tie position: every arg
     * max is checked. */
    struct minfer_ctx *c = ctx_new(&e, MINFER_TYPE_F32, 7);
    struct hf_tolerance tol = {TOL_REF, TOL_FP32_PATH, 0};
    hf_check_prompt_logits(c, p, ids, n_ref, e.n_vocab, tol, name);
    minfer_ctx_free(c);
    free(ref_ids);
    cJSON_Delete(j);
    env_close(&e);
}

START_TEST(fixture_p1)
{
    /* Catches any numeric error in the Qwen2 forward (bias, RoPE base,
     * GQA head mapping, tied head, norms) and KV carry-over between passes. */
    check_prompt("P1");
}
END_TEST

START_TEST(fixture_p2_chat)
{
    /* Catches special tokens in a chat prompt and multi-byte text going wrong. */
    check_prompt("P2");
}
END_TEST

START_TEST(fixture_p3_code)
{
    /* Catches errors that show only on a longer (40-token) prompt. */
    check_prompt("P3");
}
END_TEST

START_TEST(fixture_p1_all_positions)
{
    /* Catches a wrong logit anywhere in the [24][151936] reference, e.g. a
     * causal mask that lets early positions see later tokens. */
    struct env e;
    env_open(&e);
    cJSON *j = hf_load_json(FIX_JSON);
    int n;
    int32_t *ids = hf_int_array(cJSON_GetObjectItem(hf_prompt(j, "P1"), "token_ids"), &n);
    FILE *f = fopen(FIX_BIN, "rb");
    ck_assert_ptr_nonnull(f);
    size_t total = (size_t)n * (size_t)e.n_vocab;
    float *ref = malloc(total * sizeof *ref);
    ck_assert_uint_eq(fread(ref, sizeof *ref, total, f), total);
    fclose(f);
    struct minfer_ctx *c = ctx_new(&e, MINFER_TYPE_F32, 512);
    ts_decode_ok(c, ids, n, MINFER_DECODE_ALL_LOGITS);
    double worst = 0;
    for (int t = 0; t < n; t++) {
        double d = max_abs_diff(minfer_ctx_logits(c, t), ref + (size_t)t * e.n_vocab,
                                (size_t)e.n_vocab);
        worst = d > worst ? d : worst;
    }
    printf("P1 all positions: max |logit - HF| = %.3g\n", worst);
    ck_assert_msg(worst < TOL_FP32_PATH, "max diff %g", worst);
    free(ref);
    free(ids);
    minfer_ctx_free(c);
    cJSON_Delete(j);
    env_close(&e);
}
END_TEST

/* ---- KV cache types ---- */

static void check_kv_type(uint32_t type, double tol)
{
    struct env e;
    env_open(&e);
    cJSON *j = hf_load_json(FIX_JSON);
    int n;
    int32_t *ids = hf_int_array(cJSON_GetObjectItem(hf_prompt(j, "P3"), "token_ids"), &n);
    struct minfer_ctx *c32 = ctx_new(&e, MINFER_TYPE_F32, 16);
    struct minfer_ctx *cq = ctx_new(&e, type, 16);
    ts_decode_ok(c32, ids, n, MINFER_DECODE_ALL_LOGITS);
    ts_decode_ok(cq, ids, n, MINFER_DECODE_ALL_LOGITS);
    double worst = 0, scale = 0;
    for (int t = 0; t < n; t++) {
        const float *a = minfer_ctx_logits(c32, t);
        double d = max_abs_diff(a, minfer_ctx_logits(cq, t), (size_t)e.n_vocab);
        worst = d > worst ? d : worst;
        for (int32_t i = 0; i < e.n_vocab; i++)
            scale = fabs(a[i]) > scale ? fabs(a[i]) : scale;
    }
    worst /= scale;
    printf("KV %s vs f32: max |diff| / max |logit| = %.3g (tolerance %g)\n",
           minfer_type_name(type), worst, tol);
    ck_assert_msg(worst < tol, "KV %s: %g", minfer_type_name(type), worst);
    /* And it must differ at all: a cache type silently ignored would pass above. */
    ck_assert_msg(worst > 0, "KV %s gave bit-identical logits to f32", minfer_type_name(type));
    free(ids);
    minfer_ctx_free(cq);
    minfer_ctx_free(c32);
    cJSON_Delete(j);
    env_close(&e);
}

START_TEST(kv_f16_close_to_f32)
{
    /* Catches a broken f16 KV store/read path (wrong conversion or stride). */
    check_kv_type(MINFER_TYPE_F16, TOL_KV_F16_REL);
}
END_TEST

START_TEST(kv_q8_0_close_to_f32)
{
    /* Catches a broken q8_0 KV path (block layout, scale, row stride). */
    check_kv_type(MINFER_TYPE_Q8_0, TOL_KV_Q8_0_REL);
}
END_TEST

Suite *fixture_suite(void);
Suite *fixture_suite(void)
{
    Suite *s = suite_create("fixture");
    TCase *tc = tcase_create("hf");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, fixture_p1);
    tcase_add_test(tc, fixture_p2_chat);
    tcase_add_test(tc, fixture_p3_code);
    tcase_add_test(tc, fixture_p1_all_positions);
    tcase_add_test(tc, kv_f16_close_to_f32);
    tcase_add_test(tc, kv_q8_0_close_to_f32);
    suite_add_tcase(s, tc);
    return s;
}
