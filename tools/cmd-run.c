/*
 * cmd-run.c — minfer run: one prompt in, generated text streamed out (or
 * one JSON object with --json).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-model.h"
#include "commands.h"
#include "run-batch.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer run -m MODEL (-p TEXT | -f FILE | --ids 1,2,3) [options]\n"
               "  -n N               tokens to generate (default 128, -1 = until the end of\n"
               "                     generation or a full context); prints only new text\n"
               "  --chat             wrap the prompt in the model's chat template\n"
               "  --system TEXT      system message with --chat\n"
               "  --no-think         Qwen3 with --chat: answer without a thinking block\n"
               "  --no-special       do not match special tokens written in the text\n"
               "  --json             print one JSON object (prompt_ids, generated_ids, text,\n"
               "                     timings) instead of streaming\n");
    run_batch_usage(f);
    cli_common_usage(f);
    cli_sampling_usage(f);
}

/* Appends bytes to a growing text buffer. */
struct text {
    char *p;
    size_t n, cap;
};

static void text_add(struct text *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        size_t cap = (t->n + n + 1) * 2;
        char *np = realloc(t->p, cap);
        if (!np)
            return;
        t->p = np;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
}

static cJSON *ids_json(const int32_t *ids, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

int cmd_run(int argc, char **argv)
{
    struct cli_opts o;
    struct run_batch_opts bo; /* --prompts / --parallel / --session: run-prompts.c */
    int rc = run_batch_take_opts(&argc, argv, &bo);
    if (!rc)
        rc = cli_parse(argc, argv, CLI_TAKES_PROMPT, &o);
    if (rc) {
        usage(rc == 1 ? stdout : stderr);
        return rc == 1 ? 0 : 2;
    }
    if (run_batch_wanted(&bo))
        return run_batch(&o, &bo);
    struct cli_session s;
    if (cli_open("run", &o, NULL, true, &s))
        return 1;
    int32_t *ids = NULL, *gen = NULL;
    size_t n_ids = 0, n_gen = 0;
    struct minfer_sampler *smp = NULL;
    struct minfer_detok *dt = NULL;
    struct text text = {0};
    rc = 1;
    if (cli_prompt_ids("run", &o, &s, &ids, &n_ids))
        goto out;
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    char err[512];
    minfer_status st;
    smp = minfer_sampler_new(&o.sp, info.n_vocab, &st, err, sizeof err);
    dt = minfer_detok_new(s.tok, false);
    if (o.n_predict < 0 || o.n_predict > minfer_ctx_n_ctx(s.ctx) - (int32_t)n_ids)
        o.n_predict = minfer_ctx_n_ctx(s.ctx) - (int32_t)n_ids;
    if (o.n_predict < 0)
        o.n_predict = 0;
    gen = malloc(sizeof *gen * ((size_t)o.n_predict + 1));
    if (!smp || !dt || !gen) {
        fprintf(stderr, "minfer run: sampler: %s\n", smp ? "out of memory" : err);
        goto out;
    }
    for (size_t i = 0; i < n_ids; i++)
        minfer_sampler_accept(smp, ids[i]);

    double t0 = cli_now_ms();
    st = minfer_ctx_decode(s.ctx, ids, (int32_t)n_ids, 0);
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer run: prompt of %zu tokens: %s\n", n_ids,
                minfer_ctx_last_error(s.ctx));
        goto out;
    }
    double t_prompt = cli_now_ms() - t0;
    t0 = cli_now_ms();
    char buf[1024];
    size_t nb;
    while ((int32_t)n_gen < o.n_predict) {
        int32_t id;
        st = minfer_sampler_sample(smp, minfer_ctx_logits(s.ctx, -1), info.n_vocab, &id);
        if (st != MINFER_OK) {
            fprintf(stderr, "minfer run: sampling failed: %s\n", minfer_status_str(st));
            goto out;
        }
        minfer_sampler_accept(smp, id);
        gen[n_gen++] = id;
        if (minfer_tokenizer_is_eog(s.tok, id))
            break;
        if (minfer_detok_push(dt, id, buf, sizeof buf, &nb) == MINFER_OK) {
            if (o.json)
                text_add(&text, buf, nb);
            else {
                fwrite(buf, 1, nb, stdout);
                fflush(stdout);
            }
        }
        if ((int32_t)n_gen == o.n_predict)
            break;
        st = minfer_ctx_decode(s.ctx, &id, 1, 0);
        if (st != MINFER_OK) {
            fprintf(stderr, "\nminfer run: decode: %s\n", minfer_ctx_last_error(s.ctx));
            goto out;
        }
    }
    if (minfer_detok_flush(dt, buf, sizeof buf, &nb) == MINFER_OK) {
        if (o.json)
            text_add(&text, buf, nb);
        else
            fwrite(buf, 1, nb, stdout);
    }
    double t_gen = cli_now_ms() - t0;
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "prompt_ids", ids_json(ids, n_ids));
        cJSON_AddItemToObject(j, "generated_ids", ids_json(gen, n_gen));
        cJSON_AddStringToObject(j, "text", text.p ? text.p : "");
        cJSON *tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "load_ms", s.load_ms);
        cJSON_AddNumberToObject(tm, "prompt_ms", t_prompt);
        cJSON_AddNumberToObject(tm, "prompt_tokens", (double)n_ids);
        cJSON_AddNumberToObject(tm, "prompt_tps", t_prompt > 0 ? 1e3 * (double)n_ids / t_prompt : 0);
        cJSON_AddNumberToObject(tm, "gen_ms", t_gen);
        cJSON_AddNumberToObject(tm, "gen_tokens", (double)n_gen);
        cJSON_AddNumberToObject(tm, "gen_tps", t_gen > 0 ? 1e3 * (double)n_gen / t_gen : 0);
        char *out = cJSON_Print(j);
        printf("%s\n", out);
        free(out);
        cJSON_Delete(j);
    } else {
        printf("\n");
        fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.1f t/s); generated: %zu tokens in %.1f ms (%.1f t/s)\n",
                n_ids, t_prompt, t_prompt > 0 ? 1e3 * (double)n_ids / t_prompt : 0.0, n_gen, t_gen,
                t_gen > 0 ? 1e3 * (double)n_gen / t_gen : 0.0);
    }
    rc = 0;
out:
    free(text.p);
    free(ids);
    free(gen);
    minfer_detok_free(dt);
    minfer_sampler_free(smp);
    cli_close(&s);
    return rc;
}
