/*
 * plugin.c — the CPU backend's entry point and ABI table: probe, the one
 * device (this machine's CPU), instances, host buffers, weights used in
 * place, last-error text and the get_proc extensions.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "cpu-internal.h"

/* From the plugin's own project() (backends/cpu/CMakeLists.txt). */
#ifndef MINFER_CPU_PLUGIN_VERSION
#define MINFER_CPU_PLUGIN_VERSION "0.1.0"
#endif

static const struct minfer_host *g_host;
static _Thread_local char g_create_err[512]; /* errors of create (be == NULL) */

/* ---- errors and scratch ---- */

minfer_status cpu_fail(struct minfer_backend *be, const struct minfer_node *node,
                       minfer_status st, const char *fmt, ...)
{
    if (!be)
        return st;
    size_t off = 0;
    if (node) {
        int w = snprintf(be->err, sizeof be->err, "cpu: node %u (%s): ", node->index,
                         node->label ? node->label : "unlabelled");
        off = w < 0 ? 0 : (size_t)w < sizeof be->err ? (size_t)w : sizeof be->err - 1;
    } else {
        off = (size_t)snprintf(be->err, sizeof be->err, "cpu: ");
    }
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(be->err + off, sizeof be->err - off, fmt, ap);
    va_end(ap);
    return st;
}

void *cpu_scratch(struct minfer_backend *be, size_t size)
{
    if (size <= be->scratch_size)
        return be->scratch;
    size_t want = size + size / 4;
    if (want < size || want > SIZE_MAX - 63)
        return NULL;
    want = (want + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, want);
    if (!p)
        return NULL;
    free(be->scratch);
    be->scratch = p;
    be->scratch_size = want;
    return p;
}

/* ---- probe and device ---- */

static int cpu_probe(char *why, size_t why_len)
{
    (void)why;
    (void)why_len;
    /* Every CPU runs the scalar kernels; better ISAs rank the table higher
     * only as information, there is one build of this plugin. */
    static const int score[CPU_ISA_COUNT] = {
        [CPU_ISA_SCALAR] = 10, [CPU_ISA_AVX2] = 20, [CPU_ISA_AVXVNNI] = 25, [CPU_ISA_AVX512] = 30,
        [CPU_ISA_AVX512BF16] = 35};
    return score[cpu_isa_detect()];
}

static int cpu_device_count(void)
{
    return 1;
}

static void read_cpu_model(char *out, size_t len)
{
    snprintf(out, len, "CPU");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) && strncmp(line, "Model", 5))
            continue;
        char *c = strchr(line, ':');
        if (!c)
            continue;
        c++;
        while (*c == ' ' || *c == '\t')
            c++;
        c[strcspn(c, "\n")] = 0;
        if (*c) {
            snprintf(out, len, "%s", c);
            break;
        }
    }
    fclose(f);
}

/* Reads one number from a file ("max" or unreadable: 0). */
static uint64_t read_u64_file(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

/* Memory a new allocation can get without swapping or the OOM killer:
 * the kernel's MemAvailable (free plus reclaimable page cache: mapped
 * weights count as available), capped by the cgroup v2 limit of this
 * process's container when it has one. 0 when unknown. */
static uint64_t host_mem_available(void)
{
    uint64_t avail = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f) {
        char line[128];
        unsigned long long kb;
        while (fgets(line, sizeof line, f))
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (uint64_t)kb * 1024;
                break;
            }
        fclose(f);
    }
    uint64_t max = read_u64_file("/sys/fs/cgroup/memory.max");
    uint64_t cur = read_u64_file("/sys/fs/cgroup/memory.current");
    if (max && cur <= max && (!avail || max - cur < avail))
        avail = max - cur;
    return avail;
}

