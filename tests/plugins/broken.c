/*
 * broken.c — one source for the test plugins the loader must refuse (or,
 * for the "good" kinds, accept). Each build defines exactly one KIND_*;
 * the table below is a complete, valid ABI 1.0 backend that each kind
 * breaks in one way. Memory is plain malloc; there are no real devices.
 *
 * get_proc("test_entry_calls") returns an int* counting entry calls, so a
 * test can prove a plugin was opened once. When $MINFER_TEST_SHUTDOWN_LOG
 * names a file, shutdown appends "shutdown <kind>" to it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/backend.h"

#ifndef KIND_NAME
#error "build with -DKIND_NAME=\"...\" and one KIND_* macro"
#endif
#ifndef SCORE
#define SCORE 10
#endif

static int entry_calls;
static char err_text[256];

struct minfer_backend {
    int device;
};

#if defined(KIND_MISSING_DEP)
/* Lives in libtestdep.so, which is deliberately not on the search path. */
int minfer_testdep_value(void);
#endif

static int t_probe(char *why, size_t why_len)
{
#if defined(KIND_MISSING_DEP)
    if (minfer_testdep_value() != 42)
        return 0;
#endif
#if defined(KIND_PROBE_ZERO)
    snprintf(why, why_len, "no test device present (fake hardware check)");
    return 0;
#else
    (void)why;
    (void)why_len;
    return SCORE;
#endif
}

static int t_device_count(void)
{
    return 1;
}

static minfer_status t_device_info(int device, struct minfer_device_info *out)
{
    if (device != 0 || !out || out->struct_size < sizeof *out)
        return MINFER_ERR_RANGE;
    snprintf(out->name, sizeof out->name, "test device %s", KIND_NAME);
    snprintf(out->description, sizeof out->description, "fake, for loader tests");
    out->memory_total = 1ull << 30;
    out->memory_free = 1ull << 29;
    out->cc_major = 9;
    out->cc_minor = 0;
    out->is_gpu = 1;
    return MINFER_OK;
}

static minfer_status t_create(const struct minfer_backend_config *cfg, struct minfer_backend **out)
{
    *out = NULL;
#if defined(KIND_CREATE_FAILS)
    snprintf(err_text, sizeof err_text, "test create refused: device %d is fake",
             cfg ? (int)cfg->device : -1);
    return MINFER_ERR_BACKEND;
#else
    struct minfer_backend *be = calloc(1, sizeof *be);
    if (!be)
        return MINFER_ERR_NO_MEMORY;
    be->device = cfg ? cfg->device : 0;
    *out = be;
    return MINFER_OK;
#endif
}

static void t_destroy(struct minfer_backend *be)
{
    free(be);
}

static bool t_supports_op(struct minfer_backend *be, const struct minfer_node *node)
{
    (void)be;
    (void)node;
    return true;
}

static minfer_status t_buffer_alloc(struct minfer_backend *be, size_t size, void **base)
{
    (void)be;
    *base = malloc(size ? size : 1);
    return *base ? MINFER_OK : MINFER_ERR_DEVICE_OOM;
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
    *data = (void *)w->host_data;
    return MINFER_OK;
}

static minfer_status t_execute_node(struct minfer_backend *be, const struct minfer_node *node)
{
    (void)be;
#if defined(KIND_EXEC_FAILS)
    snprintf(err_text, sizeof err_text, "test execute_node refused op %u on purpose",
             (unsigned)node->op);
    return MINFER_ERR_BACKEND;
#else
    (void)node;
    return MINFER_OK;
#endif
}

static minfer_status t_synchronize(struct minfer_backend *be)
{
    (void)be;
    return MINFER_OK;
}

static const char *t_last_error(struct minfer_backend *be)
{
    (void)be;
    return err_text;
}

static void *t_get_proc(const char *name)
{
    if (name && !strcmp(name, "test_entry_calls"))
        return &entry_calls;
    return NULL;
}

static void t_shutdown(void)
{
    const char *p = getenv("MINFER_TEST_SHUTDOWN_LOG");
    if (!p)
        return;
    FILE *f = fopen(p, "a");
    if (!f)
        return;
    fprintf(f, "shutdown %s\n", KIND_NAME);
    fclose(f);
}

#if defined(KIND_HALF_HOST)
static minfer_status t_host_alloc(struct minfer_backend *be, size_t size, void **ptr)
{
    (void)be;
    *ptr = malloc(size ? size : 1);
    return *ptr ? MINFER_OK : MINFER_ERR_NO_MEMORY;
}
#endif

/* A table followed by slots from a future minor this core does not know. */
static struct {
    struct minfer_backend_iface iface;
    void *future_slots[8];
} table = {
    .iface =
        {
            .struct_size = sizeof(struct minfer_backend_iface),
            .abi_major = MINFER_ABI_MAJOR,
            .abi_minor = MINFER_ABI_MINOR,
            .name = "testbe",
            .version = "test-" KIND_NAME,
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
            .graph_replay = NULL,
            .synchronize = t_synchronize,
            .copy_cells = NULL,
            .last_error = t_last_error,
            .get_proc = t_get_proc,
            .shutdown = t_shutdown,
        },
};

#if defined(KIND_NO_ENTRY)
#define ENTRY_NAME not_the_entry_symbol
#else
#define ENTRY_NAME minfer_plugin_entry
#endif

MINFER_PLUGIN_EXPORT const struct minfer_backend_iface *ENTRY_NAME(uint32_t *abi,
                                                                 const struct minfer_host *host);
MINFER_PLUGIN_EXPORT const struct minfer_backend_iface *ENTRY_NAME(uint32_t *abi,
                                                                 const struct minfer_host *host)
{
    entry_calls++;
    if (host && host->log)
        host->log(MINFER_LOG_DEBUG, "test plugin %s: entry called", KIND_NAME);
#if defined(KIND_WRONG_MAJOR)
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR + 1, 0);
    table.iface.abi_major = MINFER_ABI_MAJOR + 1;
    table.iface.abi_minor = 0;
#elif defined(KIND_NEWER_MINOR)
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR + 1);
    table.iface.abi_minor = MINFER_ABI_MINOR + 1;
#elif defined(KIND_ENTRY_NULL)
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR + 2, 0);
    return NULL;
#else
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
#endif
#if defined(KIND_SMALL_SIZE)
    /* Ends before execute_node: too small for the slots ABI 1.0 requires. */
    table.iface.struct_size = (uint32_t)offsetof(struct minfer_backend_iface, execute_node);
#elif defined(KIND_NULL_SLOT)
    table.iface.execute_node = NULL;
#elif defined(KIND_HALF_HOST)
    table.iface.host_alloc = t_host_alloc; /* and no host_free to give it back */
#elif defined(KIND_BIG_SIZE)
    /* Built "against a later 1.x" but answering 1.0: the core must ignore
     * the extra bytes (which point nowhere) and load it. */
    table.iface.struct_size = (uint32_t)sizeof table;
    table.iface.abi_minor = MINFER_ABI_MINOR + 1;
    for (size_t i = 0; i < 8; i++)
        table.future_slots[i] = (void *)(uintptr_t)0xdead0000u;
#elif defined(KIND_BAD_NAME)
    table.iface.name = "bad name\n";
#endif
    return &table.iface;
}
