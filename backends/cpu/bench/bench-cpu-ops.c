/*
 * bench-cpu-ops.c — op micro-benchmark of the CPU plugin: matrix-vector
 * products (decode) per weight type at Qwen2.5-0.5B/1.5B shapes, reported
 * as weight bytes read per second, and prefill matrix products (M
 * activation rows) as GFLOP/s; with -a, attention instead: decode of one
 * token over 4096 cached cells (reported as KV bytes read per second) and
 * a 512-token prefill from an empty cache (GFLOP/s of its QK and PV
 * products), per head shape and KV cache type; then long contexts: a
 * decode step and a 64-token prefill chunk after 4k / 16k / 32k cells. Loads the plugin with
 * dlopen exactly as the core does and drives it through its table.
 *
 * Before the matrix table it measures the machine's streaming read rate
 * with the same thread count (1 GiB, best of 7 passes), and prints each
 * decode figure also as a percentage of it.
 *
 *   minfer-bench-cpu-ops [-t threads] [-i scalar|avx2|avx512|...] [-m M]
 *                        [-T type] [-S shape] [-p plugin.so] [-s seconds]
 *                        [-c] [-f] [-a]
 *
 * -S keeps the shapes whose name contains the string ("1.5B ffn_up").
 * -f times FFN_GATE_UP (gate and up both of the shape, silu(gate) * up)
 * instead of MUL_MAT; its figures count the bytes of both weights.
 *
 * Decode weights rotate over >= 512 MiB of copies so every product reads
 * from memory, not from cache. Each figure is the best of 3 timed runs
 * after a warm-up (the machine is shared; the best run is the least
 * disturbed one). -c times by process CPU time divided by the thread
 * count instead of wall time: on a shared, oversubscribed machine it
 * measures the kernels rather than the other tenants (spinning workers
 * are counted, so it is still an upper bound on the time).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "minfer/backend.h"
#include "minfer/quant.h"
#include "minfer/quant-ref.h"

static const struct minfer_backend_iface *IF;
static struct minfer_backend *BE;

static int g_cpu_clock; /* -c: time by process CPU time / threads */
static int g_nt = 2;

static double now(void)
{
    struct timespec ts;
    clock_gettime(g_cpu_clock ? CLOCK_PROCESS_CPUTIME_ID : CLOCK_MONOTONIC, &ts);
    return ((double)ts.tv_sec + ts.tv_nsec * 1e-9) / (g_cpu_clock ? g_nt : 1);
}

static uint64_t rng = 88172645463325252ull;
static float frand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static void dense(struct minfer_tensor *t, uint32_t type, int64_t ne0, int64_t ne1, void *data)
{
    memset(t, 0, sizeof *t);
    t->type = type;
    t->ne[0] = ne0;
    t->ne[1] = ne1;
    t->ne[2] = t->ne[3] = 1;
    t->nb[0] = minfer_type_traits_of(type)->type_size;
    t->nb[1] = minfer_row_size(type, ne0);
    t->nb[2] = t->nb[3] = t->nb[1] * (size_t)ne1;
    t->data = data;
}

/* A weight matrix [K, N] replicated over `total` bytes: copies[i] starts
 * at i * bytes. Rows come from quantizing 16 random rows, repeated. */
static char *make_weights(uint32_t type, int K, int N, size_t total, int *n_copies)
{
    size_t row = minfer_row_size(type, K), bytes = row * (size_t)N;
    int nc = (int)(total / bytes) + 1;
    char *buf = aligned_alloc(64, ((bytes * (size_t)nc) + 63) & ~(size_t)63);
    if (!buf)
        return NULL;
    float *x = malloc((size_t)K * sizeof *x);
    for (int r = 0; r < 16 && r < N; r++) {
        for (int k = 0; k < K; k++)
            x[k] = frand();
        minfer_quantize_row_ref(type, x, buf + (size_t)r * row, K);
    }
    free(x);
    for (int r = 16; r < N; r++)
        memcpy(buf + (size_t)r * row, buf + (size_t)(r % 16) * row, row);
    for (int c = 1; c < nc; c++)
        memcpy(buf + (size_t)c * bytes, buf, bytes);
    *n_copies = nc;
    return buf;
}

static int g_ffn; /* -f: FFN_GATE_UP (gate and up = two consecutive copies) */

/* Best seconds per execution of nd over 3 timed trials of ~seconds/4 each
 * after a warm-up trial; prep(ctx), if given, runs before each execution
 * (inside the timing: it only repoints tensors). */
