/* llama8d.c - the daemon's start-up and shut-down: configuration, model,
 * engine, scheduler, the listening socket (our own or systemd's), the
 * warm-up, then the event loop (loop.c). What a reload applies again lives
 * in reload.c. */
#include "daemon.h"

#include <errno.h>
#include <grp.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "constraint.h"
#include "l8_build.h"
#include "log.h"
#include "model.h"

#define LISTEN_BACKLOG 256
#define URING_ENTRIES 1024

/* Our own socket: refuse to steal a live daemon's path, replace a stale one. */
static int make_listen_socket(struct l8d *d)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    const char *path = d->conf.socket;
    if (strlen(path) >= sizeof(sa.sun_path)) {
        log_err("socket path too long: %s", path);
        return -ENAMETOOLONG;
    }
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (lstat(path, &st) == 0) {
        if (!S_ISSOCK(st.st_mode)) {
            log_err("%s exists and is not a socket", path);
            close(fd);
            return -EEXIST;
        }
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            log_err("%s: another daemon is listening there", path);
            close(fd);
            return -EADDRINUSE;
        }
        close(fd);
        unlink(path);
        fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
        if (fd < 0)
            return -errno;
    }
    /* Create it with no access, then open it up: no window in which
     * anybody could connect before the mode and group are right. */
    mode_t old = umask(0777);
    int rc = bind(fd, (struct sockaddr *)&sa, sizeof(sa));
    umask(old);
    if (rc < 0) {
        rc = -errno;
        log_err("bind %s: %s", path, strerror(-rc));
        close(fd);
        return rc;
    }
    if (d->have_group && geteuid() == 0 && chown(path, (uid_t)-1, d->allowed_gid) < 0)
        log_warn("chown %s to group %s: %s", path, d->conf.allowed_group, strerror(errno));
    if (chmod(path, d->conf.socket_mode & 07777) < 0)
        log_warn("chmod %s: %s", path, strerror(errno));
    if (listen(fd, LISTEN_BACKLOG) < 0) {
        rc = -errno;
        close(fd);
        unlink(path);
        return rc;
    }
    d->listen_fd = fd;
    return 0;
}

static int get_listen_socket(struct l8d *d)
{
    int n = sd_listen_fds(1);
    if (n < 0) {
        log_err("sd_listen_fds: %s", strerror(-n));
        return n;
    }
    if (n > 1) {
        log_err("systemd passed %d sockets; expected one", n);
        return -EINVAL;
    }
    if (n == 1) {
        int fd = SD_LISTEN_FDS_START;
        if (sd_is_socket_unix(fd, SOCK_SEQPACKET, 1, NULL, 0) <= 0) {
            log_err("the socket systemd passed is not a listening AF_UNIX SOCK_SEQPACKET socket");
            return -EINVAL;
        }
        d->listen_fd = fd;
        d->socket_activated = true;
        log_info("listening on the socket passed by systemd");
        return 0;
    }
    int rc = make_listen_socket(d);
    if (rc == 0)
        log_info("listening on %s", d->conf.socket);
    return rc;
}

/* One step before READY of a prompt of n tokens (BOS) at position 0: one
 * token proves the engine runs; a full step on the cuda backend also loads
 * the prefill kernels (lazily loaded modules) and meets cuBLASLt at the
 * step's rows, and shows now, not at the first long prompt, whether the
 * largest step fits. */
/* Constrained decoding: the token bytes of the model's tokenizer. Without
 * a usable tokenizer the daemon serves all the same and refuses each
 * constraint with the reason (logged once here). */
