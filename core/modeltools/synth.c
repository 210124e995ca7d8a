/*
 * synth.c — minfer_synth: random-weight Qwen2/Qwen3 models with real
 * models' shapes, written straight as valid quant blocks (never as floats)
 * through the GGUF writer by worker threads, with llama.cpp's metadata
 * and tensor names, and a tokenizer (copied, given, or built in).
 *
 * Magnitudes: every matrix element has standard deviation ~1/sqrt(ne[0])
 * (its input width), so each product of an RMS-normalised activation
 * has unit scale whatever the model's size; norms are ~1, biases small.
 * A forward pass therefore stays finite at any depth.
 */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/error.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "minfer/quant.h"
#include "model/model.h"
#include "tensor-stream.h"

#define QUANT_VERSION 2

/* ---- shapes ---- */

/* From each model's config.json (hidden_size, num_hidden_layers,
 * num_attention_heads, num_key_value_heads, head_dim, intermediate_size,
 * vocab_size, max_position_embeddings, tie_word_embeddings). */
#define SHAPE(A, NM, E, L, H, KV, HD, FF, V, CTX, TH, EPS, TIED, BIAS, QK, ...)                     \
    {.arch = A, .name = NM, .n_embd = E, .n_layer = L, .n_head = H, .n_head_kv = KV,            \
     .head_dim = HD, .n_ff = FF, .n_vocab = V, .n_ctx = CTX, .rope_theta = TH, .rms_eps = EPS,  \
     .tied = TIED, .qkv_bias = BIAS, .qk_norm = QK, __VA_ARGS__}
static const struct minfer_synth_shape known_shapes[] = {
    SHAPE("qwen2", "qwen2.5-0.5b", 896, 24, 14, 2, 64, 4864, 151936, 32768,
          1e6f, 1e-6f, true, true, false),
    SHAPE("qwen2", "qwen2.5-1.5b", 1536, 28, 12, 2, 128, 8960, 151936, 32768,
          1e6f, 1e-6f, true, true, false),
    SHAPE("qwen2", "qwen2.5-3b", 2048, 36, 16, 2, 128, 11008, 151936, 32768,
          1e6f, 1e-6f, true, true, false),
    SHAPE("qwen2", "qwen2.5-7b", 3584, 28, 28, 4, 128, 18944, 152064, 32768,
          1e6f, 1e-6f, false, true, false),
    SHAPE("qwen3", "qwen3-0.6b", 1024, 28, 16, 8, 128, 3072, 151936, 40960,
          1e6f, 1e-6f, true, false, true),
    SHAPE("qwen3", "qwen3-1.7b", 2048, 28, 16, 8, 128, 6144, 151936, 40960,
          1e6f, 1e-6f, true, false, true),
    SHAPE("qwen3", "qwen3-4b", 2560, 36, 32, 8, 128, 9728, 151936, 40960,
          1e6f, 1e-6f, true, false, true),
    SHAPE("qwen3", "qwen3-8b", 4096, 36, 32, 8, 128, 12288, 151936, 40960,
          1e6f, 1e-6f, false, false, true),
    /* Llama 3.x: byte-level BPE (llama-bpe); Mistral 7B v0.3: SentencePiece */
    SHAPE("llama", "llama3.2-1b", 2048, 16, 32, 8, 64, 8192, 128256, 131072,
          5e5f, 1e-5f, true, false, false),
    SHAPE("llama", "llama3.1-8b", 4096, 32, 32, 8, 128, 14336, 128256, 131072,
          5e5f, 1e-5f, false, false, false),
    SHAPE("llama", "mistral-7b", 4096, 32, 32, 8, 128, 14336, 32768, 32768,
          1e6f, 1e-5f, false, false, false, .spm = true),
    /* Gemma 3: rope_theta of the global layers; the local ones use 1e4 */
    SHAPE("gemma3", "gemma3-1b", 1152, 26, 4, 1, 256, 6912, 262144, 32768,
          1e6f, 1e-6f, true, false, true, .sliding_window = 512, .spm = true),
    SHAPE("gemma3", "gemma3-4b", 2560, 34, 8, 4, 256, 10240, 262208, 131072,
          1e6f, 1e-6f, true, false, true, .sliding_window = 1024, .spm = true),
    SHAPE("qwen3moe", "qwen3-30b-a3b", 2048, 48, 32, 4, 128, 6144, 151936, 40960,
          1e6f, 1e-6f, false, false, true, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768),
};
#define N_SHAPES (int)(sizeof known_shapes / sizeof known_shapes[0])

#define SYNTH_ARCHS "qwen2, qwen3, llama, gemma3, qwen3moe"

static bool synth_arch_ok(const char *arch)
{
    return !strcmp(arch, "qwen2") || !strcmp(arch, "qwen3") || !strcmp(arch, "llama") ||
           !strcmp(arch, "gemma3") || !strcmp(arch, "qwen3moe");
}

static bool shape_valid(const struct minfer_synth_shape *s, char *err, size_t err_len)
{
    const char *bad = NULL;
    if (s->n_embd < 1 || s->n_embd > (1 << 20))
        bad = "n_embd";
    else if (s->n_layer < 1 || s->n_layer > 4096)
        bad = "n_layer";
    else if (s->n_head < 1 || s->n_head > 4096)
        bad = "n_head";
    else if (s->n_head_kv < 1 || s->n_head % s->n_head_kv)
        bad = "n_head_kv (must divide n_head)";
    else if (s->head_dim < 2 || s->head_dim > 4096 || s->head_dim % 2)
        bad = "head_dim (even, 2..4096)";
    else if (s->n_ff < 1 || s->n_ff > (1 << 22))
        bad = "n_ff";
    else if (s->n_vocab < 256 + 26 || s->n_vocab > (1 << 24))
        bad = "n_vocab (282..16777216)";
    else if (s->n_ctx < 1)
        bad = "n_ctx";
    else if (!strcmp(s->arch, "qwen3moe") &&
             (s->n_expert < 1 || s->n_expert > 4096 || s->n_expert_used < 1 ||
              s->n_expert_used > s->n_expert || s->n_expert_used > 64 || s->n_ff_exp < 1))
        bad = "n_expert / n_expert_used / n_ff_exp (1 <= used <= experts, used <= 64)";
    else if (!strcmp(s->arch, "gemma3") && s->sliding_window < 1)
        bad = "sliding_window";
    if (bad) {
        errf(err, err_len, 0, "synthetic shape %s: bad %s", s->name, bad);
        return false;
    }
    return true;
}

