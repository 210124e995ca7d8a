/*
 * kernels.h — C interface of the CUDA kernel launchers (the kernels/ directory).
 *
 * A launcher validates nothing about IR semantics (validate.c does that);
 * it launches on k->stream, reads its own launch error and returns 0, or
 * writes "<site>: <cuda error name>: <text>" into k->err and returns -1.
 * Device-side contract violations (an id or cell out of range) are OR-ed
 * into *k->flags as KFLAG_* bits and reported at the next sync.
 */
#ifndef MINFER_CUDA_KERNELS_H
#define MINFER_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Device-side violation bits (see cu_sync). */
#define KFLAG_GET_ROWS_ID 0x1u   /* GET_ROWS id outside [0, n_rows) */
#define KFLAG_KV_CELL 0x2u       /* KV_STORE cell outside [0, n_cells) */
#define KFLAG_MOE_ID 0x4u        /* MUL_MAT_ID / MOE_WEIGHTS expert outside [0, n_expert) */
#define KFLAG_ATTN_LIST 0x8u     /* ATTENTION_LISTS count, list or cell out of range */

/* What every launch needs; owned by the device layer's instance. */
/* Per-tile arrival counters of the GEMMs that sum their own split-K planes
 * (gemm.cuh, gemm_split_finish): a launch with more tiles takes a
 * separate reduction pass. 16,384 covers a 256k-entry vocabulary head. */
#define KTILE_COUNTERS 16384

struct kctx {
    void *stream;          /* cudaStream_t of the instance */
    int device;
    int sm_count;
    int cc;                /* compute capability, 10 * major + minor */
    int smem_optin;        /* cudaDevAttrMaxSharedMemoryPerBlockOptin */
    int gemm_optin_ok;     /* the GEMM's >48 KiB dynamic smem was opted in */
    unsigned *flags;       /* device word, KFLAG_* */
    unsigned *tile_count;  /* KTILE_COUNTERS zeroed device words: gemm.cuh's gemm_split_finish */
    int dep_launch;        /* launches may be programmatic dependents (k_dep_probe) */
    /* the late wait of common.cuh's k_dep_enter(late): kernels launched so
     * far (k_post counts them), the count right after the last kernel that
     * waited late (0: none), and whether the next gemm_i8 launch may (the
     * caller's decision, exec.c; k_post clears it) */
    uint64_t launches, late_launch;
    int late_next;
    char *err;             /* message sink */
    size_t err_len;
};

/* Fault injection (device.c, test hook minfer_cuda_test_fail_nth): 1 when
 * the launch about to be made is the device-layer call chosen to fail. */
int cu_launch_injected(void);

/* A strided 4-D tensor view (ggml order: ne[0] innermost; nb in bytes). */
struct kview {
    void *data;
    int64_t ne[4];
    int64_t nb[4];
};

/* Opts in the dynamic shared memory of every kernel that needs more than
 * 48 KiB, after checking k->smem_optin. Called once per process per
 * device, outside any capture. 0 = ok (k->gemm_optin_ok set or left 0
 * with the reason in k->err when the device limit is too small). */
int k_prepare(struct kctx *k);

/* Sets k->dep_launch: 1 when the device (compute capability 9.0 or
 * later) and the kernels' build (code for 9.0 or later, which keeps
 * common.cuh's k_dep_enter rule) allow programmatic dependent launch. */
void k_dep_probe(struct kctx *k);

/* Benchmark hook: 0 launches every kernel the plain way (each waits for
 * the whole of the one before it), 1 (the default) as k_dep_probe allows. */
void k_tune_dep_launch(int on);

/* Bytes of q8_1-style blocks for K values (K % 32 == 0) times M rows. */
size_t k_q8_1_bytes(int64_t K, int64_t M);

/* x: F32 [K, M] with row stride x_nb1 -> q8_1 blocks, M rows of K/32.
 * group 32: each block its own scale (the matrix-vector kernels' rule);
 * 256 (K % 256 == 0): one scale per 256 values, the CPU's Q8_K rule, what
 * gemm-i8.cu reads for the K-quants (k_gemm_takes_q8_1). Either is valid
 * q8_1 for every reader; 256 keeps gemm-i8's sums integer per chunk. */