static int start_constraints(struct l8d *d)
{
    char path[sizeof d->conf.tokenizer + 32];
    if (d->conf.tokenizer[0])
        snprintf(path, sizeof path, "%s", d->conf.tokenizer);
    else
        snprintf(path, sizeof path, "%s/tokenizer.json", d->model_dir);
    /* The tokenizer's table cache beside the tune file, under systemd's
     * CacheDirectory= (the service has no home to keep it in). */
    const char *cache = getenv("CACHE_DIRECTORY");
    if (cache && *cache && !getenv("LLAMA8_TOKENIZER_CACHE")) {
        char dir[4096];
        snprintf(dir, sizeof dir, "%.*s", (int)strcspn(cache, ":"), cache);
        setenv("LLAMA8_TOKENIZER_CACHE", dir, 0);
    }
    const char *why = NULL;
    uint64_t t0 = l8_now_ns();
    int rc = l8d_constraints_new(path, d->vocab, d->eos, d->n_eos, d->conf.grammar_cache,
                                 &d->constraints, &why);
    if (rc < 0) {
        log_err("constrained decoding: %s", strerror(-rc));
        return rc;
    }
    l8d_constraints_attach(d->constraints, d->sched);
    struct stat st;
    if (why && !d->conf.tokenizer[0] && stat(path, &st) < 0 && errno == ENOENT)
        /* Served all the same, but a client finds the tokenizer where
         * the Welcome's model_dir says: say at the start what will fail. */
        log_warn("%s has no tokenizer.json: clients find none there (llama8ctl's text prompts "
                 "need --tokenizer FILE or $LLAMA8_TOKENIZER; --ids works) and constrained "
                 "decoding (grammars, JSON schemas, required tool calls) is refused; put the "
                 "model's tokenizer.json in the directory, or name one with tokenizer = PATH",
                 d->model_dir);
    else if (why)
        log_warn("%s", why);
    else
        log_info("constrained decoding: the token bytes of %s (%.1f ms)", path,
                 (double)(l8_now_ns() - t0) / 1e6);
    return 0;
}

static int warm_up(struct l8d *d, uint32_t n)
{
    const uint32_t ps = l8_engine_page_size(d->engine), np = (n + ps - 1) / ps;
    float *logits = malloc((size_t)d->vocab * sizeof(float));
    uint32_t *tok = malloc((size_t)n * sizeof *tok), *page = malloc((size_t)np * sizeof *page);
    int rc = -ENOMEM;
    if (!logits || !tok || !page)
        goto out;
    const uint32_t bos = d->bos >= 0 && (uint32_t)d->bos < d->vocab ? (uint32_t)d->bos : 0;
    for (uint32_t i = 0; i < n; i++)
        tok[i] = bos;
    for (uint32_t i = 0; i < np; i++)
        page[i] = i;
    struct l8_sampling greedy = { .temperature = 0, .top_p = 1, .repetition_penalty = 1 };
    struct l8_seq seq = { .tokens = tok, .n_tokens = n, .pos = 0, .pages = page, .n_pages = np,
                          .logits = L8_LOGITS_LAST, .logits_out = logits, .sample = true,
                          .sampling = &greedy };
    rc = l8_engine_step(d->engine, &seq, 1);
out:
    free(logits);
    free(tok);
    free(page);
    return rc;
}

/* The cuda engine captures the decode graph of a batch bucket (powers of
 * two, up to the batch limit) on the bucket's second use: use every bucket
 * twice now, so that the first requests do not wait for the captures. Each
 * sequence decodes one token at position 0 on a page of its own. */
static int warm_decode_graphs(struct l8d *d)
{
    const uint32_t n = d->conf.max_batch, pages = l8_engine_n_pages(d->engine);
    struct l8_seq *seq = calloc(n, sizeof *seq);
    uint32_t *page = calloc(n, sizeof *page), tok = 0;
    struct l8_sampling greedy = { .temperature = 0, .top_p = 1, .repetition_penalty = 1 };
    int rc = 0;
    if (!seq || !page) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < n; i++) {
        page[i] = i % pages;
        seq[i] = (struct l8_seq){ .tokens = &tok, .n_tokens = 1, .pages = &page[i],
                                  .n_pages = 1, .sample = true, .sampling = &greedy };
    }
    for (uint32_t b = 1;; b = 2 * b < n ? 2 * b : n) {
        for (int use = 0; use < 2; use++)
            if ((rc = l8_engine_step(d->engine, seq, b)) < 0)
                goto out;
        if (b == n)
            break;
    }
out:
    free(seq);
    free(page);
    return rc;
}

/* speculate = auto: on where a step that verifies drafts costs little more
 * than a plain one, which is where the engine is bound by reading its
 * weights (the GPU); measured here with 4 drafts (at least two runs each,
 * the fastest), it pays when it costs at most twice a one-token step (then
 * half the drafts accepted break even), and is left off otherwise (on the
 * 2-core CPU here a 3-row step costs 2.2 one-row steps: prompt lookup pays
 * only where nearly every draft is kept, and a user who expects that sets
 * speculate = ngram). */
