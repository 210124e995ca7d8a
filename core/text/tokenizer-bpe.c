/*
 * tokenizer-bpe.c — the "gpt2" vocabulary kind: byte-level BPE (GPT-2,
 * Qwen2/2.5/3, Llama 3). Each byte of a piece is first mapped to its own
 * token; adjacent pairs are then merged lowest merge rank first (leftmost
 * on equal rank, as Hugging Face tokenizers does) through a binary heap of
 * candidate pairs, so a piece of m bytes costs O(m log m).
 * Vocabulary strings are stored in the byte-to-unicode form (a space is
 * "Ġ"); this file owns that mapping in both directions.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "tokenizer.h"

/* ---- byte <-> unicode ---- */

/* The GPT-2 mapping: printable Latin-1 bytes stand for themselves, the
 * other 68 bytes take code points 256.. in byte order. */
static void byte_map(uint32_t cp_of[256], int16_t byte_of[324])
{
    uint32_t next = 256;
    for (int i = 0; i < 324; i++)
        byte_of[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        cp_of[b] = printable ? (uint32_t)b : next++;
        byte_of[cp_of[b]] = (int16_t)b;
    }
}

/* ---- state ---- */

struct merge_slot {
    uint64_t key;   /* (left << 32 | right) + 1; 0 = empty */
    uint32_t rank;
    int32_t id;     /* the merged token */
};

/* Temporary string -> id table used while loading (kept for whole-piece
 * lookups when the pre-tokenizer asks for ignore_merges). */
struct str_map {
    int32_t *slot; /* id + 1; 0 = empty */
    size_t mask;
    const struct minfer_tokenizer *tok;
};

struct bpe {
    int32_t byte_id[256];
    uint32_t cp_of[256]; /* byte -> its code point in vocabulary strings */
    struct merge_slot *m;
    size_t mask;
    struct str_map whole; /* slot NULL unless ignore_merges */
};

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x;
}

static const struct merge_slot *find_merge(const struct bpe *b, int32_t l, int32_t r)
{
    uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)r) + 1;
    size_t j = mix(key) & b->mask;
    while (b->m[j].key) {
        if (b->m[j].key == key)
            return &b->m[j];
        j = (j + 1) & b->mask;
    }
    return NULL;
}

static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= (uint8_t)s[i];
        h *= 0x100000001b3ull;
    }
    return mix(h);
}

static int32_t map_find(const struct str_map *sm, const char *s, size_t n)
{
    size_t j = hash_str(s, n) & sm->mask;
    while (sm->slot[j]) {
        int32_t id = sm->slot[j] - 1;
        size_t len;
        const char *t = minfer_token_text(sm->tok, id, &len);
        if (len == n && !memcmp(t, s, n))
            return id;
        j = (j + 1) & sm->mask;
    }
    return -1;
}

static void map_add(struct str_map *sm, int32_t id)
{
    size_t n;
    const char *t = minfer_token_text(sm->tok, id, &n);
    size_t j = hash_str(t, n) & sm->mask;
    while (sm->slot[j]) {
        size_t len;
        const char *u = minfer_token_text(sm->tok, sm->slot[j] - 1, &len);
        if (len == n && !memcmp(u, t, n))
            return; /* duplicate string: the first id wins */
        j = (j + 1) & sm->mask;
    }
    sm->slot[j] = id + 1;
}

static size_t pow2_at_least(size_t n)
{
    size_t c = 16;
    while (c < n)
        c <<= 1;
    return c;
}

static void bpe_free(void *p)
{
    struct bpe *b = p;
    if (!b)
        return;
    free(b->m);
    free(b->whole.slot);
    free(b);
}

/* Decodes a vocabulary string to bytes; false if it is not byte-level text. */
static bool unmap(const char *t, size_t n, const int16_t byte_of[324], char *out, size_t *out_n)
{
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int r = tok_utf8_next((const uint8_t *)t + i, n - i, &cp);
        if (r <= 0 || cp >= 324 || byte_of[cp] < 0)
            return false;
        out[o++] = (char)byte_of[cp];
        i += (size_t)r;
    }
    *out_n = o;
    return true;
}

