/*
 * test-tokenizer.c — the tokenizer against Hugging Face tokenizers' own
 * output (fixtures/tokenizer/cases.json, 87 strings) through both ways of
 * building it: from the GGUF (fixture-A-f16.gguf) and from tokenizer.json.
 * Plus the edges: empty and invalid UTF-8 input, special-token switches,
 * buffer sizing, streaming detokenization and a multi-megabyte input.
 */
#include <check.h>
#include <pthread.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <utf8proc.h>

#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "testutil.h"
#include "text/tokenizer.h"

#define FIX MINFER_FIXTURES_DIR

/* ---- fixtures ---- */

static char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)sz + 1);
    if (b && fread(b, 1, (size_t)sz, f) != (size_t)sz) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[sz] = 0;
        if (n)
            *n = (size_t)sz;
    }
    return b;
}

static struct minfer_tokenizer *tok_gguf, *tok_json;
static cJSON *cases, *cases_root; /* kept reachable for LeakSanitizer in forked tests */
static char why_gguf[512], why_json[512];

/* Builds the tokenizer from tokenizer.json the way a GGUF converter would:
 * vocab by id, added tokens typed control (special) or user-defined. */
static struct minfer_tokenizer *load_json(char *why, size_t why_len)
{
    char *txt = slurp(FIX "/tokenizer/tokenizer.json", NULL);
    char *cfg_txt = slurp(FIX "/tokenizer/tokenizer_config.json", NULL);
    struct minfer_tokenizer *tok = NULL;
    cJSON *j = txt ? cJSON_Parse(txt) : NULL, *cfg = cfg_txt ? cJSON_Parse(cfg_txt) : NULL;
    if (!j || !cfg) {
        snprintf(why, why_len, "cannot read %s/tokenizer/tokenizer{,_config}.json", FIX);
        goto out;
    }
    cJSON *vocab = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "vocab");
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges");
    cJSON *added = cJSON_GetObjectItem(j, "added_tokens");
    uint32_t n = 0;
    cJSON *e;
    cJSON_ArrayForEach(e, vocab) if ((uint32_t)e->valueint + 1 > n) n = (uint32_t)e->valueint + 1;
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItem(e, "id")->valueint;
        if ((uint32_t)id + 1 > n)
            n = (uint32_t)id + 1;
    }
    uint32_t nm = (uint32_t)cJSON_GetArraySize(merges);
    const char **toks = calloc(n, sizeof *toks);
    size_t *lens = calloc(n, sizeof *lens);
    int32_t *types = calloc(n, sizeof *types);
    const char **ms = calloc(nm, sizeof *ms);
    size_t *mlens = calloc(nm, sizeof *mlens);
    char **own = calloc(nm, sizeof *own);
    cJSON_ArrayForEach(e, vocab) {
        toks[e->valueint] = e->string;
        lens[e->valueint] = strlen(e->string);
        types[e->valueint] = MINFER_TOKEN_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        int id = cJSON_GetObjectItem(e, "id")->valueint;
        toks[id] = cJSON_GetObjectItem(e, "content")->valuestring;
        lens[id] = strlen(toks[id]);
        types[id] = cJSON_IsTrue(cJSON_GetObjectItem(e, "special")) ? MINFER_TOKEN_CONTROL
                                                                    : MINFER_TOKEN_USER_DEFINED;
    }
    uint32_t k = 0;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            ms[k] = e->valuestring;
        } else {
            const char *a = cJSON_GetArrayItem(e, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(e, 1)->valuestring;
            own[k] = malloc(strlen(a) + strlen(b) + 2);
            sprintf(own[k], "%s %s", a, b);
            ms[k] = own[k];
        }
        mlens[k] = strlen(ms[k]);
        k++;
    }
    for (uint32_t i = 0; i < n; i++)
        if (!toks[i]) {
            toks[i] = "";
            types[i] = MINFER_TOKEN_UNUSED;
        }
    const char *tmpl = cJSON_GetObjectItem(cfg, "chat_template")->valuestring;
    struct tok_source src = {
        .model = "gpt2", .model_len = 4, .pre = "qwen2", .pre_len = 5,
        .n_tokens = n, .tokens = toks, .token_lens = lens, .types = types,
        .n_merges = nm, .merges = ms, .merge_lens = mlens,
        .bos = -1, .eos = 151645, .eot = -1, .pad = 151643,
        .chat_template = tmpl, .chat_template_len = strlen(tmpl),
    };
    minfer_status st;
    tok = tok_new(&src, &st, why, why_len);
    for (uint32_t i = 0; i < nm; i++)
        free(own[i]);
    free(own);
    free(toks);
    free(lens);
    free(types);
    free(ms);
    free(mlens);
out:
    cJSON_Delete(j);
    cJSON_Delete(cfg);
    free(txt);
    free(cfg_txt);
    return tok;
}

static struct minfer_tokenizer *load_gguf(char *why, size_t why_len)
{
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open(FIX "/models/fixture-A-f16.gguf", &st, why, why_len);
    if (!g)
        return NULL;
    struct minfer_tokenizer *tok = minfer_tokenizer_from_gguf(g, &st, why, why_len);
    minfer_gguf_close(g); /* the tokenizer must not borrow from the file */
    return tok;
}

