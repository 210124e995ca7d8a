/*
 * cli-model.c — option parsing, session setup and prompt handling shared
 * by minfer run, chat, eval and bench.
 */
#include "cli-model.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <pthread.h>
#include <signal.h>
#include <sys/random.h>
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

long cli_stop_find(const struct cli_opts *o, const char *t, size_t n, size_t from)
{
    long best = -1;
    for (size_t k = 0; k < o->n_stop; k++) {
        size_t sl = strlen(o->stops[k]);
        for (size_t i = from; i + sl <= n && (best < 0 || (long)i < best); i++)
            if (!memcmp(t + i, o->stops[k], sl)) {
                best = (long)i;
                break;
            }
    }
    return best;
}

size_t cli_stop_hold(const struct cli_opts *o, const char *t, size_t n)
{
    size_t hold = 0;
    for (size_t k = 0; k < o->n_stop; k++) {
        size_t sl = strlen(o->stops[k]);
        for (size_t m = sl - 1; m > hold; m--)
            if (m <= n && !memcmp(t + n - m, o->stops[k], m)) {
                hold = m;
                break;
            }
    }
    return hold;
}

size_t cli_stop_max_len(const struct cli_opts *o)
{
    size_t m = 0;
    for (size_t k = 0; k < o->n_stop; k++)
        m = strlen(o->stops[k]) > m ? strlen(o->stops[k]) : m;
    return m;
}

/* The process umask (mkostemp creates 0600; outputs get the usual mode). */
static mode_t cli_umask(void)
{
    mode_t m = umask(022);
    umask(m);
    return m;
}

volatile sig_atomic_t cli_sigint;

static void on_sigint(int sig)
{
    if (cli_sigint) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    cli_sigint = 1;
}

void cli_sigint_install(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: a read at the chat prompt returns EINTR */
    sigaction(SIGINT, &sa, NULL);
}

void cli_sigint_restore(void)
{
    signal(SIGINT, SIG_DFL);
}

void cli_random_seed(struct cli_opts *o)
{
    if (o->seed_set)
        return;
    uint64_t seed = 0;
    if (getrandom(&seed, sizeof seed, 0) != (ssize_t)sizeof seed) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        seed = (uint64_t)ts.tv_nsec * 0x9e3779b97f4a7c15ull ^ (uint64_t)ts.tv_sec ^
               (uint64_t)getpid() << 32;
    }
    o->sp.seed = seed;
}

int cli_out_open(const char *cmd, const char *path, struct cli_out *out)
{
    memset(out, 0, sizeof *out);
    struct stat sb;
    if (lstat(path, &sb) == 0 && S_ISLNK(sb.st_mode)) {
        if (!realpath(path, out->target)) {
            fprintf(stderr, "minfer %s: %s is a symlink whose target cannot be used: %s\n", cmd,
                    path, strerror(errno));
            return 1;
        }
        if (stat(out->target, &sb) < 0) {
            fprintf(stderr, "minfer %s: %s: %s\n", cmd, out->target, strerror(errno));
            return 1;
        }
    } else if (strlen(path) < sizeof out->target) {
        snprintf(out->target, sizeof out->target, "%s", path);
        if (lstat(path, &sb) < 0)
            sb.st_mode = S_IFREG; /* a new name */
    } else {
        fprintf(stderr, "minfer %s: output path too long\n", cmd);
        return 1;
    }
    if (!S_ISREG(sb.st_mode)) {
        fprintf(stderr, "minfer %s: %s is %s; minfer writes only regular files (or a new "
                "name)\n", cmd, out->target,
                S_ISCHR(sb.st_mode) ? "a character device" : S_ISBLK(sb.st_mode) ? "a block device"
                : S_ISFIFO(sb.st_mode) ? "a FIFO" : S_ISDIR(sb.st_mode) ? "a directory"
                : "not a regular file");
        return 1;
    }
    char dir[4096];
    const char *slash = strrchr(out->target, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - out->target) + (slash == out->target)
                                            : 1, slash ? out->target : ".");
    int fd = access("/proc/self/fd", X_OK) == 0
                 ? open(dir, O_TMPFILE | O_WRONLY | O_CLOEXEC, 0666) : -1;
    if (fd >= 0) {
        out->anon = true;
        if ((out->f = fdopen(fd, "wb")))
            return 0;
        close(fd);
        fprintf(stderr, "minfer %s: out of memory\n", cmd);
        return 1;
    }
    snprintf(out->tmp, sizeof out->tmp, "%s.tmp-XXXXXX", out->target);
    fd = mkostemp(out->tmp, O_CLOEXEC);
    if (fd < 0 || !(out->f = fdopen(fd, "wb"))) {
        fprintf(stderr, "minfer %s: cannot create a temporary file beside %s: %s\n", cmd,
                out->target, strerror(errno));
        if (fd >= 0) {
            close(fd);
            unlink(out->tmp);
        }
        return 1;
    }
    fchmod(fd, 0666 & ~cli_umask());
    return 0;
}

