/*
 * bench-ops.c — minfer-cuda-bench: micro-benchmarks of the CUDA kernels
 * through the device layer (no IR, no core). For each weight type and
 * 7B-class shape it times the decode matrix-vector kernel with CUDA events
 * after a warm-up, rotating over enough weight copies that the working
 * set is many times the L2, and prints achieved GB/s against the measured
 * device-to-device copy bandwidth. Also times the prefill GEMM.
 *
 * Also the attention kernels: prefill TFLOP/s at 4k/16k/32k tokens and
 * decode GB/s of KV read at depths 1k..32k.
 *
 * usage: minfer-cuda-bench [--quick] [--gemm] [--gemmq] [--gemmwg] [--attn] [--matvec]
 *        [--matvec-tpr] [--multi] [--qkv]
 * (prints a table on stdout; --gemm: the prefill GEMM rows only; --gemmq:
 * the in-place quantized GEMM against the f16-scratch one, q4_K, q6_K and
 * q8_0 at 4..256 tokens, then its and gemm-i8.cu's split-K counts forced;
 * --gemmwg: the Hopper wgmma GEMM against both, 16
 * to 2048 tokens; --gemm-one K N M BN: one GEMM shape and kernel (BN as
 * k_tune_gemm's; the weights q4_K, or of the type --gemm-type names, e.g.
 * q8_0), for a profiler; --attn: the
 * attention rows only; --matvec: the nt = 1 rows of a Q4_K_M/Q8_0 model's
 * types, q4_K, q6_K and q8_0, at the four 7B shapes, ffn up/down, attn q/o,
 * k/v, with programmatic dependent launch allowed, then off; --matvec-tpr:
 * the same rows and the Q/K/V group at each forced thread count a row
 * group, 32, 64, 128 (and the rule's); --multi:
 * nt = 2, 4, 8 of q4_K and q6_K at ffn up with one and two rows per
 * thread group, the batched decode's products; --qkv: the 7B's Q, K and V
 * products as one launch and as three, q4_K with a q4_K or q6_K V, and
 * all q8_0)
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device.h"
#include "kernels/kernels.h"
#include "minfer/quant.h"

/* ---- random weights with sane scales ---- */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) /* [-1, 1) */
{
    return (float)(rnd() & 0xffffff) / 8388608.0f - 1.0f;
}

static void put16(uint8_t *p, uint16_t v)
{
    memcpy(p, &v, 2);
}

/* Fills a row of n elements of type t with random payload and small scales. */
static void fill_row(uint32_t t, uint8_t *row, int64_t n)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(t);
    size_t bytes = minfer_row_size(t, n);
    for (size_t i = 0; i < bytes; i++)
        row[i] = (uint8_t)rnd();
    int64_t nb = n / tr->block_size;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = row + b * tr->type_size;
        uint16_t d = minfer_fp32_to_fp16(0.01f + 0.01f * (rndf() + 1.0f));
        uint16_t m = minfer_fp32_to_fp16(0.005f * rndf());
        switch (t) {
        case MINFER_TYPE_F32: { float f = rndf(); memcpy(p, &f, 4); break; }
        case MINFER_TYPE_F16: put16(p, minfer_fp32_to_fp16(rndf())); break;
        case MINFER_TYPE_BF16: put16(p, minfer_fp32_to_bf16(rndf())); break;
        case MINFER_TYPE_Q4_0: case MINFER_TYPE_Q5_0: case MINFER_TYPE_Q8_0:
            put16(p, d); break;
        case MINFER_TYPE_Q4_1: case MINFER_TYPE_Q5_1: case MINFER_TYPE_Q4_K:
        case MINFER_TYPE_Q5_K:
            put16(p, d); put16(p + 2, m); break;
        case MINFER_TYPE_Q6_K: put16(p + 208, d); break;
        default: break;
        }
    }
}

/* ---- bench ---- */

struct shape {
    int64_t K, N;
    const char *what;
};

static double g_copy_gbs;
static int g_cfg[3]; /* the GEMM bk, splits, bn last forced (0: automatic) */

static int bench_copy(struct cu_ctx *c)
{
    size_t sz = (size_t)1 << 30;
    void *a = NULL, *b = NULL;
    if (cu_pool_alloc(c, sz, "copy src", &a) || cu_pool_alloc(c, sz, "copy dst", &b))
        return -1;
    cu_memset(c, a, 1, sz);
    for (int i = 0; i < 3; i++)
        cu_copy_d2d(c, b, a, sz);
    float ms = 0;
    int it = 20;
    cu_timer_start(c);
    for (int i = 0; i < it; i++)
        cu_copy_d2d(c, b, a, sz);
    if (cu_timer_stop(c, &ms))
        return -1;
    g_copy_gbs = 2.0 * (double)sz * it / (ms * 1e-3) / 1e9;
    printf("copy D2D 1 GiB: %.0f GB/s (read + write)\n", g_copy_gbs);
    cu_pool_free(c, a);
    cu_pool_free(c, b);
    return 0;
}

/* Frees a matrix-vector bench's weight copies and vectors (NULL ones skip). */
static void free_mv_buffers(struct cu_ctx *c, void *const *w, int nw, void *x, void *y, void *xq)
{
    for (int i = 0; i < nw; i++)
        cu_pool_free(c, w[i]);
    cu_pool_free(c, x);
    cu_pool_free(c, y);
    cu_pool_free(c, xq);
    fflush(stdout);
}