static void setup(void)
{
    FILE *f = fopen(FIX "/tokenizer/cases.json", "rb");
    if (!f)
        return;
    fclose(f);
    char *c = slurp(FIX "/tokenizer/cases.json", NULL);
    cases_root = cJSON_Parse(c);
    cases = cJSON_GetObjectItem(cases_root, "cases");
    free(c);
    tok_gguf = load_gguf(why_gguf, sizeof why_gguf);
    tok_json = load_json(why_json, sizeof why_json);
}

static void teardown(void)
{
    cJSON_Delete(cases_root);
    minfer_tokenizer_free(tok_gguf);
    minfer_tokenizer_free(tok_json);
}

static size_t unhex(const char *h, char *out)
{
    size_t n = strlen(h) / 2;
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        sscanf(h + 2 * i, "%2x", &v);
        out[i] = (char)v;
    }
    return n;
}

/* ---- Hugging Face parity ---- */

static void check_cases(const struct minfer_tokenizer *tok)
{
    int n = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *hex = cJSON_GetObjectItem(c, "text_utf8_hex")->valuestring;
        char *text = malloc(strlen(hex) / 2 + 1);
        size_t len = unhex(hex, text);
        cJSON *ids = cJSON_GetObjectItem(c, "ids");
        size_t want_n = (size_t)cJSON_GetArraySize(ids), got_n = 0;
        int32_t got[2048];
        minfer_status st = minfer_tokenize(tok, text, len, true, got, 2048, &got_n);
        ck_assert_int_eq(st, MINFER_OK);
        int idx = cJSON_GetObjectItem(c, "index")->valueint;
        ck_assert_msg(got_n == want_n, "case %d: %zu ids, HF has %zu", idx, got_n, want_n);
        for (size_t i = 0; i < want_n; i++)
            ck_assert_msg(got[i] == cJSON_GetArrayItem(ids, (int)i)->valueint,
                          "case %d: id %zu is %d, HF has %d", idx, i, got[i],
                          cJSON_GetArrayItem(ids, (int)i)->valueint);
        /* decode: HF's decoded text (NUL-free cases) or the input when it round-trips */
        char dec[8192];
        size_t dn;
        ck_assert_int_eq(minfer_detokenize(tok, got, got_n, true, dec, sizeof dec, &dn), MINFER_OK);
        const char *want = cJSON_GetObjectItem(c, "decoded")->valuestring;
        if (memchr(text, 0, len)) {
            ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(c, "roundtrip_exact")));
            ck_assert_msg(dn == len && !memcmp(dec, text, len), "case %d: decode differs", idx);
        } else {
            ck_assert_msg(dn == strlen(want) && !memcmp(dec, want, dn),
                          "case %d: decoded '%.*s', HF '%s'", idx, (int)dn, dec, want);
        }
        free(text);
        n++;
    }
    ck_assert_int_eq(n, 87);
}

START_TEST(hf_cases_from_gguf)
{
    /* Catches any divergence from HF ids or decode (regex, NFC, merges order,
     * byte map, special matching) with the tokenizer as a GGUF stores it. */
    if (!cases)
        MINFER_TEST_SKIP("no fixtures at %s", FIX);
    ck_assert_msg(tok_gguf, "loading the tokenizer from fixture-A-f16.gguf failed: %s", why_gguf);
    check_cases(tok_gguf);
}
END_TEST

START_TEST(hf_cases_from_json)
{
    /* Same parity through plain arrays built from tokenizer.json: catches a
     * GGUF-adapter bug being masked (or blamed) by the core. */
    if (!cases)
        MINFER_TEST_SKIP("no fixtures at %s", FIX);
    ck_assert_msg(tok_json, "building from tokenizer.json failed: %s", why_json);
    check_cases(tok_json);
}
END_TEST

START_TEST(fixture_prompts)
{
    /* The prompts the model fixtures were made from: catches a tokenizer
     * that passes cases.json but feeds the model other ids (P2 is the chat
     * template with special tokens, CJK and an emoji). */
    if (!tok_gguf)
        MINFER_TEST_SKIP("no GGUF tokenizer: %s", why_gguf);
    char *txt = slurp(FIX "/models/fixture-A.json", NULL);
    ck_assert_ptr_nonnull(txt);
    cJSON *j = cJSON_Parse(txt);
    free(txt);
    cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(j, "prompts")) {
        const char *text = cJSON_GetObjectItem(p, "text")->valuestring;
        cJSON *want = cJSON_GetObjectItem(p, "token_ids");
        int32_t got[256];
        size_t n;
        ck_assert_int_eq(minfer_tokenize(tok_gguf, text, strlen(text), true, got, 256, &n),
                         MINFER_OK);
        ck_assert_uint_eq(n, (size_t)cJSON_GetArraySize(want));
        for (size_t i = 0; i < n; i++)
            ck_assert_int_eq(got[i], cJSON_GetArrayItem(want, (int)i)->valueint);
    }
    cJSON_Delete(j);
}
END_TEST

/* ---- edges ---- */

static const struct minfer_tokenizer *any_tok(void)
{
    return tok_gguf ? tok_gguf : tok_json;
}

