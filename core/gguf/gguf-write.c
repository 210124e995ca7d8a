/*
 * gguf-write.c — the GGUF writer: collects metadata and tensor
 * descriptions, then streams one file in the layout llama.cpp writes and
 * reads (v3, little-endian): header, key/values, tensor infos, zero
 * padding to general.alignment, then each tensor's bytes at an offset
 * (relative to the data section) that is a multiple of the alignment,
 * each followed by zero padding to the next multiple.
 *
 * Tensor bytes come from caller memory or a fill callback, a chunk at a
 * time, so a multi-GB file needs only one small buffer. The file is
 * written under a temporary name in the target's directory, fsync'd and
 * renamed into place, so a failed or interrupted write leaves no file at
 * the target path (and a failure removes the temporary).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "gguf-internal.h"
#include "runtime/error.h"
#include "runtime/outfile.h"
#include "minfer/gguf.h"
#include "minfer/quant.h"

/* Bytes buffered before a write(2); also the fill callback's chunk. */
#define WRITE_CHUNK (4u << 20)

/* ---- types ---- */

struct wkv {
    char *key;
    uint32_t type;
    uint8_t *blob;  /* the serialized value, as after the type tag in the file */
    uint64_t len;
};

struct wtensor {
    char *name;
    uint32_t type;
    uint32_t n_dims;
    int64_t ne[MINFER_MAX_DIMS];
    uint64_t size;     /* bytes */
    uint64_t rel_off;  /* from the data section, assigned at write */
    const void *data;
    minfer_gguf_fill_fn fill;
    void *user;
};

struct minfer_gguf_writer {
    uint32_t version;
    volatile bool writing;       /* tmp names a file being written */
    char tmp[4096 + 64];
    struct wkv *kv;
    size_t n_kv, cap_kv;
    struct wtensor *t;
    size_t n_t, cap_t;
};

/* ---- building ---- */

struct minfer_gguf_writer *minfer_gguf_writer_new(uint32_t version)
{
    if (version != 2 && version != 3) {
        minfer_gguf_set_last_error("gguf writer: version %" PRIu32 " requested; 2 or 3 only",
                                   version);
        return NULL;
    }
    struct minfer_gguf_writer *w = calloc(1, sizeof *w);
    if (w)
        w->version = version;
    return w;
}

void minfer_gguf_writer_free(struct minfer_gguf_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kv[i].key);
        free(w->kv[i].blob);
    }
    for (size_t i = 0; i < w->n_t; i++)
        free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

static bool grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 16;
    void *p = realloc(*arr, nc * elem);
    if (!p)
        return false;
    *arr = p;
    *cap = nc;
    return true;
}

/* Takes ownership of blob (freed on failure too). Replaces an existing key. */
static minfer_status put_kv(struct minfer_gguf_writer *w, const char *key, uint32_t type,
                            uint8_t *blob, uint64_t len)
{
    minfer_status st = MINFER_ERR_INVALID_ARG;
    size_t klen = key ? strlen(key) : 0;
    if (!w || !key || klen == 0 || klen > GGUF_MAX_KEY_LEN) {
        minfer_gguf_set_last_error("gguf writer: key must be 1..%u bytes", GGUF_MAX_KEY_LEN);
        goto out_free;
    }
    if (!strcmp(key, GGUF_ALIGNMENT_KEY)) {
        uint32_t a = type == MINFER_GGUF_UINT32 ? gguf_rd_u32(blob) : 0;
        if (type != MINFER_GGUF_UINT32 || a == 0 || (a & (a - 1))) {
            minfer_gguf_set_last_error("gguf writer: " GGUF_ALIGNMENT_KEY
                                       " must be a u32 non-zero power of two");
            goto out_free;
        }
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (!strcmp(w->kv[i].key, key)) {
            free(w->kv[i].blob);
            w->kv[i].type = type;
            w->kv[i].blob = blob;
            w->kv[i].len = len;
            return MINFER_OK;
        }
    }
    st = MINFER_ERR_NO_MEMORY;
    if (!grow((void **)&w->kv, &w->cap_kv, w->n_kv + 1, sizeof *w->kv))
        goto out_free;
    char *k = strdup(key);
    if (!k)
        goto out_free;
    w->kv[w->n_kv++] = (struct wkv){k, type, blob, len};
    return MINFER_OK;

out_free:
    free(blob);
    return st;
}