int cli_out_commit(const char *cmd, struct cli_out *out)
{
    FILE *f = out->f;
    out->f = NULL;
    if (fflush(f) != 0 || ferror(f) || fsync(fileno(f)) != 0) {
        fprintf(stderr, "minfer %s: writing %s: %s\n", cmd, out->target, strerror(errno));
        fclose(f);
        if (!out->anon)
            unlink(out->tmp);
        return 1;
    }
    if (out->anon) { /* give the finished file a name beside the target */
        char proc[64];
        snprintf(proc, sizeof proc, "/proc/self/fd/%d", fileno(f));
        int rc = -1;
        for (unsigned k = 0; rc < 0 && k < 100; k++) {
            snprintf(out->tmp, sizeof out->tmp, "%s.tmp-%ld-%u", out->target, (long)getpid(), k);
            rc = linkat(AT_FDCWD, proc, AT_FDCWD, out->tmp, AT_SYMLINK_FOLLOW);
            if (rc < 0 && errno != EEXIST)
                break;
        }
        if (rc < 0) {
            fprintf(stderr, "minfer %s: writing %s: %s\n", cmd, out->target, strerror(errno));
            fclose(f);
            return 1;
        }
    }
    if (fclose(f) != 0 || rename(out->tmp, out->target) != 0) {
        fprintf(stderr, "minfer %s: writing %s: %s\n", cmd, out->target, strerror(errno));
        unlink(out->tmp);
        return 1;
    }
    return 0;
}

void cli_out_abort(struct cli_out *out)
{
    if (out->f) {
        fclose(out->f);
        if (!out->anon)
            unlink(out->tmp);
    }
    out->f = NULL;
}

bool cli_progress_bar(uint64_t done, uint64_t total, void *label)
{
    if (cli_sigint)
        return false; /* Ctrl-C cancels a long prefill */
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

/* The architecture a named shape belongs to ("qwen2.5-7b" -> qwen2), or NULL. */
const char *cli_arch_of_shape(const char *shape)
{
    static const char *const archs[] = {"qwen2", "qwen3", "llama", "gemma3", "qwen3moe"};
    for (size_t i = 0; i < sizeof archs / sizeof archs[0]; i++) {
        struct minfer_synth_shape sh;
        if (minfer_synth_shape_parse(archs[i], shape, &sh, NULL, 0) == MINFER_OK &&
            strncmp(shape, "custom:", 7) != 0)
            return archs[i];
    }
    return NULL;
}

/* ---- options ---- */

static bool parse_kv_type(const char *cmd, const char *opt, const char *s, uint32_t *t)
{
    if (minfer_type_from_name(s, t) &&
        (*t == MINFER_TYPE_F32 || *t == MINFER_TYPE_F16 || *t == MINFER_TYPE_Q8_0))
        return true;
    cli_usage_error(cmd, "%s takes f32, f16 or q8_0, not '%s'", opt, s);
    return false;
}

/* "512" or "512,2048": the count, or -1 after an error line. */
static int parse_list(const char *cmd, const char *opt, const char *s, int32_t *v)
{
    int n = 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (errno || end == p || x < 0 || x > (1 << 20) || n == CLI_MAX_TESTS || *p == '+' ||
            *p == ' ') {
            cli_usage_error(cmd, "%s takes counts like 512 or 512,2048 (at most %d), not '%s'",
                            opt, CLI_MAX_TESTS, s);
            return -1;
        }
        v[n++] = (int32_t)x;
        p = end;
        if (*p == ',' && p[1])
            p++;
        else if (*p) {
            cli_usage_error(cmd, "%s takes counts like 512 or 512,2048, not '%s'", opt, s);
            return -1;
        }
    }
    if (!n)
        cli_usage_error(cmd, "%s needs at least one count", opt);
    return n ? n : -1;
}

