/* daemon.h - llama8d's state, owned by the event-loop thread.
 *
 * loop.c runs the io_uring loop and the step cycle; session.c is one
 * client's connection, shared memory and requests; admin.c answers the
 * daemon-wide requests (status, client list, reload); reload.c reads the
 * configuration again and applies its live keys. Only the engine thread
 * runs elsewhere, and it touches nothing here but the step it was given. */
#pragma once
#include <liburing.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "conf.h"
#include "engine/engine.h"
#include "engine_thread.h"
#include "l8_shm.h"
#include "scheduler.h"

struct l8d;

/* What one uid's clients did since the daemon started: what Status tells a
 * user who is not the administrator in place of the daemon-wide counters,
 * so no user learns when others send, how long their prompts are, or that
 * their prompts hit the prefix cache. */
struct l8d_usage {
    uid_t uid;
    uint64_t requests_done;      /* ended with a DONE event */
    uint64_t prompt_tokens;      /* computed when the request started */
    uint64_t prompt_tokens_cached; /* taken from the prefix cache then */
    uint64_t tokens_generated;   /* delivered */
    uint64_t errors[L8_ERR_MAX_];  /* error events and datagrams sent, by code */
};

/* One live request of a session; the scheduler's `user` points here. */
struct l8d_req {
    struct l8d_session *s;
    uint64_t id;
    uint32_t generated;      /* tokens delivered so far */
    uint32_t prompt_tokens;  /* for the STARTED event */
    uint32_t cached_tokens;  /* of them, from the prefix cache (STARTED) */
    uint64_t t_submit_ns, t_first_ns;  /* taken; its first token (0: none yet) */
    uint32_t drafted, accepted;        /* speculative decoding, at its end */
    uint64_t t_waiting_ns;   /* its last WAITING event (0: none) */
    bool started;            /* STARTED sent */
    bool live;
    bool ignore_eos;
};

/* Lifecycle of a session. */
enum l8d_sess_state {
    L8D_SESS_HELLO = 0,      /* accepted, waiting for Hello */
    L8D_SESS_READY,          /* welcomed: rings live */
    L8D_SESS_CLOSING,        /* being torn down: waiting for io_uring ops */
};

struct l8d_session {
    struct l8d *d;
    uint32_t slot;           /* index in d->sessions */
    uint32_t gen;            /* generation of the slot, in io_uring user_data */
    enum l8d_sess_state state;
    uint64_t t_accept_ns;    /* HELLO: closed past conf.hello_timeout_ms */
    int fd;                  /* the SOCK_SEQPACKET connection */
    uint64_t id;             /* client id: the scheduler's owner */
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint32_t usage_i;        /* its uid's entry in d->usage */
    char name[65];
    /* Shared memory: the daemon's private copy of the geometry is the only
     * one it trusts; the header in the mapping is for the client. */
    uint8_t *map;
    size_t map_size;
    struct l8_shm_hdr geo;
    struct l8_ring_ctl *sq_ctl, *eq_ctl;
    struct l8_sqe *sq;
    struct l8_event *eq;
    const uint8_t *arena;
    int shm_fd, sq_efd, eq_efd;
    uint32_t sq_head;        /* private: next submission to take */
    uint32_t eq_tail;        /* private: next event slot to fill */
    uint32_t eq_published;   /* the tail value last stored to shared memory */
    /* Events that did not fit in the event ring, in order (bounded by
     * max_requests_per_client * (max_new_tokens + 3)): a circular buffer
     * of backlog_cap records, backlog_len of them from backlog_head. */
    struct l8_event *backlog;
    uint32_t backlog_head, backlog_len, backlog_cap;
    /* Requests. */
    struct l8d_req *reqs;    /* [max_requests_per_client] */
    uint32_t n_live;
    /* Since it connected (the client list): requests taken and ended, their
     * prompt tokens, the tokens delivered. */
    uint64_t requests_done, prompt_tokens, tokens_generated;
    /* io_uring buffers: the control recv and the doorbell read. */
    uint8_t rx[L8_MAX_CTL_MSG];
    struct iovec rx_iov;
    struct msghdr rx_msg;
    uint64_t doorbell_val;
    uint32_t ops_pending;    /* io_uring ops that still point at this session */
    bool recv_armed, doorbell_armed;
    bool rang;               /* the doorbell fired since the last scan */
    uint32_t empty_rings;    /* doorbells in a row that brought no submission:
                                past L8D_EMPTY_RINGS it is read at the tick only */
    bool wake_armed;         /* the event doorbell's write is in flight */
    bool wake_again;         /* and another wake was asked for meanwhile */
    bool kick;               /* doorbell rang or a message came: scan the SQ */
    bool dirty;              /* events written, tail not yet published */
    bool violation;          /* broke the protocol: close after this pass */
    bool error_sent;         /* closed with an Error sent: drop unread datagrams */
    bool cancel_sent;        /* closing: the doorbell read's and wake's cancels are queued */
};

