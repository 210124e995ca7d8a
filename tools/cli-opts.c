/*
 * cli-opts.c — the CLI's option table and the parser over it (see
 * cli-opts.h). A row's spellings follow llama.cpp where it has the option,
 * so `-c/--ctx-size`, `-n/--n-predict`, `-ctk/--cache-type-k` work as there.
 */
#include "cli-opts.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CMD_PROMPT (CMD_RUN | CMD_EVAL)
#define CMD_TEMPLATE (CMD_RUN | CMD_CHAT | CMD_EVAL)

const struct cli_opt cli_opt_table[] = {
    {OPT_HELP, "-h|--help", NULL, ~0u, "print this help and exit"},
    {OPT_MODEL, "-m|--model", "FILE",
     CMD_MODEL | CMD_SERVE | CMD_TOKENIZE | CMD_DETOKENIZE | CMD_INFO,
     "model (GGUF file)"},
    /* ---- prompt ---- */
    {OPT_PROMPT, "-p|--prompt", "TEXT", CMD_PROMPT | CMD_TOKENIZE,
     "prompt text (a lone positional argument works too)"},
    {OPT_FILE, "-f|--file", "FILE", CMD_PROMPT | CMD_TOKENIZE, "the prompt is FILE's exact bytes"},
    {OPT_IDS, "--ids", "LIST", CMD_PROMPT | CMD_DETOKENIZE,
     "token ids: 1,2,3 or '[1, 2]' ('-' reads them from stdin for detokenize);\n"
     "never wrapped in the chat template"},
    {OPT_RAW, "--raw", NULL, CMD_PROMPT,
     "bare completion: the prompt is not wrapped in the model's chat template\n"
     "(by default it is, when the model has a template this build recognises)"},
    {OPT_CHAT, "--chat", NULL, CMD_PROMPT,
     "require the chat template (an error when the model has none)"},
    {OPT_SYSTEM, "-sys|--system|--system-prompt", "TEXT", CMD_TEMPLATE,
     "system message (needs the chat template)"},
    {OPT_NO_THINK, "--no-think", NULL, CMD_TEMPLATE,
     "Qwen3: answer without a thinking block (an empty <think></think>)"},
    {OPT_NO_SPECIAL, "--no-special|--no-parse-special", NULL, CMD_PROMPT | CMD_TOKENIZE,
     "special tokens written in the text (<|im_start|>) stay plain text; by\n"
     "default they become control-token ids, in tokenize and run alike"},
    {OPT_SPECIAL, "--special|--parse-special", NULL, CMD_TOKENIZE,
     "match special tokens written in the text (the default)"},
    {OPT_SKIP_SPECIAL, "--skip-special", NULL, CMD_DETOKENIZE,
     "leave control tokens (<|im_end|>) out of the text"},
    {OPT_PROMPTS, "--prompts", "FILE", CMD_RUN,
     "JSON Lines, one {\"prompt\": \"text\"} or {\"ids\": [..]} per line, all run\n"
     "as sequences of one context; one JSON line out per prompt, in order"},
    {OPT_PARALLEL, "--parallel", "N", CMD_RUN,
     "with --prompts: at most N sequences at a time (default: all that fit)"},
    {OPT_SESSION, "--session", "FILE", CMD_RUN | CMD_CHAT,
     "run: reuse the common prefix of FILE's saved sequence, save it after;\n"
     "chat: resume the conversation in FILE (if it exists), save it on leaving"},
    /* ---- generation ---- */
    {OPT_N_PREDICT, "-n|--n-predict", "N", CMD_GEN,
     "tokens to generate (default 128; -1 = until the end token or a full context)"},
    {OPT_IGNORE_EOS, "--ignore-eos", NULL, CMD_RUN,
     "keep generating past end-of-generation tokens"},
    {OPT_STOP, "--stop|-r|--reverse-prompt", "TEXT", CMD_GEN,
     "end the reply before TEXT, which is not printed (repeatable); text\n"
     "that may still become TEXT is held back, never shown in part"},
    {OPT_JSON, "--json", NULL, CMD_RUN,
     "print one JSON object instead of streaming: prompt_ids, generated_ids,\n"
     "text, seed, stop_reason (eos|length|stop|context|interrupted), timings"},
    {OPT_VERBOSE, "-v|--verbose", NULL, CMD_GEN, "report the seed and settings on stderr"},
    /* ---- sampling ---- */
    {OPT_TEMP, "--temp|--temperature", "X", CMD_GEN, "temperature (default 0.8; 0 = greedy)"},
    {OPT_TOP_K, "--top-k", "N", CMD_GEN, "keep the N most likely tokens (default 40; 0 = off)"},
    {OPT_TOP_P, "--top-p", "X", CMD_GEN, "nucleus mass (default 0.95; 1 = off)"},
    {OPT_MIN_P, "--min-p", "X", CMD_GEN, "drop tokens below X times the best (default 0.05)"},
    {OPT_REPEAT_PENALTY, "--repeat-penalty", "X", CMD_GEN,
     "penalise the last --repeat-last-n tokens, prompt included (1 = off)"},
    {OPT_REPEAT_LAST_N, "--repeat-last-n", "N", CMD_GEN,
     "penalty window in tokens (default 64; 0 = off; -1 = the context size)"},
    {OPT_PRESENCE, "--presence-penalty", "X", CMD_GEN, "subtract X once per seen token (0 = off)"},
    {OPT_FREQUENCY, "--frequency-penalty", "X", CMD_GEN,
     "subtract X per occurrence of a seen token (0 = off)"},
    {OPT_SEED, "-s|--seed", "N", CMD_GEN,
     "sampler seed (default: random; --json and -v report the one used)"},
    /* ---- context and backend ---- */
    {OPT_CTX, "-c|--ctx-size", "N", CMD_MODEL | CMD_SERVE,
     "context length (default: the model's, or the largest whose KV cache fits in 70% of "
     "the backend's free memory; serve: min(4096, the model's); capped by the model's)"},
    {OPT_BATCH, "-b|--batch-size", "N", CMD_MODEL | CMD_SERVE,
     "most tokens per forward pass (default 512)"},
    {OPT_THREADS, "-t|--threads", "N", CMD_MODEL | CMD_SERVE | CMD_QUANTIZE | CMD_SYNTH,
     "threads (default: the backend's choice, or every online CPU)"},
    {OPT_BACKEND, "--backend", "NAME", CMD_MODEL | CMD_SERVE,
     "backend plugin (cpu, cuda; default: the best that supports the model)"},
    {OPT_PLUGIN, "--plugin", "PATH", CMD_MODEL | CMD_SERVE | CMD_BACKENDS,
     "also load plugins from PATH, file or directory (repeatable)"},
    {OPT_NO_DEFAULT_DIRS, "--no-default-dirs", NULL, CMD_BACKENDS,
     "skip the libminfer-relative and install plugin directories"},
    {OPT_CTK, "-ctk|--cache-type-k", "T", CMD_MODEL | CMD_SERVE,
     "K cache type: f32, f16 (default), q8_0"},
    {OPT_CTV, "-ctv|--cache-type-v", "T", CMD_MODEL | CMD_SERVE,
     "V cache type: f32, f16 (default), q8_0"},
    {OPT_CACHE_TYPE, "--cache-type", "T", CMD_MODEL | CMD_SERVE, "K and V cache type"},
    {OPT_NO_GRAPHS, "--no-graphs", NULL, CMD_MODEL | CMD_SERVE,
     "never offer graph replay to the backend"},
    /* ---- eval ---- */
    {OPT_OUT, "-o|--output", "FILE", CMD_EVAL | CMD_SYNTH,
     "output file (a regular file or a new name; a symlink is followed)"},
    {OPT_ALL, "--all", NULL, CMD_EVAL, "every prompt position's logits (default: the last)"},
    /* ---- bench ---- */
    {OPT_BENCH_PP, "-p|--n-prompt", "N[,N]", CMD_BENCH,
     "prompt tokens per pp test (default 512; 0 = skip)"},
    {OPT_BENCH_TG, "-n|--n-gen", "N[,N]", CMD_BENCH,
     "generated tokens per tg test (default 128; 0 = skip)"},
    {OPT_BENCH_DEPTH, "-d|--n-depth", "D[,D]", CMD_BENCH,
     "KV depth: each test runs after D tokens are in the cache (filled first, not timed; "
     "rows read 'pp512 @ d4096'; default 0)"},
    {OPT_REPS, "-r|--repetitions", "N", CMD_BENCH, "repetitions (default 5)"},
    {OPT_BENCH_PARALLEL, "--parallel", "B[,B]", CMD_BENCH,
     "llama batched-bench rows: B sequences at once, each -p prompt tokens then -n generated"},
    {OPT_BENCH_FMT, "-o|--output", "FMT", CMD_BENCH, "md (default), json, jsonl or csv"},
    /* ---- model tools ---- */
    {OPT_ARCH, "--arch", "A", CMD_BENCH | CMD_SYNTH,
     "synthetic model architecture: qwen2, qwen3, llama, gemma3, qwen3moe (default: from --shape)"},
    {OPT_SHAPE, "--shape", "S", CMD_BENCH | CMD_SYNTH,
     "qwen2.5-0.5b ... qwen3-8b, or custom:n_embd=N,... (bench default qwen2.5-0.5b)"},
    {OPT_TYPE, "--type", "T", CMD_BENCH | CMD_SYNTH,
     "weight type or mix: Q4_K_M, Q8_0, F16 ... (bench default Q4_K_M)"},
    {OPT_TOKENIZER, "--tokenizer", "FILE", CMD_SYNTH,
     "copy the vocabulary from a GGUF or a tokenizer.json"},
    {OPT_SYNTH_SEED, "--seed", "N", CMD_SYNTH, "weight seed (default 1; same seed, same bytes)"},
    {OPT_PURE, "--pure", NULL, CMD_QUANTIZE | CMD_SYNTH,
     "no mix: every 2-D weight gets exactly TYPE"},
    {OPT_ALLOW_REQUANT, "--allow-requantize", NULL, CMD_QUANTIZE,
     "accept an input whose weights are already quantized (quality suffers)"},
    /* ---- info ---- */
    {OPT_ITEMS, "--items", "N", CMD_INFO, "array items shown per key (default 8; 0 = all)"},
    {OPT_CHARS, "--chars", "N", CMD_INFO, "characters shown per string (default 160; 0 = all)"},
    {OPT_NO_KV, "--no-kv", NULL, CMD_INFO, "leave out the key/value pairs"},
    {OPT_NO_TENSORS, "--no-tensors", NULL, CMD_INFO, "leave out the tensor table"},
    /* ---- serve ---- */
    {OPT_SERVE_HOST, "--host", "ADDR", CMD_SERVE,
     "listen address, IPv4 or IPv6 (default 127.0.0.1)"},
    {OPT_SERVE_PORT, "--port", "N", CMD_SERVE,
     "port (default 8080; 0 picks a free one, printed on stderr)"},
    {OPT_SERVE_PARALLEL, "-np|--parallel", "N", CMD_SERVE,
     "sequences decoded together (default 4); each may hold -c / N tokens"},
    {OPT_SERVE_API_KEY, "--api-key", "KEY", CMD_SERVE,
     "require 'Authorization: Bearer KEY' (all routes but /health and /)"},
    {OPT_SERVE_API_KEY_FILE, "--api-key-file", "FILE", CMD_SERVE,
     "--api-key from FILE's first line"},
    {OPT_SERVE_MAX_BODY, "--max-body", "BYTES", CMD_SERVE,
     "largest request body, else 413 (default 8388608)"},
    {OPT_SERVE_MAX_QUEUE, "--max-queue", "N", CMD_SERVE,
     "requests waiting for a sequence, else 503 (default 64)"},
    {OPT_SERVE_TIMEOUT, "--timeout", "S", CMD_SERVE,
     "end a request after S seconds (default 600; 0 = never)"},
    {OPT_SERVE_ALIAS, "-a|--alias", "NAME", CMD_SERVE,
     "model name in responses (default: the file name)"},
    {OPT_SERVE_NO_PREFIX_CACHE, "--no-prefix-cache", NULL, CMD_SERVE,
     "prefill every prompt in full (no reuse of a cached prefix)"},
};
const unsigned cli_opt_count = sizeof cli_opt_table / sizeof cli_opt_table[0];