int k_quantize_q8_1(struct kctx *k, const float *x, int64_t K, int64_t M, int64_t x_nb1,
                    int group, void *xq);

/* True if the dp4a matrix-vector path handles this weight type. */
int k_matvec_q_supported(uint32_t type);
/* dst[n, m] = sum_k W[k, n] * x[k, m] for m < M (1..8), quantized
 * activations xq from k_quantize_q8_1. W rows are w_nb1 bytes apart. */
int k_matvec_q(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
               int64_t w_nb1, const void *xq, int64_t M, float *dst, int64_t dst_nb1);

/* Matvec epilogue (MUL_MAT_ADD): instead of the product, write dst2[n, m]
 * = product[n, m] + add[n, m] (add's columns add_nb1 bytes apart; 0
 * broadcasts one vector over m, i.e. a bias); dst is not written. The sum
 * is the same float addition the ADD kernel does, so results are
 * bit-identical to MUL_MAT then ADD. dst2 may alias add (each output is
 * read, then written, by one thread); neither may overlap the activations
 * of a float-weight product. */
struct kepi {
    const float *add;
    int64_t add_nb1;
    float *dst2;
    int64_t dst2_nb1;
};
/* k_matvec_q / k_matvec_f with an epilogue (epi NULL: none). */
int k_matvec_q_epi(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                   int64_t w_nb1, const void *xq, int64_t M, float *dst, int64_t dst_nb1,
                   const struct kepi *epi);
int k_matvec_f_epi(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                   int64_t w_nb1, const float *x, int64_t x_nb1, int64_t M, float *dst,
                   int64_t dst_nb1, const struct kepi *epi);

/* Several nt = 1 quantized products of one x in one launch (Q, K and V):
 * segment i is dst_i = W_i . x (with its epilogue, epi NULL: none); types
 * may differ. xq: k_quantize_q8_1 blocks of x [K, 1]. The products must not
 * write what another one reads or writes. */
struct kmv_seg {
    uint32_t type;
    const void *W;
    int64_t w_nb1, N;
    float *dst;
    const struct kepi *epi;
};
int k_matvec_q_multi(struct kctx *k, const struct kmv_seg *segs, int n, int64_t K,
                     const void *xq);

/* The RoPE (NeoX, every dimension of a head rotated) and the two KV stores
 * that k_matvec_q_multi_rope runs in the epilogue of one token's Q, K and
 * V products. */
struct kqkv_rope {
    float *rq;            /* q rotated: head h's row at rq + h * rq_nb1 bytes */
    float *rk;            /* k rotated, or NULL (only the K store reads it) */
    int64_t rq_nb1, rk_nb1;
    const int32_t *pos;   /* I32 [1] on device: the token's position */
    const int32_t *cells; /* I32 [1] on device: its KV cell */
    void *kc, *vc;        /* caches, rows knb / vnb bytes apart, knc / vnc cells */
    int64_t knb, vnb, knc, vnc;
    uint32_t kt, vt;      /* cache types: F32 or F16 */
    int hd;               /* head size, the rotated dimensions */
    float base, fscale;   /* RoPE frequency base and scale */
    int pos_fixed;        /* pos written by the host (no kernel): read before the wait */
};
/* Whether k_matvec_q_multi_rope takes heads of hd, Q, K and V weights of
 * types tq, tk, tv and caches of kt, vt. */
int k_matvec_q_multi_rope_ok(int64_t hd, uint32_t tq, uint32_t tk, uint32_t tv, uint32_t kt,
                             uint32_t vt);
/* segs[0..2] = Q, K, V of one x (k_matvec_q_multi's products, their dst
 * unused, a MUL_MAT_ADD's bias in epi): q and k rotated into r->rq and
 * r->rk, k and v stored in cell r->cells[0] of the caches. A thread group
 * holds the two rows a rotation pairs (i and i + hd / 2 of a head), so the
 * products' rows never go to memory. Every value, rounding and cache byte
 * equals the products, then k_rope_kv's (a cell outside the cache sets
 * KFLAG_KV_CELL and is not written). */
int k_matvec_q_multi_rope(struct kctx *k, const struct kmv_seg *segs, int64_t K, const void *xq,
                          const struct kqkv_rope *r);

