/*
 * attn.cuh — device helpers shared by the attention kernels (attn.cu,
 * attn-mma.cu): the tensor-core PTX wrappers (sm_80+) and the KV cache
 * element loads. Names carry an fa_ prefix so they never meet gemm.cu's
 * file-local wrappers of the same instructions.
 */
#ifndef MINFER_CUDA_ATTN_CUH
#define MINFER_CUDA_ATTN_CUH

#include "common.cuh"

__device__ __forceinline__ unsigned fa_smem(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared without passing through registers; ok ==
 * false writes zeros (cells past the visible end: their V rows must be
 * finite zeros, P = 0 times a stale NaN would still be NaN). */
__device__ __forceinline__ void fa_cp16(void *s, const void *g, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(fa_smem(s)), "l"(g),
                 "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void fa_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N> __device__ __forceinline__ void fa_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 address the rows of matrix i. */
__device__ __forceinline__ void fa_ldsm4(unsigned (&r)[4], const void *s)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(s)));
}
/* The same, each matrix transposed (a row-major [k][n] tile as the "col"
 * B operand). */
__device__ __forceinline__ void fa_ldsm4t(unsigned (&r)[4], const void *s)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem(s)));
}
/* c[16x8] += a[16x16] * b[16x8], f16 inputs, f32 accumulation. */
__device__ __forceinline__ void fa_mma(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                       unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* Two floats as the halves of one register, a in the low half (the lower
 * column of an mma fragment). */
__device__ __forceinline__ unsigned fa_pack(float a, float b)
{
    return (unsigned)__half_as_ushort(__float2half_rn(a)) |
           ((unsigned)__half_as_ushort(__float2half_rn(b)) << 16);
}

/* Four consecutive values of a cache row, from element idx (idx % 4 == 0);
 * L: 0 = F32, 1 = F16, 2 = Q8_0 (read in place, no dequantize pass). */
template <int L> __device__ __forceinline__ float4 fa_load4(const uint8_t *row, int idx)
{
    if (L == 0)
        return *(const float4 *)(row + (size_t)idx * 4);
    if (L == 1) {
        uint2 v = *(const uint2 *)(row + (size_t)idx * 2);
        return make_float4(h2f((uint16_t)v.x), h2f((uint16_t)(v.x >> 16)), h2f((uint16_t)v.y),
                           h2f((uint16_t)(v.y >> 16)));
    }
    const bq8_0 *b = (const bq8_0 *)row + idx / 32;
    float d = h2f(b->d);
    int v = ld_i32_a2(b->qs + idx % 32);
    return make_float4(d * (float)(int8_t)v, d * (float)(int8_t)(v >> 8),
                       d * (float)(int8_t)(v >> 16), d * (float)(int8_t)(v >> 24));
}

#endif /* MINFER_CUDA_ATTN_CUH */
