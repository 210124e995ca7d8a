/*
 * cpu-internal.h — what the CPU plugin's files share: the instance, the
 * thread pool, the per-ISA kernel table and the activation block formats.
 * Nothing here crosses the plugin boundary.
 */
#ifndef MINFER_CPU_INTERNAL_H
#define MINFER_CPU_INTERNAL_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/backend.h"
#include "minfer/quant.h"

/* ---- activation blocks (plugin-internal formats) ---- */

/* A row of K activations quantized for dot products against the
 * 32-element weight types ("Q8 row", K + 8 * K/32 bytes, struct of
 * arrays so SIMD code loads several blocks of qs or of d at once):
 *   int8 qs[K]      x ~= d[b] * qs, d[b] = amax/127 of block b,
 *                   qs = nearest-even(x * 127/amax)
 *   float d[K/32]
 *   int32 sum[K/32] sum of the block's qs
 * A kernel set may store qs with an offset of 128 as uint8 (the AVX-512
 * set does, for vpdpbusd's unsigned operand); each set reads only rows its
 * own quantizer wrote. */
#define CPU_Q8_ROW_BYTES(K) ((size_t)(K) + 8 * ((size_t)(K) / 32))
#define CPU_Q8_D(row, K) ((float *)((char *)(row) + (K)))
#define CPU_Q8_SUM(row, K) ((int32_t *)((char *)(row) + (K) + 4 * ((size_t)(K) / 32)))

/* Against the K-quants the activations use GGUF's Q8_K block
 * (struct minfer_block_q8_K) with the same rule per 256 elements. */

/* ---- kernels (one table per ISA level) ---- */

/* out[c] = dot(weight row w (k elements), activation column c) for
 * c < nc (1..the table's nc, at most CPU_MM_NC). act points at column 0 in the activation format
 * of the weight type (f32 for F32/F16 and for BF16 unless the table has
 * quant_bf16, a Q8 row for the 32-blocks, struct minfer_block_q8_K for the
 * K-quants); columns are act_stride bytes
 * apart. */
typedef void (*cpu_mm_fn)(int k, const void *w, const void *act, size_t act_stride,
                          int nc, float *out);

#define CPU_MM_NC 8 /* most activation columns per weight pass */

#define CPU_ATTN_CHUNK 64 /* cache cells per attention step */

/* Optional two-row tile: weight rows w and w + w_stride against nc
 * columns (1..the table's nc2 of the type); out[r * CPU_MM_NC + c]. */
/* Optional decode run: out[r] = dot(row r, the one activation column) for
 * r < nr, rows w_stride bytes apart; saves a call and a setup per row. */
typedef void (*cpu_rows_fn)(int k, const void *w, size_t w_stride, int nr, const void *act,
                            float *out);
typedef void (*cpu_mm2_fn)(int k, const void *w, size_t w_stride, const void *act,
                           size_t act_stride, int nc, float *out);

/* Kernel sets, worst to best. Not a chain of supersets: an AVX-512 CPU may
 * lack AVX-VNNI (Ice Lake, Sapphire Rapids have it; Skylake-X does not),
 * so whether a set runs is cpu_isa_supported's answer, not a comparison. */
enum cpu_isa {
    CPU_ISA_SCALAR = 0,
    CPU_ISA_AVX2 = 1,    /* AVX2 + FMA + F16C */
    CPU_ISA_AVXVNNI = 2, /* AVX2 set + AVX-VNNI (VEX vpdpbusd, 256-bit) */
    CPU_ISA_AVX512 = 3,  /* AVX2 set + AVX-512 F/BW/VL/VNNI */
    CPU_ISA_AVX512BF16 = 4, /* avx512 set + AVX512-BF16 (BF16 weights) */
    CPU_ISA_COUNT
};

struct cpu_kernels {
    const char *name;
    int nc; /* activation columns per mm call, 1..CPU_MM_NC, for the quantized types */
    int nc_float; /* the same for the f32-activation types (F32, F16, BF16 by default) */
    /* matmul tiles per weight type (NULL: type not readable) */
    cpu_mm_fn mm[MINFER_TYPE_COUNT];
    cpu_mm2_fn mm2[MINFER_TYPE_COUNT]; /* optional two-row tiles (prefill) */
    cpu_rows_fn rows[MINFER_TYPE_COUNT]; /* optional: nr rows x 1 column (decode) */
    int nc2[MINFER_TYPE_COUNT];
    /* activation quantizers: n multiple of 32 / 256 */
    void (*quant_q8)(const float *x, void *row, int n);
    void (*quant_q8k)(const float *x, struct minfer_block_q8_K *y, int n);
    /* Set only where the BF16 kernels take bf16 activations (a row of K
     * uint16, rounded to nearest even); NULL: they take f32 rows. */
    void (*quant_bf16)(const float *x, uint16_t *y, int n);
    /* attention over one chunk of CPU_ATTN_CHUNK cache cells: scores
     * s[j] = scale * sum_e q[e] * kt[e * CPU_ATTN_CHUNK + j] for every
     * j < CPU_ATTN_CHUNK (kt: the chunk's K rows transposed), and
     * acc[e] += sum_{j < n} p[j] * v_j[e] over V rows v_j at
     * (const char *)v + j * v_stride; hd elements per row */
    void (*attn_scores)(int hd, float scale, const float *q, const float *kt, float *s);
    void (*attn_pv)(int hd, int n, const float *p, const void *v, size_t v_stride, float *acc);
    void (*cvt_f16)(int n, const uint16_t *x, float *y);          /* y = f32(x) */
    void (*cvt_q8_0)(int n, const struct minfer_block_q8_0 *x, float *y);
    /* softmax numerators: x[i] = exp(x[i] - m) (x[i] <= m), returns their sum */
    float (*exp_sum)(int n, float *x, float m);
    /* FFN: g[i] = silu(g[i]) * u[i] */
    void (*silu_mul)(int n, float *g, const float *u);
};

