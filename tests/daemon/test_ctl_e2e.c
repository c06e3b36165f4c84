/* test_ctl_e2e: llama8ctl's daemon commands (generate, chat, pipe, status, clients, bench)
 * run as programs against the real llama8d on a synthetic checkpoint with
 * the real Llama 3.1 vocabulary, checked against llama8-run in-process.
 *
 * For every generate case the expected reply is computed independently:
 * the prompt ids from `llama8ctl tokenize` (the chat format, or bos + text
 * with --raw), llama8-run on them with the same sampling flags and the
 * model's stop ids, `llama8ctl detokenize` of the generated ids (minus a
 * final stop id), then this file's own lossy UTF-8 decoder (the rule the
 * streaming decoder documents: one U+FFFD per maximal ill-formed
 * subsequence), because a random model emits token sequences that are not
 * UTF-8.  generate's stdout must equal that plus one newline, byte for byte;
 * --json must list the same ids.
 *
 * argv: llama8d llama8ctl llama8-run llama8-mkmodel tokenizer.json */
#include "ctl_run.h"

#include <inttypes.h>
#include <json-c/json.h>

#define MAX_IDS 4096
#define PAGE 16              /* llama8d's default page size (--page-size) */

static const char *bin_d, *bin_ctl, *bin_run, *bin_mk;
static char model[128];
static struct tdaemon dmn;
static uint32_t eos_ids[8];
static pid_t chat_pid = -1;
static int64_t page_elems;          /* a KV page's elements (config.json) */
static int64_t expect_clients = 1;   /* status's own connection, and a chat's */
static char tmpdir[] = "/tmp/l8ctl-XXXXXX";

/* A failed REQUIRE exits: take the daemon (and a chat client) along, or
 * they would outlive the test holding its stdout and stderr open. */
static void cleanup(void)
{
    if (chat_pid > 0)
        kill(chat_pid, SIGKILL);
    if (dmn.pid > 0) {
        kill(dmn.pid, SIGKILL);
        waitpid(dmn.pid, NULL, 0);
        dmn.pid = -1;
        unlink(dmn.sock);
        unlink(dmn.notify_path);
        rmdir(dmn.dir);
    }
    if (tmpdir[sizeof(tmpdir) - 2] != 'X')
        t_rm_tree(tmpdir);
}

static void on_signal(int sig)
{
    cleanup();
    signal(sig, SIG_DFL);
    raise(sig);
}
static size_t n_eos;

/* ---------------------------------------------------------------- processes */

/* Run and require exit status 0. */
static void run_ok(const char *const *argv, const char *in, size_t in_len, struct buf *out)
{
    struct buf err = {0};
    int rc = run_cmd(argv, in, in_len, out, &err);
    REQUIRE(rc == 0, "%s: exit %d; stderr: %s", argv_str(argv), rc, err.p ? err.p : "");
    free(err.p);
}

/* Start argv as an interactive client (chat, pipe): *in is its stdin, *out
 * its stdout; chat_pid holds it until the caller reaps it. */
static pid_t spawn_interactive(const char *const *argv, int *in, int *out)
{
    int pin[2], pout[2];
    REQUIRE(pipe2(pin, O_CLOEXEC) == 0 && pipe2(pout, O_CLOEXEC) == 0, "pipe");
    pid_t pid = chat_pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(pin[0], 0);
        dup2(pout[1], 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pin[0]);
    close(pout[1]);
    *in = pin[1];
    *out = pout[0];
    return pid;
}

/* ---------------------------------------------------------------- UTF-8, JSON, ids */

/* Lossy UTF-8 decoding (Unicode's "maximal subpart" practice, as WHATWG's
 * decoder, Python's and Rust's do): each maximal ill-formed subsequence
 * becomes one U+FFFD. Written here from the standard's table of well-formed
 * byte sequences, independently of the tokenizer's streaming decoder. */
static void utf8_lossy(const unsigned char *s, size_t n, struct buf *out)
{
    static const char repl[] = "\xef\xbf\xbd";
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            buf_add(out, s + i, 1);
            i++;
            continue;
        }
        size_t need;
        unsigned lo = 0x80, hi = 0xbf;
        if (c >= 0xc2 && c <= 0xdf) need = 1;
        else if (c >= 0xe0 && c <= 0xef) {
            need = 2;
            if (c == 0xe0) lo = 0xa0;
            if (c == 0xed) hi = 0x9f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            need = 3;
            if (c == 0xf0) lo = 0x90;
            if (c == 0xf4) hi = 0x8f;
        } else {
            buf_str(out, repl);
            i++;
            continue;
        }
        size_t k = 1;
        while (k <= need && i + k < n) {
            unsigned b = s[i + k];
            unsigned l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xbf;
            if (b < l || b > h)
                break;
            k++;
        }
        if (k == need + 1) {
            buf_add(out, s + i, k);
        } else {
            buf_str(out, repl);     /* the lead byte and its valid continuations so far */
        }
        i += k;
    }
}

