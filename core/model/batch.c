/*
 * batch.c — decode: a batch of tokens of any sequences through one graph
 * per chunk of n_batch tokens, the single-sequence calls on top of it, and
 * the sequence operations (remove, copy, keep, compaction).
 *
 * A chunk whose tokens all belong to one sequence laid out as cell ==
 * position (the only layout a lone sequence ever gets: new tokens take the
 * lowest free cells) runs the ATTENTION graph it always ran; any other
 * chunk runs ATTENTION_LISTS over each sequence's cells in position order.
 * The tokens that keep logits go last in a chunk's graph, so the output
 * head runs over exactly those rows (the order of tokens inside a pass
 * changes no token's result).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "context.h"
#include "runtime/error.h"

/* ---- buffers ---- */

/* The logits are read back after every pass: from a GPU, memory the
 * plugin page-locked (host_alloc) takes the copy at the link's rate, where
 * malloc'd memory takes it through the plugin's staging buffer and one
 * more host copy. */
static bool host_memory(const struct minfer_ctx *c)
{
    return PLUGIN_HAS(c->sb.plugin, host_alloc) && c->sb.plugin->iface->host_alloc &&
           PLUGIN_HAS(c->sb.plugin, host_free) && c->sb.plugin->iface->host_free;
}

static void logits_release(struct minfer_ctx *c, float *l, bool host)
{
    if (host)
        c->sb.plugin->iface->host_free(c->sb.be, l);
    else
        free(l);
}

minfer_status ctx_logits_reserve(struct minfer_ctx *c, int32_t rows)
{
    if (rows <= c->n_logits_cap)
        return MINFER_OK;
    size_t bytes = sizeof(float) * (size_t)c->m->hp.n_vocab;
    if ((size_t)rows > SIZE_MAX / bytes)
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE, "logits of %d rows overflow", rows);
    void *l = NULL;
    bool host = host_memory(c);
    if (host && c->sb.plugin->iface->host_alloc(c->sb.be, bytes * (size_t)rows, &l) != MINFER_OK) {
        /* page-locked memory is a limited resource; ordinary memory holds
         * the same logits, read back more slowly */
        plugin_log(MINFER_LOG_WARN, "%s: no page-locked memory for %d rows of logits (%s); "
                   "using ordinary memory",
                   c->sb.plugin->iface->name, rows, c->sb.plugin->iface->last_error(c->sb.be));
        l = NULL;
    }
    if (!l) {
        host = false;
        l = malloc(bytes * (size_t)rows);
    }
    if (!l)
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                    "out of memory for %d rows of logits", rows);
    if (c->logits) {
        memcpy(l, c->logits, bytes * (size_t)c->n_logits_cap);
        logits_release(c, c->logits, c->logits_host);
    }
    c->logits = l;
    c->logits_host = host;
    c->n_logits_cap = rows;
    return MINFER_OK;
}

void ctx_logits_free(struct minfer_ctx *c)
{
    if (c->logits)
        logits_release(c, c->logits, c->logits_host);
    c->logits = NULL;
    c->n_logits_cap = 0;
}

static minfer_status rows_reserve(struct minfer_ctx *c, int32_t n)
{
    if (n <= c->batch_row_cap)
        return MINFER_OK;
    int32_t *r = realloc(c->batch_row, sizeof *r * (size_t)n);
    if (!r) {
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                    "out of memory for a batch of %d tokens", n);
    }
    c->batch_row = r;
    c->batch_row_cap = n;
    return MINFER_OK;
}

/* ---- validation ---- */

struct seq_pos {
    int32_t seq, pos, tok;
};

static int seq_pos_cmp(const void *a, const void *b)
{
    const struct seq_pos *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->pos < y->pos ? -1 : x->pos > y->pos;
}

static bool keeps(const struct minfer_batch *b, int32_t i)
{
    return b->logits ? b->logits[i] != 0 : i == b->n_tokens - 1;
}

