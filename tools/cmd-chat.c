/*
 * cmd-chat.c — minfer chat: multi-turn conversation on stdin/stdout that
 * keeps the KV cache between turns. Each turn renders the whole
 * conversation with the chat template, keeps the cached tokens it shares
 * with that rendering and prefills only the rest, so earlier turns are
 * never recomputed. When the conversation outgrows the context, the
 * oldest turns are dropped (the system prompt stays) and the cache is
 * recomputed from the first changed token. On a terminal it prompts with
 * "> "; otherwise every input line is one user turn and every reply is
 * printed on its own line.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-model.h"
#include "commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer chat -m MODEL [--system TEXT] [options]\n"
               "Type a message and Enter. An empty line does nothing; a line of \"\"\" starts\n"
               "and ends a multi-line message (\"\"\"text works too).\n"
               "  /clear        forget the conversation (the system prompt stays)\n"
               "  /save FILE    save the conversation and its KV cache (a session file)\n"
               "  /load FILE    resume a saved conversation (same model and cache types)\n"
               "  /bye          leave (also Ctrl-D, or Ctrl-C at the prompt)\n"
               "  /help         these commands\n"
               "Ctrl-C during a reply stops it and returns to the prompt; a second Ctrl-C\n"
               "leaves. A full context drops the oldest turns (the system prompt stays).\n");
    cli_print_options(f, CMD_CHAT);
}

struct conv {
    struct minfer_chat_msg *msgs;
    size_t n, cap;
    bool has_system;
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

/* Removes messages [from, from + k). */
static void conv_drop(struct conv *c, size_t from, size_t k)
{
    for (size_t i = from; i < from + k; i++)
        free((char *)c->msgs[i].content);
    memmove(c->msgs + from, c->msgs + from + k, sizeof *c->msgs * (c->n - from - k));
    c->n -= k;
}

struct chat {
    struct cli_opts *o;
    struct cli_session *s;
    struct minfer_sampler *smp;
    struct conv c;
    int32_t *cached;      /* the ids in the KV cache, in order */
    size_t n_cached, cap_cached;
    int32_t n_vocab;
};

static bool cached_reserve(struct chat *ch, size_t n)
{
    if (n <= ch->cap_cached)
        return true;
    int32_t *nc = realloc(ch->cached, sizeof *nc * n);
    if (!nc)
        return false;
    ch->cached = nc;
    ch->cap_cached = n;
    return true;
}

/* The conversation as ids, dropping the oldest turns while it leaves less
 * than `reserve` cells for the reply. 0, 1 on error (printed). */
static int render_fitting(struct chat *ch, int32_t **ids, size_t *n_ids)
{
    int32_t n_ctx = minfer_ctx_n_ctx(ch->s->ctx);
    int32_t want = ch->o->n_predict > 0 ? ch->o->n_predict : n_ctx / 4;
    if (want > n_ctx / 2)
        want = n_ctx / 2;
    size_t dropped = 0;
    for (;;) {
        char *text = NULL;
        size_t len = 0;
        if (cli_chat_render("chat", ch->o, ch->s, ch->c.msgs, ch->c.n, &text, &len) ||
            cli_tokenize("chat", ch->s, text, len, true, ids, n_ids)) {
            free(text);
            return 1;
        }
        free(text);
        if ((int32_t)*n_ids + want <= n_ctx)
            break;
        size_t first = ch->c.has_system ? 1 : 0;
        if (ch->c.n - first <= 1) { /* only the new message left: it alone is too long */
            fprintf(stderr, "[chat: this message takes %zu tokens; with room for a reply it "
                    "does not fit the %d-token context (-c)]\n", *n_ids, n_ctx);
            free(*ids);
            *ids = NULL;
            conv_drop(&ch->c, ch->c.n - 1, 1);
            return 2;
        }
        free(*ids);
        *ids = NULL;
        /* drop the oldest exchange: a user turn and the reply after it */
        size_t k = ch->c.n - first >= 3 && !strcmp(ch->c.msgs[first + 1].role, "assistant") ? 2 : 1;
        conv_drop(&ch->c, first, k);
        dropped += k;
    }
    if (dropped)
        fprintf(stderr, "[chat: the context is full: dropped the %zu oldest message%s%s]\n",
                dropped, dropped == 1 ? "" : "s",
                ch->c.has_system ? ", kept the system prompt" : "");
    return 0;
}

