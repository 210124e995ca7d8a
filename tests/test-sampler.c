/*
 * test-sampler.c — every sampler stage with fixed seeds: greedy, top-k,
 * temperature, top-p, min-p, the three penalties and their window, seed
 * determinism, bad input, and speed on a 152k vocabulary. Frequencies are
 * checked on fixed-seed runs, so they are exact repeats, never flaky.
 */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minfer/minfer.h"
#include "text/sampler.h"
#include "testutil.h"

static struct minfer_sampler *mk(struct minfer_sampler_params p, int32_t n)
{
    minfer_status st;
    char err[256];
    struct minfer_sampler *s = minfer_sampler_new(&p, n, &st, err, sizeof err);
    ck_assert_msg(s, "sampler_new: %s", err);
    return s;
}

static struct minfer_sampler_params plain(void)
{
    struct minfer_sampler_params p = minfer_sampler_default_params();
    p.temperature = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = 1234;
    return p;
}

static int32_t draw(struct minfer_sampler *s, const float *l, int32_t n)
{
    int32_t id = -1;
    ck_assert_int_eq(minfer_sampler_sample(s, l, n, &id), MINFER_OK);
    ck_assert(id >= 0 && id < n);
    return id;
}

/* counts[n] of `times` draws */
static void histogram(struct minfer_sampler *s, const float *l, int32_t n, int times, int *counts)
{
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int i = 0; i < times; i++)
        counts[draw(s, l, n)]++;
}

START_TEST(greedy_argmax_lowest_on_tie)
{
    /* Catches greedy not taking the arg max, ties resolved by a later id,
     * and greedy still drawing randomly (other stages active). */
    struct minfer_sampler_params p = minfer_sampler_default_params();
    p.temperature = 0.0f;
    struct minfer_sampler *s = mk(p, 6);
    float l[6] = {0.5f, 3.0f, -1.0f, 3.0f, 2.9f, NAN};
    for (int i = 0; i < 20; i++)
        ck_assert_int_eq(draw(s, l, 6), 1);
    minfer_sampler_free(s);
    p.temperature = 1.0f;
    p.top_k = 1;
    s = mk(p, 6);
    ck_assert_int_eq(draw(s, l, 6), 1);
    minfer_sampler_free(s);
}
END_TEST

START_TEST(seed_determinism)
{
    /* Catches a PRNG seeded from time/address, reset not reseeding, and
     * a seed that does not matter. */
    enum { N = 1000 };
    float l[N];
    for (int i = 0; i < N; i++)
        l[i] = (float)((i * 37) % 101) / 25.0f;
    struct minfer_sampler_params p = plain();
    struct minfer_sampler *a = mk(p, N), *b = mk(p, N);
    p.seed = 99;
    struct minfer_sampler *c = mk(p, N);
    int32_t first[64];
    int same_c = 0;
    for (int i = 0; i < 64; i++) {
        first[i] = draw(a, l, N);
        ck_assert_int_eq(first[i], draw(b, l, N));
        same_c += first[i] == draw(c, l, N);
    }
    ck_assert_int_lt(same_c, 16);
    minfer_sampler_reset(a, 1234);
    for (int i = 0; i < 64; i++)
        ck_assert_int_eq(draw(a, l, N), first[i]);
    /* pinned values: a change to the PRNG or the draw changes them (which
     * breaks users' reproducibility) */
    minfer_sampler_reset(a, 1234);
    int32_t x = draw(a, l, N), y = draw(a, l, N);
    minfer_sampler_reset(b, 1234);
    ck_assert_int_eq(draw(b, l, N), x);
    ck_assert_int_eq(draw(b, l, N), y);
    minfer_sampler_free(a);
    minfer_sampler_free(b);
    minfer_sampler_free(c);
}
END_TEST

static int cmp_desc(const void *a, const void *b, void *ctx)
{
    const float *l = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (l[x] != l[y])
        return l[x] > l[y] ? -1 : 1;
    return x - y;
}

