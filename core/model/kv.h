/*
 * kv.h — the KV cache a context owns: per layer one K and one V region of
 * n_cells rows in the context's element type (f32, f16 or q8_0), living in
 * one backend buffer, plus host-side cell metadata (position and the set of
 * sequences each cell belongs to). Internal to the core.
 */
#ifndef MINFER_CORE_KV_H
#define MINFER_CORE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/plugin.h"

struct kv_cell {
    int32_t pos;     /* token position, -1 when empty */
    uint64_t seqs;   /* bit s set: the cell belongs to sequence s (s < 64) */
};

struct kv_cache {
    const struct minfer_plugin *plugin;
    struct minfer_backend *be;
    uint32_t type_k, type_v;
    int32_t n_layer;
    int64_t row_k, row_v;        /* elements per cell and layer (head_dim * n_head_kv) */
    size_t row_bytes_k, row_bytes_v;
    uint32_t n_cells;
    void *base;                  /* one backend buffer for every layer */
    size_t size;
    struct kv_cell *cells;       /* [n_cells] */
    uint32_t n_used;             /* cells [0, n_used) are occupied, in position order */
    uint32_t n_clear;            /* cells [0, n_clear) were zeroed (kv_clear_to) */
};

/* True for the element types a cache can hold. */
bool kv_type_ok(uint32_t type);

/* Allocates the regions through the backend without touching them (the
 * first pass that reaches a cell zeroes it: kv_clear_to), so an unused cache
 * costs no time and no resident memory. A cache on a host-memory backend
 * (device_info's is_gpu 0) larger than the memory it reports free is
 * refused with both sizes. On failure the cache is left empty and err
 * names the request. */
minfer_status kv_init(struct kv_cache *kv, const struct minfer_plugin *p,
                      struct minfer_backend *be, int32_t n_layer, int64_t row_k, int64_t row_v,
                      uint32_t n_cells, uint32_t type_k, uint32_t type_v, char *err,
                      size_t err_len);
void kv_free(struct kv_cache *kv);

/* Zeroes every layer's K and V rows of cells [n_clear, n) (n is capped at
 * the cache) so a pass that reads n cells never sees bytes no pass wrote:
 * masked cells still enter attention's sums as weight x value, and
 * uninitialised f16 bits may be NaN (0 x NaN = NaN). */
minfer_status kv_clear_to(struct kv_cache *kv, uint32_t n, char *err, size_t err_len);

/* Backend addresses of layer il's K and V regions. */
void *kv_k(const struct kv_cache *kv, int32_t il);
void *kv_v(const struct kv_cache *kv, int32_t il);

/* Cells for n new tokens of sequence seq starting at position pos0: sets
 * *first (cells first .. first + n - 1). MINFER_ERR_RANGE when they do not
 * fit. Nothing changes until kv_commit. */
minfer_status kv_find_slot(const struct kv_cache *kv, uint32_t seq, int32_t pos0, int32_t n,
                           uint32_t *first);
/* Marks cells first .. first + n - 1 as holding positions pos0 .. of seq. */
void kv_commit(struct kv_cache *kv, uint32_t seq, uint32_t first, int32_t pos0, int32_t n);
/* Drops seq's cells at positions >= pos; cells no sequence holds become
 * empty (and the occupied prefix shrinks to the last held cell). */
void kv_truncate(struct kv_cache *kv, uint32_t seq, int32_t pos);
/* Positions held by seq (one past its last position; 0 when empty). */
int32_t kv_seq_len(const struct kv_cache *kv, uint32_t seq);

#endif /* MINFER_CORE_KV_H */
