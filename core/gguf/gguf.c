/*
 * gguf.c — the GGUF reader: maps a file (or takes caller memory),
 * validates all of it once at open and then answers metadata and tensor
 * queries without further checks (those answers are gguf-query.c).
 *
 * The file is hostile until validated. Every count, length and offset is
 * checked against the bytes that are left before it is used, every
 * product is overflow-checked, and memory grows only with what was
 * actually parsed, so a lying count cannot make us allocate more than the
 * file's own size. A refusal names the field, its value and its offset.
 *
 * What this reader accepts (and why):
 *  - GGUF v2 and v3, little-endian. v1 (32-bit counts, 2023) and
 *    big-endian files are refused with a message saying so.
 *  - Every metadata type; arrays of any non-array type. Arrays of arrays
 *    are refused: no model uses them and llama.cpp refuses them too.
 *  - Keys 1..65535 bytes (the spec's limit), tensor names 1..255 bytes,
 *    neither holding a NUL byte (they are handed out as C strings);
 *    string values and array strings up to 16 MiB each; arrays as long as
 *    the bytes left in the file can hold. Duplicate keys and duplicate
 *    tensor names are refused.
 *  - general.alignment, when present, must be a u32 that is a non-zero
 *    power of two (default 32). The data section starts at the first
 *    aligned offset after the tensor infos; every tensor offset is a
 *    multiple of the alignment and the tensor lies inside the file.
 *  - Tensors: n_dims 1..4, every dimension 1..INT64_MAX (empty tensors
 *    are refused: no model has one and they would only feed divisions by
 *    zero downstream), the element count and the byte size must fit in
 *    int64, ne[0] a multiple of the type's block size, and the type one
 *    this build reads (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
 *    Q8_1, Q4_K, Q5_K, Q6_K, Q8_K, I8, I16, I32, I64, F64). Other types
 *    are refused by name (MINFER_GGUF_OPEN_ANY_TYPE lets describing tools
 *    see them). Tensors may overlap (the mapping is read-only).
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gguf-internal.h"
#include "gguf-reader.h"
#include "runtime/error.h"
#include "minfer/gguf.h"
#include "minfer/quant.h"

/* ---- parser state ---- */

/* Parsing state: a cursor over the bytes plus where errors go. */
struct parser {
    struct minfer_gguf *g;
    const uint8_t *p;
    uint64_t size;
    uint64_t pos;
    const char *src; /* path or "<memory>" for messages */
    uint32_t flags;  /* MINFER_GGUF_OPEN_* */
    char *err;
    size_t err_len;
};

/* Context for messages: "key #12 ('general.name') element 3". */
struct where {
    const char *kind;      /* "key" or "tensor" */
    int64_t idx;
    const uint8_t *name;   /* may be NULL before the name is read */
    uint64_t name_len;
    int64_t elem;          /* array element, or -1 */
};

/* Printable, truncated copy of untrusted bytes. */
static void show(const uint8_t *s, uint64_t len, char *buf, size_t n)
{
    size_t o = 0;
    const uint64_t max_shown = 48;
    for (uint64_t i = 0; i < len && i < max_shown && o + 5 < n; i++) {
        uint8_t c = s[i];
        if (c >= 0x20 && c < 0x7f && c != '\'' && c != '\\')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, n - o, "\\x%02x", c);
    }
    if (len > max_shown && o + 4 < n) {
        memcpy(buf + o, "...", 3);
        o += 3;
    }
    buf[o < n ? o : n - 1] = '\0';
}

static void where_str(const struct where *w, char *buf, size_t n)
{
    char nm[256];
    int k = snprintf(buf, n, "%s #%" PRId64, w->kind, w->idx);
    if (w->name && k >= 0 && (size_t)k < n) {
        show(w->name, w->name_len, nm, sizeof nm);
        k += snprintf(buf + k, n - (size_t)k, " ('%s')", nm);
    }
    if (w->elem >= 0 && k >= 0 && (size_t)k < n)
        snprintf(buf + k, n - (size_t)k, " element %" PRId64, w->elem);
}

