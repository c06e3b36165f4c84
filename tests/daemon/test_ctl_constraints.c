/* test_ctl_constraints: constrained decoding from the client side, against
 * the real llama8d on a synthetic checkpoint with the real Llama 3.1
 * vocabulary (the masks are over its tokens' bytes):
 *   - libllama8client: a GBNF constraint's reply is in the grammar; a text
 *     the daemon cannot compile ends its request with BAD_GRAMMAR and
 *     l8c_request_error gives the daemon's reason (line and column) while
 *     the connection stays (a status round trip, a next request); the
 *     arguments l8c_submit refuses; 1 MiB texts one after another through
 *     the arena (it starts over when empty);
 *   - llama8ctl generate --grammar / --json-schema / --regex /
 *     --json-object: the printed reply, --json's done reason, a bad
 *     grammar's message naming the option, the file and where;
 *   - llama8ctl pipe with "regex", "json_schema", "grammar" keys: replies,
 *     a bad regex's reason in its error event, two constraints refused;
 *   - speculative decoding under constraints: the same replies as without;
 *   - tools: generate --tools --tool-choice required (greedy and seeds: a
 *     valid call of one tool, its tool_call event before done, the text
 *     line), a tool result through --messages ("tool_calls", "tool",
 *     "ipython"), chat's "/tool RESULT", pipe's "tools"/"tool_choice" and
 *     the lines it refuses.
 *
 * argv: llama8d llama8ctl llama8-mkmodel tokenizer.json */
#include "ctl_run.h"

#include <regex.h>
#include <json-c/json.h>

#include "llama8_tokenizer.h"


static const char *bin_d, *bin_ctl, *bin_mk;
static char model[128];
static struct tdaemon dmn;
static l8tok *tok;
static char tmpdir[] = "/tmp/l8cons-XXXXXX";

static const char *const yes_no = "root ::= \"yes\" | \"no\"\n";
/* Parses up to line 2's class, whose range is out of order at column 15. */
static const char *const bad_gbnf = "root ::= \"yes\" | \"no\"\nanswer ::= [z-a]\n";
static const char *const bad_where = "line 2, column 15: class range out of order";

