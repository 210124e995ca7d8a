/*
 * plugin.c — the plugin loader and the runtime: finds backend plugins,
 * dlopen()s them, negotiates the ABI, validates their tables, probes them,
 * records every candidate with the reason it was or was not loaded, and
 * unloads them (shutdown, then dlclose) when no runtime holds them.
 *
 * A process-wide registry keyed by real path makes loading idempotent: a
 * .so is opened and its entry called once however many runtimes (or
 * search paths) name it, and shut down when the last runtime lets go.
 */
#include "plugin.h"
#include "error.h"

#include <ctype.h>
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef MINFER_INSTALL_PLUGIN_DIR
#define MINFER_INSTALL_PLUGIN_DIR "/usr/local/lib/minfer/backends"
#endif

#define NAME_MAX_LEN 64      /* backend names, e.g. "cpu" */
#define VERSION_MAX_LEN 128  /* plugin version strings */
#define WHY_LEN 256          /* probe's reason buffer */

/* Bytes of the table that ABI 1.<minor> defines, indexed by minor. */
#define IFACE_END(slot)                                                                    \
    (offsetof(struct minfer_backend_iface, slot) +                                         \
     sizeof(((struct minfer_backend_iface *)0)->slot))
static const size_t iface_size_of_minor[] = {
    [0] = IFACE_END(shutdown),
    [1] = IFACE_END(shutdown), /* 1.1 adds ops and params (ir.h: ATTENTION_LISTS, GEGLU, ...), no table slots */
    [2] = IFACE_END(host_free),
};
#define IFACE_HEADER_SIZE IFACE_END(abi_minor)
_Static_assert(sizeof iface_size_of_minor / sizeof iface_size_of_minor[0] == MINFER_ABI_MINOR + 1,
               "a new ABI minor needs its table size in iface_size_of_minor");

/* ---- logging and the host table ---- */

static int log_threshold = MINFER_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_init(void)
{
    static const char *const names[] = {"error", "warn", "info", "debug"};
    /* secure_getenv: a setuid/setgid program's caller does not choose its
     * log level (nor anything else the library reads from the environment). */
    const char *s = secure_getenv("MINFER_LOG_LEVEL");
    if (!s || !*s)
        return;
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(s, names[i]))
            log_threshold = i;
    if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0')
        log_threshold = s[0] - '0';
}

/* minfer_log_set's callback: the pair is swapped under a lock, read under it */
static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static minfer_log_fn log_fn;
static void *log_user;

void minfer_log_set(minfer_log_fn fn, void *user, int max_level)
{
    pthread_once(&log_once, log_init);
    pthread_mutex_lock(&log_mu);
    log_fn = fn;
    log_user = user;
    if (max_level >= 0)
        log_threshold = max_level > MINFER_LOG_DEBUG ? MINFER_LOG_DEBUG : max_level;
    pthread_mutex_unlock(&log_mu);
}

static void vlog_at(int level, const char *fmt, va_list ap)
{
    static const char *const tags[] = {"error", "warn", "info", "debug"};
    pthread_once(&log_once, log_init);
    if (level > log_threshold)
        return;
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    pthread_mutex_lock(&log_mu);
    minfer_log_fn fn = log_fn;
    void *user = log_user;
    pthread_mutex_unlock(&log_mu);
    if (fn) {
        fn(level, msg, user);
        return;
    }
    const char *tag = level >= 0 && level <= 3 ? tags[level] : "log";
    /* One stdio call per line so concurrent lines do not interleave. */
    fprintf(stderr, "minfer: %s: %s\n", tag, msg);
}

void plugin_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_at(level, fmt, ap);
    va_end(ap);
}

static void host_log(int level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void host_log(int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog_at(level, fmt, ap);
    va_end(ap);
}

static const struct minfer_host the_host = {
    .struct_size = sizeof(struct minfer_host),
    .abi_major = MINFER_ABI_MAJOR,
    .abi_minor = MINFER_ABI_MINOR,
    .log = host_log,
};

const struct minfer_host *plugin_host(void)
{
    return &the_host;
}

/* ---- small helpers ---- */

/* printf into a fresh heap string; NULL on out-of-memory. */
static char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *strf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *s = malloc((size_t)n + 1);
    if (!s)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(s, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return s;
}

/* Copies a plugin-supplied string of at most max-1 bytes, replacing
 * non-printable bytes; NULL if s is NULL, empty or too long. */
static char *copy_plugin_string(const char *s, size_t max)
{
    if (!s)
        return NULL;
    size_t n = strnlen(s, max);
    if (n == 0 || n == max)
        return NULL;
    char *c = malloc(n + 1);
    if (!c)
        return NULL;
    for (size_t i = 0; i < n; i++)
        c[i] = isprint((unsigned char)s[i]) ? s[i] : '?';
    c[n] = '\0';
    return c;
}

static bool valid_backend_name(const char *s)
{
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '-' && *s != '.')
            return false;
    return true;
}


