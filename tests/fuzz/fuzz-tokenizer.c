/*
 * fuzz-tokenizer.c — libFuzzer target for the tokenizer: arbitrary bytes
 * (invalid UTF-8, NULs, half special tokens, huge runs) must tokenize
 * without a crash or sanitizer report, every id must be in range, the
 * one-shot and streaming detokenizers must agree, streamed chunks must be
 * valid UTF-8, and valid NFC-stable input must round-trip. The same bytes
 * also go through chat-template recognition.
 *
 * Tokenizer: the real Qwen one from $MINFER_FIXTURES_DIR (or the build's
 * fixtures dir) when present, else a small synthetic byte-level BPE.
 * A synthetic Llama 3 ("llama-bpe") tokenizer is fuzzed too, and a
 * SentencePiece one (fixture-llama-dev's when present, else synthetic).
 * Input byte 0 selects options (bit 0: parse_special, bit 1: the llama-bpe
 * tokenizer, bit 2: the SentencePiece one), the rest is text. An input starting with "GGUF" is instead a file whose
 * tokenizer metadata is loaded and used (seeds: corpus-tokenizer/, made by
 * make-tokenizer-seeds.py).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "text/tokenizer.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct minfer_tokenizer *tok_main, *tok_llama3, *tok_spm;

/* <unk> <s> </s>, the 256 <0xNN> byte pieces, then a few scored pieces. */
static struct minfer_tokenizer *synthetic_spm(void)
{
    enum { NX = 8, N = 3 + 256 + NX };
    static char store[256][8];
    static const char *extra[NX] = {"\xE2\x96\x81", "h", "e", "he", "\xE2\x96\x81he", "l",
                                    "ll", "\xE2\x96\x81hell"};
    const char *toks[N];
    size_t lens[N];
    int32_t types[N];
    float scores[N];
    static const char *ctl[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < N; i++) {
        scores[i] = -(float)i;
        if (i < 3) {
            toks[i] = ctl[i];
            types[i] = i ? MINFER_TOKEN_CONTROL : MINFER_TOKEN_UNKNOWN;
        } else if (i < 259) {
            snprintf(store[i - 3], sizeof store[0], "<0x%02X>", i - 3);
            toks[i] = store[i - 3];
            types[i] = MINFER_TOKEN_BYTE;
        } else {
            toks[i] = extra[i - 259];
            types[i] = MINFER_TOKEN_NORMAL;
        }
        lens[i] = strlen(toks[i]);
    }
    struct tok_source src = {
        .model = "llama", .model_len = 5, .n_tokens = N, .tokens = toks, .token_lens = lens,
        .types = types, .scores = scores, .add_space_prefix = 1,
        .bos = 1, .eos = 2, .eot = -1, .pad = -1,
    };
    minfer_status st;
    char err[256];
    struct minfer_tokenizer *t = tok_new(&src, &st, err, sizeof err);
    if (!t)
        fprintf(stderr, "fuzz-tokenizer: synthetic SentencePiece tokenizer failed: %s\n", err);
    return t;
}

