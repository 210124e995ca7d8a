/*
 * sched.c — the engine thread: continuous batching over --parallel slots.
 *
 * Each step builds one batch: every generating slot contributes its next
 * token, then prefilling slots contribute prompt chunks from what is left
 * of n_batch (round robin), so a long prompt never stalls running streams.
 * A request joins at the next step after a slot frees and leaves the step
 * it ends. Slot i is sequence i of the context.
 *
 * Prefix cache: a slot keeps the KV of the last sequence it ran. A new job
 * takes the idle slot whose cached tokens share the longest prefix with
 * its prompt and prefills only the rest; when the engine can share cells
 * between sequences (minfer_ctx_seq_copy) the prefix of any other slot,
 * busy or idle, is forked into it instead. A cancelled job's cells are
 * freed at once and never cached. Each slot may hold n_ctx / parallel
 * tokens, as llama-server divides its context, so the cache does not fill;
 * if a decode fails anyway, idle slots' prefixes are dropped and it is
 * retried once.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "serve.h"

struct slot {
    int seq;
    struct job *job;      /* NULL when idle */
    int32_t *cache;       /* tokens whose KV this sequence holds */
    int32_t n_cache, cap_cache;
    int32_t n_prefilled;  /* of job->prompt */
    int32_t next_tok;     /* sampled, to be decoded next step */
    bool generating;
    int batch_idx;        /* its logits row in the current batch, or -1 */
    double last_used;
    struct cJSON *pending_lp; /* logprob entries not yet sent with text */
    /* this step's sample, drawn in parallel (sample_slot) */
    const float *lg;
    int32_t sampled;
    bool sample_ok;
    struct cJSON *lp_new;
};

/* Sampling threads: after a pass, the slots' samplers run in parallel
 * (each over n_vocab logits; at 32 sequences of a 152k vocabulary that is
 * milliseconds a step if done one by one). Only sampling runs there: the
 * context and everything after the sample stay on the engine thread. */
struct pool {
    pthread_t th[15];
    int n;                   /* worker threads; the engine thread joins in too */
    pthread_mutex_t mu;
    pthread_cond_t go, done;
    unsigned gen;            /* bumped per round */
    int next, left;          /* next work index, workers still busy */
    int n_work;
    bool quit;
};

struct sched {
    struct serve_cfg cfg;
    struct engine *eng;
    const struct minfer_tokenizer *tok;
    int32_t n_vocab, n_ctx, slot_ctx, n_batch;
    int n_slots;
    struct slot *slots;
    pthread_t th;
    bool started;
    pthread_mutex_t mu; /* queue, n_running, stop */
    pthread_cond_t cv;
    struct job **queue;
    int q_len, q_cap, n_running;
    bool stop;
    int rr; /* round-robin start among prefilling slots */
    struct eng_tok *batch;
    struct eng_tok *sub;  /* one sequence's part of a failed batch */
    float *masked;      /* [16][n_vocab] per sampling thread: logits without
                           end-of-generation ids (ignore_eos) */
    struct slot **work; /* this round's slots to sample */
    struct pool pool;
    int32_t *eog;       /* the vocabulary's end-of-generation ids */
    int32_t n_eog;
};

double serve_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

/* ---- slots ---- */

static int cache_push(struct slot *s, int32_t id)
{
    if (s->n_cache == s->cap_cache) {
        int32_t cap = s->cap_cache ? s->cap_cache * 2 : 256;
        int32_t *p = realloc(s->cache, sizeof *p * (size_t)cap);
        if (!p)
            return -1;
        s->cache = p;
        s->cap_cache = cap;
    }
    s->cache[s->n_cache++] = id;
    return 0;
}

static int32_t common_prefix(const int32_t *a, int32_t na, const int32_t *b, int32_t nb)
{
    int32_t i = 0;
    while (i < na && i < nb && a[i] == b[i])
        i++;
    return i;
}

