/* cuda_upload.h - the cuda engine's weight upload: host memory (the mapped
 * checkpoint, or converted copies) to device buffers, fast and verified.
 *
 * Worker threads copy each job's bytes into pinned staging buffers and
 * issue the host-to-device copies on their own streams, double-buffered,
 * so reading the page cache overlaps the transfers. The host sums every
 * byte as it copies it into staging; afterwards the GPU sums its copy of
 * each job (l8k_checksum), and the two must agree. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#include "engine.h"

/* Zero-initialize; l8_upload_add jobs; l8_upload_run; l8_upload_free.
 * Only `bytes` (the total) is for the caller to read, and `progress` to
 * set. */
struct l8_upload_job {
    const void *src;
    void *dst;
    size_t bytes;
    _Atomic uint64_t sum;   /* l8k_checksum of src, summed by the workers' chunks */
    char what[96];
};

struct l8_upload {
    struct l8_upload_job *jobs;
    size_t n, cap;
    uint64_t bytes;               /* of all jobs */
    /* work distribution: (job, offset) chunks handed out under the lock */
    pthread_mutex_t mu;
    size_t next_job, next_off;
    int failed;
    struct l8_progress *progress; /* the caller's; NULL: none (engine.h) */
};

/* Copy bytes from src (host) to dst (device) at run; what names it in
 * errors. 0 or -ENOMEM. */
int l8_upload_add(struct l8_upload *u, const void *src, void *dst, size_t bytes,
                  const char *what);
/* Runs every job, then verifies each on st. secs: the copies' time; vsecs:
 * the check's. 0, or -EIO / -ENOMEM with err naming what failed (a job
 * whose copy differs is named with both checksums). */
int l8_upload_run(struct l8_upload *u, cudaStream_t st, double *secs, double *vsecs,
                  char err[L8_ERRLEN]);
void l8_upload_free(struct l8_upload *u);
