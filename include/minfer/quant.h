/*
 * minfer/quant.h — the byte layouts of GGUF's block-quantized types, a
 * trait table of every element type id, and fp16/bf16 <-> fp32
 * conversions. Header-only, so the core and every plugin see one
 * definition without a run-time dependency.
 *
 * Layouts are GGUF's (ggml's) exactly: little-endian, packed, no padding.
 * The header compiles as C11 and as C++11 (CUDA sources can include it).
 * fp16 and bf16 values inside blocks are stored as raw uint16_t bits.
 * The reference (de)quantizers that use these layouts live in the
 * minfer-quant static library (minfer/quant-ref.h, built from quant/).
 */
#ifndef MINFER_QUANT_H
#define MINFER_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- block sizes ---- */

#define MINFER_QK4_0 32
#define MINFER_QK4_1 32
#define MINFER_QK5_0 32
#define MINFER_QK5_1 32
#define MINFER_QK8_0 32
#define MINFER_QK8_1 32
#define MINFER_QK_K 256         /* super-block of the K-quants */
#define MINFER_K_SCALE_SIZE 12  /* packed 6-bit scales/mins of Q4_K and Q5_K */

/* ---- 32-element blocks ---- */

/* x = d * (q - 8), q in 0..15. qs[j] holds element j (low nibble) and
 * element j + 16 (high nibble). */
struct minfer_block_q4_0 {
    uint16_t d;                     /* fp16 scale */
    uint8_t qs[MINFER_QK4_0 / 2];
};

/* x = d * q + m, q in 0..15; nibble order as Q4_0. */
struct minfer_block_q4_1 {
    uint16_t d;                     /* fp16 scale */
    uint16_t m;                     /* fp16 minimum */
    uint8_t qs[MINFER_QK4_1 / 2];
};

/* x = d * (q - 16), q in 0..31: low 4 bits as Q4_0, bit 4 of element j is
 * bit j of the little-endian uint32 qh. */
struct minfer_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[MINFER_QK5_0 / 2];
};

/* x = d * q + m, q in 0..31; bit layout as Q5_0. */
struct minfer_block_q5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[MINFER_QK5_1 / 2];
};

/* x = d * q, q in -127..127. */
struct minfer_block_q8_0 {
    uint16_t d;
    int8_t qs[MINFER_QK8_0];
};

/* Q8_0 plus s = d * sum(qs) (fp16), used for activations against Q4_1/Q5_1. */
struct minfer_block_q8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[MINFER_QK8_1];
};

/* ---- 256-element super-blocks (K-quants) ---- */

/* 8 sub-blocks of 32: x = d * sc[j] * q - dmin * m[j], q in 0..15.
 * scales: 6-bit sc/m per sub-block packed into 12 bytes: for j < 4,
 * sc = scales[j] & 63, m = scales[j + 4] & 63; for j >= 4,
 * sc = (scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4),
 * m  = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4).
 * qs: 4 groups of 32 bytes; group g holds sub-block 2g in low nibbles and
 * sub-block 2g + 1 in high nibbles. */
struct minfer_block_q4_K {
    uint16_t d;                     /* fp16 super-block scale of the scales */
    uint16_t dmin;                  /* fp16 super-block scale of the mins */
    uint8_t scales[MINFER_K_SCALE_SIZE];
    uint8_t qs[MINFER_QK_K / 2];
};

/* Q4_K plus a fifth bit: bit 4 of element 32*j + l is bit j of qh[l]. */
struct minfer_block_q5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[MINFER_K_SCALE_SIZE];
    uint8_t qh[MINFER_QK_K / 8];
    uint8_t qs[MINFER_QK_K / 2];
};

/* 16 sub-blocks of 16: x = d * scales[j] * (q - 32), q in 0..63.
 * Two halves of 128; in half h, for l in 0..31:
 * q(l)      = (ql[64h + l]      & 15) | (((qh[32h + l] >> 0) & 3) << 4)
 * q(l + 32) = (ql[64h + l + 32] & 15) | (((qh[32h + l] >> 2) & 3) << 4)
 * q(l + 64) = (ql[64h + l]      >> 4) | (((qh[32h + l] >> 4) & 3) << 4)
 * q(l + 96) = (ql[64h + l + 32] >> 4) | (((qh[32h + l] >> 6) & 3) << 4) */