/* What llama8ctl writes is strict JSON in valid UTF-8, one value a line. */
static json_object *parse_json(const char *s, const char *what)
{
    json_tokener *jt = json_tokener_new();
    REQUIRE(jt, "out of memory");
    json_tokener_set_flags(jt, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *o = json_tokener_parse_ex(jt, s, (int)strlen(s) + 1);
    enum json_tokener_error e = json_tokener_get_error(jt);
    json_tokener_free(jt);
    REQUIRE(o, "%s: not JSON (%s): %s", what, json_tokener_error_desc(e), s);
    return o;
}

static json_object *get(json_object *o, const char *key, json_type t, const char *what)
{
    json_object *v = NULL;
    REQUIRE(json_object_object_get_ex(o, key, &v), "%s: no \"%s\" in %s", what, key,
            json_object_to_json_string(o));
    REQUIRE(json_object_is_type(v, t) || (t == json_type_double && json_object_is_type(v, json_type_int)),
            "%s: \"%s\" has the wrong type in %s", what, key, json_object_to_json_string(o));
    return v;
}

static int64_t get_int(json_object *o, const char *key, const char *what)
{
    return json_object_get_int64(get(o, key, json_type_int, what));
}

static double get_num(json_object *o, const char *key, const char *what)
{
    return json_object_get_double(get(o, key, json_type_double, what));
}

struct ids { uint32_t v[MAX_IDS]; size_t n; };

static void ids_from_json_array(json_object *a, struct ids *out, const char *what)
{
    REQUIRE(json_object_is_type(a, json_type_array), "%s: not an array", what);
    size_t n = json_object_array_length(a);
    REQUIRE(n <= MAX_IDS, "%s: too many ids", what);
    for (size_t i = 0; i < n; i++) {
        json_object *x = json_object_array_get_idx(a, i);
        REQUIRE(json_object_is_type(x, json_type_int), "%s: id %zu not an integer", what, i);
        out->v[i] = (uint32_t)json_object_get_int64(x);
    }
    out->n = n;
}

static void ids_str(const struct ids *x, size_t n, char *s, size_t cap)
{
    size_t o = 0;
    s[0] = 0;
    for (size_t i = 0; i < n && o < cap; i++)
        o += (size_t)snprintf(s + o, cap - o, "%s%u", i ? "," : "", x->v[i]);
}

static bool is_eos(uint32_t t)
{
    for (size_t i = 0; i < n_eos; i++)
        if (eos_ids[i] == t)
            return true;
    return false;
}

/* ---------------------------------------------------------------- the reference */

/* `llama8ctl tokenize --json` with extra flags (NULL-terminated) and stdin. */
static void tokenize(const char *const *flags, const char *text, const char *in, struct ids *out)
{
    const char *argv[32];
    int n = 0;
    argv[n++] = bin_ctl;
    argv[n++] = "tokenize";
    argv[n++] = "--tokenizer";
    argv[n++] = model;
    argv[n++] = "--json";
    for (int i = 0; flags && flags[i]; i++)
        argv[n++] = flags[i];
    if (text)
        argv[n++] = text;
    argv[n] = NULL;
    struct buf o = {0};
    run_ok(argv, in, in ? strlen(in) : 0, &o);
    json_object *j = parse_json(o.p, "tokenize --json");
    ids_from_json_array(j, out, "tokenize --json");
    json_object_put(j);
    free(o.p);
}

struct ref {
    struct ids gen;          /* llama8-run's ids, a final stop id included */
    bool stopped;
    struct buf text;         /* what generate must print (without its final newline) */
};

/* llama8-run on prompt with sampling flags (NULL-terminated; "--max-new N"
 * among them), the model's eos ids plus extra_stop (0: none) as stop ids. */
static void reference(const struct ids *prompt, const char *const *flags, uint32_t extra_stop,
                      struct ref *r)
{
    static char toks[MAX_IDS * 8], stops[16][16];
    ids_str(prompt, prompt->n, toks, sizeof(toks));
    const char *argv[64];
    int n = 0, ns = 0;
    argv[n++] = bin_run;
    argv[n++] = "--model";
    argv[n++] = model;
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--json";
    argv[n++] = "--tokens";
    argv[n++] = toks;
    for (size_t i = 0; i < n_eos; i++) {
        snprintf(stops[ns], sizeof(stops[ns]), "%u", eos_ids[i]);
        argv[n++] = "--stop";
        argv[n++] = stops[ns++];
    }
    if (extra_stop) {
        snprintf(stops[ns], sizeof(stops[ns]), "%u", extra_stop);
        argv[n++] = "--stop";
        argv[n++] = stops[ns++];
    }
    for (int i = 0; flags[i]; i++)
        argv[n++] = flags[i];
    argv[n] = NULL;
    struct buf o = {0};
    run_ok(argv, NULL, 0, &o);
    json_object *j = parse_json(o.p, "llama8-run --json");
    ids_from_json_array(get(j, "tokens", json_type_array, "llama8-run"), &r->gen, "llama8-run");
    r->stopped = !strcmp(json_object_get_string(get(j, "stop_reason", json_type_string,
                                                    "llama8-run")), "stop");
    json_object_put(j);

    /* The text: every id but a final stop id, detokenized, lossily decoded. */
    size_t k = r->gen.n - (r->stopped ? 1 : 0);
    buf_clear(&r->text);
    if (k) {
        ids_str(&r->gen, k, toks, sizeof(toks));
        const char *dv[] = { bin_ctl, "detokenize", "--tokenizer", model, NULL };
        run_ok(dv, toks, strlen(toks), &o);
        utf8_lossy((const unsigned char *)o.p, o.n, &r->text);
    } else {
        buf_str(&r->text, "");
    }
    free(o.p);
}

/* ---------------------------------------------------------------- status */

struct status {
    int64_t clients, running, waiting, done, generated, prompt, cached, pages_used, pages_total;
};

static void status_json(struct status *s)
{
    const char *argv[] = { bin_ctl, "status", "--json", "--socket", dmn.sock, NULL };
    struct buf o = {0};
    run_ok(argv, NULL, 0, &o);
    json_object *j = parse_json(o.p, "status --json");
    const char *w = "status --json";
    char real[4096];
    REQUIRE(realpath(model, real), "realpath");
    CHECK(!strcmp(json_object_get_string(get(j, "model_dir", json_type_string, w)), real),
          "model_dir %s", o.p);
    CHECK(!strcmp(json_object_get_string(get(j, "model", json_type_string, w)), "model"),
          "model %s", o.p);
    CHECK(!strcmp(json_object_get_string(get(j, "backend", json_type_string, w)), "cpu"),
          "backend %s", o.p);
    CHECK(!strcmp(json_object_get_string(get(j, "prefix_cache", json_type_string, w)), "user"),
          "prefix_cache %s", o.p);
    CHECK(get_int(j, "context_length", w) == 131072, "context_length %s", o.p);
    CHECK(get_int(j, "page_size", w) == PAGE, "page_size %s", o.p);
    s->pages_total = get_int(j, "pages_total", w);
    s->pages_used = get_int(j, "pages_used", w);
    CHECK(s->pages_total > 0 && s->pages_used >= 0 && s->pages_used <= s->pages_total &&
          get_int(j, "pages_cached", w) >= 0, "pages %s", o.p);
    s->clients = get_int(j, "clients", w);
    CHECK(get_int(j, "max_clients", w) == 256 && get_int(j, "admin_clients", w) == 2,
          "max_clients, admin_clients %s", o.p);
    CHECK(!json_object_get_boolean(get(j, "own_uid", json_type_boolean, w)),
          "own_uid (root asks) %s", o.p);
    s->running = get_int(j, "requests_running", w);
    s->waiting = get_int(j, "requests_waiting", w);
    s->done = get_int(j, "requests_done", w);
    s->generated = get_int(j, "tokens_generated", w);
    s->prompt = get_int(j, "prompt_tokens", w);
    s->cached = get_int(j, "prompt_tokens_cached", w);
    CHECK(get_num(j, "tokens_per_s", w) >= 0, "tokens_per_s %s", o.p);
    CHECK(get_int(j, "decode_steps", w) <= get_int(j, "steps", w) &&
          get_int(j, "decode_rows", w) >= get_int(j, "decode_steps", w) &&
          get_num(j, "decode_time_s", w) <= get_num(j, "step_time_s", w) &&
          get_int(j, "fed_tokens", w) >= get_int(j, "prompt_tokens", w) &&
          get_int(j, "preemptions", w) == 0, "status --json steps: %s", o.p);
    CHECK(get_num(j, "uptime_s", w) > 0, "uptime_s %s", o.p);
    /* The cpu engine's pool is pages of f32 (exact) or bf16 (fp8) elements;
     * its weights and scratch are host memory, so no device figures. */
    const int64_t kv = get_int(j, "mem_kv_pool", w);
    CHECK(kv == s->pages_total * page_elems * 4 || kv == s->pages_total * page_elems * 2,
          "mem_kv_pool %" PRId64 " for %" PRId64 " pages of %" PRId64 " elements", kv,
          s->pages_total, page_elems);
    CHECK(get_int(j, "mem_weights", w) > 0 && get_int(j, "mem_work", w) > 0 &&
          get_int(j, "device_used", w) == 0 && get_int(j, "device_total", w) == 0,
          "status --json memory: %s", o.p);
    CHECK(!json_object_get_boolean(get(j, "draining", json_type_boolean, w)), "draining %s", o.p);
    /* Nobody else talks to this daemon and nothing runs between our
     * commands. */
    CHECK(s->running == 0 && s->waiting == 0, "idle daemon: %s", o.p);
    json_object_put(j);
    free(o.p);
}

/* The text form: the prefix cache's scope, the memory line, and no GPU
 * line for the cpu engine; after `llama8ctl reload` (which says so), the
 * config line counts it. */
static void test_status_text(void)
{
    const char *rl[] = { bin_ctl, "reload", "--socket", dmn.sock, NULL };
    struct buf o = {0};
    run_ok(rl, NULL, 0, &o);
    CHECK(!strcmp(o.p, "llama8d reloaded its configuration (log level info)\n"), "reload: %s",
          o.p);
    free(o.p);
    o = (struct buf){0};
    const char *argv[] = { bin_ctl, "status", "--socket", dmn.sock, NULL };
    run_ok(argv, NULL, 0, &o);
    CHECK(strstr(o.p, "positions each); prefix cache: user\n") &&
          strstr(o.p, "\nmemory:    weights ") && strstr(o.p, " GiB, KV pool ") &&
          strstr(o.p, "(host)\n") && !strstr(o.p, "\ngpu:") &&
          strstr(o.p, "\nconfig:    log level info; reloaded 1 time\n") &&
          strstr(o.p, "\nclients:   1 (at most 256, and 2 more for root and llama8d's user; "),
          "status:\n%s", o.p);
    free(o.p);
}

/* llama8ctl clients: beside its own connection, one of ours that ran a
 * request (8 prompt tokens, 5 generated): both listed, ours with its pid,
 * uid and counts, the command's own marked, in the table and in JSON. */
static void test_clients(void)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(dmn.sock, "e2e holder", &c, err) == 0, "%s", err);
    const uint32_t prompt[8] = { 1, 5, 9, 13, 17, 21, 25, 29 };
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = 5;
    p.ignore_eos = true;
    static struct tstream st[2];
    memset(st, 0, sizeof st);
    REQUIRE(l8c_submit_id(c, 1, prompt, 8, &p) == 0 && tcollect(c, st, 1, 1, 30000) &&
                st[1].n == 5, "the holder's request");
    const char *aj[] = { bin_ctl, "clients", "--json", "--socket", dmn.sock, NULL };
    struct buf o = {0};
    run_ok(aj, NULL, 0, &o);
    json_object *j = parse_json(o.p, "clients --json");
    REQUIRE(json_object_is_type(j, json_type_array), "clients --json: not an array: %s", o.p);
    int holder = 0, self = 0;
    int64_t last_id = 0;
    for (size_t i = 0; i < json_object_array_length(j); i++) {
        json_object *e = json_object_array_get_idx(j, i);
        const char *w = "clients --json entry";
        const char *name = json_object_get_string(get(e, "name", json_type_string, w));
        const int64_t id = get_int(e, "id", w);
        CHECK(id > last_id, "clients not in id order: %s", o.p);
        last_id = id;
        if (!strcmp(name, "e2e holder")) {
            holder++;
            CHECK(id == (int64_t)l8c_info(c)->client_id && get_int(e, "pid", w) == getpid() &&
                      get_int(e, "uid", w) == getuid() && get_int(e, "requests", w) == 0 &&
                      get_int(e, "running", w) == 0 && get_int(e, "kv_pages", w) == 0 &&
                      get_int(e, "requests_done", w) == 1 &&
                      get_int(e, "prompt_tokens", w) == 8 &&
                      get_int(e, "tokens_generated", w) == 5 &&
                      !json_object_get_boolean(get(e, "held", json_type_boolean, w)) &&
                      !json_object_get_boolean(get(e, "self", json_type_boolean, w)) &&
                      get_num(e, "connected_s", w) > 0,
                  "the holder's entry: %s", json_object_to_json_string(e));
        }
        if (json_object_get_boolean(get(e, "self", json_type_boolean, w))) {
            self++;
            CHECK(!strcmp(name, "llama8ctl clients") && get_int(e, "requests_done", w) == 0,
                  "the command's own entry: %s", json_object_to_json_string(e));
        }
    }
    CHECK(holder == 1 && self == 1, "clients --json: holder %d, self %d: %s", holder, self, o.p);
    json_object_put(j);
    free(o.p);
    o = (struct buf){0};
    const char *at[] = { bin_ctl, "clients", "--socket", dmn.sock, NULL };
    run_ok(at, NULL, 0, &o);
    char line[160];
    snprintf(line, sizeof line, " %d ", (int)getpid());
    const char *h = strstr(o.p, "e2e holder");
    static const char head[] =
        "   ID     PID    UID CONNECTED REQS  RUN   PAGES    DONE    PROMPT    TOKENS  NAME\n";
    CHECK(!strncmp(o.p, head, sizeof head - 1) && strstr(o.p, line) && h &&
              strstr(o.p, "  llama8ctl clients (this one)\n"),
          "clients:\n%s", o.p);
    free(o.p);
    l8c_close(c);
}

/* status --json once the daemon has seen every client that left go: a
 * hang-up reaches its loop asynchronously, after the client's exit. */
static void status_settled(struct status *s)
{
    for (int i = 0; i < 100; i++) {
        status_json(s);
        if (s->clients == expect_clients)
            return;
        usleep(50 * 1000);
    }
    CHECK(s->clients == expect_clients, "clients %" PRId64 ", want %" PRId64, s->clients,
          expect_clients);
}

/* ---------------------------------------------------------------- generate */

/* generate with flags (NULL-terminated) and TEXT; its stdout must be r's
 * text and a newline; --json with the same flags must list r's ids. */