static int bench_matvec(struct cu_ctx *c, uint32_t t, struct shape s, int nt, int quick)
{
    size_t rowb = minfer_row_size(t, s.K);
    size_t mat = rowb * (size_t)s.N;
    size_t want = (size_t)2 << 30; /* 2 GiB of weights: 40x the 50 MB L2 */
    int copies = (int)((want + mat - 1) / mat);
    if (copies < 4)
        copies = 4;
    if (copies > 64)
        copies = 64;
    uint8_t *host = malloc(mat);
    if (!host)
        return -1;
    for (int64_t r = 0; r < s.N; r++)
        fill_row(t, host + r * rowb, s.K);
    void *w[64];
    int nw = 0;
    for (; nw < copies; nw++) {
        char what[32];
        snprintf(what, sizeof what, "bench weight %d", nw);
        if (cu_pool_alloc(c, mat, what, &w[nw]) || cu_write(c, w[nw], host, mat)) {
            fprintf(stderr, "%s\n", cu_ctx_error(c));
            break;
        }
    }
    free(host);
    float *x = NULL, *y = NULL;
    void *xq = NULL;
    size_t xb = (size_t)s.K * nt * 4;
    float *hx = malloc(xb);
    for (int64_t i = 0; i < s.K * nt; i++)
        hx[i] = rndf();
    int rc = -1;
    if (nw < 2 || cu_pool_alloc(c, xb, "x", (void **)&x) ||
        cu_pool_alloc(c, (size_t)s.N * nt * 4, "y", (void **)&y) ||
        cu_pool_alloc(c, k_q8_1_bytes(s.K, nt) + 64, "xq", &xq) || cu_write(c, x, hx, xb))
        goto out;
    struct kctx *k = cu_ctx_kctx(c);
    int quant = k_matvec_q_supported(t);
    if (quant && k_quantize_q8_1(k, x, s.K, nt, s.K * 4, 32, xq))
        goto kerr;
    int iters = quick ? 3 * nw : 10 * nw;
    for (int pass = 0; pass < 2; pass++) { /* pass 0: matvec only; 1: with quantize */
        if (pass == 1 && !quant)
            break;
        for (int i = 0; i < nw; i++) { /* warm-up */
            int e = quant ? k_matvec_q(k, t, w[i], s.K, s.N, rowb, xq, nt, y, s.N * 4)
                          : k_matvec_f(k, t, w[i], s.K, s.N, rowb, x, s.K * 4, nt, y, s.N * 4);
            if (e)
                goto kerr;
        }
        float ms = 0;
        cu_timer_start(c);
        for (int i = 0; i < iters; i++) {
            int e = 0;
            if (pass == 1)
                e = k_quantize_q8_1(k, x, s.K, nt, s.K * 4, 32, xq);
            if (!e)
                e = quant ? k_matvec_q(k, t, w[i % nw], s.K, s.N, rowb, xq, nt, y, s.N * 4)
                          : k_matvec_f(k, t, w[i % nw], s.K, s.N, rowb, x, s.K * 4, nt, y,
                                       s.N * 4);
            if (e)
                goto kerr;
        }
        if (cu_timer_stop(c, &ms)) {
            fprintf(stderr, "%s\n", cu_ctx_error(c));
            goto out;
        }
        double us = ms * 1e3 / iters;
        double gbs = (double)mat / (us * 1e-6) / 1e9;
        printf("matvec %-5s %-22s nt=%d %s %8.1f us  %7.0f GB/s  %5.1f%% of copy  %5.1f%% of 4230\n",
               minfer_type_traits_of(t)->name, s.what, nt, pass ? "+quant" : "      ", us, gbs,
               100.0 * gbs / g_copy_gbs, 100.0 * gbs / 4230.0);
    }
    rc = 0;
    goto out;
kerr:
    fprintf(stderr, "kernel error: %s\n", k->err);
out:
    free(hx);
    free_mv_buffers(c, w, nw, x, y, xq);
    return rc;
}

/* The 7B decode's Q, K and V products of one x (3584 x 3584 and 3584 x
 * 512 of type qt, 3584 x 512 of type vt) as one k_matvec_q_multi launch
 * and as three k_matvec_q launches; weights rotated over copies as
 * bench_matvec does, back to back with programmatic dependent launch as
 * allowed. */
