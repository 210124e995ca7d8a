/*
 * test-synth.c — the model tools: the quantization-mix rule, the parallel
 * tensor stream behind the writer, minfer_synth (shapes, metadata,
 * tokenizers, valid finite blocks, determinism) and minfer_quantize
 * (bytes equal to the reference quantizer row by row, refusals).
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "minfer/quant.h"
#include "minfer/quant-ref.h"
#include "engine.h"
#include "modeltools/tensor-stream.h"
#include "testutil.h"

/* ---- helpers ---- */

static char tmpdir[256];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/minfer-test-synth-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmpdir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

/* A small qwen3 (or qwen2) shape whose rows fit every block size. */
static struct minfer_synth_opts small_opts(const char *arch, uint32_t ftype)
{
    struct minfer_synth_opts o = {.struct_size = sizeof o, .ftype = ftype, .seed = 7};
    char err[256];
    ck_assert_int_eq(minfer_synth_shape_parse(arch,
                                              "custom:n_embd=256,n_layer=3,n_head=4,n_head_kv=2,"
                                              "head_dim=64,n_ff=512,n_vocab=1000,n_ctx=512",
                                              &o.shape, err, sizeof err),
                     MINFER_OK);
    return o;
}

/* Synthesizes o in memory and opens the result, failing the test with the
 * architecture and the message when either step fails. The caller closes
 * the file, then frees *mem with minfer_synth_mem_free. */
static struct minfer_gguf *synth_open(const struct minfer_synth_opts *o, void **mem, size_t *size)
{
    char err[512];
    ck_assert_msg(minfer_synth(o, NULL, mem, size, err, sizeof err) == MINFER_OK, "%s: %s",
                  o->shape.arch, err);
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(*mem, *size, &st, err, sizeof err);
    ck_assert_msg(g, "%s: the synthesized file does not open: %s", o->shape.arch, err);
    return g;
}

/* ---- the mix rule ---- */

static uint32_t mix_type(uint32_t ftype, bool has_output, int n_layer, const char *name,
                         int64_t ne0, int64_t ne1)
{
    struct minfer_mix m = {.ftype = ftype, .has_output = has_output, .n_attn_v = n_layer,
                           .n_layer = n_layer};
    int64_t ne[2] = {ne0, ne1};
    return minfer_mix_tensor_type(&m, name, ne1 > 1 ? 2 : 1, ne, MINFER_TYPE_F16);
}

/* One tensor of an F16 model and the type the mix must give it. */
struct mix_case {
    uint32_t ftype;
    bool has_output; /* false: tied, token_embd is the output */
    int n_layer;
    const char *name;
    int64_t ne0, ne1;
    uint32_t want;
};

/* A table rather than one assertion per case so that a failure names the
 * case (tensor, shape, mix, model) and both types by name. */
static void check_mix_cases(const struct mix_case *c, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t got = mix_type(c[i].ftype, c[i].has_output, c[i].n_layer, c[i].name, c[i].ne0,
                                c[i].ne1);
        ck_assert_msg(got == c[i].want,
                      "%s [%lld, %lld] of a %d-layer %s model (%s output): %s, expected %s",
                      c[i].name, (long long)c[i].ne0, (long long)c[i].ne1, c[i].n_layer,
                      minfer_ftype_name(c[i].ftype), c[i].has_output ? "own" : "tied",
                      minfer_type_name(got), minfer_type_name(c[i].want));
    }
}

/* Catches a mix that differs from llama-quantize's Q4_K_M for a 28-layer
 * model (qwen2.5-7b): the layers getting Q6_K attn_v/ffn_down are the
 * first 3, the last 4 and every third in between (use_more_bits). */
START_TEST(mix_q4_k_m_layers)
{
    const int want[] = {0, 1, 2, 5, 8, 11, 14, 17, 20, 23, 24, 25, 26, 27};
    int wi = 0;
    for (int i = 0; i < 28; i++) {
        char v[64], d[64], q[64];
        snprintf(v, sizeof v, "blk.%d.attn_v.weight", i);
        snprintf(d, sizeof d, "blk.%d.ffn_down.weight", i);
        snprintf(q, sizeof q, "blk.%d.attn_q.weight", i);
        bool more = wi < 14 && want[wi] == i;
        if (more)
            wi++;
        uint32_t exp = more ? MINFER_TYPE_Q6_K : MINFER_TYPE_Q4_K;
        ck_assert_msg(mix_type(MINFER_FTYPE_MOSTLY_Q4_K_M, true, 28, v, 3584, 512) == exp,
                      "layer %d attn_v", i);
        ck_assert_msg(mix_type(MINFER_FTYPE_MOSTLY_Q4_K_M, true, 28, d, 18944, 3584) == exp,
                      "layer %d ffn_down", i);
        ck_assert_uint_eq(mix_type(MINFER_FTYPE_MOSTLY_Q4_K_M, true, 28, q, 3584, 3584),
                          MINFER_TYPE_Q4_K);
    }
    static const struct mix_case rest[] = {
        {MINFER_FTYPE_MOSTLY_Q4_K_M, true, 28, "output.weight", 3584, 152064, MINFER_TYPE_Q6_K},
        {MINFER_FTYPE_MOSTLY_Q4_K_M, true, 28, "token_embd.weight", 3584, 152064,
         MINFER_TYPE_Q4_K},
        {MINFER_FTYPE_MOSTLY_Q4_K_M, true, 28, "blk.0.attn_norm.weight", 3584, 1,
         MINFER_TYPE_F32},
    };
    check_mix_cases(rest, sizeof rest / sizeof rest[0]);
}
END_TEST

/* Catches wrong handling of tied embeddings, of rows that do not fit a
 * 256-block (qwen2.5-0.5b's 896), and of the _S mixes and --pure. */
