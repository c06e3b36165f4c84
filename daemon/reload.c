/* reload.c - llama8d's live configuration: reading it again (SIGHUP, a
 * ReloadRequest) and applying its live keys, and what the start-up in
 * llama8d.c applies the same way (the session slots, the descriptor check,
 * the loop's spin, READY=1). */
#include "daemon.h"

#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <systemd/sd-daemon.h>

#include "log.h"

/* spin_us = auto: the cuda engine leaves the CPU idle while the GPU runs a
 * step, so the loop may spend a core watching for its end (a polling
 * client then gets its token µs after the step); the CPU engine's threads
 * need every core. Under 4 cores the spinners would take the clients'. */
static uint32_t auto_spin_us(enum l8_backend backend)
{
    cpu_set_t set;
    if (backend != L8_BACKEND_CUDA || sched_getaffinity(0, sizeof(set), &set) < 0)
        return 0;
    return CPU_COUNT(&set) >= 4 ? L8D_SPIN_AUTO_US : 0;
}

uint32_t l8d_connections(const struct l8d *d)
{
    return d->conf.max_clients + d->conf.admin_clients;
}

/* A reload may raise the slots; fewer only refuses new clients. io_uring's
 * user data names a slot by index and generation, never by address, so the
 * arrays may move. */
int l8d_grow_slots(struct l8d *d, uint32_t n)
{
    if (n <= d->n_slots)
        return 0;
    struct l8d_session **s = realloc(d->sessions, n * sizeof(*s));
    if (s)
        d->sessions = s;
    uint32_t *g = realloc(d->slot_gen, n * sizeof(*g));
    if (g)
        d->slot_gen = g;
    if (!s || !g)
        return -ENOMEM;
    memset(s + d->n_slots, 0, (n - d->n_slots) * sizeof(*s));
    memset(g + d->n_slots, 0, (n - d->n_slots) * sizeof(*g));
    d->n_slots = n;
    return 0;
}

void l8d_resolve_spin(struct l8d *d)
{
    const uint32_t us = d->conf.spin_us == L8D_AUTO ? auto_spin_us(d->backend) : d->conf.spin_us;
    d->spin_ns = (uint64_t)us * 1000;
}

/* Each client holds three descriptors (its socket and two eventfds; a
 * fourth, the memfd, during its handshake). */
void l8d_check_nofile(const struct l8d *d)
{
    struct rlimit rl;
    const uint64_t n = l8d_connections(d), need = 3 * n + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && (uint64_t)rl.rlim_cur < need)
        log_warn("%llu file descriptors (RLIMIT_NOFILE) for %llu clients, which need about %llu: "
                 "clients past the limit are refused (raise LimitNOFILE=, or lower max_clients)",
                 (unsigned long long)rl.rlim_cur, (unsigned long long)n,
                 (unsigned long long)need);
}

void l8d_notify_ready(struct l8d *d)
{
    sd_notifyf(0, "READY=1\nSTATUS=serving %s on %s", d->model_name,
               l8_backend_name(d->backend));
}

static void log_change(const char *key, const char *was_raw, const char *now_raw, bool live,
                       void *ctx)
{
    struct l8d *d = ctx;
    char was[256], now[256];   /* a path from the file, made fit for the journal */
    l8_log_text(was, sizeof(was), was_raw, strlen(was_raw));
    l8_log_text(now, sizeof(now), now_raw, strlen(now_raw));
    if (live) {
        log_notice("reload: %s = %s (was %s)", key, now, was);
        return;
    }
    log_warn("reload: %s = %s takes effect at the next start (running with %s)", key, now, was);
    const size_t n = strlen(d->restart_keys);
    snprintf(d->restart_keys + n, sizeof(d->restart_keys) - n, "%s%s", n ? ", " : "", key);
}

int l8d_reload(struct l8d *d)
{
    struct l8d_conf next;
    struct l8d_sizes sz;
    char err[L8D_ERRLEN] = "";
    if (d->state != L8D_RUNNING) {   /* no READY=1 while systemd sees it stopping */
        log_notice("draining: no reload");
        return -ESHUTDOWN;
    }
    /* MONOTONIC_USEC: systemd pairs this reload with the READY=1 after it. */
    sd_notifyf(0, "RELOADING=1\nSTATUS=reloading the configuration\nMONOTONIC_USEC=%llu",
               (unsigned long long)(l8_now_ns() / 1000));
    /* A value the next start would refuse is refused now, while the
     * running configuration can still be kept. */
    if (l8d_conf_from_args(&next, d->argc, d->argv, err) != 0 ||
        l8d_conf_derive(&next, d->model->cfg.max_pos, &sz, err) < 0) {
        /* The file's bytes, made fit for the journal and Status's UTF-8. */
        l8_log_text(d->reload_error, sizeof(d->reload_error), err, strlen(err));
        log_err("reload: %s; the configuration in use is unchanged", d->reload_error);
    } else {
        d->restart_keys[0] = 0;
        l8d_conf_compare(&d->conf, &next, log_change, d);
        l8d_conf_take_live(&d->conf, &next);
        l8_log_set_level(d->conf.log_level);
        if (l8d_grow_slots(d, l8d_connections(d)) < 0)
            log_err("reload: no memory for %u client slots: at most %u connections",
                    l8d_connections(d), d->n_slots);
        l8d_check_nofile(d);
        l8d_resolve_spin(d);
        l8d_et_set_spin(d->et, d->spin_ns);
        d->reloads++;
        d->reload_error[0] = 0;
        log_notice("configuration reloaded%s%s",
                   d->restart_keys[0] ? "; waiting for a restart: " : "", d->restart_keys);
    }
    l8d_notify_ready(d);
    return 0;
}