static void check_generate(const char *name, const char *const *flags, const char *text,
                           const struct ref *r)
{
    const char *argv[64];
    int n = 0;
    argv[n++] = bin_ctl;
    argv[n++] = "generate";
    argv[n++] = "--socket";
    argv[n++] = dmn.sock;
    int nf = n;
    for (int i = 0; flags[i]; i++)
        argv[n++] = flags[i];
    argv[n++] = text;
    argv[n] = NULL;
    struct buf o = {0}, e = {0};
    int rc = run_cmd(argv, NULL, 0, &o, &e);
    CHECK(rc == 0, "%s: exit %d: %s", name, rc, e.p);
    CHECK(o.n == r->text.n + 1 && !memcmp(o.p, r->text.p, r->text.n) && o.p[o.n - 1] == '\n',
          "%s: stdout differs from llama8-run's reply\n  got (%zu bytes): %s\n  want (%zu bytes): %s",
          name, o.n, o.p, r->text.n, r->text.p);

    /* The same request as events. */
    for (int i = n; i > nf; i--)
        argv[i] = argv[i - 1];
    argv[nf] = "--json";
    argv[++n] = NULL;
    rc = run_cmd(argv, NULL, 0, &o, &e);
    CHECK(rc == 0, "%s --json: exit %d: %s", name, rc, e.p);
    size_t n_tok = 0, n_lines = 0;
    bool started = false, done = false;
    uint64_t request = 0;
    struct buf evtext = {0};
    buf_str(&evtext, "");
    for (char *line = o.p, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        REQUIRE(nl, "%s --json: last line not terminated", name);
        *nl = 0;
        json_object *j = parse_json(line, "generate --json");
        const char *w = line;
        const char *ev = json_object_get_string(get(j, "event", json_type_string, w));
        uint64_t req = (uint64_t)get_int(j, "request", w);
        int64_t t_ns = get_int(j, "t_ns", w), t_recv = get_int(j, "t_recv_ns", w);
        CHECK(t_ns > 0 && t_recv >= t_ns, "%s: timestamps %s", name, w);
        CHECK(!done, "%s: an event after done: %s", name, w);
        if (n_lines++ == 0)
            request = req;
        CHECK(req == request && req != 0, "%s: request id %s", name, w);
        if (!strcmp(ev, "started")) {
            CHECK(n_lines == 1, "%s: started is not first", name);
            int64_t c = get_int(j, "cached_tokens", w), pt = get_int(j, "prompt_tokens", w);
            CHECK(c >= 0 && c % PAGE == 0 && c < pt, "%s: cached_tokens %s", name, w);
            started = true;
        } else if (!strcmp(ev, "token")) {
            CHECK(started, "%s: token before started", name);
            int64_t tok = get_int(j, "token", w), idx = get_int(j, "index", w);
            CHECK(idx == (int64_t)n_tok, "%s: index %" PRId64 " at token %zu", name, idx, n_tok);
            CHECK(n_tok < r->gen.n && tok == r->gen.v[n_tok],
                  "%s: token %zu is %" PRId64 ", llama8-run has %u", name, n_tok, tok,
                  n_tok < r->gen.n ? r->gen.v[n_tok] : 0);
            json_object *t;
            if (json_object_object_get_ex(j, "text", &t)) {
                CHECK(json_object_is_type(t, json_type_string), "%s: text %s", name, w);
                buf_add(&evtext, json_object_get_string(t), (size_t)json_object_get_string_len(t));
            }
            CHECK(!json_object_object_get_ex(j, "logprob", NULL), "%s: logprob unasked", name);
            n_tok++;
        } else if (!strcmp(ev, "done")) {
            const char *why = json_object_get_string(get(j, "reason", json_type_string, w));
            CHECK(r->stopped ? !strcmp(why, "stop") || !strcmp(why, "eos") : !strcmp(why, "length"),
                  "%s: reason %s, llama8-run stopped: %d", name, why, r->stopped);
            CHECK(get_int(j, "tokens", w) == (int64_t)r->gen.n, "%s: done tokens %s", name, w);
            json_object *t;
            if (json_object_object_get_ex(j, "text", &t))
                buf_add(&evtext, json_object_get_string(t), (size_t)json_object_get_string_len(t));
            done = true;
        } else {
            CHECK(0, "%s: unexpected event %s", name, w);
        }
        json_object_put(j);
    }
    CHECK(done && n_tok == r->gen.n, "%s --json: %zu token events, llama8-run made %zu", name,
          n_tok, r->gen.n);
    CHECK(evtext.n == r->text.n && !memcmp(evtext.p, r->text.p, evtext.n),
          "%s --json: the text fields differ from the reply\n  got: %s\n  want: %s", name,
          evtext.p, r->text.p);
    free(evtext.p);
    free(o.p);
    free(e.p);
}

/* --logprobs: each token event of --json carries the chosen token's
 * log-probability; greedy picks the most likely token, whose probability is
 * at least 1 / vocabulary. */
static void test_logprobs(void)
{
    const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--json", "--logprobs",
                           "--ids", "128000 9906 1917", "--max-new", "8", NULL };
    struct buf o = {0};
    run_ok(argv, NULL, 0, &o);
    int tokens = 0;
    for (char *line = o.p, *nl; line && *line; line = nl ? nl + 1 : NULL) {
        nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        json_object *j = parse_json(line, "generate --json --logprobs");
        const char *ev = json_object_get_string(get(j, "event", json_type_string, line));
        if (!strcmp(ev, "token")) {
            double lp = get_num(j, "logprob", line);
            CHECK(lp <= 0 && lp >= -11.7618, "logprob %f: %s", lp, line);   /* ln 128256 */
            tokens++;
        }
        json_object_put(j);
    }
    CHECK(tokens == 8, "%d token events with logprobs", tokens);
    free(o.p);
}

static void test_generate(void)
{
    static const char *const prompt = "Write a haiku about shared memory.";
    struct ids p;
    struct ref r = {0};
    const char *chat[] = { "--chat", NULL };
    tokenize(chat, prompt, NULL, &p);
    CHECK(p.n > 30 && p.v[0] == 128000, "chat prompt: %zu ids", p.n);

    /* Greedy, explicitly and by default. */
    const char *greedy[] = { "--max-new", "20", "--temperature", "0", NULL };
    reference(&p, greedy, 0, &r);
    CHECK(r.gen.n >= 1 && r.gen.n <= 20, "llama8-run made %zu tokens", r.gen.n);
    check_generate("greedy", greedy, prompt, &r);
    const char *dflt[] = { "--max-new", "20", NULL };
    check_generate("default", dflt, prompt, &r);

    /* --stats: the same reply on stdout, and a line on stderr with the
     * request's figures (its prompt was just served: from the cache). */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "20",
                               "--stats", prompt, NULL };
        struct buf o = {0}, e = {0};
        int rc = run_cmd(argv, NULL, 0, &o, &e);
        unsigned np = 0, nc = 0, ng = 0;
        char reason[16] = "";
        double ttft = -1, rate = -1;
        int got = e.p ? sscanf(e.p, "llama8ctl: %u prompt tokens (%u from the prefix cache), %u "
                               "generated (%15[a-z_]); first token %lf ms after submit, then "
                               "%lf tokens/s", &np, &nc, &ng, reason, &ttft, &rate) : 0;
        CHECK(rc == 0 && o.p && !strncmp(o.p, r.text.p, r.text.n) && got >= 5 && np == p.n &&
              nc > 0 && nc < np && ng == r.gen.n && ttft > 0 && (got == 6 ? rate > 0 : ng == 1),
              "--stats: exit %d, %d fields: %s", rc, got, e.p);
        CHECK(!strcmp(reason, r.stopped ? "eos" : "length"), "--stats reason %s", reason);
        free(o.p);
        free(e.p);
    }

    /* An extra stop id: the third token generated (not printed). */
    if (r.gen.n >= 3 && !is_eos(r.gen.v[2])) {
        uint32_t stop = r.gen.v[2];
        char s[16];
        snprintf(s, sizeof(s), "%u", stop);
        struct ref rs = {0};
        reference(&p, greedy, stop, &rs);
        CHECK(rs.stopped && rs.gen.n <= 3, "llama8-run --stop %u: %zu tokens", stop, rs.gen.n);
        const char *fl[] = { "--max-new", "20", "--temperature", "0", "--stop", s, NULL };
        check_generate("--stop", fl, prompt, &rs);
        free(rs.text.p);
    }

    /* Seeded sampling, identical flags on both sides. */
    const char *seeded[] = { "--max-new", "24", "--temperature", "0.9", "--top-k", "50",
                             "--top-p", "0.95", "--seed", "12345", NULL };
    reference(&p, seeded, 0, &r);
    check_generate("seeded", seeded, prompt, &r);
    const char *seeded2[] = { "--max-new", "16", "--temperature", "1.2", "--min-p", "0.02",
                              "--repetition-penalty", "1.3", "--seed", "7", NULL };
    reference(&p, seeded2, 0, &r);
    check_generate("seeded min-p/rep", seeded2, prompt, &r);

    /* --raw: <|begin_of_text|> and the text's own tokens. */
    static const char *const raw_text = "The quick brown fox, \xc3\xa9t\xc3\xa9 2024:";
    struct ids t, rp;
    tokenize(NULL, raw_text, NULL, &t);
    rp.v[0] = 128000;
    memcpy(rp.v + 1, t.v, t.n * sizeof(uint32_t));
    rp.n = t.n + 1;
    const char *raw_ref[] = { "--max-new", "12", NULL };
    reference(&rp, raw_ref, 0, &r);
    const char *raw[] = { "--raw", "--max-new", "12", NULL };
    check_generate("--raw", raw, raw_text, &r);

    /* --system: the chat format with a system message. */
    const char *sys_tok[] = { "--chat", "--system", "Answer in French.", NULL };
    tokenize(sys_tok, "Hello", NULL, &p);
    reference(&p, raw_ref, 0, &r);
    const char *sys[] = { "--system", "Answer in French.", "--max-new", "12", NULL };
    check_generate("--system", sys, "Hello", &r);
    free(r.text.p);
}

/* --stop-text: the reply ends where the text first appears, without it,
 * the request is cancelled (nothing left running), and --json ends with a
 * done event of reason stop_text. The stop text is cut from the middle of
 * the full reply. */