/* Whether name is one of row's '|'-separated spellings. */
static bool spelled(const struct cli_opt *row, const char *name, size_t len)
{
    for (const char *p = row->names; *p;) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && !memcmp(p, name, len))
            return true;
        p += n + (bar ? 1 : 0);
    }
    return false;
}

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "minfer %s: ", cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, " (see 'minfer %s --help')\n", cmd);
    va_end(ap);
    return 2;
}

int cli_next(struct cli_args *a, const char **val)
{
    *val = NULL;
    if (a->i >= a->argc)
        return CLI_END;
    const char *s = a->argv[a->i++];
    if (!a->rest && !strcmp(s, "--")) {
        a->rest = true;
        return cli_next(a, val);
    }
    if (a->rest || s[0] != '-' || !s[1]) {
        *val = s;
        return CLI_POSITIONAL;
    }
    const char *eq = s[1] == '-' ? strchr(s, '=') : NULL;
    size_t len = eq ? (size_t)(eq - s) : strlen(s);
    snprintf(a->opt, sizeof a->opt, "%.*s", (int)len, s);
    const struct cli_opt *found = NULL;
    bool elsewhere = false;
    for (unsigned k = 0; k < cli_opt_count && !found; k++) {
        if (!spelled(&cli_opt_table[k], s, len))
            continue;
        if (cli_opt_table[k].cmds & a->bit)
            found = &cli_opt_table[k];
        else
            elsewhere = true;
    }
    if (!found) {
        if (elsewhere)
            return (cli_usage_error(a->cmd, "option %.*s does not apply to %s", (int)len, s,
                                    a->cmd),
                    CLI_BAD);
        return (cli_usage_error(a->cmd, "unknown option '%.*s'", (int)len, s), CLI_BAD);
    }
    if (!found->arg) {
        if (eq)
            return (cli_usage_error(a->cmd, "option %.*s takes no value", (int)len, s), CLI_BAD);
        return found->id;
    }
    if (eq) {
        *val = eq + 1;
    } else if (a->i < a->argc) {
        *val = a->argv[a->i++];
    } else {
        return (cli_usage_error(a->cmd, "option %s needs a value (%s)", s, found->arg), CLI_BAD);
    }
    return found->id;
}