#define SPEC_MEASURE_DRAFTS 4u
static int measure_speculation(struct l8d *d)
{
    if (d->conf.speculate != L8D_SPECULATE_AUTO)
        return 0;
    const uint32_t K = SPEC_MEASURE_DRAFTS, ps = l8_engine_page_size(d->engine);
    uint32_t tok[SPEC_MEASURE_DRAFTS + 1] = { 0 }, page[2] = { 0, 1 };
    struct l8_sample_out out[SPEC_MEASURE_DRAFTS + 1];
    struct l8_sampling greedy = { .temperature = 0, .top_p = 1, .repetition_penalty = 1 };
    if (l8_engine_n_pages(d->engine) < 2 || K + 1 > ps * 2)
        return 0;
    uint64_t best[2] = { UINT64_MAX, UINT64_MAX };
    for (int run = 0; run < 3; run++)
        for (int v = 0; v < 2; v++) {
            struct l8_seq q = { .tokens = tok, .n_tokens = v ? K + 1 : 1, .pos = 1,
                                .pages = page, .n_pages = 2, .sample = true,
                                .sampling = &greedy, .history = tok, .n_history = v ? K + 1 : 1,
                                .n_draft = v ? K : 0, .verify_out = v ? out : NULL };
            uint64_t t0 = l8_now_ns();
            int rc = l8_engine_step(d->engine, &q, 1);
            if (rc < 0)
                return rc;
            uint64_t t = l8_now_ns() - t0;
            best[v] = t < best[v] ? t : best[v];
        }
    const double ratio = (double)best[1] / (double)best[0];
    d->speculate = ratio <= 2.0;
    log_info("speculative decoding: %s (speculate = auto: a step verifying %u drafts takes "
             "%.2f ms, %.2fx a one-token step's %.2f ms)", d->speculate ? "ngram" : "off", K,
             (double)best[1] / 1e6, ratio, (double)best[0] / 1e6);
    return 0;
}

/* The soft limit is often 1024, too few for max_clients 256 and the rest:
 * raise it to the hard limit (nothing here uses select()). */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
        return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);   /* if refused, l8d_check_nofile says what there is */
}

