/*
 * session.c — saving and loading one sequence (its tokens and KV cells)
 * as a session file (layout: session-format.h). Save builds the whole
 * file in memory, writes it to a temporary file next to the target and
 * renames it over the target, so a reader never sees half a file. Load
 * reads and checks everything — format, checksum, the model's fingerprint,
 * the KV types and layout, room in the cache — before it changes any
 * state, and never writes to the file.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "context.h"
#include "runtime/error.h"
#include "runtime/outfile.h"
#include "session-format.h"

/* ---- the model's fingerprint ---- */

/* XXH3-64 of every weight's name, type and shape, and of every metadata
 * key with its type and value. */
static minfer_status fingerprint(const struct minfer_model *m, uint64_t *tensors, uint64_t *meta)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st)
        return MINFER_ERR_NO_MEMORY;
    XXH3_64bits_reset(st);
    for (int32_t i = 0; i < m->n_weights; i++) {
        const struct minfer_gguf_tensor *t = m->weights[i].gt;
        XXH3_64bits_update(st, t->name, strlen(t->name) + 1);
        XXH3_64bits_update(st, &t->type, sizeof t->type);
        XXH3_64bits_update(st, t->ne, sizeof t->ne);
    }
    *tensors = XXH3_64bits_digest(st);
    XXH3_64bits_reset(st);
    const struct minfer_gguf *g = m->gguf;
    for (int64_t i = 0; i < minfer_gguf_kv_count(g); i++) {
        const char *key = minfer_gguf_kv_key(g, i);
        enum minfer_gguf_type t = minfer_gguf_kv_type(g, i);
        XXH3_64bits_update(st, key, strlen(key) + 1);
        XXH3_64bits_update(st, &t, sizeof t);
        if (t == MINFER_GGUF_ARRAY) {
            enum minfer_gguf_type et;
            uint64_t n = 0;
            const void *data = NULL;
            if (minfer_gguf_kv_arr(g, i, &et, &n, &data) != MINFER_OK)
                continue;
            XXH3_64bits_update(st, &et, sizeof et);
            XXH3_64bits_update(st, &n, sizeof n);
            if (et == MINFER_GGUF_STRING) {
                for (uint64_t j = 0; j < n; j++) {
                    const char *s;
                    size_t len;
                    if (minfer_gguf_kv_arr_str(g, i, j, &s, &len) == MINFER_OK) {
                        XXH3_64bits_update(st, &len, sizeof len);
                        XXH3_64bits_update(st, s, len);
                    }
                }
            } else if (data) {
                XXH3_64bits_update(st, data, (size_t)n * minfer_gguf_scalar_size(et));
            }
        } else {
            const void *data = NULL;
            size_t len = 0;
            if (minfer_gguf_kv_scalar(g, i, &data, &len) != MINFER_OK || !data)
                continue;
            if (t != MINFER_GGUF_STRING)
                len = minfer_gguf_scalar_size(t);
            XXH3_64bits_update(st, &len, sizeof len);
            XXH3_64bits_update(st, data, len);
        }
    }
    *meta = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return MINFER_OK;
}

/* The header a file of this context's sequence would carry. */
static minfer_status header_of(struct minfer_ctx *c, uint32_t n_tokens, uint32_t n_cells,
                               struct session_header *h)
{
    const struct kv_cache *kv = &c->kv;
    memset(h, 0, sizeof *h);
    h->version = SESSION_VERSION;
    if (fingerprint(c->m, &h->model_tensors, &h->model_meta) != MINFER_OK)
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "out of memory");
    h->n_tensors = (uint32_t)c->m->n_weights;
    h->type_k = kv->type_k;
    h->type_v = kv->type_v;
    h->n_layer = (uint32_t)kv->n_layer;
    h->row_k = (uint64_t)kv->row_k;
    h->row_v = (uint64_t)kv->row_v;
    h->row_bytes_k = kv->row_bytes_k;
    h->row_bytes_v = kv->row_bytes_v;
    h->n_tokens = n_tokens;
    h->n_cells = n_cells;
    h->payload_bytes = session_payload_bytes(h);
    return MINFER_OK;
}

/* Rows of cells[0 .. n) between the cache and rows (per layer K then V,
 * as the file holds them), one transfer per run of consecutive cells. */
static minfer_status copy_rows(struct minfer_ctx *c, const uint32_t *cells, uint32_t n,
                               uint8_t *rows, bool to_dev)
{
    const struct kv_cache *kv = &c->kv;
    const struct minfer_backend_iface *it = c->sb.plugin->iface;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        for (int kind = 0; kind < 2; kind++) {
            size_t rb = kind ? kv->row_bytes_v : kv->row_bytes_k;
            char *base = kind ? kv_v(kv, il) : kv_k(kv, il);
            for (uint32_t i = 0; i < n;) {
                uint32_t j = i + 1;
                while (j < n && cells[j] == cells[j - 1] + 1)
                    j++;
                char *dev = base + (size_t)cells[i] * rb;
                uint8_t *host = rows + (size_t)i * rb;
                minfer_status st = to_dev ? it->buffer_write(c->sb.be, dev, host, (j - i) * rb)
                                          : it->buffer_read(c->sb.be, host, dev, (j - i) * rb);
                if (st != MINFER_OK)
                    return plugin_fail(c->sb.plugin, c->sb.be, st,
                                       to_dev ? "buffer_write of session KV rows"
                                              : "buffer_read of session KV rows",
                                       c->err, sizeof c->err);
                i = j;
            }
            rows += (size_t)n * rb;
        }
    }
    return MINFER_OK;
}