/* One assistant turn: prefill what the cache lacks, then generate. */
static int turn(struct chat *ch)
{
    const struct cli_opts *o = ch->o;
    struct cli_session *s = ch->s;
    size_t n_ids = 0;
    int32_t *ids = NULL;
    int rc = render_fitting(ch, &ids, &n_ids);
    if (rc)
        return rc == 2 ? 0 : 1;
    size_t keep = 0;
    while (keep < ch->n_cached && keep < n_ids && ch->cached[keep] == ids[keep])
        keep++;
    if (keep == n_ids) /* everything cached: recompute the last token for its logits */
        keep--;
    int32_t n_ctx = minfer_ctx_n_ctx(s->ctx);
    rc = 1;
    if (!cached_reserve(ch, (size_t)n_ctx + 1))
        goto out;
    if (minfer_ctx_truncate(s->ctx, (int32_t)keep) != MINFER_OK)
        goto fail;
    ch->n_cached = keep;
    if (minfer_ctx_decode(s->ctx, ids + keep, (int32_t)(n_ids - keep), 0) != MINFER_OK) {
        /* the cache holds the chunks that completed */
        int32_t past = minfer_ctx_n_past(s->ctx);
        memcpy(ch->cached, ids, sizeof *ids * (size_t)past);
        ch->n_cached = (size_t)past;
        if (cli_sigint) {
            cli_sigint = 0;
            fprintf(stderr, "\n[chat: interrupted]\n");
            conv_drop(&ch->c, ch->c.n - 1, 1); /* the message was not answered */
            rc = 0;
            goto out;
        }
        goto fail;
    }
    memcpy(ch->cached, ids, sizeof *ids * n_ids);
    ch->n_cached = n_ids;
    fprintf(stderr, "[chat: %zu cached tokens reused, %zu prefilled]\n", keep, n_ids - keep);

    struct minfer_detok *dt = minfer_detok_new(s->tok, false);
    char *buf = dt ? malloc(minfer_detok_max_out(dt)) : NULL;
    char *reply = malloc(1);
    size_t rlen = 0, printed = 0, nb, slen = cli_stop_max_len(o);
    if (!dt || !buf || !reply)
        goto out_gen;
    reply[0] = 0;
    int32_t limit = o->n_predict < 0 ? n_ctx : o->n_predict;
    for (int32_t k = 0; k < limit; k++) {
        if (cli_sigint) {
            cli_sigint = 0;
            fprintf(stderr, "\n[chat: reply interrupted]");
            break;
        }
        int32_t id;
        if (minfer_sampler_sample(ch->smp, minfer_ctx_logits(s->ctx, -1), ch->n_vocab, &id) !=
            MINFER_OK)
            goto out_gen;
        minfer_sampler_accept(ch->smp, id);
        if (minfer_tokenizer_is_eog(s->tok, id))
            break;
        nb = 0;
        if (minfer_detok_push(dt, id, buf, minfer_detok_max_out(dt), &nb) != MINFER_OK)
            nb = 0;
        if (nb) {
            char *nr = realloc(reply, rlen + nb + 1);
            if (!nr)
                goto out_gen;
            reply = nr;
            memcpy(reply + rlen, buf, nb);
            rlen += nb;
            reply[rlen] = 0;
        }
        size_t upto = rlen;
        bool stop = false;
        if (o->n_stop) {
            long at = cli_stop_find(o, reply, rlen, printed > slen ? printed - slen : 0);
            if (at >= 0) {
                rlen = (size_t)at;
                reply[rlen] = 0;
                upto = rlen;
                stop = true;
            } else {
                upto = rlen - cli_stop_hold(o, reply, rlen);
            }
        }
        if (upto > printed) {
            fwrite(reply + printed, 1, upto - printed, stdout);
            fflush(stdout);
            printed = upto;
        }
        if (stop)
            break;
        if (minfer_ctx_n_past(s->ctx) >= n_ctx) {
            fprintf(stderr, "\n[chat: the context is full (%d tokens); the next message drops "
                    "the oldest turns]", n_ctx);
            break;
        }
        if (minfer_ctx_decode(s->ctx, &id, 1, 0) != MINFER_OK) {
            if (cli_sigint) {
                cli_sigint = 0;
                fprintf(stderr, "\n[chat: reply interrupted]");
                break;
            }
            fprintf(stderr, "\nminfer chat: %s\n", minfer_ctx_last_error(s->ctx));
            goto out_gen;
        }
        ch->cached[ch->n_cached++] = id;
    }
    if (minfer_detok_flush(dt, buf, minfer_detok_max_out(dt), &nb) == MINFER_OK && nb &&
        printed == rlen) {
        char *nr = realloc(reply, rlen + nb + 1);
        if (nr) {
            reply = nr;
            memcpy(reply + rlen, buf, nb);
            rlen += nb;
            reply[rlen] = 0;
        }
    }
    if (rlen > printed)
        fwrite(reply + printed, 1, rlen - printed, stdout);
    printf("\n");
    fflush(stdout);
    rc = conv_add(&ch->c, "assistant", reply);
out_gen:
    free(reply);
    free(buf);
    minfer_detok_free(dt);
    goto out;
fail:
    fprintf(stderr, "minfer chat: %s\n", minfer_ctx_last_error(s->ctx));
out:
    free(ids);
    return rc;
}

