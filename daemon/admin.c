/* admin.c - the daemon-wide requests on a client's control socket: Status
 * (the daemon's counters and configuration), the client list (one page a
 * request) and a reload of the configuration (reload.c). session.c takes
 * the datagram and hands these here. Each answer is one datagram on the
 * client's socket (a reload's, the Status after it); a client whose answer
 * cannot be sent is closed. Only the administrator (root, the daemon's
 * user) may reload, or see the clients of other users. */
#include "daemon.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "llama8.pb-c.h"
#include "log.h"

int l8d_usage_index(struct l8d *d, uid_t uid)
{
    for (uint32_t i = 0; i < d->n_usage; i++)
        if (d->usage[i].uid == uid)
            return (int)i;
    if (d->n_usage == d->usage_cap) {
        uint32_t cap = d->usage_cap ? 2 * d->usage_cap : 8;
        struct l8d_usage *u = realloc(d->usage, cap * sizeof(*u));
        if (!u)
            return -ENOMEM;
        d->usage = u;
        d->usage_cap = cap;
    }
    d->usage[d->n_usage] = (struct l8d_usage){ .uid = uid };
    return (int)d->n_usage++;
}

void l8d_count_error(struct l8d *d, uid_t uid, int code)
{
    if (code <= 0 || code >= L8_ERR_MAX_)
        return;
    d->errors[code]++;
    for (uint32_t i = 0; i < d->n_usage; i++)
        if (d->usage[i].uid == uid)
            d->usage[i].errors[code]++;
}

/* The Status: the daemon's counters for the administrator; for any other
 * user the pool's figures, and the request counters of their own uid
 * (d->usage) instead of everyone's (Status.own_uid). */
void l8d_admin_status(struct l8d_session *s)
{
    struct l8d *d = s->d;
    struct l8_sched_stats st;
    l8_sched_get_stats(d->sched, &st);
    uint64_t now = l8_now_ns();
    /* Tokens/s from the oldest of the last 16 one-second samples to now:
     * a burst just ended counts (the samples alone left a reply that took
     * under a second at 0/s), an idle quarter of a minute reads 0. */
    double rate = 0;
    if (d->rate_n >= 1) {
        uint32_t oldest = (d->rate_i + 16 - d->rate_n) % 16;
        double dt = (double)(now - d->rate_t[oldest]) / 1e9;
        if (dt >= 0.1)
            rate = (double)(st.tokens_generated - d->rate_tok[oldest]) / dt;
    }
    Llama8__Status o = LLAMA8__STATUS__INIT;
    o.model_name = d->model_name;
    o.backend = (char *)l8_backend_name(d->backend);
    o.prefix_cache = (char *)l8d_prefix_cache_name(d->conf.prefix_cache);
    o.speculate = (char *)(d->speculate ? "ngram" : "off");
    o.draft_tokens = st.drafted;
    o.draft_accepted = st.accepted;
    o.spin_us = (uint32_t)(d->spin_ns / 1000);
    o.log_level = (char *)l8_log_level_name(d->conf.log_level);
    o.config_reloads = d->reloads;
    o.config_error = d->reload_error;
    o.config_restart = d->restart_keys;
    o.pages_total = st.pages_total;
    o.pages_used = st.pages_used;
    o.pages_cached = st.pages_cached;
    o.page_size = l8_engine_page_size(d->engine);
    o.clients = d->n_sessions;
    o.max_clients = d->conf.max_clients;
    o.admin_clients = d->conf.admin_clients;
    o.requests_running = st.running;
    o.requests_waiting = st.waiting;
    o.tokens_per_s = rate;
    o.uptime_s = (double)(now - d->start_ns) / 1e9;
    o.tokens_generated = st.tokens_generated;
    o.requests_done = d->requests_done;
    o.prompt_tokens = st.prompt_tokens;
    o.prompt_tokens_cached = st.cached_tokens;
    o.draining = d->state != L8D_RUNNING;
    o.context_length = d->max_ctx;
    o.step_running_s = d->step_in_flight ? (double)(now - d->step_t_submit) / 1e9 : 0.0;
    o.step_stalled = d->step_stalled;
    o.steps = d->steps;
    o.step_time_s = (double)d->step_ns / 1e9;
    o.gap_steps = d->gaps;
    o.gap_time_s = (double)d->gap_ns / 1e9;
    o.decode_steps = d->decode_steps;
    o.decode_time_s = (double)d->decode_ns / 1e9;
    o.decode_rows = d->decode_rows;
    o.fed_tokens = d->fed_tokens;
    o.preemptions = st.preemptions;
    const struct l8_engine_mem *mem = l8_engine_memory(d->engine);
    o.mem_weights = mem->weights;
    o.mem_kv_pool = mem->kv_pool;
    o.mem_work = mem->work;
    o.device_used = mem->device_used;
    o.device_total = mem->device_total;
    o.errors = d->errors;
    o.n_errors = L8_ERR_MAX_;
    if (!l8d_uid_is_admin(s->uid)) {
        const struct l8d_usage *u = &d->usage[s->usage_i];
        o.own_uid = true;
        o.requests_done = u->requests_done;
        o.tokens_generated = u->tokens_generated;
        o.prompt_tokens = u->prompt_tokens;
        o.prompt_tokens_cached = u->prompt_tokens_cached;
        o.errors = (uint64_t *)u->errors;
        o.steps = o.gap_steps = o.decode_steps = o.decode_rows = o.fed_tokens = 0;
        o.step_time_s = o.gap_time_s = o.decode_time_s = 0;
        o.preemptions = 0;
        o.draft_tokens = o.draft_accepted = 0;
    }
    Llama8__DaemonMessage m = LLAMA8__DAEMON_MESSAGE__INIT;
    m.msg_case = LLAMA8__DAEMON_MESSAGE__MSG_STATUS;
    m.status = &o;
    int rc = l8d_send_msg(s->fd, &m, NULL, 0);
    if (rc < 0) {
        log_info("client %llu: status not sent: %s", (unsigned long long)s->id, strerror(-rc));
        l8d_session_close(s, 0, NULL);
    }
}

