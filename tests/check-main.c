/*
 * check-main.c — runs one module's Check suite (MINFER_SUITE) with CK_FORK.
 * A suite that cannot run on this machine at all defines
 * minfer_test_skip_reason() returning why; the run then prints the reason
 * and exits 77, which ctest reports as skipped.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>

#include "testutil.h"

Suite *MINFER_SUITE(void);

int main(void)
{
    const char *why = minfer_test_skip_reason ? minfer_test_skip_reason() : NULL;
    if (why) {
        printf("SKIPPED: %s\n", why);
        return 77;
    }
    SRunner *sr = srunner_create(MINFER_SUITE());
    srunner_set_fork_status(sr, CK_FORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