bool cli_num_i32(const char *cmd, const char *opt, const char *v, int32_t lo, int32_t hi,
                 int32_t *out)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        cli_usage_error(cmd, "%s needs a whole number from %d to %d, not '%s'", opt, lo, hi, v);
        return false;
    }
    *out = (int32_t)x;
    return true;
}

bool cli_num_f32(const char *cmd, const char *opt, const char *v, float *out)
{
    char *end;
    errno = 0;
    float x = strtof(v, &end);
    if (errno || end == v || *end || !isfinite(x)) {
        cli_usage_error(cmd, "%s needs a finite number, not '%s'", opt, v);
        return false;
    }
    *out = x;
    return true;
}

bool cli_num_u64(const char *cmd, const char *opt, const char *v, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || end == v || *end || v[0] == '-' || v[0] == '+' || v[0] == ' ') {
        cli_usage_error(cmd, "%s needs a whole number from 0 to 2^64-1, not '%s'", opt, v);
        return false;
    }
    *out = (uint64_t)x;
    return true;
}

void cli_print_options(FILE *f, unsigned bit)
{
    fprintf(f, "\noptions:\n");
    for (unsigned k = 0; k < cli_opt_count; k++) {
        const struct cli_opt *r = &cli_opt_table[k];
        if (!(r->cmds & bit))
            continue;
        char head[96];
        int n = 0;
        for (const char *p = r->names; *p && n < (int)sizeof head - 1; p++)
            head[n++] = *p == '|' ? ',' : *p;
        head[n] = 0;
        /* "-t,--threads" reads better as "-t, --threads" */
        char spaced[128];
        size_t m = 0;
        for (const char *p = head; *p && m < sizeof spaced - 2; p++) {
            spaced[m++] = *p;
            if (*p == ',')
                spaced[m++] = ' ';
        }
        spaced[m] = 0;
        char left[160];
        snprintf(left, sizeof left, "%s%s%s", spaced, r->arg ? " " : "", r->arg ? r->arg : "");
        fprintf(f, "  %-28s", left);
        if (strlen(left) > 28)
            fprintf(f, "\n  %-28s", "");
        /* words wrapped to 100 columns; "\n" in the help forces a break */
        int col = 30;
        for (const char *p = r->help; *p;) {
            size_t w = strcspn(p, " \n");
            if (col > 30 && col + 1 + (int)w > 100) {
                fprintf(f, "\n  %-28s", "");
                col = 30;
            } else if (col > 30) {
                fputc(' ', f);
                col++;
            }
            fwrite(p, 1, w, f);
            col += (int)w;
            p += w;
            if (*p == '\n' && p[1]) {
                fprintf(f, "\n  %-28s", "");
                col = 30;
            }
            p += strspn(p, " \n");
        }
        fputc('\n', f);
    }
}

void cli_check_threads(const char *cmd, int32_t n)
{
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (n > 0 && cpus > 0 && n > cpus)
        fprintf(stderr,
                "minfer %s: warning: -t %d is more threads than the %ld online CPUs; "
                "threads will wait on each other\n",
                cmd, n, cpus);
}

int cli_stdout_done(const char *cmd)
{
    errno = 0;
    if (fflush(stdout) == 0 && !ferror(stdout))
        return 0;
    fprintf(stderr, "minfer %s: cannot write to stdout: %s\n", cmd,
            errno ? strerror(errno) : "write error");
    return 1;
}
