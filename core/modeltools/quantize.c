/*
 * quantize.c — file types, the per-tensor type rule of the quantization
 * mixes (llama-quantize's, see docs/quantize.md) and minfer_quantize: one
 * GGUF in, the same model in another type out, streamed through the GGUF
 * writer by worker threads.
 */
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <sys/stat.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "runtime/error.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "minfer/quant.h"
#include "minfer/quant-ref.h"
#include "tensor-stream.h"

#define QUANT_VERSION 2 /* general.quantization_version llama.cpp writes */

/* ---- file types ---- */

static const struct {
    const char *name;
    uint32_t ftype;
    uint32_t base;
} ftypes[] = {
    {"F32", MINFER_FTYPE_ALL_F32, MINFER_TYPE_F32},
    {"F16", MINFER_FTYPE_MOSTLY_F16, MINFER_TYPE_F16},
    {"BF16", MINFER_FTYPE_MOSTLY_BF16, MINFER_TYPE_BF16},
    {"Q8_0", MINFER_FTYPE_MOSTLY_Q8_0, MINFER_TYPE_Q8_0},
    {"Q4_0", MINFER_FTYPE_MOSTLY_Q4_0, MINFER_TYPE_Q4_0},
    {"Q4_1", MINFER_FTYPE_MOSTLY_Q4_1, MINFER_TYPE_Q4_1},
    {"Q5_0", MINFER_FTYPE_MOSTLY_Q5_0, MINFER_TYPE_Q5_0},
    {"Q5_1", MINFER_FTYPE_MOSTLY_Q5_1, MINFER_TYPE_Q5_1},
    {"Q4_K_S", MINFER_FTYPE_MOSTLY_Q4_K_S, MINFER_TYPE_Q4_K},
    {"Q4_K_M", MINFER_FTYPE_MOSTLY_Q4_K_M, MINFER_TYPE_Q4_K},
    {"Q5_K_S", MINFER_FTYPE_MOSTLY_Q5_K_S, MINFER_TYPE_Q5_K},
    {"Q5_K_M", MINFER_FTYPE_MOSTLY_Q5_K_M, MINFER_TYPE_Q5_K},
    {"Q6_K", MINFER_FTYPE_MOSTLY_Q6_K, MINFER_TYPE_Q6_K},
    /* aliases last so names print canonically */
    {"Q4_K", MINFER_FTYPE_MOSTLY_Q4_K_M, MINFER_TYPE_Q4_K},
    {"Q5_K", MINFER_FTYPE_MOSTLY_Q5_K_M, MINFER_TYPE_Q5_K},
};
#define N_FTYPES (sizeof ftypes / sizeof ftypes[0])

MINFER_API bool minfer_ftype_from_name(const char *name, uint32_t *ftype)
{
    for (size_t i = 0; name && i < N_FTYPES; i++)
        if (!strcasecmp(name, ftypes[i].name)) {
            if (ftype)
                *ftype = ftypes[i].ftype;
            return true;
        }
    return false;
}

MINFER_API const char *minfer_ftype_name(uint32_t ftype)
{
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype)
            return ftypes[i].name;
    return "unknown";
}

MINFER_API uint32_t minfer_ftype_base_type(uint32_t ftype)
{
    for (size_t i = 0; i < N_FTYPES; i++)
        if (ftypes[i].ftype == ftype)
            return ftypes[i].base;
    return MINFER_TYPE_COUNT;
}

/* ---- the mix rule ---- */

static bool ends_with(const char *s, const char *suffix)
{
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && !strcmp(s + a - b, suffix);
}

/* Layer index of "blk.N.…", or -1. */
static int layer_of(const char *name)
{
    if (strncmp(name, "blk.", 4))
        return -1;
    char *end;
    long v = strtol(name + 4, &end, 10);
    return (end != name + 4 && *end == '.' && v >= 0 && v < 1000000) ? (int)v : -1;
}

/* First and last eighth of the layers and every third one in between. */
static bool use_more_bits(int i, int n)
{
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* Weights that stay as they are whatever the file type. */
static bool never_quantized(const char *name)
{
    static const char *const keep[] = {"ffn_gate_inp.weight", "pos_embd", "token_types",
                                       "ssm_conv1d"};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strstr(name, keep[i]))
            return true;
    return false;
}

/* Replacement when ne[0] is not a multiple of t's block size. */
static uint32_t fallback_type(uint32_t t, int64_t ne0)
{
    switch (t) {
    case MINFER_TYPE_Q4_K: t = MINFER_TYPE_Q5_0; break;
    case MINFER_TYPE_Q5_K: t = MINFER_TYPE_Q5_1; break;
    case MINFER_TYPE_Q6_K: t = MINFER_TYPE_Q8_0; break;
    default: t = MINFER_TYPE_F16; break;
    }
    if (minfer_row_size(t, ne0) == 0)
        t = MINFER_TYPE_F16;
    return t;
}

