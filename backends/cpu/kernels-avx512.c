/*
 * kernels-avx512.c — the AVX-512 kernel set: kernels-x86.inc built with
 * AVX-512 F/BW/VL/VNNI on top of AVX2, with 512-bit matmul kernels for
 * the quantized weight types replacing the 256-bit ones:
 *   - 32-element blocks: two blocks per vpdpbusd. The weights are turned
 *     into int8 (q - offset), the activations are stored by this set's
 *     quantizer as uint8 (q + 128), and the 128 * sum(w) that this adds is
 *     subtracted through the accumulator's starting value, computed once
 *     per weight block pair and shared by all activation columns.
 *   - K-quants: one 64-element group (two sub-blocks) per vector, u8 x s8
 *     pairs by vpmaddubsw, then scaled and accumulated in one vpdpwssd;
 *     mins and Q6_K's offset through Q8_K's bsums.
 * Reached only through cpu_kernels_avx512, which isa.c hands out only when
 * the CPU and OS run all of those extensions.
 */
#define KSET_NAME "avx512"
#define KSET_TABLE cpu_kernels_avx512
#define KSET_VNNI 1
#define KSET_ACT_U8 1
#define KSET_NC 8 /* F32/F16/BF16 kernels stay at 4: KSET_NC only sizes the table */

#include <stddef.h>
#include <stdint.h>

#define KSIG (int k, const void *w, const void *act, size_t act_stride, int nc, float *out)
static void mm512_q4_0 KSIG;
static void mm512_q4_1 KSIG;
static void mm512_q5_0 KSIG;
static void mm512_q5_1 KSIG;
static void mm512_q8_0 KSIG;
static void mm512_q4_k KSIG;
static void mm512_q5_k KSIG;
static void mm512_q6_k KSIG;
#define KSET_MM_Q4_0 mm512_q4_0
#define KSET_MM_Q4_1 mm512_q4_1
#define KSET_MM_Q5_0 mm512_q5_0
#define KSET_MM_Q5_1 mm512_q5_1
#define KSET_MM_Q8_0 mm512_q8_0
#define KSET_MM_Q4_K mm512_q4_k
#define KSET_MM_Q5_K mm512_q5_k
#define KSET_MM_Q6_K mm512_q6_k
static void mm512_q4_0_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q4_1_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q5_0_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q5_1_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q8_0_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q4_k_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q5_k_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q6_k_2(int, const void *, size_t, const void *, size_t, int, float *);
static void mm512_q4_0_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q4_1_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q5_0_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q5_1_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q8_0_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q4_k_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q5_k_rows(int, const void *, size_t, int, const void *, float *);
static void mm512_q6_k_rows(int, const void *, size_t, int, const void *, float *);
#define KSET_MM2                                                                            \
    [MINFER_TYPE_Q4_0] = mm512_q4_0_2, [MINFER_TYPE_Q4_1] = mm512_q4_1_2,                   \
    [MINFER_TYPE_Q5_0] = mm512_q5_0_2, [MINFER_TYPE_Q5_1] = mm512_q5_1_2,                   \
    [MINFER_TYPE_Q8_0] = mm512_q8_0_2, [MINFER_TYPE_Q4_K] = mm512_q4_k_2,                   \
    [MINFER_TYPE_Q5_K] = mm512_q5_k_2, [MINFER_TYPE_Q6_K] = mm512_q6_k_2
#define KSET_ROWS                                                                           \
    [MINFER_TYPE_Q4_0] = mm512_q4_0_rows, [MINFER_TYPE_Q4_1] = mm512_q4_1_rows,             \
    [MINFER_TYPE_Q5_0] = mm512_q5_0_rows, [MINFER_TYPE_Q5_1] = mm512_q5_1_rows,             \
    [MINFER_TYPE_Q8_0] = mm512_q8_0_rows, [MINFER_TYPE_Q4_K] = mm512_q4_k_rows,             \
    [MINFER_TYPE_Q5_K] = mm512_q5_k_rows, [MINFER_TYPE_Q6_K] = mm512_q6_k_rows