static minfer_status perr(struct parser *ps, minfer_status st, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static minfer_status perr(struct parser *ps, minfer_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    errf(ps->err, ps->err_len, st, "gguf: %s: ", ps->src);
    verrf_append(ps->err, ps->err_len, st, fmt, ap);
    va_end(ap);
    return st;
}

size_t minfer_gguf_scalar_size(enum minfer_gguf_type t)
{
    return gguf_scalar_size((uint32_t)t);
}

const char *minfer_gguf_type_name(enum minfer_gguf_type t)
{
    static const char *const names[] = {"u8",  "i8",   "u16", "i16", "u32", "i32", "f32",
                                        "bool", "str", "arr", "u64", "i64", "f64"};
    if ((unsigned)t < sizeof names / sizeof names[0])
        return names[t];
    return "unknown";
}

/* ---- element types ---- */

bool minfer_gguf_tensor_type_readable(uint32_t type)
{
    switch (type) {
    case MINFER_TYPE_F32: case MINFER_TYPE_F16: case MINFER_TYPE_BF16:
    case MINFER_TYPE_Q4_0: case MINFER_TYPE_Q4_1: case MINFER_TYPE_Q5_0:
    case MINFER_TYPE_Q5_1: case MINFER_TYPE_Q8_0: case MINFER_TYPE_Q8_1:
    case MINFER_TYPE_Q4_K: case MINFER_TYPE_Q5_K: case MINFER_TYPE_Q6_K:
    case MINFER_TYPE_Q8_K:
    case MINFER_TYPE_I8: case MINFER_TYPE_I16: case MINFER_TYPE_I32:
    case MINFER_TYPE_I64: case MINFER_TYPE_F64:
        return true;
    default:
        return false;
    }
}

/* ---- cursor ---- */

static uint64_t left(const struct parser *ps)
{
    return ps->size - ps->pos;
}

/* Refuses a field of `need` bytes that the file cuts off. */
static minfer_status need_bytes(struct parser *ps, const struct where *w, const char *field,
                                unsigned need)
{
    if (left(ps) >= need)
        return MINFER_OK;
    char ws[384];
    where_str(w, ws, sizeof ws);
    return perr(ps, MINFER_ERR_FORMAT,
                "%s %s at offset 0x%" PRIx64 " is cut off: needs %u bytes, the file has %" PRIu64
                " left",
                ws, field, ps->pos, need, left(ps));
}

/* Reads a u32/u64 field, refusing a cut-off file. */
static minfer_status take_u32(struct parser *ps, const struct where *w, const char *field,
                              uint32_t *v)
{
    minfer_status st = need_bytes(ps, w, field, 4);
    if (st)
        return st;
    *v = gguf_rd_u32(ps->p + ps->pos);
    ps->pos += 4;
    return MINFER_OK;
}

static minfer_status take_u64(struct parser *ps, const struct where *w, const char *field,
                              uint64_t *v)
{
    minfer_status st = need_bytes(ps, w, field, 8);
    if (st)
        return st;
    *v = gguf_rd_u64(ps->p + ps->pos);
    ps->pos += 8;
    return MINFER_OK;
}

/* Reads a length-prefixed string of at most cap bytes. */
static minfer_status take_str(struct parser *ps, const struct where *w, const char *field,
                              uint64_t cap, const uint8_t **s, uint64_t *len)
{
    uint64_t at = ps->pos, n = 0;
    minfer_status st = take_u64(ps, w, field, &n);
    if (st)
        return st;
    if (n > left(ps) || n > cap) {
        char ws[384];
        where_str(w, ws, sizeof ws);
        if (n > left(ps))
            return perr(ps, MINFER_ERR_FORMAT,
                        "%s %s %" PRIu64 " at offset 0x%" PRIx64
                        " exceeds the %" PRIu64 " bytes left in the file",
                        ws, field, n, at, left(ps));
        return perr(ps, MINFER_ERR_FORMAT,
                    "%s %s %" PRIu64 " at offset 0x%" PRIx64 " exceeds this reader's limit of %" PRIu64
                    " bytes",
                    ws, field, n, at, cap);
    }
    *s = ps->p + ps->pos;
    *len = n;
    ps->pos += n;
    return MINFER_OK;
}

/* A key or tensor name: non-empty, no NUL inside. */
static minfer_status take_name(struct parser *ps, const struct where *w, const char *field,
                               uint64_t cap, const uint8_t **s, uint64_t *len)
{
    uint64_t at = ps->pos;
    minfer_status st = take_str(ps, w, field, cap, s, len);
    if (st)
        return st;
    char ws[384];
    if (*len == 0) {
        where_str(w, ws, sizeof ws);
        return perr(ps, MINFER_ERR_FORMAT, "%s has an empty name at offset 0x%" PRIx64, ws, at);
    }
    const void *nul = memchr(*s, 0, *len);
    if (nul) {
        struct where w2 = *w;
        w2.name = *s;
        w2.name_len = *len;
        where_str(&w2, ws, sizeof ws);
        return perr(ps, MINFER_ERR_FORMAT,
                    "%s name at offset 0x%" PRIx64 " holds a NUL byte at offset 0x%" PRIx64, ws, at,
                    (uint64_t)((const uint8_t *)nul - ps->p));
    }
    return MINFER_OK;
}

/* ---- metadata ---- */

/* Validates an array of strings twice over: first every length (no
 * allocation), then it builds the offset index, so a lying count can
 * cost at most the bytes the file really holds. */
static minfer_status take_str_array(struct parser *ps, struct where *w, struct gguf_kv *kv)
{
    uint64_t start = ps->pos;
    minfer_status st;
    for (uint64_t j = 0; j < kv->n; j++) {
        const uint8_t *s;
        uint64_t len;
        w->elem = (int64_t)j;
        if ((st = take_str(ps, w, "string length", GGUF_MAX_STRING_LEN, &s, &len)))
            return st;
    }
    w->elem = -1;
    if (kv->n) {
        kv->str_index = malloc(kv->n * sizeof *kv->str_index);
        if (!kv->str_index)
            return perr(ps, MINFER_ERR_NO_MEMORY, "no memory for the index of %" PRIu64 " strings",
                        kv->n);
    }
    uint64_t o = 0;
    for (uint64_t j = 0; j < kv->n; j++) {
        kv->str_index[j] = o;
        o += 8 + gguf_rd_u64(ps->p + start + o);
    }
    return MINFER_OK;
}

static minfer_status take_value(struct parser *ps, struct where *w, struct gguf_kv *kv)
{
    char ws[384];
    minfer_status st;
    uint64_t type_at = ps->pos;
    if ((st = take_u32(ps, w, "value type", &kv->type)))
        return st;
    kv->off = ps->pos;
    if (kv->type == MINFER_GGUF_STRING) {
        const uint8_t *s;
        if ((st = take_str(ps, w, "string length", GGUF_MAX_STRING_LEN, &s, &kv->n)))
            return st;
        kv->data = s;
    } else if (kv->type == MINFER_GGUF_ARRAY) {
        uint64_t et_at = ps->pos, n_at;
        if ((st = take_u32(ps, w, "array element type", &kv->elem_type)))
            return st;
        n_at = ps->pos;
        if ((st = take_u64(ps, w, "array length", &kv->n)))
            return st;
        where_str(w, ws, sizeof ws);
        if (kv->elem_type == MINFER_GGUF_ARRAY)
            return perr(ps, MINFER_ERR_UNSUPPORTED,
                        "%s is an array of arrays (element type 9 at offset 0x%" PRIx64
                        "), which this reader does not take",
                        ws, et_at);
        uint32_t esz = gguf_scalar_size(kv->elem_type);
        if (kv->elem_type != MINFER_GGUF_STRING && esz == 0)
            return perr(ps, MINFER_ERR_FORMAT,
                        "%s array element type %" PRIu32 " at offset 0x%" PRIx64
                        " is not a GGUF type (0..12)",
                        ws, kv->elem_type, et_at);
        uint64_t min_el = esz ? esz : 8; /* a string takes at least its length */
        if (kv->n > left(ps) / min_el)
            return perr(ps, MINFER_ERR_FORMAT,
                        "%s array length %" PRIu64 " at offset 0x%" PRIx64 " of %s needs %s%" PRIu64
                        " bytes per element but only %" PRIu64 " bytes are left in the file",
                        ws, kv->n, n_at, minfer_gguf_type_name(kv->elem_type),
                        esz ? "" : "at least ", min_el, left(ps));
        kv->data = ps->p + ps->pos;
        if (esz)
            ps->pos += kv->n * esz;
        else if ((st = take_str_array(ps, w, kv)))
            return st;
    } else {
        uint32_t esz = gguf_scalar_size(kv->type);
        if (esz == 0) {
            where_str(w, ws, sizeof ws);
            return perr(ps, MINFER_ERR_FORMAT,
                        "%s value type %" PRIu32 " at offset 0x%" PRIx64 " is not a GGUF type (0..12)",
                        ws, kv->type, type_at);
        }
        char field[32];
        snprintf(field, sizeof field, "%s value", minfer_gguf_type_name(kv->type));
        if ((st = need_bytes(ps, w, field, esz)))
            return st;
        kv->data = ps->p + ps->pos;
        kv->n = 1;
        ps->pos += esz;
    }
    kv->raw_len = ps->pos - kv->off;
    return MINFER_OK;
}

/* Grows an array as entries are really parsed (never by the file's claim). */
static bool grow(void **arr, int64_t *cap, int64_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    int64_t nc = *cap ? *cap * 2 : 64;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, (size_t)nc * elem);
    if (!p)
        return false;
    memset((char *)p + (size_t)*cap * elem, 0, (size_t)(nc - *cap) * elem);
    *arr = p;
    *cap = nc;
    return true;
}