/* Everything decode_batch promises to refuse before changing anything. */
static minfer_status batch_check(struct minfer_ctx *c, const struct minfer_batch *b)
{
    const struct kv_cache *kv = &c->kv;
    if (!b || b->struct_size < sizeof(struct minfer_batch)) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "batch missing or its struct_size %u is below %zu", b ? b->struct_size : 0,
                    sizeof(struct minfer_batch));
    }
    if (b->n_tokens <= 0 || !b->tokens || !b->pos || !b->n_seq_id || !b->seq_ids) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "a batch needs at least one token with tokens, pos, n_seq_id and seq_ids "
                    "(got %d tokens)", b->n_tokens);
    }
    size_t n_pairs = 0;
    for (int32_t i = 0; i < b->n_tokens; i++) {
        if (b->tokens[i] < 0 || b->tokens[i] >= c->m->hp.n_vocab) {
            return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                        "token %d at index %d is outside the vocabulary [0, %lld)",
                        b->tokens[i], i, (long long)c->m->hp.n_vocab);
        }
        if (b->pos[i] < 0 || b->pos[i] == INT32_MAX) {
            return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                        "position %d of batch token %d is outside [0, %d)", b->pos[i], i,
                        INT32_MAX);
        }
        if (b->n_seq_id[i] < 1 || b->n_seq_id[i] > kv->n_seq || !b->seq_ids[i]) {
            return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                        "batch token %d has %d sequence ids; expected 1..%d (n_seq_max)", i,
                        b->n_seq_id[i], kv->n_seq);
        }
        for (int32_t k = 0; k < b->n_seq_id[i]; k++) {
            int32_t s = b->seq_ids[i][k];
            if (s < 0 || s >= kv->n_seq) {
                return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                            "batch token %d names sequence %d; this context holds sequences "
                            "0..%d (raise n_seq_max)", i, s, kv->n_seq - 1);
            }
            if (kv_seq_find(kv, s, b->pos[i]) >= 0) {
                return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                            "batch token %d: sequence %d already holds position %d (remove it "
                            "first)", i, s, b->pos[i]);
            }
        }
        n_pairs += (size_t)b->n_seq_id[i];
    }
    /* the same (sequence, position) twice in the batch */
    struct seq_pos *sp = malloc(sizeof *sp * n_pairs);
    if (!sp)
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "out of memory");
    size_t k = 0;
    for (int32_t i = 0; i < b->n_tokens; i++)
        for (int32_t j = 0; j < b->n_seq_id[i]; j++)
            sp[k++] = (struct seq_pos){b->seq_ids[i][j], b->pos[i], i};
    qsort(sp, n_pairs, sizeof *sp, seq_pos_cmp);
    for (k = 1; k < n_pairs; k++) {
        if (sp[k].seq == sp[k - 1].seq && sp[k].pos == sp[k - 1].pos) {
            int32_t s = sp[k].seq, p = sp[k].pos, t0 = sp[k - 1].tok, t1 = sp[k].tok;
            free(sp);
            return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                        "batch tokens %d and %d both put sequence %d at position %d",
                        t0 < t1 ? t0 : t1, t0 < t1 ? t1 : t0, s, p);
        }
    }
    free(sp);
    uint32_t n_free = kv->n_cells - kv->n_used;
    if ((uint32_t)b->n_tokens > n_free) {
        int32_t t = (int32_t)n_free, s = b->seq_ids[t][0];
        return errf(c->err, sizeof c->err, MINFER_ERR_FULL,
                    "KV cache full: sequence %d (batch token %d, position %d) does not fit; "
                    "the batch needs %d cells, %u of %u are free (sequence %d holds %d; "
                    "remove finished sequences or use a larger -c)",
                    s, t, b->pos[t], b->n_tokens, n_free, kv->n_cells, s, kv->seqs[s].n);
    }
    return MINFER_OK;
}

