/*
 * cli-model.c — option parsing, session setup and prompt handling shared
 * by minfer run, chat, eval and bench.
 */
#include "cli-model.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "minfer/gguf.h"

/* ---- small helpers ---- */

double cli_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

int32_t cli_argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

bool cli_progress_bar(uint64_t done, uint64_t total, void *label)
{
    if (!isatty(STDERR_FILENO))
        return true;
    double f = total ? (double)done / (double)total : 1.0;
    int w = 30, fill = (int)(f * w);
    fprintf(stderr, "\r%s [", label ? (const char *)label : "");
    for (int i = 0; i < w; i++)
        fputc(i < fill ? '#' : '.', stderr);
    fprintf(stderr, "] %5.1f%%", 100.0 * f);
    if (done >= total)
        fprintf(stderr, "\r\033[K");
    fflush(stderr);
    return true;
}

/* ---- options ---- */

static bool parse_i32(const char *s, int32_t lo, int32_t hi, int32_t *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi)
        return false;
    *out = (int32_t)v;
    return true;
}

static bool parse_f(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno || end == s || *end)
        return false;
    *out = v;
    return true;
}

static bool parse_kv_type(const char *s, uint32_t *t)
{
    if (!minfer_type_from_name(s, t))
        return false;
    return *t == MINFER_TYPE_F32 || *t == MINFER_TYPE_F16 || *t == MINFER_TYPE_Q8_0;
}

void cli_common_usage(FILE *f)
{
    fprintf(f,
            "  -m FILE            model (GGUF)\n"
            "  -c N               context length (default: the model's, or the largest\n"
            "                     whose KV cache fits the backend's free memory)\n"
            "  -b N               most tokens per forward pass (default 512)\n"
            "  -t N               backend threads (default: the backend's choice)\n"
            "  --backend NAME     backend plugin (cpu, cuda; default auto)\n"
            "  --plugin PATH      also load plugins from PATH (file or directory)\n"
            "  -ctk T, -ctv T     KV cache type of K / V: f32, f16 (default) or q8_0\n"
            "  --cache-type T     both\n"
            "  --no-graphs        never offer graph replay to the backend\n");
}

void cli_sampling_usage(FILE *f)
{
    fprintf(f,
            "  --temp X           temperature (default 0.8; 0 = greedy)\n"
            "  --top-k N --top-p X --min-p X   sampling filters (40, 0.95, 0.05)\n"
            "  --seed N           sampler seed\n");
}

