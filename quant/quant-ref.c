/*
 * quant-ref.c — reference dequantizers of every supported type and the
 * reference quantizers of the 32-element block types (Q4_0 ... Q8_1) and
 * the plain float types. The K-quant quantizers are in quant-k.c.
 *
 * Every operation order here is chosen to reproduce llama.cpp's reference
 * results bit for bit; the library is compiled with -ffp-contract=off so
 * that a*b + c is never fused into one rounding.
 */
#include <float.h>
#include <math.h>
#include <string.h>

#include "quant-internal.h"
#include "minfer/quant-ref.h"

/* ---- helpers ---- */

int minfer_nearest_int(float f)
{
    return quant_nearest_int(f);
}

static float f16(uint16_t h)
{
    return minfer_fp16_to_fp32(h);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* value of largest magnitude (first one wins ties), and that magnitude */
static float signed_absmax(const float *x, int n, float *amax_out)
{
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        float a = fabsf(x[j]);
        if (amax < a) {
            amax = a;
            max = x[j];
        }
    }
    *amax_out = amax;
    return max;
}

static void min_max(const float *x, int n, float *mn, float *mx)
{
    float lo = FLT_MAX, hi = -FLT_MAX;
    for (int j = 0; j < n; j++) {
        if (x[j] < lo)
            lo = x[j];
        if (x[j] > hi)
            hi = x[j];
    }
    *mn = lo;
    *mx = hi;
}

/* ---- 32-element block quantizers ---- */

/* Element j (low nibble) and j + 16 (high nibble) of a 4-bit block,
 * each clamped to 15. */
static uint8_t pack_q4(int lo, int hi)
{
    lo = lo < 15 ? lo : 15;
    hi = hi < 15 ? hi : 15;
    return (uint8_t)(lo | hi << 4);
}

/* The same for 5-bit blocks, whose fifth bits go to bits j and j + 16
 * of qh. */
static void pack_q5(uint8_t *qs, uint32_t *qh, int j, int lo, int hi)
{
    lo = lo < 31 ? lo : 31;
    hi = hi < 31 ? hi : 31;
    qs[j] = (uint8_t)((lo & 15) | (hi & 15) << 4);
    *qh |= (uint32_t)(lo >> 4 & 1) << j;
    *qh |= (uint32_t)(hi >> 4 & 1) << (j + 16);
}

static void quant_q4_0(const float *x, struct minfer_block_q4_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        float max = signed_absmax(x, 32, &amax);
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = minfer_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)(x[j] * id + 8.5f);
            int hi = (int8_t)(x[j + 16] * id + 8.5f);
            y[i].qs[j] = pack_q4(lo, hi);
        }
    }
}

static void quant_q4_1(const float *x, struct minfer_block_q4_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        float d = (mx - mn) / 15.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = minfer_fp32_to_fp16(d);
        y[i].m = minfer_fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)((x[j] - mn) * id + 0.5f);
            int hi = (int8_t)((x[j + 16] - mn) * id + 0.5f);
            y[i].qs[j] = pack_q4(lo, hi);
        }
    }
}

static void quant_q5_0(const float *x, struct minfer_block_q5_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        float max = signed_absmax(x, 32, &amax);
        float d = max / -16.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = minfer_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            int lo = (int8_t)(x[j] * id + 16.5f);
            int hi = (int8_t)(x[j + 16] * id + 16.5f);
            pack_q5(y[i].qs, &qh, j, lo, hi);
        }
        put_u32(y[i].qh, qh);
    }
}

