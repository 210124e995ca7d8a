/*
 * quant-internal.h — helpers shared between the files of the minfer-quant
 * library (not for users of the library).
 */
#ifndef MINFER_QUANT_INTERNAL_H
#define MINFER_QUANT_INTERNAL_H

#include "minfer/quant.h"

/* 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K scales[12]. */
void minfer_k4_scale_min(int j, const uint8_t *scales, uint8_t *sc, uint8_t *m);

/* K-quant reference quantizers over nb super-blocks (quant-k.c). */
void minfer_quant_q4_K(const float *x, struct minfer_block_q4_K *y, int64_t nb);
void minfer_quant_q5_K(const float *x, struct minfer_block_q5_K *y, int64_t nb);
void minfer_quant_q6_K(const float *x, struct minfer_block_q6_K *y, int64_t nb);
void minfer_quant_q8_K(const float *x, struct minfer_block_q8_K *y, int64_t nb);

#endif
