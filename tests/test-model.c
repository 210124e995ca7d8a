/*
 * test-model.c — model loading and contexts: every load refusal names
 * what is wrong; Qwen3 (q/k norms, head_dim != n_embd/n_head) and Qwen2
 * with an untied head match a plain-C reference forward written here;
 * chunked, truncated and re-decoded sequences equal a single pass; decode
 * steps reuse one graph with stable addresses (what graph replay needs);
 * two contexts on two threads equal a serial run; minfer chat's second
 * turn equals a fresh run over the conversation.
 */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "model/model.h"
#include "runtime/plugin.h"
#include "engine.h"
#include "testutil.h"

#define FIX_GGUF MINFER_FIXTURES_DIR "/models/fixture-A-f16.gguf"
#include "chat-turns.h"

#define TINY_QWEN2 \
    "custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=16,n_ff=96,n_vocab=320,n_ctx=512,tied=0"
#define TINY_QWEN3 \
    "custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=96,n_vocab=320,n_ctx=512,tied=1"

/* ---- load refusals ---- */

enum edit { E_ARCH, E_DROP_TENSOR, E_SHAPE, E_TYPE, E_DROP_KEY, E_KEY_TYPE, E_DROP_PREFIX, E_SET_U32,
            E_ROPE_SCALING, E_ROPE_LONGROPE, E_ROPE_FREQS };

static float edit_freq; /* E_ROPE_FREQS: every factor of the added rope_freqs.weight */

static uint32_t edit_value; /* for E_SET_U32 */
/* for E_ROPE_SCALING: <arch>.rope.scaling.{type, factor 4, original_context_length 256} */
static const char *scaling_type = "yarn";

/* Copies a synthetic GGUF with one edit into path (mkstemp template). */
static void write_edited(const char *arch, const char *spec, enum edit e, const char *target,
                         char *path, char *err, size_t err_len)
{
    size_t size;
    void *mem = ts_synth(arch, spec, MINFER_FTYPE_ALL_F32, 7, 1, &size);
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(mem, size, &st, err, err_len);
    ck_assert_ptr_nonnull(g);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    bool set = false;
    if (e == E_ROPE_LONGROPE) { /* a scaling type real files use that this build does not run */
        float factor = 4.0f;
        ck_assert_int_eq(minfer_gguf_writer_set_str(w, target, "longrope", 8), MINFER_OK);
        ck_assert_int_eq(minfer_gguf_writer_set(w, "llama.rope.scaling.factor",
                                                MINFER_GGUF_FLOAT32, &factor), MINFER_OK);
    }
    for (int64_t i = 0; i < minfer_gguf_kv_count(g); i++) {
        const char *key = minfer_gguf_kv_key(g, i);
        if ((!strcmp(key, target) && e == E_DROP_KEY) ||
            (e == E_DROP_PREFIX && !strncmp(key, target, strlen(target))))
            continue;
        if (!strcmp(key, target) && e == E_SET_U32) {
            ck_assert_int_eq(minfer_gguf_writer_set(w, key, MINFER_GGUF_UINT32, &edit_value),
                             MINFER_OK);
            set = true;
            continue;
        }
        if (!strcmp(key, target) && e == E_KEY_TYPE) {
            ck_assert_int_eq(minfer_gguf_writer_set_str(w, key, "two", 3), MINFER_OK);
            continue;
        }
        if (!strcmp(key, "general.architecture") && e == E_ARCH) {
            ck_assert_int_eq(minfer_gguf_writer_set_str(w, key, target, strlen(target)),
                             MINFER_OK);
            continue;
        }
        ck_assert_int_eq(minfer_gguf_writer_copy_kv(w, g, i), MINFER_OK);
    }
    if (e == E_ROPE_SCALING) {
        char key[96];
        float factor = 4.0f;
        uint32_t orig = 256;
        snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
        ck_assert_int_eq(minfer_gguf_writer_set_str(w, key, scaling_type, strlen(scaling_type)),
                         MINFER_OK);
        snprintf(key, sizeof key, "%s.rope.scaling.factor", arch);
        ck_assert_int_eq(minfer_gguf_writer_set(w, key, MINFER_GGUF_FLOAT32, &factor), MINFER_OK);
        snprintf(key, sizeof key, "%s.rope.scaling.original_context_length", arch);
        ck_assert_int_eq(minfer_gguf_writer_set(w, key, MINFER_GGUF_UINT32, &orig), MINFER_OK);
    }
    if (e == E_SET_U32 && !set) /* a key the file lacked */
        ck_assert_int_eq(minfer_gguf_writer_set(w, target, MINFER_GGUF_UINT32, &edit_value),
                         MINFER_OK);
    float *f16buf = NULL;
    for (int64_t i = 0; i < minfer_gguf_tensor_count(g); i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        int64_t ne[4] = {t->ne[0], t->ne[1], t->ne[2], t->ne[3]};
        uint32_t type = t->type;
        const void *data = t->data;
        bool hit = !strcmp(t->name, target);
        if (hit && e == E_DROP_TENSOR)
            continue;
        if (hit && e == E_SHAPE) { /* same bytes, transposed shape */
            ne[0] = t->ne[1];
            ne[1] = t->ne[0];
        }
        if (hit && e == E_TYPE) { /* an f32 vector stored as f16 */
            f16buf = calloc((size_t)t->ne[0], 2);
            data = f16buf;
            type = MINFER_TYPE_F16;
        }
        ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, t->name, type, t->n_dims, ne, data,
                                                       NULL, NULL),
                         MINFER_OK);
    }
    float freqs[256];
    if (e == E_ROPE_FREQS) { /* Llama 3.1's frequency factors, [n_rot / 2] */
        int64_t ne[4] = {0, 1, 1, 1};
        ck_assert_int_eq(minfer_gguf_get_i64(g, target, &ne[0]), MINFER_OK);
        ne[0] /= 2;
        ck_assert_int_le(ne[0], 256);
        for (int i = 0; i < ne[0]; i++)
            freqs[i] = edit_freq;
        ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "rope_freqs.weight", MINFER_TYPE_F32, 1,
                                                       ne, freqs, NULL, NULL),
                         MINFER_OK);
    }
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(minfer_gguf_writer_write(w, path, err, err_len), MINFER_OK);
    minfer_gguf_writer_free(w);
    free(f16buf);
    minfer_gguf_close(g);
    minfer_synth_mem_free(mem);
}