static void cleanup(void)
{
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

/* ---------------------------------------------------------------- processes */

/* One line (len bytes at l) as JSON. */
static json_object *parse_line(const char *l, size_t len)
{
    char *t = strndup(l, len);
    REQUIRE(t, "out of memory");
    json_object *j = json_tokener_parse(t);
    free(t);
    return j;
}

static void write_file(const char *name, const char *text, char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", tmpdir, name);
    t_write_text(path, text);
}

/* ---------------------------------------------------------------- the library */

struct reply {
    uint32_t ids[512];
    uint32_t n;
    int reason;     /* DONE's, or -1 */
    int error;      /* ERROR's code, or 0 */
    char text[4096];
};

static bool is_eos(const struct l8c_info *in, uint32_t t)
{
    for (uint32_t i = 0; i < in->n_eos; i++)
        if (in->eos_ids[i] == t)
            return true;
    return false;
}

/* The events of request id until its DONE or ERROR; the reply's text is
 * its tokens but a final eos, decoded. */
static bool collect(struct l8c_client *c, uint64_t id, struct reply *r)
{
    memset(r, 0, sizeof *r);
    r->reason = -1;
    uint64_t end = t_now_ms() + CMD_TIMEOUT_MS;
    struct l8_event ev[64];
    for (;;) {
        uint64_t now = t_now_ms();
        if (now >= end)
            return false;
        int k = l8c_wait_events(c, ev, 64, (int)(end - now));
        if (k < 0)
            return false;
        for (int i = 0; i < k; i++) {
            if (ev[i].request_id != id)
                continue;
            if (ev[i].kind == L8_EV_TOKEN && r->n < 512)
                r->ids[r->n++] = ev[i].token;
            if (ev[i].kind == L8_EV_ERROR)
                r->error = ev[i].code;
            if (ev[i].kind == L8_EV_DONE)
                r->reason = ev[i].reason;
            if (ev[i].kind != L8_EV_DONE && ev[i].kind != L8_EV_ERROR)
                continue;
            uint32_t n = r->n && is_eos(l8c_info(c), r->ids[r->n - 1]) ? r->n - 1 : r->n;
            char *t = NULL;
            size_t tl = 0;
            if (n && l8tok_decode(tok, r->ids, n, &t, &tl) == 0)
                snprintf(r->text, sizeof r->text, "%.*s", (int)tl, t);
            free(t);
            return true;
        }
    }
}

static const uint32_t prompt[] = { 128000, 3957, 279, 13180, 6437, 30 };   /* bos + some text */
#define N_PROMPT (sizeof prompt / sizeof prompt[0])

static void test_library(void)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(dmn.sock, "test_ctl_constraints", &c, err) == 0, "connect: %s", err);
    struct l8c_params p;
    l8c_params_init(&p);
    CHECK(p.constraint == L8C_CONSTRAINT_NONE && !p.constraint_text && !p.constraint_len,
          "l8c_params_init: a constraint");
    p.max_new_tokens = 16;
    uint64_t id;
    struct reply r;

    /* What l8c_submit refuses before anything is sent. */
    p.constraint_text = "x";
    p.constraint_len = 1;
    CHECK_EQ(l8c_submit(c, prompt, N_PROMPT, &p, &id), -EINVAL);       /* text with NONE */
    p.constraint = L8C_CONSTRAINT_JSON;
    CHECK_EQ(l8c_submit(c, prompt, N_PROMPT, &p, &id), -EINVAL);       /* text with JSON */
    p.constraint = 9;
    p.constraint_text = NULL;
    p.constraint_len = 0;
    CHECK_EQ(l8c_submit(c, prompt, N_PROMPT, &p, &id), -EINVAL);       /* no such kind */
    char why[L8C_ERRLEN];
    CHECK_EQ(l8c_check_request(c, prompt, N_PROMPT, &p, why), L8_ERR_BAD_GRAMMAR);
    p.constraint = L8C_CONSTRAINT_GBNF;
    p.constraint_len = 4;
    CHECK_EQ(l8c_submit(c, prompt, N_PROMPT, &p, &id), -EINVAL);       /* NULL text, a length */
    char *big = malloc(L8_MAX_CONSTRAINT + 2);
    REQUIRE(big, "out of memory");
    p.constraint_text = big;
    p.constraint_len = L8_MAX_CONSTRAINT + 1;
    CHECK_EQ(l8c_submit(c, prompt, N_PROMPT, &p, &id), -EINVAL);
    CHECK(l8c_check_request(c, prompt, N_PROMPT, &p, why) == L8_ERR_BAD_GRAMMAR &&
          strstr(why, "1048577 bytes") && strstr(why, "at most 1048576"),
          "check_request of a text over 1 MiB: %s", why);

    /* A grammar's reply is in it. */
    p.constraint_text = yes_no;
    p.constraint_len = strlen(yes_no);
    CHECK_EQ(l8c_check_request(c, prompt, N_PROMPT, &p, why), 0);
    REQUIRE(l8c_submit(c, prompt, N_PROMPT, &p, &id) == 0, "submit");
    REQUIRE(collect(c, id, &r), "the yes/no request's events");
    CHECK(!r.error && (r.reason == L8_DONE_EOS || r.reason == L8_DONE_GRAMMAR) &&
          (!strcmp(r.text, "yes") || !strcmp(r.text, "no")),
          "GBNF yes|no: error %d reason %d text '%s'", r.error, r.reason, r.text);
    CHECK(l8c_request_error(c, id) == NULL, "a message for a request that worked");

    /* A grammar it cannot compile: the event's code, the reason beside it,
     * and the connection goes on. */
    p.constraint_text = bad_gbnf;
    p.constraint_len = strlen(bad_gbnf);
    REQUIRE(l8c_submit(c, prompt, N_PROMPT, &p, &id) == 0, "submit");
    REQUIRE(collect(c, id, &r), "the bad grammar's events");
    const char *m = l8c_request_error(c, id);
    CHECK(r.error == L8_ERR_BAD_GRAMMAR && r.n == 0, "bad grammar: error %d, %u tokens", r.error,
          r.n);
    CHECK(m && strstr(m, bad_where), "bad grammar's message: %s", m ? m : "(none)");
    CHECK(l8c_request_error(c, id) == m, "asked again: the same message");
    struct l8c_status st;
    CHECK_EQ(l8c_status(c, &st, 10000), 0);
    CHECK(st.errors[L8_ERR_BAD_GRAMMAR] >= 1, "status counts BAD_GRAMMAR: %llu",
          (unsigned long long)st.errors[L8_ERR_BAD_GRAMMAR]);

    /* A status round trip while the reason waits on the socket (the daemon
     * read the request first, most likely): the answer still comes, and the
     * reason is kept. */
    p.constraint = L8C_CONSTRAINT_REGEX;
    p.constraint_text = "(yes";
    p.constraint_len = 4;
    uint64_t id_re;
    REQUIRE(l8c_submit(c, prompt, N_PROMPT, &p, &id_re) == 0, "submit");
    usleep(200000);
    CHECK_EQ(l8c_status(c, &st, 10000), 0);
    REQUIRE(collect(c, id_re, &r), "the bad regex's events");
    m = l8c_request_error(c, id_re);
    CHECK(r.error == L8_ERR_BAD_GRAMMAR && m && strstr(m, "column"), "bad regex: %d %s", r.error,
          m ? m : "(none)");
    CHECK(l8c_request_error(c, id) && strstr(l8c_request_error(c, id), bad_where),
          "the first reason is still kept");

    /* 1 MiB of grammar (its comments) five times in a row: each chunk is
     * about a third of the arena (llama8d sizes it for two of the largest
     * prompt with the largest constraint), so the chunks wrap around its end. */
    p.constraint = L8C_CONSTRAINT_GBNF;
    size_t n = (size_t)snprintf(big, 64, "%s", yes_no);
    for (size_t k = 0; n < L8_MAX_CONSTRAINT; n++, k++)     /* lines of "# xxx...\n" */
        big[n] = k % 80 == 0 ? '#' : k % 80 == 79 ? '\n' : 'x';
    big[L8_MAX_CONSTRAINT - 1] = '\n';
    p.constraint_text = big;
    p.constraint_len = L8_MAX_CONSTRAINT;
    for (int i = 0; i < 5; i++) {
        int rc = l8c_submit(c, prompt, N_PROMPT, &p, &id);
        CHECK(rc == 0, "1 MiB grammar #%d: submit %d (arena %u bytes)", i, rc,
              l8c_info(c)->arena_size);
        if (rc)
            break;
        REQUIRE(collect(c, id, &r), "the 1 MiB grammar's events");
        CHECK(!r.error && (!strcmp(r.text, "yes") || !strcmp(r.text, "no")),
              "1 MiB grammar #%d: error %d (%s) text '%s'", i, r.error,
              r.error ? l8c_request_error(c, id) : "", r.text);
    }
    free(big);

    /* And plain requests still work on this connection. */
    l8c_params_init(&p);
    p.max_new_tokens = 4;
    REQUIRE(l8c_submit(c, prompt, N_PROMPT, &p, &id) == 0, "submit");
    REQUIRE(collect(c, id, &r), "a plain request's events");
    CHECK(!r.error && r.n >= 1, "plain request after the refusals: error %d, %u tokens", r.error,
          r.n);
    l8c_close(c);
}

/* Speculative decoding under a constraint: each request run with and
 * without it gives the same tokens and the same end (greedy and seeds), and
 * drafts were verified under the constraints (the daemon's counts grew:
 * the regex makes the reply repeat, so the drafts are found and kept). */