static void slot_clear(struct sched *s, struct slot *sl)
{
    engine_seq_rm(s->eng, sl->seq, 0);
    sl->n_cache = 0;
}

static void update_kv(struct sched *s)
{
    int32_t used, total;
    int64_t held = 0;
    engine_kv_usage(s->eng, &used, &total);
    for (int i = 0; i < s->n_slots; i++)
        held += s->slots[i].n_cache;
    metrics_kv(used, total, held);
}

/* Puts job j into an idle slot, reusing the longest cached prefix. */
static void admit(struct sched *s, struct job *j)
{
    struct slot *best = NULL;
    int32_t best_keep = -1;
    for (int i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (sl->job)
            continue;
        int32_t k = common_prefix(sl->cache, sl->n_cache, j->prompt, j->n_prompt);
        if (k > best_keep || (k == best_keep && sl->last_used < best->last_used)) {
            best = sl;
            best_keep = k;
        }
    }
    if (s->cfg.no_prefix_cache)
        best_keep = 0;
    /* A longer shared prefix held by another sequence is forked in. */
    if (!s->cfg.no_prefix_cache && engine_can_copy(s->eng)) {
        struct slot *src = NULL;
        int32_t src_keep = best_keep;
        for (int i = 0; i < s->n_slots; i++) {
            struct slot *sl = &s->slots[i];
            if (sl == best)
                continue;
            int32_t k = common_prefix(sl->cache, sl->n_cache, j->prompt, j->n_prompt);
            if (k > src_keep) {
                src = sl;
                src_keep = k;
            }
        }
        if (src) {
            slot_clear(s, best);
            if (engine_seq_cp(s->eng, src->seq, best->seq, src_keep) == 0) {
                for (int32_t i = 0; i < src_keep; i++)
                    cache_push(best, src->cache[i]);
                best_keep = src_keep;
            } else {
                best_keep = 0;
            }
        }
    }
    if (best_keep >= j->n_prompt) /* all cached: recompute the last token for its logits */
        best_keep = j->n_prompt - 1;
    if (best_keep < 0)
        best_keep = 0;
    engine_seq_rm(s->eng, best->seq, best_keep);
    best->n_cache = best_keep;
    best->n_prefilled = best_keep;
    best->generating = false;
    best->job = j;
    j->slot = best->seq;
    metrics_active(1);
    metrics_tokens(j->n_prompt, 0);
    metrics_cached(best_keep);
}

/* ---- ending jobs ---- */

static void job_done(struct sched *s, struct job *j, enum finish f, const char *why)
{
    struct sreq *r = j->r;
    j->finish = f;
    if (why)
        snprintf(j->error, sizeof j->error, "%s", why);
    j->done = true;
    pthread_mutex_lock(&r->mu);
    r->prompt_tokens += j->n_prompt;
    r->completion_tokens += j->n_gen;
    out_finish_locked(r, j);
    if (++r->n_done == r->n_jobs) {
        out_complete_locked(r);
        r->finished = true;
        sreq_emit_locked(r, "", 0); /* wake the connection */
    }
    pthread_mutex_unlock(&r->mu);
    if (j->slot >= 0) {
        struct slot *sl = &s->slots[j->slot];
        if (f == FINISH_CANCEL || f == FINISH_ERROR)
            slot_clear(s, sl);
        sl->job = NULL;
        sl->last_used = serve_now_ms();
        cJSON_Delete(sl->pending_lp);
        sl->pending_lp = NULL;
        metrics_active(-1);
        pthread_mutex_lock(&s->mu);
        s->n_running--;
        pthread_mutex_unlock(&s->mu);
    }
    sreq_unref(r);
}

/* Longest suffix of text[0..n) that is a proper prefix of a stop string:
 * those bytes are held back until the next token decides. */
static size_t held_suffix(const struct serve_params *p, const char *text, size_t n)
{
    size_t hold = 0;
    for (size_t k = 0; k < p->n_stop; k++) {
        size_t ls = strlen(p->stop[k]);
        for (size_t m = ls - 1; m > hold; m--)
            if (m <= n && !memcmp(text + n - m, p->stop[k], m)) {
                hold = m;
                break;
            }
    }
    return hold;
}