START_TEST(mix_fallbacks_and_variants)
{
    static const struct mix_case cases[] = {
        /* tied: token_embd is the output; 896 % 256 != 0 -> Q8_0 */
        {MINFER_FTYPE_MOSTLY_Q4_K_M, false, 24, "token_embd.weight", 896, 151936, MINFER_TYPE_Q8_0},
        {MINFER_FTYPE_MOSTLY_Q4_K_M, false, 28, "token_embd.weight", 1536, 151936,
         MINFER_TYPE_Q6_K},
        /* Q4_K -> Q5_0, Q6_K -> Q8_0, Q5_K -> Q5_1 when the row does not fit */
        {MINFER_FTYPE_MOSTLY_Q4_K_M, false, 24, "blk.3.attn_q.weight", 896, 896, MINFER_TYPE_Q5_0},
        {MINFER_FTYPE_MOSTLY_Q4_K_M, false, 24, "blk.0.attn_v.weight", 896, 128, MINFER_TYPE_Q8_0},
        {MINFER_FTYPE_MOSTLY_Q5_K_S, false, 24, "blk.3.attn_q.weight", 896, 896, MINFER_TYPE_Q5_1},
        /* rows that fit nothing quantized -> F16 */
        {MINFER_FTYPE_MOSTLY_Q4_0, true, 4, "blk.0.attn_q.weight", 40, 8, MINFER_TYPE_F16},
        /* Q4_K_S: attn_v < 4 and ffn_down in the first eighth get Q5_K */
        {MINFER_FTYPE_MOSTLY_Q4_K_S, true, 32, "blk.3.attn_v.weight", 4096, 1024, MINFER_TYPE_Q5_K},
        {MINFER_FTYPE_MOSTLY_Q4_K_S, true, 32, "blk.4.attn_v.weight", 4096, 1024, MINFER_TYPE_Q4_K},
        {MINFER_FTYPE_MOSTLY_Q4_K_S, true, 32, "blk.3.ffn_down.weight", 4096, 1024,
         MINFER_TYPE_Q5_K},
        {MINFER_FTYPE_MOSTLY_Q4_K_S, true, 32, "blk.4.ffn_down.weight", 4096, 1024,
         MINFER_TYPE_Q4_K},
        /* 80 layers (llama.cpp's 70B class): attn_v Q4_K -> Q5_K, Q6_K stays */
        {MINFER_FTYPE_MOSTLY_Q4_K_M, true, 80, "blk.40.attn_v.weight", 8192, 1024,
         MINFER_TYPE_Q5_K},
        {MINFER_FTYPE_MOSTLY_Q4_K_M, true, 80, "blk.0.attn_v.weight", 8192, 1024, MINFER_TYPE_Q6_K},
        /* Q4_0 and Q8_0 files: output Q6_K resp. stays Q8_0 */
        {MINFER_FTYPE_MOSTLY_Q4_0, true, 4, "output.weight", 4096, 100, MINFER_TYPE_Q6_K},
        {MINFER_FTYPE_MOSTLY_Q8_0, true, 4, "output.weight", 4096, 100, MINFER_TYPE_Q8_0},
        /* plain float targets: every matrix the same */
        {MINFER_FTYPE_MOSTLY_BF16, true, 4, "output.weight", 4096, 100, MINFER_TYPE_BF16},
    };
    check_mix_cases(cases, sizeof cases / sizeof cases[0]);
    /* pure */
    struct minfer_mix m = {.ftype = MINFER_FTYPE_MOSTLY_Q4_K_M, .pure = true, .has_output = true,
                           .n_attn_v = 28, .n_layer = 28};
    int64_t ne[2] = {3584, 152064};
    ck_assert_uint_eq(minfer_mix_tensor_type(&m, "output.weight", 2, ne, MINFER_TYPE_F16),
                      MINFER_TYPE_Q4_K);
    /* a 1-D tensor of a type we cannot read stays as it is */
    int64_t ne1[1] = {8};
    ck_assert_uint_eq(minfer_mix_tensor_type(&m, "blk.0.idx", 1, ne1, MINFER_TYPE_I32),
                      MINFER_TYPE_I32);
    ck_assert_uint_eq(minfer_mix_tensor_type(&m, "blk.0.attn_norm.weight", 1, ne1,
                                             MINFER_TYPE_BF16),
                      MINFER_TYPE_F32);
    uint32_t ft;
    ck_assert(minfer_ftype_from_name("q4_k", &ft));
    ck_assert_uint_eq(ft, MINFER_FTYPE_MOSTLY_Q4_K_M);
    ck_assert(!minfer_ftype_from_name("q2_K", &ft));
    ck_assert_str_eq(minfer_ftype_name(MINFER_FTYPE_MOSTLY_Q5_K_S), "Q5_K_S");
}
END_TEST

/* ---- tensor stream ---- */

static minfer_status pattern_rows(void *user, int64_t r0, int64_t r1, void *dst, void *scratch,
                                  char *err, size_t err_len)
{
    size_t rb = *(size_t *)user;
    uint8_t *p = dst;
    for (int64_t r = r0; r < r1; r++)
        for (size_t b = 0; b < rb; b++)
            *p++ = (uint8_t)(r * 131 + b * 7);
    return MINFER_OK;
}

/* Catches off-by-one row/offset arithmetic in the window and direct paths:
 * requests of odd sizes at odd offsets must return exactly the bytes of
 * the rows they cover, on several threads. */
START_TEST(stream_offsets)
{
    size_t rb = 37;
    int64_t rows = 5000;
    struct tstream *s = tstream_new(3, 0, rb * (uint64_t)rows, NULL, NULL);
    ck_assert_ptr_nonnull(s);
    struct tstream_tensor t = {s, "pattern", rb, rows, pattern_rows, &rb};
    size_t total = rb * (size_t)rows;
    uint8_t *buf = malloc(total);
    const size_t chunks[] = {1, 36, 37, 38, 1000, 111, 37 * 3, 40000, 5, 100000};
    size_t off = 0;
    for (int k = 0; off < total; k++) {
        size_t n = chunks[k % 10];
        if (n > total - off)
            n = total - off;
        ck_assert_int_eq(tstream_fill(&t, off, buf + off, n), MINFER_OK);
        off += n;
    }
    for (size_t i = 0; i < total; i++)
        if (buf[i] != (uint8_t)((i / rb) * 131 + (i % rb) * 7))
            ck_abort_msg("byte %zu", i);
    ck_assert_int_eq(tstream_fill(&t, total - 1, buf, 2), MINFER_ERR_RANGE);
    free(buf);
    tstream_free(s);
}
END_TEST

/* ---- synth ---- */

/* Catches invalid or non-finite random blocks (NaN/Inf fp16 scales,
 * wrong row sizes) and magnitudes that would blow up a forward pass:
 * every tensor of a Q4_K_M file dequantizes to finite values with the
 * intended spread (~1/sqrt(row length)) and norms near 1. */