static void test_speculation(void)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(dmn.sock, "test_ctl_constraints", &c, err) == 0, "connect: %s", err);
    static const struct { int kind; const char *text; } cons[] = {
        { L8C_CONSTRAINT_REGEX, "(ab |cd ){1,60}x" },
        { L8C_CONSTRAINT_REGEX, "[a-c]{3}( [a-c]{3}){0,40}" },
        { L8C_CONSTRAINT_JSON, NULL },
        { L8C_CONSTRAINT_JSON_SCHEMA, "{\"type\":\"array\",\"items\":{\"enum\":[\"red\","
                                      "\"green\",\"blue\"]},\"maxItems\":30}" },
        { L8C_CONSTRAINT_GBNF, "root ::= (\"yes, \" | \"no, \")+ \"done\"\n" },
    };
    struct l8c_status st0, st1;
    REQUIRE(l8c_status(c, &st0, 10000) == 0, "status");
    uint32_t same = 0, runs = 0;
    for (size_t i = 0; i < sizeof cons / sizeof cons[0]; i++)
        for (uint64_t seed = 0; seed < 3; seed++) {
            struct reply r[2];
            for (int off = 0; off < 2; off++) {
                struct l8c_params p;
                l8c_params_init(&p);
                p.max_new_tokens = 80;
                p.constraint = cons[i].kind;
                p.constraint_text = cons[i].text;
                p.constraint_len = cons[i].text ? strlen(cons[i].text) : 0;
                p.temperature = seed ? 0.9f : 0.0f;
                p.seed = seed;
                p.no_speculate = off;
                uint64_t id;
                REQUIRE(l8c_submit(c, prompt, N_PROMPT, &p, &id) == 0, "submit");
                REQUIRE(collect(c, id, &r[off]), "constraint %zu seed %llu: events", i,
                        (unsigned long long)seed);
            }
            runs++;
            bool eq = r[0].n == r[1].n && !memcmp(r[0].ids, r[1].ids, r[0].n * 4) &&
                      r[0].reason == r[1].reason && !r[0].error && !r[1].error;
            same += eq;
            CHECK(eq, "constraint %zu seed %llu: %u tokens (reason %d) speculating, %u (reason "
                  "%d) not: '%s' vs '%s'", i, (unsigned long long)seed, r[0].n, r[0].reason,
                  r[1].n, r[1].reason, r[0].text, r[1].text);
        }
    REQUIRE(l8c_status(c, &st1, 10000) == 0, "status");
    printf("speculation under constraints: %u of %u replies the same; %llu drafted, %llu "
           "accepted\n", same, runs, (unsigned long long)(st1.draft_tokens - st0.draft_tokens),
           (unsigned long long)(st1.draft_accepted - st0.draft_accepted));
    CHECK(st1.draft_accepted - st0.draft_accepted > 20, "too few drafts kept under constraints");

    /* The same sampled request twice: the second drafts from the first's
     * reply (the uid's history) and keeps most of them; the same tokens. */
    struct reply r[2];
    uint64_t acc[2];
    for (int i = 0; i < 2; i++) {
        struct l8c_params p;
        l8c_params_init(&p);
        p.max_new_tokens = 120;
        p.ignore_eos = true;
        p.temperature = 1.0f;
        p.seed = 77;
        uint64_t id;
        REQUIRE(l8c_status(c, &st0, 10000) == 0, "status");
        REQUIRE(l8c_submit(c, prompt, N_PROMPT, &p, &id) == 0, "submit");
        REQUIRE(collect(c, id, &r[i]), "sampled request %d: events", i);
        REQUIRE(l8c_status(c, &st1, 10000) == 0, "status");
        acc[i] = st1.draft_accepted - st0.draft_accepted;
    }
    printf("speculation from the uid's history: first reply %u tokens, %llu drafts accepted; "
           "the same request again %llu\n", r[0].n, (unsigned long long)acc[0],
           (unsigned long long)acc[1]);
    CHECK(r[0].n == 120 && r[1].n == 120 && !memcmp(r[0].ids, r[1].ids, 120 * 4),
          "the repeated request's reply differs");
    CHECK(acc[1] >= acc[0] + 60, "the repeated request took few drafts from the first's reply");
    l8c_close(c);
}

/* ---------------------------------------------------------------- llama8ctl generate */

/* The done event of generate --json's output, and the concatenated text. */
static json_object *json_lines(const char *out, struct buf *text, json_object **done)
{
    json_object *all = json_object_new_array();
    *done = NULL;
    for (const char *l = out; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        json_object *j = parse_line(l, len);
        REQUIRE(j, "not JSON: %.*s", (int)len, l);
        json_object_array_add(all, j);
        json_object *ev, *t;
        if (json_object_object_get_ex(j, "text", &t))
            buf_add(text, json_object_get_string(t), (size_t)json_object_get_string_len(t));
        if (json_object_object_get_ex(j, "event", &ev) &&
            (!strcmp(json_object_get_string(ev), "done") ||
             !strcmp(json_object_get_string(ev), "error")))
            *done = j;
        l += len + (nl ? 1 : 0);
    }
    return all;
}

static const char *str_of(json_object *o, const char *key)
{
    json_object *v;
    return o && json_object_object_get_ex(o, key, &v) ? json_object_get_string(v) : "";
}

