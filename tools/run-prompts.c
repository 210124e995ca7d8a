/*
 * run-prompts.c — `minfer run --prompts FILE [--parallel N]`: every prompt
 * of a JSON Lines file ({"prompt": "text"} or {"ids": [..]} per line) as a
 * sequence of one context, at most N at a time, all active sequences
 * advancing together through one minfer_ctx_decode_batch per step; and
 * `minfer run --session FILE`: the single prompt reuses the longest common
 * token prefix of a saved session and saves the sequence afterwards.
 *
 * A sequence's output equals `minfer run` of that prompt alone with the
 * same sampling options (each has its own sampler, seeded alike). With
 * --json each prompt prints one line (JSON Lines) in input order: index,
 * prompt_ids, generated_ids, text, timings.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-model.h"
#include "run-batch.h"

/* ---- options ---- */

int run_batch_take_opts(int *argc, char **argv, struct run_batch_opts *bo)
{
    memset(bo, 0, sizeof *bo);
    int n = 0;
    for (int i = 0; i < *argc; i++) {
        char a[16];
        const char *eq = strchr(argv[i], '='), *v = i + 1 < *argc ? argv[i + 1] : NULL;
        /* "--opt value" or "--opt=value", as the option table parses */
        snprintf(a, sizeof a, "%.*s", eq ? (int)(eq - argv[i]) : (int)strlen(argv[i]), argv[i]);
        if (eq)
            v = eq + 1;
        if (!strcmp(a, "--prompts") || !strcmp(a, "--session") || !strcmp(a, "--parallel")) {
            if (!v) {
                return cli_usage_error("run", "option %s needs a value", a);
            }
            if (!strcmp(a, "--prompts")) {
                bo->prompts = v;
            } else if (!strcmp(a, "--session")) {
                bo->session = v;
            } else {
                char *end;
                errno = 0;
                long x = strtol(v, &end, 10);
                if (errno || end == v || *end || x < 1 || x > 65536) {
                    return cli_usage_error("run", "--parallel takes 1..65536, not '%s'", v);
                }
                bo->parallel = (int32_t)x;
            }
            i += eq ? 0 : 1;
            continue;
        }
        argv[n++] = argv[i];
    }
    *argc = n;
    argv[n] = NULL;
    if (bo->parallel && !bo->prompts) {
        return cli_usage_error("run", "--parallel goes with --prompts FILE");
    }
    if (bo->prompts && bo->session) {
        return cli_usage_error("run", "--session saves one sequence; it does not go with "
                                      "--prompts");
    }
    return 0;
}

int run_batch_wanted(const struct run_batch_opts *bo)
{
    return bo->prompts || bo->session;
}

/* ---- prompts ---- */

struct job {
    int32_t *ids;
    size_t n;
    int32_t n_pred;             /* tokens it may generate */
    /* results */
    int32_t *gen;
    size_t n_gen;
    char *text;
    size_t text_len, text_cap;
    int32_t reused;
    double t_start, t_first, t_end;
    int printed;
    const char *stop_reason;    /* eos, length, stop or context, as run's */
    size_t shown;               /* bytes of text streamed so far */
};

