/*
 * tokenizer.c — text to token ids and back: building a tokenizer from a
 * GGUF (or from plain arrays), the encode pipeline (UTF-8 repair, special
 * tokens, NFC, regex pre-tokenizer, per-piece vocabulary encode with a
 * per-call word cache) and the one-shot and streaming detokenizers.
 * The vocabulary kind (BPE, ...) and the pre-tokenizer are plugged in
 * through core/text/tokenizer.h.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "runtime/error.h"
#include "minfer/gguf.h"
#include "tokenizer.h"

/* ---- registries ---- */

static const struct tok_vocab_ops *const vocab_kinds[] = {
    &tok_vocab_bpe,
};

static const struct tok_pretok *const pretoks[] = {
    &tok_pretok_qwen2,
    &tok_pretok_llama3,
};

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

/* ---- UTF-8 ---- */

int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return -1; /* continuation byte, C0, C1, F5..FF */
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return 0; /* valid so far, cut short */
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h)
            return -i; /* the maximal subpart ends before this byte */
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return len;
}

int tok_utf8_put(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Returns a valid-UTF-8 version of s[n]: s itself when already valid
 * (*owned = NULL), else a malloc'd copy with every maximal invalid subpart
 * (and a cut-off tail) replaced by U+FFFD. */
static minfer_status utf8_repair(const char *s, size_t n, const char **out, size_t *out_n,
                                 char **owned)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, bad = 0;
    uint32_t cp;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int r = tok_utf8_next(u + i, n - i, &cp);
        if (r > 0) {
            i += (size_t)r;
        } else {
            bad++;
            i += r < 0 ? (size_t)-r : n - i;
        }
    }
    *owned = NULL;
    if (!bad) {
        *out = s;
        *out_n = n;
        return MINFER_OK;
    }
    if (n > (SIZE_MAX - 1) / 3)
        return MINFER_ERR_NO_MEMORY;
    char *d = malloc(3 * n + 1); /* each bad byte becomes at most 3 */
    if (!d)
        return MINFER_ERR_NO_MEMORY;
    size_t o = 0;
    i = 0;
    while (i < n) {
        int r = u[i] < 0x80 ? 1 : tok_utf8_next(u + i, n - i, &cp);
        if (r > 0) {
            memcpy(d + o, s + i, (size_t)r);
            o += (size_t)r;
            i += (size_t)r;
        } else {
            o += (size_t)tok_utf8_put(0xFFFD, d + o);
            i += r < 0 ? (size_t)-r : n - i;
        }
    }
    *owned = d;
    *out = d;
    *out_n = o;
    return MINFER_OK;
}

/* ---- building ---- */

minfer_status tok_append_token_bytes(struct minfer_tokenizer *tok, const char *b, size_t n)
{
    if (tok->n_bytes_set >= tok->n_vocab)
        return MINFER_ERR_STATE;
    if (n > UINT32_MAX - tok->bytes_len)
        return MINFER_ERR_RANGE;
    if (tok->bytes_len + n > tok->bytes_cap) {
        size_t cap = tok->bytes_cap * 2 + n + 1024;
        char *p = realloc(tok->bytes, cap);
        if (!p)
            return MINFER_ERR_NO_MEMORY;
        tok->bytes = p;
        tok->bytes_cap = cap;
    }
    memcpy(tok->bytes + tok->bytes_len, b, n);
    tok->bytes_len += n;
    tok->n_bytes_set++;
    tok->bytes_off[tok->n_bytes_set] = (uint32_t)tok->bytes_len;
    if (n > tok->max_bytes)
        tok->max_bytes = n;
    return MINFER_OK;
}

static minfer_status compile_pretok(struct minfer_tokenizer *tok, char *err, size_t err_len)
{
    for (int i = 0; i < TOK_MAX_REGEX && tok->pretok->regex[i]; i++) {
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)tok->pretok->regex[i], PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
        if (!re) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(ec, msg, sizeof msg);
            return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                        "pre-tokenizer '%s' regex %d does not compile at offset %zu: %s",
                        tok->pretok->name, i, (size_t)eo, (const char *)msg);
        }
        (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter if JIT is absent */
        tok->re[tok->n_re++] = re;
    }
    return MINFER_OK;
}

