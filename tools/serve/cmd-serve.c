/*
 * cmd-serve.c — `minfer serve`: options, start-up (the HTTP server listens
 * first so /health answers 503 while the model loads), and shutdown: on
 * SIGTERM/SIGINT it stops accepting, ends the queued and running
 * requests with a final event, lets the connections drain and exits 0.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <microhttpd.h>

#include "../commands.h"
#include "serve.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minfer serve -m MODEL [options]\n"
            "  an OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions,\n"
            "  /tokenize, /detokenize; GET /v1/models, /health, /metrics, / (a chat page)\n"
            "  --host ADDR         listen address (default 127.0.0.1)\n"
            "  --port N            port (default 8080; 0 picks a free one, printed on stderr)\n"
            "  --parallel N        sequences decoded at once in one batch (default 4)\n"
            "  -c N                KV cells in all; each sequence may hold N / parallel\n"
            "  -b N                most tokens per forward pass (default 512)\n"
            "  -t N                backend threads\n"
            "  --api-key KEY       require 'Authorization: Bearer KEY' (also --api-key-file F)\n"
            "  --max-body BYTES    largest request body (default 8388608)\n"
            "  --max-queue N       requests waiting for a sequence before 503 (default 64)\n"
            "  --timeout S         end a request after S seconds (default 600; 0 = none)\n"
            "  --backend NAME      backend plugin (default: the best available)\n"
            "  --plugin PATH       load this plugin file (repeatable)\n"
            "  --alias NAME        model name in responses (default: the file name)\n"
            "  --no-prefix-cache   prefill every prompt in full\n");
}

static char *read_key_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "minfer serve: --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char buf[512] = "";
    if (!fgets(buf, sizeof buf, f))
        buf[0] = 0;
    fclose(f);
    size_t n = strlen(buf);
    while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
        buf[--n] = 0;
    if (!n) {
        fprintf(stderr, "minfer serve: --api-key-file %s is empty\n", path);
        return NULL;
    }
    return strdup(buf);
}

static bool parse_num(const char *opt, const char *v, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "minfer serve: %s %s: expected a number from %g to %g\n", opt, v, lo, hi);
        return false;
    }
    *out = x;
    return true;
}

/* 0 ok, 1 --help, 2 bad usage. */
static int parse(int argc, char **argv, struct serve_cfg *c, char **key_mem)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->parallel = 4;
    c->max_body = 8u << 20;
    c->max_queue = 64;
    c->timeout_s = 600;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help"))
            return 1;
        if (!strcmp(a, "--no-prefix-cache")) {
            c->no_prefix_cache = true;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "minfer serve: %s needs a value (or is unknown)\n", a);
            return 2;
        }
        const char *v = argv[++i];
        double x;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            c->model_path = v;
        else if (!strcmp(a, "--host"))
            c->host = v;
        else if (!strcmp(a, "--alias"))
            c->model_name = v;
        else if (!strcmp(a, "--backend"))
            c->backend = v;
        else if (!strcmp(a, "--plugin") && c->n_plugins < 8)
            c->plugins[c->n_plugins++] = v;
        else if (!strcmp(a, "--api-key"))
            c->api_key = v;
        else if (!strcmp(a, "--api-key-file")) {
            if (!(*key_mem = read_key_file(v)))
                return 2;
            c->api_key = *key_mem;
        } else {
            static const struct {
                const char *name, *alt;
                double lo, hi;
            } nums[] = {
                {"--port", NULL, 0, 65535},        {"--parallel", "-np", 1, 256},
                {"-c", "--ctx-size", 0, 1 << 24},  {"-b", "--batch-size", 1, 1 << 16},
                {"-t", "--threads", 0, 1024},      {"--max-body", NULL, 1, 1e12},
                {"--max-queue", NULL, 0, 1e6},     {"--timeout", NULL, 0, 1e9},
            };
            size_t k = 0, n = sizeof nums / sizeof nums[0];
            while (k < n && strcmp(a, nums[k].name) && (!nums[k].alt || strcmp(a, nums[k].alt)))
                k++;
            if (k == n) {
                fprintf(stderr, "minfer serve: unknown option %s\n", a);
                return 2;
            }
            if (!parse_num(a, v, nums[k].lo, nums[k].hi, &x))
                return 2;
            switch (k) {
            case 0: c->port = (int)x; break;
            case 1: c->parallel = (int)x; break;
            case 2: c->n_ctx = (int32_t)x; break;
            case 3: c->n_batch = (int32_t)x; break;
            case 4: c->n_threads = (int32_t)x; break;
            case 5: c->max_body = (size_t)x; break;
            case 6: c->max_queue = (int)x; break;
            default: c->timeout_s = x; break;
            }
        }
    }
    if (!c->model_path) {
        fprintf(stderr, "minfer serve: no model given (-m FILE)\n");
        return 2;
    }
    if (!c->model_name) {
        const char *b = strrchr(c->model_path, '/');
        c->model_name = b ? b + 1 : c->model_path;
    }
    return 0;
}

