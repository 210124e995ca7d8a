/*
 * kv.c — the KV cache: one backend buffer with every layer's K and V rows
 * in the context's element type, the host-side cell table (position and
 * reference count per cell) and per sequence its cells in position order.
 * New tokens take the lowest free cells, so a single sequence fills cells
 * in position order (cell index == position) and keeps ATTENTION's fast
 * layout; many sequences interleave and attention reads their lists.
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
                      uint32_t n_cells, int32_t n_seq, uint32_t type_k, uint32_t type_v,
                      char *err, size_t err_len)
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
    if (n_seq < 1 || n_seq > KV_SEQ_LIMIT) {
        return errf(err, err_len, MINFER_ERR_RANGE,
                    "n_seq_max %d is outside 1..%d", n_seq, KV_SEQ_LIMIT);
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
    kv->seqs = calloc((size_t)n_seq, sizeof *kv->seqs);
    if (!kv->cells || !kv->seqs) {
        kv_free(kv);
        return errf(err, err_len, MINFER_ERR_NO_MEMORY,
                    "out of memory for %u KV cells and %d sequences", n_cells, n_seq);
    }
    kv->n_seq = n_seq;
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
    for (int32_t s = 0; kv->seqs && s < kv->n_seq; s++) {
        free(kv->seqs[s].pos);
        free(kv->seqs[s].cell);
    }
    free(kv->seqs);
    free(kv->cells);
    memset(kv, 0, sizeof *kv);
}

/* ---- cells ---- */

minfer_status kv_pick_free(const struct kv_cache *kv, uint32_t n, uint32_t *out)
{
    if (n > kv->n_cells - kv->n_used)
        return MINFER_ERR_FULL;
    uint32_t k = 0;
    for (uint32_t i = 0; i < kv->n_cells && k < n; i++)
        if (!kv->cells[i].refs)
            out[k++] = i;
    return k == n ? MINFER_OK : MINFER_ERR_FULL;
}