MINFER_API uint32_t minfer_mix_tensor_type(const struct minfer_mix *m, const char *name,
                                           uint32_t n_dims, const int64_t *ne,
                                           uint32_t cur_type)
{
    uint32_t base = minfer_ftype_base_type(m->ftype);
    if (base == MINFER_TYPE_COUNT)
        return cur_type;
    if (n_dims < 2) { /* F32 when we can read it; integer tensors etc. stay */
        const struct minfer_type_traits *ct = minfer_type_traits_of(cur_type);
        return ct && ct->supported ? MINFER_TYPE_F32 : cur_type;
    }
    if (!ends_with(name, "weight") || never_quantized(name))
        return cur_type;
    uint32_t t = base;
    bool quantized = minfer_type_traits_of(base)->quantized;
    if (quantized && !m->pure) {
        uint32_t f = m->ftype;
        bool km = f == MINFER_FTYPE_MOSTLY_Q4_K_M || f == MINFER_FTYPE_MOSTLY_Q5_K_M;
        int il = layer_of(name);
        if (!strcmp(name, "output.weight") ||
            (!m->has_output && !strcmp(name, "token_embd.weight"))) {
            if (ne[0] % MINFER_QK_K)
                t = MINFER_TYPE_Q8_0;
            else if (t != MINFER_TYPE_Q8_0)
                t = MINFER_TYPE_Q6_K;
        } else if (!strcmp(name, "token_embd.weight")) {
            /* the base type */
        } else if (strstr(name, "attn_v.weight")) {
            if (km && il >= 0 && use_more_bits(il, m->n_attn_v))
                t = MINFER_TYPE_Q6_K;
            else if (f == MINFER_FTYPE_MOSTLY_Q4_K_S && il >= 0 && il < 4)
                t = MINFER_TYPE_Q5_K;
            /* 80 layers is llama.cpp's 70B class (Llama 70B, Qwen2/2.5 72B):
             * attn_v is 8x smaller than attn_q there, so it gets more bits */
            if (m->n_layer == 80 && t == MINFER_TYPE_Q4_K)
                t = MINFER_TYPE_Q5_K;
        } else if (strstr(name, "ffn_down")) {
            if (km && il >= 0 && use_more_bits(il, m->n_layer))
                t = MINFER_TYPE_Q6_K;
            else if (f == MINFER_FTYPE_MOSTLY_Q4_K_S && il >= 0 && il < m->n_layer / 8)
                t = MINFER_TYPE_Q5_K;
        } else if (strstr(name, "attn_qkv.weight")) {
            if (f == MINFER_FTYPE_MOSTLY_Q4_K_M)
                t = MINFER_TYPE_Q5_K;
            else if (f == MINFER_FTYPE_MOSTLY_Q5_K_M)
                t = MINFER_TYPE_Q6_K;
        }
    }
    if (minfer_row_size(t, ne[0]) == 0)
        t = fallback_type(t, ne[0]);
    return t;
}

/* ---- quantize a file ---- */

struct qtensor {
    struct tstream_tensor st;        /* must stay first: passed as fill user */
    const struct minfer_gguf_tensor *in;
    uint32_t out_type;
    size_t in_row;                   /* bytes of one input row */
};

/* The first value of x[0, n) that is not finite, or -1. */
static int64_t first_non_finite(const float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return i;
    return -1;
}

/* Input values a block cannot hold (NaN, an infinity) and rows whose
 * converted form does not read back finite (a block scale past the
 * type's range, as values near FLT_MAX give) are refused with the tensor,
 * row and column: a model that quietly computes NaN is worse than no
 * model. llama.cpp's llama-quantize refuses the second kind as well. */