/* nt = 1 FFN: dst[n] = silu(Wg[n] . x) * (Wu[n] . x) in one launch (both
 * weights of one quantized type, rows w_nb1 bytes apart; xq from
 * k_quantize_q8_1 with M = 1). Same math as two k_matvec_q + SWIGLU (the
 * dot products may be summed in another order). */
int k_matvec_q_glu(struct kctx *k, uint32_t type, const void *Wg, const void *Wu, int64_t K,
                   int64_t N, int64_t w_nb1, const void *xq, float *dst);
/* The same for M = 2..8 columns of x (q8_1 rows of K) into dst columns
 * dst_nb1 bytes apart. */
int k_matvec_q_glu_n(struct kctx *k, uint32_t type, const void *Wg, const void *Wu, int64_t K,
                     int64_t N, int64_t w_nb1, const void *xq, int64_t M, float *dst,
                     int64_t dst_nb1);

/* Benchmark hook: rows per thread group of the quantized kernels, nt = 1
 * and nt = 2..8 (1 or 2; the default, 2, is the measured winner at nt =
 * 1). */
void k_tune_matvec_rows(int r);
/* Benchmark hook: threads per row group of the nt = 1 two-row, Q/K/V group
 * and gate/up kernels (a power of two, 4..128; 0, the default: the rule). */
void k_tune_matvec_tpr(int tpr);

/* Same with F32/F16/BF16 weights and f32 activations; any K, any M. */
int k_matvec_f(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
               int64_t w_nb1, const float *x, int64_t x_nb1, int64_t M, float *dst,
               int64_t dst_nb1);

/* True if the tensor-core GEMM handles this weight type (K % 32 == 0). */
int k_gemm_supported(uint32_t type);
/* Bytes of one f16 activation copy for k_gemm ([M][K] halves). */
size_t k_gemm_act_bytes(int64_t K, int64_t M);
/* x: F32 [K, M] (rows x_nb1 bytes apart) -> xh[m][k] = f16(x[k, m]) and,
 * when xl is non-NULL, xl = f16(x - xh) (what f16 cannot hold). Buffers
 * of k_gemm_act_bytes, 16-byte aligned. K % 32 == 0. wtype: the weights
 * k_gemm will multiply (the kernel k_gemm picks by type and size wants
 * its own order of the values; the call must match k_gemm's). */
int k_gemm_act(struct kctx *k, uint32_t wtype, const float *x, int64_t K, int64_t M,
               int64_t x_nb1, void *xh, void *xl);
/* Scratch bytes k_gemm needs for these weights and M tokens (f16 weight
 * rows unless read in place, split-K partial sums); may be 0. */
size_t k_gemm_scratch_bytes(const struct kctx *k, uint32_t type, const void *W, int64_t K,
                            int64_t N, int64_t M, int64_t w_nb1);
/* What k_gemm does with each product v of output (n, m) as it stores it:
 * KGEMM_ADD stores v + aux[m][n] (MUL_MAT_ADD's addend; rows aux_nb1
 * bytes apart, 0 for one vector for every token: a bias); KGEMM_SILU_MUL
 * stores silu(aux[m][n]) * v (FFN_GATE_UP's up product, aux the gate
 * product). The same float operations as the element-wise ADD and SWIGLU
 * kernels, so results are bit-identical to the separate launches. aux may
 * be dst itself, laid out alike (each output is read, then written, by
 * one thread), but not with a two-pass product (xl), whose first pass
 * writes dst. */
enum kgemm_epi_op { KGEMM_ADD = 1, KGEMM_SILU_MUL = 2 };
struct kgemm_epi {
    int op;
    const float *aux;
    int64_t aux_nb1;
};
/* Whether k_gemm's epilogue beats a separate element-wise pass for this
 * product. Not on gemm-ss.cu (9.0 devices, 1,024 tokens and more): there
 * the epilogue's addend reads cost pp2048 15% on the H200 (docs/PERF.md,
 * session 8); everywhere else it is the faster form. */
int k_gemm_epi_pays(const struct kctx *k, uint32_t type, int64_t K, int64_t M);
/* Whether k_gemm's activations for this product are k_quantize_q8_1's
 * blocks (gemm-i8.cu), which the caller may then share between products
 * of one x instead of calling k_gemm_act for each: 0 = no, else the
 * group those blocks must be quantized with (32 or 256). */