extern const struct cpu_kernels cpu_kernels_scalar;
extern const struct cpu_kernels cpu_kernels_avx2;
extern const struct cpu_kernels cpu_kernels_avxvnni;
extern const struct cpu_kernels cpu_kernels_avx512;
extern const struct cpu_kernels cpu_kernels_avx512bf16;

/* Best set this CPU and OS can run (baseline-ISA code). */
enum cpu_isa cpu_isa_detect(void);
/* Whether this CPU and OS run every instruction of set isa. */
bool cpu_isa_supported(enum cpu_isa isa);
const char *cpu_isa_name(enum cpu_isa isa);
const struct cpu_kernels *cpu_kernels_for(enum cpu_isa isa);

/* ---- thread pool ---- */

struct cpu_pool;
typedef void (*cpu_task_fn)(void *arg, int ith, int nth);

/* n threads in all, the caller included (n - 1 workers). NULL on failure. */
struct cpu_pool *cpu_pool_new(int n);
void cpu_pool_free(struct cpu_pool *p);
int cpu_pool_size(const struct cpu_pool *p);
/* Runs fn(arg, ith, nth) on the caller (ith 0) and on up to nth - 1
 * workers that join in time (each a distinct ith in 1..nth-1); returns
 * when every participant is done. Participants are not guaranteed: fn
 * must hand out its work dynamically (atomic counters) so that the caller
 * alone completes it. */
void cpu_pool_run(struct cpu_pool *p, int nth, cpu_task_fn fn, void *arg);
/* Dispatches that stalled on a preempted worker, and windows after which
 * the pool ran solo (pool.c, contention detection). */
void cpu_pool_stats(const struct cpu_pool *p, unsigned long *stalls,
                    unsigned long *solo_windows);

/* ---- the instance ---- */

struct minfer_backend {
    int n_threads;
    enum cpu_isa isa;
    const struct cpu_kernels *k;
    struct cpu_pool *pool;
    void *scratch;          /* activation quantization, grows */
    size_t scratch_size;
    void *moe_scratch;      /* MUL_MAT_ID's gathered columns (its products use scratch) */
    size_t moe_scratch_size;
    char err[512];
};

/* Records an error about node in be->err and returns st. */
minfer_status cpu_fail(struct minfer_backend *be, const struct minfer_node *node,
                       minfer_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Scratch of at least size bytes, 64-byte aligned; NULL on OOM. */
void *cpu_scratch(struct minfer_backend *be, size_t size);

/* Checks node as execute_node would; be may have err == NULL target when
 * only asked (supports_op). Returns MINFER_OK or the refusal. */
minfer_status cpu_check_node(struct minfer_backend *be, const struct minfer_node *node);
minfer_status cpu_execute(struct minfer_backend *be, const struct minfer_node *node);

/* per-op runners (validated nodes only, except for content checks) */
minfer_status cpu_op_matmul(struct minfer_backend *be, const struct minfer_node *node);
minfer_status cpu_op_attention(struct minfer_backend *be, const struct minfer_node *node);
minfer_status cpu_op_attention_lists(struct minfer_backend *be, const struct minfer_node *node);
/* TOPK, MOE_WEIGHTS, MUL_MAT_ID, MOE_SUM (moe.c) */
minfer_status cpu_op_moe(struct minfer_backend *be, const struct minfer_node *node);

/* GELU, tanh form (ir.h's GEGLU), evaluated in double so every ISA agrees. */
static inline float cpu_gelu_tanh(float x)
{
    double v = x;
    return (float)(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
}

/* element size / block helpers */
static inline size_t cpu_type_size(uint32_t type)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    return t ? t->type_size : 0;
}

static inline int64_t cpu_nrows(const struct minfer_tensor *t)
{
    return t->ne[1] * t->ne[2] * t->ne[3];
}

/* Address of row r (flattened over ne1..ne3) honouring nb[1..3]. */
static inline char *cpu_row(const struct minfer_tensor *t, int64_t r)
{
    int64_t i1 = r % t->ne[1];
    int64_t i23 = r / t->ne[1];
    int64_t i2 = i23 % t->ne[2];
    int64_t i3 = i23 / t->ne[2];
    return (char *)t->data + (size_t)i1 * t->nb[1] + (size_t)i2 * t->nb[2] +
           (size_t)i3 * t->nb[3];
}

#endif
