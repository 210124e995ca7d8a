/*
 * matvec-units.cuh — the decode products' weight units: for each dp4a
 * weight type, how a thread loads one unit of a row (a 32-value block, or
 * 64 values of a K-quant super-block) into int8 lanes and scales, and its
 * dot product with the q8_1 activations of the same values.
 *
 * Included by matvec.cu after common.cuh (h2f, ld_i32_a4, MINFER_TYPE_*).
 * tests/test-matvec-units.cpp includes it on the host with stand-ins for
 * those and for the CUDA intrinsics, so the units' integer arithmetic is
 * checked against the CPU's dequantization where no GPU is.
 */
#ifndef MINFER_CUDA_MATVEC_UNITS_CUH
#define MINFER_CUDA_MATVEC_UNITS_CUH

/* ---- q8_1 activations ---- */

/* Row layout: nb blocks of 32 int8, then nb float2 (d, d * sum(q)). */
static __device__ __forceinline__ const int8_t *xq_qs(const uint8_t *xrow, int blk)
{
    return (const int8_t *)(xrow + 32 * (size_t)blk);
}
static __device__ __forceinline__ float2 xq_ds(const uint8_t *xrow, int nb, int blk)
{
    return ((const float2 *)(xrow + 32 * (size_t)nb))[blk];
}

/* ---- per-type units ---- */

/* Q4_K/Q5_K 6-bit scales and mins of sub-blocks 2g and 2g+1 from the 12
 * packed bytes held in 3 words, with 4-lane byte arithmetic. */
static __device__ __forceinline__ void kscale_pair(uint32_t s0, uint32_t s1, uint32_t s2, int g,
                                                   int &sc0, int &m0, int &sc1, int &m1)
{
    uint32_t sc, m;
    if (g < 2) {
        sc = s0 & 0x3f3f3f3fu;
        m = s1 & 0x3f3f3f3fu;
    } else {
        sc = (s2 & 0x0f0f0f0fu) | ((s0 >> 2) & 0x30303030u);
        m = ((s2 >> 4) & 0x0f0f0f0fu) | ((s1 >> 2) & 0x30303030u);
    }
    int sh = 16 * (g & 1);
    sc0 = (int)((sc >> sh) & 0xffu);
    sc1 = (int)((sc >> (sh + 8)) & 0xffu);
    m0 = (int)((m >> sh) & 0xffu);
    m1 = (int)((m >> (sh + 8)) & 0xffu);
}

/* The N aligned words from p rounded down to 4 bytes. The aligned address
 * is p minus its low bits, not p cast through an integer: the cast loses
 * the global address space and made these generic loads. */
template <int N> static __device__ __forceinline__ void ld_words_a4(const uint8_t *p, uint32_t *w)
{
    const uint32_t *a = (const uint32_t *)(p - ((uintptr_t)p & 3u));
#pragma unroll
    for (int i = 0; i < N; i++)
        w[i] = a[i];
}

/* N ints from a 2-byte aligned address with N+1 aligned 4-byte loads and
 * funnel shifts (instead of 2N 2-byte loads). Reads up to 4 bytes past the
 * run: the device layer pads every allocation by 16 bytes. */
template <int N> static __device__ __forceinline__ void ld_run_a2(const uint8_t *p, int *out)
{
    uint32_t sh = ((uint32_t)(uintptr_t)p & 2u) * 8u;
    uint32_t w[N + 1];
    ld_words_a4<N + 1>(p, w);
#pragma unroll
    for (int i = 0; i < N; i++)
        out[i] = (int)__funnelshift_r(w[i], w[i + 1], sh);
}

static __device__ __forceinline__ int dot8(const int *w, const int8_t *xs)
{
    const int4 *x4 = (const int4 *)xs;
    int4 a = x4[0], b = x4[1];
    int s = __dp4a(w[0], a.x, 0);
    s = __dp4a(w[1], a.y, s);
    s = __dp4a(w[2], a.z, s);
    s = __dp4a(w[3], a.w, s);
    s = __dp4a(w[4], b.x, s);
    s = __dp4a(w[5], b.y, s);
    s = __dp4a(w[6], b.z, s);
    s = __dp4a(w[7], b.w, s);
    return s;
}