static void test_generate(void)
{
    char g[256], bad[256], schema[256];
    write_file("yesno.gbnf", yes_no, g, sizeof g);
    write_file("bad.gbnf", bad_gbnf, bad, sizeof bad);
    write_file("person.json", "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"}},"
               "\"required\":[\"ok\"],\"additionalProperties\":false}", schema, sizeof schema);
    struct buf o = {0}, e = {0};
    int rc;

    /* Greedy and sampled with a few seeds: "yes" or "no" and nothing else. */
    static const char *const seeds[] = { NULL, "1", "2", "3" };
    for (size_t i = 0; i < sizeof seeds / sizeof seeds[0]; i++) {
        const char *argv[16] = { bin_ctl, "generate", "--socket", dmn.sock, "--grammar", g,
                                 "--max-new", "16" };
        int n = 8;
        if (seeds[i]) {
            argv[n++] = "--temperature";
            argv[n++] = "1.5";
            argv[n++] = "--seed";
            argv[n++] = seeds[i];
        }
        argv[n++] = "Is the sky blue?";
        argv[n] = NULL;
        rc = run_cmd(argv, NULL, 0, &o, &e);
        CHECK(rc == 0 && (!strcmp(o.p, "yes\n") || !strcmp(o.p, "no\n")),
              "%s: exit %d, stdout '%s', stderr %s", argv_str(argv), rc, o.p, e.p);
        buf_free(&o);
        buf_free(&e);
    }

    /* --json: the text in the token events, done with eos (the grammar's
     * end, where the eos ids are allowed) or grammar. */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--grammar", g,
                               "--json", "--max-new", "16", "Yes or no?", NULL };
        rc = run_cmd(argv, NULL, 0, &o, &e);
        struct buf text = {0};
        buf_add(&text, "", 0);
        json_object *done, *all = json_lines(o.p, &text, &done);
        CHECK(rc == 0 && !strcmp(str_of(done, "event"), "done") &&
              (!strcmp(str_of(done, "reason"), "eos") ||
               !strcmp(str_of(done, "reason"), "grammar")) &&
              (!strcmp(text.p, "yes") || !strcmp(text.p, "no")),
              "--grammar --json: exit %d text '%s' out %s", rc, text.p, o.p);
        json_object_put(all);
        buf_free(&text);
        buf_free(&o);
        buf_free(&e);
    }

    /* --ignore-eos: the grammar's end ends the reply, reason "grammar"
     * (DONE_GRAMMAR). (llama8d lets one end id through as a token there
     * first: the text is only required to start with the answer.) */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--grammar", g,
                               "--ignore-eos", "--json", "--max-new", "16", "Yes or no?", NULL };
        rc = run_cmd(argv, NULL, 0, &o, &e);
        struct buf text = {0};
        buf_add(&text, "", 0);
        json_object *done, *all = json_lines(o.p, &text, &done);
        CHECK(rc == 0 && !strcmp(str_of(done, "event"), "done") &&
              !strcmp(str_of(done, "reason"), "grammar") &&
              (!strncmp(text.p, "yes", 3) || !strncmp(text.p, "no", 2)),
              "--grammar --ignore-eos --json: exit %d text '%s' out %s", rc, text.p, o.p);
        json_object_put(all);
        buf_free(&text);
        buf_free(&o);
        buf_free(&e);
    }

    /* A bad grammar: the option, the file and the daemon's reason; exit 1. */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--grammar", bad,
                               "hello", NULL };
        char want[512];
        snprintf(want, sizeof want, "llama8ctl: --grammar %s: ", bad);
        rc = run_cmd(argv, NULL, 0, &o, &e);
        CHECK(rc == 1 && strstr(e.p, want) && strstr(e.p, bad_where) && !o.p[0],
              "bad grammar: exit %d, stderr %s, stdout %s", rc, e.p, o.p);
        buf_free(&o);
        buf_free(&e);
        const char *js[] = { bin_ctl, "generate", "--socket", dmn.sock, "--grammar", bad,
                             "--json", "hello", NULL };
        rc = run_cmd(js, NULL, 0, &o, &e);
        struct buf text = {0};
        json_object *done, *all = json_lines(o.p, &text, &done);
        CHECK(rc == 1 && !strcmp(str_of(done, "event"), "error") &&
              !strcmp(str_of(done, "error"), "BAD_GRAMMAR") &&
              strstr(str_of(done, "message"), bad_where),
              "bad grammar --json: exit %d, stdout %s", rc, o.p);
        json_object_put(all);
        buf_free(&text);
        buf_free(&o);
        buf_free(&e);
        const char *re[] = { bin_ctl, "generate", "--socket", dmn.sock, "--regex", "(a|b",
                             "hello", NULL };
        rc = run_cmd(re, NULL, 0, &o, &e);
        CHECK(rc == 1 && strstr(e.p, "llama8ctl: --regex: ") && strstr(e.p, "column"),
              "bad regex: exit %d, stderr %s", rc, e.p);
        buf_free(&o);
        buf_free(&e);
    }

    /* --regex: the whole reply matches. */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--regex",
                               "[0-9]{2}-(yes|no)", "--max-new", "24", "Answer.", NULL };
        rc = run_cmd(argv, NULL, 0, &o, &e);
        regex_t rx;
        REQUIRE(regcomp(&rx, "^[0-9]{2}-(yes|no)\n$", REG_EXTENDED | REG_NOSUB) == 0, "regcomp");
        CHECK(rc == 0 && regexec(&rx, o.p, 0, NULL, 0) == 0, "--regex: exit %d, stdout '%s' %s",
              rc, o.p, e.p);
        regfree(&rx);
        buf_free(&o);
        buf_free(&e);
    }

    /* --json-schema: an object with exactly "ok", a boolean. */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--json-schema", schema,
                               "--max-new", "48", "Is it ok?", NULL };
        rc = run_cmd(argv, NULL, 0, &o, &e);
        json_object *j = rc == 0 ? json_tokener_parse(o.p) : NULL, *ok = NULL;
        CHECK(j && json_object_is_type(j, json_type_object) &&
              json_object_object_length(j) == 1 && json_object_object_get_ex(j, "ok", &ok) &&
              json_object_is_type(ok, json_type_boolean),
              "--json-schema: exit %d, stdout '%s' %s", rc, o.p, e.p);
        json_object_put(j);
        buf_free(&o);
        buf_free(&e);
    }

    /* --json-object: what is printed parses as JSON, or, where max-new cut
     * it, is the start of a JSON text. Tries seeds until two replies are
     * whole (a random model's strings and numbers may run on: about one in
     * four seeds ends within 64 tokens), each checked. */
    int whole = 0, tried = 0;
    for (int s = 0; s < 40 && whole < 2; s++, tried++) {
        char seed[16];
        snprintf(seed, sizeof seed, "%d", s);
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--json-object",
                               "--max-new", "64", "--temperature", "1", "--seed", seed, "--json",
                               "Some JSON, please.", NULL };
        rc = run_cmd(argv, NULL, 0, &o, &e);
        struct buf text = {0};
        buf_add(&text, "", 0);
        json_object *done, *all = json_lines(o.p, &text, &done);
        const char *reason = str_of(done, "reason");
        struct json_tokener *tk = json_tokener_new();
        json_object *j = json_tokener_parse_ex(tk, text.p, (int)text.n);
        enum json_tokener_error je = json_tokener_get_error(tk);
        size_t used = json_tokener_get_parse_end(tk);
        if (!strcmp(reason, "length")) {
            /* a prefix: json-c wants more, or a whole value already */
            CHECK(rc == 0 && (je == json_tokener_continue || (j && je == json_tokener_success)),
                  "--json-object cut at max-new: not the start of JSON: '%s'", text.p);
        } else {
            whole++;
            bool rest_blank = true;
            for (size_t k = used; k < text.n; k++)
                rest_blank &= strchr(" \t\r\n", text.p[k]) != NULL;
            CHECK(rc == 0 && (!strcmp(reason, "eos") || !strcmp(reason, "grammar")) && j &&
                  je == json_tokener_success && rest_blank,
                  "--json-object: exit %d, reason %s, not one JSON value: '%s'", rc, reason,
                  text.p);
        }
        json_object_put(j);
        json_tokener_free(tk);
        json_object_put(all);
        buf_free(&text);
        buf_free(&o);
        buf_free(&e);
    }
    CHECK(whole == 2, "--json-object: %d of %d seeds gave a whole JSON value in 64 tokens",
          whole, tried);
}