/* ---- one pass ---- */

/* Undoes the sequence entries of tokens idx[0 .. n) (a failed pass). */
static void rollback(struct minfer_ctx *c, const struct minfer_batch *b, const int32_t *idx,
                     int32_t n)
{
    for (int32_t i = 0; i < n; i++)
        for (int32_t k = 0; k < b->n_seq_id[idx[i]]; k++)
            kv_seq_rm(&c->kv, b->seq_ids[idx[i]][k], b->pos[idx[i]], b->pos[idx[i]] + 1);
}

/* Whether tokens idx[0 .. T) can run the single-sequence graph: one
 * sequence, laid out cell == position, appending positions n .. n + T - 1
 * into free cells of the same numbers. Compacts a lone sequence whose
 * cells are in order but scattered, which makes it so. */
static minfer_status fast_layout(struct minfer_ctx *c, const struct minfer_batch *b,
                                 const int32_t *idx, int32_t T, bool *fast)
{
    struct kv_cache *kv = &c->kv;
    *fast = false;
    int32_t s = b->seq_ids[idx[0]][0];
    for (int32_t i = 0; i < T; i++)
        if (b->n_seq_id[idx[i]] != 1 || b->seq_ids[idx[i]][0] != s)
            return MINFER_OK;
    const struct kv_seq *q = &kv->seqs[s];
    int32_t n = q->n;
    if (n && q->pos[n - 1] != n - 1) /* a gap in the positions */
        return MINFER_OK;
    for (int32_t i = 0; i < T; i++)
        if (b->pos[idx[i]] < n || b->pos[idx[i]] >= n + T ||
            (int64_t)n + T > (int64_t)kv->n_cells)
            return MINFER_OK;
    if (!kv_seq_is_identity(kv, s)) {
        /* the sequence alone in the cache with its cells in position order:
         * compacting lays it out cell == position again */
        if (kv->n_used != (uint32_t)n)
            return MINFER_OK;
        for (int32_t i = 1; i < n; i++)
            if (q->cell[i] <= q->cell[i - 1])
                return MINFER_OK;
        minfer_status st = kv_compact(kv, NULL, c->err, sizeof c->err);
        if (st != MINFER_OK)
            return st;
    }
    for (int32_t i = 0; i < T; i++)
        if (kv->cells[b->pos[idx[i]]].refs)
            return MINFER_OK;
    *fast = true;
    return MINFER_OK;
}

/* Writes the pass's inputs: they were placed first and side by side in
 * the arena, so one host block and one write (one host-to-device copy per
 * pass on an accelerator). */
static minfer_status write_inputs(struct minfer_ctx *c, const struct graph_entry *e,
                                  char **stage_of)
{
    size_t lo = SIZE_MAX, hi = 0;
    for (int k = 0; k < e->n_in; k++) {
        lo = e->in[k]->offs < lo ? e->in[k]->offs : lo;
        hi = e->in[k]->offs + e->in[k]->size > hi ? e->in[k]->offs + e->in[k]->size : hi;
    }
    if (hi - lo > c->stage_size) {
        free(c->stage);
        c->stage = malloc(hi - lo);
        c->stage_size = c->stage ? hi - lo : 0;
        if (!c->stage) {
            return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                        "out of memory staging %zu input bytes", hi - lo);
        }
    }
    memset(c->stage, 0, hi - lo);
    for (int k = 0; k < e->n_in; k++)
        stage_of[k] = c->stage + (e->in[k]->offs - lo);
    return MINFER_OK;
}

