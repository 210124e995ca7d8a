/*
 * testutil.h — helpers shared by the Check suites.
 */
#ifndef MINFER_TESTUTIL_H
#define MINFER_TESTUTIL_H

#include <stdio.h>

/* Optional per suite: return why the whole suite cannot run here, or NULL. */
const char *minfer_test_skip_reason(void) __attribute__((weak));

/* Skips one test with a printed reason (Check has no skip state; the test
 * passes and says so on stdout). */
#define MINFER_TEST_SKIP(...)                                                          \
    do {                                                                               \
        printf("SKIP %s: ", __func__);                                                 \
        printf(__VA_ARGS__);                                                           \
        printf("\n");                                                                  \
        fflush(stdout);                                                                \
        return;                                                                        \
    } while (0)

#endif