static int job_ids_from_line(const struct cli_opts *o, const struct cli_session *s,
                             const char *path, int line, cJSON *j, struct job *jb)
{
    cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
    cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "ids");
    if (p && ids) {
        fprintf(stderr, "minfer run: %s line %d has both \"prompt\" and \"ids\"; give one\n",
                path, line);
        return 1;
    }
    if (cJSON_IsString(p)) {
        struct cli_opts po = *o;
        po.prompt = p->valuestring;
        po.file = NULL;
        po.ids = NULL;
        return cli_prompt_ids("run", &po, s, &jb->ids, &jb->n);
    }
    if (cJSON_IsArray(ids) && cJSON_GetArraySize(ids) > 0) {
        int n = cJSON_GetArraySize(ids);
        struct minfer_model_info info = {.struct_size = sizeof info};
        minfer_model_info(s->model, &info);
        jb->ids = malloc(sizeof *jb->ids * (size_t)n);
        if (!jb->ids)
            return 1;
        for (int i = 0; i < n; i++) {
            cJSON *e = cJSON_GetArrayItem(ids, i);
            if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble > INT32_MAX ||
                e->valuedouble != (double)(int32_t)e->valuedouble) {
                fprintf(stderr, "minfer run: %s line %d: ids[%d] is not a token id\n", path,
                        line, i);
                return 1;
            }
            jb->ids[i] = (int32_t)e->valuedouble;
            if (jb->ids[i] >= info.n_vocab) {
                fprintf(stderr,
                        "minfer run: %s line %d: ids[%d] = %d is outside the vocabulary "
                        "[0, %d)\n",
                        path, line, i, (int)jb->ids[i], (int)info.n_vocab);
                return 1;
            }
        }
        jb->n = (size_t)n;
        return 0;
    }
    fprintf(stderr, "minfer run: %s line %d: expected {\"prompt\": \"text\"} or "
                    "{\"ids\": [1, 2]}\n", path, line);
    return 1;
}

static int read_jobs(const struct cli_opts *o, const struct cli_session *s, const char *path,
                     struct job **out, int *n_out)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "minfer run: cannot open %s: %s\n", path, strerror(errno));
        return 1;
    }
    struct job *jobs = NULL;
    int n = 0, cap = 0, line = 0, rc = 0;
    char *buf = NULL;
    size_t bcap = 0;
    ssize_t len;
    while ((len = getline(&buf, &bcap, f)) >= 0) {
        line++;
        const char *p = buf;
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (!*p)
            continue;
        cJSON *j = cJSON_Parse(p);
        if (!cJSON_IsObject(j)) {
            const char *at = j ? NULL : cJSON_GetErrorPtr();
            if (at && at >= p && at <= p + strlen(p))
                fprintf(stderr, "minfer run: %s line %d is not valid JSON (at column %d)\n",
                        path, line, (int)(at - buf) + 1);
            else
                fprintf(stderr, "minfer run: %s line %d is not a JSON object\n", path, line);
            cJSON_Delete(j);
            rc = 1;
            break;
        }
        if (n == cap) {
            cap = cap ? cap * 2 : 16;
            struct job *nj = realloc(jobs, sizeof *nj * (size_t)cap);
            if (!nj) {
                cJSON_Delete(j);
                rc = 1;
                break;
            }
            jobs = nj;
        }
        memset(&jobs[n], 0, sizeof jobs[n]);
        rc = job_ids_from_line(o, s, path, line, j, &jobs[n]);
        n++;
        cJSON_Delete(j);
        if (rc)
            break;
    }
    free(buf);
    fclose(f);
    if (!rc && !n) {
        fprintf(stderr, "minfer run: %s has no prompts\n", path);
        rc = 1;
    }
    *out = jobs;
    *n_out = n;
    return rc;
}

/* ---- output ---- */

static void text_add(struct job *jb, const char *s, size_t n)
{
    if (jb->text_len + n + 1 > jb->text_cap) {
        size_t cap = (jb->text_len + n + 1) * 2;
        char *t = realloc(jb->text, cap);
        if (!t)
            return;
        jb->text = t;
        jb->text_cap = cap;
    }
    memcpy(jb->text + jb->text_len, s, n);
    jb->text_len += n;
    jb->text[jb->text_len] = 0;
}

