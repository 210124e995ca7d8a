/*
 * test-quant.c — the block formats and reference (de)quantizers against
 * llama.cpp's own outputs in fixtures/quant (bit-exact both ways), plus
 * fp16/bf16 conversions, type traits, round trips and argument refusals.
 */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/minfer.h"
#include "minfer/quant.h"
#include "minfer/quant-ref.h"
#include "testutil.h"

#define ROWS 16
#define COLS 512

/* ---- fixture helpers ---- */

static void *read_file(const char *name, size_t *size)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/quant/%s", MINFER_FIXTURES_DIR, name);
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void *p = malloc(n > 0 ? (size_t)n : 1);
    if (p && fread(p, 1, (size_t)n, f) != (size_t)n) {
        free(p);
        p = NULL;
    }
    fclose(f);
    *size = (size_t)n;
    return p;
}

static const uint32_t fixture_types[] = {
    MINFER_TYPE_F16,  MINFER_TYPE_BF16, MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_1,
    MINFER_TYPE_Q5_0, MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0, MINFER_TYPE_Q4_K,
    MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K,
};
#define N_FIXTURE_TYPES (int)(sizeof fixture_types / sizeof fixture_types[0])

/* Catches any deviation of our dequantizer from llama.cpp's: wrong nibble
 * order, wrong scale unpacking, mul/add order, fp16 conversion errors. */
START_TEST(dequant_matches_llama)
{
    uint32_t type = fixture_types[_i];
    const char *name = minfer_type_name(type);
    char qn[64], dqn[64];
    snprintf(qn, sizeof qn, "q.%s.bin", name);
    snprintf(dqn, sizeof dqn, "dq.%s.f32", name);
    size_t qs, dqs;
    uint8_t *q = read_file(qn, &qs);
    float *dq = read_file(dqn, &dqs);
    if (!q || !dq) {
        free(q);
        free(dq);
        MINFER_TEST_SKIP("fixture %s not found under %s", qn, MINFER_FIXTURES_DIR);
    }
    size_t rs = minfer_row_size(type, COLS);
    ck_assert_uint_eq(qs, rs * ROWS);
    ck_assert_uint_eq(dqs, sizeof(float) * ROWS * COLS);
    float out[COLS];
    for (int r = 0; r < ROWS; r++) {
        ck_assert_int_eq(minfer_dequantize_row(type, q + rs * r, out, COLS), MINFER_OK);
        for (int j = 0; j < COLS; j++)
            if (memcmp(&out[j], &dq[r * COLS + j], 4))
                ck_abort_msg("%s row %d col %d: got %.9g want %.9g", name, r, j, out[j],
                             dq[r * COLS + j]);
    }
    free(q);
    free(dq);
}
END_TEST

/* Catches any deviation of our quantizers from llama.cpp's reference: a
 * different rounding, search order, candidate grid, or FMA contraction. */
START_TEST(quant_matches_llama)
{
    uint32_t type = fixture_types[_i];
    const char *name = minfer_type_name(type);
    char qn[64];
    snprintf(qn, sizeof qn, "q.%s.bin", name);
    size_t qs, is;
    uint8_t *q = read_file(qn, &qs);
    float *in = read_file("input.f32", &is);
    if (!q || !in) {
        free(q);
        free(in);
        MINFER_TEST_SKIP("fixture %s or input.f32 not found under %s", qn, MINFER_FIXTURES_DIR);
    }
    size_t rs = minfer_row_size(type, COLS);
    ck_assert_uint_eq(is, sizeof(float) * ROWS * COLS);
    ck_assert_uint_eq(qs, rs * ROWS);
    uint8_t *out = malloc(rs);
    ck_assert_ptr_nonnull(out);
    for (int r = 0; r < ROWS; r++) {
        ck_assert_int_eq(minfer_quantize_row_ref(type, in + r * COLS, out, COLS), MINFER_OK);
        for (size_t b = 0; b < rs; b++)
            if (out[b] != q[rs * r + b])
                ck_abort_msg("%s row %d byte %zu (block %zu): got %02x want %02x", name, r, b,
                             b / minfer_type_traits_of(type)->type_size, out[b], q[rs * r + b]);
    }
    free(out);
    free(q);
    free(in);
}
END_TEST