MINFER_API minfer_status minfer_synth_shape_parse(const char *arch, const char *spec,
                                                  struct minfer_synth_shape *shape,
                                                  char *err, size_t err_len)
{
    if (!arch || !spec || !shape)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "shape: missing argument");
    if (!synth_arch_ok(arch))
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "architecture '%s' is not one of " SYNTH_ARCHS, arch);
    if (strncmp(spec, "custom", 6)) {
        for (int i = 0; i < N_SHAPES; i++)
            if (!strcasecmp(spec, known_shapes[i].name)) {
                if (strcmp(known_shapes[i].arch, arch))
                    return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                                "shape %s is a %s model, not %s", spec,
                                known_shapes[i].arch, arch);
                *shape = known_shapes[i];
                return MINFER_OK;
            }
        char list[256] = "";
        for (int i = 0; i < N_SHAPES; i++)
            if (!strcmp(known_shapes[i].arch, arch)) {
                strncat(list, list[0] ? ", " : "", sizeof list - strlen(list) - 1);
                strncat(list, known_shapes[i].name, sizeof list - strlen(list) - 1);
            }
        return errf(err, err_len, MINFER_ERR_NOT_FOUND,
                    "unknown shape '%s' for %s; known: %s, or custom:key=value,...",
                    spec, arch, list);
    }
    /* custom: defaults from the arch's first (smallest) model */
    for (int i = N_SHAPES - 1; i >= 0; i--)
        if (!strcmp(known_shapes[i].arch, arch))
            *shape = known_shapes[i];
    snprintf(shape->name, sizeof shape->name, "custom");
    const char *p = spec + 6;
    if (*p == ':')
        p++;
    else if (*p)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "custom shape must be custom:key=value,... (got '%s')", spec);
    while (*p) {
        const char *eq = strchr(p, '='), *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (!eq || eq > end)
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "custom shape item '%.*s' is not key=value", (int)(end - p), p);
        char key[32];
        snprintf(key, sizeof key, "%.*s", (int)(eq - p), p);
        char *vend;
        errno = 0;
        double v = strtod(eq + 1, &vend);
        if (vend != end || errno)
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "custom shape value of %s ('%.*s') is not a number", key,
                        (int)(end - eq - 1), eq + 1);
        int32_t iv = v >= -2e9 && v <= 2e9 ? (int32_t)v : -1;
        if (!strcmp(key, "n_embd")) shape->n_embd = iv;
        else if (!strcmp(key, "n_layer")) shape->n_layer = iv;
        else if (!strcmp(key, "n_head")) shape->n_head = iv;
        else if (!strcmp(key, "n_head_kv")) shape->n_head_kv = iv;
        else if (!strcmp(key, "head_dim")) shape->head_dim = iv;
        else if (!strcmp(key, "n_ff")) shape->n_ff = iv;
        else if (!strcmp(key, "n_vocab")) shape->n_vocab = iv;
        else if (!strcmp(key, "n_ctx")) shape->n_ctx = iv;
        else if (!strcmp(key, "rope_theta")) shape->rope_theta = (float)v;
        else if (!strcmp(key, "rms_eps")) shape->rms_eps = (float)v;
        else if (!strcmp(key, "tied")) shape->tied = v != 0;
        else if (!strcmp(key, "n_expert")) shape->n_expert = iv;
        else if (!strcmp(key, "n_expert_used")) shape->n_expert_used = iv;
        else if (!strcmp(key, "n_ff_exp")) shape->n_ff_exp = iv;
        else if (!strcmp(key, "sliding_window")) shape->sliding_window = iv;
        else if (!strcmp(key, "spm")) shape->spm = v != 0;
        else
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "unknown custom shape key '%s' (n_embd, n_layer, n_head, "
                        "n_head_kv, head_dim, n_ff, n_vocab, n_ctx, rope_theta, rms_eps, tied, "
                        "n_expert, n_expert_used, n_ff_exp, sliding_window, spm)",
                        key);
        p = *end ? end + 1 : end;
    }
    if (!shape_valid(shape, err, err_len))
        return MINFER_ERR_RANGE;
    return MINFER_OK;
}

/* ---- random blocks ---- */

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rand_bytes(uint64_t *s, uint8_t *p, size_t n)
{
    while (n >= 8) {
        uint64_t v = splitmix(s);
        memcpy(p, &v, 8);
        p += 8;
        n -= 8;
    }
    if (n) {
        uint64_t v = splitmix(s);
        memcpy(p, &v, n);
    }
}