/* ---- start-up ---- */

static struct minfer_runtime *g_rt;
static struct minfer_ctx *g_ctx;
static struct minfer_tokenizer *g_tok;

static int load(void)
{
    const struct serve_cfg *c = &g_srv.cfg;
    char err[1024] = "";
    minfer_status st;
    struct minfer_runtime_opts ro = {
        .struct_size = sizeof ro, .plugin_paths = c->plugins, .n_plugin_paths = c->n_plugins,
    };
    g_rt = minfer_runtime_new(&ro, &st, err, sizeof err);
    if (!g_rt) {
        fprintf(stderr, "minfer serve: %s\n", err);
        return 1;
    }
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    mp.backend = c->backend;
    g_srv.model = minfer_model_load(g_rt, c->model_path, &mp, &st, err, sizeof err);
    if (!g_srv.model) {
        fprintf(stderr, "minfer serve: %s: %s\n", c->model_path, err);
        return 1;
    }
    g_tok = minfer_tokenizer_from_gguf(minfer_model_gguf(g_srv.model), &st, err, sizeof err);
    if (!g_tok) {
        fprintf(stderr, "minfer serve: the model's tokenizer cannot be used: %s\n", err);
        return 1;
    }
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = c->n_ctx;
    cp.n_batch = c->n_batch;
    cp.n_threads = c->n_threads;
    cp.n_seq_max = c->parallel; /* slot i is sequence i */
    g_ctx = minfer_ctx_new(g_srv.model, &cp, &st, err, sizeof err);
    if (!g_ctx) {
        fprintf(stderr, "minfer serve: cannot make a context: %s\n", err);
        return 1;
    }
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(g_srv.model, &info);
    g_srv.tok = g_tok;
    g_srv.n_vocab = info.n_vocab;
    err[0] = 0;
    g_srv.sched = sched_new(c, g_ctx, g_tok, info.n_vocab, err, sizeof err);
    if (!g_srv.sched) {
        fprintf(stderr, "minfer serve: %s\n", err);
        return 1;
    }
    return 0;
}

int cmd_serve(int argc, char **argv)
{
    char *key_mem = NULL;
    int rc = parse(argc, argv, &g_srv.cfg, &key_mem);
    if (rc) {
        usage(rc == 1 ? stdout : stderr);
        free(key_mem);
        return rc == 1 ? 0 : 2;
    }
    /* Every thread started from here inherits the mask; sigwait below
     * receives SIGINT/SIGTERM. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[256] = "";
    int port = 0;
    struct MHD_Daemon *d = http_start(g_srv.cfg.host, g_srv.cfg.port, &port, err, sizeof err);
    if (!d) {
        fprintf(stderr, "minfer serve: %s\n", err);
        free(key_mem);
        return 1;
    }
    fprintf(stderr, "minfer serve: listening on http://%s:%d (loading %s)\n", g_srv.cfg.host,
            port, g_srv.cfg.model_path);
    rc = 1;
    double t0 = serve_now_ms();
    if (load())
        goto out;
    __atomic_store_n(&g_srv.ready, 1, __ATOMIC_RELEASE);
    fprintf(stderr, "minfer serve: ready in %.0f ms: %d sequences of up to %d tokens, "
                    "http://%s:%d/\n",
            serve_now_ms() - t0, sched_parallel(g_srv.sched), sched_slot_ctx(g_srv.sched),
            g_srv.cfg.host, port);

    int sig = 0;
    sigwait(&sigs, &sig);
    fprintf(stderr, "minfer serve: %s: ending in-flight requests and exiting\n",
            sig == SIGTERM ? "SIGTERM" : "SIGINT");
    g_srv.draining = 1;
    MHD_socket lfd = MHD_quiesce_daemon(d);
    if (lfd != MHD_INVALID_SOCKET)
        close(lfd);
    sched_stop(g_srv.sched);
    /* Let the final events reach their clients (idle keep-alive connections
     * are closed by MHD_stop_daemon after this); at most 5 s. */
    for (int i = 0; i < 500 && http_open_replies() > 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    rc = 0;
out:
    MHD_stop_daemon(d);
    sched_free(g_srv.sched);
    g_srv.sched = NULL;
    minfer_ctx_free(g_ctx);
    minfer_tokenizer_free(g_tok);
    minfer_model_free(g_srv.model);
    minfer_runtime_free(g_rt);
    free(key_mem);
    return rc;
}