int k_gemm_takes_q8_1(const struct kctx *k, uint32_t type, int64_t K, int64_t M);
/* The form of k_gemm's activations for this product, what k_gemm_act
 * writes: a q8_1 group (32 or 256, as k_gemm_takes_q8_1) or
 * KGEMM_ACT_F16 + the order of f16 values the kernel k_gemm picks reads.
 * Products of one x with equal forms read the same bytes. */
#define KGEMM_ACT_F16 1024
int k_gemm_act_form(const struct kctx *k, uint32_t type, int64_t K, int64_t M);
/* Whether k_gemm_glu runs a gate/up pair of this type and shape: where
 * k_gemm picks gemm-wg.cu's kernel (a 9.0 device, 33-1,023 tokens). */
int k_gemm_glu_ok(const struct kctx *k, uint32_t type, int64_t K, int64_t M);
/* dst[n, m] = silu(G . x) * (U . x) for gate G and up U (both [K, N],
 * rows w_nb1 bytes apart) as one launch on xh from k_gemm_act (the form
 * of either product): a block takes 64 rows of each, so gate and up of
 * a row meet in its registers and neither product is stored. Results as
 * k_gemm's gate product and up product with KGEMM_SILU_MUL (bit for bit
 * where neither splits K), without the gate's store and re-read or the
 * second launch. scratch: k_gemm_glu_scratch_bytes, 256-byte aligned
 * (NULL when that is 0), for the tiles of a last, partial wave, which run
 * in parts of K. xo (NULL: none; k_gemm_act_bytes(N, M), 16-byte
 * aligned) also receives dst in the f16 form k_gemm_glu_act_form names,
 * the very values k_gemm_act would make of it, so the down product that
 * reads dst needs no conversion. */
size_t k_gemm_glu_scratch_bytes(const struct kctx *k, uint32_t type, int64_t K, int64_t N,
                                int64_t M);
int k_gemm_glu(struct kctx *k, uint32_t type, const void *G, const void *U, int64_t K,
               int64_t N, int64_t w_nb1, const void *xh, int64_t M, float *dst, int64_t dst_nb1,
               void *scratch, void *xo);
/* The activation form (k_gemm_act_form's numbering) k_gemm_glu's xo holds
 * for a pair of this type with N outputs of M tokens: the one the down
 * product of that shape reads when its weights take the same kernel as
 * the pair's (N a multiple of 256); 0 when the pair writes none. */
int k_gemm_glu_act_form(const struct kctx *k, uint32_t type, int64_t N, int64_t M);
/* Tensor-core GEMM: dst[n, m] = sum_k W[k, n] * x[k, m] with f16 operands
 * and f32 accumulation; xh from k_gemm_act; scratch of
 * k_gemm_scratch_bytes, 256-byte aligned (NULL when that is 0). xl
 * non-NULL adds W.xl in a second pass (dst = W.xh, then dst += W.xl).
 * epi (NULL: none) is applied to the final sums. Deterministic: split-K
 * partial sums are added in a fixed order. */
int k_gemm(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N, int64_t w_nb1,
           const void *xh, const void *xl, int64_t M, float *dst, int64_t dst_nb1,
           void *scratch, const struct kgemm_epi *epi);
/* One product of a k_gemm_multi launch: weight W [K, N] (rows w_nb1
 * apart) into dst [N, M] (rows dst_nb1 apart), then epi (NULL: none). */
struct kgemm_seg {
    const void *W;
    int64_t N, w_nb1;
    float *dst;
    int64_t dst_nb1;
    const struct kgemm_epi *epi;
};
/* Whether count products of one x (a batched decode's Q, K and V: same
 * type and K, M tokens) can run as one k_gemm_multi launch: gemm-i8.cu's
 * path, 2-3 products, at most 16 tokens. */
int k_gemm_multi_ok(const struct kctx *k, uint32_t type, const struct kgemm_seg *segs,
                    int count, int64_t K, int64_t M);
/* Scratch of k_gemm_multi (its split-K planes), 256-byte aligned. */
size_t k_gemm_multi_scratch_bytes(const struct kctx *k, uint32_t type,
                                  const struct kgemm_seg *segs, int count, int64_t K, int64_t M);
/* The products of k_gemm_multi_ok as one launch, on x's q8_1 blocks xq
 * (k_gemm_takes_q8_1's group): the small K and V products run in the
 * waves of Q's instead of after them. Results as k_gemm's, bit for bit. */