static double time_node(struct minfer_node *nd, double seconds, void (*prep)(void *), void *ctx)
{
    double best = 1e30;
    for (int trial = 0; trial < 4; trial++) {
        int reps = 0;
        double t0 = now(), t;
        do {
            if (prep)
                prep(ctx);
            if (IF->execute_node(BE, nd) != MINFER_OK) {
                fprintf(stderr, "execute_node: %s\n", IF->last_error(BE));
                exit(1);
            }
            reps++;
            t = now() - t0;
        } while (t < seconds / 4);
        if (trial > 0 && t / reps < best) /* trial 0 is the warm-up */
            best = t / reps;
    }
    return best;
}

/* The weight copies a product reads, rotated per execution so that decode
 * reads memory, not cache. */
struct rotation {
    struct minfer_tensor *wt, *ut;
    uint32_t type;
    int K, N, n_copies, ci;
    char *w;
    size_t bytes;
};

static void rotate(void *arg)
{
    struct rotation *r = arg;
    dense(r->wt, r->type, r->K, r->N, r->w + (size_t)r->ci * r->bytes);
    r->ci = (r->ci + 1) % r->n_copies;
    if (g_ffn) { /* up: the next copy (the same copy if there is one) */
        dense(r->ut, r->type, r->K, r->N, r->w + (size_t)r->ci * r->bytes);
        r->ci = (r->ci + 1) % r->n_copies;
    }
}

static double run_mm(uint32_t type, int K, int N, int M, char *w, int n_copies, size_t bytes,
                     float *x, float *y, double seconds)
{
    struct minfer_tensor wt, ut, xt, yt;
    dense(&xt, MINFER_TYPE_F32, K, M, x);
    dense(&yt, MINFER_TYPE_F32, N, M, y);
    struct minfer_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = g_ffn ? MINFER_OP_FFN_GATE_UP : MINFER_OP_MUL_MAT;
    nd.n_src = g_ffn ? 3 : 2;
    nd.src[0] = &wt;
    nd.src[1] = g_ffn ? &ut : &xt;
    nd.src[2] = g_ffn ? &xt : NULL;
    nd.dst = &yt;
    nd.label = "bench";
    struct rotation rot = {&wt, &ut, type, K, N, n_copies, 0, w, bytes};
    return time_node(&nd, seconds, rotate, &rot);
}

struct shape {
    const char *name;
    int K, N;
};

static const struct shape SHAPES[] = {
    {"0.5B attn_q 896x896", 896, 896},
    {"0.5B ffn_up 896x4864", 896, 4864},
    {"0.5B ffn_down 4864x896", 4864, 896},
    {"1.5B ffn_up 1536x8960", 1536, 8960},
    {"1.5B ffn_down 8960x1536", 8960, 1536},
    {"1.5B output 1536x151936", 1536, 151936},
};

/* ---- memory bandwidth ---- */

#define BW_BYTES ((size_t)1 << 30)

struct bw_part {
    const uint64_t *p;
    size_t n;
    uint64_t sum;
};

/* Sums n words with 8 independent lanes; the widest vectors the CPU has
 * (the clones are chosen at load time) so that one core is not limited by
 * its instructions. */
__attribute__((target_clones("avx512f", "avx2", "default"))) static uint64_t
read_words(const uint64_t *p, size_t n)
{
    uint64_t s[8] = {0};
    for (size_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; j++)
            s[j] += p[i + j];
    return s[0] + s[1] + s[2] + s[3] + s[4] + s[5] + s[6] + s[7];
}

static void *bw_thread(void *arg)
{
    struct bw_part *b = arg;
    b->sum = read_words(b->p, b->n);
    return NULL;
}

/* Streaming read rate of nt threads over BW_BYTES, bytes per second; 0 if
 * the buffer or the threads cannot be had. */
static double read_bandwidth(int nt)
{
    uint64_t *buf = aligned_alloc(64, BW_BYTES);
    if (!buf || nt < 1 || nt > 256) {
        free(buf);
        return 0.0;
    }
    memset(buf, 1, BW_BYTES);
    size_t words = BW_BYTES / 8, per = words / (size_t)nt;
    double best = 1e30;
    uint64_t sink = 0;
    for (int pass = 0; pass < 7; pass++) {
        pthread_t th[256];
        struct bw_part part[256];
        double t0 = now();
        int started = 0;
        for (int i = 0; i < nt; i++) {
            part[i] = (struct bw_part){buf + (size_t)i * per, per, 0};
            if (pthread_create(&th[i], NULL, bw_thread, &part[i]))
                break;
            started++;
        }
        for (int i = 0; i < started; i++) {
            pthread_join(th[i], NULL);
            sink += part[i].sum;
        }
        double t = now() - t0;
        if (started == nt && t < best)
            best = t;
    }
    free(buf);
    return best < 1e30 && sink ? (double)per * 8 * nt / best : 0.0;
}

