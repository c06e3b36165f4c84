/* test_threadpool.c - l8_tp_for runs every index exactly once and returns
 * only when all of them are done, for 1..4 threads, any grain, back to
 * back jobs of very different sizes (the claim word must keep a late
 * worker out of the next job), with the pool going idle (futex sleep) in
 * between, and under a competing busy thread (the caller may run the
 * workers' share or go solo for a while: results must not care); then
 * seconds of tiny jobs with every core taken by a busy thread (handoff()). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../test.h"

#include "threadpool.h"

#define MAX_N 4096

struct job { atomic_int hits[MAX_N]; int spin; atomic_int bad_tid; int nthreads; };

static void body(void *ctx, size_t b, size_t e, int tid)
{
    struct job *j = ctx;
    if (tid < 0 || tid >= j->nthreads)
        atomic_fetch_add(&j->bad_tid, 1);
    for (size_t i = b; i < e; i++) {
        volatile int x = 0;
        for (int k = 0; k < j->spin * (int)(i % 7 + 1); k++)
            x += k;
        atomic_fetch_add(&j->hits[i], 1);
    }
}

static atomic_int stop_busy;
static void *busy(void *p)
{
    (void)p;
    while (!atomic_load(&stop_busy))
        ;
    return NULL;
}

static void run(struct l8_tp *tp, int nthreads, struct job *j, unsigned seed)
{
    for (int it = 0; it < 400; it++) {
        seed = seed * 1103515245u + 12345u;
        size_t n = 1 + (seed >> 8) % MAX_N;
        size_t grain = (seed >> 4) % 5 == 0 ? 0 : 1 + (seed >> 12) % 64;
        j->spin = (seed >> 20) % 4 == 0 ? 200 : 0;
        for (size_t i = 0; i < n; i++)
            atomic_store(&j->hits[i], 0);
        l8_tp_for(tp, n, grain, body, j);
        size_t wrong = 0;
        for (size_t i = 0; i < n; i++)
            wrong += atomic_load(&j->hits[i]) != 1;
        CHECK(wrong == 0, "%d threads, n %zu grain %zu: %zu indices not run exactly once",
              nthreads, n, grain, wrong);
        if (it % 100 == 99)
            usleep(20000);      /* long enough for the workers to sleep */
    }
    CHECK(atomic_load(&j->bad_tid) == 0, "%d threads: callback saw a thread slot out of range",
          nthreads);
}

/* The hand-off between jobs under preemption. A pool of 2 with a busy
 * thread on every core: the caller is often descheduled in the middle of
 * publishing a job while the worker, spinning on the job number, runs.
 * Jobs alternate between 2 and 63 indices, each with its own context:
 * a worker that paired the last job's claim word with the next job's
 * fields would run indices of a job before it starts (counted twice) and
 * overshoot its done count (l8_tp_for would never return: the watchdog
 * reports it). */
#define HANDOFF_N 64
struct small_job { atomic_int hits[HANDOFF_N]; size_t n; };
static atomic_ulong handoff_jobs;

static void small_body(void *ctx, size_t b, size_t e, int tid)
{
    (void)tid;
    struct small_job *j = ctx;
    for (size_t i = b; i < e; i++)
        atomic_fetch_add(&j->hits[i < j->n ? i : j->n], 1);   /* hits[n]: out of range */
}

static void *handoff_watchdog(void *p)
{
    (void)p;
    unsigned long last = (unsigned long)-1;
    for (;;) {
        sleep(5);
        unsigned long now = atomic_load(&handoff_jobs);
        if (now == last) {
            t_report("FATAL", __FILE__, __LINE__, "l8_tp_for hung", ": after %lu hand-off jobs",
                     now);
            _exit(T_EXIT_FAIL);
        }
        last = now;
    }
    return NULL;
}

static void handoff(double seconds)
{
    struct small_job *jobs = calloc(2, sizeof(*jobs));
    struct l8_tp *tp = l8_tp_new(2);
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    int nbusy = ncpu > 0 && ncpu < 64 ? (int)ncpu : 2;
    pthread_t busy_th[64], wd;
    CHECK(jobs && tp, "hand-off: allocation");
    if (!jobs || !tp)
        return;
    atomic_store(&stop_busy, 0);
    for (int i = 0; i < nbusy; i++)
        if (pthread_create(&busy_th[i], NULL, busy, NULL) != 0)
            nbusy = i;
    pthread_create(&wd, NULL, handoff_watchdog, NULL);
    pthread_detach(wd);
    const double t0 = t_now_s();
    size_t wrong = 0;
    unsigned long k = 0;
    for (;; k++) {
        if ((k & 1023) == 0) {
            if (t_now_s() - t0 > seconds)
                break;
        }
        struct small_job *j = &jobs[k & 1];
        j->n = k & 1 ? HANDOFF_N - 1 : 2;
        for (size_t i = 0; i <= j->n; i++)
            atomic_store(&j->hits[i], 0);
        l8_tp_for(tp, j->n, 1, small_body, j);
        for (size_t i = 0; i <= j->n; i++)
            wrong += atomic_load(&j->hits[i]) != (i < j->n);
        atomic_store(&handoff_jobs, k + 1);
    }
    atomic_store(&stop_busy, 1);
    for (int i = 0; i < nbusy; i++)
        pthread_join(busy_th[i], NULL);
    CHECK(wrong == 0, "hand-off: %zu indices not run exactly once in %lu jobs", wrong, k);
    printf("hand-off: %lu jobs of 2 and 63 indices in %.0f s, %d busy threads\n", k, seconds,
           nbusy);
    l8_tp_free(tp);
    free(jobs);
}

int main(void)
{
    struct job *j = calloc(1, sizeof(*j));
    if (!j)
        return 1;
    for (int nt = 1; nt <= 4; nt++) {
        struct l8_tp *tp = l8_tp_new(nt);
        CHECK(tp && l8_tp_nthreads(tp) == nt, "pool of %d threads", nt);
        if (!tp)
            continue;
        j->nthreads = nt;
        run(tp, nt, j, 7u + (unsigned)nt);
        pthread_t th;
        atomic_store(&stop_busy, 0);
        if (pthread_create(&th, NULL, busy, NULL) == 0) {
            run(tp, nt, j, 99u + (unsigned)nt);
            atomic_store(&stop_busy, 1);
            pthread_join(th, NULL);
        }
        l8_tp_free(tp);
    }
    l8_tp_free(NULL);
    free(j);
    handoff(4.0);
    printf("%s\n", t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}
