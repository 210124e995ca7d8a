/*
 * attn-wg.cu — attn-fa.cuh's prefill attention in its wgmma form, compiled
 * for sm_90a alone (CMakeLists.txt, as gemm-wg.cu); attn-mma.cu launches
 * it only on a 9.0 device (wg_ready), for head dim 128. Launch bounds of
 * 3 blocks per SM (168 registers, none spilled): 12 warps per SM ran it
 * 8% faster than 8 (docs/PERF.md).
 */
#define FA_WG_ONLY 1 /* no body for any other target */
#include "attn-fa.cuh"

fa_kernel_fn fa_wg_kernel(int hd, uint32_t kv_type)
{
    if (hd != 128)
        return NULL;
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return fa_prefill<128, 0, 3, 1>;
    case MINFER_TYPE_F16:
        return fa_prefill<128, 1, 3, 1>;
    default:
        return fa_prefill<128, 2, 3, 1>;
    }
}