/* ---- conversions ---- */

/* Catches fp16 conversion errors: every non-NaN half must survive
 * half->float->half, and rounding must be to nearest even at the
 * midpoints (a truncating converter fails the midpoint checks). */
START_TEST(fp16_exhaustive)
{
    for (uint32_t h = 0; h < 65536; h++) {
        float f = minfer_fp16_to_fp32((uint16_t)h);
        if (isnan(f)) {
            ck_assert(isnan(minfer_fp16_to_fp32(minfer_fp32_to_fp16(f))));
            continue;
        }
        ck_assert_uint_eq(minfer_fp32_to_fp16(f), h);
    }
    ck_assert_uint_eq(minfer_fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);       /* tie -> even */
    ck_assert_uint_eq(minfer_fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);   /* tie -> even up */
    ck_assert_uint_eq(minfer_fp32_to_fp16(65520.0f), 0x7c00);              /* overflow */
    ck_assert_uint_eq(minfer_fp32_to_fp16(0x1p-25f), 0x0000);              /* tie to 0 */
    ck_assert_uint_eq(minfer_fp32_to_fp16(0x1.8p-25f), 0x0001);
    ck_assert_uint_eq(minfer_fp32_to_fp16(-0.0f), 0x8000);
    ck_assert_float_eq(minfer_fp16_to_fp32(0x0001), 0x1p-24f);
}
END_TEST

/* Catches a bf16 converter that truncates instead of rounding to even or
 * that turns a NaN with only low mantissa bits into infinity. */
START_TEST(bf16_rounding)
{
    ck_assert_uint_eq(minfer_fp32_to_bf16(1.0f), 0x3f80);
    ck_assert_uint_eq(minfer_fp32_to_bf16(minfer_f32_from_bits(0x3f808000u)), 0x3f80); /* tie */
    ck_assert_uint_eq(minfer_fp32_to_bf16(minfer_f32_from_bits(0x3f818000u)), 0x3f82); /* tie */
    ck_assert_uint_eq(minfer_fp32_to_bf16(minfer_f32_from_bits(0x3f808001u)), 0x3f81);
    uint16_t nan = minfer_fp32_to_bf16(minfer_f32_from_bits(0x7f800001u));
    ck_assert(isnan(minfer_bf16_to_fp32(nan)));
    ck_assert_float_eq(minfer_bf16_to_fp32(0xc000), -2.0f);
}
END_TEST

/* ---- traits and refusals ---- */

/* Catches a wrong block/type size in the trait table (a loader would
 * misplace every tensor after it) and missing names for refusals. */
