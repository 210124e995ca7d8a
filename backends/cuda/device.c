/*
 * device.c — the CUDA device layer: the only code that calls the CUDA
 * runtime API (the launchers in kernels/ only launch and read their own
 * launch error). Probe and device info, instances (one non-blocking stream
 * each), the exact-size pool, pinned staging, scratch, the process-wide
 * weight registry, sync with latched-error and device-flag reporting, and
 * event timing. It knows nothing of IR nodes.
 *
 * Every runtime call's result is read (scripts/check-cuda-calls.sh, ctest
 * cuda-calls); the few that cannot report anywhere (teardown) say so with
 * an "unchecked:" comment. A test hook (minfer_cuda_test_fail_nth, through
 * get_proc) makes the N-th device-layer call fail once: allocation, copy,
 * kernel launch (KLAUNCH asks cu_launch_injected), graph capture, graph
 * launch, sync (tests/test-cuda-faults.c sweeps them).
 */
#include "device.h"

#include <cuda_runtime_api.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kernels/kernels.h"

#define STAGING_SLOTS 2
#define STAGING_BYTES ((size_t)8 << 20)
/* Reads this large into page-locked memory skip the staging buffer (a
 * pointer query costs about what a small copy does). */
#define STAGING_DIRECT_MIN ((size_t)64 << 10)
#define MAX_DEVICES 64

/* ---- errors ---- */

static void fmt_err(char *err, size_t err_len, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
static void fmt_err(char *err, size_t err_len, const char *fmt, ...)
{
    if (!err || err_len == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, err_len, fmt, ap);
    va_end(ap);
}

static double mib(size_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* ---- probe and device info ---- */

int cu_probe(char *why, size_t why_len)
{
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        /* without a kernel driver the runtime says "driver version is
         * insufficient", which misleads: say what is missing first */
        int no_driver = e == cudaErrorInsufficientDriver &&
                        access("/proc/driver/nvidia/version", F_OK) != 0;
        fmt_err(why, why_len, "no CUDA device: %scudaGetDeviceCount: %s (%s)",
                no_driver ? "no NVIDIA kernel driver is loaded; " : "",
                cudaGetErrorString(e), cudaGetErrorName(e));
        cudaGetLastError();
        return 0;
    }
    if (n <= 0) {
        fmt_err(why, why_len, "no CUDA device: the driver reports 0 devices");
        return 0;
    }
    return n;
}

int cu_device_cc(int device, int *major, int *minor)
{
    if (cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
        cudaGetLastError();
        return -1;
    }
    return 0;
}

minfer_status cu_device_info(int device, struct minfer_device_info *out, char *err,
                             size_t err_len)
{
    int n = cu_probe(err, err_len);
    if (n == 0)
        return MINFER_ERR_UNSUPPORTED;
    if (device < 0 || device >= n) {
        fmt_err(err, err_len, "cuda: device %d requested but there are %d", device, n);
        return MINFER_ERR_RANGE;
    }
    struct cudaDeviceProp p;
    cudaError_t e = cudaGetDeviceProperties(&p, device);
    if (e != cudaSuccess) {
        fmt_err(err, err_len, "cuda: cudaGetDeviceProperties(%d): %s", device,
                cudaGetErrorString(e));
        cudaGetLastError();
        return MINFER_ERR_BACKEND;
    }
    uint32_t want = out->struct_size ? out->struct_size : (uint32_t)sizeof(*out);
    struct minfer_device_info info;
    memset(&info, 0, sizeof(info));
    info.struct_size = want < sizeof(info) ? want : (uint32_t)sizeof(info);
    snprintf(info.name, sizeof(info.name), "%.127s", p.name);
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) != cudaSuccess)
        drv = 0;
    if (cudaRuntimeGetVersion(&rt) != cudaSuccess)
        rt = 0;
    snprintf(info.description, sizeof(info.description),
             "sm_%d%d, %d SMs, L2 %d MiB, driver %d.%d, runtime %d.%d", p.major, p.minor,
             p.multiProcessorCount, p.l2CacheSize >> 20, drv / 1000, (drv % 1000) / 10,
             rt / 1000, (rt % 1000) / 10);
    info.cc_major = p.major;
    info.cc_minor = p.minor;
    info.is_gpu = 1;
    info.memory_total = p.totalGlobalMem;
    int prev = device;
    if (cudaGetDevice(&prev) != cudaSuccess)
        prev = device;
    if (cudaSetDevice(device) == cudaSuccess) {
        size_t fr = 0, tot = 0;
        if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) {
            info.memory_free = fr;
            info.memory_total = tot;
        }
        cudaSetDevice(prev); /* unchecked: restores the caller's device; the info is complete
                              * and the latch is cleared below */
    }
    cudaGetLastError();
    memcpy(out, &info, info.struct_size);
    return MINFER_OK;
}

