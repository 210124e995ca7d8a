/*
 * tokenizer-encode.c — text to token ids (minfer_tokenize): repair
 * invalid UTF-8, split out special tokens, per plain segment NFC (when the
 * pre-tokenizer asks), regex pre-tokenizer split, and per-piece
 * vocabulary encode with a per-call word cache.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer.h"
#include "runtime/plugin.h"

/* ---- helpers ---- */

minfer_status tok_ids_push(struct tok_ids *ids, int32_t id)
{
    if (ids->n == ids->cap) {
        size_t cap = ids->cap ? ids->cap * 2 : 64;
        if (cap > SIZE_MAX / sizeof *ids->v)
            return MINFER_ERR_NO_MEMORY;
        int32_t *v = realloc(ids->v, cap * sizeof *v);
        if (!v)
            return MINFER_ERR_NO_MEMORY;
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return MINFER_OK;
}

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a 64 */
    for (size_t i = 0; i < n; i++) {
        h ^= s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 29);
}

/* ---- encode ---- */

/* Per-call memo of encoded pieces: natural text repeats its words. */
struct word_cache {
    struct wc_slot {
        uint64_t h;
        uint32_t key_off, key_len, ids_off, n_ids;
    } *slots;
    size_t mask, used;
    char *keys;
    size_t keys_n, keys_cap;
    struct tok_ids ids;
};

#define WC_MAX_KEY 128

static minfer_status wc_grow(struct word_cache *wc)
{
    size_t cap = wc->slots ? (wc->mask + 1) * 2 : 4096;
    struct wc_slot *ns = calloc(cap, sizeof *ns);
    if (!ns)
        return MINFER_ERR_NO_MEMORY;
    for (size_t i = 0; wc->slots && i <= wc->mask; i++) {
        if (!wc->slots[i].key_len)
            continue;
        size_t j = wc->slots[i].h & (cap - 1);
        while (ns[j].key_len)
            j = (j + 1) & (cap - 1);
        ns[j] = wc->slots[i];
    }
    free(wc->slots);
    wc->slots = ns;
    wc->mask = cap - 1;
    return MINFER_OK;
}

static void wc_free(struct word_cache *wc)
{
    free(wc->slots);
    free(wc->keys);
    free(wc->ids.v);
}

/* Encodes one piece through the cache, appending to out. */
static minfer_status encode_piece(const struct minfer_tokenizer *tok, struct word_cache *wc,
                                  const char *s, size_t n, struct tok_ids *out)
{
    minfer_status st;
    if (n == 0)
        return MINFER_OK;
    if (n > WC_MAX_KEY || wc->ids.n > UINT32_MAX / 2 || wc->keys_n > UINT32_MAX / 2)
        return tok->ops->encode_piece(tok, s, n, out);
    if (!wc->slots && (st = wc_grow(wc)) != MINFER_OK)
        return st;
    uint64_t h = hash_bytes(s, n);
    size_t j = h & wc->mask;
    while (wc->slots[j].key_len) {
        struct wc_slot *e = &wc->slots[j];
        if (e->h == h && e->key_len == n && !memcmp(wc->keys + e->key_off, s, n)) {
            for (uint32_t k = 0; k < e->n_ids; k++)
                if ((st = tok_ids_push(out, wc->ids.v[e->ids_off + k])) != MINFER_OK)
                    return st;
            return MINFER_OK;
        }
        j = (j + 1) & wc->mask;
    }
    size_t first = out->n;
    if ((st = tok->ops->encode_piece(tok, s, n, out)) != MINFER_OK)
        return st;
    /* remember it */
    if (wc->keys_n + n > wc->keys_cap) {
        size_t cap = wc->keys_cap * 2 + n + 4096;
        char *k = realloc(wc->keys, cap);
        if (!k)
            return MINFER_ERR_NO_MEMORY;
        wc->keys = k;
        wc->keys_cap = cap;
    }
    struct wc_slot e = {h, (uint32_t)wc->keys_n, (uint32_t)n, (uint32_t)wc->ids.n,
                        (uint32_t)(out->n - first)};
    memcpy(wc->keys + wc->keys_n, s, n);
    wc->keys_n += n;
    for (size_t k = first; k < out->n; k++)
        if ((st = tok_ids_push(&wc->ids, out->v[k])) != MINFER_OK)
            return st;
    wc->slots[j] = e;
    if (++wc->used * 2 > wc->mask)
        return wc_grow(wc);
    return MINFER_OK;
}

struct split_ctx {
    const struct minfer_tokenizer *tok;
    struct word_cache *wc;
    struct tok_ids *out;
    pcre2_match_data *md[TOK_MAX_REGEX];
    pcre2_match_context *mc;
};

/* PCRE2's default match limit (10 million backtracking steps per match
 * call) is hit by a long whitespace run: "[ws]*[\r\n]+" scans the whole run
 * and backs off it before "[ws]+(?!...)" takes it, about two steps per byte
 * (a 10-million-space run failed with "match limit exceeded"). Every
 * alternative of the pre-tokenizer regexes is a repeat of one character
 * class, so the steps of one call are bounded by a small multiple of the
 * bytes left; the limit is the largest PCRE2 takes, so any valid UTF-8
 * tokenizes and the time stays linear in the input (test-tokenizer times a
 * 10-million-space run). The heap limit covers the interpreter when JIT is
 * not available. */
