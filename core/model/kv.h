/*
 * kv.h — the KV cache a context owns: per layer one K and one V region of
 * n_cells rows in the context's element type (f32, f16 or q8_0), living in
 * one backend buffer, plus host-side metadata: each cell's position and
 * reference count, and per sequence the list of its cells in position
 * order. A cell may belong to several sequences (a fork shares the cells
 * of the common prefix; each sequence's later tokens get cells of their
 * own, so nothing is copied when they diverge). Internal to the core.
 * docs/decisions/kv-cell-lists.md says why lists and not a bit mask.
 */
#ifndef MINFER_CORE_KV_H
#define MINFER_CORE_KV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/plugin.h"

/* Most sequences one context may hold (n_seq_max's ceiling). */
#define KV_SEQ_LIMIT 65536

struct kv_cell {
    int32_t pos;     /* token position, -1 when free */
    uint32_t refs;   /* sequences holding the cell; 0 when free */
};

/* One sequence: its cells sorted by position (positions unique). */
struct kv_seq {
    int32_t n, cap;
    int32_t ident;   /* entries [0, ident) are known to be pos == cell == index */
    int32_t *pos;    /* [n] ascending */
    uint32_t *cell;  /* [n] cell of pos[i] */
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
    uint32_t n_used;             /* cells with refs > 0 */
    int32_t n_seq;               /* sequence ids 0 .. n_seq - 1 */
    struct kv_seq *seqs;         /* [n_seq] */
    uint32_t n_clear;            /* cells [0, n_clear) were zeroed (kv_clear_to) */
};

/* True for the element types a cache can hold. */
bool kv_type_ok(uint32_t type);

/* Allocates the regions through the backend without touching them (the
 * first pass that reaches a cell zeroes it: kv_clear_to), so an unused cache
 * costs no time and no resident memory, and the metadata of n_seq
 * sequences. A cache on a host-memory backend (device_info's is_gpu 0)
 * larger than the memory it reports free is refused with both sizes. On
 * failure the cache is left empty and err names the request. */
minfer_status kv_init(struct kv_cache *kv, const struct minfer_plugin *p,
                      struct minfer_backend *be, int32_t n_layer, int64_t row_k, int64_t row_v,
                      uint32_t n_cells, int32_t n_seq, uint32_t type_k, uint32_t type_v,
                      char *err, size_t err_len);
void kv_free(struct kv_cache *kv);

/* Zeroes every layer's K and V rows of cells [n_clear, n) (n is capped at
 * the cache) so a pass that reads n cells never sees bytes no pass wrote:
 * masked cells still enter attention's sums as weight x value, and
 * uninitialised f16 bits may be NaN (0 x NaN = NaN). */
minfer_status kv_clear_to(struct kv_cache *kv, uint32_t n, char *err, size_t err_len);

/* Backend addresses of layer il's K and V regions. */
void *kv_k(const struct kv_cache *kv, int32_t il);
void *kv_v(const struct kv_cache *kv, int32_t il);

/* ---- cells and sequences ---- */

/* The n lowest free cells into out[n] (ascending). MINFER_ERR_FULL when
 * fewer are free. Nothing changes. */
minfer_status kv_pick_free(const struct kv_cache *kv, uint32_t n, uint32_t *out);
/* Index in seq's list of position pos, or -1. */
int32_t kv_seq_find(const struct kv_cache *kv, int32_t seq, int32_t pos);
/* Entries of seq at positions <= pos (the visible prefix of a query at pos). */
int32_t kv_seq_count_upto(const struct kv_cache *kv, int32_t seq, int32_t pos);
/* Adds (pos, cell) to seq's list and a reference to the cell (which takes
 * position pos when it was free). The position must not be in the list
 * and a held cell must already have position pos. MINFER_ERR_NO_MEMORY
 * when the list cannot grow (nothing changes then). */
minfer_status kv_seq_add(struct kv_cache *kv, int32_t seq, int32_t pos, uint32_t cell);
/* Room for n entries in seq's list (false: out of memory), so that adding
 * them cannot fail. */
bool kv_seq_reserve(struct kv_cache *kv, int32_t seq, int32_t n);
/* Drops seq's positions in [p0, p1) (p1 < 0: to the end); a cell no
 * sequence holds any more becomes free. */
void kv_seq_rm(struct kv_cache *kv, int32_t seq, int32_t p0, int32_t p1);
/* dst also holds src's cells of positions [p0, p1) (p1 < 0: to the end):
 * shared, not copied. dst's own cells at those positions are dropped first. */
minfer_status kv_seq_cp(struct kv_cache *kv, int32_t src, int32_t dst, int32_t p0, int32_t p1);
/* Largest position of seq, -1 when empty. */
int32_t kv_seq_pos_max(const struct kv_cache *kv, int32_t seq);
/* True when seq holds exactly positions 0 .. n-1 in cells 0 .. n-1 (the
 * single-sequence layout ATTENTION reads: cell index == position). */
bool kv_seq_is_identity(struct kv_cache *kv, int32_t seq);
/* Moves every held cell down to [0, n_used), keeping their order, with the
 * plugin's copy_cells (runs move downwards, so overlapping ones are safe),
 * and renames the cells in every list. Rows move, values do not change, so
 * attention results are the same. *moved (may be NULL) counts the cells. */
minfer_status kv_compact(struct kv_cache *kv, uint32_t *moved, char *err, size_t err_len);

#endif /* MINFER_CORE_KV_H */
