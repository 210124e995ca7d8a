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

#include "../cli-opts.h"
#include "../commands.h"
#include "serve.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer serve -m MODEL [options]\n"
               "  an OpenAI-compatible HTTP server: POST /v1/chat/completions, /v1/completions,\n"
               "  /tokenize, /detokenize; GET /v1/models, /health, /metrics, / (a chat page).\n"
               "  -c is the KV cache in all, shared by the --parallel sequences.\n");
    cli_print_options(f, CMD_SERVE);
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

static bool kv_type(const char *opt, const char *v, uint32_t *t)
{
    if (minfer_type_from_name(v, t) &&
        (*t == MINFER_TYPE_F32 || *t == MINFER_TYPE_F16 || *t == MINFER_TYPE_Q8_0))
        return true;
    cli_usage_error("serve", "%s %s: expected f32, f16 or q8_0", opt, v);
    return false;
}

/* 0 ok, 1 --help, 2 bad usage (printed). */
static int parse(int argc, char **argv, struct serve_cfg *c, char **key_mem)
{
    memset(c, 0, sizeof *c);
    c->host = "127.0.0.1";
    c->port = 8080;
    c->parallel = 4;
    c->max_body = 8u << 20;
    c->max_queue = 64;
    c->timeout_s = 600;
    c->type_k = c->type_v = MINFER_TYPE_F16;
    struct cli_args a = {"serve", CMD_SERVE, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        const char *opt = a.opt;
        bool ok = true;
        int32_t n;
        float x;
        uint64_t u;
        switch (id) {
        case OPT_HELP: return 1;
        case OPT_MODEL: c->model_path = v; break;
        case OPT_CTX: ok = cli_num_i32("serve", opt, v, 0, 1 << 24, &c->n_ctx); break;
        case OPT_BATCH: ok = cli_num_i32("serve", opt, v, 1, 1 << 20, &c->n_batch); break;
        case OPT_THREADS: ok = cli_num_i32("serve", opt, v, 0, 4096, &c->n_threads); break;
        case OPT_BACKEND: c->backend = v; break;
        case OPT_PLUGIN:
            if (c->n_plugins == 8)
                return cli_usage_error("serve", "at most 8 --plugin paths");
            c->plugins[c->n_plugins++] = v;
            break;
        case OPT_CTK: ok = kv_type(opt, v, &c->type_k); break;
        case OPT_CTV: ok = kv_type(opt, v, &c->type_v); break;
        case OPT_CACHE_TYPE: ok = kv_type(opt, v, &c->type_k) && kv_type(opt, v, &c->type_v); break;
        case OPT_NO_GRAPHS: c->no_graphs = true; break;
        case OPT_SERVE_HOST: c->host = v; break;
        case OPT_SERVE_PORT:
            ok = cli_num_i32("serve", opt, v, 0, 65535, &n);
            c->port = n;
            break;
        case OPT_SERVE_PARALLEL:
            ok = cli_num_i32("serve", opt, v, 1, 256, &n);
            c->parallel = n;
            break;
        case OPT_SERVE_API_KEY: c->api_key = v; break;
        case OPT_SERVE_API_KEY_FILE:
            free(*key_mem);
            if (!(*key_mem = read_key_file(v)))
                return 2;
            c->api_key = *key_mem;
            break;
        case OPT_SERVE_MAX_BODY:
            ok = cli_num_u64("serve", opt, v, &u) && u > 0;
            c->max_body = (size_t)u;
            break;
        case OPT_SERVE_MAX_QUEUE:
            ok = cli_num_i32("serve", opt, v, 0, 1 << 20, &n);
            c->max_queue = n;
            break;
        case OPT_SERVE_TIMEOUT:
            ok = cli_num_f32("serve", opt, v, &x) && x >= 0;
            c->timeout_s = x;
            break;
        case OPT_SERVE_ALIAS: c->model_name = v; break;
        case OPT_SERVE_NO_PREFIX_CACHE: c->no_prefix_cache = true; break;
        case CLI_BAD: return 2;
        default:
            return cli_usage_error("serve", "unexpected argument '%s'", v ? v : opt);
        }
        if (!ok)
            return id == OPT_SERVE_MAX_BODY || id == OPT_SERVE_TIMEOUT
                       ? cli_usage_error("serve", "%s %s: expected a positive number", opt, v)
                       : 2;
    }
    if (!c->model_path)
        return cli_usage_error("serve", "no model given (-m FILE)");
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
    cp.type_k = c->type_k;
    cp.type_v = c->type_v;
    cp.flags = c->no_graphs ? MINFER_CTX_NO_GRAPHS : 0;
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
        if (rc == 1)
            usage(stdout);
        free(key_mem);
        return rc == 1 ? cli_stdout_done("serve") : 2;
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
    __atomic_store_n(&g_srv.draining, 1, __ATOMIC_RELEASE);
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