static void quant_q5_1(const float *x, struct minfer_block_q5_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float mn, mx;
        min_max(x, 32, &mn, &mx);
        float d = (mx - mn) / 31.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint32_t qh = 0;
        y[i].d = minfer_fp32_to_fp16(d);
        y[i].m = minfer_fp32_to_fp16(mn);
        for (int j = 0; j < 16; j++) {
            /* llama.cpp casts to uint8_t here (int8_t in Q5_0) */
            int lo = (uint8_t)((x[j] - mn) * id + 0.5f);
            int hi = (uint8_t)((x[j + 16] - mn) * id + 0.5f);
            pack_q5(y[i].qs, &qh, j, lo, hi);
        }
        put_u32(y[i].qh, qh);
    }
}

static void quant_q8_0(const float *x, struct minfer_block_q8_0 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        (void)signed_absmax(x, 32, &amax);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[i].d = minfer_fp32_to_fp16(d);
        for (int j = 0; j < 32; j++)
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void quant_q8_1(const float *x, struct minfer_block_q8_1 *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        (void)signed_absmax(x, 32, &amax);
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        int sum = 0;
        y[i].d = minfer_fp32_to_fp16(d);
        for (int j = 0; j < 16; j++) {
            y[i].qs[j] = (int8_t)roundf(x[j] * id);
            y[i].qs[j + 16] = (int8_t)roundf(x[j + 16] * id);
            sum += y[i].qs[j] + y[i].qs[j + 16];
        }
        y[i].s = minfer_fp32_to_fp16((float)sum * d);
    }
}

/* ---- dequantizers ---- */

/* The 5-bit values of elements j and j + 16 of a Q5_0/Q5_1 block. */
static void unpack_q5(const uint8_t *qs, uint32_t qh, int j, int *lo, int *hi)
{
    *lo = (qs[j] & 15) | (int)(qh >> j & 1) << 4;
    *hi = (qs[j] >> 4) | (int)(qh >> (j + 16) & 1) << 4;
}

/* Q8_0 and Q8_1 blocks share d and qs; Q8_1's sum s is not needed here. */
static void deq_q8_block(uint16_t d16, const int8_t *qs, float *y)
{
    float d = f16(d16);
    for (int j = 0; j < 32; j++)
        y[j] = (float)qs[j] * d;
}

static void deq_q4_0(const struct minfer_block_q4_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32) {
        float d = f16(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)((x[i].qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const struct minfer_block_q4_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32) {
        float d = f16(x[i].d), m = f16(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (float)(x[i].qs[j] & 15) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

static void deq_q5_0(const struct minfer_block_q5_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32) {
        float d = f16(x[i].d);
        uint32_t qh = get_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo, hi;
            unpack_q5(x[i].qs, qh, j, &lo, &hi);
            y[j] = (float)(lo - 16) * d;
            y[j + 16] = (float)(hi - 16) * d;
        }
    }
}

static void deq_q5_1(const struct minfer_block_q5_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32) {
        float d = f16(x[i].d), m = f16(x[i].m);
        uint32_t qh = get_u32(x[i].qh);
        for (int j = 0; j < 16; j++) {
            int lo, hi;
            unpack_q5(x[i].qs, qh, j, &lo, &hi);
            y[j] = (float)lo * d + m;
            y[j + 16] = (float)hi * d + m;
        }
    }
}

static void deq_q8_0(const struct minfer_block_q8_0 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32)
        deq_q8_block(x[i].d, x[i].qs, y);
}

static void deq_q8_1(const struct minfer_block_q8_1 *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += 32)
        deq_q8_block(x[i].d, x[i].qs, y);
}