static minfer_status convert_rows(void *user, int64_t r0, int64_t r1, void *dst, void *scratch,
                                  char *err, size_t err_len)
{
    const struct qtensor *q = user;
    const uint8_t *src = (const uint8_t *)q->in->data + (size_t)r0 * q->in_row;
    uint8_t *out = dst;
    int64_t n = q->in->ne[0];
    for (int64_t r = r0; r < r1; r++, src += q->in_row, out += q->st.row_bytes) {
        const float *x = (const float *)(const void *)src;
        const void *row = src;
        minfer_status st;
        if ((uintptr_t)src & 3) {
            /* a file with a small general.alignment can place rows where the
             * block structs may not be read in place */
            memcpy((float *)scratch + n, src, q->in_row);
            row = (float *)scratch + n;
            x = row;
        }
        if (q->in->type != MINFER_TYPE_F32) {
            st = minfer_dequantize_row(q->in->type, row, scratch, n);
            if (st != MINFER_OK) {
                return errf(err, err_len, st,
                            "tensor %s: cannot read its type %s (%s)", q->in->name,
                            minfer_type_name(q->in->type), minfer_status_str(st));
            }
            x = scratch;
        }
        int64_t bad = first_non_finite(x, n);
        if (bad >= 0) {
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "tensor %s: row %lld, column %lld holds %s; type %s cannot hold it",
                        q->in->name, (long long)r, (long long)bad,
                        isnan(x[bad]) ? "NaN" : x[bad] > 0 ? "+infinity" : "-infinity",
                        minfer_type_name(q->out_type));
        }
        st = minfer_quantize_row_ref(q->out_type, x, out, n);
        if (st != MINFER_OK) {
            return errf(err, err_len, st, "tensor %s: cannot write type %s for rows of %lld (%s)",
                        q->in->name, minfer_type_name(q->out_type), (long long)n,
                        minfer_status_str(st));
        }
        float *back = (float *)scratch + 2 * n;
        st = minfer_dequantize_row(q->out_type, out, back, n);
        if (st != MINFER_OK) {
            return errf(err, err_len, st, "tensor %s: cannot read back row %lld as %s (%s)",
                        q->in->name, (long long)r, minfer_type_name(q->out_type),
                        minfer_status_str(st));
        }
        bad = first_non_finite(back, n);
        if (bad >= 0) {
            /* name the largest value of the block that overflowed */
            int64_t bs = minfer_type_traits_of(q->out_type)->block_size;
            int64_t b0 = bad / bs * bs, big = b0;
            for (int64_t i = b0 + 1; i < b0 + bs && i < n; i++)
                if (fabsf(x[i]) > fabsf(x[big]))
                    big = i;
            return errf(err, err_len, MINFER_ERR_RANGE,
                        "tensor %s: row %lld, column %lld holds %g, too large for type %s "
                        "(its block reads back as %g)",
                        q->in->name, (long long)r, (long long)big, (double)x[big],
                        minfer_type_name(q->out_type), (double)back[bad]);
        }
    }
    return MINFER_OK;
}

/* Counts what the mix rule needs to know about the whole file. */
static void mix_facts(const struct minfer_gguf *g, struct minfer_mix *m)
{
    int64_t nt = minfer_gguf_tensor_count(g);
    int32_t n_down = 0;
    for (int64_t i = 0; i < nt; i++) {
        const char *name = minfer_gguf_tensor(g, i)->name;
        if (!strcmp(name, "output.weight"))
            m->has_output = true;
        if (strstr(name, "attn_v.weight"))
            m->n_attn_v++;
        if (strstr(name, "ffn_down") && ends_with(name, "weight"))
            n_down++;
    }
    m->n_layer = n_down;
    const char *arch;
    size_t alen;
    if (minfer_gguf_get_str(g, "general.architecture", &arch, &alen) == MINFER_OK && alen < 64) {
        char key[128];
        int64_t v;
        snprintf(key, sizeof key, "%.*s.block_count", (int)alen, arch);
        if (minfer_gguf_get_i64(g, key, &v) == MINFER_OK && v > 0 && v < 100000)
            m->n_layer = (int32_t)v;
    }
}

