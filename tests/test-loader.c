/*
 * test-loader.c — the plugin loader: search order, ABI negotiation, every
 * refusal's reason, idempotent loading, shadowing by score, shutdown
 * before dlclose, and errors of create/execute_node surfacing through
 * last_error. Uses the plugins built from tests/plugins/broken.c.
 */
#include <check.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "minfer/backend.h"
#include "minfer/minfer.h"
#include "runtime/plugin.h"
#include "testutil.h"

#define TP(kind) MINFER_TEST_PLUGIN_DIR "/libminfer-test-" kind ".so"

/* A runtime over exactly these paths: no environment, no default dirs. */
static struct minfer_runtime *load_only(const char *const *paths, size_t n)
{
    struct minfer_runtime_opts o = {
        .struct_size = sizeof o,
        .plugin_paths = paths,
        .n_plugin_paths = n,
        .flags = MINFER_RUNTIME_NO_ENV | MINFER_RUNTIME_NO_DEFAULT_DIRS,
    };
    minfer_status st = MINFER_ERR_STATE;
    char err[256] = "x";
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, err, sizeof err);
    ck_assert_msg(rt != NULL, "runtime_new failed: %s", err);
    ck_assert_int_eq(st, MINFER_OK);
    return rt;
}

static struct minfer_plugin_record rec(const struct minfer_runtime *rt, size_t i)
{
    struct minfer_plugin_record r;
    memset(&r, 0, sizeof r);
    r.struct_size = sizeof r;
    ck_assert_msg(minfer_runtime_record(rt, i, &r), "no record %zu", i);
    return r;
}

/* Loads one file and checks it is refused with a reason containing each
 * of the given fragments. */
static void expect_refused(const char *path, uint32_t state, const char *frag1,
                           const char *frag2)
{
    const char *paths[] = {path};
    struct minfer_runtime *rt = load_only(paths, 1);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 1);
    struct minfer_plugin_record r = rec(rt, 0);
    ck_assert_msg(!r.loaded, "%s was loaded", path);
    ck_assert_uint_eq(r.state, state);
    ck_assert_str_eq(r.path, path);
    ck_assert_str_eq(r.origin, "api");
    ck_assert_msg(strstr(r.reason, frag1), "reason '%s' lacks '%s'", r.reason, frag1);
    if (frag2)
        ck_assert_msg(strstr(r.reason, frag2), "reason '%s' lacks '%s'", r.reason, frag2);
    ck_assert_uint_eq(runtime_backend_count(rt), 0);
    ck_assert_ptr_null(runtime_find_backend(rt, "testbe"));
    minfer_runtime_free(rt);
}

/* ---- accepted plugins ---- */