int cli_parse(int argc, char **argv, unsigned takes, struct cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->n_prompt = 512;
    o->reps = 5;
    o->type_k = o->type_v = MINFER_TYPE_F16;
    o->sp = minfer_sampler_default_params();
    const char *cmd = argv[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool ok = true, used_v = true;
#define IS(s) (!strcmp(a, s))
        if (IS("-h") || IS("--help"))
            return 1;
        else if (IS("-m") || IS("--model"))
            ok = v && (o->model = v);
        else if ((IS("-p") || IS("--prompt")) && (takes & CLI_BENCH))
            ok = v && parse_i32(v, 0, 1 << 20, &o->n_prompt);
        else if ((IS("-p") || IS("--prompt")) && (takes & CLI_TAKES_PROMPT))
            ok = v && (o->prompt = v);
        else if ((IS("-f") || IS("--file")) && (takes & CLI_TAKES_PROMPT))
            ok = v && (o->file = v);
        else if (IS("--ids") && (takes & CLI_TAKES_PROMPT))
            ok = v && (o->ids = v);
        else if (IS("--system"))
            ok = v && (o->system = v);
        else if (IS("-o") && (takes & CLI_TAKES_OUT))
            ok = v && (o->out = v);
        else if (IS("--backend"))
            ok = v && (o->backend = v);
        else if (IS("--plugin"))
            ok = v && o->n_plugins < CLI_MAX_PLUGINS && (o->plugins[o->n_plugins++] = v);
        else if (IS("-n") || IS("--n-predict"))
            ok = v && parse_i32(v, (takes & CLI_BENCH) ? 0 : -1, 1 << 24, &o->n_predict);
        else if (IS("-c") || IS("--ctx-size"))
            ok = v && parse_i32(v, 0, 1 << 24, &o->n_ctx);
        else if (IS("-b") || IS("--batch-size"))
            ok = v && parse_i32(v, 1, 1 << 20, &o->n_batch);
        else if (IS("-t") || IS("--threads"))
            ok = v && parse_i32(v, 0, 4096, &o->n_threads);
        else if (IS("-r") && (takes & CLI_BENCH))
            ok = v && parse_i32(v, 1, 1000, &o->reps);
        else if (IS("-ctk") || IS("--cache-type-k"))
            ok = v && parse_kv_type(v, &o->type_k);
        else if (IS("-ctv") || IS("--cache-type-v"))
            ok = v && parse_kv_type(v, &o->type_v);
        else if (IS("--cache-type"))
            ok = v && parse_kv_type(v, &o->type_k) && parse_kv_type(v, &o->type_v);
        else if (IS("--temp"))
            ok = v && parse_f(v, &o->sp.temperature);
        else if (IS("--top-k"))
            ok = v && parse_i32(v, 0, 1 << 30, &o->sp.top_k);
        else if (IS("--top-p"))
            ok = v && parse_f(v, &o->sp.top_p);
        else if (IS("--min-p"))
            ok = v && parse_f(v, &o->sp.min_p);
        else if (IS("--repeat-penalty"))
            ok = v && parse_f(v, &o->sp.repeat_penalty);
        else if (IS("--seed"))
            ok = v && (o->sp.seed = strtoull(v, NULL, 10), true);
        else {
            used_v = false;
            if (IS("--chat"))
                o->chat = true;
            else if (IS("--no-special"))
                o->no_special = true;
            else if (IS("--json"))
                o->json = true;
            else if (IS("--all"))
                o->all = true;
            else if (IS("--no-graphs"))
                o->no_graphs = true;
            else if (IS("--no-think"))
                o->no_think = true;
            else if (a[0] != '-' && (takes & CLI_TAKES_PROMPT) && !o->prompt)
                o->prompt = a;
            else {
                fprintf(stderr, "minfer %s: unknown option '%s'\n", cmd, a);
                return 2;
            }
        }
#undef IS
        if (!ok) {
            fprintf(stderr, "minfer %s: option %s needs a valid value%s%s\n", cmd, a,
                    v ? ", not " : "", v ? v : "");
            return 2;
        }
        if (used_v)
            i++;
    }
    return 0;
}

/* ---- session ---- */

/* Bytes of one KV cell of every layer for cache element type t. */
static double cell_bytes(const struct minfer_model_info *mi, uint32_t t)
{
    double per = t == MINFER_TYPE_F32 ? 4.0 : t == MINFER_TYPE_Q8_0 ? 34.0 / 32.0 : 2.0;
    return per * (double)mi->n_layer * (double)mi->n_head_kv * (double)mi->head_dim;
}

/* -c not given: the model's context when its KV cache fits in 70% of the
 * memory the backend reports free (the rest is left for activations and
 * other processes), else the largest multiple of 256 cells that does, with
 * one line on stderr saying which and why. Unknown free memory: the
 * model's context. */
static int32_t default_ctx(const char *cmd, struct cli_session *s, const struct cli_opts *o)
{
    struct minfer_model_info mi = {.struct_size = sizeof mi};
    minfer_model_info(s->model, &mi);
    int32_t want = mi.n_ctx_max > 0 ? mi.n_ctx_max : mi.n_ctx_train;
    if (want <= 0)
        return 0;
    struct minfer_device_info di = {.struct_size = sizeof di};
    double per = cell_bytes(&mi, o->type_k) + cell_bytes(&mi, o->type_v);
    double gib = 1024.0 * 1024.0 * 1024.0;
    if (minfer_runtime_device_info(s->rt, mi.backend, 0, &di) != MINFER_OK || !di.memory_free)
        return want;
    double budget = 0.7 * (double)di.memory_free;
    if (per * want <= budget) {
        fprintf(stderr, "minfer %s: context %d tokens, the model's (KV cache %.0f MiB, %.1f GiB "
                        "free on %s)\n", cmd, want, per * want / (1024.0 * 1024.0),
                (double)di.memory_free / gib, mi.backend);
        return want;
    }
    int32_t fit = (int32_t)(budget / per) / 256 * 256;
    if (fit < 256)
        fit = 256;
    fprintf(stderr, "minfer %s: context %d tokens, the largest whose KV cache (%.0f MiB) fits in "
                    "70%% of the %.1f GiB free on %s; the model's is %d (use -c to choose)\n",
            cmd, fit, per * fit / (1024.0 * 1024.0), (double)di.memory_free / gib, mi.backend, want);
    return fit;
}

