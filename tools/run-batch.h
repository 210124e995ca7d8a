/*
 * run-batch.h — the many-sequence parts of the CLI, kept out of the
 * commands' own files: `minfer run --prompts FILE [--parallel N]` and
 * `minfer run --session FILE` (tools/run-prompts.c), and `minfer bench
 * --parallel 1,4,16` (tools/bench-parallel.c). The commands peel these
 * options off argv before their own parsing and hand over; their help
 * lines are rows of the option table (tools/cli-opts.c).
 */
#ifndef MINFER_TOOLS_RUN_BATCH_H
#define MINFER_TOOLS_RUN_BATCH_H

#include <stdint.h>
#include <stdio.h>

#include "cli-model.h"

struct run_batch_opts {
    const char *prompts;  /* --prompts FILE (JSON Lines) */
    const char *session;  /* --session FILE */
    int32_t parallel;     /* --parallel N; 0 = all prompts at once */
};

/* Removes --prompts, --parallel and --session (with their values) from
 * argv[0 .. *argc), shifting the rest down. 0, or 2 after printing what
 * was wrong. */
int run_batch_take_opts(int *argc, char **argv, struct run_batch_opts *bo);
/* True when run must go through run_batch (one of the options was given). */
int run_batch_wanted(const struct run_batch_opts *bo);
/* minfer run with --prompts or --session: the exit status. */
int run_batch(const struct cli_opts *o, const struct run_batch_opts *bo);

#define BENCH_PARALLEL_MAX 16
/* Removes --parallel LIST from argv; *n gets the count (0 when absent).
 * 0, or 2 after printing what was wrong. */
int bench_parallel_take_opts(int *argc, char **argv, int32_t *list, int *n);
/* llama.cpp batched-bench style rows for each parallel count: pp tokens of
 * prompt per sequence, then tg tokens each, all sequences at once. s has a
 * context the caller made; this makes its own with n_seq_max sequences. */
int bench_parallel(struct cli_session *s, const struct cli_opts *o, const int32_t *list, int n,
                   int32_t pp, int32_t tg, const char *label);

#endif /* MINFER_TOOLS_RUN_BATCH_H */
