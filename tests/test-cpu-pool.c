/*
 * test-cpu-pool.c — the CPU plugin's thread pool under preemption
 * (issue 20, item 8): a worker that is descheduled while it holds a chunk
 * makes the caller wait a time slice per dispatch; the pool must notice
 * and run solo for a while (so -t 2 beside a busy process is not slower
 * than -t 1), still complete every chunk, and probe all threads again
 * later. pool.c is compiled into this test: it is internal to the plugin.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
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
    int chunk_us;          /* each chunk's work */
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
        spin_us(t->chunk_us); /* a chunk's work: long enough for a waiting worker to join */
        atomic_fetch_add(&t->done, 1);
    }
}

static int dispatch(struct cpu_pool *p, int preempt_us, int chunk_us)
{
    struct task t = {.preempt_us = preempt_us, .chunk_us = chunk_us};
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
    /* 8 chunks of 200 us: the worker has 1.6 ms to join even on a loaded
     * machine; held 20 ms, its chunk is a stall by any measure */
    int i = 0;
    while (i < 4 * WINDOW && dispatch(p, 20000, 200) != 1)
        i++;
    unsigned long stalls, windows;
    cpu_pool_stats(p, &stalls, &windows);
    ck_assert_msg(windows >= 1, "no solo window after %d dispatches, %lu stalls", i, stalls);
    ck_assert_msg(i <= 2 * WINDOW, "solo only after %d dispatches", i);
    /* the next dispatches, well inside SOLO_NS, stay solo */
    for (int k = 0; k < 8; k++)
        ck_assert_int_eq(dispatch(p, 20000, 200), 1);
    usleep(SOLO_NS / 1000 + 50000);
    ck_assert_int_eq(dispatch(p, 0, 200), 2); /* probes all threads again */
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
        dispatch(p, 0, 20);
    unsigned long stalls, windows;
    cpu_pool_stats(p, &stalls, &windows);
    double load = 0;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    if (getloadavg(&load, 1) == 1 && load >= (double)ncpu) {
        /* more runnable threads than CPUs: real preemption, real stalls */
        printf("load %.1f on %ld CPUs: %lu stalls not judged\n", load, ncpu, stalls);
    } else {
        ck_assert_msg(stalls <= (unsigned long)WINDOW, "%lu of %d quick dispatches stalled",
                      stalls, 4 * WINDOW);
    }
    cpu_pool_free(p);
}
END_TEST

struct count_task {
    atomic_int calls, bad;
};

static void count_fn(void *arg, int ith, int nth)
{
    struct count_task *t = arg;
    atomic_fetch_add(&t->calls, 1);
    if (ith < 0 || ith >= nth)
        atomic_fetch_add(&t->bad, 1);
}

START_TEST(back_to_back_dispatches_of_changing_width)
{
    /* Catches a worker that wakes for one dispatch reading the thread
     * count while the caller sets the next one's (a data race
     * ThreadSanitizer reports: try_join against cpu_pool_run) and a late
     * worker running the next dispatch's task with an index past its
     * count. Dispatches of 4, 2 and 3 threads follow each other with
     * nothing between them. */
    struct cpu_pool *p = cpu_pool_new(4);
    ck_assert_ptr_nonnull(p);
    struct count_task t = {0};
    int widths[3] = {4, 2, 3};
    for (int i = 0; i < 20000; i++)
        cpu_pool_run(p, widths[i % 3], count_fn, &t);
    ck_assert_int_eq(atomic_load(&t.bad), 0);
    ck_assert_int_ge(atomic_load(&t.calls), 20000); /* the caller runs each one */
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
    tcase_add_test(tc, back_to_back_dispatches_of_changing_width);
    suite_add_tcase(s, tc);
    return s;
}
