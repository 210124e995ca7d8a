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
#include "run-batch.h"
#include "minfer/gguf.h"
#include <cjson/cJSON.h>
#include <inttypes.h>

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer bench [-m MODEL] [-p 512] [-n 128] [-r 5] [-o md] [options]\n"
               "Prompt processing (pp) and generation (tg) throughput, mean and standard\n"
               "deviation over the repetitions after a warm-up. Without -m it benches a\n"
               "synthetic model made in memory (--shape, --type). -o json prints an array\n"
               "of rows {model, model_type, size, params, backend, threads, test, n_prompt,\n"
               "n_gen, avg_ts, stddev_ts, samples_ts}; jsonl one row per line; csv a header\n"
               "and one line per row; md (the default) a table like llama-bench's.\n");
    cli_print_options(f, CMD_BENCH); /* --parallel's row included */
}

/* Whether argv has opt (bench's synthetic-model options have defaults, so
 * cli_opts cannot tell "given" apart). */
static bool argc_has(int argc, char **argv, const char *opt)
{
    size_t n = strlen(opt);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], opt, n) && (!argv[i][n] || argv[i][n] == '='))
            return true;
    return false;
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
 * one token) run from an empty cache; < 0 on error. */
static double run_once(struct cli_session *s, const int32_t *ids, int32_t n_tok, bool gen,
                       int32_t depth)
{
    if (minfer_ctx_truncate(s->ctx, depth) != MINFER_OK) /* keeps the depth fill */
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

/* One result row, printed in the chosen format. */
struct row {
    const char *model, *size, *params, *backend, *threads;
    uint64_t size_bytes, n_params;
    char test[40];
    int32_t n_prompt, n_gen;
    struct stats st;
    const double *samples;
    int n_samples;
};

static void csv_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        if (*s == '"')
            putchar('"');
        putchar(*s);
    }
    putchar('"');
}

static void print_row(const char *fmt, const struct row *r, int index)
{
    if (!strcmp(fmt, "md")) {
        printf("| %s | %s | %s | %s | %s | %s | %.2f ± %.2f |\n", r->model, r->size, r->params,
               r->backend, r->threads, r->test, r->st.mean, r->st.sd);
    } else if (!strcmp(fmt, "csv")) {
        csv_str(r->model);
        printf(",%" PRIu64 ",%" PRIu64 ",", r->size_bytes, r->n_params);
        csv_str(r->backend);
        printf(",%s,%s,%d,%d,%.6f,%.6f\n", r->threads, r->test, r->n_prompt, r->n_gen,
               r->st.mean, r->st.sd);
    } else {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddStringToObject(j, "model", r->model);
        cJSON_AddNumberToObject(j, "size", (double)r->size_bytes);
        cJSON_AddNumberToObject(j, "params", (double)r->n_params);
        cJSON_AddStringToObject(j, "backend", r->backend);
        cJSON_AddStringToObject(j, "threads", r->threads);
        cJSON_AddStringToObject(j, "test", r->test);
        cJSON_AddNumberToObject(j, "n_prompt", r->n_prompt);
        cJSON_AddNumberToObject(j, "n_gen", r->n_gen);
        cJSON_AddNumberToObject(j, "avg_ts", r->st.mean);
        cJSON_AddNumberToObject(j, "stddev_ts", r->st.sd);
        cJSON_AddItemToObject(j, "samples_ts",
                              cJSON_CreateDoubleArray(r->samples, r->n_samples));
        char *t = cJSON_PrintUnformatted(j);
        if (!strcmp(fmt, "json"))
            printf("%s  %s", index ? ",\n" : "", t ? t : "{}");
        else
            printf("%s\n", t ? t : "{}");
        free(t);
        cJSON_Delete(j);
    }
    fflush(stdout);
}