START_TEST(good_plugin_loads_with_all_fields)
{
    /* Catches a valid plugin being refused, or a record missing its name,
     * version, ABI, score or devices. */
    const char *paths[] = {TP("good")};
    struct minfer_runtime *rt = load_only(paths, 1);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 1);
    struct minfer_plugin_record r = rec(rt, 0);
    ck_assert_msg(r.loaded, "refused: %s", r.reason);
    ck_assert_uint_eq(r.state, MINFER_PLUGIN_LOADED);
    ck_assert_str_eq(r.name, "testbe");
    ck_assert_str_eq(r.version, "test-good");
    ck_assert_uint_eq(r.abi_major, 1);
    ck_assert_uint_eq(r.abi_minor, MINFER_ABI_MINOR);
    ck_assert_int_eq(r.score, 10);
    ck_assert_int_eq(r.n_devices, 1);
    ck_assert_str_eq(r.reason, "");

    const struct minfer_plugin *p = runtime_find_backend(rt, "testbe");
    ck_assert_ptr_nonnull(p);
    ck_assert_ptr_eq(runtime_backend_at(rt, 0), p);
    ck_assert_ptr_null(runtime_backend_at(rt, 1));
    ck_assert_int_eq(p->score, 10);
    ck_assert(PLUGIN_HAS(p, execute_node));
    ck_assert(!PLUGIN_HAS(p, graph_replay)); /* optional and NULL in this plugin */
    ck_assert(PLUGIN_HAS(p, get_proc));

    struct minfer_device_info di;
    memset(&di, 0, sizeof di);
    di.struct_size = sizeof di;
    ck_assert_int_eq(minfer_runtime_device_info(rt, "testbe", 0, &di), MINFER_OK);
    ck_assert_str_eq(di.name, "test device good");
    ck_assert_uint_eq(di.memory_total, 1ull << 30);
    ck_assert_int_eq(di.cc_major, 9);
    ck_assert_int_eq(minfer_runtime_device_info(rt, "testbe", 1, &di), MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_runtime_device_info(rt, "testbe", -1, &di), MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_runtime_device_info(rt, "nope", 0, &di), MINFER_ERR_NOT_FOUND);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(record_and_device_info_respect_struct_size)
{
    /* Catches the core writing past the struct_size an (older) caller
     * declared, or accepting a struct too small to hold the header. */
    const char *paths[] = {TP("good")};
    struct minfer_runtime *rt = load_only(paths, 1);
    struct {
        struct minfer_plugin_record r;
        unsigned char guard[16];
    } buf;
    memset(&buf, 0xab, sizeof buf);
    buf.r.struct_size = 8;
    ck_assert(!minfer_runtime_record(rt, 0, &buf.r));
    buf.r.struct_size = sizeof buf.r;
    ck_assert(minfer_runtime_record(rt, 0, &buf.r));
    for (size_t i = 0; i < sizeof buf.guard; i++)
        ck_assert_uint_eq(buf.guard[i], 0xab);
    ck_assert(!minfer_runtime_record(rt, 1, &buf.r));

    /* A caller struct ending before memory_total gets only the name. */
    struct minfer_device_info di;
    memset(&di, 0xcd, sizeof di);
    di.struct_size = (uint32_t)offsetof(struct minfer_device_info, memory_total);
    ck_assert_int_eq(minfer_runtime_device_info(rt, "testbe", 0, &di), MINFER_OK);
    ck_assert_str_eq(di.name, "test device good");
    ck_assert_uint_eq(di.struct_size, offsetof(struct minfer_device_info, memory_total));
    unsigned char *tail = (unsigned char *)&di.memory_total;
    for (size_t i = 0; i < sizeof di.memory_total; i++)
        ck_assert_uint_eq(tail[i], 0xcd);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(bigger_table_from_later_minor_loads)
{
    /* Catches the core rejecting (or reading) the tail of a table from a
     * plugin compiled against a later 1.x that answered 1.0: the bogus
     * pointers past the core's struct must stay unread. */
    const char *paths[] = {TP("big-size")};
    struct minfer_runtime *rt = load_only(paths, 1);
    struct minfer_plugin_record r = rec(rt, 0);
    ck_assert_msg(r.loaded, "refused: %s", r.reason);
    const struct minfer_plugin *p = runtime_find_backend(rt, "testbe");
    ck_assert_uint_eq(p->iface_size, sizeof(struct minfer_backend_iface));
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(plugin_has_respects_iface_size)
{
    /* Catches PLUGIN_HAS reading a slot past the negotiated table size. */
    struct minfer_backend_iface t;
    memset(&t, 0, sizeof t);
    t.graph_replay = (minfer_status(*)(struct minfer_backend *, const struct minfer_replay_window *,
                                       bool *))1;
    t.execute_node = (minfer_status(*)(struct minfer_backend *, const struct minfer_node *))1;
    struct minfer_plugin p = {.iface = &t,
                              .iface_size = (uint32_t)offsetof(struct minfer_backend_iface,
                                                               graph_replay)};
    ck_assert(PLUGIN_HAS(&p, execute_node));
    ck_assert(!PLUGIN_HAS(&p, graph_replay));
    p.iface_size = sizeof t;
    ck_assert(PLUGIN_HAS(&p, graph_replay));
    ck_assert(!PLUGIN_HAS(&p, copy_cells));
}
END_TEST

/* ---- refusals ---- */

START_TEST(refuses_wrong_major)
{
    /* Catches a plugin of another ABI major being loaded. */
    expect_refused(TP("wrong-major"), MINFER_PLUGIN_REJECTED, "ABI major mismatch",
                   "plugin speaks 2.0");
}
END_TEST

START_TEST(refuses_newer_minor)
{
    /* Catches a plugin answering a newer minor than offered being loaded
     * (the core would call slots it does not know the meaning of). */
    char offered[32];
    snprintf(offered, sizeof offered, "%d.%d", MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    expect_refused(TP("newer-minor"), MINFER_PLUGIN_REJECTED, "ABI minor too new", offered);
}
END_TEST

START_TEST(refuses_missing_entry_symbol)
{
    /* Catches a .so without minfer_plugin_entry being accepted or crashing. */
    expect_refused(TP("no-entry"), MINFER_PLUGIN_REJECTED, "no entry symbol",
                   "minfer_plugin_entry");
}
END_TEST

START_TEST(refuses_entry_returning_null)
{
    /* Catches a NULL table being dereferenced, and a reason that does not
     * say what the plugin wanted. */
    expect_refused(TP("entry-null"), MINFER_PLUGIN_REJECTED, "entry returned NULL",
                   "it answered 3.0");
}
END_TEST

START_TEST(refuses_probe_zero_with_its_reason)
{
    /* Catches a plugin that cannot run here being loaded, or its own
     * reason being lost (as "no CUDA device" must reach the user). */
    expect_refused(TP("probe-zero"), MINFER_PLUGIN_REJECTED, "cannot run here",
                   "no test device present (fake hardware check)");
}
END_TEST

START_TEST(refuses_too_small_struct_size)
{
    /* Catches the core reading required slots past a short table's end. */
    expect_refused(TP("small-size"), MINFER_PLUGIN_REJECTED, "struct_size", "smaller than");
}
END_TEST

START_TEST(refuses_null_required_slot)
{
    /* Catches a NULL required slot being accepted (and called later). */
    expect_refused(TP("null-slot"), MINFER_PLUGIN_REJECTED, "required ABI 1.0 slot",
                   "'execute_node' is NULL");
}
END_TEST

START_TEST(refuses_half_host_pair)
{
    /* Catches a table with host_alloc but no host_free being loaded: the
     * core would allocate logits it could not give back. */
    expect_refused(TP("half-host"), MINFER_PLUGIN_REJECTED, "host_alloc and host_free", NULL);
}
END_TEST

START_TEST(refuses_bad_name)
{
    /* Catches control characters in a plugin name reaching logs and maps. */
    expect_refused(TP("bad-name"), MINFER_PLUGIN_REJECTED, "bad backend name", NULL);
}
END_TEST

START_TEST(refuses_missing_dependency_with_dlerror)
{
    /* Catches the dlopen error text (e.g. a missing libcudart) being lost. */
    expect_refused(TP("missing-dep"), MINFER_PLUGIN_REJECTED, "dlopen failed", "libtestdep.so");
}
END_TEST

START_TEST(refuses_missing_file)
{
    /* Catches a path the user named being skipped silently. */
    expect_refused(MINFER_TEST_PLUGIN_DIR "/libminfer-test-does-not-exist.so",
                   MINFER_PLUGIN_REJECTED, "file missing", NULL);
}
END_TEST

START_TEST(refuses_non_elf_file)
{
    /* Catches a garbage file crashing the loader instead of a dlopen reason. */
    char dir[] = "/tmp/minfer-loader-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/libminfer-garbage.so", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("this is not an ELF file\n", f);
    fclose(f);
    /* Through a directory scan, so the scanner's name filter runs too. */
    char other[256];
    snprintf(other, sizeof other, "%s/not-a-plugin.so", dir);
    f = fopen(other, "w");
    fclose(f);
    const char *paths[] = {dir};
    struct minfer_runtime *rt = load_only(paths, 1);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 1);
    struct minfer_plugin_record r = rec(rt, 0);
    ck_assert_str_eq(r.path, path);
    ck_assert_msg(strstr(r.reason, "dlopen failed"), "reason: %s", r.reason);
    minfer_runtime_free(rt);
    unlink(path);
    unlink(other);
    rmdir(dir);
}
END_TEST

/* ---- scheduler-side failures surface the plugin's text ---- */

START_TEST(create_failure_surfaces_last_error)
{
    /* Catches a failed create losing the plugin's own explanation. */
    const char *paths[] = {TP("create-fails")};
    struct minfer_runtime *rt = load_only(paths, 1);
    const struct minfer_plugin *p = runtime_find_backend(rt, "testbe");
    ck_assert_ptr_nonnull(p);
    struct minfer_backend_config cfg = {.struct_size = sizeof cfg, .device = 0};
    struct minfer_backend *be = (struct minfer_backend *)&cfg; /* must be reset to NULL */
    char err[512];
    minfer_status st = plugin_create_instance(p, &cfg, &be, err, sizeof err);
    ck_assert_int_eq(st, MINFER_ERR_BACKEND);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(err, "backend 'testbe' create failed"), "err: %s", err);
    ck_assert_msg(strstr(err, "test create refused: device 0 is fake"), "err: %s", err);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(execute_failure_surfaces_last_error)
{
    /* Catches an execute_node failure being reported without the plugin's
     * text (what a scheduler shows the user). */
    const char *paths[] = {TP("exec-fails")};
    struct minfer_runtime *rt = load_only(paths, 1);
    const struct minfer_plugin *p = runtime_find_backend(rt, "testbe");
    ck_assert_ptr_nonnull(p);
    struct minfer_backend *be = NULL;
    char err[512];
    ck_assert_int_eq(plugin_create_instance(p, NULL, &be, err, sizeof err), MINFER_OK);
    ck_assert_ptr_nonnull(be);
    struct minfer_node node;
    memset(&node, 0, sizeof node);
    node.op = MINFER_OP_MUL_MAT;
    minfer_status st = p->iface->execute_node(be, &node);
    ck_assert_int_eq(st, MINFER_ERR_BACKEND);
    plugin_fail(p, be, st, "execute_node", err, sizeof err);
    ck_assert_msg(strstr(err, "backend 'testbe' execute_node failed: backend error: "
                              "test execute_node refused op 6 on purpose"),
                  "err: %s", err);
    p->iface->destroy(be);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- idempotence, shadowing, lifetime ---- */

static int entry_calls(const struct minfer_plugin *p)
{
    int *n = p->iface->get_proc("test_entry_calls");
    ck_assert_ptr_nonnull(n);
    return *n;
}

START_TEST(same_file_twice_is_one_plugin)
{
    /* Catches a plugin opened (and its entry called) twice when named
     * twice, directly or through a symlink. */
    char dir[] = "/tmp/minfer-loader-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char link_path[256];
    snprintf(link_path, sizeof link_path, "%s/libminfer-alias.so", dir);
    ck_assert_int_eq(symlink(TP("good"), link_path), 0);
    const char *paths[] = {TP("good"), TP("good"), link_path};
    struct minfer_runtime *rt = load_only(paths, 3);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 3);
    ck_assert(rec(rt, 0).loaded);
    ck_assert_uint_eq(rec(rt, 1).state, MINFER_PLUGIN_DUPLICATE);
    ck_assert_uint_eq(rec(rt, 2).state, MINFER_PLUGIN_DUPLICATE);
    ck_assert_msg(strstr(rec(rt, 2).reason, "same file as candidate 0"), "%s",
                  rec(rt, 2).reason);
    ck_assert_uint_eq(runtime_backend_count(rt), 1);
    ck_assert_int_eq(entry_calls(runtime_find_backend(rt, "testbe")), 1);

    /* A second runtime shares the opened plugin: still one entry call. */
    struct minfer_runtime *rt2 = load_only(paths, 1);
    ck_assert(rec(rt2, 0).loaded);
    ck_assert_ptr_eq(runtime_find_backend(rt2, "testbe")->iface,
                     runtime_find_backend(rt, "testbe")->iface);
    ck_assert_int_eq(entry_calls(runtime_find_backend(rt2, "testbe")), 1);
    minfer_runtime_free(rt2);
    minfer_runtime_free(rt);
    unlink(link_path);
    rmdir(dir);
}
END_TEST

static void *churn_runtimes(void *arg)
{
    (void)arg;
    const char *paths[] = {TP("good"), TP("good-hi"), TP("probe-zero")};
    struct minfer_runtime_opts o = {.struct_size = sizeof o, .plugin_paths = paths,
                                    .n_plugin_paths = 3,
                                    .flags = MINFER_RUNTIME_NO_ENV |
                                             MINFER_RUNTIME_NO_DEFAULT_DIRS};
    for (int i = 0; i < 25; i++) {
        struct minfer_runtime *rt = minfer_runtime_new(&o, NULL, NULL, 0);
        if (!rt || runtime_backend_count(rt) != 1)
            return (void *)1;
        minfer_runtime_free(rt);
    }
    return NULL;
}

START_TEST(concurrent_runtimes_share_one_load)
{
    /* Catches an unlocked registry: threads making and freeing runtimes
     * over the same plugins must neither crash nor open a held plugin twice. */
    const char *paths[] = {TP("good")};
    struct minfer_runtime *held = load_only(paths, 1);
    pthread_t t[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, churn_runtimes, NULL), 0);
    for (int i = 0; i < 4; i++) {
        void *ret;
        pthread_join(t[i], &ret);
        ck_assert_ptr_null(ret);
    }
    ck_assert_int_eq(entry_calls(runtime_find_backend(held, "testbe")), 1);
    minfer_runtime_free(held);
}
END_TEST

static char *slurp(const char *path)
{
    static char buf[4096];
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return buf;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

START_TEST(shutdown_runs_once_when_last_runtime_frees)
{
    /* Catches shutdown never being called, called while another runtime
     * still holds the plugin, or called twice. Calling it after dlclose
     * would crash this test. */
    char log[] = "/tmp/minfer-shutdown-XXXXXX";
    int fd = mkstemp(log);
    ck_assert_int_ge(fd, 0);
    close(fd);
    setenv("MINFER_TEST_SHUTDOWN_LOG", log, 1);
    const char *paths[] = {TP("good")};
    struct minfer_runtime *a = load_only(paths, 1);
    struct minfer_runtime *b = load_only(paths, 1);
    minfer_runtime_free(a);
    ck_assert_str_eq(slurp(log), "");
    ck_assert_ptr_nonnull(runtime_find_backend(b, "testbe")); /* still usable */
    ck_assert_int_eq(runtime_find_backend(b, "testbe")->iface->device_count(), 1);
    minfer_runtime_free(b);
    ck_assert_str_eq(slurp(log), "shutdown good\n");

    /* A plugin refused by its probe had its entry called: it is shut down too. */
    const char *pz[] = {TP("probe-zero")};
    minfer_runtime_free(load_only(pz, 1));
    ck_assert_str_eq(slurp(log), "shutdown good\nshutdown probe-zero\n");
    unlink(log);
}
END_TEST

START_TEST(higher_score_shadows_lower_in_any_order)
{
    /* Catches the first-found plugin winning over a better one of the same
     * name, or the loser not being recorded as shadowed. */
    const char *orders[2][2] = {{TP("good"), TP("good-hi")}, {TP("good-hi"), TP("good")}};
    for (int k = 0; k < 2; k++) {
        struct minfer_runtime *rt = load_only(orders[k], 2);
        ck_assert_uint_eq(runtime_backend_count(rt), 1);
        const struct minfer_plugin *p = runtime_find_backend(rt, "testbe");
        ck_assert_int_eq(p->score, 20);
        ck_assert_str_eq(p->version, "test-good-hi");
        struct minfer_plugin_record lo = rec(rt, k == 0 ? 0 : 1);
        ck_assert_uint_eq(lo.state, MINFER_PLUGIN_SHADOWED);
        ck_assert(!lo.loaded);
        ck_assert_int_eq(lo.score, 10);
        ck_assert_msg(strstr(lo.reason, "shadowed by") && strstr(lo.reason, "good-hi"), "%s",
                      lo.reason);
        minfer_runtime_free(rt);
    }
}
END_TEST

START_TEST(directory_scan_records_every_test_plugin)
{
    /* Catches a crash on any broken plugin met in a scan, a candidate
     * missing from the records, or the wrong one winning. */
    const char *paths[] = {MINFER_TEST_PLUGIN_DIR};
    struct minfer_runtime *rt = load_only(paths, 1);
    size_t n = minfer_runtime_record_count(rt);
    ck_assert_uint_eq(n, 15); /* one per kind in tests/plugins/CMakeLists.txt */
    size_t loaded = 0;
    for (size_t i = 0; i < n; i++) {
        struct minfer_plugin_record r = rec(rt, i);
        ck_assert_msg(r.loaded || r.reason[0], "%s refused without a reason", r.path);
        ck_assert_str_eq(r.origin, "api");
        if (i > 0)
            ck_assert_msg(strcmp(rec(rt, i - 1).path, r.path) < 0, "scan not in name order");
        loaded += r.loaded;
    }
    ck_assert_uint_eq(loaded, 1);
    ck_assert_str_eq(runtime_find_backend(rt, "testbe")->version, "test-good-hi");
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(only_backend_opens_only_its_file)
{
    /* Catches a run that names its backend still dlopening every plugin of
     * a scanned directory (the CUDA plugin's static runtime initialises in
     * dlopen, and crashed there under memory pressure): with only_backend
     * "test-good" a scan of the test plugins opens and records that file
     * alone, while a file named explicitly is still opened. */
    const char *paths[] = {MINFER_TEST_PLUGIN_DIR, TP("probe-zero")};
    struct minfer_runtime_opts o = {.struct_size = sizeof o, .plugin_paths = paths,
                                    .n_plugin_paths = 2, .only_backend = "test-good",
                                    .flags = MINFER_RUNTIME_NO_ENV | MINFER_RUNTIME_NO_DEFAULT_DIRS};
    minfer_status st;
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, NULL, 0);
    ck_assert_ptr_nonnull(rt);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 2);
    ck_assert_str_eq(rec(rt, 0).path, TP("good"));
    ck_assert(rec(rt, 0).loaded);
    ck_assert_str_eq(rec(rt, 1).path, TP("probe-zero"));
    minfer_runtime_free(rt);

    /* an older caller's struct (without the field) still scans everything */
    o.struct_size = offsetof(struct minfer_runtime_opts, only_backend);
    o.n_plugin_paths = 1;
    rt = minfer_runtime_new(&o, &st, NULL, 0);
    ck_assert_ptr_nonnull(rt);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 15);
    minfer_runtime_free(rt);
}
END_TEST

