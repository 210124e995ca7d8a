/*
 * test-cuda-e2e.c — the whole forward on the CUDA plugin, through the
 * public model/context API: the Hugging Face fixture suite on CUDA (the
 * test-fixture binary rerun with MINFER_TEST_BACKEND=cuda), CUDA against
 * the CPU plugin on synthetic models of every weight type (teacher-forced
 * greedy steps), CUDA Graph replay bitwise equal to direct launches over a
 * 64-token generation, a capture aborted by an injected fault leaving a
 * usable context, two contexts on two threads bitwise equal to their
 * serial runs, and `minfer chat --backend cuda`'s second turn equal to a
 * fresh run; and CUDA against the CPU after 16,384- and 300-token prompts.
 *
 * The whole suite is skipped (exit 77) without a CUDA device. CUDA does not
 * survive Check's fork, so the probe runs in a child process.
 */
#include <check.h>
#include <dlfcn.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "minfer/backend.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "runtime/plugin.h"
#include "engine.h"
#include "testutil.h"
#include "cuda-probe.h"

#define FIX_GGUF MINFER_FIXTURES_DIR "/models/fixture-A-f16.gguf"
#include "chat-turns.h"

/* ---- helpers ---- */

/* Mirrors the plugin's get_proc("minfer_cuda_graph_stats") record. */
struct graph_stats {
    uint64_t captures, replays, aborts;
};
typedef void (*stats_fn)(struct graph_stats *);
typedef void (*fail_fn)(int);

static struct graph_stats stats(struct minfer_runtime *rt)
{
    struct graph_stats s;
    ((stats_fn)cuda_proc(rt, "minfer_cuda_graph_stats"))(&s);
    return s;
}

#define SHAPE_QWEN2 \
    "custom:n_embd=256,n_layer=2,n_head=4,n_head_kv=2,head_dim=64,n_ff=512,n_vocab=384,n_ctx=1024,tied=0"
/* 512 wide: the products of the hidden state span two 256-value chunks,
 * so gemm-i8.cu splits them (the batched test's 16-token steps) */
#define SHAPE_QWEN2_WIDE \
    "custom:n_embd=512,n_layer=2,n_head=8,n_head_kv=2,head_dim=64,n_ff=1024,n_vocab=384,n_ctx=1024,tied=0"
#define SHAPE_QWEN3 \
    "custom:n_embd=256,n_layer=2,n_head=4,n_head_kv=2,head_dim=64,n_ff=512,n_vocab=384,n_ctx=1024,tied=1"

static struct minfer_model *load_mem(struct minfer_runtime *rt, void *mem, size_t size,
                                     const char *backend)
{
    char err[512] = "";
    struct minfer_model *m = ts_load_mem(rt, mem, size, backend, err, sizeof err);
    ck_assert_msg(m, "load on %s: %s", backend, err);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(m, &info);
    ck_assert_str_eq(info.backend, backend);
    return m;
}

static int32_t n_vocab_of(const struct minfer_model *m)
{
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(m, &info);
    return info.n_vocab;
}

static const int32_t PROMPT[16] = {3, 41, 97, 5, 200, 17, 64, 128, 255, 9, 33, 77, 150, 12, 301, 8};

/* ---- the fixture suite on CUDA ---- */

START_TEST(fixture_suite_on_cuda)
{
    /* Catches any CUDA forward that misses the Hugging Face reference
     * (logits, arg max, top-10, greedy tokens, f16/q8_0 KV) that the CPU
     * forward meets: the same checks, the other plugin. */
    if (access(FIX_GGUF, R_OK))
        MINFER_TEST_SKIP("fixture model absent at %s", FIX_GGUF);
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "MINFER_TEST_BACKEND=cuda %s/tests/test-fixture 2>&1",
             MINFER_BUILD_DIR);
    if (access(MINFER_BUILD_DIR "/tests/test-fixture", X_OK))
        snprintf(cmd, sizeof cmd, "MINFER_TEST_BACKEND=cuda %s/bin/test-fixture 2>&1",
                 MINFER_BUILD_DIR);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char line[1024], last[1024] = "";
    while (fgets(line, sizeof line, p)) {
        fputs(line, stdout);
        snprintf(last, sizeof last, "%s", line);
    }
    int rc = pclose(p);
    ck_assert_msg(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "test-fixture on cuda failed (%d): %s",
                  rc, last);
}
END_TEST

/* ---- CUDA vs CPU, every weight type ---- */

struct tcase {
    const char *arch, *spec;
    uint32_t ftype;
};