/* uniform in [-1, 1) */
static float rand_sym(uint64_t *s)
{
    return (float)(splitmix(s) >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

/* Per-block scale jitter in [0.75, 1.25). */
static float jitter(uint64_t *s)
{
    return 0.75f + 0.5f * (float)(splitmix(s) >> 40) / 16777216.0f;
}

enum skind { S_MATRIX, S_NORM, S_BIAS };

struct stensor {
    struct tstream_tensor st; /* first: the fill callback's user */
    char name[64];
    uint32_t type, n_dims;
    int64_t ne[3];            /* ne[2]: experts of a 3-D expert tensor, else 1 */
    enum skind kind;
    float sigma;              /* target standard deviation of matrix elements */
    uint64_t seed;
};

/* 6-bit scale and equal min for sub-block j of a K-quant scales[12]. */
static void k4_pack(uint8_t *sc12, const uint8_t *s6)
{
    memset(sc12, 0, 12);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = s6[j], lm = s6[j];
        if (j < 4) {
            sc12[j] = ls;
            sc12[j + 4] = lm;
        } else {
            sc12[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            sc12[j - 4] |= (uint8_t)((ls >> 4) << 6);
            sc12[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
}

/* One row of random, valid blocks of type with element std ~sigma and
 * mean ~0. Std of uniform levels 0..2^b-1 is sqrt((4^b - 1) / 12). */
static void random_row(uint32_t type, int64_t n, float sigma, uint64_t *s, uint8_t *dst)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    int64_t nb = n / tr->block_size;
    switch (type) {
    case MINFER_TYPE_F32:
        for (int64_t i = 0; i < n; i++) {
            float v = rand_sym(s) * sigma * 1.7320508f;
            memcpy(dst + 4 * i, &v, 4);
        }
        break;
    case MINFER_TYPE_F16:
    case MINFER_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) {
            float v = rand_sym(s) * sigma * 1.7320508f;
            uint16_t h = type == MINFER_TYPE_F16 ? minfer_fp32_to_fp16(v) : minfer_fp32_to_bf16(v);
            memcpy(dst + 2 * i, &h, 2);
        }
        break;
    case MINFER_TYPE_Q4_0:
    case MINFER_TYPE_Q4_1:
    case MINFER_TYPE_Q5_0:
    case MINFER_TYPE_Q5_1:
    case MINFER_TYPE_Q8_0: {
        /* fill everything with random bytes, then overwrite the scales */
        rand_bytes(s, dst, (size_t)nb * tr->type_size);
        for (int64_t i = 0; i < nb; i++) {
            uint8_t *b = dst + (size_t)i * tr->type_size;
            float lv_std = type == MINFER_TYPE_Q8_0 ? 73.3f
                           : (type == MINFER_TYPE_Q4_0 || type == MINFER_TYPE_Q4_1) ? 4.61f
                                                                                     : 9.23f;
            float d = sigma / lv_std * jitter(s);
            uint16_t hd = minfer_fp32_to_fp16(d);
            memcpy(b, &hd, 2);
            if (type == MINFER_TYPE_Q4_1 || type == MINFER_TYPE_Q5_1) {
                float mid = type == MINFER_TYPE_Q4_1 ? 7.5f : 15.5f;
                uint16_t hm = minfer_fp32_to_fp16(-mid * minfer_fp16_to_fp32(hd));
                memcpy(b + 2, &hm, 2);
            }
            if (type == MINFER_TYPE_Q8_0)
                for (int j = 0; j < 32; j++)
                    if (b[2 + j] == 0x80)
                        b[2 + j] = 0x81; /* keep levels in -127..127 */
        }
        break;
    }
    case MINFER_TYPE_Q4_K:
    case MINFER_TYPE_Q5_K: {
        bool five = type == MINFER_TYPE_Q5_K;
        float lv_std = five ? 9.23f : 4.61f, mid = five ? 15.5f : 7.5f;
        for (int64_t i = 0; i < nb; i++) {
            uint8_t *b = dst + (size_t)i * tr->type_size;
            uint8_t s6[8];
            uint64_t r = splitmix(s);
            for (int j = 0; j < 8; j++)
                s6[j] = (uint8_t)(32 + ((r >> (8 * j)) & 31)); /* 32..63, mean 47.5 */
            float d = sigma / (lv_std * 47.5f) * jitter(s);
            uint16_t hd = minfer_fp32_to_fp16(d);
            /* min = mid * d * sc exactly cancels the level mean: dmin = mid * d */
            uint16_t hm = minfer_fp32_to_fp16(mid * minfer_fp16_to_fp32(hd));
            memcpy(b, &hd, 2);
            memcpy(b + 2, &hm, 2);
            k4_pack(b + 4, s6);
            rand_bytes(s, b + 16, tr->type_size - 16); /* qh (Q5_K) and qs */
        }
        break;
    }
    case MINFER_TYPE_Q6_K:
        for (int64_t i = 0; i < nb; i++) {
            struct minfer_block_q6_K *b = (struct minfer_block_q6_K *)(void *)(dst + (size_t)i * 210);
            uint8_t tmp[210];
            rand_bytes(s, tmp, 208);
            memcpy(b->ql, tmp, 128);
            memcpy(b->qh, tmp + 128, 64);
            for (int j = 0; j < 16; j++)
                b->scales[j] = (int8_t)(64 + (tmp[192 + j] & 63)); /* 64..127 */
            /* level std 18.5, scale rms ~97 */
            uint16_t hd = minfer_fp32_to_fp16(sigma / (18.5f * 97.0f) * jitter(s));
            memcpy(&b->d, &hd, 2);
        }
        break;
    default: /* not reachable: the mix only picks the types above */
        memset(dst, 0, (size_t)nb * tr->type_size);
        break;
    }
}

static minfer_status synth_rows(void *user, int64_t r0, int64_t r1, void *dst, void *scratch,
                                char *err, size_t err_len)
{
    const struct stensor *t = user;
    uint8_t *out = dst;
    for (int64_t r = r0; r < r1; r++, out += t->st.row_bytes) {
        uint64_t s = t->seed ^ ((uint64_t)r * 0xd1b54a32d192ed03ull);
        (void)splitmix(&s);
        if (t->kind == S_MATRIX) {
            random_row(t->type, t->ne[0], t->sigma, &s, out);
        } else { /* 1-D F32: norms near 1, biases small */
            for (int64_t i = 0; i < t->ne[0]; i++) {
                float v = t->kind == S_NORM ? 1.0f + 0.1f * rand_sym(&s) : 0.02f * rand_sym(&s);
                memcpy(out + 4 * i, &v, 4);
            }
        }
    }
    return MINFER_OK;
}

/* ---- tensor list ---- */

static int add_t(struct stensor *ts, int n, const char *name, enum skind kind, int64_t ne0,
                 int64_t ne1, int64_t ne2)
{
    struct stensor *t = &ts[n];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = kind;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = ne2;
    t->n_dims = ne2 > 1 ? 3 : ne1 > 1 || kind == S_MATRIX ? 2 : 1;
    return n + 1;
}

/* Whether a synthetic model of shape s has the tensor of spec: every
 * required one, and of the optional ones output.weight unless tied (the
 * only optional tensor a synthetic model can have). */
static bool shape_has(const struct minfer_synth_shape *s, const struct tensor_spec *spec)
{
    return spec->required || (!spec->per_layer && spec->slot == W_OUTPUT && !s->tied);
}

static bool is_bias(const char *name)
{
    size_t n = strlen(name);
    return n > 5 && !strcmp(name + n - 5, ".bias");
}

/* Appends spec's tensor (for layer il when per layer) at ts[n] unless ts
 * is NULL (counting). */
static int add_spec(struct stensor *ts, int n, const struct tensor_spec *spec,
                    const struct model_hparams *hp, int il)
{
    if (!ts)
        return n + 1;
    char nm[64];
    if (spec->per_layer)
        snprintf(nm, sizeof nm, spec->name, il);
    else
        snprintf(nm, sizeof nm, "%s", spec->name);
    enum skind kind = spec->kind != WK_VECTOR ? S_MATRIX : is_bias(nm) ? S_BIAS : S_NORM;
    return add_t(ts, n, nm, kind, model_dim_value(hp, spec->ne[0]),
                 model_dim_value(hp, spec->ne[1]), model_dim_value(hp, spec->ne[2]));
}

/* Every tensor of the model, listed by its architecture's descriptor
 * (core/model/arch/<arch>.c), in llama.cpp's file order: the embedding,
 * each layer's tensors in table order with a bias right after its
 * weight, then the other globals. ts NULL: only counts. */
static int build_tensors(const struct minfer_synth_shape *s, const struct model_arch *a,
                         struct stensor *ts)
{
    const struct model_hparams hp = {
        .n_layer = s->n_layer, .n_ctx_train = s->n_ctx, .n_embd = s->n_embd, .n_ff = s->n_ff,
        .n_head = s->n_head, .n_head_kv = s->n_head_kv, .head_dim = s->head_dim,
        .head_dim_v = s->head_dim, .n_rot = s->head_dim, .n_vocab = s->n_vocab,
        .n_expert = s->n_expert, .n_ff_exp = s->n_ff_exp,
    };
    const struct tensor_spec *t;
    int n = 0;
    for (t = a->tensors; t->name; t++)
        if (!t->per_layer && t->slot == W_TOKEN_EMBD && shape_has(s, t))
            n = add_spec(ts, n, t, &hp, 0);
    for (int il = 0; il < s->n_layer; il++)
        for (t = a->tensors; t->name; t++) {
            if (!t->per_layer || is_bias(t->name) || !shape_has(s, t))
                continue;
            n = add_spec(ts, n, t, &hp, il);
            /* its bias: the name with ".weight" replaced by ".bias" */
            size_t stem = strlen(t->name);
            if (stem > 7 && !strcmp(t->name + stem - 7, ".weight"))
                for (const struct tensor_spec *b = a->tensors; b->name; b++)
                    if (b->per_layer && is_bias(b->name) && strlen(b->name) == stem - 2 &&
                        !strncmp(b->name, t->name, stem - 7) && shape_has(s, b))
                        n = add_spec(ts, n, b, &hp, il);
        }
    for (t = a->tensors; t->name; t++)
        if (!t->per_layer && t->slot != W_TOKEN_EMBD && shape_has(s, t))
            n = add_spec(ts, n, t, &hp, 0);
    return n;
}

/* ---- metadata ---- */

#define W(call)                                                                                \
    do {                                                                                       \
        if ((st = (call)) != MINFER_OK)                                                        \
            return st;                                                                         \
    } while (0)

static minfer_status set_u32(struct minfer_gguf_writer *w, const char *arch, const char *key,
                             uint32_t v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return minfer_gguf_writer_set(w, k, MINFER_GGUF_UINT32, &v);
}

static minfer_status set_f32(struct minfer_gguf_writer *w, const char *arch, const char *key,
                             float v)
{
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    return minfer_gguf_writer_set(w, k, MINFER_GGUF_FLOAT32, &v);
}

static minfer_status write_hparams(struct minfer_gguf_writer *w, const struct minfer_synth_opts *o)
{
    minfer_status st;
    const struct minfer_synth_shape *s = &o->shape;
    const char *a = s->arch;
    char name[96];
    snprintf(name, sizeof name, "%s (minfer synth, random weights)", s->name);
    uint32_t ft = o->ftype, qv = QUANT_VERSION;
    W(minfer_gguf_writer_set_str(w, "general.architecture", a, strlen(a)));
    W(minfer_gguf_writer_set_str(w, "general.type", "model", 5));
    W(minfer_gguf_writer_set_str(w, "general.name", name, strlen(name)));
    W(minfer_gguf_writer_set(w, "general.file_type", MINFER_GGUF_UINT32, &ft));
    W(minfer_gguf_writer_set(w, "general.quantization_version", MINFER_GGUF_UINT32, &qv));
    W(set_u32(w, a, "block_count", (uint32_t)s->n_layer));
    W(set_u32(w, a, "context_length", (uint32_t)s->n_ctx));
    W(set_u32(w, a, "embedding_length", (uint32_t)s->n_embd));
    W(set_u32(w, a, "feed_forward_length", (uint32_t)s->n_ff));
    W(set_u32(w, a, "attention.head_count", (uint32_t)s->n_head));
    W(set_u32(w, a, "attention.head_count_kv", (uint32_t)s->n_head_kv));
    if (strcmp(a, "qwen2") || s->head_dim * s->n_head != s->n_embd) {
        W(set_u32(w, a, "attention.key_length", (uint32_t)s->head_dim));
        W(set_u32(w, a, "attention.value_length", (uint32_t)s->head_dim));
    }
    W(set_f32(w, a, "rope.freq_base", s->rope_theta));
    W(set_f32(w, a, "attention.layer_norm_rms_epsilon", s->rms_eps));
    if (!strcmp(a, "qwen3moe")) {
        W(set_u32(w, a, "expert_count", (uint32_t)s->n_expert));
        W(set_u32(w, a, "expert_used_count", (uint32_t)s->n_expert_used));
        W(set_u32(w, a, "expert_feed_forward_length", (uint32_t)s->n_ff_exp));
    }
    if (!strcmp(a, "gemma3")) { /* what llama.cpp's converter writes for Gemma 3 */
        W(set_u32(w, a, "attention.sliding_window", (uint32_t)s->sliding_window));
        W(set_f32(w, a, "rope.freq_base_swa", 10000.0f));
    }
    return MINFER_OK;
}

/* ---- tokenizer ---- */

static const char *const qwen_specials[] = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>",
    "<|object_ref_end|>", "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>",
    "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>",
    "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
    "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>", "<tool_response>", "</tool_response>",
    "<think>", "</think>",
};
#define N_SPECIALS 26

static const char chatml_template[] =
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\\n' }}{% endif %}";

struct vocab_arrays {
    char **tok;       /* owned strings (NULL entries borrowed from tok_b) */
    const char **tokp;
    size_t *tokl;
    int32_t *type;
    char **mer;
    const char **merp;
    size_t *merl;
    uint64_t n_tok, n_mer;
};

static void vocab_free(struct vocab_arrays *v)
{
    if (v->tok)
        for (uint64_t i = 0; i < v->n_tok; i++)
            free(v->tok[i]);
    if (v->mer)
        for (uint64_t i = 0; i < v->n_mer; i++)
            free(v->mer[i]);
    free(v->tok);
    free(v->tokp);
    free(v->tokl);
    free(v->type);
    free(v->mer);
    free(v->merp);
    free(v->merl);
}

static bool vocab_alloc(struct vocab_arrays *v, uint64_t n_tok, uint64_t n_mer)
{
    v->n_tok = n_tok;
    v->n_mer = n_mer;
    v->tok = calloc(n_tok, sizeof *v->tok);
    v->tokp = calloc(n_tok, sizeof *v->tokp);
    v->tokl = calloc(n_tok, sizeof *v->tokl);
    v->type = calloc(n_tok, sizeof *v->type);
    v->mer = calloc(n_mer ? n_mer : 1, sizeof *v->mer);
    v->merp = calloc(n_mer ? n_mer : 1, sizeof *v->merp);
    v->merl = calloc(n_mer ? n_mer : 1, sizeof *v->merl);
    return v->tok && v->tokp && v->tokl && v->type && v->mer && v->merp && v->merl;
}

/* The byte-level BPE spelling of byte b (GPT-2's printable mapping). */
static int byte_char(int b, char *out)
{
    int cp;
    if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255)) {
        cp = b;
    } else {
        int k = 0; /* rank among the unprintable bytes */
        for (int c = 0; c < b; c++)
            if (!((c >= 33 && c <= 126) || (c >= 161 && c <= 172) || (c >= 174 && c <= 255)))
                k++;
        cp = 256 + k;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | cp >> 6);
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static char *dupn(const char *s, size_t n)
{
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

/* Pads tokens [from, n_tok) as "[PADi]" unused tokens (as llama.cpp's
 * converter does for ids the tokenizer does not use). */
static bool pad_tokens(struct vocab_arrays *v, uint64_t from)
{
    for (uint64_t i = from; i < v->n_tok; i++) {
        char b[32];
        int n = snprintf(b, sizeof b, "[PAD%llu]", (unsigned long long)i);
        if (!(v->tok[i] = dupn(b, (size_t)n)))
            return false;
        v->tokp[i] = v->tok[i];
        v->tokl[i] = (size_t)n;
        v->type[i] = 5; /* unused */
    }
    return true;
}

/* Built-in vocabulary: 256 byte tokens, then two-byte and three-byte
 * merges up to n_vocab - 26, Qwen's 26 added tokens, then padding. */
static bool builtin_vocab(struct vocab_arrays *v, uint64_t n_vocab, uint64_t *first_special)
{
    uint64_t n_normal = n_vocab - N_SPECIALS;
    if (n_normal > 151643)
        n_normal = 151643; /* Qwen's count; the rest is padding */
    if (!vocab_alloc(v, n_vocab, n_normal - 256))
        return false;
    char bc[256][2];
    int bl[256];
    for (int b = 0; b < 256; b++)
        bl[b] = byte_char(b, bc[b]);
    for (uint64_t i = 0; i < n_normal; i++) {
        char s[8], m[12];
        int sl = 0, ml = 0;
        if (i < 256) {
            memcpy(s, bc[i], (size_t)bl[i]);
            sl = bl[i];
        } else if (i < 256 + 65536) {
            int a = (int)((i - 256) >> 8), b = (int)((i - 256) & 255);
            memcpy(s, bc[a], (size_t)bl[a]);
            memcpy(s + bl[a], bc[b], (size_t)bl[b]);
            sl = bl[a] + bl[b];
            memcpy(m, bc[a], (size_t)bl[a]);
            m[bl[a]] = ' ';
            memcpy(m + bl[a] + 1, bc[b], (size_t)bl[b]);
            ml = bl[a] + 1 + bl[b];
        } else {
            uint64_t k = i - 256 - 65536;
            int a = (int)(k >> 16), b = (int)((k >> 8) & 255), c = (int)(k & 255);
            memcpy(s, bc[a], (size_t)bl[a]);
            memcpy(s + bl[a], bc[b], (size_t)bl[b]);
            memcpy(s + bl[a] + bl[b], bc[c], (size_t)bl[c]);
            sl = bl[a] + bl[b] + bl[c];
            memcpy(m, s, (size_t)(bl[a] + bl[b]));
            m[bl[a] + bl[b]] = ' ';
            memcpy(m + bl[a] + bl[b] + 1, bc[c], (size_t)bl[c]);
            ml = sl + 1;
        }
        if (!(v->tok[i] = dupn(s, (size_t)sl)))
            return false;
        v->tokp[i] = v->tok[i];
        v->tokl[i] = (size_t)sl;
        v->type[i] = 1;
        if (i >= 256) {
            if (!(v->mer[i - 256] = dupn(m, (size_t)ml)))
                return false;
            v->merp[i - 256] = v->mer[i - 256];
            v->merl[i - 256] = (size_t)ml;
        }
    }
    for (int k = 0; k < N_SPECIALS; k++) {
        uint64_t i = n_normal + (uint64_t)k;
        const char *sp = qwen_specials[k];
        if (!(v->tok[i] = dupn(sp, strlen(sp))))
            return false;
        v->tokp[i] = v->tok[i];
        v->tokl[i] = strlen(sp);
        v->type[i] = sp[1] == '|' ? 3 : 4; /* <|...|> control, <think> etc. user-defined */
    }
    *first_special = n_normal;
    return pad_tokens(v, n_normal + N_SPECIALS);
}

/* Built-in SentencePiece vocabulary: <unk>, <s>, </s>, the 256 byte
 * pieces <0xNN>, then pieces of printable ASCII (a space as "▁"): every
 * single character, then two and three characters, scored so shorter
 * pieces merge first; the rest is padding. *scores: [n_vocab], caller frees. */
static bool builtin_spm_vocab(struct vocab_arrays *v, uint64_t n_vocab, float **scores)
{
    if (!vocab_alloc(v, n_vocab, 0) || !(*scores = calloc(n_vocab, sizeof **scores)))
        return false;
    static const char *const ctl[3] = {"<unk>", "<s>", "</s>"};
    uint64_t i = 0;
    for (; i < 3; i++) {
        v->tok[i] = dupn(ctl[i], strlen(ctl[i]));
        v->type[i] = i ? 3 : 2; /* control; <unk> unknown */
    }
    for (int b = 0; b < 256; b++, i++) {
        char t[8];
        snprintf(t, sizeof t, "<0x%02X>", b);
        v->tok[i] = dupn(t, 6);
        v->type[i] = 6; /* byte */
    }
    /* printable ASCII with the space spelled U+2581 */
    const uint64_t nc = 95;
    uint64_t len = 1, idx = 0, span = nc;
    for (; i < n_vocab && len <= 3; i++) {
        char t[12];
        size_t o = 0;
        uint64_t r = idx;
        for (uint64_t k = 0; k < len; k++, r /= nc) {
            int c = 32 + (int)(r % nc);
            if (c == ' ') {
                memcpy(t + o, "\xE2\x96\x81", 3);
                o += 3;
            } else {
                t[o++] = (char)c;
            }
        }
        v->tok[i] = dupn(t, o);
        v->type[i] = 1;
        (*scores)[i] = -(float)(i - 259);
        if (++idx == span) {
            idx = 0;
            len++;
            span *= nc;
        }
    }
    for (uint64_t j = 0; j < i; j++) {
        if (!v->tok[j])
            return false;
        v->tokp[j] = v->tok[j];
        v->tokl[j] = strlen(v->tok[j]);
    }
    return pad_tokens(v, i);
}

static minfer_status write_vocab_arrays(struct minfer_gguf_writer *w, const struct vocab_arrays *v)
{
    minfer_status st;
    W(minfer_gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v->tokp, v->tokl, v->n_tok));
    W(minfer_gguf_writer_set_arr(w, "tokenizer.ggml.token_type", MINFER_GGUF_INT32, v->type,
                                 v->n_tok));
    if (v->n_mer)
        W(minfer_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", v->merp, v->merl,
                                         v->n_mer));
    return MINFER_OK;
}