static int cmp_special(const void *a, const void *b, void *ctx)
{
    const struct minfer_tokenizer *tok = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    const uint8_t *tx = (const uint8_t *)tok->text + tok->text_off[x];
    const uint8_t *ty = (const uint8_t *)tok->text + tok->text_off[y];
    size_t lx = tok->text_off[x + 1] - tok->text_off[x] - 1;
    size_t ly = tok->text_off[y + 1] - tok->text_off[y] - 1;
    if (tx[0] != ty[0])
        return tx[0] < ty[0] ? -1 : 1;
    if (lx != ly)
        return lx > ly ? -1 : 1; /* longest first */
    return x < y ? -1 : (x > y);
}

static minfer_status index_specials(struct minfer_tokenizer *tok)
{
    uint32_t n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if ((tok->types[i] == MINFER_TOKEN_CONTROL || tok->types[i] == MINFER_TOKEN_USER_DEFINED) &&
            tok->text_off[i + 1] - tok->text_off[i] > 1)
            n++;
    tok->special = malloc((n ? n : 1) * sizeof *tok->special);
    if (!tok->special)
        return MINFER_ERR_NO_MEMORY;
    n = 0;
    for (int32_t i = 0; i < tok->n_vocab; i++)
        if ((tok->types[i] == MINFER_TOKEN_CONTROL || tok->types[i] == MINFER_TOKEN_USER_DEFINED) &&
            tok->text_off[i + 1] - tok->text_off[i] > 1)
            tok->special[n++] = i;
    tok->n_special = n;
    qsort_r(tok->special, n, sizeof *tok->special, cmp_special, tok);
    uint32_t k = 0;
    for (int b = 0; b < 256; b++) {
        tok->first[b] = k;
        while (k < n && (uint8_t)tok->text[tok->text_off[tok->special[k]]] == b)
            k++;
    }
    tok->first[256] = n;
    return MINFER_OK;
}

static int32_t find_text(const struct minfer_tokenizer *tok, const char *s)
{
    size_t n = strlen(s);
    for (uint32_t k = 0; k < tok->n_special; k++) {
        int32_t id = tok->special[k];
        if (tok->text_off[id + 1] - tok->text_off[id] - 1 == n &&
            !memcmp(tok->text + tok->text_off[id], s, n))
            return id;
    }
    return -1;
}

static void add_eog(struct minfer_tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_vocab || tok->n_eog >= (int)(sizeof tok->eog / sizeof tok->eog[0]))
        return;
    for (int i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return;
    tok->eog[tok->n_eog++] = id;
}

static void set_special_ids(struct minfer_tokenizer *tok, const struct tok_source *src)
{
    int32_t ids[4] = {src->bos, src->eos, src->eot, src->pad};
    for (int i = 0; i < 4; i++)
        if (ids[i] < -1 || ids[i] >= tok->n_vocab)
            ids[i] = -1; /* out-of-range ids in metadata are ignored, not trusted */
    tok->bos = ids[0];
    tok->eos = ids[1];
    tok->eot = ids[2];
    tok->pad = ids[3];
    if (tok->eot < 0)
        tok->eot = find_text(tok, "<|im_end|>");
    if (tok->eot < 0)
        tok->eot = find_text(tok, "<|eot_id|>");
    tok->add_bos = src->add_bos && tok->bos >= 0;
    add_eog(tok, tok->eos);
    add_eog(tok, tok->eot);
    static const char *const ends[] = {"<|endoftext|>", "<|im_end|>", "<|eot_id|>",
                                       "<|eom_id|>", "<|end|>", "<end_of_turn>"};
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        int32_t id = find_text(tok, ends[i]);
        if (id >= 0 && tok->types[id] == MINFER_TOKEN_CONTROL)
            add_eog(tok, id);
    }
}