int k_gemm_multi(struct kctx *k, uint32_t type, const struct kgemm_seg *segs, int count,
                 int64_t K, const void *xq, int64_t M, void *scratch);
/* Benchmark and test hook: force the f16-scratch GEMM's K slice depth
 * (32/64), split-K count (1..8) and weight rows per tile (bn 128/256), or
 * the in-place quantized GEMM (kernels/gemm-q.cu) with token tile bn 16
 * or 64 and splits 1..8, or the Hopper ones (kernels/gemm-wg.cu, bn 1064
 * or 1128; gemm-ss.cu, bn 2256) where they can run, or the int8 one
 * (kernels/gemm-i8.cu, bn 4016/4032/4064); 0 leaves each to the
 * per-shape choice.
 * Process-wide. */
void k_tune_gemm(int bk, int splits, int bn);

/* True if GET_ROWS / dequantization reads this type. */
int k_type_readable(uint32_t type);
/* dst[:, i] = dequant(table row ids[i]); n elements per row. */
int k_get_rows(struct kctx *k, uint32_t type, const void *table, int64_t n, int64_t n_rows,
               int64_t t_nb1, const int32_t *ids, int64_t n_ids, float *dst, int64_t dst_nb1);

/* RMS norm per row over ne[0]; w (F32 [ne0]) multiplies when non-NULL. */
int k_rms_norm(struct kctx *k, struct kview x, const float *w, struct kview dst, float eps);

/* k_rms_norm that also writes its output as q8_1 blocks of that group
 * (32 or 256) into xq (what k_quantize_q8_1 of dst would give, bit for
 * bit). ne0 % group == 0, dst 2-D. w_fixed: no kernel writes w (a
 * registered weight), so the kernel may read it before it waits for its
 * predecessor (common.cuh's k_dep_enter). */
int k_rms_norm_q8_1(struct kctx *k, struct kview x, const float *w, struct kview dst, float eps,
                    int group, void *xq, int w_fixed);

/* NeoX RoPE. x, dst: [hd, n_head, n_tokens]; pos: I32 [n_tokens] on device. */
int k_rope(struct kctx *k, struct kview x, const int32_t *pos, struct kview dst, int n_rot,
           float freq_base, float freq_scale);

/* The general RoPE: layout 0 NeoX, 1 normal pairs; factors (F32
 * [n_rot / 2], NULL: none) divide the angles (ROPE_DIV); fp = the node's
 * fparams[0..5] (freq_base, freq_scale, YaRN ext_factor, mscale (0 = 1),
 * ramp lo, hi), MINFER_OP_ROPE's formula. */
int k_rope_ext(struct kctx *k, struct kview x, const int32_t *pos, struct kview dst, int n_rot,
               int layout, const float *factors, const float *fp);

/* Two k_rope calls with the same positions and parameters in one launch
 * (x0/x1 with equal token counts; the pairs must not overlap). */
int k_rope2(struct kctx *k, struct kview x0, struct kview d0, struct kview x1, struct kview d1,
            const int32_t *pos, int n_rot, float freq_base, float freq_scale);

/* Qwen3's per-head q_norm and k_norm followed by their RoPEs in one
 * launch, one block per token: for each pair the RMS norm of x (rows over
 * ne[0], times w when non-NULL) goes to nd and its NeoX rotation to rd,
 * bit-identical to k_rms_norm then k_rope. x, nd, rd: [hd, heads, T, 1]
 * (both pairs the same hd and T). Within a token every read happens
 * before any write and the writes go out in the order nd0, nd1, rd0, rd1,
 * so one token's buffers may overlap in any way the four nodes run in
 * that order allow, except that a later node's source must not be
 * written by an earlier node; across tokens nothing is ordered, so with
 * T > 1 no write may touch what another token reads. Shared memory:
 * k_norm_rope2_smem(hd, heads of both) <= 48 KiB. A pair whose nd.data is
 * NULL has no norm: its RoPE reads x (k_rope2 for one token, without
 * k_rope2's condition that neither node writes what the other reads). */
