/*
 * test-session.c — session files (minfer_ctx_seq_save / seq_load): a
 * round trip gives bit-identical logits, and every class of bad file
 * (missing, truncated, trailing bytes, corrupt, another version, another
 * model, another KV type) is refused naming the file and the reason,
 * leaving the file and the context as they were.
 *
 * With MINFER_SESSION_SEEDS=DIR set, the round trip also writes its small
 * files into DIR (how tests/fuzz/corpus-session was made).
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "minfer/minfer.h"
#include "engine.h"

#define FIX_GGUF MINFER_FIXTURES_DIR "/models/fixture-A-f16.gguf"

#define SPEC(ff)                                                                            \
    "custom:n_embd=128,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=" #ff                \
    ",n_vocab=300,n_ctx=1024,tied=0"

static struct minfer_runtime *rt;
static struct minfer_model *model, *other;
static void *mem, *other_mem;
static int32_t n_vocab;
static char dir[256];

static struct minfer_model *load(const char *spec, void **m)
{
    size_t size = 0;
    *m = ts_synth("qwen2", spec, MINFER_FTYPE_MOSTLY_Q8_0, 3, 2, &size);
    char err[512] = "";
    struct minfer_model *md = ts_load_mem(rt, *m, size, "cpu", err, sizeof err);
    ck_assert_msg(md, "load: %s", err);
    return md;
}

static void setup(void)
{
    rt = ts_runtime(NULL);
    model = load(SPEC(256), &mem);
    other = load(SPEC(384), &other_mem);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(model, &info);
    n_vocab = info.n_vocab;
    snprintf(dir, sizeof dir, "/tmp/minfer-test-session-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    minfer_model_free(model);
    minfer_model_free(other);
    minfer_runtime_free(rt);
    free(mem);
    free(other_mem);
}

static struct minfer_ctx *ctx_of(struct minfer_model *m, uint32_t kv, int32_t n_seq)
{
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = 256;
    cp.type_k = cp.type_v = kv;
    cp.n_threads = 2;
    cp.n_seq_max = n_seq;
    minfer_status st;
    char err[512] = "";
    struct minfer_ctx *c = minfer_ctx_new(m, &cp, &st, err, sizeof err);
    ck_assert_msg(c, "ctx: %s", err);
    return c;
}

/* Decodes ids[n] on sequence seq of c (logits of the last). */
static void decode_seq(struct minfer_ctx *c, int32_t seq, int32_t p0, const int32_t *ids,
                       int32_t n)
{
    int32_t pos[64], nseq[64];
    const int32_t *sid[64];
    uint8_t lg[64];
    ck_assert_int_le(n, 64);
    for (int32_t i = 0; i < n; i++) {
        pos[i] = p0 + i;
        nseq[i] = 1;
        sid[i] = &seq;
        lg[i] = i == n - 1;
    }
    struct minfer_batch b = {.struct_size = sizeof b, .n_tokens = n, .tokens = ids, .pos = pos,
                             .n_seq_id = nseq, .seq_ids = sid, .logits = lg};
    minfer_status st = minfer_ctx_decode_batch(c, &b);
    ck_assert_msg(st == MINFER_OK, "decode: %s", minfer_ctx_last_error(c));
}

static void *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    void *b = malloc(*n + 1);
    ck_assert_uint_eq(fread(b, 1, *n, f), *n);
    fclose(f);
    return b;
}