static minfer_status set_id(struct minfer_gguf_writer *w, const char *key, int64_t id)
{
    if (id < 0)
        return MINFER_OK;
    uint32_t v = (uint32_t)id;
    return minfer_gguf_writer_set(w, key, MINFER_GGUF_UINT32, &v);
}

/* The keys after a byte-level BPE ("gpt2") vocabulary's arrays, shared by
 * a given and the built-in one; an id below 0 is left out. */
static minfer_status set_gpt2_keys(struct minfer_gguf_writer *w, const char *pre, int64_t bos,
                                   int64_t eos, int64_t pad)
{
    minfer_status st;
    bool no_bos = false; /* Qwen's tokenizers add no BOS */
    if ((st = minfer_gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2", 4)) ||
        (st = minfer_gguf_writer_set_str(w, "tokenizer.ggml.pre", pre, strlen(pre))) ||
        (st = set_id(w, "tokenizer.ggml.bos_token_id", bos)) ||
        (st = set_id(w, "tokenizer.ggml.eos_token_id", eos)) ||
        (st = set_id(w, "tokenizer.ggml.padding_token_id", pad)))
        return st;
    return minfer_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", MINFER_GGUF_BOOL, &no_bos);
}

static minfer_status write_tokenizer(struct minfer_gguf_writer *w, const struct minfer_synth_opts *o,
                                     struct minfer_gguf **tok_g, char *err, size_t err_len)
{
    minfer_status st;
    struct vocab_arrays v = {0};
    uint64_t n_vocab = (uint64_t)o->shape.n_vocab;
    if (o->tokenizer_gguf) {
        char msg[512];
        struct minfer_gguf *g = minfer_gguf_open(o->tokenizer_gguf, &st, msg, sizeof msg);
        if (!g)
            return errf(err, err_len, st, "tokenizer %s: %s", o->tokenizer_gguf, msg);
        *tok_g = g; /* kept open: copied values may be written later */
        enum minfer_gguf_type et;
        uint64_t n;
        const void *data;
        if (minfer_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &data) != MINFER_OK ||
            et != MINFER_GGUF_STRING)
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "tokenizer %s has no tokenizer.ggml.tokens string array",
                        o->tokenizer_gguf);
        if (n > n_vocab)
            return errf(err, err_len, MINFER_ERR_RANGE,
                        "tokenizer %s has %llu tokens but the model's vocabulary is %llu; "
                        "use a custom shape with n_vocab >= %llu",
                        o->tokenizer_gguf, (unsigned long long)n, (unsigned long long)n_vocab,
                        (unsigned long long)n);
        if (!vocab_alloc(&v, n_vocab, 0))
            goto nomem;
        for (uint64_t i = 0; i < n; i++) {
            if ((st = minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", i, &v.tokp[i],
                                              &v.tokl[i])) != MINFER_OK)
                goto out;
            v.type[i] = 1;
        }
        const void *types;
        uint64_t nt;
        if (minfer_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &nt, &types) == MINFER_OK &&
            et == MINFER_GGUF_INT32 && nt == n)
            memcpy(v.type, types, n * sizeof(int32_t));
        if (!pad_tokens(&v, n))
            goto nomem;
        if ((st = write_vocab_arrays(w, &v)) != MINFER_OK)
            goto out;
        int64_t nkv = minfer_gguf_kv_count(g);
        for (int64_t i = 0; i < nkv; i++) {
            const char *key = minfer_gguf_kv_key(g, i);
            if (strncmp(key, "tokenizer.", 10) || !strcmp(key, "tokenizer.ggml.tokens") ||
                !strcmp(key, "tokenizer.ggml.token_type"))
                continue;
            if ((st = minfer_gguf_writer_copy_kv(w, g, i)) != MINFER_OK)
                goto out;
        }
    } else if (o->vocab) {
        const struct minfer_synth_vocab *sv = o->vocab;
        if (sv->n_tokens > n_vocab)
            return errf(err, err_len, MINFER_ERR_RANGE,
                        "the tokenizer has %llu tokens but the model's vocabulary is %llu",
                        (unsigned long long)sv->n_tokens, (unsigned long long)n_vocab);
        if (!vocab_alloc(&v, n_vocab, 0))
            goto nomem;
        for (uint64_t i = 0; i < sv->n_tokens; i++) {
            v.tokp[i] = sv->tokens[i];
            v.tokl[i] = sv->token_lens[i];
            v.type[i] = sv->token_types ? sv->token_types[i] : 1;
        }
        if (!pad_tokens(&v, sv->n_tokens))
            goto nomem;
        if ((st = write_vocab_arrays(w, &v)) != MINFER_OK)
            goto out;
        if (sv->n_merges &&
            (st = minfer_gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", sv->merges,
                                                 sv->merge_lens, sv->n_merges)) != MINFER_OK)
            goto out;
        const char *pre = sv->pre ? sv->pre : "qwen2";
        if ((st = set_gpt2_keys(w, pre, sv->bos_id, sv->eos_id, sv->pad_id)))
            goto out;
        if (sv->chat_template &&
            (st = minfer_gguf_writer_set_str(w, "tokenizer.chat_template", sv->chat_template,
                                             strlen(sv->chat_template))) != MINFER_OK)
            goto out;
    } else if (o->shape.spm) {
        float *scores = NULL;
        if (!builtin_spm_vocab(&v, n_vocab, &scores))
            goto nomem;
        /* Mistral prefixes a space; Gemma does not */
        bool yes = true, prefix = strcmp(o->shape.arch, "gemma3") != 0;
        st = write_vocab_arrays(w, &v);
        if (!st)
            st = minfer_gguf_writer_set_arr(w, "tokenizer.ggml.scores", MINFER_GGUF_FLOAT32,
                                            scores, n_vocab);
        free(scores);
        if (st || (st = minfer_gguf_writer_set_str(w, "tokenizer.ggml.model", "llama", 5)) ||
            (st = minfer_gguf_writer_set_str(w, "tokenizer.ggml.pre", "default", 7)) ||
            (st = set_id(w, "tokenizer.ggml.unknown_token_id", 0)) ||
            (st = set_id(w, "tokenizer.ggml.bos_token_id", 1)) ||
            (st = set_id(w, "tokenizer.ggml.eos_token_id", 2)) ||
            (st = minfer_gguf_writer_set(w, "tokenizer.ggml.add_bos_token", MINFER_GGUF_BOOL,
                                         &yes)) ||
            (st = minfer_gguf_writer_set(w, "tokenizer.ggml.add_space_prefix", MINFER_GGUF_BOOL,
                                         &prefix)))
            goto out;
    } else {
        uint64_t sp;
        if (!builtin_vocab(&v, n_vocab, &sp))
            goto nomem;
        /* Llama 3's byte-level BPE splits as llama-bpe; Qwen's as qwen2 */
        const char *pre = strcmp(o->shape.arch, "llama") ? "qwen2" : "llama-bpe";
        if ((st = write_vocab_arrays(w, &v)) ||
            (st = set_gpt2_keys(w, pre, (int64_t)sp, (int64_t)sp + 2, (int64_t)sp)) ||
            (st = minfer_gguf_writer_set_str(w, "tokenizer.chat_template", chatml_template,
                                             strlen(chatml_template))))
            goto out;
    }
    st = MINFER_OK;