/* ---- the process-wide registry of opened plugins ---- */

/* One opened .so whose table passed validation and whose probe said yes. */
struct so_entry {
    struct so_entry *next;
    char *real;                        /* realpath, the registry key */
    void *handle;
    struct minfer_backend_iface table; /* zero-padded copy */
    uint32_t iface_size;
    uint16_t abi_major, abi_minor;     /* as the plugin answered */
    uint16_t abi_negotiated;
    char *name, *version;
    int score;
    int n_devices;
    unsigned refs;                     /* runtimes holding it */
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct so_entry *registry;

static struct so_entry *registry_find(const char *real)
{
    for (struct so_entry *e = registry; e; e = e->next)
        if (!strcmp(e->real, real))
            return e;
    return NULL;
}

/* Drops one reference; the last one shuts the plugin down and closes it.
 * Caller holds registry_lock. */
static void registry_release(struct so_entry *e)
{
    if (!e || --e->refs > 0)
        return;
    for (struct so_entry **pp = &registry; *pp; pp = &(*pp)->next)
        if (*pp == e) {
            *pp = e->next;
            break;
        }
    plugin_log(MINFER_LOG_DEBUG, "unloading plugin '%s' (%s)", e->name, e->real);
    if (e->table.shutdown)
        e->table.shutdown();
    dlclose(e->handle);
    free(e->real);
    free(e->name);
    free(e->version);
    free(e);
}

/* ---- the runtime ---- */

struct record {
    struct minfer_plugin_record pub;   /* strings below point into this record */
    char *path, *name, *version, *reason;
    char *real;                        /* realpath, NULL if it could not be resolved */
    struct so_entry *so;               /* held while state is LOADED */
    bool no_device;                    /* refused only because its probe found no device */
};

struct search_item {
    char *path;
    const char *origin;
};

struct minfer_runtime {
    struct record *recs;
    size_t n_recs, cap_recs;
    struct search_item *search;
    size_t n_search, cap_search;
    struct minfer_plugin *plugins;     /* the loaded ones, in search order */
    size_t n_plugins;
    bool oom;
    const char *only_backend; /* opts' filter, read during minfer_runtime_new only */
};

/* Grows a (ptr, n, cap) array by one element of size sz; false on overflow
 * or out-of-memory. */
static bool grow(void **ptr, size_t *cap, size_t n, size_t sz)
{
    if (n < *cap)
        return true;
    size_t nc = *cap ? *cap * 2 : 8;
    if (nc < *cap || nc > SIZE_MAX / sz)
        return false;
    void *p = realloc(*ptr, nc * sz);
    if (!p)
        return false;
    *ptr = p;
    *cap = nc;
    return true;
}

static struct record *add_record(struct minfer_runtime *rt, const char *path, const char *origin)
{
    if (!grow((void **)&rt->recs, &rt->cap_recs, rt->n_recs, sizeof *rt->recs)) {
        rt->oom = true;
        return NULL;
    }
    struct record *r = &rt->recs[rt->n_recs];
    memset(r, 0, sizeof *r);
    r->path = strdup(path);
    if (!r->path) {
        rt->oom = true;
        return NULL;
    }
    r->pub.origin = origin;
    r->pub.state = MINFER_PLUGIN_REJECTED;
    rt->n_recs++;
    return r;
}

static void add_search(struct minfer_runtime *rt, const char *path, const char *origin)
{
    if (!grow((void **)&rt->search, &rt->cap_search, rt->n_search, sizeof *rt->search)) {
        rt->oom = true;
        return;
    }
    char *p = strdup(path);
    if (!p) {
        rt->oom = true;
        return;
    }
    rt->search[rt->n_search].path = p;
    rt->search[rt->n_search].origin = origin;
    rt->n_search++;
}

/* Sets a record's refusal; the reason takes ownership of msg (NULL = OOM). */
static void reject(struct minfer_runtime *rt, struct record *r, uint32_t state, char *msg)
{
    r->pub.state = state;
    free(r->reason);
    r->reason = msg;
    if (!msg) {
        rt->oom = true;
        return;
    }
    /* A plugin the user pointed at that is broken deserves a warning; one
     * whose hardware is simply absent (no GPU here) is normal and stays at
     * info level: `minfer backends` still shows it. */
    bool explicit_ = strcmp(r->pub.origin, "libdir") && strcmp(r->pub.origin, "install");
    bool warn = explicit_ && state == MINFER_PLUGIN_REJECTED && !r->no_device;
    plugin_log(warn ? MINFER_LOG_WARN : MINFER_LOG_INFO,
               "plugin %s (%s): %s", r->path, r->pub.origin, msg);
}

/* ---- loading one candidate ---- */

static const struct {
    size_t off;
    const char *name;
} required_slots[] = {
#define REQ(slot) {offsetof(struct minfer_backend_iface, slot), #slot}
    REQ(probe),        REQ(device_count),  REQ(device_info),  REQ(create),
    REQ(destroy),      REQ(supports_op),   REQ(buffer_alloc), REQ(buffer_free),
    REQ(buffer_write), REQ(buffer_read),   REQ(weight_register), REQ(execute_node),
    REQ(synchronize),  REQ(last_error),    REQ(shutdown),
#undef REQ
};

/* Validates a table the entry returned and copies it into e. Returns NULL
 * on success or the reason it was refused (heap string). Reads the table
 * only up to the size it declares. */
static char *check_table(const struct minfer_backend_iface *tbl, uint32_t answered,
                         struct so_entry *e, bool *may_shutdown)
{
    *may_shutdown = false;
    uint32_t major = MINFER_ABI_PACK_MAJOR(answered), minor = MINFER_ABI_PACK_MINOR(answered);
    /* The header (struct_size, abi_major, abi_minor) has the same layout in
     * every major, so it is safe to read before the major is known. */
    if (tbl->struct_size < IFACE_HEADER_SIZE)
        return strf("table struct_size %u is smaller than its %zu-byte header",
                    (unsigned)tbl->struct_size, (size_t)IFACE_HEADER_SIZE);
    if (major != MINFER_ABI_MAJOR || tbl->abi_major != MINFER_ABI_MAJOR)
        return strf("ABI major mismatch: plugin speaks %u.%u, this core speaks %d.%d "
                    "(rebuild the plugin against this minfer)",
                    (unsigned)tbl->abi_major, (unsigned)tbl->abi_minor, MINFER_ABI_MAJOR,
                    MINFER_ABI_MINOR);
    if (minor > MINFER_ABI_MINOR)
        return strf("ABI minor too new: plugin answered %u.%u but this core offers at most "
                    "%d.%d (a plugin must answer with at most the offered minor; "
                    "upgrade minfer or use an older plugin)",
                    (unsigned)major, (unsigned)minor, MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    /* A table compiled against a later minor may answer an older one (its
     * extra slots are then ignored); one older than its answer is lying. */
    if (tbl->abi_minor < minor)
        return strf("inconsistent ABI: the entry answered %u.%u but its table is only %u.%u",
                    (unsigned)major, (unsigned)minor, (unsigned)tbl->abi_major,
                    (unsigned)tbl->abi_minor);
    uint16_t neg = (uint16_t)minor; /* == min(core, plugin) after the checks above */
    size_t need = iface_size_of_minor[0];
    if (tbl->struct_size < need)
        return strf("table struct_size %u is smaller than the %zu bytes ABI %d.0 requires",
                    (unsigned)tbl->struct_size, need, MINFER_ABI_MAJOR);
    size_t n = tbl->struct_size;
    if (n > iface_size_of_minor[neg])
        n = iface_size_of_minor[neg];
    if (n > sizeof e->table)
        n = sizeof e->table;
    memset(&e->table, 0, sizeof e->table);
    memcpy(&e->table, tbl, n);
    e->iface_size = (uint32_t)n;
    e->abi_major = (uint16_t)major;
    e->abi_minor = (uint16_t)minor;
    e->abi_negotiated = neg;
    *may_shutdown = e->table.shutdown != NULL;
    for (size_t i = 0; i < sizeof required_slots / sizeof required_slots[0]; i++) {
        void *slot;
        memcpy(&slot, (const char *)&e->table + required_slots[i].off, sizeof slot);
        if (!slot)
            return strf("required ABI 1.0 slot '%s' is NULL", required_slots[i].name);
    }
    if (!e->table.host_alloc != !e->table.host_free)
        return strf("ABI 1.2 slots host_alloc and host_free must be both set or both NULL");
    e->name = copy_plugin_string(e->table.name, NAME_MAX_LEN);
    if (!e->name || !valid_backend_name(e->name))
        return strf("bad backend name: expected 1-%d characters of [A-Za-z0-9_.-]",
                    NAME_MAX_LEN - 1);
    e->version = copy_plugin_string(e->table.version, VERSION_MAX_LEN);
    if (!e->version)
        return strf("bad version string: expected 1-%d printable characters",
                    VERSION_MAX_LEN - 1);
    return NULL;
}

/* Opens, validates and probes a file not yet in the registry. Returns the
 * new entry (refs 1, registered) or NULL with the reason in *why (heap;
 * NULL on OOM) and what was learnt about the plugin copied into r. */
static struct so_entry *open_plugin(const char *real, struct record *r, char **why)
{
    *why = NULL;
    dlerror();
    void *h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *de = dlerror();
        *why = strf("dlopen failed: %s", de ? de : "unknown error");
        return NULL;
    }
    union {
        void *obj;
        minfer_plugin_entry_fn fn;
    } sym;
    dlerror();
    sym.obj = dlsym(h, MINFER_PLUGIN_ENTRY_SYMBOL);
    if (!sym.obj) {
        *why = strf("no entry symbol '%s' (not a minfer plugin, or built without "
                    "MINFER_PLUGIN_EXPORT)", MINFER_PLUGIN_ENTRY_SYMBOL);
        goto out_close;
    }
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    const struct minfer_backend_iface *tbl = sym.fn(&abi, &the_host);
    r->pub.abi_major = MINFER_ABI_PACK_MAJOR(abi);
    r->pub.abi_minor = MINFER_ABI_PACK_MINOR(abi);
    if (!tbl) {
        *why = strf("entry returned NULL: the plugin refused ABI %d.%d offered by this core "
                    "(it answered %u.%u)", MINFER_ABI_MAJOR, MINFER_ABI_MINOR,
                    (unsigned)MINFER_ABI_PACK_MAJOR(abi), (unsigned)MINFER_ABI_PACK_MINOR(abi));
        goto out_close;
    }
    struct so_entry *e = calloc(1, sizeof *e);
    if (!e)
        goto out_close;
    bool may_shutdown;
    *why = check_table(tbl, abi, e, &may_shutdown);
    if (e->name)
        r->name = strdup(e->name);
    if (e->version)
        r->version = strdup(e->version);
    if (*why)
        goto out_shutdown;
    char pwhy[WHY_LEN] = "";
    int score = e->table.probe(pwhy, sizeof pwhy);
    pwhy[sizeof pwhy - 1] = '\0';
    for (char *c = pwhy; *c; c++)
        if (!isprint((unsigned char)*c))
            *c = '?';
    if (score <= 0) {
        r->no_device = true;
        *why = strf("cannot run here (probe returned %d): %s", score,
                    pwhy[0] ? pwhy : "the plugin gave no reason");
        goto out_shutdown;
    }
    int nd = e->table.device_count();
    e->n_devices = nd > 0 ? nd : 0;
    e->score = score;
    e->handle = h;
    e->real = strdup(real);
    if (!e->real)
        goto out_shutdown;
    e->refs = 1;
    e->next = registry;
    registry = e;
    return e;

out_shutdown:
    if (may_shutdown)
        e->table.shutdown();
    free(e->name);
    free(e->version);
    free(e);
out_close:
    dlclose(h);
    return NULL;
}

/* Warns when st (of path, a plugin file or its directory) could be changed
 * by someone other than root or this process's effective user: whoever can
 * write it chooses code that dlopen runs (its ELF constructors run before
 * any ABI check). A warning, not a refusal, so a developer's build tree in a
 * shared group directory still loads (docs/plugin-abi.md, "Trust"). */
static void warn_if_untrusted(const char *what, const char *path, const struct stat *st)
{
    if (st->st_uid != 0 && st->st_uid != geteuid())
        plugin_log(MINFER_LOG_WARN,
                   "plugin %s %s is owned by uid %u, neither root nor this process's user "
                   "(uid %u): whoever owns it chooses the code this process runs",
                   what, path, (unsigned)st->st_uid, (unsigned)geteuid());
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        plugin_log(MINFER_LOG_WARN,
                   "plugin %s %s is %s-writable (mode %04o): anyone who can write it chooses "
                   "the code this process runs; chmod go-w it",
                   what, path, st->st_mode & S_IWOTH ? "world" : "group",
                   (unsigned)(st->st_mode & 07777));
}

/* Checks the real path of a plugin about to be opened and its directory. */
static void check_trust(const char *real)
{
    struct stat st;
    if (stat(real, &st) == 0)
        warn_if_untrusted("file", real, &st);
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", real);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return;
    if (slash == dir)
        slash[1] = '\0';
    else
        *slash = '\0';
    if (stat(dir, &st) == 0)
        warn_if_untrusted("directory", dir, &st);
}

static void consider_file(struct minfer_runtime *rt, const char *path, const char *origin)
{
    struct record *r = add_record(rt, path, origin);
    if (!r)
        return;
    char real[PATH_MAX];
    if (!realpath(path, real)) {
        int e = errno;
        reject(rt, r, MINFER_PLUGIN_REJECTED,
               e == ENOENT ? strf("file missing: %s", strerror(e))
                           : strf("cannot resolve path: %s", strerror(e)));
        return;
    }
    r->real = strdup(real);
    if (!r->real) {
        rt->oom = true;
        return;
    }
    for (size_t i = 0; i + 1 < rt->n_recs; i++)
        if (rt->recs[i].real && !strcmp(rt->recs[i].real, real)) {
            reject(rt, r, MINFER_PLUGIN_DUPLICATE,
                   strf("same file as candidate %zu (%s); considered once", i,
                        rt->recs[i].path));
            return;
        }
    struct so_entry *e = registry_find(real);
    if (e) {
        e->refs++;
    } else {
        char *why;
        check_trust(real);
        e = open_plugin(real, r, &why);
        if (!e) {
            reject(rt, r, MINFER_PLUGIN_REJECTED, why);
            return;
        }
    }
    r->so = e;
    free(r->name);
    free(r->version);
    r->name = strdup(e->name);
    r->version = strdup(e->version);
    if (!r->name || !r->version)
        rt->oom = true;
    r->pub.abi_major = e->abi_major;
    r->pub.abi_minor = e->abi_minor;
    r->pub.score = e->score;
    r->pub.n_devices = e->n_devices;
    r->pub.state = MINFER_PLUGIN_LOADED;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bool is_plugin_file_name(const char *n)
{
    size_t len = strlen(n);
    return len > strlen("libminfer-.so") && !strncmp(n, "libminfer-", 10) &&
           !strcmp(n + len - 3, ".so");
}

/* Whether file name n is libminfer-<backend>.so. */
static bool is_file_of_backend(const char *n, const char *backend)
{
    size_t bl = strlen(backend);
    return !strncmp(n, "libminfer-", 10) && !strncmp(n + 10, backend, bl) &&
           !strcmp(n + 10 + bl, ".so");
}

/* Scans a directory for libminfer-*.so in name order. A missing directory
 * is a candidate only when the user named it (explicit). */
static void consider_dir(struct minfer_runtime *rt, const char *dir, const char *origin)
{
    DIR *d = opendir(dir);
    if (!d) {
        struct record *r = add_record(rt, dir, origin);
        if (r)
            reject(rt, r, MINFER_PLUGIN_REJECTED,
                   strf("cannot read directory: %s", strerror(errno)));
        return;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_plugin_file_name(de->d_name))
            continue;
        if (rt->only_backend && !is_file_of_backend(de->d_name, rt->only_backend)) {
            plugin_log(MINFER_LOG_DEBUG, "plugin %s/%s not opened: only backend '%s' was asked for",
                       dir, de->d_name, rt->only_backend);
            continue;
        }
        char *s = strdup(de->d_name);
        if (!s || !grow((void **)&names, &cap, n, sizeof *names)) {
            free(s);
            rt->oom = true;
            break;
        }
        names[n++] = s;
    }
    closedir(d);
    if (n > 1)
        qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        size_t dl = strlen(dir);
        bool slash = dl > 0 && dir[dl - 1] == '/';
        char *p = strf("%s%s%s", dir, slash ? "" : "/", names[i]);
        if (p)
            consider_file(rt, p, origin);
        else
            rt->oom = true;
        free(p);
        free(names[i]);
    }
    free(names);
}