/* ---------------------------------------------------------------- llama8ctl pipe */

static void test_pipe(void)
{
    const char *in =
        "{\"id\":1,\"text\":\"Answer.\",\"regex\":\"[0-9]{2}-(yes|no)\",\"max_new\":24}\n"
        "{\"id\":2,\"text\":\"Answer.\",\"regex\":\"(yes\"}\n"
        "{\"id\":3,\"text\":\"Answer.\",\"regex\":\"a\",\"grammar\":\"root ::= \\\"a\\\"\"}\n"
        "{\"id\":4,\"text\":\"Answer.\",\"json_schema\":{\"type\":\"boolean\"},\"max_new\":8}\n"
        "{\"id\":5,\"text\":\"Answer.\",\"json_schema\":\"{\\\"enum\\\":[\\\"x\\\",\\\"y\\\"]}\","
        "\"max_new\":8}\n"
        "{\"id\":6,\"text\":\"Answer.\",\"grammar\":\"root ::= \\\"yes\\\" | \\\"no\\\"\","
        "\"max_new\":8}\n"
        "{\"id\":7,\"text\":\"Answer.\",\"grammar\":7}\n"
        "{\"id\":8,\"text\":\"Answer.\",\"json_object\":false,\"regex\":\"(ok)\",\"max_new\":8}\n";
    const char *argv[] = { bin_ctl, "pipe", "--socket", dmn.sock, NULL };
    struct buf o = {0}, e = {0};
    int rc = run_cmd(argv, in, strlen(in), &o, &e);
    CHECK(rc == 0, "pipe: exit %d, stderr %s", rc, e.p);
    struct { struct buf text; char end[32], msg[512]; } r[9] = {0};
    for (const char *l = o.p; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        json_object *j = parse_line(l, len), *id, *t;
        REQUIRE(j, "pipe: not JSON: %.*s", (int)len, l);
        l += len + (nl ? 1 : 0);
        if (!json_object_object_get_ex(j, "id", &id) || !json_object_is_type(id, json_type_int) ||
            json_object_get_int(id) < 1 || json_object_get_int(id) > 8) {
            CHECK(!strcmp(str_of(j, "event"), "ready"), "pipe: a line without an id: %s",
                  json_object_to_json_string(j));
            json_object_put(j);
            continue;
        }
        int k = json_object_get_int(id);
        if (json_object_object_get_ex(j, "text", &t))
            buf_add(&r[k].text, json_object_get_string(t), (size_t)json_object_get_string_len(t));
        const char *ev = str_of(j, "event");
        if (!strcmp(ev, "done"))
            snprintf(r[k].end, sizeof r[k].end, "done %s", str_of(j, "reason"));
        if (!strcmp(ev, "error")) {
            snprintf(r[k].end, sizeof r[k].end, "error %s", str_of(j, "error"));
            snprintf(r[k].msg, sizeof r[k].msg, "%s", str_of(j, "message"));
        }
        json_object_put(j);
    }
    for (int k = 1; k <= 8; k++)
        buf_add(&r[k].text, "", 0);
    regex_t rx;
    REQUIRE(regcomp(&rx, "^[0-9]{2}-(yes|no)$", REG_EXTENDED | REG_NOSUB) == 0, "regcomp");
    CHECK((!strcmp(r[1].end, "done eos") || !strcmp(r[1].end, "done grammar")) &&
          regexec(&rx, r[1].text.p, 0, NULL, 0) == 0, "pipe regex: %s '%s'", r[1].end,
          r[1].text.p);
    regfree(&rx);
    CHECK(!strcmp(r[2].end, "error BAD_GRAMMAR") && strstr(r[2].msg, "column"),
          "pipe bad regex: %s: %s", r[2].end, r[2].msg);
    CHECK(!strcmp(r[3].end, "error BAD_MESSAGE") &&
          strstr(r[3].msg, "give one constraint at most"), "pipe two constraints: %s: %s",
          r[3].end, r[3].msg);
    CHECK(!strncmp(r[4].end, "done ", 5) &&
          (!strcmp(r[4].text.p, "true") || !strcmp(r[4].text.p, "false")),
          "pipe json_schema object: %s '%s'", r[4].end, r[4].text.p);
    CHECK(!strncmp(r[5].end, "done ", 5) &&
          (!strcmp(r[5].text.p, "\"x\"") || !strcmp(r[5].text.p, "\"y\"")),
          "pipe json_schema string: %s '%s'", r[5].end, r[5].text.p);
    CHECK(!strncmp(r[6].end, "done ", 5) &&
          (!strcmp(r[6].text.p, "yes") || !strcmp(r[6].text.p, "no")),
          "pipe grammar: %s '%s'", r[6].end, r[6].text.p);
    CHECK(!strcmp(r[7].end, "error BAD_PARAMS") && strstr(r[7].msg, "\"grammar\""),
          "pipe grammar not a string: %s: %s", r[7].end, r[7].msg);
    CHECK(!strncmp(r[8].end, "done ", 5) && !strcmp(r[8].text.p, "ok"),
          "pipe json_object false beside regex: %s '%s'", r[8].end, r[8].text.p);
    for (int k = 1; k <= 8; k++)
        buf_free(&r[k].text);
    buf_free(&o);
    buf_free(&e);
}

