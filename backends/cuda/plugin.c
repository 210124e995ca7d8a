/*
 * plugin.c — libminfer-cuda.so's entry point and ABI table: probe, the
 * devices, instances (one device, one stream, one pool each), device
 * buffers, the weight registry, KV cell copies and last-error text. What
 * a node may be is validate.c's, how it runs exec.c's, window capture
 * and replay graph.c's; the CUDA runtime is reached only through
 * device.c.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-internal.h"

#ifndef MINFER_CUDA_PLUGIN_VERSION
#define MINFER_CUDA_PLUGIN_VERSION "0.1.0"
#endif

const struct minfer_host *cuda_host;
static char g_err[512]; /* errors of create (be == NULL) */

/* ---- plugin slots ---- */

/* Cheap (no context): some device, and one whose compute capability the
 * built kernels run on (arch.c); otherwise 0 and why, naming the first
 * device refused and the -DMINFER_CUDA_ARCHS that would serve it. */
static int p_probe(char *why, size_t why_len)
{
    int n = cu_probe(why, why_len);
    if (n <= 0)
        return 0;
    char first[512] = "";
    for (int d = 0; d < n; d++) {
        char how[512];
        if (cuda_device_runs(d, how, sizeof how))
            return 100;
        if (!first[0])
            snprintf(first, sizeof first, "%s", how);
    }
    if (why)
        snprintf(why, why_len, "no CUDA device this build runs on (%d device%s): %s", n,
                 n == 1 ? "" : "s", first);
    return 0;
}

static int p_device_count(void)
{
    return cu_probe(NULL, 0);
}

static minfer_status p_device_info(int device, struct minfer_device_info *out)
{
    if (!out)
        return MINFER_ERR_INVALID_ARG;
    return cu_device_info(device, out, g_err, sizeof(g_err));
}

static minfer_status p_create(const struct minfer_backend_config *cfg, struct minfer_backend **out)
{
    if (!out)
        return MINFER_ERR_INVALID_ARG;
    *out = NULL;
    int device = cfg ? cfg->device : 0;
    char how[400];
    if (!cuda_device_runs(device, how, sizeof how)) {
        snprintf(g_err, sizeof(g_err), "cuda: %s", how);
        return MINFER_ERR_UNSUPPORTED;
    }
    struct minfer_backend *be = calloc(1, sizeof(*be));
    if (!be) {
        snprintf(g_err, sizeof(g_err), "cuda: out of host memory creating an instance");
        return MINFER_ERR_NO_MEMORY;
    }
    be->c = cu_ctx_new(device, g_err, sizeof(g_err));
    if (!be->c) {
        free(be);
        return strstr(g_err, "no CUDA device") ? MINFER_ERR_UNSUPPORTED : MINFER_ERR_BACKEND;
    }
    const char *off = secure_getenv("MINFER_CUDA_NO_GRAPHS");
    be->graphs_off = (cfg && (cfg->flags & MINFER_BACKEND_CFG_NO_GRAPHS)) ||
                     (off && *off && strcmp(off, "0"));
    const char *nf = secure_getenv("MINFER_CUDA_NO_FUSE");
    be->fuse_off = nf && *nf && strcmp(nf, "0");
    const char *note = cu_ctx_error(be->c);
    if (note[0] && cuda_host && cuda_host->log)
        cuda_host->log(MINFER_LOG_WARN, "%s", note);
    cu_ctx_clear_error(be->c);
    *out = be;
    return MINFER_OK;
}

static void p_destroy(struct minfer_backend *be)
{
    if (!be)
        return;
    cuda_graphs_drop(be);
    cu_ctx_free(be->c);
    free(be);
}

static bool p_supports_op(struct minfer_backend *be, const struct minfer_node *node)
{
    (void)be;
    return node && cuda_validate(node, 0, NULL, 0) == 0;
}

static minfer_status p_execute_node(struct minfer_backend *be, const struct minfer_node *n)
{
    if (!be || !n)
        return MINFER_ERR_INVALID_ARG;
    char why[400];
    cu_ctx_clear_error(be->c);
    if (cuda_validate(n, 1, why, sizeof(why)))
        return cuda_node_fail(be, n, MINFER_ERR_UNSUPPORTED, why);
    /* be->xq stays valid across nodes (Q, K and V, gate and up share one
     * conversion of their x) unless this node writes into its x */
    minfer_status st = cuda_exec(be, n, cu_ctx_kctx(be->c));
    if (st == MINFER_OK)
        cuda_xq_note_write(be, n->dst);
    else
        be->xq.valid = false;
    return st;
}

/* ---- KV cell copies ---- */