/* Considers one search item: a file, a directory, or (explicit) a missing
 * path. Default directories that do not exist are listed in the search
 * path but make no record. */
static void consider_path(struct minfer_runtime *rt, const char *path, const char *origin,
                          bool explicit_)
{
    add_search(rt, path, origin);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (explicit_)
            consider_file(rt, path, origin); /* records "file missing" */
        else
            plugin_log(MINFER_LOG_DEBUG, "plugin dir %s (%s) does not exist", path, origin);
        return;
    }
    if (S_ISDIR(sb.st_mode)) {
        /* A directory already searched (e.g. the libdir one is the install
         * dir) is listed again but not rescanned. */
        char real[PATH_MAX];
        if (realpath(path, real))
            for (size_t i = 0; i + 1 < rt->n_search; i++) {
                char r2[PATH_MAX];
                if (realpath(rt->search[i].path, r2) && !strcmp(r2, real))
                    return;
            }
        consider_dir(rt, path, origin);
    } else {
        consider_file(rt, path, origin);
    }
}

/* One MINFER_PLUGIN_PATH entry. A relative entry is refused: it would
 * resolve against whatever directory the process happens to run in. */
static void consider_env_entry(struct minfer_runtime *rt, const char *path)
{
    if (path[0] == '/') {
        consider_path(rt, path, "env", true);
        return;
    }
    add_search(rt, path, "env");
    struct record *r = add_record(rt, path, "env");
    if (r)
        reject(rt, r, MINFER_PLUGIN_REJECTED,
               strf("relative entry in MINFER_PLUGIN_PATH refused: it would depend on the "
                    "current directory; give an absolute path"));
}