static void test_stop_text(void)
{
    static const char *const prompt = "Name three rivers.";
    const char *full_argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24",
                                "--ignore-eos", prompt, NULL };
    struct buf full = {0}, o = {0};
    run_ok(full_argv, NULL, 0, &full);
    REQUIRE(full.n > 12 && full.p[full.n - 1] == '\n', "reply: '%s'", full.p);
    /* 4 bytes from a character's start in the middle; a backslash doubled. */
    size_t at = full.n / 2;
    while (at > 0 && ((unsigned char)full.p[at] & 0xc0) == 0x80)
        at--;
    char stop[16], arg[32];
    snprintf(stop, sizeof stop, "%.4s", full.p + at);
    size_t a = 0;
    for (const char *s = stop; *s; s++) {
        if (*s == '\\' || *s == '\n')
            arg[a++] = '\\';
        arg[a++] = *s == '\n' ? 'n' : *s;
    }
    arg[a] = 0;
    const char *first = strstr(full.p, stop);
    REQUIRE(first && stop[0], "stop text '%s' not in '%s'", stop, full.p);
    size_t keep = (size_t)(first - full.p);

    const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24",
                           "--ignore-eos", "--stop-text", arg, prompt, NULL };
    run_ok(argv, NULL, 0, &o);
    CHECK(o.n == keep + 1 && !memcmp(o.p, full.p, keep) && o.p[keep] == '\n',
          "--stop-text '%s': got '%s', want the first %zu bytes of '%s'", stop, o.p, keep,
          full.p);

    const char *jargv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24",
                            "--ignore-eos", "--json", "--stop-text", arg, prompt, NULL };
    run_ok(jargv, NULL, 0, &o);
    struct buf text = {0};
    bool last_done = false;   /* the last event was a done */
    int64_t tokens = -1;
    for (char *line = strtok(o.p, "\n"); line; line = strtok(NULL, "\n")) {
        json_object *j = parse_json(line, "--json --stop-text");
        json_object *tx;
        if (json_object_object_get_ex(j, "text", &tx))
            buf_str(&text, json_object_get_string(tx));
        last_done = !strcmp(json_object_get_string(get(j, "event", json_type_string, line)),
                            "done");
        if (last_done) {
            CHECK(!strcmp(json_object_get_string(get(j, "reason", json_type_string, line)),
                          "stop_text"), "done: %s", line);
            tokens = get_int(j, "tokens", line);
        }
        json_object_put(j);
    }
    CHECK(last_done && tokens >= 1 && tokens < 24, "--json: last event %s, %" PRId64 " tokens",
          last_done ? "done" : "not done", tokens);
    CHECK(text.n == keep && !memcmp(text.p, full.p, keep), "--json text '%s', want %zu bytes",
          text.p ? text.p : "", keep);
    struct status s;
    status_settled(&s);
    CHECK(s.running == 0 && s.waiting == 0, "after --stop-text: %" PRId64 " running, %" PRId64
          " waiting", s.running, s.waiting);

    /* A reply cut inside a character ends in U+FFFD, with a stop text that
     * never comes as without one. Find a token whose bytes leave a
     * character open (a token event without text), then end there. */
    char max_new[24] = "";
    const char *sampled[] = { bin_ctl, "generate", "--socket", dmn.sock, "--json", "--max-new",
                              "40", "--ignore-eos", "--temperature", "1", "--seed", "",
                              prompt, NULL };
    char seed[16];
    for (int sd = 1; sd <= 20 && !max_new[0]; sd++) {
        snprintf(seed, sizeof seed, "%d", sd);
        sampled[11] = seed;
        run_ok(sampled, NULL, 0, &o);
        for (char *line = strtok(o.p, "\n"); line && !max_new[0]; line = strtok(NULL, "\n")) {
            json_object *j = parse_json(line, "--json sampled"), *tx;
            if (!strcmp(json_object_get_string(get(j, "event", json_type_string, line)),
                        "token") && !json_object_object_get_ex(j, "text", &tx))
                snprintf(max_new, sizeof max_new, "%" PRId64, get_int(j, "index", line) + 1);
            json_object_put(j);
        }
    }
    CHECK(max_new[0], "no sampled reply with a character left open in 20 seeds");
    if (max_new[0]) {
        const char *without[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new",
                                  max_new, "--ignore-eos", "--temperature", "1", "--seed", seed,
                                  prompt, NULL };
        const char *with[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", max_new,
                               "--ignore-eos", "--temperature", "1", "--seed", seed,
                               "--stop-text", "never\\n\\t", prompt, NULL };
        run_ok(without, NULL, 0, &full);
        run_ok(with, NULL, 0, &o);
        CHECK(o.n == full.n && !memcmp(o.p, full.p, o.n) && o.n >= 4 &&
                  !memcmp(o.p + o.n - 4, "\xef\xbf\xbd\n", 4),
              "seed %s, %s tokens: with --stop-text '%s', without '%s' (want U+FFFD at the end)",
              seed, max_new, o.p, full.p);
    }
    free(text.p);
    free(full.p);
    free(o.p);
}

/* ---------------------------------------------------------------- chat */

/* Read exactly n bytes from fd within timeout_ms. */
static bool read_exact(int fd, struct buf *b, size_t n, int timeout_ms)
{
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    buf_clear(b);
    char tmp[4096];
    while (b->n < n) {
        uint64_t now = t_now_ms();
        if (now >= end)
            return false;
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, (int)(end - now)) <= 0)
            continue;
        size_t want = n - b->n < sizeof(tmp) ? n - b->n : sizeof(tmp);
        ssize_t r = read(fd, tmp, want);
        if (r <= 0)
            return false;
        buf_add(b, tmp, (size_t)r);
    }
    return true;
}

static void messages_json(const char *const *msgs, size_t n, struct buf *out)
{
    static const char *const roles[] = { "user", "assistant" };
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *m = json_object_new_object();
        json_object_object_add(m, "role", json_object_new_string(roles[i % 2]));
        json_object_object_add(m, "content", json_object_new_string(msgs[i]));
        json_object_array_add(a, m);
    }
    buf_clear(out);
    buf_str(out, json_object_to_json_string_ext(a, JSON_C_TO_STRING_PLAIN));
    json_object_put(a);
}

/* Two user turns through one `llama8ctl chat` on a pipe: each reply equals
 * llama8-run's for the whole conversation so far, and the second request's
 * prompt is the history (its length exactly, and its start from the prefix
 * cache). */
static void test_chat(void)
{
    static const char *const u1 = "Tell me about pipes, sockets and signals in Unix: how a shell "
                                  "connects two programs, briefly please.";
    static const char *const u2 = "And what about shared memory?";
    const char *greedy[] = { "--max-new", "12", NULL };
    const char *msgs_flag[] = { "--chat", "--messages", NULL };
    struct buf mj = {0};
    struct ids p1, p2;
    struct ref r1 = {0}, r2 = {0};
    const char *conv[3] = { u1, NULL, u2 };
    messages_json(conv, 1, &mj);
    tokenize(msgs_flag, NULL, mj.p, &p1);
    reference(&p1, greedy, 0, &r1);
    conv[1] = r1.text.p;
    messages_json(conv, 3, &mj);
    tokenize(msgs_flag, NULL, mj.p, &p2);
    reference(&p2, greedy, 0, &r2);
    REQUIRE(p1.n >= 3 * PAGE, "first prompt only %zu ids", p1.n);
    size_t lcp = 0;
    while (lcp < p1.n && lcp < p2.n && p1.v[lcp] == p2.v[lcp])
        lcp++;
    CHECK(lcp == p1.n, "the first turn's prompt is not a prefix of the second's (%zu of %zu)",
          lcp, p1.n);

    struct status s0, s1, s2;
    status_settled(&s0);
    const char *chat_argv[] = { bin_ctl, "chat", "--socket", dmn.sock, "--max-new", "12", NULL };
    int pin, pout;
    pid_t pid = spawn_interactive(chat_argv, &pin, &pout);
    struct buf got = {0};
    expect_clients = 2;
    CHECK(dprintf(pin, "%s\n", u1) > 0, "write turn 1");
    bool ok = read_exact(pout, &got, r1.text.n + 1, CMD_TIMEOUT_MS);
    CHECK(ok && !memcmp(got.p, r1.text.p, r1.text.n) && got.p[r1.text.n] == '\n',
          "chat turn 1:\n  got: %s\n  want: %s", got.p, r1.text.p);
    /* The chat client is connected too, and idle between turns. */
    status_settled(&s1);
    CHECK(dprintf(pin, "%s\n", u2) > 0, "write turn 2");
    ok = read_exact(pout, &got, r2.text.n + 1, CMD_TIMEOUT_MS);
    CHECK(ok && !memcmp(got.p, r2.text.p, r2.text.n) && got.p[r2.text.n] == '\n',
          "chat turn 2:\n  got: %s\n  want: %s", got.p, r2.text.p);
    close(pin);      /* EOF ends the chat */
    int st;
    waitpid(pid, &st, 0);
    chat_pid = -1;
    expect_clients = 1;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "chat exit status %d", st);
    char rest;
    CHECK(read(pout, &rest, 1) == 0, "chat printed more than the two replies");
    close(pout);
    status_settled(&s2);

    /* Prompt positions computed plus those taken from the cache = the
     * prompt, for each turn (nothing was preempted: a huge pool). */
    CHECK(s1.done - s0.done == 1 && s2.done - s1.done == 1, "requests done %" PRId64 " %" PRId64
          " %" PRId64, s0.done, s1.done, s2.done);
    CHECK((s1.prompt - s0.prompt) + (s1.cached - s0.cached) == (int64_t)p1.n,
          "turn 1 prompt: %" PRId64 " computed + %" PRId64 " cached, want %zu",
          s1.prompt - s0.prompt, s1.cached - s0.cached, p1.n);
    CHECK((s2.prompt - s1.prompt) + (s2.cached - s1.cached) == (int64_t)p2.n,
          "turn 2 prompt: %" PRId64 " computed + %" PRId64 " cached, want %zu",
          s2.prompt - s1.prompt, s2.cached - s1.cached, p2.n);
    /* The history came from the cache: at least every full page of turn 1's
     * prompt (the system block alone is one page). */
    CHECK(s2.cached - s1.cached >= (int64_t)(p1.n / PAGE * PAGE),
          "turn 2 took %" PRId64 " positions from the cache; turn 1's prompt has %zu full pages",
          s2.cached - s1.cached, p1.n / PAGE);
    CHECK(s1.generated - s0.generated == (int64_t)r1.gen.n &&
          s2.generated - s1.generated == (int64_t)r2.gen.n,
          "tokens generated %" PRId64 " %" PRId64 ", want %zu %zu", s1.generated - s0.generated,
          s2.generated - s1.generated, r1.gen.n, r2.gen.n);
    fprintf(stderr, "chat: turn 1 %zu prompt ids, turn 2 %zu (%" PRId64 " from the cache)\n",
            p1.n, p2.n, s2.cached - s1.cached);

    /* The same conversation through generate --messages: turn 2's reply. */
    const char *gm[] = { bin_ctl, "generate", "--socket", dmn.sock, "--messages", "--max-new",
                         "12", NULL };
    run_ok(gm, mj.p, mj.n, &got);
    CHECK(got.n == r2.text.n + 1 && !memcmp(got.p, r2.text.p, r2.text.n),
          "generate --messages:\n  got: %s\n  want: %s", got.p, r2.text.p);
    free(got.p);
    free(mj.p);
    free(r1.text.p);
    free(r2.text.p);
}

