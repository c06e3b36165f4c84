/* l8_shm.h - the shared-memory ABI between llama8d and one client.
 *
 * Each client gets its own memfd, created by the daemon, sized once and
 * sealed (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) so neither side can
 * make the other's mapping fault. Layout (all offsets from the start,
 * recorded in the header; each region 64-byte aligned):
 *
 *   [l8_shm_hdr]                               geometry, written by the daemon once
 *   [l8_ring_ctl sq][l8_sqe  x sq_entries]     submission ring, client -> daemon
 *   [l8_ring_ctl eq][l8_event x eq_entries]    event ring, daemon -> client
 *   [arena: arena_size bytes]                  written by the client only
 *
 * Submission: the client writes a serialized protobuf (GenerateRequest or
 * Cancel, llama8.proto) and, for a GenerateRequest, the prompt as a raw
 * little-endian u32 array into the arena, fills the next l8_sqe with the
 * message's (offset, length), then publishes it by storing tail + 1.
 * When the daemon consumes an entry (head + 1) it has already copied
 * everything the entry points at, so the client may reuse that arena space.
 *
 * Events: fixed 32-byte records, one per generated token, plus STARTED,
 * DONE and ERROR records. The daemon never blocks on a client: once a
 * client's event ring is full (events wait in the daemon), its requests
 * are not scheduled and its submission ring is not read until it drains
 * the ring; nothing is dropped.
 *
 * Counters are free-running uint32_t: used = tail - head (mod 2^32),
 * slot = counter & (entries - 1). Each ring's head, tail and flags live on
 * their own cache lines so producer and consumer do not false-share.
 *
 * Waking (the need-wakeup protocol, after io_uring's SQPOLL):
 *  - A consumer about to sleep sets its NEED_WAKEUP flag, issues a full
 *    fence, re-reads the producer's tail and only sleeps if it is still
 *    empty.
 *  - A producer publishes its tail, issues a full fence, and rings the
 *    peer's eventfd doorbell only if NEED_WAKEUP is set.
 *  The two full fences (seq_cst) make it impossible for both sides to miss
 *  each other (Dekker): either the producer sees the flag, or the
 *  consumer sees the new tail.
 *
 * The daemon trusts nothing in this memory: it reads each counter once,
 * bounds it, copies what an entry points at before parsing it, and
 * disconnects a client that breaks the rules (RING_VIOLATION).
 *
 * The event record, the codes it carries and the protocol constants a
 * client program needs are in llama8_event.h (public, C and C++); this
 * file is the rest, for the daemon and the library's inside only: C11
 * atomics, which C++ cannot parse, and no part of the library's API
 * (llama8client.h does not include it; client.c does).
 *
 * Versioning: L8_SHM_MAGIC identifies the layout family; L8_PROTO_VERSION
 * (llama8_event.h) changes whenever any struct below, llama8_event.h or
 * llama8.proto changes incompatibly. */
#pragma once
#include <stdalign.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "llama8_event.h"

#define L8_SHM_MAGIC     0x31484d5338414c4cull /* "LLA8SMH1" little-endian */
#define L8_CACHELINE     64u
/* The largest socket datagram either side sends or accepts. */
#define L8_MAX_CTL_MSG   4096u
/* Descriptors attached to Welcome, in this order. */
enum { L8_FD_SHM = 0, L8_FD_SQ_DOORBELL = 1, L8_FD_EQ_DOORBELL = 2, L8_N_FDS = 3 };

/* Ring flags. */
#define L8_RING_NEED_WAKEUP 1u  /* consumer is (about to be) asleep on its doorbell */

/* Control block of one ring: three cache lines. The producer writes tail,
 * the consumer writes head and flags. */
struct l8_ring_ctl {
    alignas(L8_CACHELINE) _Atomic uint32_t head;  /* consumer: next slot to read */
    alignas(L8_CACHELINE) _Atomic uint32_t tail;  /* producer: next slot to write */
    alignas(L8_CACHELINE) _Atomic uint32_t flags; /* consumer: L8_RING_NEED_WAKEUP */
};
_Static_assert(sizeof(struct l8_ring_ctl) == 3 * L8_CACHELINE, "ring ctl layout");
_Static_assert(offsetof(struct l8_ring_ctl, tail) == L8_CACHELINE, "ring ctl layout");

/* Submission entry kinds. */
enum l8_sqe_kind { L8_SQE_GENERATE = 1, L8_SQE_CANCEL = 2 };