/* Sends what of the text is final; cuts at a stop string (true). Only the
 * last max_stop bytes already sent can start a match. */
static bool flush_text(struct slot *sl, struct job *j, bool final)
{
    const struct serve_params *p = &j->r->p;
    bool stopped = false;
    size_t max_stop = 0;
    for (size_t k = 0; k < p->n_stop; k++)
        max_stop = strlen(p->stop[k]) > max_stop ? strlen(p->stop[k]) : max_stop;
    size_t from = j->text_sent > max_stop ? j->text_sent - max_stop : 0;
    size_t cut = j->text.n;
    for (size_t k = 0; k < p->n_stop; k++) {
        const char *hit = j->text.p && from < j->text.n ? strstr(j->text.p + from, p->stop[k])
                                                        : NULL;
        if (hit && (size_t)(hit - j->text.p) < cut) {
            cut = (size_t)(hit - j->text.p);
            stopped = true;
        }
    }
    if (stopped) {
        j->text.n = cut;
        j->text.p[cut] = 0;
    }
    size_t end = stopped || final ? j->text.n : j->text.n - held_suffix(p, j->text.p, j->text.n);
    if (end > j->text_sent || (sl->pending_lp && (final || stopped))) {
        pthread_mutex_lock(&j->r->mu);
        out_delta_locked(j->r, j, j->text.p + j->text_sent, end - j->text_sent, sl->pending_lp);
        pthread_mutex_unlock(&j->r->mu);
        sl->pending_lp = NULL;
        j->text_sent = end;
    }
    return stopped;
}

/* ---- logprobs ---- */

/* Valid UTF-8 copy of b[n] (invalid bytes become U+FFFD) into o. */
static void utf8_clean(const char *b, size_t n, struct sbuf *o)
{
    const unsigned char *u = (const unsigned char *)b;
    for (size_t i = 0; i < n;) {
        size_t len = u[i] < 0x80 ? 1 : (u[i] >> 5) == 6 ? 2 : (u[i] >> 4) == 14 ? 3
                   : (u[i] >> 3) == 30 ? 4 : 0;
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; k++)
            ok = (u[i + k] & 0xC0) == 0x80;
        if (ok && u[i] == 0) {
            i++;
        } else if (ok) {
            sbuf_add(o, b + i, len);
            i += len;
        } else {
            sbuf_add(o, "\xEF\xBF\xBD", 3);
            i++;
        }
    }
    sbuf_add(o, "", 0);
}

static cJSON *lp_entry(const struct sched *s, int32_t id, double lp, bool bytes)
{
    size_t n = 0;
    const char *b = minfer_token_bytes(s->tok, id, &n);
    struct sbuf t = {0};
    utf8_clean(b ? b : "", b ? n : 0, &t);
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "token", t.p ? t.p : "");
    cJSON_AddNumberToObject(e, "logprob", lp);
    if (bytes) {
        cJSON *a = cJSON_AddArrayToObject(e, "bytes");
        for (size_t i = 0; i < n; i++)
            cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)b[i]));
    }
    sbuf_free(&t);
    return e;
}

/* The chosen token's log-probability under the model's distribution and
 * the top_logprobs most likely alternatives. */
static cJSON *logprobs_of(const struct sched *s, const float *logits, int32_t id, int top)
{
    float mx = -INFINITY;
    for (int32_t i = 0; i < s->n_vocab; i++)
        mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    cJSON *e = lp_entry(s, id, logits[id] - lse, true);
    cJSON *tops = cJSON_AddArrayToObject(e, "top_logprobs");
    int32_t best[SERVE_MAX_TOP_LOGPROBS];
    int nb = 0;
    for (int32_t i = 0; i < s->n_vocab && top > 0; i++) {
        if (nb == top && logits[i] <= logits[best[nb - 1]])
            continue;
        int k = nb < top ? nb++ : nb - 1;
        while (k > 0 && logits[best[k - 1]] < logits[i]) {
            best[k] = best[k - 1];
            k--;
        }
        best[k] = i;
    }
    for (int k = 0; k < nb; k++)
        cJSON_AddItemToArray(tops, lp_entry(s, best[k], logits[best[k]] - lse, true));
    return e;
}

