/*
 * quant-k.c — reference quantizers of the K-quants (Q4_K, Q5_K, Q6_K,
 * Q8_K) without an importance matrix, reproducing llama.cpp's results
 * bit for bit.
 *
 * Q4_K/Q5_K: each 32-element sub-block gets a scale and a min from a
 * weighted least-squares search over a few candidate inverse scales
 * (weights |x| + rms of the sub-block); the eight scales and mins are then
 * quantized to 6 bits against the super-block maxima and the elements
 * re-quantized with the rounded scales. Q6_K: each 16-element sub-block
 * gets a symmetric scale from a search weighted by x^2, scales are
 * quantized to int8 against the largest. Operation order matters for the
 * bits: keep every expression as written (compiled -ffp-contract=off).
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "quant-internal.h"
#include "minfer/quant-ref.h"

#define GROUP_MAX_EPS 1e-15f

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- asymmetric sub-block fit (Q4_K, Q5_K) ---- */

#define SUB 32 /* sub-block length of Q4_K and Q5_K */

/* Levels clamp(round(iscale * dx[i]), 0, nmax), rounding as
 * minfer_nearest_int; written as a plain loop so it vectorizes. */
static void levels(float iscale, const float *dx, int nmax, int32_t *l)
{
    for (int i = 0; i < SUB; i++) {
        float v = iscale * dx[i] + 12582912.0f;
        int32_t b;
        memcpy(&b, &v, sizeof b);
        b = (b & 0x007fffff) - 0x00400000;
        b = b < 0 ? 0 : b;
        l[i] = b > nmax ? nmax : b;
    }
}

/* Fits x[32] ~ scale * L + min with L in 0..nmax, min <= 0, minimising the
 * weighted squared error. Tries the plain min/max grid first, then nstep+1
 * candidate inverse scales (nmax + rmin + rdelta * k) / (max - min), each
 * refined by a closed-form weighted least-squares solve; a better candidate
 * also moves the min that the next ones start from. Returns the scale and
 * stores -min in *neg_min; L receives the best levels.
 * The element-wise products are computed in separate loops (they
 * vectorize); every sum is accumulated strictly in element order, which is
 * what fixes the bits. */
static float fit_scale_min(int nmax, const float *x, const float *w, uint8_t *L,
                           float *neg_min, float rmin, float rdelta, int nstep)
{
    float mn = x[0], mx = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < SUB; i++) {
        if (x[i] < mn)
            mn = x[i];
        if (x[i] > mx)
            mx = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (mn > 0)
        mn = 0;
    if (mx == mn) {
        memset(L, 0, SUB);
        *neg_min = -mn;
        return 0.0f;
    }
    float dx[SUB], fl[SUB], wl[SUB], wl2[SUB], wlx[SUB], e[SUB];
    int32_t la[SUB];
    for (int i = 0; i < SUB; i++)
        dx[i] = x[i] - mn;
    float iscale = nmax / (mx - mn);
    float scale = 1 / iscale;
    float best_err = 0;
    levels(iscale, dx, nmax, la);
    for (int i = 0; i < SUB; i++) {
        float diff = scale * (float)la[i] + mn - x[i];
        e[i] = w[i] * (diff * diff);
    }
    for (int i = 0; i < SUB; i++) {
        L[i] = (uint8_t)la[i];
        best_err += e[i];
    }
    for (int k = 0; k <= nstep; k++) {
        iscale = (rmin + rdelta * k + nmax) / (mx - mn);
        levels(iscale, dx, nmax, la);
        for (int i = 0; i < SUB; i++) {
            fl[i] = (float)la[i];
            wl[i] = w[i] * fl[i];
            wl2[i] = wl[i] * fl[i];
            wlx[i] = wl[i] * x[i];
        }
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < SUB; i++) {
            sum_l += wl[i];
            sum_l2 += wl2[i];
            sum_xl += wlx[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float s = (sum_w * sum_xl - sum_x * sum_l) / D;
            float m = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (m > 0) {
                m = 0;
                s = sum_xl / sum_l2;
            }
            for (int i = 0; i < SUB; i++) {
                float diff = s * fl[i] + m - x[i];
                e[i] = w[i] * (diff * diff);
            }
            float err = 0;
            for (int i = 0; i < SUB; i++)
                err += e[i];
            if (err < best_err) {
                for (int i = 0; i < SUB; i++)
                    L[i] = (uint8_t)la[i];
                best_err = err;
                scale = s;
                mn = m;
                for (int i = 0; i < SUB; i++)
                    dx[i] = x[i] - mn;
            }
        }
    }
    *neg_min = -mn;
    return scale;
}

