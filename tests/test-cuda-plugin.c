/*
 * test-cuda-plugin.c — libminfer-cuda.so loads and reports cleanly on any
 * machine, GPU or not: the entry answers ABI 1.x, the cheap probe either
 * finds devices or says "no CUDA device: <runtime text>", device_count and
 * create agree with the probe, a GPU whose compute capability the build
 * lacks is refused with a reason, and shutdown/dlclose leave no crash. This
 * suite runs in CI (no GPU); it is skipped only where the plugin was not
 * built (MINFER_CUDA=OFF or no nvcc).
 */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "minfer/backend.h"
#include "minfer/quant.h"
#include "testutil.h"

#define CUDA_PLUGIN MINFER_PLUGIN_DIR "/libminfer-cuda.so"

const char *minfer_test_skip_reason(void)
{
    if (access(CUDA_PLUGIN, F_OK) != 0)
        return "the CUDA plugin was not built (" CUDA_PLUGIN " is absent)";
    return NULL;
}

static void *g_dl;
static const struct minfer_backend_iface *IF;

static void setup(void)
{
    g_dl = dlopen(CUDA_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(g_dl, "the CUDA plugin must load even without a GPU: %s", dlerror());
    minfer_plugin_entry_fn e = (minfer_plugin_entry_fn)dlsym(g_dl, MINFER_PLUGIN_ENTRY_SYMBOL);
    ck_assert_ptr_nonnull(e);
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    IF = e(&abi, NULL);
    ck_assert_ptr_nonnull(IF);
    ck_assert_uint_eq(MINFER_ABI_PACK_MAJOR(abi), MINFER_ABI_MAJOR);
    ck_assert_uint_le(MINFER_ABI_PACK_MINOR(abi), MINFER_ABI_MINOR);
}

static void teardown(void)
{
    if (IF)
        IF->shutdown();
    if (g_dl)
        dlclose(g_dl);
    IF = NULL;
    g_dl = NULL;
}

/* Catches: a plugin that needs libcudart/a GPU just to load, a probe that
 * returns 0 without a reason, a table with missing required slots. */
START_TEST(loads_and_probes_cleanly)
{
    ck_assert_str_eq(IF->name, "cuda");
    ck_assert_uint_ge(IF->struct_size, sizeof(struct minfer_backend_iface));
    ck_assert_ptr_nonnull(IF->create);
    ck_assert_ptr_nonnull(IF->execute_node);
    char why[512] = "";
    int score = IF->probe(why, sizeof why);
    int n = IF->device_count();
    printf("cuda probe: score %d, %d device(s)%s%s\n", score, n, score ? "" : ": ", why);
    if (score == 0) {
        ck_assert_msg(strncmp(why, "no CUDA device", 14) == 0, "probe 0 says '%s'", why);
        ck_assert_int_eq(n, 0);
    } else {
        ck_assert_int_gt(n, 0);
    }
}
END_TEST

/* Catches: create crashing or returning a half-made instance without a
 * device, and an error text that does not say why. */
START_TEST(create_without_device_fails_with_reason)
{
    char why[512] = "";
    if (IF->probe(why, sizeof why) > 0)
        MINFER_TEST_SKIP("a CUDA device is present; this test is for machines without one");
    struct minfer_backend *be = (struct minfer_backend *)0x1;
    struct minfer_backend_config cfg = {.struct_size = sizeof cfg};
    minfer_status st = IF->create(&cfg, &be);
    ck_assert_int_ne(st, MINFER_OK);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(IF->last_error(NULL), "no CUDA device") != NULL, "create error: %s",
                  IF->last_error(NULL));
    struct minfer_device_info d = {.struct_size = sizeof d};
    ck_assert_int_ne(IF->device_info(0, &d), MINFER_OK);
    IF->destroy(NULL);
}
END_TEST

/* Catches: supports_op that accepts a malformed node (the validator must
 * refuse on shapes alone, device or not). */