/* Writes the edited GGUF, tries to load it and returns the error text
 * (empty on success). */
static void load_edited(const char *arch, const char *spec, enum edit e, const char *target,
                        char *err, size_t err_len)
{
    char path[] = "/tmp/minfer-test-model-XXXXXX";
    write_edited(arch, spec, e, target, path, err, err_len);
    minfer_status st;
    struct minfer_runtime *rt = ts_runtime(NULL);
    err[0] = 0;
    struct minfer_model *m = minfer_model_load(rt, path, NULL, &st, err, err_len);
    if (m)
        err[0] = 0;
    else
        ck_assert_int_ne(st, MINFER_OK);
    minfer_model_free(m);
    minfer_runtime_free(rt);
    unlink(path);
}

#define EXPECT_LOAD_ERROR(arch, spec, edit, target, ...)                                   \
    do {                                                                                    \
        char err_[1024];                                                                    \
        load_edited(arch, spec, edit, target, err_, sizeof err_);                           \
        const char *want_[] = {__VA_ARGS__};                                                \
        for (size_t k_ = 0; k_ < sizeof want_ / sizeof want_[0]; k_++)                      \
            ck_assert_msg(strstr(err_, want_[k_]), "error '%s' lacks '%s'", err_, want_[k_]); \
    } while (0)

START_TEST(refuses_unknown_architecture)
{
    /* Catches an unknown architecture loaded as if it were a known one. */
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_ARCH, "mamba", "unknown architecture 'mamba'",
                      "qwen2", "qwen3", "llama", "gemma3", "qwen3moe");
}
END_TEST

START_TEST(refuses_missing_tensor)
{
    /* Catches a missing required weight found only at run time (or never). */
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_DROP_TENSOR, "blk.1.attn_q.weight",
                      "missing tensor blk.1.attn_q.weight");
    /* Qwen2's biases are required; Qwen3's per-head norms too. */
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_DROP_TENSOR, "blk.0.attn_k.bias",
                      "blk.0.attn_k.bias");
    EXPECT_LOAD_ERROR("qwen3", TINY_QWEN3, E_DROP_TENSOR, "blk.1.attn_k_norm.weight",
                      "blk.1.attn_k_norm.weight");
}
END_TEST

START_TEST(refuses_wrong_shape_and_type)
{
    /* Catches a transposed matrix or a norm of the wrong type being read. */
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_SHAPE, "blk.0.ffn_up.weight",
                      "blk.0.ffn_up.weight", "shape [96, 64", "expected [64, 96]");
    EXPECT_LOAD_ERROR("qwen3", TINY_QWEN3, E_TYPE, "blk.0.attn_norm.weight",
                      "blk.0.attn_norm.weight", "f16", "f32");
}
END_TEST

START_TEST(refuses_bad_hparams)
{
    /* Catches a missing or malformed hyperparameter replaced by a guess. */
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_DROP_KEY, "qwen2.block_count",
                      "missing hyperparameter qwen2.block_count");
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_DROP_KEY, "qwen2.rope.freq_base",
                      "qwen2.rope.freq_base");
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_KEY_TYPE, "qwen2.embedding_length",
                      "qwen2.embedding_length", "malformed");
    /* Qwen3's head_dim is its own key, never n_embd / n_head. */
    EXPECT_LOAD_ERROR("qwen3", TINY_QWEN3, E_DROP_KEY, "qwen3.attention.key_length",
                      "qwen3.attention.key_length");
}
END_TEST

#define TINY_LLAMA "custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=16,n_ff=96,n_vocab=320"
#define TINY_GEMMA3                                                                          \
    "custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=32,n_ff=96,n_vocab=320,"       \
    "sliding_window=8"
#define TINY_MOE                                                                             \
    "custom:n_embd=64,n_layer=2,n_head=4,n_head_kv=2,head_dim=16,n_ff=96,n_vocab=320,"       \
    "n_expert=8,n_expert_used=2,n_ff_exp=32"

START_TEST(refuses_bad_family_files)
{
    /* Catches the new families' keys and tensors being guessed instead of
     * read: each missing or inconsistent one is an error naming it. */
    EXPECT_LOAD_ERROR("gemma3", TINY_GEMMA3, E_DROP_KEY, "gemma3.attention.sliding_window",
                      "gemma3.attention.sliding_window");
    EXPECT_LOAD_ERROR("gemma3", TINY_GEMMA3, E_DROP_TENSOR, "blk.1.post_ffw_norm.weight",
                      "missing tensor blk.1.post_ffw_norm.weight");
    edit_value = 0;
    EXPECT_LOAD_ERROR("gemma3", TINY_GEMMA3, E_SET_U32, "gemma3.attention.sliding_window_pattern",
                      "gemma3.attention.sliding_window_pattern is 0");
    edit_value = 9;
    EXPECT_LOAD_ERROR("qwen3moe", TINY_MOE, E_SET_U32, "qwen3moe.expert_used_count",
                      "qwen3moe.expert_used_count 9", "expert_count 8");
    EXPECT_LOAD_ERROR("qwen3moe", TINY_MOE, E_DROP_KEY, "qwen3moe.expert_feed_forward_length",
                      "qwen3moe.expert_feed_forward_length");
    EXPECT_LOAD_ERROR("qwen3moe", TINY_MOE, E_DROP_TENSOR, "blk.1.ffn_up_exps.weight",
                      "missing tensor blk.1.ffn_up_exps.weight");
    EXPECT_LOAD_ERROR("qwen3moe", TINY_MOE, E_SHAPE, "blk.0.ffn_down_exps.weight",
                      "blk.0.ffn_down_exps.weight", "expected [32, 64, 8]");
    /* Mixtral stored as llama, and a RoPE scaling type this build does not run */
    edit_value = 8;
    EXPECT_LOAD_ERROR("llama", TINY_LLAMA, E_SET_U32, "llama.expert_count",
                      "llama.expert_count", "Mixtral");
    EXPECT_LOAD_ERROR("llama", TINY_LLAMA, E_ROPE_LONGROPE, "llama.rope.scaling.type",
                      "llama.rope.scaling.type", "longrope");
    /* and the unedited files load */
    char err[512];
    load_edited("llama", TINY_LLAMA, E_DROP_KEY, "general.no-such-key", err, sizeof err);
    ck_assert_msg(!err[0], "llama: %s", err);
    load_edited("qwen3moe", TINY_MOE, E_DROP_KEY, "general.no-such-key", err, sizeof err);
    ck_assert_msg(!err[0], "qwen3moe: %s", err);
}
END_TEST

