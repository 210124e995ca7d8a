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

/* A cache on a backend that keeps it in host memory (device_info says
 * is_gpu 0) must fit in the memory the backend reports free (the CPU
 * plugin reports MemAvailable): past that, the OOM killer would find it
 * mid-generation instead of minfer finding it now. */
static minfer_status check_host_room(const struct kv_cache *kv, char *err, size_t err_len)
{
    const struct minfer_plugin *p = kv->plugin;
    if (!PLUGIN_HAS(p, device_info))
        return MINFER_OK;
    struct minfer_device_info di;
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    if (p->iface->device_info(0, &di) != MINFER_OK || di.is_gpu || !di.memory_free)
        return MINFER_OK;
    if (kv->size <= di.memory_free)
        return MINFER_OK;
    return errf(err, err_len, MINFER_ERR_NO_MEMORY,
                "the KV cache needs %zu bytes (%.1f GiB: %u cells x %d layers, %s/%s) but "
                "only %llu bytes (%.1f GiB) of memory are available; use a smaller -c or a "
                "smaller cache type (-ctk/-ctv q8_0)",
                kv->size, (double)kv->size / (1u << 30), kv->n_cells, kv->n_layer,
                minfer_type_name(kv->type_k), minfer_type_name(kv->type_v),
                (unsigned long long)di.memory_free, (double)di.memory_free / (1u << 30));
}

minfer_status kv_init(struct kv_cache *kv, const struct minfer_plugin *p,
                      struct minfer_backend *be, int32_t n_layer, int64_t row_k, int64_t row_v,
                      uint32_t n_cells, uint32_t type_k, uint32_t type_v, char *err,
                      size_t err_len)
{
    minfer_status st0;
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
    st0 = check_host_room(kv, err, err_len);
    if (st0 != MINFER_OK) {
        memset(kv, 0, sizeof *kv);
        return st0;
    }
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
    /* Not zeroed here: zeroing an 8 GiB f32 cache took 35 s and made all of
     * it resident for a 5-token prompt. Passes zero cells as they first
     * reach them (kv_clear_to). */
    return MINFER_OK;
}

static const char zeros[1 << 16];

/* Zeroes bytes [off, off + n) of the cache buffer. */
static minfer_status write_zeros(struct kv_cache *kv, size_t off, size_t n, char *err,
                                 size_t err_len)
{
    for (size_t done = 0; done < n; done += sizeof zeros) {
        size_t k = n - done < sizeof zeros ? n - done : sizeof zeros;
        minfer_status st =
            kv->plugin->iface->buffer_write(kv->be, (char *)kv->base + off + done, zeros, k);
        if (st != MINFER_OK)
            return plugin_fail(kv->plugin, kv->be, st, "buffer_write clearing KV cells", err,
                               err_len);
    }
    return MINFER_OK;
}

minfer_status kv_clear_to(struct kv_cache *kv, uint32_t n, char *err, size_t err_len)
{
    if (n > kv->n_cells)
        n = kv->n_cells;
    if (n <= kv->n_clear)
        return MINFER_OK;
    uint32_t a = kv->n_clear;
    for (int32_t il = 0; il < kv->n_layer; il++) {
        size_t k0 = (size_t)((char *)kv_k(kv, il) - (char *)kv->base);
        size_t v0 = (size_t)((char *)kv_v(kv, il) - (char *)kv->base);
        minfer_status st = write_zeros(kv, k0 + kv->row_bytes_k * a,
                                       kv->row_bytes_k * (n - a), err, err_len);
        if (st == MINFER_OK)
            st = write_zeros(kv, v0 + kv->row_bytes_v * a, kv->row_bytes_v * (n - a), err,
                             err_len);
        if (st != MINFER_OK)
            return st;
    }
    kv->n_clear = n;
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