static int setup(struct l8d *d, int argc, char **argv)
{
    char err[L8D_ERRLEN] = "", lerr[L8_ERRLEN] = "";
    struct l8d_sizes sz;
    int rc = l8d_conf_from_args(&d->conf, argc, argv, err);
    /* What the model does not change, refused before anything starts (the
     * model's context is checked again once it is read). */
    if (rc == 0 && l8d_conf_derive(&d->conf, 0, &sz, err) < 0)
        rc = -EINVAL;
    if (rc != 0) {
        if (rc < 0)
            fprintf(stderr, "llama8d: %s\n", err);
        return rc;
    }
    d->argc = argc;
    d->argv = argv;
    l8_log_init(d->conf.log_level);
    d->listen_fd = d->signal_fd = d->et_fd = d->spare_fd = -1;
    d->start_ns = l8_now_ns();
    raise_nofile();
    l8d_check_nofile(d);
    if ((d->spare_fd = eventfd(0, EFD_CLOEXEC)) < 0)
        return -errno;

    /* Signals: handled through signalfd on the loop; blocked before any
     * thread exists so every thread inherits the mask. */
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigaddset(&mask, SIGHUP);
    pthread_sigmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    d->signal_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->signal_fd < 0)
        return -errno;

    if (d->conf.allowed_group[0]) {
        struct group gr, *pgr = NULL;
        char buf[8192];
        if (getgrnam_r(d->conf.allowed_group, &gr, buf, sizeof(buf), &pgr) == 0 && pgr) {
            d->allowed_gid = pgr->gr_gid;
            d->have_group = true;
        } else {
            if (geteuid() == 0)
                log_notice("group '%s' does not exist: only root may connect",
                           d->conf.allowed_group);
            else
                log_notice("group '%s' does not exist: only root and uid %u may connect",
                           d->conf.allowed_group, (unsigned)geteuid());
        }
    }

    if (!realpath(d->conf.model, d->model_dir)) {
        log_err("model directory %s: %s", d->conf.model, strerror(errno));
        return -errno;
    }
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s", d->model_dir);
    snprintf(d->model_name, sizeof(d->model_name), "%s", basename(tmp));

    /* Bound before the load: a client connecting meanwhile waits in the
     * lobby (hearing how far the load is), and a second daemon on this
     * path is refused now, not after a load of its own. */
    atomic_store(&d->load_stage, "reading the checkpoint");
    if ((rc = get_listen_socket(d)) < 0)
        return rc;
    if ((rc = l8d_lobby_start(d)) < 0) {
        log_err("accepting connections during the load: %s", strerror(-rc));
        return rc;
    }
    sd_notifyf(0, "STATUS=loading %s\nEXTEND_TIMEOUT_USEC=%llu", d->model_dir, 600000000ull);
    log_info("loading %s", d->model_dir);
    uint64_t t0 = l8_now_ns();
    if ((rc = l8_model_load(d->model_dir, d->conf.threads, &d->model, lerr)) < 0) {
        log_err("loading the model: %s", lerr);
        sd_notifyf(0, "STATUS=failed to load %s: %s", d->model_dir, lerr);
        snprintf(d->start_error, sizeof d->start_error, "loading the model: %s", lerr);
        return rc;
    }
    const struct l8_config *cfg = &d->model->cfg;
    if ((rc = l8d_conf_derive(&d->conf, cfg->max_pos, &sz, err)) < 0) {
        log_err("%s", err);
        sd_notifyf(0, "STATUS=%s", err);
        snprintf(d->start_error, sizeof d->start_error, "%s", err);
        return rc;
    }
    if (cfg->rope_theta_absent)
        log_notice("%s/config.json has no \"rope_theta\": using %g, the default of Hugging Face's "
                   "LlamaConfig (Llama 3.1's is 500000)", d->model_dir, (double)cfg->rope_theta);
    log_info("model %s: %u layers, hidden %u, vocab %u, %.1f MiB of weights in %.2f s",
             d->model_name, cfg->n_layers, cfg->hidden, cfg->vocab,
             (double)d->model->weight_bytes / (1 << 20), (double)(l8_now_ns() - t0) / 1e9);

    sd_notify(0, "STATUS=creating the engine");
    atomic_store(&d->load_stage, "placing the weights");
    struct l8_engine_opts eo = {
        .numerics = d->conf.numerics, .page_size = d->conf.page_size,
        .n_pages = d->conf.kv_pages, .kv_bytes = d->conf.kv_mib << 20,
        .max_step_tokens = d->conf.max_step_tokens, .max_seqs = d->conf.max_batch,
        .nthreads = d->conf.threads,
        .tune_file = d->conf.tune_file[0] ? d->conf.tune_file : NULL,
        .gemv_fixed = d->conf.gemv_max_m != L8D_AUTO, .gemv_max_m = d->conf.gemv_max_m,
        .no_graphs = !d->conf.cuda_graphs, .no_pdl = !d->conf.cuda_pdl,
        .profile_file = d->conf.profile_file[0] ? d->conf.profile_file : NULL,
        .lm_head_fp8 = d->conf.lm_head_fp8,
        .progress = &d->load_progress,
        .log = l8_log_lines,
    };
    d->backend = d->conf.backend;
    if (d->conf.backend == L8_BACKEND_AUTO) {
        d->backend = L8_BACKEND_CUDA;
        if (d->conf.numerics == L8_NUMERICS_AUTO)
            eo.numerics = L8_NUMERICS_FP8;
        struct l8_engine_opts co = eo;
        co.lm_head_fp8 = false;     /* a cpu engine option: the gpu keeps its own */
        if (!L8_HAVE_CUDA || l8_engine_create(d->model, L8_BACKEND_CUDA, &co, &d->engine, lerr) < 0) {
            if (L8_HAVE_CUDA)
                log_notice("cuda engine unavailable (%s): using cpu", lerr);
            d->backend = L8_BACKEND_CPU;
            atomic_store(&d->load_progress.done, 0);
        }
    }
    if (!d->engine && d->conf.numerics == L8_NUMERICS_AUTO)
        eo.numerics = d->backend == L8_BACKEND_CUDA ? L8_NUMERICS_FP8 : L8_NUMERICS_EXACT;
    if (!d->engine &&
        (rc = l8_engine_create(d->model, d->backend, &eo, &d->engine, lerr)) < 0) {
        log_err("creating the %s engine: %s", l8_backend_name(d->backend), lerr);
        snprintf(d->start_error, sizeof d->start_error, "creating the %s engine: %s",
                 l8_backend_name(d->backend), lerr);
        return rc;
    }

    d->numerics = eo.numerics;
    d->vocab = cfg->vocab;
    d->max_ctx = sz.max_ctx;
    d->max_prompt = sz.max_prompt;
    d->max_new = sz.max_new;
    d->bos = cfg->bos;
    d->n_eos = 0;
    for (uint32_t i = 0; i < cfg->n_eos && i < L8_MAX_EOS; i++)
        if (cfg->eos[i] >= 0 && (uint32_t)cfg->eos[i] < cfg->vocab)
            d->eos[d->n_eos++] = (uint32_t)cfg->eos[i];
    d->max_stop_ids = L8_SCHED_MAX_STOP - d->n_eos;
    d->sq_entries = sz.sq_entries;
    d->eq_entries = sz.eq_entries;
    d->arena_size = sz.arena_size;
    d->prompt_buf = malloc((size_t)d->max_prompt * 4);
    d->msg_buf = malloc(L8_MAX_REQ_MSG);
    d->constraint_buf = malloc(L8_MAX_CONSTRAINT);
    if (!d->prompt_buf || !d->msg_buf || !d->constraint_buf)
        return -ENOMEM;

    d->speculate = d->conf.speculate == L8D_SPECULATE_NGRAM;   /* auto: measured below */
    if (!d->conf.no_warmup) {
        sd_notify(0, "STATUS=warming up");
        atomic_store(&d->load_stage, "warming up");
        uint64_t tw = l8_now_ns();
        if ((rc = warm_up(d, 1)) < 0) {
            log_err("warm-up step failed: %s", l8_engine_strerror(rc));
            return rc;
        }
        /* One token: the first per-token figure of the stall bound (loop.c).
         * A one-token step costs the most per token (the weights are read
         * for one token), so the bound of a big prefill chunk errs long. */
        d->step_tok_ns = l8_now_ns() - tw;
        log_info("warm-up step: %.1f ms", (double)d->step_tok_ns / 1e6);
        if (d->backend == L8_BACKEND_CUDA) {
            tw = l8_now_ns();
            if ((rc = warm_decode_graphs(d)) < 0) {
                log_err("warming the decode graphs failed: %s", strerror(-rc));
                return rc;
            }
            log_info("decode graphs for batches up to %u: %.1f ms", d->conf.max_batch,
                     (double)(l8_now_ns() - tw) / 1e6);
            uint32_t n = d->conf.max_step_tokens;
            const uint64_t pool = (uint64_t)l8_engine_n_pages(d->engine) *
                                  l8_engine_page_size(d->engine);
            if (n > d->max_ctx)
                n = d->max_ctx;
            if (n > pool)
                n = (uint32_t)pool;
            tw = l8_now_ns();
            if ((rc = warm_up(d, n)) < 0) {
                log_err("warm-up prefill of %u tokens failed: %s", n, strerror(-rc));
                return rc;
            }
            log_info("warm-up prefill of %u tokens: %.1f ms", n,
                     (double)(l8_now_ns() - tw) / 1e6);
        }
        if ((rc = measure_speculation(d)) < 0) {
            log_err("measuring a verification step failed: %s", strerror(-rc));
            return rc;
        }
    }
    if (d->conf.speculate == L8D_SPECULATE_AUTO && d->conf.no_warmup)
        log_info("speculative decoding: off (speculate = auto, and no warm-up to measure "
                 "whether it pays)");
    struct l8_sched_opts so = {
        .n_pages = l8_engine_n_pages(d->engine), .page_size = l8_engine_page_size(d->engine),
        .max_step_tokens = d->conf.max_step_tokens, .max_seqs = d->conf.max_batch,
        .max_ctx = d->max_ctx, .vocab = d->vocab, .max_requests = d->conf.max_requests,
        .max_requests_per_uid = d->conf.max_requests_per_uid,
        .on_event = l8d_session_on_sched_event, .held = l8d_req_held,
        .free_constraint = l8d_constraint_free, .ctx = d,
        .no_prefix_cache = d->conf.prefix_cache == L8D_PREFIX_CACHE_OFF,
        .draft_max = d->speculate ? d->conf.draft_max : 0,
        .verify_rows = l8_engine_verify_rows(d->engine),
    };
    if ((rc = l8_sched_new(&so, &d->sched)) < 0) {
        log_err("creating the scheduler: %s", strerror(-rc));
        return rc;
    }
    atomic_store(&d->load_stage, "reading the tokenizer");
    if ((rc = start_constraints(d)) < 0)
        return rc;
    log_info("KV pool: %u pages of %u positions; context %u, batch %u, step budget %u tokens; "
             "prefix cache: %s", so.n_pages, so.page_size, d->max_ctx, so.max_seqs,
             so.max_step_tokens, l8d_prefix_cache_name(d->conf.prefix_cache));
    if (so.draft_max)
        log_info("speculative decoding: ngram, up to %u drafts a request, at most %u in a step",
                 so.draft_max, so.verify_rows < so.max_step_tokens / 4 ? so.verify_rows
                                                                     : so.max_step_tokens / 4);

    l8d_resolve_spin(d);
    if (d->spin_ns)
        log_info("the loop and the engine thread spin up to %u us for each other",
                 (unsigned)(d->spin_ns / 1000));
    if ((rc = l8d_et_start(d->engine, d->spin_ns, &d->et)) < 0)
        return rc;
    if ((rc = l8d_et_set_hooks(d->et, l8d_constraints_masks, l8d_constraints_after,
                               d->constraints)) < 0) {
        log_err("the constrained-decoding masks' thread: %s", strerror(-rc));
        return rc;
    }
    d->et_fd = l8d_et_done_fd(d->et);

    if ((rc = l8d_grow_slots(d, l8d_connections(d))) < 0)
        return rc;
    if ((rc = io_uring_queue_init(URING_ENTRIES, &d->ring, 0)) < 0) {
        log_err("io_uring: %s", strerror(-rc));
        return rc;
    }
    l8d_lobby_stop(d, NULL);
    if (sd_watchdog_enabled(0, &d->watchdog_usec) <= 0)
        d->watchdog_usec = 0;
    l8d_notify_ready(d);
    log_notice("ready: %s on %s, %s numerics (%.2f s since start)", d->model_name,
               l8_backend_name(d->backend),
               d->numerics == L8_NUMERICS_FP8 ? "fp8" : "exact",
               (double)(l8_now_ns() - d->start_ns) / 1e9);
    return 0;
}