START_TEST(empty_input)
{
    /* Catches a crash or a stray token on "" and on a NULL text of length 0. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    size_t n = 99;
    ck_assert_int_eq(minfer_tokenize(tok, "", 0, true, NULL, 0, &n), MINFER_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(minfer_tokenize(tok, NULL, 0, false, NULL, 0, &n), MINFER_OK);
    ck_assert_uint_eq(n, 0);
    char out[4];
    ck_assert_int_eq(minfer_detokenize(tok, NULL, 0, true, out, sizeof out, &n), MINFER_OK);
    ck_assert_uint_eq(n, 0);
}
END_TEST

START_TEST(invalid_utf8_replaced)
{
    /* Catches invalid bytes crashing PCRE2/utf8proc or being dropped: each
     * maximal invalid subsequence must become one U+FFFD, as documented. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    static const char bad[] = "a\xff b\xe4\xbd c\xed\xa0\x80 d\xf0\x9f\x99";
    static const char good[] = "a\xef\xbf\xbd b\xef\xbf\xbd c\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
                               " d\xef\xbf\xbd";
    int32_t a[64], b[64];
    size_t na, nb;
    ck_assert_int_eq(minfer_tokenize(tok, bad, sizeof bad - 1, false, a, 64, &na), MINFER_OK);
    ck_assert_int_eq(minfer_tokenize(tok, good, sizeof good - 1, false, b, 64, &nb), MINFER_OK);
    ck_assert_uint_eq(na, nb);
    ck_assert_mem_eq(a, b, na * sizeof *a);
}
END_TEST

START_TEST(nfc_spans_match_whole_text_nfc)
{
    /* The tokenizer normalises only spans around non-inert code points;
     * this catches a span cut in the wrong place (a starter separated from
     * its combining marks, Hangul L+V+T or kana + voicing mark not
     * composed, marks not reordered, singletons like U+212B kept) by
     * comparing with utf8proc's NFC of the whole text. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    static const char *const texts[] = {
        "cafe\xcc\x81 x",                       /* e + acute */
        "\xe1\x84\x80\xe1\x85\xa1\xe1\x86\xa8 ", /* Hangul jamo L V T -> one syllable */
        "\xed\x95\x98\xe1\x86\xa8",             /* syllable LV + T */
        "\xe3\x82\xab\xe3\x82\x99\xe4\xb8\x80",  /* katakana ka + voicing, then CJK */
        "\xe2\x84\xab and \xe2\x84\xa6",          /* angstrom, ohm singletons */
        "a\xcc\x81\xcc\xa8 q\xcc\xa3\xcc\x87",  /* marks to reorder */
        "\xcd\x84 \xe4\xb8\x80\xcc\x81",          /* U+0344; CJK + mark */
        "\xef\xac\x81le \xf0\x9f\x98\x80\xcc\x81", /* ligature (NFC keeps), emoji + mark */
    };
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        const char *t = texts[k];
        utf8proc_uint8_t *norm = NULL;
        utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)t, (utf8proc_ssize_t)strlen(t),
                                          &norm, UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        ck_assert_int_ge(m, 0);
        int32_t a[64], b[64];
        size_t na, nb;
        ck_assert_int_eq(minfer_tokenize(tok, t, strlen(t), false, a, 64, &na), MINFER_OK);
        ck_assert_int_eq(minfer_tokenize(tok, (const char *)norm, (size_t)m, false, b, 64, &nb),
                         MINFER_OK);
        char da[256], db[256];
        size_t la, lb;
        ck_assert_int_eq(minfer_detokenize(tok, a, na, true, da, sizeof da, &la), MINFER_OK);
        ck_assert_int_eq(minfer_detokenize(tok, b, nb, true, db, sizeof db, &lb), MINFER_OK);
        ck_assert_msg(la == (size_t)m && !memcmp(da, norm, la), "text %zu not NFC-normalised", k);
        ck_assert_uint_eq(na, nb);
        ck_assert_mem_eq(a, b, na * sizeof *a);
        free(norm);
    }
}
END_TEST

START_TEST(whitespace_is_unicode_white_space)
{
    /* Catches PCRE2's \s (which still counts U+180E MONGOLIAN VOWEL
     * SEPARATOR as a space) being used instead of Unicode White_Space as
     * HF's Rust regex does: "\<U+180E>'t" must split as punctuation "\<180E>'"
     * + "t", not "\" + space + contraction "'t". Ids from an independent
     * reimplementation (Python regex + the tokenizer.json merges). */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    static const char text[] = "\\\xe1\xa0\x8e't \xe1\xa0\x8e \xe2\x80\x8b\xc2\xa0x\xc2\x85\xe3\x80\x80 ";
    static const int32_t want[] = {59, 123970, 236, 6, 83, 86089, 254, 236, 29748, 4102, 87, 126,
                                   227, 22441, 220};
    int32_t ids[32];
    size_t n;
    ck_assert_int_eq(minfer_tokenize(tok, text, sizeof text - 1, false, ids, 32, &n), MINFER_OK);
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    ck_assert_mem_eq(ids, want, sizeof want);
}
END_TEST

struct tok_job {
    const struct minfer_tokenizer *tok;
    const char *text;
    size_t len;
    int32_t *ids;
    size_t n;
    minfer_status st;
};

static void *tok_thread(void *arg)
{
    struct tok_job *j = arg;
    for (int r = 0; r < 3; r++)
        j->st = minfer_tokenize(j->tok, j->text, j->len, true, j->ids, 4096, &j->n);
    return NULL;
}