/* ---- one token ---- */

/* Appends decoded bytes without NULs: JSON strings here are C strings,
 * and a NUL (a byte token of a synthetic vocabulary) would cut them. */
static void add_text(struct sbuf *t, const char *b, size_t n)
{
    for (size_t i = 0; i < n;) {
        size_t k = i;
        while (k < n && b[k])
            k++;
        sbuf_add(t, b + i, k - i);
        i = k + 1;
    }
}

/* Draws sl's next token from sl->lg (any thread; scratch: n_vocab floats). */
static void sample_slot(struct sched *s, struct slot *sl, float *scratch)
{
    const struct serve_params *p = &sl->job->r->p;
    const float *logits = sl->lg;
    if (p->ignore_eos && s->n_eog &&
        eog_mask_matters(&p->sp, p->logprobs, s->eog, s->n_eog, logits, s->n_vocab)) {
        memcpy(scratch, logits, sizeof *logits * (size_t)s->n_vocab);
        for (int32_t i = 0; i < s->n_eog; i++)
            scratch[s->eog[i]] = -INFINITY;
        logits = scratch;
    }
    sl->sample_ok = minfer_sampler_sample(sl->job->smp, logits, s->n_vocab, &sl->sampled) ==
                    MINFER_OK;
    sl->lp_new = sl->sample_ok && p->logprobs
                     ? logprobs_of(s, logits, sl->sampled, p->top_logprobs)
                     : NULL;
}

static void on_token(struct sched *s, struct slot *sl)
{
    struct job *j = sl->job;
    const struct serve_params *p = &j->r->p;
    int32_t id = sl->sampled;
    if (!sl->sample_ok) {
        job_done(s, j, FINISH_ERROR, "sampling failed: no finite logit");
        return;
    }
    double now = serve_now_ms();
    if (j->n_gen == 0) {
        j->t_first_ms = now;
        metrics_ttft(now - j->t_enqueue_ms);
    } else {
        metrics_token_latency(now - j->t_last_ms);
    }
    j->t_last_ms = now;
    minfer_sampler_accept(j->smp, id);
    if (j->n_gen == j->cap_gen) {
        int32_t cap = j->cap_gen ? j->cap_gen * 2 : 64;
        int32_t *g = realloc(j->gen, sizeof *g * (size_t)cap);
        if (!g) {
            job_done(s, j, FINISH_ERROR, "out of memory");
            return;
        }
        j->gen = g;
        j->cap_gen = cap;
    }
    j->gen[j->n_gen++] = id;
    metrics_tokens(0, 1);
    if (sl->lp_new) {
        if (!sl->pending_lp)
            sl->pending_lp = cJSON_CreateArray();
        cJSON_AddItemToArray(sl->pending_lp, sl->lp_new);
        sl->lp_new = NULL;
    }
    bool eog = minfer_tokenizer_is_eog(s->tok, id);
    char buf[512];
    size_t nb = 0;
    if (!eog && minfer_detok_push(j->dt, id, buf, sizeof buf, &nb) == MINFER_OK)
        add_text(&j->text, buf, nb);
    bool length = (p->max_tokens >= 0 && j->n_gen >= p->max_tokens) ||
                  sl->n_cache + 1 >= s->slot_ctx ||
                  (j->r->deadline_ms > 0 && now >= j->r->deadline_ms);
    if (eog || length) {
        nb = 0;
        if (minfer_detok_flush(j->dt, buf, sizeof buf, &nb) == MINFER_OK)
            add_text(&j->text, buf, nb);
    }
    if (flush_text(sl, j, eog || length)) {
        job_done(s, j, FINISH_STOP, NULL);
        return;
    }
    if (eog || length) {
        job_done(s, j, eog ? FINISH_STOP : FINISH_LENGTH, NULL);
        return;
    }
    sl->next_tok = id;
    sl->generating = true;
}