static minfer_status take_kvs(struct parser *ps, uint64_t n_kv)
{
    struct minfer_gguf *g = ps->g;
    int64_t cap = 0;
    minfer_status st;
    for (uint64_t i = 0; i < n_kv; i++) {
        if (!grow((void **)&g->kv, &cap, (int64_t)i + 1, sizeof *g->kv))
            return perr(ps, MINFER_ERR_NO_MEMORY, "no memory for %" PRIu64 " keys", i + 1);
        struct gguf_kv *kv = &g->kv[i];
        g->n_kv = (int64_t)i + 1;
        struct where w = {"key", (int64_t)i, NULL, 0, -1};
        if ((st = take_name(ps, &w, "name length", GGUF_MAX_KEY_LEN, &kv->kraw, &kv->klen)))
            return st;
        w.name = kv->kraw;
        w.name_len = kv->klen;
        if ((st = take_value(ps, &w, kv)))
            return st;
    }
    return MINFER_OK;
}

/* ---- tensor infos ---- */

static minfer_status take_tensor(struct parser *ps, int64_t i)
{
    struct minfer_gguf *g = ps->g;
    struct minfer_gguf_tensor *t = &g->tensors[i];
    struct gguf_tinfo *ti = &g->tinfo[i];
    struct where w = {"tensor", i, NULL, 0, -1};
    char ws[384];
    minfer_status st;
    ti->info_off = ps->pos;
    if ((st = take_name(ps, &w, "name length", GGUF_MAX_NAME_LEN, &ti->nraw, &ti->nlen)))
        return st;
    w.name = ti->nraw;
    w.name_len = ti->nlen;
    uint64_t at = ps->pos;
    if ((st = take_u32(ps, &w, "n_dims", &t->n_dims)))
        return st;
    if (t->n_dims < 1 || t->n_dims > MINFER_MAX_DIMS) {
        where_str(&w, ws, sizeof ws);
        return perr(ps, MINFER_ERR_FORMAT,
                    "%s n_dims %" PRIu32 " at offset 0x%" PRIx64 " is outside 1..%d", ws, t->n_dims,
                    at, MINFER_MAX_DIMS);
    }
    for (int d = 0; d < MINFER_MAX_DIMS; d++)
        t->ne[d] = 1;
    uint64_t nel = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t v = 0;
        at = ps->pos;
        if ((st = take_u64(ps, &w, "dimension", &v)))
            return st;
        where_str(&w, ws, sizeof ws);
        if (v == 0 || v > (uint64_t)INT64_MAX)
            return perr(ps, MINFER_ERR_FORMAT,
                        "%s ne[%" PRIu32 "] = %" PRId64 " at offset 0x%" PRIx64
                        " is not a positive element count",
                        ws, d, (int64_t)v, at);
        if (nel > (uint64_t)INT64_MAX / v)
            return perr(ps, MINFER_ERR_FORMAT,
                        "%s shape overflows: the element count passes 2^63 at ne[%" PRIu32
                        "] = %" PRIu64 " (offset 0x%" PRIx64 ")",
                        ws, d, v, at);
        nel *= v;
        t->ne[d] = (int64_t)v;
    }
    at = ps->pos;
    if ((st = take_u32(ps, &w, "type", &t->type)))
        return st;
    where_str(&w, ws, sizeof ws);
    const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
    if (!tr)
        return perr(ps, MINFER_ERR_FORMAT,
                    "%s type id %" PRIu32 " at offset 0x%" PRIx64 " is not a GGUF tensor type", ws,
                    t->type, at);
    if (!minfer_gguf_tensor_type_readable(t->type) && !(ps->flags & MINFER_GGUF_OPEN_ANY_TYPE)) {
        char nm[256];
        show(ti->nraw, ti->nlen, nm, sizeof nm);
        return perr(ps, MINFER_ERR_UNSUPPORTED,
                    "tensor '%s' has type %s (%" PRIu32 "), which this build does not read", nm,
                    tr->name, t->type);
    }
    if ((uint64_t)t->ne[0] % tr->block_size)
        return perr(ps, MINFER_ERR_FORMAT,
                    "%s ne[0] = %" PRId64 " is not a multiple of %s's block size %" PRIu32, ws,
                    t->ne[0], tr->name, tr->block_size);
    uint64_t blocks = nel / tr->block_size;
    if (blocks > (uint64_t)INT64_MAX / tr->type_size)
        return perr(ps, MINFER_ERR_FORMAT,
                    "%s byte size overflows: %" PRIu64 " elements of %s do not fit in 2^63 bytes",
                    ws, nel, tr->name);
    t->size = blocks * tr->type_size;
    ti->off_field = ps->pos;
    if ((st = take_u64(ps, &w, "data offset", &ti->rel_off)))
        return st;
    return MINFER_OK;
}