/* One submission: a serialized message in the arena. */
struct l8_sqe {
    uint32_t msg_off;   /* arena byte offset of the protobuf message */
    uint32_t msg_len;   /* its length in bytes, <= L8_MAX_REQ_MSG */
    uint8_t kind;       /* enum l8_sqe_kind */
    uint8_t pad[3];     /* zero */
    uint32_t reserved;  /* zero */
};
_Static_assert(sizeof(struct l8_sqe) == 16, "sqe is ABI");
#define L8_MAX_REQ_MSG 8192u  /* longest GenerateRequest/Cancel the daemon reads */

/* The header at offset 0. */
struct l8_shm_hdr {
    uint64_t magic;         /* L8_SHM_MAGIC */
    uint32_t version;       /* L8_PROTO_VERSION */
    uint32_t hdr_size;      /* sizeof(struct l8_shm_hdr) */
    uint64_t total_size;    /* size of the memfd */
    uint32_t sq_ctl_off;    /* struct l8_ring_ctl */
    uint32_t sq_off;        /* struct l8_sqe [sq_entries] */
    uint32_t sq_entries;    /* power of two */
    uint32_t eq_ctl_off;    /* struct l8_ring_ctl */
    uint32_t eq_off;        /* struct l8_event [eq_entries] */
    uint32_t eq_entries;    /* power of two */
    uint32_t arena_off;
    uint32_t arena_size;    /* bytes, multiple of 64 */
    uint8_t reserved[64];
};
_Static_assert(sizeof(struct l8_shm_hdr) == 120, "shm header is ABI");

/* Bounds of the geometry the daemon hands out and the client accepts. */
#define L8_MIN_RING_ENTRIES 16u
#define L8_MAX_RING_ENTRIES (1u << 20)
#define L8_MAX_ARENA        (256u << 20)

static inline int l8_is_pow2(uint32_t x) { return x && !(x & (x - 1)); }

static inline size_t l8_align_up(size_t x, size_t a) { return (x + a - 1) & ~(a - 1); }

/* Fill a header with the canonical layout for the given sizes. Returns the
 * total size (what the memfd must be), or 0 if a size is out of bounds. */
static inline uint64_t l8_shm_layout(uint32_t sq_entries, uint32_t eq_entries,
                                     uint32_t arena_size, struct l8_shm_hdr *h)
{
    if (!l8_is_pow2(sq_entries) || !l8_is_pow2(eq_entries) ||
        sq_entries < L8_MIN_RING_ENTRIES || eq_entries < L8_MIN_RING_ENTRIES ||
        sq_entries > L8_MAX_RING_ENTRIES || eq_entries > L8_MAX_RING_ENTRIES ||
        arena_size < 4096 || arena_size > L8_MAX_ARENA || arena_size % L8_CACHELINE)
        return 0;
    size_t off = l8_align_up(sizeof(struct l8_shm_hdr), 4096);
    struct l8_shm_hdr t = { .magic = L8_SHM_MAGIC, .version = L8_PROTO_VERSION,
                            .hdr_size = sizeof(struct l8_shm_hdr) };
    t.sq_ctl_off = (uint32_t)off; off += sizeof(struct l8_ring_ctl);
    t.sq_off = (uint32_t)off;     off += l8_align_up((size_t)sq_entries * sizeof(struct l8_sqe), L8_CACHELINE);
    t.sq_entries = sq_entries;
    t.eq_ctl_off = (uint32_t)off; off += sizeof(struct l8_ring_ctl);
    t.eq_off = (uint32_t)off;     off += l8_align_up((size_t)eq_entries * sizeof(struct l8_event), L8_CACHELINE);
    t.eq_entries = eq_entries;
    off = l8_align_up(off, 4096);
    t.arena_off = (uint32_t)off;  off += arena_size;
    t.arena_size = arena_size;
    t.total_size = l8_align_up(off, 4096);
    *h = t;
    return t.total_size;
}

/* Does a header received from the peer describe exactly the canonical
 * layout for its own sizes, within a mapping of map_size bytes? */
static inline int l8_shm_hdr_valid(const struct l8_shm_hdr *h, uint64_t map_size)
{
    struct l8_shm_hdr c;
    if (h->magic != L8_SHM_MAGIC || h->version != L8_PROTO_VERSION ||
        h->hdr_size != sizeof(struct l8_shm_hdr))
        return 0;
    uint64_t total = l8_shm_layout(h->sq_entries, h->eq_entries, h->arena_size, &c);
    return total && total == h->total_size && total <= map_size &&
           c.sq_ctl_off == h->sq_ctl_off && c.sq_off == h->sq_off &&
           c.eq_ctl_off == h->eq_ctl_off && c.eq_off == h->eq_off &&
           c.arena_off == h->arena_off;
}
