/*
 * common.cuh — shared by the kernel translation units: the block layouts
 * of the GGUF types (mirrored from include/minfer/quant.h, which is C and
 * does not compile as CUDA C++; static_asserts pin the sizes), fp16/bf16
 * helpers, the launch-error discipline and per-type dequantization of 8
 * consecutive elements.
 */
#ifndef MINFER_CUDA_COMMON_CUH
#define MINFER_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdio.h>

#include "kernels.h"
#include "minfer/ir.h"

/* Can the sm_90a kernels (gemm-wg.cu, attn-wg.cu) run here: built
 * (MINFER_CUDA_WGMMA, set by CMakeLists.txt for the plugin's own units)
 * and a compute capability 9.0 device. Without MINFER_CUDA_WGMMA their
 * functions do not exist: a call to one must sit under that #ifdef too,
 * or a build without 9.0 fails to link (the plugin links with
 * --no-undefined). */
static inline bool wg_ready(const struct kctx *k)
{
#ifdef MINFER_CUDA_WGMMA
    return k->cc == 90;
#else
    (void)k;
    return false;
#endif
}

/* ---- block layouts (GGUF, packed, little-endian) ---- */

struct bq4_0 { uint16_t d; uint8_t qs[16]; };
struct bq4_1 { uint16_t d, m; uint8_t qs[16]; };
struct bq5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct bq5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct bq8_0 { uint16_t d; int8_t qs[32]; };
struct bq8_1 { uint16_t d, s; int8_t qs[32]; };
struct bq4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct bq5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct bq6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct bq8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
static_assert(sizeof(bq4_0) == 18, "q4_0 layout");
static_assert(sizeof(bq4_1) == 20, "q4_1 layout");
static_assert(sizeof(bq5_0) == 22, "q5_0 layout");
static_assert(sizeof(bq5_1) == 24, "q5_1 layout");
static_assert(sizeof(bq8_0) == 34, "q8_0 layout");
static_assert(sizeof(bq8_1) == 36, "q8_1 layout");
static_assert(sizeof(bq4_K) == 144, "q4_K layout");
static_assert(sizeof(bq5_K) == 176, "q5_K layout");
static_assert(sizeof(bq6_K) == 210, "q6_K layout");
static_assert(sizeof(bq8_K) == 292, "q8_K layout");

/* Device-side activation block (q8_1 style): d and d*sum(q) as float2
 * so the dot products read them with one 8-byte load; qs 16-aligned. */
struct __align__(16) aq8 {
    int8_t qs[32];
};
/* An activation row of K values is K/32 aq8 blocks followed by K/32
 * float2 (d, d*sum) — see k_quantize_q8_1. */

/* ---- scalars ---- */

__device__ __forceinline__ float h2f(uint16_t h)
{
    return __half2float(__ushort_as_half(h));
}
__device__ __forceinline__ float bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}
__device__ __forceinline__ uint16_t f2bf(float f)
{
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}
__device__ __forceinline__ uint16_t f2h(float f)
{
    return __half_as_ushort(__float2half_rn(f));
}