/* ---- attention ---- */

struct attn_shape {
    const char *name;
    int hd, nh, nkv;
};

static const struct attn_shape ATTN_SHAPES[] = {
    {"0.5B hd64 14/2 heads", 64, 14, 2},
    {"1.5B hd128 12/2 heads", 128, 12, 2},
    {"7B hd128 28/4 heads", 128, 28, 4},
};

/* Seconds per ATTENTION node of nt query tokens at positions
 * kv_len - nt .. kv_len - 1 over a cache of kv_len cells of type kvt.
 * lists 1: the same as ATTENTION_LISTS with one list of cells 0..kv_len-1
 * (the cost of the indirection); 2: the list's cells scattered (cell
 * 4i mod kv_len + i / (kv_len / 4)), as four interleaved sequences lay
 * out, for the cost of non-contiguous rows. */
static double run_attn(const struct attn_shape *a, uint32_t kvt, int nt, int kv_len,
                       double seconds, int lists)
{
    int rl = a->hd * a->nkv;
    size_t row = minfer_row_size(kvt, rl);
    char *kc = aligned_alloc(64, (row * (size_t)kv_len + 63) & ~(size_t)63);
    char *vc = aligned_alloc(64, (row * (size_t)kv_len + 63) & ~(size_t)63);
    size_t qn = (size_t)a->hd * a->nh * nt;
    float *q = malloc(qn * sizeof *q), *o = malloc(qn * sizeof *o), *tmp = malloc(rl * sizeof *tmp);
    int32_t *pos = malloc((size_t)nt * sizeof *pos);
    if (!kc || !vc || !q || !o || !tmp || !pos) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (int c = 0; c < kv_len; c++) {
        for (int i = 0; i < rl; i++)
            tmp[i] = frand();
        minfer_quantize_row_ref(kvt, tmp, kc + (size_t)c * row, rl);
        minfer_quantize_row_ref(kvt, tmp, vc + (size_t)c * row, rl);
    }
    for (size_t i = 0; i < qn; i++)
        q[i] = frand();
    for (int t = 0; t < nt; t++)
        pos[t] = kv_len - nt + t;
    int32_t len = kv_len;
    struct minfer_tensor qt, ot, kt, vt, lt, pt;
    dense(&qt, MINFER_TYPE_F32, a->hd, a->nh, q);
    qt.ne[2] = nt;
    qt.nb[3] = qt.nb[2] * (size_t)nt;
    ot = qt;
    ot.data = o;
    dense(&kt, kvt, rl, kv_len, kc);
    dense(&vt, kvt, rl, kv_len, vc);
    dense(&lt, MINFER_TYPE_I32, 1, 1, &len);
    dense(&pt, MINFER_TYPE_I32, nt, 1, pos);
    struct minfer_node nd;
    memset(&nd, 0, sizeof nd);
    nd.op = MINFER_OP_ATTENTION;
    nd.n_src = 5;
    nd.src[0] = &qt;
    nd.src[1] = &kt;
    nd.src[2] = &vt;
    nd.src[3] = &lt;
    nd.src[4] = &pt;
    nd.dst = &ot;
    nd.iparams[0] = a->nkv;
    nd.fparams[0] = 0.125f;
    nd.label = "bench";
    int32_t *cells = malloc((size_t)kv_len * sizeof *cells);
    int32_t *nvis = malloc((size_t)nt * sizeof *nvis), *ql = calloc((size_t)nt, sizeof *ql);
    struct minfer_tensor vt2, qt2, ct;
    if (lists) {
        int quarter = kv_len / 4 > 0 ? kv_len / 4 : 1;
        for (int c = 0; c < kv_len; c++)
            cells[c] = lists == 1 || kv_len % 4 ? c : (c % quarter) * 4 + c / quarter;
        for (int t = 0; t < nt; t++)
            nvis[t] = pos[t] + 1;
        dense(&vt2, MINFER_TYPE_I32, nt, 1, nvis);
        dense(&qt2, MINFER_TYPE_I32, nt, 1, ql);
        dense(&ct, MINFER_TYPE_I32, kv_len, 1, cells);
        nd.op = MINFER_OP_ATTENTION_LISTS;
        nd.n_src = 6;
        nd.src[3] = &vt2;
        nd.src[4] = &qt2;
        nd.src[5] = &ct;
    }
    double best = time_node(&nd, seconds, NULL, NULL);
    free(cells);
    free(nvis);
    free(ql);
    free(kc);
    free(vc);
    free(q);
    free(o);
    free(tmp);
    free(pos);
    return best;
}