#define KSET_NC2                                                                            \
    [MINFER_TYPE_Q4_0] = 8, [MINFER_TYPE_Q4_1] = 8, [MINFER_TYPE_Q5_0] = 8,                 \
    [MINFER_TYPE_Q5_1] = 8, [MINFER_TYPE_Q8_0] = 8, [MINFER_TYPE_Q4_K] = 4,                 \
    [MINFER_TYPE_Q5_K] = 4, [MINFER_TYPE_Q6_K] = 4

#include "kernels-x86.inc"

/* Kernel bodies take R weight rows (w, w + w_stride) and nc columns and
 * write out[r * CPU_MM_NC + c]. Instantiated for R = 1 with nc 1..8 (the
 * table's mm: 32 registers hold 8 columns of accumulators) and for R = 2
 * with nc 1..8 (mm2: each activation load then serves two weight rows,
 * which halves the L2 traffic of prefill; the table's nc2 says how many
 * columns each type's kernel keeps in registers: 8 for the 32-element
 * blocks, 4 for the K-quants whose integer sums need registers too). */
#define MM_DISPATCH8(name)                                                                  \
    static void name(int k, const void *w, const void *act, size_t act_stride, int nc,      \
                     float *out)                                                            \
    {                                                                                       \
        switch (nc) {                                                                       \
        case 8: name##_n(k, w, 0, 1, act, act_stride, 8, out); break;                       \
        case 7: name##_n(k, w, 0, 1, act, act_stride, 7, out); break;                       \
        case 6: name##_n(k, w, 0, 1, act, act_stride, 6, out); break;                       \
        case 5: name##_n(k, w, 0, 1, act, act_stride, 5, out); break;                       \
        case 4: name##_n(k, w, 0, 1, act, act_stride, 4, out); break;                       \
        case 3: name##_n(k, w, 0, 1, act, act_stride, 3, out); break;                       \
        case 2: name##_n(k, w, 0, 1, act, act_stride, 2, out); break;                       \
        default: name##_n(k, w, 0, 1, act, act_stride, 1, out); break;                      \
        }                                                                                   \
    }                                                                                       \
    static void name##_rows(int k, const void *w, size_t w_stride, int nr, const void *act, \
                            float *out)                                                     \
    {                                                                                       \
        for (int r = 0; r < nr; r++)                                                        \
            name##_n(k, (const char *)w + (size_t)r * w_stride, 0, 1, act, 0, 1, out + r);  \
    }                                                                                       \
    static void name##_2(int k, const void *w, size_t w_stride, const void *act,            \
                         size_t act_stride, int nc, float *out)                             \
    {                                                                                       \
        switch (nc) {                                                                       \
        case 8: name##_n(k, w, w_stride, 2, act, act_stride, 8, out); break;                \
        case 7: name##_n(k, w, w_stride, 2, act, act_stride, 7, out); break;                \
        case 6: name##_n(k, w, w_stride, 2, act, act_stride, 6, out); break;                \
        case 5: name##_n(k, w, w_stride, 2, act, act_stride, 5, out); break;                \
        case 4: name##_n(k, w, w_stride, 2, act, act_stride, 4, out); break;                \
        case 3: name##_n(k, w, w_stride, 2, act, act_stride, 3, out); break;                \
        case 2: name##_n(k, w, w_stride, 2, act, act_stride, 2, out); break;                \
        default: name##_n(k, w, w_stride, 2, act, act_stride, 1, out); break;               \
        }                                                                                   \
    }

#define WROW(r) ((const char *)w + (size_t)(r) * w_stride)
#define NCM CPU_MM_NC

/* ---- 32-element blocks: weights as int8 ---- */

/* 16 bytes of nibbles of one block -> 32 bytes in element order */
AI __m256i nib_block(const uint8_t *qs)
{
    return nibbles32(qs);
}

/* two blocks' 32 int8 values each -> one 512-bit vector */
AI __m512i join2(__m256i a, __m256i b)
{
    return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}

