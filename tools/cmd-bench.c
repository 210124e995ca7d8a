/*
 * cmd-bench.c — minfer bench: prompt processing (pp) and generation (tg)
 * throughput like llama-bench, mean ± sd over repetitions after a
 * warm-up. Without -m it benches a synthetic model made in memory
 * (qwen2.5-0.5b shape, Q4_K_M unless --type says otherwise).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-model.h"
#include "commands.h"
#include "minfer/gguf.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer bench [-m MODEL] [-p 512] [-n 128] [-r 5] [options]\n"
               "  -p N[,N...]        prompt tokens per pp test (0 = skip)\n"
               "  -n N[,N...]        generated tokens per tg test (0 = skip)\n"
               "  -r N               repetitions (default 5)\n"
               "  -d D[,D...]        KV depth: each test runs after D tokens are in the\n"
               "                     cache (filled first, not timed; rows read\n"
               "                     'pp512 @ d4096'); default 0\n"
               "  --arch A --shape S --type T   synthetic model without -m\n"
               "                     (default qwen2 qwen2.5-0.5b Q4_K_M)\n");
    cli_common_usage(f);
}

struct stats {
    double mean, sd;
};

static struct stats stats_of(const double *v, int n)
{
    struct stats s = {0, 0};
    for (int i = 0; i < n; i++)
        s.mean += v[i];
    s.mean /= n;
    for (int i = 0; i < n; i++)
        s.sd += (v[i] - s.mean) * (v[i] - s.mean);
    s.sd = n > 1 ? sqrt(s.sd / (n - 1)) : 0;
    return s;
}

/* Tokens per second of one pp (n_tok in one pass) or tg (n_tok passes of
 * one token) run after the first depth cells of the cache (filled by
 * fill_depth); < 0 on error. */
static double run_once(struct cli_session *s, const int32_t *ids, int32_t n_tok, bool gen,
                       int32_t depth)
{
    if (minfer_ctx_truncate(s->ctx, depth) != MINFER_OK)
        return -1;
    double t0 = cli_now_ms();
    if (!gen) {
        if (minfer_ctx_decode(s->ctx, ids, n_tok, 0) != MINFER_OK)
            return -1;
    } else {
        for (int32_t i = 0; i < n_tok; i++)
            if (minfer_ctx_decode(s->ctx, ids + i, 1, 0) != MINFER_OK)
                return -1;
    }
    double ms = cli_now_ms() - t0;
    return ms > 0 ? 1e3 * n_tok / ms : 0;
}

/* Fills the cache with depth tokens (ids[0..depth)) from empty, in passes
 * of at most batch tokens, untimed; 0 or -1 on error. */
static int fill_depth(struct cli_session *s, const int32_t *ids, int32_t depth, int32_t batch)
{
    if (minfer_ctx_truncate(s->ctx, 0) != MINFER_OK)
        return -1;
    for (int32_t i = 0; i < depth; i += batch) {
        int32_t n = depth - i < batch ? depth - i : batch;
        if (minfer_ctx_decode(s->ctx, ids + i, n, 0) != MINFER_OK)
            return -1;
    }
    return 0;
}

static struct minfer_gguf *synth_model(const char *arch, const char *shape, const char *type,
                                       struct cli_session *s, char *label, size_t label_len)
{
    struct minfer_synth_opts so;
    memset(&so, 0, sizeof so);
    so.struct_size = sizeof so;
    so.seed = 1;
    so.progress = cli_progress;
    so.progress_user = "synth";
    char err[512] = "";
    if (minfer_synth_shape_parse(arch, shape, &so.shape, err, sizeof err) != MINFER_OK) {
        fprintf(stderr, "minfer bench: %s\n", err);
        return NULL;
    }
    if (!minfer_ftype_from_name(type, &so.ftype)) {
        fprintf(stderr, "minfer bench: unknown --type %s\n", type);
        return NULL;
    }
    fprintf(stderr, "minfer bench: making a synthetic %s %s model in memory...\n", shape,
            minfer_ftype_name(so.ftype));
    void *mem = NULL;
    size_t size = 0;
    if (minfer_synth(&so, NULL, &mem, &size, err, sizeof err) != MINFER_OK) {
        fprintf(stderr, "minfer bench: synth: %s\n", err);
        return NULL;
    }
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(mem, size, &st, err, sizeof err);
    if (!g) {
        fprintf(stderr, "minfer bench: synthetic model: %s\n", err);
        minfer_synth_mem_free(mem);
        return NULL;
    }
    s->synth_mem = mem;
    snprintf(label, label_len, "%s %s (synth)", shape, minfer_ftype_name(so.ftype));
    return g;
}

