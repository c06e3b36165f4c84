/* cuda_upload.c - the cuda engine's weight upload. See cuda_upload.h. */
#include "cuda_upload.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l8_kernels.h"
#include "proto/l8_clock.h"

#define UPLOAD_THREADS 4
#define UPLOAD_CHUNK (32u << 20)          /* bytes per staging buffer */

int l8_upload_add(struct l8_upload *u, const void *src, void *dst, size_t bytes, const char *what)
{
    if (bytes == 0)
        return 0;
    if (u->n == u->cap) {
        size_t nc = u->cap ? u->cap * 2 : 256;
        struct l8_upload_job *nj = realloc(u->jobs, nc * sizeof *nj);
        if (!nj)
            return -ENOMEM;
        u->jobs = nj;
        u->cap = nc;
    }
    struct l8_upload_job *j = &u->jobs[u->n++];
    j->src = src;
    j->dst = dst;
    j->bytes = bytes;
    atomic_init(&j->sum, 0);
    snprintf(j->what, sizeof j->what, "%s", what);
    u->bytes += bytes;
    return 0;
}

/* The next chunk: n bytes at offset *off of job *job. */
static bool up_next(struct l8_upload *u, struct l8_upload_job **job, size_t *off, size_t *n)
{
    bool ok = false;
    pthread_mutex_lock(&u->mu);
    while (u->next_job < u->n && !u->failed) {
        struct l8_upload_job *j = &u->jobs[u->next_job];
        if (u->next_off >= j->bytes) {
            u->next_job++;
            u->next_off = 0;
            continue;
        }
        size_t len = j->bytes - u->next_off;
        if (len > UPLOAD_CHUNK)
            len = UPLOAD_CHUNK;
        *job = j;
        *off = u->next_off;
        *n = len;
        u->next_off += len;
        ok = true;
        break;
    }
    pthread_mutex_unlock(&u->mu);
    return ok;
}

/* memcpy(dst, src, n), returning the l8k_checksum of the copied bytes as
 * words i0, i0 + 1, ... of their tensor (i0 = their offset / 8). */
static uint64_t copy_checksum(void *restrict dst, const void *restrict src, size_t n, uint64_t i0)
{
    const size_t nw = n / 8;
    uint64_t s = 0, c = i0 * L8K_CHECKSUM_K;
    for (size_t i = 0; i < nw; i++, c += L8K_CHECKSUM_K) {
        uint64_t w;
        memcpy(&w, (const uint8_t *)src + 8 * i, 8);
        memcpy((uint8_t *)dst + 8 * i, &w, 8);
        s += w ^ c;
    }
    if (n % 8) {
        uint64_t w = 0;
        for (size_t b = 0; b < n % 8; b++) {
            const uint8_t v = ((const uint8_t *)src)[8 * nw + b];
            ((uint8_t *)dst)[8 * nw + b] = v;
            w |= (uint64_t)v << (8 * b);
        }
        s += w ^ c;
    }
    return s;
}

static void *up_worker(void *arg)
{
    struct l8_upload *u = arg;
    void *buf[2] = { NULL, NULL };
    cudaEvent_t ev[2] = { NULL, NULL };
    cudaStream_t st = NULL;
    int k = 0;
    if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess)
        goto fail;
    for (int i = 0; i < 2; i++)
        if (cudaHostAlloc(&buf[i], UPLOAD_CHUNK, cudaHostAllocDefault) != cudaSuccess ||
            cudaEventCreateWithFlags(&ev[i], cudaEventDisableTiming) != cudaSuccess)
            goto fail;
    struct l8_upload_job *j;
    size_t off, n;
    while (up_next(u, &j, &off, &n)) {
        /* The copy out of this buffer two chunks ago must be done. */
        if (cudaEventSynchronize(ev[k]) != cudaSuccess)
            goto fail;
        /* Faults the mapping in: the read overlaps the DMA. Chunks start at
         * multiples of UPLOAD_CHUNK, so whole words. */
        atomic_fetch_add(&j->sum, copy_checksum(buf[k], (const uint8_t *)j->src + off, n, off / 8));
        if (cudaMemcpyAsync((uint8_t *)j->dst + off, buf[k], n, cudaMemcpyHostToDevice, st) !=
                cudaSuccess ||
            cudaEventRecord(ev[k], st) != cudaSuccess)
            goto fail;
        if (u->progress)   /* read from the host: the copy itself may still run */
            atomic_fetch_add_explicit(&u->progress->done, n, memory_order_relaxed);
        k ^= 1;
    }
    if (cudaStreamSynchronize(st) != cudaSuccess)
        goto fail;
    goto out;