AI uint32_t qh32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* The int8 weights of block b for each type (element order). */
AI __m256i w8_q4_0(const void *x, int b)
{
    const struct minfer_block_q4_0 *y = (const struct minfer_block_q4_0 *)x + b;
    return _mm256_sub_epi8(nib_block(y->qs), _mm256_set1_epi8(8));
}
AI __m256i w8_q4_1(const void *x, int b)
{
    return nib_block(((const struct minfer_block_q4_1 *)x + b)->qs);
}
AI __m256i w8_q5_0(const void *x, int b)
{
    const struct minfer_block_q5_0 *y = (const struct minfer_block_q5_0 *)x + b;
    __m256i q = _mm256_or_si256(nib_block(y->qs), bit4_bytes(y->qh));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(16));
}
AI __m256i w8_q5_1(const void *x, int b)
{
    const struct minfer_block_q5_1 *y = (const struct minfer_block_q5_1 *)x + b;
    return _mm256_or_si256(nib_block(y->qs), bit4_bytes(y->qh));
}
AI __m256i w8_q8_0(const void *x, int b)
{
    return _mm256_loadu_si256((const __m256i *)((const struct minfer_block_q8_0 *)x + b)->qs);
}

/* Two consecutive blocks b, b + 1 as one 512-bit vector of int8. */
AI __m512i nib_pair(const uint8_t *qs0, const uint8_t *qs1)
{
    /* 128-bit lanes: [qs0, qs0, qs1, qs1] then low / high nibbles */
    __m256i t = _mm256_set_m128i(_mm_loadu_si128((const __m128i *)qs1),
                                 _mm_loadu_si128((const __m128i *)qs0));
    __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                         _mm512_castsi256_si512(t));
    const __m512i sh = _mm512_setr_epi64(0, 0, 0x0004000400040004ll, 0x0004000400040004ll, 0, 0,
                                         0x0004000400040004ll, 0x0004000400040004ll);
    return _mm512_and_si512(_mm512_srlv_epi16(z, sh), _mm512_set1_epi8(15));
}
AI __mmask64 qh_pair(const uint8_t *qh0, const uint8_t *qh1)
{
    return _cvtu64_mask64((uint64_t)qh32(qh0) | (uint64_t)qh32(qh1) << 32);
}
AI __m512i w8x2_q4_0(const void *x, int b)
{
    const struct minfer_block_q4_0 *y = (const struct minfer_block_q4_0 *)x + b;
    return _mm512_sub_epi8(nib_pair(y[0].qs, y[1].qs), _mm512_set1_epi8(8));
}
AI __m512i w8x2_q4_1(const void *x, int b)
{
    const struct minfer_block_q4_1 *y = (const struct minfer_block_q4_1 *)x + b;
    return nib_pair(y[0].qs, y[1].qs);
}
AI __m512i w8x2_q5_0(const void *x, int b)
{
    const struct minfer_block_q5_0 *y = (const struct minfer_block_q5_0 *)x + b;
    /* q - 16 where the fifth bit is clear, q where it is set */
    __m512i n = nib_pair(y[0].qs, y[1].qs);
    return _mm512_mask_sub_epi8(n, _knot_mask64(qh_pair(y[0].qh, y[1].qh)), n,
                                _mm512_set1_epi8(16));
}
AI __m512i w8x2_q5_1(const void *x, int b)
{
    const struct minfer_block_q5_1 *y = (const struct minfer_block_q5_1 *)x + b;
    __m512i n = nib_pair(y[0].qs, y[1].qs);
    return _mm512_mask_add_epi8(n, qh_pair(y[0].qh, y[1].qh), n, _mm512_set1_epi8(16));
}
AI __m512i w8x2_q8_0(const void *x, int b)
{
    return join2(w8_q8_0(x, b), w8_q8_0(x, b + 1));
}

/* [d_b x 8, d_b+1 x 8] from the two blocks' fp16 scales */
AI __m512 dw_pair(const void *x, size_t bsize, int b)
{
    uint16_t h0, h1;
    memcpy(&h0, (const char *)x + (size_t)b * bsize, 2);
    memcpy(&h1, (const char *)x + (size_t)(b + 1) * bsize, 2);
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)h0 | (uint32_t)h1 << 16)));
    return _mm512_permutexvar_ps(_mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0),
                                 _mm512_castps128_ps512(f));
}

/* fp16 scale (and min) of block b; all these blocks start with d, and
 * Q4_1/Q5_1 have m right after it */