/* ---- weight registry (process-wide) ---- */

struct wentry {
    int device;
    char *name;
    size_t size;
    uint64_t fp;    /* fingerprint of sampled bytes */
    void *dptr;
    int refs;       /* instances referencing it */
};

static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static struct wentry **g_w;
static size_t g_nw, g_capw;
static int g_prepared[MAX_DEVICES]; /* k_prepare done (1) or failed (-1) */
static int g_optin_ok[MAX_DEVICES];

/* FNV-1a over 16 windows of 256 bytes spread across the buffer plus the
 * size: tells two different files' same-named tensors apart without
 * hashing gigabytes. */
static uint64_t fingerprint(const void *data, size_t size)
{
    const unsigned char *b = data;
    uint64_t h = 1469598103934665603ull ^ size;
    size_t win = 256, nwin = 16;
    for (size_t w = 0; w < nwin; w++) {
        size_t off = size > win ? (size - win) / (nwin - 1) * w : 0;
        size_t len = size - off < win ? size - off : win;
        for (size_t i = 0; i < len; i++) {
            h ^= b[off + i];
            h *= 1099511628211ull;
        }
        if (size <= win)
            break;
    }
    return h;
}

/* ---- instances ---- */

struct pool_buf {
    void *p;
    size_t size;
    int used;
};

struct cu_ctx {
    int device;
    cudaStream_t stream;
    struct kctx k;
    char err[1024];
    char kerr[768];
    /* pool */
    struct pool_buf *pool;
    size_t npool, cappool;
    uint64_t generation;
    /* scratch */
    void *scratch[CU_SCRATCH_SLOTS];
    size_t scratch_size[CU_SCRATCH_SLOTS];
    /* pinned staging */
    void *stage[STAGING_SLOTS];
    cudaEvent_t stage_ev[STAGING_SLOTS];
    int stage_next;
    /* device-side violation flags */
    unsigned *dflags;
    unsigned *hflags; /* pinned mirror */
    /* weights this instance references */
    struct wentry **wrefs;
    size_t nwrefs, capwrefs;
    /* timing */
    cudaEvent_t t0, t1;
};

const char *cu_ctx_error(struct cu_ctx *c)
{
    return c ? c->err : "";
}

void cu_ctx_clear_error(struct cu_ctx *c)
{
    if (c)
        c->err[0] = 0;
}

minfer_status cu_ctx_fail(struct cu_ctx *c, minfer_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof(c->err), fmt, ap);
    va_end(ap);
    return st;
}