MINFER_API minfer_status minfer_quantize(const char *in_path, const char *out_path,
                                         const struct minfer_quantize_opts *o, char *err,
                                         size_t err_len)
{
    minfer_status st;
    char msg[512] = "";
    struct minfer_gguf *g = NULL;
    struct minfer_gguf_writer *w = NULL;
    struct qtensor *qt = NULL;
    struct tstream *ts = NULL;

    if (err && err_len)
        err[0] = 0;
    const size_t min_size = offsetof(struct minfer_quantize_opts, allow_requantize);
    if (!in_path || !out_path || !o || o->struct_size < min_size)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "minfer_quantize: missing path or options (struct_size %u, expected %zu)",
                    o ? o->struct_size : 0, sizeof *o);
    bool allow_requant = o->struct_size > min_size && o->allow_requantize;
    struct stat si, so;
    if (stat(in_path, &si) == 0 && stat(out_path, &so) == 0 && si.st_dev == so.st_dev &&
        si.st_ino == so.st_ino)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "%s is the input file %s (same file%s); quantize writes a new file", out_path,
                    in_path, strcmp(in_path, out_path) ? " through a link" : "");
    if (minfer_ftype_base_type(o->ftype) == MINFER_TYPE_COUNT)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "file type %u is not one quantize writes", o->ftype);

    g = minfer_gguf_open(in_path, &st, msg, sizeof msg);
    if (!g)
        return errf(err, err_len, st, "%s", msg);
    struct minfer_mix mix = {.ftype = o->ftype, .pure = o->pure};
    mix_facts(g, &mix);
    for (int64_t i = 0; i < minfer_gguf_tensor_count(g) && !allow_requant; i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        if (t->n_dims >= 2 && t->type != MINFER_TYPE_F32 && t->type != MINFER_TYPE_F16 &&
            t->type != MINFER_TYPE_BF16) {
            st = errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                      "%s is already quantized (tensor %s is %s); requantizing loses quality "
                      "(allow it with --allow-requantize)", in_path, t->name,
                      minfer_type_name(t->type));
            goto out;
        }
    }

    w = minfer_gguf_writer_new(3);
    if (!w) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for the GGUF writer");
        goto out;
    }
    int64_t nkv = minfer_gguf_kv_count(g);
    for (int64_t i = 0; i < nkv; i++) {
        const char *key = minfer_gguf_kv_key(g, i);
        if (!strcmp(key, "general.file_type") || !strcmp(key, "general.quantization_version"))
            continue;
        if ((st = minfer_gguf_writer_copy_kv(w, g, i)) != MINFER_OK) {
            st = errf(err, err_len, st, "copying metadata key %s: %s", key,
                      minfer_status_str(st));
            goto out;
        }
    }
    uint32_t ft = o->ftype, qv = QUANT_VERSION;
    if ((st = minfer_gguf_writer_set(w, "general.file_type", MINFER_GGUF_UINT32, &ft)) ||
        (st = minfer_gguf_writer_set(w, "general.quantization_version", MINFER_GGUF_UINT32,
                                     &qv))) {
        st = errf(err, err_len, st, "setting general.file_type: %s", minfer_status_str(st));
        goto out;
    }

    int64_t nt = minfer_gguf_tensor_count(g);
    qt = calloc(nt > 0 ? (size_t)nt : 1, sizeof *qt);
    if (!qt) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for %lld tensors",
                  (long long)nt);
        goto out;
    }
    uint64_t total = 0;
    size_t scratch = 0;
    for (int64_t i = 0; i < nt; i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        struct qtensor *q = &qt[i];
        q->in = t;
        q->out_type = minfer_mix_tensor_type(&mix, t->name, t->n_dims, t->ne, t->type);
        if (q->out_type == t->type)
            continue; /* copied as is */
        const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
        if (!tr || !tr->supported) {
            st = errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                      "tensor %s has type %s, which this build cannot read to convert to %s",
                      t->name, minfer_type_name(t->type), minfer_type_name(q->out_type));
            goto out;
        }
        q->in_row = minfer_row_size(t->type, t->ne[0]);
        q->st.row_bytes = minfer_row_size(q->out_type, t->ne[0]);
        q->st.n_rows = t->ne[1] * t->ne[2] * t->ne[3];
        if (!q->in_row || !q->st.row_bytes) {
            st = errf(err, err_len, MINFER_ERR_FORMAT,
                      "tensor %s: row length %lld does not fit type %s or %s", t->name,
                      (long long)t->ne[0], minfer_type_name(t->type),
                      minfer_type_name(q->out_type));
            goto out;
        }
        /* the dequantized input, an aligned copy of the input row, the
         * converted row read back */
        if ((size_t)t->ne[0] * 3 * sizeof(float) > scratch)
            scratch = (size_t)t->ne[0] * 3 * sizeof(float);
        total += (uint64_t)q->st.n_rows * q->st.row_bytes;
    }
    ts = tstream_new(o->n_threads, scratch, total, o->progress, o->progress_user);
    if (!ts) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for worker buffers");
        goto out;
    }
    tstream_set_cancel(ts, o->cancel);
    for (int64_t i = 0; i < nt; i++) {
        struct qtensor *q = &qt[i];
        const struct minfer_gguf_tensor *t = q->in;
        if (q->out_type == t->type) {
            st = minfer_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                               NULL, NULL);
        } else {
            q->st.s = ts;
            q->st.name = t->name;
            q->st.rows = convert_rows;
            q->st.user = q;
            st = minfer_gguf_writer_add_tensor(w, t->name, q->out_type, t->n_dims, t->ne, NULL,
                                               tstream_fill, &q->st);
        }
        if (st != MINFER_OK) {
            st = errf(err, err_len, st, "adding tensor %s to the output: %s", t->name,
                      minfer_status_str(st));
            goto out;
        }
    }
    st = minfer_gguf_writer_write(w, out_path, msg, sizeof msg);
    if (st != MINFER_OK)
        st = tstream_write_failed(ts, st, out_path, msg, err, err_len);
out:
    tstream_free(ts);
    free(qt);
    minfer_gguf_writer_free(w);
    minfer_gguf_close(g);
    return st;
}