static const struct tcase TYPES[] = {
    {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_ALL_F32},   {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_F16},
    {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_BF16}, {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q8_0},
    {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q4_0}, {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q4_1},
    {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q5_0}, {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q5_1},
    {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q4_K_M}, {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q5_K_M},
    {"qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q6_K}, {"qwen3", SHAPE_QWEN3, MINFER_FTYPE_MOSTLY_F16},
    {"qwen3", SHAPE_QWEN3, MINFER_FTYPE_MOSTLY_Q8_0}, {"qwen3", SHAPE_QWEN3, MINFER_FTYPE_MOSTLY_Q4_K_M},
    {"qwen3", SHAPE_QWEN3, MINFER_FTYPE_MOSTLY_Q6_K},
};

/* Normalised MSE bound on logits: each backend rounds activations to 8 bits
 * (quantized weights) or f16 (the tensor-core GEMM) in its own way; ~1e-4
 * per matmul, a few matmuls deep. */
#define TOL_LOGIT_NMSE 5e-3
/* A differing arg max is accepted only as a near tie on the CPU side:
 * gap below this many RMS differences between the two backends. */
#define TIE_RMS 6.0

START_TEST(greedy_cuda_matches_cpu)
{
    /* Catches a CUDA kernel or dispatch (GEMM prefill, matvec decode, KV
     * store/attention over a growing cache, every weight type) that drifts
     * from the CPU plugin enough to change a greedy choice. Teacher-forced
     * with the CPU's tokens so one near tie cannot cascade. */
    const struct tcase *tc = &TYPES[_i];
    struct minfer_runtime *rt = ts_runtime("cuda");
    size_t size;
    void *mem = ts_synth(tc->arch, tc->spec, tc->ftype, 11, 2, &size);
    struct minfer_model *mc = load_mem(rt, mem, size, "cpu");
    struct minfer_model *mg = load_mem(rt, mem, size, "cuda");
    int32_t nv = n_vocab_of(mc);
    struct minfer_ctx *cc = ts_ctx(mc, 512, 64, TS_KV_DEFAULT, 0);
    struct minfer_ctx *cg = ts_ctx(mg, 512, 64, TS_KV_DEFAULT, 0);
    ts_decode_ok(cc, PROMPT, 16, 0);
    ts_decode_ok(cg, PROMPT, 16, 0);
    int agree = 0, steps = 24;
    for (int s = 0; s < steps; s++) {
        const float *a = minfer_ctx_logits(cc, -1), *b = minfer_ctx_logits(cg, -1);
        double num = 0, den = 0;
        for (int32_t i = 0; i < nv; i++) {
            ck_assert_msg(isfinite(b[i]), "%s %s step %d: cuda logit %d is %f", tc->arch,
                          minfer_ftype_name(tc->ftype), s, i, b[i]);
            num += (double)(a[i] - b[i]) * (a[i] - b[i]);
            den += (double)a[i] * a[i];
        }
        ck_assert_msg(num <= TOL_LOGIT_NMSE * den, "%s %s step %d: logits NMSE %.3g > %.1g",
                      tc->arch, minfer_ftype_name(tc->ftype), s, num / den, TOL_LOGIT_NMSE);
        int32_t ta = ts_argmax(a, nv), tb = ts_argmax(b, nv);
        double rms = sqrt(num / nv);
        if (ta == tb)
            agree++;
        else
            ck_assert_msg(a[ta] - a[tb] <= TIE_RMS * rms + 1e-6,
                          "%s %s step %d: cpu picks %d (%.5f), cuda %d (cpu logit %.5f); gap "
                          "%.5f is no near tie (rms diff %.5f)",
                          tc->arch, minfer_ftype_name(tc->ftype), s, ta, a[ta], tb, a[tb],
                          a[ta] - a[tb], rms);
        ts_decode_ok(cc, &ta, 1, 0);
        ts_decode_ok(cg, &ta, 1, 0);
    }
    printf("%s %s: cuda arg max equals cpu's at %d of %d steps\n", tc->arch,
           minfer_ftype_name(tc->ftype), agree, steps);
    ck_assert_int_ge(agree, steps * 3 / 4);
    minfer_ctx_free(cc);
    minfer_ctx_free(cg);
    minfer_model_free(mc);
    minfer_model_free(mg);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- many sequences ---- */

/* A batch of one token per listed sequence (or a whole prompt each). */
static void batch_step(struct minfer_ctx *c, int ns, const int32_t *const *toks,
                       const int32_t *lens, const int32_t *pos0)
{
    static int32_t tok[512], pos[512], nseq[512], seq[512];
    static const int32_t *ids[512];
    static uint8_t lg[512];
    int n = 0;
    for (int q = 0; q < ns; q++) {
        seq[q] = q;
        for (int32_t i = 0; i < lens[q]; i++, n++) {
            ck_assert_int_lt(n, 512);
            tok[n] = toks[q][i];
            pos[n] = pos0[q] + i;
            nseq[n] = 1;
            ids[n] = &seq[q];
            lg[n] = i == lens[q] - 1;
        }
    }
    struct minfer_batch b = {.struct_size = sizeof b, .n_tokens = n, .tokens = tok, .pos = pos,
                             .n_seq_id = nseq, .seq_ids = ids, .logits = lg};
    minfer_status st = minfer_ctx_decode_batch(c, &b);
    ck_assert_msg(st == MINFER_OK, "decode_batch: %s", minfer_ctx_last_error(c));
}

START_TEST(batched_greedy_cuda_matches_cpu)
{
    /* Catches ATTENTION_LISTS on CUDA reading the wrong cells or lists, a
     * batched decode step that drifts from the CPU, and batched steps that
     * never replay a captured graph or whose capture aborts (a fusion
     * whose scratch no warm-up pass reserved turns graphs off). Six
     * sequences (steps padded to 8 tokens: the matvec kernels), then
     * twelve (padded to 16: gemm-i8.cu's GEMM with its split-K finish,
     * the norm writing its q8_1 activations and Q, K and V as one launch,
     * k_gemm_multi, split in two as well: the 512-wide shape) of 1..100
     * prompt tokens, then 12 steps,
     * teacher-forced with the CPU's tokens. Every step's RoPEs and KV
     * stores must run as one launch with a block per token (the fused
     * kernel writing on bytes another token's block still reads would
     * show here as a drift from the CPU). */
    enum { NS_MAX = 12, STEPS = 12 };
    const int NS = _i == 0 ? 6 : 12;
    static const int32_t plen[NS_MAX] = {1, 3, 9, 16, 33, 100, 2, 5, 7, 20, 50, 64};
    struct minfer_runtime *rt = ts_runtime("cuda");
    size_t size;
    void *mem = ts_synth("qwen2", NS == 12 ? SHAPE_QWEN2_WIDE : SHAPE_QWEN2,
                         MINFER_FTYPE_MOSTLY_Q4_K_M, 11, 2, &size);
    struct minfer_model *mc = load_mem(rt, mem, size, "cpu");
    struct minfer_model *mg = load_mem(rt, mem, size, "cuda");
    int32_t nv = n_vocab_of(mc);
    struct minfer_ctx *cx[2];
    struct minfer_model *ms[2] = {mc, mg};
    for (int k = 0; k < 2; k++) {
        struct minfer_ctx_params cp;
        minfer_ctx_params_default(&cp);
        cp.n_ctx = 1024;
        cp.n_threads = 2;
        cp.n_seq_max = NS;
        minfer_status st;
        char err[512] = "";
        cx[k] = minfer_ctx_new(ms[k], &cp, &st, err, sizeof err);
        ck_assert_msg(cx[k], "ctx: %s", err);
    }
    int32_t prompts[NS_MAX][100], next[NS_MAX], one[NS_MAX], pos0[NS_MAX];
    const int32_t *tp[NS_MAX];
    uint32_t x = 12345;
    for (int q = 0; q < NS; q++) {
        for (int32_t i = 0; i < plen[q]; i++) {
            x = x * 1103515245u + 12345u;
            prompts[q][i] = (int32_t)((x >> 8) % (uint32_t)nv);
        }
        tp[q] = prompts[q];
        pos0[q] = 0;
    }
    for (int k = 0; k < 2; k++)
        batch_step(cx[k], NS, tp, plen, pos0);
    struct graph_stats g0 = stats(rt);
    typedef uint64_t (*gcount_fn)(void);
    gcount_fn gemm_groups = (gcount_fn)cuda_proc(rt, "minfer_cuda_fused_gemm_groups");
    gcount_fn rope_tokens = (gcount_fn)cuda_proc(rt, "minfer_cuda_fused_rope_tokens");
    uint64_t gg0 = gemm_groups(), rt0 = rope_tokens();
    int agree = 0;
    for (int s = 0; s <= STEPS; s++) {
        for (int q = 0; q < NS; q++) {
            int32_t bi = s == 0 ? 0 : q; /* the batch index of q's logits */
            if (s == 0) {
                for (int r = 0; r < q; r++)
                    bi += plen[r];
                bi += plen[q] - 1;
            }
            const float *a = minfer_ctx_batch_logits(cx[0], bi);
            const float *b = minfer_ctx_batch_logits(cx[1], bi);
            ck_assert_ptr_nonnull(a);
            ck_assert_ptr_nonnull(b);
            double num = 0, den = 0;
            for (int32_t i = 0; i < nv; i++) {
                ck_assert_msg(isfinite(b[i]), "sequence %d step %d: cuda logit %d is %f", q, s,
                              i, b[i]);
                num += (double)(a[i] - b[i]) * (a[i] - b[i]);
                den += (double)a[i] * a[i];
            }
            ck_assert_msg(num <= TOL_LOGIT_NMSE * den, "sequence %d step %d: NMSE %.3g", q, s,
                          num / den);
            int32_t ta = ts_argmax(a, nv), tb = ts_argmax(b, nv);
            double rms = sqrt(num / nv);
            if (ta == tb)
                agree++;
            else
                ck_assert_msg(a[ta] - a[tb] <= TIE_RMS * rms + 1e-6,
                              "sequence %d step %d: cpu %d, cuda %d: no near tie", q, s, ta,
                              tb);
            next[q] = ta;
        }
        if (s == STEPS)
            break;
        for (int q = 0; q < NS; q++) {
            tp[q] = &next[q];
            one[q] = 1;
            pos0[q] = plen[q] + s;
        }
        for (int k = 0; k < 2; k++)
            batch_step(cx[k], NS, tp, one, pos0);
    }
    struct graph_stats g1 = stats(rt);
    uint64_t gg = gemm_groups() - gg0, rtk = rope_tokens() - rt0;
    printf("batched, %d sequences: cuda arg max equals cpu's at %d of %d; %llu replays; %llu "
           "grouped GEMM launches; %llu RoPE + KV store launches of a block per token\n",
           NS, agree, NS * (STEPS + 1), (unsigned long long)(g1.replays - g0.replays),
           (unsigned long long)gg, (unsigned long long)rtk);
    /* the steps' q and k RoPEs and both KV stores captured as one launch */
    ck_assert_uint_gt(rtk, 0);
    ck_assert_msg(g1.aborts == g0.aborts, "a batched step's capture aborted (graphs went off)");
    ck_assert_int_ge(agree, NS * (STEPS + 1) * 3 / 4);
    ck_assert_uint_gt(g1.replays, g0.replays);
    if (NS == 12) /* the 16-token steps' Q/K(/V) products captured as one launch */
        ck_assert_uint_gt(gg, 0);
    for (int k = 0; k < 2; k++)
        minfer_ctx_free(cx[k]);
    minfer_model_free(mc);
    minfer_model_free(mg);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- deep prompts ---- */

#define LONG_PROMPT 16384
/* The prompt lengths: 16k cells (many splits), and 300 (the 512-cell
 * bucket, the first that the F16 decode kernel splits: a few splits, some
 * empty, and their combine writing the O product's q8_1 input; shorter
 * contexts run one split, which writes the rows itself). */
static const int DEEP[] = {LONG_PROMPT, 300};
#define SHAPE_LONG \
    "custom:n_embd=512,n_layer=2,n_head=8,n_head_kv=2,head_dim=128,n_ff=768,n_vocab=384," \
    "n_ctx=16448,tied=0"

START_TEST(deep_prompt_greedy_cuda_matches_cpu)
{
    /* Catches the tensor-core prefill (many query tiles, causal tile
     * skipping over 16k cells, chunks of 2,048 continuing a deep cache) and
     * the split-K decode at depth 16k or over a few splits at depth 300
     * drifting from the CPU enough to change greedy choices: a prompt of
     * DEEP[_i] tokens on both, then 16 teacher-forced greedy steps, per KV
     * type (f16, q8_0), head_dim 128, 4 heads per KV head. */
    const int np = DEEP[_i];
    uint32_t kvs[] = {MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    struct minfer_runtime *rt = ts_runtime("cuda");
    size_t size;
    void *mem = ts_synth("qwen2", SHAPE_LONG, MINFER_FTYPE_MOSTLY_Q8_0, 13, 2, &size);
    struct minfer_model *mc = load_mem(rt, mem, size, "cpu");
    struct minfer_model *mg = load_mem(rt, mem, size, "cuda");
    int32_t nv = n_vocab_of(mc);
    int32_t *ids = malloc(sizeof *ids * LONG_PROMPT);
    ck_assert_ptr_nonnull(ids);
    uint64_t x = 0x2545F4914F6CDD1Dull;
    for (int i = 0; i < np; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        ids[i] = (int32_t)(x % (uint64_t)nv);
    }
    for (int k = 0; k < 2; k++) {
        struct minfer_ctx *cc = ts_ctx(mc, LONG_PROMPT + 64, 2048, kvs[k], 0);
        struct minfer_ctx *cg = ts_ctx(mg, LONG_PROMPT + 64, 2048, kvs[k], 0);
        ts_decode_ok(cc, ids, np, 0);
        ts_decode_ok(cg, ids, np, 0);
        int agree = 0, steps = 16;
        double worst = 0;
        for (int s = 0; s < steps; s++) {
            const float *a = minfer_ctx_logits(cc, -1), *b = minfer_ctx_logits(cg, -1);
            double num = 0, den = 0;
            for (int32_t i = 0; i < nv; i++) {
                ck_assert_msg(isfinite(b[i]), "kv %d step %d: cuda logit %d is %f", k, s, i, b[i]);
                num += (double)(a[i] - b[i]) * (a[i] - b[i]);
                den += (double)a[i] * a[i];
            }
            worst = num / den > worst ? num / den : worst;
            ck_assert_msg(num <= TOL_LOGIT_NMSE * den, "kv %d step %d: logits NMSE %.3g > %.1g",
                          k, s, num / den, TOL_LOGIT_NMSE);
            int32_t ta = ts_argmax(a, nv), tb = ts_argmax(b, nv);
            double rms = sqrt(num / nv);
            if (ta == tb)
                agree++;
            else
                ck_assert_msg(a[ta] - a[tb] <= TIE_RMS * rms + 1e-6,
                              "kv %d step %d: cpu picks %d, cuda %d; gap %.5f is no near tie "
                              "(rms diff %.5f)", k, s, ta, tb, a[ta] - a[tb], rms);
            ts_decode_ok(cc, &ta, 1, 0);
            ts_decode_ok(cg, &ta, 1, 0);
        }
        printf("%d-token prompt, kv %s: cuda arg max equals cpu's at %d of %d steps, worst "
               "logits NMSE %.3g\n", np, k ? "q8_0" : "f16", agree, steps, worst);
        ck_assert_int_ge(agree, steps * 3 / 4);
        minfer_ctx_free(cc);
        minfer_ctx_free(cg);
    }
    free(ids);
    minfer_model_free(mc);
    minfer_model_free(mg);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- graph replay ---- */

#define GEN 64

/* Prompt, then GEN greedy steps; logits of every step into out[(GEN+1) *
 * nv], tokens into toks[GEN]. */
static void generate(struct minfer_ctx *c, int32_t nv, const int32_t *prompt, int np,
                     float *out, int32_t *toks)
{
    ts_decode_ok(c, prompt, np, 0);
    for (int s = 0; s <= GEN; s++) {
        const float *l = minfer_ctx_logits(c, -1);
        memcpy(out + (size_t)s * nv, l, sizeof(float) * (size_t)nv);
        if (s == GEN)
            break;
        toks[s] = ts_argmax(l, nv);
        ts_decode_ok(c, &toks[s], 1, 0);
    }
}

static void expect_same(const float *a, const float *b, int32_t nv, const char *what)
{
    for (int s = 0; s <= GEN; s++)
        ck_assert_msg(!memcmp(a + (size_t)s * nv, b + (size_t)s * nv, sizeof(float) * (size_t)nv),
                      "%s: logits of step %d differ", what, s);
}

typedef uint64_t (*count_fn)(void);

START_TEST(replay_bitwise_equals_direct)
{
    /* Catches a captured graph that bakes in a per-step host value (KV
     * length, position, cell), reads a stale scratch or arena address, or
     * replays the wrong window: every step's logits must equal direct
     * launches bit for bit, and decode must actually replay. Run for qwen2
     * (bias ADDs in the matvecs' MUL_MAT_ADD epilogue, Q/K/V in one launch
     * with the RoPE and the KV stores in its epilogue) and qwen3 (per-head q/k norms and
     * their RoPEs captured as one launch, which must fire and must give
     * the bits of the separate norm and RoPE kernels). Cases 2 and 3
     * start from a one-token prompt, so no prefill sizes the scratch
     * slots: a fused launch whose slot the warm-up passes left small
     * aborts the capture (graphs off for the context, every step slower;
     * session 19's first gate/up q8_1 epilogue did). qwen3's one-token
     * group runs as blocks of heads (k_norm_rope_kv), each reading all its
     * rows before writing over them: a block that wrote rows another one
     * still reads changes the bits. */
    const char *arch = _i % 2 == 0 ? "qwen2" : "qwen3";
    const int np = _i < 2 ? 16 : 1;
    struct minfer_runtime *rt = ts_runtime("cuda");
    count_fn norm_ropes = (count_fn)cuda_proc(rt, "minfer_cuda_fused_norm_ropes");
    count_fn rope_seq = (count_fn)cuda_proc(rt, "minfer_cuda_fused_rope_seq");
    count_fn rope_kv = (count_fn)cuda_proc(rt, "minfer_cuda_fused_rope_kv");
    count_fn groups = (count_fn)cuda_proc(rt, "minfer_cuda_fused_groups");
    count_fn head_blocks = (count_fn)cuda_proc(rt, "minfer_cuda_fused_rope_head_blocks");
    count_fn qkv_ropes = (count_fn)cuda_proc(rt, "minfer_cuda_fused_qkv_ropes");
    uint64_t nr0 = norm_ropes(), rs0 = rope_seq(), rk0 = rope_kv();
    uint64_t gr0 = groups(), hb0 = head_blocks(), qr0 = qkv_ropes();
    size_t size;
    void *mem = ts_synth(arch, _i % 2 == 0 ? SHAPE_QWEN2 : SHAPE_QWEN3,
                         MINFER_FTYPE_MOSTLY_Q4_K_M, 11, 2, &size);
    struct minfer_model *m = load_mem(rt, mem, size, "cuda");
    int32_t nv = n_vocab_of(m);
    float *ref = malloc(sizeof(float) * (size_t)nv * (GEN + 1));
    float *got = malloc(sizeof(float) * (size_t)nv * (GEN + 1));
    int32_t tr[GEN], tg[GEN];
    struct minfer_ctx *c = ts_ctx(m, 512, 64, TS_KV_DEFAULT, MINFER_CTX_NO_GRAPHS);
    struct graph_stats s0 = stats(rt);
    generate(c, nv, PROMPT, np, ref, tr);
    struct graph_stats s1 = stats(rt);
    ck_assert_msg(s1.captures == s0.captures && s1.replays == s0.replays,
                  "a context made with MINFER_CTX_NO_GRAPHS replayed graphs");
    minfer_ctx_free(c);
    c = ts_ctx(m, 512, 64, TS_KV_DEFAULT, 0);
    generate(c, nv, PROMPT, np, got, tg);
    struct graph_stats s2 = stats(rt);
    uint64_t nr = norm_ropes() - nr0, rs = rope_seq() - rs0, rkv = rope_kv() - rk0;
    uint64_t gr = groups() - gr0, hb = head_blocks() - hb0, qr = qkv_ropes() - qr0;
    printf("graph replay %s, %d-token prompt: %llu captures, %llu replays over %d decode "
           "steps; captured as one launch: %llu norm+rope groups (%llu as blocks of heads), "
           "%llu rope pairs, %llu of them with the KV stores, %llu Q/K/V product groups "
           "(%llu with the RoPE and KV stores)\n",
           arch, np, (unsigned long long)(s2.captures - s1.captures),
           (unsigned long long)(s2.replays - s1.replays), GEN, (unsigned long long)nr,
           (unsigned long long)hb, (unsigned long long)rs, (unsigned long long)rkv,
           (unsigned long long)gr, (unsigned long long)qr);
    if (_i % 2 == 1) {
        ck_assert_msg(nr >= 1, "qwen3's q/k norm + RoPE nodes were never captured as one launch");
        ck_assert_msg(hb >= 1, "qwen3's one-token group never ran as blocks of heads");
    } else {
        /* qwen2's one-token Q/K/V, RoPE and KV stores (f16 cache): the
         * products' epilogue rotates and stores, and must give the bits
         * of the products, then k_rope_kv */
        ck_assert_msg(qr >= 1, "qwen2's Q/K/V products never ran the RoPE and KV stores");
    }
    /* qwen2's biased Q/K/V products are MUL_MAT_ADD nodes (core fusion),
     * qwen3's plain MUL_MATs: both must reach the multi-product launch */
    ck_assert_msg(gr >= 1, "%s: the Q, K and V products were never captured as one launch",
                  arch);
    ck_assert_msg(s2.aborts == s1.aborts, "a capture was aborted");
    ck_assert_uint_ge(s2.captures - s1.captures, 1);
    ck_assert_uint_ge(s2.replays - s1.replays, GEN / 2);
    ck_assert_mem_eq(tr, tg, sizeof tr);
    expect_same(ref, got, nv, "replayed vs direct");
    minfer_ctx_free(c);
    free(ref);
    free(got);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(aborted_capture_leaves_usable_context)
{
    /* Catches an aborted capture that leaves the stream in capture mode or
     * a latched error behind (the next launch or sync would fail), that
     * drops the window's work (wrong logits), or that keeps retrying
     * capture instead of turning graphs off for the context. */
    struct minfer_runtime *rt = ts_runtime("cuda");
    size_t size;
    void *mem = ts_synth("qwen3", SHAPE_QWEN3, MINFER_FTYPE_MOSTLY_Q8_0, 11, 2, &size);
    struct minfer_model *m = load_mem(rt, mem, size, "cuda");
    int32_t nv = n_vocab_of(m);
    float *ref = malloc(sizeof(float) * (size_t)nv * (GEN + 1));
    float *got = malloc(sizeof(float) * (size_t)nv * (GEN + 1));
    int32_t tr[GEN], tg[GEN];
    struct minfer_ctx *c = ts_ctx(m, 512, 64, TS_KV_DEFAULT, MINFER_CTX_NO_GRAPHS);
    generate(c, nv, PROMPT, 16, ref, tr);
    minfer_ctx_free(c);

    struct graph_stats s0 = stats(rt);
    ((fail_fn)cuda_proc(rt, "minfer_cuda_test_fail_next_capture"))(1);
    c = ts_ctx(m, 512, 64, TS_KV_DEFAULT, 0);
    generate(c, nv, PROMPT, 16, got, tg);
    struct graph_stats s1 = stats(rt);
    ck_assert_uint_eq(s1.aborts - s0.aborts, 1);
    ck_assert_uint_eq(s1.captures - s0.captures, 0);
    ck_assert_uint_eq(s1.replays - s0.replays, 0);
    ck_assert_mem_eq(tr, tg, sizeof tr);
    expect_same(ref, got, nv, "after an aborted capture vs direct");
    minfer_ctx_free(c);

    /* a fresh context captures again */
    c = ts_ctx(m, 512, 64, TS_KV_DEFAULT, 0);
    generate(c, nv, PROMPT, 16, got, tg);
    struct graph_stats s2 = stats(rt);
    ck_assert_uint_ge(s2.replays - s1.replays, GEN / 2);
    expect_same(ref, got, nv, "a new context after the abort");
    minfer_ctx_free(c);
    free(ref);
    free(got);
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- two contexts on two threads ---- */

struct job {
    struct minfer_model *m;
    const int32_t *prompt;
    int np;
    int32_t nv;
    float *logits;
    int32_t toks[GEN];
    char err[512];
};

static void *job_run(void *arg)
{
    struct job *j = arg;
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = 512;
    cp.n_batch = 64;
    minfer_status st;
    struct minfer_ctx *c = minfer_ctx_new(j->m, &cp, &st, j->err, sizeof j->err);
    if (!c)
        return NULL;
    st = minfer_ctx_decode(c, j->prompt, j->np, 0);
    for (int s = 0; st == MINFER_OK && s <= GEN; s++) {
        const float *l = minfer_ctx_logits(c, -1);
        memcpy(j->logits + (size_t)s * j->nv, l, sizeof(float) * (size_t)j->nv);
        if (s == GEN)
            break;
        j->toks[s] = ts_argmax(l, j->nv);
        st = minfer_ctx_decode(c, &j->toks[s], 1, 0);
    }
    if (st != MINFER_OK)
        snprintf(j->err, sizeof j->err, "%s", minfer_ctx_last_error(c));
    minfer_ctx_free(c);
    return NULL;
}

START_TEST(two_threads_equal_serial)
{
    /* Catches shared state between instances (one stream, one scratch, one
     * graph cache or capture mode leaking across threads), which would make
     * concurrent contexts differ from the same contexts run one by one. */
    struct minfer_runtime *rt = ts_runtime("cuda");
    size_t size;
    void *mem = ts_synth("qwen2", SHAPE_QWEN2, MINFER_FTYPE_MOSTLY_Q4_K_M, 11, 2, &size);
    struct minfer_model *m = load_mem(rt, mem, size, "cuda");
    int32_t nv = n_vocab_of(m);
    static const int32_t P2[9] = {100, 7, 42, 250, 3, 99, 180, 61, 5};
    struct job ser[2], par[2];
    for (int i = 0; i < 2; i++) {
        struct job *js[2] = {&ser[i], &par[i]};
        for (int k = 0; k < 2; k++) {
            memset(js[k], 0, sizeof *js[k]);
            js[k]->m = m;
            js[k]->prompt = i ? P2 : PROMPT;
            js[k]->np = i ? 9 : 16;
            js[k]->nv = nv;
            js[k]->logits = malloc(sizeof(float) * (size_t)nv * (GEN + 1));
        }
    }
    for (int i = 0; i < 2; i++) {
        job_run(&ser[i]);
        ck_assert_msg(!ser[i].err[0], "serial %d: %s", i, ser[i].err);
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, job_run, &par[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        ck_assert_msg(!par[i].err[0], "thread %d: %s", i, par[i].err);
        ck_assert_mem_eq(ser[i].toks, par[i].toks, sizeof ser[i].toks);
        expect_same(ser[i].logits, par[i].logits, nv, "concurrent vs serial");
        free(ser[i].logits);
        free(par[i].logits);
    }
    minfer_model_free(m);
    minfer_synth_mem_free(mem);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- KV cell copies ---- */

START_TEST(copy_cells_like_memmove)
{
    /* Catches copy_cells that corrupts overlapping ranges (a plain copy
     * reads cells it already overwrote), copies the wrong cells or writes
     * outside [dst, dst + n). The reference is memmove on the host. */
    struct minfer_runtime *rt = ts_runtime("cuda");
    const struct minfer_plugin *p = runtime_find_backend(rt, "cuda");
    const struct minfer_backend_iface *it = p->iface;
    ck_assert_msg(PLUGIN_HAS(p, copy_cells), "the CUDA plugin has no copy_cells");
    struct minfer_backend_config cfg = {.struct_size = sizeof cfg, .device = 0};
    struct minfer_backend *be = NULL;
    ck_assert_int_eq(it->create(&cfg, &be), MINFER_OK);
    enum { ROW = 36, CELLS = 64 };
    unsigned char host[ROW * CELLS], want[ROW * CELLS], got[ROW * CELLS];
    void *dev = NULL;
    ck_assert_int_eq(it->buffer_alloc(be, sizeof host, &dev), MINFER_OK);
    static const uint32_t cases[][3] = {{0, 5, 20}, {30, 10, 25}, {3, 40, 7}, {8, 9, 50}, {9, 8, 50}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (size_t i = 0; i < sizeof host; i++)
            host[i] = (unsigned char)(i * 7 + c);
        memcpy(want, host, sizeof host);
        uint32_t src = cases[c][0], dst = cases[c][1], n = cases[c][2];
        memmove(want + (size_t)dst * ROW, want + (size_t)src * ROW, (size_t)n * ROW);
        ck_assert_int_eq(it->buffer_write(be, dev, host, sizeof host), MINFER_OK);
        ck_assert_int_eq(it->copy_cells(be, dev, ROW, src, dst, n), MINFER_OK);
        ck_assert_int_eq(it->buffer_read(be, got, dev, sizeof got), MINFER_OK);
        ck_assert_msg(!memcmp(got, want, sizeof got), "copy_cells(src %u, dst %u, n %u) differs "
                      "from memmove", src, dst, n);
    }
    it->buffer_free(be, dev);
    it->destroy(be);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- minfer chat on CUDA ---- */

START_TEST(chat_turn2_equals_fresh_run_on_cuda)
{
    /* Catches KV reuse across chat turns on the device (cells, positions,
     * graphs captured in turn 1 replayed over turn 2's cache) that drifts
     * from recomputing the whole conversation on the same backend. */
    if (access(FIX_GGUF, R_OK))
        MINFER_TEST_SKIP("fixture model absent at %s", FIX_GGUF);
    struct minfer_runtime *rt = ts_runtime("cuda");
    free(check_chat_turn2(rt, "cuda", 8));
    minfer_runtime_free(rt);
}
END_TEST

Suite *cuda_e2e_suite(void);
Suite *cuda_e2e_suite(void)
{
    Suite *s = suite_create("cuda-e2e");
    TCase *t = tcase_create("forward");
    tcase_set_timeout(t, 300);
    tcase_add_test(t, fixture_suite_on_cuda);
    tcase_add_loop_test(t, greedy_cuda_matches_cpu, 0, (int)(sizeof TYPES / sizeof TYPES[0]));
    tcase_add_loop_test(t, replay_bitwise_equals_direct, 0, 4);
    tcase_add_loop_test(t, batched_greedy_cuda_matches_cpu, 0, 2);
    tcase_add_test(t, aborted_capture_leaves_usable_context);
    tcase_add_test(t, two_threads_equal_serial);
    tcase_add_test(t, copy_cells_like_memmove);
    tcase_add_test(t, chat_turn2_equals_fresh_run_on_cuda);
    suite_add_tcase(s, t);
    /* its own case, so CK_RUN_CASE=long runs it alone */
    TCase *l = tcase_create("long");
    tcase_set_timeout(l, 300);
    tcase_add_loop_test(l, deep_prompt_greedy_cuda_matches_cpu, 0,
                        (int)(sizeof DEEP / sizeof DEEP[0]));
    suite_add_tcase(s, l);
    return s;
}