START_TEST(synth_valid_blocks)
{
    static const uint32_t fts[] = {MINFER_FTYPE_MOSTLY_Q4_K_M, MINFER_FTYPE_MOSTLY_Q5_K_S,
                                   MINFER_FTYPE_MOSTLY_Q4_1, MINFER_FTYPE_MOSTLY_Q5_1,
                                   MINFER_FTYPE_MOSTLY_Q8_0, MINFER_FTYPE_MOSTLY_BF16};
    struct minfer_synth_opts o = small_opts(_i % 2 ? "qwen2" : "qwen3", fts[_i]);
    void *mem;
    size_t size;
    struct minfer_gguf *g = synth_open(&o, &mem, &size);
    int64_t n = minfer_gguf_tensor_count(g);
    for (int64_t i = 0; i < n; i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        int64_t cnt = t->ne[0] * t->ne[1];
        float *x = malloc((size_t)cnt * sizeof *x);
        size_t rb = minfer_row_size(t->type, t->ne[0]);
        for (int64_t r = 0; r < t->ne[1]; r++)
            if (minfer_dequantize_row(t->type, (const uint8_t *)t->data + rb * r,
                                      x + r * t->ne[0], t->ne[0]) != MINFER_OK)
                ck_abort_msg("%s row %lld does not dequantize", t->name, (long long)r);
        double s = 0, s2 = 0;
        for (int64_t k = 0; k < cnt; k++) {
            if (!isfinite(x[k]))
                ck_abort_msg("%s element %lld not finite", t->name, (long long)k);
            s += x[k];
            s2 += (double)x[k] * x[k];
        }
        double mean = s / cnt, sd = sqrt(s2 / cnt - mean * mean);
        if (strstr(t->name, "norm")) {
            ck_assert_msg(fabs(mean - 1) < 0.05, "%s mean %g", t->name, mean);
        } else if (t->n_dims == 2) {
            double want = 1 / sqrt((double)t->ne[0]);
            ck_assert_msg(sd > 0.6 * want && sd < 1.6 * want, "%s (%s) sd %g want ~%g",
                          t->name, minfer_type_name(t->type), sd, want);
            ck_assert_msg(fabs(mean) < 0.2 * want, "%s mean %g", t->name, mean);
        }
        free(x);
    }
    minfer_gguf_close(g);
    minfer_synth_mem_free(mem);
}
END_TEST

/* Catches metadata or tensor naming that llama.cpp's loader would refuse:
 * the keys its qwen2/qwen3 loaders read, tied vs untied output, QKV bias
 * only for qwen2, q/k norms only for qwen3, shapes in ggml order. */
START_TEST(synth_metadata_and_names)
{
    struct minfer_synth_opts o = small_opts("qwen3", MINFER_FTYPE_MOSTLY_Q4_K_M);
    o.shape.tied = false;
    void *mem;
    size_t size;
    struct minfer_gguf *g = synth_open(&o, &mem, &size);
    const char *s;
    size_t len;
    int64_t v;
    ck_assert_int_eq(minfer_gguf_get_str(g, "general.architecture", &s, &len), MINFER_OK);
    ck_assert(len == 5 && !memcmp(s, "qwen3", 5));
    ck_assert_int_eq(minfer_gguf_get_i64(g, "general.file_type", &v), MINFER_OK);
    ck_assert_int_eq(v, MINFER_FTYPE_MOSTLY_Q4_K_M);
    const char *keys[] = {"qwen3.block_count", "qwen3.context_length", "qwen3.embedding_length",
                          "qwen3.feed_forward_length", "qwen3.attention.head_count",
                          "qwen3.attention.head_count_kv", "qwen3.attention.key_length",
                          "qwen3.attention.value_length"};
    const int64_t want[] = {3, 512, 256, 512, 4, 2, 64, 64};
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(minfer_gguf_get_i64(g, keys[i], &v) == MINFER_OK, "%s", keys[i]);
        ck_assert_int_eq(v, want[i]);
    }
    double f;
    ck_assert_int_eq(minfer_gguf_get_f64(g, "qwen3.rope.freq_base", &f), MINFER_OK);
    ck_assert_double_eq(f, 1e6);
    ck_assert_int_eq(minfer_gguf_get_f64(g, "qwen3.attention.layer_norm_rms_epsilon", &f),
                     MINFER_OK);
    ck_assert_double_eq_tol(f, 1e-6, 1e-12);
    ck_assert_int_eq(minfer_gguf_tensor_count(g), 3 + 3 * 11);
    const struct minfer_gguf_tensor *t = minfer_gguf_find_tensor(g, "output.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->type, MINFER_TYPE_Q6_K);
    ck_assert(t->ne[0] == 256 && t->ne[1] == 1000);
    t = minfer_gguf_find_tensor(g, "blk.2.attn_q.weight");
    ck_assert(t && t->ne[0] == 256 && t->ne[1] == 256);
    t = minfer_gguf_find_tensor(g, "blk.2.attn_k.weight");
    ck_assert(t && t->ne[0] == 256 && t->ne[1] == 128);
    t = minfer_gguf_find_tensor(g, "blk.1.attn_k_norm.weight");
    ck_assert(t && t->n_dims == 1 && t->ne[0] == 64 && t->type == MINFER_TYPE_F32);
    t = minfer_gguf_find_tensor(g, "blk.2.ffn_down.weight");
    ck_assert(t && t->ne[0] == 512 && t->ne[1] == 256);
    ck_assert_ptr_null(minfer_gguf_find_tensor(g, "blk.0.attn_q.bias"));
    /* built-in vocabulary: n_vocab tokens, Qwen specials after the normal ones */
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 1000 - 26 + 2, &s, &len),
                     MINFER_OK);
    ck_assert(len == 10 && !memcmp(s, "<|im_end|>", 10));
    ck_assert_int_eq(minfer_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v), MINFER_OK);
    ck_assert_int_eq(v, 1000 - 26 + 2);
    enum minfer_gguf_type et;
    uint64_t nm;
    const void *data;
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &nm, &data), MINFER_OK);
    ck_assert_uint_eq(nm, 1000 - 26 - 256);
    minfer_gguf_close(g);
    minfer_synth_mem_free(mem);

    /* qwen2: biases, no q/k norms, tied output */
    o = small_opts("qwen2", MINFER_FTYPE_MOSTLY_Q8_0);
    g = synth_open(&o, &mem, &size);
    ck_assert_ptr_nonnull(minfer_gguf_find_tensor(g, "blk.0.attn_v.bias"));
    ck_assert_ptr_null(minfer_gguf_find_tensor(g, "blk.0.attn_q_norm.weight"));
    ck_assert_ptr_null(minfer_gguf_find_tensor(g, "output.weight"));
    minfer_gguf_close(g);
    minfer_synth_mem_free(mem);
}
END_TEST

/* Catches output that depends on the thread count or on scheduling (the
 * seed must fix the bytes) and a seed that is ignored. */
