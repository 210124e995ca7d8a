/*
 * cmd-run.c — minfer run: one prompt in, generated text streamed out (or
 * one JSON object with --json). The prompt goes through the model's chat
 * template unless --raw or --ids; stop strings are held back until they
 * can no longer match; Ctrl-C ends the generation and still prints the
 * text, the timings and (with --json) a complete object.
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
    fprintf(f,
            "usage: minfer run -m MODEL (-p TEXT | -f FILE | --ids 1,2,3 | TEXT) [options]\n"
            "Generates from the prompt; prints only the new text, then the timings on stderr.\n"
            "A model with a recognised chat template gets the prompt as one user turn of\n"
            "that template (--system adds a system turn); --raw gives the bare completion.\n"
            "Ctrl-C stops the generation: what was generated, a newline and the timings are\n"
            "still printed (exit status 130).\n");
    cli_print_options(f, CMD_RUN); /* --prompts/--parallel/--session rows included */
}

/* Appends bytes to a growing text buffer; false when out of memory. */
struct text {
    char *p;
    size_t n, cap;
};

static bool text_add(struct text *t, const char *s, size_t n)
{
    if (t->n + n + 1 > t->cap) {
        size_t cap = (t->n + n + 1) * 2;
        char *np = realloc(t->p, cap);
        if (!np)
            return false;
        t->p = np;
        t->cap = cap;
    }
    memcpy(t->p + t->n, s, n);
    t->n += n;
    t->p[t->n] = 0;
    return true;
}