fail:
    pthread_mutex_lock(&u->mu);
    u->failed = 1;
    pthread_mutex_unlock(&u->mu);
    cudaGetLastError();
out:
    if (st)
        cudaStreamSynchronize(st);
    for (int i = 0; i < 2; i++) {
        if (ev[i])
            cudaEventDestroy(ev[i]);
        if (buf[i])
            cudaFreeHost(buf[i]);
    }
    if (st)
        cudaStreamDestroy(st);
    return NULL;
}

/* Every job's bytes on the GPU summed there (on st) and compared with the
 * host's sum of what it copied. */
static int up_verify(const struct l8_upload *u, cudaStream_t st, char err[L8_ERRLEN])
{
    uint64_t *d = NULL, *h = malloc(u->n * 8);
    int rc = -EIO;
    if (!h) {
        snprintf(err, L8_ERRLEN, "out of memory");
        return -ENOMEM;
    }
    if (cudaMalloc((void **)&d, u->n * 8) != cudaSuccess) {
        d = NULL;
        snprintf(err, L8_ERRLEN, "out of GPU memory for the upload's checksums");
        rc = -ENOMEM;
        goto out;
    }
    if (cudaMemsetAsync(d, 0, u->n * 8, st) != cudaSuccess)
        goto fail;
    for (size_t i = 0; i < u->n; i++)
        if (l8k_checksum(u->jobs[i].dst, u->jobs[i].bytes, d + i, st))
            goto fail;
    if (cudaMemcpyAsync(h, d, u->n * 8, cudaMemcpyDeviceToHost, st) != cudaSuccess ||
        cudaStreamSynchronize(st) != cudaSuccess)
        goto fail;
    rc = 0;
    for (size_t i = 0; i < u->n && rc == 0; i++) {
        const uint64_t want = atomic_load(&u->jobs[i].sum);
        if (h[i] != want) {
            snprintf(err, L8_ERRLEN,
                     "%s differs on the GPU after upload (checksum %016llx, the checkpoint's "
                     "%016llx)", u->jobs[i].what, (unsigned long long)h[i],
                     (unsigned long long)want);
            rc = -EIO;
        }
    }
    goto out;
fail:
    snprintf(err, L8_ERRLEN, "summing the uploaded weights on the GPU failed");
out:
    cudaGetLastError();
    cudaFree(d);
    free(h);
    return rc;
}

/* Run all jobs, then verify them. secs: the copies; vsecs: the check. */
int l8_upload_run(struct l8_upload *u, cudaStream_t st, double *secs, double *vsecs,
                  char err[L8_ERRLEN])
{
    pthread_t th[UPLOAD_THREADS];
    int started = 0;
    double t0 = l8_now_s();
    pthread_mutex_init(&u->mu, NULL);
    u->next_job = u->next_off = 0;
    u->failed = 0;
    if (u->progress)
        atomic_store_explicit(&u->progress->total, u->bytes, memory_order_relaxed);
    for (int i = 0; i < UPLOAD_THREADS; i++) {
        if (pthread_create(&th[i], NULL, up_worker, u) != 0)
            break;
        started++;
    }
    if (started == 0)
        up_worker(u);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    pthread_mutex_destroy(&u->mu);
    *secs = l8_now_s() - t0;
    if (u->failed) {
        snprintf(err, L8_ERRLEN, "weight upload failed (host-to-device copy)");
        return -EIO;
    }
    t0 = l8_now_s();
    int rc = up_verify(u, st, err);
    *vsecs = l8_now_s() - t0;
    return rc;
}

void l8_upload_free(struct l8_upload *u)
{
    free(u->jobs);
    u->jobs = NULL;
    u->n = u->cap = 0;
}