/* Two KV_STORE nodes of the RoPEs' tokens (k_kv_store2's arguments). */
struct kkv2 {
    struct kview s0, s1;  /* [row_len, T] sources */
    const int32_t *cells; /* I32 [T] on device */
    uint32_t t0, t1;      /* cache types */
    void *d0, *d1;        /* caches, rows nb0/nb1 bytes apart, nc0/nc1 cells */
    int64_t nb0, nb1, nc0, nc1;
};
/* fixed: what no kernel writes, which k_rope_kv and k_norm_rope2 may then
 * read before their dependent-launch wait: pos (written by the host before
 * the pass, MINFER_TENSOR_INPUT) and the norm weights (MINFER_TENSOR_WEIGHT). */
#define K_FIXED_POS 1u
#define K_FIXED_W 2u
/* kv (NULL: none): the two KV stores that follow the RoPEs, run last in
 * the same block (after every write above, so s0 may be rd1's data). With
 * kv, rd1.data may be NULL: the second RoPE goes only to the K store (s0
 * is then not read; no later node may read rd1). */
/* The RoPEs of q [hd, hq, T] into rq and of k [hd, hk, T] (into rk when
 * rk.data is set), then kv's two stores, the K store of the rotated k: a
 * block per token and head, bit-identical to k_rope2 then k_kv_store2.
 * Nothing is ordered between blocks: rq and rk must be apart from every
 * source (rq may be q itself, the same view). Caches F32, F16 or Q8_0
 * (hd % 32 == 0). */
int k_rope_kv_ok(int64_t hd, uint32_t kt, uint32_t vt);
int k_rope_kv(struct kctx *k, struct kview q, struct kview rq, struct kview kx, struct kview rk,
              const int32_t *pos, int n_rot, float freq_base, float freq_scale,
              const struct kkv2 *kv, unsigned fixed);
size_t k_norm_rope2_smem(int64_t hd, int64_t heads);
int k_norm_rope2(struct kctx *k, struct kview x0, const float *w0, struct kview n0,
                 struct kview r0, float eps0, struct kview x1, const float *w1,
                 struct kview n1, struct kview r1, float eps1, const int32_t *pos, int n_rot,
                 float freq_base, float freq_scale, const struct kkv2 *kv, unsigned fixed);
/* One (RMS norm, RoPE) pair of k_norm_rope_kv: x [hd, heads] normalized
 * (times w when set) and rotated into r; the norm output goes to n when
 * n.data is set. For the k pair r.data may be NULL (only the K store reads
 * the rotated rows). */
struct knr {
    struct kview x, n, r;
    const float *w;
    float eps;
};
/* One token's q and k pairs, then kv's two stores of the rotated k and of
 * V, bit-identical to the separate nodes: `blocks` blocks, block g taking
 * the q, k and V heads g, g + blocks, ... It reads all its rows before it
 * writes any, so a block's writes may land on its own sources (the arena
 * lays Qwen3's q RoPE over q's and k's rows); the caller picks `blocks`
 * so that no write touches a row another block reads or writes
 * (cuda_head_blocks in fuse.c). hd as k_rope_kv_ok. */
int k_norm_rope_kv(struct kctx *k, const struct knr *q, const struct knr *kx, int blocks,
                   const int32_t *pos, int n_rot, float freq_base, float freq_scale,
                   const struct kkv2 *kv, unsigned fixed);

enum kbin { KBIN_ADD = 0, KBIN_MUL = 1, KBIN_SWIGLU = 2, KBIN_GEGLU = 3 };
/* dst = a (op) b; b broadcasts over any dimension of extent 1 (or by
 * modulo for ADD/MUL); SWIGLU needs equal shapes. F32. */
int k_binary(struct kctx *k, int op, struct kview a, struct kview b, struct kview dst);

/* dst = src * s (F32). */
int k_scale(struct kctx *k, struct kview src, struct kview dst, float s);
/* dst = convert(src) between F32, F16 and BF16. */
int k_copy(struct kctx *k, uint32_t src_type, struct kview src, uint32_t dst_type,
           struct kview dst);

/* Writes rows of src (F32 [row_len, n_tok]) into cache cells[t] of dst
 * (type F32/F16/Q8_0, rows dst_nb1 bytes apart, n_cells rows). */
int k_kv_store(struct kctx *k, struct kview src, const int32_t *cells, uint32_t dst_type,
               void *dst, int64_t dst_nb1, int64_t n_cells);