template <int T> struct Unit;

/* The 32-element types' units: one block, its quants unpacked to 8 x 4
 * int8 in q. A Q4_0/Q5_0 weight is d * (q - OFF), OFF 8 or 16; a
 * Q4_1/Q5_1 weight d * q + m. With the activation block's d * sum(x),
 * OFF or m costs one term per block. */
template <int OFF> struct UnitOff {
    static constexpr int U = 32;
    float d;
    int q[8];
    __device__ __forceinline__ float dot(const uint8_t *xrow, int nb, int u) const
    {
        int s = dot8(q, xq_qs(xrow, u));
        float2 ds = xq_ds(xrow, nb, u);
        return d * (ds.x * (float)s - (float)OFF * ds.y);
    }
};
struct UnitMin {
    static constexpr int U = 32;
    float d, m;
    int q[8];
    __device__ __forceinline__ float dot(const uint8_t *xrow, int nb, int u) const
    {
        int s = dot8(q, xq_qs(xrow, u));
        float2 ds = xq_ds(xrow, nb, u);
        return d * ds.x * (float)s + m * ds.y;
    }
};

/* Q4_0: 18-byte blocks, nibbles. */
template <> struct Unit<MINFER_TYPE_Q4_0> : UnitOff<8> {
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 18 * (size_t)u;
        d = h2f(*(const uint16_t *)b);
        int v4[4];
        ld_run_a2<4>(b + 2, v4);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = v4[i] & 0x0F0F0F0F;
            q[i + 4] = (v4[i] >> 4) & 0x0F0F0F0F;
        }
    }
};

/* Q4_1: 20-byte blocks, nibbles. */
template <> struct Unit<MINFER_TYPE_Q4_1> : UnitMin {
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 20 * (size_t)u;
        uint32_t dm = *(const uint32_t *)b;
        d = h2f((uint16_t)dm);
        m = h2f((uint16_t)(dm >> 16));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int v = ld_i32_a4(b + 4 + 4 * i);
            q[i] = v & 0x0F0F0F0F;
            q[i + 4] = (v >> 4) & 0x0F0F0F0F;
        }
    }
};

/* bit j (j < 4) of h -> bit 4 of byte j */
static __device__ __forceinline__ int spread4(uint32_t h)
{
    return (int)(((h & 1u) << 4) | ((h & 2u) << 11) | ((h & 4u) << 18) | ((h & 8u) << 25));
}

/* Q5_0: 22-byte blocks, nibbles and a fifth bit from the 4 qh bytes. */
template <> struct Unit<MINFER_TYPE_Q5_0> : UnitOff<16> {
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 22 * (size_t)u;
        d = h2f(*(const uint16_t *)b);
        int v5[5];
        ld_run_a2<5>(b + 2, v5);
        uint32_t qh = (uint32_t)v5[0];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int v = v5[1 + i];
            q[i] = (v & 0x0F0F0F0F) | spread4(qh >> (4 * i));
            q[i + 4] = ((v >> 4) & 0x0F0F0F0F) | spread4(qh >> (16 + 4 * i));
        }
    }
};

/* Q5_1: 24-byte blocks, as Q5_0. */
template <> struct Unit<MINFER_TYPE_Q5_1> : UnitMin {
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 24 * (size_t)u;
        uint32_t dm = *(const uint32_t *)b;
        d = h2f((uint16_t)dm);
        m = h2f((uint16_t)(dm >> 16));
        uint32_t qh = (uint32_t)ld_i32_a4(b + 4);
        int4 v4 = make_int4(ld_i32_a4(b + 8), ld_i32_a4(b + 12), ld_i32_a4(b + 16),
                            ld_i32_a4(b + 20));
        int vv[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            q[i] = (vv[i] & 0x0F0F0F0F) | spread4(qh >> (4 * i));
            q[i + 4] = ((vv[i] >> 4) & 0x0F0F0F0F) | spread4(qh >> (16 + 4 * i));
        }
    }
};