/* ---------------------------------------------------------------- tools */

/* Two tools whose arguments are enums and booleans: a random-weights
 * model's strings may run on past any max-new, these end. */
static const char *const tools_json =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"description\":"
    "\"Current weather\",\"parameters\":{\"type\":\"object\",\"properties\":{\"city\":"
    "{\"enum\":[\"Paris\",\"Rome\"]},\"celsius\":{\"type\":\"boolean\"}},\"required\":"
    "[\"city\",\"celsius\"],\"additionalProperties\":false}}},"
    "{\"name\":\"lights\",\"parameters\":{\"type\":\"object\",\"properties\":{\"on\":"
    "{\"type\":\"boolean\"}},\"required\":[\"on\"],\"additionalProperties\":false}}]";

/* Whether name and args (an object) are a valid call of one of tools_json's
 * tools: the name is one, the arguments have exactly its required keys. */
static bool valid_call(const char *name, json_object *args)
{
    if (!json_object_is_type(args, json_type_object))
        return false;
    json_object *v;
    if (!strcmp(name, "get_weather"))
        return json_object_object_length(args) == 2 &&
               json_object_object_get_ex(args, "city", &v) &&
               (!strcmp(json_object_get_string(v), "Paris") ||
                !strcmp(json_object_get_string(v), "Rome")) &&
               json_object_object_get_ex(args, "celsius", &v) &&
               json_object_is_type(v, json_type_boolean);
    if (!strcmp(name, "lights"))
        return json_object_object_length(args) == 1 && json_object_object_get_ex(args, "on", &v) &&
               json_object_is_type(v, json_type_boolean);
    return false;
}

/* The reply's text (a call as the model wrote it) against its tool_call
 * event: the same call, parsed with json-c. */
static bool text_is_call(const char *text, const char *name, json_object *args)
{
    json_object *j = json_tokener_parse(text), *n, *p;
    bool ok = j && json_object_object_get_ex(j, "name", &n) &&
              !strcmp(json_object_get_string(n), name) &&
              json_object_object_get_ex(j, "parameters", &p) && json_object_equal(p, args);
    json_object_put(j);
    return ok;
}

/* One generate --json run's events: the tool_call event (or NULL), the done
 * event, the text. Returns the array (to free). */
static json_object *tool_events(const char *out, struct buf *text, json_object **call,
                                json_object **done)
{
    json_object *all = json_lines(out, text, done);
    *call = NULL;
    for (size_t i = 0; i < json_object_array_length(all); i++) {
        json_object *j = json_object_array_get_idx(all, i);
        if (!strcmp(str_of(j, "event"), "tool_call")) {
            CHECK(!*call, "two tool_call events");
            CHECK(i + 1 < json_object_array_length(all) &&
                  !strcmp(str_of(json_object_array_get_idx(all, i + 1), "event"), "done"),
                  "the tool_call event is not just before done");
            *call = j;
        }
    }
    return all;
}

