/* threadpool.h - a small persistent pthread pool for the CPU engine.
 *
 * One operation: a parallel-for over [0, n) split in chunks of `grain`
 * indices, claimed dynamically by the workers and the calling thread.
 * The callback gets its thread's slot (0 = caller, 1..n-1 workers) so it
 * can use per-thread scratch. Which thread runs which chunk varies from
 * call to call; callers must only write results that depend on the index,
 * never on the thread, so results stay deterministic. */
#pragma once
#include <stddef.h>

struct l8_tp;

typedef void (*l8_tp_fn)(void *ctx, size_t begin, size_t end, int tid);

/* nthreads total threads including the caller (>= 1). Returns NULL on
 * allocation or thread-creation failure. */
struct l8_tp *l8_tp_new(int nthreads);
void l8_tp_free(struct l8_tp *tp);
int  l8_tp_nthreads(const struct l8_tp *tp);
/* Run fn over [0, n) in chunks of grain (0 = split evenly over threads);
 * returns when every chunk is done. Not reentrant: one caller at a time. */
void l8_tp_for(struct l8_tp *tp, size_t n, size_t grain, l8_tp_fn fn, void *ctx);