minfer_status minfer_gguf_writer_set(struct minfer_gguf_writer *w, const char *key,
                                     enum minfer_gguf_type type, const void *value)
{
    if (type == MINFER_GGUF_STRING && value)
        return minfer_gguf_writer_set_str(w, key, value, strlen(value));
    uint32_t sz = gguf_scalar_size(type);
    if (!sz || !value) {
        minfer_gguf_set_last_error("gguf writer: key '%s': set takes a scalar type and a value;"
                                   " use set_arr/set_arr_str for arrays",
                                   key ? key : "(null)");
        return MINFER_ERR_INVALID_ARG;
    }
    uint8_t *blob = malloc(sz);
    if (!blob)
        return MINFER_ERR_NO_MEMORY;
    memcpy(blob, value, sz);
    return put_kv(w, key, type, blob, sz);
}

minfer_status minfer_gguf_writer_set_str(struct minfer_gguf_writer *w, const char *key,
                                         const char *s, size_t len)
{
    if ((!s && len) || len > GGUF_MAX_STRING_LEN) {
        minfer_gguf_set_last_error("gguf writer: key '%s': string of %zu bytes (limit %u)",
                                   key ? key : "(null)", len, GGUF_MAX_STRING_LEN);
        return MINFER_ERR_INVALID_ARG;
    }
    uint8_t *blob = malloc(8 + len);
    if (!blob)
        return MINFER_ERR_NO_MEMORY;
    gguf_wr_u64(blob, len);
    if (len)
        memcpy(blob + 8, s, len);
    return put_kv(w, key, MINFER_GGUF_STRING, blob, 8 + len);
}

minfer_status minfer_gguf_writer_set_arr(struct minfer_gguf_writer *w, const char *key,
                                         enum minfer_gguf_type elem_type, const void *data,
                                         uint64_t n)
{
    uint32_t sz = gguf_scalar_size(elem_type);
    if (!sz || (!data && n) || n > (SIZE_MAX - 12) / sz) {
        minfer_gguf_set_last_error("gguf writer: key '%s': set_arr takes a scalar element type"
                                   " and %" PRIu64 " elements",
                                   key ? key : "(null)", n);
        return MINFER_ERR_INVALID_ARG;
    }
    uint8_t *blob = malloc(12 + n * sz);
    if (!blob)
        return MINFER_ERR_NO_MEMORY;
    gguf_wr_u32(blob, elem_type);
    gguf_wr_u64(blob + 4, n);
    if (n)
        memcpy(blob + 12, data, n * sz);
    return put_kv(w, key, MINFER_GGUF_ARRAY, blob, 12 + n * sz);
}

minfer_status minfer_gguf_writer_set_arr_str(struct minfer_gguf_writer *w, const char *key,
                                             const char *const *strs, const size_t *lens,
                                             uint64_t n)
{
    uint64_t total = 12;
    if (!strs && n)
        return MINFER_ERR_INVALID_ARG;
    for (uint64_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : (strs[i] ? strlen(strs[i]) : 0);
        if ((!strs[i] && l) || l > GGUF_MAX_STRING_LEN || total > SIZE_MAX - 8 - l) {
            minfer_gguf_set_last_error("gguf writer: key '%s': element %" PRIu64
                                       " is NULL or longer than %u bytes",
                                       key ? key : "(null)", i, GGUF_MAX_STRING_LEN);
            return MINFER_ERR_INVALID_ARG;
        }
        total += 8 + l;
    }
    uint8_t *blob = malloc(total);
    if (!blob)
        return MINFER_ERR_NO_MEMORY;
    gguf_wr_u32(blob, MINFER_GGUF_STRING);
    gguf_wr_u64(blob + 4, n);
    uint8_t *o = blob + 12;
    for (uint64_t i = 0; i < n; i++) {
        size_t l = lens ? lens[i] : (strs[i] ? strlen(strs[i]) : 0);
        gguf_wr_u64(o, l);
        if (l)
            memcpy(o + 8, strs[i], l);
        o += 8 + l;
    }
    return put_kv(w, key, MINFER_GGUF_ARRAY, blob, total);
}