static int by_id(const void *a, const void *b)
{
    const struct l8d_session *x = *(struct l8d_session *const *)a;
    const struct l8d_session *y = *(struct l8d_session *const *)b;
    return (x->id > y->id) - (x->id < y->id);
}

/* One page of the client list: the welcomed sessions this one may see (all
 * for the administrator, else its own uid's) with ids above after_id, in
 * id order, as many as fit in one datagram. */
void l8d_admin_clients(struct l8d_session *s, uint64_t after_id)
{
    struct l8d *d = s->d;
    const bool all = l8d_uid_is_admin(s->uid);
    const size_t cap = d->n_sessions;
    struct l8d_session **v = malloc(cap * sizeof(*v));
    Llama8__ClientInfo *ci = malloc(cap * sizeof(*ci));
    Llama8__ClientInfo **ptrs = malloc(cap * sizeof(*ptrs));
    int rc = -ENOMEM;
    if (!v || !ci || !ptrs)
        goto out;
    size_t n = 0;
    for (uint32_t i = 0; i < d->n_slots && n < cap; i++) {
        struct l8d_session *o = d->sessions[i];
        if (o && o->state == L8D_SESS_READY && o->id > after_id && (all || o->uid == s->uid))
            v[n++] = o;
    }
    qsort(v, n, sizeof(*v), by_id);
    const uint64_t now = l8_now_ns();
    Llama8__ClientList list = LLAMA8__CLIENT_LIST__INIT;
    list.clients = ptrs;
    list.more = true;   /* while measuring: the page's size as if it were cut */
    Llama8__DaemonMessage m = LLAMA8__DAEMON_MESSAGE__INIT;
    m.msg_case = LLAMA8__DAEMON_MESSAGE__MSG_CLIENT_LIST;
    m.client_list = &list;
    for (size_t i = 0; i < n; i++) {
        const struct l8d_session *o = v[i];
        Llama8__ClientInfo *c = &ci[i];
        llama8__client_info__init(c);
        c->id = o->id;
        c->name = (char *)o->name;
        c->pid = o->pid;
        c->uid = o->uid;
        c->connected_s = (double)(now - o->t_accept_ns) / 1e9;
        c->requests = o->n_live;
        c->requests_done = o->requests_done;
        c->prompt_tokens = o->prompt_tokens;
        c->tokens_generated = o->tokens_generated;
        c->held = o->backlog_len > 0;
        struct l8_sched_owner_stats os;
        l8_sched_owner_stats(d->sched, o->id, &os);
        c->running = os.running;
        c->kv_pages = os.pages;
        ptrs[i] = c;
        list.n_clients = i + 1;
        if (llama8__daemon_message__get_packed_size(&m) > L8_MAX_CTL_MSG) {
            list.n_clients = i;   /* this one and the rest on the next page */
            break;
        }
    }
    list.more = list.n_clients < n;
    rc = l8d_send_msg(s->fd, &m, NULL, 0);
out:
    free(v);
    free(ci);
    free(ptrs);
    if (rc < 0) {
        log_info("client %llu: client list not sent: %s", (unsigned long long)s->id,
                 strerror(-rc));
        l8d_session_close(s, rc == -ENOMEM ? L8_ERR_INTERNAL : 0,
                          rc == -ENOMEM ? "out of memory" : NULL);
    }
}

/* A reload asked for on the control socket (llama8ctl reload, the unit's
 * ExecReload): what SIGHUP does, with the Status after it as the answer.
 * The configuration is the administrator's: root and our own user only. */
void l8d_admin_reload(struct l8d_session *s)
{
    if (!l8d_uid_is_admin(s->uid)) {
        log_notice("client %llu (pid %d uid %u) asked for a reload: refused",
                   (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid);
        l8d_session_close(s, L8_ERR_PERMISSION_DENIED,
                          "only root and the daemon's user may reload its configuration");
        return;
    }
    log_notice("client %llu (pid %d uid %u): reloading the configuration",
               (unsigned long long)s->id, (int)s->pid, (unsigned)s->uid);
    if (l8d_reload(s->d) < 0)
        l8d_session_close(s, L8_ERR_SHUTTING_DOWN, "the daemon is shutting down");
    else
        l8d_admin_status(s);
}