static void bench_attention(double seconds)
{
    const uint32_t kvts[] = {MINFER_TYPE_F16, MINFER_TYPE_Q8_0, MINFER_TYPE_F32};
    const int dec_len = 4096, pre = 512;
    printf("%-5s %-22s %14s %9s %16s %10s %11s %11s\n", "kv", "heads", "decode@4096 us",
           "KV GB/s", "prefill512 ms", "GFLOP/s", "lists us", "scatter us");
    for (size_t si = 0; si < sizeof ATTN_SHAPES / sizeof ATTN_SHAPES[0]; si++)
        for (size_t ki = 0; ki < sizeof kvts / sizeof kvts[0]; ki++) {
            const struct attn_shape *a = &ATTN_SHAPES[si];
            double td = run_attn(a, kvts[ki], 1, dec_len, seconds, 0);
            double tp = run_attn(a, kvts[ki], pre, pre, seconds, 0);
            double tl = run_attn(a, kvts[ki], 1, dec_len, seconds, 1);
            double ts = run_attn(a, kvts[ki], 1, dec_len, seconds, 2);
            double kv_bytes = 2.0 * dec_len * minfer_row_size(kvts[ki], a->hd * a->nkv);
            /* causal: token t sees t + 1 cells; QK and PV are 2 flops per MAC each */
            double flops = 4.0 * a->hd * a->nh * (pre * (pre + 1) / 2.0);
            printf("%-5s %-22s %14.1f %9.2f %16.2f %10.1f %11.1f %11.1f\n",
                   minfer_type_traits_of(kvts[ki])->name, a->name, td * 1e6,
                   kv_bytes / td * 1e-9, tp * 1e3, flops / tp * 1e-9, tl * 1e6, ts * 1e6);
            fflush(stdout);
        }
    /* long contexts: a decode step and a 64-token prefill chunk at the end
     * of 4k / 16k / 32k cached cells (the chunk's causal half-triangle
     * included in its flops) */
    const int depths[] = {4096, 16384, 32768}, chunk = 64;
    printf("\n%-5s %-22s %7s %12s %9s %18s\n", "kv", "heads", "depth", "decode us", "KV GB/s",
           "prefill64 GFLOP/s");
    for (size_t si = 0; si < sizeof ATTN_SHAPES / sizeof ATTN_SHAPES[0]; si += 2)
        for (size_t ki = 0; ki < 2; ki++)
            for (size_t di = 0; di < sizeof depths / sizeof depths[0]; di++) {
                const struct attn_shape *a = &ATTN_SHAPES[si];
                int d = depths[di];
                double td = run_attn(a, kvts[ki], 1, d, seconds, 0);
                double tp = run_attn(a, kvts[ki], chunk, d, seconds, 0);
                double kv_bytes = 2.0 * d * minfer_row_size(kvts[ki], a->hd * a->nkv);
                double flops = 4.0 * a->hd * a->nh * ((double)chunk * (d - chunk) +
                                                      chunk * (chunk + 1) / 2.0);
                printf("%-5s %-22s %7d %12.1f %9.2f %18.1f\n",
                       minfer_type_traits_of(kvts[ki])->name, a->name, d, td * 1e6,
                       kv_bytes / td * 1e-9, flops / tp * 1e-9);
                fflush(stdout);
            }
}

static const uint32_t TYPES[] = {MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_1, MINFER_TYPE_Q5_0,
                                 MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0, MINFER_TYPE_Q4_K,
                                 MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_F16,
                                 MINFER_TYPE_BF16, MINFER_TYPE_F32};