/* <dir of the object holding this code>/minfer/backends, or NULL. */
static char *libdir_plugin_dir(void)
{
    Dl_info info;
    if (!dladdr((const void *)&minfer_runtime_new, &info) || !info.dli_fname ||
        !info.dli_fname[0])
        return NULL;
    char real[PATH_MAX];
    if (!realpath(info.dli_fname, real))
        return NULL;
    char *slash = strrchr(real, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    return strf("%s/minfer/backends", real[0] ? real : "");
}

/* Among loaded records of one name the highest score wins (the earliest
 * on ties); the others are shadowed and released. */
static void resolve_shadowing(struct minfer_runtime *rt)
{
    for (size_t i = 0; i < rt->n_recs; i++) {
        struct record *a = &rt->recs[i];
        if (a->pub.state != MINFER_PLUGIN_LOADED)
            continue;
        for (size_t j = i + 1; j < rt->n_recs; j++) {
            struct record *b = &rt->recs[j];
            if (b->pub.state != MINFER_PLUGIN_LOADED || strcmp(a->name, b->name))
                continue;
            struct record *lose = b->pub.score > a->pub.score ? a : b;
            struct record *win = lose == a ? b : a;
            reject(rt, lose, MINFER_PLUGIN_SHADOWED,
                   strf("shadowed by %s (score %d vs %d; the higher score wins, the "
                        "earlier on ties)", win->path, win->pub.score, lose->pub.score));
            lose->pub.score = lose->so->score;
            registry_release(lose->so);
            lose->so = NULL;
            if (lose == a)
                break;
        }
    }
}

static void build_plugin_list(struct minfer_runtime *rt)
{
    size_t n = 0;
    for (size_t i = 0; i < rt->n_recs; i++)
        n += rt->recs[i].pub.state == MINFER_PLUGIN_LOADED;
    if (!n)
        return;
    rt->plugins = calloc(n, sizeof *rt->plugins);
    if (!rt->plugins) {
        rt->oom = true;
        return;
    }
    for (size_t i = 0; i < rt->n_recs; i++) {
        struct record *r = &rt->recs[i];
        if (r->pub.state != MINFER_PLUGIN_LOADED)
            continue;
        struct minfer_plugin *p = &rt->plugins[rt->n_plugins++];
        p->iface = &r->so->table;
        p->iface_size = r->so->iface_size;
        p->abi_minor = r->so->abi_negotiated;
        p->handle = r->so->handle;
        p->path = r->so->real;
        p->name = r->so->name;
        p->version = r->so->version;
        p->score = r->so->score;
    }
}

/* Points each record's public strings at its own storage. */
static void finish_records(struct minfer_runtime *rt)
{
    for (size_t i = 0; i < rt->n_recs; i++) {
        struct record *r = &rt->recs[i];
        r->pub.struct_size = sizeof r->pub;
        r->pub.path = r->path ? r->path : "";
        r->pub.name = r->name ? r->name : "";
        r->pub.version = r->version ? r->version : "";
        r->pub.loaded = r->pub.state == MINFER_PLUGIN_LOADED;
        r->pub.reason = r->pub.loaded ? "" : r->reason ? r->reason : "";
        if (!r->pub.loaded)
            r->pub.n_devices = 0;
    }
}

/* ---- public API ---- */

struct minfer_runtime *minfer_runtime_new(const struct minfer_runtime_opts *opts,
                                          minfer_status *st, char *err, size_t err_len)
{
    static const size_t opts_v1 = offsetof(struct minfer_runtime_opts, flags) + sizeof(uint32_t);
    struct minfer_runtime_opts o = {0};
    if (opts) {
        if (opts->struct_size < opts_v1) {
            errf(err, err_len, MINFER_ERR_INVALID_ARG,
                 "minfer_runtime_new: opts->struct_size is %u, expected at least %zu "
                 "(set it to sizeof(struct minfer_runtime_opts))",
                 (unsigned)opts->struct_size, opts_v1);
            if (st)
                *st = MINFER_ERR_INVALID_ARG;
            return NULL;
        }
        memcpy(&o, opts, opts->struct_size < sizeof o ? opts->struct_size : sizeof o);
        if (o.n_plugin_paths && !o.plugin_paths) {
            errf(err, err_len, MINFER_ERR_INVALID_ARG,
                 "minfer_runtime_new: n_plugin_paths > 0 but plugin_paths is NULL");
            if (st)
                *st = MINFER_ERR_INVALID_ARG;
            return NULL;
        }
    }
    struct minfer_runtime *rt = calloc(1, sizeof *rt);
    if (!rt)
        goto out_oom;
    rt->only_backend = o.only_backend && o.only_backend[0] ? o.only_backend : NULL;

    pthread_mutex_lock(&registry_lock);
    for (size_t i = 0; i < o.n_plugin_paths; i++)
        if (o.plugin_paths[i] && o.plugin_paths[i][0])
            consider_path(rt, o.plugin_paths[i], "api", true);
    /* secure_getenv: NULL in a setuid/setgid (AT_SECURE) process, so its
     * caller cannot make it dlopen a library of the caller's choosing. */
    const char *env =
        (o.flags & MINFER_RUNTIME_NO_ENV) ? NULL : secure_getenv("MINFER_PLUGIN_PATH");
    if (env && *env) {
        char *copy = strdup(env);
        if (!copy)
            rt->oom = true;
        for (char *save = NULL, *tok = copy ? strtok_r(copy, ":", &save) : NULL; tok;
             tok = strtok_r(NULL, ":", &save))
            consider_env_entry(rt, tok);
        free(copy);
    }
    if (!(o.flags & MINFER_RUNTIME_NO_DEFAULT_DIRS)) {
        char *ld = libdir_plugin_dir();
        if (ld)
            consider_path(rt, ld, "libdir", false);
        free(ld);
        consider_path(rt, MINFER_INSTALL_PLUGIN_DIR, "install", false);
    }
    resolve_shadowing(rt);
    pthread_mutex_unlock(&registry_lock);
    build_plugin_list(rt);
    finish_records(rt);
    if (rt->oom)
        goto out_free;
    if (st)
        *st = MINFER_OK;
    if (err && err_len)
        err[0] = '\0';
    return rt;

out_free:
    minfer_runtime_free(rt);
out_oom:
    errf(err, err_len, MINFER_ERR_NO_MEMORY,
         "minfer_runtime_new: out of host memory while loading plugins");
    if (st)
        *st = MINFER_ERR_NO_MEMORY;
    return NULL;
}

void minfer_runtime_free(struct minfer_runtime *rt)
{
    if (!rt)
        return;
    pthread_mutex_lock(&registry_lock);
    /* Release in reverse load order so later plugins go first. */
    for (size_t i = rt->n_recs; i-- > 0;)
        registry_release(rt->recs[i].so);
    pthread_mutex_unlock(&registry_lock);
    for (size_t i = 0; i < rt->n_recs; i++) {
        struct record *r = &rt->recs[i];
        free(r->path);
        free(r->name);
        free(r->version);
        free(r->reason);
        free(r->real);
    }
    for (size_t i = 0; i < rt->n_search; i++)
        free(rt->search[i].path);
    free(rt->recs);
    free(rt->search);
    free(rt->plugins);
    free(rt);
}

size_t minfer_runtime_record_count(const struct minfer_runtime *rt)
{
    return rt ? rt->n_recs : 0;
}

bool minfer_runtime_record(const struct minfer_runtime *rt, size_t i,
                           struct minfer_plugin_record *out)
{
    const size_t min_size = offsetof(struct minfer_plugin_record, reason) + sizeof(char *);
    if (!rt || !out || i >= rt->n_recs || out->struct_size < min_size)
        return false;
    uint32_t size = out->struct_size;
    size_t n = size < sizeof *out ? size : sizeof *out;
    memcpy(out, &rt->recs[i].pub, n);
    out->struct_size = size;
    return true;
}

const char *minfer_runtime_search_path(const struct minfer_runtime *rt, size_t i,
                                       const char **origin)
{
    if (!rt || i >= rt->n_search) {
        if (origin)
            *origin = NULL;
        return NULL;
    }
    if (origin)
        *origin = rt->search[i].origin;
    return rt->search[i].path;
}

minfer_status minfer_runtime_device_info(const struct minfer_runtime *rt, const char *backend,
                                         int device, struct minfer_device_info *out)
{
    if (!rt || !backend || !out || out->struct_size < sizeof(uint32_t))
        return MINFER_ERR_INVALID_ARG;
    const struct minfer_plugin *p = runtime_find_backend(rt, backend);
    if (!p)
        return MINFER_ERR_NOT_FOUND;
    int nd = p->iface->device_count();
    if (device < 0 || device >= nd)
        return MINFER_ERR_RANGE;
    struct minfer_device_info d;
    memset(&d, 0, sizeof d);
    d.struct_size = sizeof d;
    minfer_status st = p->iface->device_info(device, &d);
    if (st != MINFER_OK)
        return st;
    d.name[sizeof d.name - 1] = '\0';
    d.description[sizeof d.description - 1] = '\0';
    uint32_t size = out->struct_size;
    memcpy(out, &d, size < sizeof d ? size : sizeof d);
    out->struct_size = size;
    return MINFER_OK;
}

/* ---- internal API (plugin.h) ---- */

const struct minfer_plugin *runtime_find_backend(const struct minfer_runtime *rt,
                                                 const char *name)
{
    if (!rt || !name)
        return NULL;
    for (size_t i = 0; i < rt->n_plugins; i++)
        if (!strcmp(rt->plugins[i].name, name))
            return &rt->plugins[i];
    return NULL;
}

size_t runtime_backend_count(const struct minfer_runtime *rt)
{
    return rt ? rt->n_plugins : 0;
}

const struct minfer_plugin *runtime_backend_at(const struct minfer_runtime *rt, size_t i)
{
    return rt && i < rt->n_plugins ? &rt->plugins[i] : NULL;
}

const char *plugin_last_error(const struct minfer_plugin *p, struct minfer_backend *be)
{
    if (!p || !PLUGIN_HAS(p, last_error))
        return "";
    const char *s = p->iface->last_error(be);
    return s ? s : "";
}

minfer_status plugin_fail(const struct minfer_plugin *p, struct minfer_backend *be,
                          minfer_status st, const char *what, char *err, size_t err_len)
{
    const char *le = plugin_last_error(p, be);
    return errf(err, err_len, st, "backend '%s' %s failed: %s%s%.512s", p ? p->name : "?",
                what ? what : "call", minfer_status_str(st), le[0] ? ": " : "", le);
}

minfer_status plugin_create_instance(const struct minfer_plugin *p,
                                     const struct minfer_backend_config *cfg,
                                     struct minfer_backend **out, char *err, size_t err_len)
{
    if (!out)
        return MINFER_ERR_INVALID_ARG;
    *out = NULL;
    if (!p) {
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "plugin_create_instance: no plugin");
    }
    struct minfer_backend_config def = {.struct_size = sizeof def, .device = 0};
    struct minfer_backend *be = NULL;
    minfer_status st = p->iface->create(cfg ? cfg : &def, &be);
    if (st != MINFER_OK) {
        if (be)
            plugin_log(MINFER_LOG_WARN, "backend '%s': create failed but returned an "
                       "instance; ignoring it", p->name);
        return plugin_fail(p, NULL, st, "create", err, err_len);
    }
    if (!be) {
        return errf(err, err_len, MINFER_ERR_PLUGIN, "backend create returned OK but no instance");
    }
    *out = be;
    return MINFER_OK;
}