static minfer_status pass_run(struct minfer_ctx *c, const struct graph_entry *e)
{
    size_t lo = SIZE_MAX, hi = 0;
    for (int k = 0; k < e->n_in; k++) {
        lo = e->in[k]->offs < lo ? e->in[k]->offs : lo;
        hi = e->in[k]->offs + e->in[k]->size > hi ? e->in[k]->offs + e->in[k]->size : hi;
    }
    minfer_status st = c->sb.plugin->iface->buffer_write(c->sb.be, (char *)c->arena + lo,
                                                         c->stage, hi - lo);
    if (st != MINFER_OK)
        return plugin_fail(c->sb.plugin, c->sb.be, st, "buffer_write of the pass's inputs",
                           c->err, sizeof c->err);
    return sched_execute(e->g, &c->sb, 1, c->generation, e->n_tokens,
                         !(c->p.flags & MINFER_CTX_NO_GRAPHS), &c->prof, c->err, sizeof c->err);
}

static int32_t pow2_at_least(int32_t n)
{
    int32_t p = 1;
    while (p < n)
        p *= 2;
    return p;
}

/* One forward pass over batch tokens idx[0 .. T) (those keeping logits
 * last, n_out of them); their logits go to rows row0 .. row0 + n_out - 1. */
static minfer_status batch_pass(struct minfer_ctx *c, const struct minfer_batch *b,
                                const int32_t *idx, int32_t T, int32_t n_out, int32_t row0,
                                uint32_t *cells, int32_t *lists_of)
{
    struct kv_cache *kv = &c->kv;
    bool fast = false;
    minfer_status st = fast_layout(c, b, idx, T, &fast);
    if (st != MINFER_OK)
        return st;
    if (!fast && c->sb.plugin->abi_minor < 1) {
        return errf(c->err, sizeof c->err, MINFER_ERR_UNSUPPORTED,
                    "backend %s speaks plugin ABI 1.0, which has no ATTENTION_LISTS: it runs "
                    "one sequence at a time, laid out from cell 0", c->sb.plugin->name);
    }
    int32_t n0 = fast ? kv->seqs[b->seq_ids[idx[0]][0]].n : 0;
    if (fast) {
        for (int32_t i = 0; i < T; i++)
            cells[i] = (uint32_t)b->pos[idx[i]];
    } else if ((st = kv_pick_free(kv, (uint32_t)T, cells)) != MINFER_OK) {
        return errf(c->err, sizeof c->err, st, "KV cache full: %d tokens, %u of %u cells free",
                    T, kv->n_cells - kv->n_used, kv->n_cells);
    }
    for (int32_t i = 0; i < T; i++)
        for (int32_t k = 0; k < b->n_seq_id[idx[i]]; k++)
            if (kv_seq_add(kv, b->seq_ids[idx[i]][k], b->pos[idx[i]], cells[i]) != MINFER_OK) {
                rollback(c, b, idx, i); /* token i's own entries are removed below */
                for (int32_t j = 0; j < k; j++)
                    kv_seq_rm(kv, b->seq_ids[idx[i]][j], b->pos[idx[i]], b->pos[idx[i]] + 1);
                return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                            "out of memory for the cell lists");
            }
    /* the lists: each token's first sequence, numbered in order of first use */
    int32_t n_lists = 0, n_kv = n0 + T;
    if (!fast) {
        n_kv = 1;
        for (int32_t i = 0; i < T; i++) {
            int32_t s = b->seq_ids[idx[i]][0], l = 0;
            while (l < n_lists && lists_of[l] != s)
                l++;
            if (l == n_lists)
                lists_of[n_lists++] = s;
            n_kv = kv->seqs[s].n > n_kv ? kv->seqs[s].n : n_kv;
        }
    }
    /* graph replay: a decode step (each token alone in its list) padded to
     * a power of two with copies of its tokens, so few graphs serve every
     * batch size; a copy stores the same row into the same cell, and its
     * list then has two queries, which the CPU splits as it does one */
    int32_t pad = !fast && c->pad_batches && n_lists == T && T < 256 ? pow2_at_least(T) - T : 0;
    int32_t Tg = T + pad;
    struct graph_entry *e = NULL;
    int32_t bucket = ctx_kv_bucket(c, n_kv);
    /* Cells below kv->n_clear are zeroed or written: ATTENTION reads the
     * bucket's cells (masked past kv_len), and a later clear must never
     * reach a cell this pass writes, so clear past both first. */
    uint32_t top = fast ? (uint32_t)bucket : 0;
    for (int32_t i = 0; i < T; i++)
        top = cells[i] + 1 > top ? cells[i] + 1 : top;
    st = kv_clear_to(kv, top, c->err, sizeof c->err);
    if (st == MINFER_OK)
        st = ctx_get_graph(c, Tg, bucket, n_out, fast ? 0 : pow2_at_least(n_lists), &e);
    char *in[CTX_MAX_INPUTS];
    if (st == MINFER_OK)
        st = write_inputs(c, e, in);
    if (st != MINFER_OK) {
        rollback(c, b, idx, T);
        return st;
    }
    /* graph row r: the copies first (copy r of token r % T), then the
     * tokens, those keeping logits last */
    int32_t *tok = (int32_t *)in[0], *pos = (int32_t *)in[1], *cell = (int32_t *)in[2];
    for (int32_t r = 0; r < Tg; r++) {
        int32_t i = r < pad ? r % T : r - pad;
        tok[r] = b->tokens[idx[i]];
        pos[r] = b->pos[idx[i]];
        cell[r] = (int32_t)cells[i];
    }
    if (fast) {
        *(int32_t *)in[3] = n0 + T;
    } else {
        int32_t *range = (int32_t *)in[3], *qlist = (int32_t *)in[4], *lists = (int32_t *)in[5];
        int32_t *range_w = e->n_in > 6 ? (int32_t *)in[6] : NULL;
        int64_t w = c->m->hp.n_swa;
        for (int32_t r = 0; r < Tg; r++) {
            int32_t i = r < pad ? r % T : r - pad;
            int32_t s = b->seq_ids[idx[i]][0], l = 0;
            while (lists_of[l] != s)
                l++;
            qlist[r] = l;
            range[2 * r] = 0;
            range[2 * r + 1] = kv_seq_count_upto(kv, s, pos[r]);
            if (range_w) { /* entries at positions <= pos - w are outside the window */
                int64_t edge = pos[r] - w;
                range_w[2 * r] = edge < 0 ? 0 : kv_seq_count_upto(kv, s, (int32_t)edge);
                range_w[2 * r + 1] = range[2 * r + 1];
            }
        }
        for (int32_t l = 0; l < n_lists; l++) {
            const struct kv_seq *q = &kv->seqs[lists_of[l]];
            for (int32_t j = 0; j < q->n; j++)
                lists[(size_t)l * (size_t)e->n_kv + (size_t)j] = (int32_t)q->cell[j];
        }
    }
    st = pass_run(c, e);
    if (st == MINFER_OK && n_out) {
        size_t row = (size_t)c->m->hp.n_vocab;
        st = c->sb.plugin->iface->buffer_read(c->sb.be, c->logits + (size_t)row0 * row,
                                               e->out->t.data, (size_t)n_out * row * sizeof(float));
        if (st != MINFER_OK)
            st = plugin_fail(c->sb.plugin, c->sb.be, st, "buffer_read of the logits", c->err,
                             sizeof c->err);
    }
    if (st != MINFER_OK)
        rollback(c, b, idx, T);
    return st;
}