struct minfer_tokenizer *tok_new(const struct tok_source *src, minfer_status *st, char *err,
                                 size_t err_len)
{
    minfer_status s = MINFER_OK;
    struct minfer_tokenizer *tok = NULL;
    if (err && err_len)
        err[0] = 0;

    const struct tok_vocab_ops *ops = NULL;
    for (size_t i = 0; i < sizeof vocab_kinds / sizeof vocab_kinds[0]; i++)
        if (src->model && strlen(vocab_kinds[i]->model) == src->model_len &&
            !memcmp(vocab_kinds[i]->model, src->model, src->model_len))
            ops = vocab_kinds[i];
    if (!ops) {
        s = errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                 "tokenizer model '%.*s' is not supported by this build (supported: gpt2)",
                 src->model ? (int)src->model_len : 6, src->model ? src->model : "(none)");
        goto out;
    }
    const struct tok_pretok *pre = NULL;
    const char *pname = src->pre ? src->pre : "default";
    size_t plen = src->pre ? src->pre_len : 7;
    for (size_t i = 0; i < sizeof pretoks / sizeof pretoks[0]; i++)
        if (strlen(pretoks[i]->name) == plen && !memcmp(pretoks[i]->name, pname, plen))
            pre = pretoks[i];
    if (!pre) {
        s = errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                 "pre-tokenizer '%.*s' (tokenizer.ggml.pre) is not supported by this build "
                 "(supported: qwen2, llama-bpe)",
                 (int)plen, pname);
        goto out;
    }
    if (src->n_tokens == 0 || src->n_tokens > INT32_MAX - 1) {
        s = errf(err, err_len, MINFER_ERR_FORMAT, "tokenizer has %u tokens, expected 1..%d",
                 src->n_tokens, INT32_MAX - 1);
        goto out;
    }

    tok = calloc(1, sizeof *tok);
    if (!tok)
        goto oom;
    tok->n_vocab = (int32_t)src->n_tokens;
    tok->ops = ops;
    tok->pretok = pre;
    size_t nv = src->n_tokens;
    tok->types = malloc(nv);
    tok->text_off = malloc((nv + 1) * sizeof *tok->text_off);
    tok->bytes_off = calloc(nv + 1, sizeof *tok->bytes_off);
    if (!tok->types || !tok->text_off || !tok->bytes_off)
        goto oom;
    size_t total = 0;
    for (size_t i = 0; i < nv; i++) {
        if (src->token_lens[i] > UINT32_MAX - 1 - total) {
            s = errf(err, err_len, MINFER_ERR_FORMAT, "tokenizer tokens exceed 4 GiB in total");
            goto out;
        }
        total += src->token_lens[i] + 1;
        int32_t t = src->types ? src->types[i] : MINFER_TOKEN_NORMAL;
        if (t < MINFER_TOKEN_UNDEFINED || t > MINFER_TOKEN_BYTE) {
            s = errf(err, err_len, MINFER_ERR_FORMAT,
                     "token %zu has type %d, expected 0..6 (tokenizer.ggml.token_type)", i, t);
            goto out;
        }
        tok->types[i] = (uint8_t)t;
    }
    tok->text = malloc(total ? total : 1);
    tok->bytes_cap = total + 16;
    tok->bytes = malloc(tok->bytes_cap);
    if (!tok->text || !tok->bytes)
        goto oom;
    size_t o = 0;
    for (size_t i = 0; i < nv; i++) {
        tok->text_off[i] = (uint32_t)o;
        memcpy(tok->text + o, src->tokens[i], src->token_lens[i]);
        o += src->token_lens[i];
        tok->text[o++] = 0;
    }
    tok->text_off[nv] = (uint32_t)o;

    s = ops->init(tok, src, err, err_len);
    if (s != MINFER_OK)
        goto out;
    if (tok->n_bytes_set != tok->n_vocab) {
        s = errf(err, err_len, MINFER_ERR_STATE, "vocabulary kind %s set bytes of %d of %d tokens",
                 ops->model, tok->n_bytes_set, tok->n_vocab);
        goto out;
    }
    s = compile_pretok(tok, err, err_len);
    if (s != MINFER_OK)
        goto out;
    s = index_specials(tok);
    if (s != MINFER_OK)
        goto oom;
    set_special_ids(tok, src);
    if (src->chat_template) {
        tok->chat_template = malloc(src->chat_template_len + 1);
        if (!tok->chat_template)
            goto oom;
        memcpy(tok->chat_template, src->chat_template, src->chat_template_len);
        tok->chat_template[src->chat_template_len] = 0;
        tok->chat_template_len = src->chat_template_len;
    }
    s = tok_chat_init(tok);
    if (s != MINFER_OK)
        goto oom;
    *st = MINFER_OK;
    return tok;

oom:
    s = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory building the tokenizer");
out:
    minfer_tokenizer_free(tok);
    *st = s;
    return NULL;
}