START_TEST(concurrent_tokenize)
{
    /* Catches hidden shared mutable state (a cache or match data kept in
     * the tokenizer) that would corrupt results when threads tokenize with
     * one tokenizer at once, as the header promises they may. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    static const char *texts[4] = {"The quick brown fox jumps over the lazy dog. ",
                                   "\xe4\xbd\xa0\xe5\xa5\xbd\xef\xbc\x8c\xe4\xb8\x96\xe7\x95\x8c cafe\xcc\x81 ",
                                   "int main(void) { return 0; }\n<|im_start|>",
                                   "   \t\n 12345 \xf0\x9f\x99\x82 "};
    enum { T = 4, REP = 150 };
    struct tok_job jobs[T];
    char *bufs[T];
    pthread_t th[T];
    for (int t = 0; t < T; t++) {
        size_t l = strlen(texts[t]);
        bufs[t] = malloc(l * REP);
        for (int r = 0; r < REP; r++)
            memcpy(bufs[t] + r * l, texts[t], l);
        jobs[t] = (struct tok_job){tok, bufs[t], l * REP, malloc(4096 * sizeof(int32_t)), 0,
                                   MINFER_OK};
        ck_assert_int_eq(pthread_create(&th[t], NULL, tok_thread, &jobs[t]), 0);
    }
    for (int t = 0; t < T; t++)
        ck_assert_int_eq(pthread_join(th[t], NULL), 0);
    for (int t = 0; t < T; t++) {
        int32_t *solo = malloc(4096 * sizeof *solo);
        size_t n;
        ck_assert_int_eq(jobs[t].st, MINFER_OK);
        ck_assert_int_eq(minfer_tokenize(tok, bufs[t], jobs[t].len, true, solo, 4096, &n),
                         MINFER_OK);
        ck_assert_uint_eq(n, jobs[t].n);
        ck_assert_mem_eq(solo, jobs[t].ids, n * sizeof *solo);
        free(solo);
        free(jobs[t].ids);
        free(bufs[t]);
    }
}
END_TEST

START_TEST(special_only_when_asked)
{
    /* Catches control tokens being matched in user text without
     * parse_special (prompt injection of <|im_start|>), and user-defined
     * tokens (<think>) not being matched, which HF always does. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    int32_t ids[32];
    size_t n;
    ck_assert_int_eq(minfer_tokenize(tok, "<|im_start|>", 12, true, ids, 32, &n), MINFER_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 151644);
    ck_assert_int_eq(minfer_tokenize(tok, "<|im_start|>", 12, false, ids, 32, &n), MINFER_OK);
    ck_assert_uint_gt(n, 1);
    for (size_t i = 0; i < n; i++)
        ck_assert_int_lt(ids[i], 151643);
    char out[64];
    size_t dn;
    ck_assert_int_eq(minfer_detokenize(tok, ids, n, true, out, sizeof out, &dn), MINFER_OK);
    ck_assert_uint_eq(dn, 12);
    ck_assert_mem_eq(out, "<|im_start|>", 12);
    ck_assert_int_eq(minfer_tokenize(tok, "<think>", 7, false, ids, 32, &n), MINFER_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 151667);
    /* render_special=false drops control tokens, as skip_special_tokens does */
    int32_t seq[3] = {151644, 9707, 151645};
    ck_assert_int_eq(minfer_detokenize(tok, seq, 3, false, out, sizeof out, &dn), MINFER_OK);
    ck_assert_uint_eq(dn, 5);
    ck_assert_mem_eq(out, "Hello", 5);
    /* out-of-range ids are refused, not read */
    int32_t badid = 1 << 30;
    ck_assert_int_eq(minfer_detokenize(tok, &badid, 1, true, out, sizeof out, &dn),
                     MINFER_ERR_INVALID_ARG);
}
END_TEST

START_TEST(ids_and_buffer_sizing)
{
    /* Catches writing past cap, and a short buffer not reporting the count
     * needed; also the special ids a generation loop stops on. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    int32_t ids[4] = {-7, -7, -7, -7};
    size_t n;
    ck_assert_int_eq(minfer_tokenize(tok, "Hello world", 11, false, ids, 1, &n), MINFER_ERR_RANGE);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(ids[1], -7);
    ck_assert_int_eq(minfer_tokenize(tok, "Hello world", 11, false, ids, 2, &n), MINFER_OK);
    ck_assert_int_eq(ids[0], 9707);
    ck_assert_int_eq(ids[1], 1879);
    char out[4];
    ck_assert_int_eq(minfer_detokenize(tok, ids, 2, true, out, 4, &n), MINFER_ERR_RANGE);
    ck_assert_uint_eq(n, 11);
    ck_assert(minfer_tokenizer_is_eog(tok, 151645));
    ck_assert(minfer_tokenizer_is_eog(tok, 151643));
    ck_assert(!minfer_tokenizer_is_eog(tok, 9707));
    ck_assert_int_eq(minfer_tokenizer_eot(tok), 151645);
    ck_assert_int_eq(minfer_tokenizer_token_type(tok, 151644), MINFER_TOKEN_CONTROL);
    size_t l;
    ck_assert_str_eq(minfer_token_text(tok, 220, &l), "\xc4\xa0"); /* "Ġ" */
    ck_assert_mem_eq(minfer_token_bytes(tok, 220, &l), " ", 1);
    ck_assert_ptr_null(minfer_token_bytes(tok, -1, &l));
}
END_TEST