int main(int argc, char **argv)
{
    int nt = 2, M = 512;
    const char *isa = NULL, *only = NULL, *shape_only = NULL;
    const char *path = MINFER_PLUGIN_DIR "/libminfer-cpu.so";
    double seconds = 1.0;
    int attention = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc)
            nt = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-i") && i + 1 < argc)
            isa = argv[++i];
        else if (!strcmp(argv[i], "-m") && i + 1 < argc)
            M = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-T") && i + 1 < argc)
            only = argv[++i];
        else if (!strcmp(argv[i], "-S") && i + 1 < argc)
            shape_only = argv[++i];
        else if (!strcmp(argv[i], "-p") && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "-f"))
            g_ffn = 1;
        else if (!strcmp(argv[i], "-c"))
            g_cpu_clock = 1;
        else if (!strcmp(argv[i], "-a"))
            attention = 1;
        else if (!strcmp(argv[i], "-s") && i + 1 < argc)
            seconds = atof(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [-t threads] [-i scalar|avx2|avxvnni|avx512|avx512bf16] "
                            "[-m M] [-T type] [-S shape] [-p plugin.so] [-s seconds] [-c] "
                            "[-f] [-a]\n", argv[0]);
            return 2;
        }
    }
    g_nt = nt;
    void *dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!dl) {
        fprintf(stderr, "dlopen %s: %s\n", path, dlerror());
        return 1;
    }
    minfer_plugin_entry_fn entry = (minfer_plugin_entry_fn)dlsym(dl, MINFER_PLUGIN_ENTRY_SYMBOL);
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    IF = entry ? entry(&abi, NULL) : NULL;
    struct minfer_backend_config cfg = {sizeof cfg, 0, nt, 0};
    if (!IF || IF->create(&cfg, &BE) != MINFER_OK) {
        fprintf(stderr, "cannot create the CPU backend\n");
        return 1;
    }
    if (isa) {
        minfer_status (*set_isa)(struct minfer_backend *, const char *) =
            (minfer_status(*)(struct minfer_backend *, const char *))IF->get_proc(
                "minfer_cpu_set_isa");
        if (set_isa(BE, isa) != MINFER_OK) {
            fprintf(stderr, "%s\n", IF->last_error(BE));
            return 1;
        }
    }
    const char *(*get_isa)(struct minfer_backend *) =
        (const char *(*)(struct minfer_backend *))IF->get_proc("minfer_cpu_isa");
    struct minfer_device_info info = {.struct_size = sizeof info};
    IF->device_info(0, &info);
    printf("# %s | %s | threads %d | kernels %s | prefill M = %d | %s time\n", info.name,
           info.description, nt, get_isa(BE), M, g_cpu_clock ? "CPU" : "wall");
    if (attention) {
        bench_attention(seconds);
        IF->destroy(BE);
        IF->shutdown();
        dlclose(dl);
        return 0;
    }
    double bw = read_bandwidth(nt);
    printf("# streaming read, %d threads, 1 GiB, best of 7: %.1f GB/s\n", nt, bw * 1e-9);
    printf("%-6s %-26s %10s %10s %9s %7s %12s %10s\n", "type", "shape", "MiB", "decode us", "GB/s",
           "% read", "prefill ms", "GFLOP/s");

    float *x = aligned_alloc(64, (size_t)8960 * M * sizeof(float));
    float *y = aligned_alloc(64, (size_t)151936 * M * sizeof(float)); /* largest N */
    if (!x || !y)
        return 1;
    for (size_t i = 0; i < (size_t)8960 * M; i++)
        x[i] = frand();
    for (size_t ti = 0; ti < sizeof TYPES / sizeof TYPES[0]; ti++) {
        const char *tn = minfer_type_traits_of(TYPES[ti])->name;
        if (only && strcmp(only, tn))
            continue;
        for (size_t si = 0; si < sizeof SHAPES / sizeof SHAPES[0]; si++) {
            const struct shape *s = &SHAPES[si];
            if (shape_only && !strstr(s->name, shape_only))
                continue;
            size_t bytes = minfer_row_size(TYPES[ti], s->K) * (size_t)s->N;
            if (!bytes)
                continue; /* K not a whole number of blocks (e.g. 896 for K-quants) */
            int ncopies;
            char *w = make_weights(TYPES[ti], s->K, s->N, (size_t)512 << 20, &ncopies);
            if (!w) {
                fprintf(stderr, "out of memory\n");
                return 1;
            }
            double td = run_mm(TYPES[ti], s->K, s->N, 1, w, ncopies, bytes, x, y, seconds);
            double tp = run_mm(TYPES[ti], s->K, s->N, M, w, 1, bytes, x, y, seconds);
            int nw = g_ffn ? 2 : 1;
            printf("%-6s %-26s %10.2f %10.1f %9.2f %7.0f %12.2f %10.1f\n", tn, s->name,
                   nw * bytes / 1048576.0, td * 1e6, nw * bytes / td * 1e-9,
                   bw > 0 ? 100.0 * nw * bytes / td / bw : 0.0, tp * 1e3,
                   nw * 2.0 * s->K * s->N * (double)M / tp * 1e-9);
            fflush(stdout);
            free(w);
        }
    }
    free(x);
    free(y);
    IF->destroy(BE);
    IF->shutdown();
    dlclose(dl);
    return 0;
}
