/*
 * hooks.c — the CUDA plugin's get_proc extensions: process-wide capture,
 * replay and fusion counters, and the test hooks ("minfer_cuda_test_*")
 * that tests use to reach paths a healthy run never takes. Nothing here
 * is part of the plugin ABI; a caller asks by name and checks for NULL.
 */
#include <string.h>

#include "cuda-internal.h"

struct cuda_counters cuda_count;

/* "minfer_cuda_test_fail_next_capture": void f(int n) — the next n graph
 * captures (any instance) fail inside their window, as a real fault
 * would. "minfer_cuda_graph_stats": void f(struct minfer_cuda_graph_stats
 * *out) — process-wide capture/replay/abort counts. Tests only. */
static void x_fail_next_capture(int n)
{
    __atomic_store_n(&cuda_count.fail_next_capture, n, __ATOMIC_RELAXED);
}

/* "minfer_cuda_test_tune_gemm": void f(int bk, int splits, int bn) — forces
 * the prefill GEMM's variant process-wide (k_tune_gemm's meaning; 0, 0, 0:
 * the per-shape choice), so the op tests can check every one. Tests only. */
static void x_tune_gemm(int bk, int splits, int bn)
{
    k_tune_gemm(bk, splits, bn);
}

/* "minfer_cuda_test_tune_attn_prefill": void f(int v) — forces the
 * tensor-core prefill attention's variant process-wide
 * (k_tune_attn_prefill's meaning; 0: the default). Tests only. */
static void x_tune_attn_prefill(int v)
{
    k_tune_attn_prefill(v);
}

/* "minfer_cuda_test_fail_nth": void f(uint64_t n) — the n-th device-layer
 * call from now fails once (device.h, cu_test_fail_nth); 0 disarms.
 * "minfer_cuda_test_device_calls": uint64_t f(void) — device-layer calls
 * so far, so a test can count a workload's calls and sweep each. Tests
 * only (tests/test-cuda-faults.c). */
static void x_fail_nth(uint64_t n)
{
    cu_test_fail_nth(n);
}

static uint64_t x_device_calls(void)
{
    return cu_test_calls();
}