START_TEST(synth_deterministic)
{
    struct minfer_synth_opts o = small_opts("qwen3", MINFER_FTYPE_MOSTLY_Q4_K_M);
    void *a, *b, *c;
    size_t na, nb, nc;
    char err[512];
    o.n_threads = 1;
    ck_assert_int_eq(minfer_synth(&o, NULL, &a, &na, err, sizeof err), MINFER_OK);
    o.n_threads = 3;
    ck_assert_int_eq(minfer_synth(&o, NULL, &b, &nb, err, sizeof err), MINFER_OK);
    o.seed = 8;
    ck_assert_int_eq(minfer_synth(&o, NULL, &c, &nc, err, sizeof err), MINFER_OK);
    ck_assert_uint_eq(na, nb);
    ck_assert(!memcmp(a, b, na));
    ck_assert(na == nc && memcmp(a, c, na));
    minfer_synth_mem_free(a);
    minfer_synth_mem_free(b);
    minfer_synth_mem_free(c);
}
END_TEST

/* Catches a tokenizer copy that drops keys or does not pad the token list
 * to the model's vocabulary (llama.cpp requires n_tokens == n_vocab), and
 * bad shapes/names that must be refused. */
START_TEST(synth_tokenizer_copy_and_refusals)
{
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/models/fixture-A-f16.gguf", MINFER_FIXTURES_DIR);
    if (access(path, R_OK))
        MINFER_TEST_SKIP("fixture %s not found", path);
    struct minfer_synth_opts o = small_opts("qwen2", MINFER_FTYPE_MOSTLY_Q8_0);
    o.shape.n_vocab = 152064; /* larger than the tokenizer's 151936: padded */
    o.shape.n_layer = 1;
    o.tokenizer_gguf = path;
    void *mem;
    size_t size;
    struct minfer_gguf *g = synth_open(&o, &mem, &size);
    minfer_status st;
    struct minfer_gguf *ref = minfer_gguf_open(path, &st, err, sizeof err);
    ck_assert(g && ref);
    enum minfer_gguf_type et;
    uint64_t n;
    const void *data;
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data), MINFER_OK);
    ck_assert_uint_eq(n, 152064);
    const char *a, *b;
    size_t la, lb;
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 151644, &a, &la), 0);
    ck_assert_int_eq(minfer_gguf_get_arr_str(ref, "tokenizer.ggml.tokens", 151644, &b, &lb), 0);
    ck_assert(la == lb && !memcmp(a, b, la));
    ck_assert_int_eq(minfer_gguf_get_str(g, "tokenizer.chat_template", &a, &la), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_get_str(ref, "tokenizer.chat_template", &b, &lb), MINFER_OK);
    ck_assert(la == lb && !memcmp(a, b, la));
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &data), MINFER_OK);
    ck_assert_uint_eq(n, 151387);
    minfer_gguf_close(ref);
    minfer_gguf_close(g);
    minfer_synth_mem_free(mem);

    /* a tokenizer larger than the vocabulary is refused, naming both sizes */
    o.shape.n_vocab = 1000;
    ck_assert_int_eq(minfer_synth(&o, NULL, &mem, &size, err, sizeof err), MINFER_ERR_RANGE);
    ck_assert_ptr_null(mem);
    ck_assert_ptr_nonnull(strstr(err, "151936"));
    struct minfer_synth_shape sh;
    ck_assert_int_eq(minfer_synth_shape_parse("qwen2", "qwen3-8b", &sh, err, sizeof err),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_synth_shape_parse("llama", "qwen3-8b", &sh, err, sizeof err),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_synth_shape_parse("mamba", "custom", &sh, err, sizeof err),
                     MINFER_ERR_UNSUPPORTED);
    ck_assert_int_eq(minfer_synth_shape_parse("qwen3", "custom:n_head=5,n_head_kv=2", &sh, err,
                                              sizeof err),
                     MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_synth_shape_parse("qwen3", "custom:bogus=1", &sh, err, sizeof err),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_synth_shape_parse("qwen2", "qwen2.5-7b", &sh, err, sizeof err),
                     MINFER_OK);
    ck_assert(sh.n_embd == 3584 && sh.n_layer == 28 && sh.n_head_kv == 4 && !sh.tied &&
              sh.n_vocab == 152064);
}
END_TEST

static volatile int cancel_flag;

static void cancel_on_progress(void *user, uint64_t done, uint64_t total)
{
    cancel_flag = 1;
}

/* Catches a cancel request that is ignored, or that leaves the output or
 * the writer's temporary file behind: cancelling from the first progress
 * report stops the write with MINFER_ERR_STATE and the directory stays
 * empty. */
START_TEST(synth_cancel)
{
    make_tmpdir();
    char out[400], err[512], cmd[600];
    snprintf(out, sizeof out, "%s/c.gguf", tmpdir);
    struct minfer_synth_opts o = small_opts("qwen3", MINFER_FTYPE_MOSTLY_Q4_K_M);
    o.shape.n_layer = 8;
    o.progress = cancel_on_progress;
    o.cancel = &cancel_flag;
    cancel_flag = 0;
    ck_assert_int_eq(minfer_synth(&o, out, NULL, NULL, err, sizeof err), MINFER_ERR_STATE);
    ck_assert_ptr_nonnull(strstr(err, "cancelled"));
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A '%s')\"", tmpdir);
    ck_assert_msg(system(cmd) == 0, "files left in %s", tmpdir);
    rm_tmpdir();
}
END_TEST

/* Catches a tokenizer.json whose ids the import trusts: an added token
 * past every counted id was written out of bounds, and an id past the
 * integer range or an empty vocabulary went through an undefined
 * conversion. Each must be refused with the file and the reason, no crash
 * (the sanitizer suite runs this test too). */
START_TEST(synth_cli_tokenizer_json_bad_ids)
{
    static const char *const bad[][2] = {
        {"{\"model\":{\"vocab\":{\"a\":0,\"b\":1},\"merges\":[]},"
         "\"added_tokens\":[{\"id\":200000000,\"content\":\"<x>\"}]}",
         "bad id"},
        {"{\"model\":{\"vocab\":{\"a\":0},\"merges\":[]},"
         "\"added_tokens\":[{\"id\":1.5e19,\"content\":\"<x>\"}]}",
         "bad id"},
        {"{\"model\":{\"vocab\":{\"a\":0.5},\"merges\":[]}}", "bad id"},
        {"{\"model\":{\"vocab\":{},\"merges\":[]}}", "no tokens"},
    };
    char cli[512], path[600], cmd[2048], out[4096];
    snprintf(cli, sizeof cli, "%s/bin/minfer", MINFER_BUILD_DIR);
    if (access(cli, X_OK))
        MINFER_TEST_SKIP("CLI %s not built", cli);
    make_tmpdir();
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(path, sizeof path, "%s/bad%zu.json", tmpdir, i);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(bad[i][0], f);
        fclose(f);
        snprintf(cmd, sizeof cmd,
                 "'%s' synth --arch qwen2 --shape custom:n_embd=64,n_layer=1,n_head=2,"
                 "n_head_kv=1,head_dim=32,n_ff=128 --type Q8_0 --threads 1 --tokenizer '%s' "
                 "-o '%s/bad.gguf' 2>&1",
                 cli, path, tmpdir);
        FILE *p = popen(cmd, "r");
        ck_assert_ptr_nonnull(p);
        size_t n = fread(out, 1, sizeof out - 1, p);
        out[n] = 0;
        int rc = pclose(p);
        ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 1, "case %zu: exit %d: %s", i, rc,
                      out);
        ck_assert_msg(strstr(out, bad[i][1]) && strstr(out, path), "case %zu: '%s'", i, out);
    }
}
END_TEST

