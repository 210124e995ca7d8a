/*
 * test-batch.c — many sequences in one context (minfer_ctx_decode_batch
 * and the sequence operations) on the CPU plugin. The reference is always
 * the same sequence decoded alone in a fresh context with the same thread
 * count and the same tokens per pass; the CPU plugin promises bit-equal
 * logits, so every comparison is memcmp, not a tolerance.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/minfer.h"
#include "engine.h"

/* q4_K weights (the K-quant matmul kernels, decode rows vs prefill tiles)
 * and a q8_0 KV cache, small enough for CI */
#define SPEC                                                                                \
    "custom:n_embd=256,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=512,n_vocab=320,"   \
    "n_ctx=2048,tied=0"
#define N_CTX 2048
#define N_BATCH 1024
#define MAX_SEQ 8

static struct minfer_runtime *rt;
static struct minfer_model *model;
static void *model_mem;
static int32_t n_vocab;
static uint32_t kv_type = MINFER_TYPE_Q8_0;

static void setup(void)
{
    rt = ts_runtime(NULL);
    size_t size = 0;
    model_mem = ts_synth("qwen2", SPEC, MINFER_FTYPE_MOSTLY_Q4_K_M, 11, 2, &size);
    char err[512] = "";
    model = ts_load_mem(rt, model_mem, size, "cpu", err, sizeof err);
    ck_assert_msg(model, "load: %s", err);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(model, &info);
    n_vocab = info.n_vocab;
}

static void teardown(void)
{
    minfer_model_free(model);
    minfer_runtime_free(rt);
    free(model_mem);
}

static uint32_t ctx_flags; /* MINFER_CTX_* of the batched contexts */

static struct minfer_ctx *ctx_of(int32_t n_ctx, int32_t n_seq)
{
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = n_ctx;
    cp.n_batch = N_BATCH;
    cp.type_k = cp.type_v = kv_type;
    cp.n_threads = 2;
    cp.n_seq_max = n_seq;
    cp.flags = n_seq > 1 ? ctx_flags : 0;
    minfer_status st;
    char err[512] = "";
    struct minfer_ctx *c = minfer_ctx_new(model, &cp, &st, err, sizeof err);
    ck_assert_msg(c, "ctx: %s", err);
    return c;
}

/* A batch under construction: each token has one or more sequences. */
struct tb {
    int32_t n;
    int32_t tok[4096], pos[4096], nseq[4096];
    int32_t ids[4096][MAX_SEQ];
    const int32_t *idp[4096];
    uint8_t logits[4096];
};

static void tb_add(struct tb *b, int32_t tok, int32_t pos, const int32_t *seqs, int32_t nseq,
                   bool logits)
{
    ck_assert_int_lt(b->n, 4096);
    b->tok[b->n] = tok;
    b->pos[b->n] = pos;
    b->nseq[b->n] = nseq;
    memcpy(b->ids[b->n], seqs, sizeof *seqs * (size_t)nseq);
    b->idp[b->n] = b->ids[b->n];
    b->logits[b->n] = logits;
    b->n++;
}

static minfer_status tb_decode(struct minfer_ctx *c, struct tb *b)
{
    struct minfer_batch mb = {
        .struct_size = sizeof mb, .n_tokens = b->n, .tokens = b->tok, .pos = b->pos,
        .n_seq_id = b->nseq, .seq_ids = b->idp, .logits = b->logits,
    };
    return minfer_ctx_decode_batch(c, &mb);
}

static void tb_decode_ok(struct minfer_ctx *c, struct tb *b)
{
    minfer_status st = tb_decode(c, b);
    ck_assert_msg(st == MINFER_OK, "decode_batch: %s: %s", minfer_status_str(st),
                  minfer_ctx_last_error(c));
}

static void prompt_of(int32_t *ids, int32_t n, uint32_t seed)
{
    for (int32_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        ids[i] = (int32_t)((seed >> 8) % (uint32_t)n_vocab);
    }
}

/* What a sequence does alone: prefill prompt[n] in one call, then steps
 * single-token decodes of the greedy token; logits of the prefill and of
 * each step into out[(steps + 1) * n_vocab], tokens into toks[steps]. */