/* ---- sessions: the conversation's tokens and KV cells in a file ---- */

/* Rebuilds the messages from the text of a session's tokens (a session
 * file keeps tokens, not messages), in the model's chat format. */
static int conv_add_parsed(const char *role, const char *content, size_t len, bool complete,
                           void *user)
{
    (void)complete; /* a reply cut short still is what the cache holds */
    struct conv *c = user;
    char *text = strndup(content, len);
    if (!text || conv_add(c, role, text)) {
        free(text);
        return 1;
    }
    free(text);
    if (c->n == 1 && !strcmp(role, "system"))
        c->has_system = true;
    return 0;
}

static int chat_save(struct chat *ch, const char *path)
{
    if (minfer_ctx_seq_save(ch->s->ctx, 0, path, ch->cached, (int32_t)ch->n_cached) !=
        MINFER_OK) {
        fprintf(stderr, "minfer chat: %s\n", minfer_ctx_last_error(ch->s->ctx));
        return 1;
    }
    fprintf(stderr, "[chat: saved %zu tokens to %s]\n", ch->n_cached, path);
    return 0;
}

/* Replaces the conversation and the cache with the file's; on failure
 * both are unchanged and the error is printed. */
static int chat_load(struct chat *ch, const char *path)
{
    int32_t n_ctx = minfer_ctx_n_ctx(ch->s->ctx), n = 0;
    if (!cached_reserve(ch, (size_t)n_ctx + 1))
        return 1;
    int32_t *ids = malloc(sizeof *ids * ((size_t)n_ctx + 1));
    if (!ids) {
        fprintf(stderr, "minfer chat: out of memory\n");
        return 1;
    }
    if (minfer_ctx_seq_load(ch->s->ctx, 0, path, ids, n_ctx, &n) != MINFER_OK) {
        fprintf(stderr, "minfer chat: %s\n", minfer_ctx_last_error(ch->s->ctx));
        free(ids);
        return 1;
    }
    size_t len = 0;
    char *text = NULL;
    struct conv c = {0};
    if (minfer_detokenize(ch->s->tok, ids, (size_t)n, true, NULL, 0, &len) == MINFER_ERR_RANGE &&
        (text = malloc(len + 1)) &&
        minfer_detokenize(ch->s->tok, ids, (size_t)n, true, text, len, &len) == MINFER_OK) {
        text[len] = 0;
        /* out of memory here leaves fewer messages: the next turn then
         * renders less than the cache holds and recomputes from there */
        (void)minfer_chat_parse(minfer_tokenizer_chat_format(ch->s->tok), text, len,
                                conv_add_parsed, &c, NULL, 0);
    }
    free(text);
    /* the file's conversation replaces this one (the cache already did) */
    for (size_t i = 0; i < ch->c.n; i++)
        free((char *)ch->c.msgs[i].content);
    free(ch->c.msgs);
    ch->c = c;
    memcpy(ch->cached, ids, sizeof *ids * (size_t)n);
    ch->n_cached = (size_t)n;
    free(ids);
    if (ch->o->system) { /* --system given now wins over the saved one */
        if (ch->c.has_system)
            conv_drop(&ch->c, 0, 1);
        if (conv_add(&ch->c, "system", ch->o->system))
            return 1;
        struct minfer_chat_msg sys = ch->c.msgs[ch->c.n - 1];
        memmove(ch->c.msgs + 1, ch->c.msgs, sizeof *ch->c.msgs * (ch->c.n - 1));
        ch->c.msgs[0] = sys;
        ch->c.has_system = true;
    }
    fprintf(stderr, "[chat: loaded %d tokens (%zu messages) from %s]\n", n, ch->c.n, path);
    return 0;
}

