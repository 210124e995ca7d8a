/*
 * test-version.c — the library reports its version and names every status.
 */
#include <check.h>
#include <string.h>

#include "minfer/minfer.h"

START_TEST(version_matches_build)
{
    /* Catches a library built with a version string other than the project's. */
    ck_assert_str_eq(minfer_version(), MINFER_VERSION_STRING_EXPECTED);
}
END_TEST

START_TEST(every_status_has_text)
{
    /* Catches a status code added without its text. */
    for (int st = 0; st >= MINFER_ERR_FULL; st--)
        ck_assert_str_ne(minfer_status_str((minfer_status)st), "unknown status");
    ck_assert_str_eq(minfer_status_str((minfer_status)-999), "unknown status");
}
END_TEST

Suite *version_suite(void);
Suite *version_suite(void)
{
    Suite *s = suite_create("version");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, version_matches_build);
    tcase_add_test(tc, every_status_has_text);
    suite_add_tcase(s, tc);
    return s;
}