static void run_alone(const int32_t *prompt, int32_t n, int steps, float *out, int32_t *toks)
{
    struct minfer_ctx *c = ctx_of(N_CTX, 1);
    ts_decode_ok(c, prompt, n, 0);
    for (int s = 0;; s++) {
        const float *l = minfer_ctx_logits(c, -1);
        memcpy(out + (size_t)s * n_vocab, l, sizeof(float) * (size_t)n_vocab);
        if (s == steps)
            break;
        toks[s] = ts_argmax(l, n_vocab);
        ts_decode_ok(c, &toks[s], 1, 0);
    }
    minfer_ctx_free(c);
}

static void same_logits(const float *got, const float *want, const char *what, int seq, int step)
{
    ck_assert_ptr_nonnull(got);
    if (memcmp(got, want, sizeof(float) * (size_t)n_vocab)) {
        int32_t i = 0;
        while (got[i] == want[i])
            i++;
        ck_abort_msg("%s: sequence %d step %d differs from alone at logit %d: %.9g vs %.9g",
                     what, seq, step, i, (double)got[i], (double)want[i]);
    }
}

/* ---- batched vs alone ---- */

START_TEST(batch_equals_alone_with_entering_and_leaving)
{
    /* Catches a sequence inside a batch seeing another sequence's cells,
     * a wrong causal mask, a lost or misplaced logits row, a split of a
     * long decode that differs from ATTENTION's, and the layout of a lone
     * sequence (ATTENTION) and of many (ATTENTION_LISTS) disagreeing.
     * Prompts of 1 to 600 tokens; sequence 4 enters at step 2, sequence 1
     * leaves after step 3, sequence 5 enters after it left and reuses its
     * cells. Run twice: as is, and with decode steps padded to a power of
     * two (MINFER_CTX_PAD_BATCHES, what a GPU does for graph replay). */
    ctx_flags = _i ? MINFER_CTX_PAD_BATCHES : 0;
    enum { NS = 6, STEPS = 6 };
    static const int32_t len[NS] = {1, 5, 37, 600, 300, 64};
    static const int enter[NS] = {0, 0, 0, 0, 2, 4};
    static const int leave[NS] = {STEPS, 3, STEPS, STEPS, STEPS, STEPS};
    int32_t *prompt[NS];
    float *want[NS];
    int32_t toks[NS][STEPS];
    for (int s = 0; s < NS; s++) {
        prompt[s] = malloc(sizeof(int32_t) * (size_t)len[s]);
        want[s] = malloc(sizeof(float) * (size_t)n_vocab * (STEPS + 1));
        prompt_of(prompt[s], len[s], 100u + (uint32_t)s);
        run_alone(prompt[s], len[s], STEPS, want[s], toks[s]);
    }
    struct minfer_ctx *c = ctx_of(N_CTX, MAX_SEQ);
    static struct tb b;
    int32_t last[NS]; /* batch index of each sequence's logits token */
    for (int step = 0; step <= STEPS + 4; step++) {
        b.n = 0;
        for (int s = 0; s < NS; s++) {
            int k = step - enter[s]; /* 0: prefill, k > 0: decode step k */
            last[s] = -1;
            if (k < 0 || k > leave[s])
                continue;
            if (k == 0) {
                for (int32_t i = 0; i < len[s]; i++)
                    tb_add(&b, prompt[s][i], i, &s, 1, i == len[s] - 1);
            } else {
                tb_add(&b, toks[s][k - 1], len[s] + k - 1, &s, 1, true);
            }
            last[s] = b.n - 1;
        }
        if (!b.n)
            break;
        tb_decode_ok(c, &b);
        for (int s = 0; s < NS; s++) {
            int k = step - enter[s];
            if (last[s] < 0)
                continue;
            same_logits(minfer_ctx_batch_logits(c, last[s]), want[s] + (size_t)k * n_vocab,
                        "batch", s, k);
            if (k == leave[s]) { /* done: its cells go back to the cache */
                int32_t used0, used1;
                minfer_ctx_kv_usage(c, &used0, NULL);
                ck_assert_int_eq(minfer_ctx_seq_remove(c, s, 0, -1), MINFER_OK);
                minfer_ctx_kv_usage(c, &used1, NULL);
                ck_assert_int_eq(used0 - used1, len[s] + leave[s]);
                ck_assert_int_eq(minfer_ctx_seq_pos_max(c, s), -1);
            }
        }
        /* a token that kept no logits has none */
        if (b.n > 1 && !b.logits[0])
            ck_assert_ptr_null(minfer_ctx_batch_logits(c, 0));
    }
    minfer_ctx_free(c);
    for (int s = 0; s < NS; s++) {
        free(prompt[s]);
        free(want[s]);
    }
}
END_TEST

