/*
 * test-cuda-plugin.c — libminfer-cuda.so loads and reports cleanly on any
 * machine, GPU or not: the entry answers ABI 1.x, the cheap probe either
 * finds devices or says "no CUDA device: <runtime text>", device_count and
 * create agree with the probe, and shutdown/dlclose leave no crash. This
 * suite runs in CI (no GPU); it is skipped only where the plugin was not
 * built (MINFER_CUDA=OFF or no nvcc).
 */
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "minfer/backend.h"
#include "testutil.h"

#define CUDA_PLUGIN MINFER_PLUGIN_DIR "/libminfer-cuda.so"

const char *minfer_test_skip_reason(void)
{
    if (access(CUDA_PLUGIN, F_OK) != 0)
        return "the CUDA plugin was not built (" CUDA_PLUGIN " is absent)";
    return NULL;
}

static void *g_dl;
static const struct minfer_backend_iface *IF;

static void setup(void)
{
    g_dl = dlopen(CUDA_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    ck_assert_msg(g_dl, "the CUDA plugin must load even without a GPU: %s", dlerror());
    minfer_plugin_entry_fn e = (minfer_plugin_entry_fn)dlsym(g_dl, MINFER_PLUGIN_ENTRY_SYMBOL);
    ck_assert_ptr_nonnull(e);
    uint32_t abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    IF = e(&abi, NULL);
    ck_assert_ptr_nonnull(IF);
    ck_assert_uint_eq(MINFER_ABI_PACK_MAJOR(abi), MINFER_ABI_MAJOR);
    ck_assert_uint_le(MINFER_ABI_PACK_MINOR(abi), MINFER_ABI_MINOR);
}

static void teardown(void)
{
    if (IF)
        IF->shutdown();
    if (g_dl)
        dlclose(g_dl);
    IF = NULL;
    g_dl = NULL;
}

/* Catches: a plugin that needs libcudart/a GPU just to load, a probe that
 * returns 0 without a reason, a table with missing required slots. */
START_TEST(loads_and_probes_cleanly)
{
    ck_assert_str_eq(IF->name, "cuda");
    ck_assert_uint_ge(IF->struct_size, sizeof(struct minfer_backend_iface));
    ck_assert_ptr_nonnull(IF->create);
    ck_assert_ptr_nonnull(IF->execute_node);
    char why[512] = "";
    int score = IF->probe(why, sizeof why);
    int n = IF->device_count();
    printf("cuda probe: score %d, %d device(s)%s%s\n", score, n, score ? "" : ": ", why);
    if (score == 0) {
        ck_assert_msg(strncmp(why, "no CUDA device", 14) == 0, "probe 0 says '%s'", why);
        ck_assert_int_eq(n, 0);
    } else {
        ck_assert_int_gt(n, 0);
    }
}
END_TEST

/* Catches: create crashing or returning a half-made instance without a
 * device, and an error text that does not say why. */
START_TEST(create_without_device_fails_with_reason)
{
    char why[512] = "";
    if (IF->probe(why, sizeof why) > 0)
        MINFER_TEST_SKIP("a CUDA device is present; this test is for machines without one");
    struct minfer_backend *be = (struct minfer_backend *)0x1;
    struct minfer_backend_config cfg = {.struct_size = sizeof cfg};
    minfer_status st = IF->create(&cfg, &be);
    ck_assert_int_ne(st, MINFER_OK);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(IF->last_error(NULL), "no CUDA device") != NULL, "create error: %s",
                  IF->last_error(NULL));
    struct minfer_device_info d = {.struct_size = sizeof d};
    ck_assert_int_ne(IF->device_info(0, &d), MINFER_OK);
    IF->destroy(NULL);
}
END_TEST

/* Catches: supports_op that accepts a malformed node (the validator must
 * refuse on shapes alone, device or not). */
START_TEST(supports_op_refuses_malformed_nodes)
{
    struct minfer_tensor a = {.type = MINFER_TYPE_F32, .ne = {16, 2, 1, 1}, .nb = {4, 64, 128, 128}};
    struct minfer_tensor b = {.type = MINFER_TYPE_F32, .ne = {8, 2, 1, 1}, .nb = {4, 32, 64, 64}};
    struct minfer_tensor d = a;
    struct minfer_node n = {.op = MINFER_OP_ADD, .n_src = 2, .src = {&a, &b}, .dst = &d};
    ck_assert(!IF->supports_op(NULL, &n));
    b = a;
    ck_assert(IF->supports_op(NULL, &n));
    n.op = MINFER_OP_COUNT + 5;
    ck_assert(!IF->supports_op(NULL, &n));
}
END_TEST

Suite *cuda_plugin_suite(void);
Suite *cuda_plugin_suite(void)
{
    Suite *s = suite_create("cuda_plugin");
    TCase *tc = tcase_create("plugin");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, loads_and_probes_cleanly);
    tcase_add_test(tc, create_without_device_fails_with_reason);
    tcase_add_test(tc, supports_op_refuses_malformed_nodes);
    suite_add_tcase(s, tc);
    return s;
}