START_TEST(supports_op_refuses_malformed_nodes)
{
    struct minfer_tensor a = {.type = MINFER_TYPE_F32, .ne = {16, 2, 1, 1}, .nb = {4, 64, 128, 128}};
    struct minfer_tensor b = {.type = MINFER_TYPE_F32, .ne = {8, 2, 1, 1}, .nb = {4, 32, 64, 64}};
    struct minfer_tensor d = a;
    struct minfer_node n = {.op = MINFER_OP_ADD, .n_src = 2, .src = {&a, &b}, .dst = &d};
    ck_assert(!IF->supports_op(NULL, &n));
    b = a;
    ck_assert(IF->supports_op(NULL, &n));
    n.op = MINFER_OP_COUNT + 5;
    ck_assert(!IF->supports_op(NULL, &n));
}
END_TEST

/* ---- node builders (no device: supports_op never touches data) ---- */

static struct minfer_tensor mk(uint32_t type, int64_t n0, int64_t n1, int64_t n2)
{
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    struct minfer_tensor t = {.type = type, .ne = {n0, n1, n2, 1}};
    t.nb[0] = tr->type_size;
    t.nb[1] = minfer_row_size(type, n0);
    t.nb[2] = t.nb[1] * (size_t)n1;
    t.nb[3] = t.nb[2] * (size_t)n2;
    return t;
}

static bool sup(uint32_t op, struct minfer_tensor *d, int n, struct minfer_tensor *s0,
                struct minfer_tensor *s1, struct minfer_tensor *s2, struct minfer_tensor *s3,
                struct minfer_tensor *s4, int ip0)
{
    struct minfer_node node = {.op = op, .n_src = (uint32_t)n, .src = {s0, s1, s2, s3, s4},
                               .dst = d};
    node.iparams[0] = ip0;
    node.fparams[0] = 1e-6f; /* eps of the norms, freq_base of ROPE */
    node.fparams[1] = 1.0f;  /* freq_scale of ROPE (1 = none; ir.h wants > 0) */
    return IF->supports_op(NULL, &node);
}

/* Catches: a validator that refuses a node the Qwen2/Qwen3 graphs emit at
 * 7B shapes (the scheduler would then silently keep the model on the CPU),
 * for every weight type the matmul and gather kernels claim. */