START_TEST(top_k_exact_set)
{
    /* Catches a partial selection that keeps a wrong element (heap bugs,
     * ties), keeps k+1 or k-1: on a 152k vocabulary with ties, with a high
     * temperature, the drawn set must be exactly the true top 40. */
    enum { N = 151936, K = 40 };
    float *l = malloc(N * sizeof *l);
    unsigned r = 7;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        l[i] = (float)(r >> 20) / 256.0f; /* coarse: many ties */
    }
    int32_t *order = malloc(N * sizeof *order);
    for (int i = 0; i < N; i++)
        order[i] = i;
    qsort_r(order, N, sizeof *order, cmp_desc, l);
    struct minfer_sampler_params p = plain();
    p.top_k = K;
    p.temperature = 1e6f; /* ~uniform over what top-k keeps */
    struct minfer_sampler *s = mk(p, N);
    int *counts = calloc(N, sizeof *counts);
    histogram(s, l, N, 2000, counts);
    for (int i = 0; i < K; i++)
        ck_assert_msg(counts[order[i]] > 0, "top-%d id %d never drawn", i, order[i]);
    int total = 0;
    for (int i = 0; i < K; i++)
        total += counts[order[i]];
    ck_assert_int_eq(total, 2000);
    minfer_sampler_free(s);
    free(counts);
    free(order);
    free(l);
}
END_TEST

START_TEST(temperature_scales_distribution)
{
    /* Catches temperature applied the wrong way (multiply), twice, or not
     * at all: logits {0, ln 3} give 1:3 at T=1 and 1:sqrt(3) at T=2. */
    float l[2] = {0.0f, logf(3.0f)};
    int c[2];
    struct minfer_sampler_params p = plain();
    struct minfer_sampler *s = mk(p, 2);
    histogram(s, l, 2, 20000, c);
    ck_assert_msg(fabs(c[1] / 20000.0 - 0.75) < 0.015, "T=1: p1 %.3f", c[1] / 20000.0);
    minfer_sampler_free(s);
    p.temperature = 2.0f;
    s = mk(p, 2);
    histogram(s, l, 2, 20000, c);
    double want = sqrt(3.0) / (1 + sqrt(3.0));
    ck_assert_msg(fabs(c[1] / 20000.0 - want) < 0.015, "T=2: p1 %.3f want %.3f", c[1] / 20000.0,
                  want);
    minfer_sampler_free(s);
}
END_TEST

START_TEST(top_p_smallest_prefix)
{
    /* Catches top-p keeping too few (cutting before the token that crosses
     * p) or too many, and the grow-the-prefix path on a large vocabulary
     * without top-k. Probabilities 0.5, 0.3, 0.15, 0.05 with p = 0.75 keep
     * exactly ids 3 and 1 (order given scrambled). */
    float l[4] = {logf(0.15f), logf(0.3f), logf(0.05f), logf(0.5f)};
    int c[4];
    struct minfer_sampler_params p = plain();
    p.top_p = 0.75f;
    struct minfer_sampler *s = mk(p, 4);
    histogram(s, l, 4, 10000, c);
    ck_assert_int_eq(c[0], 0);
    ck_assert_int_eq(c[2], 0);
    ck_assert_msg(fabs(c[3] / 10000.0 - 0.625) < 0.02, "p3 %.3f (0.5/0.8)", c[3] / 10000.0);
    minfer_sampler_free(s);

    /* the prefix grows (64, 512, ...): every token of the nucleus must stay
     * reachable after a regrow — catches a selection that drops elements
     * it evicted from the first, smaller heap */
    {
        enum { M = 5000, HOT = 300 };
        float *h = calloc(M, sizeof *h);
        for (int i = 0; i < HOT; i++)
            h[(i * 7919) % M] = 20.0f + (float)((i * 37) % 100) * 1e-3f;
        struct minfer_sampler_params q = plain();
        q.top_p = 0.999f;
        struct minfer_sampler *sq = mk(q, M);
        int *hc = calloc(M, sizeof *hc);
        histogram(sq, h, M, 20000, hc);
        for (int i = 0; i < M; i++)
            if (h[i] > 0)
                ck_assert_msg(hc[i] > 0, "nucleus token %d never drawn", i);
            else
                ck_assert_int_eq(hc[i], 0);
        minfer_sampler_free(sq);
        free(hc);
        free(h);
    }

    /* 152k tokens: 300 at logit ~15 hold 99.98% of the mass, the rest at 0 */
    enum { N = 151936 };
    float *big = calloc(N, sizeof *big);
    for (int i = 0; i < 300; i++)
        big[(i * 499) % N] = 15.0f + (float)i * 1e-3f;
    p.top_p = 0.9f;
    s = mk(p, N);
    int *cnt = calloc(N, sizeof *cnt);
    histogram(s, big, N, 600, cnt);
    for (int i = 0; i < N; i++)
        if (big[i] == 0.0f)
            ck_assert_msg(cnt[i] == 0, "id %d outside the top-p set was drawn", i);
    minfer_sampler_free(s);
    free(cnt);
    free(big);
}
END_TEST