static minfer_status bpe_init(struct minfer_tokenizer *tok, const struct tok_source *src,
                              char *err, size_t err_len)
{
    uint32_t cp_of[256];
    int16_t byte_of[324];
    byte_map(cp_of, byte_of);
    minfer_status st = MINFER_ERR_NO_MEMORY;
    struct str_map sm = {0};
    char *buf = NULL;
    struct bpe *b = calloc(1, sizeof *b);
    if (!b)
        goto out;
    tok->vocab = b;

    /* token bytes, and the string -> id table of byte-level tokens */
    sm.tok = tok;
    sm.mask = pow2_at_least((size_t)tok->n_vocab * 2) - 1;
    sm.slot = calloc(sm.mask + 1, sizeof *sm.slot);
    size_t maxlen = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if (src->token_lens[i] > maxlen)
            maxlen = src->token_lens[i];
    buf = malloc(maxlen + 1);
    if (!sm.slot || !buf)
        goto out;
    for (int32_t i = 0; i < tok->n_vocab; i++) {
        size_t n, bn;
        const char *t = minfer_token_text(tok, i, &n);
        int type = tok->types[i];
        bool bytelevel = type != MINFER_TOKEN_CONTROL && type != MINFER_TOKEN_USER_DEFINED &&
                         type != MINFER_TOKEN_UNUSED && unmap(t, n, byte_of, buf, &bn);
        if (bytelevel)
            map_add(&sm, i);
        if (type == MINFER_TOKEN_UNUSED)
            st = tok_append_token_bytes(tok, "", 0);
        else if (bytelevel)
            st = tok_append_token_bytes(tok, buf, bn);
        else
            st = tok_append_token_bytes(tok, t, n);
        if (st != MINFER_OK)
            goto out;
    }
    for (int c = 0; c < 256; c++) {
        char u[4];
        int l = tok_utf8_put(cp_of[c], u);
        b->byte_id[c] = map_find(&sm, u, (size_t)l);
        if (b->byte_id[c] < 0) {
            st = errf(err, err_len, MINFER_ERR_FORMAT,
                      "byte-level BPE vocabulary lacks the token for byte 0x%02X ('%.*s'); "
                      "every byte needs one",
                      c, l, u);
            goto out;
        }
    }

    /* merges: "left right" -> (rank, merged id). st is OK from the loop
     * above: reset it so an allocation failure here is reported, and take
     * realloc's result before checking b->m so `out` frees the live block. */
    st = MINFER_ERR_NO_MEMORY;
    b->mask = pow2_at_least((size_t)src->n_merges * 2 + 2) - 1;
    b->m = calloc(b->mask + 1, sizeof *b->m);
    char *cat = realloc(buf, 2 * maxlen + 2);
    if (cat)
        buf = cat;
    if (!b->m || !cat)
        goto out;
    for (uint32_t r = 0; r < src->n_merges; r++) {
        const char *s = src->merges[r];
        size_t n = src->merge_lens[r];
        const char *sp = n > 1 ? memchr(s + 1, ' ', n - 1) : NULL;
        if (!sp) {
            st = errf(err, err_len, MINFER_ERR_FORMAT,
                      "merge %u '%.*s' has no space between its two parts", r,
                      (int)(n > 64 ? 64 : n), s);
            goto out;
        }
        size_t ln = (size_t)(sp - s), rn = n - ln - 1;
        int32_t l = map_find(&sm, s, ln), rr = map_find(&sm, sp + 1, rn);
        if (ln + rn > 2 * maxlen)
            continue; /* the merged string cannot be a token */
        memcpy(buf, s, ln);
        memcpy(buf + ln, sp + 1, rn);
        int32_t m = map_find(&sm, buf, ln + rn);
        if (l < 0 || rr < 0 || m < 0)
            continue; /* refers to strings outside the vocabulary: can never apply */
        uint64_t key = ((uint64_t)(uint32_t)l << 32 | (uint32_t)rr) + 1;
        size_t j = mix(key) & b->mask;
        while (b->m[j].key && b->m[j].key != key)
            j = (j + 1) & b->mask;
        if (b->m[j].key)
            continue; /* a repeated merge keeps its first (lowest) rank */
        b->m[j] = (struct merge_slot){key, r, m};
    }
    memcpy(b->cp_of, cp_of, sizeof cp_of);
    if (tok->pretok->ignore_merges) {
        b->whole = sm;
        sm.slot = NULL;
    }
    st = MINFER_OK;
out:
    free(sm.slot);
    free(buf);
    if (st == MINFER_ERR_NO_MEMORY)
        errf(err, err_len, st, "out of memory loading %d BPE tokens", tok->n_vocab);
    return st;
}