static minfer_status cpu_device_info(int device, struct minfer_device_info *out)
{
    if (!out || device != 0)
        return MINFER_ERR_RANGE;
    if (out->struct_size < sizeof *out)
        return MINFER_ERR_INVALID_ARG;
    memset(out, 0, sizeof *out);
    out->struct_size = sizeof *out;
    read_cpu_model(out->name, sizeof out->name);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    enum cpu_isa isa = cpu_isa_detect();
    snprintf(out->description, sizeof out->description,
             "%ld online CPUs; kernels %s (%s)", ncpu, cpu_isa_name(isa),
             isa == CPU_ISA_AVX512BF16 ? "AVX2 FMA F16C AVX-512F/BW/VL/VNNI/BF16"
             : isa == CPU_ISA_AVX512  ? "AVX2 FMA F16C AVX-512F/BW/VL/VNNI"
             : isa == CPU_ISA_AVXVNNI ? "AVX2 FMA F16C AVX-VNNI"
             : isa == CPU_ISA_AVX2    ? "AVX2 FMA F16C"
                                      : "portable C");
    struct sysinfo si;
    if (sysinfo(&si) == 0) {
        out->memory_total = (uint64_t)si.totalram * si.mem_unit;
        out->memory_free = (uint64_t)(si.freeram + si.bufferram) * si.mem_unit;
    }
    uint64_t avail = host_mem_available();
    if (avail)
        out->memory_free = avail;
    return MINFER_OK;
}

/* ---- instances ---- */

static minfer_status cpu_set_isa(struct minfer_backend *be, const char *name);

static minfer_status cpu_create(const struct minfer_backend_config *cfg,
                                struct minfer_backend **out)
{
    if (!out)
        return MINFER_ERR_INVALID_ARG;
    *out = NULL;
    int n_threads = 0;
    if (cfg) {
        if (cfg->struct_size < offsetof(struct minfer_backend_config, flags)) {
            snprintf(g_create_err, sizeof g_create_err,
                     "cpu: config struct_size %u is smaller than ABI 1.0's", cfg->struct_size);
            return MINFER_ERR_INVALID_ARG;
        }
        if (cfg->device != 0) {
            snprintf(g_create_err, sizeof g_create_err,
                     "cpu: device %d requested but the CPU plugin has only device 0",
                     cfg->device);
            return MINFER_ERR_RANGE;
        }
        n_threads = cfg->n_threads;
    }
    if (n_threads < 0 || n_threads > 4096) {
        snprintf(g_create_err, sizeof g_create_err,
                 "cpu: n_threads %d outside 0..4096 (0 = all online CPUs)", n_threads);
        return MINFER_ERR_RANGE;
    }
    if (n_threads == 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 && n <= 4096 ? (int)n : 1;
    }
    struct minfer_backend *be = calloc(1, sizeof *be);
    if (!be) {
        snprintf(g_create_err, sizeof g_create_err, "cpu: out of memory creating an instance");
        return MINFER_ERR_NO_MEMORY;
    }
    be->n_threads = n_threads;
    be->isa = cpu_isa_detect();
    be->k = cpu_kernels_for(be->isa);
    const char *env = secure_getenv("MINFER_CPU_ISA");
    if (env && *env && cpu_set_isa(be, env) != MINFER_OK) {
        snprintf(g_create_err, sizeof g_create_err, "%s", be->err);
        free(be);
        return MINFER_ERR_INVALID_ARG;
    }
    be->pool = cpu_pool_new(n_threads);
    if (!be->pool) {
        snprintf(g_create_err, sizeof g_create_err,
                 "cpu: could not start %d threads", n_threads);
        free(be);
        return MINFER_ERR_NO_MEMORY;
    }
    *out = be;
    return MINFER_OK;
}

static void cpu_destroy(struct minfer_backend *be)
{
    if (!be)
        return;
    cpu_pool_free(be->pool);
    free(be->scratch);
    free(be->moe_scratch);
    free(be);
}

