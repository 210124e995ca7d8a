/*
 * kernels-scalar.c — the portable kernel set: activation quantization to
 * Q8 (32-element blocks) and Q8_K, integer dot products of every weight
 * type against them, f32-accumulating F32/F16/BF16 products, and the
 * attention chunk kernels. Baseline C, used on CPUs without AVX2 and as
 * the model the SIMD sets are tested against.
 */
#include <math.h>
#include <pthread.h>
#include <string.h>

#include "cpu-internal.h"

/* ---- fp16 table (the exact conversion has a loop for subnormals) ---- */

static float g_f16_table[65536];
static pthread_once_t g_f16_once = PTHREAD_ONCE_INIT;

static void f16_table_init(void)
{
    for (uint32_t i = 0; i < 65536; i++)
        g_f16_table[i] = minfer_fp16_to_fp32((uint16_t)i);
}

static inline float h2f(uint16_t h)
{
    return g_f16_table[h];
}

static void f16_ready(void)
{
    pthread_once(&g_f16_once, f16_table_init);
}

/* ---- activation quantizers ---- */

static void quant_q8(const float *x, void *row, int n)
{
    int8_t *qs = row;
    float *d = CPU_Q8_D(row, n);
    int32_t *sums = CPU_Q8_SUM(row, n);
    for (int b = 0; b < n / 32; b++, x += 32) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) {
            int q = (int)nearbyintf(x[i] * id);
            qs[32 * b + i] = (int8_t)q;
            sum += q;
        }
        d[b] = amax / 127.0f;
        sums[b] = sum;
    }
}

static void quant_q8k(const float *x, struct minfer_block_q8_K *y, int n)
{
    for (int b = 0; b < n / 256; b++, x += 256) {
        float amax = 0.0f;
        for (int i = 0; i < 256; i++)
            amax = fmaxf(amax, fabsf(x[i]));
        float id = amax > 0.0f ? 127.0f / amax : 0.0f;
        for (int g = 0; g < 16; g++) {
            int sum = 0;
            for (int i = 16 * g; i < 16 * g + 16; i++) {
                int q = (int)nearbyintf(x[i] * id);
                y[b].qs[i] = (int8_t)q;
                sum += q;
            }
            y[b].bsums[g] = (int16_t)sum;
        }
        y[b].d = amax / 127.0f;
    }
}

/* ---- float weights ---- */

#define ACT(c) ((const char *)act + (size_t)(c) * act_stride)

/* F32/F16/BF16 weights against f32 activations: four partial sums per
 * column, then the tail; CONV turns a stored weight into f32 */
#define MM_FLOAT(name, T, CONV, PREP)                                                       \
    static void name(int k, const void *w, const void *act, size_t act_stride, int nc,      \
                     float *out)                                                            \
    {                                                                                       \
        const T *x = w;                                                                     \
        PREP;                                                                               \
        for (int c = 0; c < nc; c++) {                                                      \
            const float *a = (const float *)ACT(c);                                         \
            float s[4] = {0};                                                               \
            int i = 0;                                                                      \
            for (; i + 4 <= k; i += 4)                                                      \
                for (int j = 0; j < 4; j++)                                                 \
                    s[j] += CONV(x[i + j]) * a[i + j];                                      \
            for (; i < k; i++)                                                              \
                s[0] += CONV(x[i]) * a[i];                                                  \
            out[c] = (s[0] + s[1]) + (s[2] + s[3]);                                         \
        }                                                                                   \
    }

#define F32_OF(v) (v)
MM_FLOAT(mm_f32, float, F32_OF, (void)0)
MM_FLOAT(mm_f16, uint16_t, h2f, f16_ready())
MM_FLOAT(mm_bf16, uint16_t, minfer_bf16_to_fp32, (void)0)

/* ---- 32-element blocks against Q8 activation rows ---- */

static inline uint32_t load_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* sum of q * a over one block of packed nibbles (low nibbles are elements
 * 0..15, high ones 16..31), with the fifth bits from qh (0 for 4-bit) */
static inline int nib_dot(const uint8_t *qs, uint32_t qh, const int8_t *a)
{
    int isum = 0;
    for (int j = 0; j < 16; j++) {
        int lo = (qs[j] & 15) | (int)((qh >> j) & 1) << 4;
        int hi = (qs[j] >> 4) | (int)((qh >> (j + 16)) & 1) << 4;
        isum += lo * a[j] + hi * a[j + 16];
    }
    return isum;
}

/* One body for Q4_0/Q4_1/Q5_0/Q5_1: per block d * da * (sum q a - offset *
 * sum a), plus m * da * sum a for the types with a min. */