/* Last-token logits of a llama file edited by e (target: the key holding
 * head_dim, for E_ROPE_FREQS). */
static float *llama_logits(enum edit e, const char *target, int32_t *n_vocab)
{
    char path[] = "/tmp/minfer-test-freqs-XXXXXX", err[512];
    write_edited("llama", TINY_LLAMA, e, target, path, err, sizeof err);
    minfer_status st;
    struct minfer_runtime *rt = ts_runtime(NULL);
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    mp.backend = "cpu";
    struct minfer_model *m = minfer_model_load(rt, path, &mp, &st, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(m, &info);
    *n_vocab = info.n_vocab;
    struct minfer_ctx *c = ts_ctx(m, 64, 16, MINFER_TYPE_F32, 0);
    int32_t ids[12] = {5, 9, 30, 7, 100, 3, 200, 17, 8, 44, 60, 2};
    ts_decode_ok(c, ids, 12, 0);
    float *l = malloc(sizeof *l * (size_t)info.n_vocab);
    memcpy(l, minfer_ctx_logits(c, -1), sizeof *l * (size_t)info.n_vocab);
    minfer_ctx_free(c);
    minfer_model_free(m);
    minfer_runtime_free(rt);
    unlink(path);
    return l;
}

START_TEST(llama_rope_freqs_divide_angles)
{
    /* Catches rope_freqs.weight (Llama 3.1's RoPE scaling) ignored or
     * applied wrongly: factors of 1 must change nothing, factors of 4 must
     * change the logits (positions up to 11 turn by a quarter of the angle). */
    int32_t nv;
    float *plain = llama_logits(E_DROP_KEY, "general.no-such-key", &nv);
    edit_freq = 1.0f;
    float *ones = llama_logits(E_ROPE_FREQS, "llama.attention.key_length", &nv);
    edit_freq = 4.0f;
    float *fours = llama_logits(E_ROPE_FREQS, "llama.attention.key_length", &nv);
    double d1 = 0, d4 = 0;
    for (int32_t i = 0; i < nv; i++) {
        d1 = fmax(d1, fabs(plain[i] - ones[i]));
        d4 = fmax(d4, fabs(plain[i] - fours[i]));
    }
    printf("rope_freqs: |ones - none| = %g, |fours - none| = %g\n", d1, d4);
    ck_assert_msg(d1 < 1e-5, "factors of 1 changed the logits by %g", d1);
    ck_assert_msg(d4 > 1e-3, "factors of 4 changed nothing (%g)", d4);
    free(plain);
    free(ones);
    free(fours);
}
END_TEST

START_TEST(run_refuses_model_without_tokenizer)
{
    /* Catches minfer run crashing or generating from a GGUF whose
     * tokenizer.* metadata is missing instead of saying so. */
    char path[] = "/tmp/minfer-test-notok-XXXXXX", err[512], cmd[1024];
    write_edited("qwen2", TINY_QWEN2, E_DROP_PREFIX, "tokenizer.", path, err, sizeof err);
    snprintf(cmd, sizeof cmd,
             "MINFER_PLUGIN_PATH=%s %s/bin/minfer run -m %s -p hi -n 2 2>&1; echo \"rc=$?\"",
             MINFER_PLUGIN_DIR, MINFER_BUILD_DIR, path);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char out[4096];
    size_t n = fread(out, 1, sizeof out - 1, p);
    out[n] = 0;
    pclose(p);
    unlink(path);
    ck_assert_msg(strstr(out, "tokenizer") && strstr(out, "rc=1"), "output: %s", out);
}
END_TEST

START_TEST(hostile_hparams_never_crash)
{
    /* Catches a hyperparameter value (0, 1, odd, huge) that passes loading
     * and then breaks graph building, allocation or a pass: each must be
     * refused with a message or run cleanly. */
    static const char *keys[] = {"block_count", "context_length", "embedding_length",
                                 "feed_forward_length", "attention.head_count",
                                 "attention.head_count_kv", "attention.key_length",
                                 "rope.dimension_count"};
    static const uint32_t values[] = {0, 1, 3, 17, 1u << 30, 0xffffffffu};
    int refused = 0, ran = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
        for (size_t v = 0; v < sizeof values / sizeof values[0]; v++) {
            char key[96], path[] = "/tmp/minfer-test-hp-XXXXXX", err[1024];
            snprintf(key, sizeof key, "qwen3.%s", keys[k]);
            edit_value = values[v];
            write_edited("qwen3", TINY_QWEN3, E_SET_U32, key, path, err, sizeof err);
            struct minfer_runtime *rt = ts_runtime(NULL);
            minfer_status st;
            struct minfer_model *m = minfer_model_load(rt, path, NULL, &st, err, sizeof err);
            if (!m) {
                ck_assert_msg(err[0] != 0, "%s=%u refused without a message", key, values[v]);
                refused++;
            } else {
                struct minfer_ctx_params cp;
                minfer_ctx_params_default(&cp);
                cp.n_ctx = 32;
                struct minfer_ctx *c = minfer_ctx_new(m, &cp, &st, err, sizeof err);
                int32_t ids[2] = {1, 2};
                if (c && minfer_ctx_decode(c, ids, 2, 0) == MINFER_OK)
                    ran++;
                else
                    refused++;
                minfer_ctx_free(c);
                minfer_model_free(m);
            }
            minfer_runtime_free(rt);
            unlink(path);
        }
    printf("hostile hparams: %d refused, %d ran\n", refused, ran);
    ck_assert_int_gt(refused, 30);
}
END_TEST

START_TEST(refuses_prompt_longer_than_context)
{
    /* Catches a prompt overflowing the KV cache (a write past its end) and
     * a refused decode that still changes the context. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    size_t size;
    void *mem = ts_synth("qwen2", TINY_QWEN2, MINFER_FTYPE_ALL_F32, 7, 1, &size);
    char err[512];
    struct minfer_model *m = ts_load_mem(rt, mem, size, NULL, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    struct minfer_ctx *c = ts_ctx(m, 16, 8, MINFER_TYPE_F32, 0);
    int32_t ids[20] = {0};
    ck_assert_int_eq(minfer_ctx_decode(c, ids, 20, 0), MINFER_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(minfer_ctx_last_error(c), "exceed"));
    ck_assert_int_eq(minfer_ctx_n_past(c), 0);
    ts_decode_ok(c, ids, 10, 0);
    ck_assert_int_eq(minfer_ctx_decode(c, ids, 7, 0), MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_ctx_n_past(c), 10);
    ids[3] = 320; /* one past the vocabulary */
    ck_assert_int_eq(minfer_ctx_decode(c, ids, 4, 0), MINFER_ERR_RANGE);
    ck_assert_ptr_nonnull(strstr(minfer_ctx_last_error(c), "vocabulary"));
    minfer_ctx_free(c);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- reference forward ---- */

struct ref {
    const struct minfer_gguf *g;
    int64_t n_embd, n_layer, n_head, n_kv, hd, n_ff, n_vocab;
    double base, eps;
    double yarn_factor, yarn_orig; /* 0: no RoPE scaling */
};

static const float *W(const struct ref *r, const char *fmt, int il)
{
    char name[96];
    snprintf(name, sizeof name, fmt, il);
    const struct minfer_gguf_tensor *t = minfer_gguf_find_tensor(r->g, name);
    if (!t)
        return NULL;
    ck_assert_int_eq(t->type, MINFER_TYPE_F32);
    return t->data;
}

static void matvec(const float *w, const float *x, int64_t in, int64_t out, float *y)
{
    for (int64_t o = 0; o < out; o++) {
        double s = 0;
        for (int64_t i = 0; i < in; i++)
            s += (double)w[o * in + i] * x[i];
        y[o] = (float)s;
    }
}

static void rmsnorm(float *x, int64_t n, const float *w, double eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    double k = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(x[i] * k) * w[i];
}

/* YaRN as llama.cpp's ggml_rope_yarn_corr_dims and rope_yarn write it
 * (beta_fast 32, beta_slow 1, attn_factor 1), independently of the core. */
static double yarn_corr(const struct ref *r, double beta)
{
    return (double)r->hd * log(r->yarn_orig / (beta * 2.0 * M_PI)) / (2.0 * log(r->base));
}

static void rope(const struct ref *r, float *x, int pos)
{
    int64_t hd = r->hd;
    double base = r->base, ms = 1.0;
    if (r->yarn_factor > 0)
        ms = 1.0 + 0.1 * log(r->yarn_factor);
    for (int64_t i = 0; i < hd / 2; i++) {
        double th = pos * pow(base, -2.0 * (double)i / (double)hd);
        if (r->yarn_factor > 0) {
            double lo = fmax(0.0, floor(yarn_corr(r, 32.0)));
            double hi = fmin((double)hd - 1, ceil(yarn_corr(r, 1.0)));
            double y = ((double)i - lo) / fmax(0.001, hi - lo);
            double mix = 1.0 - fmin(1.0, fmax(0.0, y));
            th = th / r->yarn_factor * (1.0 - mix) + th * mix;
        }
        double a = x[i], b = x[i + hd / 2];
        double c = cos(th) * ms, sn = sin(th) * ms;
        x[i] = (float)(a * c - b * sn);
        x[i + hd / 2] = (float)(a * sn + b * c);
    }
}

/* Logits of every position of ids[n] into out[n][n_vocab]. */
static void ref_forward(const struct ref *r, const int32_t *ids, int n, float *out)
{
    int64_t E = r->n_embd, Q = r->n_head * r->hd, K = r->n_kv * r->hd;
    float *x = calloc((size_t)(n * E), 4), *h = calloc((size_t)E, 4);
    float *q = calloc((size_t)(n * Q), 4), *k = calloc((size_t)(n * K), 4),
          *v = calloc((size_t)(n * K), 4), *a = calloc((size_t)Q, 4), *o = calloc((size_t)E, 4);
    float *g = calloc((size_t)r->n_ff, 4), *u = calloc((size_t)r->n_ff, 4);
    float *sc = calloc((size_t)n, 4);
    const float *emb = W(r, "token_embd.weight", 0);
    for (int t = 0; t < n; t++)
        memcpy(x + t * E, emb + ids[t] * E, (size_t)E * 4);
    for (int il = 0; il < r->n_layer; il++) {
        const float *bq = W(r, "blk.%d.attn_q.bias", il), *bk = W(r, "blk.%d.attn_k.bias", il),
                    *bv = W(r, "blk.%d.attn_v.bias", il);
        const float *qn = W(r, "blk.%d.attn_q_norm.weight", il),
                    *kn = W(r, "blk.%d.attn_k_norm.weight", il);
        for (int t = 0; t < n; t++) {
            memcpy(h, x + t * E, (size_t)E * 4);
            rmsnorm(h, E, W(r, "blk.%d.attn_norm.weight", il), r->eps);
            matvec(W(r, "blk.%d.attn_q.weight", il), h, E, Q, q + t * Q);
            matvec(W(r, "blk.%d.attn_k.weight", il), h, E, K, k + t * K);
            matvec(W(r, "blk.%d.attn_v.weight", il), h, E, K, v + t * K);
            for (int64_t i = 0; bq && i < Q; i++)
                q[t * Q + i] += bq[i];
            for (int64_t i = 0; bk && i < K; i++)
                k[t * K + i] += bk[i], v[t * K + i] += bv[i];
            for (int64_t hh = 0; hh < r->n_head; hh++) {
                if (qn)
                    rmsnorm(q + t * Q + hh * r->hd, r->hd, qn, r->eps);
                rope(r, q + t * Q + hh * r->hd, t);
            }
            for (int64_t hh = 0; hh < r->n_kv; hh++) {
                if (kn)
                    rmsnorm(k + t * K + hh * r->hd, r->hd, kn, r->eps);
                rope(r, k + t * K + hh * r->hd, t);
            }
        }
        for (int t = 0; t < n; t++) {
            for (int64_t hh = 0; hh < r->n_head; hh++) {
                int64_t kh = hh / (r->n_head / r->n_kv);
                double mx = -1e30, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int64_t i = 0; i < r->hd; i++)
                        d += (double)q[t * Q + hh * r->hd + i] * k[s * K + kh * r->hd + i];
                    sc[s] = (float)(d / sqrt((double)r->hd));
                    mx = sc[s] > mx ? sc[s] : mx;
                }
                for (int s = 0; s <= t; s++)
                    sum += (sc[s] = (float)exp(sc[s] - mx));
                for (int64_t i = 0; i < r->hd; i++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++)
                        acc += sc[s] / sum * v[s * K + kh * r->hd + i];
                    a[hh * r->hd + i] = (float)acc;
                }
            }
            matvec(W(r, "blk.%d.attn_output.weight", il), a, Q, E, o);
            for (int64_t i = 0; i < E; i++)
                x[t * E + i] += o[i];
            memcpy(h, x + t * E, (size_t)E * 4);
            rmsnorm(h, E, W(r, "blk.%d.ffn_norm.weight", il), r->eps);
            matvec(W(r, "blk.%d.ffn_gate.weight", il), h, E, r->n_ff, g);
            matvec(W(r, "blk.%d.ffn_up.weight", il), h, E, r->n_ff, u);
            for (int64_t i = 0; i < r->n_ff; i++)
                g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
            matvec(W(r, "blk.%d.ffn_down.weight", il), g, r->n_ff, E, o);
            for (int64_t i = 0; i < E; i++)
                x[t * E + i] += o[i];
        }
    }
    const float *head = W(r, "output.weight", 0);
    if (!head)
        head = emb;
    for (int t = 0; t < n; t++) {
        memcpy(h, x + t * E, (size_t)E * 4);
        rmsnorm(h, E, W(r, "output_norm.weight", 0), r->eps);
        matvec(head, h, E, r->n_vocab, out + (size_t)t * (size_t)r->n_vocab);
    }
    free(x), free(h), free(q), free(k), free(v), free(a), free(o), free(g), free(u), free(sc);
}

