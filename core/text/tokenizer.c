/*
 * tokenizer.c — building a tokenizer: from a GGUF's vocabulary, merges and
 * special ids (the GGUF adapter) or from plain arrays (tok_new), the
 * registries of vocabulary kinds and pre-tokenizers, and the accessors.
 * The rest of the text flow is beside it: tokenizer-norm.c (UTF-8 repair,
 * NFC), tokenizer-encode.c (text to ids), tokenizer-decode.c (ids to text);
 * the vocabulary kind (BPE, ...) and the pre-tokenizer are plugged in
 * through core/text/tokenizer.h.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "minfer/gguf.h"
#include "tokenizer.h"

/* ---- registries ---- */

static const struct tok_vocab_ops *const vocab_kinds[] = {
    &tok_vocab_bpe,
    &tok_vocab_spm,
};

static const struct tok_pretok *const pretoks[] = {
    &tok_pretok_qwen2,
    &tok_pretok_llama3,
};

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
                 "tokenizer model '%.*s' is not supported by this build (supported: gpt2, llama)",
                 src->model ? (int)src->model_len : 6, src->model ? src->model : "(none)");
        goto out;
    }
    const struct tok_pretok *pre = ops->pretok;
    const char *pname = src->pre ? src->pre : "default";
    size_t plen = src->pre ? src->pre_len : 7;
    for (size_t i = 0; i < sizeof pretoks / sizeof pretoks[0]; i++)
        if (strlen(pretoks[i]->name) == plen && !memcmp(pretoks[i]->name, pname, plen))
            pre = pretoks[i];
    if (ops->pretok)
        pre = ops->pretok;
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
    float *scores = NULL;
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
    src.add_space_prefix = -1;
    if (minfer_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == MINFER_OK)
        src.add_space_prefix = b;
    if (minfer_gguf_get_arr(g, "tokenizer.ggml.scores", &et, &n, &data) == MINFER_OK) {
        if (et != MINFER_GGUF_FLOAT32 || n != src.n_tokens) {
            s = errf(err, err_len, MINFER_ERR_FORMAT,
                     "tokenizer.ggml.scores: %llu %s entries, expected %u float32",
                     (unsigned long long)n, minfer_gguf_type_name(et), src.n_tokens);
            goto out;
        }
        scores = malloc((n ? n : 1) * sizeof *scores);
        if (!scores) {
            s = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
            goto out;
        }
        memcpy(scores, data, n * sizeof *scores); /* unaligned in the mapping */
        src.scores = scores;
    }
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
    free(scores);
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
