/*
 * arch.c — can this build's kernels run on a device of compute capability
 * X.Y? The architectures the kernels were compiled for are recorded at
 * build time (MINFER_CUDA_BUILT_ARCHS, CMake CUDA_ARCHITECTURES syntax with
 * commas: "80-real,86-real,89-real,90"). probe and create ask here so a GPU
 * the plugin carries no SASS and no usable PTX for is refused with a
 * reason, instead of being chosen and failing at the first launch with
 * "no kernel image is available for execution on the device".
 *
 * CUDA's rules (Programming Guide, "Binary Compatibility" and "PTX
 * Compatibility"): SASS for sm_XY runs on X.Z with Z >= Y (same major);
 * PTX for compute_XY is compiled by the driver for any X'.Y' >= X.Y;
 * arch-specific targets ("90a") run only on exactly that capability,
 * family targets ("100f") on the same major from that minor up. Below
 * 8.0 nothing runs whatever the list says: the GEMM's cp.async and
 * mma.sync m16n8k16 need it, so such a build would not even compile.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-internal.h"

/* The oldest capability the kernels are written for (kernels/gemm.cu). */
#define MIN_CC 80

#ifndef MINFER_CUDA_BUILT_ARCHS
#define MINFER_CUDA_BUILT_ARCHS ""
#endif

/* Test hook state: a capability every device reports (-1: the real one). */
static int g_fake_major = -1, g_fake_minor = -1;

const char *cuda_built_archs(void)
{
    return MINFER_CUDA_BUILT_ARCHS;
}

/* One entry "NN[a|f][-real|-virtual]": cc = NN, kind = 'a', 'f' or 0,
 * sass / ptx = what it embeds. 0 when the entry is no such thing (CMake's
 * "all", "all-major", "native" or a typo). */
static int parse_entry(const char *s, size_t len, int *cc, char *kind, int *sass, int *ptx)
{
    size_t i = 0;
    int v = 0;
    while (i < len && s[i] >= '0' && s[i] <= '9' && v < 10000)
        v = v * 10 + (s[i++] - '0');
    if (i == 0 || v < 10)
        return 0;
    *kind = 0;
    if (i < len && (s[i] == 'a' || s[i] == 'f'))
        *kind = s[i++];
    *sass = *ptx = 1;
    if (len - i == 5 && !strncmp(s + i, "-real", 5))
        *ptx = 0;
    else if (len - i == 8 && !strncmp(s + i, "-virtual", 8))
        *sass = 0;
    else if (i != len)
        return 0;
    *cc = v;
    return 1;
}

/* Does code for capability cc (as SASS when sass, else as PTX) of kind
 * run on a device of capability dev? */
static int runs_on(int cc, char kind, int sass, int dev)
{
    if (kind == 'a')
        return dev == cc;
    if (sass || kind == 'f')
        return dev / 10 == cc / 10 && dev % 10 >= cc % 10;
    return dev >= cc;
}

int cuda_arch_runs(int major, int minor, const char *archs, char *why, size_t why_len)
{
    if (why && why_len)
        why[0] = 0;
    if (major < 0 || minor < 0 || minor > 9 || major > 99) {
        if (why)
            snprintf(why, why_len, "compute capability %d.%d is not a valid one", major,
                     minor);
        return 0;
    }
    int dev = major * 10 + minor, found_ptx = 0;
    if (dev < MIN_CC) {
        if (why)
            snprintf(why, why_len,
                     "compute capability %d.%d is older than %d.%d, the oldest the plugin's "
                     "kernels are written for (cp.async, mma.sync m16n8k16)",
                     major, minor, MIN_CC / 10, MIN_CC % 10);
        return 0;
    }
    const char *p = archs ? archs : "";
    while (*p) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        int cc, sass, ptx;
        char kind;
        if (len && !parse_entry(p, len, &cc, &kind, &sass, &ptx)) {
            /* "all", "native" and the like: what they hold is not known
             * here, so nothing is refused on their account */
            if (why)
                snprintf(why, why_len, "built for '%.*s': not checked", (int)len, p);
            return 1;
        }
        if (len && sass && runs_on(cc, kind, 1, dev)) {
            if (why)
                snprintf(why, why_len, "SASS for sm_%d%s", cc, kind == 'a' ? "a" : "");
            return 1;
        }
        if (len && ptx && runs_on(cc, kind, 0, dev))
            found_ptx = cc;
        p += len + (end ? 1 : 0);
    }
    if (found_ptx) {
        if (why)
            snprintf(why, why_len,
                     "PTX for compute_%d, compiled by the driver at first use", found_ptx);
        return 1;
    }
    if (why)
        snprintf(why, why_len,
                 "compute capability %d.%d has no SASS and no usable PTX in this build "
                 "(built for %s); rebuild the plugin with -DMINFER_CUDA_ARCHS=%d",
                 major, minor, archs && *archs ? archs : "nothing", dev);
    return 0;
}

void cuda_arch_fake(int major, int minor)
{
    g_fake_major = major;
    g_fake_minor = minor;
}

int cuda_device_runs(int device, char *why, size_t why_len)
{
    int major = g_fake_major, minor = g_fake_minor;
    if (major < 0 && cu_device_cc(device, &major, &minor) != 0) {
        /* create reports the runtime's own error for this device */
        if (why && why_len)
            why[0] = 0;
        return 1;
    }
    char how[400];
    int ok = cuda_arch_runs(major, minor, cuda_built_archs(), how, sizeof how);
    if (why)
        snprintf(why, why_len, "device %d: %s", device, how);
    return ok;
}