/* ---- encode ---- */

struct cand {
    uint32_t rank;
    int32_t l, r;      /* symbol positions */
    int32_t lid, rid;  /* their ids when pushed: stale if either changed */
    int32_t id;        /* merged token */
};

static bool before(const struct cand *a, const struct cand *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->l < b->l;
}

static void heap_push(struct cand *h, size_t *n, struct cand c)
{
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (!before(&c, &h[p]))
            break;
        h[i] = h[p];
        i = p;
    }
    h[i] = c;
}

static struct cand heap_pop(struct cand *h, size_t *n)
{
    struct cand top = h[0], last = h[--(*n)];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= *n)
            break;
        if (c + 1 < *n && before(&h[c + 1], &h[c]))
            c++;
        if (!before(&h[c], &last))
            break;
        h[i] = h[c];
        i = c;
    }
    if (*n)
        h[i] = last;
    return top;
}

static void try_pair(const struct bpe *b, const int32_t *id, int32_t l, int32_t r,
                     struct cand *h, size_t *nh)
{
    if (l < 0 || r < 0)
        return;
    const struct merge_slot *m = find_merge(b, id[l], id[r]);
    if (m)
        heap_push(h, nh, (struct cand){m->rank, l, r, id[l], id[r], m->id});
}

static minfer_status bpe_encode(const struct minfer_tokenizer *tok, const char *s, size_t n,
                                struct tok_ids *out)
{
    const struct bpe *b = tok->vocab;
    if (n > INT32_MAX / 4)
        return MINFER_ERR_RANGE;
    if (n == 1)
        return tok_ids_push(out, b->byte_id[(uint8_t)s[0]]);
    if (b->whole.slot && n <= 128) { /* ignore_merges: the piece itself may be a token */
        char w[256];
        size_t wn = 0;
        for (size_t i = 0; i < n; i++)
            wn += (size_t)tok_utf8_put(b->cp_of[(uint8_t)s[i]], w + wn);
        int32_t id = map_find(&b->whole, w, wn);
        if (id >= 0)
            return tok_ids_push(out, id);
    }
    /* symbols: id, prev and next links; heap of at most 3n candidates */
    enum { SMALL = 64 };
    int32_t sid[SMALL], sprev[SMALL], snext[SMALL];
    struct cand sheap[3 * SMALL];
    int32_t *id = sid, *prev = sprev, *next = snext;
    struct cand *heap = sheap;
    void *mem = NULL;
    if (n > SMALL) {
        mem = malloc(n * 3 * sizeof(int32_t) + 3 * n * sizeof(struct cand));
        if (!mem)
            return MINFER_ERR_NO_MEMORY;
        heap = mem;
        id = (int32_t *)(heap + 3 * n);
        prev = id + n;
        next = prev + n;
    }
    int32_t m = (int32_t)n;
    for (int32_t i = 0; i < m; i++) {
        id[i] = b->byte_id[(uint8_t)s[i]];
        prev[i] = i - 1;
        next[i] = i + 1 < m ? i + 1 : -1;
    }
    size_t nh = 0;
    for (int32_t i = 0; i + 1 < m; i++)
        try_pair(b, id, i, i + 1, heap, &nh);
    while (nh) {
        struct cand c = heap_pop(heap, &nh);
        if (id[c.l] != c.lid || id[c.r] != c.rid || next[c.l] != c.r)
            continue; /* stale */
        id[c.l] = c.id;
        id[c.r] = -1;
        next[c.l] = next[c.r];
        if (next[c.r] >= 0)
            prev[next[c.r]] = c.l;
        try_pair(b, id, prev[c.l], c.l, heap, &nh);
        try_pair(b, id, c.l, next[c.l], heap, &nh);
    }
    minfer_status st = MINFER_OK;
    for (int32_t i = 0; i >= 0 && st == MINFER_OK; i = next[i])
        st = tok_ids_push(out, id[i]);
    free(mem);
    return st;
}

const struct tok_vocab_ops tok_vocab_bpe = {
    .model = "gpt2",
    .init = bpe_init,
    .free = bpe_free,
    .encode_piece = bpe_encode,
};