AI float wd(const void *x, size_t bsize, int b)
{
    uint16_t h;
    memcpy(&h, (const char *)x + (size_t)b * bsize, 2);
    return h2f(h);
}
AI float wm(const void *x, size_t bsize, int b)
{
    uint16_t h;
    memcpy(&h, (const char *)x + (size_t)b * bsize + 2, 2);
    return h2f(h);
}

/* out[c] = sum_b d_w[b] * d_a[b] * sum(w8 * a) (+ m_w[b] * d_a[b] * sum(a)).
 * Activation rows hold qs + 128 as uint8; start = -128 * sum(w8) per lane
 * cancels the offset exactly. */
#define MM512_Q32(name, W8, W8X2, BT, HAS_M)                                                      \
    AI void name##_n(int k, const void *w, size_t w_stride, int R, const void *act,         \
                     size_t act_stride, int nc, float *out)                                 \
    {                                                                                       \
        const size_t bs = sizeof(BT);                                                       \
        const int nb = k / 32;                                                              \
        const __m512i c80 = _mm512_set1_epi8((char)0x80);                                   \
        const __m512i idx2 = _mm512_set_epi32(1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0); \
        __m512 acc[2][8];                                                                   \
        float corr[2][8];                                                                   \
        for (int r = 0; r < R; r++)                                                         \
            for (int c = 0; c < nc; c++) {                                                  \
                acc[r][c] = _mm512_setzero_ps();                                            \
                corr[r][c] = 0.0f;                                                          \
            }                                                                               \
        int b = 0;                                                                          \
        for (; b + 2 <= nb; b += 2) {                                                       \
            __m512i wq[2], start[2];                                                        \
            __m512 dw[2];                                                                   \
            for (int r = 0; r < R; r++) {                                                   \
                wq[r] = W8X2(WROW(r), b);                                                   \
                start[r] = _mm512_sub_epi32(_mm512_setzero_si512(),                         \
                                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), c80, wq[r])); \
                dw[r] = dw_pair(WROW(r), bs, b);                                            \
            }                                                                               \
            for (int c = 0; c < nc; c++) {                                                  \
                const uint8_t *aq = (const uint8_t *)ACT(c);                                \
                const float *ad = CPU_Q8_D(aq, k);                                          \
                __m512i a = _mm512_loadu_si512((const void *)(aq + 32 * b));                \
                __m512 da = _mm512_permutexvar_ps(                                          \
                    idx2, _mm512_castps128_ps512(_mm_castpd_ps(_mm_load_sd((const double *)(ad + b))))); \
                for (int r = 0; r < R; r++) {                                               \
                    __m512i p = _mm512_dpbusd_epi32(start[r], a, wq[r]);                    \
                    acc[r][c] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], da), _mm512_cvtepi32_ps(p), \
                                                acc[r][c]);                                 \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        for (; b < nb; b++) /* odd block count: one 256-bit step */                         \
            for (int r = 0; r < R; r++) {                                                   \
                __m256i wq = W8(WROW(r), b);                                                \
                __m256i start = _mm256_sub_epi32(                                           \
                    _mm256_setzero_si256(),                                                 \
                    _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8((char)0x80), wq)); \
                float d = wd(WROW(r), bs, b);                                               \
                for (int c = 0; c < nc; c++) {                                              \
                    const uint8_t *aq = (const uint8_t *)ACT(c);                            \
                    __m256i p = _mm256_dpbusd_epi32(                                        \
                        start, _mm256_loadu_si256((const __m256i *)(aq + 32 * b)), wq);     \
                    corr[r][c] += d * CPU_Q8_D(aq, k)[b] * hsum8(_mm256_cvtepi32_ps(p));    \
                }                                                                           \
            }                                                                               \
        if (HAS_M) /* + m_w[j] * d_a[j] * sum_a[j], 16 blocks per vector */               \
            for (int r = 0; r < R; r++) {                                                   \
                __m512 mv[CPU_MM_NC];                                                       \
                for (int c = 0; c < nc; c++)                                                \
                    mv[c] = _mm512_setzero_ps();                                            \
                int j = 0;                                                                  \
                for (; j + 16 <= nb; j += 16) {                                             \
                    float m16[16];                                                          \
                    for (int i = 0; i < 16; i++)                                            \
                        m16[i] = wm(WROW(r), bs, j + i);                                    \
                    __m512 mw = _mm512_loadu_ps(m16);                                       \
                    for (int c = 0; c < nc; c++) {                                          \
                        const uint8_t *aq = (const uint8_t *)ACT(c);                        \
                        __m512 sa = _mm512_mul_ps(                                          \
                            _mm512_loadu_ps(CPU_Q8_D(aq, k) + j),                           \
                            _mm512_cvtepi32_ps(_mm512_loadu_si512(                          \
                                (const void *)(CPU_Q8_SUM(aq, k) + j))));                   \
                        mv[c] = _mm512_fmadd_ps(mw, sa, mv[c]);                             \
                    }                                                                       \
                }                                                                           \
                for (; j < nb; j++) {                                                       \
                    float m = wm(WROW(r), bs, j);                                           \
                    for (int c = 0; c < nc; c++) {                                          \
                        const uint8_t *aq = (const uint8_t *)ACT(c);                        \
                        corr[r][c] += m * CPU_Q8_D(aq, k)[j] * (float)CPU_Q8_SUM(aq, k)[j]; \
                    }                                                                       \
                }                                                                           \
                for (int c = 0; c < nc; c++)                                                \
                    corr[r][c] += _mm512_reduce_add_ps(mv[c]);                              \
            }                                                                               \
        for (int r = 0; r < R; r++)                                                         \
            for (int c = 0; c < nc; c++)                                                    \
                out[r * NCM + c] = _mm512_reduce_add_ps(acc[r][c]) + corr[r][c];            \
    }                                                                                       \
    MM_DISPATCH8(name)