static int bench_qkv(struct cu_ctx *c, uint32_t qt, uint32_t vt, int quick)
{
    const int64_t K = 3584, N[3] = {3584, 512, 512};
    const uint32_t ty[3] = {qt, qt, vt};
    size_t rowb[3], off[3], set = 0;
    int64_t row0[3], rows = 0; /* each product's first row in y */
    for (int m = 0; m < 3; m++) {
        rowb[m] = minfer_row_size(ty[m], K);
        off[m] = set;
        set += (rowb[m] * (size_t)N[m] + 255) / 256 * 256;
        row0[m] = rows;
        rows += N[m];
    }
    enum { COPIES = 64 };
    uint8_t *host = malloc(set);
    void *w[COPIES];
    int nw = 0, rc = -1;
    if (!host)
        return -1;
    for (int m = 0; m < 3; m++)
        for (int64_t r = 0; r < N[m]; r++)
            fill_row(ty[m], host + off[m] + r * rowb[m], K);
    for (; nw < COPIES; nw++)
        if (cu_pool_alloc(c, set, "qkv weights", &w[nw]) || cu_write(c, w[nw], host, set))
            break;
    free(host);
    float *x = NULL, *y = NULL, hx[3584];
    void *xq = NULL;
    for (int64_t i = 0; i < K; i++)
        hx[i] = rndf();
    struct kctx *k = cu_ctx_kctx(c);
    if (nw < 4 || cu_pool_alloc(c, K * 4, "x", (void **)&x) ||
        cu_pool_alloc(c, (size_t)rows * 4, "y", (void **)&y) ||
        cu_pool_alloc(c, k_q8_1_bytes(K, 1) + 64, "xq", &xq) || cu_write(c, x, hx, K * 4) ||
        k_quantize_q8_1(k, x, K, 1, K * 4, 32, xq))
        goto out;
    int iters = quick ? 3 * nw : 10 * nw;
    double us[2];
    for (int sep = 0; sep < 2; sep++) {
        float ms = 0;
        for (int pass = 0; pass < 2; pass++) { /* warm-up, timed */
            int n = pass ? iters : nw;
            if (pass)
                cu_timer_start(c);
            for (int i = 0; i < n; i++) {
                const uint8_t *W = w[i % nw];
                struct kmv_seg sg[3];
                int e = 0;
                for (int m = 0; m < 3; m++) {
                    sg[m] = (struct kmv_seg){ty[m], W + off[m], (int64_t)rowb[m], N[m],
                                             y + row0[m], NULL};
                    if (sep && !e)
                        e = k_matvec_q(k, ty[m], sg[m].W, K, N[m], sg[m].w_nb1, xq, 1, sg[m].dst,
                                       N[m] * 4);
                }
                if (!sep)
                    e = k_matvec_q_multi(k, sg, 3, K, xq);
                if (e)
                    goto kerr;
            }
        }
        if (cu_timer_stop(c, &ms))
            goto out;
        us[sep] = ms * 1e3 / iters;
    }
    printf("qkv q,k=%-5s v=%-5s one launch %6.2f us, three launches %6.2f us\n",
           minfer_type_traits_of(qt)->name, minfer_type_traits_of(vt)->name, us[0], us[1]);
    rc = 0;
    goto out;
kerr:
    fprintf(stderr, "kernel error: %s\n", k->err);
out:
    free_mv_buffers(c, w, nw, x, y, xq);
    return rc;
}

/* The prefill GEMM as run_gemm drives it: activations to f16, then
 * k_gemm (the in-place quantized kernel, or dequantization to f16
 * scratch + the tensor-core kernel); xl adds the float-weight hi/lo second
 * pass. The weights rotate over copies worth >= 512 MB (up to 512 of
 * them: a 1 MB attention K matrix took 16 before, which the 50 MB L2
 * held), so small token counts read them from memory as a model does.
 * TFLOP/s counts 2*K*N*M once; GB/s is the quantized weight bytes per
 * call. */
#define GEMM_COPIES 512
static int bench_gemm(struct cu_ctx *c, uint32_t t, int64_t K, int64_t N, int64_t M, int split,
                      const char *what)
{
    size_t rowb = minfer_row_size(t, K), mat = rowb * (size_t)N;
    int copies = (int)(((size_t)512 << 20) / mat + 1);
    if (copies > GEMM_COPIES)
        copies = GEMM_COPIES;
    uint8_t *host = malloc(mat);
    float *hx = malloc((size_t)K * M * 4);
    void *w[GEMM_COPIES] = {0}, *x = NULL, *y = NULL, *xh = NULL, *xl = NULL, *ws = NULL;
    struct kctx *k = cu_ctx_kctx(c);
    int rc = -1;
    if (!host || !hx)
        goto out;
    for (int64_t r = 0; r < N; r++)
        fill_row(t, host + r * rowb, K);
    for (int64_t i = 0; i < K * M; i++)
        hx[i] = rndf();
    size_t wsb = k_gemm_scratch_bytes(k, t, NULL, K, N, M, rowb);
    for (int i = 0; i < copies; i++)
        if (cu_pool_alloc(c, mat, "gemm w", &w[i]) || cu_write(c, w[i], host, mat))
            goto out;
    if (cu_pool_alloc(c, (size_t)K * M * 4, "gemm x", &x) ||
        cu_pool_alloc(c, (size_t)N * M * 4, "gemm y", &y) ||
        cu_pool_alloc(c, k_gemm_act_bytes(K, M), "gemm xh", &xh) ||
        cu_pool_alloc(c, k_gemm_act_bytes(K, M), "gemm xl", &xl) ||
        (wsb && cu_pool_alloc(c, wsb, "gemm scratch", &ws)) ||
        cu_write(c, x, hx, (size_t)K * M * 4))
        goto out;
    int iters = 2 + 2 * copies; /* 2 warm-up, then each copy twice */
    for (int i = 0; i < iters; i++) {
        if (i == 2)
            cu_timer_start(c);
        if (k_gemm_act(k, t, x, K, M, K * 4, xh, split ? xl : NULL) ||
            k_gemm(k, t, w[i % copies], K, N, rowb, xh, split ? xl : NULL, M, y, N * 4, ws,
                   NULL)) {
            fprintf(stderr, "kernel error: %s\n", k->err);
            goto out;
        }
    }
    float ms = 0;
    if (cu_timer_stop(c, &ms))
        goto out;
    double s = ms * 1e-3 / (iters - 2);
    printf("gemm   %-5s %-22s M=%-4lld%s bk,splits,bn %2d,%d,%3d %8.1f us  %6.1f TFLOP/s "
           "%6.0f GB/s\n",
           minfer_type_traits_of(t)->name, what, (long long)M, split ? " hi/lo" : "      ",
           g_cfg[0], g_cfg[1], g_cfg[2], s * 1e6, 2.0 * K * N * M / s / 1e12, mat / s / 1e9);
    rc = 0;
out:
    free(host);
    free(hx);
    for (int i = 0; i < copies; i++)
        cu_pool_free(c, w[i]);
    cu_pool_free(c, x);
    cu_pool_free(c, y);
    cu_pool_free(c, xh);
    cu_pool_free(c, xl);
    cu_pool_free(c, ws);
    fflush(stdout);
    return rc;
}