static cJSON *ids_json(const int32_t *ids, size_t n)
{
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

/* ---- the command ---- */

int cmd_run(int argc, char **argv)
{
    struct cli_opts o;
    struct run_batch_opts bo; /* --prompts / --parallel / --session: run-prompts.c */
    int rc = run_batch_take_opts(&argc, argv, &bo);
    if (!rc)
        rc = cli_parse(argc, argv, CMD_RUN, &o);
    if (rc) {
        if (rc == 1) {
            usage(stdout);
            return cli_stdout_done("run");
        }
        return 2;
    }
    cli_random_seed(&o);
    if (run_batch_wanted(&bo))
        return run_batch(&o, &bo);
    struct cli_session s;
    if (cli_open("run", &o, NULL, true, &s))
        return 1;
    int32_t *ids = NULL, *gen = NULL;
    size_t n_ids = 0, n_gen = 0, printed = 0;
    struct minfer_sampler *smp = NULL;
    struct minfer_detok *dt = NULL;
    struct text text = {0};
    const char *stop_reason = "length";
    rc = 1;
    if ((rc = cli_prompt_ids("run", &o, &s, &ids, &n_ids)) != 0)
        goto out;
    rc = 1;
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    int32_t n_ctx = minfer_ctx_n_ctx(s.ctx);
    if ((int32_t)n_ids > n_ctx) {
        fprintf(stderr, "minfer run: the prompt has %zu tokens; the context holds %d (-c)\n",
                n_ids, n_ctx);
        goto out;
    }
    if (o.repeat_last_n_ctx)
        o.sp.penalty_last_n = n_ctx;
    char err[512];
    minfer_status st;
    smp = minfer_sampler_new(&o.sp, info.n_vocab, &st, err, sizeof err);
    if (!smp) {
        fprintf(stderr, "minfer run: sampler: %s\n", err);
        goto out;
    }
    dt = minfer_detok_new(s.tok, false);
    int32_t room = n_ctx - (int32_t)n_ids;
    bool to_context = o.n_predict < 0;
    if (o.n_predict > room) {
        fprintf(stderr, "minfer run: -n %d does not fit: the context holds %d tokens and the "
                "prompt uses %zu, so at most %d will be generated\n", o.n_predict, n_ctx, n_ids,
                room);
        to_context = true;
    }
    int32_t n_predict = to_context ? room : o.n_predict;
    gen = malloc(sizeof *gen * ((size_t)n_predict + 1));
    if (!dt || !gen) {
        fprintf(stderr, "minfer run: out of memory\n");
        goto out;
    }
    if (o.verbose)
        fprintf(stderr, "minfer run: seed %llu, temp %g, top-k %d, top-p %g, min-p %g, "
                "repeat-penalty %g over %d, %zu prompt tokens\n",
                (unsigned long long)o.sp.seed, (double)o.sp.temperature, o.sp.top_k,
                (double)o.sp.top_p, (double)o.sp.min_p, (double)o.sp.repeat_penalty,
                o.sp.penalty_last_n, n_ids);
    /* penalties see the prompt, as in llama.cpp */
    for (size_t i = 0; i < n_ids; i++)
        minfer_sampler_accept(smp, ids[i]);
    cli_sigint_install();

    double t0 = cli_now_ms();
    st = minfer_ctx_decode(s.ctx, ids, (int32_t)n_ids, 0);
    if (st != MINFER_OK && !cli_sigint) {
        fprintf(stderr, "minfer run: prompt of %zu tokens: %s\n", n_ids,
                minfer_ctx_last_error(s.ctx));
        goto out;
    }
    double t_prompt = cli_now_ms() - t0;
    t0 = cli_now_ms();
    size_t slen = cli_stop_max_len(&o);
    char *buf = malloc(minfer_detok_max_out(dt) + 1);
    if (!buf) {
        fprintf(stderr, "minfer run: out of memory for the output buffer\n");
        goto out;
    }
    size_t nb;
    bool done = st != MINFER_OK; /* interrupted during the prompt */
    if (done)
        stop_reason = "interrupted";
    while (!done && (int32_t)n_gen < n_predict) {
        if (cli_sigint) {
            stop_reason = "interrupted";
            break;
        }
        int32_t id;
        st = minfer_sampler_sample(smp, minfer_ctx_logits(s.ctx, -1), info.n_vocab, &id);
        if (st != MINFER_OK) {
            fprintf(stderr, "\nminfer run: %s\n", minfer_sampler_last_error(smp));
            free(buf);
            goto out;
        }
        minfer_sampler_accept(smp, id);
        gen[n_gen++] = id;
        if (!o.ignore_eos && minfer_tokenizer_is_eog(s.tok, id)) {
            stop_reason = "eos";
            break;
        }
        nb = 0;
        if (minfer_detok_push(dt, id, buf, minfer_detok_max_out(dt), &nb) == MINFER_OK && nb &&
            !text_add(&text, buf, nb)) {
            fprintf(stderr, "\nminfer run: out of memory\n");
            free(buf);
            goto out;
        }
        size_t upto = text.n;
        if (o.n_stop) {
            size_t from = printed > slen ? printed - slen : 0;
            long at = cli_stop_find(&o, text.p ? text.p : "", text.n, from);
            if (at >= 0) {
                text.n = (size_t)at; /* the stop string and anything after it go */
                if (text.p)
                    text.p[text.n] = 0;
                upto = text.n;
                stop_reason = "stop";
                done = true;
            } else {
                upto = text.n - cli_stop_hold(&o, text.p ? text.p : "", text.n);
            }
        }
        if (!o.json && upto > printed) {
            fwrite(text.p + printed, 1, upto - printed, stdout);
            fflush(stdout);
            if (ferror(stdout))
                break; /* reported below */
        }
        printed = upto > printed ? upto : printed;
        if (done || (int32_t)n_gen == n_predict)
            break;
        st = minfer_ctx_decode(s.ctx, &id, 1, 0);
        if (st != MINFER_OK && cli_sigint) {
            stop_reason = "interrupted";
            break;
        }
        if (st != MINFER_OK) {
            fprintf(stderr, "\nminfer run: decode: %s\n", minfer_ctx_last_error(s.ctx));
            free(buf);
            goto out;
        }
    }
    if (!strcmp(stop_reason, "length") && to_context && (int32_t)n_gen == n_predict) {
        stop_reason = "context";
        if (!o.json || o.verbose)
            fprintf(stderr, "%sminfer run: the context is full (%d tokens: %zu prompt + %zu "
                    "generated)\n", o.json ? "" : "\n", n_ctx, n_ids, n_gen);
    }
    if (strcmp(stop_reason, "stop") &&
        minfer_detok_flush(dt, buf, minfer_detok_max_out(dt), &nb) == MINFER_OK && nb)
        text_add(&text, buf, nb);
    free(buf);
    if (!o.json && text.n > printed)
        fwrite(text.p + printed, 1, text.n - printed, stdout);
    double t_gen = cli_now_ms() - t0;
    if (o.json) {
        cJSON *j = cJSON_CreateObject();
        cJSON_AddItemToObject(j, "prompt_ids", ids_json(ids, n_ids));
        cJSON_AddItemToObject(j, "generated_ids", ids_json(gen, n_gen));
        cJSON_AddStringToObject(j, "text", text.p ? text.p : "");
        cJSON_AddStringToObject(j, "stop_reason", stop_reason);
        char seed[24];
        snprintf(seed, sizeof seed, "%llu", (unsigned long long)o.sp.seed);
        /* raw: all 64 bits exactly (a cJSON number is a double) */
        cJSON_AddRawToObject(j, "seed", seed);
        cJSON *tm = cJSON_AddObjectToObject(j, "timings");
        cJSON_AddNumberToObject(tm, "load_ms", s.load_ms);
        cJSON_AddNumberToObject(tm, "prompt_ms", t_prompt);
        cJSON_AddNumberToObject(tm, "prompt_tokens", (double)n_ids);
        cJSON_AddNumberToObject(tm, "prompt_tps", t_prompt > 0 ? 1e3 * (double)n_ids / t_prompt : 0);
        cJSON_AddNumberToObject(tm, "gen_ms", t_gen);
        cJSON_AddNumberToObject(tm, "gen_tokens", (double)n_gen);
        cJSON_AddNumberToObject(tm, "gen_tps", t_gen > 0 ? 1e3 * (double)n_gen / t_gen : 0);
        char *js = cJSON_Print(j);
        cJSON_Delete(j);
        if (!js) {
            fprintf(stderr, "minfer run: out of memory for the JSON output\n");
            goto out;
        }
        printf("%s\n", js);
        free(js);
    } else {
        printf("\n");
        fprintf(stderr, "prompt: %zu tokens in %.1f ms (%.1f t/s); generated: %zu tokens in "
                "%.1f ms (%.1f t/s); stop: %s\n",
                n_ids, t_prompt, t_prompt > 0 ? 1e3 * (double)n_ids / t_prompt : 0.0, n_gen, t_gen,
                t_gen > 0 ? 1e3 * (double)n_gen / t_gen : 0.0, stop_reason);
    }
    rc = cli_stdout_done("run");
    if (!rc && !strcmp(stop_reason, "interrupted"))
        rc = 130;
out:
    cli_sigint_restore();
    free(text.p);
    free(ids);
    free(gen);
    minfer_detok_free(dt);
    minfer_sampler_free(smp);
    cli_close(&s);
    return rc;
}
