/*
 * failalloc.c — an LD_PRELOAD shim that makes exactly one heap allocation
 * fail, for the allocation-failure sweep (scripts/alloc-sweep.sh).
 *
 *   FAILALLOC_N=K      the K-th allocation (1-based, counted from when this
 *                      library is initialised) returns NULL with ENOMEM, once;
 *                      0 or unset: nothing fails (a counting run)
 *   FAILALLOC_REPORT=F at exit, append "<allocations> <failed 0|1>" to F, so
 *                      the sweep knows how many points a command has and
 *                      whether the injected failure was reached
 *
 * malloc, calloc, realloc (when it must allocate), posix_memalign,
 * aligned_alloc, memalign and valloc count. glibc routes its own
 * allocations (strdup, fopen, dlopen after start-up, PCRE2 through
 * malloc) through these symbols, so they count too. The real allocator is
 * reached through glibc's __libc_* entry points, which avoids dlsym (it
 * allocates) during interposition. Counting is atomic, so it works with
 * threads; which thread takes the K-th allocation can vary between runs.
 * Test code only: never linked into the library.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

#define EXPORT __attribute__((visibility("default")))

static atomic_ulong count;
static unsigned long fail_at;  /* 0: never */
static atomic_bool armed;      /* counting starts at our constructor */
static atomic_bool failed;

static bool should_fail(void)
{
    if (!atomic_load_explicit(&armed, memory_order_relaxed))
        return false;
    unsigned long n = atomic_fetch_add_explicit(&count, 1, memory_order_relaxed) + 1;
    if (fail_at && n == fail_at) {
        atomic_store(&failed, true);
        errno = ENOMEM;
        return true;
    }
    return false;
}

static void report(void)
{
    atomic_store(&armed, false); /* stdio below must not count or fail */
    const char *f = getenv("FAILALLOC_REPORT");
    if (!f || !*f)
        return;
    FILE *fp = fopen(f, "a");
    if (!fp)
        return;
    fprintf(fp, "%lu %d\n", atomic_load(&count), atomic_load(&failed) ? 1 : 0);
    fclose(fp);
}

__attribute__((constructor)) static void failalloc_init(void)
{
    const char *s = getenv("FAILALLOC_N");
    fail_at = s ? strtoul(s, NULL, 10) : 0;
    atexit(report);
    atomic_store(&armed, true);
}

EXPORT void *malloc(size_t n)
{
    return should_fail() ? NULL : __libc_malloc(n);
}

EXPORT void *calloc(size_t a, size_t b)
{
    return should_fail() ? NULL : __libc_calloc(a, b);
}

EXPORT void *realloc(void *p, size_t n)
{
    /* realloc(p, 0) frees: not an allocation that can fail. */
    if (n && should_fail())
        return NULL;
    return __libc_realloc(p, n);
}

EXPORT int posix_memalign(void **out, size_t align, size_t n)
{
    if (align < sizeof(void *) || (align & (align - 1)))
        return EINVAL;
    if (should_fail())
        return ENOMEM;
    void *p = __libc_memalign(align, n);
    if (!p)
        return ENOMEM;
    *out = p;
    return 0;
}

EXPORT void *aligned_alloc(size_t align, size_t n)
{
    return should_fail() ? NULL : __libc_memalign(align, n);
}

EXPORT void *memalign(size_t align, size_t n)
{
    return should_fail() ? NULL : __libc_memalign(align, n);
}

EXPORT void *valloc(size_t n)
{
    return should_fail() ? NULL : __libc_memalign(4096, n);
}