static minfer_status cuda_fail(struct cu_ctx *c, const char *site, cudaError_t e)
{
    cudaGetLastError(); /* clear the non-sticky latch the call left */
    return cu_ctx_fail(c, MINFER_ERR_BACKEND, "cuda: %s failed: %s (%s)", site,
                       cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ---- fault injection (test hook) ---- */

static uint64_t g_calls;   /* device-layer calls so far, process-wide */
static uint64_t g_fail_at; /* the call number that fails; 0: none */

void cu_test_fail_nth(uint64_t n)
{
    uint64_t now = __atomic_load_n(&g_calls, __ATOMIC_RELAXED);
    __atomic_store_n(&g_fail_at, n ? now + n : 0, __ATOMIC_RELAXED);
}

uint64_t cu_test_calls(void)
{
    return __atomic_load_n(&g_calls, __ATOMIC_RELAXED);
}

/* Counts one device-layer call; true when it is the one the hook chose
 * (then disarmed: it fails once). */
static bool hit(void)
{
    uint64_t n = __atomic_add_fetch(&g_calls, 1, __ATOMIC_RELAXED);
    uint64_t at = __atomic_load_n(&g_fail_at, __ATOMIC_RELAXED);
    if (!at || n != at)
        return false;
    __atomic_store_n(&g_fail_at, 0, __ATOMIC_RELAXED);
    return true;
}

int cu_launch_injected(void)
{
    return hit();
}

/* The failure a chosen call reports instead of making its runtime call. */
static bool injected(struct cu_ctx *c, minfer_status st, const char *site)
{
    if (!hit())
        return false;
    cu_ctx_fail(c, st, "cuda: %s failed: injected fault of device call %llu (test hook "
                "minfer_cuda_test_fail_nth)",
                site, (unsigned long long)__atomic_load_n(&g_calls, __ATOMIC_RELAXED));
    return true;
}

/* Makes the instance's device current for this thread. */
static minfer_status use_device(struct cu_ctx *c)
{
    cudaError_t e = cudaSetDevice(c->device);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaSetDevice", e);
}

struct kctx *cu_ctx_kctx(struct cu_ctx *c)
{
    cudaSetDevice(c->device); /* unchecked: a failure stays latched and the next launch's
                               * k_pre refuses with it */
    c->kerr[0] = 0;
    return &c->k;
}

/* Opts in >48 KiB dynamic smem once per device per process, at instance
 * creation: before any capture window of any instance can be open. */
static void prepare_device(struct cu_ctx *c)
{
    if (c->device < 0 || c->device >= MAX_DEVICES)
        return;
    pthread_mutex_lock(&g_lock);
    if (g_prepared[c->device] == 0) {
        int rc = k_prepare(&c->k);
        g_prepared[c->device] = rc == 0 ? 1 : -1;
        g_optin_ok[c->device] = c->k.gemm_optin_ok;
    }
    c->k.gemm_optin_ok = g_optin_ok[c->device];
    pthread_mutex_unlock(&g_lock);
}

struct cu_ctx *cu_ctx_new(int device, char *err, size_t err_len)
{
    int n = cu_probe(err, err_len);
    if (n == 0)
        return NULL;
    if (device < 0 || device >= n) {
        fmt_err(err, err_len, "cuda: device %d requested but there are %d (0..%d)", device, n,
                n - 1);
        return NULL;
    }
    struct cu_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        fmt_err(err, err_len, "cuda: out of host memory creating an instance");
        return NULL;
    }
    c->device = device;
    cudaError_t e = cudaSetDevice(device);
    const char *site = "cudaSetDevice";
    if (e != cudaSuccess)
        goto out_fail;
    site = "cudaStreamCreateWithFlags(cudaStreamNonBlocking)";
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        goto out_fail;
    int v = 0;
    site = "cudaDeviceGetAttribute(MultiProcessorCount)";
    e = cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess)
        goto out_stream;
    c->k.sm_count = v;
    v = 0;
    site = "cudaDeviceGetAttribute(MaxSharedMemoryPerBlockOptin)";
    e = cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, device);
    if (e != cudaSuccess)
        goto out_stream;
    c->k.smem_optin = v;
    int cc_major = 0, cc_minor = 0;
    site = "cudaDeviceGetAttribute(ComputeCapabilityMajor)";
    e = cudaDeviceGetAttribute(&cc_major, cudaDevAttrComputeCapabilityMajor, device);
    if (e != cudaSuccess)
        goto out_stream;
    site = "cudaDeviceGetAttribute(ComputeCapabilityMinor)";
    e = cudaDeviceGetAttribute(&cc_minor, cudaDevAttrComputeCapabilityMinor, device);
    if (e != cudaSuccess)
        goto out_stream;
    c->k.cc = 10 * cc_major + cc_minor;
    c->k.stream = c->stream;
    c->k.device = device;
    c->k.err = c->kerr;
    c->k.err_len = sizeof(c->kerr);
    k_dep_probe(&c->k);
    /* the violation flags word, then the GEMMs' tile counters */
    site = "cudaMalloc(violation flags and tile counters)";
    e = cudaMalloc((void **)&c->dflags, (1 + KTILE_COUNTERS) * sizeof(unsigned));
    if (e != cudaSuccess)
        goto out_stream;
    site = "cudaHostAlloc(flags mirror)";
    e = cudaHostAlloc((void **)&c->hflags, sizeof(unsigned), cudaHostAllocDefault);
    if (e != cudaSuccess)
        goto out_flags;
    site = "cudaMemset(flags)";
    e = cudaMemset(c->dflags, 0, (1 + KTILE_COUNTERS) * sizeof(unsigned));
    if (e != cudaSuccess)
        goto out_hflags;
    c->k.flags = c->dflags;
    c->k.tile_count = c->dflags + 1;
    for (int i = 0; i < STAGING_SLOTS; i++) {
        site = "cudaHostAlloc(pinned staging)";
        e = cudaHostAlloc(&c->stage[i], STAGING_BYTES, cudaHostAllocDefault);
        if (e != cudaSuccess)
            goto out_stage;
        site = "cudaEventCreate(staging)";
        e = cudaEventCreateWithFlags(&c->stage_ev[i], cudaEventDisableTiming);
        if (e != cudaSuccess)
            goto out_stage;
    }
    site = "cudaEventCreate(timer)";
    e = cudaEventCreate(&c->t0);
    if (e != cudaSuccess)
        goto out_stage;
    e = cudaEventCreate(&c->t1);
    if (e != cudaSuccess)
        goto out_t0;
    c->generation = 1;
    prepare_device(c);
    if (c->kerr[0])
        snprintf(c->err, sizeof(c->err), "%s", c->kerr); /* an opt-in skipped, with why */
    return c;

    /* unchecked (the teardown below): a failure is already being reported */