template <> struct Unit<MINFER_TYPE_Q8_0> {
    static constexpr int U = 32;
    float d;
    int q[8];
    /* The 34-byte block lies in the 9 aligned words from b rounded down
     * to 4 bytes, its scale in the low or the high half of the first:
     * 9 loads for the unit, none past the block's last word. */
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 34 * (size_t)u;
        const uint32_t lo = ((uint32_t)(uintptr_t)b & 2u) * 8u; /* the scale's bit offset */
        uint32_t w[9];
        ld_words_a4<9>(b, w);
        d = h2f((uint16_t)(w[0] >> lo));
#pragma unroll
        for (int i = 0; i < 8; i++) /* a shift of 32 (clamped) is the next word */
            q[i] = (int)__funnelshift_rc(w[i], w[i + 1], lo + 16u);
    }
    __device__ __forceinline__ float dot(const uint8_t *xrow, int nb, int u) const
    {
        int s = dot8(q, xq_qs(xrow, u));
        return d * xq_ds(xrow, nb, u).x * (float)s;
    }
};

/* Q4_K and Q5_K: unit = group g of a super-block, sub-blocks 2g and 2g+1;
 * the two types share the header (d, dmin, 12 bytes of 6-bit scales and
 * mins) and so the scales and the dot product. */
struct UnitK45 {
    static constexpr int U = 64;
    float d0, d1, m0, m1; /* d*sc, dmin*m of the two sub-blocks */
    int lo[8], hi[8];
    /* b: the super-block, 16-byte aligned (the launchers check the rows;
     * 144 and 176 are multiples of 16). Its 16-byte header as one load:
     * as four 4-byte loads, each of them touched the 8 super-blocks a
     * warp's lanes reach, as many L1 sectors as the 32 bytes of quants. */
    __device__ __forceinline__ void load_scales(const uint8_t *b, int g)
    {
        const int4 h = *(const int4 *)b;
        const uint32_t dd = (uint32_t)h.x;
        float d = h2f((uint16_t)dd), dmin = h2f((uint16_t)(dd >> 16));
        uint32_t s0 = (uint32_t)h.y, s1 = (uint32_t)h.z, s2 = (uint32_t)h.w;
        int a0, b0, a1, b1;
        kscale_pair(s0, s1, s2, g, a0, b0, a1, b1);
        d0 = d * a0; m0 = dmin * b0;
        d1 = d * a1; m1 = dmin * b1;
    }
    __device__ __forceinline__ float dot(const uint8_t *xrow, int nb, int u) const
    {
        int blk = 2 * u; /* 32-blocks: 8 per super-block, 2 per unit */
        int s0 = dot8(lo, xq_qs(xrow, blk)), s1 = dot8(hi, xq_qs(xrow, blk + 1));
        float2 x0 = xq_ds(xrow, nb, blk), x1 = xq_ds(xrow, nb, blk + 1);
        return d0 * x0.x * (float)s0 + d1 * x1.x * (float)s1 - m0 * x0.y - m1 * x1.y;
    }
};

/* Q4_K: 32 qs bytes = sub-blocks 2g (low nibbles) and 2g+1 (high
 * nibbles). 16-byte loads (blocks are 144 B). */
template <> struct Unit<MINFER_TYPE_Q4_K> : UnitK45 {
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 144 * (size_t)(u / 4);
        int g = u % 4;
        const int4 *qs = (const int4 *)(b + 16 + 32 * g);
        int4 a = qs[0], c = qs[1];
        int q[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            lo[i] = q[i] & 0x0F0F0F0F;
            hi[i] = (q[i] >> 4) & 0x0F0F0F0F;
        }
        load_scales(b, g);
    }
};

/* Q5_K: Q4_K's nibbles with a fifth bit from the 32 qh bytes. */
template <> struct Unit<MINFER_TYPE_Q5_K> : UnitK45 {
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 176 * (size_t)(u / 4);
        int g = u % 4;
        const int4 *qs = (const int4 *)(b + 48 + 32 * g);
        int4 a = qs[0], c = qs[1];
        const int4 *qh = (const int4 *)(b + 16);
        int4 e = qh[0], f = qh[1];
        int q[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
        int h[8] = {e.x, e.y, e.z, e.w, f.x, f.y, f.z, f.w};
#pragma unroll
        for (int i = 0; i < 8; i++) {
            lo[i] = (q[i] & 0x0F0F0F0F) | (((h[i] >> (2 * g)) & 0x01010101) << 4);
            hi[i] = ((q[i] >> 4) & 0x0F0F0F0F) | (((h[i] >> (2 * g + 1)) & 0x01010101) << 4);
        }
        load_scales(b, g);
    }
};

