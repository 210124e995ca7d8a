/*
 * template.c — a minimal minfer backend plugin, built out of tree against
 * an installed minfer. It runs on the host and executes three ops (ADD,
 * MUL, SCALE) on contiguous F32 tensors, enough to show every slot's
 * shape. Start a real backend by copying this file: rename "template",
 * make probe() check your hardware, and grow supports_op/execute_node.
 *
 * Only SDK headers are included (<minfer/backend.h>, and the header-only
 * node checker <minfer/ir-check.h>): a plugin needs nothing else from
 * minfer and does not link libminfer.so.
 */
#include <minfer/backend.h>
#include <minfer/ir-check.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The plugin's own version, from project() in CMakeLists.txt. */
#ifndef TEMPLATE_VERSION
#define TEMPLATE_VERSION "0.1.0"
#endif

static const struct minfer_host *host; /* lent by the core until shutdown */

/* ---- instance ---- */

struct minfer_backend {
    char err[256]; /* last_error text */
};

static char create_err[256]; /* errors of create, when there is no instance */

static minfer_status fail(struct minfer_backend *be, minfer_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be ? be->err : create_err, sizeof be->err, fmt, ap);
    va_end(ap);
    return st;
}

/* ---- probe and devices ---- */

static int t_probe(char *why, size_t why_len)
{
    /* A real backend checks for its hardware/ISA here, cheaply, and on
     * failure explains: snprintf(why, why_len, "no FooChip device"); return 0; */
    (void)why;
    (void)why_len;
    return 1;
}

static int t_device_count(void)
{
    return 1;
}

static minfer_status t_device_info(int device, struct minfer_device_info *out)
{
    if (device != 0 || !out)
        return MINFER_ERR_RANGE;
    /* Write only fields that fit in the caller's struct. */
    struct minfer_device_info d;
    memset(&d, 0, sizeof d);
    snprintf(d.name, sizeof d.name, "template host device");
    snprintf(d.description, sizeof d.description, "reference f32 ops: add, mul, scale");
    uint32_t n = out->struct_size < sizeof d ? out->struct_size : (uint32_t)sizeof d;
    d.struct_size = out->struct_size;
    memcpy(out, &d, n);
    return MINFER_OK;
}

static minfer_status t_create(const struct minfer_backend_config *cfg, struct minfer_backend **out)
{
    *out = NULL;
    if (cfg && cfg->device != 0)
        return fail(NULL, MINFER_ERR_RANGE, "template: device %d does not exist (only 0)",
                    (int)cfg->device);
    struct minfer_backend *be = calloc(1, sizeof *be);
    if (!be)
        return fail(NULL, MINFER_ERR_NO_MEMORY, "template: out of memory creating an instance");
    *out = be;
    return MINFER_OK;
}

static void t_destroy(struct minfer_backend *be)
{
    free(be);
}

/* ---- ops ---- */

static bool is_dense_f32(const struct minfer_tensor *t)
{
    if (!t || t->type != MINFER_TYPE_F32 || t->nb[0] != sizeof(float))
        return false;
    for (int i = 1; i < MINFER_MAX_DIMS; i++)
        if (t->nb[i] != t->nb[i - 1] * (size_t)t->ne[i - 1])
            return false;
    return true;
}

static int64_t n_elems(const struct minfer_tensor *t)
{
    return t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
}

/* First the ops this plugin implements at all (ADD, MUL, SCALE); then
 * what ir.h documents for them (types, shapes, source counts), checked by
 * minfer/ir-check.h; then only what this plugin's loops can run: dense f32
 * and, for ADD/MUL, no broadcast of src1. flags is 0 for supports_op and
 * MINFER_IR_CHECK_DATA for execute_node; be NULL writes no error text. */