/* 256 byte tokens in GPT-2's byte-to-unicode form, a few merges, specials. */
static struct minfer_tokenizer *synthetic(const char *pre)
{
    enum { NB = 256, NX = 6 };
    static char store[NB][4];
    const char *toks[NB + NX];
    size_t lens[NB + NX];
    int32_t types[NB + NX];
    uint32_t next = 256;
    for (int b = 0; b < NB; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        uint32_t cp = printable ? (uint32_t)b : next++;
        lens[b] = (size_t)tok_utf8_put(cp, store[b]);
        toks[b] = store[b];
        types[b] = MINFER_TOKEN_NORMAL;
    }
    static const char *extra[NX] = {"he", "ll", "hell", "hello", "<|im_start|>", "<think>"};
    static const int32_t xtypes[NX] = {1, 1, 1, 1, MINFER_TOKEN_CONTROL,
                                      MINFER_TOKEN_USER_DEFINED};
    for (int i = 0; i < NX; i++) {
        toks[NB + i] = extra[i];
        lens[NB + i] = strlen(extra[i]);
        types[NB + i] = xtypes[i];
    }
    static const char *merges[] = {"h e", "l l", "he ll", "hell o"};
    size_t mlens[4];
    for (int i = 0; i < 4; i++)
        mlens[i] = strlen(merges[i]);
    struct tok_source src = {
        .model = "gpt2", .model_len = 4, .pre = pre, .pre_len = strlen(pre),
        .n_tokens = NB + NX, .tokens = toks, .token_lens = lens, .types = types,
        .n_merges = 4, .merges = merges, .merge_lens = mlens,
        .bos = -1, .eos = NB + 4, .eot = -1, .pad = -1,
    };
    minfer_status st;
    char err[256];
    struct minfer_tokenizer *t = tok_new(&src, &st, err, sizeof err);
    if (!t)
        fprintf(stderr, "fuzz-tokenizer: synthetic tokenizer failed: %s\n", err);
    return t;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    struct minfer_tokenizer *tok = NULL;
    const char *dir = getenv("MINFER_FIXTURES_DIR");
#ifdef MINFER_FIXTURES_DIR
    if (!dir)
        dir = MINFER_FIXTURES_DIR;
#endif
    if (dir) {
        char path[4096];
        snprintf(path, sizeof path, "%s/models/fixture-A-f16.gguf", dir);
        minfer_status st;
        struct minfer_gguf *g = minfer_gguf_open(path, &st, NULL, 0);
        if (g) {
            tok = minfer_tokenizer_from_gguf(g, &st, NULL, 0);
            minfer_gguf_close(g);
        }
        snprintf(path, sizeof path, "%s/models/fixture-llama-dev-f16.gguf", dir);
        if ((g = minfer_gguf_open(path, &st, NULL, 0))) {
            tok_spm = minfer_tokenizer_from_gguf(g, &st, NULL, 0);
            minfer_gguf_close(g);
        }
    }
    if (!tok_spm)
        tok_spm = synthetic_spm();
    fprintf(stderr, "fuzz-tokenizer: %s tokenizer\n", tok ? "fixture (Qwen)" : "synthetic");
    if (!tok)
        tok = synthetic("qwen2");
    tok_main = tok;
    tok_llama3 = synthetic("llama-bpe");
    if (!tok_main || !tok_llama3 || !tok_spm)
        abort();
    return 0;
}

static bool valid_utf8(const char *s, size_t n)
{
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int r = tok_utf8_next((const uint8_t *)s + i, n - i, &cp);
        if (r <= 0)
            return false;
        i += (size_t)r;
    }
    return true;
}

static bool nfc_stable_ascii(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if ((uint8_t)s[i] >= 0x80)
            return false;
    return true;
}

/* An input starting with "GGUF" is a file: load its tokenizer metadata
 * (hostile: counts, types, merges, ids, template) and use what loads. */
static void fuzz_gguf(const uint8_t *data, size_t size)
{
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(data, size, &st, NULL, 0);
    if (!g)
        return;
    char err[256];
    struct minfer_tokenizer *t = minfer_tokenizer_from_gguf(g, &st, err, sizeof err);
    minfer_gguf_close(g); /* the tokenizer must not keep pointers into the file */
    if (!t)
        return;
    static const char text[] = "hello <|im_start|>user\n world 12345 \xe4\xbd\xa0\xff<think>";
    int32_t ids[256];
    size_t n, dn;
    if (minfer_tokenize(t, text, sizeof text - 1, true, ids, 256, &n) != MINFER_OK)
        abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= minfer_tokenizer_n_vocab(t))
            abort();
    char out[8192];
    if (minfer_detokenize(t, ids, n, true, out, sizeof out, &dn) != MINFER_OK)
        abort();
    for (int32_t id = 0; id < minfer_tokenizer_n_vocab(t) && id < 4096; id++) {
        size_t l;
        if (!minfer_token_bytes(t, id, &l) || !minfer_token_text(t, id, &l))
            abort();
        minfer_tokenizer_is_eog(t, id);
    }
    struct minfer_chat_msg m[] = {{"system", "s"}, {"user", "u"}, {"assistant", "<think>r</think>a"}};
    minfer_chat_render(t, MINFER_CHAT_UNKNOWN, m, 3, true, out, sizeof out, &dn, err, sizeof err);
    minfer_tokenizer_free(t);
}