/* ---- names and lookup ---- */

static uint64_t hash_bytes(const void *p, size_t n)
{
    const uint8_t *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 1099511628211ull;
    return h;
}

static int64_t *hash_new(int64_t n, uint64_t *mask)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap *= 2;
    int64_t *h = malloc(cap * sizeof *h);
    if (h)
        memset(h, 0xff, cap * sizeof *h); /* -1 */
    *mask = cap - 1;
    return h;
}

/* Copies every key and tensor name into one arena, indexes them and
 * refuses duplicates. */
static minfer_status index_names(struct parser *ps)
{
    struct minfer_gguf *g = ps->g;
    uint64_t total = 0;
    for (int64_t i = 0; i < g->n_kv; i++)
        total += g->kv[i].klen + 1;
    for (int64_t i = 0; i < g->n_tensors; i++)
        total += g->tinfo[i].nlen + 1;
    g->names = malloc(total ? total : 1);
    g->kv_hash = hash_new(g->n_kv, &g->kv_mask);
    g->t_hash = hash_new(g->n_tensors, &g->t_mask);
    if (!g->names || !g->kv_hash || !g->t_hash)
        return perr(ps, MINFER_ERR_NO_MEMORY, "no memory for %" PRIu64 " bytes of names", total);
    char *o = g->names;
    char nm[256];
    for (int64_t i = 0; i < g->n_kv; i++) {
        struct gguf_kv *kv = &g->kv[i];
        memcpy(o, kv->kraw, kv->klen);
        o[kv->klen] = '\0';
        kv->key = o;
        o += kv->klen + 1;
        uint64_t h = hash_bytes(kv->key, kv->klen) & g->kv_mask;
        while (g->kv_hash[h] >= 0) {
            struct gguf_kv *e = &g->kv[g->kv_hash[h]];
            if (e->klen == kv->klen && !memcmp(e->key, kv->key, kv->klen)) {
                show(kv->kraw, kv->klen, nm, sizeof nm);
                return perr(ps, MINFER_ERR_FORMAT,
                            "key #%" PRId64 " ('%s') at offset 0x%" PRIx64
                            " repeats key #%" PRId64,
                            i, nm, (uint64_t)(kv->kraw - 8 - ps->p), g->kv_hash[h]);
            }
            h = (h + 1) & g->kv_mask;
        }
        g->kv_hash[h] = i;
    }
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct gguf_tinfo *ti = &g->tinfo[i];
        struct minfer_gguf_tensor *t = &g->tensors[i];
        memcpy(o, ti->nraw, ti->nlen);
        o[ti->nlen] = '\0';
        t->name = o;
        o += ti->nlen + 1;
        uint64_t h = hash_bytes(t->name, ti->nlen) & g->t_mask;
        while (g->t_hash[h] >= 0) {
            int64_t e = g->t_hash[h];
            if (g->tinfo[e].nlen == ti->nlen && !memcmp(g->tensors[e].name, t->name, ti->nlen)) {
                show(ti->nraw, ti->nlen, nm, sizeof nm);
                return perr(ps, MINFER_ERR_FORMAT,
                            "tensor #%" PRId64 " ('%s') at offset 0x%" PRIx64
                            " repeats the name of tensor #%" PRId64,
                            i, nm, ti->info_off, e);
            }
            h = (h + 1) & g->t_mask;
        }
        g->t_hash[h] = i;
    }
    return MINFER_OK;
}