MM512_Q32(mm512_q4_0, w8_q4_0, w8x2_q4_0, struct minfer_block_q4_0, 0)
MM512_Q32(mm512_q4_1, w8_q4_1, w8x2_q4_1, struct minfer_block_q4_1, 1)
MM512_Q32(mm512_q5_0, w8_q5_0, w8x2_q5_0, struct minfer_block_q5_0, 0)
MM512_Q32(mm512_q5_1, w8_q5_1, w8x2_q5_1, struct minfer_block_q5_1, 1)
MM512_Q32(mm512_q8_0, w8_q8_0, w8x2_q8_0, struct minfer_block_q8_0, 0)

/* ---- K-quants against Q8_K ---- */

/* 16-bit lane indices: lanes 0..15 -> i, lanes 16..31 -> j */
AI __m512i idx_halves(int i, int j)
{
    return _mm512_inserti64x4(_mm512_set1_epi16((short)i), _mm256_set1_epi16((short)j), 1);
}

/* Q4_K/Q5_K: 8 six-bit scales and mins unpacked with 32-bit masks */
AI void k4_unpack(const uint8_t *q, __m128i *sc16, __m128i *mn16)
{
    uint32_t u0, u1, u2;
    memcpy(&u0, q, 4);
    memcpy(&u1, q + 4, 4);
    memcpy(&u2, q + 8, 4);
    uint32_t sc_lo = u0 & 0x3f3f3f3fu, m_lo = u1 & 0x3f3f3f3fu;
    uint32_t sc_hi = (u2 & 0x0f0f0f0fu) | ((u0 >> 2) & 0x30303030u);
    uint32_t m_hi = ((u2 >> 4) & 0x0f0f0f0fu) | ((u1 >> 2) & 0x30303030u);
    *sc16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)sc_hi, (int)sc_lo));
    *mn16 = _mm_cvtepu8_epi16(_mm_set_epi32(0, 0, (int)m_hi, (int)m_lo));
}

/* Per block the mins term (-dmin * m_j * bsums of sub-block j) is folded
 * into the same float accumulator as the scaled integer sums. */