enum l8d_state { L8D_RUNNING = 0, L8D_DRAINING, L8D_STOPPED };

struct l8d {
    /* The configuration as read ("auto" kept as such; its live keys from
     * the last reload, the others from the start: what a reload compares
     * with), and what its choices came to on this machine. */
    struct l8d_conf conf;
    enum l8_backend backend;        /* conf.backend, auto resolved */
    enum l8_numerics numerics;      /* conf.numerics, auto resolved */
    struct l8_model *model;
    struct l8_engine *engine;
    struct l8_sched *sched;
    bool speculate;          /* the scheduler drafts (config speculate, auto resolved) */
    struct l8d_engine_thread *et;
    struct io_uring ring;
    enum l8d_state state;
    int exit_code;
    int listen_fd;
    bool socket_activated;   /* listen_fd came from systemd: never unlink */
    bool accept_armed;
    /* Out of descriptors: a spare one (an eventfd) let go to take a
     * waiting connection and refuse it; the listening socket polled
     * instead of accepted on (accept_by_poll); accepting paused until
     * accept_resume_ns when even that fails. */
    int spare_fd;
    bool accept_by_poll;
    uint64_t accept_resume_ns;
    /* Log lines a peer can make repeat, each kind at most every 10 s:
     * accept failures, connections refused (group, too many), protocol
     * violations. */
    struct l8_ratelimit rl_accept, rl_denied, rl_full, rl_violation;
    int signal_fd;
    int et_fd;               /* engine completion eventfd */
    uint64_t et_val;
    uint8_t sig_buf[128];    /* struct signalfd_siginfo */
    struct __kernel_timespec tick;
    bool timer_armed;
    /* Sessions: slots [0, max_clients + admin_clients); a NULL slot is free. */
    struct l8d_session **sessions;
    uint32_t n_slots, n_sessions;
    uint32_t *slot_gen;
    uint64_t next_client_id;
    gid_t allowed_gid;
    bool have_group;
    /* While the model loads (lobby.c): what the load is doing, how far the
     * engine is in placing the weights (both read by the lobby's thread),
     * and the lobby holding the connections made meanwhile. */
    _Atomic(const char *) load_stage;
    struct l8_progress load_progress;
    struct l8d_lobby *lobby;
    char start_error[L8_ERRLEN + 64]; /* why the start failed, for those waiting */
    /* The step in flight. */
    bool step_in_flight;
    struct l8_seq *step_seqs;
    uint32_t step_n;
    uint64_t step_t_submit;
    uint32_t step_tokens;    /* tokens in the step in flight */
    bool step_decode;        /* no sequence in it is (re)computing prompt tokens */
    uint64_t step_tok_ns;    /* slowest recent ns per token of a step (decaying
                                max; the warm-up seeds it): the stall bound */
    bool step_stalled;       /* the step in flight ran past its bound */
    bool step_done;          /* this pass of the loop took a step's result */
    uint64_t spin_ns;        /* conf.spin_us: the loop waits this long for a
                                step without sleeping (loop.c spin_for_step) */
    /* Engine time (Status): steps done and their time in the engine; the
     * gaps from a step's end to the next one's start when requests were
     * still running or waiting at that end (the loop's own cost per step). */
    uint64_t steps, step_ns, gaps, gap_ns;
    /* Of them, the decode-only steps (each sequence fed its last sampled
     * token): count, time and sequences; and the tokens fed in all steps.
     * Serving throughput is read from these: the decode steps' batch and
     * time against what the prompt chunks cost. */
    uint64_t decode_steps, decode_ns, decode_rows, fed_tokens;
    uint64_t last_step_end;  /* engine clock, the last step's end */
    bool gap_open;           /* runnable requests remained when it ended */
    /* Model facts for Welcome. */
    char model_dir[4096];
    char model_name[256];
    uint32_t vocab, max_ctx, max_prompt, max_new, max_stop_ids;
    int32_t bos;
    uint32_t n_eos;
    uint32_t eos[L8_MAX_EOS];
    uint32_t sq_entries, eq_entries, arena_size;
    uint32_t *prompt_buf;    /* [max_prompt] scratch for copying prompts out */
    uint8_t *msg_buf;        /* [L8_MAX_REQ_MSG] scratch for copying messages out */
    char *constraint_buf;    /* [L8_MAX_CONSTRAINT] and constraints' texts */
    struct l8d_constraints *constraints;
    /* Statistics. */
    uint64_t start_ns;
    uint64_t requests_done;
    uint64_t errors[L8_ERR_MAX_];       /* error events and datagrams sent, by code */
    /* The same per uid (admin.c): an entry for each uid that connected,
     * kept for the daemon's life (a few per workstation). */
    struct l8d_usage *usage;
    uint32_t n_usage, usage_cap;
    uint64_t rate_t[16], rate_tok[16];  /* 1 s samples for tokens/s */
    uint32_t rate_i, rate_n;
    uint64_t last_sample_ns, last_watchdog_ns;
    uint64_t watchdog_usec;  /* 0: no watchdog */
    uint64_t drain_deadline_ns;
    /* Idle exit (conf idle_exit_s): since when no client and no request;
     * whether the accept is being cancelled to exit (it resumes if a
     * connection came in meanwhile). */
    uint64_t idle_since_ns;
    bool idle_exit;
    /* The 8 bytes each event doorbell's write (loop.c, OP_WAKE) adds to a
     * client's eventfd: 1. io_uring reads them when the write runs, so they
     * live here, not on the stack. */
    uint64_t wake_val;
    /* Configuration reloads (SIGHUP, l8d_reload): the command line they
     * read again; what the reloads found. */
    int argc;
    char **argv;
    uint64_t reloads;                 /* that applied */
    char reload_error[L8D_ERRLEN];    /* the last reload's error ("": it applied) */
    char restart_keys[512];           /* keys changed since the start that wait
                                         for a restart, ", "-separated */
};

