/*
 * quant-internal.h — helpers shared between the files of the minfer-quant
 * library (not for users of the library).
 */
#ifndef MINFER_QUANT_INTERNAL_H
#define MINFER_QUANT_INTERNAL_H

#include <string.h>

#include "minfer/quant.h"

/* Round to nearest, ties to even, for |f| < 2^22: adding 1.5 * 2^23 puts
 * the rounded integer in the low mantissa bits. Inline so loops vectorize. */
static inline int32_t quant_nearest_int(float f)
{
    float v = f + 12582912.0f;
    int32_t i;
    memcpy(&i, &v, sizeof i);
    return (i & 0x007fffff) - 0x00400000;
}

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K scales[12]. */
void minfer_k4_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

/* K-quant reference quantizers over nb super-blocks (quant-k.c). */
void minfer_quant_q4_K(const float *x, struct minfer_block_q4_K *y, int64_t nb);
void minfer_quant_q5_K(const float *x, struct minfer_block_q5_K *y, int64_t nb);
void minfer_quant_q6_K(const float *x, struct minfer_block_q6_K *y, int64_t nb);
void minfer_quant_q8_K(const float *x, struct minfer_block_q8_K *y, int64_t nb);

#endif