int64_t minfer_gguf_find_key(const struct minfer_gguf *g, const char *key)
{
    if (!g || !key)
        return -1;
    size_t n = strlen(key);
    for (uint64_t h = hash_bytes(key, n) & g->kv_mask; g->kv_hash[h] >= 0;
         h = (h + 1) & g->kv_mask) {
        const struct gguf_kv *e = &g->kv[g->kv_hash[h]];
        if (e->klen == n && !memcmp(e->key, key, n))
            return g->kv_hash[h];
    }
    return -1;
}

const struct minfer_gguf_tensor *minfer_gguf_find_tensor(const struct minfer_gguf *g,
                                                         const char *name)
{
    if (!g || !name)
        return NULL;
    size_t n = strlen(name);
    for (uint64_t h = hash_bytes(name, n) & g->t_mask; g->t_hash[h] >= 0;
         h = (h + 1) & g->t_mask) {
        const struct minfer_gguf_tensor *t = &g->tensors[g->t_hash[h]];
        if (!strcmp(t->name, name))
            return t;
    }
    return NULL;
}

/* ---- layout ---- */

static minfer_status take_alignment(struct parser *ps)
{
    struct minfer_gguf *g = ps->g;
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    int64_t i = minfer_gguf_find_key(g, GGUF_ALIGNMENT_KEY);
    if (i < 0)
        return MINFER_OK;
    const struct gguf_kv *kv = &g->kv[i];
    if (kv->type != MINFER_GGUF_UINT32)
        return perr(ps, MINFER_ERR_FORMAT,
                    "key #%" PRId64 " ('" GGUF_ALIGNMENT_KEY "') at offset 0x%" PRIx64
                    " has type %s, expected u32",
                    i, kv->off - 4, minfer_gguf_type_name(kv->type));
    uint32_t a = gguf_rd_u32(kv->data);
    if (a == 0 || (a & (a - 1)))
        return perr(ps, MINFER_ERR_FORMAT,
                    "key #%" PRId64 " ('" GGUF_ALIGNMENT_KEY "') value %" PRIu32
                    " at offset 0x%" PRIx64 " is not a non-zero power of two",
                    i, a, kv->off);
    g->alignment = a;
    return MINFER_OK;
}

