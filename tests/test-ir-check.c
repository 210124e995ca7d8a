/*
 * test-ir-check.c — the IR's contract as the SDK states it: the op table
 * in ir.h (a name and a source count for every op) and the node checker
 * of minfer/ir-check.h (well-formed nodes of every op pass; each rule of
 * ir.h refuses the node that breaks it with MINFER_ERR_INVALID_ARG and a
 * reason naming the op; an unknown op is MINFER_ERR_UNSUPPORTED).
 */
#include <check.h>
#include <string.h>

#include "minfer/ir-check.h"
#include "testutil.h"

static struct minfer_tensor mk(uint32_t type, int64_t n0, int64_t n1, int64_t n2)
{
    static char byte; /* any non-NULL address: the checker never reads data */
    const struct minfer_type_traits *tr = minfer_type_traits_of(type);
    struct minfer_tensor t = {.type = type, .ne = {n0, n1, n2, 1}, .data = &byte};
    t.nb[0] = tr->type_size;
    t.nb[1] = minfer_row_size(type, n0);
    t.nb[2] = t.nb[1] * (size_t)n1;
    t.nb[3] = t.nb[2] * (size_t)n2;
    return t;
}

/* Catches: an op appended to the enum without a line in MINFER_OP_TABLE
 * (no name, no source count), or a count past MINFER_MAX_SRC. */
START_TEST(op_table_is_complete)
{
    ck_assert_str_eq(minfer_op_name(MINFER_OP_NONE), "NONE");
    for (uint32_t op = 1; op < MINFER_OP_COUNT; op++) {
        ck_assert_msg(strcmp(minfer_op_name(op), "UNKNOWN") != 0, "op %u has no name", op);
        ck_assert_msg(minfer_op_n_src(op) >= 1 && minfer_op_n_src(op) <= MINFER_MAX_SRC,
                      "op %u (%s) has %u sources", op, minfer_op_name(op), minfer_op_n_src(op));
    }
    ck_assert_str_eq(minfer_op_name(MINFER_OP_COUNT), "UNKNOWN");
    ck_assert_str_eq(minfer_op_name(MINFER_OP_MUL_MAT_ADD), "MUL_MAT_ADD");
    ck_assert_uint_eq(minfer_op_n_src(MINFER_OP_ATTENTION), 5);
    ck_assert_str_eq(minfer_op_name(15), "ATTENTION_LISTS");
    ck_assert_uint_eq(minfer_op_n_src(MINFER_OP_ATTENTION_LISTS), 6);
}
END_TEST

static struct minfer_node node(uint32_t op, struct minfer_tensor *d, struct minfer_tensor *s0,
                               struct minfer_tensor *s1, struct minfer_tensor *s2,
                               struct minfer_tensor *s3, struct minfer_tensor *s4)
{
    struct minfer_node n = {.op = op, .n_src = minfer_op_n_src(op), .src = {s0, s1, s2, s3, s4},
                            .dst = d};
    n.fparams[0] = 1e-6f;
    n.fparams[1] = 1.0f;
    return n;
}

static void refused(const struct minfer_node *n, const char *what)
{
    char why[256];
    minfer_status st = minfer_ir_check_node(n, MINFER_IR_CHECK_DATA, why, sizeof why);
    ck_assert_msg(st == MINFER_ERR_INVALID_ARG, "%s: status %d (%s)", what, st, why);
    ck_assert_msg(strncmp(why, minfer_op_name(n->op), strlen(minfer_op_name(n->op))) == 0,
                  "%s: reason does not start with the op: %s", what, why);
}

static void accepted(const struct minfer_node *n, const char *what)
{
    char why[256];
    ck_assert_msg(minfer_ir_check_node(n, MINFER_IR_CHECK_DATA, why, sizeof why) == MINFER_OK,
                  "%s refused: %s", what, why);
}

/* Catches: a checker that refuses what the model builders emit (every op
 * at Qwen-like shapes), or accepts a node that breaks one of ir.h's rules. */