static void spit(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static const int32_t prompt[20] = {5, 9, 33, 2, 250, 17, 88, 4, 199, 61,
                                   7, 7, 120, 3, 45, 290, 11, 0, 64, 100};

START_TEST(round_trip_gives_identical_logits)
{
    /* Catches rows saved from or loaded into the wrong cells, positions
     * lost, a load that keeps the sequence's old cells, and tokens not
     * given back. Sequence 2 of a busy context is saved; it is loaded into
     * sequence 0 of a fresh context; both then decode the same token. */
    struct minfer_ctx *a = ctx_of(model, MINFER_TYPE_F16, 4);
    int32_t junk[7] = {1, 2, 3, 4, 5, 6, 7};
    decode_seq(a, 0, 0, junk, 7);
    decode_seq(a, 2, 0, prompt, 20);
    char path[300];
    snprintf(path, sizeof path, "%s/s2.session", dir);
    ck_assert_int_eq(minfer_ctx_seq_save(a, 2, path, prompt, 20), MINFER_OK);
    ck_assert_int_eq(minfer_ctx_seq_save(a, 2, path, prompt, 20), MINFER_OK); /* replaces */
    char ls[400];
    snprintf(ls, sizeof ls, "test $(ls '%s' | wc -l) -eq 1", dir); /* no temp file left */
    ck_assert_int_eq(system(ls), 0);

    struct minfer_ctx *b = ctx_of(model, MINFER_TYPE_F16, 1);
    int32_t first[3] = {8, 8, 8};
    decode_seq(b, 0, 0, first, 3); /* replaced by the load */
    int32_t toks[32], n = -1;
    ck_assert_int_eq(minfer_ctx_seq_load(b, 0, path, toks, 32, &n), MINFER_OK);
    ck_assert_int_eq(n, 20);
    ck_assert_mem_eq(toks, prompt, sizeof prompt);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(b, 0), 19);
    int32_t used;
    minfer_ctx_kv_usage(b, &used, NULL);
    ck_assert_int_eq(used, 20);
    int32_t next = 42;
    decode_seq(a, 2, 20, &next, 1);
    ts_decode_ok(b, &next, 1, 0); /* the single-sequence call continues it */
    ck_assert_mem_eq(minfer_ctx_batch_logits(a, 0), minfer_ctx_logits(b, -1),
                     sizeof(float) * (size_t)n_vocab);
    const char *seeds = getenv("MINFER_SESSION_SEEDS");
    if (seeds && *seeds) {
        char cmd[700];
        snprintf(cmd, sizeof cmd, "cp '%s' '%s/round-trip-20.session'", path, seeds);
        ck_assert_int_eq(system(cmd), 0);
        int32_t one = 9;
        struct minfer_ctx *s = ctx_of(model, MINFER_TYPE_Q8_0, 1);
        decode_seq(s, 0, 0, &one, 1);
        snprintf(cmd, sizeof cmd, "%s/q8-1.session", seeds);
        ck_assert_int_eq(minfer_ctx_seq_save(s, 0, cmd, &one, 1), MINFER_OK);
        minfer_ctx_free(s);
    }
    minfer_ctx_free(a);
    minfer_ctx_free(b);
}
END_TEST

/* A refusal: status st, text naming the file and containing why; the
 * file's bytes and sequence 1 of c unchanged. */
static void refused(struct minfer_ctx *c, const char *path, minfer_status st, const char *why)
{
    size_t n0 = 0, n1 = 0;
    void *before = access(path, F_OK) == 0 ? slurp(path, &n0) : NULL;
    int32_t used0, used1, pm0 = minfer_ctx_seq_pos_max(c, 1);
    minfer_ctx_kv_usage(c, &used0, NULL);
    int32_t toks[64];
    minfer_status got = minfer_ctx_seq_load(c, 1, path, toks, 64, NULL);
    const char *e = minfer_ctx_last_error(c);
    ck_assert_msg(got == st, "%s: status %s, expected %s (%s)", why, minfer_status_str(got),
                  minfer_status_str(st), e);
    ck_assert_msg(strstr(e, path) && strstr(e, why), "error lacks the file or '%s': %s", why, e);
    minfer_ctx_kv_usage(c, &used1, NULL);
    ck_assert_int_eq(used0, used1);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 1), pm0);
    if (before) {
        void *after = slurp(path, &n1);
        ck_assert_uint_eq(n0, n1);
        ck_assert_mem_eq(before, after, n0);
        free(after);
        free(before);
    }
}