minfer_status minfer_gguf_writer_copy_kv(struct minfer_gguf_writer *w,
                                         const struct minfer_gguf *g, int64_t i)
{
    uint32_t type;
    const uint8_t *bytes;
    uint64_t len;
    minfer_status st = minfer_gguf_kv_raw(g, i, &type, &bytes, &len);
    if (st)
        return st;
    if (len > SIZE_MAX)
        return MINFER_ERR_NO_MEMORY;
    uint8_t *blob = malloc(len ? (size_t)len : 1);
    if (!blob)
        return MINFER_ERR_NO_MEMORY;
    memcpy(blob, bytes, (size_t)len);
    return put_kv(w, minfer_gguf_kv_key(g, i), type, blob, len);
}

minfer_status minfer_gguf_writer_add_tensor(struct minfer_gguf_writer *w, const char *name,
                                            uint32_t type, uint32_t n_dims, const int64_t *ne,
                                            const void *data, minfer_gguf_fill_fn fill,
                                            void *user)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    size_t nlen = name ? strlen(name) : 0;
    if (!w || nlen == 0 || nlen > GGUF_WRITE_MAX_NAME_LEN) {
        minfer_gguf_set_last_error("gguf writer: tensor name '%s' must be 1..%u bytes"
                                   " (llama.cpp's limit)",
                                   name ? name : "(null)", GGUF_WRITE_MAX_NAME_LEN);
        return MINFER_ERR_INVALID_ARG;
    }
    if (!tr || n_dims < 1 || n_dims > MINFER_MAX_DIMS || !ne || (!data && !fill)) {
        minfer_gguf_set_last_error("gguf writer: tensor '%s': type %" PRIu32 ", n_dims %" PRIu32
                                   ", a shape and data or a fill callback are required",
                                   name, type, n_dims);
        return MINFER_ERR_INVALID_ARG;
    }
    struct wtensor t = {.type = type, .n_dims = n_dims, .data = data, .fill = fill, .user = user};
    uint64_t nel = 1;
    for (int d = 0; d < MINFER_MAX_DIMS; d++)
        t.ne[d] = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 1 || nel > (uint64_t)INT64_MAX / (uint64_t)ne[d]) {
            minfer_gguf_set_last_error("gguf writer: tensor '%s': ne[%" PRIu32 "] = %" PRId64
                                       " is not positive or overflows the element count",
                                       name, d, ne[d]);
            return MINFER_ERR_INVALID_ARG;
        }
        nel *= (uint64_t)ne[d];
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % tr->block_size ||
        nel / tr->block_size > (uint64_t)INT64_MAX / tr->type_size) {
        minfer_gguf_set_last_error("gguf writer: tensor '%s': ne[0] = %" PRId64
                                   " is not a multiple of %s's block size %" PRIu32
                                   " or the byte size overflows",
                                   name, t.ne[0], tr->name, tr->block_size);
        return MINFER_ERR_INVALID_ARG;
    }
    t.size = nel / tr->block_size * tr->type_size;
    for (size_t i = 0; i < w->n_t; i++) {
        if (!strcmp(w->t[i].name, name)) {
            minfer_gguf_set_last_error("gguf writer: tensor '%s' added twice", name);
            return MINFER_ERR_INVALID_ARG;
        }
    }
    if (!grow((void **)&w->t, &w->cap_t, w->n_t + 1, sizeof *w->t))
        return MINFER_ERR_NO_MEMORY;
    if (!(t.name = strdup(name)))
        return MINFER_ERR_NO_MEMORY;
    w->t[w->n_t++] = t;
    return MINFER_OK;
}

