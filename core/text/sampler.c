/*
 * sampler.c — picks the next token from a row of logits: penalties over a
 * window of recent ids, greedy, top-k, temperature, top-p, min-p and a
 * seeded draw, in the order documented in minfer.h. Built for a 152k
 * vocabulary: top-k is a heap selection (O(n log k)), top-p sorts only a
 * prefix that grows until it holds the requested mass, min-p is one pass.
 * The PRNG is our own (xoshiro256** seeded by splitmix64) so a seed gives
 * the same ids on every platform.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "runtime/error.h"
#include "minfer/minfer.h"
#include "sampler.h"

/* ---- PRNG ---- */

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t xoshiro(uint64_t s[4])
{
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

/* ---- state ---- */

struct minfer_sampler {
    char err[256];  /* minfer_sampler_last_error */
    struct minfer_sampler_params p;
    int32_t n_vocab;
    uint64_t rng[4];
    float *logit;   /* [n_vocab] penalised copy */
    int32_t *cand;  /* [n_vocab] candidate ids */
    float *prob;    /* [n_vocab] unnormalised probabilities of cand */
    int32_t *count; /* [n_vocab] occurrences in the window */
    int32_t *ring;  /* [penalty_last_n] */
    int32_t ring_pos, ring_n;
};

struct minfer_sampler_params minfer_sampler_default_params(void)
{
    return (struct minfer_sampler_params){
        .struct_size = sizeof(struct minfer_sampler_params),
        .temperature = 0.8f,
        .top_k = 40,
        .top_p = 0.95f,
        .min_p = 0.05f,
        .repeat_penalty = 1.0f,
        .frequency_penalty = 0.0f,
        .presence_penalty = 0.0f,
        .penalty_last_n = 64,
        .seed = 0,
    };
}

void minfer_sampler_reset(struct minfer_sampler *s, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        s->rng[i] = splitmix64(&x);
    for (int32_t i = 0; i < s->ring_n; i++)
        s->count[s->ring[i]] = 0;
    s->ring_pos = s->ring_n = 0;
}

struct minfer_sampler *minfer_sampler_new(const struct minfer_sampler_params *p, int32_t n_vocab,
                                          minfer_status *st, char *err, size_t err_len)
{
    minfer_status s_ = MINFER_ERR_INVALID_ARG;
    struct minfer_sampler *s = NULL;
    if (!p) {
        s_ = errf(err, err_len, s_, "sampler: no parameters given");
        goto out;
    }
    if (p->struct_size != sizeof *p) {
        /* every field is read: a struct from other headers is refused, not misread */
        s_ = errf(err, err_len, s_, "sampler: struct_size %u, expected %zu (start from "
                  "minfer_sampler_default_params())", p->struct_size, sizeof *p);
        goto out;
    }
    if (n_vocab <= 0) {
        s_ = errf(err, err_len, s_, "sampler: n_vocab %d, expected > 0", n_vocab);
        goto out;
    }
    if (!isfinite(p->temperature) || !(p->top_p >= 0.0f) || !(p->min_p <= 1.0f) ||
        isnan(p->min_p)) {
        s_ = errf(err, err_len, s_,
                  "sampler: temperature %g, top_p %g, min_p %g; expected a finite temperature, "
                  "top_p >= 0 and min_p <= 1",
                  (double)p->temperature, (double)p->top_p, (double)p->min_p);
        goto out;
    }
    if (!(p->repeat_penalty > 0.0f) || !isfinite(p->repeat_penalty) ||
        !isfinite(p->frequency_penalty) || !isfinite(p->presence_penalty) ||
        p->penalty_last_n < 0) {
        s_ = errf(err, err_len, s_,
                  "sampler: repeat_penalty %g (expected > 0), frequency %g, presence %g "
                  "(finite), penalty_last_n %d (expected >= 0)",
                  (double)p->repeat_penalty, (double)p->frequency_penalty,
                  (double)p->presence_penalty, p->penalty_last_n);
        goto out;
    }
    s = calloc(1, sizeof *s);
    if (!s)
        goto oom;
    s->p = *p;
    s->n_vocab = n_vocab;
    size_t n = (size_t)n_vocab;
    s->logit = malloc(n * sizeof *s->logit);
    s->cand = malloc(n * sizeof *s->cand);
    s->prob = malloc(n * sizeof *s->prob);
    s->count = calloc(n, sizeof *s->count);
    s->ring = malloc(((size_t)p->penalty_last_n + 1) * sizeof *s->ring);
    if (!s->logit || !s->cand || !s->prob || !s->count || !s->ring)
        goto oom;
    minfer_sampler_reset(s, p->seed);
    *st = MINFER_OK;
    return s;
oom:
    s_ = errf(err, err_len, MINFER_ERR_NO_MEMORY, "sampler: out of memory for %d-token vocabulary",
              n_vocab);
out:
    minfer_sampler_free(s);
    *st = s_;
    return NULL;
}

void minfer_sampler_free(struct minfer_sampler *s)
{
    if (!s)
        return;
    free(s->logit);
    free(s->cand);
    free(s->prob);
    free(s->count);
    free(s->ring);
    free(s);
}

void minfer_sampler_accept(struct minfer_sampler *s, int32_t id)
{
    if (!s || s->p.penalty_last_n == 0 || id < 0 || id >= s->n_vocab)
        return;
    int32_t w = s->p.penalty_last_n;
    if (s->ring_n == w) { /* evict the oldest */
        s->count[s->ring[s->ring_pos]]--;
    } else {
        s->ring_n++;
    }
    s->ring[s->ring_pos] = id;
    s->count[id]++;
    s->ring_pos = (s->ring_pos + 1) % w;
}

/* ---- stages ---- */

/* a before b: higher logit, then lower id */
static bool better(const float *l, int32_t a, int32_t b)
{
    return l[a] > l[b] || (l[a] == l[b] && a < b);
}

/* The scan of a whole row (top-k, greedy) is most of a sample's time at a
 * 152k vocabulary: blocks are first checked by their maximum (SSE where
 * there is SSE: compilers do not vectorise a float max without
 * -ffinite-math-only); only a block that can matter is walked one by one.
 * Rows hold no NaN here (sampler_candidates sanitises or checks first), so
 * each maximum is exact and each skip is one the element loop would make. */
#define SKIP_BLOCK 32

static float block_max(const float *l)
{
#ifdef __SSE2__
    __m128 m0 = _mm_loadu_ps(l), m1 = _mm_loadu_ps(l + 4);
    for (int i = 8; i < SKIP_BLOCK; i += 8) {
        m0 = _mm_max_ps(m0, _mm_loadu_ps(l + i));
        m1 = _mm_max_ps(m1, _mm_loadu_ps(l + i + 4));
    }
    m0 = _mm_max_ps(m0, m1);
    m0 = _mm_max_ps(m0, _mm_movehl_ps(m0, m0));
    m0 = _mm_max_ss(m0, _mm_shuffle_ps(m0, m0, 1));
    return _mm_cvtss_f32(m0);
#else
    float m = l[0];
    for (int i = 1; i < SKIP_BLOCK; i++)
        m = l[i] > m ? l[i] : m;
    return m;
#endif
}

/* Whether l[n] holds a NaN. */
static bool has_nan(const float *l, size_t n)
{
    size_t i = 0;
#ifdef __SSE2__
    __m128 acc = _mm_setzero_ps();
    for (; i + 16 <= n; i += 16) {
        __m128 a = _mm_loadu_ps(l + i), b = _mm_loadu_ps(l + i + 4);
        __m128 c = _mm_loadu_ps(l + i + 8), d = _mm_loadu_ps(l + i + 12);
        acc = _mm_or_ps(acc, _mm_or_ps(_mm_cmpunord_ps(a, b), _mm_cmpunord_ps(c, d)));
    }
    if (_mm_movemask_ps(acc))
        return true;
#endif
    for (; i < n; i++)
        if (l[i] != l[i])
            return true;
    return false;
}

/* Index of the first maximum of l[n] (no NaN): block maxima first, then
 * the first position of the largest. */
static int32_t argmax_first(const float *l, size_t n)
{
    float mx = l[0];
    size_t i = 0;
    for (; i + SKIP_BLOCK <= n; i += SKIP_BLOCK) {
        float b = block_max(l + i);
        mx = b > mx ? b : mx;
    }
    for (; i < n; i++)
        mx = l[i] > mx ? l[i] : mx;
    i = 0;
    while (l[i] != mx)
        i++;
    return (int32_t)i;
}

/* Writes the k best of src[n] (src NULL: the ids 0..n-1) to cand[0..k),
 * best first. src may be cand itself. */
static void select_top(const float *l, const int32_t *src, size_t n, int32_t *cand, size_t k)
{
    /* min-heap of the k best seen so far in cand[0..k): root = worst kept */
    float floor = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        if (!src && i >= k && (i & (SKIP_BLOCK - 1)) == 0 && i + SKIP_BLOCK <= n &&
            block_max(l + i) < floor) {
            i += SKIP_BLOCK - 1; /* every one below the floor: all skipped below anyway */
            continue;
        }
        int32_t c = src ? src[i] : (int32_t)i;
        size_t j;
        if (i < k) {
            j = i;
            while (j && better(l, cand[(j - 1) / 2], c)) {
                cand[j] = cand[(j - 1) / 2];
                j = (j - 1) / 2;
            }
            cand[j] = c;
            if (i + 1 == k)
                floor = l[cand[0]];
            continue;
        }
        if (l[c] < floor || !better(l, c, cand[0]))
            continue; /* the common case: one float compare */
        if (src == cand)
            cand[i] = cand[0]; /* in place: the evicted id keeps a slot for later regrows */
        j = 0; /* sift c down from the root */
        for (;;) {
            size_t a = 2 * j + 1;
            if (a >= k)
                break;
            if (a + 1 < k && better(l, cand[a], cand[a + 1]))
                a++;
            if (!better(l, c, cand[a]))
                break;
            cand[j] = cand[a];
            j = a;
        }
        cand[j] = c;
        floor = l[cand[0]];
    }
    /* heap sort: repeatedly move the worst to the end, giving best first */
    for (size_t m = k; m > 1; m--) {
        int32_t worst = cand[0], c = cand[m - 1];
        size_t j = 0;
        for (;;) {
            size_t a = 2 * j + 1;
            if (a >= m - 1)
                break;
            if (a + 1 < m - 1 && better(l, cand[a], cand[a + 1]))
                a++;
            if (!better(l, c, cand[a]))
                break;
            cand[j] = cand[a];
            j = a;
        }
        cand[j] = c;
        cand[m - 1] = worst;
    }
}