/* ---- decode ---- */

static minfer_status decode_batch(struct minfer_ctx *c, const struct minfer_batch *b)
{
    c->n_logits = 0;
    c->n_batch_rows = 0;
    minfer_status st = batch_check(c, b);
    if (st != MINFER_OK)
        return st;
    int32_t n = b->n_tokens, rows = 0;
    for (int32_t i = 0; i < n; i++)
        rows += keeps(b, i);
    if ((st = ctx_logits_reserve(c, rows)) != MINFER_OK || (st = rows_reserve(c, n)) != MINFER_OK)
        return st;
    int32_t nb = c->p.n_batch;
    int32_t *idx = malloc(sizeof *idx * (size_t)nb * 2);
    uint32_t *cells = malloc(sizeof *cells * (size_t)nb);
    if (!idx || !cells) {
        free(idx);
        free(cells);
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "out of memory");
    }
    int32_t row = 0;
    for (int32_t s = 0; s < n && st == MINFER_OK; s += nb) {
        int32_t T = n - s < nb ? n - s : nb, k = 0, n_out = 0;
        for (int32_t i = s; i < s + T; i++) /* tokens without logits first */
            if (!keeps(b, i))
                idx[k++] = i;
        for (int32_t i = s; i < s + T; i++)
            if (keeps(b, i)) {
                idx[k++] = i;
                n_out++;
            }
        st = batch_pass(c, b, idx, T, n_out, row, cells, idx + nb);
        if (st != MINFER_OK)
            break;
        for (int32_t i = s; i < s + T; i++)
            c->batch_row[i] = keeps(b, i) ? row++ : -1;
        c->n_batch_rows = s + T;
        if (c->p.progress && n > nb &&
            !c->p.progress((uint64_t)(s + T), (uint64_t)n, c->p.progress_user)) {
            st = errf(c->err, sizeof c->err, MINFER_ERR_STATE,
                      "decode cancelled after %d of %d tokens", s + T, n);
        }
    }
    free(idx);
    free(cells);
    if (st != MINFER_OK) {
        c->n_batch_rows = 0;
        return st;
    }
    c->n_logits = rows;
    return MINFER_OK;
}

