/*
 * test-cpu-pool.c — the CPU plugin's thread pool under preemption
 * (issue 20, item 8): a worker that is descheduled while it holds a chunk
 * makes the caller wait a time slice per dispatch; the pool must notice
 * and run solo for a while (so -t 2 beside a busy process is not slower
 * than -t 1), still complete every chunk, and probe all threads again
 * later. pool.c is compiled into this test: it is internal to the plugin.
 */
#include <check.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "../backends/cpu/pool.c"
#include "testutil.h"

enum { CHUNKS = 8 };

struct task {
    atomic_int next, done;
    int max_nth;           /* the nth fn was called with, largest */
    int preempt_us;        /* a worker sleeps this long holding its first chunk */
};

static void spin_us(long us)
{
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    do
        clock_gettime(CLOCK_MONOTONIC, &b);
    while ((b.tv_sec - a.tv_sec) * 1000000L + (b.tv_nsec - a.tv_nsec) / 1000 < us);
}

static void task_fn(void *arg, int ith, int nth)
{
    struct task *t = arg;
    if (ith == 0)
        t->max_nth = nth;
    bool slept = false;
    for (;;) {
        int c = atomic_fetch_add(&t->next, 1);
        if (c >= CHUNKS)
            break;
        if (ith != 0 && !slept && t->preempt_us) {
            usleep((useconds_t)t->preempt_us); /* as if preempted mid-chunk */
            slept = true;
        }
        spin_us(20); /* a chunk's work: long enough for a spinning worker to join */
        atomic_fetch_add(&t->done, 1);
    }
}

static int dispatch(struct cpu_pool *p, int preempt_us)
{
    struct task t = {.preempt_us = preempt_us};
    atomic_init(&t.next, 0);
    atomic_init(&t.done, 0);
    cpu_pool_run(p, 2, task_fn, &t);
    ck_assert_int_eq(atomic_load(&t.done), CHUNKS); /* every chunk, whoever ran it */
    return t.max_nth;
}

START_TEST(preempted_worker_sends_the_pool_solo)
{
    /* Catches a pool that keeps waiting on preempted workers dispatch
     * after dispatch (two threads slower than one beside a busy process),
     * one that never returns to all threads, and chunks lost on the way. */
    struct cpu_pool *p = cpu_pool_new(2);
    ck_assert_ptr_nonnull(p);
    int solo = 0;
    for (int i = 0; i < 4 * WINDOW; i++)
        solo += dispatch(p, 3000) == 1;
    unsigned long stalls, windows;
    cpu_pool_stats(p, &stalls, &windows);
    ck_assert_msg(windows >= 1, "no solo window after %lu stalls", stalls);
    ck_assert_msg(solo >= WINDOW, "only %d of %d dispatches ran solo", solo, 4 * WINDOW);
    ck_assert_int_eq(dispatch(p, 3000), 1); /* still inside SOLO_NS */
    usleep(SOLO_NS / 1000 + 50000);
    ck_assert_int_eq(dispatch(p, 0), 2); /* probes all threads again */
    cpu_pool_free(p);
}
END_TEST

START_TEST(quick_workers_keep_all_threads)
{
    /* Catches the detector firing on ordinary dispatches: workers that
     * finish their chunks promptly never count as stalls. Allows a few on
     * a loaded machine, where a worker can be preempted for real. */
    struct cpu_pool *p = cpu_pool_new(2);
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 4 * WINDOW; i++)
        dispatch(p, 0);
    unsigned long stalls, windows;
    cpu_pool_stats(p, &stalls, &windows);
    ck_assert_msg(stalls <= (unsigned long)WINDOW, "%lu of %d quick dispatches stalled", stalls,
                  4 * WINDOW);
    cpu_pool_free(p);
}
END_TEST

Suite *cpu_pool_suite(void);
Suite *cpu_pool_suite(void)
{
    Suite *s = suite_create("cpu-pool");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, preempted_worker_sends_the_pool_solo);
    tcase_add_test(tc, quick_workers_keep_all_threads);
    suite_add_tcase(s, tc);
    return s;
}