int cli_open(const char *cmd, const struct cli_opts *o, struct minfer_gguf *gguf,
             bool need_tok, struct cli_session *s)
{
    memset(s, 0, sizeof *s);
    char err[1024] = "";
    minfer_status st;
    double t0 = cli_now_ms();
    struct minfer_runtime_opts ro = {
        .struct_size = sizeof ro, .plugin_paths = o->plugins, .n_plugin_paths = o->n_plugins,
    };
    s->rt = minfer_runtime_new(&ro, &st, err, sizeof err);
    if (!s->rt) {
        fprintf(stderr, "minfer %s: %s\n", cmd, err);
        minfer_gguf_close(gguf);
        return 1;
    }
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    mp.backend = o->backend;
    mp.progress = cli_progress_bar;
    mp.progress_user = "loading";
    if (gguf)
        s->model = minfer_model_load_gguf(s->rt, gguf, &mp, &st, err, sizeof err);
    else if (o->model)
        s->model = minfer_model_load(s->rt, o->model, &mp, &st, err, sizeof err);
    else
        snprintf(err, sizeof err, "no model given (-m FILE)");
    if (!s->model) {
        fprintf(stderr, "minfer %s: %s%s%s\n", cmd, o->model ? o->model : "", o->model ? ": " : "",
                err);
        goto fail;
    }
    if (need_tok)
        s->tok = minfer_tokenizer_from_gguf(minfer_model_gguf(s->model), &st, err, sizeof err);
    if (!s->tok && need_tok) {
        fprintf(stderr, "minfer %s: the model's tokenizer cannot be used: %s\n", cmd, err);
        goto fail;
    }
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = o->n_ctx ? o->n_ctx : default_ctx(cmd, s, o);
    cp.n_batch = o->n_batch;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    cp.flags = o->no_graphs ? MINFER_CTX_NO_GRAPHS : 0;
    cp.progress = cli_progress_bar;
    cp.progress_user = "prompt";
    s->ctx = minfer_ctx_new(s->model, &cp, &st, err, sizeof err);
    if (!s->ctx) {
        fprintf(stderr, "minfer %s: cannot make a context: %s\n", cmd, err);
        goto fail;
    }
    if (o->n_ctx > minfer_ctx_n_ctx(s->ctx))
        fprintf(stderr, "minfer %s: context capped at %d tokens, the model's training length\n",
                cmd, minfer_ctx_n_ctx(s->ctx));
    s->load_ms = cli_now_ms() - t0;
    return 0;
fail:
    cli_close(s);
    return 1;
}

void cli_close(struct cli_session *s)
{
    minfer_ctx_free(s->ctx);
    minfer_tokenizer_free(s->tok);
    minfer_model_free(s->model);
    minfer_runtime_free(s->rt);
    minfer_synth_mem_free(s->synth_mem);
    memset(s, 0, sizeof *s);
}

/* ---- prompts ---- */

int cli_tokenize(const char *cmd, const struct cli_session *s, const char *text, size_t len,
                 bool special, int32_t **ids, size_t *n)
{
    *ids = NULL;
    *n = 0;
    size_t need = 0;
    minfer_status st = minfer_tokenize(s->tok, text, len, special, NULL, 0, &need);
    if (st != MINFER_OK && st != MINFER_ERR_RANGE) {
        fprintf(stderr, "minfer %s: tokenize: %s\n", cmd, minfer_status_str(st));
        return 1;
    }
    bool bos = minfer_tokenizer_add_bos(s->tok) && minfer_tokenizer_bos(s->tok) >= 0;
    *ids = malloc(sizeof **ids * (need + 2));
    if (!*ids)
        return 1;
    size_t off = bos ? 1 : 0;
    if (bos)
        (*ids)[0] = minfer_tokenizer_bos(s->tok);
    st = minfer_tokenize(s->tok, text, len, special, *ids + off, need + 1, n);
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer %s: tokenize: %s\n", cmd, minfer_status_str(st));
        free(*ids);
        *ids = NULL;
        return 1;
    }
    *n += off;
    return 0;
}

