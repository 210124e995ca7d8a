/*
 * gguf-query.c — what an open GGUF handle answers: file facts, metadata by
 * index and by key (typed getters that convert between integer widths
 * when the value fits), and the thread's last getter error. Everything
 * here was validated at open (gguf.c), so the answers need no bounds
 * checks against the file, only against what the caller asks.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf-internal.h"
#include "gguf-reader.h"
#include "runtime/error.h"

/* ---- messages ---- */

static _Thread_local char last_error[512];

const char *minfer_gguf_last_error(void)
{
    return last_error;
}

void minfer_gguf_set_last_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(last_error, sizeof last_error, MINFER_OK, fmt, ap);
    va_end(ap);
}

static minfer_status getter_fail(minfer_status st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static minfer_status getter_fail(minfer_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(last_error, sizeof last_error, st, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- file facts ---- */

uint32_t minfer_gguf_version(const struct minfer_gguf *g)
{
    return g ? g->version : 0;
}

uint64_t minfer_gguf_alignment(const struct minfer_gguf *g)
{
    return g ? g->alignment : 0;
}

uint64_t minfer_gguf_data_offset(const struct minfer_gguf *g)
{
    return g ? g->data_offset : 0;
}

const void *minfer_gguf_base(const struct minfer_gguf *g, uint64_t *size)
{
    if (size)
        *size = g ? g->size : 0;
    return g ? g->base : NULL;
}

int64_t minfer_gguf_tensor_count(const struct minfer_gguf *g)
{
    return g ? g->n_tensors : 0;
}

const struct minfer_gguf_tensor *minfer_gguf_tensor(const struct minfer_gguf *g, int64_t i)
{
    if (!g || i < 0 || i >= g->n_tensors)
        return NULL;
    return &g->tensors[i];
}

/* ---- metadata by index ---- */

int64_t minfer_gguf_kv_count(const struct minfer_gguf *g)
{
    return g ? g->n_kv : 0;
}

const char *minfer_gguf_kv_key(const struct minfer_gguf *g, int64_t i)
{
    if (!g || i < 0 || i >= g->n_kv)
        return NULL;
    return g->kv[i].key;
}

enum minfer_gguf_type minfer_gguf_kv_type(const struct minfer_gguf *g, int64_t i)
{
    if (!g || i < 0 || i >= g->n_kv)
        return (enum minfer_gguf_type)-1;
    return (enum minfer_gguf_type)g->kv[i].type;
}

static const struct gguf_kv *kv_at(const struct minfer_gguf *g, int64_t i, minfer_status *st)
{
    if (!g) {
        *st = getter_fail(MINFER_ERR_INVALID_ARG, "gguf: no file handle");
        return NULL;
    }
    if (i < 0 || i >= g->n_kv) {
        *st = getter_fail(MINFER_ERR_NOT_FOUND, "gguf: key index %" PRId64 " outside 0..%" PRId64,
                          i, g->n_kv - 1);
        return NULL;
    }
    *st = MINFER_OK;
    return &g->kv[i];
}

minfer_status minfer_gguf_kv_raw(const struct minfer_gguf *g, int64_t i, uint32_t *type,
                                 const uint8_t **bytes, uint64_t *len)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_at(g, i, &st);
    if (!kv)
        return st;
    *type = kv->type;
    *bytes = g->base + kv->off;
    *len = kv->raw_len;
    return MINFER_OK;
}

minfer_status minfer_gguf_kv_scalar(const struct minfer_gguf *g, int64_t i, const void **data,
                                    size_t *len)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_at(g, i, &st);
    if (data)
        *data = NULL;
    if (len)
        *len = 0;
    if (!kv)
        return st;
    if (kv->type == MINFER_GGUF_ARRAY)
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is an array, not a scalar",
                           kv->key);
    if (data)
        *data = kv->data;
    if (len)
        *len = kv->type == MINFER_GGUF_STRING ? (size_t)kv->n : gguf_scalar_size(kv->type);
    return MINFER_OK;
}