START_TEST(gguf_tokenizer_metadata)
{
    /* Catches the GGUF adapter losing ids, vocab rows or the template. */
    if (!tok_gguf)
        MINFER_TEST_SKIP("no GGUF tokenizer: %s", why_gguf);
    ck_assert_int_eq(minfer_tokenizer_n_vocab(tok_gguf), 151936);
    ck_assert_int_eq(minfer_tokenizer_eos(tok_gguf), 151645);
    ck_assert_int_eq(minfer_tokenizer_bos(tok_gguf), 151643);
    ck_assert_int_eq(minfer_tokenizer_pad(tok_gguf), 151643);
    ck_assert(!minfer_tokenizer_add_bos(tok_gguf));
    ck_assert_int_eq(minfer_tokenizer_token_type(tok_gguf, 151669), MINFER_TOKEN_UNUSED);
    size_t l = 9;
    minfer_token_bytes(tok_gguf, 151669, &l);
    ck_assert_uint_eq(l, 0);
    ck_assert_int_eq(minfer_tokenizer_chat_format(tok_gguf), MINFER_CHAT_CHATML);
}
END_TEST

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

START_TEST(streaming_detok_holds_partial_utf8)
{
    /* Catches a streaming decoder that prints half a character (emoji and
     * CJK split across byte tokens) or loses held bytes: every chunk must be
     * valid UTF-8 and the chunks must add up to the one-shot decode. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    const char *text = "Hello! 你好, 世界 🌍 🧑🏿\u200d💻 é<|im_end|>";
    int32_t ids[64];
    size_t n;
    ck_assert_int_eq(minfer_tokenize(tok, text, strlen(text), true, ids, 64, &n), MINFER_OK);
    struct minfer_detok *d = minfer_detok_new(tok, true);
    ck_assert_ptr_nonnull(d);
    char *chunk = malloc(minfer_detok_max_out(d));
    char all[512];
    size_t an = 0, cn;
    int held = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(minfer_detok_push(d, ids[i], chunk, minfer_detok_max_out(d), &cn),
                         MINFER_OK);
        ck_assert(valid_utf8(chunk, cn));
        if (cn == 0)
            held++;
        memcpy(all + an, chunk, cn);
        an += cn;
    }
    ck_assert_int_eq(minfer_detok_flush(d, chunk, minfer_detok_max_out(d), &cn), MINFER_OK);
    ck_assert_uint_eq(cn, 0);
    ck_assert_int_gt(held, 0); /* the text does split characters across tokens */
    ck_assert_uint_eq(an, strlen(text));
    ck_assert_mem_eq(all, text, an);

    /* a lone lead byte at the end of the stream comes out as U+FFFD */
    int32_t e4 = -1;
    for (int32_t id = 0; id < minfer_tokenizer_n_vocab(tok) && e4 < 0; id++) {
        size_t l;
        const char *b = minfer_token_bytes(tok, id, &l);
        if (l == 1 && (uint8_t)b[0] == 0xE4)
            e4 = id;
    }
    ck_assert_int_ge(e4, 0);
    ck_assert_int_eq(minfer_detok_push(d, e4, chunk, 16, &cn), MINFER_OK);
    ck_assert_uint_eq(cn, 0);
    /* too small a buffer leaves the state alone */
    ck_assert_int_eq(minfer_detok_push(d, 9707, chunk, 2, &cn), MINFER_ERR_RANGE);
    ck_assert_uint_eq(cn, 8); /* U+FFFD + "Hello" */
    ck_assert_int_eq(minfer_detok_flush(d, chunk, 16, &cn), MINFER_OK);
    ck_assert_uint_eq(cn, 3);
    ck_assert_mem_eq(chunk, "\xef\xbf\xbd", 3);
    free(chunk);
    minfer_detok_free(d);
}
END_TEST

START_TEST(megabytes_in_linear_time)
{
    /* Catches quadratic behaviour (per-word rescans, whole-text regex
     * restarts, a merge loop without a heap, unbounded mark reordering) on
     * 4 MiB of mixed text, a single 1 MiB word and a 100k combining-mark
     * run; checks the mixed text still decodes to the input. */
    const struct minfer_tokenizer *tok = any_tok();
    if (!tok)
        MINFER_TEST_SKIP("no tokenizer: %s", why_gguf);
    static const char *parts[] = {"The quick brown fox jumps over the lazy dog. ",
                                  "int main(void) { return 0; }\n", "你好，世界！", "🙂 ",
                                  "1234567890 ", "   \t\n", "Tiếng Việt ", "x²+y³ "};
    size_t cap = 4u << 20, len = 0;
    char *text = malloc(cap + 64);
    unsigned r = 1;
    while (len < cap) {
        r = r * 1103515245u + 12345u;
        const char *p = parts[(r >> 16) % 8];
        memcpy(text + len, p, strlen(p));
        len += strlen(p);
    }
    size_t n;
    clock_t t0 = clock();
    ck_assert_int_eq(minfer_tokenize(tok, text, len, false, NULL, 0, &n), MINFER_ERR_RANGE);
    double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    printf("tokenize: %zu bytes -> %zu ids in %.3f s (%.1f MB/s)\n", len, n, secs,
           len / secs / 1e6);
    ck_assert_msg(secs < 20.0, "4 MiB took %.1f s", secs);
    int32_t *ids = malloc(n * sizeof *ids);
    ck_assert_int_eq(minfer_tokenize(tok, text, len, false, ids, n, &n), MINFER_OK);
    char *dec = malloc(len + 64);
    size_t dn;
    ck_assert_int_eq(minfer_detokenize(tok, ids, n, true, dec, len + 64, &dn), MINFER_OK);
    ck_assert_uint_eq(dn, len);
    ck_assert(!memcmp(dec, text, len));
    free(ids);
    memset(text, 'x', 1u << 20);
    t0 = clock();
    ck_assert_int_eq(minfer_tokenize(tok, text, 1u << 20, false, NULL, 0, &n), MINFER_ERR_RANGE);
    secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    ck_assert_msg(secs < 10.0, "one 1 MiB word took %.1f s", secs);
    ck_assert_uint_gt(n, 1000);
    /* 100k alternating combining marks (ccc 230, 220): utf8proc reorders a
     * mark run in quadratic time (~100 s here before runs were capped) */
    text[0] = 'a';
    for (size_t i = 0; i < 100000; i++)
        memcpy(text + 1 + 4 * i, "\xcc\x81\xcc\x96", 4);
    t0 = clock();
    ck_assert_int_eq(minfer_tokenize(tok, text, 400001, false, NULL, 0, &n), MINFER_ERR_RANGE);
    secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
    ck_assert_msg(secs < 10.0, "100k combining marks took %.1f s", secs);
    free(text);
    free(dec);
}
END_TEST