/* Reads one message: a line, or the lines between """ marks. NULL at the
 * end of input or on Ctrl-C at the prompt (*interrupted set). */
static char *read_message(bool tty, bool *interrupted)
{
    char *line = NULL, *msg = NULL;
    size_t cap = 0, mlen = 0;
    bool multi = false;
    *interrupted = false;
    for (;;) {
        if (tty) {
            fprintf(stderr, multi ? ". " : "> ");
            fflush(stderr);
        }
        errno = 0;
        ssize_t n = getline(&line, &cap, stdin);
        if (n < 0) {
            *interrupted = errno == EINTR || cli_sigint;
            free(line);
            if (multi && msg && !*interrupted)
                return msg; /* end of input closes an open block */
            free(msg);
            return NULL;
        }
        while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
            line[--n] = 0;
        const char *part = line;
        bool close = false;
        if (!multi) {
            if (!strncmp(line, "\"\"\"", 3)) {
                multi = true;
                part = line + 3;
                size_t pl = strlen(part);
                if (pl >= 3 && !strcmp(part + pl - 3, "\"\"\"")) { /* """one line""" */
                    line[n - 3] = 0;
                    close = true;
                }
                if (!*part && !close)
                    continue;
            } else {
                free(msg);
                return line; /* one line; "" is handled by the caller */
            }
        } else if (n >= 3 && !strcmp(line + n - 3, "\"\"\"")) {
            line[n - 3] = 0;
            close = true;
        }
        size_t pl = strlen(part);
        if (close && !pl && msg) { /* a closing """ on its own line adds nothing */
            free(line);
            return msg;
        }
        char *nm = realloc(msg, mlen + pl + 2);
        if (!nm) {
            free(msg);
            free(line);
            return NULL;
        }
        msg = nm;
        if (mlen)
            msg[mlen++] = '\n';
        memcpy(msg + mlen, part, pl);
        mlen += pl;
        msg[mlen] = 0;
        if (close) {
            free(line);
            return msg;
        }
    }
}