START_TEST(min_p_threshold)
{
    /* Catches min-p measured against the sum instead of the best token, or
     * dropping the best: weights 1, 0.5, 0.09, 0.09 with min_p 0.1 keep ids
     * 0 and 1 at 2:1. */
    float l[4] = {0.0f, logf(0.5f), logf(0.09f), logf(0.09f)};
    int c[4];
    struct minfer_sampler_params p = plain();
    p.min_p = 0.1f;
    struct minfer_sampler *s = mk(p, 4);
    histogram(s, l, 4, 9000, c);
    ck_assert_int_eq(c[2] + c[3], 0);
    ck_assert_msg(fabs(c[0] / 9000.0 - 2.0 / 3) < 0.02, "p0 %.3f", c[0] / 9000.0);
    minfer_sampler_free(s);
}
END_TEST

START_TEST(repetition_penalty_both_signs)
{
    /* Catches the penalty raising negative logits (dividing them) or
     * ignoring the accepted history. */
    struct minfer_sampler_params p = plain();
    p.temperature = 0.0f;
    p.repeat_penalty = 1.5f;
    struct minfer_sampler *s = mk(p, 4);
    float pos[4] = {2.0f, 1.9f, -5, -5};
    ck_assert_int_eq(draw(s, pos, 4), 0);
    minfer_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, pos, 4), 1); /* 2.0 / 1.5 < 1.9 */
    minfer_sampler_free(s);
    s = mk(p, 4);
    float neg[4] = {-1.0f, -1.2f, -5, -5};
    minfer_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, neg, 4), 1); /* -1 * 1.5 < -1.2 */
    minfer_sampler_free(s);
}
END_TEST

START_TEST(frequency_presence_and_window)
{
    /* Catches frequency not scaling with the count, presence scaling with
     * it, and tokens that left the last-n window still being penalised. */
    struct minfer_sampler_params p = plain();
    p.temperature = 0.0f;
    p.frequency_penalty = 0.5f;
    p.penalty_last_n = 3;
    struct minfer_sampler *s = mk(p, 3);
    float l[3] = {1.0f, 0.1f, 0.0f};
    minfer_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l, 3), 0); /* 1 - 0.5 = 0.5 > 0.1 */
    minfer_sampler_accept(s, 0);
    ck_assert_int_eq(draw(s, l, 3), 1); /* 1 - 2 * 0.5 = 0 < 0.1 */
    minfer_sampler_accept(s, 2);
    minfer_sampler_accept(s, 2); /* window now {0, 2, 2}: one 0 left */
    ck_assert_int_eq(draw(s, l, 3), 0); /* 0.5 vs 0.1 vs -1 */
    minfer_sampler_accept(s, 1); /* window {2, 2, 1}: 0 evicted */
    float l2[3] = {0.25f, 0.3f, 0.2f};
    ck_assert_int_eq(draw(s, l2, 3), 0); /* 0.25 vs -0.2 vs -0.8; unevicted 0 would be -0.25 */
    minfer_sampler_free(s);

    p.frequency_penalty = 0.0f;
    p.presence_penalty = 0.6f;
    s = mk(p, 3);
    float l3[3] = {0.0f, 1.0f, 0.0f};
    for (int i = 0; i < 3; i++)
        minfer_sampler_accept(s, 1);
    ck_assert_int_eq(draw(s, l3, 3), 1); /* 1.0 - 0.6 once = 0.4; 3x would lose to 0 */
    minfer_sampler_reset(s, 0);
    float l4[3] = {0.0f, 0.5f, 0.0f};
    ck_assert_int_eq(draw(s, l4, 3), 1); /* reset cleared the window */
    minfer_sampler_free(s);
}
END_TEST

/* ---- differential test against a full-sort reference ---- */

struct ref_cand {
    int32_t id;
    float l;
};

static int ref_cmp(const void *a, const void *b)
{
    const struct ref_cand *x = a, *y = b;
    if (x->l != y->l)
        return x->l > y->l ? -1 : 1;
    return x->id - y->id;
}

static unsigned rnd(unsigned *r)
{
    *r = *r * 1664525u + 1013904223u;
    return *r >> 8;
}