/* ---------------------------------------------------------------- pipe */

/* One id's events from `llama8ctl pipe`'s stdout. */
struct pev {
    char id[40];                /* the id as JSON text */
    struct ids toks;
    struct buf text;            /* the token and done events' text fields */
    bool started, done;
    char reason[16];
    int64_t done_tokens;
    char errors[16][32];         /* error names, in order */
    int n_errors;
    bool order_ok;              /* started first, tokens by index, nothing after the end */
};

#define PIPE_IDS 96
static struct pev pevs[PIPE_IDS];
static int n_pevs;

static struct pev *pev_of(const char *id)
{
    for (int i = 0; i < n_pevs; i++)
        if (!strcmp(pevs[i].id, id))
            return &pevs[i];
    REQUIRE(n_pevs < PIPE_IDS, "pipe: too many ids");
    struct pev *e = &pevs[n_pevs++];
    memset(e, 0, sizeof(*e));
    snprintf(e->id, sizeof e->id, "%s", id);
    e->order_ok = true;
    buf_str(&e->text, "");
    return e;
}

static void pev_reset(void)
{
    for (int i = 0; i < n_pevs; i++)
        free(pevs[i].text.p);
    n_pevs = 0;
}

/* One line from fd (without its newline) within timeout_ms. */
static bool read_line(int fd, struct buf *line, int timeout_ms)
{
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    buf_clear(line);
    for (;;) {
        uint64_t now = t_now_ms();
        struct pollfd p = { fd, POLLIN, 0 };
        char ch;
        if (now >= end || poll(&p, 1, (int)(end - now)) <= 0 || read(fd, &ch, 1) != 1)
            return false;
        if (ch == '\n')
            return true;
        buf_add(line, &ch, 1);
    }
}

/* One line of pipe's output into pevs; returns the event's name (static). */
static const char *pev_line(const char *line)
{
    static char ev[16];
    json_object *j = parse_json(line, "pipe");
    snprintf(ev, sizeof ev, "%s", json_object_get_string(get(j, "event", json_type_string, line)));
    if (!strcmp(ev, "ready")) {
        CHECK(get_int(j, "max_requests", line) == 64 && get_int(j, "context_length", line) > 0,
              "pipe ready: %s", line);
        json_object_put(j);
        return ev;
    }
    json_object *id;
    REQUIRE(json_object_object_get_ex(j, "id", &id), "pipe: no id: %s", line);
    struct pev *e = pev_of(json_object_to_json_string(id));
    bool ended = e->done || (e->n_errors && strcmp(e->errors[0], "DUPLICATE_REQUEST"));
    if (!strcmp(ev, "started")) {
        e->order_ok &= !e->started && !e->toks.n && !ended;
        e->started = true;
    } else if (!strcmp(ev, "token")) {
        e->order_ok &= e->started && !ended && get_int(j, "index", line) == (int64_t)e->toks.n;
        REQUIRE(e->toks.n < MAX_IDS, "pipe: too many tokens");
        e->toks.v[e->toks.n++] = (uint32_t)get_int(j, "token", line);
    } else if (!strcmp(ev, "done")) {
        e->order_ok &= !ended;
        e->done = true;
        snprintf(e->reason, sizeof e->reason, "%s",
                 json_object_get_string(get(j, "reason", json_type_string, line)));
        e->done_tokens = get_int(j, "tokens", line);
    } else if (!strcmp(ev, "error")) {
        if (e->n_errors < (int)(sizeof e->errors / sizeof e->errors[0]))
            snprintf(e->errors[e->n_errors++], sizeof e->errors[0], "%s",
                     json_object_get_string(get(j, "error", json_type_string, line)));
    } else {
        CHECK(0, "pipe: unexpected event %s", line);
    }
    json_object *t;
    if (json_object_object_get_ex(j, "text", &t))
        buf_str(&e->text, json_object_get_string(t));
    json_object_put(j);
    return ev;
}

/* A pipe request line: {"id":ID, KEY:VALUE (JSON text), EXTRA...}. */
static void pipe_req(struct buf *in, const char *id, const char *key, const char *value,
                     const char *extra)
{
    char head[256];
    snprintf(head, sizeof head, "{\"id\":%s,\"%s\":", id, key);
    buf_str(in, head);
    buf_str(in, value);
    buf_str(in, extra);
    buf_str(in, "}\n");
}

/* The reply of id equals r; n_errors: error events about lines with the
 * same id (a duplicate). */
static void check_pipe_reply(const char *id, const struct ref *r, int n_errors, const char *what)
{
    struct pev *e = pev_of(id);
    CHECK(e->order_ok && e->started && e->done && e->n_errors == n_errors, "pipe %s: order %d "
          "started %d done %d errors %d", what, e->order_ok, e->started, e->done, e->n_errors);
    bool same = e->toks.n == r->gen.n && !memcmp(e->toks.v, r->gen.v, r->gen.n * sizeof(uint32_t));
    CHECK(same && e->done_tokens == (int64_t)r->gen.n, "pipe %s: %zu tokens (done says %" PRId64
          "), llama8-run made %zu%s", what, e->toks.n, e->done_tokens, r->gen.n,
          same ? "" : ", and they differ");
    CHECK(e->text.n == r->text.n && !memcmp(e->text.p, r->text.p, r->text.n),
          "pipe %s: text\n  got: %s\n  want: %s", what, e->text.p, r->text.p);
    CHECK(r->stopped ? !strcmp(e->reason, "stop") || !strcmp(e->reason, "eos")
                     : !strcmp(e->reason, "length"), "pipe %s: reason %s", what, e->reason);
}

/* `llama8ctl pipe`: many requests of every prompt kind in flight on one
 * connection, each reply equal to llama8-run's; more requests than the
 * daemon's per-client limit (the rest wait in llama8ctl); a stop string;
 * a bad line of each kind answered by an error event while the others
 * run; then, interactively, a cancel. */
