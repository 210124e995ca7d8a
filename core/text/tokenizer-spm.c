/*
 * tokenizer-spm.c — the "llama" vocabulary kind: SentencePiece BPE as GGUF
 * stores it (Llama 1/2, Mistral, Gemma): pieces with scores, spaces
 * written as U+2581 "▁", bytes as <0xNN> pieces. Encoding a plain segment:
 * spaces become "▁" (and one is prepended when add_space_prefix says so),
 * the segment is split into code points, then adjacent symbols merge while
 * their concatenation is a normal piece, the highest-scoring pair first
 * (the leftmost among equal scores), through a binary heap of candidate
 * pairs; a symbol left that is no piece is spelled with its bytes' <0xNN>
 * pieces (byte fallback), or <unk> without them. That is SentencePiece's
 * BPE encoder and llama.cpp's; user-defined and control tokens never take
 * part in merging (tokenizer-encode.c splits them out first).
 * Decoding maps "▁" back to a space and a byte piece to its byte;
 * tokenizer-decode.c joins bytes into UTF-8.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "tokenizer.h"

#define SPACE_MARK "\xE2\x96\x81" /* U+2581 */

/* ---- state ---- */

struct spm {
    int32_t *slot;   /* string -> id (+1) of normal pieces; 0 = empty */
    size_t mask;
    float *score;    /* [n_vocab] */
    int32_t byte_id[256]; /* <0xNN> piece of each byte, -1 when absent */
    int32_t unk;
    bool space_prefix;
    const struct minfer_tokenizer *tok;
};

static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return h ^ (h >> 31);
}

static int32_t find_piece(const struct spm *p, const char *s, size_t n)
{
    size_t j = hash_str(s, n) & p->mask;
    while (p->slot[j]) {
        size_t l;
        int32_t id = p->slot[j] - 1;
        const char *t = minfer_token_text(p->tok, id, &l);
        if (l == n && !memcmp(t, s, n))
            return id;
        j = (j + 1) & p->mask;
    }
    return -1;
}

static void spm_free(void *v)
{
    struct spm *p = v;
    if (!p)
        return;
    free(p->slot);
    free(p->score);
    free(p);
}

/* Bytes of piece id for decoding: "▁" -> ' ', <0xNN> -> the byte. */
static minfer_status piece_bytes(struct minfer_tokenizer *tok, struct spm *p, int32_t id,
                                 char *buf)
{
    size_t n;
    const char *t = minfer_token_text(tok, id, &n);
    switch (tok->types[id]) {
    case MINFER_TOKEN_BYTE: {
        unsigned v;
        char tail;
        if (n != 6 || sscanf(t, "<0x%2X%c", &v, &tail) != 2 || tail != '>')
            return MINFER_ERR_FORMAT;
        if (p->byte_id[v] < 0)
            p->byte_id[v] = id;
        buf[0] = (char)v;
        return tok_append_token_bytes(tok, buf, 1);
    }
    case MINFER_TOKEN_UNKNOWN: /* what llama.cpp prints for <unk>: U+2585 */
        return tok_append_token_bytes(tok, "\xE2\x96\x85", 3);
    case MINFER_TOKEN_CONTROL:
        return tok_append_token_bytes(tok, t, n);
    case MINFER_TOKEN_UNUSED:
        return tok_append_token_bytes(tok, "", 0);
    default: {
        size_t o = 0;
        for (size_t i = 0; i < n;) {
            if (n - i >= 3 && !memcmp(t + i, SPACE_MARK, 3)) {
                buf[o++] = ' ';
                i += 3;
            } else {
                buf[o++] = t[i++];
            }
        }
        return tok_append_token_bytes(tok, buf, o);
    }
    }
}