/* Extension "minfer_cpu_set_isa": restricts an instance to a kernel set no
 * the CPU runs ("scalar", "avx2", "avxvnni", "avx512", "avx512bf16"). Used by the tests
 * to check every path on one machine and by benchmarks. */
static minfer_status cpu_set_isa(struct minfer_backend *be, const char *name)
{
    if (!be || !name)
        return MINFER_ERR_INVALID_ARG;
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        if (strcmp(name, cpu_isa_name((enum cpu_isa)i)))
            continue;
        if (!cpu_isa_supported((enum cpu_isa)i))
            return cpu_fail(be, NULL, MINFER_ERR_UNSUPPORTED,
                            "kernel set '%s' requested but this CPU lacks its instructions "
                            "(best set here: '%s')",
                            name, cpu_isa_name(cpu_isa_detect()));
        be->isa = (enum cpu_isa)i;
        be->k = cpu_kernels_for(be->isa);
        return MINFER_OK;
    }
    char names[128] = "";
    for (int i = 0; i < CPU_ISA_COUNT; i++) /* the list follows the enum */
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                 cpu_isa_name((enum cpu_isa)i));
    return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG, "unknown kernel set '%s'; expected one of %s",
                    name, names);
}

/* Extension "minfer_cpu_isa": the kernel set an instance uses. */
static const char *cpu_get_isa(struct minfer_backend *be)
{
    return be ? cpu_isa_name(be->isa) : cpu_isa_name(cpu_isa_detect());
}

/* ---- buffers and weights ---- */

static minfer_status cpu_buffer_alloc(struct minfer_backend *be, size_t size, void **base)
{
    if (!base)
        return MINFER_ERR_INVALID_ARG;
    *base = NULL;
    if (size > SIZE_MAX - 63)
        return cpu_fail(be, NULL, MINFER_ERR_NO_MEMORY, "buffer of %zu bytes is too large",
                        size);
    size_t sz = size ? (size + 63) & ~(size_t)63 : 64;
    void *p = aligned_alloc(64, sz);
    if (!p)
        return cpu_fail(be, NULL, MINFER_ERR_NO_MEMORY,
                        "out of host memory allocating a %zu-byte buffer", size);
    *base = p;
    return MINFER_OK;
}

static void cpu_buffer_free(struct minfer_backend *be, void *base)
{
    (void)be;
    free(base);
}

static minfer_status cpu_buffer_write(struct minfer_backend *be, void *dst, const void *src,
                                      size_t size)
{
    if (size && (!dst || !src))
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG, "buffer_write with a NULL pointer");
    if (size)
        memmove(dst, src, size);
    return MINFER_OK;
}

static minfer_status cpu_buffer_read(struct minfer_backend *be, void *dst, const void *src,
                                     size_t size)
{
    if (size && (!dst || !src))
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG, "buffer_read with a NULL pointer");
    if (size)
        memmove(dst, src, size);
    return MINFER_OK;
}

static minfer_status cpu_weight_register(struct minfer_backend *be,
                                         const struct minfer_weight_desc *w, void **data)
{
    if (!data)
        return MINFER_ERR_INVALID_ARG;
    *data = NULL;
    if (!be || !w || !w->host_data)
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG, "weight_register with NULL input");
    const struct minfer_type_traits *t = minfer_type_traits_of(w->type);
    if (!t || !t->supported)
        return cpu_fail(be, NULL, MINFER_ERR_UNSUPPORTED,
                        "weight %s has type %s (%u), which the CPU plugin cannot read",
                        w->name ? w->name : "?", t ? t->name : "unknown", w->type);
    size_t row = minfer_row_size(w->type, w->ne[0]);
    if (!row)
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG,
                        "weight %s: ne0 %lld is not a multiple of %s's block of %u",
                        w->name ? w->name : "?", (long long)w->ne[0], t->name, t->block_size);
    size_t need = row;
    for (int i = 1; i < MINFER_MAX_DIMS; i++) {
        if (w->ne[i] < 1 || need > SIZE_MAX / (size_t)w->ne[i])
            return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG,
                            "weight %s: bad dimension ne%d = %lld", w->name ? w->name : "?", i,
                            (long long)w->ne[i]);
        need *= (size_t)w->ne[i];
    }
    if (w->size < need)
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG,
                        "weight %s: %zu bytes given but its shape needs %zu",
                        w->name ? w->name : "?", w->size, need);
    /* used in place: the bytes stay valid until the instance is destroyed */
    *data = (void *)w->host_data;
    return MINFER_OK;
}

