/*
 * matmul.c — MUL_MAT and FFN_GATE_UP: quantizes the activations once per
 * row (Q8 for the 32-element weight types, Q8_K for the K-quants, bf16
 * for BF16 weights where the kernel set has native bf16 products; the
 * other float weight types use the activations as they are), then splits the weight
 * rows over the thread pool in chunks handed out by an atomic counter.
 * Inside a chunk, activation columns are walked in L2-sized blocks and
 * each weight row is paired with CPU_MM_NC columns per kernel call, so a
 * weight row is read from memory once per pass (decode streams it,
 * prefill reuses it from L1 for every column).
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"

/* Activation columns walked per weight chunk: as many as fit in about
 * 512 KiB (half of a Zen 4/5 L2), at least 8 and at most 64. */
#define COL_BYTES (512u << 10)

/* Decode reads each weight byte once: a chunk is a contiguous run of about
 * this many bytes. On the 2-core EPYC dev box (minfer-bench-cpu-ops, q4_K
 * 1536x8960, 2 threads) 55 KiB chunks streamed 27 GB/s and 256 KiB-1 MiB
 * chunks 38-42 GB/s: each new run starts the hardware prefetcher over. */
#define DECODE_CHUNK_BYTES (512u << 10)

/* FFN decode: gate and up rows are read in alternating runs of this many
 * rows (the up results wait in a stack buffer). */
#define FFN_RUN 256

/* Rows per sub-run of a prefill chunk (a chunk has at most 64) */
#define SUB_ROWS 64

enum act_kind { ACT_F32, ACT_Q8, ACT_Q8K, ACT_BF16 };

static enum act_kind act_kind_of(const struct cpu_kernels *k, uint32_t type)
{
    switch (type) {
    case MINFER_TYPE_BF16:
        return k->quant_bf16 ? ACT_BF16 : ACT_F32;
    case MINFER_TYPE_F32: case MINFER_TYPE_F16:
        return ACT_F32;
    case MINFER_TYPE_Q4_K: case MINFER_TYPE_Q5_K: case MINFER_TYPE_Q6_K:
        return ACT_Q8K;
    default:
        return ACT_Q8;
    }
}

/* ---- activation quantization ---- */

struct quant_task {
    const struct cpu_kernels *k;
    const struct minfer_tensor *x;
    enum act_kind kind;
    int K, M;
    char *out;
    size_t stride;
    atomic_int next;
};

static void quant_worker(void *arg, int ith, int nth)
{
    struct quant_task *t = arg;
    (void)ith;
    (void)nth;
    for (;;) {
        int m = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (m >= t->M)
            break;
        const float *x = (const float *)cpu_row(t->x, m);
        void *y = t->out + (size_t)m * t->stride;
        if (t->kind == ACT_Q8)
            t->k->quant_q8(x, y, t->K);
        else if (t->kind == ACT_Q8K)
            t->k->quant_q8k(x, y, t->K);
        else if (t->kind == ACT_BF16)
            t->k->quant_bf16(x, y, t->K);
        else
            memcpy(y, x, (size_t)t->K * sizeof(float));
    }
}

/* ---- the product ---- */

struct mm_task {
    const struct cpu_kernels *k;
    cpu_mm_fn fn;
    cpu_mm2_fn fn2;          /* two-row tile or NULL */
    cpu_rows_fn rows;        /* decode run or NULL */
    int nc, nc2;             /* columns per kernel call */
    const char *w0, *w1;     /* weight rows (w1: up, FFN only) */
    size_t w_nb1;
    int K, N, M;
    const char *act;
    size_t act_stride;
    const struct minfer_tensor *dst;
    const float *add;        /* MUL_MAT_ADD: addend rows add_nb1 bytes apart (0: one row) */
    size_t add_nb1;
    int chunk;               /* weight rows per chunk */
    int col_block;           /* activation columns per walk */
    /* on its own cache line: every claim would otherwise evict the
     * read-only fields above from the other threads' caches */
    _Alignas(64) atomic_int next;
};

/* Weight rows [r0, r1) x activation columns [c0, c1) into row-major
 * blocks local to the thread: gate (or the only weight) into
 * gb[column - c0][row - r0], up (FFN) into ub. Writing the tiles' outputs
 * straight into dst would scatter single floats over up to 64 dst rows
 * per tile; the blocks stay in L1 and reach dst one contiguous run per
 * column (mm_worker's epilogue). */
