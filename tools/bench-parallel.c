/*
 * bench-parallel.c — `minfer bench --parallel 1,4,16,64 -p PP -n TG`, the
 * rows of llama.cpp's batched-bench: for B sequences at once, the prompt
 * phase (B prompts of PP tokens through minfer_ctx_decode_batch) and the
 * generation phase (TG steps of one token per sequence, one batch each),
 * with total throughput of each and the decode speed one sequence sees.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-model.h"
#include "run-batch.h"

int bench_parallel_take_opts(int *argc, char **argv, int32_t *list, int *n)
{
    *n = 0;
    int k = 0;
    for (int i = 0; i < *argc; i++) {
        bool joined = !strncmp(argv[i], "--parallel=", 11); /* as the option table parses */
        if (strcmp(argv[i], "--parallel") && !joined) {
            argv[k++] = argv[i];
            continue;
        }
        const char *s = joined ? argv[i] + 11 : i + 1 < *argc ? argv[++i] : "";
        *n = 0;
        while (*s) {
            char *end;
            errno = 0;
            long x = strtol(s, &end, 10);
            if (errno || end == s || x < 1 || x > 4096 || *n == BENCH_PARALLEL_MAX) {
                return cli_usage_error("bench", "--parallel takes counts like 1,4,16,64 "
                                                "(1..4096, at most %d)", BENCH_PARALLEL_MAX);
            }
            list[(*n)++] = (int32_t)x;
            s = *end == ',' ? end + 1 : end;
            if (*end && *end != ',') {
                return cli_usage_error("bench", "--parallel: unexpected '%s'", end);
            }
        }
        if (!*n) {
            return cli_usage_error("bench", "--parallel needs a list like 1,4,16,64");
        }
    }
    *argc = k;
    argv[k] = NULL;
    return 0;
}

struct pbatch {
    int32_t *tok, *pos, *nseq, *seq;
    const int32_t **ids;
    uint8_t *logits;
};

static int decode(struct minfer_ctx *c, const struct pbatch *b, int32_t n)
{
    struct minfer_batch mb = {
        .struct_size = sizeof mb, .n_tokens = n, .tokens = b->tok, .pos = b->pos,
        .n_seq_id = b->nseq, .seq_ids = (const int32_t *const *)b->ids, .logits = b->logits,
    };
    if (minfer_ctx_decode_batch(c, &mb) != MINFER_OK) {
        fprintf(stderr, "minfer bench: %s\n", minfer_ctx_last_error(c));
        return 1;
    }
    return 0;
}

/* One row: B sequences, each PP prompt tokens then TG generated. */
static int one_row(struct cli_session *s, const struct cli_opts *o, int32_t B, int32_t pp,
                   int32_t tg, int32_t n_vocab, const char *label)
{
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = B * (pp + tg > 0 ? pp + tg : 1) + 1; /* the warm-up step needs a cell each */
    cp.n_batch = o->n_batch > 0 ? o->n_batch : 2048;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    cp.flags = o->no_graphs ? MINFER_CTX_NO_GRAPHS : 0;
    cp.n_seq_max = B;
    minfer_status st;
    char err[512] = "";
    struct minfer_ctx *c = minfer_ctx_new(s->model, &cp, &st, err, sizeof err);
    if (!c) {
        fprintf(stderr, "minfer bench: context of %d sequences x %d cells: %s\n", B, pp + tg,
                err);
        return 1;
    }
    int32_t n_max = B * (pp > 1 ? pp : 1);
    struct pbatch b;
    b.tok = malloc(sizeof *b.tok * (size_t)n_max);
    b.pos = malloc(sizeof *b.pos * (size_t)n_max);
    b.nseq = malloc(sizeof *b.nseq * (size_t)n_max);
    b.seq = malloc(sizeof *b.seq * (size_t)B);
    b.ids = malloc(sizeof *b.ids * (size_t)n_max);
    b.logits = malloc((size_t)n_max);
    int rc = 1;
    if (!b.tok || !b.pos || !b.nseq || !b.seq || !b.ids || !b.logits)
        goto out;
    uint64_t x = 88172645463325252ull;
    for (int32_t q = 0; q < B; q++)
        b.seq[q] = q;
    for (int32_t i = 0; i < n_max; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        b.tok[i] = (int32_t)(x % (uint64_t)n_vocab);
        b.nseq[i] = 1;
    }
    /* warm-up: one decode step of every sequence, then an empty cache */
    for (int32_t q = 0; q < B; q++) {
        b.pos[q] = 0;
        b.ids[q] = &b.seq[q];
        b.logits[q] = 1;
    }
    if (decode(c, &b, B))
        goto out;
    minfer_ctx_seq_remove(c, -1, 0, -1);

    /* prompt phase: every sequence's PP tokens in one batch */
    double t_pp = 0;
    if (pp > 0) {
        for (int32_t q = 0; q < B; q++)
            for (int32_t i = 0; i < pp; i++) {
                int32_t k = q * pp + i;
                b.pos[k] = i;
                b.ids[k] = &b.seq[q];
                b.logits[k] = i == pp - 1;
            }
        double t0 = cli_now_ms();
        if (decode(c, &b, B * pp))
            goto out;
        t_pp = (cli_now_ms() - t0) / 1e3;
    }
    /* generation phase: TG steps of one token per sequence */
    double t0 = cli_now_ms();
    for (int32_t step = 0; step < tg; step++) {
        for (int32_t q = 0; q < B; q++) {
            b.pos[q] = pp + step;
            b.ids[q] = &b.seq[q];
            b.logits[q] = 1;
            b.tok[q] = (b.tok[q] * 31 + step + 1) % n_vocab;
        }
        if (decode(c, &b, B))
            goto out;
    }
    double t_tg = (cli_now_ms() - t0) / 1e3;
    double n_pp = (double)B * pp, n_tg = (double)B * tg;
    printf("| %s | %d | %d | %d | %d | %.3f | %.2f | %.3f | %.2f | %.2f | %.3f | %.2f |\n", label,
           pp, tg, B, B * (pp + tg), t_pp, t_pp > 0 ? n_pp / t_pp : 0.0, t_tg,
           t_tg > 0 ? n_tg / t_tg : 0.0, t_tg > 0 ? (double)tg / t_tg : 0.0, t_pp + t_tg,
           t_pp + t_tg > 0 ? (n_pp + n_tg) / (t_pp + t_tg) : 0.0);
    fflush(stdout);
    rc = 0;
out:
    free(b.tok);
    free(b.pos);
    free(b.nseq);
    free(b.seq);
    free(b.ids);
    free(b.logits);
    minfer_ctx_free(c);
    return rc;
}

int bench_parallel(struct cli_session *s, const struct cli_opts *o, const int32_t *list, int n,
                   int32_t pp, int32_t tg, const char *label)
{
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s->model, &info);
    /* the caller's single-sequence context is not needed: free its cache */
    minfer_ctx_free(s->ctx);
    s->ctx = NULL;
    printf("| model | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | "
           "S_TG/seq t/s | T s | S t/s |\n");
    printf("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
           "| ---: |\n");
    fflush(stdout);
    for (int i = 0; i < n; i++)
        if (one_row(s, o, list[i], pp, tg, info.n_vocab, label))
            return 1;
    return 0;
}