out:
    if (st != MINFER_OK)
        errf(err, err_len, st, "writing the tokenizer: %s", minfer_status_str(st));
    vocab_free(&v); /* borrowed tokens have tok[i] == NULL and are not freed */
    return st;
nomem:
    vocab_free(&v);
    return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory building the tokenizer");
}

/* ---- the file ---- */

static minfer_status synth_file(const struct minfer_synth_opts *o, const char *path, char *err,
                                size_t err_len)
{
    minfer_status st;
    char msg[512] = "";
    const struct minfer_synth_shape *s = &o->shape;
    struct minfer_gguf_writer *w = NULL;
    struct minfer_gguf *tok_g = NULL;
    struct tstream *ts = NULL;
    const struct model_arch *arch = model_arch_find(s->arch);
    if (!arch)
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED, "architecture '%.16s' has no descriptor",
                    s->arch);
    int nt = build_tensors(s, arch, NULL);
    struct stensor *t = calloc((size_t)nt, sizeof *t);
    if (!t)
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for %d tensors", nt);
    build_tensors(s, arch, t);
    w = minfer_gguf_writer_new(3);
    if (!w) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for the GGUF writer");
        goto out;
    }
    if ((st = write_hparams(w, o)) != MINFER_OK) {
        st = errf(err, err_len, st, "writing metadata: %s", minfer_status_str(st));
        goto out;
    }
    if ((st = write_tokenizer(w, o, &tok_g, err, err_len)) != MINFER_OK)
        goto out;

    struct minfer_mix mix = {.ftype = o->ftype, .pure = o->pure, .has_output = !s->tied,
                             .n_attn_v = s->n_layer, .n_layer = s->n_layer};
    uint64_t total = 0;
    for (int i = 0; i < nt; i++) {
        t[i].type = minfer_mix_tensor_type(&mix, t[i].name, t[i].n_dims, t[i].ne,
                                           MINFER_TYPE_F32);
        if (t[i].kind != S_MATRIX)
            t[i].type = MINFER_TYPE_F32;
        t[i].st.row_bytes = minfer_row_size(t[i].type, t[i].ne[0]);
        t[i].st.n_rows = t[i].ne[1] * t[i].ne[2];
        if (!t[i].st.row_bytes) {
            st = errf(err, err_len, MINFER_ERR_STATE, "tensor %s: no row size for %s x %lld",
                      t[i].name, minfer_type_name(t[i].type), (long long)t[i].ne[0]);
            goto out;
        }
        t[i].sigma = 1.0f / sqrtf((float)t[i].ne[0]);
        t[i].seed = o->seed * 0x9e3779b97f4a7c15ull + (uint64_t)i * 0xbf58476d1ce4e5b9ull + 1;
        total += t[i].st.row_bytes * (uint64_t)t[i].st.n_rows;
    }
    ts = tstream_new(o->n_threads, 0, total, o->progress, o->progress_user);
    if (!ts) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for worker buffers");
        goto out;
    }
    tstream_set_cancel(ts, o->cancel);
    for (int i = 0; i < nt; i++) {
        t[i].st.s = ts;
        t[i].st.name = t[i].name;
        t[i].st.rows = synth_rows;
        t[i].st.user = &t[i];
        st = minfer_gguf_writer_add_tensor(w, t[i].name, t[i].type, t[i].n_dims, t[i].ne, NULL,
                                           tstream_fill, &t[i].st);
        if (st != MINFER_OK) {
            st = errf(err, err_len, st, "adding tensor %s: %s", t[i].name,
                      minfer_status_str(st));
            goto out;
        }
    }
    st = minfer_gguf_writer_write(w, path, msg, sizeof msg);
    if (st != MINFER_OK)
        st = tstream_write_failed(ts, st, path, msg, err, err_len);