START_TEST(checker_follows_ir_h)
{
    struct minfer_tensor x = mk(MINFER_TYPE_F32, 64, 5, 1), y = x, g = mk(MINFER_TYPE_F32, 64, 1, 1);
    struct minfer_tensor w = mk(MINFER_TYPE_Q8_0, 64, 32, 1), o = mk(MINFER_TYPE_F32, 32, 5, 1);
    struct minfer_tensor ids = mk(MINFER_TYPE_I32, 5, 1, 1), len = mk(MINFER_TYPE_I32, 1, 1, 1);
    struct minfer_tensor q = mk(MINFER_TYPE_F32, 32, 4, 5), qo = q;
    struct minfer_tensor kc = mk(MINFER_TYPE_F16, 64, 40, 1), rows = mk(MINFER_TYPE_F32, 64, 5, 1);
    struct minfer_tensor tab = mk(MINFER_TYPE_Q4_K, 256, 9, 1), emb = mk(MINFER_TYPE_F32, 256, 5, 1);
    struct minfer_tensor h = mk(MINFER_TYPE_F16, 64, 5, 1);

    struct minfer_node n = node(MINFER_OP_ADD, &y, &x, &g, NULL, NULL, NULL);
    accepted(&n, "ADD broadcasting one row");
    n.src[1] = &x;
    accepted(&n, "ADD of one shape");
    struct minfer_tensor b2 = mk(MINFER_TYPE_F32, 64, 5, 2);
    n.src[1] = &b2;
    refused(&n, "ADD with src1 neither one row nor src0's shape");
    n = node(MINFER_OP_RMS_NORM_MUL, &y, &x, &g, NULL, NULL, NULL);
    accepted(&n, "RMS_NORM_MUL");
    n.fparams[0] = -1.0f;
    refused(&n, "RMS_NORM_MUL with eps < 0");
    n = node(MINFER_OP_MUL_MAT, &o, &w, &x, NULL, NULL, NULL);
    accepted(&n, "MUL_MAT");
    n.n_src = 3;
    refused(&n, "MUL_MAT with 3 sources");
    n.n_src = 2;
    o.ne[0] = 31;
    refused(&n, "MUL_MAT with dst of the wrong N");
    o.ne[0] = 32;
    n.src[1] = &b2;
    refused(&n, "MUL_MAT with 3-D activations");
    struct minfer_tensor bias = mk(MINFER_TYPE_F32, 32, 1, 1);
    n = node(MINFER_OP_MUL_MAT_ADD, &o, &w, &x, &bias, NULL, NULL);
    accepted(&n, "MUL_MAT_ADD with a bias");
    n = node(MINFER_OP_GET_ROWS, &emb, &tab, &ids, NULL, NULL, NULL);
    accepted(&n, "GET_ROWS of q4_K");
    struct minfer_tensor emb3 = mk(MINFER_TYPE_F32, 256, 1, 5);
    n.dst = &emb3;
    refused(&n, "GET_ROWS with a 3-D dst");
    n = node(MINFER_OP_ROPE, &qo, &q, &ids, NULL, NULL, NULL);
    n.iparams[0] = 32;
    accepted(&n, "ROPE");
    n.fparams[1] = 0.0f;
    refused(&n, "ROPE with freq_scale 0");
    n.fparams[1] = 1.0f;
    n.iparams[0] = 31;
    refused(&n, "ROPE with odd n_rot");
    n = node(MINFER_OP_KV_STORE, &kc, &rows, &ids, NULL, NULL, NULL);
    accepted(&n, "KV_STORE into f16");
    struct minfer_tensor k4 = mk(MINFER_TYPE_Q4_0, 64, 40, 1);
    n.dst = &k4;
    refused(&n, "KV_STORE into a q4_0 cache");
    n = node(MINFER_OP_ATTENTION, &qo, &q, &kc, &kc, &len, &ids);
    n.iparams[0] = 2;
    accepted(&n, "ATTENTION");
    n.iparams[0] = 3;
    refused(&n, "ATTENTION with n_kv_head not dividing n_head");
    n.iparams[0] = 2;
    n.src[3] = &ids;
    refused(&n, "ATTENTION with kv_len of 5 elements");
    /* ATTENTION_LISTS: a range and a list per query token, lists 2-D dense */
    struct minfer_tensor lists = mk(MINFER_TYPE_I32, 8, 3, 1);
    struct minfer_tensor ranges = mk(MINFER_TYPE_I32, 2, 5, 1);
    n = node(MINFER_OP_ATTENTION_LISTS, &qo, &q, &kc, &kc, &ranges, &ids);
    n.src[5] = &lists;
    n.iparams[0] = 2;
    accepted(&n, "ATTENTION_LISTS");
    n.src[3] = &ids;
    refused(&n, "ATTENTION_LISTS with one count per query instead of a range");
    n.src[3] = &ranges;
    n.iparams[1] = 4;
    refused(&n, "ATTENTION_LISTS with a window parameter");
    n.iparams[1] = 0;
    lists.nb[1] = 64;
    refused(&n, "ATTENTION_LISTS with lists not dense");
    lists.nb[1] = 32;
    lists.type = MINFER_TYPE_F32;
    refused(&n, "ATTENTION_LISTS with f32 lists");
    lists.type = MINFER_TYPE_I32;
    n.src[5] = NULL;
    refused(&n, "ATTENTION_LISTS without its lists");
    n = node(MINFER_OP_COPY, &h, &x, NULL, NULL, NULL, NULL);
    accepted(&n, "COPY f32 -> f16");
    x.nb[0] = 8;
    refused(&n, "COPY from a tensor not dense in dim 0");
    x.nb[0] = 4;
    x.nb[1] = 100; /* a row is 256 bytes */
    refused(&n, "COPY from rows that overlap");
    x.nb[1] = 256;
    n.dst = NULL;
    refused(&n, "COPY without dst");
    n.dst = &h;
    h.data = NULL;
    refused(&n, "COPY with NULL data at execute time");
    char why[128];
    ck_assert_int_eq(minfer_ir_check_node(&n, 0, why, sizeof why), MINFER_OK);
    n.op = MINFER_OP_COUNT + 2;
    ck_assert_int_eq(minfer_ir_check_node(&n, 0, why, sizeof why), MINFER_ERR_UNSUPPORTED);
    ck_assert_int_eq(minfer_ir_check_node(NULL, 0, NULL, 0), MINFER_ERR_INVALID_ARG);
}
END_TEST