void minfer_tokenizer_free(struct minfer_tokenizer *tok)
{
    if (!tok)
        return;
    if (tok->ops && tok->vocab)
        tok->ops->free(tok->vocab);
    for (int i = 0; i < tok->n_re; i++)
        pcre2_code_free(tok->re[i]);
    free(tok->types);
    free(tok->text);
    free(tok->text_off);
    free(tok->bytes);
    free(tok->bytes_off);
    free(tok->special);
    free(tok->chat_template);
    free(tok->chat_default_system);
    free(tok);
}

/* ---- GGUF adapter ---- */

static minfer_status gguf_strs(const struct minfer_gguf *g, const char *key, bool required,
                               uint32_t *n_out, const char ***strs, size_t **lens, char *err,
                               size_t err_len)
{
    enum minfer_gguf_type et;
    uint64_t n;
    const void *data;
    *n_out = 0;
    *strs = NULL;
    *lens = NULL;
    minfer_status s = minfer_gguf_get_arr(g, key, &et, &n, &data);
    if (s == MINFER_ERR_NOT_FOUND && !required)
        return MINFER_OK;
    if (s != MINFER_OK)
        return errf(err, err_len, s, "%s: %s", key,
                    s == MINFER_ERR_NOT_FOUND ? "missing" : "not an array");
    if (et != MINFER_GGUF_STRING)
        return errf(err, err_len, MINFER_ERR_FORMAT, "%s holds %s elements, expected string", key,
                    minfer_gguf_type_name(et));
    if (n > INT32_MAX - 1)
        return errf(err, err_len, MINFER_ERR_FORMAT, "%s has %llu entries, expected < 2^31", key,
                    (unsigned long long)n);
    *strs = malloc((n ? n : 1) * sizeof **strs);
    *lens = malloc((n ? n : 1) * sizeof **lens);
    if (!*strs || !*lens)
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory reading %s", key);
    for (uint64_t i = 0; i < n; i++) {
        s = minfer_gguf_get_arr_str(g, key, i, &(*strs)[i], &(*lens)[i]);
        if (s != MINFER_OK)
            return errf(err, err_len, s, "%s[%llu] unreadable", key, (unsigned long long)i);
    }
    *n_out = (uint32_t)n;
    return MINFER_OK;
}

static int32_t gguf_id(const struct minfer_gguf *g, const char *key)
{
    int64_t v;
    if (minfer_gguf_get_i64(g, key, &v) != MINFER_OK || v < 0 || v > INT32_MAX)
        return -1;
    return (int32_t)v;
}

struct minfer_tokenizer *minfer_tokenizer_from_gguf(const struct minfer_gguf *g,
                                                    minfer_status *st, char *err,
                                                    size_t err_len)
{
    struct tok_source src = {0};
    struct minfer_tokenizer *tok = NULL;
    const char **merges = NULL, **tokens = NULL;
    size_t *merge_lens = NULL, *token_lens = NULL;
    int32_t *types = NULL;
    minfer_status s;
    if (!g) {
        *st = errf(err, err_len, MINFER_ERR_INVALID_ARG, "no GGUF given");
        return NULL;
    }
    s = minfer_gguf_get_str(g, "tokenizer.ggml.model", &src.model, &src.model_len);
    if (s != MINFER_OK) {
        s = errf(err, err_len, s == MINFER_ERR_NOT_FOUND ? MINFER_ERR_NOT_FOUND : MINFER_ERR_FORMAT,
                 "tokenizer.ggml.model: %s; this GGUF carries no usable tokenizer",
                 s == MINFER_ERR_NOT_FOUND ? "missing" : "not a string");
        goto out;
    }
    if (minfer_gguf_get_str(g, "tokenizer.ggml.pre", &src.pre, &src.pre_len) != MINFER_OK)
        src.pre = NULL;
    s = gguf_strs(g, "tokenizer.ggml.tokens", true, &src.n_tokens, &tokens, &token_lens, err,
                  err_len);
    if (s != MINFER_OK)
        goto out;
    src.tokens = tokens;
    src.token_lens = token_lens;
    s = gguf_strs(g, "tokenizer.ggml.merges", false, &src.n_merges, &merges, &merge_lens, err,
                  err_len);
    if (s != MINFER_OK)
        goto out;
    src.merges = merges;
    src.merge_lens = merge_lens;

    enum minfer_gguf_type et;
    uint64_t n;
    const void *data;
    if (minfer_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &data) == MINFER_OK) {
        if ((et != MINFER_GGUF_INT32 && et != MINFER_GGUF_UINT32) || n != src.n_tokens) {
            s = errf(err, err_len, MINFER_ERR_FORMAT,
                     "tokenizer.ggml.token_type: %llu %s entries, expected %u int32",
                     (unsigned long long)n, minfer_gguf_type_name(et), src.n_tokens);
            goto out;
        }
        types = malloc((n ? n : 1) * sizeof *types);
        if (!types) {
            s = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
            goto out;
        }
        memcpy(types, data, n * sizeof *types); /* unaligned in the mapping */
        src.types = types;
    }
    src.bos = gguf_id(g, "tokenizer.ggml.bos_token_id");
    src.eos = gguf_id(g, "tokenizer.ggml.eos_token_id");
    src.eot = gguf_id(g, "tokenizer.ggml.eot_token_id");
    src.pad = gguf_id(g, "tokenizer.ggml.padding_token_id");
    bool b;
    src.add_bos = minfer_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == MINFER_OK && b;
    if (minfer_gguf_get_str(g, "tokenizer.chat_template", &src.chat_template,
                            &src.chat_template_len) != MINFER_OK)
        src.chat_template = NULL;
    tok = tok_new(&src, &s, err, err_len);
