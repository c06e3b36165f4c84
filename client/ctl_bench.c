/* ctl_bench.c: `llama8ctl bench`: latency and throughput of llama8d as a
 * client sees them.
 *
 * Measured (all CLOCK_MONOTONIC, which the daemon's event timestamps share):
 *   submit -> start   the daemon's STARTED timestamp minus our submit time:
 *                     what the ring, the loop and the queue add before the
 *                     request's prefill enters a step
 *   TTFT              first token received minus submit
 *   delivery          receive time minus the daemon's timestamp of the token
 *                     (taken when the step producing it completed)
 *   inter-token       a token's daemon timestamp minus the one before of the
 *                     same request: the decode cadence, without the client's
 *                     polling (which can receive two tokens at once)
 *   time per output   per request, its first to last token's timestamps over
 *   token             the tokens between: the median request's decode rate
 *   tokens/s          generated tokens over the wall time of the run
 *   engine            from the daemon's Status before and after the run: its
 *                     steps, their mean time in the engine, the engine's busy
 *                     share of the wall time, and the mean gap between a step
 *                     and the next while requests were left (the daemon's own
 *                     cost per step: delivery, scheduling, the hand-off)
 *   wake-up floor     after the run, in this process: a thread stamps the
 *                     time and writes an eventfd, a second blocked in read
 *                     wakes and writes another, the main thread blocked in
 *                     poll wakes and reads the clock; repeated at the run's
 *                     inter-token p50 (how long the waiters sleep matters on
 *                     a virtual machine). A token's delivery has the same
 *                     two hops (engine thread -> the daemon's loop -> the
 *                     client), so this is its floor on this machine, and
 *                     delivery / floor what the daemon adds.
 * With --poll the client spins on its event ring instead of sleeping on the
 * doorbell (the cost: a core), and a daemon with spin_us (its Status says)
 * has its loop spin on the engine thread's flag: each hop that spins is one
 * wake-up fewer, and the floor's hop is then a counter its reader spins on.
 * Prompts are random token ids (seeded), greedy, with --ignore-eos so every
 * request makes exactly --new tokens. */
#include "ctl_ipc.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "proto/l8_hash.h"

struct breq {
    uint64_t id;
    int client;
    uint64_t t_submit;
    uint64_t ts_first, ts_last;   /* daemon timestamps of the first and last token */
    uint32_t tokens;
    bool done;
};

struct lat { uint64_t *v; size_t n, cap; };

static void lat_add(struct lat *l, uint64_t x)
{
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 1024;
        uint64_t *nv = realloc(l->v, cap * sizeof(*nv));
        if (!nv)
            return;
        l->v = nv;
        l->cap = cap;
    }
    l->v[l->n++] = x;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest-rank percentile, in microseconds. */
static double pct_us(struct lat *l, double p)
{
    if (!l->n)
        return 0;
    qsort(l->v, l->n, sizeof(*l->v), cmp_u64);
    size_t k = (size_t)(p / 100.0 * (double)l->n + 0.999999);
    if (k < 1)
        k = 1;
    if (k > l->n)
        k = l->n;
    return (double)l->v[k - 1] / 1000.0;
}

static uint64_t rng_next(uint64_t *s)
{
    return l8_splitmix64(s);   /* deterministic prompts for a given --seed */
}

/* ---- the wake-up floor (see the top) ------------------------------------ */

struct floor_chain {
    int efd[2];                 /* hop 0: stamp -> relay, hop 1: relay -> main */
    bool spin[2];               /* that hop is a counter its reader spins on,
                                   not an eventfd it sleeps on */
    uint64_t rounds, pause_ns;
    _Atomic uint64_t t_stamp, count[2];
    _Atomic bool fail;
};

static bool hop_send(struct floor_chain *c, int k, uint64_t v)
{
    if (c->spin[k]) {
        atomic_fetch_add_explicit(&c->count[k], v, memory_order_release);
        return true;
    }
    return write(c->efd[k], &v, sizeof v) == sizeof v;
}

/* What arrived on hop k past the got already taken (an eventfd adds up
 * stamps its reader was too late for), or 0 after 5 s. */