/* Catches a tokenizer.json import that differs from llama.cpp's converter:
 * the CLI's output must hold the same tokens, token types (control for
 * special or <|...|> added tokens, user-defined for the rest, unused for
 * padding), merges, special ids and chat template as the fixture GGUF that
 * llama.cpp's convert_hf_to_gguf.py wrote from the same tokenizer. */
START_TEST(synth_cli_tokenizer_json)
{
    char json[512], ref_path[512], cli[512], cmd[2048], err[512];
    snprintf(json, sizeof json, "%s/tokenizer/tokenizer.json", MINFER_FIXTURES_DIR);
    snprintf(ref_path, sizeof ref_path, "%s/models/fixture-A-f16.gguf", MINFER_FIXTURES_DIR);
    snprintf(cli, sizeof cli, "%s/bin/minfer", MINFER_BUILD_DIR);
    if (access(json, R_OK) || access(ref_path, R_OK))
        MINFER_TEST_SKIP("fixtures under %s not found", MINFER_FIXTURES_DIR);
    if (access(cli, X_OK))
        MINFER_TEST_SKIP("CLI %s not built", cli);
    make_tmpdir();
    snprintf(cmd, sizeof cmd,
             "'%s' synth --arch qwen2 --shape custom:n_embd=64,n_layer=1,n_head=2,n_head_kv=1,"
             "head_dim=32,n_ff=128 --type Q8_0 --threads 2 --tokenizer '%s' -o '%s/t.gguf' "
             "2>/dev/null",
             cli, json, tmpdir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s/t.gguf", tmpdir);
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open(cmd, &st, err, sizeof err);
    struct minfer_gguf *ref = minfer_gguf_open(ref_path, &st, err, sizeof err);
    ck_assert(g && ref);
    static const char *const arrays[] = {"tokenizer.ggml.tokens", "tokenizer.ggml.merges"};
    for (int k = 0; k < 2; k++) {
        enum minfer_gguf_type et;
        uint64_t na, nb;
        const void *d;
        ck_assert_int_eq(minfer_gguf_get_arr(g, arrays[k], &et, &na, &d), MINFER_OK);
        ck_assert_int_eq(minfer_gguf_get_arr(ref, arrays[k], &et, &nb, &d), MINFER_OK);
        ck_assert_uint_eq(na, nb);
        for (uint64_t i = 0; i < na; i++) {
            const char *a, *b;
            size_t la, lb;
            if (minfer_gguf_get_arr_str(g, arrays[k], i, &a, &la) ||
                minfer_gguf_get_arr_str(ref, arrays[k], i, &b, &lb) || la != lb ||
                memcmp(a, b, la))
                ck_abort_msg("%s[%llu] differs", arrays[k], (unsigned long long)i);
        }
    }
    enum minfer_gguf_type et;
    uint64_t na, nb;
    const void *ta, *tb;
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &na, &ta), 0);
    ck_assert_int_eq(minfer_gguf_get_arr(ref, "tokenizer.ggml.token_type", &et, &nb, &tb), 0);
    ck_assert_uint_eq(na, nb);
    for (uint64_t i = 0; i < na; i++)
        if (memcmp((const int32_t *)ta + i, (const int32_t *)tb + i, 4))
            ck_abort_msg("token_type[%llu] differs", (unsigned long long)i);
    static const char *const ids[] = {"tokenizer.ggml.bos_token_id",
                                      "tokenizer.ggml.eos_token_id",
                                      "tokenizer.ggml.padding_token_id"};
    for (int k = 0; k < 3; k++) {
        int64_t a, b;
        ck_assert_int_eq(minfer_gguf_get_i64(g, ids[k], &a), MINFER_OK);
        ck_assert_int_eq(minfer_gguf_get_i64(ref, ids[k], &b), MINFER_OK);
        ck_assert_int_eq(a, b);
    }
    const char *a, *b;
    size_t la, lb;
    ck_assert_int_eq(minfer_gguf_get_str(g, "tokenizer.chat_template", &a, &la), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_get_str(ref, "tokenizer.chat_template", &b, &lb), MINFER_OK);
    ck_assert(la == lb && !memcmp(a, b, la));
    minfer_gguf_close(g);
    minfer_gguf_close(ref);
    rm_tmpdir();
}
END_TEST

/* ---- quantize ---- */

/* Checks every tensor of out against in: the type the mix gives it and
 * bytes equal to the reference quantizer applied row by row. */
static void check_quantized(const char *in, const char *out, uint32_t ftype)
{
    char err[512];
    minfer_status st;
    struct minfer_gguf *gi = minfer_gguf_open(in, &st, err, sizeof err);
    struct minfer_gguf *go = minfer_gguf_open(out, &st, err, sizeof err);
    ck_assert(gi && go);
    int64_t v;
    ck_assert_int_eq(minfer_gguf_get_i64(go, "general.file_type", &v), MINFER_OK);
    ck_assert_int_eq(v, ftype);
    ck_assert_int_eq(minfer_gguf_get_i64(go, "general.quantization_version", &v), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_tensor_count(go), minfer_gguf_tensor_count(gi));
    struct minfer_mix mix = {.ftype = ftype};
    for (int64_t i = 0; i < minfer_gguf_tensor_count(gi); i++) {
        const char *name = minfer_gguf_tensor(gi, i)->name;
        mix.has_output |= !strcmp(name, "output.weight");
        mix.n_attn_v += strstr(name, "attn_v.weight") != NULL;
    }
    ck_assert_int_eq(minfer_gguf_get_i64(gi, "qwen2.block_count", &v), MINFER_OK);
    mix.n_layer = (int32_t)v;
    for (int64_t i = 0; i < minfer_gguf_tensor_count(gi); i++) {
        const struct minfer_gguf_tensor *a = minfer_gguf_tensor(gi, i);
        const struct minfer_gguf_tensor *b = minfer_gguf_find_tensor(go, a->name);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(b->type, minfer_mix_tensor_type(&mix, a->name, a->n_dims, a->ne,
                                                          a->type));
        size_t ra = minfer_row_size(a->type, a->ne[0]), rb = minfer_row_size(b->type, a->ne[0]);
        float *x = malloc((size_t)a->ne[0] * sizeof *x);
        uint8_t *q = malloc(rb);
        for (int64_t r = 0; r < a->ne[1]; r++) {
            if (minfer_dequantize_row(a->type, (const uint8_t *)a->data + ra * r, x,
                                      a->ne[0]) != MINFER_OK ||
                minfer_quantize_row_ref(b->type, x, q, a->ne[0]) != MINFER_OK)
                ck_abort_msg("%s row %lld: reference conversion failed", a->name, (long long)r);
            if (memcmp(q, (const uint8_t *)b->data + rb * r, rb))
                ck_abort_msg("%s row %lld differs from the reference quantizer", a->name,
                             (long long)r);
        }
        free(x);
        free(q);
    }
    minfer_gguf_close(gi);
    minfer_gguf_close(go);
}