static cJSON *ids_json(const int32_t *ids, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

static void print_job(const struct cli_opts *o, const struct run_batch_opts *bo,
                      const struct cli_session *s, struct job *jb, int index, int n_jobs)
{
    jb->printed = 1;
    double prompt_ms = jb->t_first - jb->t_start, gen_ms = jb->t_end - jb->t_first;
    if (!o->json) {
        if (n_jobs > 1)
            printf("--- prompt %d ---\n%s\n", index, jb->text ? jb->text : "");
        else
            printf("\n");
        fflush(stdout);
        return;
    }
    cJSON *j = cJSON_CreateObject();
    if (bo->prompts)
        cJSON_AddNumberToObject(j, "index", index);
    cJSON_AddItemToObject(j, "prompt_ids", ids_json(jb->ids, jb->n));
    cJSON_AddItemToObject(j, "generated_ids", ids_json(jb->gen, jb->n_gen));
    cJSON_AddStringToObject(j, "text", jb->text ? jb->text : "");
    cJSON_AddStringToObject(j, "stop_reason", jb->stop_reason ? jb->stop_reason : "length");
    char seed[24];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->sp.seed);
    cJSON_AddRawToObject(j, "seed", seed); /* raw: all 64 bits exactly */
    cJSON *tm = cJSON_AddObjectToObject(j, "timings");
    cJSON_AddNumberToObject(tm, "load_ms", s->load_ms);
    cJSON_AddNumberToObject(tm, "prompt_ms", prompt_ms);
    cJSON_AddNumberToObject(tm, "prompt_tokens", (double)jb->n);
    cJSON_AddNumberToObject(tm, "prompt_tps",
                            prompt_ms > 0 ? 1e3 * (double)(jb->n - (size_t)jb->reused) / prompt_ms
                                          : 0);
    cJSON_AddNumberToObject(tm, "gen_ms", gen_ms);
    cJSON_AddNumberToObject(tm, "gen_tokens", (double)jb->n_gen);
    cJSON_AddNumberToObject(tm, "gen_tps",
                            gen_ms > 0 && jb->n_gen > 1 ? 1e3 * (double)(jb->n_gen - 1) / gen_ms
                                                        : 0);
    if (bo->session)
        cJSON_AddNumberToObject(tm, "reused_tokens", jb->reused);
    char *out = cJSON_PrintUnformatted(j);
    printf("%s\n", out);
    fflush(stdout);
    free(out);
    cJSON_Delete(j);
}

/* ---- the run ---- */

struct slot {
    int job;                    /* -1: idle */
    int32_t seq;
    size_t fed;                 /* prompt tokens in the cache */
    int32_t n_past;
    int32_t last;               /* the token to feed next (after the prompt) */
    int32_t batch_index;        /* of its logits token in this step's batch */
    struct minfer_sampler *smp;
    struct minfer_detok *dt;
};

/* The session file's sequence, reused up to the common prefix with jb. */
static int session_reuse(struct cli_session *s, const char *path, struct slot *sl,
                         struct job *jb)
{
    int32_t cap = minfer_ctx_n_ctx(s->ctx), n = 0;
    int32_t *toks = malloc(sizeof *toks * (size_t)cap);
    if (!toks)
        return 1;
    minfer_status st = minfer_ctx_seq_load(s->ctx, sl->seq, path, toks, cap, &n);
    if (st == MINFER_ERR_NOT_FOUND) { /* first run: nothing to reuse */
        free(toks);
        return 0;
    }
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer run: %s\n", minfer_ctx_last_error(s->ctx));
        free(toks);
        return 1;
    }
    int32_t common = 0;
    while (common < n && (size_t)common < jb->n && toks[common] == jb->ids[common])
        common++;
    free(toks);
    /* keep at least the last prompt token to decode: its logits start
     * generation; the cache may hold fewer cells than the file's tokens */
    if ((size_t)common >= jb->n)
        common = (int32_t)jb->n - 1;
    if (common > minfer_ctx_seq_pos_max(s->ctx, sl->seq) + 1)
        common = minfer_ctx_seq_pos_max(s->ctx, sl->seq) + 1;
    minfer_ctx_seq_remove(s->ctx, sl->seq, common, -1);
    jb->reused = common;
    sl->fed = (size_t)common;
    sl->n_past = common;
    return 0;
}