static void test_pipe(void)
{
    static const char *const prompt = "Write a haiku about shared memory.";
    static const char *const raw_text = "The quick brown fox";
    const char *chat[] = { "--chat", NULL }, *msgs_flag[] = { "--chat", "--messages", NULL };
    const char *greedy[] = { "--max-new", "20", NULL }, *short_g[] = { "--max-new", "12", NULL };
    const char *seeded[] = { "--max-new", "16", "--temperature", "1.2", "--min-p", "0.02",
                             "--repetition-penalty", "1.3", "--seed", "7", NULL };
    static const char *const conv = "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                    "{\"role\":\"user\",\"content\":\"Hi\"},"
                                    "{\"role\":\"assistant\",\"content\":\"Hello.\"},"
                                    "{\"role\":\"user\",\"content\":\"Name a river.\"}]";
    struct ids p, pm, pr, t;
    struct ref rg = {0}, rm = {0}, rr = {0}, rs = {0};
    tokenize(chat, prompt, NULL, &p);
    reference(&p, greedy, 0, &rg);
    tokenize(msgs_flag, NULL, conv, &pm);
    reference(&pm, short_g, 0, &rm);
    tokenize(NULL, raw_text, NULL, &t);
    pr.v[0] = 128000;
    memcpy(pr.v + 1, t.v, t.n * sizeof(uint32_t));
    pr.n = t.n + 1;
    reference(&pr, short_g, 0, &rr);
    reference(&p, seeded, 0, &rs);
    REQUIRE(rg.text.n > 12, "greedy reply too short: '%s'", rg.text.p);
    /* A stop string from the middle of the greedy reply, 4 bytes from a
     * character's start. */
    size_t at = rg.text.n / 2;
    while (at > 0 && ((unsigned char)rg.text.p[at] & 0xc0) == 0x80)
        at--;
    char stop[8];
    snprintf(stop, sizeof stop, "%.4s", rg.text.p + at);
    size_t keep = (size_t)(strstr(rg.text.p, stop) - rg.text.p);
    json_object *sj = json_object_new_string(stop);
    char stop_extra[64];
    snprintf(stop_extra, sizeof stop_extra, ",\"max_new\":20,\"stop_text\":[%s]",
             json_object_to_json_string(sj));
    json_object_put(sj);

    struct buf in = {0}, o = {0};
    json_object *pj = json_object_new_string(prompt);
    const char *pjs = json_object_to_json_string(pj);
    pipe_req(&in, "\"greedy\"", "text", pjs, ",\"max_new\":20,\"temperature\":0");
    pipe_req(&in, "\"greedy\"", "text", "\"again\"", "");          /* still running */
    pipe_req(&in, "7", "messages", conv, ",\"max_new\":12");
    pipe_req(&in, "\"raw\"", "raw", "\"The quick brown fox\"", ",\"max_new\":12");
    char ids[MAX_IDS * 8];
    ids_str(&p, p.n, ids, sizeof ids);
    char idv[MAX_IDS * 8 + 2];
    snprintf(idv, sizeof idv, "[%s]", ids);
    pipe_req(&in, "\"seeded\"", "ids", idv, ",\"max_new\":16,\"temperature\":1.2,\"min_p\":0.02,"
             "\"repetition_penalty\":1.3,\"seed\":7");
    pipe_req(&in, "\"stop\"", "text", pjs, stop_extra);
    json_object_put(pj);
    buf_str(&in, "not json\n\n{\"text\":\"no id\"}\n");
    /* answered without an id: a cancel of a non-id, and lines that are not
     * strict JSON in UTF-8 (the bad key would be echoed) */
    buf_str(&in, "{\"cancel\":1.}\n{\"id\":\"u\",\"text\":\"x\",\"b\xff\":1}\n"
                 "{\"id\":\"c\",/*x*/\"text\":\"x\"}\n{\"id\":\"t\",\"text\":\"x\",}\n"
                 "{\"id\":\"n\",\"text\":\"x\\u0000\",\"max_new\\u0000x\":5}\n"
                 "{\"id\":\"d\",\"text\":\"x\",\"max_new\":5,\"max_new\":6}\n"
                 "{\"id\":\"e\",\"messages\":[{\"role\":\"user\",\"content\":\"a\","
                 "\"role\":\"system\"}]}\n");
    pipe_req(&in, "\"k\"", "text", "\"x\"", ",\"bogus\":1");
    pipe_req(&in, "\"z\"", "text", "\"x\"", ",\"max_new\":0");
    pipe_req(&in, "\"z2\"", "text", "\"x\"", ",\"stop_text\":[]");
    pipe_req(&in, "\"z3\"", "text", "\"x\"", ",\"raw\":\"y\"");
    pipe_req(&in, "\"z4\"", "ids", "[128000,999999]", "");
    /* refused in llama8ctl, with the daemon's limit said (l8c_check_request) */
    pipe_req(&in, "\"z5\"", "ids", "[]", "");
    pipe_req(&in, "\"z6\"", "ids", "[128000,1]",
             ",\"stop\":[1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16]");   /* the model's eos count too */
    pipe_req(&in, "\"z7\"", "text", "\"x\"", ",\"top_p\":1.5");
    buf_str(&in, "{\"cancel\":\"nope\"}\n");
    for (int i = 0; i < 70; i++) {
        char id[16], v[32];
        snprintf(id, sizeof id, "\"m%d\"", i);
        snprintf(v, sizeof v, "[128000,%d]", 100 + i);
        pipe_req(&in, id, "ids", v, ",\"max_new\":1");
    }
    const char *argv[] = { bin_ctl, "pipe", "--socket", dmn.sock, NULL };
    struct status s0, s1;
    status_settled(&s0);
    run_ok(argv, in.p, in.n, &o);
    pev_reset();
    int lines = 0;
    for (char *line = strtok(o.p, "\n"); line; line = strtok(NULL, "\n")) {
        const char *ev = pev_line(line);
        CHECK(lines++ || !strcmp(ev, "ready"), "pipe: the first line is %s", line);
    }
    CHECK(lines > 70, "pipe: %d lines", lines);
    check_pipe_reply("\"greedy\"", &rg, 1, "text");
    check_pipe_reply("7", &rm, 0, "messages");
    check_pipe_reply("\"raw\"", &rr, 0, "raw");
    check_pipe_reply("\"seeded\"", &rs, 0, "ids, seeded");
    struct pev *e = pev_of("\"stop\"");
    CHECK(e->done && !strcmp(e->reason, "stop_text") && e->text.n == keep &&
          !memcmp(e->text.p, rg.text.p, keep), "pipe stop_text '%s': reason %s, text '%s', want "
          "%zu bytes of '%s'", stop, e->reason, e->text.p, keep, rg.text.p);
    static const struct { const char *id, *error; } bad[] = {
        { "null", "BAD_MESSAGE" }, { "\"k\"", "BAD_MESSAGE" }, { "\"z\"", "BAD_PARAMS" },
        { "\"z2\"", "BAD_PARAMS" }, { "\"z3\"", "BAD_MESSAGE" }, { "\"z4\"", "BAD_TOKEN" },
        { "\"z5\"", "EMPTY_PROMPT" }, { "\"z6\"", "BAD_PARAMS" }, { "\"z7\"", "BAD_PARAMS" },
        { "\"nope\"", "UNKNOWN_REQUEST" }, { "\"greedy\"", "DUPLICATE_REQUEST" },
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        e = pev_of(bad[i].id);
        int want = !strcmp(bad[i].id, "null") ? 9 : 1;     /* not JSON; no id; the 7 above */
        CHECK(e->n_errors == want && !strcmp(e->errors[0], bad[i].error) &&
              !strcmp(e->errors[want - 1], bad[i].error) &&
              (e->toks.n == 0 || !strcmp(bad[i].error, "DUPLICATE_REQUEST")),
              "pipe %s: %d errors, the first %s, want %d %s", bad[i].id, e->n_errors,
              e->n_errors ? e->errors[0] : "-", want, bad[i].error);
    }
    int many = 0;
    for (int i = 0; i < 70; i++) {
        char id[16];
        snprintf(id, sizeof id, "\"m%d\"", i);
        e = pev_of(id);
        many += e->order_ok && e->done && e->done_tokens == 1 && e->toks.n == 1 && !e->n_errors;
    }
    CHECK(many == 70, "pipe: %d of 70 requests past the per-client limit done", many);
    status_settled(&s1);
    CHECK(s1.running == 0 && s1.waiting == 0 && s1.done - s0.done >= 70 + 4,
          "after pipe: %" PRId64 " running, %" PRId64 " waiting, %" PRId64 " done", s1.running,
          s1.waiting, s1.done - s0.done);

    /* Interactively: cancel a long request after its first token. */
    int pin, pout;
    pid_t pid = spawn_interactive(argv, &pin, &pout);
    expect_clients = 2;
    CHECK(dprintf(pin, "{\"id\":\"c\",\"text\":\"go\",\"max_new\":100000,\"ignore_eos\":true}\n")
          > 0, "write");
    pev_reset();
    struct buf line = {0};
    bool cancelled = false, done = false;
    while (!done && read_line(pout, &line, CMD_TIMEOUT_MS)) {
        const char *ev = pev_line(line.p);
        if (!strcmp(ev, "token") && !cancelled) {
            CHECK(dprintf(pin, "{\"cancel\":\"c\"}\n") > 0, "write cancel");
            cancelled = true;
        }
        done = !strcmp(ev, "done");
    }
    struct pev *c = pev_of("\"c\"");
    CHECK(done && !strcmp(c->reason, "cancelled") && c->toks.n >= 1 && c->order_ok &&
          c->done_tokens == (int64_t)c->toks.n, "pipe cancel: done %d reason %s, %zu tokens",
          done, c->reason, c->toks.n);
    close(pin);      /* EOF: nothing left running, so it exits */
    int st;
    waitpid(pid, &st, 0);
    chat_pid = -1;
    expect_clients = 1;
    close(pout);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "pipe exit status %d", st);
    pev_reset();
    free(line.p);
    free(in.p);
    free(o.p);
    free(rg.text.p);
    free(rm.text.p);
    free(rr.text.p);
    free(rs.text.p);
}

/* ---------------------------------------------------------------- bench */

static double table_value(const char *out, const char *label, const char *key)
{
    const char *l = strstr(out, label);
    REQUIRE(l, "bench: no \"%s\" line in:\n%s", label, out);
    const char *eol = strchr(l, '\n');
    const char *k = key ? strstr(l, key) : l + strlen(label);
    REQUIRE(k && (!eol || k < eol), "bench: no %s on the %s line", key, label);
    if (key)
        k += strlen(key);
    char *end;
    double v = strtod(k, &end);
    REQUIRE(end != k, "bench: no number after %s on the %s line", key ? key : "", label);
    return v;
}

static void test_bench(void)
{
    struct status s0, s1;
    status_settled(&s0);
    const char *argv[] = { bin_ctl, "bench", "--socket", dmn.sock, "-n", "6", "-c", "3",
                           "--new", "4", "--prompt-min", "8", "--prompt-max", "40", NULL };
    struct buf o = {0};
    run_ok(argv, NULL, 0, &o);
    fprintf(stderr, "%s", o.p);
    double tps = table_value(o.p, "tokens/s:", NULL);
    CHECK(tps > 0, "tokens/s %f", tps);
    CHECK(strstr(o.p, "(24 tokens in"), "bench: 6 x 4 tokens:\n%s", o.p);
    static const char *const lines[] = { "time to first token:", "submit -> prefill start:",
                                         "token delivery:", "inter-token latency:",
                                         "time per output token:" };
    for (int i = 0; i < 5; i++) {
        double p50 = table_value(o.p, lines[i], "p50"), p99 = table_value(o.p, lines[i], "p99");
        CHECK(p50 > 0 && p99 >= p50, "%s p50 %f p99 %f", lines[i], p50, p99);
    }
    /* A request's mean gap lies within its gaps, so the requests' means
     * cannot spread wider than the gaps themselves. */
    const double itl99 = table_value(o.p, "inter-token latency:", "p99");
    const double tpot50 = table_value(o.p, "time per output token:", "p50");
    CHECK(tpot50 <= itl99, "time per output token p50 %f above the inter-token p99 %f", tpot50,
          itl99);
    /* 6 requests of 4 tokens, 3 in flight: each gets 3 decode rows, so
     * some steps decode only (at most 3 rows), and the 6 prompts need at
     * least one step with prompt tokens. */
    const double dsteps = table_value(o.p, "decode-only steps:", NULL);
    const double dbatch = table_value(o.p, "decode-only steps:", "batch");
    const double psteps = table_value(o.p, "steps with prompts:", NULL);
    const double ptok = table_value(o.p, "steps with prompts:", ",");
    CHECK(dsteps >= 1 && dbatch >= 1 && dbatch <= 3 && psteps >= 1 && ptok >= 1,
          "bench's step split: %.0f decode steps at batch %.1f, %.0f with %.1f prompt tokens",
          dsteps, dbatch, psteps, ptok);
    status_settled(&s1);
    CHECK(s1.done - s0.done == 6 && s1.generated - s0.generated == 24,
          "bench: %" PRId64 " requests, %" PRId64 " tokens", s1.done - s0.done,
          s1.generated - s0.generated);

    const char *jargv[] = { bin_ctl, "bench", "--socket", dmn.sock, "-n", "5", "-c", "2",
                            "--clients", "2", "--new", "3", "--prompt-min", "4",
                            "--prompt-max", "20", "--json", "--poll", NULL };
    run_ok(jargv, NULL, 0, &o);
    json_object *j = parse_json(o.p, "bench --json --poll");
    const char *w = "bench --json --poll";
    json_object *poll_v;
    CHECK(json_object_object_get_ex(j, "poll", &poll_v) && json_object_get_boolean(poll_v) &&
          get_num(j, "wake_floor_p50_us", w) > 0, "bench --poll: %s", o.p);
    CHECK(get_int(j, "requests", w) == 5 && get_int(j, "concurrency", w) == 2 &&
          get_int(j, "clients", w) == 2 && get_int(j, "new_tokens", w) == 3 &&
          get_int(j, "tokens", w) == 15, "bench --json counts: %s", o.p);
    CHECK(get_num(j, "wall_s", w) > 0 && get_num(j, "tokens_per_s", w) > 0, "%s", o.p);
    const int64_t steps = get_int(j, "engine_steps", w), dst = get_int(j, "engine_decode_steps", w);
    CHECK(dst >= 1 && get_int(j, "engine_prompt_steps", w) == steps - dst &&
          get_num(j, "engine_decode_batch_mean", w) >= 1 &&
          get_num(j, "engine_decode_batch_mean", w) <= 2 &&
          get_num(j, "engine_decode_time_frac", w) > 0 &&
          get_num(j, "engine_decode_time_frac", w) < 1 &&
          get_num(j, "engine_prompt_step_tokens_mean", w) >= 1 &&
          get_int(j, "engine_preemptions", w) == 0, "bench --json step split: %s", o.p);
    static const char *const keys[] = { "ttft", "submit_to_start", "delivery", "itl", "tpot" };
    for (int i = 0; i < 5; i++) {
        char k50[64], k99[64];
        snprintf(k50, sizeof(k50), "%s_p50_us", keys[i]);
        snprintf(k99, sizeof(k99), "%s_p99_us", keys[i]);
        double p50 = get_num(j, k50, w), p99 = get_num(j, k99, w);
        CHECK(p50 > 0 && p99 >= p50, "%s %f %s %f", k50, p50, k99, p99);
    }
    json_object_put(j);
    free(o.p);
}