/* Each byte of v (all in 0..63) minus 32, as int8 lanes: setting every
 * byte's top bit first keeps the subtraction from borrowing across bytes,
 * and flipping it back leaves the two's-complement result. Three integer
 * ops, where __vsubss4 is emulated with more on sm_90. */
static __device__ __forceinline__ int sub32_bytes(int v)
{
    return (int)((((uint32_t)v | 0x80808080u) - 0x20202020u) ^ 0x80808080u);
}

/* Q6_K: unit = (half h, r0 in {0,1}): 32 ql bytes hold sub-blocks r0 (low
 * nibbles) and r0+2 (high nibbles) of the half; the half's 32 qh bytes
 * give their top two bits. Values are re-centred to int8 (q - 32). */
template <> struct Unit<MINFER_TYPE_Q6_K> {
    static constexpr int U = 64;
    int lo[8], hi[8];
    float d;
    int sc[4];
    __device__ __forceinline__ void load(const uint8_t *row, int u)
    {
        const uint8_t *b = row + 210 * (size_t)(u / 4);
        int hh = (u % 4) / 2, r0 = u % 2;
        const uint8_t *ql = b + 64 * hh + 32 * r0;
        const uint8_t *qh = b + 128 + 32 * hh;
        int L[8], H[8];
        ld_run_a2<8>(ql, L);
        ld_run_a2<8>(qh, H);
#pragma unroll
        for (int i = 0; i < 8; i++) {
            int l = L[i], hb = H[i];
            int a = (l & 0x0F0F0F0F) | (((hb >> (2 * r0)) & 0x03030303) << 4);
            int c = ((l >> 4) & 0x0F0F0F0F) | (((hb >> (2 * r0 + 4)) & 0x03030303) << 4);
            lo[i] = sub32_bytes(a);
            hi[i] = sub32_bytes(c);
        }
        const int8_t *s = (const int8_t *)(b + 192) + 8 * hh + 2 * r0;
        sc[0] = s[0]; sc[1] = s[1]; sc[2] = s[4]; sc[3] = s[5];
        d = h2f(*(const uint16_t *)(b + 208));
    }
    __device__ __forceinline__ float dot(const uint8_t *xrow, int nb, int u) const
    {
        int base = 8 * (u / 4) + 4 * ((u % 4) / 2) + (u % 2);
        const int4 *xa = (const int4 *)xq_qs(xrow, base);
        const int4 *xb = (const int4 *)xq_qs(xrow, base + 2);
        int4 a0 = xa[0], a1 = xa[1], b0 = xb[0], b1 = xb[1];
        int sa0 = __dp4a(lo[3], a0.w, __dp4a(lo[2], a0.z, __dp4a(lo[1], a0.y, __dp4a(lo[0], a0.x, 0))));
        int sa1 = __dp4a(lo[7], a1.w, __dp4a(lo[6], a1.z, __dp4a(lo[5], a1.y, __dp4a(lo[4], a1.x, 0))));
        int sb0 = __dp4a(hi[3], b0.w, __dp4a(hi[2], b0.z, __dp4a(hi[1], b0.y, __dp4a(hi[0], b0.x, 0))));
        int sb1 = __dp4a(hi[7], b1.w, __dp4a(hi[6], b1.z, __dp4a(hi[5], b1.y, __dp4a(hi[4], b1.x, 0))));
        float2 x0 = xq_ds(xrow, nb, base), x1 = xq_ds(xrow, nb, base + 2);
        return d * (x0.x * (float)(sc[0] * sa0 + sc[1] * sa1) +
                    x1.x * (float)(sc[2] * sb0 + sc[3] * sb1));
    }
};

#endif