START_TEST(bad_sessions_are_refused_and_change_nothing)
{
    /* Catches each corrupt-session class being loaded (or crashing), an
     * error that does not say which file or why, and a failed load that
     * changed the sequence or wrote to the file. */
    struct minfer_ctx *a = ctx_of(model, MINFER_TYPE_F16, 2);
    decode_seq(a, 0, 0, prompt, 20);
    char good[300], bad[300];
    snprintf(good, sizeof good, "%s/good.session", dir);
    snprintf(bad, sizeof bad, "%s/bad.session", dir);
    ck_assert_int_eq(minfer_ctx_seq_save(a, 0, good, prompt, 20), MINFER_OK);
    size_t n;
    unsigned char *g = slurp(good, &n);
    struct minfer_ctx *c = ctx_of(model, MINFER_TYPE_F16, 2);
    int32_t mine[4] = {3, 1, 4, 1};
    decode_seq(c, 1, 0, mine, 4); /* sequence 1 has content a failed load must keep */

    refused(c, bad, MINFER_ERR_NOT_FOUND, "No such file");
    spit(bad, g, n - 1);
    refused(c, bad, MINFER_ERR_FORMAT, "truncated");
    spit(bad, g, 50);
    refused(c, bad, MINFER_ERR_FORMAT, "truncated");
    unsigned char *x = malloc(n + 1);
    memcpy(x, g, n);
    x[n] = 0;
    spit(bad, x, n + 1);
    refused(c, bad, MINFER_ERR_FORMAT, "trailing");
    x[n - 10] ^= 0x40; /* a bit of the last layer's V rows */
    spit(bad, x, n);
    refused(c, bad, MINFER_ERR_FORMAT, "checksum");
    memcpy(x, g, n);
    x[0] = 'X';
    spit(bad, x, n);
    refused(c, bad, MINFER_ERR_FORMAT, "not a minfer session");
    memcpy(x, g, n);
    x[8] = 2; /* version */
    spit(bad, x, n);
    refused(c, bad, MINFER_ERR_UNSUPPORTED, "version 2");
    memcpy(x, g, n);
    x[84] = 0xff; /* cell count: the sizes no longer add up */
    spit(bad, x, n);
    refused(c, bad, MINFER_ERR_FORMAT, "corrupt");

    /* another KV type, another model */
    struct minfer_ctx *q8 = ctx_of(model, MINFER_TYPE_Q8_0, 2);
    refused(q8, good, MINFER_ERR_INVALID_ARG, "KV cache");
    struct minfer_ctx *o = ctx_of(other, MINFER_TYPE_F16, 2);
    refused(o, good, MINFER_ERR_INVALID_ARG, "another model");
    /* too small a token buffer, and a full cache */
    int32_t t4[4];
    ck_assert_int_eq(minfer_ctx_seq_load(c, 1, good, t4, 4, NULL), MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_ctx_seq_pos_max(c, 1), 3);
    int32_t fill[64];
    for (int i = 0; i < 64; i++)
        fill[i] = i;
    for (int32_t p = 4; p + 64 <= 248; p += 64)
        decode_seq(c, 1, p, fill, 64);
    decode_seq(c, 1, 196, fill, 48); /* 244 of 256 cells used */
    refused(c, good, MINFER_ERR_FULL, "full");
    free(x);
    free(g);
    minfer_ctx_free(o);
    minfer_ctx_free(q8);
    minfer_ctx_free(a);
    minfer_ctx_free(c);
}
END_TEST

/* stdout of cmd, which must exit 0 */
static char *run_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (size_t got; (got = fread(buf + n, 1, cap - 1 - n, p)) > 0;)
        n += got;
    buf[n] = 0;
    ck_assert_msg(pclose(p) == 0, "%s failed: %s", cmd, buf);
    return buf;
}

/* The "generated_ids":[...] part of a JSON line (copied). */
static char *gen_ids(const char *js)
{
    const char *p = strstr(js, "\"generated_ids\":");
    ck_assert_msg(p, "no generated_ids in %s", js);
    const char *e = strchr(p, ']');
    ck_assert_ptr_nonnull(e);
    return strndup(p, (size_t)(e - p + 1));
}