/* The model's logits against ref_forward; yarn: the GGUF carries
 * E_ROPE_SCALING's YaRN keys (factor 4, original context 256). */
static void check_model(struct minfer_model *m, const char *arch, bool yarn)
{
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(m, &info);
    struct ref r = {.g = minfer_model_gguf(m), .n_embd = info.n_embd, .n_layer = info.n_layer,
                    .n_head = info.n_head, .n_kv = info.n_head_kv, .hd = info.head_dim,
                    .n_ff = info.n_ff, .n_vocab = info.n_vocab,
                    .yarn_factor = yarn ? 4.0 : 0.0, .yarn_orig = 256.0};
    char key[96];
    snprintf(key, sizeof key, "%s.rope.freq_base", arch);
    ck_assert_int_eq(minfer_gguf_get_f64(r.g, key, &r.base), MINFER_OK);
    snprintf(key, sizeof key, "%s.attention.layer_norm_rms_epsilon", arch);
    ck_assert_int_eq(minfer_gguf_get_f64(r.g, key, &r.eps), MINFER_OK);

    enum { N = 9 };
    int32_t ids[N] = {5, 17, 300, 42, 42, 7, 250, 1, 99};
    float *want = malloc(sizeof *want * N * (size_t)r.n_vocab);
    ref_forward(&r, ids, N, want);
    /* Our forward in two passes (5 + 4 tokens) so the cache carries over. */
    struct minfer_ctx *c = ts_ctx(m, 64, 5, MINFER_TYPE_F32, 0);
    ts_decode_ok(c, ids, N, MINFER_DECODE_ALL_LOGITS);
    double worst = 0, scale = 0;
    for (int t = 0; t < N; t++)
        for (int64_t i = 0; i < r.n_vocab; i++) {
            double d = fabs(minfer_ctx_logits(c, t)[i] - want[t * r.n_vocab + i]);
            worst = d > worst || d != d ? d : worst;
            scale = fabs(want[t * r.n_vocab + i]) > scale ? fabs(want[t * r.n_vocab + i]) : scale;
        }
    printf("%s vs plain-C reference: max |diff| %.3g (max |logit| %.3g)\n", arch, worst, scale);
    /* f32 weights, f32 activations: only summation order differs. */
    ck_assert_msg(worst <= 1e-4 * (scale > 1 ? scale : 1), "%s: %g", arch, worst);
    free(want);
    minfer_ctx_free(c);
}