static minfer_status t_check(struct minfer_backend *be, const struct minfer_node *n,
                             uint32_t flags)
{
    if (!n)
        return be ? fail(be, MINFER_ERR_INVALID_ARG, "template: NULL node")
                  : MINFER_ERR_INVALID_ARG;
    const char *label = n->label ? n->label : "?";
    if (n->op != MINFER_OP_ADD && n->op != MINFER_OP_MUL && n->op != MINFER_OP_SCALE)
        return be ? fail(be, MINFER_ERR_UNSUPPORTED,
                         "template: node %u (%s): op %s is not implemented (add, mul, scale only)",
                         n->index, label, minfer_op_name(n->op))
                  : MINFER_ERR_UNSUPPORTED;
    char why[200];
    minfer_status st = minfer_ir_check_node(n, flags, why, sizeof why);
    if (st != MINFER_OK)
        return be ? fail(be, st, "template: node %u (%s): %s", n->index, label, why) : st;
    bool ok = is_dense_f32(n->src[0]) && is_dense_f32(n->dst);
    if (n->op != MINFER_OP_SCALE)
        ok = ok && is_dense_f32(n->src[1]) && n_elems(n->src[1]) == n_elems(n->dst);
    if (!ok)
        return be ? fail(be, MINFER_ERR_UNSUPPORTED,
                         "template: node %u (%s): %s needs dense f32 tensors and no broadcast",
                         n->index, label, minfer_op_name(n->op))
                  : MINFER_ERR_UNSUPPORTED;
    return MINFER_OK;
}

static bool t_supports_op(struct minfer_backend *be, const struct minfer_node *n)
{
    (void)be; /* leave the instance's last error alone */
    return t_check(NULL, n, 0) == MINFER_OK;
}

static minfer_status t_execute_node(struct minfer_backend *be, const struct minfer_node *n)
{
    minfer_status st = t_check(be, n, MINFER_IR_CHECK_DATA);
    if (st != MINFER_OK)
        return st;
    const float *a = n->src[0]->data;
    const float *b = n->n_src > 1 ? n->src[1]->data : NULL;
    float *d = n->dst->data;
    int64_t ne = n_elems(n->dst);
    for (int64_t i = 0; i < ne; i++) {
        switch (n->op) {
        case MINFER_OP_ADD: d[i] = a[i] + b[i]; break;
        case MINFER_OP_MUL: d[i] = a[i] * b[i]; break;
        default: d[i] = a[i] * n->fparams[0]; break;
        }
    }
    return MINFER_OK;
}

/* ---- memory: plain host memory ---- */

static minfer_status t_buffer_alloc(struct minfer_backend *be, size_t size, void **base)
{
    *base = malloc(size ? size : 1);
    if (!*base)
        return fail(be, MINFER_ERR_DEVICE_OOM, "template: cannot allocate %zu bytes", size);
    return MINFER_OK;
}

static void t_buffer_free(struct minfer_backend *be, void *base)
{
    (void)be;
    free(base);
}

static minfer_status t_buffer_write(struct minfer_backend *be, void *dst, const void *src,
                                    size_t size)
{
    (void)be;
    memcpy(dst, src, size);
    return MINFER_OK;
}

static minfer_status t_buffer_read(struct minfer_backend *be, void *dst, const void *src,
                                   size_t size)
{
    (void)be;
    memcpy(dst, src, size);
    return MINFER_OK;
}

static minfer_status t_weight_register(struct minfer_backend *be,
                                       const struct minfer_weight_desc *w, void **data)
{
    (void)be;
    *data = (void *)w->host_data; /* host backend: use the mapping in place */
    return MINFER_OK;
}

static minfer_status t_synchronize(struct minfer_backend *be)
{
    (void)be;
    return MINFER_OK; /* everything ran synchronously */
}

static const char *t_last_error(struct minfer_backend *be)
{
    return be ? be->err : create_err;
}

static void t_shutdown(void)
{
    if (host && host->log)
        host->log(MINFER_LOG_DEBUG, "template backend: shutdown");
    host = NULL;
}

/* ---- the table and the entry point ---- */

/* One macro writes the table, the ABI negotiation (speak the offered
 * minor or ours, whichever is lower; refuse another major) and the
 * exported minfer_plugin_entry. Slots left out are absent (NULL). */
MINFER_PLUGIN_DEFINE(host, "template", TEMPLATE_VERSION,
                     .probe = t_probe,
                     .device_count = t_device_count,
                     .device_info = t_device_info,
                     .create = t_create,
                     .destroy = t_destroy,
                     .supports_op = t_supports_op,
                     .buffer_alloc = t_buffer_alloc,
                     .buffer_free = t_buffer_free,
                     .buffer_write = t_buffer_write,
                     .buffer_read = t_buffer_read,
                     .weight_register = t_weight_register,
                     .execute_node = t_execute_node,
                     .graph_replay = NULL, /* optional */
                     .synchronize = t_synchronize,
                     .copy_cells = NULL,   /* optional */
                     .last_error = t_last_error,
                     .get_proc = NULL,     /* optional */
                     .shutdown = t_shutdown);