static minfer_status spm_init(struct minfer_tokenizer *tok, const struct tok_source *src,
                              char *err, size_t err_len)
{
    if (!src->scores)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "tokenizer.ggml.scores is missing; a SentencePiece vocabulary merges by "
                    "piece score");
    struct spm *p = calloc(1, sizeof *p);
    if (!p)
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
    tok->vocab = p;
    p->tok = tok;
    p->unk = -1;
    p->space_prefix = src->add_space_prefix != 0; /* absent (-1): on, as llama.cpp */
    tok->strip_space_prefix = p->space_prefix;
    size_t cap = 16, maxlen = 0;
    while (cap < (size_t)tok->n_vocab * 2)
        cap <<= 1;
    p->mask = cap - 1;
    p->slot = calloc(cap, sizeof *p->slot);
    p->score = malloc((size_t)tok->n_vocab * sizeof *p->score);
    for (int32_t i = 0; i < tok->n_vocab; i++)
        maxlen = src->token_lens[i] > maxlen ? src->token_lens[i] : maxlen;
    char *buf = malloc(maxlen + 1);
    if (!p->slot || !p->score || !buf) {
        free(buf);
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
    }
    memcpy(p->score, src->scores, (size_t)tok->n_vocab * sizeof *p->score);
    for (int c = 0; c < 256; c++)
        p->byte_id[c] = -1;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        minfer_status st = piece_bytes(tok, p, i, buf);
        if (st == MINFER_ERR_FORMAT) {
            free(buf);
            return errf(err, err_len, st, "token %d is a byte piece but reads '%s', not <0xNN>",
                        i, minfer_token_text(tok, i, NULL));
        }
        if (st != MINFER_OK) {
            free(buf);
            return errf(err, err_len, st, "out of memory");
        }
        if (tok->types[i] == MINFER_TOKEN_UNKNOWN && p->unk < 0)
            p->unk = i;
        if (tok->types[i] != MINFER_TOKEN_NORMAL)
            continue;
        size_t n;
        const char *t = minfer_token_text(tok, i, &n);
        size_t j = hash_str(t, n) & p->mask;
        while (p->slot[j]) {
            if (!memcmp(minfer_token_text(tok, p->slot[j] - 1, NULL), t, n + 1))
                break; /* a duplicate piece: the first id wins */
            j = (j + 1) & p->mask;
        }
        if (!p->slot[j])
            p->slot[j] = i + 1;
    }
    free(buf);
    return MINFER_OK;
}

/* ---- encoding ---- */

struct sym {
    int32_t prev, next;
    uint32_t off, len; /* len 0: merged into its left neighbour */
};

struct pair {
    float score;
    int32_t left, right;
    uint32_t len; /* bytes of the merged text when queued */
};

/* heap order: higher score first, then the leftmost */
static bool pair_before(const struct pair *a, const struct pair *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

struct heap {
    struct pair *v;
    size_t n, cap;
};

static minfer_status heap_push(struct heap *h, struct pair x)
{
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        struct pair *v = realloc(h->v, cap * sizeof *v);
        if (!v)
            return MINFER_ERR_NO_MEMORY;
        h->v = v;
        h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0 && pair_before(&x, &h->v[(i - 1) / 2])) {
        h->v[i] = h->v[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    h->v[i] = x;
    return MINFER_OK;
}

static struct pair heap_pop(struct heap *h)
{
    struct pair top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && pair_before(&h->v[c + 1], &h->v[c]))
            c++;
        if (!pair_before(&h->v[c], &last))
            break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n)
        h->v[i] = last;
    return top;
}

static minfer_status try_pair(const struct spm *p, const char *text, const struct sym *s,
                              int32_t l, int32_t r, struct heap *h)
{
    if (l < 0 || r < 0)
        return MINFER_OK;
    uint32_t n = s[l].len + s[r].len;
    int32_t id = find_piece(p, text + s[l].off, n);
    if (id < 0)
        return MINFER_OK;
    struct pair x = {p->score[id], l, r, n};
    return heap_push(h, x);
}