/* Top-p when top-k is off runs over the whole vocabulary. Rather than
 * sorting a prefix that grows 8x until it holds the mass (each growth a
 * pass over every candidate), the weights are summed per bucket of their
 * log (TP_STEPS buckets per unit, the last one open-ended): the buckets
 * follow the logit order, so the candidates of the first buckets that
 * hold the mass (one more for the summation order) are exactly a prefix
 * of the sorted order, and only they are sorted. On a flat 152k row
 * (normal logits, sd 4, T 0.8, top-p 0.95; dev box) a sample went from
 * 1.09 to 0.87 ms; what is left is the exp of every candidate, which the
 * exact sum that top-p and the draw need does not let us skip. */
#define TP_BUCKETS 1024
#define TP_STEPS 32.0f
#define TP_MIN_CANDIDATES 4096 /* below this the growing prefix is as fast */

static int tp_bucket(float li, float mx, float inv_t)
{
    float d = (mx - li) * inv_t * TP_STEPS; /* monotone in li: ties share a bucket */
    return d < (float)(TP_BUCKETS - 1) ? (int)d : TP_BUCKETS - 1;
}

/* Moves to cand[0..k) the candidates of the buckets that hold `want` of
 * the weight (prob[] in cand order), the rest after them; returns k. */
static size_t tp_prefix(struct minfer_sampler *s, const float *l, size_t m, float mx, float inv_t,
                        double want)
{
    double bs[TP_BUCKETS] = {0};
    for (size_t i = 0; i < m; i++)
        bs[tp_bucket(l[s->cand[i]], mx, inv_t)] += s->prob[i];
    double cum = 0;
    int b = 0;
    while (b < TP_BUCKETS - 1 && (cum += bs[b]) < want)
        b++;
    b = b + 1 < TP_BUCKETS ? b + 1 : b;
    size_t k = 0;
    for (size_t i = 0; i < m; i++)
        if (tp_bucket(l[s->cand[i]], mx, inv_t) <= b) {
            int32_t t = s->cand[k];
            s->cand[k++] = s->cand[i];
            s->cand[i] = t;
        }
    return k;
}