struct span_check {
    const char *text;
    size_t len;
};

static int span_inside(const char *role, const char *content, size_t len, bool complete,
                       void *user)
{
    (void)complete;
    const struct span_check *sc = user;
    if (!role || content < sc->text || content + len > sc->text + sc->len)
        abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (size >= 4 && !memcmp(data, "GGUF", 4)) {
        fuzz_gguf(data, size);
        return 0;
    }
    bool special = data[0] & 1;
    const struct minfer_tokenizer *tok =
        data[0] & 4 ? tok_spm : data[0] & 2 ? tok_llama3 : tok_main;
    /* SentencePiece with a space prefix: the whole-text detokenizer drops
     * the first piece's leading space, the streaming one cannot; and a
     * prefix space follows every special token, so text with special
     * tokens in it does not round-trip (as in llama.cpp) */
    bool strip = tok->strip_space_prefix;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;

    size_t n;
    minfer_status st = minfer_tokenize(tok, text, len, special, NULL, 0, &n);
    if (st != MINFER_OK && st != MINFER_ERR_RANGE)
        abort();
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (minfer_tokenize(tok, text, len, special, ids, n, &n) != MINFER_OK)
        abort();
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= minfer_tokenizer_n_vocab(tok))
            abort();

    size_t dn;
    st = minfer_detokenize(tok, ids, n, true, NULL, 0, &dn);
    char *dec = malloc(dn + 1);
    if (minfer_detokenize(tok, ids, n, true, dec, dn, &dn) != MINFER_OK || !valid_utf8(dec, dn))
        abort();
    /* ASCII is NFC-stable and always valid: it must come back unchanged */
    if (nfc_stable_ascii(text, len) && !(strip && special) &&
        (dn != len || memcmp(dec, text, len)))
        abort();

    struct minfer_detok *d = minfer_detok_new(tok, true);
    size_t cap = minfer_detok_max_out(d), at = 0, cn;
    char *chunk = malloc(cap), *stream = malloc(dn + 2);
    for (size_t i = 0; i < n; i++) {
        if (minfer_detok_push(d, ids[i], chunk, cap, &cn) != MINFER_OK || !valid_utf8(chunk, cn))
            abort();
        if (at + cn > dn + 1)
            abort();
        memcpy(stream + at, chunk, cn);
        at += cn;
    }
    if (minfer_detok_flush(d, chunk, cap, &cn) != MINFER_OK || at + cn > dn + 1)
        abort();
    memcpy(stream + at, chunk, cn);
    at += cn;
    bool same = at == dn && !memcmp(stream, dec, dn);
    bool one_more_space = strip && at == dn + 1 && stream[0] == ' ' && !memcmp(stream + 1, dec, dn);
    if (!same && !one_more_space)
        abort();
    free(stream);
    minfer_detok_free(d);

    /* chat template recognition over arbitrary bytes */
    char *tmpl = malloc(len + 1);
    memcpy(tmpl, text, len);
    tmpl[len] = 0;
    struct minfer_tokenizer t;
    memset(&t, 0, sizeof t);
    t.chat_template = tmpl;
    t.chat_template_len = len;
    tok_chat_init(&t);
    free(t.chat_default_system);
    free(tmpl);
    /* and reading arbitrary text back as turns of each format: every
     * content span lies inside the text */
    for (int f = MINFER_CHAT_CHATML; f <= MINFER_CHAT_GEMMA; f++) {
        struct span_check sc = {text, len};
        if (minfer_chat_parse((enum minfer_chat_format)f, text, len, span_inside, &sc, NULL, 0) !=
            MINFER_OK)
            abort();
    }

    free(chunk);
    free(dec);
    free(ids);
    return 0;
}