START_TEST(supports_every_qwen_op_at_7b_shapes)
{
    const uint32_t wt[] = {MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_1, MINFER_TYPE_Q5_0,
                           MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0, MINFER_TYPE_Q4_K,
                           MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_F16,
                           MINFER_TYPE_BF16, MINFER_TYPE_F32};
    for (size_t i = 0; i < sizeof wt / sizeof wt[0]; i++) {
        for (int nt = 1; nt <= 512; nt *= 8) {
            struct minfer_tensor w = mk(wt[i], 3584, 18944, 1), x = mk(MINFER_TYPE_F32, 3584, nt, 1);
            struct minfer_tensor y = mk(MINFER_TYPE_F32, 18944, nt, 1);
            ck_assert_msg(sup(MINFER_OP_MUL_MAT, &y, 2, &w, &x, NULL, NULL, NULL, 0),
                          "MUL_MAT %s nt=%d", minfer_type_traits_of(wt[i])->name, nt);
            struct minfer_tensor u = w;
            ck_assert_msg(sup(MINFER_OP_FFN_GATE_UP, &y, 3, &w, &u, &x, NULL, NULL, 0),
                          "FFN_GATE_UP %s nt=%d", minfer_type_traits_of(wt[i])->name, nt);
        }
        struct minfer_tensor tab = mk(wt[i], 3584, 152064, 1), ids = mk(MINFER_TYPE_I32, 7, 1, 1);
        struct minfer_tensor e = mk(MINFER_TYPE_F32, 3584, 7, 1);
        ck_assert_msg(sup(MINFER_OP_GET_ROWS, &e, 2, &tab, &ids, NULL, NULL, NULL, 0), "GET_ROWS %s",
                      minfer_type_traits_of(wt[i])->name);
    }
    struct minfer_tensor x = mk(MINFER_TYPE_F32, 3584, 5, 1), g = mk(MINFER_TYPE_F32, 3584, 1, 1);
    struct minfer_tensor o = x;
    ck_assert(sup(MINFER_OP_RMS_NORM, &o, 1, &x, NULL, NULL, NULL, NULL, 0));
    ck_assert(sup(MINFER_OP_RMS_NORM_MUL, &o, 2, &x, &g, NULL, NULL, NULL, 0));
    ck_assert(sup(MINFER_OP_ADD, &o, 2, &x, &g, NULL, NULL, NULL, 0));
    ck_assert(sup(MINFER_OP_MUL, &o, 2, &x, &x, NULL, NULL, NULL, 0));
    ck_assert(sup(MINFER_OP_SWIGLU, &o, 2, &x, &x, NULL, NULL, NULL, 0));
    ck_assert(sup(MINFER_OP_SCALE, &o, 1, &x, NULL, NULL, NULL, NULL, 0));
    struct minfer_tensor h = mk(MINFER_TYPE_F16, 3584, 5, 1);
    ck_assert(sup(MINFER_OP_COPY, &h, 1, &x, NULL, NULL, NULL, NULL, 0));
    const uint32_t kvt[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int k = 0; k < 3; k++) {
        struct minfer_tensor q = mk(MINFER_TYPE_F32, 128, 28, 5), qo = q;
        struct minfer_tensor pos = mk(MINFER_TYPE_I32, 5, 1, 1), len = mk(MINFER_TYPE_I32, 1, 1, 1);
        ck_assert(sup(MINFER_OP_ROPE, &qo, 2, &q, &pos, NULL, NULL, NULL, 128));
        struct minfer_tensor kc = mk(kvt[k], 512, 4096, 1), vc = kc;
        struct minfer_tensor rows = mk(MINFER_TYPE_F32, 512, 5, 1);
        ck_assert_msg(sup(MINFER_OP_KV_STORE, &kc, 2, &rows, &pos, NULL, NULL, NULL, 0), "KV_STORE %d", k);
        ck_assert_msg(sup(MINFER_OP_ATTENTION, &qo, 5, &q, &kc, &vc, &len, &pos, 4), "ATTENTION %d", k);
    }
}
END_TEST

/* Catches: a validator that accepts what the kernels cannot run (each case
 * would otherwise be a wrong result or a launch error at execute time). */