static int session_save(struct cli_session *s, const char *path, const struct slot *sl,
                        const struct job *jb)
{
    /* the cache holds the prompt and every generated token but the last */
    size_t n = (size_t)sl->n_past;
    int32_t *toks = malloc(sizeof *toks * (n + 1));
    if (!toks)
        return 1;
    for (size_t i = 0; i < n; i++)
        toks[i] = i < jb->n ? jb->ids[i] : jb->gen[i - jb->n];
    minfer_status st = minfer_ctx_seq_save(s->ctx, sl->seq, path, toks, (int32_t)n);
    free(toks);
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer run: %s\n", minfer_ctx_last_error(s->ctx));
        return 1;
    }
    return 0;
}

/* A context like cli_open's with n_seq sequences. */
static int reopen_ctx(const struct cli_opts *o, struct cli_session *s, int32_t n_seq)
{
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = o->n_ctx;
    cp.n_batch = o->n_batch;
    cp.n_threads = o->n_threads;
    cp.type_k = o->type_k;
    cp.type_v = o->type_v;
    cp.flags = o->no_graphs ? MINFER_CTX_NO_GRAPHS : 0;
    cp.n_seq_max = n_seq;
    minfer_ctx_free(s->ctx);
    minfer_status st;
    char err[512] = "";
    s->ctx = minfer_ctx_new(s->model, &cp, &st, err, sizeof err);
    if (!s->ctx) {
        fprintf(stderr, "minfer run: context of %d sequences: %s\n", n_seq, err);
        return 1;
    }
    return 0;
}

struct batch_buf {
    int32_t *tok, *pos, *nseq;
    const int32_t **ids;
    uint8_t *logits;
    int32_t n, cap;
};

static int bb_add(struct batch_buf *b, int32_t tok, int32_t pos, const int32_t *seq, bool lg)
{
    if (b->n == b->cap) {
        int32_t cap = b->cap ? b->cap * 2 : 256;
        int32_t *t = realloc(b->tok, sizeof *t * (size_t)cap);
        if (t)
            b->tok = t;
        int32_t *p = realloc(b->pos, sizeof *p * (size_t)cap);
        if (p)
            b->pos = p;
        int32_t *ns = realloc(b->nseq, sizeof *ns * (size_t)cap);
        if (ns)
            b->nseq = ns;
        const int32_t **id = realloc(b->ids, sizeof *id * (size_t)cap);
        if (id)
            b->ids = id;
        uint8_t *l = realloc(b->logits, (size_t)cap);
        if (l)
            b->logits = l;
        if (!t || !p || !ns || !id || !l)
            return 1;
        b->cap = cap;
    }
    b->tok[b->n] = tok;
    b->pos[b->n] = pos;
    b->nseq[b->n] = 1;
    b->ids[b->n] = seq;
    b->logits[b->n] = lg;
    b->n++;
    return 0;
}

/* Starts job j on slot sl. */
static int slot_start(const struct cli_opts *o, const struct run_batch_opts *bo,
                      struct cli_session *s, int32_t n_vocab, struct slot *sl, struct job *jobs,
                      int j)
{
    char err[256];
    minfer_status st;
    sl->job = j;
    sl->fed = 0;
    sl->n_past = 0;
    sl->smp = minfer_sampler_new(&o->sp, n_vocab, &st, err, sizeof err);
    sl->dt = minfer_detok_new(s->tok, false);
    if (!sl->smp || !sl->dt) {
        fprintf(stderr, "minfer run: sampler: %s\n", sl->smp ? "out of memory" : err);
        return 1;
    }
    struct job *jb = &jobs[j];
    for (size_t i = 0; i < jb->n; i++)
        minfer_sampler_accept(sl->smp, jb->ids[i]);
    jb->gen = malloc(sizeof *jb->gen * ((size_t)jb->n_pred + 1));
    if (!jb->gen)
        return 1;
    jb->t_start = cli_now_ms();
    if (bo->session && session_reuse(s, bo->session, sl, jb))
        return 1;
    return 0;
}

static void slot_stop(struct cli_session *s, struct slot *sl)
{
    minfer_ctx_seq_remove(s->ctx, sl->seq, 0, -1);
    minfer_sampler_free(sl->smp);
    minfer_detok_free(sl->dt);
    sl->smp = NULL;
    sl->dt = NULL;
    sl->job = -1;
}