/* ---- search order and options ---- *//* ---- search order and options ---- */

START_TEST(search_order_api_env_libdir_install)
{
    /* Catches a wrong search order, MINFER_PLUGIN_PATH being ignored or
     * mis-split, or the default directories being skipped. */
    setenv("MINFER_PLUGIN_PATH", ":" TP("probe-zero") "::" MINFER_TEST_PLUGIN_DIR "/dep:", 1);
    const char *paths[] = {TP("good")};
    struct minfer_runtime_opts o = {.struct_size = sizeof o, .plugin_paths = paths,
                                    .n_plugin_paths = 1};
    minfer_status st;
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, NULL, 0);
    ck_assert_ptr_nonnull(rt);
    const char *want[] = {"api", "env", "env", "libdir", "install"};
    const char *origin;
    size_t i = 0;
    for (const char *sp; (sp = minfer_runtime_search_path(rt, i, &origin)); i++) {
        ck_assert_uint_lt(i, 5);
        ck_assert_str_eq(origin, want[i]);
        if (i == 3)
            ck_assert_msg(strstr(sp, "/minfer/backends"), "libdir path %s", sp);
        if (i == 4)
            ck_assert_msg(strstr(sp, "/minfer/backends"), "install path %s", sp);
    }
    ck_assert_uint_eq(i, 5);
    ck_assert_str_eq(rec(rt, 0).origin, "api");
    ck_assert(rec(rt, 0).loaded);
    ck_assert_str_eq(rec(rt, 1).origin, "env");
    ck_assert_str_eq(rec(rt, 1).path, TP("probe-zero"));
    minfer_runtime_free(rt);

    o.flags = MINFER_RUNTIME_NO_ENV | MINFER_RUNTIME_NO_DEFAULT_DIRS;
    rt = minfer_runtime_new(&o, &st, NULL, 0);
    ck_assert_ptr_nonnull(minfer_runtime_search_path(rt, 0, NULL));
    ck_assert_ptr_null(minfer_runtime_search_path(rt, 1, NULL));
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 1);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(relative_env_entry_is_refused)
{
    /* Catches MINFER_PLUGIN_PATH entries being resolved against the current
     * directory (a process started in an attacker's directory would load
     * its libminfer-*.so) while absolute entries beside them still load. */
    setenv("MINFER_PLUGIN_PATH", "relative/dir:" TP("good") ":./libminfer-x.so", 1);
    struct minfer_runtime_opts o = {.struct_size = sizeof o,
                                    .flags = MINFER_RUNTIME_NO_DEFAULT_DIRS};
    minfer_status st;
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, NULL, 0);
    ck_assert_ptr_nonnull(rt);
    ck_assert_uint_eq(minfer_runtime_record_count(rt), 3);
    ck_assert_str_eq(rec(rt, 0).path, "relative/dir");
    ck_assert(!rec(rt, 0).loaded);
    ck_assert_msg(strstr(rec(rt, 0).reason, "relative entry"), "reason: %s", rec(rt, 0).reason);
    ck_assert(rec(rt, 1).loaded);
    ck_assert(!rec(rt, 2).loaded);
    ck_assert_msg(strstr(rec(rt, 2).reason, "absolute path"), "reason: %s", rec(rt, 2).reason);
    minfer_runtime_free(rt);
    unsetenv("MINFER_PLUGIN_PATH");
}
END_TEST