START_TEST(refuses_what_the_kernels_cannot_run)
{
    struct minfer_tensor x = mk(MINFER_TYPE_F32, 256, 3, 1), y = mk(MINFER_TYPE_F32, 64, 3, 1);
    struct minfer_tensor iq = mk(MINFER_TYPE_IQ4_NL, 256, 64, 1);
    ck_assert(!sup(MINFER_OP_MUL_MAT, &y, 2, &iq, &x, NULL, NULL, NULL, 0)); /* no kernel */
    struct minfer_tensor w = mk(MINFER_TYPE_Q4_K, 256, 64, 1);
    w.nb[1] += 8; /* rows no longer 16-byte aligned for the int4 loads */
    ck_assert(!sup(MINFER_OP_MUL_MAT, &y, 2, &w, &x, NULL, NULL, NULL, 0));
    struct minfer_tensor w3 = mk(MINFER_TYPE_Q8_0, 256, 64, 2); /* batched */
    ck_assert(!sup(MINFER_OP_MUL_MAT, &y, 2, &w3, &x, NULL, NULL, NULL, 0));
    struct minfer_tensor q = mk(MINFER_TYPE_F32, 48, 4, 2), pos = mk(MINFER_TYPE_I32, 2, 1, 1);
    struct minfer_tensor len = mk(MINFER_TYPE_I32, 1, 1, 1);
    struct minfer_tensor kq = mk(MINFER_TYPE_Q8_0, 96, 64, 1); /* hd 48: not whole q8_0 blocks */
    ck_assert(!sup(MINFER_OP_ATTENTION, &q, 5, &q, &kq, &kq, &len, &pos, 2));
    struct minfer_tensor kf = mk(MINFER_TYPE_F32, 96, 64, 1);
    ck_assert(sup(MINFER_OP_ATTENTION, &q, 5, &q, &kf, &kf, &len, &pos, 2));
    ck_assert(!sup(MINFER_OP_ATTENTION, &q, 5, &q, &kf, &kf, &len, &pos, 3)); /* 3 does not divide 4 heads */
    struct minfer_tensor c4 = mk(MINFER_TYPE_Q4_0, 96, 64, 1), rows = mk(MINFER_TYPE_F32, 96, 2, 1);
    ck_assert(!sup(MINFER_OP_KV_STORE, &c4, 2, &rows, &pos, NULL, NULL, NULL, 0)); /* cache type */
    struct minfer_tensor r = mk(MINFER_TYPE_F32, 64, 4, 2);
    ck_assert(!sup(MINFER_OP_ROPE, &r, 2, &r, &pos, NULL, NULL, NULL, 63)); /* odd n_rot */
    ck_assert(!sup(MINFER_OP_ROPE, &r, 2, &r, &pos, NULL, NULL, NULL, 66)); /* n_rot > hd */
    struct minfer_tensor big = mk(MINFER_TYPE_F32, 64, 70000, 1), tab = mk(MINFER_TYPE_F32, 64, 9, 1);
    struct minfer_tensor ids = mk(MINFER_TYPE_I32, 70000, 1, 1);
    ck_assert(!sup(MINFER_OP_GET_ROWS, &big, 2, &tab, &ids, NULL, NULL, NULL, 0)); /* > 65535 ids */
}
END_TEST

/* ---- fusion: may a fused launch leave a tensor unwritten? ---- */

typedef int (*dead_from_fn)(const struct minfer_replay_window *w, uint32_t from,
                            const struct minfer_tensor *t);

/* An F32 [n0, n1] view at byte offset off of a pretend arena (the check
 * compares addresses only; nothing is read). */
static struct minfer_tensor at(size_t off, int64_t n0, int64_t n1)
{
    static _Alignas(16) char arena[1 << 16];
    struct minfer_tensor t = mk(MINFER_TYPE_F32, n0, n1, 1);
    t.data = arena + off;
    return t;
}

static struct minfer_node node(struct minfer_tensor *dst, const struct minfer_tensor *src)
{
    struct minfer_node n = {.op = MINFER_OP_SCALE, .n_src = 1, .dst = dst};
    n.src[0] = src;
    return n;
}

static int dead(dead_from_fn f, struct minfer_node *nodes, uint32_t n,
                const struct minfer_tensor *t)
{
    struct minfer_replay_window w = {.first = 0, .last = n - 1, .nodes = nodes};
    return f(&w, 0, t);
}

/* Catches a fused RoPE + KV store launch (fuse.c) that skips writing k's
 * RoPE although a later node reads those bytes before anything rewrote
 * them: a read anywhere in the range, a rewrite that covers only part of
 * it, a strided dst whose byte span covers the range but not every byte,
 * an output tensor, or bytes never rewritten before the window ends. No
 * GPU needed. */
