/* uring_op.h - how llama8d's operations ride its one io_uring: the op kinds
 * and their user_data (op | slot << 8 | gen << 32), and an SQE that never
 * fails. The loop (loop.c) arms the daemon's own operations and reaps every
 * completion; a session (session.c) arms its client's (RECV, DOORBELL).
 * See loop.c's top comment for what each op is. */
#pragma once
#include <liburing.h>
#include <stdint.h>

enum l8d_op { OP_ACCEPT = 1, OP_LISTEN, OP_RECV, OP_DOORBELL, OP_ENGINE, OP_SIGNAL, OP_TIMER,
              OP_WAKE, OP_CANCEL };

static inline uint64_t l8d_ud(enum l8d_op op, uint32_t slot, uint32_t gen)
{
    return (uint64_t)op | (uint64_t)slot << 8 | (uint64_t)gen << 32;
}
static inline enum l8d_op l8d_ud_op(uint64_t u) { return (enum l8d_op)(u & 0xff); }
static inline uint32_t l8d_ud_slot(uint64_t u) { return (uint32_t)(u >> 8) & 0xffffff; }
static inline uint32_t l8d_ud_gen(uint64_t u) { return (uint32_t)(u >> 32); }

/* An SQE, submitting what is queued if the ring is full. */
static inline struct io_uring_sqe *l8d_get_sqe(struct io_uring *ring)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(ring);
    if (!sqe) {
        io_uring_submit(ring);
        sqe = io_uring_get_sqe(ring);
    }
    return sqe;
}