/* ---- execution ---- */

static bool cpu_supports_op(struct minfer_backend *be, const struct minfer_node *node)
{
    struct minfer_backend tmp; /* keep the instance's last error untouched */
    memset(&tmp, 0, sizeof tmp);
    if (be) {
        tmp.isa = be->isa;
        tmp.k = be->k;
    }
    return cpu_check_node(&tmp, node) == MINFER_OK;
}

static minfer_status cpu_execute_node(struct minfer_backend *be, const struct minfer_node *node)
{
    if (!be)
        return MINFER_ERR_INVALID_ARG;
    be->err[0] = 0;
    minfer_status st = cpu_check_node(be, node);
    if (st != MINFER_OK)
        return st;
    return cpu_execute(be, node);
}

static minfer_status cpu_synchronize(struct minfer_backend *be)
{
    (void)be; /* execute_node is synchronous */
    return MINFER_OK;
}

static minfer_status cpu_copy_cells(struct minfer_backend *be, void *kv_base, size_t row_bytes,
                                    uint32_t src, uint32_t dst, uint32_t n)
{
    if (!kv_base)
        return cpu_fail(be, NULL, MINFER_ERR_INVALID_ARG, "copy_cells with a NULL base");
    if (row_bytes && ((size_t)n > SIZE_MAX / row_bytes ||
                      (size_t)(src > dst ? src : dst) > SIZE_MAX / row_bytes))
        return cpu_fail(be, NULL, MINFER_ERR_RANGE, "copy_cells size overflows");
    memmove((char *)kv_base + (size_t)dst * row_bytes, (char *)kv_base + (size_t)src * row_bytes,
            (size_t)n * row_bytes);
    return MINFER_OK;
}

static const char *cpu_last_error(struct minfer_backend *be)
{
    return be ? be->err : g_create_err;
}

static void *cpu_get_proc(const char *name)
{
    if (!name)
        return NULL;
    if (!strcmp(name, "minfer_cpu_set_isa"))
        return (void *)cpu_set_isa;
    if (!strcmp(name, "minfer_cpu_isa"))
        return (void *)cpu_get_isa;
    return NULL;
}

static void cpu_shutdown(void)
{
    g_host = NULL;
}

/* ---- entry ---- */

MINFER_PLUGIN_DEFINE(g_host, "cpu", MINFER_CPU_PLUGIN_VERSION,
                     .probe = cpu_probe,
                     .device_count = cpu_device_count,
                     .device_info = cpu_device_info,
                     .create = cpu_create,
                     .destroy = cpu_destroy,
                     .supports_op = cpu_supports_op,
                     .buffer_alloc = cpu_buffer_alloc,
                     .buffer_free = cpu_buffer_free,
                     .buffer_write = cpu_buffer_write,
                     .buffer_read = cpu_buffer_read,
                     .weight_register = cpu_weight_register,
                     .execute_node = cpu_execute_node,
                     .graph_replay = NULL, /* execute_node is synchronous, nothing to replay */
                     .synchronize = cpu_synchronize,
                     .copy_cells = cpu_copy_cells,
                     .last_error = cpu_last_error,
                     .get_proc = cpu_get_proc,
                     .shutdown = cpu_shutdown,
                     /* its buffers are host memory already (64-byte aligned) */
                     .host_alloc = cpu_buffer_alloc,
                     .host_free = cpu_buffer_free);