struct minfer_block_q6_K {
    uint8_t ql[MINFER_QK_K / 2];
    uint8_t qh[MINFER_QK_K / 4];
    int8_t scales[MINFER_QK_K / 16];
    uint16_t d;
};

/* Activation format for K-quant dot products: x = d * q; bsums are the
 * sums of each group of 16 qs. d is a float, not fp16. */
struct minfer_block_q8_K {
    float d;
    int8_t qs[MINFER_QK_K];
    int16_t bsums[MINFER_QK_K / 16];
};

#ifdef __cplusplus
#define MINFER_QUANT_STATIC_ASSERT static_assert
#else
#define MINFER_QUANT_STATIC_ASSERT _Static_assert
#endif
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q4_0) == 18, "q4_0 layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q4_1) == 20, "q4_1 layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q5_0) == 22, "q5_0 layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q5_1) == 24, "q5_1 layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q8_0) == 34, "q8_0 layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q8_1) == 36, "q8_1 layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q4_K) == 144, "q4_K layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q5_K) == 176, "q5_K layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q6_K) == 210, "q6_K layout");
MINFER_QUANT_STATIC_ASSERT(sizeof(struct minfer_block_q8_K) == 292, "q8_K layout");

/* ---- type traits ---- */

struct minfer_type_traits {
    const char *name;     /* GGUF/ggml spelling: "f16", "q4_K", "iq2_xs" */
    uint32_t block_size;  /* elements per block (1 for plain types) */
    uint32_t type_size;   /* bytes per block */
    bool quantized;       /* block-quantized */
    bool supported;       /* this build reads (dequantizes) it */
};

/* Traits of a type id, or NULL for ids no GGUF type uses. Types that are
 * named but not supported (q2_K, the IQ family, ...) have supported=false:
 * their sizes are known so a file can be validated and the refusal can
 * name them. Pointer to static data. */
static inline const struct minfer_type_traits *minfer_type_traits_of(uint32_t type)
{
    /* positional (ids 0..39) so the header also compiles as C++ */
    static const struct minfer_type_traits table[MINFER_TYPE_COUNT] = {
        {"f32", 1, 4, false, true},         /*  0 F32 */
        {"f16", 1, 2, false, true},         /*  1 F16 */
        {"q4_0", 32, 18, true, true},       /*  2 Q4_0 */
        {"q4_1", 32, 20, true, true},       /*  3 Q4_1 */
        {NULL, 0, 0, false, false},         /*  4 (removed Q4_2) */
        {NULL, 0, 0, false, false},         /*  5 (removed Q4_3) */
        {"q5_0", 32, 22, true, true},       /*  6 Q5_0 */
        {"q5_1", 32, 24, true, true},       /*  7 Q5_1 */
        {"q8_0", 32, 34, true, true},       /*  8 Q8_0 */
        {"q8_1", 32, 36, true, true},       /*  9 Q8_1 */
        {"q2_K", 256, 84, true, false},     /* 10 Q2_K */
        {"q3_K", 256, 110, true, false},    /* 11 Q3_K */
        {"q4_K", 256, 144, true, true},     /* 12 Q4_K */
        {"q5_K", 256, 176, true, true},     /* 13 Q5_K */
        {"q6_K", 256, 210, true, true},     /* 14 Q6_K */
        {"q8_K", 256, 292, true, true},     /* 15 Q8_K */
        {"iq2_xxs", 256, 66, true, false},  /* 16 */
        {"iq2_xs", 256, 74, true, false},   /* 17 */
        {"iq3_xxs", 256, 98, true, false},  /* 18 */
        {"iq1_s", 256, 50, true, false},    /* 19 */
        {"iq4_nl", 32, 18, true, false},    /* 20 */
        {"iq3_s", 256, 110, true, false},   /* 21 */
        {"iq2_s", 256, 82, true, false},    /* 22 */
        {"iq4_xs", 256, 136, true, false},  /* 23 */
        {"i8", 1, 1, false, false},         /* 24 */
        {"i16", 1, 2, false, false},        /* 25 */
        {"i32", 1, 4, false, false},        /* 26 */
        {"i64", 1, 8, false, false},        /* 27 */
        {"f64", 1, 8, false, false},        /* 28 */
        {"iq1_m", 256, 56, true, false},    /* 29 */
        {"bf16", 1, 2, false, true},        /* 30 BF16 */
        {NULL, 0, 0, false, false},         /* 31 (removed Q4_0_4_4) */
        {NULL, 0, 0, false, false},         /* 32 (removed Q4_0_4_8) */
        {NULL, 0, 0, false, false},         /* 33 (removed Q4_0_8_8) */
        {"tq1_0", 256, 54, true, false},    /* 34 */
        {"tq2_0", 256, 66, true, false},    /* 35 */
        {NULL, 0, 0, false, false},         /* 36 (removed IQ4_NL_4_4) */
        {NULL, 0, 0, false, false},         /* 37 (removed IQ4_NL_4_8) */
        {NULL, 0, 0, false, false},         /* 38 (removed IQ4_NL_8_8) */
        {"mxfp4", 32, 17, true, false},     /* 39 MXFP4 */
    };
    if (type >= MINFER_TYPE_COUNT || !table[type].name)
        return NULL;
    return &table[type];
}