/* session.c */
/* An honest client rings only when the daemon asked (NEED_WAKEUP) and after
 * publishing a submission, so an empty doorbell is a rare race; this many
 * in a row is a client writing its eventfd in a loop, whose doorbell is
 * then read once a tick (its ring still at every step): it costs the
 * daemon ten wake-ups a second, not a core. */
#define L8D_EMPTY_RINGS 8
int  l8d_session_accept(struct l8d *d, int fd);
/* Arm what is not armed of the session's operations: the control socket's
 * recv, the doorbell's read (io_uring SQEs, uring_op.h). */
void l8d_session_arm(struct l8d_session *s);
/* Out of descriptors: take the connections waiting to be accepted (up to
 * 64), through the spare descriptor, and refuse them (TOO_MANY_CLIENTS).
 * 0, also when none waits; a negative errno when it could not. */
int  l8d_session_refuse_waiting(struct l8d *d);
/* The socket delivered a datagram of n bytes (n <= 0: hang-up/error). */
void l8d_session_on_recv(struct l8d_session *s, int n, int msg_flags);
/* Take what the submission ring holds. */
void l8d_session_scan(struct l8d_session *s);
/* The scheduler's `held` (scheduler.h): a request whose client has events
 * waiting in its backlog (its event ring is full) is not run. */
bool l8d_req_held(void *ctx, void *user);
/* Tell each request waiting to start, a second after its submission and
 * every two seconds after, why it waits (a WAITING event). */