static minfer_status place_tensors(struct parser *ps)
{
    struct minfer_gguf *g = ps->g;
    uint64_t a = g->alignment, end = ps->pos;
    uint64_t pad = (a - end % a) % a;
    if (pad > UINT64_MAX - end)
        return perr(ps, MINFER_ERR_FORMAT, "data section offset overflows");
    g->data_offset = end + pad;
    if (g->n_tensors > 0 && g->data_offset > g->size)
        return perr(ps, MINFER_ERR_FORMAT,
                    "the data section would start at offset 0x%" PRIx64
                    " (tensor infos end at 0x%" PRIx64 ", alignment %" PRIu64
                    "), past the end of the %" PRIu64 "-byte file",
                    g->data_offset, end, a, g->size);
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct minfer_gguf_tensor *t = &g->tensors[i];
        const struct gguf_tinfo *ti = &g->tinfo[i];
        if (ti->rel_off % a)
            return perr(ps, MINFER_ERR_FORMAT,
                        "tensor #%" PRId64 " ('%s') data offset %" PRIu64 " at offset 0x%" PRIx64
                        " is not a multiple of the alignment %" PRIu64,
                        i, t->name, ti->rel_off, ti->off_field, a);
        uint64_t room = g->size - g->data_offset;
        if (ti->rel_off > room || t->size > room - ti->rel_off)
            return perr(ps, MINFER_ERR_FORMAT,
                        "tensor #%" PRId64 " ('%s') data offset %" PRIu64 " at offset 0x%" PRIx64
                        " with %" PRIu64 " bytes ends past the end of the file (the data section"
                        " at 0x%" PRIx64 " holds %" PRIu64 " bytes)",
                        i, t->name, ti->rel_off, ti->off_field, t->size, g->data_offset, room);
        t->offset = g->data_offset + ti->rel_off;
        t->data = g->base + t->offset;
    }
    return MINFER_OK;
}