/* Catches quantize writing bytes that differ from the reference quantizer
 * applied to the dequantized input row by row (wrong row offsets across
 * windows and threads, a tensor paired with another's callback), a
 * general.file_type not updated, and missing tensors. */
START_TEST(quantize_matches_reference)
{
    static const uint32_t fts[] = {MINFER_FTYPE_MOSTLY_Q4_K_M, MINFER_FTYPE_MOSTLY_Q8_0,
                                   MINFER_FTYPE_MOSTLY_F16, MINFER_FTYPE_MOSTLY_Q5_1};
    make_tmpdir();
    char in[400], out[400], err[512];
    snprintf(in, sizeof in, "%s/in.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/out.gguf", tmpdir);
    struct minfer_synth_opts so = small_opts("qwen2", MINFER_FTYPE_MOSTLY_BF16);
    ck_assert_int_eq(minfer_synth(&so, in, NULL, NULL, err, sizeof err), MINFER_OK);
    struct minfer_quantize_opts qo = {.struct_size = sizeof qo, .ftype = fts[_i],
                                      .n_threads = 3};
    ck_assert_msg(minfer_quantize(in, out, &qo, err, sizeof err) == MINFER_OK, "%s", err);
    check_quantized(in, out, fts[_i]);
    rm_tmpdir();
}
END_TEST

/* The same on llama.cpp's own converter output (fixture A, F16 matrices
 * with 64-wide rows: every K-quant falls back), then requantizing that
 * quantized file again (quantized input path). Catches a file llama.cpp
 * wrote that quantize mishandles and a broken dequantize-then-requantize. */
START_TEST(quantize_fixture_a)
{
    char in[512], mid[400], out[400], err[512];
    snprintf(in, sizeof in, "%s/models/fixture-A-f16.gguf", MINFER_FIXTURES_DIR);
    if (access(in, R_OK))
        MINFER_TEST_SKIP("fixture %s not found", in);
    make_tmpdir();
    snprintf(mid, sizeof mid, "%s/q.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/q2.gguf", tmpdir);
    struct minfer_quantize_opts qo = {.struct_size = sizeof qo,
                                      .ftype = MINFER_FTYPE_MOSTLY_Q4_K_M, .n_threads = 2};
    ck_assert_msg(minfer_quantize(in, mid, &qo, err, sizeof err) == MINFER_OK, "%s", err);
    check_quantized(in, mid, MINFER_FTYPE_MOSTLY_Q4_K_M);
    qo.ftype = MINFER_FTYPE_MOSTLY_Q8_0;
    qo.allow_requantize = true;
    ck_assert_msg(minfer_quantize(mid, out, &qo, err, sizeof err) == MINFER_OK, "%s", err);
    check_quantized(mid, out, MINFER_FTYPE_MOSTLY_Q8_0);
    rm_tmpdir();
}
END_TEST

/* Catches reading block structs in place at addresses a file with
 * general.alignment = 1 can give them (undefined behaviour, a fault on
 * strict-alignment CPUs, a UBSan error here): rows at odd offsets must
 * convert exactly as aligned copies of them do. */
START_TEST(quantize_unaligned_rows)
{
    make_tmpdir();
    char in[400], out[400], err[512];
    snprintf(in, sizeof in, "%s/in.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/out.gguf", tmpdir);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    uint32_t one = 1;
    ck_assert_int_eq(minfer_gguf_writer_set(w, "general.alignment", MINFER_GGUF_UINT32, &one), 0);
    ck_assert_int_eq(minfer_gguf_writer_set_str(w, "general.architecture", "qwen2x", 6), 0);
    float f[64];
    for (int i = 0; i < 64; i++)
        f[i] = sinf((float)i) * 0.1f;
    uint8_t q40[4 * 18];
    ck_assert_int_eq(minfer_quantize_row_ref(MINFER_TYPE_Q4_0, f, q40, 64), MINFER_OK);
    ck_assert_int_eq(minfer_quantize_row_ref(MINFER_TYPE_Q4_0, f, q40 + 36, 64), MINFER_OK);
    int64_t ne_q[2] = {64, 2}, ne_f[2] = {32, 2};
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "a.weight", MINFER_TYPE_Q4_0, 2, ne_q, q40,
                                                   NULL, NULL), 0);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "b.weight", MINFER_TYPE_F32, 2, ne_f, f,
                                                   NULL, NULL), 0);
    ck_assert_int_eq(minfer_gguf_writer_write(w, in, err, sizeof err), MINFER_OK);
    minfer_gguf_writer_free(w);
    struct minfer_quantize_opts qo = {.struct_size = sizeof qo,
                                      .ftype = MINFER_FTYPE_MOSTLY_Q8_0, .n_threads = 2,
                                      .allow_requantize = true};
    ck_assert_msg(minfer_quantize(in, out, &qo, err, sizeof err) == MINFER_OK, "%s", err);
    minfer_status st;
    struct minfer_gguf *gi = minfer_gguf_open(in, &st, err, sizeof err);
    struct minfer_gguf *go = minfer_gguf_open(out, &st, err, sizeof err);
    ck_assert_msg(gi && go, "%s", err);
    int odd = 0;
    for (int k = 0; k < 2; k++) {
        const struct minfer_gguf_tensor *a = minfer_gguf_tensor(gi, k);
        const struct minfer_gguf_tensor *b = minfer_gguf_find_tensor(go, a->name);
        ck_assert(b && b->type == MINFER_TYPE_Q8_0);
        odd |= (int)((uintptr_t)a->data & 3);
        size_t ra = minfer_row_size(a->type, a->ne[0]), rb = minfer_row_size(b->type, a->ne[0]);
        for (int64_t r = 0; r < a->ne[1]; r++) {
            float row[64], x[64];
            uint8_t q[68];
            memcpy(row, (const uint8_t *)a->data + ra * r, ra);
            ck_assert_int_eq(minfer_dequantize_row(a->type, row, x, a->ne[0]), MINFER_OK);
            ck_assert_int_eq(minfer_quantize_row_ref(b->type, x, q, a->ne[0]), MINFER_OK);
            ck_assert(!memcmp(q, (const uint8_t *)b->data + rb * r, rb));
        }
    }
    ck_assert_msg(odd, "the writer aligned the tensors anyway: the test proves nothing");
    minfer_gguf_close(gi);
    minfer_gguf_close(go);
    rm_tmpdir();
}
END_TEST