/* ---------------------------------------------------------------- errors */

static void expect_exit(const char *const *argv, const char *in, int want, const char *needle)
{
    struct buf o = {0}, e = {0};
    int rc = run_cmd(argv, in, in ? strlen(in) : 0, &o, &e);
    CHECK(rc == want, "%s: exit %d, want %d; stderr: %s", argv_str(argv), rc, want, e.p);
    CHECK(!needle || (e.p && strstr(e.p, needle)), "%s: stderr lacks \"%s\": %s", argv_str(argv),
          needle, e.p);
    free(o.p);
    free(e.p);
}

/* generate's TEXT with stdin piped in: the instruction, a blank line, then
 * stdin, as one user message (the reply equals that of the joined text
 * given as TEXT); --stdin-first swaps them; "-" is stdin alone; an empty
 * stdin adds nothing; stdin past 16 MiB is refused. */
static void test_stdin_text(void)
{
    static const char piped[] = "--- a/x.c\n+++ b/x.c\n+int x;\n";
    struct buf want = {0}, got = {0};
    const char *joined[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24",
                             "Write a commit message\n\n--- a/x.c\n+++ b/x.c\n+int x;\n", NULL };
    run_ok(joined, NULL, 0, &want);
    const char *both[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24", "Write",
                           "a", "commit", "message", NULL };
    run_ok(both, piped, sizeof piped - 1, &got);
    CHECK(want.p && got.p && !strcmp(want.p, got.p), "TEXT + stdin: %s, want %s", got.p, want.p);
    const char *swapped_joined[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24",
                                     "--", "--- a/x.c\n+++ b/x.c\n+int x;\n\n\nWrite", NULL };
    run_ok(swapped_joined, NULL, 0, &want);
    const char *swapped[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24",
                              "--stdin-first", "Write", NULL };
    run_ok(swapped, piped, sizeof piped - 1, &got);
    CHECK(!strcmp(want.p, got.p), "--stdin-first: %s, want %s", got.p, want.p);
    const char *text[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24", "hello",
                           NULL };
    run_ok(text, NULL, 0, &want);
    const char *dash[] = { bin_ctl, "generate", "--socket", dmn.sock, "--max-new", "24", "-",
                           NULL };
    run_ok(dash, "hello", 5, &got);
    CHECK(!strcmp(want.p, got.p), "TEXT -: %s, want %s", got.p, want.p);
    /* A differing reply proves the stdin was read at all. */
    run_ok(text, "more", 4, &got);
    CHECK(strcmp(want.p, got.p), "TEXT with stdin \"more\" replied as to TEXT alone");
    /* tokenize and detokenize without a tokenizer named ask the daemon for
     * its model's; with none there, they say how to give one. */
    unsetenv("LLAMA8_TOKENIZER");
    unsetenv("LLAMA8_MODEL");
    const char *tk_named[] = { bin_ctl, "tokenize", "--tokenizer", model, "Say hi", NULL };
    const char *tk_asked[] = { bin_ctl, "tokenize", "--socket", dmn.sock, "Say hi", NULL };
    run_ok(tk_named, NULL, 0, &want);
    run_ok(tk_asked, NULL, 0, &got);
    CHECK(!strcmp(want.p, got.p) && strlen(got.p) > 2, "tokenize through the daemon: %s, want %s",
          got.p, want.p);
    const char *dt_asked[] = { bin_ctl, "detokenize", "--socket", dmn.sock, "46864 15960", NULL };
    run_ok(dt_asked, NULL, 0, &got);
    CHECK(!strcmp(got.p, "Say hi"), "detokenize through the daemon: '%s'", got.p);
    const char *tk_none[] = { bin_ctl, "tokenize", "--socket", "/nonexistent/x.sock", "hi", NULL };
    expect_exit(tk_none, NULL, 2, "no tokenizer: pass --tokenizer FILE, set LLAMA8_TOKENIZER, "
                                  "or start llama8d");
    size_t big = (16u << 20) + 1;
    char *huge = malloc(big);
    REQUIRE(huge, "malloc");
    memset(huge, 'a', big);
    struct buf e = {0};
    int rc = run_cmd(text, huge, big, &got, &e);
    CHECK(rc == 1 && e.p && strstr(e.p, "stdin is over 16 MiB"), "16 MiB + 1 of stdin: exit %d, %s",
          rc, e.p);
    free(huge);
    buf_free(&e);
    buf_free(&want);
    buf_free(&got);
}

