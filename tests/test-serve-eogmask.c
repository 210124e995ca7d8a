/*
 * test-serve-eogmask.c — minfer serve's ignore_eos shortcut
 * (tools/serve/eogmask.c, compiled in here): the row is sampled without
 * masking the end-of-generation ids only where masking cannot change the
 * draw. Each case samples the same row twice from samplers of the same
 * seed, once masked and once not, and requires the same id whenever the
 * shortcut says masking does not matter.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/serve/eogmask.c"
#include "testutil.h"

enum { N = 5000, NEOG = 3 };

static unsigned rnd(unsigned *r)
{
    *r = *r * 1664525u + 1013904223u;
    return *r >> 8;
}

static int32_t draw(const struct minfer_sampler_params *p, const float *l, int32_t n)
{
    minfer_status st;
    char err[256];
    struct minfer_sampler *s = minfer_sampler_new(p, n, &st, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    int32_t id = -1;
    ck_assert_int_eq(minfer_sampler_sample(s, l, n, &id), MINFER_OK);
    minfer_sampler_free(s);
    return id;
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

START_TEST(shortcut_only_where_the_mask_is_a_no_op)
{
    /* Catches the shortcut taken when an end-of-generation id is within
     * the top k (or ties the k-th), under greedy, with penalties, with
     * logprobs or with top-k off: the unmasked draw would differ from the
     * masked one. The ids are placed at random ranks around k, often
     * tying, so both answers occur; and catches a shortcut never taken. */
    const int32_t eog[NEOG] = {7, 2500, 4999};
    float *l = malloc(N * sizeof *l), *masked = malloc(N * sizeof *masked);
    float *sorted = malloc(N * sizeof *sorted);
    unsigned r = 1;
    int skipped = 0, differ_when_needed = 0;
    for (int trial = 0; trial < 2000; trial++) {
        for (int i = 0; i < N; i++)
            l[i] = (float)(rnd(&r) % 2048) / 128.0f - 8.0f; /* coarse: ties */
        struct minfer_sampler_params p = minfer_sampler_default_params();
        p.seed = trial;
        p.top_k = (int)(rnd(&r) % 6) == 0 ? 0 : 1 + (int)(rnd(&r) % 60);
        p.temperature = (rnd(&r) % 5) == 0 ? 0.0f : 0.2f + (float)(rnd(&r) % 20) / 10.0f;
        if (rnd(&r) % 8 == 0)
            p.presence_penalty = 0.5f;
        bool logprobs = rnd(&r) % 10 == 0;
        memcpy(sorted, l, N * sizeof *l);
        qsort(sorted, N, sizeof *sorted, cmp_desc);
        int k = p.top_k > 0 ? p.top_k : 1;
        for (int e = 0; e < NEOG; e++) { /* rank around k, or far below */
            int rank = rnd(&r) % 3 == 0 ? N - 1 : (int)(rnd(&r) % (unsigned)(2 * k + 2));
            l[eog[e]] = sorted[rank < N ? rank : N - 1];
        }
        memcpy(masked, l, N * sizeof *l);
        for (int e = 0; e < NEOG; e++)
            masked[eog[e]] = -INFINITY;
        int32_t a = draw(&p, masked, N);
        if (!eog_mask_matters(&p, logprobs, eog, NEOG, l, N)) {
            skipped++;
            ck_assert_msg(p.top_k != 0 || p.temperature <= 0.0f,
                          "trial %d: shortcut with top-k off", trial);
            ck_assert_msg(p.presence_penalty == 0.0f && !logprobs,
                          "trial %d: shortcut with penalties or logprobs", trial);
            ck_assert_msg(draw(&p, l, N) == a, "trial %d: unmasked draw differs (k %d, T %g)",
                          trial, p.top_k, (double)p.temperature);
        } else if (draw(&p, l, N) != a) {
            differ_when_needed++;
        }
    }
    ck_assert_msg(skipped > 200, "shortcut taken in only %d of 2000 rows", skipped);
    ck_assert_msg(differ_when_needed > 0, "no case where the mask mattered: the test is weak");
    free(l);
    free(masked);
    free(sorted);
}
END_TEST

Suite *serve_eogmask_suite(void);
Suite *serve_eogmask_suite(void)
{
    Suite *s = suite_create("serve-eogmask");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, shortcut_only_where_the_mask_is_a_no_op);
    suite_add_tcase(s, tc);
    return s;
}