/* ---- attention (qwen2.5-7b shapes: head_dim 128, 28 query heads, 4 KV
 * heads) ---- */

#define AT_HD 128
#define AT_NH 28
#define AT_NKV 4
#define AT_LAYERS 28 /* decode rotates over this many caches, as a model does */

static struct kview at_view(void *data, int64_t hd, int64_t nh, int64_t nt)
{
    struct kview v = {data, {hd, nh, nt, 1}, {4, hd * 4, hd * nh * 4, hd * nh * nt * 4}};
    return v;
}

/* Random f16 or q8_0 cache rows of AT_HD * AT_NKV values. */
static uint8_t *at_cache_host(uint32_t t, int64_t cells, size_t *bytes)
{
    size_t rowb = minfer_row_size(t, AT_HD * AT_NKV);
    *bytes = rowb * (size_t)cells;
    uint8_t *h = malloc(*bytes);
    if (h)
        for (int64_t r = 0; r < cells; r++)
            fill_row(t, h + (size_t)r * rowb, AT_HD * AT_NKV);
    return h;
}

/* Microseconds per decode call of one token at depth d reading `cells`
 * cells (the graph's bucket), rotating over the AT_LAYERS caches; < 0
 * after printing why it failed. */
static double attn_decode_us(struct cu_ctx *c, uint32_t t, void *q, void *o, void *const *kc,
                             void *const *vc, size_t rowb, int64_t cells, void *len, void *pos,
                             int32_t d)
{
    struct kctx *k = cu_ctx_kctx(c);
    int32_t hp = d - 1;
    void *part = NULL;
    struct kview qv = at_view(q, AT_HD, AT_NH, 1), ov = at_view(o, AT_HD, AT_NH, 1);
    size_t need = k_attn_scratch_bytes(qv, t, kc[0], vc[0], (int64_t)rowb, (int64_t)rowb, cells,
                                       AT_NKV, 0);
    if (cu_write(c, len, &d, 4) || cu_write(c, pos, &hp, 4) ||
        (need && cu_pool_alloc(c, need, "attn scratch", &part))) {
        fprintf(stderr, "attention bench: %s\n", cu_ctx_error(c));
        return -1;
    }
    const int iters = 10 * AT_LAYERS;
    float ms = 0;
    double us = -1;
    for (int r = 0; r < AT_LAYERS + iters; r++) {
        if (r == AT_LAYERS)
            cu_timer_start(c);
        int l = r % AT_LAYERS;
        if (k_attention(k, qv, t, kc[l], vc[l], (int64_t)rowb, (int64_t)rowb, cells, AT_NKV, len,
                        pos, 1.0f / sqrtf((float)AT_HD), 0, ov, part)) {
            fprintf(stderr, "kernel error: %s\n", k->err);
            goto out;
        }
    }
    if (cu_timer_stop(c, &ms))
        fprintf(stderr, "attention bench: %s\n", cu_ctx_error(c));
    else
        us = ms * 1e3 / iters;
out:
    cu_pool_free(c, part);
    return us;
}

/* Prefill: one causal pass of T tokens over T cells; TFLOP/s counts the
 * visible half of QK^T and PV (4 * hd * n_head * T^2 / 2). Decode: one
 * token at each depth, rotating over AT_LAYERS caches of 32,768 cells (so
 * short depths are not timed from L2 alone: a model has as many); GB/s =
 * K and V bytes of the visible cells per call. */
