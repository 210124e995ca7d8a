/*
 * bench-ops.c — minfer-cuda-bench: micro-benchmarks of the CUDA kernels
 * through the device layer (no IR, no core). For each weight type and
 * 7B-class shape it times the decode matrix-vector kernel with CUDA events
 * after a warm-up, rotating over enough weight copies that the working
 * set is many times the L2, and prints achieved GB/s against the measured
 * device-to-device copy bandwidth. Also times the prefill GEMM.
 *
 * usage: minfer-cuda-bench [--quick] [--gemm]   (prints a table on stdout;
 * --gemm: the prefill GEMM rows only)
 */
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
    if (quant && k_quantize_q8_1(k, x, s.K, nt, s.K * 4, xq))
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
                e = k_quantize_q8_1(k, x, s.K, nt, s.K * 4, xq);
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
    for (int i = 0; i < nw; i++)
        cu_pool_free(c, w[i]);
    cu_pool_free(c, x);
    cu_pool_free(c, y);
    cu_pool_free(c, xq);
    fflush(stdout);
    return rc;
}

/* The prefill GEMM as run_gemm drives it: activations to f16, then
 * k_gemm (dequantization to f16 scratch + the tensor-core kernel); xl
 * adds the float-weight hi/lo second pass. TFLOP/s counts 2*K*N*M once. */
static int bench_gemm(struct cu_ctx *c, uint32_t t, int64_t K, int64_t N, int64_t M, int split,
                      const char *what)
{
    size_t rowb = minfer_row_size(t, K), mat = rowb * (size_t)N;
    uint8_t *host = malloc(mat);
    float *hx = malloc((size_t)K * M * 4);
    void *w = NULL, *x = NULL, *y = NULL, *xh = NULL, *xl = NULL, *ws = NULL;
    struct kctx *k = cu_ctx_kctx(c);
    int rc = -1;
    if (!host || !hx)
        goto out;
    for (int64_t r = 0; r < N; r++)
        fill_row(t, host + r * rowb, K);
    for (int64_t i = 0; i < K * M; i++)
        hx[i] = rndf();
    size_t wsb = k_gemm_scratch_bytes(k, t, NULL, K, N, M, rowb);
    if (cu_pool_alloc(c, mat, "gemm w", &w) || cu_pool_alloc(c, (size_t)K * M * 4, "gemm x", &x) ||
        cu_pool_alloc(c, (size_t)N * M * 4, "gemm y", &y) ||
        cu_pool_alloc(c, k_gemm_act_bytes(K, M), "gemm xh", &xh) ||
        cu_pool_alloc(c, k_gemm_act_bytes(K, M), "gemm xl", &xl) ||
        (wsb && cu_pool_alloc(c, wsb, "gemm scratch", &ws)) || cu_write(c, w, host, mat) ||
        cu_write(c, x, hx, (size_t)K * M * 4))
        goto out;
    for (int i = 0; i < 12; i++) { /* 2 warm-up + 10 timed */
        if (i == 2)
            cu_timer_start(c);
        if (k_gemm_act(k, x, K, M, K * 4, xh, split ? xl : NULL) ||
            k_gemm(k, t, w, K, N, rowb, xh, split ? xl : NULL, M, y, N * 4, ws)) {
            fprintf(stderr, "kernel error: %s\n", k->err);
            goto out;
        }
    }
    float ms = 0;
    if (cu_timer_stop(c, &ms))
        goto out;
    double s = ms * 1e-3 / 10;
    printf("gemm   %-5s %-22s M=%lld%s bk,splits,bn %2d,%d,%3d %8.1f us  %6.1f TFLOP/s\n",
           minfer_type_traits_of(t)->name, what, (long long)M, split ? " hi/lo" : "      ",
           g_cfg[0], g_cfg[1], g_cfg[2], s * 1e6, 2.0 * K * N * M / s / 1e12);
    rc = 0;
out:
    free(host);
    free(hx);
    cu_pool_free(c, w);
    cu_pool_free(c, x);
    cu_pool_free(c, y);
    cu_pool_free(c, xh);
    cu_pool_free(c, xl);
    cu_pool_free(c, ws);
    fflush(stdout);
    return rc;
}

int main(int argc, char **argv)
{
    int quick = 0, gemm_only = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--quick") == 0) {
            quick = 1;
        } else if (strcmp(argv[i], "--gemm") == 0) {
            gemm_only = 1;
        } else {
            fprintf(stderr, "usage: minfer-cuda-bench [--quick] [--gemm]\n");
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
    if (gemm_only)
        goto gemm;
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
    cu_ctx_free(c);
    cu_shutdown();
    printf("bench done, %d failures\n", fails);
    return fails ? 1 : 0;
}