minfer_status minfer_gguf_kv_arr(const struct minfer_gguf *g, int64_t i,
                                 enum minfer_gguf_type *elem_type, uint64_t *n, const void **data)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_at(g, i, &st);
    if (data)
        *data = NULL;
    if (n)
        *n = 0;
    if (!kv)
        return st;
    if (kv->type != MINFER_GGUF_ARRAY)
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is a %s, not an array", kv->key,
                           minfer_gguf_type_name(kv->type));
    if (elem_type)
        *elem_type = (enum minfer_gguf_type)kv->elem_type;
    if (n)
        *n = kv->n;
    if (data && kv->elem_type != MINFER_GGUF_STRING)
        *data = kv->data;
    return MINFER_OK;
}

minfer_status minfer_gguf_kv_arr_str(const struct minfer_gguf *g, int64_t i, uint64_t j,
                                     const char **s, size_t *len)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_at(g, i, &st);
    *s = NULL;
    *len = 0;
    if (!kv)
        return st;
    if (kv->type != MINFER_GGUF_ARRAY || kv->elem_type != MINFER_GGUF_STRING)
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is not an array of strings",
                           kv->key);
    if (j >= kv->n)
        return getter_fail(MINFER_ERR_RANGE,
                           "gguf: element %" PRIu64 " of key '%s' is past its %" PRIu64
                           " strings",
                           j, kv->key, kv->n);
    const uint8_t *p = kv->data + kv->str_index[j];
    *len = (size_t)gguf_rd_u64(p);
    *s = (const char *)p + 8;
    return MINFER_OK;
}

/* ---- metadata by key ---- */

static const struct gguf_kv *kv_named(const struct minfer_gguf *g, const char *key,
                                      minfer_status *st)
{
    if (!g || !key) {
        *st = getter_fail(MINFER_ERR_INVALID_ARG, "gguf: no file handle or key");
        return NULL;
    }
    int64_t i = minfer_gguf_find_key(g, key);
    if (i < 0) {
        *st = getter_fail(MINFER_ERR_NOT_FOUND, "gguf: key '%s' is absent", key);
        return NULL;
    }
    *st = MINFER_OK;
    return &g->kv[i];
}

/* Integers (and bool) widened: *neg for negative values, *mag the
 * magnitude. False for non-integer types. */
static bool as_int(const struct gguf_kv *kv, bool *neg, uint64_t *mag)
{
    const uint8_t *p = kv->data;
    int64_t s;
    *neg = false;
    switch (kv->type) {
    case MINFER_GGUF_UINT8: case MINFER_GGUF_BOOL: *mag = p[0]; return true;
    case MINFER_GGUF_UINT16: *mag = (uint64_t)p[0] | (uint64_t)p[1] << 8; return true;
    case MINFER_GGUF_UINT32: *mag = gguf_rd_u32(p); return true;
    case MINFER_GGUF_UINT64: *mag = gguf_rd_u64(p); return true;
    case MINFER_GGUF_INT8: s = (int8_t)p[0]; break;
    case MINFER_GGUF_INT16: s = (int16_t)(uint16_t)(p[0] | p[1] << 8); break;
    case MINFER_GGUF_INT32: s = (int32_t)gguf_rd_u32(p); break;
    case MINFER_GGUF_INT64: s = (int64_t)gguf_rd_u64(p); break;
    default: return false;
    }
    *neg = s < 0;
    *mag = s < 0 ? (uint64_t)0 - (uint64_t)s : (uint64_t)s;
    return true;
}

/* The integer under key, as as_int() gives it; an error for a key that
 * is absent or holds no integer. */
static minfer_status int_named(const struct minfer_gguf *g, const char *key, bool *neg,
                               uint64_t *mag)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_named(g, key, &st);
    if (!kv)
        return st;
    if (!as_int(kv, neg, mag))
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is a %s, expected an integer",
                           key, minfer_gguf_type_name(kv->type));
    return MINFER_OK;
}