static uint64_t hop_recv(struct floor_chain *c, int k, uint64_t got)
{
    uint64_t v = 0;
    if (!c->spin[k]) {
        struct pollfd pf = { c->efd[k], POLLIN, 0 };
        return poll(&pf, 1, 5000) == 1 && read(c->efd[k], &v, sizeof v) == sizeof v ? v : 0;
    }
    for (const uint64_t t0 = l8c_now_ns(); l8c_now_ns() - t0 < 5000000000ull;)
        if ((v = atomic_load_explicit(&c->count[k], memory_order_acquire)) > got)
            return v - got;
    return 0;
}

static void *floor_stamp(void *arg)
{
    struct floor_chain *c = arg;
    for (uint64_t i = 0; i < c->rounds; i++) {
        /* a step's pause: the waiters are asleep (or spinning) when it comes */
        struct timespec ts = { (time_t)(c->pause_ns / 1000000000u),
                               (long)(c->pause_ns % 1000000000u) };
        nanosleep(&ts, NULL);
        atomic_store_explicit(&c->t_stamp, l8c_now_ns(), memory_order_release);
        if (!hop_send(c, 0, 1))
            c->fail = true;
    }
    return NULL;
}

static void *floor_relay(void *arg)
{
    struct floor_chain *c = arg;
    /* Passes on the count it took, so no side waits for a stamp already taken. */
    for (uint64_t got = 0, v = 0; got < c->rounds; got += v)
        if (!(v = hop_recv(c, 0, got)) || !hop_send(c, 1, v)) {
            c->fail = true;
            break;
        }
    return NULL;
}

/* Fills out with two-hop hand-offs pause_ns apart, about 0.5 s of them:
 * each hop an eventfd wake-up, or a counter spun on where spin[k] (the
 * daemon's loop with spin_us, a client with --poll); -1 if the machine
 * refused a thread or an eventfd, or a hop took over 5 s (no floor). */
static int wake_floor(struct lat *out, uint64_t pause_ns, const bool spin[2])
{
    pause_ns = pause_ns < 100000 ? 100000 : pause_ns > 20000000 ? 20000000 : pause_ns;
    struct floor_chain c = { .efd = { eventfd(0, EFD_CLOEXEC), eventfd(0, EFD_CLOEXEC) },
                             .spin = { spin[0], spin[1] }, .pause_ns = pause_ns };
    c.rounds = 500000000 / pause_ns < 50 ? 50 : 500000000 / pause_ns > 400 ? 400
                                                : 500000000 / pause_ns;
    pthread_t ts, tr;
    int rc = -1;
    if (c.efd[0] < 0 || c.efd[1] < 0)
        goto out;
    if (pthread_create(&tr, NULL, floor_relay, &c))
        goto out;
    if (pthread_create(&ts, NULL, floor_stamp, &c)) {
        /* the relay's reads, all at once: it runs out and ends */
        hop_send(&c, 0, c.rounds);
        pthread_join(tr, NULL);
        goto out;
    }
    for (uint64_t got = 0, v = 0; got < c.rounds; got += v) {
        if (!(v = hop_recv(&c, 1, got))) {
            c.fail = true;
            break;
        }
        uint64_t now = l8c_now_ns();
        lat_add(out, now - atomic_load_explicit(&c.t_stamp, memory_order_acquire));
    }
    pthread_join(ts, NULL);
    pthread_join(tr, NULL);
    rc = c.fail ? -1 : 0;
out:
    for (int i = 0; i < 2; i++)
        if (c.efd[i] >= 0)
            close(c.efd[i]);
    return rc;
}