out_t0:
    cudaEventDestroy(c->t0); /* unchecked: teardown */
out_stage:
    for (int i = 0; i < STAGING_SLOTS; i++) {
        if (c->stage_ev[i])
            cudaEventDestroy(c->stage_ev[i]); /* unchecked: teardown */
        if (c->stage[i])
            cudaFreeHost(c->stage[i]); /* unchecked: teardown */
    }
out_hflags:
    cudaFreeHost(c->hflags); /* unchecked: teardown */
out_flags:
    cudaFree(c->dflags); /* unchecked: teardown */
out_stream:
    cudaStreamDestroy(c->stream); /* unchecked: teardown */
out_fail:
    fmt_err(err, err_len, "cuda: creating an instance on device %d: %s failed: %s (%s)",
            device, site, cudaGetErrorString(e), cudaGetErrorName(e));
    cudaGetLastError();
    free(c);
    return NULL;
}

static void release_weights(struct cu_ctx *c)
{
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < c->nwrefs; i++) {
        struct wentry *w = c->wrefs[i];
        if (--w->refs > 0)
            continue;
        cudaFree(w->dptr); /* unchecked: teardown, nothing to report to */
        free(w->name);
        for (size_t j = 0; j < g_nw; j++) {
            if (g_w[j] == w) {
                g_w[j] = g_w[--g_nw];
                break;
            }
        }
        free(w);
    }
    pthread_mutex_unlock(&g_lock);
    free(c->wrefs);
}

void cu_ctx_free(struct cu_ctx *c)
{
    if (!c)
        return;
    /* unchecked (all of this): a destructor has nothing to report to; the
     * latch is cleared at the end */
    cudaSetDevice(c->device); /* unchecked: teardown */
    cudaStreamSynchronize(c->stream); /* unchecked: teardown */
    for (size_t i = 0; i < c->npool; i++)
        cudaFree(c->pool[i].p); /* unchecked: teardown */
    free(c->pool);
    for (int i = 0; i < CU_SCRATCH_SLOTS; i++)
        cudaFree(c->scratch[i]); /* unchecked: teardown */
    for (int i = 0; i < STAGING_SLOTS; i++) {
        cudaEventDestroy(c->stage_ev[i]); /* unchecked: teardown */
        cudaFreeHost(c->stage[i]); /* unchecked: teardown */
    }
    cudaEventDestroy(c->t0); /* unchecked: teardown */
    cudaEventDestroy(c->t1); /* unchecked: teardown */
    cudaFreeHost(c->hflags); /* unchecked: teardown */
    cudaFree(c->dflags); /* unchecked: teardown */
    release_weights(c);
    cudaStreamDestroy(c->stream); /* unchecked: teardown */
    cudaGetLastError();
    free(c);
}

void cu_shutdown(void)
{
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nw; i++) {
        cudaFree(g_w[i]->dptr); /* unchecked: teardown at plugin shutdown */
        free(g_w[i]->name);
        free(g_w[i]);
    }
    free(g_w);
    g_w = NULL;
    g_nw = g_capw = 0;
    memset(g_prepared, 0, sizeof(g_prepared));
    pthread_mutex_unlock(&g_lock);
}

/* ---- pool ---- */

/* cudaMalloc with the OOM turned into a status naming the request. */
static minfer_status dev_malloc(struct cu_ctx *c, size_t size, const char *what, void **out)
{
    *out = NULL;
    /* +16: kernels may read up to 16 bytes past a tensor's last block
     * (aligned word loads of 2-byte aligned blocks) */
    if (size > SIZE_MAX - 16)
        return cu_ctx_fail(c, MINFER_ERR_DEVICE_OOM, "cuda: %zu bytes for %s is not addressable",
                           size, what);
    if (injected(c, MINFER_ERR_DEVICE_OOM, "cudaMalloc"))
        return MINFER_ERR_DEVICE_OOM;
    cudaError_t e = cudaMalloc(out, size + 16);
    if (e == cudaSuccess)
        return MINFER_OK;
    *out = NULL;
    cudaGetLastError(); /* cudaErrorMemoryAllocation is not sticky */
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        fr = tot = 0; /* the message then shows 0 of 0 MiB: unknown */
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
        return cu_ctx_fail(c, MINFER_ERR_DEVICE_OOM,
                           "cuda: out of device memory allocating %zu bytes (%.1f MiB) for %s "
                           "on device %d (%.1f of %.1f MiB free)",
                           size, mib(size), what, c->device, mib(fr), mib(tot));
    return cu_ctx_fail(c, MINFER_ERR_BACKEND, "cuda: cudaMalloc(%zu) for %s failed: %s (%s)",
                       size, what, cudaGetErrorString(e), cudaGetErrorName(e));
}

