/*
 * cli-model.h — what the model commands (run, chat, eval, bench) share:
 * llama.cpp-like option parsing, opening runtime + model + tokenizer +
 * context, turning -p/-f/--ids (and --chat) into token ids, and a
 * terminal progress line.
 */
#ifndef MINFER_TOOLS_CLI_MODEL_H
#define MINFER_TOOLS_CLI_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "minfer/minfer.h"

#define CLI_MAX_PLUGINS 8

struct cli_opts {
    const char *model;          /* -m */
    const char *prompt;         /* -p, or a positional argument */
    const char *file;           /* -f: the prompt is this file's exact bytes */
    const char *ids;            /* --ids 1,2,3 */
    const char *system;         /* --system: system message with --chat */
    const char *out;            /* -o */
    const char *backend;        /* --backend */
    const char *plugins[CLI_MAX_PLUGINS]; /* --plugin */
    size_t n_plugins;
    int32_t n_predict;          /* -n */
    int32_t n_ctx;              /* -c */
    int32_t n_batch;            /* -b */
    int32_t n_threads;          /* -t */
    int32_t n_prompt;           /* bench -p */
    int32_t reps;               /* bench -r */
    uint32_t type_k, type_v;    /* -ctk / -ctv / --cache-type */
    struct minfer_sampler_params sp;
    bool chat, no_special, json, all, no_graphs;
    bool no_think;              /* --no-think: Qwen3's empty <think></think> */
};

/* Which flags a command takes beyond the model/context/sampling ones. */
#define CLI_TAKES_PROMPT 0x1u
#define CLI_TAKES_OUT 0x2u
#define CLI_BENCH 0x4u      /* -p N is a prompt length, -r N repetitions */

/* Parses argv[1..]. Returns 0, or 2 after printing the problem (usage
 * text is the caller's). --help returns 1. */
int cli_parse(int argc, char **argv, unsigned takes, struct cli_opts *o);
/* The option lines every model command shares, for usage texts. */
void cli_common_usage(FILE *f);
void cli_sampling_usage(FILE *f);

struct cli_session {
    struct minfer_runtime *rt;
    struct minfer_model *model;
    struct minfer_tokenizer *tok;   /* NULL unless need_tok */
    struct minfer_ctx *ctx;
    void *synth_mem;                /* in-memory model bytes (bench), or NULL */
    double load_ms;
};

/* Opens runtime, model (from o->model, or gguf when non-NULL), the
 * tokenizer when need_tok, and a context. Prints errors prefixed by cmd. */
int cli_open(const char *cmd, const struct cli_opts *o, struct minfer_gguf *gguf,
             bool need_tok, struct cli_session *s);
void cli_close(struct cli_session *s);

/* The prompt's ids (from --ids, -f or -p, through ChatML with --chat).
 * *ids is malloc'd. Prints errors. */
int cli_prompt_ids(const char *cmd, const struct cli_opts *o, const struct cli_session *s,
                   int32_t **ids, size_t *n);
/* Token ids of text (special tokens matched unless no_special). */
int cli_tokenize(const char *cmd, const struct cli_session *s, const char *text, size_t len,
                 bool special, int32_t **ids, size_t *n);

/* Renders msgs[n] with the model's chat template (plus the assistant
 * header); *text is malloc'd. Prints errors. */
int cli_chat_render(const char *cmd, const struct cli_opts *o, const struct cli_session *s,
                    const struct minfer_chat_msg *msgs, size_t n, char **text, size_t *len);

/* minfer_progress_cb drawing "label [####....] 42%" on a terminal. */
bool cli_progress_bar(uint64_t done, uint64_t total, void *label);

double cli_now_ms(void);
int32_t cli_argmax(const float *x, int32_t n);

#endif /* MINFER_TOOLS_CLI_MODEL_H */