static void mm_block(const struct mm_task *t, float (*gb)[SUB_ROWS], float (*ub)[SUB_ROWS],
                     int r0, int r1, int c0, int c1)
{
    float g[2 * CPU_MM_NC], u[2 * CPU_MM_NC];
    for (int r = r0; r < r1;) {
        /* two weight rows per pass where the kernel set has it */
        int R = t->fn2 && r + 1 < r1 ? 2 : 1;
        int ncmax = R == 2 ? t->nc2 : t->nc;
        size_t woff = (size_t)r * t->w_nb1;
        for (int c = c0; c < c1; c += ncmax) {
            int nc = c1 - c < ncmax ? c1 - c : ncmax;
            const char *a = t->act + (size_t)c * t->act_stride;
            if (R == 2)
                t->fn2(t->K, t->w0 + woff, t->w_nb1, a, t->act_stride, nc, g);
            else
                t->fn(t->K, t->w0 + woff, a, t->act_stride, nc, g);
            for (int i = 0; i < R; i++)
                for (int j = 0; j < nc; j++)
                    gb[c - c0 + j][r - r0 + i] = g[i * CPU_MM_NC + j];
            if (t->w1) {
                if (R == 2)
                    t->fn2(t->K, t->w1 + woff, t->w_nb1, a, t->act_stride, nc, u);
                else
                    t->fn(t->K, t->w1 + woff, a, t->act_stride, nc, u);
                for (int i = 0; i < R; i++)
                    for (int j = 0; j < nc; j++)
                        ub[c - c0 + j][r - r0 + i] = u[i * CPU_MM_NC + j];
            }
        }
        r += R;
    }
}

/* d[i] = p[i] + a[i]: MUL_MAT_ADD's sum, the same float add as an ADD
 * node (d may be p: decode adds in place) */
static void add_to(int n, float *d, const float *p, const float *a)
{
    for (int i = 0; i < n; i++)
        d[i] = p[i] + a[i];
}

static void mm_worker(void *arg, int ith, int nth)
{
    struct mm_task *t = arg;
    (void)ith;
    (void)nth;
    /* products of one sub-run and column block: gate (or the only weight)
     * and FFN up (2 x 16 KiB) */
    float gb[64][SUB_ROWS], ub[64][SUB_ROWS];
    int n_chunks = (t->N + t->chunk - 1) / t->chunk;
    for (;;) {
        int ch = atomic_fetch_add_explicit(&t->next, 1, memory_order_relaxed);
        if (ch >= n_chunks)
            break;
        int r0 = ch * t->chunk, r1 = r0 + t->chunk < t->N ? r0 + t->chunk : t->N;
        if (t->rows && t->M == 1) { /* decode: one call per chunk (per sub-run for FFN) */
            float *d = (float *)t->dst->data;
            if (!t->w1) {
                t->rows(t->K, t->w0 + (size_t)r0 * t->w_nb1, t->w_nb1, r1 - r0, t->act, d + r0);
                if (t->add)
                    add_to(r1 - r0, d + r0, d + r0, t->add + r0);
                continue;
            }
            /* gate rows into dst, up rows into u, then silu(gate) * up */
            float *u1 = ub[0]; /* FFN_RUN <= 64 * SUB_ROWS floats */
            for (int r = r0; r < r1; r += FFN_RUN) {
                int n = r1 - r < FFN_RUN ? r1 - r : FFN_RUN;
                size_t off = (size_t)r * t->w_nb1;
                t->rows(t->K, t->w0 + off, t->w_nb1, n, t->act, d + r);
                t->rows(t->K, t->w1 + off, t->w_nb1, n, t->act, u1);
                t->k->silu_mul(n, d + r, u1);
            }
            continue;
        }
        /* sub-runs of at most SUB_ROWS rows: the products of one wait in
         * gb (and the FFN's up products in ub) */
        for (int s0 = r0; s0 < r1; s0 += SUB_ROWS) {
            int s1 = s0 + SUB_ROWS < r1 ? s0 + SUB_ROWS : r1;
            for (int c0 = 0; c0 < t->M; c0 += t->col_block) {
                int c1 = c0 + t->col_block < t->M ? c0 + t->col_block : t->M;
                mm_block(t, gb, ub, s0, s1, c0, c1);
                for (int c = c0; c < c1; c++) {
                    float *d = (float *)cpu_row(t->dst, c) + s0, *p = gb[c - c0];
                    if (t->w1) /* FFN: silu(gate) * up */
                        t->k->silu_mul(s1 - s0, p, ub[c - c0]);
                    if (t->add)
                        add_to(s1 - s0, d, p,
                               (const float *)((const char *)t->add + (size_t)c * t->add_nb1) +
                                   s0);
                    else
                        memcpy(d, p, (size_t)(s1 - s0) * sizeof(float));
                }
            }
        }
    }
}