/* ---- sampling threads ---- */

static void pool_work(struct sched *s, int worker)
{
    float *scratch = s->masked + (size_t)worker * (size_t)s->n_vocab;
    for (;;) {
        pthread_mutex_lock(&s->pool.mu);
        int k = s->pool.next < s->pool.n_work ? s->pool.next++ : -1;
        pthread_mutex_unlock(&s->pool.mu);
        if (k < 0)
            return;
        sample_slot(s, s->work[k], scratch);
    }
}

struct worker_arg {
    struct sched *s;
    int id;
};

static void *pool_main(void *arg)
{
    struct worker_arg wa = *(struct worker_arg *)arg;
    free(arg);
    struct pool *pl = &wa.s->pool;
    unsigned seen = 0;
    for (;;) {
        pthread_mutex_lock(&pl->mu);
        while (!pl->quit && pl->gen == seen)
            pthread_cond_wait(&pl->go, &pl->mu);
        if (pl->quit) {
            pthread_mutex_unlock(&pl->mu);
            return NULL;
        }
        seen = pl->gen;
        pthread_mutex_unlock(&pl->mu);
        pool_work(wa.s, wa.id);
        pthread_mutex_lock(&pl->mu);
        if (--pl->left == 0)
            pthread_cond_signal(&pl->done);
        pthread_mutex_unlock(&pl->mu);
    }
}

/* Samples s->work[0..n) on the pool and the calling thread. */
static void sample_all(struct sched *s, int n)
{
    struct pool *pl = &s->pool;
    if (pl->n == 0 || n < 2) {
        for (int k = 0; k < n; k++)
            sample_slot(s, s->work[k], s->masked);
        return;
    }
    pthread_mutex_lock(&pl->mu);
    pl->n_work = n;
    pl->next = 0;
    pl->left = pl->n;
    pl->gen++;
    pthread_cond_broadcast(&pl->go);
    pthread_mutex_unlock(&pl->mu);
    pool_work(s, 0);
    pthread_mutex_lock(&pl->mu);
    while (pl->left > 0)
        pthread_cond_wait(&pl->done, &pl->mu);
    pthread_mutex_unlock(&pl->mu);
}

static void pool_start(struct sched *s, int n)
{
    struct pool *pl = &s->pool;
    pthread_mutex_init(&pl->mu, NULL);
    pthread_cond_init(&pl->go, NULL);
    pthread_cond_init(&pl->done, NULL);
    for (int i = 0; i < n; i++) {
        struct worker_arg *wa = malloc(sizeof *wa);
        if (!wa)
            break;
        *wa = (struct worker_arg){s, i + 1};
        if (pthread_create(&pl->th[i], NULL, pool_main, wa) != 0) {
            free(wa);
            break;
        }
        pl->n++;
    }
}

static void pool_stop(struct sched *s)
{
    struct pool *pl = &s->pool;
    if (pl->n == 0)
        return;
    pthread_mutex_lock(&pl->mu);
    pl->quit = true;
    pthread_cond_broadcast(&pl->go);
    pthread_mutex_unlock(&pl->mu);
    for (int i = 0; i < pl->n; i++)
        pthread_join(pl->th[i], NULL);
    pl->n = 0;
}

/* ---- the step ---- */

/* Ends jobs whose client left or whose time ran out. */
static void check_running(struct sched *s)
{
    double now = serve_now_ms();
    for (int i = 0; i < s->n_slots; i++) {
        struct job *j = s->slots[i].job;
        if (!j)
            continue;
        if (sreq_client_gone(j->r))
            job_done(s, j, FINISH_CANCEL, "the client disconnected");
        else if (j->r->deadline_ms > 0 && now >= j->r->deadline_ms)
            job_done(s, j, j->n_gen > 0 ? FINISH_LENGTH : FINISH_ERROR,
                     j->n_gen > 0 ? NULL : "the request ran past --timeout before its first token");
    }
}