/* ---- a sliding window ---- */

START_TEST(sliding_window_batch_equals_alone)
{
    /* Catches ATTENTION_LISTS ranges that ignore a sliding window (gemma3's
     * local layers see the last 16 positions here) or cut it at the wrong
     * entry, and global layers reading the windowed ranges. Prompts of 3,
     * 40 and 25 tokens, then 6 steps, as one batch vs each alone. */
    size_t size = 0;
    void *mem = ts_synth("gemma3",
                         "custom:n_embd=128,n_layer=6,n_head=4,n_head_kv=2,head_dim=32,n_ff=256,"
                         "n_vocab=320,n_ctx=1024,sliding_window=16",
                         MINFER_FTYPE_MOSTLY_Q8_0, 5, 2, &size);
    char err[512] = "";
    struct minfer_model *saved = model;
    model = ts_load_mem(rt, mem, size, "cpu", err, sizeof err);
    ck_assert_msg(model, "gemma3: %s", err);
    enum { NS = 3, STEPS = 6 };
    static const int32_t len[NS] = {3, 40, 25};
    int32_t prompt[NS][40], toks[NS][STEPS];
    float *want[NS];
    for (int q = 0; q < NS; q++) {
        prompt_of(prompt[q], len[q], 300u + (uint32_t)q);
        want[q] = malloc(sizeof(float) * (size_t)n_vocab * (STEPS + 1));
        run_alone(prompt[q], len[q], STEPS, want[q], toks[q]);
    }
    struct minfer_ctx *c = ctx_of(N_CTX, NS);
    static struct tb b;
    b.n = 0;
    for (int q = 0; q < NS; q++)
        for (int32_t i = 0; i < len[q]; i++)
            tb_add(&b, prompt[q][i], i, &q, 1, i == len[q] - 1);
    tb_decode_ok(c, &b);
    for (int q = 0, at = 0; q < NS; at += len[q], q++)
        same_logits(minfer_ctx_batch_logits(c, at + len[q] - 1), want[q], "window", q, 0);
    for (int s = 0; s < STEPS; s++) {
        b.n = 0;
        for (int q = 0; q < NS; q++)
            tb_add(&b, toks[q][s], len[q] + s, &q, 1, true);
        tb_decode_ok(c, &b);
        for (int q = 0; q < NS; q++)
            same_logits(minfer_ctx_batch_logits(c, q), want[q] + (size_t)(s + 1) * n_vocab,
                        "window", q, s + 1);
    }
    minfer_ctx_free(c);
    for (int q = 0; q < NS; q++)
        free(want[q]);
    minfer_model_free(model);
    model = saved;
    free(mem);
}
END_TEST

/* ---- forks ---- */

START_TEST(fork_shares_cells_and_matches_alone)
{
    /* Catches a fork that copies cells (usage grows), forks that see each
     * other's later tokens, and a shared-prefix token (several sequence ids)
     * stored or attended wrongly. Sequences 0..3 share a 40-token prompt:
     * 0 and 1 decode it as one batch with two ids per token, 2 and 3 are
     * forked from 0 with seq_copy; each then continues with its own token. */
    enum { P = 40, NF = 4 };
    int32_t prompt[P + 1];
    prompt_of(prompt, P, 7);
    float *want = malloc(sizeof(float) * (size_t)n_vocab * NF);
    int32_t next_tok[NF];
    for (int f = 0; f < NF; f++) {
        next_tok[f] = 3 + 17 * f;
        prompt[P] = next_tok[f];
        struct minfer_ctx *a = ctx_of(N_CTX, 1);
        ts_decode_ok(a, prompt, P + 1, 0);
        memcpy(want + (size_t)f * n_vocab, minfer_ctx_logits(a, -1),
               sizeof(float) * (size_t)n_vocab);
        minfer_ctx_free(a);
    }
    struct minfer_ctx *c = ctx_of(N_CTX, MAX_SEQ);
    static struct tb b;
    b.n = 0;
    static const int32_t both[2] = {0, 1};
    for (int32_t i = 0; i < P; i++)
        tb_add(&b, prompt[i], i, both, 2, false);
    tb_decode_ok(c, &b);
    int32_t used;
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, P);
    for (int32_t f = 2; f < NF; f++)
        ck_assert_int_eq(minfer_ctx_seq_copy(c, 0, f, 0, -1), MINFER_OK);
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, P); /* forks share, nothing is copied */
    b.n = 0;
    for (int32_t f = 0; f < NF; f++)
        tb_add(&b, next_tok[f], P, &f, 1, true);
    tb_decode_ok(c, &b);
    for (int f = 0; f < NF; f++)
        same_logits(minfer_ctx_batch_logits(c, f), want + (size_t)f * n_vocab, "fork", f, 0);
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, P + NF); /* diverged: one new cell each */
    /* the shared prompt stays while any fork holds it */
    ck_assert_int_eq(minfer_ctx_seq_keep(c, 3), MINFER_OK);
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, P + 1);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 0), -1);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 3), P);
    minfer_ctx_free(c);
    free(want);
}
END_TEST