/* 4 bytes from a 2-byte aligned address. */
__device__ __forceinline__ int ld_i32_a2(const void *p)
{
    const uint16_t *q = (const uint16_t *)p;
    return (int)((uint32_t)q[0] | ((uint32_t)q[1] << 16));
}
__device__ __forceinline__ int ld_i32_a4(const void *p)
{
    return *(const int *)p;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Value v of column col into row t of q8_1 activations (k_quantize_q8_1's
 * layout, matvec.cu: nbq blocks of 32 int8, then nbq float2 (d, d * sum))
 * by the 32-value rule: d = amax / 127, q = rint(v / d). The 32 lanes of
 * the warp hold the 32 columns of one block. The one form of that rule:
 * the quantization kernel and the passes that write a product's
 * activations in their epilogue (attention's combines) all call it, so
 * their bytes agree. */
__device__ __forceinline__ void q8_1_store_warp(uint8_t *xq, int64_t t, int nbq, int col, float v,
                                                int lane)
{
    float amax = warp_max(fabsf(v));
    float qd = amax / 127.0f;
    int q = qd != 0.0f ? __float2int_rn(v / qd) : 0;
    float qs = warp_sum((float)q);
    uint8_t *row = xq + (size_t)t * (size_t)nbq * 40;
    ((int8_t *)row)[col] = (int8_t)q;
    if (lane == 0)
        ((float2 *)(row + 32 * (size_t)nbq))[col / 32] = make_float2(qd, qd * qs);
}

/* ---- RoPE (NeoX) arithmetic: every RoPE kernel, and the Q/K/V product
 * group that rotates in its epilogue, so their bits agree ---- */

/* cos and sin of pair i's angle at position p: the one angle expression
 * of every RoPE kernel (table or not), so their bits agree. */
__device__ __forceinline__ void rope_angle(int i, float p, int n_rot, float base, float fscale,
                                           float *cs, float *sn)
{
    float inv = powf(base, -2.0f * (float)i / (float)n_rot);
    sincosf(__fmul_rn(__fmul_rn(p, fscale), inv), sn, cs);
}

/* The pair (a, b) rotated into (o0, o1); explicit roundings, so no kernel
 * contracts it differently. */
__device__ __forceinline__ void rope_rotate(float a, float b, float cs, float sn, float &o0,
                                            float &o1)
{
    o0 = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
    o1 = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs));
}

/* Rotates the pair (a, b) = (x[i], x[i + half]) into o[i], o[i + half]. */
__device__ __forceinline__ void rope_apply(float a, float b, float cs, float sn, float *o, int i,
                                           int half)
{
    rope_rotate(a, b, cs, sn, o[i], o[i + half]);
}

/* A block's arrival at a counter (a word of kctx.tile_count, zero between
 * launches) once its stores are done: every thread's stores made visible
 * device-wide, then one atomic add of `add`. Returns to every thread
 * whether this block completed `total`; that block puts the word back to
 * zero for the next launch and may then read what the others stored, by
 * L2 loads (__ldcg: another SM wrote them). Every thread of the block
 * calls it (two barriers). */
__device__ __forceinline__ bool k_block_arrives_last(unsigned *count, unsigned add,
                                                     unsigned total)
{
    __shared__ unsigned last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        last = atomicAdd(count, add) + add == total;
        if (last)
            *count = 0;
    }
    __syncthreads();
    const bool l = last;
    if (l)
        __threadfence();
    return l;
}

