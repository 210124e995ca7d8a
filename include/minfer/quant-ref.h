/*
 * quant-ref.h — reference (scalar) quantization and dequantization of
 * rows for every type this build supports, bit-exact with llama.cpp's
 * reference quantizers (no importance matrix). Part of the minfer-quant
 * static library that the core and each plugin link. Installed with the
 * SDK (minfer-dev: libminfer-quant.a, minfer::quant, minfer-quant.pc) so
 * an out-of-tree plugin gets the same routines; the symbols stay hidden
 * inside whatever links them.
 */
#ifndef MINFER_QUANT_REF_H
#define MINFER_QUANT_REF_H

#include "minfer/quant.h"

/* Dequantizes n elements of type from src (minfer_row_size(type, n)
 * bytes, at any address) into dst[n]. MINFER_ERR_UNSUPPORTED for types this build does
 * not read, MINFER_ERR_INVALID_ARG when n is negative or not a multiple
 * of the type's block size or a pointer is NULL. */
minfer_status minfer_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n);

/* Quantizes src[n] into dst (minfer_row_size(type, n) bytes) with the
 * reference algorithm of each type. Same refusals as above. */
minfer_status minfer_quantize_row_ref(uint32_t type, const float *src, void *dst, int64_t n);

/* Round to nearest, ties to even, for |f| < 2^22 (the range every
 * quantizer here stays in). */
int minfer_nearest_int(float f);

#endif