#define MM512_QK45(name, BT, HAS_QH)                                                        \
    AI void name##_n(int k, const void *w, size_t w_stride, int R, const void *act,         \
                     size_t act_stride, int nc, float *out)                                 \
    {                                                                                       \
        const __m512i m4 = _mm512_set1_epi8(15);                                            \
        const __m512i shifts = idx_halves(0, 4);                                            \
        __m512 acc[2][8];                                                                   \
        for (int r = 0; r < R; r++)                                                         \
            for (int c = 0; c < nc; c++)                                                    \
                acc[r][c] = _mm512_setzero_ps();                                            \
        for (int b = 0; b < k / 256; b++) {                                                 \
            const BT *x[2];                                                                 \
            __m512i scz[2], isum[2][8];                                                     \
            __m256 wmin[2]; /* dmin * m_j per sub-block j */                                \
            float d[2];                                                                     \
            for (int r = 0; r < R; r++) {                                                   \
                x[r] = (const BT *)WROW(r) + b;                                             \
                __m128i sc16, mn16;                                                         \
                k4_unpack(x[r]->scales, &sc16, &mn16);                                      \
                scz[r] = _mm512_castsi128_si512(sc16);                                      \
                wmin[r] = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepu16_epi32(mn16)),    \
                                        _mm256_set1_ps(h2f(x[r]->dmin)));                   \
                d[r] = h2f(x[r]->d);                                                        \
                for (int c = 0; c < nc; c++)                                                \
                    isum[r][c] = _mm512_setzero_si512();                                    \
            }                                                                               \
            for (int g = 0; g < 4; g++) {                                                   \
                __m512i q[2], s16[2];                                                       \
                for (int r = 0; r < R; r++) {                                               \
                    __m512i v = _mm512_broadcast_i64x4(                                     \
                        _mm256_loadu_si256((const __m256i *)(x[r]->qs + 32 * g)));          \
                    q[r] = _mm512_and_si512(_mm512_srlv_epi16(v, shifts), m4);              \
                    if (HAS_QH) {                                                           \
                        __m512i hv = _mm512_broadcast_i64x4(_mm256_loadu_si256(             \
                            (const __m256i *)((const char *)x[r] + 16)));                   \
                        __m512i bit = _mm512_inserti64x4(                                   \
                            _mm512_set1_epi8((char)(1 << (2 * g))),                         \
                            _mm256_set1_epi8((char)(1 << (2 * g + 1))), 1);                 \
                        __mmask64 hm = _mm512_test_epi8_mask(hv, bit);                      \
                        q[r] = _mm512_mask_add_epi8(q[r], hm, q[r], _mm512_set1_epi8(16));  \
                    }                                                                       \
                    s16[r] = _mm512_permutexvar_epi16(idx_halves(2 * g, 2 * g + 1), scz[r]); \
                }                                                                           \
                for (int c = 0; c < nc; c++) {                                              \
                    const int8_t *a = ((const struct minfer_block_q8_K *)ACT(c) + b)->qs;   \
                    __m512i av = _mm512_loadu_si512((const void *)(a + 64 * g));            \
                    for (int r = 0; r < R; r++) {                                           \
                        __m512i p = _mm512_maddubs_epi16(q[r], av);                         \
                        isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], p, s16[r]); \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
            for (int c = 0; c < nc; c++) {                                                  \
                const struct minfer_block_q8_K *a = (const struct minfer_block_q8_K *)ACT(c) + b; \
                /* da * activation sums per 32-element sub-block, for the mins */        \
                __m256 sa = _mm256_mul_ps(                                                  \
                    _mm256_cvtepi32_ps(_mm256_madd_epi16(                                   \
                        _mm256_loadu_si256((const __m256i *)a->bsums), _mm256_set1_epi16(1))), \
                    _mm256_set1_ps(a->d));                                                  \
                for (int r = 0; r < R; r++) {                                               \
                    acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(d[r] * a->d),                \
                                                _mm512_cvtepi32_ps(isum[r][c]), acc[r][c]); \
                    acc[r][c] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(wmin[r]),           \
                                                 _mm512_zextps256_ps512(sa), acc[r][c]);    \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
        for (int r = 0; r < R; r++)                                                         \
            for (int c = 0; c < nc; c++)                                                    \
                out[r * NCM + c] = _mm512_reduce_add_ps(acc[r][c]);                         \
    }                                                                                       \
    MM_DISPATCH8(name)

