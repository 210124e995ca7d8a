/*
 * kv.c — the KV cache: one backend buffer with every layer's K and V rows
 * in the context's element type, and the host-side cell table. Cells carry
 * a position and a sequence set so several sequences can share a cache; a
 * single sequence fills cells in position order (cell index == position).
 */
#include "kv.h"
#include "runtime/error.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/quant.h"

/* ---- layout ---- */

bool kv_type_ok(uint32_t type)
{
    return type == MINFER_TYPE_F32 || type == MINFER_TYPE_F16 || type == MINFER_TYPE_Q8_0;
}

static size_t layer_bytes(const struct kv_cache *kv)
{
    return (kv->row_bytes_k + kv->row_bytes_v) * kv->n_cells;
}

void *kv_k(const struct kv_cache *kv, int32_t il)
{
    return (char *)kv->base + layer_bytes(kv) * (size_t)il;
}

void *kv_v(const struct kv_cache *kv, int32_t il)
{
    return (char *)kv_k(kv, il) + kv->row_bytes_k * kv->n_cells;
}

/* ---- lifetime ---- */

minfer_status kv_init(struct kv_cache *kv, const struct minfer_plugin *p,
                      struct minfer_backend *be, int32_t n_layer, int64_t row_k, int64_t row_v,
                      uint32_t n_cells, uint32_t type_k, uint32_t type_v, char *err,
                      size_t err_len)
{
    memset(kv, 0, sizeof *kv);
    if (!kv_type_ok(type_k) || !kv_type_ok(type_v)) {
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "KV cache type %s/%s not supported: use f32, f16 or q8_0",
                    minfer_type_name(type_k), minfer_type_name(type_v));
    }
    size_t rk = minfer_row_size(type_k, row_k), rv = minfer_row_size(type_v, row_v);
    if (!rk || !rv) {
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "KV rows of %lld elements do not split into %s/%s blocks (q8_0 needs a "
                    "multiple of 32); choose another cache type",
                    (long long)row_k, minfer_type_name(type_k), minfer_type_name(type_v));
    }
    if (n_layer < 1 || n_cells < 1) {
        return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                    "KV cache of %d layers and %u cells is empty", n_layer, n_cells);
    }
    kv->plugin = p;
    kv->be = be;
    kv->type_k = type_k;
    kv->type_v = type_v;
    kv->n_layer = n_layer;
    kv->row_k = row_k;
    kv->row_v = row_v;
    kv->row_bytes_k = rk;
    kv->row_bytes_v = rv;
    kv->n_cells = n_cells;
    if ((rk + rv) > SIZE_MAX / n_cells || layer_bytes(kv) > SIZE_MAX / (size_t)n_layer) {
        return errf(err, err_len, MINFER_ERR_RANGE,
                    "KV cache of %u cells x %d layers overflows", n_cells, n_layer);
    }
    kv->size = layer_bytes(kv) * (size_t)n_layer;
    kv->cells = malloc(sizeof *kv->cells * n_cells);
    if (!kv->cells) {
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory for %u KV cells", n_cells);
    }
    for (uint32_t i = 0; i < n_cells; i++)
        kv->cells[i] = (struct kv_cell){-1, 0};
    minfer_status st = p->iface->buffer_alloc(be, kv->size, &kv->base);
    if (st != MINFER_OK) {
        char why[256];
        snprintf(why, sizeof why, "buffer_alloc of the %zu-byte KV cache (%u cells, %s/%s)",
                 kv->size, n_cells, minfer_type_name(type_k), minfer_type_name(type_v));
        plugin_fail(p, be, st, why, err, err_len);
        kv->base = NULL;
        kv_free(kv);
        return st;
    }
    /* Zero the regions so no cell ever holds NaN bits. */
    static const char zeros[1 << 16];
    for (size_t off = 0; off < kv->size; off += sizeof zeros) {
        size_t n = kv->size - off < sizeof zeros ? kv->size - off : sizeof zeros;
        st = p->iface->buffer_write(be, (char *)kv->base + off, zeros, n);
        if (st != MINFER_OK) {
            plugin_fail(p, be, st, "buffer_write clearing the KV cache", err, err_len);
            kv_free(kv);
            return st;
        }
    }
    return MINFER_OK;
}

void kv_free(struct kv_cache *kv)
{
    if (kv->base)
        kv->plugin->iface->buffer_free(kv->be, kv->base);
    free(kv->cells);
    memset(kv, 0, sizeof *kv);
}

/* ---- cells ---- */

minfer_status kv_find_slot(const struct kv_cache *kv, uint32_t seq, int32_t pos0, int32_t n,
                           uint32_t *first)
{
    if (seq >= 64 || n < 0 || pos0 < 0)
        return MINFER_ERR_INVALID_ARG;
    if ((uint64_t)kv->n_used + (uint64_t)n > kv->n_cells)
        return MINFER_ERR_RANGE;
    *first = kv->n_used;
    return MINFER_OK;
}

void kv_commit(struct kv_cache *kv, uint32_t seq, uint32_t first, int32_t pos0, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        kv->cells[first + (uint32_t)i].pos = pos0 + i;
        kv->cells[first + (uint32_t)i].seqs |= 1ull << seq;
    }
    if (first + (uint32_t)n > kv->n_used)
        kv->n_used = first + (uint32_t)n;
}

void kv_truncate(struct kv_cache *kv, uint32_t seq, int32_t pos)
{
    for (uint32_t i = 0; i < kv->n_used; i++) {
        struct kv_cell *c = &kv->cells[i];
        if ((c->seqs >> seq & 1) && c->pos >= pos)
            c->seqs &= ~(1ull << seq);
        if (!c->seqs)
            c->pos = -1;
    }
    while (kv->n_used && kv->cells[kv->n_used - 1].pos < 0)
        kv->n_used--;
}

int32_t kv_seq_len(const struct kv_cache *kv, uint32_t seq)
{
    int32_t len = 0;
    for (uint32_t i = 0; i < kv->n_used; i++)
        if ((kv->cells[i].seqs >> seq & 1) && kv->cells[i].pos + 1 > len)
            len = kv->cells[i].pos + 1;
    return len;
}