/* A byte-level BPE over the 256 byte tokens plus a few words, with the
 * given pre-tokenizer. */
static struct minfer_tokenizer *synthetic(const char *pre)
{
    enum { NB = 256, NX = 5 };
    static char store[NB][4];
    const char *toks[NB + NX];
    size_t lens[NB + NX];
    uint32_t next = 256;
    for (int b = 0; b < NB; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        lens[b] = (size_t)tok_utf8_put(printable ? (uint32_t)b : next++, store[b]);
        toks[b] = store[b];
    }
    static const char *extra[NX] = {"12", "123", "45", "he", "hello"};
    for (int i = 0; i < NX; i++) {
        toks[NB + i] = extra[i];
        lens[NB + i] = strlen(extra[i]);
    }
    static const char *merges[] = {"1 2", "12 3", "4 5", "h e"};
    size_t mlens[4];
    for (int i = 0; i < 4; i++)
        mlens[i] = strlen(merges[i]);
    struct tok_source src = {.model = "gpt2", .model_len = 4, .pre = pre, .pre_len = strlen(pre),
                             .n_tokens = NB + NX, .tokens = toks, .token_lens = lens,
                             .n_merges = 4, .merges = merges, .merge_lens = mlens,
                             .bos = -1, .eos = -1, .eot = -1, .pad = -1};
    minfer_status st;
    char err[256];
    struct minfer_tokenizer *t = tok_new(&src, &st, err, sizeof err);
    ck_assert_msg(t, "synthetic %s: %s", pre, err);
    return t;
}

START_TEST(pretokenizers_are_data)
{
    /* Catches a pre-tokenizer's data not taking effect (digit grouping,
     * NFC on/off, ignore_merges) — the second pre-tokenizer (Llama 3's
     * "llama-bpe") differs from qwen2 only by its table entry. */
    struct minfer_tokenizer *q = synthetic("qwen2"), *l = synthetic("llama-bpe");
    int32_t ids[16];
    size_t n;
    /* digits: one at a time (qwen2) vs groups of three (llama3) */
    ck_assert_int_eq(minfer_tokenize(q, "12345", 5, false, ids, 16, &n), MINFER_OK);
    ck_assert_uint_eq(n, 5);
    ck_assert_int_eq(minfer_tokenize(l, "12345", 5, false, ids, 16, &n), MINFER_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(ids[0], 257); /* "123" */
    ck_assert_int_eq(ids[1], 258); /* "45" */
    /* ignore_merges: "hello" is a token no merge chain reaches */
    ck_assert_int_eq(minfer_tokenize(q, "hello", 5, false, ids, 16, &n), MINFER_OK);
    ck_assert_uint_eq(n, 4); /* he l l o */
    ck_assert_int_eq(ids[0], 259);
    ck_assert_int_eq(minfer_tokenize(l, "hello", 5, false, ids, 16, &n), MINFER_OK);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 260);
    /* NFC: qwen2 composes e + U+0301, llama3 has no normaliser */
    char out[16];
    ck_assert_int_eq(minfer_tokenize(q, "e\xcc\x81", 3, false, ids, 16, &n), MINFER_OK);
    ck_assert_int_eq(minfer_detokenize(q, ids, n, true, out, sizeof out, &n), MINFER_OK);
    ck_assert_uint_eq(n, 2);
    ck_assert_mem_eq(out, "\xc3\xa9", 2);
    ck_assert_int_eq(minfer_tokenize(l, "e\xcc\x81", 3, false, ids, 16, &n), MINFER_OK);
    ck_assert_int_eq(minfer_detokenize(l, ids, n, true, out, sizeof out, &n), MINFER_OK);
    ck_assert_uint_eq(n, 3);
    ck_assert_mem_eq(out, "e\xcc\x81", 3);
    minfer_tokenizer_free(q);
    minfer_tokenizer_free(l);
}
END_TEST