static void test_tools(void)
{
    char tf[256];
    write_file("tools.json", tools_json, tf, sizeof tf);
    struct buf o = {0}, e = {0};
    int rc;

    /* --tool-choice required: greedy and six seeds, each reply a whole valid
     * call (enums and booleans end well within 160 tokens on this model:
     * the JSON Schema grammar's whitespace between tokens is what costs),
     * or, where max-new cut it, the start of a JSON text without a call. */
    int whole = 0, tried = 0;
    for (int s = -1; s < 6; s++, tried++) {
        char seed[16];
        snprintf(seed, sizeof seed, "%d", s);
        const char *argv[20] = { bin_ctl, "generate", "--socket", dmn.sock, "--tools", tf,
                                 "--tool-choice", "required", "--max-new", "160", "--json" };
        int n = 11;
        if (s >= 0) {
            argv[n++] = "--temperature";
            argv[n++] = "1";
            argv[n++] = "--seed";
            argv[n++] = seed;
        }
        argv[n++] = "What is the weather in Paris?";
        argv[n] = NULL;
        rc = run_cmd(argv, NULL, 0, &o, &e);
        struct buf text = {0};
        buf_add(&text, "", 0);
        json_object *call, *done, *all = tool_events(o.p, &text, &call, &done), *args = NULL;
        const char *reason = str_of(done, "reason");
        if (call && json_object_object_get_ex(call, "arguments", &args) &&
            (!strcmp(reason, "eos") || !strcmp(reason, "grammar"))) {
            whole++;
            CHECK(rc == 0 && valid_call(str_of(call, "name"), args) &&
                  text_is_call(text.p, str_of(call, "name"), args),
                  "required, seed %d: not a valid call: %s | %s", s,
                  json_object_to_json_string(call), text.p);
        } else {
            struct json_tokener *tk = json_tokener_new();
            json_object *j = json_tokener_parse_ex(tk, text.p, (int)text.n);
            CHECK(rc == 0 && !call && !strcmp(reason, "length") &&
                  json_tokener_get_error(tk) == json_tokener_continue && !j,
                  "required, seed %d: no call and not a cut-off start: exit %d reason '%s' "
                  "text '%s' %s", s, rc, reason, text.p, e.p);
            CHECK(strstr(e.p, "not a whole tool call"), "required, cut off: no warning: %s", e.p);
            json_object_put(j);
            json_tokener_free(tk);
        }
        json_object_put(all);
        buf_free(&text);
        buf_free(&o);
        buf_free(&e);
    }
    CHECK(whole >= tried - 1, "--tool-choice required: %d of %d replies a whole call in 160 "
          "tokens", whole, tried);

    /* Text mode: the reply, then the "tool call:" line with the call. */
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--tools", tf,
                               "--tool-choice", "required", "--max-new", "160",
                               "Turn on the lights.", NULL };
        rc = run_cmd(argv, NULL, 0, &o, &e);
        char *line = strstr(o.p, "\ntool call: ");
        char name[64] = "";
        json_object *args = NULL;
        if (line) {
            line += strlen("\ntool call: ");
            const char *sp = strchr(line, ' ');
            if (sp && (size_t)(sp - line) < sizeof name) {
                memcpy(name, line, (size_t)(sp - line));
                name[sp - line] = 0;
                args = json_tokener_parse(sp + 1);
            }
        }
        CHECK(rc == 0 && args && valid_call(name, args) && o.p[o.n - 1] == '\n',
              "required, text: exit %d stdout '%s' %s", rc, o.p, e.p);
        if (line)
            line[-(int)strlen("\ntool call: ")] = 0;   /* the reply alone */
        CHECK(args && text_is_call(o.p, name, args), "the reply is not the call shown: '%s'", o.p);
        json_object_put(args);
        buf_free(&o);
        buf_free(&e);
    }

    /* A tool result round trip through --messages: the call as an OpenAI
     * tool_calls message and as the template's content, the result as
     * "tool" and "ipython"; the daemon takes the prompt and replies. The
     * prompt with the result is longer than the one without by its block. */
    static const char *const convs[] = {
        "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":"
        "\"get_weather\",\"arguments\":\"{\\\"city\\\":\\\"Paris\\\",\\\"celsius\\\":true}\"}}]},"
        "{\"role\":\"tool\",\"content\":\"21 degrees\"}]",
        "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"{\\\"name\\\": \\\"get_weather\\\", "
        "\\\"parameters\\\": {\\\"city\\\": \\\"Paris\\\", \\\"celsius\\\": true}}\"},"
        "{\"role\":\"ipython\",\"content\":\"21 degrees\"}]",
        "[{\"role\":\"user\",\"content\":\"Weather in Paris?\"},"
        "{\"role\":\"assistant\",\"content\":\"{\\\"name\\\": \\\"get_weather\\\", "
        "\\\"parameters\\\": {\\\"city\\\": \\\"Paris\\\", \\\"celsius\\\": true}}\"}]",
    };
    int64_t prompt_tokens[3] = {0};
    for (int k = 0; k < 3; k++) {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--tools", tf,
                               "--messages", "--max-new", "8", "--json", NULL };
        rc = run_cmd(argv, convs[k], strlen(convs[k]), &o, &e);
        struct buf text = {0};
        buf_add(&text, "", 0);
        json_object *call, *done, *all = tool_events(o.p, &text, &call, &done);
        json_object *st = json_object_array_length(all) ? json_object_array_get_idx(all, 0) : NULL;
        json_object *pt;
        if (st && json_object_object_get_ex(st, "prompt_tokens", &pt))
            prompt_tokens[k] = json_object_get_int64(pt);
        CHECK(rc == 0 && !strcmp(str_of(done, "event"), "done") &&
              !strcmp(str_of(st, "event"), "started"),
              "--messages round trip %d: exit %d out %s err %s", k, rc, o.p, e.p);
        json_object_put(all);
        buf_free(&text);
        buf_free(&o);
        buf_free(&e);
    }
    CHECK(prompt_tokens[0] == prompt_tokens[1] && prompt_tokens[1] > prompt_tokens[2] + 5,
          "--messages: tool_calls and content calls differ, or the result is missing: %lld %lld "
          "%lld", (long long)prompt_tokens[0], (long long)prompt_tokens[1],
          (long long)prompt_tokens[2]);
    {
        const char *argv[] = { bin_ctl, "generate", "--socket", dmn.sock, "--messages", NULL };
        {
            const char *empty = "[{\"role\":\"assistant\",\"tool_calls\":[]}]";
            rc = run_cmd(argv, empty, strlen(empty), &o, &e);
        }
        CHECK(rc == 1 && strstr(e.p, "\"tool_calls\": an array of one call"),
              "--messages, empty tool_calls: %d %s", rc, e.p);
        buf_free(&o);
        buf_free(&e);
    }

    /* chat: a call, "/tool RESULT", another call (required) after it. */
    {
        const char *argv[] = { bin_ctl, "chat", "--socket", dmn.sock, "--tools", tf,
                               "--tool-choice", "required", "--max-new", "160", NULL };
        rc = run_cmd(argv, "Weather in Rome?\n/tool {\"temp\": 19}\n", strlen("Weather in Rome?\n/tool {\"temp\": 19}\n"), &o, &e);
        int calls = 0;
        for (const char *l = o.p; (l = strstr(l, "tool call: ")); l++)
            calls++;
        CHECK(rc == 0 && calls == 2, "chat /tool: exit %d, %d calls: %s %s", rc, calls, o.p, e.p);
        buf_free(&o);
        buf_free(&e);
        const char *plain[] = { bin_ctl, "chat", "--socket", dmn.sock, "--max-new", "4", NULL };
        rc = run_cmd(plain, "hi\n/tool 1\n", strlen("hi\n/tool 1\n"), &o, &e);
        CHECK(rc == 0 && strstr(e.p, "/tool RESULT answers a reply, with --tools"),
              "chat /tool without --tools: %d %s", rc, e.p);
        buf_free(&o);
        buf_free(&e);
    }

    /* pipe: "tools" + "tool_choice" required with three seeds, and the
     * lines refused. */
    struct buf in = {0};
    char line[4096];
    for (int k = 1; k <= 3; k++) {
        snprintf(line, sizeof line, "{\"id\":%d,\"text\":\"Weather?\",\"tools\":%s,\"tool_choice\":"
                 "\"required\",\"max_new\":160,\"temperature\":1,\"seed\":%d}\n", k, tools_json, k);
        buf_add(&in, line, strlen(line));
    }
    snprintf(line, sizeof line, "{\"id\":4,\"text\":\"x\",\"tools\":%s,\"tool_choice\":\"required\","
             "\"json_object\":true}\n{\"id\":5,\"text\":\"x\",\"tool_choice\":\"none\"}\n"
             "{\"id\":6,\"ids\":[1,2],\"tools\":%s}\n{\"id\":7,\"text\":\"x\",\"tools\":{}}\n"
             "{\"id\":8,\"text\":\"x\",\"tools\":%s,\"tool_choice\":\"maybe\"}\n",
             tools_json, tools_json, tools_json);
    buf_add(&in, line, strlen(line));
    const char *argv[] = { bin_ctl, "pipe", "--socket", dmn.sock, NULL };
    rc = run_cmd(argv, in.p, strlen(in.p), &o, &e);
    CHECK(rc == 0, "pipe tools: exit %d %s", rc, e.p);
    struct { struct buf text; char end[32], msg[512]; json_object *call; bool call_then_done; }
        r[9] = {0};
    int last = 0;
    for (const char *l = o.p; *l;) {
        const char *nl = strchr(l, '\n');
        size_t len = nl ? (size_t)(nl - l) : strlen(l);
        json_object *j = parse_line(l, len), *id, *t;
        REQUIRE(j, "pipe: not JSON: %.*s", (int)len, l);
        l += len + (nl ? 1 : 0);
        if (!json_object_object_get_ex(j, "id", &id) || json_object_get_int(id) < 1 ||
            json_object_get_int(id) > 8) {
            json_object_put(j);
            continue;
        }
        int k = json_object_get_int(id);
        const char *ev = str_of(j, "event");
        if (json_object_object_get_ex(j, "text", &t))
            buf_add(&r[k].text, json_object_get_string(t), (size_t)json_object_get_string_len(t));
        if (!strcmp(ev, "done"))
            snprintf(r[k].end, sizeof r[k].end, "done %s", str_of(j, "reason"));
        if (!strcmp(ev, "done") && r[k].call && last == k)
            r[k].call_then_done = true;
        if (!strcmp(ev, "error")) {
            snprintf(r[k].end, sizeof r[k].end, "error %s", str_of(j, "error"));
            snprintf(r[k].msg, sizeof r[k].msg, "%s", str_of(j, "message"));
        }
        last = !strcmp(ev, "tool_call") ? k : 0;
        if (!strcmp(ev, "tool_call") && !r[k].call)
            r[k].call = json_object_get(j);
        json_object_put(j);
    }
    for (int k = 1; k <= 8; k++)
        buf_add(&r[k].text, "", 0);
    for (int k = 1; k <= 3; k++) {
        json_object *args = NULL;
        if (r[k].call && !strcmp(r[k].end, "done length"))
            continue;   /* cut off: said above for generate, not asked here */
        CHECK(r[k].call && json_object_object_get_ex(r[k].call, "arguments", &args) &&
              valid_call(str_of(r[k].call, "name"), args) &&
              text_is_call(r[k].text.p, str_of(r[k].call, "name"), args) && r[k].call_then_done,
              "pipe tools %d: %s, call %s, text '%s'", k, r[k].end,
              r[k].call ? json_object_to_json_string(r[k].call) : "(none)", r[k].text.p);
    }
    CHECK(!strcmp(r[4].end, "error BAD_MESSAGE") && strstr(r[4].msg, "\"required\" is a constraint"),
          "pipe required + json_object: %s: %s", r[4].end, r[4].msg);
    CHECK(!strcmp(r[5].end, "error BAD_MESSAGE") && strstr(r[5].msg, "without \"tools\""),
          "pipe tool_choice without tools: %s: %s", r[5].end, r[5].msg);
    CHECK(!strcmp(r[6].end, "error BAD_MESSAGE") && strstr(r[6].msg, "chat format"),
          "pipe tools with ids: %s: %s", r[6].end, r[6].msg);
    CHECK(!strcmp(r[7].end, "error BAD_PARAMS") && strstr(r[7].msg, "not a JSON array"),
          "pipe tools not an array: %s: %s", r[7].end, r[7].msg);
    CHECK(!strcmp(r[8].end, "error BAD_PARAMS") && strstr(r[8].msg, "\"tool_choice\""),
          "pipe tool_choice maybe: %s: %s", r[8].end, r[8].msg);
    for (int k = 1; k <= 8; k++) {
        buf_free(&r[k].text);
        json_object_put(r[k].call);
    }
    buf_free(&in);
    buf_free(&o);
    buf_free(&e);
}

