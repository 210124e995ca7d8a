/*
 * tokenizer-decode.c — token ids to text: the one-shot detokenizer and the
 * streaming one that holds back an incomplete UTF-8 sequence until the
 * next token completes it.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "tokenizer.h"

/* ---- decode ---- */

/* Output sink that counts what it could not store. */
struct sink {
    char *out;
    size_t cap, n;
};

static void put(struct sink *k, const void *b, size_t n)
{
    if (k->n < k->cap) {
        size_t m = k->cap - k->n < n ? k->cap - k->n : n;
        memcpy(k->out + k->n, b, m);
    }
    k->n += n;
}

/* Decodes held[nh] + b[n] lossily into k; an incomplete tail is kept in
 * held (<= 3 bytes) unless final, when it becomes U+FFFD. */
static void decode_bytes(uint8_t *held, size_t *nh, const char *b, size_t n, bool final,
                         struct sink *k)
{
    static const char repl[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    uint8_t buf[8];
    size_t i = 0;
    uint32_t cp;
    /* first finish the held sequence with up to 3 new bytes */
    while (*nh) {
        size_t m = *nh;
        memcpy(buf, held, m);
        size_t take = n - i < 4 - m ? n - i : 4 - m;
        memcpy(buf + m, b + i, take);
        int r = tok_utf8_next(buf, m + take, &cp);
        if (r == 0) { /* still incomplete: everything was absorbed */
            if (!final) {
                memcpy(held, buf, m + take);
                *nh = m + take;
                return;
            }
            put(k, repl, 3);
            *nh = 0;
            i += take;
            break;
        }
        size_t used = r > 0 ? (size_t)r : (size_t)-r;
        if (r > 0)
            put(k, buf, used);
        else
            put(k, repl, 3);
        /* bytes of buf past used that came from held go back to held */
        if (used < m) {
            memmove(held, held + used, m - used);
            *nh = m - used;
        } else {
            i += used - m;
            *nh = 0;
        }
    }
    const uint8_t *u = (const uint8_t *)b;
    size_t run = i;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int r = tok_utf8_next(u + i, n - i, &cp);
        if (r > 0) {
            i += (size_t)r;
            continue;
        }
        put(k, b + run, i - run);
        if (r < 0) {
            put(k, repl, 3);
            i += (size_t)-r;
        } else {
            if (final) {
                put(k, repl, 3);
            } else {
                memcpy(held, u + i, n - i);
                *nh = n - i;
            }
            i = n;
        }
        run = i;
    }
    put(k, b + run, i - run);
}

/* One id into the sink, with held partial bytes in held[nh]. */
static minfer_status decode_one(const struct minfer_tokenizer *tok, int32_t id,
                                bool render_special, uint8_t *held, size_t *nh, struct sink *k)
{
    if (id < 0 || id >= tok->n_vocab)
        return MINFER_ERR_INVALID_ARG;
    uint8_t t = tok->types[id];
    if (t == MINFER_TOKEN_CONTROL && !render_special)
        return MINFER_OK;
    size_t n;
    const char *b = minfer_token_bytes(tok, id, &n);
    decode_bytes(held, nh, b, n, false, k);
    return MINFER_OK;
}

minfer_status minfer_detokenize(const struct minfer_tokenizer *tok, const int32_t *ids, size_t n,
                                bool render_special, char *out, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || (!ids && n) || (!out && cap))
        return MINFER_ERR_INVALID_ARG;
    struct sink k = {out, cap, 0};
    uint8_t held[8];
    size_t nh = 0;
    /* SentencePiece prepended a space when encoding: the leading space of
     * the first piece shown is not part of the text (as Hugging Face
     * decodes). A control token shown first (render_special) comes before
     * that space, which then stays, as in llama.cpp. */
    bool strip = tok->strip_space_prefix;
    for (size_t i = 0; i < n; i++) {
        bool ctl = ids[i] >= 0 && ids[i] < tok->n_vocab &&
                   tok->types[ids[i]] == MINFER_TOKEN_CONTROL;
        if (strip && ids[i] >= 0 && ids[i] < tok->n_vocab && (!ctl || render_special)) {
            strip = false;
            size_t bn;
            const char *b = minfer_token_bytes(tok, ids[i], &bn);
            if (!ctl && bn && b[0] == ' ') {
                decode_bytes(held, &nh, b + 1, bn - 1, false, &k);
                continue;
            }
        }
        minfer_status st = decode_one(tok, ids[i], render_special, held, &nh, &k);
        if (st != MINFER_OK)
            return st;
    }
    decode_bytes(held, &nh, "", 0, true, &k);
    *n_out = k.n;
    return k.n > cap ? MINFER_ERR_RANGE : MINFER_OK;
}

struct minfer_detok {
    char err[128]; /* minfer_detok_last_error */
    const struct minfer_tokenizer *tok;
    bool render_special;
    uint8_t held[8];
    size_t nh;
};

struct minfer_detok *minfer_detok_new(const struct minfer_tokenizer *tok, bool render_special)
{
    if (!tok)
        return NULL;
    struct minfer_detok *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->tok = tok;
    d->render_special = render_special;
    return d;
}

void minfer_detok_free(struct minfer_detok *d) { free(d); }
void minfer_detok_reset(struct minfer_detok *d) { d->nh = 0; }

size_t minfer_detok_max_out(const struct minfer_detok *d)
{
    return 3 * (d->tok->max_bytes + 4); /* every byte may become a 3-byte U+FFFD */
}

minfer_status minfer_detok_push(struct minfer_detok *d, int32_t id, char *out, size_t cap,
                                size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!d || !n_out || (!out && cap))
        return MINFER_ERR_INVALID_ARG;
    d->err[0] = 0;
    uint8_t held[8];
    size_t nh = d->nh;
    memcpy(held, d->held, sizeof held);
    struct sink k = {out, cap, 0};
    minfer_status st = decode_one(d->tok, id, d->render_special, held, &nh, &k);
    if (st != MINFER_OK)
        return errf(d->err, sizeof d->err, st, "detok: token id %d is outside the vocabulary "
                    "(0..%d)", id, d->tok->n_vocab - 1);
    *n_out = k.n;
    if (k.n > cap)
        return errf(d->err, sizeof d->err, MINFER_ERR_RANGE, "detok: %zu bytes of room, %zu "
                    "needed (minfer_detok_max_out always suffices)", cap, k.n);
    memcpy(d->held, held, sizeof held);
    d->nh = nh;
    return MINFER_OK;
}

minfer_status minfer_detok_flush(struct minfer_detok *d, char *out, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!d || !n_out || (!out && cap))
        return MINFER_ERR_INVALID_ARG;
    struct sink k = {out, cap, 0};
    uint8_t held[8];
    size_t nh = d->nh;
    memcpy(held, d->held, sizeof held);
    decode_bytes(held, &nh, "", 0, true, &k);
    *n_out = k.n;
    d->err[0] = 0;
    if (k.n > cap)
        return errf(d->err, sizeof d->err, MINFER_ERR_RANGE, "detok: %zu bytes of room, %zu "
                    "needed (minfer_detok_max_out always suffices)", cap, k.n);
    d->nh = 0;
    return MINFER_OK;
}

const char *minfer_detok_last_error(const struct minfer_detok *d)
{
    return d ? d->err : "";
}