out:
    tstream_free(ts);
    minfer_gguf_writer_free(w);
    minfer_gguf_close(tok_g);
    free(t);
    return st;
}

/* Reads a whole file into a new buffer. */
static minfer_status slurp(const char *path, void **mem, size_t *size, char *err, size_t err_len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return errf(err, err_len, MINFER_ERR_IO, "reading back %s: %s", path, strerror(errno));
    struct stat sb;
    minfer_status st = MINFER_OK;
    void *p = NULL;
    if (fstat(fileno(f), &sb) || sb.st_size <= 0) {
        st = errf(err, err_len, MINFER_ERR_IO, "reading back %s: cannot stat", path);
        goto out;
    }
    p = malloc((size_t)sb.st_size);
    if (!p) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for a %lld-byte model",
                  (long long)sb.st_size);
        goto out;
    }
    if (fread(p, 1, (size_t)sb.st_size, f) != (size_t)sb.st_size) {
        free(p);
        p = NULL;
        st = errf(err, err_len, MINFER_ERR_IO, "reading back %s: short read", path);
        goto out;
    }
    *mem = p;
    *size = (size_t)sb.st_size;
out:
    fclose(f);
    return st;
}

MINFER_API minfer_status minfer_synth(const struct minfer_synth_opts *o, const char *path,
                                      void **mem, size_t *mem_size, char *err, size_t err_len)
{
    if (err && err_len)
        err[0] = 0;
    if (mem)
        *mem = NULL;
    if (mem_size)
        *mem_size = 0;
    if (!o || o->struct_size < sizeof *o)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "minfer_synth: options missing or too old (struct_size %u, expected %zu)",
                    o ? o->struct_size : 0, sizeof *o);
    if (!path && (!mem || !mem_size))
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "minfer_synth: give a path or mem and mem_size");
    if (!synth_arch_ok(o->shape.arch))
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "architecture '%.16s' is not one of " SYNTH_ARCHS, o->shape.arch);
    if (!shape_valid(&o->shape, err, err_len))
        return MINFER_ERR_RANGE;
    if (minfer_ftype_base_type(o->ftype) == MINFER_TYPE_COUNT)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "file type %u is unknown",
                    o->ftype);
    if (path)
        return synth_file(o, path, err, err_len);

    /* in memory: through a private temporary directory */
    const char *tmp = secure_getenv("TMPDIR");
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s/minfer-synth-XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(dir))
        return errf(err, err_len, MINFER_ERR_IO, "cannot make a temporary directory %s: %s",
                    dir, strerror(errno));
    snprintf(file, sizeof file, "%s/model.gguf", dir);
    minfer_status st = synth_file(o, file, err, err_len);
    if (st == MINFER_OK)
        st = slurp(file, mem, mem_size, err, err_len);
    unlink(file);
    rmdir(dir);
    return st;
}

MINFER_API void minfer_synth_mem_free(void *mem)
{
    free(mem);
}