static void teardown(struct l8d *d)
{
    /* The ring first: no op may complete into a freed session. */
    l8d_lobby_stop(d, d->start_error[0] ? d->start_error
                                        : "llama8d failed to start (its log says why)");
    if (d->ring.ring_fd > 0)
        io_uring_queue_exit(&d->ring);
    for (uint32_t i = 0; d->sessions && i < d->n_slots; i++)
        if (d->sessions[i])
            l8d_session_free(d->sessions[i]);
    free(d->sessions);
    free(d->slot_gen);
    free(d->usage);
    if (d->listen_fd >= 0) {
        close(d->listen_fd);
        if (!d->socket_activated)
            unlink(d->conf.socket);
    }
    l8d_et_stop(d->et);
    l8_sched_free(d->sched);    /* frees the requests' constraints first */
    l8d_constraints_free(d->constraints);
    l8_engine_destroy(d->engine);
    l8_model_free(d->model);
    if (d->signal_fd >= 0)
        close(d->signal_fd);
    if (d->spare_fd >= 0)
        close(d->spare_fd);
    free(d->prompt_buf);
    free(d->msg_buf);
    free(d->constraint_buf);
}

int main(int argc, char **argv)
{
    static struct l8d d;    /* large; one per process */
    int rc = setup(&d, argc, argv);
    if (rc == 1) {
        teardown(&d);
        return 0;
    }
    if (rc < 0) {
        teardown(&d);
        return 1;
    }
    rc = l8d_loop_run(&d);
    sd_notify(0, "STATUS=stopped");
    teardown(&d);
    log_notice("exit %d", rc);
    return rc;
}