out:
    free(tokens);
    free(token_lens);
    free(merges);
    free(merge_lens);
    free(types);
    *st = tok ? MINFER_OK : s;
    return tok;
}

/* ---- accessors ---- */

int32_t minfer_tokenizer_n_vocab(const struct minfer_tokenizer *tok) { return tok->n_vocab; }
int32_t minfer_tokenizer_bos(const struct minfer_tokenizer *tok) { return tok->bos; }
int32_t minfer_tokenizer_eos(const struct minfer_tokenizer *tok) { return tok->eos; }
int32_t minfer_tokenizer_eot(const struct minfer_tokenizer *tok) { return tok->eot; }
int32_t minfer_tokenizer_pad(const struct minfer_tokenizer *tok) { return tok->pad; }
bool minfer_tokenizer_add_bos(const struct minfer_tokenizer *tok) { return tok->add_bos; }
size_t minfer_tokenizer_max_token_bytes(const struct minfer_tokenizer *tok) { return tok->max_bytes; }

bool minfer_tokenizer_is_eog(const struct minfer_tokenizer *tok, int32_t id)
{
    for (int i = 0; i < tok->n_eog; i++)
        if (tok->eog[i] == id)
            return true;
    return false;
}

int minfer_tokenizer_token_type(const struct minfer_tokenizer *tok, int32_t id)
{
    if (id < 0 || id >= tok->n_vocab)
        return MINFER_TOKEN_UNDEFINED;
    return tok->types[id];
}

const char *minfer_token_bytes(const struct minfer_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || id >= tok->n_vocab) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = tok->bytes_off[id + 1] - tok->bytes_off[id];
    return tok->bytes + tok->bytes_off[id];
}

const char *minfer_token_text(const struct minfer_tokenizer *tok, int32_t id, size_t *len)
{
    if (id < 0 || id >= tok->n_vocab) {
        if (len)
            *len = 0;
        return NULL;
    }
    if (len)
        *len = tok->text_off[id + 1] - tok->text_off[id] - 1;
    return tok->text + tok->text_off[id];
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
};

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
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH)
            break;
        if (rc < 0)
            return MINFER_ERR_STATE; /* match limit or JIT stack: cannot happen on valid UTF-8 */
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

/* Code points that NFC leaves alone and that never combine with what
 * precedes them: starters below U+0300 (nothing there decomposes or is a
 * second element of a composition), CJK unified ideographs and Hangul
 * syllables. NFC of a text is the concatenation of NFC of the spans cut
 * just before such a code point. */
#define NFC_MAX_MARKS 256

static bool nfc_inert(uint32_t cp)
{
    return cp < 0x300 || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3);
}

/* NFC of valid UTF-8 s[n]: *out = s when nothing changes (*owned NULL),
 * else a malloc'd copy. Only spans around non-inert code points are handed
 * to utf8proc, so mostly-ASCII or CJK text costs one scan. */