static char *read_file(const char *cmd, const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "minfer %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap + 1);
    for (size_t got; buf && (got = fread(buf + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, cap * 2 + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    *len = n;
    return buf;
}

static int parse_ids(const char *cmd, const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 16;
    *n = 0;
    *ids = malloc(sizeof **ids * cap);
    for (const char *p = s; *ids && *p;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "minfer %s: --ids: bad id at '%s' (expected 1,2,3)\n", cmd, p);
            free(*ids);
            *ids = NULL;
            return 1;
        }
        if (*n == cap) {
            int32_t *ni = realloc(*ids, sizeof **ids * cap * 2);
            if (!ni)
                break;
            *ids = ni;
            cap *= 2;
        }
        (*ids)[(*n)++] = (int32_t)v;
        p = end;
        while (*p == ',' || *p == ' ')
            p++;
    }
    if (!*ids || !*n) {
        fprintf(stderr, "minfer %s: --ids gave no ids\n", cmd);
        free(*ids);
        *ids = NULL;
        return 1;
    }
    return 0;
}

int cli_chat_render(const char *cmd, const struct cli_opts *o, const struct cli_session *s,
                    const struct minfer_chat_msg *msgs, size_t n, char **text, size_t *len)
{
    struct minfer_chat_opts co = {
        .struct_size = sizeof co, .add_generation_prompt = true,
        .enable_thinking = o->no_think ? -1 : 0,
    };
    char err[256] = "";
    size_t need = 0;
    *text = NULL;
    minfer_status st = minfer_chat_render_opts(s->tok, MINFER_CHAT_UNKNOWN, msgs, n, &co, NULL,
                                               0, &need, err, sizeof err);
    char *r = (st == MINFER_OK || st == MINFER_ERR_RANGE) ? malloc(need + 1) : NULL;
    if (r)
        st = minfer_chat_render_opts(s->tok, MINFER_CHAT_UNKNOWN, msgs, n, &co, r, need + 1,
                                     &need, err, sizeof err);
    if (!r || st != MINFER_OK) {
        fprintf(stderr, "minfer %s: chat template: %s\n", cmd,
                err[0] ? err : minfer_status_str(st));
        free(r);
        return 1;
    }
    *text = r;
    *len = need;
    return 0;
}

int cli_prompt_ids(const char *cmd, const struct cli_opts *o, const struct cli_session *s,
                   int32_t **ids, size_t *n)
{
    if (o->ids)
        return parse_ids(cmd, o->ids, ids, n);
    size_t len = 0;
    char *text = NULL;
    if (o->file)
        text = read_file(cmd, o->file, &len);
    else if (o->prompt)
        text = strdup(o->prompt), len = strlen(o->prompt);
    else {
        fprintf(stderr, "minfer %s: no prompt (-p TEXT, -f FILE or --ids 1,2,3)\n", cmd);
        return 2;
    }
    if (!text)
        return 1;
    if (o->chat) {
        struct minfer_chat_msg msgs[2];
        size_t nm = 0;
        if (o->system)
            msgs[nm++] = (struct minfer_chat_msg){"system", o->system};
        msgs[nm++] = (struct minfer_chat_msg){"user", text};
        char *r = NULL;
        size_t rlen = 0;
        int rc = cli_chat_render(cmd, o, s, msgs, nm, &r, &rlen);
        free(text);
        if (rc)
            return rc;
        text = r;
        len = rlen;
    }
    int rc = cli_tokenize(cmd, s, text, len, o->chat || !o->no_special, ids, n);
    free(text);
    if (rc == 0 && *n == 0) {
        fprintf(stderr, "minfer %s: the prompt has no tokens\n", cmd);
        free(*ids);
        *ids = NULL;
        return 1;
    }
    return rc;
}