#define MM_Q32(name, BT, HAS_QH, OFFSET, HAS_M)                                             \
    static void name(int k, const void *w, const void *act, size_t act_stride, int nc,      \
                     float *out)                                                            \
    {                                                                                       \
        const BT *x = w;                                                                    \
        int nb = k / 32;                                                                    \
        for (int c = 0; c < nc; c++) {                                                      \
            const int8_t *aq = (const int8_t *)ACT(c);                                      \
            const float *ad = CPU_Q8_D(aq, k);                                              \
            const int32_t *as = CPU_Q8_SUM(aq, k);                                          \
            float acc = 0.0f;                                                               \
            for (int b = 0; b < nb; b++) {                                                  \
                uint32_t qh = HAS_QH ? load_u32((const uint8_t *)&x[b] + 2 + 2 * HAS_M) : 0; \
                int isum = nib_dot(x[b].qs, qh, aq + 32 * b) - (OFFSET) * as[b];            \
                float m = HAS_M ? minfer_fp16_to_fp32(*(const uint16_t *)((const char *)&x[b] + 2)) \
                                : 0.0f;                                                     \
                if (HAS_M)                                                                  \
                    acc += minfer_fp16_to_fp32(x[b].d) * ad[b] * (float)isum +              \
                           m * ad[b] * (float)as[b];                                        \
                else                                                                        \
                    acc += minfer_fp16_to_fp32(x[b].d) * ad[b] * (float)isum;               \
            }                                                                               \
            out[c] = acc;                                                                   \
        }                                                                                   \
    }

MM_Q32(mm_q4_0, struct minfer_block_q4_0, 0, 8, 0)
MM_Q32(mm_q4_1, struct minfer_block_q4_1, 0, 0, 1)
MM_Q32(mm_q5_0, struct minfer_block_q5_0, 1, 16, 0)
MM_Q32(mm_q5_1, struct minfer_block_q5_1, 1, 0, 1)

static void mm_q8_0(int k, const void *w, const void *act, size_t act_stride, int nc, float *out)
{
    const struct minfer_block_q8_0 *x = w;
    int nb = k / 32;
    for (int c = 0; c < nc; c++) {
        const int8_t *aq = (const int8_t *)ACT(c);
        const float *ad = CPU_Q8_D(aq, k);
        float acc = 0.0f;
        for (int b = 0; b < nb; b++) {
            int isum = 0;
            for (int j = 0; j < 32; j++)
                isum += x[b].qs[j] * aq[32 * b + j];
            acc += minfer_fp16_to_fp32(x[b].d) * ad[b] * (float)isum;
        }
        out[c] = acc;
    }
}

/* ---- K-quants against Q8_K ---- */

static inline void scale_min_k4(int j, const uint8_t *q, int *sc, int *m)
{
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (q[j + 4] & 15) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Shared by Q4_K and Q5_K: qh NULL for Q4_K. */
static float dot_qk45(const uint8_t *scales, const uint8_t *qs, const uint8_t *qh,
                      const struct minfer_block_q8_K *a, float d, float dmin)
{
    int isum = 0, msum = 0;
    for (int g = 0; g < 4; g++) {
        int sc0, m0, sc1, m1;
        scale_min_k4(2 * g, scales, &sc0, &m0);
        scale_min_k4(2 * g + 1, scales, &sc1, &m1);
        int s0 = 0, s1 = 0;
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * g + l] & 15, hi = qs[32 * g + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            s0 += lo * a->qs[64 * g + l];
            s1 += hi * a->qs[64 * g + 32 + l];
        }
        isum += sc0 * s0 + sc1 * s1;
        msum += m0 * (a->bsums[4 * g] + a->bsums[4 * g + 1]) +
                m1 * (a->bsums[4 * g + 2] + a->bsums[4 * g + 3]);
    }
    return a->d * (d * (float)isum - dmin * (float)msum);
}

/* Q4_K and Q5_K: the same walk, qh only for Q5_K */
#define MM_QK45(name, BT, QH)                                                               \
    static void name(int k, const void *w, const void *act, size_t act_stride, int nc,      \
                     float *out)                                                            \
    {                                                                                       \
        const BT *x = w;                                                                    \
        int nb = k / 256;                                                                   \
        for (int c = 0; c < nc; c++) {                                                      \
            const struct minfer_block_q8_K *a = (const struct minfer_block_q8_K *)ACT(c);   \
            float acc = 0.0f;                                                               \
            for (int b = 0; b < nb; b++)                                                    \
                acc += dot_qk45(x[b].scales, x[b].qs, QH, &a[b], minfer_fp16_to_fp32(x[b].d), \
                                minfer_fp16_to_fp32(x[b].dmin));                            \
            out[c] = acc;                                                                   \
        }                                                                                   \
    }

