/*
 * attn.cuh — device helpers shared by the attention kernels (attn.cu,
 * attn-mma.cu): the KV cache element loads (the PTX wrappers are
 * mma.cuh's).
 */
#ifndef MINFER_CUDA_ATTN_CUH
#define MINFER_CUDA_ATTN_CUH

#include "common.cuh"
#include "mma.cuh"

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