static void x_graph_stats(struct minfer_cuda_graph_stats *out)
{
    if (!out)
        return;
    out->captures = __atomic_load_n(&cuda_count.graph.captures, __ATOMIC_RELAXED);
    out->replays = __atomic_load_n(&cuda_count.graph.replays, __ATOMIC_RELAXED);
    out->aborts = __atomic_load_n(&cuda_count.graph.aborts, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_norm_ropes": uint64_t f(void) — (q norm, k norm,
 * q RoPE, k RoPE) runs captured as one launch (process-wide). */
static uint64_t x_fused_norm_ropes(void)
{
    return __atomic_load_n(&cuda_count.norm_ropes, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_rope_seq": uint64_t f(void) — RoPE q + k pairs whose
 * buffers overlap, captured as one read-first launch (process-wide). */
static uint64_t x_fused_rope_seq(void)
{
    return __atomic_load_n(&cuda_count.rope_seq, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_rope_kv": uint64_t f(void) — norm/RoPE launches that
 * also ran the K and V stores after them (process-wide). */
static uint64_t x_fused_rope_kv(void)
{
    return __atomic_load_n(&cuda_count.rope_kv, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_rope_tokens": uint64_t f(void) — norm/RoPE launches
 * of several tokens, one block each (a batched decode; process-wide). */
static uint64_t x_fused_rope_tokens(void)
{
    return __atomic_load_n(&cuda_count.rope_tokens, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_rope_head_blocks": uint64_t f(void) — one token's
 * norm/RoPE/KV-store groups run as blocks of heads (process-wide). */
static uint64_t x_fused_rope_head_blocks(void)
{
    return __atomic_load_n(&cuda_count.rope_head_blocks, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_groups": uint64_t f(void) — runs of decode products
 * of one x (Q, K and V) captured as one launch (process-wide). */
static uint64_t x_fused_groups(void)
{
    return __atomic_load_n(&cuda_count.groups, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_qkv_ropes": uint64_t f(void) — of those, the ones
 * that also ran the RoPE of q and k and the KV stores (process-wide). */
static uint64_t x_fused_qkv_ropes(void)
{
    return __atomic_load_n(&cuda_count.qkv_ropes, __ATOMIC_RELAXED);
}

/* "minfer_cuda_fused_gemm_groups": uint64_t f(void) — the same at 9-16
 * tokens (batched decode), run as one gemm-i8.cu launch (process-wide). */
static uint64_t x_fused_gemm_groups(void)
{
    return __atomic_load_n(&cuda_count.gemm_groups, __ATOMIC_RELAXED);
}

/* "minfer_cuda_shared_x": uint64_t f(void) — products that found their
 * activations already converted (be->xq), in capture windows and direct
 * execution alike. "minfer_cuda_glu_gemms": uint64_t f(void) — gate/up
 * pairs run as one GEMM launch (k_gemm_glu). "minfer_cuda_glu_tails":
 * uint64_t f(void) — those of them whose last wave's tiles ran in parts
 * of K. Process-wide. */
static uint64_t x_shared_x(void)
{
    return __atomic_load_n(&cuda_count.shared_x, __ATOMIC_RELAXED);
}
static uint64_t x_glu_gemms(void)
{
    return __atomic_load_n(&cuda_count.glu_gemms, __ATOMIC_RELAXED);
}
static uint64_t x_glu_tails(void)
{
    return __atomic_load_n(&cuda_count.glu_tails, __ATOMIC_RELAXED);
}

/* "minfer_cuda_test_fake_cc": void f(int major, int minor) — every device
 * reports this compute capability to probe and create (-1, -1: the real
 * one), so a test on any GPU can see a capability the build lacks refused.
 * Not thread-safe; tests only.
 * "minfer_cuda_test_arch_runs": int f(int major, int minor, const char
 * *archs, char *why, size_t why_len) — the check probe makes, on any list
 * of architectures (no GPU needed). "minfer_cuda_built_archs": const char
 * *f(void) — the architectures this build carries. */
static void x_fake_cc(int major, int minor)
{
    cuda_arch_fake(major, minor);
}

void *cuda_get_proc(const char *name)
{
    if (!name)
        return NULL;
    if (!strcmp(name, "minfer_cuda_test_tune_gemm"))
        return (void *)x_tune_gemm;
    if (!strcmp(name, "minfer_cuda_test_tune_attn_prefill"))
        return (void *)x_tune_attn_prefill;
    if (!strcmp(name, "minfer_cuda_test_fail_next_capture"))
        return (void *)x_fail_next_capture;
    if (!strcmp(name, "minfer_cuda_test_fail_nth"))
        return (void *)x_fail_nth;
    if (!strcmp(name, "minfer_cuda_test_device_calls"))
        return (void *)x_device_calls;
    if (!strcmp(name, "minfer_cuda_graph_stats"))
        return (void *)x_graph_stats;
    if (!strcmp(name, "minfer_cuda_fused_norm_ropes"))
        return (void *)x_fused_norm_ropes;
    if (!strcmp(name, "minfer_cuda_fused_rope_seq"))
        return (void *)x_fused_rope_seq;
    if (!strcmp(name, "minfer_cuda_fused_rope_kv"))
        return (void *)x_fused_rope_kv;
    if (!strcmp(name, "minfer_cuda_fused_rope_tokens"))
        return (void *)x_fused_rope_tokens;
    if (!strcmp(name, "minfer_cuda_fused_rope_head_blocks"))
        return (void *)x_fused_rope_head_blocks;
    if (!strcmp(name, "minfer_cuda_test_dead_from"))
        return (void *)cuda_dead_from;
    if (!strcmp(name, "minfer_cuda_test_head_blocks"))
        return (void *)cuda_head_blocks;
    if (!strcmp(name, "minfer_cuda_fused_groups"))
        return (void *)x_fused_groups;
    if (!strcmp(name, "minfer_cuda_fused_qkv_ropes"))
        return (void *)x_fused_qkv_ropes;
    if (!strcmp(name, "minfer_cuda_fused_gemm_groups"))
        return (void *)x_fused_gemm_groups;
    if (!strcmp(name, "minfer_cuda_shared_x"))
        return (void *)x_shared_x;
    if (!strcmp(name, "minfer_cuda_glu_gemms"))
        return (void *)x_glu_gemms;
    if (!strcmp(name, "minfer_cuda_glu_tails"))
        return (void *)x_glu_tails;
    if (!strcmp(name, "minfer_cuda_test_fake_cc"))
        return (void *)x_fake_cc;
    if (!strcmp(name, "minfer_cuda_test_arch_runs"))
        return (void *)cuda_arch_runs;
    if (!strcmp(name, "minfer_cuda_built_archs"))
        return (void *)cuda_built_archs;
    return NULL;
}
