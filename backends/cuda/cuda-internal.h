/*
 * cuda-internal.h — what the CUDA plugin's node-level files share: the
 * instance, the replay-window cache entry, the scratch slots and the
 * helpers that read IR tensors. plugin.c is the entry and instance,
 * validate.c decides what a node may be, exec.c runs one node, graph.c
 * captures and replays windows, fuse.c fuses nodes inside a capture,
 * arch.c matches a device's compute capability with the built
 * architectures and hooks.c answers get_proc. Nothing here crosses the plugin boundary;
 * the CUDA runtime is reached only through device.h.
 */
#ifndef MINFER_CUDA_INTERNAL_H
#define MINFER_CUDA_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "device.h"
#include "kernels/kernels.h"
#include "minfer/backend.h"
#include "minfer/quant.h"

/* Scratch slots of an instance (cu_scratch). */
/* SLOT_ACT: a gate/up pair's outputs as its down product's f16
 * activations (k_gemm_glu's xo), beside SLOT_XQ, which holds the pair's
 * own inputs while it runs. */
enum { SLOT_XQ = 0, SLOT_FFN = 1, SLOT_ATTN = 2, SLOT_SPLIT = 3, SLOT_ACT = 4 };

/* The most tokens of one matvec launch; products of more tokens use the
 * tensor-core GEMM, and some of fewer (cuda_matvec_tokens). */
#define MMV_MAX_NT 8

/* Windows remembered per instance (least recently used one is dropped). */
#define GRAPH_CACHE 32

/* One replay window (uid, first, last): warm-up count, then a captured
 * and instantiated graph valid while both generations hold. */
struct gentry {
    uint64_t uid;
    uint32_t first, last;
    uint64_t win_gen;  /* the scheduler's generation (arena, KV layout) */
    uint64_t pool_gen; /* the plugin's pool generation (scratch growth) */
    int warm;          /* direct passes seen at these generations */
    void *exec;        /* cudaGraphExec_t once captured */
    uint64_t used;     /* LRU tick */
};

/* What SLOT_XQ (or SLOT_ACT) holds: the activations x [K, M] (rows nb1
 * bytes apart) in one form at xq: q8_1 blocks of a group (32 or 256), or
 * f16 values in one of the GEMM's orders (KGEMM_ACT_F16 and up,
 * k_gemm_act_form).
 * Products of one x (Q, K and V; gate and up) find them here instead of
 * converting x again. Valid while every write since is seen: each node's
 * dst is checked against x (cuda_xq_note_write) in a capture window and
 * in direct execution alike, and every other entry point that writes
 * device memory (buffer writes, KV copies, graph replays, allocations)
 * drops it; pool_gen catches a scratch slot reallocated in between. */
struct xq_cache {
    bool valid;
    const void *x;
    int64_t K, M, nb1;
    void *xq;
    int form;          /* q8_1 group, or KGEMM_ACT_F16 + the f16 order */
    uint64_t pool_gen; /* cu_pool_generation when it was written */
    uint64_t seq;      /* kctx.launches right after the kernel that wrote it */
    /* the node output these were written beside (a gate/up pair's dst,
     * SLOT_ACT): the note of that very write, which follows the node, keeps
     * them; NULL once seen */
    const void *writer;
};

struct minfer_backend {
    struct cu_ctx *c;
    struct xq_cache xq;
    bool graphs_off;   /* config switch, $MINFER_CUDA_NO_GRAPHS, or a failed capture */
    bool fuse_off;     /* $MINFER_CUDA_NO_FUSE: captures keep every node separate */
    struct gentry gc[GRAPH_CACHE];
    uint64_t tick;
};

/* The host's table (logging), set by minfer_plugin_entry. */
extern const struct minfer_host *cuda_host;

/* Process-wide counters, read through get_proc (hooks.c); updated with
 * relaxed atomics. */