/* A slot's bookkeeping after a pass that held its tokens (batch_idx: its
 * logits row in that pass, or -1). */
static void after_decode(struct sched *s, struct slot *sl, int32_t n_pref)
{
    if (sl->generating && sl->batch_idx >= 0) {
        cache_push(sl, sl->next_tok);
    } else if (n_pref > 0) {
        for (int32_t t = 0; t < n_pref; t++)
            cache_push(sl, sl->job->prompt[sl->n_prefilled + t]);
        sl->n_prefilled += n_pref;
    }
    if (sl->batch_idx >= 0) {
        sl->lg = engine_logits(s->eng, sl->batch_idx);
        if (!sl->lg)
            job_done(s, sl->job, FINISH_ERROR, "no logits for the sequence's last token");
    }
}

/* Samples every slot whose logits the pass kept, then handles each token. */
static void sample_and_emit(struct sched *s)
{
    int n = 0;
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].job && s->slots[i].batch_idx >= 0 && s->slots[i].lg)
            s->work[n++] = &s->slots[i];
    sample_all(s, n);
    for (int k = 0; k < n; k++) {
        on_token(s, s->work[k]);
        s->work[k]->lg = NULL;
    }
}

/* A pass failed: run each sequence's tokens alone, so one request's
 * failure ends that request only. */
static void isolate(struct sched *s, int n, const int32_t *n_pref)
{
    for (int i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        if (!sl->job || (!sl->generating && n_pref[i] == 0))
            continue;
        int m = 0, last = -1;
        for (int k = 0; k < n; k++)
            if (s->batch[k].seq == sl->seq) {
                s->sub[m] = s->batch[k];
                if (s->batch[k].logits)
                    last = m;
                m++;
            }
        if (m == 0)
            continue;
        char err[512];
        engine_seq_rm(s->eng, sl->seq, s->sub[0].pos); /* what the failed pass may have left */
        if (engine_decode(s->eng, s->sub, m, err, sizeof err)) {
            fprintf(stderr, "minfer serve: sequence %d failed alone: %s\n", sl->seq, err);
            job_done(s, sl->job, FINISH_ERROR, err);
            continue;
        }
        metrics_step(m, 1);
        sl->batch_idx = last;
        after_decode(s, sl, n_pref[i]);
        if (sl->job && sl->lg) {
            sample_slot(s, sl, s->masked);
            on_token(s, sl);
            sl->lg = NULL;
        }
    }
}

static void step(struct sched *s)
{
    int n = 0;
    int32_t budget = s->n_batch;
    for (int i = 0; i < s->n_slots; i++) {
        struct slot *sl = &s->slots[i];
        sl->batch_idx = -1;
        if (!sl->job || !sl->generating)
            continue;
        s->batch[n] = (struct eng_tok){sl->next_tok, sl->n_cache, sl->seq, true};
        sl->batch_idx = n++;
        budget--;
    }
    int n_pref[s->n_slots];
    for (int k = 0; k < s->n_slots; k++) {
        int i = (s->rr + k) % s->n_slots;
        struct slot *sl = &s->slots[i];
        n_pref[i] = 0;
        if (!sl->job || sl->generating || budget <= 0)
            continue;
        int32_t left = sl->job->n_prompt - sl->n_prefilled;
        int32_t take = left < budget ? left : budget;
        for (int32_t t = 0; t < take; t++) {
            int32_t pos = sl->n_prefilled + t;
            bool last = pos == sl->job->n_prompt - 1;
            s->batch[n] = (struct eng_tok){sl->job->prompt[pos], pos, sl->seq, last};
            if (last)
                sl->batch_idx = n;
            n++;
        }
        n_pref[i] = take;
        budget -= take;
    }
    s->rr = (s->rr + 1) % s->n_slots;
    if (n == 0) {
        update_kv(s);
        return;
    }
    char err[512];
    int rc = engine_decode(s->eng, s->batch, n, err, sizeof err);
    if (rc) { /* the cache may be full of idle slots' prefixes: drop them, retry once */
        bool freed = false;
        for (int i = 0; i < s->n_slots; i++)
            if (!s->slots[i].job && s->slots[i].n_cache) {
                slot_clear(s, &s->slots[i]);
                freed = true;
            }
        if (freed)
            rc = engine_decode(s->eng, s->batch, n, err, sizeof err);
    }
    if (rc) {
        fprintf(stderr, "minfer serve: a pass of %d tokens failed (%s); retrying each sequence "
                        "alone\n", n, err);
        isolate(s, n, n_pref);
        update_kv(s);
        return;
    }
    int n_seqs = 0;
    for (int i = 0; i < s->n_slots; i++)
        n_seqs += s->slots[i].job && (s->slots[i].generating || n_pref[i] > 0);
    metrics_step(n, n_seqs);
    for (int i = 0; i < s->n_slots; i++)
        if (s->slots[i].job)
            after_decode(s, &s->slots[i], n_pref[i]);
    sample_and_emit(s);
    update_kv(s);
}