/* Catches quantize turning weights it cannot represent into a model that
 * computes NaN: a NaN or an infinity in a weight, and finite values whose
 * block scale overflows the type (1e30 in Q8_0's f16 scale, 1e5 past
 * F16's range), each refused with the tensor, row and column, leaving no
 * output. */
START_TEST(quantize_refuses_non_finite)
{
    static const struct {
        float v;
        uint32_t ftype;
        minfer_status st;
        const char *says;
    } cases[] = {
        {NAN, MINFER_FTYPE_MOSTLY_Q8_0, MINFER_ERR_FORMAT, "NaN"},
        {INFINITY, MINFER_FTYPE_MOSTLY_Q4_K_M, MINFER_ERR_FORMAT, "+infinity"},
        {-INFINITY, MINFER_FTYPE_MOSTLY_F16, MINFER_ERR_FORMAT, "-infinity"},
        {1e30f, MINFER_FTYPE_MOSTLY_Q8_0, MINFER_ERR_RANGE, "too large"},
        {1e5f, MINFER_FTYPE_MOSTLY_F16, MINFER_ERR_RANGE, "too large"},
    };
    make_tmpdir();
    char in[400], out[400], err[512];
    snprintf(in, sizeof in, "%s/in.gguf", tmpdir);
    snprintf(out, sizeof out, "%s/out.gguf", tmpdir);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        static float f[256 * 2];
        for (int i = 0; i < 256 * 2; i++)
            f[i] = sinf((float)i) * 0.1f;
        f[256 + 7] = cases[c].v; /* row 1, column 7 */
        struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
        int64_t ne[2] = {256, 2};
        ck_assert_int_eq(minfer_gguf_writer_set_str(w, "general.architecture", "qwen2", 5),
                         MINFER_OK);
        ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", MINFER_TYPE_F32,
                                                       2, ne, f, NULL, NULL),
                         MINFER_OK);
        ck_assert_int_eq(minfer_gguf_writer_write(w, in, err, sizeof err), MINFER_OK);
        minfer_gguf_writer_free(w);
        struct minfer_quantize_opts qo = {.struct_size = sizeof qo, .ftype = cases[c].ftype,
                                          .n_threads = 2};
        minfer_status st = minfer_quantize(in, out, &qo, err, sizeof err);
        ck_assert_msg(st == cases[c].st, "case %zu (%g): status %d, %s", c, (double)cases[c].v,
                      (int)st, err);
        ck_assert_msg(strstr(err, "blk.0.attn_q.weight") && strstr(err, "row 1") &&
                          strstr(err, "column 7") && strstr(err, cases[c].says),
                      "case %zu: %s", c, err);
        ck_assert_int_ne(access(out, F_OK), 0);
    }
    rm_tmpdir();
}
END_TEST

/* Catches quantize leaving a partial output on failure or accepting a
 * file type it cannot write. */
START_TEST(quantize_refusals)
{
    make_tmpdir();
    char out[400], err[512];
    snprintf(out, sizeof out, "%s/out.gguf", tmpdir);
    struct minfer_quantize_opts qo = {.struct_size = sizeof qo, .ftype = 10 /* Q2_K */};
    ck_assert_int_eq(minfer_quantize("/nonexistent.gguf", out, &qo, err, sizeof err),
                     MINFER_ERR_INVALID_ARG);
    qo.ftype = MINFER_FTYPE_MOSTLY_Q4_0;
    ck_assert_int_ne(minfer_quantize("/nonexistent/in.gguf", out, &qo, err, sizeof err),
                     MINFER_OK);
    ck_assert(err[0]);
    ck_assert_int_ne(access(out, F_OK), 0);
    /* a tensor of a type this build cannot read: refused (by the reader,
     * before anything is written), naming the tensor and the type */
    char in[400];
    snprintf(in, sizeof in, "%s/in.gguf", tmpdir);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    static uint8_t zeros[84 * 2];
    int64_t ne[2] = {256, 2};
    const char *arch = "qwen2";
    ck_assert_int_eq(minfer_gguf_writer_set_str(w, "general.architecture", arch, 5), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", MINFER_TYPE_Q2_K, 2,
                                                   ne, zeros, NULL, NULL),
                     MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "blk.0.extra", MINFER_TYPE_Q2_K, 2, ne,
                                                   zeros, NULL, NULL),
                     MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_write(w, in, err, sizeof err), MINFER_OK);
    minfer_gguf_writer_free(w);
    qo.ftype = MINFER_FTYPE_MOSTLY_F16;
    qo.allow_requantize = true;
    ck_assert_int_eq(minfer_quantize(in, out, &qo, err, sizeof err), MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "blk.0.attn_q.weight"));
    ck_assert_ptr_nonnull(strstr(err, "q2_K"));
    ck_assert_int_ne(access(out, F_OK), 0);
    /* an already quantized (readable) input: refused unless allowed, naming
     * a tensor; out naming the input, directly or through a symlink, is
     * refused before anything is written */
    w = minfer_gguf_writer_new(3);
    static uint8_t q40[18 * 4];
    int64_t ne40[2] = {64, 2};
    ck_assert_int_eq(minfer_gguf_writer_set_str(w, "general.architecture", arch, 5), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "blk.0.attn_q.weight", MINFER_TYPE_Q4_0,
                                                   2, ne40, q40, NULL, NULL),
                     MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_write(w, in, err, sizeof err), MINFER_OK);
    minfer_gguf_writer_free(w);
    qo.allow_requantize = false;
    ck_assert_int_eq(minfer_quantize(in, out, &qo, err, sizeof err), MINFER_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err, "already quantized") && strstr(err, "blk.0.attn_q.weight"), "%s",
                  err);
    ck_assert_int_ne(access(out, F_OK), 0);
    qo.allow_requantize = true;
    ck_assert_int_eq(minfer_quantize(in, in, &qo, err, sizeof err), MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err, "is the input file"));
    char link[420];
    snprintf(link, sizeof link, "%s/link.gguf", tmpdir);
    ck_assert_int_eq(symlink(in, link), 0);
    ck_assert_int_eq(minfer_quantize(in, link, &qo, err, sizeof err), MINFER_ERR_INVALID_ARG);
    ck_assert_ptr_nonnull(strstr(err, "through a link"));
    unlink(link);
    ck_assert_msg(minfer_quantize(in, out, &qo, err, sizeof err) == MINFER_OK, "%s", err);
    unlink(out);
    ck_assert_int_ne(access(out, F_OK), 0);
    qo.struct_size = 4;
    ck_assert_int_eq(minfer_quantize("/nonexistent/in.gguf", out, &qo, err, sizeof err),
                     MINFER_ERR_INVALID_ARG);
    rm_tmpdir();
}
END_TEST