/* ---------------------------------------------------------------- main */

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s llama8d llama8ctl llama8-mkmodel tokenizer.json\n", argv[0]);
        return 1;
    }
    bin_d = argv[1];
    bin_ctl = argv[2];
    bin_mk = argv[3];
    unsetenv("LLAMA8_SOCKET");
    unsetenv("LLAMA8_TOKENIZER");
    unsetenv("LLAMA8_MODEL");
    signal(SIGPIPE, SIG_IGN);
    atexit(cleanup);
    signal(SIGTERM, on_signal);
    signal(SIGINT, on_signal);

    REQUIRE(mkdtemp(tmpdir), "mkdtemp");
    snprintf(model, sizeof(model), "%s/model", tmpdir);
    const char *mk[] = { bin_mk, "--preset", "tiny", "--seed", "1", "--out", model,
                         "--tokenizer", argv[4], NULL };
    struct buf o = {0}, e = {0};
    int rc = run_cmd(mk, NULL, 0, &o, &e);
    REQUIRE(rc == 0, "%s: exit %d: %s", argv_str(mk), rc, e.p);
    buf_free(&o);
    buf_free(&e);
    REQUIRE(l8tok_load(argv[4], &tok) == 0, "tokenizer %s", argv[4]);

    const char *extra[] = { "--speculate", "ngram", NULL };   /* test_speculation's */
    tdaemon_start(&dmn, bin_d, model, extra);
    test_library();
    test_speculation();
    test_generate();
    test_pipe();
    test_tools();
    int st = tdaemon_stop(&dmn);
    CHECK(st == 0, "llama8d exit status %d", st);
    l8tok_free(tok);
    return t_result("test_ctl_constraints");
}
