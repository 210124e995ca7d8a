/*
 * engine.c — the context behind the scheduler's small interface: a batch
 * of {token, position, sequence, logits?} becomes one
 * minfer_ctx_decode_batch; sequence removal and prefix forks are
 * minfer_ctx_seq_remove / minfer_ctx_seq_copy (cells shared, not copied);
 * usage is minfer_ctx_kv_usage. The context is made with n_seq_max equal
 * to the scheduler's slots (cmd-serve.c) and is touched only by the engine
 * thread, as the context's thread rules require.
 */
#include <stdio.h>
#include <stdlib.h>

#include "serve.h"

struct engine {
    struct minfer_ctx *ctx;
    int n_seq;
    int cap;
    int32_t *tok, *pos, *n_seq_id, *seq; /* [cap] */
    const int32_t **seq_ids;             /* [cap] -> &seq[i] */
    uint8_t *logits;                     /* [cap] */
};

struct engine *engine_new(struct minfer_ctx *ctx, int n_seq)
{
    struct engine *e = calloc(1, sizeof *e);
    if (e) {
        e->ctx = ctx;
        e->n_seq = n_seq;
    }
    return e;
}

void engine_free(struct engine *e)
{
    if (!e)
        return;
    free(e->tok);
    free(e->pos);
    free(e->n_seq_id);
    free(e->seq);
    free(e->seq_ids);
    free(e->logits);
    free(e);
}

int engine_n_seq(const struct engine *e)
{
    return e->n_seq;
}

bool engine_can_copy(const struct engine *e)
{
    (void)e;
    return true;
}

static int grow(struct engine *e, int n)
{
    if (n <= e->cap)
        return 0;
    size_t k = (size_t)n;
    int32_t *tok = realloc(e->tok, sizeof *tok * k);
    if (tok)
        e->tok = tok;
    int32_t *pos = realloc(e->pos, sizeof *pos * k);
    if (pos)
        e->pos = pos;
    int32_t *ns = realloc(e->n_seq_id, sizeof *ns * k);
    if (ns)
        e->n_seq_id = ns;
    int32_t *seq = realloc(e->seq, sizeof *seq * k);
    if (seq)
        e->seq = seq;
    const int32_t **ids = realloc(e->seq_ids, sizeof *ids * k);
    if (ids)
        e->seq_ids = ids;
    uint8_t *lg = realloc(e->logits, k);
    if (lg)
        e->logits = lg;
    if (!tok || !pos || !ns || !seq || !ids || !lg)
        return -1;
    e->cap = n;
    return 0;
}

int engine_decode(struct engine *e, const struct eng_tok *t, int n, char *err, size_t len)
{
    if (n <= 0)
        return 0;
    if (grow(e, n)) {
        snprintf(err, len, "engine: out of memory for a batch of %d tokens", n);
        return -1;
    }
    for (int i = 0; i < n; i++) {
        e->tok[i] = t[i].tok;
        e->pos[i] = t[i].pos;
        e->n_seq_id[i] = 1;
        e->seq[i] = t[i].seq;
        e->seq_ids[i] = &e->seq[i];
        e->logits[i] = t[i].logits;
    }
    struct minfer_batch b = {
        .struct_size = sizeof b, .n_tokens = n, .tokens = e->tok, .pos = e->pos,
        .n_seq_id = e->n_seq_id, .seq_ids = (const int32_t *const *)e->seq_ids,
        .logits = e->logits,
    };
    minfer_status st = minfer_ctx_decode_batch(e->ctx, &b);
    if (st != MINFER_OK) {
        snprintf(err, len, "%s (%s)", minfer_ctx_last_error(e->ctx), minfer_status_str(st));
        return -1;
    }
    return 0;
}

const float *engine_logits(struct engine *e, int i)
{
    return minfer_ctx_batch_logits(e->ctx, i);
}

void engine_seq_rm(struct engine *e, int seq, int32_t p0)
{
    minfer_ctx_seq_remove(e->ctx, seq, p0, -1);
}

int engine_seq_cp(struct engine *e, int src, int dst, int32_t n)
{
    return minfer_ctx_seq_copy(e->ctx, src, dst, 0, n) == MINFER_OK ? 0 : -1;
}

void engine_kv_usage(const struct engine *e, int32_t *used, int32_t *total)
{
    minfer_ctx_kv_usage(e->ctx, used, total);
}