START_TEST(dead_bytes_need_a_rewrite_before_any_read)
{
    ck_assert_ptr_nonnull(IF->get_proc);
    dead_from_fn f = (dead_from_fn)IF->get_proc("minfer_cuda_test_dead_from");
    ck_assert_msg(f, "the CUDA plugin lacks minfer_cuda_test_dead_from");
    struct minfer_tensor t = at(1024, 64, 4); /* bytes [1024, 2048) */
    struct minfer_tensor other = at(8192, 64, 4), whole = at(1024, 64, 4);
    struct minfer_tensor lo = at(1024, 64, 2), hi = at(1536, 64, 2), tail = at(1536, 16, 1);
    struct minfer_tensor out = at(16384, 64, 4);

    /* each case ends with a rewrite of all of t: only a read before it
     * (or the rule under test) can keep t alive */
    struct minfer_node r1[] = {node(&out, &other), node(&out, &tail), node(&whole, &other)};
    ck_assert_msg(!dead(f, r1, 3, &t), "a read of the last bytes missed");
    struct minfer_node r2[] = {node(&whole, &other), node(&out, &t)};
    ck_assert_msg(dead(f, r2, 2, &t), "a whole rewrite before the read not seen");
    struct minfer_node r3[] = {node(&lo, &other), node(&out, &tail), node(&whole, &other)};
    ck_assert_msg(!dead(f, r3, 3, &t), "half a rewrite taken for all of it");
    struct minfer_node r4[] = {node(&hi, &other), node(&lo, &other), node(&out, &t)};
    ck_assert_msg(dead(f, r4, 3, &t), "a rewrite in two pieces not seen");
    struct minfer_tensor strided = whole; /* every other row of a twice-as-long span */
    strided.ne[1] = 2;
    strided.nb[1] = 2 * 64 * 4;
    struct minfer_node r5[] = {node(&strided, &other), node(&out, &tail), node(&whole, &other)};
    ck_assert_msg(!dead(f, r5, 3, &t), "a strided dst counted as rewriting every byte");
    struct minfer_node r6[] = {node(&out, &other)};
    ck_assert_msg(!dead(f, r6, 1, &t), "bytes never rewritten counted as dead at the end");
    struct minfer_tensor o = t;
    o.flags = MINFER_TENSOR_OUTPUT;
    struct minfer_node r7[] = {node(&whole, &other)};
    ck_assert_msg(!dead(f, r7, 1, &o), "an output tensor left unwritten");
    /* nine one-float rewrites inside the range leave ten live pieces (more
     * than the check keeps apart); a read of one of them must still count */
    struct minfer_tensor dots[9], piece = at(1024 + 460, 1, 1);
    struct minfer_node r8[11];
    for (int i = 0; i < 9; i++) {
        dots[i] = at(1024 + 100 * (size_t)(i + 1), 1, 1);
        r8[i] = node(&dots[i], &other);
    }
    r8[9] = node(&out, &piece);
    r8[10] = node(&whole, &other);
    ck_assert_msg(!dead(f, r8, 11, &t), "a read between many small rewrites missed");
}
END_TEST

/* ---- fusion: blocks of heads for one token's norm/RoPE group ---- */

/* struct cuda_rows of backends/cuda/cuda-internal.h (the hook's argument) */
enum { ROWS_READ, ROWS_WRITE, ROWS_SHARED };
struct rows {
    uintptr_t data;
    int64_t rows, stride, bytes;
    int kind;
};
typedef int (*head_blocks_fn)(const struct rows *s, int n, int max_blocks);

/* Catches a block count for k_norm_rope_kv under which a block writes a
 * row that another block still has to read (its RoPE output laid over
 * another head's source), a row every block reads, or a row another
 * output writes; and one that falls back to fewer blocks than the rows
 * allow. Layouts as the arena gives qwen3-8b (q RoPE 8 rows past q's 32,
 * over k's 8). No GPU needed. */