START_TEST(traits_table)
{
    ck_assert_uint_eq(minfer_row_size(MINFER_TYPE_Q4_K, 4096), 16 * 144);
    ck_assert_uint_eq(minfer_row_size(MINFER_TYPE_Q6_K, 256), 210);
    ck_assert_uint_eq(minfer_row_size(MINFER_TYPE_Q8_0, 64), 68);
    ck_assert_uint_eq(minfer_row_size(MINFER_TYPE_BF16, 3), 6);
    ck_assert_uint_eq(minfer_row_size(MINFER_TYPE_Q4_0, 33), 0);
    ck_assert_uint_eq(minfer_row_size(4, 32), 0); /* removed Q4_2 */
    ck_assert_uint_eq(minfer_row_size(MINFER_TYPE_COUNT, 32), 0);
    ck_assert_ptr_null(minfer_type_traits_of(31));
    const struct minfer_type_traits *t = minfer_type_traits_of(MINFER_TYPE_Q2_K);
    ck_assert_ptr_nonnull(t);
    ck_assert(!t->supported);
    ck_assert_str_eq(t->name, "q2_K");
    ck_assert(minfer_type_traits_of(MINFER_TYPE_Q8_K)->supported);
    uint32_t id = 0;
    ck_assert(minfer_type_from_name("Q4_k", &id));
    ck_assert_uint_eq(id, MINFER_TYPE_Q4_K);
    ck_assert(!minfer_type_from_name("q4_k_m", &id));
    ck_assert_str_eq(minfer_type_name(99), "unknown(99)");
    /* the positional table lines up with the enum at every named id */
    static const struct { uint32_t id; const char *name; } ids[] = {
        {MINFER_TYPE_F32, "f32"},       {MINFER_TYPE_Q5_0, "q5_0"},
        {MINFER_TYPE_Q8_1, "q8_1"},     {MINFER_TYPE_Q8_K, "q8_K"},
        {MINFER_TYPE_IQ4_XS, "iq4_xs"}, {MINFER_TYPE_F64, "f64"},
        {MINFER_TYPE_IQ1_M, "iq1_m"},   {MINFER_TYPE_BF16, "bf16"},
        {MINFER_TYPE_TQ1_0, "tq1_0"},   {MINFER_TYPE_TQ2_0, "tq2_0"},
        {MINFER_TYPE_MXFP4, "mxfp4"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        ck_assert_str_eq(minfer_type_traits_of(ids[i].id)->name, ids[i].name);
    int named = 0;
    for (uint32_t i = 0; i < MINFER_TYPE_COUNT; i++) {
        const struct minfer_type_traits *tt = minfer_type_traits_of(i);
        if (!tt)
            continue;
        named++;
        ck_assert(minfer_type_from_name(tt->name, &id) && id == i);
    }
    ck_assert_int_eq(named, 32); /* 40 ids less the 8 removed ones */
}
END_TEST

/* Catches (de)quantizers that accept a length that is not a whole number
 * of blocks (they would read or write past the row) or unknown types. */
START_TEST(refusals)
{
    float x[300] = {0};
    uint8_t buf[2048];
    ck_assert_int_eq(minfer_quantize_row_ref(MINFER_TYPE_Q4_0, x, buf, 31),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_quantize_row_ref(MINFER_TYPE_Q4_K, x, buf, 288),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_dequantize_row(MINFER_TYPE_Q6_K, buf, x, 100),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_dequantize_row(MINFER_TYPE_Q8_0, buf, x, -32),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_dequantize_row(MINFER_TYPE_Q2_K, buf, x, 256),
                     MINFER_ERR_UNSUPPORTED);
    ck_assert_int_eq(minfer_dequantize_row(MINFER_TYPE_IQ2_XS, buf, x, 256),
                     MINFER_ERR_UNSUPPORTED);
    ck_assert_int_eq(minfer_quantize_row_ref(5, x, buf, 32), MINFER_ERR_UNSUPPORTED);
    ck_assert_int_eq(minfer_quantize_row_ref(1000, x, buf, 32), MINFER_ERR_UNSUPPORTED);
}
END_TEST

/* ---- round trips ---- */

static const uint32_t all_types[] = {
    MINFER_TYPE_F32,  MINFER_TYPE_F16,  MINFER_TYPE_BF16, MINFER_TYPE_Q4_0, MINFER_TYPE_Q4_1,
    MINFER_TYPE_Q5_0, MINFER_TYPE_Q5_1, MINFER_TYPE_Q8_0, MINFER_TYPE_Q8_1, MINFER_TYPE_Q4_K,
    MINFER_TYPE_Q5_K, MINFER_TYPE_Q6_K, MINFER_TYPE_Q8_K,
};

/* Catches a quantizer/dequantizer pair that disagree on layout (the error
 * would be O(1), not within the type's resolution), and types (Q8_1,
 * Q8_K) that have no llama.cpp fixture. Bound: relative RMS error of a
 * b-bit format on Gaussian-like data is well under 2^-(b-2). */
START_TEST(round_trip)
{
    uint32_t type = all_types[_i];
    enum { N = 1024 };
    static float x[N], y[N];
    static uint8_t q[N * 4];
    uint32_t s = 12345;
    for (int i = 0; i < N; i++) {
        float u = 0;
        for (int k = 0; k < 4; k++) {
            s = s * 1664525u + 1013904223u;
            u += (float)(s >> 8) / 16777216.0f - 0.5f;
        }
        x[i] = u;
    }
    ck_assert_int_eq(minfer_quantize_row_ref(type, x, q, N), MINFER_OK);
    ck_assert_int_eq(minfer_dequantize_row(type, q, y, N), MINFER_OK);
    double e2 = 0, x2 = 0;
    for (int i = 0; i < N; i++) {
        e2 += (double)(x[i] - y[i]) * (x[i] - y[i]);
        x2 += (double)x[i] * x[i];
    }
    double rel = sqrt(e2 / x2);
    double bound = 0.15; /* 4-bit types */
    switch (type) {
    case MINFER_TYPE_F32: bound = 0; break;
    case MINFER_TYPE_F16: bound = 1e-3; break;
    case MINFER_TYPE_BF16: bound = 8e-3; break;
    case MINFER_TYPE_Q8_0: case MINFER_TYPE_Q8_1: case MINFER_TYPE_Q8_K: bound = 0.01; break;
    case MINFER_TYPE_Q6_K: bound = 0.03; break;
    case MINFER_TYPE_Q5_0: case MINFER_TYPE_Q5_1: case MINFER_TYPE_Q5_K: bound = 0.07; break;
    default: break;
    }
    ck_assert_msg(rel <= bound, "%s: relative error %g > %g", minfer_type_name(type), rel,
                  bound);
}
END_TEST

/* Catches block structs read or written in place at odd addresses (a
 * GGUF with general.alignment 1 puts rows there): results at an odd
 * address must equal those at an aligned one, byte for byte (and UBSan
 * builds fail on any misaligned access). */
START_TEST(unaligned_rows)
{
    uint32_t type = all_types[_i];
    enum { N = 512 };
    static float x[N], y1[N], y2[N];
    static uint8_t a[N * 4 + 8], b[N * 4 + 8];
    for (int i = 0; i < N; i++)
        x[i] = sinf((float)i * 0.61f) * (float)(1 + i % 7);
    size_t rs = minfer_row_size(type, N);
    ck_assert_int_eq(minfer_quantize_row_ref(type, x, a, N), MINFER_OK);
    ck_assert_int_eq(minfer_quantize_row_ref(type, x, b + 1, N), MINFER_OK);
    ck_assert(!memcmp(a, b + 1, rs));
    ck_assert_int_eq(minfer_dequantize_row(type, a, y1, N), MINFER_OK);
    ck_assert_int_eq(minfer_dequantize_row(type, b + 1, y2, N), MINFER_OK);
    ck_assert(!memcmp(y1, y2, sizeof y1));
}
END_TEST

/* Catches a Q8_K quantizer whose bsums do not match its qs (the CPU
 * K-quant dot products rely on them). */
START_TEST(q8_K_bsums)
{
    float x[256];
    struct minfer_block_q8_K b;
    for (int i = 0; i < 256; i++)
        x[i] = sinf((float)i * 0.37f) * 3.0f;
    ck_assert_int_eq(minfer_quantize_row_ref(MINFER_TYPE_Q8_K, x, &b, 256), MINFER_OK);
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int k = 0; k < 16; k++)
            s += b.qs[16 * j + k];
        ck_assert_int_eq(b.bsums[j], s);
    }
}
END_TEST

Suite *quant_suite(void);
Suite *quant_suite(void)
{
    Suite *s = suite_create("quant");
    TCase *tc = tcase_create("fixtures");
    tcase_add_loop_test(tc, dequant_matches_llama, 0, N_FIXTURE_TYPES);
    tcase_add_loop_test(tc, quant_matches_llama, 0, N_FIXTURE_TYPES);
    suite_add_tcase(s, tc);
    tc = tcase_create("formats");
    tcase_add_test(tc, fp16_exhaustive);
    tcase_add_test(tc, bf16_rounding);
    tcase_add_test(tc, traits_table);
    tcase_add_test(tc, refusals);
    tcase_add_loop_test(tc, round_trip, 0, (int)(sizeof all_types / sizeof all_types[0]));
    tcase_add_test(tc, q8_K_bsums);
    tcase_add_loop_test(tc, unaligned_rows, 0, (int)(sizeof all_types / sizeof all_types[0]));
    suite_add_tcase(s, tc);
    return s;
}