/* Q4_K / Q5_K 6-bit scale and min of sub-block j. */
__device__ __forceinline__ void kscale(const uint8_t *q, int j, int &sc, int &m)
{
    if (j < 4) {
        sc = q[j] & 63;
        m = q[j + 4] & 63;
    } else {
        sc = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
        m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

/* Q4_K / Q5_K sub-block j's scale d * sc and min dmin * m. */
template <typename B> __device__ __forceinline__ void ksub_scale(const B *b, int j, float &d, float &mm)
{
    int sc, m;
    kscale(b->scales, j, sc, m);
    d = h2f(b->d) * (float)sc;
    mm = h2f(b->dmin) * (float)m;
}

/* ---- dequantize 8 consecutive elements [k0, k0+8) of a row ---- */

/* k0 % 8 == 0. Every readable type (k_type_readable). */
template <int T> __device__ __forceinline__ void dq8(const uint8_t *row, int64_t k0, float *o);

template <> __device__ __forceinline__ void dq8<MINFER_TYPE_F32>(const uint8_t *row, int64_t k0, float *o)
{
    const float *p = (const float *)row + k0;
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = p[i];
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_F16>(const uint8_t *row, int64_t k0, float *o)
{
    const uint16_t *p = (const uint16_t *)row + k0;
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = h2f(p[i]);
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_BF16>(const uint8_t *row, int64_t k0, float *o)
{
    const uint16_t *p = (const uint16_t *)row + k0;
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = bf2f(p[i]);
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q4_0>(const uint8_t *row, int64_t k0, float *o)
{
    const bq4_0 *b = (const bq4_0 *)row + k0 / 32;
    int j = (int)(k0 % 32);
    float d = h2f(b->d);
    int hi = j >= 16, s = j & 15;
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = d * (float)(((b->qs[s + i] >> (4 * hi)) & 0xF) - 8);
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q4_1>(const uint8_t *row, int64_t k0, float *o)
{
    const bq4_1 *b = (const bq4_1 *)row + k0 / 32;
    int j = (int)(k0 % 32);
    float d = h2f(b->d), m = h2f(b->m);
    int hi = j >= 16, s = j & 15;
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = d * (float)((b->qs[s + i] >> (4 * hi)) & 0xF) + m;
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q5_0>(const uint8_t *row, int64_t k0, float *o)
{
    const bq5_0 *b = (const bq5_0 *)row + k0 / 32;
    int j = (int)(k0 % 32);
    float d = h2f(b->d);
    uint32_t qh = (uint32_t)b->qh[0] | ((uint32_t)b->qh[1] << 8) | ((uint32_t)b->qh[2] << 16) |
                  ((uint32_t)b->qh[3] << 24);
    int hi = j >= 16, s = j & 15;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = ((b->qs[s + i] >> (4 * hi)) & 0xF) | (((qh >> (j + i)) & 1) << 4);
        o[i] = d * (float)(q - 16);
    }
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q5_1>(const uint8_t *row, int64_t k0, float *o)
{
    const bq5_1 *b = (const bq5_1 *)row + k0 / 32;
    int j = (int)(k0 % 32);
    float d = h2f(b->d), m = h2f(b->m);
    uint32_t qh = (uint32_t)b->qh[0] | ((uint32_t)b->qh[1] << 8) | ((uint32_t)b->qh[2] << 16) |
                  ((uint32_t)b->qh[3] << 24);
    int hi = j >= 16, s = j & 15;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = ((b->qs[s + i] >> (4 * hi)) & 0xF) | (((qh >> (j + i)) & 1) << 4);
        o[i] = d * (float)q + m;
    }
}
/* Q8_0 and Q8_1 (whose sum field dequantization does not read). */
template <typename B> __device__ __forceinline__ void dq8_q8(const uint8_t *row, int64_t k0, float *o)
{
    const B *b = (const B *)row + k0 / 32;
    int j = (int)(k0 % 32);
    float d = h2f(b->d);
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = d * (float)b->qs[j + i];
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q8_0>(const uint8_t *row, int64_t k0, float *o)
{
    dq8_q8<bq8_0>(row, k0, o);
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q8_1>(const uint8_t *row, int64_t k0, float *o)
{
    dq8_q8<bq8_1>(row, k0, o);
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q8_K>(const uint8_t *row, int64_t k0, float *o)
{
    const bq8_K *b = (const bq8_K *)row + k0 / 256;
    int j = (int)(k0 % 256);
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = b->d * (float)b->qs[j + i];
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q4_K>(const uint8_t *row, int64_t k0, float *o)
{
    const bq4_K *b = (const bq4_K *)row + k0 / 256;
    int j = (int)(k0 % 256);
    int sub = j / 32, g = sub / 2, hi = sub & 1, l = j % 32;
    float d, mm;
    ksub_scale(b, sub, d, mm);
#pragma unroll
    for (int i = 0; i < 8; i++)
        o[i] = d * (float)((b->qs[32 * g + l + i] >> (4 * hi)) & 0xF) - mm;
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q5_K>(const uint8_t *row, int64_t k0, float *o)
{
    const bq5_K *b = (const bq5_K *)row + k0 / 256;
    int j = (int)(k0 % 256);
    int sub = j / 32, g = sub / 2, hi = sub & 1, l = j % 32;
    float d, mm;
    ksub_scale(b, sub, d, mm);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = ((b->qs[32 * g + l + i] >> (4 * hi)) & 0xF) | (((b->qh[l + i] >> sub) & 1) << 4);
        o[i] = d * (float)q - mm;
    }
}
template <> __device__ __forceinline__ void dq8<MINFER_TYPE_Q6_K>(const uint8_t *row, int64_t k0, float *o)
{
    const bq6_K *b = (const bq6_K *)row + k0 / 256;
    int j = (int)(k0 % 256);
    int h = j / 128, r = (j % 128) / 32, l = j % 32;
    const uint8_t *ql = b->ql + 64 * h + 32 * (r & 1);
    const uint8_t *qh = b->qh + 32 * h;
    float d = h2f(b->d) * (float)b->scales[8 * h + 2 * r + l / 16];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        int q = ((ql[l + i] >> (4 * (r >> 1))) & 0xF) | (((qh[l + i] >> (2 * r)) & 3) << 4);
        o[i] = d * (float)(q - 32);
    }
}

/* ---- launch discipline ---- */

/* Before the launch at `site`: refuses it with the test hook's injected
 * fault, or with an error an earlier runtime call left latched. */
static inline int k_pre(struct kctx *k, const char *site)
{
    if (cu_launch_injected()) {
        snprintf(k->err, k->err_len, "%s: launch failed: injected fault (test hook "
                 "minfer_cuda_test_fail_nth)", site);
        return -1;
    }
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) {
        snprintf(k->err, k->err_len,
                 "%s: refused to launch: a CUDA error was latched before it by an earlier "
                 "runtime call (not this kernel): %s (%s)",
                 site, cudaGetErrorString(e), cudaGetErrorName(e));
        return -1;
    }
    return 0;
}
/* Reports e, the error of the launch made at `site`, and clears the latch
 * it left. */
static inline int k_launch_err(struct kctx *k, const char *site, cudaError_t e)
{
    if (e == cudaSuccess)
        return 0;
    cudaGetLastError();
    snprintf(k->err, k->err_len, "%s: launch failed: %s (%s)", site, cudaGetErrorString(e),
             cudaGetErrorName(e));
    return -1;
}
/* Reads the launch error of the launch just made at `site`. A latch that
 * predates the launch was already reported by k_pre (so this one is the
 * launch's own). Returns 0 or -1 with the message in k->err. */
static inline int k_post(struct kctx *k, const char *site)
{
    k->launches++;
    k->late_next = 0;
    return k_launch_err(k, site, cudaGetLastError());
}

#define KSTREAM(k) ((cudaStream_t)(k)->stream)

/* ---- programmatic dependent launch (sm_90) ----
 *
 * With k->dep_launch set (k_dep_probe), every launch lets the runtime
 * start the kernel while its predecessor in the stream is still running:
 * its blocks become resident during the predecessor's tail instead of
 * after it, which hides the fixed cost each decode launch otherwise pays
 * (docs/PERF.md). The price is a rule every kernel keeps:
 *
 *   k_dep_enter() is the first thing a kernel does, in every block,
 *   before any early return; before it a kernel computes only from its
 *   parameters (no store, and no load but of memory no kernel writes,
 *   which its caller vouches for: rms_norm_q8_1_kernel's w_fixed).
 *
 * k_dep_enter waits until the predecessor grid has completed and its
 * writes are visible (griddepcontrol.wait; the predecessor waited for its
 * own, so the guarantee covers the whole stream), then allows the
 * successor to launch (griddepcontrol.launch_dependents), which can only
 * take SM slots that this grid's blocks, all already started, leave. A
 * kernel launched without the attribute, or built for an architecture
 * below 9.0, returns from both at once. */
__device__ __forceinline__ void k_dep_enter()
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* The rule split in two, for a kernel whose loads up to its first store
 * read only what kernels launched two or more before it wrote (weights,
 * and activations the launch before did not write): with late set it lets
 * its successor launch at once, runs its main loop during its
 * predecessor's tail, and calls k_dep_late_wait(late) before its first
 * store and before reading anything else (an epilogue's addend, split-K
 * planes). Its predecessor's blocks all passed their own wait before
 * this kernel could launch, so what came before that predecessor is
 * complete; and its successor still waits for it, which waited for its
 * predecessor. Only a predecessor that itself waited first gives that
 * guarantee: exec.c's gemm_late tracks it (kctx: launches, late_launch). */
__device__ __forceinline__ void k_dep_enter(int late)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (!late)
        asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
__device__ __forceinline__ void k_dep_late_wait(int late)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (late)
        asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* Benchmark hook's switch (ops.cu, k_tune_dep_launch): 0 turns the
 * attribute off process-wide. */
extern int g_k_dep_launch;

/* Launches kern<<<grid, block, smem, stream>>>(args...), as a programmatic
 * dependent of the kernel before it where the device allows (above), and
 * reads its error. */
#define KLAUNCH(k, site, kern, grid, block, smem, ...)                                     \
    do {                                                                                   \
        if (k_pre((k), (site)))                                                            \
            return -1;                                                                     \
        if ((k)->dep_launch && g_k_dep_launch) {                                           \
            cudaLaunchAttribute at_[1];                                                    \
            at_[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;                \
            at_[0].val.programmaticStreamSerializationAllowed = 1;                         \
            cudaLaunchConfig_t cfg_ = {};                                                  \
            cfg_.gridDim = dim3(grid);                                                     \
            cfg_.blockDim = dim3(block);                                                   \
            cfg_.dynamicSmemBytes = (smem);                                                \
            cfg_.stream = KSTREAM(k);                                                      \
            cfg_.attrs = at_;                                                              \
            cfg_.numAttrs = 1;                                                             \
            if (k_launch_err((k), (site), cudaLaunchKernelEx(&cfg_, kern, __VA_ARGS__)))   \
                return -1;                                                                 \
        } else {                                                                           \
            kern<<<(grid), (block), (smem), KSTREAM(k)>>>(__VA_ARGS__);                    \
        }                                                                                  \
        if (k_post((k), (site)))                                                           \
            return -1;                                                                     \
    } while (0)

/* The >48 KiB dynamic shared-memory opt-in of one kernel (0 = ok, else
 * the reason in k->err, naming site). Called from k_prepare, before any
 * capture window can exist. */
static inline int k_smem_optin(struct kctx *k, const void *kernel, int bytes, const char *site)
{
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         bytes);
    if (e == cudaSuccess)
        return 0;
    snprintf(k->err, k->err_len,
             "%s: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d) failed: %s (%s)", site,
             bytes, cudaGetErrorString(e), cudaGetErrorName(e));
    cudaGetLastError();
    return -1;
}

static inline int k_fail(struct kctx *k, const char *site, const char *why)
{
    snprintf(k->err, k->err_len, "%s: %s", site, why);
    return -1;
}

/* Calls F<TYPE>(args) for a runtime weight type; unknown types -> -2. */
#define K_TYPE_CASE(T, F, ...)                                                             \
    case T:                                                                                \
        return F<T>(__VA_ARGS__);

/* K_TYPE_CASE for each float weight type, and for each quantized one
 * (the types with a dp4a matvec unit and dq8). */
#define K_FLOAT_CASES(F, ...)                                                              \
    K_TYPE_CASE(MINFER_TYPE_F32, F, __VA_ARGS__)                                           \
    K_TYPE_CASE(MINFER_TYPE_F16, F, __VA_ARGS__)                                           \
    K_TYPE_CASE(MINFER_TYPE_BF16, F, __VA_ARGS__)
#define K_QUANT_CASES(F, ...)                                                              \
    K_TYPE_CASE(MINFER_TYPE_Q4_0, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q4_1, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q5_0, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q5_1, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q8_0, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q4_K, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q5_K, F, __VA_ARGS__)                                          \
    K_TYPE_CASE(MINFER_TYPE_Q6_K, F, __VA_ARGS__)

#endif /* MINFER_CUDA_COMMON_CUH */