/* ---- save ---- */

/* Through core/runtime/outfile.c: a regular file or a new name (devices,
 * FIFOs and directories refused, a symlink's target written), an unnamed
 * temporary linked in only when complete. */
static minfer_status write_file(struct minfer_ctx *c, const char *path, const uint8_t *data,
                                size_t n)
{
    struct outfile of;
    char why[512];
    minfer_status st = outfile_open(&of, path, why, sizeof why);
    if (st != MINFER_OK)
        return errf(c->err, sizeof c->err, st, "session %s: %s", path, why);
    size_t done = 0;
    while (done < n) {
        ssize_t w = write(of.fd, data + done, n - done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            break;
        done += (size_t)w;
    }
    if (done < n) {
        int e = errno ? errno : EIO;
        outfile_abort(&of);
        return errf(c->err, sizeof c->err, MINFER_ERR_IO, "session %s: write failed: %s", path,
                    strerror(e));
    }
    if ((st = outfile_commit(&of, why, sizeof why)) != MINFER_OK)
        return errf(c->err, sizeof c->err, st, "session %s: %s", path, why);
    return MINFER_OK;
}

minfer_status minfer_ctx_seq_save(struct minfer_ctx *c, int32_t seq, const char *path,
                                  const int32_t *tokens, int32_t n_tokens)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    c->err[0] = 0;
    if (seq < 0 || seq >= c->kv.n_seq || !path || n_tokens < 0 || (n_tokens && !tokens)) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "seq_save: sequence %d (of 0..%d), path %s, %d tokens", seq,
                    c->kv.n_seq - 1, path ? path : "(null)", n_tokens);
    }
    const struct kv_seq *q = &c->kv.seqs[seq];
    struct session_header h;
    minfer_status st = header_of(c, (uint32_t)n_tokens, (uint32_t)q->n, &h);
    if (st != MINFER_OK)
        return st;
    if (h.payload_bytes > SIZE_MAX - SESSION_HEADER_BYTES)
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE, "session %s: too large", path);
    size_t total = SESSION_HEADER_BYTES + (size_t)h.payload_bytes;
    uint8_t *buf = malloc(total);
    if (!buf) {
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                    "out of memory for a %zu-byte session", total);
    }
    uint8_t *pay = buf + SESSION_HEADER_BYTES;
    if (n_tokens)
        memcpy(pay, tokens, 4u * (size_t)n_tokens);
    memcpy(pay + 4u * (size_t)n_tokens, q->pos, 4u * (size_t)q->n);
    st = copy_rows(c, q->cell, (uint32_t)q->n, pay + 4u * ((size_t)n_tokens + (size_t)q->n),
                   false);
    if (st == MINFER_OK) {
        session_header_write(&h, pay, buf);
        st = write_file(c, path, buf, total);
    }
    free(buf);
    return st;
}

/* ---- load ---- */

static minfer_status read_file(struct minfer_ctx *c, const char *path, uint8_t **out, size_t *n)
{
    /* O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused
     * below like every other file that is not a regular one */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        return errf(c->err, sizeof c->err, errno == ENOENT ? MINFER_ERR_NOT_FOUND : MINFER_ERR_IO,
                    "session %s: %s", path, strerror(errno));
    }
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return errf(c->err, sizeof c->err, MINFER_ERR_IO, "session %s: not a regular file", path);
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY, "session %s: %s", path,
                    strerror(errno));
    }
    size_t size = (size_t)sb.st_size;
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf) {
        fclose(f);
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                    "session %s: out of memory for %zu bytes", path, size);
    }
    size_t got = fread(buf, 1, size, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || got != size) {
        free(buf);
        return errf(c->err, sizeof c->err, MINFER_ERR_IO, "session %s: read %zu of %zu bytes",
                    path, got, size);
    }
    *out = buf;
    *n = size;
    return MINFER_OK;
}