/* ---- open ---- */

static minfer_status take_header(struct parser *ps, uint64_t *n_tensors, uint64_t *n_kv)
{
    struct minfer_gguf *g = ps->g;
    const uint8_t *p = ps->p;
    if (ps->size < 4 || memcmp(p, "GGUF", 4)) {
        char m[64];
        if (ps->size >= 4 && !memcmp(p, "FUGG", 4))
            return perr(ps, MINFER_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
        show(p, ps->size < 4 ? ps->size : 4, m, sizeof m);
        return perr(ps, MINFER_ERR_FORMAT,
                    "not a GGUF file: magic '%s' at offset 0x0, expected 'GGUF'", m);
    }
    if (ps->size < GGUF_HEADER_BYTES)
        return perr(ps, MINFER_ERR_FORMAT,
                    "the file is %" PRIu64 " bytes, too short for the %u-byte GGUF header",
                    ps->size, GGUF_HEADER_BYTES);
    uint32_t v = gguf_rd_u32(p + 4);
    uint32_t swapped = __builtin_bswap32(v);
    if (v == 1)
        return perr(ps, MINFER_ERR_UNSUPPORTED,
                    "GGUF version 1 (at offset 0x4) is the 2023 draft format; this build reads"
                    " versions 2 and 3: convert the model again");
    if (v != 2 && v != 3) {
        if (swapped >= 1 && swapped <= 3)
            return perr(ps, MINFER_ERR_UNSUPPORTED,
                        "big-endian GGUF files are not supported (version field at offset 0x4"
                        " reads %" PRIu32 " byte-swapped)",
                        swapped);
        return perr(ps, MINFER_ERR_UNSUPPORTED,
                    "GGUF version %" PRIu32 " at offset 0x4; this build reads versions 2 and 3", v);
    }
    g->version = v;
    *n_tensors = gguf_rd_u64(p + 8);
    *n_kv = gguf_rd_u64(p + 16);
    ps->pos = GGUF_HEADER_BYTES;
    uint64_t rest = left(ps);
    if (*n_kv > rest / GGUF_MIN_KV_BYTES)
        return perr(ps, MINFER_ERR_FORMAT,
                    "key/value count %" PRIu64 " at offset 0x10 is more than the %" PRIu64
                    " bytes left could hold (each takes at least %u)",
                    *n_kv, rest, GGUF_MIN_KV_BYTES);
    if (*n_tensors > rest / GGUF_MIN_TENSOR_INFO_BYTES ||
        *n_tensors * GGUF_MIN_TENSOR_INFO_BYTES > rest - *n_kv * GGUF_MIN_KV_BYTES)
        return perr(ps, MINFER_ERR_FORMAT,
                    "tensor count %" PRIu64 " at offset 0x8 is more than the %" PRIu64
                    " bytes left could hold (each tensor info takes at least %u, and %" PRIu64
                    " keys come first)",
                    *n_tensors, rest, GGUF_MIN_TENSOR_INFO_BYTES, *n_kv);
    return MINFER_OK;
}

static minfer_status parse(struct parser *ps)
{
    struct minfer_gguf *g = ps->g;
    uint64_t n_tensors = 0, n_kv = 0;
    minfer_status st;
    if ((st = take_header(ps, &n_tensors, &n_kv)))
        return st;
    if ((st = take_kvs(ps, n_kv)))
        return st;
    int64_t cap_t = 0, cap_i = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        if (!grow((void **)&g->tensors, &cap_t, (int64_t)i + 1, sizeof *g->tensors) ||
            !grow((void **)&g->tinfo, &cap_i, (int64_t)i + 1, sizeof *g->tinfo))
            return perr(ps, MINFER_ERR_NO_MEMORY, "no memory for %" PRIu64 " tensors", i + 1);
        if ((st = take_tensor(ps, (int64_t)i)))
            return st;
        g->n_tensors = (int64_t)i + 1;
    }
    if ((st = index_names(ps)))
        return st;
    if ((st = take_alignment(ps)))
        return st;
    return place_tensors(ps);
}