minfer_status cpu_op_matmul(struct minfer_backend *be, const struct minfer_node *node)
{
    bool ffn = node->op == MINFER_OP_FFN_GATE_UP;
    const struct minfer_tensor *w = node->src[0];
    const struct minfer_tensor *x = ffn ? node->src[2] : node->src[1];
    int K = (int)w->ne[0], N = (int)w->ne[1], M = (int)cpu_nrows(x);
    cpu_mm_fn fn = be->k->mm[w->type];
    if (!fn)
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "no %s kernel for weight type %u",
                        be->k->name, w->type);

    enum act_kind kind = act_kind_of(be->k, w->type);
    size_t stride;
    if (kind == ACT_Q8)
        stride = CPU_Q8_ROW_BYTES(K);
    else if (kind == ACT_Q8K)
        stride = (size_t)(K / 256) * sizeof(struct minfer_block_q8_K);
    else if (kind == ACT_BF16)
        stride = (size_t)K * sizeof(uint16_t);
    else
        stride = (size_t)K * sizeof(float);

    const char *act;
    /* f32 activations whose rows are evenly spaced are read in place */
    bool uniform = x->ne[2] * x->ne[3] == 1 ||
                   (x->nb[2] == x->nb[1] * (size_t)x->ne[1] &&
                    (x->ne[3] == 1 || x->nb[3] == x->nb[2] * (size_t)x->ne[2]));
    if (kind == ACT_F32 && uniform) {
        act = x->data;
        stride = M > 1 ? x->nb[1] : stride;
    } else {
        if ((size_t)M > SIZE_MAX / stride)
            return cpu_fail(be, node, MINFER_ERR_NO_MEMORY, "activation scratch overflows");
        char *buf = cpu_scratch(be, (size_t)M * stride);
        if (!buf)
            return cpu_fail(be, node, MINFER_ERR_NO_MEMORY,
                            "out of memory for %zu bytes of quantized activations",
                            (size_t)M * stride);
        struct quant_task qt = {be->k, x, kind, K, M, buf, stride, 0};
        atomic_init(&qt.next, 0);
        int nth = M >= 8 ? be->n_threads : 1;
        cpu_pool_run(be->pool, nth, quant_worker, &qt);
        act = buf;
    }

    struct mm_task t;
    memset(&t, 0, sizeof t);
    t.k = be->k;
    t.fn = fn;
    t.nc = kind == ACT_F32 ? be->k->nc_float : be->k->nc;
    size_t cb = COL_BYTES / stride;
    t.col_block = cb < 8 ? 8 : cb > 64 ? 64 : (int)cb;
    t.rows = be->k->rows[w->type];
    t.fn2 = M > 1 ? be->k->mm2[w->type] : NULL; /* decode streams one row at a time */
    t.nc2 = be->k->nc2[w->type];
    t.w0 = w->data;
    t.w1 = ffn ? node->src[1]->data : NULL;
    t.w_nb1 = w->nb[1];
    t.K = K;
    t.N = N;
    t.M = M;
    t.act = act;
    t.act_stride = stride;
    t.dst = node->dst;
    float *add_copy = NULL;
    if (node->op == MINFER_OP_MUL_MAT_ADD) {
        const struct minfer_tensor *a = node->src[2], *d = node->dst;
        t.add = a->data;
        t.add_nb1 = a->ne[1] == 1 ? 0 : a->nb[1];
        /* an addend sharing dst's bytes would be overwritten by the product
         * before it is added: add from a copy (the arena never does this) */
        const char *alo = a->data, *ahi = alo + a->nb[1] * (size_t)a->ne[1];
        const char *dlo = d->data, *dhi = dlo + d->nb[1] * (size_t)d->ne[1];
        if (alo < dhi && dlo < ahi) {
            size_t bytes = a->nb[1] * (size_t)a->ne[1];
            add_copy = malloc(bytes);
            if (!add_copy)
                return cpu_fail(be, node, MINFER_ERR_NO_MEMORY,
                                "out of memory for a %zu-byte copy of the addend", bytes);
            memcpy(add_copy, a->data, bytes);
            t.add = add_copy;
        }
    }
    int nth = be->n_threads;
    if ((int64_t)K * N * M < 65536)
        nth = 1;
    if (M == 1) {
        /* decode: long contiguous runs, a multiple of nth of them so that
         * undisturbed threads finish together */
        size_t bytes = (size_t)N * w->nb[1] * (ffn ? 2 : 1);
        size_t per = (size_t)nth * DECODE_CHUNK_BYTES;
        size_t n_chunks = (size_t)nth * ((bytes + per / 2) / per > 1 ? (bytes + per / 2) / per : 1);
        t.chunk = (int)(((size_t)N + n_chunks - 1) / n_chunks);
    } else {
        /* about 8 chunks per thread for balance on a shared machine; at
         * least 4 rows so a chunk amortises its column walk */
        int chunk = N / (nth * 8);
        t.chunk = chunk < 4 ? 4 : chunk > 64 ? 64 : chunk;
    }
    atomic_init(&t.next, 0);
    cpu_pool_run(be->pool, nth, mm_worker, &t);
    free(add_copy);
    return MINFER_OK;
}