MM512_QK45(mm512_q4_k, struct minfer_block_q4_K, 0)
MM512_QK45(mm512_q5_k, struct minfer_block_q5_K, 1)

AI void mm512_q6_k_n(int k, const void *w, size_t w_stride, int R, const void *act,
                     size_t act_stride, int nc, float *out)
{
    const __m512i m4 = _mm512_set1_epi8(15), m3 = _mm512_set1_epi8(3);
    const __m512i sh01 = idx_halves(0, 2), sh23 = idx_halves(4, 6);
    __m512 acc[2][8];
    for (int r = 0; r < R; r++)
        for (int c = 0; c < nc; c++)
            acc[r][c] = _mm512_setzero_ps();
    for (int b = 0; b < k / 256; b++) {
        const struct minfer_block_q6_K *x[2];
        float d[2];
        __m512 woff[2]; /* -32 d sc_j per 16-element sub-block j: the offset term */
        __m512i scz[2], isum[2][8];
        for (int r = 0; r < R; r++) {
            x[r] = (const struct minfer_block_q6_K *)WROW(r) + b;
            d[r] = h2f(x[r]->d);
            __m128i sc8 = _mm_loadu_si128((const __m128i *)x[r]->scales);
            scz[r] = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
            woff[r] = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(sc8)),
                                    _mm512_set1_ps(-32.0f * d[r]));
            for (int c = 0; c < nc; c++)
                isum[r][c] = _mm512_setzero_si512();
        }
        for (int h = 0; h < 2; h++) {
            __m512i z[2][2];
            for (int r = 0; r < R; r++) {
                __m512i L = _mm512_loadu_si512((const void *)(x[r]->ql + 64 * h));
                __m512i H = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(x[r]->qh + 32 * h)));
                z[r][0] = _mm512_or_si512(
                    _mm512_and_si512(L, m4),
                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H, sh01), m3), 4));
                z[r][1] = _mm512_or_si512(
                    _mm512_and_si512(_mm512_srli_epi16(L, 4), m4),
                    _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(H, sh23), m3), 4));
            }
            for (int j = 0; j < 2; j++) {
                /* 64 elements = 4 sub-blocks of 16: scales 8h + 4j + 0..3 */
                int s0 = 8 * h + 4 * j;
                __m512i idx = _mm512_inserti64x4(
                    _mm512_castsi256_si512(_mm256_set_m128i(_mm_set1_epi16((short)(s0 + 1)),
                                                            _mm_set1_epi16((short)s0))),
                    _mm256_set_m128i(_mm_set1_epi16((short)(s0 + 3)),
                                     _mm_set1_epi16((short)(s0 + 2))),
                    1);
                __m512i s16[2];
                for (int r = 0; r < R; r++)
                    s16[r] = _mm512_permutexvar_epi16(idx, scz[r]);
                for (int c = 0; c < nc; c++) {
                    const int8_t *a = ((const struct minfer_block_q8_K *)ACT(c) + b)->qs;
                    __m512i av = _mm512_loadu_si512((const void *)(a + 128 * h + 64 * j));
                    for (int r = 0; r < R; r++) {
                        __m512i p = _mm512_maddubs_epi16(z[r][j], av);
                        isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], p, s16[r]);
                    }
                }
            }
        }
        for (int c = 0; c < nc; c++) {
            const struct minfer_block_q8_K *a = (const struct minfer_block_q8_K *)ACT(c) + b;
            /* da * activation sums per 16-element sub-block */
            __m512 sa = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(
                                          _mm256_loadu_si256((const __m256i *)a->bsums))),
                                      _mm512_set1_ps(a->d));
            for (int r = 0; r < R; r++) {
                acc[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(d[r] * a->d),
                                            _mm512_cvtepi32_ps(isum[r][c]), acc[r][c]);
                acc[r][c] = _mm512_fmadd_ps(woff[r], sa, acc[r][c]);
            }
        }
    }
    for (int r = 0; r < R; r++)
        for (int c = 0; c < nc; c++)
            out[r * NCM + c] = _mm512_reduce_add_ps(acc[r][c]);
}
MM_DISPATCH8(mm512_q6_k)