/* Catches the llama-bpe (Llama 3) regex splitting differently from the
 * GPT-4 pattern it states: contractions, a lone space before digits,
 * digits in threes, a space joined to the next word, punctuation with its
 * newlines, and a run of spaces leaving its last one to the word after.
 * Each expected piece is a whole token (byte-level spelling) and
 * llama-bpe takes whole-token pieces before merging, so the ids spell the
 * split. The pieces were derived by hand from the pattern. */
START_TEST(llama_bpe_splits_as_its_pattern)
{
    enum { NB = 256 };
    static const char *const piece[] = {"'m", "123", "45", "\xC4\xA0hello",
                                        "!!\xC4\x8A\xC4\x8A", "\xC4\xA0world"};
    enum { NP = sizeof piece / sizeof piece[0] };
    static char store[NB][4];
    const char *toks[NB + NP];
    size_t lens[NB + NP];
    uint32_t next = 256;
    for (int b = 0; b < NB; b++) {
        bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        lens[b] = (size_t)tok_utf8_put(printable ? (uint32_t)b : next++, store[b]);
        toks[b] = store[b];
    }
    for (int i = 0; i < NP; i++) {
        toks[NB + i] = piece[i];
        lens[NB + i] = strlen(piece[i]);
    }
    struct tok_source src = {.model = "gpt2", .model_len = 4, .pre = "llama-bpe", .pre_len = 9,
                             .n_tokens = NB + NP, .tokens = toks, .token_lens = lens,
                             .bos = -1, .eos = -1, .eot = -1, .pad = -1};
    minfer_status st;
    char err[256];
    struct minfer_tokenizer *t = tok_new(&src, &st, err, sizeof err);
    ck_assert_msg(t, "%s", err);
    static const char text[] = "I'm 12345 hello!!\n\n  world";
    /* I | 'm | " " | 123 | 45 | " hello" | "!!\n\n" | " " | " world"; one-byte
     * pieces are the byte tokens, ids 0..255 in byte order */
    const int32_t want[] = {'I', NB + 0, ' ', NB + 1, NB + 2, NB + 3, NB + 4, ' ', NB + 5};
    int32_t ids[32];
    size_t n = 0;
    ck_assert_int_eq(minfer_tokenize(t, text, sizeof text - 1, false, ids, 32, &n), MINFER_OK);
    ck_assert_uint_eq(n, sizeof want / sizeof want[0]);
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(ids[i] == want[i], "piece %zu: id %d, expected %d", i, ids[i], want[i]);
    minfer_tokenizer_free(t);
}
END_TEST

START_TEST(ten_million_whitespace_run)
{
    /* Catches a long whitespace run failing to tokenize: the regex's
     * backtracking over the run hit PCRE2's default match limit ("invalid
     * state" at 10 million spaces). Each run must tokenize, in linear time,
     * and decode back to its bytes; both pre-tokenizers, and runs that end
     * in a letter, in nothing, and that mix tabs, U+3000 and newlines. */
    enum { RUN = 10000000 };
    enum { CAP = RUN / 2 * 3 + 16 }; /* bytes of the mixed run; ids never exceed bytes */
    char *text = malloc(CAP), *dec = malloc(CAP);
    int32_t *ids = malloc(CAP * sizeof *ids);
    ck_assert(text && dec && ids);
    const char *pres[] = {"qwen2", "llama-bpe"};
    for (int p = 0; p < 2; p++) {
        struct minfer_tokenizer *t = synthetic(pres[p]);
        for (int shape = 0; shape < 3; shape++) {
            size_t len = 0;
            text[len++] = 'a';
            if (shape == 2) {
                static const char unit[] = " \t\xe3\x80\x80\n"; /* 6 bytes, 4 characters */
                for (size_t i = 0; i < RUN / 4; i++, len += 6)
                    memcpy(text + len, unit, 6);
            } else {
                memset(text + len, ' ', RUN);
                len += RUN;
            }
            if (shape == 0)
                text[len++] = 'b';
            size_t n;
            clock_t t0 = clock();
            minfer_status st = minfer_tokenize(t, text, len, false, ids, CAP, &n);
            double secs = (double)(clock() - t0) / CLOCKS_PER_SEC;
            ck_assert_msg(st == MINFER_OK, "%s shape %d: %s", pres[p], shape,
                          minfer_status_str(st));
#if defined(__SANITIZE_ADDRESS__)
            const double limit = 60.0; /* ASan + UBSan: several times slower */
#else
            const double limit = 10.0; /* measured 0.2-0.5 s per run (2-core CI box) */
#endif
            ck_assert_msg(secs < limit, "%s shape %d took %.1f s", pres[p], shape, secs);
            size_t dn;
            ck_assert_int_eq(minfer_detokenize(t, ids, n, true, dec, CAP, &dn), MINFER_OK);
            ck_assert_uint_eq(dn, len);
            ck_assert(!memcmp(dec, text, len));
        }
        minfer_tokenizer_free(t);
    }
    free(text);
    free(dec);
    free(ids);
}
END_TEST

/* Runs a shell command, returns its stdout (malloc'd) or NULL. */
static char *run_cmd(const char *cmd, size_t *n)
{
    FILE *p = popen(cmd, "r");
    if (!p)
        return NULL;
    size_t cap = 1 << 16, len = 0, r;
    char *b = malloc(cap);
    while ((r = fread(b + len, 1, cap - len - 1, p)) > 0) {
        len += r;
        if (len + 1 == cap)
            b = realloc(b, cap *= 2);
    }
    b[len] = 0;
    if (pclose(p) != 0) {
        free(b);
        return NULL;
    }
    *n = len;
    return b;
}