minfer_status cu_pool_alloc(struct cu_ctx *c, size_t size, const char *what, void **out)
{
    *out = NULL;
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    for (size_t i = 0; i < c->npool; i++) {
        if (!c->pool[i].used && c->pool[i].size == size) {
            c->pool[i].used = 1;
            *out = c->pool[i].p;
            return MINFER_OK;
        }
    }
    if (c->npool == c->cappool) {
        size_t cap = c->cappool ? c->cappool * 2 : 64;
        struct pool_buf *np = realloc(c->pool, cap * sizeof(*np));
        if (!np)
            return cu_ctx_fail(c, MINFER_ERR_NO_MEMORY, "cuda: out of host memory growing the pool");
        c->pool = np;
        c->cappool = cap;
    }
    void *p = NULL;
    minfer_status st = dev_malloc(c, size, what, &p);
    if (st != MINFER_OK)
        return st;
    c->pool[c->npool++] = (struct pool_buf){p, size, 1};
    c->generation++;
    *out = p;
    return MINFER_OK;
}

void cu_pool_free(struct cu_ctx *c, void *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < c->npool; i++) {
        if (c->pool[i].p == p) {
            c->pool[i].used = 0;
            return;
        }
    }
    cu_ctx_fail(c, MINFER_ERR_INVALID_ARG,
                "cuda: buffer_free(%p): not a buffer of this instance (ignored)", p);
}

uint64_t cu_pool_generation(const struct cu_ctx *c)
{
    return c->generation;
}

bool cu_scratch_holds(const struct cu_ctx *c, int slot, size_t size)
{
    return size == 0 || (slot >= 0 && slot < CU_SCRATCH_SLOTS && c->scratch[slot] &&
                         c->scratch_size[slot] >= size);
}

minfer_status cu_scratch(struct cu_ctx *c, int slot, size_t size, void **out)
{
    *out = NULL;
    if (slot < 0 || slot >= CU_SCRATCH_SLOTS)
        return cu_ctx_fail(c, MINFER_ERR_INVALID_ARG, "cuda: scratch slot %d", slot);
    if (c->scratch_size[slot] >= size && c->scratch[slot]) {
        *out = c->scratch[slot];
        return MINFER_OK;
    }
    /* growing inside a capture window would sync a capturing stream and
     * cudaMalloc under capture: refuse, so the window aborts cleanly (the
     * warm-up passes size scratch before any capture) */
    if (cu_capturing(c))
        return cu_ctx_fail(c, MINFER_ERR_STATE,
                           "cuda: scratch slot %d must grow to %zu bytes inside a graph capture "
                           "window (warm-up passes should have sized it)",
                           slot, size);
    /* grow: the old buffer may still be read by queued kernels */
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess)
        return cuda_fail(c, "cudaStreamSynchronize (before growing scratch)", e);
    cudaFree(c->scratch[slot]); /* unchecked: the stream is idle (synced above); a failed
                                 * free leaks at worst, and the allocation below reports */
    c->scratch[slot] = NULL;
    c->scratch_size[slot] = 0;
    size_t want = size + size / 4 + 4096;
    char what[64];
    snprintf(what, sizeof(what), "scratch slot %d", slot);
    minfer_status st = dev_malloc(c, want, what, &c->scratch[slot]);
    if (st != MINFER_OK)
        return st;
    c->scratch_size[slot] = want;
    c->generation++;
    *out = c->scratch[slot];
    return MINFER_OK;
}

/* ---- transfers ---- */

