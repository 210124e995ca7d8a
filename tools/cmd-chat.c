/*
 * cmd-chat.c — minfer chat: multi-turn conversation on stdin/stdout that
 * keeps the KV cache between turns. Each turn renders the whole
 * conversation with the chat template, keeps the cached tokens it shares
 * with that rendering and prefills only the rest, so earlier turns are
 * never recomputed. On a terminal it prompts with "> "; otherwise every
 * input line is one user turn and every reply is printed on its own line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-model.h"
#include "commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer chat -m MODEL [--system TEXT] [options]\n"
               "  -n N               most tokens per reply (default 128)\n"
               "  --system TEXT      system message\n"
               "  --no-think         Qwen3: answer without a thinking block\n"
               "  type a message and Enter; an empty line or end of input quits\n");
    cli_common_usage(f);
    cli_sampling_usage(f);
}

struct conv {
    struct minfer_chat_msg *msgs;
    size_t n, cap;
};

static int conv_add(struct conv *c, const char *role, const char *text)
{
    if (c->n == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        struct minfer_chat_msg *m = realloc(c->msgs, sizeof *m * cap);
        if (!m)
            return 1;
        c->msgs = m;
        c->cap = cap;
    }
    char *dup = strdup(text);
    if (!dup)
        return 1;
    c->msgs[c->n++] = (struct minfer_chat_msg){role, dup};
    return 0;
}

/* One assistant turn: prefill what the cache lacks, then generate. The
 * cache's token ids are tracked in *cached / *n_cached. */
static int turn(const struct cli_opts *o, struct cli_session *s, struct minfer_sampler *smp,
                struct conv *c, int32_t **cached, size_t *n_cached, size_t *cap_cached)
{
    size_t len = 0, n_ids = 0;
    char *text = NULL;
    int32_t *ids = NULL;
    if (cli_chat_render("chat", o, s, c->msgs, c->n, &text, &len) ||
        cli_tokenize("chat", s, text, len, true, &ids, &n_ids)) {
        free(text);
        return 1;
    }
    free(text);
    size_t keep = 0;
    while (keep < *n_cached && keep < n_ids && (*cached)[keep] == ids[keep])
        keep++;
    if (keep == n_ids) /* everything cached: recompute the last token for its logits */
        keep--;
    int rc = 1;
    if (minfer_ctx_truncate(s->ctx, (int32_t)keep) != MINFER_OK ||
        minfer_ctx_decode(s->ctx, ids + keep, (int32_t)(n_ids - keep), 0) != MINFER_OK) {
        fprintf(stderr, "minfer chat: %s\n", minfer_ctx_last_error(s->ctx));
        goto out;
    }
    fprintf(stderr, "[chat: %zu cached tokens reused, %zu prefilled]\n", keep, n_ids - keep);
    if (n_ids + (size_t)o->n_predict > *cap_cached) {
        int32_t *nc = realloc(*cached, sizeof *nc * (n_ids + (size_t)o->n_predict));
        if (!nc)
            goto out;
        *cached = nc;
        *cap_cached = n_ids + (size_t)o->n_predict;
    }
    memcpy(*cached, ids, sizeof *ids * n_ids);
    *n_cached = n_ids;

    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s->model, &info);
    struct minfer_detok *dt = minfer_detok_new(s->tok, false);
    char *reply = malloc(1);
    size_t rlen = 0;
    char buf[1024];
    size_t nb;
    if (!dt || !reply)
        goto out_gen;
    reply[0] = 0;
    for (int32_t k = 0; k < o->n_predict; k++) {
        int32_t id;
        if (minfer_sampler_sample(smp, minfer_ctx_logits(s->ctx, -1), info.n_vocab, &id) != MINFER_OK)
            goto out_gen;
        minfer_sampler_accept(smp, id);
        if (minfer_tokenizer_is_eog(s->tok, id))
            break;
        nb = 0;
        if (minfer_detok_push(dt, id, buf, sizeof buf, &nb) != MINFER_OK)
            nb = 0;
        size_t extra = 0;
        if (k + 1 == o->n_predict &&
            minfer_detok_flush(dt, buf + nb, sizeof buf - nb, &extra) == MINFER_OK)
            nb += extra;
        if (nb) {
            char *nr = realloc(reply, rlen + nb + 1);
            if (!nr)
                goto out_gen;
            reply = nr;
            memcpy(reply + rlen, buf, nb);
            rlen += nb;
            reply[rlen] = 0;
            fwrite(buf, 1, nb, stdout);
            fflush(stdout);
        }
        if (minfer_ctx_n_past(s->ctx) >= minfer_ctx_n_ctx(s->ctx)) {
            fprintf(stderr, "\n[chat: the context is full (%d tokens); use a larger -c]\n",
                    minfer_ctx_n_ctx(s->ctx));
            break;
        }
        if (minfer_ctx_decode(s->ctx, &id, 1, 0) != MINFER_OK) {
            fprintf(stderr, "\nminfer chat: %s\n", minfer_ctx_last_error(s->ctx));
            goto out_gen;
        }
        (*cached)[(*n_cached)++] = id;
    }
    printf("\n");
    fflush(stdout);
    rc = conv_add(c, "assistant", reply);
out_gen:
    free(reply);
    minfer_detok_free(dt);
out:
    free(ids);
    return rc;
}

int cmd_chat(int argc, char **argv)
{
    struct cli_opts o;
    int rc = cli_parse(argc, argv, 0, &o);
    if (rc) {
        usage(rc == 1 ? stdout : stderr);
        return rc == 1 ? 0 : 2;
    }
    struct cli_session s;
    if (cli_open("chat", &o, NULL, true, &s))
        return 1;
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    char err[256];
    minfer_status st;
    struct minfer_sampler *smp = minfer_sampler_new(&o.sp, info.n_vocab, &st, err, sizeof err);
    struct conv c = {0};
    int32_t *cached = NULL;
    size_t n_cached = 0, cap_cached = 0;
    char *line = NULL;
    size_t line_cap = 0;
    bool tty = isatty(STDIN_FILENO);
    rc = 1;
    if (!smp) {
        fprintf(stderr, "minfer chat: sampler: %s\n", err);
        goto out;
    }
    if (o.n_predict < 0)
        o.n_predict = minfer_ctx_n_ctx(s.ctx);
    if (o.system && conv_add(&c, "system", o.system))
        goto out;
    for (;;) {
        if (tty) {
            fprintf(stderr, "> ");
            fflush(stderr);
        }
        ssize_t n = getline(&line, &line_cap, stdin);
        if (n <= 0)
            break;
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        if (n == 0)
            break;
        if (conv_add(&c, "user", line) || turn(&o, &s, smp, &c, &cached, &n_cached, &cap_cached))
            goto out;
    }
    rc = 0;
out:
    for (size_t i = 0; i < c.n; i++)
        free((char *)c.msgs[i].content);
    free(c.msgs);
    free(line);
    free(cached);
    minfer_sampler_free(smp);
    cli_close(&s);
    return rc;
}
