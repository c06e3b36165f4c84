/* bench_membw.c - this machine's read bandwidth, the bound the CPU
 * engine's decode is measured against (tests/bench/bench_cpu.sh).
 *
 *   bench_membw [THREADS] [MIB]
 * Each thread streams its share of a MIB buffer (default 1024, far beyond
 * the caches) with 64-byte vector loads; prints the best of 5 passes in
 * GB/s (10^9 bytes) on one line. */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef uint64_t v8u64 __attribute__((vector_size(64)));

struct part { const v8u64 *p; size_t n; uint64_t sum; };

static volatile uint64_t sink;    /* keeps the loads */

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Wide loads where the processor has them: 16-byte ones leave bandwidth
 * unread on two cores. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void *reader(void *arg)
{
    struct part *P = arg;
    v8u64 a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
    for (size_t i = 0; i + 4 <= P->n; i += 4) {
        a ^= P->p[i];
        b ^= P->p[i + 1];
        c ^= P->p[i + 2];
        d ^= P->p[i + 3];
    }
    a ^= b ^ c ^ d;
    P->sum = a[0] ^ a[7];
    return NULL;
}

int main(int argc, char **argv)
{
    const int nt = argc > 1 ? atoi(argv[1]) : 1;
    const size_t mib = argc > 2 ? strtoul(argv[2], NULL, 10) : 1024;
    if (nt < 1 || nt > 256 || mib < 1) {
        fprintf(stderr, "usage: bench_membw [THREADS 1..256] [MIB]\n");
        return 2;
    }
    const size_t bytes = mib << 20, n = bytes / sizeof(v8u64);
    v8u64 *buf = aligned_alloc(64, bytes);
    if (!buf) {
        fprintf(stderr, "bench_membw: cannot allocate %zu MiB\n", mib);
        return 1;
    }
    memset(buf, 1, bytes);
    double best = 1e30;
    for (int pass = 0; pass < 5; pass++) {
        pthread_t th[256];
        struct part parts[256];
        const double t0 = now();
        for (int i = 0; i < nt; i++) {
            parts[i] = (struct part){ buf + n / nt * i, n / nt, 0 };
            pthread_create(&th[i], NULL, reader, &parts[i]);
        }
        for (int i = 0; i < nt; i++) {
            pthread_join(th[i], NULL);
            sink ^= parts[i].sum;
        }
        const double dt = now() - t0;
        best = dt < best ? dt : best;
    }
    printf("%.2f\n", (double)(n / nt * nt * sizeof(v8u64)) / best / 1e9);
    free(buf);
    return 0;
}