static void apply_penalties(struct minfer_sampler *s, float *l)
{
    const struct minfer_sampler_params *p = &s->p;
    for (int32_t i = 0; i < s->ring_n; i++) {
        int32_t t = s->ring[i];
        int32_t c = s->count[t];
        if (c <= 0)
            continue; /* already done (marked negative) */
        if (p->repeat_penalty != 1.0f)
            l[t] = l[t] > 0 ? l[t] / p->repeat_penalty : l[t] * p->repeat_penalty;
        l[t] -= (float)c * p->frequency_penalty + p->presence_penalty;
        s->count[t] = -c;
    }
    for (int32_t i = 0; i < s->ring_n; i++)
        if (s->count[s->ring[i]] < 0)
            s->count[s->ring[i]] = -s->count[s->ring[i]];
}

minfer_status sampler_candidates(struct minfer_sampler *s, const float *logits, int32_t n_vocab,
                                 const int32_t **ids, const float **weights, size_t *n_out,
                                 double *sum_out)
{
    if (!s)
        return MINFER_ERR_INVALID_ARG;
    s->err[0] = 0;
    if (!logits || n_vocab != s->n_vocab)
        return errf(s->err, sizeof s->err, MINFER_ERR_INVALID_ARG,
                    "sampler: %s%d logits given; this sampler was made for %d",
                    logits ? "" : "no logits, ", n_vocab, s->n_vocab);
    const struct minfer_sampler_params *p = &s->p;
    size_t n = (size_t)n_vocab;
    /* 1. penalties, on a copy; NaN counts as -inf. A row with neither is
     * read in place: the copy was a quarter of a sample's time. */
    bool penal = p->repeat_penalty != 1.0f || p->frequency_penalty != 0.0f ||
                 p->presence_penalty != 0.0f;
    bool nan = !(penal && s->ring_n) && has_nan(logits, n);
    const float *l = logits;
    if (nan || (penal && s->ring_n)) {
        for (size_t i = 0; i < n; i++) {
            float v = logits[i];
            s->logit[i] = v != v ? -INFINITY : v;
        }
        if (penal && s->ring_n)
            apply_penalties(s, s->logit);
        l = s->logit;
    }

    bool greedy = p->temperature <= 0.0f || p->top_k == 1;
    int32_t best = 0;
    size_t m = 0;
    bool sorted = false;
    double sum = 0;
    if (!greedy && p->top_k > 0 && (size_t)p->top_k < n) {
        /* 3. top-k straight from the row: one pass, no candidate list */
        m = (size_t)p->top_k;
        select_top(l, NULL, n, s->cand, m);
        while (m > 1 && l[s->cand[m - 1]] == -INFINITY)
            m--; /* fewer finite logits than k */
        sorted = true;
        best = s->cand[0];
        if (!isfinite(l[best])) /* no finite logit (or +inf) */
            return errf(s->err, sizeof s->err, MINFER_ERR_INVALID_ARG,
                        "sampler: no finite logit to sample from (the best is %g)",
                        (double)l[best]);
    } else {
        /* 2. greedy */
        best = argmax_first(l, n);
        if (!isfinite(l[best]))
            return errf(s->err, sizeof s->err, MINFER_ERR_INVALID_ARG,
                        "sampler: no finite logit to sample from (the best is %g)",
                        (double)l[best]);
        if (greedy) {
            s->cand[0] = best;
            s->prob[0] = 1.0f;
            m = 1;
            sum = 1.0;
            goto out;
        }
        /* candidates: every token that is not masked out */
        for (size_t i = 0; i < n; i++)
            if (l[i] > -INFINITY)
                s->cand[m++] = (int32_t)i;
    }
    /* 4. temperature + softmax (unnormalised: the best has weight 1) */
    float mx = l[best], inv_t = 1.0f / p->temperature;
    for (size_t i = 0; i < m; i++) {
        s->prob[i] = expf((l[s->cand[i]] - mx) * inv_t);
        sum += s->prob[i];
    }
    /* 5. top-p over a sorted prefix that grows until it holds the mass */
    if (p->top_p < 1.0f) {
        double want = (double)p->top_p * sum;
        size_t k = sorted ? m : 64;
        bool done = false;
        if (!sorted && m >= TP_MIN_CANDIDATES) {
            k = tp_prefix(s, l, m, mx, inv_t, want);
            select_top(l, s->cand, k, s->cand, k);
            double cum = 0;
            size_t cut = 0;
            for (size_t i = 0; i < k; i++)
                s->prob[i] = expf((l[s->cand[i]] - mx) * inv_t);
            while (cut < k && cum < want)
                cum += s->prob[cut++];
            if (cum >= want || k == m) {
                m = cut ? cut : 1;
                sorted = done = true;
            } else {
                k *= 8; /* summation order left the mass short: grow as below */
            }
        }
        while (!done) {
            if (k > m)
                k = m;
            if (!sorted || k < m) {
                select_top(l, s->cand, m, s->cand, k);
                for (size_t i = 0; i < k; i++)
                    s->prob[i] = expf((l[s->cand[i]] - mx) * inv_t);
            }
            double cum = 0;
            size_t cut = 0;
            while (cut < k && cum < want)
                cum += s->prob[cut++];
            if (cum >= want || k == m) {
                m = cut ? cut : 1;
                sorted = done = true;
                break;
            }
            k *= 8;
        }
        sum = 0;
        for (size_t i = 0; i < m; i++)
            sum += s->prob[i];
    }
    /* 6. min-p: relative to the best token's weight, which is 1 */
    if (p->min_p > 0.0f) {
        size_t k = 0;
        sum = 0;
        for (size_t i = 0; i < m; i++)
            if (s->prob[i] >= p->min_p) {
                s->cand[k] = s->cand[i];
                s->prob[k] = s->prob[i];
                sum += s->prob[k++];
            }
        m = k; /* the best (weight 1) always stays */
    }
out:
    *ids = s->cand;
    *weights = s->prob;
    *n_out = m;
    *sum_out = sum;
    return MINFER_OK;
}

minfer_status minfer_sampler_sample(struct minfer_sampler *s, const float *logits,
                                    int32_t n_vocab, int32_t *out_id)
{
    const int32_t *ids;
    const float *w;
    size_t m;
    double sum;
    if (!out_id)
        return s ? errf(s->err, sizeof s->err, MINFER_ERR_INVALID_ARG, "sampler: no out_id")
                 : MINFER_ERR_INVALID_ARG;
    minfer_status st = sampler_candidates(s, logits, n_vocab, &ids, &w, &m, &sum);
    if (st != MINFER_OK)
        return st;
    if (m == 1) { /* greedy, or one survivor: no draw, the PRNG does not advance */
        *out_id = ids[0];
        return MINFER_OK;
    }
    /* 7. draw */
    double u = (double)(xoshiro(s->rng) >> 11) * 0x1.0p-53 * sum, cum = 0;
    for (size_t i = 0; i < m; i++) {
        cum += w[i];
        if (u < cum) {
            *out_id = ids[i];
            return MINFER_OK;
        }
    }
    *out_id = ids[m - 1]; /* rounding at the very top */
    return MINFER_OK;
}

const char *minfer_sampler_last_error(const struct minfer_sampler *s)
{
    return s ? s->err : "";
}