/* ---- output ---- */

struct out {
    int fd;
    uint8_t *buf;
    size_t n;
    uint64_t written;      /* bytes handed to the file so far */
    const char *path;      /* the target, for messages */
    const char *tmp;
    char *err;
    size_t err_len;
};

static minfer_status out_fail(struct out *o, minfer_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static minfer_status out_fail(struct out *o, minfer_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errf(o->err, o->err_len, st, "gguf: writing %s: ", o->path);
    verrf_append(o->err, o->err_len, st, fmt, ap);
    va_end(ap);
    return st;
}

static minfer_status write_all(struct out *o, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        ssize_t k = write(o->fd, b, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return out_fail(o, MINFER_ERR_IO, "%s (temporary file %s, at byte %" PRIu64 ")",
                            strerror(errno), o->tmp, o->written);
        if (k == 0)
            return out_fail(o, MINFER_ERR_IO, "write made no progress (temporary file %s)", o->tmp);
        b += k;
        n -= (size_t)k;
        o->written += (uint64_t)k;
    }
    return MINFER_OK;
}

static minfer_status flush(struct out *o)
{
    minfer_status st = write_all(o, o->buf, o->n);
    o->n = 0;
    return st;
}

static minfer_status emit(struct out *o, const void *p, size_t n)
{
    const uint8_t *b = p;
    while (n) {
        if (o->n == WRITE_CHUNK) {
            minfer_status st = flush(o);
            if (st)
                return st;
        }
        size_t k = WRITE_CHUNK - o->n < n ? WRITE_CHUNK - o->n : n;
        memcpy(o->buf + o->n, b, k);
        o->n += k;
        b += k;
        n -= k;
    }
    return MINFER_OK;
}

static minfer_status emit_u32(struct out *o, uint32_t v)
{
    uint8_t b[4];
    gguf_wr_u32(b, v);
    return emit(o, b, 4);
}

static minfer_status emit_u64(struct out *o, uint64_t v)
{
    uint8_t b[8];
    gguf_wr_u64(b, v);
    return emit(o, b, 8);
}

static minfer_status emit_str(struct out *o, const char *s)
{
    minfer_status st = emit_u64(o, strlen(s));
    return st ? st : emit(o, s, strlen(s));
}

static minfer_status emit_zeros(struct out *o, uint64_t n)
{
    static const uint8_t z[256];
    minfer_status st = MINFER_OK;
    while (n && !st) {
        size_t k = n < sizeof z ? (size_t)n : sizeof z;
        st = emit(o, z, k);
        n -= k;
    }
    return st;
}

static uint64_t pad_of(uint64_t n, uint64_t a)
{
    return (a - n % a) % a;
}

static minfer_status emit_header(struct out *o, const struct minfer_gguf_writer *w)
{
    minfer_status st;
    if ((st = emit(o, "GGUF", 4)) || (st = emit_u32(o, w->version)) ||
        (st = emit_u64(o, w->n_t)) || (st = emit_u64(o, w->n_kv)))
        return st;
    for (size_t i = 0; i < w->n_kv; i++) {
        const struct wkv *kv = &w->kv[i];
        if ((st = emit_str(o, kv->key)) || (st = emit_u32(o, kv->type)) ||
            (st = emit(o, kv->blob, (size_t)kv->len)))
            return st;
    }
    for (size_t i = 0; i < w->n_t; i++) {
        const struct wtensor *t = &w->t[i];
        if ((st = emit_str(o, t->name)) || (st = emit_u32(o, t->n_dims)))
            return st;
        for (uint32_t d = 0; d < t->n_dims; d++)
            if ((st = emit_u64(o, (uint64_t)t->ne[d])))
                return st;
        if ((st = emit_u32(o, t->type)) || (st = emit_u64(o, t->rel_off)))
            return st;
    }
    return MINFER_OK;
}

static minfer_status emit_tensor(struct out *o, const struct wtensor *t, uint64_t a)
{
    minfer_status st;
    if (t->data) {
        /* large caller buffers go straight to the file */
        if ((st = flush(o)))
            return st;
        const uint8_t *p = t->data;
        for (uint64_t done = 0; done < t->size;) {
            size_t k = t->size - done < (1u << 30) ? (size_t)(t->size - done) : (1u << 30);
            if ((st = write_all(o, p + done, k)))
                return st;
            done += k;
        }
    } else {
        for (uint64_t done = 0; done < t->size;) {
            if (o->n == WRITE_CHUNK && (st = flush(o)))
                return st;
            size_t room = WRITE_CHUNK - o->n;
            size_t k = t->size - done < room ? (size_t)(t->size - done) : room;
            st = t->fill(t->user, done, o->buf + o->n, k);
            if (st)
                return out_fail(o, st, "tensor '%s': the fill callback failed at byte %" PRIu64
                                " with '%s'", t->name, done, minfer_status_str(st));
            o->n += k;
            done += k;
        }
    }
    return emit_zeros(o, pad_of(t->size, a));
}

const char *minfer_gguf_writer_temp_path(const struct minfer_gguf_writer *w)
{
    return w && w->writing ? w->tmp : NULL;
}

minfer_status minfer_gguf_writer_write(struct minfer_gguf_writer *w, const char *path,
                                       char *err, size_t err_len)
{
    struct out o = {-1, NULL, 0, 0, path ? path : "(null)", "", err, err_len};
    minfer_status st;
    if (!w || !path || !*path || strlen(path) > 4096)
        return out_fail(&o, MINFER_ERR_INVALID_ARG, "no writer or no usable path");
    char *tmp = w->tmp;

    /* layout: tensor offsets from the data section, each padded */
    uint64_t a = GGUF_DEFAULT_ALIGNMENT, rel = 0;
    for (size_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->kv[i].key, GGUF_ALIGNMENT_KEY))
            a = gguf_rd_u32(w->kv[i].blob);
    for (size_t i = 0; i < w->n_t; i++) {
        uint64_t padded = w->t[i].size + pad_of(w->t[i].size, a);
        if (padded < w->t[i].size || rel > UINT64_MAX - padded)
            return out_fail(&o, MINFER_ERR_RANGE, "the tensors add up to more than 2^64 bytes");
        w->t[i].rel_off = rel;
        rel += padded;
    }

    o.buf = malloc(WRITE_CHUNK);
    if (!o.buf)
        return out_fail(&o, MINFER_ERR_NO_MEMORY, "no memory for the write buffer");
    struct outfile of;
    char why[1024];
    if ((st = outfile_open(&of, path, why, sizeof why)) != MINFER_OK) {
        st = out_fail(&o, st, "%s", why);
        goto out_buf;
    }
    snprintf(tmp, sizeof w->tmp, "%s", of.tmp);
    o.fd = of.fd;
    o.tmp = tmp;
    w->writing = true;

    if ((st = emit_header(&o, w)) || (st = emit_zeros(&o, pad_of(o.written + o.n, a))))
        goto out_abort;
    for (size_t i = 0; i < w->n_t; i++)
        if ((st = emit_tensor(&o, &w->t[i], a)))
            goto out_abort;
    if ((st = flush(&o)))
        goto out_abort;
    o.fd = -1;
    if ((st = outfile_commit(&of, why, sizeof why)) != MINFER_OK) {
        w->writing = false;
        st = out_fail(&o, st, "%s", why);
        goto out_buf;
    }
    w->writing = false;
    free(o.buf);
    if (err && err_len)
        err[0] = '\0';
    return MINFER_OK;

out_abort:
    outfile_abort(&of);
    w->writing = false;
out_buf:
    free(o.buf);
    return st;
}