int cmd_chat(int argc, char **argv)
{
    struct cli_opts o;
    int rc = cli_parse(argc, argv, CMD_CHAT, &o);
    if (rc == 1) {
        usage(stdout);
        return cli_stdout_done("chat");
    }
    if (rc)
        return rc;
    cli_random_seed(&o);
    struct cli_session s;
    if (cli_open("chat", &o, NULL, true, &s))
        return 1;
    struct chat ch = {.o = &o, .s = &s};
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    ch.n_vocab = info.n_vocab;
    char err[256];
    minfer_status st;
    bool tty = isatty(STDIN_FILENO);
    rc = 1;
    if (minfer_tokenizer_chat_format(s.tok) == MINFER_CHAT_UNKNOWN) {
        fprintf(stderr, "minfer chat: %s has no chat template this build recognises; use "
                "minfer run --raw for completions\n", o.model);
        goto out;
    }
    if (cli_use_template("chat", &o, &s) < 0)
        goto out;
    if (o.repeat_last_n_ctx)
        o.sp.penalty_last_n = minfer_ctx_n_ctx(s.ctx);
    ch.smp = minfer_sampler_new(&o.sp, info.n_vocab, &st, err, sizeof err);
    if (!ch.smp) {
        fprintf(stderr, "minfer chat: sampler: %s\n", err);
        goto out;
    }
    if (o.verbose)
        fprintf(stderr, "minfer chat: seed %llu\n", (unsigned long long)o.sp.seed);
    if (o.system) {
        if (conv_add(&ch.c, "system", o.system))
            goto out;
        ch.c.has_system = true;
    }
    if (o.session && access(o.session, F_OK) == 0 && chat_load(&ch, o.session))
        goto out;
    cli_sigint_install();
    for (;;) {
        bool interrupted;
        cli_sigint = 0;
        char *msg = read_message(tty, &interrupted);
        if (!msg) {
            if (tty || interrupted)
                fputc('\n', stderr);
            break;
        }
        if (!msg[0]) { /* an empty line does nothing */
            free(msg);
            continue;
        }
        if (!strcmp(msg, "/bye") || !strcmp(msg, "/exit") || !strcmp(msg, "/quit")) {
            free(msg);
            break;
        }
        if (!strcmp(msg, "/clear")) {
            conv_drop(&ch.c, ch.c.has_system ? 1 : 0, ch.c.n - (ch.c.has_system ? 1 : 0));
            minfer_sampler_reset(ch.smp, o.sp.seed);
            fprintf(stderr, "[chat: conversation cleared]\n");
            free(msg);
            continue;
        }
        if (!strncmp(msg, "/save ", 6) || !strncmp(msg, "/load ", 6)) {
            const char *path = msg + 6 + strspn(msg + 6, " ");
            if (!*path)
                fprintf(stderr, "[chat: %.5s needs a FILE]\n", msg);
            else if (msg[1] == 's')
                chat_save(&ch, path);
            else
                chat_load(&ch, path);
            free(msg);
            continue;
        }
        if (!strcmp(msg, "/help") || !strcmp(msg, "/?")) {
            usage(stderr);
            free(msg);
            continue;
        }
        if (msg[0] == '/' && msg[1] && !strchr(msg, ' ') && strlen(msg) < 16) {
            fprintf(stderr, "[chat: unknown command %s; /help lists them]\n", msg);
            free(msg);
            continue;
        }
        int bad = conv_add(&ch.c, "user", msg);
        free(msg);
        if (bad || turn(&ch))
            goto out;
    }
    rc = cli_stdout_done("chat");
    if (o.session && chat_save(&ch, o.session))
        rc = 1;
out:
    cli_sigint_restore();
    for (size_t i = 0; i < ch.c.n; i++)
        free((char *)ch.c.msgs[i].content);
    free(ch.c.msgs);
    free(ch.cached);
    minfer_sampler_free(ch.smp);
    cli_close(&s);
    return rc;
}