START_TEST(head_blocks_keep_writes_in_their_block)
{
    ck_assert_ptr_nonnull(IF->get_proc);
    head_blocks_fn f = (head_blocks_fn)IF->get_proc("minfer_cuda_test_head_blocks");
    ck_assert_msg(f, "the CUDA plugin lacks minfer_cuda_test_head_blocks");
    const uintptr_t base = 1 << 20;
    const int64_t row = 512; /* 128 floats */
    struct rows s[6] = {
        {base, 32, row, row, ROWS_READ},                /* q */
        {base + 32 * row, 8, row, row, ROWS_READ},      /* k, right after q */
        {base + 64 * row, 8, row, row, ROWS_READ},      /* v */
        {base + 96 * row, 1, 0, 4, ROWS_SHARED},        /* position */
        {base + 8 * row, 32, row, row, ROWS_WRITE},     /* q's RoPE over q[8..] and k */
        {base + 128 * row, 8, row, row, ROWS_WRITE},    /* k's RoPE, apart */
    };
    ck_assert_int_eq(f(s, 6, 32), 8); /* row h lands on row h + 8: 8 blocks, not more */
    s[4].data = base + 4 * row;
    ck_assert_int_eq(f(s, 6, 32), 4); /* 4 rows on: blocks must divide 4 (and 28, for k) */
    s[4].data = base + 9 * row;
    ck_assert_int_eq(f(s, 6, 32), 0); /* 9 on: q's rows ask for 9 or 3 blocks, k's for 23 */
    s[4].data = base + 8 * row + 4;
    ck_assert_int_eq(f(s, 6, 32), 0); /* straddles two rows of other blocks */
    s[4].data = base + 200 * row;
    ck_assert_int_eq(f(s, 6, 32), 32); /* apart from everything: a block per q head */
    s[3].data = base + 210 * row;
    ck_assert_int_eq(f(s, 6, 32), 0); /* writes what every block reads */
    s[3].data = base + 96 * row;
    s[5].data = base + 220 * row;
    ck_assert_int_eq(f(s, 6, 32), 0); /* two outputs on the same bytes */
    s[5].data = base + 300 * row;
    ck_assert_int_eq(f(s, 6, 5), 5); /* never more than asked */
}
END_TEST

/* ---- compute capability against the built architectures ---- */

typedef int (*arch_runs_fn)(int major, int minor, const char *archs, char *why, size_t len);

static arch_runs_fn arch_runs(void)
{
    ck_assert_ptr_nonnull(IF->get_proc);
    arch_runs_fn f = (arch_runs_fn)IF->get_proc("minfer_cuda_test_arch_runs");
    ck_assert_msg(f, "the CUDA plugin lacks minfer_cuda_test_arch_runs");
    return f;
}

/* Catches: a check that lets probe pick a GPU the kernels cannot run on
 * (SASS is good within one major from its minor up, PTX from its
 * capability up, "a" targets on exactly one), or one that refuses a GPU
 * they can (a newer chip served by PTX, 8.9 by sm_80 SASS). No GPU needed. */
START_TEST(arch_check_follows_cuda_compatibility)
{
    arch_runs_fn f = arch_runs();
    const char *dflt = "80-real,86-real,89-real,90";
    static const struct {
        int major, minor;
        const char *archs;
        int runs;
    } cases[] = {
        {9, 0, "80-real,86-real,89-real,90", 1},  {8, 6, "80-real,86-real,89-real,90", 1},
        {8, 7, "80-real,86-real,89-real,90", 1},  {10, 0, "80-real,86-real,89-real,90", 1},
        {12, 0, "80-real,86-real,89-real,90", 1}, {7, 5, "80-real,86-real,89-real,90", 0},
        {7, 0, "80-real,86-real,89-real,90", 0},  {8, 9, "80-real", 1},
        {8, 0, "86-real", 0},  {9, 0, "80-real", 0},   {9, 0, "80", 1},
        {10, 0, "90-real", 0}, {10, 0, "90", 1},       {10, 0, "90-virtual", 1},
        {8, 6, "90", 0},       {9, 0, "90a-real", 1},  {10, 0, "90a", 0},
        {10, 3, "100f", 1},    {12, 0, "100f", 0},     {9, 0, "", 0},
        {8, 6, "all", 1},      {8, 6, "native", 1},    {9, 0, "80-real,,90-real", 1},
        {7, 5, "all", 0},      {7, 5, "75", 0}, /* older than the kernels */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[512] = "";
        int got = f(cases[i].major, cases[i].minor, cases[i].archs, why, sizeof why);
        ck_assert_msg(got == cases[i].runs, "cc %d.%d with '%s': %d (%s), expected %d",
                      cases[i].major, cases[i].minor, cases[i].archs, got, why, cases[i].runs);
        ck_assert_msg(why[0], "cc %d.%d with '%s' gave no text", cases[i].major,
                      cases[i].minor, cases[i].archs);
    }
    char why[512];
    ck_assert_int_eq(f(8, 0, "86-real,89-real,90", why, sizeof why), 0);
    ck_assert_msg(strstr(why, "8.0") && strstr(why, "86-real,89-real,90") &&
                      strstr(why, "MINFER_CUDA_ARCHS=80"),
                  "the refusal must name the capability, the build's list and the fix: %s",
                  why);
    ck_assert_int_eq(f(7, 5, dflt, why, sizeof why), 0);
    ck_assert_msg(strstr(why, "7.5") && strstr(why, "8.0"),
                  "a GPU below the kernels' floor must be told so: %s", why);
    ck_assert_int_eq(f(10, 0, "90", why, sizeof why), 1);
    ck_assert_msg(strstr(why, "PTX"), "a JIT from PTX must say so: %s", why);
}
END_TEST