void minfer_k4_scale_min(int j, const uint8_t *s, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
        *m = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

/* Scale and min of sub-block j of a Q4_K/Q5_K super-block. */
static void k4_sub(const uint8_t *scales, int j, float d, float dmin, float *dj, float *mj)
{
    uint8_t sc, m;
    minfer_k4_scale_min(j, scales, &sc, &m);
    *dj = d * sc;
    *mj = dmin * m;
}

static void deq_q4_K(const struct minfer_block_q4_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = f16(x[i].d), dmin = f16(x[i].dmin);
        const uint8_t *q = x[i].qs;
        for (int g = 0; g < 4; g++, q += 32) {
            float d1, m1, d2, m2;
            k4_sub(x[i].scales, 2 * g, d, dmin, &d1, &m1);
            k4_sub(x[i].scales, 2 * g + 1, d, dmin, &d2, &m2);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] & 15) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

static void deq_q5_K(const struct minfer_block_q5_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = f16(x[i].d), dmin = f16(x[i].dmin);
        const uint8_t *ql = x[i].qs, *qh = x[i].qh;
        for (int g = 0; g < 4; g++, ql += 32) {
            uint8_t b1 = (uint8_t)(1u << (2 * g)), b2 = (uint8_t)(2u << (2 * g));
            float d1, m1, d2, m2;
            k4_sub(x[i].scales, 2 * g, d, dmin, &d1, &m1);
            k4_sub(x[i].scales, 2 * g + 1, d, dmin, &d2, &m2);
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((ql[l] & 15) + (qh[l] & b1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; l++)
                *y++ = d2 * (float)((ql[l] >> 4) + (qh[l] & b2 ? 16 : 0)) - m2;
        }
    }
}

static void deq_q6_K(const struct minfer_block_q6_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++) {
        float d = f16(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int h = 0; h < 2; h++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void deq_q8_K(const struct minfer_block_q8_K *x, float *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, y += MINFER_QK_K)
        for (int j = 0; j < MINFER_QK_K; j++)
            y[j] = x[i].d * (float)x[i].qs[j];
}

/* ---- dispatch ---- */

/* F16 and BF16 rows: 2-byte values that need not be 2-byte aligned. */
static void halves_to_f32(const void *src, float *dst, int64_t n, float (*cvt)(uint16_t))
{
    const uint8_t *p = src;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        dst[i] = cvt(h);
    }
}

static void f32_to_halves(const float *src, void *dst, int64_t n, uint16_t (*cvt)(float))
{
    uint8_t *p = dst;
    for (int64_t i = 0; i < n; i++) {
        uint16_t h = cvt(src[i]);
        memcpy(p + 2 * i, &h, 2);
    }
}

static minfer_status check_args(uint32_t type, const void *a, const void *b, int64_t n,
                                int64_t *nb)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    if (!t || !t->supported)
        return MINFER_ERR_UNSUPPORTED;
    if (n < 0 || n % t->block_size || (n > 0 && (!a || !b)))
        return MINFER_ERR_INVALID_ARG;
    *nb = n / t->block_size;
    return MINFER_OK;
}

static minfer_status dequantize_aligned(uint32_t type, const void *src, float *dst, int64_t n)
{
    int64_t nb;
    minfer_status st = check_args(type, src, dst, n, &nb);
    if (st != MINFER_OK || n == 0)
        return st;
    switch (type) {
    case MINFER_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case MINFER_TYPE_F16: halves_to_f32(src, dst, n, minfer_fp16_to_fp32); break;
    case MINFER_TYPE_BF16: halves_to_f32(src, dst, n, minfer_bf16_to_fp32); break;
    case MINFER_TYPE_Q4_0: deq_q4_0(src, dst, nb); break;
    case MINFER_TYPE_Q4_1: deq_q4_1(src, dst, nb); break;
    case MINFER_TYPE_Q5_0: deq_q5_0(src, dst, nb); break;
    case MINFER_TYPE_Q5_1: deq_q5_1(src, dst, nb); break;
    case MINFER_TYPE_Q8_0: deq_q8_0(src, dst, nb); break;
    case MINFER_TYPE_Q8_1: deq_q8_1(src, dst, nb); break;
    case MINFER_TYPE_Q4_K: deq_q4_K(src, dst, nb); break;
    case MINFER_TYPE_Q5_K: deq_q5_K(src, dst, nb); break;
    case MINFER_TYPE_Q6_K: deq_q6_K(src, dst, nb); break;
    case MINFER_TYPE_Q8_K: deq_q8_K(src, dst, nb); break;
    default:
        return MINFER_ERR_UNSUPPORTED;
    }
    return MINFER_OK;
}