START_TEST(stages_match_full_sort_reference)
{
    /* Catches any stage keeping a different set than the definition says —
     * heap selection, the growing top-p prefix, min-p, penalties over the
     * window, NaN/-inf handling, the in-place read of a row without NaN
     * or penalties, block skipping in the top-k scan — by comparing the
     * candidates the sampler would draw from with a naive full-sort
     * implementation of the documented stage order, over 300 random
     * parameter sets. N is above the size where top-p without top-k
     * buckets the weights instead of growing a sorted prefix. */
    enum { N = 5000, W = 16 };
    float *logits = malloc(N * sizeof *logits), *l = malloc(N * sizeof *l);
    struct ref_cand *rc = malloc(N * sizeof *rc);
    double *w = malloc(N * sizeof *w);
    unsigned r = 42;
    for (int trial = 0; trial < 300; trial++) {
        for (int i = 0; i < N; i++) {
            unsigned x = rnd(&r);
            logits[i] = (float)(x % 4096) / 256.0f - 8.0f; /* coarse: ties */
            if (x % 97 == 0)
                logits[i] = -INFINITY;
            if (x % 389 == 0 && trial % 2) /* even trials: no NaN, the row is read in place */
                logits[i] = NAN;
        }
        struct minfer_sampler_params p = plain();
        p.temperature = (float)(rnd(&r) % 30) / 10.0f; /* 0 = greedy */
        p.top_k = (int)(rnd(&r) % 4) == 0 ? 0 : (int)(rnd(&r) % 200);
        p.top_p = (rnd(&r) % 3) == 0 ? 1.0f : (float)(rnd(&r) % 1000) / 1000.0f;
        p.min_p = (rnd(&r) % 3) == 0 ? 0.0f : (float)(rnd(&r) % 300) / 1000.0f;
        p.repeat_penalty = (rnd(&r) % 2) ? 1.0f : 1.0f + (float)(rnd(&r) % 100) / 100.0f;
        p.frequency_penalty = (rnd(&r) % 2) ? 0.0f : (float)(rnd(&r) % 100) / 100.0f;
        p.presence_penalty = (rnd(&r) % 2) ? 0.0f : (float)(rnd(&r) % 100) / 100.0f;
        p.penalty_last_n = W;
        struct minfer_sampler *s = mk(p, N);
        int32_t hist[40];
        int nh = (int)(rnd(&r) % 40);
        for (int i = 0; i < nh; i++) {
            hist[i] = (int32_t)(rnd(&r) % 64); /* repeats */
            minfer_sampler_accept(s, hist[i]);
        }
        /* reference: stage 1 */
        for (int i = 0; i < N; i++)
            l[i] = isnan(logits[i]) ? -INFINITY : logits[i];
        int cnt[64] = {0};
        for (int i = nh > W ? nh - W : 0; i < nh; i++)
            cnt[hist[i]]++;
        for (int t = 0; t < 64; t++) {
            if (!cnt[t])
                continue;
            if (p.repeat_penalty != 1.0f)
                l[t] = l[t] > 0 ? l[t] / p.repeat_penalty : l[t] * p.repeat_penalty;
            l[t] -= (float)cnt[t] * p.frequency_penalty + p.presence_penalty;
        }
        size_t m = 0;
        for (int i = 0; i < N; i++)
            if (l[i] > -INFINITY)
                rc[m++] = (struct ref_cand){i, l[i]};
        qsort(rc, m, sizeof *rc, ref_cmp);
        bool greedy = p.temperature <= 0.0f || p.top_k == 1;
        if (greedy) {
            m = 1;
            w[0] = 1.0;
        } else {
            if (p.top_k > 0 && (size_t)p.top_k < m)
                m = (size_t)p.top_k;
            double sum = 0;
            for (size_t i = 0; i < m; i++)
                sum += w[i] = expf((rc[i].l - rc[0].l) * (1.0f / p.temperature));
            if (p.top_p < 1.0f) {
                double cum = 0, want = (double)p.top_p * sum;
                size_t cut = 0;
                while (cut < m && cum < want)
                    cum += w[cut++];
                m = cut ? cut : 1;
            }
            if (p.min_p > 0.0f) {
                size_t k = 0;
                for (size_t i = 0; i < m; i++)
                    if (w[i] >= p.min_p) {
                        rc[k] = rc[i];
                        w[k++] = w[i];
                    }
                m = k;
            }
        }
        const int32_t *ids;
        const float *wt;
        size_t gm;
        double gsum;
        ck_assert_int_eq(sampler_candidates(s, logits, N, &ids, &wt, &gm, &gsum), MINFER_OK);
        ck_assert_msg(gm == m, "trial %d: %zu candidates, reference %zu (T %g k %d p %g min_p %g)",
                      trial, gm, m, (double)p.temperature, p.top_k, (double)p.top_p,
                      (double)p.min_p);
        /* the draw order may differ (unsorted when only min-p runs): compare by id */
        static bool seen[N];
        memset(seen, 0, sizeof seen);
        for (size_t i = 0; i < m; i++) {
            ck_assert_msg(!seen[ids[i]], "trial %d: id %d twice", trial, ids[i]);
            seen[ids[i]] = true;
            size_t j = 0;
            while (j < m && rc[j].id != ids[i])
                j++;
            ck_assert_msg(j < m, "trial %d: candidate %d is not in the reference set", trial,
                          ids[i]);
            ck_assert_msg(fabs(wt[i] - w[j]) <= 1e-6 * (1 + fabs(w[j])),
                          "trial %d: id %d weight %g, reference %g", trial, ids[i],
                          (double)wt[i], w[j]);
        }
        minfer_sampler_free(s);
    }
    free(logits);
    free(l);
    free(rc);
    free(w);
}
END_TEST