/* Sub-block fits of one super-block of Q4_K/Q5_K, then the 6-bit packing of
 * scales and mins into scales[12] and the fp16 d/dmin. */
static void k4_block_scales(const float *x, int nmax, float rmin, int nstep, uint8_t *L,
                            uint8_t *scales_out, uint16_t *d_out, uint16_t *dmin_out)
{
    float scales[8], mins[8], w[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++)
            sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++)
            w[l] = av_x + fabsf(xs[l]);
        scales[j] = fit_scale_min(nmax, xs, w, L + 32 * j, &mins[j], rmin, 0.1f, nstep);
        if (scales[j] > max_scale)
            max_scale = scales[j];
        if (mins[j] > max_min)
            max_min = mins[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    memset(scales_out, 0, MINFER_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        uint8_t ls = (uint8_t)quant_nearest_int(inv_scale * scales[j]);
        uint8_t lm = (uint8_t)quant_nearest_int(inv_min * mins[j]);
        ls = ls < 63 ? ls : 63;
        lm = lm < 63 ? lm : 63;
        if (j < 4) {
            scales_out[j] = ls;
            scales_out[j + 4] = lm;
        } else {
            scales_out[j + 4] = (uint8_t)((ls & 15) | (lm & 15) << 4);
            scales_out[j - 4] |= (uint8_t)((ls >> 4) << 6);
            scales_out[j] |= (uint8_t)((lm >> 4) << 6);
        }
    }
    *d_out = minfer_fp32_to_fp16(max_scale / 63.f);
    *dmin_out = minfer_fp32_to_fp16(max_min / 63.f);

    /* requantize with the scales as they will be read back */
    float d = minfer_fp16_to_fp32(*d_out), dmin = minfer_fp16_to_fp32(*dmin_out);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        minfer_k4_scale_min(j, scales_out, &sc, &m);
        float ds = d * sc;
        if (ds == 0.0f)
            continue; /* keep the fit's levels */
        float dm = dmin * m;
        for (int i = 0; i < 32; i++)
            L[32 * j + i] = (uint8_t)clampi(quant_nearest_int((x[32 * j + i] + dm) / ds), 0,
                                            nmax);
    }
}

void minfer_quant_q4_K(const float *x, struct minfer_block_q4_K *y, int64_t nb)
{
    uint8_t L[MINFER_QK_K];
    for (int64_t i = 0; i < nb; i++, x += MINFER_QK_K) {
        k4_block_scales(x, 15, -1.0f, 20, L, y[i].scales, &y[i].d, &y[i].dmin);
        for (int g = 0; g < 4; g++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * g + l] = (uint8_t)(L[64 * g + l] | L[64 * g + l + 32] << 4);
    }
}

void minfer_quant_q5_K(const float *x, struct minfer_block_q5_K *y, int64_t nb)
{
    uint8_t L[MINFER_QK_K];
    for (int64_t i = 0; i < nb; i++, x += MINFER_QK_K) {
        k4_block_scales(x, 31, -0.5f, 15, L, y[i].scales, &y[i].d, &y[i].dmin);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int g = 0; g < 4; g++) {
            uint8_t b1 = (uint8_t)(1u << (2 * g)), b2 = (uint8_t)(2u << (2 * g));
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * g + l], l2 = L[64 * g + l + 32];
                if (l1 > 15) {
                    l1 -= 16;
                    y[i].qh[l] |= b1;
                }
                if (l2 > 15) {
                    l2 -= 16;
                    y[i].qh[l] |= b2;
                }
                y[i].qs[32 * g + l] = (uint8_t)(l1 | l2 << 4);
            }
        }
    }
}