/* Catches: a build that records other architectures than it compiled
 * (CMake passes MINFER_CUDA_ARCHS both to nvcc and to the plugin). */
START_TEST(built_archs_are_the_configured_ones)
{
    typedef const char *(*archs_fn)(void);
    archs_fn f = (archs_fn)IF->get_proc("minfer_cuda_built_archs");
    ck_assert_ptr_nonnull(f);
    printf("cuda plugin built for: %s\n", f());
    ck_assert_str_eq(f(), MINFER_TEST_CUDA_ARCHS);
}
END_TEST

/* Catches: create on (and probe choosing) a GPU whose capability the build
 * lacks; with a fake 7.5 both must refuse and say why. create's refusal
 * needs no GPU; probe's is checked where a device exists. */
START_TEST(refuses_a_capability_the_build_lacks)
{
    typedef void (*fake_fn)(int, int);
    fake_fn fake = (fake_fn)IF->get_proc("minfer_cuda_test_fake_cc");
    ck_assert_ptr_nonnull(fake);
    char real_why[512] = "";
    int real = IF->probe(real_why, sizeof real_why);
    fake(7, 5);
    struct minfer_backend *be = (struct minfer_backend *)0x1;
    struct minfer_backend_config cfg = {.struct_size = sizeof cfg};
    minfer_status st = IF->create(&cfg, &be);
    char why[512] = "";
    int faked = IF->probe(why, sizeof why);
    fake(-1, -1);
    ck_assert_int_eq(st, MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(IF->last_error(NULL), "compute capability 7.5"), "create error: %s",
                  IF->last_error(NULL));
    ck_assert_int_eq(faked, 0);
    if (real == 0) {
        MINFER_TEST_SKIP("probe's refusal needs a CUDA device (%s)", real_why);
    }
    ck_assert_msg(strstr(why, "no CUDA device this build runs on") &&
                      strstr(why, "compute capability 7.5"),
                  "probe with a fake 7.5 says '%s'", why);
    ck_assert_int_gt(IF->probe(NULL, 0), 0); /* the real capability again */
}
END_TEST

Suite *cuda_plugin_suite(void);
Suite *cuda_plugin_suite(void)
{
    Suite *s = suite_create("cuda_plugin");
    TCase *tc = tcase_create("plugin");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, loads_and_probes_cleanly);
    tcase_add_test(tc, create_without_device_fails_with_reason);
    tcase_add_test(tc, supports_op_refuses_malformed_nodes);
    tcase_add_test(tc, supports_every_qwen_op_at_7b_shapes);
    tcase_add_test(tc, refuses_what_the_kernels_cannot_run);
    tcase_add_test(tc, arch_check_follows_cuda_compatibility);
    tcase_add_test(tc, built_archs_are_the_configured_ones);
    tcase_add_test(tc, refuses_a_capability_the_build_lacks);
    tcase_add_test(tc, dead_bytes_need_a_rewrite_before_any_read);
    tcase_add_test(tc, head_blocks_keep_writes_in_their_block);
    suite_add_tcase(s, tc);
    return s;
}