minfer_status cu_write(struct cu_ctx *c, void *dst, const void *src, size_t size)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaMemcpyAsync(H2D)"))
        return MINFER_ERR_BACKEND;
    const char *s = src;
    char *d = dst;
    while (size > 0) {
        size_t n = size < STAGING_BYTES ? size : STAGING_BYTES;
        int slot = c->stage_next;
        c->stage_next = (slot + 1) % STAGING_SLOTS;
        cudaError_t e = cudaEventSynchronize(c->stage_ev[slot]); /* slot's last copy done */
        if (e != cudaSuccess)
            return cuda_fail(c, "cudaEventSynchronize(staging slot)", e);
        memcpy(c->stage[slot], s, n);
        e = cudaMemcpyAsync(d, c->stage[slot], n, cudaMemcpyHostToDevice, c->stream);
        if (e != cudaSuccess)
            return cuda_fail(c, "cudaMemcpyAsync(H2D)", e);
        e = cudaEventRecord(c->stage_ev[slot], c->stream);
        if (e != cudaSuccess)
            return cuda_fail(c, "cudaEventRecord(staging slot)", e);
        s += n;
        d += n;
        size -= n;
    }
    return MINFER_OK;
}

/* Whether [p, p + size) lies in page-locked host memory (cu_host_alloc or
 * any other cudaHostAlloc / cudaHostRegister range), which a copy can
 * reach directly. */
static bool page_locked(const void *p, size_t size)
{
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError(); /* unchecked: clears the query's error, not latched for the next call */
        return false;
    }
    if (a.type != cudaMemoryTypeHost)
        return false;
    /* the end too: a range may straddle the end of an allocation */
    if (size > 1 && (cudaPointerGetAttributes(&a, (const char *)p + size - 1) != cudaSuccess ||
                     a.type != cudaMemoryTypeHost)) {
        (void)cudaGetLastError(); /* unchecked: as above */
        return false;
    }
    return true;
}

minfer_status cu_host_alloc(struct cu_ctx *c, size_t size, void **ptr)
{
    *ptr = NULL;
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_NO_MEMORY, "cudaHostAlloc(host_alloc)"))
        return MINFER_ERR_NO_MEMORY;
    cudaError_t e = cudaHostAlloc(ptr, size ? size : 1, cudaHostAllocDefault);
    if (e != cudaSuccess) {
        *ptr = NULL;
        return cu_ctx_fail(c, MINFER_ERR_NO_MEMORY,
                           "cuda: cudaHostAlloc of %zu bytes of page-locked memory: %s", size,
                           cudaGetErrorString(e));
    }
    return MINFER_OK;
}

void cu_host_free(struct cu_ctx *c, void *ptr)
{
    if (ptr && use_device(c) == MINFER_OK)
        cudaFreeHost(ptr); /* unchecked: release */
}

minfer_status cu_read(struct cu_ctx *c, void *dst, const void *src, size_t size)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaMemcpyAsync(D2H)"))
        return MINFER_ERR_BACKEND;
    if (size >= STAGING_DIRECT_MIN && page_locked(dst, size)) {
        /* one copy at the link's rate, no staging (the logits of a batch:
         * 9.7 MB for 16 rows of a 152k vocabulary) */
        cudaError_t e = cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToHost, c->stream);
        if (e != cudaSuccess)
            return cuda_fail(c, "cudaMemcpyAsync(D2H)", e);
        return cu_sync(c);
    }
    char *d = dst;
    const char *s = src;
    while (size > 0) {
        size_t n = size < STAGING_BYTES ? size : STAGING_BYTES;
        cudaError_t e = cudaMemcpyAsync(c->stage[0], s, n, cudaMemcpyDeviceToHost, c->stream);
        if (e != cudaSuccess)
            return cuda_fail(c, "cudaMemcpyAsync(D2H)", e);
        minfer_status st = cu_sync(c);
        if (st != MINFER_OK)
            return st;
        memcpy(d, c->stage[0], n);
        s += n;
        d += n;
        size -= n;
    }
    return MINFER_OK;
}

minfer_status cu_copy_d2d(struct cu_ctx *c, void *dst, const void *src, size_t size)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaMemcpyAsync(D2D)"))
        return MINFER_ERR_BACKEND;
    cudaError_t e = cudaMemcpyAsync(dst, src, size, cudaMemcpyDeviceToDevice, c->stream);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaMemcpyAsync(D2D)", e);
}

minfer_status cu_memset(struct cu_ctx *c, void *dst, int value, size_t size)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaMemsetAsync"))
        return MINFER_ERR_BACKEND;
    cudaError_t e = cudaMemsetAsync(dst, value, size, c->stream);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaMemsetAsync", e);
}