static minfer_status spm_encode(const struct minfer_tokenizer *tok, const char *s, size_t n,
                                struct tok_ids *out)
{
    const struct spm *p = tok->vocab;
    minfer_status st = MINFER_ERR_NO_MEMORY;
    /* the escaped text: "▁" for every space, one more in front when asked */
    size_t spaces = 0;
    for (size_t i = 0; i < n; i++)
        spaces += s[i] == ' ';
    if (n > (SIZE_MAX - 8) / 4 || n + 2 * spaces + 3 > UINT32_MAX)
        return MINFER_ERR_RANGE;
    size_t tn = n + 2 * spaces + (p->space_prefix ? 3 : 0); /* a space is 1 byte, "▁" 3 */
    char *text = malloc(tn + 1);
    struct sym *sy = malloc((tn + 1) * sizeof *sy);
    struct heap h = {0};
    if (!text || !sy)
        goto out;
    size_t o = 0;
    if (p->space_prefix) {
        memcpy(text, SPACE_MARK, 3);
        o = 3;
    }
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') {
            memcpy(text + o, SPACE_MARK, 3);
            o += 3;
        } else {
            text[o++] = s[i];
        }
    }
    /* one symbol per code point (the input is valid UTF-8) */
    int32_t ns = 0;
    for (size_t i = 0; i < tn;) {
        uint8_t b = (uint8_t)text[i];
        size_t l = b < 0x80 ? 1 : b < 0xE0 ? 2 : b < 0xF0 ? 3 : 4;
        if (l > tn - i)
            l = tn - i;
        sy[ns] = (struct sym){ns - 1, -1, (uint32_t)i, (uint32_t)l};
        if (ns)
            sy[ns - 1].next = ns;
        ns++;
        i += l;
    }
    for (int32_t i = 1; i < ns; i++)
        if ((st = try_pair(p, text, sy, i - 1, i, &h)) != MINFER_OK)
            goto out;
    while (h.n) {
        struct pair x = heap_pop(&h);
        struct sym *l = &sy[x.left], *r = &sy[x.right];
        /* stale: one side was merged since this pair was queued */
        if (!l->len || !r->len || l->next != x.right || l->len + r->len != x.len)
            continue;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (r->next >= 0)
            sy[r->next].prev = x.left;
        if ((st = try_pair(p, text, sy, l->prev, x.left, &h)) != MINFER_OK ||
            (st = try_pair(p, text, sy, x.left, l->next, &h)) != MINFER_OK)
            goto out;
    }
    st = MINFER_OK;
    for (int32_t i = ns ? 0 : -1; i >= 0 && st == MINFER_OK; i = sy[i].next) {
        int32_t id = find_piece(p, text + sy[i].off, sy[i].len);
        if (id >= 0) {
            st = tok_ids_push(out, id);
            continue;
        }
        /* byte fallback: each byte's <0xNN> piece, <unk> for the whole symbol without them */
        bool all = true;
        for (uint32_t k = 0; k < sy[i].len; k++)
            all = all && p->byte_id[(uint8_t)text[sy[i].off + k]] >= 0;
        if (!all) {
            st = p->unk >= 0 ? tok_ids_push(out, p->unk) : MINFER_ERR_FORMAT;
            continue;
        }
        for (uint32_t k = 0; k < sy[i].len && st == MINFER_OK; k++)
            st = tok_ids_push(out, p->byte_id[(uint8_t)text[sy[i].off + k]]);
    }
out:
    free(h.v);
    free(sy);
    free(text);
    return st;
}

/* No regex: SentencePiece sees each plain segment whole, without NFC (the
 * GGUF's pieces are already in the model's normal form). */
const struct tok_pretok tok_pretok_spm = {
    .name = "(sentencepiece)",
    .regex = {NULL},
    .nfc = false,
    .ignore_merges = false,
};

const struct tok_vocab_ops tok_vocab_spm = {
    .model = "llama",
    .init = spm_init,
    .free = spm_free,
    .encode_piece = spm_encode,
    .pretok = &tok_pretok_spm,
};