/* ---- symmetric sub-block fit (Q6_K) ---- */

/* Symmetric fit x[16] ~ scale * (L - nmax), L in 0..2*nmax-1, weights x^2:
 * starts from the grid through the largest-magnitude value, then tries
 * inverse scales (nmax + 0.1 k) / max for k = -9..9 and keeps the one that
 * maximises sumlx^2 / suml2. Returns the scale. As above, products are
 * computed element-wise first and the sums accumulated in element order. */
static float fit_scale_sym(int nmax, const float *x, uint8_t *L)
{
    enum { N = 16 };
    float max = 0, amax = 0;
    for (int i = 0; i < N; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < GROUP_MAX_EPS) {
        memset(L, 0, N);
        return 0.f;
    }
    float w[N], wx[N], t1[N], t2[N];
    int32_t l[N];
    for (int i = 0; i < N; i++) {
        w[i] = x[i] * x[i];
        wx[i] = w[i] * x[i];
    }
    float iscale = -nmax / max;
    for (int i = 0; i < N; i++) {
        l[i] = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        t1[i] = wx[i] * (float)l[i];
        t2[i] = w[i] * (float)l[i] * (float)l[i];
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < N; i++) {
        L[i] = (uint8_t)(l[i] + nmax);
        sumlx += t1[i];
        suml2 += t2[i];
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int k = -9; k <= 9; k++) {
        if (k == 0)
            continue;
        iscale = -(nmax + 0.1f * k) / max;
        for (int i = 0; i < N; i++) {
            l[i] = clampi(quant_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            t1[i] = wx[i] * (float)l[i];
            t2[i] = w[i] * (float)l[i] * (float)l[i];
        }
        sumlx = suml2 = 0;
        for (int i = 0; i < N; i++) {
            sumlx += t1[i];
            suml2 += t2[i];
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < N; i++)
                L[i] = (uint8_t)(l[i] + nmax);
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void minfer_quant_q6_K(const float *x, struct minfer_block_q6_K *y, int64_t nb)
{
    uint8_t L[MINFER_QK_K];
    float scales[MINFER_QK_K / 16];
    for (int64_t i = 0; i < nb; i++, x += MINFER_QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_scale_sym(32, x + 16 * ib, L + 16 * ib);
            float a = fabsf(scales[ib]);
            if (a > max_abs_scale) {
                max_abs_scale = a;
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < GROUP_MAX_EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = minfer_fp32_to_fp16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int s = quant_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        float d = minfer_fp16_to_fp32(y[i].d);
        for (int j = 0; j < 16; j++) {
            float ds = d * y[i].scales[j];
            if (ds == 0.0f)
                continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = clampi(quant_nearest_int(x[16 * j + ii] / ds), -32, 31);
                L[16 * j + ii] = (uint8_t)(l + 32);
            }
        }
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            const uint8_t *Lh = L + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 15) | (Lh[l + 64] & 15) << 4);
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 15) | (Lh[l + 96] & 15) << 4);
                qh[l] = (uint8_t)((Lh[l] >> 4) | (Lh[l + 32] >> 4) << 2 | (Lh[l + 64] >> 4) << 4 |
                                  (Lh[l + 96] >> 4) << 6);
            }
        }
    }
}

/* ---- Q8_K (activations) ---- */

void minfer_quant_q8_K(const float *x, struct minfer_block_q8_K *y, int64_t nb)
{
    for (int64_t i = 0; i < nb; i++, x += MINFER_QK_K) {
        float max = 0, amax = 0;
        for (int j = 0; j < MINFER_QK_K; j++) {
            float a = fabsf(x[j]);
            if (a > amax) {
                amax = a;
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -127.f / max;
        for (int j = 0; j < MINFER_QK_K; j++) {
            int v = quant_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < MINFER_QK_K / 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++)
                sum += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}