MM_QK45(mm_q4_k, struct minfer_block_q4_K, NULL)
MM_QK45(mm_q5_k, struct minfer_block_q5_K, x[b].qh)

static void mm_q6_k(int k, const void *w, const void *act, size_t act_stride, int nc, float *out)
{
    const struct minfer_block_q6_K *x = w;
    int nb = k / 256;
    for (int c = 0; c < nc; c++) {
        const struct minfer_block_q8_K *a = (const struct minfer_block_q8_K *)ACT(c);
        float acc = 0.0f;
        for (int b = 0; b < nb; b++) {
            int isum = 0;
            for (int h = 0; h < 2; h++) {
                const uint8_t *ql = x[b].ql + 64 * h, *qh = x[b].qh + 32 * h;
                const int8_t *sc = x[b].scales + 8 * h, *q8 = a[b].qs + 128 * h;
                int s[8] = {0};
                for (int l = 0; l < 32; l++) {
                    int is = l / 16;
                    int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
                    int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
                    int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                    int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                    s[is + 0] += q1 * q8[l];
                    s[is + 2] += q2 * q8[l + 32];
                    s[is + 4] += q3 * q8[l + 64];
                    s[is + 6] += q4 * q8[l + 96];
                }
                for (int j = 0; j < 8; j++)
                    isum += sc[j] * s[j];
            }
            acc += a[b].d * minfer_fp16_to_fp32(x[b].d) * (float)isum;
        }
        out[c] = acc;
    }
}

/* ---- attention: chunk kernels and KV row converters ---- */

static void attn_scores(int hd, float scale, const float *q, const float *kt, float *s)
{
    for (int j = 0; j < CPU_ATTN_CHUNK; j++)
        s[j] = 0.0f;
    for (int e = 0; e < hd; e++)
        for (int j = 0; j < CPU_ATTN_CHUNK; j++)
            s[j] += q[e] * kt[(size_t)e * CPU_ATTN_CHUNK + j];
    for (int j = 0; j < CPU_ATTN_CHUNK; j++)
        s[j] *= scale;
}

static void attn_pv(int hd, int n, const float *p, const void *v, size_t v_stride, float *acc)
{
    for (int j = 0; j < n; j++) {
        const float *vr = (const float *)((const char *)v + (size_t)j * v_stride);
        for (int e = 0; e < hd; e++)
            acc[e] += p[j] * vr[e];
    }
}

static void cvt_f16(int n, const uint16_t *x, float *y)
{
    f16_ready();
    for (int i = 0; i < n; i++)
        y[i] = h2f(x[i]);
}

static void cvt_q8_0(int n, const struct minfer_block_q8_0 *x, float *y)
{
    for (int b = 0; b < n / 32; b++) {
        float d = minfer_fp16_to_fp32(x[b].d);
        for (int j = 0; j < 32; j++)
            y[32 * b + j] = d * (float)x[b].qs[j];
    }
}

static float exp_sum(int n, float *x, float m)
{
    float l = 0.0f;
    for (int i = 0; i < n; i++)
        l += (x[i] = expf(x[i] - m));
    return l;
}

static void silu_mul(int n, float *g, const float *u)
{
    for (int i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

const struct cpu_kernels cpu_kernels_scalar = {
    .name = "scalar",
    .nc = 4,
    .nc_float = 4,
    .mm = {
        [MINFER_TYPE_F32] = mm_f32,   [MINFER_TYPE_F16] = mm_f16,   [MINFER_TYPE_BF16] = mm_bf16,
        [MINFER_TYPE_Q4_0] = mm_q4_0, [MINFER_TYPE_Q4_1] = mm_q4_1, [MINFER_TYPE_Q5_0] = mm_q5_0,
        [MINFER_TYPE_Q5_1] = mm_q5_1, [MINFER_TYPE_Q8_0] = mm_q8_0, [MINFER_TYPE_Q4_K] = mm_q4_k,
        [MINFER_TYPE_Q5_K] = mm_q5_k, [MINFER_TYPE_Q6_K] = mm_q6_k,
    },
    .quant_q8 = quant_q8,
    .quant_q8k = quant_q8k,
    .attn_scores = attn_scores,
    .attn_pv = attn_pv,
    .cvt_f16 = cvt_f16,
    .cvt_q8_0 = cvt_q8_0,
    .exp_sum = exp_sum,
    .silu_mul = silu_mul,
};
