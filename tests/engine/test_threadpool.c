/* test_threadpool.c - l8_tp_for runs every index exactly once and returns
 * only when all of them are done, for 1..4 threads, any grain, back to
 * back jobs of very different sizes (the claim word must keep a late
 * worker out of the next job), with the pool going idle (futex sleep) in
 * between, and under a competing busy thread (the caller may run the
 * workers' share or go solo for a while: results must not care). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "threadpool.h"

#define MAX_N 4096

static int failures;
#define CHECK(cond, ...) do { if (!(cond)) { failures++; printf("FAIL %s:%d: ", __FILE__, __LINE__); \
    printf(__VA_ARGS__); printf("\n"); } } while (0)

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
    printf("%s\n", failures ? "FAILED" : "ok");
    return failures ? 1 : 0;
}