/* Two k_kv_store calls with the same cells in one launch. */
int k_kv_store2(struct kctx *k, struct kview s0, uint32_t t0, void *d0, int64_t nb0, int64_t nc0,
                struct kview s1, uint32_t t1, void *d1, int64_t nb1, int64_t nc1,
                const int32_t *cells);

/* Scratch bytes the attention launch with these arguments needs (0 for
 * the tensor-core prefill; the split counts are functions of the shapes
 * only, so a captured launch replays for any kv_len). xq: a q8_1 output is
 * wanted (k_attention_q with xq != NULL). */
size_t k_attn_scratch_bytes(struct kview q, uint32_t kv_type, const void *kc, const void *vc,
                            int64_t kv_nb1_k, int64_t kv_nb1_v, int64_t n_cells,
                            int64_t n_kv_head, int xq);
/* The tensor-core prefill kernel (attn-mma.cu) takes these shapes: head_dim
 * 64 or 128, rows aligned for its 16-byte (F32/F16) or 2-byte (Q8_0) loads. */
int k_attn_mma_ok(int64_t hd, int64_t n_head, int64_t n_tokens, uint32_t kv_type,
                  const void *kc, const void *vc, int64_t kv_nb1_k, int64_t kv_nb1_v);
/* k_attention by that kernel, no scratch (k_attn_mma_ok must hold). */
int k_attn_mma(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
               const void *vc, int64_t kv_nb1_k, int64_t kv_nb1_v, int64_t n_cells,
               int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos, float scale,
               int window, struct kview dst);
/* The tensor-core decode kernel (attn-dec.cu) takes these shapes: an F16
 * cache, head_dim 64 or 128, rows 16-byte aligned. */
int k_attn_dec_ok(int64_t hd, uint32_t kv_type, const void *kc, const void *vc,
                  int64_t kv_nb1_k, int64_t kv_nb1_v);
/* Its split count (a function of the shapes only): over cell lists, and
 * (_seq) over a sequence's first cells, one split for the smallest buckets. */
int k_attn_dec_splits(int64_t n_kv_head, int64_t group, int64_t n_tokens, int64_t n_cells);
int k_attn_dec_seq_splits(int64_t n_kv_head, int64_t group, int64_t n_tokens, int64_t n_cells);
/* k_attention_q by that kernel, which with one split writes dst (and
 * xq) itself, else by its combine pass; scratch holds n_tokens * n_head *
 * splits rows of head_dim + 2 floats. */
int k_attn_dec(struct kctx *k, struct kview q, const void *kc, const void *vc, int64_t kv_nb1_k,
               int64_t kv_nb1_v, int64_t n_cells, int64_t n_kv_head, const int32_t *kv_len,
               const int32_t *pos, float scale, int window, int splits, void *scratch,
               struct kview dst, void *xq);
/* The same over ATTENTION_LISTS' cell lists (k_attention_lists' form);
 * xq as k_attention_lists'. */
int k_attn_dec_lists(struct kctx *k, struct kview q, const void *kc, const void *vc,
                     int64_t kv_nb1_k, int64_t kv_nb1_v, int64_t n_cells, int64_t n_kv_head,
                     const int32_t *range, const int32_t *qlist, const int32_t *lists,
                     int64_t n_kv, int64_t n_lists, float scale, int splits, void *scratch,
                     struct kview dst, void *xq, int xq_group);
/* minfer-cuda-bench: the decode kernel's block target (0 = default, < 0 =
 * off: the scalar decode kernel serves F16 too). */
void k_tune_attn_dec(int blocks);
/* minfer-cuda-bench: the bucket size up to which a decode takes the short
 * per-head split kernel over any cache (0 = the default rule: up to 64
 * cells where the tensor-core decode kernel cannot run; -1 = never). */
void k_tune_attn_short(int cells);
/* minfer-cuda-bench and the op tests: the tensor-core prefill kernel's
 * variant (0 = the default per cache type; 1 or 3: mma.sync with launch
 * bounds of that many blocks per SM; 9: the sm_90a wgmma form where it
 * runs, else 3). */