minfer_status cu_sync(struct cu_ctx *c)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaStreamSynchronize"))
        return MINFER_ERR_BACKEND;
    /* A latched error here was left by a call no site read (every launch
     * reads its own), so it is reported as latched, never blamed on the
     * kernel that ran last. */
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return cu_ctx_fail(c, MINFER_ERR_BACKEND,
                           "cuda: an error was latched before this sync (left by an earlier "
                           "runtime call, not attributed to any kernel): %s (%s)",
                           cudaGetErrorString(e), cudaGetErrorName(e));
    e = cudaMemcpyAsync(c->hflags, c->dflags, sizeof(unsigned), cudaMemcpyDeviceToHost,
                        c->stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        cudaGetLastError();
        return cu_ctx_fail(c, MINFER_ERR_BACKEND,
                           "cuda: the stream failed while executing queued work (a kernel "
                           "faulted after its launch succeeded): %s (%s)",
                           cudaGetErrorString(e), cudaGetErrorName(e));
    }
    unsigned f = *c->hflags;
    if (f) {
        e = cudaMemsetAsync(c->dflags, 0, sizeof(unsigned), c->stream);
        if (e == cudaSuccess)
            e = cudaStreamSynchronize(c->stream);
        if (e != cudaSuccess)
            return cuda_fail(c, "clearing the kernels' violation flags", e);
        if (f & KFLAG_GET_ROWS_ID)
            return cu_ctx_fail(c, MINFER_ERR_RANGE,
                               "cuda: GET_ROWS read an id outside [0, n_rows) (rows were "
                               "left zero)");
        if (f & KFLAG_MOE_ID)
            return cu_ctx_fail(c, MINFER_ERR_RANGE,
                               "cuda: MUL_MAT_ID or MOE_WEIGHTS got an expert id outside "
                               "[0, n_expert) (those slots were not written)");
        if (f & KFLAG_ATTN_LIST)
            return cu_ctx_fail(c, MINFER_ERR_RANGE,
                               "cuda: ATTENTION_LISTS got a visible range, list or cell out "
                               "of range (those entries were not read)");
        return cu_ctx_fail(c, MINFER_ERR_RANGE,
                           "cuda: KV_STORE got a cell outside [0, n_cells) (that row was "
                           "not written)");
    }
    return MINFER_OK;
}

/* ---- weights ---- */

static minfer_status add_ref(struct cu_ctx *c, struct wentry *w)
{
    for (size_t i = 0; i < c->nwrefs; i++)
        if (c->wrefs[i] == w)
            return MINFER_OK;
    if (c->nwrefs == c->capwrefs) {
        size_t cap = c->capwrefs ? c->capwrefs * 2 : 256;
        struct wentry **n = realloc(c->wrefs, cap * sizeof(*n));
        if (!n)
            return cu_ctx_fail(c, MINFER_ERR_NO_MEMORY, "cuda: out of host memory (weights)");
        c->wrefs = n;
        c->capwrefs = cap;
    }
    c->wrefs[c->nwrefs++] = w;
    w->refs++;
    return MINFER_OK;
}

minfer_status cu_weight_register(struct cu_ctx *c, const char *name, const void *host,
                                 size_t size, void **out)
{
    *out = NULL;
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    uint64_t fp = fingerprint(host, size);
    minfer_status st = MINFER_OK;
    pthread_mutex_lock(&g_lock);
    for (size_t i = 0; i < g_nw; i++) {
        struct wentry *w = g_w[i];
        if (w->device == c->device && w->size == size && w->fp == fp &&
            strcmp(w->name, name) == 0) {
            st = add_ref(c, w);
            if (st == MINFER_OK)
                *out = w->dptr;
            pthread_mutex_unlock(&g_lock);
            return st;
        }
    }
    if (g_nw == g_capw) {
        size_t cap = g_capw ? g_capw * 2 : 256;
        struct wentry **n = realloc(g_w, cap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&g_lock);
            return cu_ctx_fail(c, MINFER_ERR_NO_MEMORY, "cuda: out of host memory (registry)");
        }
        g_w = n;
        g_capw = cap;
    }
    struct wentry *w = calloc(1, sizeof(*w));
    char *nm = strdup(name);
    if (!w || !nm) {
        free(w);
        free(nm);
        pthread_mutex_unlock(&g_lock);
        return cu_ctx_fail(c, MINFER_ERR_NO_MEMORY, "cuda: out of host memory (registry)");
    }
    char what[200];
    snprintf(what, sizeof(what), "weight '%s'", name);
    st = dev_malloc(c, size, what, &w->dptr);
    if (st != MINFER_OK)
        goto out_free;
    /* upload on this instance's stream (stream-ordered, never the legacy
     * null stream) and wait, so the bytes are on the device on return */
    st = cu_write(c, w->dptr, host, size);
    if (st == MINFER_OK)
        st = cu_sync(c);
    if (st != MINFER_OK)
        goto out_dev;
    w->device = c->device;
    w->name = nm;
    w->size = size;
    w->fp = fp;
    g_w[g_nw++] = w;
    st = add_ref(c, w);
    if (st == MINFER_OK)
        *out = w->dptr;
    pthread_mutex_unlock(&g_lock);
    return st;