minfer_status minfer_ctx_decode_batch(struct minfer_ctx *c, const struct minfer_batch *b)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    c->err[0] = 0;
    return decode_batch(c, b);
}

const float *minfer_ctx_batch_logits(const struct minfer_ctx *c, int32_t i)
{
    if (!c || i < 0 || i >= c->n_batch_rows || c->batch_row[i] < 0)
        return NULL;
    return c->logits + (size_t)c->batch_row[i] * (size_t)c->m->hp.n_vocab;
}

minfer_status minfer_ctx_decode(struct minfer_ctx *c, const int32_t *tokens, int32_t n,
                                uint32_t flags)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    c->err[0] = 0;
    if (!tokens || n <= 0) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "decode needs at least one token (got %d)", n);
    }
    int32_t n_past = kv_seq_pos_max(&c->kv, 0) + 1;
    uint32_t n_free = c->kv.n_cells - c->kv.n_used;
    if ((uint32_t)n > n_free) {
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                    "%d tokens after %d in the context exceed its length %u (%u cells free; "
                    "use a larger -c, at most the model's %lld)",
                    n, n_past, c->kv.n_cells, n_free, (long long)c->m->hp.n_ctx_max);
    }
    int32_t *pos = malloc(sizeof *pos * (size_t)n * 2);
    const int32_t **ids = malloc(sizeof *ids * (size_t)n);
    uint8_t *keep = malloc((size_t)n);
    if (!pos || !ids || !keep) {
        free(pos);
        free(ids);
        free(keep);
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "out of memory");
    }
    static const int32_t seq0 = 0;
    for (int32_t i = 0; i < n; i++) {
        pos[i] = n_past + i;
        pos[n + i] = 1;
        ids[i] = &seq0;
        keep[i] = (flags & MINFER_DECODE_ALL_LOGITS) || i == n - 1;
    }
    struct minfer_batch b = {
        .struct_size = sizeof b, .n_tokens = n, .tokens = tokens, .pos = pos,
        .n_seq_id = pos + n, .seq_ids = (const int32_t *const *)ids, .logits = keep,
    };
    minfer_status st = decode_batch(c, &b);
    free(pos);
    free(ids);
    free(keep);
    return st;
}