static minfer_status p_copy_cells(struct minfer_backend *be, void *kv_base, size_t row_bytes,
                                  uint32_t src, uint32_t dst, uint32_t n)
{
    if (!be || !kv_base)
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    be->xq.valid = false; /* every write the nodes do not make drops the shared activations */
    if (n == 0 || src == dst || row_bytes == 0)
        return MINFER_OK;
    if ((uint64_t)n > SIZE_MAX / row_bytes ||
        (uint64_t)(src > dst ? src : dst) + n > SIZE_MAX / row_bytes)
        return cu_ctx_fail(be->c, MINFER_ERR_RANGE,
                           "cuda: copy_cells of %u cells of %zu bytes from %u to %u overflows", n,
                           row_bytes, src, dst);
    char *base = kv_base;
    uint32_t gap = src > dst ? src - dst : dst - src;
    /* overlapping ranges: copy in chunks of gap cells that never overlap,
     * from the end when moving up, from the start when moving down */
    uint32_t step = gap < n ? gap : n;
    for (uint32_t done = 0; done < n; done += step) {
        uint32_t m = n - done < step ? n - done : step;
        uint32_t off = dst > src ? n - done - m : done;
        minfer_status st = cu_copy_d2d(be->c, base + (size_t)(dst + off) * row_bytes,
                                       base + (size_t)(src + off) * row_bytes,
                                       (size_t)m * row_bytes);
        if (st != MINFER_OK)
            return st;
    }
    return MINFER_OK;
}

/* ---- buffers, weights, errors, the table ---- */

static minfer_status p_buffer_alloc(struct minfer_backend *be, size_t size, void **base)
{
    if (!be || !base)
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    be->xq.valid = false;
    char what[64];
    snprintf(what, sizeof(what), "a %zu-byte buffer", size);
    return cu_pool_alloc(be->c, size, what, base);
}

static void p_buffer_free(struct minfer_backend *be, void *base)
{
    if (!be)
        return;
    be->xq.valid = false;
    cu_pool_free(be->c, base);
}

static minfer_status p_buffer_write(struct minfer_backend *be, void *dst, const void *src,
                                    size_t size)
{
    if (!be || (size && (!dst || !src)))
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    be->xq.valid = false;
    return cu_write(be->c, dst, src, size);
}

static minfer_status p_buffer_read(struct minfer_backend *be, void *dst, const void *src,
                                   size_t size)
{
    if (!be || (size && (!dst || !src)))
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    return cu_read(be->c, dst, src, size);
}

static minfer_status p_host_alloc(struct minfer_backend *be, size_t size, void **ptr)
{
    if (!ptr)
        return MINFER_ERR_INVALID_ARG;
    *ptr = NULL;
    if (!be)
        return MINFER_ERR_INVALID_ARG;
    cu_ctx_clear_error(be->c);
    return cu_host_alloc(be->c, size, ptr);
}

static void p_host_free(struct minfer_backend *be, void *ptr)
{
    if (be)
        cu_host_free(be->c, ptr);
}

static minfer_status p_weight_register(struct minfer_backend *be,
                                       const struct minfer_weight_desc *w, void **data)
{
    if (!be || !w || !data || !w->name || (w->size && !w->host_data))
        return MINFER_ERR_INVALID_ARG;
    *data = NULL;
    cu_ctx_clear_error(be->c);
    be->xq.valid = false;
    if (!minfer_type_traits_of(w->type))
        return cu_ctx_fail(be->c, MINFER_ERR_UNSUPPORTED, "cuda: weight '%s' has unknown type %u",
                           w->name, w->type);
    return cu_weight_register(be->c, w->name, w->host_data, w->size, data);
}

static minfer_status p_synchronize(struct minfer_backend *be)
{
    if (!be)
        return MINFER_ERR_INVALID_ARG;
    return cu_sync(be->c);
}

static const char *p_last_error(struct minfer_backend *be)
{
    return be ? cu_ctx_error(be->c) : g_err;
}

static void p_shutdown(void)
{
    cu_shutdown();
    cuda_host = NULL;
}

MINFER_PLUGIN_DEFINE(cuda_host, "cuda", MINFER_CUDA_PLUGIN_VERSION,
                     .probe = p_probe,
                     .device_count = p_device_count,
                     .device_info = p_device_info,
                     .create = p_create,
                     .destroy = p_destroy,
                     .supports_op = p_supports_op,
                     .buffer_alloc = p_buffer_alloc,
                     .buffer_free = p_buffer_free,
                     .buffer_write = p_buffer_write,
                     .buffer_read = p_buffer_read,
                     .weight_register = p_weight_register,
                     .execute_node = p_execute_node,
                     .graph_replay = cuda_graph_replay,
                     .synchronize = p_synchronize,
                     .copy_cells = p_copy_cells,
                     .last_error = p_last_error,
                     .get_proc = cuda_get_proc,
                     .shutdown = p_shutdown,
                     .host_alloc = p_host_alloc,
                     .host_free = p_host_free);