static minfer_status quantize_aligned(uint32_t type, const float *src, void *dst, int64_t n)
{
    int64_t nb;
    minfer_status st = check_args(type, src, dst, n, &nb);
    if (st != MINFER_OK || n == 0)
        return st;
    switch (type) {
    case MINFER_TYPE_F32:
        memcpy(dst, src, (size_t)n * sizeof(float));
        break;
    case MINFER_TYPE_F16: f32_to_halves(src, dst, n, minfer_fp32_to_fp16); break;
    case MINFER_TYPE_BF16: f32_to_halves(src, dst, n, minfer_fp32_to_bf16); break;
    case MINFER_TYPE_Q4_0: quant_q4_0(src, dst, nb); break;
    case MINFER_TYPE_Q4_1: quant_q4_1(src, dst, nb); break;
    case MINFER_TYPE_Q5_0: quant_q5_0(src, dst, nb); break;
    case MINFER_TYPE_Q5_1: quant_q5_1(src, dst, nb); break;
    case MINFER_TYPE_Q8_0: quant_q8_0(src, dst, nb); break;
    case MINFER_TYPE_Q8_1: quant_q8_1(src, dst, nb); break;
    case MINFER_TYPE_Q4_K: minfer_quant_q4_K(src, dst, nb); break;
    case MINFER_TYPE_Q5_K: minfer_quant_q5_K(src, dst, nb); break;
    case MINFER_TYPE_Q6_K: minfer_quant_q6_K(src, dst, nb); break;
    case MINFER_TYPE_Q8_K: minfer_quant_q8_K(src, dst, nb); break;
    default:
        return MINFER_ERR_UNSUPPORTED;
    }
    return MINFER_OK;
}

/* ---- unaligned rows ---- */

/* Block structs need 2-byte alignment (Q8_K 4). A file with a small
 * general.alignment can put rows anywhere, so rows at other addresses go
 * through an aligned copy of one block at a time. */
static bool misaligned(uint32_t type, const void *p)
{
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    return t && t->quantized && ((uintptr_t)p & 3);
}

minfer_status minfer_dequantize_row(uint32_t type, const void *src, float *dst, int64_t n)
{
    int64_t nb;
    minfer_status st = check_args(type, src, dst, n, &nb);
    if (st != MINFER_OK || n == 0 || !misaligned(type, src))
        return st == MINFER_OK ? dequantize_aligned(type, src, dst, n) : st;
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    union { struct minfer_block_q8_K k; uint8_t b[512]; } blk;
    for (int64_t i = 0; i < nb; i++) {
        memcpy(blk.b, (const uint8_t *)src + (size_t)i * t->type_size, t->type_size);
        st = dequantize_aligned(type, blk.b, dst + i * t->block_size, t->block_size);
        if (st != MINFER_OK)
            return st;
    }
    return MINFER_OK;
}

minfer_status minfer_quantize_row_ref(uint32_t type, const float *src, void *dst, int64_t n)
{
    int64_t nb;
    minfer_status st = check_args(type, src, dst, n, &nb);
    if (st != MINFER_OK || n == 0 || !misaligned(type, dst))
        return st == MINFER_OK ? quantize_aligned(type, src, dst, n) : st;
    const struct minfer_type_traits *t = minfer_type_traits_of(type);
    union { struct minfer_block_q8_K k; uint8_t b[512]; } blk;
    for (int64_t i = 0; i < nb; i++) {
        st = quantize_aligned(type, src + i * t->block_size, blk.b, t->block_size);
        if (st != MINFER_OK)
            return st;
        memcpy((uint8_t *)dst + (size_t)i * t->type_size, blk.b, t->type_size);
    }
    return MINFER_OK;
}