static minfer_status nfc(const char *s, size_t n, const char **out, size_t *out_n, char **owned)
{
    const uint8_t *u = (const uint8_t *)s;
    char *d = NULL;
    size_t dn = 0, dcap = 0, copied = 0; /* s[0..copied) is already in d */
    size_t prev = 0;                     /* start of the previous code point */
    *owned = NULL;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int r = u[i] < 0x80 ? (cp = u[i], 1) : tok_utf8_next(u + i, n - i, &cp);
        if (r <= 0)
            return MINFER_ERR_INVALID_ARG; /* callers repair UTF-8 first */
        if (nfc_inert(cp)) {
            prev = i;
            i += (size_t)r;
            continue;
        }
        /* span: the previous code point (it may compose with this one) up to
         * the next inert one. utf8proc orders a run of combining marks in
         * quadratic time, so a run longer than NFC_MAX_MARKS (no text has
         * one: Unicode's stream-safe format caps runs at 30) is cut there. */
        size_t a = prev < copied ? copied : (i > 0 ? prev : 0), b = i + (size_t)r;
        size_t marks = utf8proc_get_property((utf8proc_int32_t)cp)->combining_class != 0;
        while (b < n) {
            int rb = u[b] < 0x80 ? (cp = u[b], 1) : tok_utf8_next(u + b, n - b, &cp);
            if (rb <= 0)
                return MINFER_ERR_INVALID_ARG;
            if (nfc_inert(cp))
                break;
            if (utf8proc_get_property((utf8proc_int32_t)cp)->combining_class == 0)
                marks = 0;
            else if (++marks > NFC_MAX_MARKS)
                break;
            b += (size_t)rb;
        }
        utf8proc_uint8_t *norm = NULL;
        utf8proc_ssize_t m = utf8proc_map(u + a, (utf8proc_ssize_t)(b - a), &norm,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) {
            free(d);
            return m == UTF8PROC_ERROR_NOMEM ? MINFER_ERR_NO_MEMORY : MINFER_ERR_INVALID_ARG;
        }
        bool same = (size_t)m == b - a && !memcmp(norm, u + a, b - a);
        if (!same) {
            size_t need = dn + (a - copied) + (size_t)m + (n - b);
            if (need > dcap) {
                size_t cap = need + need / 2 + 64;
                char *nd = realloc(d, cap);
                if (!nd) {
                    free(norm);
                    free(d);
                    return MINFER_ERR_NO_MEMORY;
                }
                d = nd;
                dcap = cap;
            }
            memcpy(d + dn, s + copied, a - copied);
            dn += a - copied;
            memcpy(d + dn, norm, (size_t)m);
            dn += (size_t)m;
            copied = b;
        }
        free(norm);
        prev = b; /* the next code point is inert: it starts a fresh span */
        i = b;
    }
    if (!d) {
        *out = s;
        *out_n = n;
        return MINFER_OK;
    }
    if (dn + (n - copied) > dcap) { /* cannot happen: need counted the tail */
        free(d);
        return MINFER_ERR_STATE;
    }
    memcpy(d + dn, s + copied, n - copied);
    dn += n - copied;
    *owned = d;
    *out = d;
    *out_n = dn;
    return MINFER_OK;
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
    minfer_status st = nfc(s, n, &t, &tn, &owned);
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
    struct split_ctx c = {tok, &wc, out, {0}};
    minfer_status st = MINFER_OK;
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
    minfer_status st = utf8_repair(text ? text : "", len, &s, &n, &owned);
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
    for (size_t i = 0; i < n; i++) {
        minfer_status st = decode_one(tok, ids[i], render_special, held, &nh, &k);
        if (st != MINFER_OK)
            return st;
    }
    decode_bytes(held, &nh, "", 0, true, &k);
    *n_out = k.n;
    return k.n > cap ? MINFER_ERR_RANGE : MINFER_OK;
}

struct minfer_detok {
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
    uint8_t held[8];
    size_t nh = d->nh;
    memcpy(held, d->held, sizeof held);
    struct sink k = {out, cap, 0};
    minfer_status st = decode_one(d->tok, id, d->render_special, held, &nh, &k);
    if (st != MINFER_OK)
        return st;
    *n_out = k.n;
    if (k.n > cap)
        return MINFER_ERR_RANGE;
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
    if (k.n > cap)
        return MINFER_ERR_RANGE;
    d->nh = 0;
    return MINFER_OK;
}