START_TEST(cli_tokenize_detokenize)
{
    /* Catches the CLI reading -f as text (losing bytes after a NUL or
     * invalid UTF-8), --special not switching control tokens, a JSON array
     * that does not parse, and detokenize printing something else than the
     * library decodes. */
    static const char bin[] = MINFER_BUILD_DIR "/bin/minfer";
    static const char gguf[] = FIX "/models/fixture-A-f16.gguf";
    FILE *f = fopen(bin, "rb");
    if (!f)
        MINFER_TEST_SKIP("%s not built", bin);
    fclose(f);
    if (!tok_gguf)
        MINFER_TEST_SKIP("no GGUF tokenizer: %s", why_gguf);
    char path[] = "/tmp/minfer-tok-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    static const char data[] = "Hello\0 <|im_start|>\xff\n\xe4\xbd\xa0";
    ck_assert_int_eq(write(fd, data, sizeof data - 1), (ssize_t)(sizeof data - 1));
    close(fd);
    for (int special = 0; special < 2; special++) {
        char cmd[4096];
        snprintf(cmd, sizeof cmd, "'%s' tokenize -m '%s' -f '%s'%s", bin, gguf, path,
                 special ? " --special" : " --no-special");
        size_t n;
        char *out = run_cmd(cmd, &n);
        ck_assert_msg(out, "%s failed", cmd);
        cJSON *arr = cJSON_Parse(out);
        ck_assert_msg(cJSON_IsArray(arr), "not a JSON array: %s", out);
        int32_t want[64];
        size_t nw;
        ck_assert_int_eq(minfer_tokenize(tok_gguf, data, sizeof data - 1, special, want, 64, &nw),
                         MINFER_OK);
        ck_assert_uint_eq((size_t)cJSON_GetArraySize(arr), nw);
        char list[1024];
        size_t o = 0;
        for (size_t i = 0; i < nw; i++) {
            ck_assert_int_eq(cJSON_GetArrayItem(arr, (int)i)->valueint, want[i]);
            o += (size_t)snprintf(list + o, sizeof list - o, i ? ",%d" : "%d", want[i]);
        }
        cJSON_Delete(arr);
        free(out);
        snprintf(cmd, sizeof cmd, "'%s' detokenize -m '%s' --ids '%s'", bin, gguf, list);
        out = run_cmd(cmd, &n);
        ck_assert_msg(out, "%s failed", cmd);
        char dec[256];
        size_t dn;
        ck_assert_int_eq(minfer_detokenize(tok_gguf, want, nw, true, dec, sizeof dec, &dn),
                         MINFER_OK);
        ck_assert_uint_eq(n, dn + 1); /* plus the newline */
        ck_assert_mem_eq(out, dec, dn);
        free(out);
    }
    unlink(path);
}
END_TEST

START_TEST(unsupported_tokenizer_refused)
{
    /* Catches an unknown model/pre-tokenizer being loaded with the wrong
     * rules instead of a clear refusal naming the value. */
    const char *toks[1] = {"a"};
    size_t lens[1] = {1};
    struct tok_source src = {.model = "t5", .model_len = 2, .pre = "qwen2", .pre_len = 5,
                             .n_tokens = 1, .tokens = toks, .token_lens = lens,
                             .bos = -1, .eos = -1, .eot = -1, .pad = -1};
    minfer_status st;
    char err[256];
    ck_assert_ptr_null(tok_new(&src, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "t5"));
    src.model = "gpt2";
    src.model_len = 4;
    src.pre = "deepseek-coder";
    src.pre_len = 14;
    ck_assert_ptr_null(tok_new(&src, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "deepseek-coder"));
    /* a byte-level vocabulary missing byte tokens is malformed, not a crash */
    src.pre = "qwen2";
    src.pre_len = 5;
    ck_assert_ptr_null(tok_new(&src, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_FORMAT);
}
END_TEST

Suite *tokenizer_suite(void);
Suite *tokenizer_suite(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_unchecked_fixture(tc, setup, teardown);
    tcase_add_test(tc, hf_cases_from_gguf);
    tcase_add_test(tc, hf_cases_from_json);
    tcase_add_test(tc, fixture_prompts);
    tcase_add_test(tc, empty_input);
    tcase_add_test(tc, invalid_utf8_replaced);
    tcase_add_test(tc, nfc_spans_match_whole_text_nfc);
    tcase_add_test(tc, whitespace_is_unicode_white_space);
    tcase_add_test(tc, concurrent_tokenize);
    tcase_add_test(tc, special_only_when_asked);
    tcase_add_test(tc, ids_and_buffer_sizing);
    tcase_add_test(tc, gguf_tokenizer_metadata);
    tcase_add_test(tc, streaming_detok_holds_partial_utf8);
    tcase_add_test(tc, megabytes_in_linear_time);
    tcase_add_test(tc, ten_million_whitespace_run);
    tcase_add_test(tc, llama_bpe_splits_as_its_pattern);
    tcase_add_test(tc, pretokenizers_are_data);
    tcase_add_test(tc, cli_tokenize_detokenize);
    tcase_add_test(tc, unsupported_tokenizer_refused);
    suite_add_tcase(s, tc);
    return s;
}