static void free_handle(struct minfer_gguf *g)
{
    if (!g)
        return;
    for (int64_t i = 0; i < g->n_kv; i++)
        free(g->kv[i].str_index);
    free(g->kv);
    free(g->tensors);
    free(g->tinfo);
    free(g->names);
    free(g->kv_hash);
    free(g->t_hash);
    if (g->mapped)
        munmap((void *)g->base, (size_t)g->size);
    free(g);
}

static struct minfer_gguf *open_bytes(const void *data, uint64_t size, bool mapped,
                                      const char *src, uint32_t flags, minfer_status *st,
                                      char *err, size_t err_len)
{
    struct parser ps = {NULL, data, size, 0, src, flags, err, err_len};
    minfer_status s;
    struct minfer_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        s = perr(&ps, MINFER_ERR_NO_MEMORY, "no memory for the file handle");
        if (mapped)
            munmap((void *)data, (size_t)size);
        goto out;
    }
    g->base = data;
    g->size = size;
    g->mapped = mapped;
    ps.g = g;
    if ((s = parse(&ps))) {
        free_handle(g);
        g = NULL;
        goto out;
    }
    free(g->tinfo);
    g->tinfo = NULL;
    if (err && err_len)
        err[0] = '\0';
out:
    if (st)
        *st = s;
    return g;
}

struct minfer_gguf *minfer_gguf_open_memory(const void *data, size_t size, minfer_status *st,
                                            char *err, size_t err_len)
{
    return minfer_gguf_open_memory_flags(data, size, 0, st, err, err_len);
}

struct minfer_gguf *minfer_gguf_open_memory_flags(const void *data, size_t size, uint32_t flags,
                                                  minfer_status *st, char *err, size_t err_len)
{
    if (!data && size) {
        struct parser ps = {NULL, NULL, 0, 0, "<memory>", 0, err, err_len};
        minfer_status s = perr(&ps, MINFER_ERR_INVALID_ARG, "NULL data with size %zu", size);
        if (st)
            *st = s;
        return NULL;
    }
    return open_bytes(data ? data : "", size, false, "<memory>", flags, st, err, err_len);
}

struct minfer_gguf *minfer_gguf_open(const char *path, minfer_status *st, char *err,
                                     size_t err_len)
{
    return minfer_gguf_open_flags(path, 0, st, err, err_len);
}

struct minfer_gguf *minfer_gguf_open_flags(const char *path, uint32_t flags, minfer_status *st,
                                           char *err, size_t err_len)
{
    struct parser ps = {NULL, NULL, 0, 0, path ? path : "(null)", flags, err, err_len};
    minfer_status s;
    struct stat sb;
    void *map;
    int fd;
    if (!path) {
        s = perr(&ps, MINFER_ERR_INVALID_ARG, "no path given");
        goto fail;
    }
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        s = perr(&ps, MINFER_ERR_IO, "cannot open: %s", strerror(errno));
        goto fail;
    }
    if (fstat(fd, &sb) < 0) {
        s = perr(&ps, MINFER_ERR_IO, "cannot stat: %s", strerror(errno));
        goto out_close;
    }
    if (!S_ISREG(sb.st_mode)) {
        s = perr(&ps, MINFER_ERR_IO, "not a regular file");
        goto out_close;
    }
    if (sb.st_size == 0) {
        s = perr(&ps, MINFER_ERR_FORMAT, "the file is empty, not a GGUF file");
        goto out_close;
    }
    if ((uint64_t)sb.st_size > SIZE_MAX) {
        s = perr(&ps, MINFER_ERR_UNSUPPORTED, "the file is too large to map on this system");
        goto out_close;
    }
    map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
        s = perr(&ps, MINFER_ERR_IO, "cannot map %lld bytes: %s", (long long)sb.st_size,
                 strerror(errno));
        goto out_close;
    }
    close(fd);
    return open_bytes(map, (uint64_t)sb.st_size, true, path, flags, st, err, err_len);

out_close:
    close(fd);
fail:
    if (st)
        *st = s;
    return NULL;
}

void minfer_gguf_close(struct minfer_gguf *g)
{
    free_handle(g);
}