/* ---- removal, reuse, compaction ---- */

START_TEST(remove_reuse_and_compaction_keep_results)
{
    /* Catches cells freed by a removal being read by their next owner's
     * neighbours, a re-decoded range differing from the first time, a
     * compaction that moves rows wrongly (copy_cells with overlap) or
     * forgets to rename a list, and the single-sequence calls breaking
     * once other sequences share the cache. */
    enum { P = 70 };
    int32_t pa[P], pb[P];
    prompt_of(pa, P, 21);
    prompt_of(pb, P, 22);
    float *want = malloc(sizeof(float) * (size_t)n_vocab * 3);
    int32_t toks[2];
    run_alone(pa, P, 2, want, toks);

    struct minfer_ctx *c = ctx_of(N_CTX, 4);
    static struct tb b;
    /* interleave: cells alternate between sequences 0 and 1 */
    b.n = 0;
    for (int32_t i = 0; i < P; i++) {
        int32_t s0 = 0, s1 = 1;
        tb_add(&b, pa[i], i, &s0, 1, i == P - 1);
        tb_add(&b, pb[i], i, &s1, 1, false);
    }
    tb_decode_ok(c, &b);
    same_logits(minfer_ctx_batch_logits(c, 2 * P - 2), want, "interleaved", 0, 0);
    /* remove the last 10 positions of 0 and decode them again: same logits */
    ck_assert_int_eq(minfer_ctx_seq_remove(c, 0, P - 10, -1), MINFER_OK);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 0), P - 11);
    b.n = 0;
    for (int32_t i = P - 10; i < P; i++) {
        int32_t s0 = 0;
        tb_add(&b, pa[i], i, &s0, 1, i == P - 1);
    }
    tb_decode_ok(c, &b);
    same_logits(minfer_ctx_batch_logits(c, 9), want, "re-decoded", 0, 0);
    /* sequence 1 leaves: sequence 0 is alone with scattered cells, and the
     * single-sequence call compacts it back to cell == position */
    ck_assert_int_eq(minfer_ctx_seq_remove(c, 1, 0, -1), MINFER_OK);
    int32_t used, total;
    minfer_ctx_kv_usage(c, &used, &total);
    ck_assert_int_eq(used, P);
    ck_assert_int_eq(total, N_CTX);
    ck_assert_int_eq(minfer_ctx_n_past(c), P);
    ts_decode_ok(c, &toks[0], 1, 0);
    same_logits(minfer_ctx_logits(c, -1), want + n_vocab, "after compaction", 0, 1);
    int32_t moved = -1;
    ck_assert_int_eq(minfer_ctx_kv_compact(c, &moved), MINFER_OK);
    ck_assert_int_eq(moved, 0); /* already compact */
    /* a new sequence reuses the freed cells; an explicit compaction with
     * two sequences moves cells and changes no result */
    int32_t s2 = 2;
    b.n = 0;
    for (int32_t i = 0; i < P; i++)
        tb_add(&b, pb[i], i, &s2, 1, false);
    tb_decode_ok(c, &b);
    ck_assert_int_eq(minfer_ctx_seq_remove(c, 0, 10, 30), MINFER_OK); /* a hole in 0 */
    ck_assert_int_eq(minfer_ctx_seq_remove(c, 0, 0, -1), MINFER_OK);
    ck_assert_int_eq(minfer_ctx_kv_compact(c, &moved), MINFER_OK);
    ck_assert_int_gt(moved, 0);
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, P);
    /* sequence 2 now continues as prompt pa would: compare with alone by
     * re-running sequence 2's prompt pb alone */
    float *want_b = malloc(sizeof(float) * (size_t)n_vocab * 2);
    int32_t tb_toks[1];
    run_alone(pb, P, 1, want_b, tb_toks);
    b.n = 0;
    tb_add(&b, tb_toks[0], P, &s2, 1, true);
    tb_decode_ok(c, &b);
    same_logits(minfer_ctx_batch_logits(c, 0), want_b + n_vocab, "compacted", 2, 1);
    minfer_ctx_free(c);
    free(want);
    free(want_b);
}
END_TEST