/* First index of seq's list with position >= pos. */
static int32_t lower_bound(const struct kv_seq *q, int32_t pos)
{
    int32_t lo = 0, hi = q->n;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (q->pos[mid] < pos)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int32_t kv_seq_find(const struct kv_cache *kv, int32_t seq, int32_t pos)
{
    const struct kv_seq *q = &kv->seqs[seq];
    int32_t i = lower_bound(q, pos);
    return i < q->n && q->pos[i] == pos ? i : -1;
}

int32_t kv_seq_count_upto(const struct kv_cache *kv, int32_t seq, int32_t pos)
{
    return pos == INT32_MAX ? kv->seqs[seq].n : lower_bound(&kv->seqs[seq], pos + 1);
}

static bool seq_reserve(struct kv_seq *q, int32_t n)
{
    if (n <= q->cap)
        return true;
    int32_t cap = q->cap ? q->cap : 64;
    while (cap < n)
        cap = cap > INT32_MAX / 2 ? n : cap * 2;
    int32_t *p = realloc(q->pos, sizeof *p * (size_t)cap);
    if (!p)
        return false;
    q->pos = p;
    uint32_t *c = realloc(q->cell, sizeof *c * (size_t)cap);
    if (!c)
        return false;
    q->cell = c;
    q->cap = cap;
    return true;
}

bool kv_seq_reserve(struct kv_cache *kv, int32_t seq, int32_t n)
{
    return seq_reserve(&kv->seqs[seq], n);
}

minfer_status kv_seq_add(struct kv_cache *kv, int32_t seq, int32_t pos, uint32_t cell)
{
    struct kv_seq *q = &kv->seqs[seq];
    if (!seq_reserve(q, q->n + 1))
        return MINFER_ERR_NO_MEMORY;
    int32_t i = lower_bound(q, pos);
    if (i < q->ident)
        q->ident = i;
    memmove(q->pos + i + 1, q->pos + i, sizeof *q->pos * (size_t)(q->n - i));
    memmove(q->cell + i + 1, q->cell + i, sizeof *q->cell * (size_t)(q->n - i));
    q->pos[i] = pos;
    q->cell[i] = cell;
    q->n++;
    struct kv_cell *c = &kv->cells[cell];
    if (!c->refs++) {
        c->pos = pos;
        kv->n_used++;
    }
    return MINFER_OK;
}

static void cell_unref(struct kv_cache *kv, uint32_t cell)
{
    struct kv_cell *c = &kv->cells[cell];
    if (c->refs && !--c->refs) {
        c->pos = -1;
        kv->n_used--;
    }
}

void kv_seq_rm(struct kv_cache *kv, int32_t seq, int32_t p0, int32_t p1)
{
    struct kv_seq *q = &kv->seqs[seq];
    if (p0 < 0)
        p0 = 0;
    int32_t a = lower_bound(q, p0), b = p1 < 0 ? q->n : lower_bound(q, p1);
    if (b <= a)
        return;
    if (a < q->ident)
        q->ident = a;
    for (int32_t i = a; i < b; i++)
        cell_unref(kv, q->cell[i]);
    memmove(q->pos + a, q->pos + b, sizeof *q->pos * (size_t)(q->n - b));
    memmove(q->cell + a, q->cell + b, sizeof *q->cell * (size_t)(q->n - b));
    q->n -= b - a;
}

minfer_status kv_seq_cp(struct kv_cache *kv, int32_t src, int32_t dst, int32_t p0, int32_t p1)
{
    if (src == dst)
        return MINFER_OK;
    const struct kv_seq *s = &kv->seqs[src];
    if (p0 < 0)
        p0 = 0;
    int32_t a = lower_bound(s, p0), b = p1 < 0 ? s->n : lower_bound(s, p1);
    if (b <= a)
        return MINFER_OK;
    if (!seq_reserve(&kv->seqs[dst], kv->seqs[dst].n + (b - a)))
        return MINFER_ERR_NO_MEMORY;
    kv_seq_rm(kv, dst, s->pos[a], s->pos[b - 1] + 1);
    for (int32_t i = a; i < b; i++) /* room reserved above: cannot fail */
        kv_seq_add(kv, dst, s->pos[i], s->cell[i]);
    return MINFER_OK;
}

int32_t kv_seq_pos_max(const struct kv_cache *kv, int32_t seq)
{
    const struct kv_seq *q = &kv->seqs[seq];
    return q->n ? q->pos[q->n - 1] : -1;
}

bool kv_seq_is_identity(struct kv_cache *kv, int32_t seq)
{
    /* decode asks every step: only entries past the known prefix are
     * checked (every change below it lowers ident) */
    struct kv_seq *q = &kv->seqs[seq];
    for (; q->ident < q->n; q->ident++)
        if (q->pos[q->ident] != q->ident || q->cell[q->ident] != (uint32_t)q->ident)
            return false;
    return true;
}

minfer_status kv_compact(struct kv_cache *kv, uint32_t *moved, char *err, size_t err_len)
{
    uint32_t *to = malloc(sizeof *to * kv->n_cells);
    if (!to)
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory compacting the KV cache");
    uint32_t n = 0, n_moved = 0;
    for (uint32_t i = 0; i < kv->n_cells; i++) {
        to[i] = kv->cells[i].refs ? n++ : UINT32_MAX;
        n_moved += kv->cells[i].refs && to[i] != i;
    }
    const struct minfer_backend_iface *it = kv->plugin->iface;
    if (n_moved && !PLUGIN_HAS(kv->plugin, copy_cells)) {
        free(to);
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "compacting the KV cache needs the backend's copy_cells, which %s lacks",
                    kv->plugin->name);
    }
    /* Runs of held cells whose destinations are consecutive move as one
     * copy per layer and region; destinations never pass their sources. */
    for (uint32_t i = 0; n_moved && i < kv->n_cells;) {
        if (!kv->cells[i].refs || to[i] == i) {
            i++;
            continue;
        }
        uint32_t j = i + 1;
        while (j < kv->n_cells && kv->cells[j].refs)
            j++;
        for (int32_t il = 0; il < kv->n_layer; il++) {
            minfer_status st = it->copy_cells(kv->be, kv_k(kv, il), kv->row_bytes_k, i, to[i],
                                              j - i);
            if (st == MINFER_OK)
                st = it->copy_cells(kv->be, kv_v(kv, il), kv->row_bytes_v, i, to[i], j - i);
            if (st != MINFER_OK) {
                char what[128];
                snprintf(what, sizeof what, "copy_cells of %u KV cells from %u to %u (layer %d)",
                         j - i, i, to[i], il);
                free(to);
                /* cells before i already moved: the cache is no longer
                 * consistent, so every sequence is dropped */
                for (int32_t s = 0; s < kv->n_seq; s++)
                    kv_seq_rm(kv, s, 0, -1);
                return plugin_fail(kv->plugin, kv->be, st, what, err, err_len);
            }
        }
        i = j;
    }
    for (int32_t s = 0; s < kv->n_seq; s++) {
        kv->seqs[s].ident = 0; /* cells were renamed */
        for (int32_t k = 0; k < kv->seqs[s].n; k++)
            kv->seqs[s].cell[k] = to[kv->seqs[s].cell[k]];
    }
    for (uint32_t i = 0; i < kv->n_cells; i++) {
        if (kv->cells[i].refs && to[i] != i) {
            kv->cells[to[i]] = kv->cells[i];
            kv->cells[i] = (struct kv_cell){-1, 0};
        }
    }
    free(to);
    if (moved)
        *moved = n_moved;
    return MINFER_OK;
}