#define BENCH_MAX_TESTS 8

/* "512" or "512,2048" into v; the count, or -1 when malformed. */
static int parse_list(const char *s, int32_t *v)
{
    int n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < 0 || x > (1 << 20) || n == BENCH_MAX_TESTS)
            return -1;
        v[n++] = (int32_t)x;
        s = end;
        if (*s == ',')
            s++;
        else if (*s)
            return -1;
    }
    return n;
}

int cmd_bench(int argc, char **argv)
{
    /* Synthetic-model options and the -p/-n lists are bench's own; peel
     * them off first. */
    const char *arch = "qwen2", *shape = "qwen2.5-0.5b", *type = "Q4_K_M";
    const char *pp_list = "512", *tg_list = "128", *depth_list = "0";
    char **rest = malloc(sizeof *rest * (size_t)(argc + 1));
    int nrest = 0;
    if (!rest)
        return 1;
    for (int i = 0; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--arch"))
            arch = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--shape"))
            shape = argv[++i];
        else if (i + 1 < argc && !strcmp(argv[i], "--type"))
            type = argv[++i];
        else if (i + 1 < argc && (!strcmp(argv[i], "-p") || !strcmp(argv[i], "--n-prompt")))
            pp_list = argv[++i];
        else if (i + 1 < argc && (!strcmp(argv[i], "-n") || !strcmp(argv[i], "--n-gen")))
            tg_list = argv[++i];
        else if (i + 1 < argc && (!strcmp(argv[i], "-d") || !strcmp(argv[i], "--n-depth")))
            depth_list = argv[++i];
        else
            rest[nrest++] = argv[i];
    }
    struct cli_opts o;
    int rc = cli_parse(nrest, rest, CLI_BENCH, &o);
    free(rest);
    int32_t pps[BENCH_MAX_TESTS], tgs[BENCH_MAX_TESTS], depths[BENCH_MAX_TESTS];
    int n_pps = rc ? 0 : parse_list(pp_list, pps), n_tgs = rc ? 0 : parse_list(tg_list, tgs);
    int n_depths = rc ? 0 : parse_list(depth_list, depths);
    if (!rc && (n_pps < 0 || n_tgs < 0 || n_depths <= 0)) {
        fprintf(stderr,
                "minfer bench: -p, -n and -d take counts like 512 or 512,2048 (at most %d)\n",
                BENCH_MAX_TESTS);
        rc = 2;
    }
    if (rc) {
        usage(rc == 1 ? stdout : stderr);
        return rc == 1 ? 0 : 2;
    }
    int32_t n_pp = 0, n_tg = 0, n_depth = 0;
    for (int i = 0; i < n_pps; i++)
        n_pp = pps[i] > n_pp ? pps[i] : n_pp;
    for (int i = 0; i < n_tgs; i++)
        n_tg = tgs[i] > n_tg ? tgs[i] : n_tg;
    for (int i = 0; i < n_depths; i++)
        n_depth = depths[i] > n_depth ? depths[i] : n_depth;
    if (!o.n_ctx)
        o.n_ctx = (n_pp > n_tg ? n_pp : n_tg) + n_depth + 1;
    /* a pp test is one pass; the depth fill goes in passes of this size
     * too (at least 512, so a tg-only bench does not fill token by token) */
    if (!o.n_batch)
        o.n_batch = n_pp > 512 ? n_pp : n_depth > 0 || n_pp > 0 ? 512 : 1;

    struct cli_session s;
    memset(&s, 0, sizeof s);
    char label[160] = "";
    struct minfer_gguf *g = NULL;
    if (!o.model) {
        g = synth_model(arch, shape, type, &s, label, sizeof label);
        if (!g)
            return 1;
    }
    void *synth_mem = s.synth_mem;
    if (cli_open("bench", &o, g, false, &s)) {
        minfer_synth_mem_free(synth_mem);
        return 1;
    }
    s.synth_mem = synth_mem;
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    if (!label[0])
        snprintf(label, sizeof label, "%s %s %s", info.arch, info.name, info.type_desc);

    int32_t n_ids = (n_pp > n_tg ? n_pp : n_tg) + n_depth;
    int32_t *ids = malloc(sizeof *ids * (size_t)(n_ids + 1));
    double *v = malloc(sizeof *v * (size_t)o.reps);
    rc = 1;
    if (!ids || !v)
        goto out;
    uint64_t x = 88172645463325252ull;
    for (int32_t i = 0; i < n_ids; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)info.n_vocab);
    }
    char threads[16];
    if (o.n_threads > 0)
        snprintf(threads, sizeof threads, "%d", o.n_threads);
    else
        snprintf(threads, sizeof threads, "auto");
    double size = (double)info.size_bytes;
    char size_s[32], params_s[32];
    if (size >= 1024.0 * 1024 * 1024)
        snprintf(size_s, sizeof size_s, "%.2f GiB", size / (1024.0 * 1024 * 1024));
    else
        snprintf(size_s, sizeof size_s, "%.2f MiB", size / (1024.0 * 1024));
    snprintf(params_s, sizeof params_s, "%.2f %s",
             info.n_params >= 1000000000ull ? (double)info.n_params / 1e9
                                            : (double)info.n_params / 1e6,
             info.n_params >= 1000000000ull ? "B" : "M");

    printf("| model | size | params | backend | threads | test | t/s |\n");
    printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    fflush(stdout);
    if (n_depth + (n_pp > n_tg ? n_pp : n_tg) > minfer_ctx_n_ctx(s.ctx)) {
        fprintf(stderr, "minfer bench: depth %d plus a %d-token test needs %d cells; the context "
                        "has %d\n", n_depth, n_pp > n_tg ? n_pp : n_tg,
                n_depth + (n_pp > n_tg ? n_pp : n_tg), minfer_ctx_n_ctx(s.ctx));
        goto out;
    }
    for (int di = 0; di < n_depths; di++) {
        int32_t depth = depths[di];
        char at[32] = "";
        if (depth > 0)
            snprintf(at, sizeof at, " @ d%d", depth);
        bool filled = false;
        for (int test = 0; test < n_pps + n_tgs; test++) {
            bool gen = test >= n_pps;
            int32_t n = gen ? tgs[test - n_pps] : pps[test];
            if (n <= 0)
                continue;
            if (!filled && fill_depth(&s, ids + n_pp, depth, o.n_batch) < 0)
                goto fail;
            filled = true;
            /* warm-up */
            if (run_once(&s, ids, gen ? (n < 4 ? n : 4) : n, gen, depth) < 0)
                goto fail;
            for (int r = 0; r < o.reps; r++)
                if ((v[r] = run_once(&s, ids, n, gen, depth)) < 0)
                    goto fail;
            struct stats st = stats_of(v, o.reps);
            printf("| %s | %s | %s | %s | %s | %s%d%s | %.2f ± %.2f |\n", label, size_s,
                   params_s, info.backend, threads, gen ? "tg" : "pp", n, at, st.mean, st.sd);
            fflush(stdout);
        }
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "minfer bench: %s\n", minfer_ctx_last_error(s.ctx));
out:
    free(ids);
    free(v);
    cli_close(&s);
    return rc;
}
