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

#include "cli-opts.h"
#include "minfer/minfer.h"

struct cli_session;

#define CLI_MAX_PLUGINS 8
#define CLI_MAX_STOPS 16
#define CLI_MAX_TESTS 8

struct cli_opts {
    const char *model;          /* -m */
    const char *prompt;         /* -p, or a positional argument */
    const char *file;           /* -f: the prompt is this file's exact bytes */
    const char *ids;            /* --ids 1,2,3 */
    const char *system;         /* --system: system message (needs a chat template) */
    const char *out;            /* eval -o FILE */
    const char *session;        /* chat --session FILE (run's: tools/run-prompts.c) */
    const char *backend;        /* --backend */
    const char *plugins[CLI_MAX_PLUGINS]; /* --plugin */
    size_t n_plugins;
    const char *stops[CLI_MAX_STOPS]; /* --stop */
    size_t n_stop;
    int32_t n_predict;          /* -n */
    int32_t n_ctx;              /* -c */
    int32_t n_batch;            /* -b */
    int32_t n_threads;          /* -t */
    int32_t reps;               /* bench -r */
    int32_t pps[CLI_MAX_TESTS], tgs[CLI_MAX_TESTS]; /* bench -p / -n lists */
    int n_pps, n_tgs;
    int32_t depths[CLI_MAX_TESTS]; /* bench -d list (default {0}) */
    int n_depths;
    const char *bench_fmt;      /* bench -o: md json jsonl csv */
    const char *arch, *shape, *type; /* bench's synthetic model */
    uint32_t type_k, type_v;    /* -ctk / -ctv / --cache-type */
    struct minfer_sampler_params sp;
    bool repeat_last_n_ctx;     /* --repeat-last-n -1: the context size */
    bool seed_set;              /* --seed given; else a random one */
    bool raw, chat, no_special, json, all, no_graphs, ignore_eos, verbose;
    bool no_think;              /* --no-think: Qwen3's empty <think></think> */
};

/* Parses argv[1..] for the command of bit (CMD_RUN...) with the option
 * table of cli-opts.c. Returns 0, 2 after printing a one-line problem, or
 * 1 for --help (the caller prints its usage to stdout and exits 0). */
int cli_parse(int argc, char **argv, unsigned bit, struct cli_opts *o);
/* Whether the prompt goes through the chat template: not for --ids or
 * --raw; --chat demands it; otherwise when the model has a recognised
 * template. Prints an error and returns -1 when --chat, --system or
 * --no-think cannot apply to this model. */
int cli_use_template(const char *cmd, const struct cli_opts *o, const struct cli_session *s);

struct cli_session {
    struct minfer_runtime *rt;
    struct minfer_model *model;
    const struct minfer_tokenizer *tok; /* the model's (minfer_model_tokenizer); NULL
                                           unless need_tok */
    struct minfer_ctx *ctx;
    void *synth_mem;                /* in-memory model bytes (bench), or NULL */
    double load_ms;
};

/* Opens runtime, model (from o->model, or gguf when non-NULL), the
 * tokenizer when need_tok, and a context. Prints errors prefixed by cmd. */
int cli_open(const char *cmd, const struct cli_opts *o, struct minfer_gguf *gguf,
             bool need_tok, struct cli_session *s);
void cli_close(struct cli_session *s);

/* The prompt's ids (from --ids, -f or -p, through the chat template
 * unless --raw: see cli_use_template).
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

/* Ctrl-C: the first sets cli_sigint (the caller stops what it is doing;
 * progress callbacks cancel prefills), a second one ends the process as
 * usual. Installed without SA_RESTART so a blocking read returns EINTR. */
#include <signal.h>
extern volatile sig_atomic_t cli_sigint;
void cli_sigint_install(void);
void cli_sigint_restore(void);

/* Without --seed: a random seed from getrandom(2) into o->sp.seed. */
void cli_random_seed(struct cli_opts *o);

/* An output file under the library's rule (core/runtime/outfile.h): a
 * regular file or a new name, a symlink followed to its target; written to
 * an unnamed O_TMPFILE beside the target (a named one where that is
 * missing) and put in place only when complete. */
struct cli_out {
    FILE *f;
    bool anon;          /* an unnamed O_TMPFILE, linked in at commit */
    char target[4096];
    char tmp[4160];
};
int cli_out_open(const char *cmd, const char *path, struct cli_out *out);
/* Closes and renames into place (0), or reports and removes it (1). */
int cli_out_commit(const char *cmd, struct cli_out *out);
void cli_out_abort(struct cli_out *out);

/* --stop: the earliest occurrence of any stop string in t[from..n) (-1 if
 * none); how many trailing bytes of t[0..n) start some stop string (to
 * hold back: they may still become one); the longest stop string. */
long cli_stop_find(const struct cli_opts *o, const char *t, size_t n, size_t from);
size_t cli_stop_hold(const struct cli_opts *o, const char *t, size_t n);
size_t cli_stop_max_len(const struct cli_opts *o);

/* The architecture a named synth shape belongs to ("qwen2.5-7b" -> qwen2),
 * or NULL (custom: shapes need --arch). */
const char *cli_arch_of_shape(const char *shape);

double cli_now_ms(void);
int32_t cli_argmax(const float *x, int32_t n);

#endif /* MINFER_TOOLS_CLI_MODEL_H */