int cmd_bench(int argc, char **argv)
{
    int32_t par[BENCH_PARALLEL_MAX];
    int n_par = 0;
    if (bench_parallel_take_opts(&argc, argv, par, &n_par))
        return 2; /* one line and the --help hint were printed */
    struct cli_opts o;
    int rc = cli_parse(argc, argv, CMD_BENCH, &o);
    if (rc == 1) {
        usage(stdout);
        return cli_stdout_done("bench");
    }
    if (rc)
        return rc;
    if (o.model && (o.arch || argc_has(argc, argv, "--shape") || argc_has(argc, argv, "--type")))
        return cli_usage_error("bench", "--arch, --shape and --type describe a synthetic "
                                        "model; they cannot apply with -m");
    const char *arch = o.arch, *shape = o.shape, *type = o.type;
    if (!arch && !(arch = cli_arch_of_shape(shape)))
        return cli_usage_error("bench", "--shape '%s' names no known model; give --arch", shape);
    const int32_t *pps = o.pps, *tgs = o.tgs;
    int n_pps = o.n_pps, n_tgs = o.n_tgs;
    int32_t n_pp = 0, n_tg = 0, n_depth = 0;
    for (int i = 0; i < n_pps; i++)
        n_pp = pps[i] > n_pp ? pps[i] : n_pp;
    for (int i = 0; i < n_tgs; i++)
        n_tg = tgs[i] > n_tg ? tgs[i] : n_tg;
    for (int i = 0; i < o.n_depths; i++)
        n_depth = o.depths[i] > n_depth ? o.depths[i] : n_depth;
    int32_t n_test = n_pp > n_tg ? n_pp : n_tg;
    if (!o.n_ctx)
        o.n_ctx = n_test + n_depth + 1;
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

    if (n_par) {
        rc = bench_parallel(&s, &o, par, n_par, n_pp, n_tg, label);
        cli_close(&s);
        return rc;
    }
    int32_t n_ids = n_test + n_depth;
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

    const char *fmt = o.bench_fmt;
    if (!strcmp(fmt, "md")) {
        printf("| model | size | params | backend | threads | test | t/s |\n");
        printf("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    } else if (!strcmp(fmt, "csv")) {
        printf("model,size,params,backend,threads,test,n_prompt,n_gen,avg_ts,stddev_ts\n");
    } else if (!strcmp(fmt, "json")) {
        printf("[\n");
    }
    fflush(stdout);
    int n_rows = 0;
    if (n_depth + n_test > minfer_ctx_n_ctx(s.ctx)) {
        fprintf(stderr, "minfer bench: depth %d plus a %d-token test needs %d cells; the context "
                        "has %d\n", n_depth, n_test, n_depth + n_test, minfer_ctx_n_ctx(s.ctx));
        goto out;
    }
    for (int di = 0; di < o.n_depths; di++) {
        int32_t depth = o.depths[di];
        bool filled = false;
        for (int test = 0; test < n_pps + n_tgs; test++) {
            bool gen = test >= n_pps;
            int32_t n = gen ? tgs[test - n_pps] : pps[test];
            if (n <= 0)
                continue;
            if (!filled && fill_depth(&s, ids + n_test, depth, o.n_batch) < 0)
                goto fail;
            filled = true;
            /* warm-up */
            if (run_once(&s, ids, gen ? (n < 4 ? n : 4) : n, gen, depth) < 0)
                goto fail;
            for (int r = 0; r < o.reps; r++)
                if ((v[r] = run_once(&s, ids, n, gen, depth)) < 0)
                    goto fail;
            struct row r = {label, size_s, params_s, info.backend, threads, info.size_bytes,
                            info.n_params, "", gen ? 0 : n, gen ? n : 0, stats_of(v, o.reps), v,
                            o.reps};
            if (depth > 0) /* llama-bench's -d row name */
                snprintf(r.test, sizeof r.test, "%s%d @ d%d", gen ? "tg" : "pp", n, depth);
            else
                snprintf(r.test, sizeof r.test, "%s%d", gen ? "tg" : "pp", n);
            print_row(fmt, &r, n_rows++);
        }
    }
    if (!strcmp(fmt, "json"))
        printf("%s]\n", n_rows ? "\n" : "");
    rc = cli_stdout_done("bench");
    goto out;
fail:
    fprintf(stderr, "minfer bench: %s\n", minfer_ctx_last_error(s.ctx));
out:
    free(ids);
    free(v);
    cli_close(&s);
    return rc;
}