static void check_against_reference(const char *arch, const char *spec)
{
    struct minfer_runtime *rt = ts_runtime(NULL);
    size_t size;
    void *mem = ts_synth(arch, spec, MINFER_FTYPE_ALL_F32, 7, 1, &size);
    char err[512];
    struct minfer_model *m = ts_load_mem(rt, mem, size, NULL, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    check_model(m, arch, false);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}

START_TEST(qwen3_matches_reference)
{
    /* Catches a missing or misplaced per-head Q/K norm, head_dim taken from
     * n_embd / n_head, a wrong GQA head mapping and a broken tied head. */
    check_against_reference("qwen3", TINY_QWEN3);
}
END_TEST

START_TEST(qwen2_untied_matches_reference)
{
    /* Catches QKV biases not applied and output.weight ignored when present. */
    check_against_reference("qwen2", TINY_QWEN2);
}
END_TEST

START_TEST(yarn_matches_reference)
{
    /* Catches rope.scaling.* of type yarn read but not applied (or applied
     * as linear scaling), a wrong ramp, a missing cos/sin magnitude, and a
     * context still capped at the trained length: a scaled model runs to
     * original_context_length * factor (1,024 here, past the 512 trained). */
    char path[] = "/tmp/minfer-test-yarn-XXXXXX", err[512];
    scaling_type = "yarn";
    write_edited("qwen2", TINY_QWEN2, E_ROPE_SCALING, "", path, err, sizeof err);
    minfer_status st;
    struct minfer_runtime *rt = ts_runtime(NULL);
    struct minfer_model *m = minfer_model_load(rt, path, NULL, &st, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    check_model(m, "qwen2", true);
    struct minfer_ctx *c = ts_ctx(m, 1024, 64, MINFER_TYPE_F16, 0);
    ck_assert_int_eq(minfer_ctx_n_ctx(c), 1024);
    minfer_ctx_free(c);
    minfer_model_free(m);
    minfer_runtime_free(rt);
    unlink(path);
}
END_TEST

START_TEST(refuses_unknown_rope_scaling)
{
    /* Catches a scaling type silently run as something else. */
    scaling_type = "longrope";
    EXPECT_LOAD_ERROR("qwen2", TINY_QWEN2, E_ROPE_SCALING, "", "qwen2.rope.scaling.type",
                      "longrope", "linear and yarn");
    scaling_type = "yarn";
}
END_TEST

/* ---- contexts ---- */

START_TEST(chunks_truncate_and_redecode_agree)
{
    /* Catches KV carried wrongly across passes of different sizes, and
     * truncation that leaves stale cells visible to later tokens. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    size_t size;
    void *mem = ts_synth("qwen3", TINY_QWEN3, MINFER_FTYPE_MOSTLY_Q8_0, 7, 1, &size);
    char err[512];
    struct minfer_model *m = ts_load_mem(rt, mem, size, NULL, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    int32_t ids[12] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8}, other[4] = {100, 200, 300, 310};
    struct minfer_ctx *one = ts_ctx(m, 64, 64, MINFER_TYPE_F32, 0);
    struct minfer_ctx *many = ts_ctx(m, 64, 3, MINFER_TYPE_F32, 0);
    ts_decode_ok(one, ids, 12, 0);
    /* many: a detour of 4 wrong tokens, truncated away, then the rest. */
    ts_decode_ok(many, ids, 6, 0);
    ts_decode_ok(many, other, 4, 0);
    ck_assert_int_eq(minfer_ctx_truncate(many, 6), MINFER_OK);
    ck_assert_int_eq(minfer_ctx_n_past(many), 6);
    ts_decode_ok(many, ids + 6, 5, 0);
    ts_decode_ok(many, ids + 11, 1, 0);
    ck_assert_int_eq(minfer_ctx_n_past(many), 12);
    const float *a = minfer_ctx_logits(one, -1), *b = minfer_ctx_logits(many, -1);
    double worst = 0;
    for (int i = 0; i < 320; i++)
        worst = fmax(worst, fabs(a[i] - b[i]));
    /* Row batching may change the summation order inside the kernels. */
    ck_assert_msg(worst < 1e-3, "max diff %g", worst);
    ck_assert_int_eq(minfer_ctx_truncate(many, 13), MINFER_ERR_RANGE);
    minfer_ctx_free(one);
    minfer_ctx_free(many);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* A spy around the CPU plugin's table: records every replay offer. */
static struct minfer_backend_iface spy_iface;
static const struct minfer_backend_iface *spy_real;
static struct minfer_replay_window spy_w[64];
static void *spy_dst[64];
static int spy_n;

static int spy_weights, spy_weights_in_place;

static minfer_status spy_weight_register(struct minfer_backend *be,
                                         const struct minfer_weight_desc *w, void **data)
{
    minfer_status st = spy_real->weight_register(be, w, data);
    spy_weights++;
    spy_weights_in_place += st == MINFER_OK && *data == w->host_data;
    return st;
}

static minfer_status spy_replay(struct minfer_backend *be, const struct minfer_replay_window *w,
                                bool *replayed)
{
    if (spy_n < 64) {
        spy_w[spy_n] = *w;
        spy_dst[spy_n] = w->nodes[w->last].dst->data;
        spy_n++;
    }
    *replayed = false;
    return MINFER_OK;
}

START_TEST(decode_steps_reuse_one_graph)
{
    /* Catches per-step graph rebuilds or moving buffers (a captured CUDA
     * graph would replay stale addresses), token positions baked into the
     * graph, and replay offered when the context turned it off. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    const struct minfer_plugin *cpu = runtime_find_backend(rt, "cpu");
    spy_real = cpu->iface;
    memcpy(&spy_iface, cpu->iface, sizeof spy_iface);
    spy_iface.graph_replay = spy_replay;
    spy_iface.weight_register = spy_weight_register;
    struct minfer_plugin spy = *cpu;
    spy.iface = &spy_iface;
    spy.iface_size = sizeof spy_iface;

    size_t size;
    void *mem = ts_synth("qwen2", TINY_QWEN2, MINFER_FTYPE_MOSTLY_Q8_0, 7, 1, &size);
    minfer_status st;
    char err[512];
    struct minfer_gguf *g = minfer_gguf_open_memory(mem, size, &st, err, sizeof err);
    struct minfer_model *m = NULL;
    ck_assert_int_eq(model_load_internal(NULL, &spy, g, NULL, &m, err, sizeof err), MINFER_OK);
    struct minfer_ctx *c = ts_ctx(m, 128, 16, MINFER_TYPE_F16, 0);
    /* The CPU reads every weight in place, in the file's mapping. */
    ck_assert_int_gt(spy_weights, 10);
    ck_assert_int_eq(spy_weights_in_place, spy_weights);
    int32_t ids[8] = {11, 22, 33, 44, 55, 66, 77, 88};
    spy_n = 0;
    ts_decode_ok(c, ids, 8, 0);
    ck_assert_int_eq(spy_n, 1);
    ck_assert_int_eq(spy_w[0].nt_hint, 8);
    for (int k = 0; k < 10; k++)
        ts_decode_ok(c, &ids[k % 8], 1, 0);
    ck_assert_int_eq(spy_n, 11);
    for (int k = 2; k < 11; k++) {
        ck_assert_uint_eq(spy_w[k].uid, spy_w[1].uid);
        ck_assert_uint_eq(spy_w[k].generation, spy_w[1].generation);
        ck_assert_ptr_eq(spy_w[k].nodes, spy_w[1].nodes);
        ck_assert_ptr_eq(spy_dst[k], spy_dst[1]);
        ck_assert_int_eq(spy_w[k].nt_hint, 1);
    }
    ck_assert_uint_ne(spy_w[1].uid, spy_w[0].uid);
    /* The CPU plugin accepts the fused forms, so fusion must have used them.
     * Every ADD of qwen2 (Q/K/V biases, both residuals) has a product as an
     * operand, so none may be left: a backend that accepts MUL_MAT_ADD never
     * sees a MUL_MAT + ADD pair (the CUDA plugin's capture-time pair fusion
     * was deleted on that ground). */
    int fused_norm = 0, fused_ffn = 0, plain_swiglu = 0, fused_add = 0, plain_add = 0;
    for (uint32_t k = spy_w[1].first; k <= spy_w[1].last; k++) {
        fused_norm += spy_w[1].nodes[k].op == MINFER_OP_RMS_NORM_MUL;
        fused_ffn += spy_w[1].nodes[k].op == MINFER_OP_FFN_GATE_UP;
        plain_swiglu += spy_w[1].nodes[k].op == MINFER_OP_SWIGLU;
        fused_add += spy_w[1].nodes[k].op == MINFER_OP_MUL_MAT_ADD;
        plain_add += spy_w[1].nodes[k].op == MINFER_OP_ADD;
    }
    ck_assert_int_eq(fused_norm, 2 * 2 + 1);
    ck_assert_int_eq(fused_ffn, 2);
    ck_assert_int_eq(plain_swiglu, 0);
    ck_assert_int_eq(fused_add, 2 * 5);
    ck_assert_int_eq(plain_add, 0);
    minfer_ctx_free(c);

    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.flags = MINFER_CTX_NO_GRAPHS;
    cp.n_ctx = 64;
    c = minfer_ctx_new(m, &cp, &st, err, sizeof err);
    ck_assert_ptr_nonnull(c);
    spy_n = 0;
    ts_decode_ok(c, ids, 3, 0);
    ck_assert_int_eq(spy_n, 0);
    minfer_ctx_free(c);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

struct worker {
    struct minfer_model *m;
    float logits[320];
    int rc;
};

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = 64;
    cp.n_batch = 4;
    cp.n_threads = 1;
    minfer_status st;
    struct minfer_ctx *c = minfer_ctx_new(w->m, &cp, &st, NULL, 0);
    int32_t ids[10] = {9, 8, 7, 6, 5, 4, 3, 2, 1, 0};
    w->rc = !c;
    for (int k = 0; !w->rc && k < 20; k++) {
        w->rc |= minfer_ctx_truncate(c, 0) != MINFER_OK;
        w->rc |= minfer_ctx_decode(c, ids, 10, 0) != MINFER_OK;
        for (int t = 0; !w->rc && t < 5; t++)
            w->rc |= minfer_ctx_decode(c, &ids[t], 1, 0) != MINFER_OK;
    }
    if (!w->rc)
        memcpy(w->logits, minfer_ctx_logits(c, -1), sizeof w->logits);
    minfer_ctx_free(c);
    return NULL;
}

START_TEST(two_contexts_on_two_threads)
{
    /* Catches shared mutable state between contexts of one model (graph
     * cache, arena, KV, uid counter): concurrent runs must equal a serial one. */
    struct minfer_runtime *rt = ts_runtime(NULL);
    size_t size;
    void *mem = ts_synth("qwen3", TINY_QWEN3, MINFER_FTYPE_MOSTLY_Q8_0, 7, 1, &size);
    char err[512];
    struct minfer_model *m = ts_load_mem(rt, mem, size, NULL, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    struct worker serial = {.m = m}, w[2] = {{.m = m}, {.m = m}};
    worker_main(&serial);
    ck_assert_int_eq(serial.rc, 0);
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].rc, 0);
        ck_assert_mem_eq(w[i].logits, serial.logits, sizeof serial.logits);
    }
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- minfer chat ---- */

START_TEST(chat_turn2_equals_fresh_run)
{
    /* Catches KV reuse across chat turns that drifts from recomputing the
     * whole conversation, and a second turn that re-prefills everything. */
    if (access(FIX_GGUF, R_OK))
        MINFER_TEST_SKIP("fixture model absent at %s", FIX_GGUF);
    struct minfer_runtime *rt = ts_runtime(NULL);
    char *log = check_chat_turn2(rt, NULL, 6);
    ck_assert_msg(strstr(log, "[chat: 0 cached tokens reused") &&
                      !strstr(strstr(log, "\n") ? strstr(log, "\n") + 1 : log, "[chat: 0 cached"),
                  "turn 2 did not reuse the cache: %s", log);
    free(log);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(cli_eval_and_run_json)
{
    /* Catches eval writing the wrong rows, a wrong byte layout or printing
     * other ids than it used, and run --json missing its keys or giving
     * generated ids that disagree with greedy decoding. */
    if (access(FIX_GGUF, R_OK))
        MINFER_TEST_SKIP("fixture model absent at %s", FIX_GGUF);
    char cmd[1024], out[64];
    snprintf(out, sizeof out, "/tmp/minfer-eval-test-%d.bin", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "MINFER_PLUGIN_PATH=%s %s/bin/minfer eval -m %s 'The quick brown fox' --raw --all "
             "-o %s 2>/dev/null",
             MINFER_PLUGIN_DIR, MINFER_BUILD_DIR, FIX_GGUF, out);
    char *ids_s = run_capture(cmd);
    ck_assert_str_eq(ids_s, "[785, 3974, 13876, 38835]\n");
    FILE *f = fopen(out, "rb");
    ck_assert_ptr_nonnull(f);
    float *rows = malloc(4 * 151936 * sizeof *rows);
    ck_assert_uint_eq(fread(rows, sizeof *rows, 4 * 151936, f), 4 * 151936);
    ck_assert_int_eq(fgetc(f), EOF);
    fclose(f);
    unlink(out);

    struct minfer_runtime *rt = ts_runtime(NULL);
    minfer_status st;
    char err[512];
    struct minfer_model *m = minfer_model_load(rt, FIX_GGUF, NULL, &st, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    struct minfer_ctx *c = ts_ctx(m, 64, 64, MINFER_TYPE_F16, 0);
    int32_t ids[4] = {785, 3974, 13876, 38835};
    ts_decode_ok(c, ids, 4, MINFER_DECODE_ALL_LOGITS);
    for (int t = 0; t < 4; t++)
        ck_assert_mem_eq(rows + t * 151936, minfer_ctx_logits(c, t), 151936 * sizeof(float));

    snprintf(cmd, sizeof cmd,
             "MINFER_PLUGIN_PATH=%s %s/bin/minfer run -m %s --ids 785,3974,13876,38835 -n 3 "
             "--temp 0 --json 2>/dev/null",
             MINFER_PLUGIN_DIR, MINFER_BUILD_DIR, FIX_GGUF);
    char *js = run_capture(cmd);
    const char *keys[] = {"\"prompt_ids\"", "\"generated_ids\"", "\"text\"", "\"timings\""};
    for (int k = 0; k < 4; k++)
        ck_assert_msg(strstr(js, keys[k]), "run --json lacks %s: %s", keys[k], js);
    /* Greedy ids through the API, compared with the JSON's. */
    char want[128] = "";
    size_t used = 0;
    for (int k = 0; k < 3; k++) {
        const float *l = minfer_ctx_logits(c, -1);
        int32_t best = 0;
        for (int32_t i = 1; i < 151936; i++)
            if (l[i] > l[best])
                best = i;
        used += (size_t)snprintf(want + used, sizeof want - used, "%s%d", k ? ", " : "", best);
        ts_decode_ok(c, &best, 1, 0);
    }
    char *gen = strstr(js, "\"generated_ids\"");
    ck_assert_msg(strstr(gen, want), "generated ids [%s] not in %s", want, gen);
    free(js);
    free(ids_s);
    free(rows);
    minfer_ctx_free(c);
    minfer_model_free(m);
    minfer_runtime_free(rt);
}
END_TEST

/* A runtime with the CPU plugin and one test plugin ("testbe"). */
static struct minfer_runtime *runtime_with(const char *test_plugin)
{
    char extra[512];
    snprintf(extra, sizeof extra, "%s/libminfer-test-%s.so", MINFER_TEST_PLUGIN_DIR, test_plugin);
    if (access(extra, R_OK))
        return NULL;
    const char *paths[] = {MINFER_PLUGIN_DIR, extra};
    struct minfer_runtime_opts o = {
        .struct_size = sizeof o, .plugin_paths = paths, .n_plugin_paths = 2,
        .flags = MINFER_RUNTIME_NO_ENV | MINFER_RUNTIME_NO_DEFAULT_DIRS,
    };
    minfer_status st;
    char err[512] = "";
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, err, sizeof err);
    ck_assert_msg(rt, "runtime: %s", err);
    return rt;
}

static const char *auto_backend(struct minfer_runtime *rt, struct minfer_model **m, void **mem)
{
    size_t size;
    *mem = ts_synth("qwen2", TINY_QWEN2, MINFER_FTYPE_MOSTLY_Q8_0, 7, 1, &size);
    char err[512];
    *m = ts_load_mem(rt, *mem, size, NULL, err, sizeof err);
    ck_assert_msg(*m, "%s", err);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(*m, &info);
    return info.backend;
}

START_TEST(auto_backend_is_all_or_nothing)
{
    /* Catches automatic placement choosing an accelerator that cannot even
     * make an instance, and the CPU being chosen over one that accepts the
     * whole model. */
    struct minfer_runtime *rt = runtime_with("create-fails");
    if (!rt)
        MINFER_TEST_SKIP("test plugins not built in %s", MINFER_TEST_PLUGIN_DIR);
    struct minfer_model *m;
    void *mem;
    ck_assert_str_eq(auto_backend(rt, &m, &mem), "cpu");
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);

    rt = runtime_with("good");
    ck_assert_str_eq(auto_backend(rt, &m, &mem), "testbe");
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(backend_failure_is_an_error_not_a_fallback)
{
    /* Catches a node failure being hidden by re-running on the CPU, and an
     * error that does not name the node, its op and the backend's reason. */
    struct minfer_runtime *rt = runtime_with("exec-fails");
    if (!rt)
        MINFER_TEST_SKIP("test plugins not built in %s", MINFER_TEST_PLUGIN_DIR);
    struct minfer_model *m;
    void *mem;
    ck_assert_str_eq(auto_backend(rt, &m, &mem), "testbe");
    struct minfer_ctx *c = ts_ctx(m, 32, 8, MINFER_TYPE_F16, 0);
    int32_t ids[3] = {1, 2, 3};
    ck_assert_int_eq(minfer_ctx_decode(c, ids, 3, 0), MINFER_ERR_BACKEND);
    const char *e = minfer_ctx_last_error(c);
    ck_assert_msg(strstr(e, "testbe") && strstr(e, "token_embd") && strstr(e, "GET_ROWS") &&
                      strstr(e, "on purpose"),
                  "error: %s", e);
    ck_assert_int_eq(minfer_ctx_n_past(c), 0);
    ck_assert_ptr_null(minfer_ctx_logits(c, -1));
    minfer_ctx_free(c);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

Suite *model_suite(void);
Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("load");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, refuses_unknown_architecture);
    tcase_add_test(tc, refuses_missing_tensor);
    tcase_add_test(tc, refuses_wrong_shape_and_type);
    tcase_add_test(tc, refuses_bad_hparams);
    tcase_add_test(tc, refuses_bad_family_files);
    tcase_add_test(tc, llama_rope_freqs_divide_angles);
    tcase_add_test(tc, refuses_prompt_longer_than_context);
    tcase_add_test(tc, run_refuses_model_without_tokenizer);
    tcase_add_test(tc, hostile_hparams_never_crash);
    tcase_add_test(tc, refuses_unknown_rope_scaling);
    suite_add_tcase(s, tc);
    TCase *fw = tcase_create("forward");
    tcase_set_timeout(fw, 300);
    tcase_add_test(fw, qwen3_matches_reference);
    tcase_add_test(fw, qwen2_untied_matches_reference);
    tcase_add_test(fw, yarn_matches_reference);
    tcase_add_test(fw, chunks_truncate_and_redecode_agree);
    tcase_add_test(fw, decode_steps_reuse_one_graph);
    tcase_add_test(fw, chat_turn2_equals_fresh_run);
    tcase_add_test(fw, cli_eval_and_run_json);
    tcase_add_test(fw, two_contexts_on_two_threads);
    tcase_add_test(fw, auto_backend_is_all_or_nothing);
    tcase_add_test(fw, backend_failure_is_an_error_not_a_fallback);
    suite_add_tcase(s, fw);
    return s;
}