/* Runs minfer_runtime_new on one plugin path with stderr captured into
 * out (NUL-terminated). */
static void load_capturing_stderr(const char *path, char *out, size_t out_len)
{
    char logf[] = "/tmp/minfer-test-trust-log.XXXXXX";
    int fd = mkstemp(logf);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    const char *paths[] = {path};
    struct minfer_runtime_opts o = {.struct_size = sizeof o, .plugin_paths = paths,
                                    .n_plugin_paths = 1,
                                    .flags = MINFER_RUNTIME_NO_ENV | MINFER_RUNTIME_NO_DEFAULT_DIRS};
    minfer_status st;
    struct minfer_runtime *rt = minfer_runtime_new(&o, &st, NULL, 0);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ck_assert_ptr_nonnull(rt);
    ck_assert(rec(rt, 0).loaded); /* a warning, not a refusal */
    minfer_runtime_free(rt);
    ssize_t n = pread(fd, out, out_len - 1, 0);
    out[n > 0 ? n : 0] = '\0';
    close(fd);
    unlink(logf);
}

START_TEST(writable_plugin_file_or_dir_warns)
{
    /* Catches the loader silently running code that anyone on the machine
     * could have replaced: a world-writable directory, then a
     * group-writable file, each named in a warning. */
    setenv("MINFER_LOG_LEVEL", "warn", 1);
    char dir[] = "/tmp/minfer-test-trust.XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[512];
    snprintf(path, sizeof path, "%s/libminfer-test-good.so", dir);
    FILE *in = fopen(TP("good"), "rb"), *out = fopen(path, "wb");
    ck_assert(in && out);
    char buf[8192];
    for (size_t n; (n = fread(buf, 1, sizeof buf, in)) > 0;)
        ck_assert_uint_eq(fwrite(buf, 1, n, out), n);
    fclose(in);
    ck_assert_int_eq(fclose(out), 0);

    char log[4096];
    ck_assert_int_eq(chmod(path, 0755), 0);
    ck_assert_int_eq(chmod(dir, 0777), 0);
    load_capturing_stderr(path, log, sizeof log);
    ck_assert_msg(strstr(log, "directory") && strstr(log, "world-writable") &&
                      strstr(log, dir), "log: %s", log);
    ck_assert_msg(!strstr(log, "plugin file"), "log: %s", log);

    ck_assert_int_eq(chmod(dir, 0755), 0);
    ck_assert_int_eq(chmod(path, 0775), 0);
    load_capturing_stderr(path, log, sizeof log);
    ck_assert_msg(strstr(log, "plugin file") && strstr(log, "group-writable"), "log: %s", log);
    ck_assert_msg(!strstr(log, "plugin directory"), "log: %s", log);

    ck_assert_int_eq(chmod(path, 0755), 0);
    load_capturing_stderr(path, log, sizeof log);
    ck_assert_msg(!strstr(log, "writable") && !strstr(log, "owned by"), "log: %s", log);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(bad_options_are_refused)
{
    /* Catches reading an opts struct past the size its caller declared. */
    struct minfer_runtime_opts o = {.struct_size = 4};
    minfer_status st = MINFER_OK;
    char err[256] = "";
    ck_assert_ptr_null(minfer_runtime_new(&o, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_INVALID_ARG);
    ck_assert_msg(strstr(err, "struct_size"), "err: %s", err);
    o.struct_size = sizeof o;
    o.n_plugin_paths = 2;
    ck_assert_ptr_null(minfer_runtime_new(&o, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_INVALID_ARG);
    minfer_runtime_free(NULL);
    ck_assert_uint_eq(minfer_runtime_record_count(NULL), 0);
}
END_TEST

START_TEST(real_cpu_plugin_loads)
{
    /* Catches the in-tree CPU plugin being refused by this loader. */
    const char *paths[] = {MINFER_PLUGIN_DIR "/libminfer-cpu.so"};
    struct minfer_runtime *rt = load_only(paths, 1);
    struct minfer_plugin_record r = rec(rt, 0);
    ck_assert_msg(r.loaded, "cpu refused: %s", r.reason);
    ck_assert_str_eq(r.name, "cpu");
    ck_assert_int_ge(r.n_devices, 1);
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(build_plugin_dir_has_cpu_and_explains_the_rest)
{
    /* Catches the acceptance state breaking: in the build's plugin
     * directory cpu loads, and every other plugin (cuda on a machine
     * without a GPU or driver) either loads with devices or is refused
     * with the reason the user needs ("no CUDA device" or the dlopen text). */
    const char *paths[] = {MINFER_PLUGIN_DIR};
    struct minfer_runtime *rt = load_only(paths, 1);
    ck_assert_ptr_nonnull(runtime_find_backend(rt, "cpu"));
    for (size_t i = 0; i < minfer_runtime_record_count(rt); i++) {
        struct minfer_plugin_record r = rec(rt, i);
        if (r.loaded) {
            ck_assert_int_ge(r.n_devices, 1);
            continue;
        }
        ck_assert_msg(r.reason[0], "%s refused without a reason", r.path);
        if (!strcmp(r.name, "cuda"))
            ck_assert_msg(strstr(r.reason, "no CUDA device") || strstr(r.reason, "dlopen failed"),
                          "cuda refused with: %s", r.reason);
    }
    minfer_runtime_free(rt);
}
END_TEST

START_TEST(template_plugin_runs_ops)
{
    /* Catches plugins/template (the example vendors copy) not loading or
     * computing wrong results through the core's view of a plugin. */
    const char *paths[] = {MINFER_TEST_PLUGIN_DIR "/template/libminfer-template.so"};
    struct minfer_runtime *rt = load_only(paths, 1);
    const struct minfer_plugin *p = runtime_find_backend(rt, "template");
    ck_assert_msg(p, "template refused: %s", rec(rt, 0).reason);
    struct minfer_backend *be;
    char err[256];
    ck_assert_int_eq(plugin_create_instance(p, NULL, &be, err, sizeof err), MINFER_OK);
    float *buf;
    ck_assert_int_eq(p->iface->buffer_alloc(be, 12 * sizeof(float), (void **)&buf), MINFER_OK);
    const float a[4] = {1, 2, 3, 4}, b[4] = {10, 20, 30, 40};
    ck_assert_int_eq(p->iface->buffer_write(be, buf, a, sizeof a), MINFER_OK);
    ck_assert_int_eq(p->iface->buffer_write(be, buf + 4, b, sizeof b), MINFER_OK);
    struct minfer_tensor ta = {.type = MINFER_TYPE_F32, .ne = {4, 1, 1, 1},
                               .nb = {4, 16, 16, 16}, .data = buf};
    struct minfer_tensor tb = ta, td = ta;
    tb.data = buf + 4;
    td.data = buf + 8;
    struct minfer_node n = {.op = MINFER_OP_ADD, .n_src = 2, .src = {&ta, &tb}, .dst = &td};
    ck_assert(p->iface->supports_op(be, &n));
    ck_assert_int_eq(p->iface->execute_node(be, &n), MINFER_OK);
    ck_assert_int_eq(p->iface->synchronize(be), MINFER_OK);
    float out[4];
    ck_assert_int_eq(p->iface->buffer_read(be, out, buf + 8, sizeof out), MINFER_OK);
    for (int i = 0; i < 4; i++)
        ck_assert_float_eq(out[i], a[i] + b[i]);
    /* An op it does not support is refused up front and, if forced, is an
     * error naming the node. */
    n.op = MINFER_OP_MUL_MAT;
    n.index = 7;
    ck_assert(!p->iface->supports_op(be, &n));
    minfer_status st = p->iface->execute_node(be, &n);
    ck_assert_int_eq(st, MINFER_ERR_UNSUPPORTED);
    plugin_fail(p, be, st, "execute_node", err, sizeof err);
    ck_assert_msg(strstr(err, "node 7"), "err: %s", err);
    p->iface->buffer_free(be, buf);
    p->iface->destroy(be);
    minfer_runtime_free(rt);
}
END_TEST

Suite *loader_suite(void);
Suite *loader_suite(void)
{
    Suite *s = suite_create("loader");
    TCase *tc = tcase_create("accept");
    tcase_add_test(tc, good_plugin_loads_with_all_fields);
    tcase_add_test(tc, record_and_device_info_respect_struct_size);
    tcase_add_test(tc, bigger_table_from_later_minor_loads);
    tcase_add_test(tc, plugin_has_respects_iface_size);
    tcase_add_test(tc, real_cpu_plugin_loads);
    tcase_add_test(tc, build_plugin_dir_has_cpu_and_explains_the_rest);
    tcase_add_test(tc, template_plugin_runs_ops);
    suite_add_tcase(s, tc);

    tc = tcase_create("refuse");
    tcase_add_test(tc, refuses_wrong_major);
    tcase_add_test(tc, refuses_newer_minor);
    tcase_add_test(tc, refuses_half_host_pair);
    tcase_add_test(tc, refuses_missing_entry_symbol);
    tcase_add_test(tc, refuses_entry_returning_null);
    tcase_add_test(tc, refuses_probe_zero_with_its_reason);
    tcase_add_test(tc, refuses_too_small_struct_size);
    tcase_add_test(tc, refuses_null_required_slot);
    tcase_add_test(tc, refuses_bad_name);
    tcase_add_test(tc, refuses_missing_dependency_with_dlerror);
    tcase_add_test(tc, refuses_missing_file);
    tcase_add_test(tc, refuses_non_elf_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("errors");
    tcase_add_test(tc, create_failure_surfaces_last_error);
    tcase_add_test(tc, execute_failure_surfaces_last_error);
    suite_add_tcase(s, tc);

    tc = tcase_create("lifetime");
    tcase_add_test(tc, same_file_twice_is_one_plugin);
    tcase_add_test(tc, shutdown_runs_once_when_last_runtime_frees);
    tcase_add_test(tc, concurrent_runtimes_share_one_load);
    tcase_add_test(tc, higher_score_shadows_lower_in_any_order);
    tcase_add_test(tc, directory_scan_records_every_test_plugin);
    tcase_add_test(tc, only_backend_opens_only_its_file);
    suite_add_tcase(s, tc);

    tc = tcase_create("search");
    tcase_add_test(tc, search_order_api_env_libdir_install);
    tcase_add_test(tc, bad_options_are_refused);
    tcase_add_test(tc, relative_env_entry_is_refused);
    tcase_add_test(tc, writable_plugin_file_or_dir_warns);
    suite_add_tcase(s, tc);
    return s;
}