/* ---- the thread ---- */

static void end_queued_locked(struct sched *s, const char *why, bool only_expired)
{
    double now = serve_now_ms();
    int w = 0;
    for (int i = 0; i < s->q_len; i++) {
        struct job *j = s->queue[i];
        bool gone = sreq_client_gone(j->r);
        bool expired = j->r->deadline_ms > 0 && now >= j->r->deadline_ms;
        if (!only_expired || gone || expired) {
            /* s->mu stays held: job_done takes it only for jobs in a slot */
            metrics_queued(-1);
            job_done(s, j, gone ? FINISH_CANCEL : FINISH_ERROR,
                     gone ? "the client disconnected"
                          : expired ? "the request waited in the queue past --timeout" : why);
        } else {
            s->queue[w++] = j;
        }
    }
    s->q_len = w;
}

static void *thread_main(void *arg)
{
    struct sched *s = arg;
    for (;;) {
        pthread_mutex_lock(&s->mu);
        while (!s->stop && s->q_len == 0 && s->n_running == 0)
            pthread_cond_wait(&s->cv, &s->mu);
        if (s->stop) {
            end_queued_locked(s, "the server is shutting down", false);
            pthread_mutex_unlock(&s->mu);
            for (int i = 0; i < s->n_slots; i++)
                if (s->slots[i].job)
                    job_done(s, s->slots[i].job, FINISH_ERROR, "the server is shutting down");
            update_kv(s);
            return NULL;
        }
        end_queued_locked(s, NULL, true);
        while (s->q_len > 0 && s->n_running < s->n_slots) {
            struct job *j = s->queue[0];
            memmove(s->queue, s->queue + 1, sizeof *s->queue * (size_t)--s->q_len);
            s->n_running++;
            metrics_queued(-1);
            pthread_mutex_unlock(&s->mu);
            admit(s, j);
            pthread_mutex_lock(&s->mu);
        }
        pthread_mutex_unlock(&s->mu);
        check_running(s);
        step(s);
    }
}

/* ---- public ---- */

