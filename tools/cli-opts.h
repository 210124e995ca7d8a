/*
 * cli-opts.h — the one option table of the minfer CLI. Every option of
 * every command is a row: its spellings (llama.cpp's long forms among
 * them), its value, the commands it applies to and its help line. Parsing,
 * every command's --help list and the shell completion scripts all read
 * this table, so an option cannot be accepted without being documented,
 * and an option given to a command it does not apply to is an error.
 */
#ifndef MINFER_TOOLS_CLI_OPTS_H
#define MINFER_TOOLS_CLI_OPTS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Command bits (which commands a row applies to). */
#define CMD_RUN (1u << 0)
#define CMD_CHAT (1u << 1)
#define CMD_EVAL (1u << 2)
#define CMD_BENCH (1u << 3)
#define CMD_TOKENIZE (1u << 4)
#define CMD_DETOKENIZE (1u << 5)
#define CMD_INFO (1u << 6)
#define CMD_QUANTIZE (1u << 7)
#define CMD_SYNTH (1u << 8)
#define CMD_BACKENDS (1u << 9)
#define CMD_COMPLETION (1u << 10)
#define CMD_VERSION (1u << 11)
#define CMD_SERVE (1u << 12)    /* tools/serve/ */
#define CMD_MODEL (CMD_RUN | CMD_CHAT | CMD_EVAL | CMD_BENCH) /* load a model, make a context */
#define CMD_GEN (CMD_RUN | CMD_CHAT)                          /* generate with a sampler */

enum cli_opt_id {
    OPT_HELP,
    OPT_MODEL,
    OPT_PROMPT,
    OPT_FILE,
    OPT_IDS,
    OPT_RAW,
    OPT_CHAT,
    OPT_SYSTEM,
    OPT_NO_THINK,
    OPT_NO_SPECIAL,
    OPT_SPECIAL,
    OPT_SKIP_SPECIAL,
    OPT_N_PREDICT,
    OPT_CTX,
    OPT_BATCH,
    OPT_THREADS,
    OPT_BACKEND,
    OPT_PLUGIN,
    OPT_CTK,
    OPT_CTV,
    OPT_CACHE_TYPE,
    OPT_NO_GRAPHS,
    OPT_TEMP,
    OPT_TOP_K,
    OPT_TOP_P,
    OPT_MIN_P,
    OPT_REPEAT_PENALTY,
    OPT_REPEAT_LAST_N,
    OPT_PRESENCE,
    OPT_FREQUENCY,
    OPT_SEED,
    OPT_IGNORE_EOS,
    OPT_STOP,
    OPT_JSON,
    OPT_VERBOSE,
    OPT_OUT,         /* -o FILE (eval, synth) */
    OPT_ALL,
    OPT_BENCH_PP,    /* bench -p N[,N] */
    OPT_BENCH_TG,    /* bench -n N[,N] */
    OPT_BENCH_DEPTH, /* bench -d D[,D] */
    OPT_REPS,
    OPT_BENCH_FMT,   /* bench -o md|json|csv|jsonl */
    OPT_ARCH,
    OPT_SHAPE,
    OPT_TYPE,
    OPT_TOKENIZER,
    OPT_PURE,
    OPT_ALLOW_REQUANT,
    OPT_ITEMS,
    OPT_CHARS,
    OPT_NO_KV,
    OPT_NO_TENSORS,
    OPT_NO_DEFAULT_DIRS,
    OPT_SYNTH_SEED,  /* synth --seed: the weights' seed */
    OPT_SESSION,     /* run/chat --session FILE */
    OPT_PROMPTS,     /* run --prompts FILE (tools/run-prompts.c) */
    OPT_PARALLEL,    /* run --parallel N */
    OPT_BENCH_PARALLEL, /* bench --parallel B[,B] (tools/bench-parallel.c) */
    OPT_SERVE_HOST,  /* serve (tools/serve/cmd-serve.c) */
    OPT_SERVE_PORT,
    OPT_SERVE_PARALLEL,
    OPT_SERVE_API_KEY,
    OPT_SERVE_API_KEY_FILE,
    OPT_SERVE_MAX_BODY,
    OPT_SERVE_MAX_QUEUE,
    OPT_SERVE_TIMEOUT,
    OPT_SERVE_ALIAS,
    OPT_SERVE_NO_PREFIX_CACHE,
    /* options other branches add append here */
    OPT_COUNT_,
    CLI_POSITIONAL = 1000, /* *val is the argument */
    CLI_END,               /* no more arguments */
    CLI_BAD,               /* a parse error was printed: exit 2 */
};

struct cli_opt {
    int id;               /* enum cli_opt_id */
    const char *names;    /* "-t|--threads": every accepted spelling, '|'-separated */
    const char *arg;      /* value placeholder ("N"), NULL for a flag */
    unsigned cmds;        /* CMD_* bits it applies to */
    const char *help;     /* one line; "\n" continues on an indented line */
};

extern const struct cli_opt cli_opt_table[];
extern const unsigned cli_opt_count;

/* Iterates argv[1..]: */
struct cli_args {
    const char *cmd;   /* "run", for messages */
    unsigned bit;      /* CMD_RUN */
    int argc;
    char **argv;
    int i;             /* next index; start at 1 */
    char opt[48];      /* the option as spelled by the user, for messages */
    bool rest;         /* after "--": every argument is positional */
};
/* Next option: its id with *val its value (NULL for a flag), CLI_POSITIONAL
 * with *val the argument, CLI_END, or CLI_BAD after printing one line. Long
 * options also take "--name=value". "--" makes the rest positional. */
int cli_next(struct cli_args *a, const char **val);

/* Prints "minfer CMD: <message>" and the --help hint; returns 2. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Strict numbers: the whole value, in range, else an error line naming the
 * option and the value (false). */
bool cli_num_i32(const char *cmd, const char *opt, const char *v, int32_t lo, int32_t hi,
                 int32_t *out);
bool cli_num_f32(const char *cmd, const char *opt, const char *v, float *out);
bool cli_num_u64(const char *cmd, const char *opt, const char *v, uint64_t *out);

/* The option lines of every row applying to bit, in table order. */
void cli_print_options(FILE *f, unsigned bit);
/* Flushes stdout; on a write error (a full disk, /dev/full, a closed pipe)
 * prints "minfer CMD: cannot write to stdout: ..." and returns 1, else 0.
 * Every command that prints its result calls this before exiting 0. */
int cli_stdout_done(const char *cmd);
/* Warns (once) when -t N exceeds the online CPUs. */
void cli_check_threads(const char *cmd, int32_t n);

/* The commands main dispatches to, for help and completion. */
struct cli_command {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv); /* argv[0] is the command name */
    unsigned bit;
};
extern const struct cli_command cli_commands[];
extern const unsigned cli_command_count;

#endif /* MINFER_TOOLS_CLI_OPTS_H */