void l8d_session_tell_waiting(struct l8d *d, uint64_t now_ns);
/* The scheduler's on_event (ctx: the daemon): deliver one event. */
void l8d_session_on_sched_event(void *ctx, const struct l8_sched_event *ev);
/* Queue one event record for s (ring or backlog). */
void l8d_session_push(struct l8d_session *s, const struct l8_event *ev);
/* Move backlog into the ring; store the tail; say whether to ring the
 * doorbell. */
bool l8d_session_publish(struct l8d_session *s);
/* Start tearing a session down (cancels its requests at once). */
void l8d_session_close(struct l8d_session *s, int err_code, const char *why);
/* Free a closing session whose io_uring ops are all back. */
void l8d_session_free(struct l8d_session *s);
/* SIGTERM deadline: cut every live request with SHUTTING_DOWN. */
void l8d_session_cut_all(struct l8d_session *s);
/* An Error datagram on fd (best effort, never blocks; counted in d->errors
 * and for uid, as l8d_count_error). */
void l8d_send_error(struct l8d *d, int fd, uid_t uid, int code, uint64_t request_id,
                    const char *msg);
/* A DaemonMessage datagram on fd with nfds (at most L8_N_FDS) descriptors;
 * never blocks. 0, or a negative errno (-EMSGSIZE: over L8_MAX_CTL_MSG). */
struct Llama8__DaemonMessage;
int  l8d_send_msg(int fd, const struct Llama8__DaemonMessage *m, const int *fds, int nfds);
/* The administrator: root and the daemon's own user. */
bool l8d_uid_is_admin(uid_t uid);
/* May the peer with credentials cr on fd connect (root, the daemon's user,
 * the allowed group)? Safe on any thread. */
struct ucred;
bool l8d_peer_allowed(struct l8d *d, int fd, const struct ucred *cr);
/* Answer a connection we will not serve with an Error, and close it. */
void l8d_refuse(struct l8d *d, int fd, int code, const char *msg);

/* lobby.c: accept and hold the connections made while the model loads,
 * telling those who asked how far it is; on its own thread, from before
 * the load (listen_fd bound) until l8d_lobby_stop. Stopped with failed
 * NULL, the held connections become sessions (after the session slots
 * and the ring exist); otherwise each is refused with that message. */
int  l8d_lobby_start(struct l8d *d);
void l8d_lobby_stop(struct l8d *d, const char *failed);

/* admin.c: the daemon-wide requests of a welcomed session, each answered
 * on its socket. A StatusRequest: the Status. */
void l8d_admin_status(struct l8d_session *s);
/* One page of the client list: the sessions with ids above after_id that s
 * may see. */
void l8d_admin_clients(struct l8d_session *s, uint64_t after_id);
/* A ReloadRequest: l8d_reload, answered with the Status; a client that is
 * not the administrator is closed with PERMISSION_DENIED. */
void l8d_admin_reload(struct l8d_session *s);
/* The index of uid's entry in d->usage, made when it first connects, or
 * -ENOMEM. */
int  l8d_usage_index(struct l8d *d, uid_t uid);
/* An error sent: counted in d->errors and, if uid has connected, in its
 * entry. */
void l8d_count_error(struct l8d *d, uid_t uid, int code);

/* reload.c: read the configuration again (SIGHUP, a ReloadRequest) and
 * apply its live keys; what changed, what waits for a restart, or why the
 * file was refused, goes to the log and to Status. -ESHUTDOWN (nothing
 * done) while draining. */
int  l8d_reload(struct l8d *d);
/* What a reload applies, which the start-up (llama8d.c) applies first.
 * The connections there may be: max_clients + admin_clients (bounded by
 * the configuration's check). */
uint32_t l8d_connections(const struct l8d *d);
/* Session slots [0, n): more of them for more connections; -ENOMEM leaves
 * the slots there are. */
int  l8d_grow_slots(struct l8d *d, uint32_t n);
/* conf.spin_us (from auto where it says so) into the loop's spin_ns. */
void l8d_resolve_spin(struct l8d *d);
/* Warn when RLIMIT_NOFILE is short for l8d_connections (at start, and
 * after a reload). */
void l8d_check_nofile(const struct l8d *d);
/* READY=1 and the serving STATUS= to systemd (at start, after a reload). */
void l8d_notify_ready(struct l8d *d);

/* loop.c */
int  l8d_loop_run(struct l8d *d);