static int bench_attn(struct cu_ctx *c, uint32_t t)
{
    struct kctx *k = cu_ctx_kctx(c);
    const int64_t cells = 32768;
    const int prefill_t[] = {4096, 16384, 32768}, depths[] = {1024, 4096, 16384, 32768};
    size_t cb = 0;
    uint8_t *host = at_cache_host(t, cells, &cb);
    int32_t *hpos = malloc(sizeof *hpos * (size_t)cells);
    float *hq = malloc((size_t)AT_HD * AT_NH * cells * 4);
    void *kc[AT_LAYERS] = {0}, *vc[AT_LAYERS] = {0}, *q = NULL, *o = NULL, *len = NULL, *pos = NULL,
         *part = NULL;
    int rc = -1;
    size_t rowb = minfer_row_size(t, AT_HD * AT_NKV);
    if (!host || !hpos || !hq)
        goto out;
    for (int64_t i = 0; i < cells; i++)
        hpos[i] = (int32_t)i;
    for (int64_t i = 0; i < (int64_t)AT_HD * AT_NH * cells; i++)
        hq[i] = rndf();
    for (int l = 0; l < AT_LAYERS; l++)
        if (cu_pool_alloc(c, cb, "attn k", &kc[l]) || cu_pool_alloc(c, cb, "attn v", &vc[l]) ||
            cu_write(c, kc[l], host, cb) || cu_write(c, vc[l], host, cb))
            goto kerr_dev;
    if (cu_pool_alloc(c, (size_t)AT_HD * AT_NH * cells * 4, "attn q", &q) ||
        cu_pool_alloc(c, (size_t)AT_HD * AT_NH * cells * 4, "attn out", &o) ||
        cu_pool_alloc(c, 4, "kv_len", &len) || cu_pool_alloc(c, (size_t)cells * 4, "pos", &pos) ||
        cu_write(c, q, hq, (size_t)AT_HD * AT_NH * cells * 4) ||
        cu_write(c, pos, hpos, (size_t)cells * 4))
        goto kerr_dev;
    /* the prefill kernel in each variant (k_tune_attn_prefill's numbers:
     * mma.sync with one or two buffers per operand, wgmma where it runs) */
    const int variants[] = {1, 3, 9}, nv = (int)(sizeof variants / sizeof variants[0]);
    for (int i = 0; i < (int)(sizeof prefill_t / sizeof prefill_t[0]) * nv; i++) {
        int64_t T = prefill_t[i / nv];
        k_tune_attn_prefill(variants[i % nv]);
        int32_t kl = (int32_t)T;
        struct kview qv = at_view(q, AT_HD, AT_NH, T), ov = at_view(o, AT_HD, AT_NH, T);
        size_t need = k_attn_scratch_bytes(qv, t, kc[0], vc[0], (int64_t)rowb, (int64_t)rowb, T,
                                           AT_NKV, 0);
        if (cu_write(c, len, &kl, 4) || (need && cu_pool_alloc(c, need, "attn scratch", &part)))
            goto kerr_dev;
        int reps = T > 16384 ? 3 : 5;
        float ms = 0;
        for (int r = 0; r <= reps; r++) {
            if (r == 1)
                cu_timer_start(c);
            if (k_attention(k, qv, t, kc[0], vc[0], (int64_t)rowb, (int64_t)rowb, T, AT_NKV,
                            len, pos, 1.0f / sqrtf((float)AT_HD), 0, ov, part))
                goto kerr;
        }
        if (cu_timer_stop(c, &ms))
            goto kerr_dev;
        double sec = ms * 1e-3 / reps;
        double flop = 4.0 * AT_HD * AT_NH * (double)T * (double)T / 2;
        printf("attn prefill %-4s hd=%d h=%d/%d T=%-6lld v=%d %9.2f ms  %6.1f TFLOP/s\n",
               minfer_type_traits_of(t)->name, AT_HD, AT_NH, AT_NKV, (long long)T, variants[i % nv],
               sec * 1e3, flop / sec / 1e12);
        cu_pool_free(c, part);
        part = NULL;
    }
    k_tune_attn_prefill(0);
    /* F16: the tensor-core decode kernel at its default block target and
     * two others, then the scalar GQA kernel (k_tune_attn_dec(-1)) */
    const int tunes[] = {0, 264, 1056, -1};
    const int n_depths = (int)(sizeof depths / sizeof depths[0]);
    const int n_runs = (t == MINFER_TYPE_F16 ? 4 : 1) * n_depths;
    for (int run = 0; run < n_runs; run++) {
        int tune = tunes[run / n_depths];
        k_tune_attn_dec(tune);
        int32_t d = depths[run % n_depths];
        double us = attn_decode_us(c, t, q, o, kc, vc, rowb, cells, len, pos, d);
        if (us < 0)
            goto out;
        double gbs = 2.0 * (double)rowb * d / (us * 1e-6) / 1e9;
        char kern[32];
        if (tune > 0)
            snprintf(kern, sizeof kern, "mma %d blocks", tune);
        else
            snprintf(kern, sizeof kern, "%s", tune < 0 ? "scalar" : "default");
        printf("attn decode  %-4s hd=%d h=%d/%d depth=%-6d %8.1f us  %7.0f GB/s  %5.1f%% "
               "of 4230  (%s)\n",
               minfer_type_traits_of(t)->name, AT_HD, AT_NH, AT_NKV, d, us, gbs,
               100.0 * gbs / 4230.0, kern);
    }
    k_tune_attn_dec(0);
    /* Short contexts, as a decode from an empty cache sees them (tg128):
     * the cells read are the graph's KV bucket, here the depth itself; the
     * short per-head split kernel forced against never taking it (the
     * tensor-core kernel for F16, the scalar GQA one otherwise) */
    const int short_depths[] = {32, 64, 128, 512};
    for (int run = 0; run < 8; run++) {
        int off = run >= 4;
        int32_t d = short_depths[run % 4];
        k_tune_attn_short(off ? -1 : 512);
        double us = attn_decode_us(c, t, q, o, kc, vc, rowb, d, len, pos, d);
        if (us < 0)
            goto out;
        printf("attn decode  %-4s hd=%d h=%d/%d depth=%-6d %8.1f us  (bucket %d, %s)\n",
               minfer_type_traits_of(t)->name, AT_HD, AT_NH, AT_NKV, d, us, d,
               off ? "short kernel never" : "short kernel forced");
    }
    k_tune_attn_short(0);
    rc = 0;
    goto out;
kerr:
    fprintf(stderr, "kernel error: %s\n", k->err);
    goto out;
kerr_dev:
    fprintf(stderr, "attention bench: %s\n", cu_ctx_error(c));
out:
    k_tune_attn_dec(0);
    k_tune_attn_short(0);
    free(host);
    free(hpos);
    free(hq);
    for (int l = 0; l < AT_LAYERS; l++) {
        cu_pool_free(c, kc[l]);
        cu_pool_free(c, vc[l]);
    }
    cu_pool_free(c, q);
    cu_pool_free(c, o);
    cu_pool_free(c, len);
    cu_pool_free(c, pos);
    cu_pool_free(c, part);
    fflush(stdout);
    return rc;
}