int cli_parse(int argc, char **argv, unsigned bit, struct cli_opts *o)
{
    memset(o, 0, sizeof *o);
    o->n_predict = 128;
    o->reps = 5;
    o->pps[0] = 512;
    o->tgs[0] = 128;
    o->n_pps = o->n_tgs = o->n_depths = 1; /* depths[0] = 0 */
    o->bench_fmt = "md";
    o->arch = NULL;
    o->shape = "qwen2.5-0.5b";
    o->type = "Q4_K_M";
    o->type_k = o->type_v = MINFER_TYPE_F16;
    o->sp = minfer_sampler_default_params();
    const char *cmd = argv[0];
    struct cli_args a = {cmd, bit, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        const char *opt = a.opt;
        bool ok = true;
        int32_t n32;
        switch (id) {
        case CLI_BAD: return 2;
        case OPT_HELP: return 1;
        case OPT_MODEL: o->model = v; break;
        case OPT_PROMPT: o->prompt = v; break;
        case OPT_FILE: o->file = v; break;
        case OPT_IDS: o->ids = v; break;
        case OPT_RAW: o->raw = true; break;
        case OPT_CHAT: o->chat = true; break;
        case OPT_SYSTEM: o->system = v; break;
        case OPT_NO_THINK: o->no_think = true; break;
        case OPT_NO_SPECIAL: o->no_special = true; break;
        case OPT_N_PREDICT: ok = cli_num_i32(cmd, opt, v, -1, 1 << 24, &o->n_predict); break;
        case OPT_IGNORE_EOS: o->ignore_eos = true; break;
        case OPT_STOP:
            if (!*v)
                return cli_usage_error(cmd, "%s needs a non-empty string", opt);
            if (o->n_stop == CLI_MAX_STOPS)
                return cli_usage_error(cmd, "at most %d stop strings", CLI_MAX_STOPS);
            o->stops[o->n_stop++] = v;
            break;
        case OPT_JSON: o->json = true; break;
        case OPT_VERBOSE: o->verbose = true; break;
        case OPT_TEMP: ok = cli_num_f32(cmd, opt, v, &o->sp.temperature); break;
        case OPT_TOP_K: ok = cli_num_i32(cmd, opt, v, 0, 1 << 30, &o->sp.top_k); break;
        case OPT_TOP_P: ok = cli_num_f32(cmd, opt, v, &o->sp.top_p); break;
        case OPT_MIN_P: ok = cli_num_f32(cmd, opt, v, &o->sp.min_p); break;
        case OPT_REPEAT_PENALTY: ok = cli_num_f32(cmd, opt, v, &o->sp.repeat_penalty); break;
        case OPT_PRESENCE: ok = cli_num_f32(cmd, opt, v, &o->sp.presence_penalty); break;
        case OPT_FREQUENCY: ok = cli_num_f32(cmd, opt, v, &o->sp.frequency_penalty); break;
        case OPT_REPEAT_LAST_N:
            ok = cli_num_i32(cmd, opt, v, -1, 1 << 24, &n32);
            o->repeat_last_n_ctx = ok && n32 < 0;
            o->sp.penalty_last_n = n32 < 0 ? 0 : n32;
            break;
        case OPT_SEED:
            ok = cli_num_u64(cmd, opt, v, &o->sp.seed);
            o->seed_set = true;
            break;
        case OPT_CTX: ok = cli_num_i32(cmd, opt, v, 0, 1 << 24, &o->n_ctx); break;
        case OPT_BATCH: ok = cli_num_i32(cmd, opt, v, 1, 1 << 20, &o->n_batch); break;
        case OPT_THREADS: ok = cli_num_i32(cmd, opt, v, 0, 4096, &o->n_threads); break;
        case OPT_BACKEND: o->backend = v; break;
        case OPT_PLUGIN:
            if (o->n_plugins == CLI_MAX_PLUGINS)
                return cli_usage_error(cmd, "at most %d --plugin paths", CLI_MAX_PLUGINS);
            o->plugins[o->n_plugins++] = v;
            break;
        case OPT_CTK: ok = parse_kv_type(cmd, opt, v, &o->type_k); break;
        case OPT_CTV: ok = parse_kv_type(cmd, opt, v, &o->type_v); break;
        case OPT_CACHE_TYPE:
            ok = parse_kv_type(cmd, opt, v, &o->type_k) && parse_kv_type(cmd, opt, v, &o->type_v);
            break;
        case OPT_NO_GRAPHS: o->no_graphs = true; break;
        case OPT_OUT: o->out = v; break;
        case OPT_SESSION: o->session = v; break;
        case OPT_ALL: o->all = true; break;
        case OPT_BENCH_PP: ok = (o->n_pps = parse_list(cmd, opt, v, o->pps)) > 0; break;
        case OPT_BENCH_TG: ok = (o->n_tgs = parse_list(cmd, opt, v, o->tgs)) > 0; break;
        case OPT_BENCH_DEPTH: ok = (o->n_depths = parse_list(cmd, opt, v, o->depths)) > 0; break;
        case OPT_REPS: ok = cli_num_i32(cmd, opt, v, 1, 1000, &o->reps); break;
        case OPT_BENCH_FMT:
            if (strcmp(v, "md") && strcmp(v, "json") && strcmp(v, "jsonl") && strcmp(v, "csv"))
                return cli_usage_error(cmd, "%s takes md, json, jsonl or csv, not '%s'", opt, v);
            o->bench_fmt = v;
            break;
        case OPT_ARCH: o->arch = v; break;
        case OPT_SHAPE: o->shape = v; break;
        case OPT_TYPE: o->type = v; break;
        case CLI_POSITIONAL:
            if ((bit & (CMD_RUN | CMD_EVAL)) && !o->prompt) {
                o->prompt = v;
                break;
            }
            return cli_usage_error(cmd, "unexpected argument '%s'", v);
        default:
            return cli_usage_error(cmd, "option %s is not handled here", opt);
        }
        if (!ok)
            return 2;
    }
    if ((bit & (CMD_RUN | CMD_EVAL)) && !!o->prompt + !!o->file + !!o->ids > 1)
        return cli_usage_error(cmd, "give one of -p TEXT, -f FILE or --ids LIST");
    if (o->raw && o->chat)
        return cli_usage_error(cmd, "--raw and --chat contradict each other");
    if (o->ids && (o->chat || o->system || o->no_think))
        return cli_usage_error(cmd, "--ids are never wrapped in the chat template; "
                                    "--chat, --system and --no-think cannot apply");
    if (o->raw && (o->system || o->no_think))
        return cli_usage_error(cmd, "--system and --no-think need the chat template, "
                                    "which --raw turns off");
    if (o->ids && o->no_special)
        return cli_usage_error(cmd, "--no-special applies to text, not to --ids");
    cli_check_threads(cmd, o->n_threads);
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
 * a line on stderr saying so and why (with -v also when it fits). Unknown
 * free memory: the model's context. */
static int32_t default_ctx(const char *cmd, struct cli_session *s, const struct cli_opts *o)
{
    struct minfer_model_info mi = {.struct_size = sizeof mi};
    minfer_model_info(s->model, &mi);
    int32_t want = mi.n_ctx_max > 0 ? mi.n_ctx_max : mi.n_ctx_train;
    if (want <= 0)
        return 0;
    struct minfer_device_info di = {.struct_size = sizeof di};
    double per = cell_bytes(&mi, o->type_k) + cell_bytes(&mi, o->type_v);
    double mib = 1024.0 * 1024.0, gib = 1024.0 * mib;
    if (minfer_runtime_device_info(s->rt, mi.backend, 0, &di) != MINFER_OK || !di.memory_free)
        return want;
    double budget = 0.7 * (double)di.memory_free;
    if (per * want <= budget) {
        if (o->verbose)
            fprintf(stderr, "minfer %s: context %d tokens, the model's (KV cache %.0f MiB, "
                            "%.1f GiB free on %s)\n", cmd, want, per * want / mib,
                    (double)di.memory_free / gib, mi.backend);
        return want;
    }
    int32_t fit = (int32_t)(budget / per) / 256 * 256;
    if (fit < 256)
        fit = 256;
    fprintf(stderr, "minfer %s: context %d tokens, the largest whose KV cache (%.0f MiB) fits in "
                    "70%% of the %.1f GiB free on %s; the model's is %d (use -c to choose)\n",
            cmd, fit, per * fit / mib, (double)di.memory_free / gib, mi.backend, want);
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
        .only_backend = o->backend, /* --backend cpu never opens the CUDA plugin */
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
        /* name the path once: most loader messages already do */
        bool named = o->model && strstr(err, o->model);
        fprintf(stderr, "minfer %s: %s%s%s\n", cmd, o->model && !named ? o->model : "",
                o->model && !named ? ": " : "", err);
        goto fail;
    }
    if (need_tok)
        s->tok = minfer_model_tokenizer(s->model, &st, err, sizeof err);
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
    /* The backend's worker threads start here and inherit this mask: with
     * SIGINT blocked in them, Ctrl-C always lands on this thread, so it
     * interrupts a blocking read (chat's prompt) instead of a worker. */
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    s->ctx = minfer_ctx_new(s->model, &cp, &st, err, sizeof err);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
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
    if (!*ids) {
        fprintf(stderr, "minfer %s: out of memory for %zu token ids\n", cmd, need + 2);
        return 1;
    }
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
    if (!buf) {
        fprintf(stderr, "minfer %s: out of memory reading %s\n", cmd, path);
        return NULL;
    }
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

int cli_use_template(const char *cmd, const struct cli_opts *o, const struct cli_session *s)
{
    bool has = s->tok && minfer_tokenizer_chat_format(s->tok) != MINFER_CHAT_UNKNOWN;
    if (!has && (o->chat || o->system || o->no_think)) {
        fprintf(stderr, "minfer %s: %s needs a chat template, and %s has none this build "
                "recognises (use --raw for a bare completion)\n", cmd,
                o->chat ? "--chat" : o->system ? "--system" : "--no-think",
                o->model ? o->model : "the model");
        return -1;
    }
    if (o->no_think) {
        struct minfer_model_info info = {.struct_size = sizeof info};
        minfer_model_info(s->model, &info);
        if (strncmp(info.arch, "qwen3", 5) != 0) {
            fprintf(stderr, "minfer %s: --no-think is Qwen3's switch; this model is %s\n", cmd,
                    info.arch);
            return -1;
        }
    }
    return !o->ids && !o->raw && has;
}

int cli_prompt_ids(const char *cmd, const struct cli_opts *o, const struct cli_session *s,
                   int32_t **ids, size_t *n)
{
    int tmpl = cli_use_template(cmd, o, s);
    if (tmpl < 0)
        return 2;
    if (o->ids)
        return parse_ids(cmd, o->ids, ids, n);
    size_t len = 0;
    char *text = NULL;
    if (o->file)
        text = read_file(cmd, o->file, &len);
    else if (o->prompt)
        text = strdup(o->prompt), len = strlen(o->prompt);
    else {
        return cli_usage_error(cmd, "no prompt (-p TEXT, -f FILE or --ids 1,2,3)");
    }
    if (!text) {
        if (!o->file) /* read_file reported its failure */
            fprintf(stderr, "minfer %s: out of memory copying the prompt\n", cmd);
        return 1;
    }
    if (tmpl) {
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
    int rc = cli_tokenize(cmd, s, text, len, tmpl || !o->no_special, ids, n);
    free(text);
    if (rc == 0 && *n == 0) {
        fprintf(stderr, "minfer %s: the prompt has no tokens\n", cmd);
        free(*ids);
        *ids = NULL;
        return 1;
    }
    return rc;
}
