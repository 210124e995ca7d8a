/*
 * test-matvec-units.cpp — the CUDA decode products' weight units
 * (backends/cuda/kernels/matvec-units.cuh) run on the host: for each dp4a
 * weight type, a row loaded unit by unit and dotted with q8_1 activations
 * must give the dot product of the CPU's dequantization of that row with
 * the same activations. The units' integer arithmetic (nibble and high-bit
 * extraction, 6-bit scales and mins, q6_K's re-centring, which activation
 * block a unit meets) is thereby checked on machines without a GPU; the
 * kernels around the units are test-backend-ops' business on a device.
 *
 * The CUDA intrinsics the units use are stood in for below with their
 * documented semantics.
 */
#include <check.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "minfer/quant-ref.h"
#include "minfer/quant.h"
#include "minfer/types.h"
#include "testutil.h"
Suite *matvec_units_suite(void);
}

/* ---- host stand-ins for what the units take from CUDA and common.cuh ---- */

#define __device__
#define __forceinline__ inline

struct alignas(16) int4 {
    int x, y, z, w;
};
struct alignas(8) float2 {
    float x, y;
};
static inline int4 make_int4(int x, int y, int z, int w)
{
    return int4{x, y, z, w};
}
/* c + the sum of the four signed byte products */
static inline int __dp4a(int a, int b, int c)
{
    for (int i = 0; i < 4; i++)
        c += (int)(int8_t)(uint8_t)((uint32_t)a >> (8 * i)) *
             (int)(int8_t)(uint8_t)((uint32_t)b >> (8 * i));
    return c;
}
/* the low 32 bits of (hi:lo) >> (sh mod 32) */
static inline uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, uint32_t sh)
{
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh & 31));
}
/* the low 32 bits of (hi:lo) >> min(sh, 32) */
static inline uint32_t __funnelshift_rc(uint32_t lo, uint32_t hi, uint32_t sh)
{
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> (sh < 32 ? sh : 32));
}
static inline float h2f(uint16_t h)
{
    return minfer_fp16_to_fp32(h);
}
static inline int ld_i32_a4(const void *p)
{
    int v;
    memcpy(&v, p, 4);
    return v;
}

#include "kernels/matvec-units.cuh"

/* ---- the check ---- */

/* q8_1 activations of x as the device lays them out (matvec-units.cuh):
 * nb blocks of 32 int8, then nb (d, d * sum(q)); *xd gets each value as
 * the units see it, d * q. */
static void quantize_x(const std::vector<float> &x, uint8_t *xq, std::vector<double> &xd)
{
    const int nb = (int)x.size() / 32;
    for (int b = 0; b < nb; b++) {
        float amax = 0.0f;
        for (int i = 0; i < 32; i++)
            amax = std::fmax(amax, std::fabs(x[32 * b + i]));
        const float d = amax / 127.0f;
        int sum = 0;
        for (int i = 0; i < 32; i++) {
            const int q = d > 0.0f ? (int)std::lrint(x[32 * b + i] / d) : 0;
            ((int8_t *)xq)[32 * b + i] = (int8_t)q;
            sum += q;
            xd[32 * b + i] = (double)d * q;
        }
        const float2 ds = {d, d * (float)sum};
        memcpy(xq + 32 * (size_t)nb + 8 * (size_t)b, &ds, sizeof(ds));
    }
}

/* Two rows of K values of type T, the second right after the first (so a
 * type whose blocks are 2-byte aligned meets a row that is not 4-byte
 * aligned when the row's size is not a multiple of 4), each against the
 * CPU reference; scale sets the weights' magnitude. */
template <int T> static void check_rows(int64_t K, float scale, unsigned seed)
{
    const size_t rs = minfer_row_size((uint32_t)T, K);
    /* 16-byte aligned base as the device's allocations; ld_run_a2 may read
     * 4 bytes past a run (the device layer pads by 16) */
    std::vector<int4> wbuf((2 * rs + 32) / sizeof(int4) + 1);
    uint8_t *rows = (uint8_t *)wbuf.data();
    std::vector<int4> xbuf((K / 32 * 40 + 32) / sizeof(int4) + 1);
    uint8_t *xq = (uint8_t *)xbuf.data();

    srand(seed);
    std::vector<float> w(2 * K), x(K), wd(K);
    std::vector<double> xd(K);
    for (auto &v : w)
        v = scale * ((float)rand() / (float)RAND_MAX - 0.4f);
    for (auto &v : x)
        v = 3.0f * ((float)rand() / (float)RAND_MAX - 0.5f);
    quantize_x(x, xq, xd);
    const int nb = (int)(K / 32), nunits = (int)(K / Unit<T>::U);
    for (int r = 0; r < 2; r++) {
        uint8_t *row = rows + r * rs;
        ck_assert_int_eq(minfer_quantize_row_ref((uint32_t)T, &w[(size_t)r * K], row, K), MINFER_OK);
        ck_assert_int_eq(minfer_dequantize_row((uint32_t)T, row, wd.data(), K), MINFER_OK);
        double ref = 0.0, mag = 0.0;
        for (int64_t i = 0; i < K; i++) {
            ref += (double)wd[i] * xd[i];
            mag += std::fabs((double)wd[i] * xd[i]);
        }
        double got = 0.0;
        for (int u = 0; u < nunits; u++) {
            Unit<T> unit;
            unit.load(row, u);
            got += unit.dot(xq, nb, u);
        }
        ck_assert_msg(std::fabs(got - ref) <= 1e-5 * mag + 1e-6,
                      "type %d, K %lld, row %d (%s-byte aligned): units give %.9g, the CPU %.9g",
                      T, (long long)K, r, ((uintptr_t)row & 3) ? "2" : "4", got, ref);
    }
}

/* The 32-value types at 137 blocks a row (odd: the second row of a 2-byte
 * aligned type starts 2 bytes off a word), the super-block types at 17;
 * weights of magnitude 1 and 0.01 (the K-quants' 6-bit scales and mins). */
static const struct {
    void (*check)(int64_t K, float scale, unsigned seed);
    int64_t K;
} unit_cases[] = {
    {check_rows<MINFER_TYPE_Q4_0>, 137 * 32}, {check_rows<MINFER_TYPE_Q4_1>, 137 * 32},
    {check_rows<MINFER_TYPE_Q5_0>, 137 * 32}, {check_rows<MINFER_TYPE_Q5_1>, 137 * 32},
    {check_rows<MINFER_TYPE_Q8_0>, 137 * 32}, {check_rows<MINFER_TYPE_Q4_K>, 17 * 256},
    {check_rows<MINFER_TYPE_Q5_K>, 17 * 256}, {check_rows<MINFER_TYPE_Q6_K>, 17 * 256},
};

START_TEST(test_units_match_cpu)
{
    unit_cases[_i].check(unit_cases[_i].K, 1.0f, 1 + 2 * (unsigned)_i);
    unit_cases[_i].check(unit_cases[_i].K, 0.01f, 2 + 2 * (unsigned)_i);
}
END_TEST

Suite *matvec_units_suite(void)
{
    Suite *s = suite_create("matvec_units");
    TCase *tc = tcase_create("units");
    tcase_add_loop_test(tc, test_units_match_cpu, 0,
                        (int)(sizeof(unit_cases) / sizeof(unit_cases[0])));
    suite_add_tcase(s, tc);
    return s;
}