/* The parsed file fits this context (same model, KV types and layout). */
static minfer_status check_match(struct minfer_ctx *c, const char *path,
                                 const struct session_header *f)
{
    struct session_header h;
    minfer_status st = header_of(c, 0, 0, &h);
    if (st != MINFER_OK)
        return st;
    if (f->model_tensors != h.model_tensors || f->n_tensors != h.n_tensors) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "session %s was saved from another model (%u tensors, fingerprint %016llx; "
                    "this model has %u, %016llx)", path, f->n_tensors,
                    (unsigned long long)f->model_tensors, h.n_tensors,
                    (unsigned long long)h.model_tensors);
    }
    if (f->model_meta != h.model_meta) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "session %s was saved from a model with the same tensors but other metadata "
                    "(hash %016llx, this model's %016llx)", path,
                    (unsigned long long)f->model_meta, (unsigned long long)h.model_meta);
    }
    if (f->type_k != h.type_k || f->type_v != h.type_v) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "session %s holds a %s/%s KV cache; this context's is %s/%s", path,
                    minfer_type_name(f->type_k), minfer_type_name(f->type_v),
                    minfer_type_name(h.type_k), minfer_type_name(h.type_v));
    }
    if (f->n_layer != h.n_layer || f->row_k != h.row_k || f->row_v != h.row_v ||
        f->row_bytes_k != h.row_bytes_k || f->row_bytes_v != h.row_bytes_v) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "session %s has another KV layout: %u layers of %llu/%llu elements "
                    "(%llu/%llu bytes); this context %u of %llu/%llu (%llu/%llu)", path,
                    f->n_layer, (unsigned long long)f->row_k, (unsigned long long)f->row_v,
                    (unsigned long long)f->row_bytes_k, (unsigned long long)f->row_bytes_v,
                    h.n_layer, (unsigned long long)h.row_k, (unsigned long long)h.row_v,
                    (unsigned long long)h.row_bytes_k, (unsigned long long)h.row_bytes_v);
    }
    return MINFER_OK;
}

minfer_status minfer_ctx_seq_load(struct minfer_ctx *c, int32_t seq, const char *path,
                                  int32_t *tokens, int32_t cap, int32_t *n_tokens)
{
    if (!c)
        return MINFER_ERR_INVALID_ARG;
    c->err[0] = 0;
    if (seq < 0 || seq >= c->kv.n_seq || !path || cap < 0 || (cap && !tokens)) {
        return errf(c->err, sizeof c->err, MINFER_ERR_INVALID_ARG,
                    "seq_load: sequence %d (of 0..%d), path %s, room for %d tokens", seq,
                    c->kv.n_seq - 1, path ? path : "(null)", cap);
    }
    uint8_t *buf = NULL;
    size_t size = 0;
    minfer_status st = read_file(c, path, &buf, &size);
    if (st != MINFER_OK)
        return st;
    struct session_view v;
    char why[256];
    st = session_parse(buf, size, &v, why, sizeof why);
    if (st != MINFER_OK) {
        free(buf);
        return errf(c->err, sizeof c->err, st, "session %s: %s", path, why);
    }
    const struct session_header *h = &v.h;
    if ((st = check_match(c, path, h)) != MINFER_OK) {
        free(buf);
        return st;
    }
    struct kv_cache *kv = &c->kv;
    if (h->n_tokens > (uint32_t)cap) {
        free(buf);
        return errf(c->err, sizeof c->err, MINFER_ERR_RANGE,
                    "session %s holds %u tokens; the buffer has room for %d", path, h->n_tokens,
                    cap);
    }
    if (h->n_cells > kv->n_cells - kv->n_used) {
        free(buf);
        return errf(c->err, sizeof c->err, MINFER_ERR_FULL,
                    "KV cache full: session %s needs %u cells for sequence %d, %u of %u are "
                    "free", path, h->n_cells, seq, kv->n_cells - kv->n_used, kv->n_cells);
    }
    uint32_t *cells = malloc(sizeof *cells * ((size_t)h->n_cells + 1));
    if (!cells || !kv_seq_reserve(kv, seq, (int32_t)h->n_cells)) {
        free(cells);
        free(buf);
        return errf(c->err, sizeof c->err, MINFER_ERR_NO_MEMORY,
                    "out of memory loading session %s", path);
    }
    /* rows go to free cells first: a failure leaves the sequence as it was */
    st = kv_pick_free(kv, h->n_cells, cells);
    /* cells below n_clear are zeroed or written: clear past these first so
     * no later clear wipes them (kv_clear_to) */
    if (st == MINFER_OK && h->n_cells)
        st = kv_clear_to(kv, cells[h->n_cells - 1] + 1, c->err, sizeof c->err);
    if (st == MINFER_OK)
        st = copy_rows(c, cells, h->n_cells, (uint8_t *)v.rows, true);
    if (st == MINFER_OK) {
        kv_seq_rm(kv, seq, 0, -1);
        for (uint32_t i = 0; i < h->n_cells; i++) {
            int32_t p;
            memcpy(&p, v.pos + i, sizeof p);
            kv_seq_add(kv, seq, p, cells[i]); /* room reserved above */
        }
        if (h->n_tokens)
            memcpy(tokens, v.tokens, 4u * (size_t)h->n_tokens);
        if (n_tokens)
            *n_tokens = (int32_t)h->n_tokens;
    }
    free(cells);
    free(buf);
    return st;
}