struct sched *sched_new(const struct serve_cfg *cfg, struct minfer_ctx *ctx,
                        const struct minfer_tokenizer *tok, int32_t n_vocab, char *err,
                        size_t len)
{
    struct sched *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, len, "out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    s->tok = tok;
    s->n_vocab = n_vocab;
    s->n_ctx = minfer_ctx_n_ctx(ctx);
    s->n_batch = cfg->n_batch > 0 ? cfg->n_batch : 512;
    s->eng = engine_new(ctx, cfg->parallel);
    if (!s->eng)
        goto fail;
    s->n_slots = cfg->parallel < engine_n_seq(s->eng) ? cfg->parallel : engine_n_seq(s->eng);
    if (s->n_slots < cfg->parallel)
        fprintf(stderr, "minfer serve: this engine runs %d sequence(s) at once; --parallel %d "
                        "requests queue behind it\n", s->n_slots, cfg->parallel);
    s->slot_ctx = s->n_ctx / s->n_slots;
    if (s->slot_ctx < 8) {
        snprintf(err, len, "-c %d over --parallel %d leaves %d tokens per sequence; raise -c or "
                           "lower --parallel", s->n_ctx, s->n_slots, s->slot_ctx);
        goto fail;
    }
    if (s->n_batch < s->n_slots + 1)
        s->n_batch = s->n_slots + 1;
    s->slots = calloc((size_t)s->n_slots, sizeof *s->slots);
    s->batch = calloc((size_t)s->n_batch, sizeof *s->batch);
    s->sub = calloc((size_t)s->n_batch, sizeof *s->sub);
    s->q_cap = cfg->max_queue + 64 + 1;
    s->queue = calloc((size_t)s->q_cap, sizeof *s->queue);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int workers = cpus > 1 ? (int)(cpus - 1) : 0;
    if (workers > 15)
        workers = 15;
    if (workers > s->n_slots - 1)
        workers = s->n_slots - 1;
    s->masked = malloc(sizeof *s->masked * (size_t)n_vocab * (size_t)(workers + 1));
    s->work = calloc((size_t)s->n_slots, sizeof *s->work);
    s->eog = malloc(sizeof *s->eog * (size_t)n_vocab);
    if (!s->slots || !s->batch || !s->sub || !s->queue || !s->masked || !s->eog || !s->work)
        goto fail;
    pool_start(s, workers);
    for (int32_t i = 0; i < n_vocab; i++)
        if (minfer_tokenizer_is_eog(tok, i))
            s->eog[s->n_eog++] = i;
    for (int i = 0; i < s->n_slots; i++)
        s->slots[i].seq = i;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pthread_create(&s->th, NULL, thread_main, s) != 0) {
        snprintf(err, len, "cannot start the engine thread");
        goto fail;
    }
    s->started = true;
    update_kv(s);
    return s;
fail:
    if (!err[0])
        snprintf(err, len, "out of memory");
    sched_free(s);
    return NULL;
}

int sched_submit(struct sched *s, struct sreq *r)
{
    pthread_mutex_lock(&s->mu);
    int free_slots = s->n_slots - s->n_running;
    if (s->stop || s->q_len + r->n_jobs > s->cfg.max_queue + free_slots ||
        s->q_len + r->n_jobs > s->q_cap) {
        pthread_mutex_unlock(&s->mu);
        return -1;
    }
    for (int i = 0; i < r->n_jobs; i++) {
        /* the engine's reference, dropped in job_done (lock order: s->mu, then r->mu) */
        pthread_mutex_lock(&r->mu);
        r->refs++;
        pthread_mutex_unlock(&r->mu);
        s->queue[s->q_len++] = &r->jobs[i];
        metrics_queued(1);
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return 0;
}

void sched_poke(struct sched *s)
{
    pthread_mutex_lock(&s->mu);
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

void sched_stop(struct sched *s)
{
    if (!s || !s->started)
        return;
    pthread_mutex_lock(&s->mu);
    s->stop = true;
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->th, NULL);
    s->started = false;
}

void sched_free(struct sched *s)
{
    if (!s)
        return;
    sched_stop(s);
    for (int i = 0; s->slots && i < s->n_slots; i++)
        free(s->slots[i].cache);
    free(s->slots);
    free(s->batch);
    free(s->sub);
    free(s->queue);
    pool_stop(s);
    free(s->masked);
    free(s->eog);
    free(s->work);
    engine_free(s->eng);
    free(s);
}

int32_t sched_slot_ctx(const struct sched *s)
{
    return s->slot_ctx;
}

int sched_parallel(const struct sched *s)
{
    return s->n_slots;
}