struct minfer_cuda_graph_stats {
    uint64_t captures;  /* graphs captured and instantiated */
    uint64_t replays;   /* windows run from a captured graph */
    uint64_t aborts;    /* captures aborted (graphs then off for that instance) */
};
struct cuda_counters {
    struct minfer_cuda_graph_stats graph;
    uint64_t norm_ropes; /* (norm, norm, RoPE, RoPE) captured as one launch */
    uint64_t rope_seq;   /* RoPE pairs captured by the read-first kernel */
    uint64_t rope_kv;    /* ... of which with the K and V stores in the same launch */
    uint64_t rope_tokens; /* ... of which of several tokens (a block per token) */
    uint64_t rope_head_blocks; /* one token's norm groups as blocks of heads (k_norm_rope_kv) */
    uint64_t groups;     /* decode products of one x (Q, K, V) captured as one launch */
    uint64_t qkv_ropes;  /* ... of which with the RoPE and the KV stores in their epilogue */
    uint64_t gemm_groups; /* ... the same at 9-16 tokens, on gemm-i8.cu (k_gemm_multi) */
    uint64_t shared_x;   /* products that found their activations converted (be->xq) */
    uint64_t glu_gemms;  /* gate/up pairs run as one GEMM launch (k_gemm_glu) */
    uint64_t glu_tails;  /* ... of them with their last wave's tiles in parts of K */
    int fail_next_capture; /* captures still to fail on purpose (test hook) */
};
extern struct cuda_counters cuda_count;

#define CUDA_COUNT(field) __atomic_add_fetch(&cuda_count.field, 1, __ATOMIC_RELAXED)

/* ---- tensor helpers ---- */

static inline int is_float_type(uint32_t t)
{
    return t == MINFER_TYPE_F32 || t == MINFER_TYPE_F16 || t == MINFER_TYPE_BF16;
}

static inline struct kview view_of(const struct minfer_tensor *t)
{
    struct kview v;
    v.data = t->data;
    for (int i = 0; i < 4; i++) {
        v.ne[i] = t->ne[i];
        v.nb[i] = (int64_t)t->nb[i];
    }
    return v;
}

static inline int same_ne(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    for (int i = 0; i < 4; i++)
        if (a->ne[i] != b->ne[i])
            return 0;
    return 1;
}

/* Byte range a tensor's elements can touch (conservative for block types). */
static inline void byte_range(const struct minfer_tensor *t, uintptr_t *lo, uintptr_t *hi)
{
    uintptr_t b = (uintptr_t)t->data, span = (uintptr_t)t->ne[0] * t->nb[0];
    for (int i = 1; i < 4; i++)
        span += (uintptr_t)(t->ne[i] - 1) * t->nb[i];
    *lo = b;
    *hi = b + span;
}

static inline int overlaps(const struct minfer_tensor *a, const struct minfer_tensor *b)
{
    uintptr_t alo, ahi, blo, bhi;
    byte_range(a, &alo, &ahi);
    byte_range(b, &blo, &bhi);
    return alo < bhi && blo < ahi;
}

/* ---- fuse.c ---- */

/* Whether no node of w from nodes[from] on reads t's bytes before a dense
 * dst rewrites them (a fused launch may then leave t unwritten); bytes
 * still unread at the window's end, or an output tensor, say no. Also the
 * test hook "minfer_cuda_test_dead_from" (no device needed). */
int cuda_dead_from(const struct minfer_replay_window *w, uint32_t from,
                   const struct minfer_tensor *t);

/* Rows that a block of k_norm_rope_kv reads or writes: row h < rows is
 * the bytes [data + h * stride, + bytes) and belongs to block h % blocks;
 * CUDA_ROWS_SHARED rows are read by every block. */
enum { CUDA_ROWS_READ, CUDA_ROWS_WRITE, CUDA_ROWS_SHARED };
struct cuda_rows {
    uintptr_t data;
    int64_t rows, stride, bytes;
    int kind;
};
/* The most blocks, from max_blocks down to 2, for which no written row
 * touches a row of another block, a shared row or another written row
 * (a block reads all its rows before it writes); 0 if none. Also the
 * test hook "minfer_cuda_test_head_blocks" (no device needed). */
int cuda_head_blocks(const struct cuda_rows *s, int n, int max_blocks);

/* ---- validate.c ---- */

/* 0 when the plugin runs n; else -1 with the reason in why[why_len]
 * (why may be NULL). check_ptrs: also check data pointers (execute time;
 * supports_op sees placeholder addresses). */
int cuda_validate(const struct minfer_node *n, int check_ptrs, char *why, size_t why_len);

/* ---- exec.c ---- */

/* Sets the instance error "cuda: node I (label, OP): what" and returns st. */
minfer_status cuda_node_fail(struct minfer_backend *be, const struct minfer_node *n,
                             minfer_status st, const char *what);

/* Runs a launcher's result inside a function with be, n and k in scope:
 * -1 -> BACKEND error naming the node and the launch site. */
#define LAUNCH(expr)                                                                       \
    do {                                                                                   \
        if ((expr) != 0)                                                                   \
            return cuda_node_fail(be, n, MINFER_ERR_BACKEND, k->err);                      \
    } while (0)

