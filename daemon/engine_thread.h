/* engine_thread.h - runs engine steps off the event loop.
 *
 * The loop hands a step to the engine thread and goes on serving clients;
 * when the step is done the thread writes done_fd (an eventfd the loop
 * reads through io_uring), so the loop never blocks on the engine. One
 * step at a time. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "engine/engine.h"
#include "proto/l8_clock.h"   /* l8_now_ns: the clock of the times below */

struct l8d_engine_thread;

/* -errno. The engine must outlive the thread. After each step the thread
 * spins (yielding) up to spin_ns for the next before it sleeps (0: sleeps
 * at once).
 * Reads L8_TEST_STALL_STEP_MS (test fault injection: every step sleeps
 * that many ms first; -EINVAL if it is not a number of ms up to 600000). */
int  l8d_et_start(struct l8_engine *e, uint64_t spin_ns, struct l8d_engine_thread **out);
/* Work of each step off the loop (llama8d: the constraints). masks(ud,
 * seqs, n) writes the step's masks (l8_seq.allowed) on a thread of its
 * own while the engine runs the forward pass: it starts with the step, and
 * the engine waits for it only before it samples (engine.h,
 * l8_engine_set_masks_wait), so its time hides behind the GPU's (or the
 * other cores'). It runs only in steps where a sequence has a mask.
 * after(ud, seqs, n, status) runs on the engine thread after the step, the
 * masks done (the sampled tokens fed to the constraints). Set before the
 * first submit; -errno if the masks' thread cannot start. */
typedef void l8d_et_masks_fn(void *ud, struct l8_seq *seqs, uint32_t n);
typedef void l8d_et_after_fn(void *ud, struct l8_seq *seqs, uint32_t n, int status);
int  l8d_et_set_hooks(struct l8d_engine_thread *t, l8d_et_masks_fn *masks,
                      l8d_et_after_fn *after, void *ud);
/* A new spin_ns, from the thread's next step on (a reload). */
void l8d_et_set_spin(struct l8d_engine_thread *t, uint64_t spin_ns);
/* Joins the thread (waits for a step in flight). NULL is a no-op. */
void l8d_et_stop(struct l8d_engine_thread *t);
/* Readable (eventfd counter > 0) when a submitted step is done. */
int  l8d_et_done_fd(const struct l8d_engine_thread *t);
/* The submitted step is done (l8d_et_result will take it): a load, for a
 * loop that spins instead of waiting for done_fd. */
bool l8d_et_finished(struct l8d_engine_thread *t);
/* While on, a step that finishes does not write done_fd: the caller is
 * spinning on l8d_et_finished. Returns l8d_et_finished() read after the
 * switch, which after switching off is the caller's last look: a step that
 * finished while it watched has not fired done_fd. */
bool l8d_et_watch(struct l8d_engine_thread *t, bool on);
/* Start a step; seqs must stay valid until l8d_et_result(). -EBUSY if a
 * step is in flight. */
int  l8d_et_submit(struct l8d_engine_thread *t, struct l8_seq *seqs, uint32_t n);
/* After done_fd fired: l8_engine_step()'s return for the step, and the
 * CLOCK_MONOTONIC times the engine started and finished it. -EBUSY if the
 * step is still running (a spurious wake-up). */
int  l8d_et_result(struct l8d_engine_thread *t, int *status, uint64_t *t_start,
                   uint64_t *t_end);