START_TEST(bad_input_refused)
{
    /* Catches a size mismatch reading past the logits, all-masked logits
     * returning garbage, and invalid parameters being accepted. */
    struct minfer_sampler_params p = plain();
    struct minfer_sampler *s = mk(p, 4);
    float l[4] = {-INFINITY, -INFINITY, NAN, -INFINITY};
    int32_t id;
    ck_assert_int_eq(minfer_sampler_sample(s, l, 4, &id), MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_sampler_sample(s, l, 5, &id), MINFER_ERR_INVALID_ARG);
    l[3] = 0.0f; /* one finite logit: only choice */
    ck_assert_int_eq(minfer_sampler_sample(s, l, 4, &id), MINFER_OK);
    ck_assert_int_eq(id, 3);
    minfer_sampler_accept(s, -3); /* ignored, not a crash */
    minfer_sampler_accept(s, 1 << 30);
    minfer_sampler_free(s);
    minfer_sampler_free(NULL);
    minfer_status st;
    char err[256];
    p.repeat_penalty = 0.0f;
    ck_assert_ptr_null(minfer_sampler_new(&p, 4, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err, "repeat_penalty"));
    p = plain();
    ck_assert_ptr_null(minfer_sampler_new(&p, 0, &st, err, sizeof err));
}
END_TEST

START_TEST(fast_on_152k_vocab)
{
    /* Catches a full sort per token (~10+ ms at 152k) sneaking back into
     * the default path (top-k 40, top-p, min-p), with penalties (the row
     * is copied), without (read in place: minfer serve's default) and
     * greedy. Prints each rate (docs/PERF.md, "Serving"). */
    enum { N = 151936, T = 300 };
    float *l = malloc(N * sizeof *l);
    unsigned r = 3;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        l[i] = (float)(r >> 8) / (float)(1 << 24) * 20.0f - 10.0f;
    }
    const char *name[3] = {"defaults + repeat_penalty 1.1", "defaults", "greedy"};
    for (int c = 0; c < 3; c++) {
        struct minfer_sampler_params p = minfer_sampler_default_params();
        if (c == 0)
            p.repeat_penalty = 1.1f;
        if (c == 2)
            p.temperature = 0.0f;
        struct minfer_sampler *s = mk(p, N);
        clock_t t0 = clock();
        for (int i = 0; i < T; i++)
            minfer_sampler_accept(s, draw(s, l, N));
        double us = (double)(clock() - t0) / CLOCKS_PER_SEC * 1e6 / T;
        printf("sampler: %.0f us per token at n_vocab %d (%s)\n", us, N, name[c]);
        ck_assert_msg(us < 5000, "%.0f us per token (%s)", us, name[c]);
        minfer_sampler_free(s);
    }
    free(l);
}
END_TEST

Suite *sampler_suite(void);
Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, greedy_argmax_lowest_on_tie);
    tcase_add_test(tc, seed_determinism);
    tcase_add_test(tc, top_k_exact_set);
    tcase_add_test(tc, temperature_scales_distribution);
    tcase_add_test(tc, top_p_smallest_prefix);
    tcase_add_test(tc, min_p_threshold);
    tcase_add_test(tc, repetition_penalty_both_signs);
    tcase_add_test(tc, frequency_presence_and_window);
    tcase_add_test(tc, stages_match_full_sort_reference);
    tcase_add_test(tc, bad_input_refused);
    tcase_add_test(tc, fast_on_152k_vocab);
    suite_add_tcase(s, tc);
    return s;
}
