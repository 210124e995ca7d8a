/*
 * engine.c — the context behind the scheduler's small interface (a batch
 * of {token, position, sequence, logits?}, sequence removal and copy, KV
 * usage). This version drives the single-sequence API: one sequence (0),
 * whose tokens must continue the cache, logits for the last token only.
 * The scheduler asks engine_n_seq() and so runs one request at a time on
 * it; the multi-sequence API (issue 14) replaces it without touching the
 * scheduler.
 */
#include <stdio.h>
#include <stdlib.h>

#include "serve.h"

struct engine {
    struct minfer_ctx *ctx;
    int32_t *ids; /* scratch for one decode */
    int32_t cap;
    int last_n;   /* tokens in the last decode */
};

struct engine *engine_new(struct minfer_ctx *ctx, int n_seq)
{
    (void)n_seq;
    struct engine *e = calloc(1, sizeof *e);
    if (e)
        e->ctx = ctx;
    return e;
}

void engine_free(struct engine *e)
{
    if (!e)
        return;
    free(e->ids);
    free(e);
}

int engine_n_seq(const struct engine *e)
{
    (void)e;
    return 1;
}

bool engine_can_copy(const struct engine *e)
{
    (void)e;
    return false;
}

int engine_decode(struct engine *e, const struct eng_tok *t, int n, char *err, size_t len)
{
    if (n <= 0)
        return 0;
    int32_t past = minfer_ctx_n_past(e->ctx);
    for (int i = 0; i < n; i++)
        if (t[i].seq != 0 || t[i].pos != past + i || (t[i].logits && i != n - 1)) {
            snprintf(err, len, "engine: token %d (seq %d, pos %d) does not continue sequence 0 "
                               "at %d", i, t[i].seq, t[i].pos, past + i);
            return -1;
        }
    if (n > e->cap) {
        int32_t *p = realloc(e->ids, sizeof *p * (size_t)n);
        if (!p) {
            snprintf(err, len, "engine: out of memory for %d tokens", n);
            return -1;
        }
        e->ids = p;
        e->cap = n;
    }
    for (int i = 0; i < n; i++)
        e->ids[i] = t[i].tok;
    if (minfer_ctx_decode(e->ctx, e->ids, n, 0) != MINFER_OK) {
        snprintf(err, len, "%s", minfer_ctx_last_error(e->ctx));
        return -1;
    }
    e->last_n = n;
    return 0;
}

const float *engine_logits(struct engine *e, int i)
{
    return i == e->last_n - 1 ? minfer_ctx_logits(e->ctx, -1) : NULL;
}

void engine_seq_rm(struct engine *e, int seq, int32_t p0)
{
    if (seq == 0 && p0 >= 0 && p0 < minfer_ctx_n_past(e->ctx))
        minfer_ctx_truncate(e->ctx, p0);
}

int engine_seq_cp(struct engine *e, int src, int dst, int32_t n)
{
    (void)e;
    (void)src;
    (void)dst;
    (void)n;
    return -1;
}

void engine_kv_usage(const struct engine *e, int32_t *used, int32_t *total)
{
    *used = minfer_ctx_n_past(e->ctx);
    *total = minfer_ctx_n_ctx(e->ctx);
}