int main(int argc, char **argv)
{
    int quick = 0, gemm_only = 0, attn_only = 0, matvec_only = 0, multi_only = 0, gemmq_only = 0,
        qkv_only = 0, tpr_only = 0,
        gemmwg_only = 0, crossover_only = 0, one_splits = 0, one_k = 0, one_n = 0, one_m = 0,
        one_bn = 0;
    uint32_t one_type = MINFER_TYPE_Q4_K;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--gemm") == 0) {
            gemm_only = 1;
        } else if (strcmp(argv[i], "--attn") == 0) {
            attn_only = 1;
        } else if (strcmp(argv[i], "--matvec") == 0) {
            matvec_only = 1;
        } else if (strcmp(argv[i], "--multi") == 0) {
            multi_only = 1;
        } else if (strcmp(argv[i], "--qkv") == 0) {
            qkv_only = 1;
        } else if (strcmp(argv[i], "--matvec-tpr") == 0) {
            tpr_only = 1;
        } else if (strcmp(argv[i], "--crossover") == 0) {
            crossover_only = 1;
        } else if (strcmp(argv[i], "--gemmq") == 0) {
            gemmq_only = 1;
        } else if (strcmp(argv[i], "--gemmwg") == 0) {
            gemmwg_only = 1;
        } else if (strcmp(argv[i], "--gemm-type") == 0 && i + 1 < argc) {
            /* the weight type of --gemm-one (default q4_K), by its GGUF name */
            const char *name = argv[++i];
            one_type = MINFER_TYPE_COUNT;
            for (uint32_t t = 0; t < MINFER_TYPE_COUNT; t++) {
                const struct minfer_type_traits *tr = minfer_type_traits_of(t);
                if (tr && tr->supported && strcmp(tr->name, name) == 0)
                    one_type = t;
            }
            if (one_type == MINFER_TYPE_COUNT) {
                fprintf(stderr, "--gemm-type: %s is not a weight type this build reads\n", name);
                return 2;
            }
        } else if (strcmp(argv[i], "--gemm-one") == 0 && i + 4 < argc) {
            /* one GEMM call: K N M bn [splits] (as k_tune_gemm), for
             * profilers and split sweeps */
            one_k = atoi(argv[i + 1]), one_n = atoi(argv[i + 2]), one_m = atoi(argv[i + 3]);
            one_bn = atoi(argv[i + 4]);
            i += 4;
            if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9')
                one_splits = atoi(argv[++i]);
        } else {
            fprintf(stderr,
                    "usage: minfer-cuda-bench [--quick] [--gemm] [--gemmq] [--gemmwg] [--attn] "
                    "[--matvec] [--matvec-tpr] [--multi] [--qkv] [--crossover]\n");
            return 2;
        }
    }
    char err[512];
    struct minfer_device_info info = {.struct_size = sizeof info};
    if (cu_device_info(0, &info, err, sizeof err)) {
        printf("SKIPPED: %s\n", err);
        return 77;
    }
    printf("device: %s (%s), %.1f GiB\n", info.name, info.description,
           info.memory_total / 1073741824.0);
    struct cu_ctx *c = cu_ctx_new(0, err, sizeof err);
    if (!c) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    if (bench_copy(c))
        fprintf(stderr, "copy bench failed: %s\n", cu_ctx_error(c));
    static const uint32_t types[] = {MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_1, MINFER_TYPE_Q5_0,
                                     MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0, MINFER_TYPE_Q4_K,
                                     MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_F16,
                                     MINFER_TYPE_BF16, MINFER_TYPE_F32};
    struct shape shapes[] = {{3584, 18944, "3584x18944 (ffn up)"},
                             {18944, 3584, "18944x3584 (ffn down)"},
                             {3584, 3584, "3584x3584 (attn)"}};
    int fails = 0;
    if (attn_only) {
        fails += bench_attn(c, MINFER_TYPE_F16) != 0;
        fails += bench_attn(c, MINFER_TYPE_Q8_0) != 0;
        goto done;
    }
    if (gemm_only)
        goto gemm;
    if (gemmq_only) {
        /* the in-place quantized GEMM (bn = its token tile) against the
         * f16-scratch one (bn 128), same shapes and token counts; then
         * its split-K counts forced at batched-decode sizes */
        static const uint32_t qt[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
        static const int qm[] = {4, 8, 16, 64, 128, 256};
        for (size_t ti = 0; ti < 3; ti++)
            for (size_t si = 0; si < 3; si++)
                for (size_t mi = 0; mi < 6; mi++)
                    for (int v = 0; v < 2; v++) {
                        int cfg[3] = {0, 0, v ? (qm[mi] <= 16 ? 16 : 64) : 128};
                        memcpy(g_cfg, cfg, sizeof g_cfg);
                        k_tune_gemm(cfg[0], cfg[1], cfg[2]);
                        fails += bench_gemm(c, qt[ti], shapes[si].K, shapes[si].N, qm[mi], 0,
                                            shapes[si].what) != 0;
                    }
        /* gemm-q.cu's 16- and 64-token tiles (bn = m), then gemm-i8.cu's
         * 16- and 32-token ones (bn = 4000 + m) */
        for (size_t si = 0; si < 3; si++)
            for (int t = 0; t < 4; t++)
                for (int sp = 1; sp <= 8; sp *= 2) {
                    int m = t == 0 ? 16 : t == 1 ? 64 : t == 2 ? 16 : 32;
                    int cfg[3] = {0, sp, t < 2 ? m : 4000 + m};
                    memcpy(g_cfg, cfg, sizeof g_cfg);
                    k_tune_gemm(cfg[0], cfg[1], cfg[2]);
                    fails += bench_gemm(c, MINFER_TYPE_Q4_K, shapes[si].K, shapes[si].N, m, 0,
                                        shapes[si].what) != 0;
                }
        memset(g_cfg, 0, sizeof g_cfg);
        k_tune_gemm(0, 0, 0);
        goto done;
    }
    if (one_k > 0 && one_n > 0 && one_m > 0) {
        int cfg[3] = {0, one_splits, one_bn};
        memcpy(g_cfg, cfg, sizeof g_cfg);
        k_tune_gemm(cfg[0], cfg[1], cfg[2]);
        fails += bench_gemm(c, one_type, one_k, one_n, one_m, 0, "one") != 0;
        k_tune_gemm(0, 0, 0);
        goto done;
    }
    if (gemmwg_only) {
        /* the Hopper wgmma kernels (bn 1064 / 1128: gemm-wg.cu with 64 /
         * 128 tokens per block; 2256: gemm-ss.cu on f16 scratch) against
         * the f16-scratch mma.sync kernel (128, 256 from 4096 tokens),
         * gemm-q.cu's (16 / 64) and gemm-i8.cu's (4016 / 4032 / 4064 up to
         * 128 tokens) from batched decode to prefill sizes;
         * q4_K on the three 7B shapes, q6_K and q8_0 on the ffn one */
        static const uint32_t wt[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
        static const int wm[] = {16, 32, 64, 128, 256, 512, 2048, 8192};
        for (size_t ti = 0; ti < 3; ti++)
            for (size_t si = 0; si < (ti ? 1 : 3); si++)
                for (size_t mi = 0; mi < 8; mi++) {
                    int m = wm[mi];
                    int bns[6] = {m >= 4096 ? 256 : 128, m <= 16 ? 16 : 64, 1064, 1128, 2256,
                                  m <= 16 ? 4016 : m <= 32 ? 4032 : 4064};
                    for (int v = 0; v < 6; v++) {
                        if ((v == 1 && m > 64) || (v == 2 && m > 128) || (v == 4 && m < 128) ||
                            (v == 5 && m > 128))
                            continue;
                        int cfg[3] = {0, 0, bns[v]};
                        memcpy(g_cfg, cfg, sizeof g_cfg);
                        k_tune_gemm(cfg[0], cfg[1], cfg[2]);
                        fails += bench_gemm(c, wt[ti], shapes[si].K, shapes[si].N, m, 0,
                                            shapes[si].what) != 0;
                    }
                }
        memset(g_cfg, 0, sizeof g_cfg);
        k_tune_gemm(0, 0, 0);
        goto done;
    }
    if (crossover_only) {
        /* where batched decode should leave the nt = 2..8 matvec for
         * gemm-i8.cu's 16-token tile: both at 2-8 tokens, the types that
         * kernel covers, on the 7B and 1.5B shapes */
        static const uint32_t ct[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K,
                                      MINFER_TYPE_Q8_0};
        struct shape cs[] = {shapes[0], shapes[1], shapes[2], {3584, 512, "3584x512 (attn k/v)"},
                             {1536, 8960, "1536x8960 (1.5b ffn up)"},
                             {1536, 256, "1536x256 (1.5b k/v)"}};
        static const int cnt[] = {2, 3, 4, 6, 8};
        k_tune_matvec_rows(2);
        for (size_t ti = 0; ti < 4; ti++)
            for (size_t si = 0; si < 6; si++)
                for (size_t ni = 0; ni < 5; ni++) {
                    fails += bench_matvec(c, ct[ti], cs[si], cnt[ni], 1) != 0;
                    int cfg[3] = {0, 0, 4016};
                    memcpy(g_cfg, cfg, sizeof g_cfg);
                    k_tune_gemm(cfg[0], cfg[1], cfg[2]);
                    fails += bench_gemm(c, ct[ti], cs[si].K, cs[si].N, cnt[ni], 0,
                                        cs[si].what) != 0;
                    memset(g_cfg, 0, sizeof g_cfg);
                    k_tune_gemm(0, 0, 0);
                }
        goto done;
    }
    if (multi_only) {
        static const uint32_t mt[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K};
        for (int r = 2; r >= 1; r--) {
            k_tune_matvec_rows(r);
            printf("-- nt = 2..8 quantized kernels with %d row(s) per thread group --\n", r);
            for (size_t ti = 0; ti < 2; ti++)
                for (int nt = 2; nt <= 8; nt *= 2)
                    fails += bench_matvec(c, mt[ti], shapes[0], nt, quick) != 0;
        }
        k_tune_matvec_rows(2);
        /* what 16 and 64 tokens cost on the GEMM, against 2 and 8 nt = 8
         * matvec launches above */
        fails += bench_gemm(c, MINFER_TYPE_Q4_K, 3584, 18944, 16, 0, shapes[0].what) != 0;
        fails += bench_gemm(c, MINFER_TYPE_Q4_K, 3584, 18944, 64, 0, shapes[0].what) != 0;
        goto done;
    }
    if (qkv_only) {
        fails += bench_qkv(c, MINFER_TYPE_Q4_K, MINFER_TYPE_Q4_K, quick) != 0;
        fails += bench_qkv(c, MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, quick) != 0;
        fails += bench_qkv(c, MINFER_TYPE_Q8_0, MINFER_TYPE_Q8_0, quick) != 0;
        goto done;
    }
    if (tpr_only) {
        /* the nt = 1 products and the Q/K/V group at each thread count a
         * row group (0: the rule), dependent launch allowed */
        static const uint32_t mt[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
        struct shape ms[] = {shapes[0], shapes[1], shapes[2], {3584, 512, "3584x512 (attn k/v)"}};
        static const int tprs[] = {0, 32, 64, 128};
        k_tune_matvec_rows(2);
        for (size_t pi = 0; pi < 4; pi++) {
            k_tune_matvec_tpr(tprs[pi]);
            printf("-- threads a row group: %d (0: the rule) --\n", tprs[pi]);
            for (size_t ti = 0; ti < 3; ti++)
                for (size_t si = 0; si < 4; si++)
                    fails += bench_matvec(c, mt[ti], ms[si], 1, quick) != 0;
            fails += bench_qkv(c, MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, quick) != 0;
            fails += bench_qkv(c, MINFER_TYPE_Q8_0, MINFER_TYPE_Q8_0, quick) != 0;
        }
        k_tune_matvec_tpr(0);
        goto done;
    }
    if (matvec_only) {
        static const uint32_t mt[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0};
        struct shape ms[] = {shapes[0], shapes[1], shapes[2], {3584, 512, "3584x512 (attn k/v)"}};
        k_tune_matvec_rows(2);
        /* back to back, each product's launch overlaps the one before it
         * with programmatic dependent launch on (the default where the
         * device allows) and waits for its end with it off */
        for (int dep = 1; dep >= 0; dep--) {
            k_tune_dep_launch(dep);
            printf("programmatic dependent launch %s\n", dep ? "allowed" : "off");
            for (size_t ti = 0; ti < 3; ti++)
                for (size_t si = 0; si < 4; si++)
                    fails += bench_matvec(c, mt[ti], ms[si], 1, quick) != 0;
        }
        k_tune_dep_launch(1);
        goto done;
    }
    for (int r = 2; r >= 1; r--) {
        k_tune_matvec_rows(r);
        printf("-- nt=1 quantized kernels with %d row(s) per thread --\n", r);
        for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
            if (r == 1 && !k_matvec_q_supported(types[ti]))
                continue;
            for (size_t si = 0; si < 3; si++)
                fails += bench_matvec(c, types[ti], shapes[si], 1, quick) != 0;
        }
    }
    k_tune_matvec_rows(2);
    static const uint32_t multi[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q8_0, MINFER_TYPE_Q6_K};
    for (size_t ti = 0; ti < 3; ti++)
        for (int nt = 2; nt <= 8; nt *= 2)
            fails += bench_matvec(c, multi[ti], shapes[0], nt, quick) != 0;
gemm:;
    /* 7B prefill (pp512) shapes; q4_K/q6_K are a Q4_K_M model's types */
    static const uint32_t gt[] = {MINFER_TYPE_Q4_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_0,
                                  MINFER_TYPE_F16};
    struct shape gs[] = {shapes[0], shapes[1], shapes[2], {3584, 512, "3584x512 (attn k/v)"}};
    /* q4_K: also each kernel variant forced (bk, splits, bn; 0 = auto) */
    static const int cfgs[][3] = {{0, 0, 0}, {64, 1, 0}, {32, 0, 0}, {64, 0, 256}, {64, 1, 256}};
    for (size_t ti = 0; ti < 4; ti++)
        for (size_t si = 0; si < 4; si++)
            for (size_t ci = 0; ci < (ti == 0 ? 5 : ti == 3 ? 4 : 1); ci += ti == 3 ? 3 : 1) {
                memcpy(g_cfg, cfgs[ci], sizeof g_cfg); /* f16: auto and 256 rows */
                k_tune_gemm(g_cfg[0], g_cfg[1], g_cfg[2]);
                fails += bench_gemm(c, gt[ti], gs[si].K, gs[si].N, 512, 0, gs[si].what) != 0;
            }
    memset(g_cfg, 0, sizeof g_cfg);
    k_tune_gemm(0, 0, 0);
    fails += bench_gemm(c, MINFER_TYPE_F16, 3584, 18944, 512, 1, shapes[0].what) != 0;
    fails += bench_gemm(c, MINFER_TYPE_Q4_K, 3584, 18944, 2048, 0, shapes[0].what) != 0;
    if (!gemm_only) {
        fails += bench_attn(c, MINFER_TYPE_F16) != 0;
        fails += bench_attn(c, MINFER_TYPE_Q8_0) != 0;
    }
done:
    cu_ctx_free(c);
    cu_shutdown();
    printf("bench done, %d failures\n", fails);
    return fails ? 1 : 0;
}
