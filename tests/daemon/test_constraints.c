/* test_constraints: constrained decoding through the real llama8d, spoken
 * by hand (ipc_raw.h) so that every field of GenerateRequest's constraint
 * can be sent as a client library never would.
 *
 * On a synthetic checkpoint with the real vocabulary (random weights: the
 * model has no wish to follow any grammar, which is the hard case):
 *  - GBNF, regex, JSON Schema and JSON constraints, greedy and sampled: the
 *    reply's bytes are in the language (whole when the request ended with
 *    an eos id, a prefix when it ran out of tokens), checked with the
 *    reference matcher l8g_grammar_accepts;
 *  - constrained and unconstrained requests in one batch: the unconstrained
 *    streams are token for token those of a run alone;
 *  - a grammar that does not compile: an Error datagram with the request
 *    id, the line and the column, then the ERROR event BAD_GRAMMAR; the
 *    daemon goes on serving;
 *  - a constraint's text past the arena, one over 1 MiB, JSON with text,
 *    an unknown kind: each its error;
 *  - a grammar whose reply is complete while the eos ids are ignored:
 *    DONE_GRAMMAR.
 * argv: llama8d llama8-mkmodel tokenizer.json */
#include "ipc_raw.h"

#include <json-c/json.h>
#include <spawn.h>

#include "grammar.h"
#include "llama8_tokenizer.h"

static const char *bin_d, *bin_mk, *tok_json;
static char tmpdir[] = "/tmp/l8cons-XXXXXX";
static char model[128];
static struct tdaemon dmn;
static l8tok *tok;

static void cleanup(void)
{
    if (dmn.pid > 0)
        tdaemon_stop(&dmn);
    t_rm_tree(tmpdir);
}

/* A request's result. */
struct reply {
    uint32_t tok[1024];
    uint32_t n;
    int done;       /* L8_DONE_*, -1 none */
    int error;      /* L8_ERR_*, 0 none */
    uint32_t field;
};

/* The arena: each request id (mod 16) has its own 64 KiB region (prompt, text, message). */
#define REGION (64u << 10)

static void submit(struct raw *r, uint64_t id, const uint32_t *prompt, uint32_t n_prompt,
                   int kind, const char *text, uint32_t text_off_override, uint32_t text_len,
                   float temperature, uint64_t seed, uint32_t max_new, bool ignore_eos)
{
    uint32_t base = (uint32_t)((id % 16) * REGION);
    memcpy(r->arena + base, prompt, n_prompt * 4);
    uint32_t toff = base + 4096;
    if (text && text_len <= REGION - 8192)
        memcpy(r->arena + toff, text, text_len);
    Llama8__Sampling s = LLAMA8__SAMPLING__INIT;
    s.temperature = temperature;
    s.seed = seed;
    Llama8__GenerateRequest g = LLAMA8__GENERATE_REQUEST__INIT;
    g.request_id = id;
    g.sampling = &s;
    g.max_new_tokens = max_new;
    g.prompt_offset = base;
    g.prompt_count = n_prompt;
    g.ignore_eos = ignore_eos;
    g.constraint = (Llama8__ConstraintKind)kind;
    g.constraint_offset = text_off_override ? text_off_override : toff;
    g.constraint_len = text_len;
    size_t n = llama8__generate_request__pack(&g, r->arena + base + REGION - 4096);
    raw_submit(r, L8_SQE_GENERATE, base + REGION - 4096, (uint32_t)n);
}

/* Events until every request of ids [1, n] ended. */
static void collect(struct raw *r, struct reply *rep, uint32_t n)
{
    for (uint32_t i = 1; i <= n; i++)
        rep[i] = (struct reply){ .done = -1 };
    uint32_t ended = 0;
    struct l8_event ev;
    while (ended < n && raw_event(r, &ev, 120000)) {
        if (ev.request_id < 1 || ev.request_id > n)
            continue;
        struct reply *p = &rep[ev.request_id];
        if (ev.kind == L8_EV_TOKEN && p->n < 1024)
            p->tok[p->n++] = ev.token;
        else if (ev.kind == L8_EV_DONE)
            p->done = ev.reason, ended++;
        else if (ev.kind == L8_EV_ERROR)
            p->error = ev.code, p->field = ev.reason, ended++;
    }
    CHECK(ended == n, "%u of %u requests ended", ended, n);
}