/* Catches: a known shape of the new families missing or of the wrong
 * architecture; a synthetic llama / gemma3 / qwen3moe file lacking what
 * the loader needs (expert tensors of the right 3-D shape, the sliding
 * window and local RoPE base, a SentencePiece or byte-level tokenizer
 * that loads) or whose forward pass is not finite. */
START_TEST(synth_model_families)
{
    static const char *const known[][2] = {
        {"llama", "llama3.2-1b"}, {"llama", "llama3.1-8b"}, {"llama", "mistral-7b"},
        {"gemma3", "gemma3-1b"}, {"gemma3", "gemma3-4b"}, {"qwen3moe", "qwen3-30b-a3b"}};
    char err[512];
    for (int i = 0; i < 6; i++) {
        struct minfer_synth_shape sh;
        ck_assert_msg(minfer_synth_shape_parse(known[i][0], known[i][1], &sh, err, sizeof err) ==
                          MINFER_OK, "%s: %s", known[i][1], err);
        ck_assert_str_eq(sh.arch, known[i][0]);
    }
    ck_assert_int_ne(minfer_synth_shape_parse("qwen3moe", "custom:n_expert=4,n_expert_used=5",
                                              &(struct minfer_synth_shape){0}, err, sizeof err),
                     MINFER_OK);
    /* arch, custom shape, tokenizer model, a key the loader needs */
    static const char *const fam[][4] = {
        {"llama", "custom:n_embd=128,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=256,"
                  "n_vocab=1000", "gpt2", "llama.rope.freq_base"},
        {"llama", "custom:n_embd=128,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=256,"
                  "n_vocab=1000,spm=1", "llama", "llama.rope.freq_base"},
        {"gemma3", "custom:n_embd=128,n_layer=7,n_head=4,n_head_kv=1,head_dim=64,n_ff=256,"
                   "n_vocab=1000,sliding_window=4", "llama", "gemma3.rope.freq_base_swa"},
        {"qwen3moe", "custom:n_embd=128,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=256,"
                     "n_vocab=1000,n_expert=8,n_expert_used=2,n_ff_exp=64", "gpt2",
         "qwen3moe.expert_count"}};
    struct minfer_runtime *rt = ts_runtime(NULL);
    for (int f = 0; f < 4; f++) {
        struct minfer_synth_opts o = {.struct_size = sizeof o, .ftype = MINFER_FTYPE_MOSTLY_Q4_K_M,
                                      .seed = 3, .n_threads = 2};
        ck_assert_int_eq(minfer_synth_shape_parse(fam[f][0], fam[f][1], &o.shape, err, sizeof err),
                         MINFER_OK);
        void *mem;
        size_t size;
        struct minfer_gguf *g = synth_open(&o, &mem, &size);
        minfer_status st;
        const char *sv;
        size_t len;
        ck_assert_int_eq(minfer_gguf_get_str(g, "tokenizer.ggml.model", &sv, &len), MINFER_OK);
        ck_assert_msg(len == strlen(fam[f][2]) && !memcmp(sv, fam[f][2], len), "%s tokenizer",
                      fam[f][0]);
        double d;
        ck_assert_msg(minfer_gguf_get_f64(g, fam[f][3], &d) == MINFER_OK, "%s", fam[f][3]);
        if (f == 3) {
            const struct minfer_gguf_tensor *t =
                minfer_gguf_find_tensor(g, "blk.1.ffn_down_exps.weight");
            ck_assert_ptr_nonnull(t);
            ck_assert(t->n_dims == 3 && t->ne[0] == 64 && t->ne[1] == 128 && t->ne[2] == 8);
        }
        minfer_gguf_close(g);
        struct minfer_model *m = ts_load_mem(rt, mem, size, "cpu", err, sizeof err);
        ck_assert_msg(m, "%s: %s", fam[f][0], err);
        struct minfer_tokenizer *tok = minfer_tokenizer_from_gguf(minfer_model_gguf(m), &st, err,
                                                                  sizeof err);
        ck_assert_msg(tok, "%s tokenizer: %s", fam[f][0], err);
        int32_t ids[64];
        size_t n = 0;
        ck_assert_int_eq(minfer_tokenize(tok, "Hello world, a test", 19, false, ids, 64, &n),
                         MINFER_OK);
        ck_assert_uint_gt(n, 0);
        struct minfer_ctx *c = ts_ctx(m, 64, 16, TS_KV_DEFAULT, 0);
        ts_decode_ok(c, ids, (int32_t)n, 0);
        const float *l = minfer_ctx_logits(c, -1);
        for (int i = 0; i < 1000; i++)
            ck_assert_msg(isfinite(l[i]), "%s logit %d is %g", fam[f][0], i, (double)l[i]);
        minfer_ctx_free(c);
        minfer_tokenizer_free(tok);
        minfer_model_free(m);
        minfer_synth_mem_free(mem);
    }
    minfer_runtime_free(rt);
}
END_TEST

Suite *synth_suite(void);
Suite *synth_suite(void)
{
    Suite *s = suite_create("synth");
    TCase *tc = tcase_create("mix");
    tcase_add_test(tc, mix_q4_k_m_layers);
    tcase_add_test(tc, mix_fallbacks_and_variants);
    tcase_add_test(tc, stream_offsets);
    suite_add_tcase(s, tc);
    tc = tcase_create("synth");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, synth_valid_blocks, 0, 6);
    tcase_add_test(tc, synth_metadata_and_names);
    tcase_add_test(tc, synth_deterministic);
    tcase_add_test(tc, synth_tokenizer_copy_and_refusals);
    tcase_add_test(tc, synth_cli_tokenizer_json);
    tcase_add_test(tc, synth_cli_tokenizer_json_bad_ids);
    tcase_add_test(tc, synth_cancel);
    tcase_add_test(tc, synth_model_families);
    suite_add_tcase(s, tc);
    tc = tcase_create("quantize");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, quantize_matches_reference, 0, 4);
    tcase_add_test(tc, quantize_fixture_a);
    tcase_add_test(tc, quantize_unaligned_rows);
    tcase_add_test(tc, quantize_refusals);
    tcase_add_test(tc, quantize_refuses_non_finite);
    suite_add_tcase(s, tc);
    return s;
}