/* Bytes of a row of n elements of type, or 0 when the type is unknown or
 * n is negative or not a multiple of the block size. */
static inline size_t minfer_row_size(uint32_t type, int64_t n)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    if (!t || n < 0 || n % t->block_size)
        return 0;
    return (size_t)(n / t->block_size) * t->type_size;
}

/* ---- fp16 / bf16 ---- */

static inline uint32_t minfer_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float minfer_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 -> binary32, exact (subnormals, infinities, NaN payloads). */
static inline float minfer_fp16_to_fp32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f)
        return minfer_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return minfer_f32_from_bits(sign);
        /* subnormal: normalise so the leading one lands on bit 10 */
        exp = 1;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        man &= 0x3ffu;
    }
    return minfer_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

/* binary32 -> binary16, round to nearest, ties to even; overflow gives
 * infinity, NaN stays a (quiet) NaN with the sign kept. */
static inline uint16_t minfer_fp32_to_fp16(float f)
{
    uint32_t u = minfer_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) /* NaN */
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u) /* >= 65520 rounds to infinity */
        return (uint16_t)(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        /* normal half: round the 13 dropped mantissa bits to nearest even
         * without a branch (a carry into the exponent is still correct),
         * then rebias the exponent from 127 to 15 */
        uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return (uint16_t)(sign | ((r >> 13) - (112u << 10)));
    }
    if (a <= 0x33000000u) /* <= 2^-25: rounds to zero (the tie is even) */
        return sign;
    {   /* subnormal half: units of 2^-24 */
        uint32_t e = a >> 23;                 /* 102..112 */
        uint32_t m = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - e;            /* 14..24 */
        uint32_t h = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u);
        uint32_t half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (h & 1u)))
            h++;
        return (uint16_t)(sign | h);
    }
}

static inline float minfer_bf16_to_fp32(uint16_t h)
{
    return minfer_f32_from_bits((uint32_t)h << 16);
}

/* binary32 -> bfloat16, round to nearest, ties to even; NaN stays NaN
 * (forced quiet so truncation cannot turn it into infinity). */
static inline uint16_t minfer_fp32_to_bf16(float f)
{
    uint32_t u = minfer_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x40u);
    uint32_t lsb = (u >> 16) & 1u;
    return (uint16_t)((u + 0x7fffu + lsb) >> 16);
}

#ifdef __cplusplus
}
#endif

#endif /* MINFER_QUANT_H */