START_TEST(cli_prompts_and_session)
{
    /* Catches `minfer run --prompts` giving a prompt other tokens than
     * running it alone, JSON Lines out of input order or without index,
     * and `--session` not reusing the common prefix (reused_tokens) or not
     * saving. */
    if (access(FIX_GGUF, R_OK)) {
        fprintf(stderr, "cli_prompts_and_session: %s absent, skipped\n", FIX_GGUF);
        return;
    }
    char jl[300], cmd[2048], sess[300];
    snprintf(jl, sizeof jl, "%s/p.jsonl", dir);
    snprintf(sess, sizeof sess, "%s/cli.session", dir);
    static const char *lines[3] = {"{\"prompt\": \"Hello there\"}",
                                   "{\"ids\": [785, 3974, 13876, 38835]}",
                                   "{\"prompt\": \"The capital of France is\"}"};
    static const char *alone[3] = {"-p 'Hello there'", "--ids 785,3974,13876,38835",
                                   "-p 'The capital of France is'"};
    FILE *f = fopen(jl, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "%s\n\n%s\n%s\n", lines[0], lines[1], lines[2]);
    fclose(f);
    const char *run = "MINFER_PLUGIN_PATH=" MINFER_PLUGIN_DIR " " MINFER_BUILD_DIR
                      "/bin/minfer run -m " FIX_GGUF " -n 6 --temp 0 -t 2 --raw";
    for (int par = 1; par <= 3; par += 2) {
        snprintf(cmd, sizeof cmd, "%s --prompts %s --parallel %d --json 2>/dev/null", run, jl,
                 par);
        char *out = run_capture(cmd);
        char *line = out;
        for (int i = 0; i < 3; i++) {
            char idx[32];
            snprintf(idx, sizeof idx, "{\"index\":%d,", i);
            ck_assert_msg(!strncmp(line, idx, strlen(idx)), "line %d: %s", i, line);
            char *nl = strchr(line, '\n');
            ck_assert_ptr_nonnull(nl);
            *nl = 0;
            snprintf(cmd, sizeof cmd, "%s %s --json 2>/dev/null | tr -d ' \\n\\t'", run,
                     alone[i]);
            char *one = run_capture(cmd);
            char *a = gen_ids(line), *b = gen_ids(one);
            ck_assert_msg(!strcmp(a, b), "--parallel %d prompt %d: %s, alone %s", par, i, a, b);
            free(a);
            free(b);
            free(one);
            line = nl + 1;
        }
        free(out);
    }
    /* --session: the first run saves, the second reuses the 5-token prefix */
    snprintf(cmd, sizeof cmd, "%s -p 'The capital of France is' --session %s --json 2>/dev/null",
             run, sess);
    char *o1 = run_capture(cmd);
    ck_assert_msg(strstr(o1, "\"reused_tokens\":0"), "%s", o1);
    snprintf(cmd, sizeof cmd,
             "%s -p 'The capital of France is Paris' --session %s --json 2>/dev/null", run, sess);
    char *o2 = run_capture(cmd);
    ck_assert_msg(strstr(o2, "\"reused_tokens\":5"), "%s", o2);
    snprintf(cmd, sizeof cmd, "%s -p 'The capital of France is Paris' --json 2>/dev/null"
             " | tr -d ' \\n\\t'", run);
    char *o3 = run_capture(cmd);
    char *a = gen_ids(o2), *b = gen_ids(o3);
    ck_assert_msg(!strcmp(a, b), "with session %s, without %s", a, b);
    free(a);
    free(b);
    free(o1);
    free(o2);
    free(o3);
    /* a session of another KV type is refused, naming the file */
    snprintf(cmd, sizeof cmd, "%s -p hi -ctk q8_0 -ctv q8_0 --session %s 2>&1; echo rc=$?", run,
             sess);
    FILE *p = popen(cmd, "r");
    char buf[4096] = "";
    size_t n = fread(buf, 1, sizeof buf - 1, p);
    buf[n] = 0;
    pclose(p);
    ck_assert_msg(strstr(buf, sess) && strstr(buf, "KV cache") && strstr(buf, "rc=1"), "%s",
                  buf);
}
END_TEST

Suite *session_suite(void);
Suite *session_suite(void)
{
    Suite *s = suite_create("session");
    TCase *tc = tcase_create("cpu");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, round_trip_gives_identical_logits);
    tcase_add_test(tc, bad_sessions_are_refused_and_change_nothing);
    tcase_add_test(tc, cli_prompts_and_session);
    suite_add_tcase(s, tc);
    return s;
}
