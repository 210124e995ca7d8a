/*
 * attn-wg.cu — attn-fa.cuh's prefill attention in its wgmma form, compiled
 * for sm_90a alone (CMakeLists.txt, as gemm-wg.cu); attn-mma.cu launches
 * it only on a 9.0 device (wg_ready).
 */
#define FA_WG_ONLY 1 /* no body for any other target */
#include "attn-fa.cuh"

template <int HD, int MINB> static fa_kernel_fn fa_wg_of(uint32_t kv_type)
{
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return fa_prefill<HD, 0, MINB, 1>;
    case MINFER_TYPE_F16:
        return fa_prefill<HD, 1, MINB, 1>;
    default:
        return fa_prefill<HD, 2, MINB, 1>;
    }
}

fa_kernel_fn fa_wg_kernel(int hd, uint32_t kv_type, int minb)
{
    if (hd != 128)
        return NULL;
    return minb == 3 ? fa_wg_of<128, 3>(kv_type) : fa_wg_of<128, 1>(kv_type);
}