const float *minfer_ctx_logits(const struct minfer_ctx *c, int32_t i)
{
    if (!c || !c->n_logits)
        return NULL;
    if (i < 0)
        i += c->n_logits;
    if (i < 0 || i >= c->n_logits)
        return NULL;
    return c->logits + (size_t)i * (size_t)c->m->hp.n_vocab;
}

int32_t minfer_ctx_n_logits(const struct minfer_ctx *c)
{
    return c ? c->n_logits : 0;
}

/* ---- sequences ---- */

static minfer_status seq_ok(struct minfer_ctx *c, int32_t seq, const char *what)
{
    if (seq < 0 || seq >= c->kv.n_seq) {
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                    "%s: sequence %d is outside 0..%d (n_seq_max)", what, seq, c->kv.n_seq - 1);
    }
    return MINFER_OK;
}

int32_t minfer_ctx_n_past(const struct minfer_ctx *c)
{
    return c ? kv_seq_pos_max(&c->kv, 0) + 1 : 0;
}

int32_t minfer_ctx_n_ctx(const struct minfer_ctx *c)
{
    return c ? (int32_t)c->kv.n_cells : 0;
}

minfer_status minfer_ctx_truncate(struct minfer_ctx *c, int32_t n_past)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    int32_t have = kv_seq_pos_max(&c->kv, 0) + 1;
    if (n_past < 0 || n_past > have) {
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                    "cannot truncate to %d: the context holds %d tokens", n_past, have);
    }
    kv_seq_rm(&c->kv, 0, n_past, -1);
    c->n_logits = 0;
    c->n_batch_rows = 0;
    return MINFER_OK;
}

minfer_status minfer_ctx_seq_remove(struct minfer_ctx *c, int32_t seq, int32_t p0, int32_t p1)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    if (seq >= c->kv.n_seq)
        return seq_ok(c, seq, "seq_remove");
    for (int32_t s = seq < 0 ? 0 : seq; s < (seq < 0 ? c->kv.n_seq : seq + 1); s++)
        kv_seq_rm(&c->kv, s, p0, p1);
    return MINFER_OK;
}

minfer_status minfer_ctx_seq_copy(struct minfer_ctx *c, int32_t src, int32_t dst, int32_t p0,
                                  int32_t p1)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    minfer_status st = seq_ok(c, src, "seq_copy source");
    if (st == MINFER_OK)
        st = seq_ok(c, dst, "seq_copy destination");
    if (st != MINFER_OK)
        return st;
    if (kv_seq_cp(&c->kv, src, dst, p0, p1) != MINFER_OK) {
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                    "out of memory copying sequence %d to %d", src, dst);
    }
    return MINFER_OK;
}

minfer_status minfer_ctx_seq_keep(struct minfer_ctx *c, int32_t seq)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    minfer_status st = seq_ok(c, seq, "seq_keep");
    if (st != MINFER_OK)
        return st;
    for (int32_t s = 0; s < c->kv.n_seq; s++)
        if (s != seq)
            kv_seq_rm(&c->kv, s, 0, -1);
    return MINFER_OK;
}

int32_t minfer_ctx_seq_pos_max(const struct minfer_ctx *c, int32_t seq)
{
    if (!c || seq < 0 || seq >= c->kv.n_seq)
        return -1;
    return kv_seq_pos_max(&c->kv, seq);
}

void minfer_ctx_kv_usage(const struct minfer_ctx *c, int32_t *used, int32_t *total)
{
    if (used)
        *used = c ? (int32_t)c->kv.n_used : 0;
    if (total)
        *total = c ? (int32_t)c->kv.n_cells : 0;
}

minfer_status minfer_ctx_kv_compact(struct minfer_ctx *c, int32_t *moved)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    uint32_t n = 0;
    minfer_status st = kv_compact(&c->kv, &n, c->err, sizeof c->err);
    if (moved)
        *moved = (int32_t)n;
    return st;
}