void k_tune_attn_prefill(int minb);
/* Causal GQA attention: many tokens on tensor cores (flash attention, one
 * pass), few tokens by GQA split-K partials and a combine pass.
 * q, dst: [hd, n_head, n_tokens]; K/V caches [hd*n_kv, n_cells] of kv_type
 * rows kv_nb1 bytes apart; kv_len: I32[1], pos: I32[n_tokens] on device;
 * window: ATTENTION's iparams[1], a sliding window (0 = none). */
int k_attention(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                const void *vc, int64_t kv_nb1_k, int64_t kv_nb1_v, int64_t n_cells,
                int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos, float scale,
                int window, struct kview dst, void *scratch);

/* k_attention that also writes dst as q8_1 blocks into xq (rows of
 * hd * n_head values per token, what k_quantize_q8_1 of dst would give,
 * bit for bit); head_dim % 32 == 0. xq NULL: k_attention. */
int k_attention_q(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                  const void *vc, int64_t kv_nb1_k, int64_t kv_nb1_v, int64_t n_cells,
                  int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos, float scale,
                  int window, struct kview dst, void *scratch, void *xq);

/* ---- mixture of experts (kernels/moe.cu); routing stays on the device ---- */

/* dst[j, t] (I32 [k, T]) = the k largest of x[:, t] (F32 [n, T]), largest
 * first, lower index first on ties; k <= 64, n <= 4096. */
int k_topk(struct kctx *k, struct kview x, int kk, struct kview dst);
/* dst[j, t] = softmax weight of expert ids[j, t] among all n (renorm 0) or
 * among the chosen k (renorm 1). */
int k_moe_weights(struct kctx *k, struct kview logits, struct kview ids, int renorm,
                  struct kview dst);
/* dst[:, t] = sum_j w[j, t] * x[:, j, t]. */
int k_moe_sum(struct kctx *k, struct kview x, struct kview w, struct kview dst);
/* Scratch bytes of k_mul_mat_id for n_expert experts and k * T slots. */
size_t k_mul_mat_id_scratch_bytes(int64_t n_expert, int64_t slots);
/* dst[:, j, t] = W[:, :, ids[j, t]] . x[:, j or 0, t]: a routing kernel
 * lists each expert's slots in scratch (device side, no host sync), then
 * one block per (row tile, expert, slot tile) reads its expert's rows once
 * for up to 8 gathered columns; blocks of unchosen experts return at once.
 * W: [K, N, n_expert] of any readable type (K % 8 == 0), rows w_nb1 and
 * experts w_nb2 bytes apart. An id outside [0, n_expert) sets KFLAG_MOE_ID
 * and its slot is left unwritten. */
int k_mul_mat_id(struct kctx *k, uint32_t type, const void *W, int64_t K, int64_t N,
                 int64_t n_expert, int64_t w_nb1, int64_t w_nb2, struct kview x,
                 struct kview ids, struct kview dst, void *scratch);

/* ATTENTION_LISTS (kernels/attn-lists.cu): query t reads entries
 * [range[2t], range[2t+1]) of list qlist[t] of lists [n_kv, n_lists] (cells
 * of the K/V caches); splits and scratch depend on shapes only. A range,
 * list or cell out of range sets KFLAG_ATTN_LIST and is not read. */
int k_attn_lists_splits(int64_t n_head, int64_t n_tokens, int64_t n_kv);
size_t k_attn_lists_scratch_bytes(int64_t hd, int64_t n_head, int64_t n_kv_head,
                                  int64_t n_tokens, int64_t n_kv);
/* Whether k_attention_lists can also write its output's q8_1 blocks of
 * group 32 or 256 (the F16 caches its tensor-core form serves; for 256,
 * whole heads in each 256 values). */
int k_attn_lists_q8_1_ok(int64_t hd, int64_t n_head, int group, uint32_t kv_type,
                         const void *kc, const void *vc, int64_t knb1, int64_t vnb1);
/* xq (NULL: none; only where k_attn_lists_q8_1_ok): dst's rows, [hd *
 * n_head, n_tokens], also as k_quantize_q8_1's blocks of group xq_group,
 * bit for bit. */
int k_attention_lists(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                      const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                      int64_t n_kv_head, const int32_t *range, const int32_t *qlist,
                      const int32_t *lists, int64_t n_kv, int64_t n_lists, float scale,
                      struct kview dst, void *scratch, void *xq, int xq_group);

#ifdef __cplusplus
}
#endif

#endif /* MINFER_CUDA_KERNELS_H */