/* Catches: a checker that refuses the ABI 1.1 nodes the model families
 * build (GEGLU, the MoE ops, ROPE's layout and factors, the attention
 * window) or accepts one that breaks ir.h. */
START_TEST(checker_follows_ir_h_1_1)
{
    struct minfer_tensor a = mk(MINFER_TYPE_F32, 96, 2, 5), b = a, d = a;
    struct minfer_node n = node(MINFER_OP_GEGLU, &d, &a, &b, NULL, NULL, NULL);
    accepted(&n, "GEGLU");
    struct minfer_tensor b2 = mk(MINFER_TYPE_F32, 96, 1, 5);
    n.src[1] = &b2;
    refused(&n, "GEGLU with shapes that differ");

    struct minfer_tensor lg = mk(MINFER_TYPE_F32, 128, 5, 1), sel = mk(MINFER_TYPE_I32, 8, 5, 1);
    n = node(MINFER_OP_TOPK, &sel, &lg, NULL, NULL, NULL, NULL);
    n.iparams[0] = 8;
    accepted(&n, "TOPK");
    n.iparams[0] = 9;
    refused(&n, "TOPK whose k differs from dst's rows");
    n.iparams[0] = 8;
    struct minfer_tensor self = mk(MINFER_TYPE_F32, 8, 5, 1);
    n.dst = &self;
    refused(&n, "TOPK into an f32 dst");

    struct minfer_tensor w = mk(MINFER_TYPE_F32, 8, 5, 1);
    n = node(MINFER_OP_MOE_WEIGHTS, &w, &lg, &sel, NULL, NULL, NULL);
    n.iparams[0] = 1;
    accepted(&n, "MOE_WEIGHTS renormalised");
    n.iparams[0] = 2;
    refused(&n, "MOE_WEIGHTS with flag 2");

    struct minfer_tensor ex = mk(MINFER_TYPE_Q4_K, 256, 64, 128), x1 = mk(MINFER_TYPE_F32, 256, 1, 5);
    struct minfer_tensor xk = mk(MINFER_TYPE_F32, 256, 8, 5), y = mk(MINFER_TYPE_F32, 64, 8, 5);
    n = node(MINFER_OP_MUL_MAT_ID, &y, &ex, &x1, &sel, NULL, NULL);
    accepted(&n, "MUL_MAT_ID with shared activations");
    n.src[1] = &xk;
    accepted(&n, "MUL_MAT_ID with per-slot activations");
    struct minfer_tensor x3 = mk(MINFER_TYPE_F32, 256, 3, 5);
    n.src[1] = &x3;
    refused(&n, "MUL_MAT_ID with B neither 1 nor k");
    n.src[1] = &xk;
    struct minfer_tensor y2 = mk(MINFER_TYPE_F32, 64, 8, 4);
    n.dst = &y2;
    refused(&n, "MUL_MAT_ID with dst of the wrong T");

    struct minfer_tensor sum = mk(MINFER_TYPE_F32, 64, 5, 1);
    n = node(MINFER_OP_MOE_SUM, &sum, &y, &w, NULL, NULL, NULL);
    accepted(&n, "MOE_SUM");
    n.src[1] = &lg;
    refused(&n, "MOE_SUM with weights of another k");

    struct minfer_tensor q = mk(MINFER_TYPE_F32, 64, 4, 5), qo = q;
    struct minfer_tensor pos = mk(MINFER_TYPE_I32, 5, 1, 1), fac = mk(MINFER_TYPE_F32, 32, 1, 1);
    n = node(MINFER_OP_ROPE_DIV, &qo, &q, &pos, &fac, NULL, NULL);
    n.iparams[0] = 64;
    n.iparams[1] = 1;
    accepted(&n, "ROPE_DIV, normal layout");
    n.iparams[1] = 2;
    refused(&n, "ROPE_DIV with layout 2");
    n.iparams[1] = 0;
    n.iparams[0] = 32;
    refused(&n, "ROPE_DIV with factors not n_rot / 2");

    struct minfer_tensor kc = mk(MINFER_TYPE_F16, 128, 40, 1), len = mk(MINFER_TYPE_I32, 1, 1, 1);
    n = node(MINFER_OP_ATTENTION, &qo, &q, &kc, &kc, &len, &pos);
    n.iparams[0] = 2;
    n.iparams[1] = 16;
    accepted(&n, "ATTENTION with a window");
    n.iparams[1] = -1;
    refused(&n, "ATTENTION with a negative window");
}
END_TEST

Suite *ir_check_suite(void);
Suite *ir_check_suite(void)
{
    Suite *s = suite_create("ir_check");
    TCase *tc = tcase_create("contract");
    tcase_add_test(tc, op_table_is_complete);
    tcase_add_test(tc, checker_follows_ir_h);
    tcase_add_test(tc, checker_follows_ir_h_1_1);
    suite_add_tcase(s, tc);
    return s;
}
