/*
 * hf-fixture.h — reading the Hugging Face reference fixtures (README of
 * the fixture directory: fixture-<name>.json beside fixture-<name>-f16.gguf)
 * and the end-to-end check test-fixture.c and test-fixture-families.c
 * share: every position's arg max and top-10 logits, the whole last row,
 * and the greedy continuation, against one prompt of the JSON.
 * Header-only (static inline), like testutil.h.
 */
#ifndef MINFER_TEST_HF_FIXTURE_H
#define MINFER_TEST_HF_FIXTURE_H

#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/minfer.h"
#include "testutil.h"

static inline cJSON *hf_load_json(const char *path)
{
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(buf);
    ck_assert_uint_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = 0;
    fclose(f);
    cJSON *j = cJSON_Parse(buf);
    free(buf);
    ck_assert_msg(j, "%s is not JSON", path);
    return j;
}

/* The prompt object named name ("P1", ...) of a fixture's JSON. */
static inline cJSON *hf_prompt(cJSON *j, const char *name)
{
    cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(j, "prompts"))
        if (!strcmp(cJSON_GetObjectItem(p, "name")->valuestring, name))
            return p;
    ck_abort_msg("prompt %s not in the fixture", name);
    return NULL;
}

/* A JSON array of numbers as malloc'd int32s (*n of them). */
static inline int32_t *hf_int_array(cJSON *a, int *n)
{
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    ck_assert_ptr_nonnull(v);
    int i = 0;
    cJSON *item;
    cJSON_ArrayForEach(item, a)
        v[i++] = (int32_t)item->valuedouble;
    return v;
}

/* Loads path on the CPU plugin, or on MINFER_TEST_BACKEND's (cuda: the
 * same checks on another plugin). */
static inline struct minfer_model *hf_model_load(struct minfer_runtime *rt, const char *path)
{
    minfer_status st;
    char err[512] = "";
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    const char *be = getenv("MINFER_TEST_BACKEND");
    mp.backend = be && *be ? be : "cpu";
    struct minfer_model *m = minfer_model_load(rt, path, &mp, &st, err, sizeof err);
    ck_assert_msg(m, "load %s: %s", path, err);
    return m;
}

struct hf_tolerance {
    double ref;       /* every top-10 logit within this of the reference */
    double fp32_path; /* the worst over top-10s and the last row: an f32 path's bar */
    double near_tie;  /* positions whose reference top-2 gap is below this skip the
                         arg max check (0: check every position) */
};

/* Decodes ids[n] into c (a fresh context; all logits kept) and checks
 * them against prompt p of the fixture, then the greedy continuation.
 * label names the case in messages. */
static inline void hf_check_prompt_logits(struct minfer_ctx *c, cJSON *p, const int32_t *ids,
                                          int n, int32_t n_vocab, struct hf_tolerance tol,
                                          const char *label)
{
    ts_decode_ok(c, ids, n, MINFER_DECODE_ALL_LOGITS);
    ck_assert_int_eq(minfer_ctx_n_logits(c), n);
    cJSON *am = cJSON_GetObjectItem(p, "argmax"), *top = cJSON_GetObjectItem(p, "top10");
    double worst = 0;
    for (int t = 0; t < n; t++) {
        const float *l = minfer_ctx_logits(c, t);
        cJSON *tt = cJSON_GetArrayItem(top, t);
        double gap = cJSON_GetArrayItem(cJSON_GetArrayItem(tt, 0), 1)->valuedouble -
                     cJSON_GetArrayItem(cJSON_GetArrayItem(tt, 1), 1)->valuedouble;
        int want = (int)cJSON_GetArrayItem(am, t)->valuedouble;
        if (gap >= tol.near_tie)
            ck_assert_msg(ts_argmax(l, n_vocab) == want, "%s pos %d: arg max %d, reference %d",
                          label, t, ts_argmax(l, n_vocab), want);
        cJSON *pair;
        cJSON_ArrayForEach(pair, tt) {
            int id = (int)cJSON_GetArrayItem(pair, 0)->valuedouble;
            double d = fabs(l[id] - cJSON_GetArrayItem(pair, 1)->valuedouble);
            worst = d > worst ? d : worst;
            ck_assert_msg(d < tol.ref, "%s pos %d id %d: off by %g", label, t, id, d);
        }
    }
    cJSON *last = cJSON_GetObjectItem(p, "last_logits");
    const float *l = minfer_ctx_logits(c, -1);
    ck_assert_int_eq(cJSON_GetArraySize(last), n_vocab);
    int i = 0;
    cJSON *item;
    cJSON_ArrayForEach(item, last) { /* GetArrayItem walks the list: O(n^2) */
        double d = fabs(l[i++] - item->valuedouble);
        worst = !(d <= worst) ? d : worst; /* NaN fails */
    }
    printf("%s: max |logit - HF| = %.3g over every top-10 and the last row\n", label, worst);
    ck_assert_msg(worst < tol.fp32_path, "%s: max diff %g", label, worst);

    int n_new;
    int32_t *want = hf_int_array(
        cJSON_GetObjectItem(cJSON_GetObjectItem(p, "greedy"), "new_ids"), &n_new);
    int32_t next = ts_argmax(l, n_vocab);
    for (int k = 0; k < n_new; k++) {
        ck_assert_msg(next == want[k], "%s greedy step %d: %d vs %d", label, k, next, want[k]);
        ts_decode_ok(c, &next, 1, 0);
        next = ts_argmax(minfer_ctx_logits(c, -1), n_vocab);
    }
    free(want);
}

#endif /* MINFER_TEST_HF_FIXTURE_H */