static void bench_usage(FILE *f)
{
    fprintf(f,
        "Usage: llama8ctl bench [OPTIONS]\n"
        "Run N greedy requests of random prompts against llama8d and report time to first\n"
        "token, submit -> prefill start, per-token delivery latency, inter-token latency,\n"
        "time per output token (p50/p99) and tokens/s; then this machine's floor for a\n"
        "token's delivery (the same hand-offs between threads, at the same pace).\n\n"
        "  -n, --requests N       requests in all (default 64)\n"
        "  -c, --concurrency C    requests in flight (default 8)\n"
        "      --clients K        connections to spread them over (default 1)\n"
        "      --prompt-min A     shortest prompt in tokens (default 16)\n"
        "      --prompt-max B     longest prompt (default 128)\n"
        "      --new M            new tokens per request (default 32)\n"
        "      --seed S           prompt generator seed (default 1)\n"
        "      --poll             spin on the event rings instead of sleeping on the\n"
        "                         doorbells (takes a core; the floor's last hop spins too)\n"
        "      --json             print the results as JSON\n"
        "      --socket PATH\n"
        "  -h, --help\n");
}

#define MAX_CLIENTS 64

int ctl_bench(int argc, char **argv)
{
    enum { O_CLIENTS = 1, O_PMIN, O_PMAX, O_NEW, O_SEED, O_JSON, O_SOCKET, O_POLL };
    static const struct option lo[] = {
        {"requests", required_argument, 0, 'n'}, {"concurrency", required_argument, 0, 'c'},
        {"clients", required_argument, 0, O_CLIENTS}, {"prompt-min", required_argument, 0, O_PMIN},
        {"prompt-max", required_argument, 0, O_PMAX}, {"new", required_argument, 0, O_NEW},
        {"seed", required_argument, 0, O_SEED}, {"json", no_argument, 0, O_JSON},
        {"socket", required_argument, 0, O_SOCKET}, {"poll", no_argument, 0, O_POLL},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    unsigned long n_req = 64, conc = 8, n_cli = 1, pmin = 16, pmax = 128, n_new = 32, seed = 1;
    bool json = false, spin = false;
    const char *sock = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "n:c:h", lo, NULL)) != -1) {
        unsigned long *dst = NULL;
        switch (opt) {
        case 'n': dst = &n_req; break;
        case 'c': dst = &conc; break;
        case O_CLIENTS: dst = &n_cli; break;
        case O_PMIN: dst = &pmin; break;
        case O_PMAX: dst = &pmax; break;
        case O_NEW: dst = &n_new; break;
        case O_SEED: dst = &seed; break;
        case O_JSON: json = true; break;
        case O_POLL: spin = true; break;
        case O_SOCKET: sock = optarg; break;
        case 'h': bench_usage(stdout); return CTL_OK;
        default: return ctl_usage_error(NULL);
        }
        if (dst) {
            char *end;
            errno = 0;
            *dst = strtoul(optarg, &end, 10);
            if (errno || *end || !*optarg || *optarg == '-') {
                fprintf(stderr, "llama8ctl: bad number: %s\n", optarg);
                return CTL_USAGE;
            }
        }
    }
    if (!n_req || !conc || !n_cli || n_cli > MAX_CLIENTS || !pmin || pmin > pmax || !n_new) {
        fprintf(stderr, "llama8ctl: need requests, concurrency, new >= 1, 1 <= clients <= %d, "
                        "1 <= prompt-min <= prompt-max\n", MAX_CLIENTS);
        return CTL_USAGE;
    }
    struct l8c_client *cl[MAX_CLIENTS] = {0};
    struct breq *rq = calloc(n_req, sizeof(*rq));
    uint32_t *prompt = malloc(pmax * sizeof(uint32_t));
    struct lat ttft = {0}, start = {0}, deliver = {0}, itl = {0}, tpot = {0}, floor = {0};
    int rc = CTL_FAIL;
    if (!rq || !prompt)
        goto out;
    for (unsigned long i = 0; i < n_cli; i++)
        if ((rc = ctl_connect(sock, "llama8ctl bench", &cl[i])) != CTL_OK)
            goto out;
    rc = CTL_FAIL;
    const struct l8c_info *in = l8c_info(cl[0]);
    if (pmax + n_new > in->context_length) {
        fprintf(stderr, "llama8ctl: prompt-max + new exceeds the context (%u)\n", in->context_length);
        rc = CTL_USAGE;
        goto out;
    }
    unsigned long per_client_cap = in->max_requests;
    if (conc > per_client_cap * n_cli)
        conc = per_client_cap * n_cli;
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = (uint32_t)n_new;
    p.ignore_eos = true;
    uint64_t rs = seed;
    unsigned long next = 0, done = 0, inflight = 0, inflight_c[MAX_CLIENTS] = {0};
    struct l8c_status st0, st1;
    if (l8c_status(cl[0], &st0, 10000) < 0) {
        fprintf(stderr, "llama8ctl: status: %s\n", l8c_last_error(cl[0], NULL));
        goto out;
    }
    uint64_t total_tokens = 0, t0 = l8c_now_ns(), t_event = t0;
    struct l8_event ev[256];
    while (done < n_req) {
        /* Keep conc requests in flight, round-robin over the clients. */
        while (next < n_req && inflight < conc) {
            int ci = (int)(next % n_cli);
            if (inflight_c[ci] >= per_client_cap)
                break;
            uint32_t len = (uint32_t)(pmin + rng_next(&rs) % (pmax - pmin + 1));
            for (uint32_t k = 0; k < len; k++)
                prompt[k] = (uint32_t)(rng_next(&rs) % in->vocab_size);
            if (in->bos_id >= 0)
                prompt[0] = (uint32_t)in->bos_id;
            rq[next].client = ci;
            rq[next].t_submit = l8c_now_ns();
            int s = l8c_submit(cl[ci], prompt, len, &p, &rq[next].id);
            if (s == -EAGAIN)
                break;
            if (s < 0) {
                fprintf(stderr, "llama8ctl: submit: %s\n", strerror(-s));
                goto out;
            }
            next++;
            inflight++;
            inflight_c[ci]++;
        }
        /* Wait on every client's doorbell at once, or spin on the rings. */
        struct pollfd pf[2 * MAX_CLIENTS];
        bool ready = spin;
        for (unsigned long i = 0; !spin && i < n_cli; i++) {
            if (l8c_prepare_wait(cl[i]))
                ready = true;
            pf[2 * i] = (struct pollfd){ l8c_event_fd(cl[i]), POLLIN, 0 };
            pf[2 * i + 1] = (struct pollfd){ l8c_ctl_fd(cl[i]), POLLIN, 0 };
        }
        if ((!ready && poll(pf, (nfds_t)(2 * n_cli), 60000) == 0) ||
            (spin && l8c_now_ns() - t_event > 60000000000ull)) {
            fprintf(stderr, "llama8ctl: no events for 60 s\n");
            goto out;
        }
        for (unsigned long i = 0; i < n_cli; i++) {
            int k = l8c_poll_events(cl[i], ev, 256);
            if (k < 0) {
                fprintf(stderr, "llama8ctl: %s\n", l8c_last_error(cl[i], NULL));
                goto out;
            }
            uint64_t now = l8c_now_ns();
            if (k > 0)
                t_event = now;
            for (int j = 0; j < k; j++) {
                const struct l8_event *e = &ev[j];
                /* Ids are per client, allocated 1, 2, ... in submission order. */
                struct breq *r = NULL;
                for (unsigned long q = 0; q < next; q++)
                    if (rq[q].client == (int)i && rq[q].id == e->request_id && !rq[q].done) {
                        r = &rq[q];
                        break;
                    }
                if (!r)
                    continue;
                switch (e->kind) {
                case L8_EV_STARTED:
                    lat_add(&start, e->t_ns - r->t_submit);
                    break;
                case L8_EV_TOKEN:
                    if (!r->tokens) {
                        r->ts_first = e->t_ns;
                        lat_add(&ttft, now - r->t_submit);
                    } else {
                        lat_add(&itl, e->t_ns - r->ts_last);
                    }
                    r->ts_last = e->t_ns;
                    r->tokens++;
                    total_tokens++;
                    lat_add(&deliver, now - e->t_ns);
                    break;
                case L8_EV_DONE:
                case L8_EV_ERROR:
                    if (e->kind == L8_EV_ERROR) {
                        char msg[L8C_ERRLEN];
                        fprintf(stderr, "llama8ctl: request failed: %s: %s\n",
                                l8c_err_name(e->code), l8c_error_text(e, msg));
                        goto out;
                    }
                    if (r->tokens > 1)
                        lat_add(&tpot, (r->ts_last - r->ts_first) / (r->tokens - 1));
                    r->done = true;
                    done++;
                    inflight--;
                    inflight_c[i]--;
                    break;
                }
            }
        }
    }
    double wall = (double)(l8c_now_ns() - t0) / 1e9;
    if (l8c_status(cl[0], &st1, 10000) < 0) {
        fprintf(stderr, "llama8ctl: status: %s\n", l8c_last_error(cl[0], NULL));
        goto out;
    }
    const uint64_t steps = st1.steps - st0.steps, gaps = st1.gap_steps - st0.gap_steps;
    const double step_ms = steps ? (st1.step_time_s - st0.step_time_s) * 1e3 / (double)steps : 0;
    const double busy = wall > 0 ? (st1.step_time_s - st0.step_time_s) / wall : 0;
    const double gap_us = gaps ? (st1.gap_time_s - st0.gap_time_s) * 1e6 / (double)gaps : 0;
    /* The steps split: decode-only ones (their batch and time are the
     * decode rate) and the ones with prompt tokens (what admitting costs). */
    const uint64_t dsteps = st1.decode_steps - st0.decode_steps, psteps = steps - dsteps;
    const double dtime = st1.decode_time_s - st0.decode_time_s;
    const double ptime = st1.step_time_s - st0.step_time_s - dtime;
    const double dbatch = dsteps ? (double)(st1.decode_rows - st0.decode_rows) / (double)dsteps : 0;
    const double dms = dsteps ? dtime * 1e3 / (double)dsteps : 0;
    const double ptok = psteps ? (double)((st1.fed_tokens - st0.fed_tokens) -
                                          (st1.decode_rows - st0.decode_rows)) / (double)psteps : 0;
    const double pms = psteps ? ptime * 1e3 / (double)psteps : 0;
    const double dfrac = dtime + ptime > 0 ? dtime / (dtime + ptime) : 0;
    const uint64_t preempt = st1.preemptions - st0.preemptions;
    double tps = (double)total_tokens / wall;
    double t50 = pct_us(&ttft, 50), t99 = pct_us(&ttft, 99);
    double s50 = pct_us(&start, 50), s99 = pct_us(&start, 99);
    double d50 = pct_us(&deliver, 50), d99 = pct_us(&deliver, 99);
    double i50 = pct_us(&itl, 50), i99 = pct_us(&itl, 99);
    double o50 = pct_us(&tpot, 50), o99 = pct_us(&tpot, 99);
    /* The floor's hops are the token's: engine thread -> loop (a spin when
     * the daemon spins), loop -> this client (a spin with --poll). */
    const bool hop_spin[2] = { st0.spin_us > 0, spin };
    const bool have_floor = wake_floor(&floor, (uint64_t)(i50 * 1000), hop_spin) == 0;
    static const char *const floor_what[2][2] = {
        { "two eventfd hops between threads", "one eventfd hop, then a spinning thread" },
        { "a spinning thread, then one eventfd hop", "two threads spinning in turn, no wake-up" },
    };
    double f50 = have_floor ? pct_us(&floor, 50) : 0, f99 = have_floor ? pct_us(&floor, 99) : 0;
    if (json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "requests", json_object_new_int64((int64_t)n_req));
        json_object_object_add(o, "concurrency", json_object_new_int64((int64_t)conc));
        json_object_object_add(o, "clients", json_object_new_int64((int64_t)n_cli));
        json_object_object_add(o, "poll", json_object_new_boolean(spin));
        json_object_object_add(o, "daemon_spin_us", json_object_new_int64(st0.spin_us));
        json_object_object_add(o, "new_tokens", json_object_new_int64((int64_t)n_new));
        json_object_object_add(o, "tokens", json_object_new_uint64(total_tokens));
        json_object_object_add(o, "wall_s", json_object_new_double(wall));
        json_object_object_add(o, "tokens_per_s", json_object_new_double(tps));
        json_object_object_add(o, "ttft_p50_us", json_object_new_double(t50));
        json_object_object_add(o, "ttft_p99_us", json_object_new_double(t99));
        json_object_object_add(o, "submit_to_start_p50_us", json_object_new_double(s50));
        json_object_object_add(o, "submit_to_start_p99_us", json_object_new_double(s99));
        json_object_object_add(o, "delivery_p50_us", json_object_new_double(d50));
        json_object_object_add(o, "delivery_p99_us", json_object_new_double(d99));
        if (have_floor) {
            json_object_object_add(o, "wake_floor_p50_us", json_object_new_double(f50));
            json_object_object_add(o, "wake_floor_p99_us", json_object_new_double(f99));
        }
        json_object_object_add(o, "itl_p50_us", json_object_new_double(i50));
        json_object_object_add(o, "itl_p99_us", json_object_new_double(i99));
        json_object_object_add(o, "tpot_p50_us", json_object_new_double(o50));
        json_object_object_add(o, "tpot_p99_us", json_object_new_double(o99));
        json_object_object_add(o, "engine_steps", json_object_new_uint64(steps));
        json_object_object_add(o, "engine_step_ms_mean", json_object_new_double(step_ms));
        json_object_object_add(o, "engine_busy_frac", json_object_new_double(busy));
        json_object_object_add(o, "engine_gap_us_mean", json_object_new_double(gap_us));
        json_object_object_add(o, "engine_decode_steps", json_object_new_uint64(dsteps));
        json_object_object_add(o, "engine_decode_batch_mean", json_object_new_double(dbatch));
        json_object_object_add(o, "engine_decode_step_ms_mean", json_object_new_double(dms));
        json_object_object_add(o, "engine_decode_time_frac", json_object_new_double(dfrac));
        json_object_object_add(o, "engine_prompt_steps", json_object_new_uint64(psteps));
        json_object_object_add(o, "engine_prompt_step_tokens_mean", json_object_new_double(ptok));
        json_object_object_add(o, "engine_prompt_step_ms_mean", json_object_new_double(pms));
        json_object_object_add(o, "engine_preemptions", json_object_new_uint64(preempt));
        puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        json_object_put(o);
    } else {
        printf("%lu requests, %lu in flight over %lu client(s), prompts %lu-%lu, %lu new tokens\n",
               n_req, conc, n_cli, pmin, pmax, n_new);
        printf("tokens/s:                %.1f (%llu tokens in %.2f s)\n", tps,
               (unsigned long long)total_tokens, wall);
        printf("time to first token:     p50 %9.1f us  p99 %9.1f us\n", t50, t99);
        printf("submit -> prefill start: p50 %9.1f us  p99 %9.1f us\n", s50, s99);
        printf("token delivery:          p50 %9.1f us  p99 %9.1f us (daemon timestamp -> client)\n",
               d50, d99);
        if (have_floor)
            printf("wake-up floor:           p50 %9.1f us  p99 %9.1f us (%s; delivery p50 %.1fx)\n",
                   f50, f99, floor_what[hop_spin[0]][hop_spin[1]],
                   f50 > 0 ? d50 / f50 : 0);
        else
            printf("wake-up floor:           not measured (no thread or eventfd)\n");
        printf("inter-token latency:     p50 %9.1f us  p99 %9.1f us (daemon timestamps)\n", i50,
               i99);
        printf("time per output token:   p50 %9.1f us  p99 %9.1f us (each request's mean)\n", o50,
               o99);
        printf("engine:                  %llu steps, %.3f ms each, busy %.1f %% of the run; "
               "%.1f us between steps with requests left\n", (unsigned long long)steps, step_ms,
               100 * busy, gap_us);
        printf("  decode-only steps:     %llu, batch %.1f, %.3f ms each (%.1f %% of engine time)\n",
               (unsigned long long)dsteps, dbatch, dms, 100 * dfrac);
        printf("  steps with prompts:    %llu, %.1f tokens, %.3f ms each; %llu preemptions\n",
               (unsigned long long)psteps, ptok, pms, (unsigned long long)preempt);
    }
    rc = CTL_OK;
out:
    for (unsigned long i = 0; i < n_cli; i++)
        l8c_close(cl[i]);
    free(rq);
    free(prompt);
    free(ttft.v);
    free(start.v);
    free(deliver.v);
    free(itl.v);
    free(tpot.v);
    free(floor.v);
    return rc;
}