/* ---- refusals ---- */

START_TEST(full_and_bad_batches_change_nothing)
{
    /* Catches a full cache being overwritten or crashing instead of
     * MINFER_ERR_FULL naming the sequence and the numbers, and malformed
     * batches (unknown sequence, a position held twice) changing state. */
    struct minfer_ctx *c = ctx_of(64, 4);
    static struct tb b;
    int32_t p[64];
    prompt_of(p, 64, 5);
    int32_t s0 = 0, s1 = 1, s9 = 9;
    b.n = 0;
    for (int32_t i = 0; i < 40; i++)
        tb_add(&b, p[i], i, &s0, 1, i == 39);
    tb_decode_ok(c, &b);
    b.n = 0;
    for (int32_t i = 0; i < 30; i++)
        tb_add(&b, p[i], i, &s1, 1, i == 29);
    ck_assert_int_eq(tb_decode(c, &b), MINFER_ERR_FULL);
    const char *e = minfer_ctx_last_error(c);
    ck_assert_msg(strstr(e, "sequence 1") && strstr(e, "24 of 64"), "%s", e);
    int32_t used;
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, 40);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 1), -1);
    /* the old call on sequence 0 keeps its MINFER_ERR_RANGE */
    ck_assert_int_eq(minfer_ctx_decode(c, p, 30, 0), MINFER_ERR_RANGE);
    b.n = 0;
    tb_add(&b, p[0], 0, &s9, 1, true);
    ck_assert_int_eq(tb_decode(c, &b), MINFER_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(minfer_ctx_last_error(c), "sequence 9"));
    b.n = 0;
    tb_add(&b, p[0], 39, &s0, 1, true); /* held already */
    ck_assert_int_eq(tb_decode(c, &b), MINFER_ERR_INVALID_ARG);
    b.n = 0;
    tb_add(&b, p[0], 5, &s1, 1, false);
    tb_add(&b, p[1], 5, &s1, 1, true); /* twice in one batch */
    ck_assert_int_eq(tb_decode(c, &b), MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(minfer_ctx_last_error(c), "position 5"));
    minfer_ctx_kv_usage(c, &used, NULL);
    ck_assert_int_eq(used, 40);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 0), 39);
    ck_assert_int_eq(minfer_ctx_seq_remove(c, 4, 0, -1), MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_ctx_seq_copy(c, 0, 4, 0, -1), MINFER_ERR_RANGE);
    minfer_ctx_free(c);
    /* n_seq_max: 256 sequences at least */
    struct minfer_ctx *big = ctx_of(512, 256);
    b.n = 0;
    for (int32_t s = 0; s < 256; s++)
        tb_add(&b, p[s % 64], 0, &s, 1, s == 255);
    tb_decode_ok(big, &b);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(big, 255), 0);
    minfer_ctx_free(big);
}
END_TEST

Suite *batch_suite(void);
Suite *batch_suite(void)
{
    Suite *s = suite_create("batch");
    TCase *tc = tcase_create("cpu");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, batch_equals_alone_with_entering_and_leaving, 0, 2);
    tcase_add_test(tc, fork_shares_cells_and_matches_alone);
    tcase_add_test(tc, sliding_window_batch_equals_alone);
    tcase_add_test(tc, remove_reuse_and_compaction_keep_results);
    tcase_add_test(tc, full_and_bad_batches_change_nothing);
    suite_add_tcase(s, tc);
    return s;
}