minfer_status minfer_gguf_get_i64(const struct minfer_gguf *g, const char *key, int64_t *out)
{
    bool neg;
    uint64_t mag;
    minfer_status st = int_named(g, key, &neg, &mag);
    if (st)
        return st;
    if (!neg && mag > (uint64_t)INT64_MAX)
        return getter_fail(MINFER_ERR_RANGE, "gguf: key '%s' value %" PRIu64 " exceeds int64",
                           key, mag);
    *out = neg ? (int64_t)(0 - mag) : (int64_t)mag;
    return MINFER_OK;
}

minfer_status minfer_gguf_get_u64(const struct minfer_gguf *g, const char *key, uint64_t *out)
{
    bool neg;
    uint64_t mag;
    minfer_status st = int_named(g, key, &neg, &mag);
    if (st)
        return st;
    if (neg)
        return getter_fail(MINFER_ERR_RANGE, "gguf: key '%s' is negative (-%" PRIu64 ")", key,
                           mag);
    *out = mag;
    return MINFER_OK;
}

minfer_status minfer_gguf_get_f64(const struct minfer_gguf *g, const char *key, double *out)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_named(g, key, &st);
    bool neg;
    uint64_t mag;
    if (!kv)
        return st;
    if (kv->type == MINFER_GGUF_FLOAT32) {
        float f;
        uint32_t u = gguf_rd_u32(kv->data);
        memcpy(&f, &u, sizeof f);
        *out = f;
    } else if (kv->type == MINFER_GGUF_FLOAT64) {
        uint64_t u = gguf_rd_u64(kv->data);
        memcpy(out, &u, sizeof *out);
    } else if (kv->type != MINFER_GGUF_BOOL && as_int(kv, &neg, &mag)) {
        *out = neg ? -(double)mag : (double)mag;
    } else {
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is a %s, expected a number", key,
                           minfer_gguf_type_name(kv->type));
    }
    return MINFER_OK;
}

minfer_status minfer_gguf_get_bool(const struct minfer_gguf *g, const char *key, bool *out)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_named(g, key, &st);
    if (!kv)
        return st;
    if (kv->type != MINFER_GGUF_BOOL)
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is a %s, expected a bool", key,
                           minfer_gguf_type_name(kv->type));
    *out = kv->data[0] != 0;
    return MINFER_OK;
}

minfer_status minfer_gguf_get_str(const struct minfer_gguf *g, const char *key, const char **s,
                                  size_t *len)
{
    minfer_status st;
    const struct gguf_kv *kv = kv_named(g, key, &st);
    *s = NULL;
    *len = 0;
    if (!kv)
        return st;
    if (kv->type != MINFER_GGUF_STRING)
        return getter_fail(MINFER_ERR_FORMAT, "gguf: key '%s' is a %s, expected a string", key,
                           minfer_gguf_type_name(kv->type));
    *s = (const char *)kv->data;
    *len = (size_t)kv->n;
    return MINFER_OK;
}

/* The index of key for the array getters, which answer by index; -1 with
 * *st set when there is no handle, no key or no such key. */
static int64_t index_named(const struct minfer_gguf *g, const char *key, minfer_status *st)
{
    int64_t i = g && key ? minfer_gguf_find_key(g, key) : -1;
    *st = MINFER_OK;
    if (i < 0)
        *st = getter_fail(g && key ? MINFER_ERR_NOT_FOUND : MINFER_ERR_INVALID_ARG,
                          "gguf: key '%s' is absent", key ? key : "(null)");
    return i;
}

minfer_status minfer_gguf_get_arr(const struct minfer_gguf *g, const char *key,
                                  enum minfer_gguf_type *elem_type, uint64_t *n, const void **data)
{
    minfer_status st;
    int64_t i = index_named(g, key, &st);
    if (i < 0) {
        if (data)
            *data = NULL;
        if (n)
            *n = 0;
        return st;
    }
    return minfer_gguf_kv_arr(g, i, elem_type, n, data);
}

minfer_status minfer_gguf_get_arr_str(const struct minfer_gguf *g, const char *key, uint64_t i,
                                      const char **s, size_t *len)
{
    minfer_status st;
    int64_t k = index_named(g, key, &st);
    if (k < 0) {
        *s = NULL;
        *len = 0;
        return st;
    }
    return minfer_gguf_kv_arr_str(g, k, i, s, len);
}