/* The reply's bytes (eos ids left out), NUL-terminated in a static buffer. */
static const char *text_of(const struct reply *p, size_t *len)
{
    static char buf[1 << 16];
    size_t n = 0;
    for (uint32_t i = 0; i < p->n; i++) {
        const char *b;
        size_t bl;
        if (l8tok_is_special(tok, p->tok[i]) || l8tok_token_bytes(tok, p->tok[i], &b, &bl) < 0)
            continue;
        if (n + bl < sizeof buf) {
            memcpy(buf + n, b, bl);
            n += bl;
        }
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

static struct l8g_grammar *grammar_of(int kind, const char *text)
{
    char err[L8G_ERRLEN], *gb = NULL;
    const char *g = text;
    if (kind == LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON) {
        g = l8g_json_gbnf;
    } else if (kind == LLAMA8__CONSTRAINT_KIND__CONSTRAINT_REGEX) {
        REQUIRE(l8g_regex_to_gbnf(text, strlen(text), &gb, err) == 0, "%s", err);
        g = gb;
    } else if (kind == LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON_SCHEMA) {
        REQUIRE(l8g_schema_to_gbnf(text, strlen(text), &gb, err) == 0, "%s", err);
        g = gb;
    }
    struct l8g_grammar *gr = NULL;
    REQUIRE(l8g_grammar_parse(g, strlen(g), &gr, err) == 0, "%s", err);
    free(gb);
    return gr;
}

/* Each reply in the language: whole if it ended at an eos id, else a prefix. */
static void check_reply(const char *what, int kind, const char *text, const struct reply *p)
{
    struct l8g_grammar *g = grammar_of(kind, text);
    size_t n;
    const char *t = text_of(p, &n);
    CHECK(!p->error && p->done >= 0, "%s: error %d done %d", what, p->error, p->done);
    bool whole = p->done == L8_DONE_EOS;
    CHECK(p->done == L8_DONE_EOS || p->done == L8_DONE_LENGTH, "%s: ended %d", what, p->done);
    CHECK(l8g_grammar_accepts(g, (const uint8_t *)t, n, !whole), "%s: '%s' (%s) is not in the "
          "language", what, t, whole ? "whole" : "a prefix");
    l8g_grammar_free(g);
}

static void run_or_die(const char *const *argv)
{
    pid_t pid;
    extern char **environ;
    REQUIRE(posix_spawn(&pid, argv[0], NULL, NULL, (char *const *)argv, environ) == 0, "spawn %s",
            argv[0]);
    int st;
    REQUIRE(waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s failed",
            argv[0]);
}

static const uint32_t prompt[] = { 128000, 128006, 882, 128007, 271, 13347, 0, 128009,
                                   128006, 78191, 128007, 271 };
#define N_PROMPT (sizeof prompt / sizeof prompt[0])

static const char yesno[] = "root ::= (\"yes\" | \"no\") (\", \" [a-z]{1,8})?\n";
static const char date_re[] = "[0-9]{4}-[0-9]{2}-[0-9]{2}( [A-Z][a-z]+)?";
static const char person[] =
    "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12},"
    " \"age\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 150}, \"tags\": {\"type\": "
    "\"array\", \"items\": {\"enum\": [\"a\", \"b\"]}, \"maxItems\": 3}}, \"required\": "
    "[\"name\", \"age\"], \"additionalProperties\": false}";

static void test_kinds(void)
{
    struct raw r;
    raw_connect(&r, dmn.sock);
    const struct { int kind; const char *text; } k[] = {
        { LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF, yesno },
        { LLAMA8__CONSTRAINT_KIND__CONSTRAINT_REGEX, date_re },
        { LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON_SCHEMA, person },
        { LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON, NULL },
    };
    /* each kind greedy and sampled, all in one batch with two unconstrained */
    struct reply rep[11];
    for (uint32_t i = 0; i < 8; i++) {
        const char *t = k[i % 4].text;
        submit(&r, i + 1, prompt, N_PROMPT, k[i % 4].kind, t, 0, t ? (uint32_t)strlen(t) : 0,
               i < 4 ? 0.0f : 0.9f, 1000 + i, 120, false);
    }
    submit(&r, 9, prompt, N_PROMPT, 0, NULL, 0, 0, 0.0f, 0, 40, false);
    submit(&r, 10, prompt, N_PROMPT, 0, NULL, 0, 0, 0.8f, 7, 40, false);
    collect(&r, rep, 10);
    int whole = 0;
    for (uint32_t i = 0; i < 8; i++) {
        char what[64];
        snprintf(what, sizeof what, "kind %d %s", k[i % 4].kind, i < 4 ? "greedy" : "sampled");
        check_reply(what, k[i % 4].kind, k[i % 4].text, &rep[i + 1]);
        size_t n;
        const char *t = text_of(&rep[i + 1], &n);
        printf("  %-14s %-6s %.100s%s\n", what, rep[i + 1].done == L8_DONE_EOS ? "whole" : "prefix",
               t, n > 100 ? "..." : "");
        whole += rep[i + 1].done == L8_DONE_EOS;
    }
    printf("constrained replies: 8 in the language, %d whole (ended by an eos id)\n", whole);
    CHECK(whole >= 2, "only %d of 8 constrained replies ended whole", whole);
    /* the unconstrained ones as alone */
    struct reply alone[3];
    submit(&r, 1, prompt, N_PROMPT, 0, NULL, 0, 0, 0.0f, 0, 40, false);
    submit(&r, 2, prompt, N_PROMPT, 0, NULL, 0, 0, 0.8f, 7, 40, false);
    collect(&r, alone, 2);
    for (int i = 0; i < 2; i++)
        CHECK(alone[i + 1].n == rep[9 + i].n &&
              !memcmp(alone[i + 1].tok, rep[9 + i].tok, rep[9 + i].n * 4),
              "unconstrained request %d differs beside constrained ones", i + 1);
    /* the JSON replies parse when whole */
    for (uint32_t i = 3; i < 8; i += 4) {
        size_t n;
        const char *t = text_of(&rep[i + 1], &n);
        if (rep[i + 1].done == L8_DONE_EOS) {
            json_object *o = json_tokener_parse(t);
            CHECK(o, "a whole JSON reply does not parse: %s", t);
            json_object_put(o);
        }
    }
    raw_close(&r);
}

static void test_errors(void)
{
    struct raw r;
    raw_connect(&r, dmn.sock);
    struct reply rep[2];
    /* a grammar that does not compile: the message, then the event */
    const char bad[] = "root ::= \"a\"\n  | b\n";
    submit(&r, 1, prompt, N_PROMPT, LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF, bad, 0,
           (uint32_t)strlen(bad), 0.0f, 0, 8, false);
    Llama8__DaemonMessage *m = raw_recv(r.fd, NULL, 10000);
    CHECK(m && m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR &&
          m->error->code == LLAMA8__ERROR_CODE__BAD_GRAMMAR && m->error->request_id == 1 &&
          strstr(m->error->message, "line 2, column 5: rule 'b' is not defined"),
          "bad grammar: %s", m && m->error ? m->error->message : "no Error datagram");
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    collect(&r, rep, 1);
    CHECK(rep[1].error == L8_ERR_BAD_GRAMMAR, "bad grammar: event %d", rep[1].error);
    /* a schema keyword we do not implement: named */
    const char *uniq = "{\"type\": \"array\", \"uniqueItems\": true}";
    submit(&r, 1, prompt, N_PROMPT, LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON_SCHEMA, uniq, 0,
           (uint32_t)strlen(uniq), 0.0f, 0, 8, false);
    m = raw_recv(r.fd, NULL, 10000);
    CHECK(m && m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR &&
          strstr(m->error->message, "uniqueItems"), "unsupported keyword: %s",
          m && m->error ? m->error->message : "no Error datagram");
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    collect(&r, rep, 1);
    CHECK(rep[1].error == L8_ERR_BAD_GRAMMAR, "unsupported keyword: event %d", rep[1].error);
    /* the text past the arena; longer than 1 MiB; JSON with a text */
    submit(&r, 1, prompt, N_PROMPT, LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF, NULL,
           r.h.arena_size - 4, 16, 0.0f, 0, 8, false);
    collect(&r, rep, 1);
    CHECK(rep[1].error == L8_ERR_BAD_MESSAGE && rep[1].field == L8_EF_CONSTRAINT_RANGE,
          "text past the arena: %d %u", rep[1].error, rep[1].field);
    submit(&r, 1, prompt, N_PROMPT, LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF, NULL, 0,
           L8_MAX_CONSTRAINT + 1, 0.0f, 0, 8, false);
    collect(&r, rep, 1);
    CHECK(rep[1].error == L8_ERR_BAD_GRAMMAR && rep[1].field == L8_EF_CONSTRAINT_LEN,
          "text over 1 MiB: %d %u", rep[1].error, rep[1].field);
    submit(&r, 1, prompt, N_PROMPT, LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON, "{}", 0, 2, 0.0f,
           0, 8, false);
    m = raw_recv(r.fd, NULL, 10000);
    CHECK(m && m->error && strstr(m->error->message, "takes no text"), "JSON with text");
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    collect(&r, rep, 1);
    CHECK(rep[1].error == L8_ERR_BAD_GRAMMAR, "JSON with text: %d", rep[1].error);
    submit(&r, 1, prompt, N_PROMPT, 77, "x", 0, 1, 0.0f, 0, 8, false);
    m = raw_recv(r.fd, NULL, 10000);
    CHECK(m && m->error && strstr(m->error->message, "unknown constraint kind 77"),
          "unknown kind: %s", m && m->error ? m->error->message : "nothing");
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    collect(&r, rep, 1);
    /* complete while the eos ids are ignored: nothing more fits */
    const char one[] = "root ::= \"ok\"";
    submit(&r, 1, prompt, N_PROMPT, LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF, one, 0,
           (uint32_t)strlen(one), 0.0f, 0, 50, true);
    collect(&r, rep, 1);
    size_t n;
    const char *t = text_of(&rep[1], &n);
    CHECK(rep[1].done == L8_DONE_GRAMMAR && !strcmp(t, "ok"), "ignore_eos: done %d, '%s'",
          rep[1].done, t);
    /* and the daemon still serves */
    submit(&r, 1, prompt, N_PROMPT, 0, NULL, 0, 0, 0.0f, 0, 4, false);
    collect(&r, rep, 1);
    CHECK(rep[1].done >= 0 && rep[1].n > 0, "after the errors: done %d", rep[1].done);
    raw_close(&r);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 4, "usage: test_constraints llama8d llama8-mkmodel tokenizer.json");
    bin_d = argv[1];
    bin_mk = argv[2];
    tok_json = argv[3];
    REQUIRE(mkdtemp(tmpdir), "mkdtemp");
    atexit(cleanup);
    snprintf(model, sizeof model, "%s/model", tmpdir);
    const char *mk[] = { bin_mk, "--preset", "tiny", "--seed", "3", "--out", model,
                         "--tokenizer", tok_json, NULL };
    run_or_die(mk);
    REQUIRE(l8tok_load(tok_json, &tok) == 0, "tokenizer");
    tdaemon_start(&dmn, bin_d, model, (const char *const[]){ "--max-batch", "12", NULL });
    test_kinds();
    test_errors();
    CHECK(tdaemon_stop(&dmn) == 0, "llama8d exit status");
    l8tok_free(tok);
    return t_result("test_constraints");
}