out_dev:
    cudaFree(w->dptr); /* unchecked: teardown after a failure being reported */
out_free:
    free(nm);
    free(w);
    pthread_mutex_unlock(&g_lock);
    return st;
}

/* ---- graph capture and replay ---- */

minfer_status cu_capture_begin(struct cu_ctx *c)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaStreamBeginCapture"))
        return MINFER_ERR_BACKEND;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? MINFER_OK
                            : cuda_fail(c, "cudaStreamBeginCapture(ThreadLocal)", e);
}

bool cu_capturing(struct cu_ctx *c)
{
    enum cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &s) != cudaSuccess) {
        cudaGetLastError();
        return false;
    }
    return s != cudaStreamCaptureStatusNone;
}

void cu_capture_abort(struct cu_ctx *c)
{
    /* unchecked (the calls below): ending a failed window has nothing to
     * report to beyond the failure that ended it; the latch is cleared */
    enum cudaStreamCaptureStatus s = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(c->stream, &s); /* unchecked: s stays None on failure */
    if (s != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = NULL;
        cudaStreamEndCapture(c->stream, &g); /* unchecked: ends an invalidated capture too */
        if (g)
            cudaGraphDestroy(g); /* unchecked: teardown */
    }
    cudaGetLastError(); /* the capture's errors are not sticky: clear the latch */
}

minfer_status cu_capture_end(struct cu_ctx *c, void **exec)
{
    *exec = NULL;
    if (injected(c, MINFER_ERR_BACKEND, "cudaStreamEndCapture")) {
        cu_capture_abort(c);
        return MINFER_ERR_BACKEND;
    }
    cudaGraph_t g = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (e != cudaSuccess || !g) {
        if (g)
            cudaGraphDestroy(g); /* unchecked: teardown of a failed capture */
        cu_capture_abort(c);
        return cu_ctx_fail(c, MINFER_ERR_BACKEND, "cuda: cudaStreamEndCapture failed: %s (%s)",
                           cudaGetErrorString(e), cudaGetErrorName(e));
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g); /* unchecked: the graph is not needed past instantiation */
    if (e != cudaSuccess || !x)
        return cuda_fail(c, "cudaGraphInstantiate", e);
    *exec = x;
    return MINFER_OK;
}

minfer_status cu_graph_launch(struct cu_ctx *c, void *exec)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    if (injected(c, MINFER_ERR_BACKEND, "cudaGraphLaunch"))
        return MINFER_ERR_BACKEND;
    cudaError_t e = cudaGraphLaunch((cudaGraphExec_t)exec, c->stream);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaGraphLaunch", e);
}

void cu_graph_destroy(struct cu_ctx *c, void *exec)
{
    if (!exec)
        return;
    cudaSetDevice(c->device); /* unchecked: teardown */
    cudaGraphExecDestroy((cudaGraphExec_t)exec); /* unchecked: teardown */
    cudaGetLastError();
}

minfer_status cu_capture_poison(struct cu_ctx *c)
{
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e == cudaSuccess)
        return MINFER_OK;
    return cu_ctx_fail(c, MINFER_ERR_BACKEND,
                       "cuda: injected capture fault (test hook): cudaStreamSynchronize inside "
                       "the capture window: %s (%s)",
                       cudaGetErrorString(e), cudaGetErrorName(e));
}

/* ---- timing ---- */

minfer_status cu_timer_start(struct cu_ctx *c)
{
    cudaError_t e = cudaEventRecord(c->t0, c->stream);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaEventRecord(t0)", e);
}

minfer_status cu_timer_stop(struct cu_ctx *c, float *ms)
{
    cudaError_t e = cudaEventRecord(c->t1, c->stream);
    if (e != cudaSuccess)
        return cuda_fail(c, "cudaEventRecord(t1)", e);
    minfer_status st = cu_sync(c);
    if (st != MINFER_OK)
        return st;
    e = cudaEventElapsedTime(ms, c->t0, c->t1);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaEventElapsedTime", e);
}

minfer_status cu_mem_info(struct cu_ctx *c, size_t *free_b, size_t *total_b)
{
    minfer_status dev_st = use_device(c);
    if (dev_st != MINFER_OK)
        return dev_st;
    cudaError_t e = cudaMemGetInfo(free_b, total_b);
    return e == cudaSuccess ? MINFER_OK : cuda_fail(c, "cudaMemGetInfo", e);
}