static void test_errors(void)
{
    /* No daemon: a socket path with nobody behind it, and a stale socket
     * file (a daemon that died without removing it). */
    char none[160], stale[160];
    snprintf(none, sizeof(none), "%s/nobody.sock", dmn.dir);
    snprintf(stale, sizeof(stale), "%s/stale.sock", dmn.dir);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, stale);
    REQUIRE(bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind stale");
    close(fd);
    const char *paths[] = { none, stale };
    for (int i = 0; i < 2; i++) {
        const char *g[] = { bin_ctl, "generate", "--socket", paths[i], "hello", NULL };
        expect_exit(g, NULL, 3, "llama8d");
        expect_exit(g, NULL, 3, paths[i]);
        const char *c[] = { bin_ctl, "chat", "--socket", paths[i], NULL };
        expect_exit(c, "hello\n", 3, "llama8d");
        const char *s[] = { bin_ctl, "status", "--socket", paths[i], "--json", NULL };
        expect_exit(s, NULL, 3, "llama8d");
        const char *b[] = { bin_ctl, "bench", "--socket", paths[i], "-n", "1", NULL };
        expect_exit(b, NULL, 3, "llama8d");
        const char *pp[] = { bin_ctl, "pipe", "--socket", paths[i], NULL };
        expect_exit(pp, "{\"id\":1,\"text\":\"hi\"}\n", 3, "llama8d");
    }
    unlink(stale);

    /* Bad command lines: 2, before anything is sent. */
    const char *const bad[][10] = {
        { bin_ctl, "generate", "--bogus", "x", NULL },
        { bin_ctl, "generate", "--max-new", "abc", "x", NULL },
        { bin_ctl, "generate", "--max-new", "0", "x", NULL },
        { bin_ctl, "generate", "--temperature", "hot", "x", NULL },
        { bin_ctl, "generate", "--ids", "1 2 x", NULL },
        { bin_ctl, "generate", "--stop-text", "a\\q", "x", NULL },
        { bin_ctl, "generate", "--stop-text", "", "x", NULL },
        { bin_ctl, "generate", "--ids", "1 2", "--stop-text", "a", NULL },
        { bin_ctl, "chat", "--stop-text", "\\", NULL },
        { bin_ctl, "chat", "--bogus", NULL },
        { bin_ctl, "status", "--bogus", NULL },
        { bin_ctl, "status", "extra", NULL },
        { bin_ctl, "reload", "--json", NULL },
        { bin_ctl, "generate", "--logprobs", "x", NULL },
        { bin_ctl, "chat", "--logprobs", NULL },
        { bin_ctl, "generate", "--messages", "x", NULL },
        { bin_ctl, "generate", "--messages", "--system", "s", NULL },
        { bin_ctl, "pipe", "--bogus", NULL },
        { bin_ctl, "pipe", "extra", NULL },
        { bin_ctl, "bench", "--bogus", NULL },
        { bin_ctl, "bench", "-n", "0", NULL },
        { bin_ctl, "bench", "--prompt-min", "9", "--prompt-max", "8", NULL },
        { bin_ctl, "frobnicate", NULL },
        { bin_ctl, NULL },
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *argv[12];
        int n = 0;
        for (int k = 0; bad[i][k]; k++)
            argv[n++] = bad[i][k];
        /* the live daemon's socket: a usage error must not depend on it */
        if (n >= 2 && strcmp(argv[1], "frobnicate")) {
            argv[n++] = "--socket";
            argv[n++] = dmn.sock;
        }
        argv[n] = NULL;
        expect_exit(argv, "", 2, NULL);
    }

    /* The daemon refuses a request (a prompt id outside the vocabulary): 1,
     * with the daemon's reason. */
    const char *ids[] = { bin_ctl, "generate", "--socket", dmn.sock, "--ids", "128000 999999",
                          NULL };
    expect_exit(ids, NULL, 1, "BAD_TOKEN");
    /* A refusal only the daemon can make (its KV pool is smaller than the
     * request): the record's field and numbers, in words, in text and JSON. */
    {
        struct tdaemon small;
        const char *extra[] = { "--kv-pages", "2", NULL };
        tdaemon_start(&small, bin_d, model, extra);
        char prompt[256] = "", *p = prompt;
        for (int i = 0; i < 40; i++)
            p += sprintf(p, "%d ", 100 + i);
        const char *big[] = { bin_ctl, "generate", "--socket", small.sock, "--ids", prompt,
                              "--max-new", "8", NULL };
        expect_exit(big, NULL, 1,
                    "KV_POOL_TOO_SMALL: prompt + max_new_tokens need 3 KV pages, the daemon's "
                    "pool has 2");
        /* a sampling value out of its range is said with the range */
        const char *cold[] = { bin_ctl, "generate", "--socket", small.sock, "--ids", "1 2",
                               "--max-new", "2", "--temperature", "-1", NULL };
        expect_exit(cold, NULL, 1, "(BAD_PARAMS): temperature -1: 0 (greedy) to 100");
        const char *js[] = { bin_ctl, "generate", "--socket", small.sock, "--ids", prompt,
                             "--max-new", "8", "--json", NULL };
        struct buf o = {0}, e = {0};
        int rc = run_cmd(js, NULL, 0, &o, &e);
        CHECK(rc == 1 && o.p && strstr(o.p, "\"error\":\"KV_POOL_TOO_SMALL\",\"message\":\"prompt + "
              "max_new_tokens need 3 KV pages"), "--json refusal: exit %d, stdout %s", rc, o.p);
        free(o.p);
        free(e.p);
        /* status counts what it sent, by code */
        const char *st[] = { bin_ctl, "status", "--socket", small.sock, NULL };
        memset(&o, 0, sizeof o);
        run_ok(st, NULL, 0, &o);
        CHECK(o.p && strstr(o.p, "\nerrors:    KV_POOL_TOO_SMALL 2 (sent to clients since start)\n"),
              "status after two refusals: %s", o.p);
        free(o.p);
        CHECK(tdaemon_stop(&small) == 0, "the small daemon's exit status");
    }
    /* pipe names the line that is not a request, and what is wrong with it
     * in words, not json-c's. */
    {
        const char *pipe[] = { bin_ctl, "pipe", "--socket", dmn.sock, NULL };
        static const char lines[] = "nope\n\n[1]\n{\"id\":1,\"text\":\"hi\",\"max_new\":1} x\n";
        struct buf o = {0}, e = {0};
        int rc = run_cmd(pipe, lines, sizeof lines - 1, &o, &e);
        CHECK(rc == 0 && o.p &&
              strstr(o.p, "\"line 1 is not a JSON object: not a JSON word (true, false, null), "
                          "at byte 2 ('o')\"") &&
              strstr(o.p, "\"line 3 is JSON array, not an object\"") &&
              strstr(o.p, "\"line 4 is not a JSON object: unexpected character, at byte 34 "
                          "('x')\""), "pipe's messages for lines that are not requests: %s", o.p);
        buf_free(&o);
        buf_free(&e);
    }
    /* --wait: a daemon that is not there is waited for, then given up on;
     * one that comes up meanwhile (here: its socket linked to the path
     * being tried, a second in) is used. */
    {
        const char *gone[] = { bin_ctl, "generate", "--socket", "/nonexistent/x.sock",
                               "--wait=1", "hi", NULL };
        uint64_t t0 = t_now_ms();
        expect_exit(gone, NULL, 3, "waiting up to 1 s for llama8d at /nonexistent/x.sock");
        CHECK(t_now_ms() - t0 >= 1000, "--wait=1 gave up after %llu ms",
              (unsigned long long)(t_now_ms() - t0));
        char later[160], out_path[160];
        snprintf(later, sizeof later, "%s/later.sock", tmpdir);
        snprintf(out_path, sizeof out_path, "%s/later.out", tmpdir);
        pid_t kid = fork();
        REQUIRE(kid >= 0, "fork");
        if (kid == 0) {
            int out = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
            if (out < 0 || dup2(out, 1) != 1)
                _exit(127);
            execl(bin_ctl, bin_ctl, "generate", "--socket", later, "--wait=60", "--max-new", "4",
                  "hi", (char *)NULL);
            _exit(127);
        }
        usleep(1000000);
        REQUIRE(symlink(dmn.sock, later) == 0, "symlink: %s", strerror(errno));
        int st = -1;
        waitpid(kid, &st, 0);
        struct stat sb;
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && stat(out_path, &sb) == 0 && sb.st_size > 1,
              "--wait=60 for a daemon that comes up: status %d, %lld bytes out", st,
              (long long)(stat(out_path, &sb) == 0 ? sb.st_size : -1));
        unlink(later);
        unlink(out_path);
    }
    /* A 64-position context: an unset --max-new is what fits after the
     * prompt (36 tokens: 28), in generate and in pipe; an explicit one
     * that does not fit is refused with the limit. */
    {
        struct tdaemon small;
        const char *extra[] = { "--max-ctx", "64", NULL };
        tdaemon_start(&small, bin_d, model, extra);
        const char *gen[] = { bin_ctl, "generate", "--socket", small.sock, "--stats", "hi", NULL };
        struct buf o = {0}, e = {0};
        int rc = run_cmd(gen, NULL, 0, &o, &e);
        CHECK(rc == 0 && e.p && strstr(e.p, "36 prompt tokens") && strstr(e.p, "28 generated"),
              "generate with an unset --max-new in a 64-position context: exit %d, stderr %s", rc,
              e.p);
        buf_free(&o);
        buf_free(&e);
        const char *pipe[] = { bin_ctl, "pipe", "--socket", small.sock, NULL };
        static const char line[] = "{\"id\":1,\"text\":\"hi\"}\n";
        rc = run_cmd(pipe, line, sizeof line - 1, &o, &e);
        CHECK(rc == 0 && o.p &&
              strstr(o.p, "\"event\":\"done\",\"id\":1,\"reason\":\"length\",\"tokens\":28,"),
              "pipe with an unset max_new in a 64-position context: exit %d, stdout %s", rc, o.p);
        buf_free(&o);
        buf_free(&e);
        const char *big[] = { bin_ctl, "generate", "--socket", small.sock, "--max-new", "100", "hi",
                              NULL };
        expect_exit(big, NULL, 1, "max_new_tokens 100: the daemon takes 1 to 63");
        CHECK(tdaemon_stop(&small) == 0, "the 64-position daemon's exit status");
    }
    /* --help: 0 everywhere. */
    static const char *const cmds[] = { "generate", "chat", "pipe", "status", "bench",
                                        "tokenize", "detokenize" };
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        const char *h[] = { bin_ctl, cmds[i], "--help", NULL };
        expect_exit(h, NULL, 0, NULL);
    }
}

/* ---------------------------------------------------------------- main */

/* From the model's config.json: the eos ids, and a KV page's elements. */
static void load_config(void)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/config.json", model);
    json_object *c = json_object_from_file(path);
    REQUIRE(c, "%s: %s", path, json_util_get_last_err());
    json_object *e = get(c, "eos_token_id", json_type_array, path);
    for (size_t i = 0; i < json_object_array_length(e) && n_eos < 8; i++)
        eos_ids[n_eos++] = (uint32_t)json_object_get_int64(json_object_array_get_idx(e, i));
    const int64_t head_dim =
        get_int(c, "hidden_size", path) / get_int(c, "num_attention_heads", path);
    page_elems = get_int(c, "num_hidden_layers", path) * 2 *
                 get_int(c, "num_key_value_heads", path) * PAGE * head_dim;
    json_object_put(c);
    REQUIRE(n_eos > 0, "no eos ids");
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: %s llama8d llama8ctl llama8-run llama8-mkmodel tokenizer.json\n",
                argv[0]);
        return 1;
    }
    bin_d = argv[1];
    bin_ctl = argv[2];
    bin_run = argv[3];
    bin_mk = argv[4];
    /* Only what the command line says: no tokenizer or socket from outside. */
    unsetenv("LLAMA8_SOCKET");
    unsetenv("LLAMA8_TOKENIZER");
    unsetenv("LLAMA8_MODEL");
    signal(SIGPIPE, SIG_IGN);
    atexit(cleanup);
    signal(SIGTERM, on_signal);     /* meson's timeout */
    signal(SIGINT, on_signal);

    REQUIRE(mkdtemp(tmpdir), "mkdtemp");
    snprintf(model, sizeof(model), "%s/model", tmpdir);
    const char *mk[] = { bin_mk, "--preset", "tiny", "--seed", "1", "--out", model,
                         "--tokenizer", argv[5], NULL };
    struct buf o = {0};
    run_ok(mk, NULL, 0, &o);
    free(o.p);
    load_config();

    tdaemon_start(&dmn, bin_d, model, NULL);
    struct status s;
    status_settled(&s);
    CHECK(s.done == 0 && s.generated == 0 && s.prompt == 0 && s.cached == 0 &&
          s.pages_used == 0, "fresh daemon: done %" PRId64 " generated %" PRId64, s.done,
          s.generated);

    test_status_text();
    test_clients();
    test_generate();
    test_logprobs();
    test_stop_text();
    test_chat();
    test_pipe();
    test_bench();
    test_errors();
    test_stdin_text();

    status_settled(&s);
    CHECK(s.pages_used == 0, "pages still used after everything finished: %" PRId64,
          s.pages_used);
    int st = tdaemon_stop(&dmn);
    CHECK(st == 0, "llama8d exit status %d", st);
    if (t_failures)
        fprintf(stderr, "%d failure(s)\n", t_failures);
    return t_failures ? 1 : 0;
}