/* Runs one validated node by direct launches on k's stream. */
minfer_status cuda_exec(struct minfer_backend *be, const struct minfer_node *n, struct kctx *k);
/* The most tokens (1..MMV_MAX_NT) the matvec kernels serve for weight w;
 * products of more run the GEMM (exec.c says where each type crosses). */
int cuda_matvec_tokens(const struct kctx *k, const struct minfer_tensor *w);
/* The group of the q8_1 blocks the product of M tokens by weight w reads
 * (k_quantize_q8_1: 32 for the matvec kernels and gemm-i8.cu on q8_0 or
 * 64-token tiles, 256 for gemm-i8.cu on the K-quants), 0 if it reads
 * none; a norm or attention pass before it may write them (the norm
 * either group, the attention combines group 32). */
int cuda_q8_1_group(const struct kctx *k, const struct minfer_tensor *w, int64_t M);
/* SLOT_XQ for q8_1 blocks of x [ne0, ne1] that a pass is about to write
 * (be->xq is invalid until cuda_xq_written records them with their
 * group); a failure is reported against node n. */
minfer_status cuda_xq_slot(struct minfer_backend *be, const struct minfer_node *n,
                           const struct minfer_tensor *x, void **xq);
void cuda_xq_written(struct minfer_backend *be, const struct minfer_tensor *x, void *xq,
                     int group);
/* x [K, M] in SLOT_XQ in `form`: q8_1 blocks of that group
 * (k_quantize_q8_1; wtype unused), or KGEMM_ACT_F16 and up the f16 values
 * k_gemm_act writes for products on wtype (k_gemm_act_form), reusing
 * be->xq when it holds exactly these. */
minfer_status cuda_shared_x(struct minfer_backend *be, const struct minfer_node *n,
                            struct kctx *k, uint32_t wtype, const float *xd, int64_t K,
                            int64_t M, int64_t xnb1, int form, void **out);
/* ATTENTION; xq_next (NULL: none) is the product that reads its output as
 * quantized activations: the combine pass writes those q8_1 blocks too. */
minfer_status cuda_run_attention(struct minfer_backend *be, const struct minfer_node *n,
                                 struct kctx *k, const struct minfer_node *xq_next);
/* ATTENTION_LISTS the same way (xq_next only where k_attn_lists_q8_1_ok). */
minfer_status cuda_run_attention_lists(struct minfer_backend *be, const struct minfer_node *n,
                                       struct kctx *k, const struct minfer_node *xq_next);
/* The matvec epilogue of a MUL_MAT_ADD node: dst = product + src2. */
struct kepi cuda_sum_epi(const struct minfer_node *n);

/* ---- graph.c ---- */

minfer_status cuda_graph_replay(struct minfer_backend *be, const struct minfer_replay_window *w,
                                bool *replayed);
/* Destroys every captured graph of the instance. */
void cuda_graphs_drop(struct minfer_backend *be);

/* ---- fuse.c ---- */

/* A node wrote t: drops be->xq if t may overlap the activations it holds. */
void cuda_xq_note_write(struct minfer_backend *be, const struct minfer_tensor *t);
/* Runs nodes i.. of a capturing window as one fused launch when a fusion
 * applies there: returns how many nodes it ran (0: none applies, run node
 * i alone) with the launch's failure in *st. Node i is already validated. */
uint32_t cuda_fuse_at(struct minfer_backend *be, const struct minfer_replay_window *w, uint32_t i,
                      struct kctx *k, minfer_status *st);
/* Grows the scratch that window w's fusions need beyond what its direct
 * passes size (a product group's split-K planes side by side), called in
 * a warm-up pass: a capture may not grow scratch. A failure to grow is
 * not an error here: the capture then leaves that group unfused. */
void cuda_fuse_reserve(struct minfer_backend *be, const struct minfer_replay_window *w,
                       struct kctx *k);

/* ---- arch.c ---- */

/* The architectures this build's kernels carry ("80-real,86-real,89-real,90"). */
const char *cuda_built_archs(void);
/* 1 when code built for archs (comma-separated CUDA_ARCHITECTURES entries)
 * runs on compute capability major.minor, saying how in why; 0 with the
 * reason and the fix in why. */
int cuda_arch_runs(int major, int minor, const char *archs, char *why, size_t why_len);
/* The same for device `device` of this machine and this build ("device N: ..."). */
int cuda_device_runs(int device, char *why, size_t why_len);
/* Test hook: every device reports compute capability major.minor (-1: the real one). */
void cuda_arch_fake(int major, int minor);

/* ---- hooks.c ---- */

void *cuda_get_proc(const char *name);

#endif /* MINFER_CUDA_INTERNAL_H */