#define MATCH_LIMIT UINT32_MAX
#define HEAP_LIMIT_KIB (4u << 20) /* 4 GiB */

/* Splits s[n] by regex level lv (matches and the gaps between them are
 * pieces) and hands each piece to the next level, or to the vocabulary. */
static minfer_status split(struct split_ctx *c, int lv, const char *s, size_t n)
{
    if (n == 0)
        return MINFER_OK;
    if (lv == c->tok->n_re)
        return encode_piece(c->tok, c->wc, s, n, c->out);
    const pcre2_code *re = c->tok->re[lv];
    pcre2_match_data *md = c->md[lv];
    size_t off = 0;
    minfer_status st;
    while (off < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, c->mc);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            if (pcre2_get_error_message(rc, msg, sizeof msg) < 0)
                snprintf((char *)msg, sizeof msg, "error %d", rc);
            plugin_log(MINFER_LOG_ERROR,
                       "tokenizer: pre-tokenizer regex %d failed at byte %zu of a %zu-byte "
                       "piece: PCRE2: %s",
                       lv, off, n, (const char *)msg);
            return MINFER_ERR_STATE;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > off && (st = split(c, lv + 1, s + off, ms - off)) != MINFER_OK)
            return st;
        if (me == ms) { /* empty match: step one character, it joins the next gap */
            size_t k = ms + 1;
            while (k < n && ((uint8_t)s[k] & 0xC0) == 0x80)
                k++;
            if ((st = split(c, lv + 1, s + ms, k - ms)) != MINFER_OK)
                return st;
            off = k;
            continue;
        }
        if ((st = split(c, lv + 1, s + ms, me - ms)) != MINFER_OK)
            return st;
        off = me;
    }
    return off < n ? split(c, lv + 1, s + off, n - off) : MINFER_OK;
}

/* Encodes plain text (no special tokens) s[n], valid UTF-8. */
static minfer_status encode_plain(struct split_ctx *c, const char *s, size_t n)
{
    if (n == 0)
        return MINFER_OK;
    if (!c->tok->pretok->nfc)
        return split(c, 0, s, n);
    const char *t;
    size_t tn;
    char *owned;
    minfer_status st = tok_nfc(s, n, &t, &tn, &owned);
    if (st == MINFER_OK)
        st = split(c, 0, t, tn);
    free(owned);
    return st;
}

/* Longest special token at s[0..n) allowed by parse_special, or -1. */
static int32_t match_special(const struct minfer_tokenizer *tok, const char *s, size_t n,
                             bool parse_special)
{
    uint8_t b = (uint8_t)s[0];
    for (uint32_t k = tok->first[b]; k < tok->first[b + 1]; k++) {
        int32_t id = tok->special[k];
        if (!parse_special && tok->types[id] == MINFER_TOKEN_CONTROL)
            continue;
        size_t l = tok->text_off[id + 1] - tok->text_off[id] - 1;
        if (l <= n && !memcmp(tok->text + tok->text_off[id], s, l))
            return id;
    }
    return -1;
}

static minfer_status encode_all(const struct minfer_tokenizer *tok, const char *s, size_t n,
                                bool parse_special, struct tok_ids *out)
{
    struct word_cache wc = {0};
    struct split_ctx c = {tok, &wc, out, {0}, NULL};
    minfer_status st = MINFER_OK;
    if (!(c.mc = pcre2_match_context_create(NULL))) {
        st = MINFER_ERR_NO_MEMORY;
        goto out;
    }
    pcre2_set_match_limit(c.mc, MATCH_LIMIT);
    pcre2_set_heap_limit(c.mc, HEAP_LIMIT_KIB);
    for (int i = 0; i < tok->n_re; i++)
        if (!(c.md[i] = pcre2_match_data_create_from_pattern(tok->re[i], NULL))) {
            st = MINFER_ERR_NO_MEMORY;
            goto out;
        }
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        if (tok->first[b] == tok->first[b + 1])
            continue;
        int32_t id = match_special(tok, s + i, n - i, parse_special);
        if (id < 0)
            continue;
        if ((st = encode_plain(&c, s + start, i - start)) != MINFER_OK)
            goto out;
        if ((st = tok_ids_push(out, id)) != MINFER_OK)
            goto out;
        i += tok->text_off[id + 1] - tok->text_off[id] - 1 - 1;
        start = i + 1;
    }
    st = encode_plain(&c, s + start, n - start);
out:
    for (int i = 0; i < tok->n_re; i++)
        pcre2_match_data_free(c.md[i]);
    pcre2_match_context_free(c.mc);
    wc_free(&wc);
    return st;
}

minfer_status minfer_tokenize(const struct minfer_tokenizer *tok, const char *text, size_t len,
                              bool parse_special, int32_t *ids, size_t cap, size_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!tok || !n_out || (!text && len) || (!ids && cap))
        return MINFER_ERR_INVALID_ARG;
    const char *s;
    size_t n;
    char *owned;
    minfer_status st = tok_utf8_repair(text ? text : "", len, &s, &n, &owned);
    if (st != MINFER_OK)
        return st;
    struct tok_ids out = {0};
    st = encode_all(tok, s, n, parse_special, &out);
    free(owned);
    if (st == MINFER_OK) {
        *n_out = out.n;
        if (out.n > cap)
            st = MINFER_ERR_RANGE;
        else if (out.n)
            memcpy(ids, out.v, out.n * sizeof *ids);
    }
    free(out.v);
    return st;
}