int run_batch(const struct cli_opts *o, const struct run_batch_opts *bo)
{
    struct cli_session s;
    if (cli_open("run", o, NULL, true, &s))
        return 1;
    struct job *jobs = NULL;
    int n_jobs = 0, rc = 1;
    struct slot *slots = NULL;
    struct batch_buf bb = {0};
    int32_t n_slots = 0;
    if (bo->prompts) {
        if (read_jobs(o, &s, bo->prompts, &jobs, &n_jobs))
            goto out;
    } else {
        jobs = calloc(1, sizeof *jobs);
        if (!jobs || cli_prompt_ids("run", o, &s, &jobs[0].ids, &jobs[0].n))
            goto out;
        n_jobs = 1;
    }
    int32_t n_ctx = minfer_ctx_n_ctx(s.ctx);
    for (int j = 0; j < n_jobs; j++) {
        if (jobs[j].n >= (size_t)n_ctx) {
            fprintf(stderr, "minfer run: prompt %d has %zu tokens; the context holds %d (use a "
                            "larger -c)\n", j, jobs[j].n, n_ctx);
            goto out;
        }
        int32_t room = n_ctx - (int32_t)jobs[j].n;
        jobs[j].n_pred = o->n_predict < 0 || o->n_predict > room ? room : o->n_predict;
    }
    n_slots = bo->parallel && bo->parallel < n_jobs ? bo->parallel : n_jobs;
    if (n_slots > 1 && reopen_ctx(o, &s, n_slots))
        goto out;
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    slots = calloc((size_t)n_slots, sizeof *slots);
    if (!slots)
        goto out;
    for (int32_t i = 0; i < n_slots; i++) {
        slots[i].job = -1;
        slots[i].seq = i;
    }
    bool stream = n_jobs == 1 && !o->json;
    int next = 0, done = 0, next_print = 0;
    int32_t reserved = 0; /* cells the active jobs may still need, at most */
    size_t total_prompt = 0, total_gen = 0;
    double t0 = cli_now_ms();
    char piece[1024];
    size_t np;
    while (done < n_jobs) {
        /* admit jobs while a slot is free and their worst case fits */
        for (int32_t i = 0; i < n_slots && next < n_jobs; i++) {
            if (slots[i].job >= 0)
                continue;
            int32_t need = (int32_t)jobs[next].n + jobs[next].n_pred;
            if (reserved && reserved + need > n_ctx)
                break;
            if (slot_start(o, bo, &s, info.n_vocab, &slots[i], jobs, next))
                goto out;
            reserved += need;
            next++;
        }
        bb.n = 0;
        for (int32_t i = 0; i < n_slots; i++) {
            struct slot *sl = &slots[i];
            if (sl->job < 0)
                continue;
            struct job *jb = &jobs[sl->job];
            if (sl->fed < jb->n) {
                for (size_t k = sl->fed; k < jb->n; k++)
                    if (bb_add(&bb, jb->ids[k], (int32_t)k, &sl->seq, k == jb->n - 1))
                        goto oom;
            } else if (bb_add(&bb, sl->last, sl->n_past, &sl->seq, true)) {
                goto oom;
            }
            sl->batch_index = bb.n - 1;
        }
        struct minfer_batch b = {
            .struct_size = sizeof b, .n_tokens = bb.n, .tokens = bb.tok, .pos = bb.pos,
            .n_seq_id = bb.nseq, .seq_ids = (const int32_t *const *)bb.ids, .logits = bb.logits,
        };
        if (minfer_ctx_decode_batch(s.ctx, &b) != MINFER_OK) {
            fprintf(stderr, "minfer run: decode: %s\n", minfer_ctx_last_error(s.ctx));
            goto out;
        }
        double now = cli_now_ms();
        for (int32_t i = 0; i < n_slots; i++) {
            struct slot *sl = &slots[i];
            if (sl->job < 0)
                continue;
            struct job *jb = &jobs[sl->job];
            if (sl->fed < jb->n) {
                total_prompt += jb->n - sl->fed;
                sl->n_past = (int32_t)jb->n;
                sl->fed = jb->n;
                jb->t_first = now;
            } else {
                sl->n_past++;
            }
            int32_t id = -1;
            bool eog = false;
            if (jb->n_pred == 0) /* -n 0: the prompt only */
                goto finished;
            const float *l = minfer_ctx_batch_logits(s.ctx, sl->batch_index);
            if (!l || minfer_sampler_sample(sl->smp, l, info.n_vocab, &id) != MINFER_OK) {
                fprintf(stderr, "minfer run: sampling prompt %d failed\n", sl->job);
                goto out;
            }
            minfer_sampler_accept(sl->smp, id);
            jb->gen[jb->n_gen++] = id;
            total_gen++;
            eog = !o->ignore_eos && minfer_tokenizer_is_eog(s.tok, id);
            if (eog)
                jb->stop_reason = "eos";
            if (!eog && minfer_detok_push(sl->dt, id, piece, sizeof piece, &np) == MINFER_OK)
                text_add(jb, piece, np);
            size_t upto = jb->text_len; /* what may be shown: not a possible stop string */
            if (o->n_stop && jb->text) {
                long at = cli_stop_find(o, jb->text, jb->text_len, 0);
                if (at >= 0) { /* the stop string and what follows go */
                    jb->text_len = (size_t)at;
                    jb->text[at] = 0;
                    jb->stop_reason = "stop";
                    eog = true;
                }
                upto = jb->text_len - (eog ? 0 : cli_stop_hold(o, jb->text, jb->text_len));
            }
            if (stream && upto > jb->shown) {
                fwrite(jb->text + jb->shown, 1, upto - jb->shown, stdout);
                fflush(stdout);
                jb->shown = upto;
            }
            sl->last = id;
            if (!eog && (int32_t)jb->n_gen < jb->n_pred)
                continue;
        finished:
            if (!jb->stop_reason)
                jb->stop_reason = jb->n_pred < o->n_predict || o->n_predict < 0 ? "context"
                                                                                  : "length";
            if (strcmp(jb->stop_reason, "stop") &&
                minfer_detok_flush(sl->dt, piece, sizeof piece, &np) == MINFER_OK)
                text_add(jb, piece, np);
            if (stream && jb->text_len > jb->shown) {
                fwrite(jb->text + jb->shown, 1, jb->text_len - jb->shown, stdout);
                jb->shown = jb->text_len;
            }
            jb->t_end = cli_now_ms();
            if (bo->session && session_save(&s, bo->session, sl, jb))
                goto out;
            reserved -= (int32_t)jb->n + jb->n_pred;
            slot_stop(&s, sl);
            done++;
            while (next_print < n_jobs && jobs[next_print].t_end > 0)
                print_job(o, bo, &s, &jobs[next_print], next_print, n_jobs), next_print++;
        }
    }
    double ms = cli_now_ms() - t0;
    fprintf(stderr, "minfer run: %d prompt%s, %d at a time: %zu prompt + %zu generated tokens "
                    "in %.1f ms (%.1f t/s overall)\n", n_jobs, n_jobs == 1 ? "" : "s", n_slots,
            total_prompt, total_gen, ms, ms > 0 ? 1e3 * (double)(total_prompt + total_gen) / ms
                                                 : 0.0);
    rc = 0;
    goto out;
oom:
    fprintf(stderr, "minfer run: out of memory\n");
out:
    for (int32_t i = 0; slots && i < n_slots; i++)
        if (slots[i].job >= 0)
            slot_stop(&s, &slots[i]);
    for (int j = 0; j < n_jobs; j++) {
        free(jobs[j].ids);
        free(jobs[j].gen);
        free(jobs[j].text);
    }
    free(jobs);
    free(slots);
    free(bb.tok);
    free(bb.pos);
    free(bb.nseq);
    free(bb.ids);
    free(bb.logits);
    cli_close(&s);
    return rc;
}
