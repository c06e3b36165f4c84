/* openai_gen.c - an OpenAI request on llama8d (openai_gen.h). */
#include "openai_gen.h"

#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

/* How long a cancel waits for the daemon's DONE before the connection is
 * given up (the daemon answers within a step). */
#define CANCEL_WAIT_MS 10000

/* ---------------------------------------------------------------- errors */

void oai_daemon_error(int code, const char *why, const char *param, struct oai_error *err)
{
    static const struct { int code, status; const char *type, *name; } map[] = {
        { L8_ERR_BAD_PARAMS, 400, "invalid_request_error", "invalid_value" },
        { L8_ERR_BAD_TOKEN, 400, "invalid_request_error", "invalid_token" },
        { L8_ERR_PROMPT_TOO_LONG, 400, "invalid_request_error", "context_length_exceeded" },
        { L8_ERR_KV_POOL_TOO_SMALL, 400, "invalid_request_error", "context_length_exceeded" },
        { L8_ERR_EMPTY_PROMPT, 400, "invalid_request_error", "empty_prompt" },
        { L8_ERR_BAD_GRAMMAR, 400, "invalid_request_error", "invalid_schema" },
        { L8_ERR_TOO_MANY_REQUESTS, 429, "rate_limit_error", "too_many_requests" },
        { L8_ERR_TOO_MANY_CLIENTS, 429, "rate_limit_error", "too_many_clients" },
        { L8_ERR_SHUTTING_DOWN, 503, "server_error", "shutting_down" },
        { L8_ERR_PERMISSION_DENIED, 503, "server_error", "permission_denied" },
    };
    for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
        if (map[i].code == code) {
            oai_error_set(err, map[i].status, map[i].type, map[i].name,
                          code == L8_ERR_BAD_GRAMMAR ? param : NULL, "llama8d: %s", why);
            return;
        }
    oai_error_set(err, 500, "server_error", "internal_error", NULL, "llama8d: %s: %s",
                  l8c_err_name(code), why);
}

/* The connection to the daemon failed with rc: what it said, as a 503
 * (it went away) or its own code. */
static int connection_error(struct oai_gen *g, int rc, struct oai_error *err)
{
    int code = 0;
    const char *msg = l8c_last_error(g->c, &code);
    g->broken = true;
    g->running = false;
    if (code && code != L8_ERR_SHUTTING_DOWN)
        oai_daemon_error(code, msg, NULL, err);
    else
        oai_error_set(err, 503, "server_error", "daemon_unavailable", NULL,
                      "llama8d went away during the request (%s)",
                      msg[0] ? msg : strerror(-rc));
    return -1;
}

/* ---------------------------------------------------------------- output */

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap * 2 : 256;
    while (c < need)
        c *= 2;
    char *b = realloc(*buf, c);
    if (!b)
        return -ENOMEM;
    *buf = b;
    *cap = c;
    return 0;
}

static int append(char **buf, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (grow(buf, cap, *len + n + 1) < 0)
        return -ENOMEM;
    if (n)
        memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

#define PYTHON_TAG "<|python_tag|>"

/* Whether held text may still become a tool call: nothing but white
 * space yet, or "{", or <|python_tag|> (or the start of it) first. */
static bool could_be_call(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r'))
        i++;
    size_t rest = n - i, tag = strlen(PYTHON_TAG);
    return rest == 0 || s[i] == '{' ||
           !memcmp(s + i, PYTHON_TAG, rest < tag ? rest : tag);
}

/* Text of the reply: held while it may be a tool call, else new. */
static int add_text(struct oai_gen *g, const char *s, size_t n)
{
    if (!n)
        return 0;
    if (!g->may_call)
        return append(&g->text, &g->text_len, &g->text_cap, s, n);
    if (append(&g->held, &g->held_len, &g->held_cap, s, n) < 0)
        return -ENOMEM;
    if (could_be_call(g->held, g->held_len))
        return 0;
    g->may_call = false;
    int rc = append(&g->text, &g->text_len, &g->text_cap, g->held, g->held_len);
    g->held_len = 0;
    return rc;
}

/* The reply ended: held text is the call, or text after all. */
static int settle_call(struct oai_gen *g)
{
    if (!g->may_call || !g->held_len)
        return 0;
    g->may_call = false;
    if (l8chat_parse_tool_call(g->held, g->held_len, &g->call_name, &g->call_args) == 0) {
        g->finish = OAI_FINISH_TOOL_CALLS;
        return 0;
    }
    int rc = append(&g->text, &g->text_len, &g->text_cap, g->held, g->held_len);
    g->held_len = 0;
    return rc;
}

/* Token id's own text, for its log-probability. */
static int add_logprob(struct oai_gen *g, uint32_t id, float logprob)
{
    if (g->n_lp == g->lp_cap) {
        size_t cap = g->lp_cap ? g->lp_cap * 2 : 64;
        struct oai_logprob *n = realloc(g->lp, cap * sizeof *n);
        if (!n)
            return -ENOMEM;
        g->lp = n;
        g->lp_cap = cap;
    }
    struct oai_logprob *e = &g->lp[g->n_lp];
    const char *t = "";
    size_t tl = 0, len = 0, cap = 0;
    e->token = NULL;
    /* Each piece is borrowed until the stream's next call: copied. */
    if (l8tok_stream_push(g->one, id, &t, &tl) < 0 || append(&e->token, &len, &cap, t, tl) < 0 ||
        l8tok_stream_flush(g->one, &t, &tl) < 0 || append(&e->token, &len, &cap, t, tl) < 0) {
        free(e->token);
        return -ENOMEM;
    }
    e->id = id;
    e->len = len;
    /* JSON has no -Infinity: OpenAI writes -9999 for "never". */
    e->logprob = isfinite(logprob) ? logprob : -9999.0f;
    g->n_lp++;
    return 0;
}

void oai_gen_taken(struct oai_gen *g)
{
    g->text_len = 0;
    for (size_t i = 0; i < g->n_lp; i++)
        free(g->lp[i].token);
    g->n_lp = 0;
}

/* ---------------------------------------------------------------- the prompt */

static int chat_prompt(struct oai_gen *g, struct oai_error *err)
{
    const struct oai_request *r = g->req;
    struct l8chat_msg *m = calloc(r->n_msgs, sizeof *m);
    if (!m) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    for (size_t i = 0; i < r->n_msgs; i++)
        m[i] = (struct l8chat_msg){ r->msgs[i].role, r->msgs[i].content, r->msgs[i].len };
    struct l8chat_opts co;
    l8chat_opts_init(&co);
    co.tools = (const char *const *)r->tools;
    co.n_tools = r->n_tools;
    int rc = l8chat_encode(g->tok, m, r->n_msgs, &co, &g->prompt);
    free(m);
    /* A turn with tools may end with <|eom_id|> as well as <|eot_id|>. */
    l8tok_ids ids = {0};
    if (rc == 0 && co.n_tools)
        rc = l8chat_stop_ids(g->tok, &co, &ids);
    for (size_t i = 0; rc == 0 && i < ids.n && g->p.n_stop_ids < 8; i++)
        g->stop_ids[g->p.n_stop_ids++] = ids.ids[i];
    l8tok_ids_free(&ids);
    if (rc == -EINVAL && co.n_tools)
        oai_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages: with "
                      "tools, the chat format needs a message after the system message");
    else if (rc < 0)
        oai_error_set(err, rc == -ENOMEM ? 500 : 400, rc == -ENOMEM ? "server_error"
                      : "invalid_request_error", NULL, "messages", "messages: %s",
                      rc == -ENOMEM ? "out of memory" : "the chat format refused them");
    return rc < 0 ? -1 : 0;
}

/* <|begin_of_text|> and the text's tokens, as llama8ctl generate --raw
 * makes them (special tokens written in it are recognised); no second
 * <|begin_of_text|> where the text starts with one. */
static int text_prompt(struct oai_gen *g, int32_t bos, struct oai_error *err)
{
    const struct oai_request *r = g->req;
    int rc = 0;
    if (r->prompt_ids) {
        for (size_t i = 0; rc == 0 && i < r->n_prompt_ids; i++)
            rc = l8tok_ids_push(&g->prompt, r->prompt_ids[i]);
    } else {
        if (bos >= 0)
            rc = l8tok_ids_push(&g->prompt, (uint32_t)bos);
        if (rc == 0)
            rc = l8tok_encode(g->tok, r->prompt, r->prompt_len, L8TOK_ENCODE_DEFAULT,
                              &g->prompt);
        if (rc == 0 && bos >= 0 && g->prompt.n > 1 && g->prompt.ids[1] == (uint32_t)bos)
            memmove(g->prompt.ids, g->prompt.ids + 1, --g->prompt.n * sizeof(uint32_t));
    }
    if (rc < 0)
        oai_error_set(err, rc == -ENOMEM ? 500 : 400, rc == -ENOMEM ? "server_error"
                      : "invalid_request_error", NULL, "prompt", "prompt: %s",
                      rc == -ENOMEM ? "out of memory" : "the tokenizer refused it");
    return rc < 0 ? -1 : 0;
}

/* ---------------------------------------------------------------- start */

/* max_tokens, else as many as the daemon gives and the context holds. */
static int set_length(struct oai_gen *g, const struct l8c_info *in, struct oai_error *err)
{
    const char *param = g->req->endpoint == OAI_CHAT ? "messages" : "prompt";
    if (g->prompt.n >= in->context_length) {
        oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", param,
                      "the prompt is %zu tokens: the context holds %u, the reply included",
                      g->prompt.n, in->context_length);
        return -1;
    }
    g->p.max_new_tokens = g->req->max_tokens ? g->req->max_tokens
                                             : l8c_max_new_fitting(in, g->prompt.n, 0);
    return 0;
}

static int set_params(struct oai_gen *g, struct oai_error *err)
{
    const struct oai_request *r = g->req;
    struct l8c_params *p = &g->p;
    p->temperature = r->temperature;
    p->top_p = r->top_p;
    p->top_k = r->top_k;
    p->min_p = r->min_p;
    p->repetition_penalty = r->repetition_penalty;
    p->logprobs = r->logprobs;
    p->constraint = r->constraint;
    p->constraint_text = r->constraint_text;
    p->constraint_len = r->constraint_len;
    p->seed = r->seed;
    /* No seed: a new one each request, as OpenAI's replies differ. */
    if (!r->has_seed && getrandom(&p->seed, sizeof p->seed, 0) != sizeof p->seed) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "no random seed: %s",
                      strerror(errno));
        return -1;
    }
    return 0;
}

static int submit(struct oai_gen *g, struct oai_error *err)
{
    char why[L8C_ERRLEN];
    int code = l8c_check_request(g->c, g->prompt.ids, (uint32_t)g->prompt.n, &g->p, why);
    if (code) {
        oai_daemon_error(code, why, g->req->constraint_param, err);
        return -1;
    }
    int rc = l8c_submit(g->c, g->prompt.ids, (uint32_t)g->prompt.n, &g->p, &g->rid);
    if (rc == -EINVAL) {
        oai_error_set(err, 400, "invalid_request_error", "context_length_exceeded", NULL,
                      "%zu prompt tokens and %zu bytes of constraint do not fit llama8d's "
                      "shared-memory arena (%u bytes)", g->prompt.n, g->p.constraint_len,
                      l8c_info(g->c)->arena_size);
        return -1;
    }
    if (rc < 0)
        return connection_error(g, rc, err);
    g->running = true;
    g->prompt_tokens = (uint32_t)g->prompt.n;
    return 0;
}

int oai_gen_start(struct oai_gen *g, struct l8c_client *c, const l8tok *tok,
                  const struct oai_request *r, struct oai_error *err)
{
    memset(g, 0, sizeof *g);
    g->c = c;
    g->tok = tok;
    g->req = r;
    l8c_params_init(&g->p);
    g->p.stop_ids = g->stop_ids;
    g->tools_on = g->may_call = r->n_tools > 0;
    if (l8tok_stream_new(tok, &g->st) < 0 || l8tok_stream_new(tok, &g->one) < 0 ||
        (r->n_stop && l8tok_stop_new((const char *const *)r->stop, r->n_stop, &g->stop) < 0)) {
        oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
        oai_gen_end(g);
        return -1;
    }
    const struct l8c_info *in = l8c_info(c);
    int rc = r->endpoint == OAI_CHAT ? chat_prompt(g, err) : text_prompt(g, in->bos_id, err);
    if (rc == 0)
        rc = set_length(g, in, err);
    if (rc == 0)
        rc = set_params(g, err);
    if (rc == 0)
        rc = submit(g, err);
    if (rc < 0)
        oai_gen_end(g);
    return rc;
}

/* ---------------------------------------------------------------- events */

static bool is_stop_id(const struct oai_gen *g, uint32_t t)
{
    const struct l8c_info *in = l8c_info(g->c);
    for (uint32_t i = 0; i < in->n_eos; i++)
        if (in->eos_ids[i] == t)
            return true;
    for (uint32_t i = 0; i < g->p.n_stop_ids; i++)
        if (g->stop_ids[i] == t)
            return true;
    return false;
}

/* A piece of the decoder's text through the stop strings; 1 when one
 * ended the reply. */
static int through_stops(struct oai_gen *g, const char *t, size_t tl, bool end)
{
    int found = 0;
    if (g->stop && (found = l8tok_stop_push(g->stop, t, tl, &t, &tl)) < 0)
        return found;
    if (add_text(g, t, tl) < 0)
        return -ENOMEM;
    if (g->stop && end && !found &&
        (l8tok_stop_flush(g->stop, &t, &tl) < 0 || add_text(g, t, tl) < 0))
        return -ENOMEM;
    return found;
}

/* Wait for request's DONE or ERROR after a cancel; false if it did not
 * come (the connection is then given up). */
static bool drain(struct oai_gen *g)
{
    struct l8_event ev[64];
    uint64_t until = l8c_now_ns() + (uint64_t)CANCEL_WAIT_MS * 1000000u;
    while (g->running) {
        uint64_t now = l8c_now_ns();
        int k = now < until ? l8c_wait_events(g->c, ev, 64, (int)((until - now) / 1000000u) + 1)
                            : 0;
        if (k <= 0) {
            g->broken = true;
            g->running = false;
            return false;
        }
        for (int i = 0; i < k; i++)
            if (ev[i].request_id == g->rid &&
                (ev[i].kind == L8_EV_DONE || ev[i].kind == L8_EV_ERROR))
                g->running = false;
    }
    return true;
}

static int stop_running(struct oai_gen *g)
{
    if (g->running && l8c_cancel(g->c, g->rid) < 0) {
        g->broken = true;
        g->running = false;
    }
    return drain(g) ? 0 : -1;
}

static int on_token(struct oai_gen *g, const struct l8_event *e)
{
    g->completion_tokens = e->index + 1;
    if (is_stop_id(g, e->token))
        return 0;   /* its DONE follows */
    int rc;
    if (g->p.logprobs && (rc = add_logprob(g, e->token, e->logprob)) < 0)
        return rc;
    const char *t = "";
    size_t tl = 0;
    if (l8tok_stream_push(g->st, e->token, &t, &tl) < 0)
        tl = 0;   /* not a token of this tokenizer: no text, as llama8ctl's */
    if ((rc = through_stops(g, t, tl, false)) <= 0)
        return rc;
    /* A stop string: the reply ends here; the daemon stops on the cancel. */
    g->finish = OAI_FINISH_STOP;
    stop_running(g);
    return settle_call(g);
}

static int on_done(struct oai_gen *g, const struct l8_event *e, struct oai_error *err)
{
    g->running = false;
    if (e->reason == L8_DONE_CANCELLED) {
        oai_error_set(err, 503, "server_error", "cancelled", NULL,
                      "llama8d cancelled the request (it is shutting down?)");
        return -1;
    }
    const char *t = "";
    size_t tl = 0;
    if (l8tok_stream_flush(g->st, &t, &tl) < 0)
        tl = 0;
    if (through_stops(g, t, tl, true) < 0)
        return -ENOMEM;
    g->finish = e->reason == L8_DONE_LENGTH || e->reason == L8_DONE_CONTEXT ? OAI_FINISH_LENGTH
                                                                             : OAI_FINISH_STOP;
    return settle_call(g);
}

static int on_event(struct oai_gen *g, const struct l8_event *e, struct oai_error *err)
{
    if (e->request_id != g->rid || !g->running)
        return 0;
    if (e->kind != L8_EV_ERROR)
        g->started = true;
    if (e->kind == L8_EV_STARTED)
        g->cached_tokens = e->index;
    if (e->kind == L8_EV_TOKEN)
        return g->finish ? 0 : on_token(g, e);
    if (e->kind == L8_EV_DONE)
        return on_done(g, e, err);
    if (e->kind != L8_EV_ERROR)
        return 0;
    g->running = false;
    char buf[L8C_ERRLEN];
    const char *why = e->code == L8_ERR_BAD_GRAMMAR ? l8c_request_error(g->c, g->rid) : NULL;
    oai_daemon_error(e->code, why ? why : l8c_error_text(e, buf), g->req->constraint_param, err);
    return -1;
}

/* Sleep until the daemon has events, the HTTP client hangs up or we quit:
 * 1 events may wait, 0 hung up or quitting. */
static int sleep_on(struct oai_gen *g, int hup_fd, int quit_fd)
{
    struct pollfd pf[4] = {
        { l8c_event_fd(g->c), POLLIN, 0 }, { l8c_ctl_fd(g->c), POLLIN, 0 },
        { hup_fd, POLLRDHUP, 0 }, { quit_fd, POLLIN, 0 },
    };
    if (poll(pf, 4, -1) < 0 && errno != EINTR)
        return 0;
    return !pf[2].revents && !pf[3].revents;
}

int oai_gen_step(struct oai_gen *g, int hup_fd, int quit_fd, struct oai_error *err)
{
    struct l8_event ev[64];
    for (;;) {
        if (!g->running && g->finish)
            return 1;
        int k = l8c_poll_events(g->c, ev, 64);
        if (k < 0)
            return connection_error(g, k, err);
        for (int i = 0; i < k; i++) {
            int rc = on_event(g, &ev[i], err);
            if (rc == -ENOMEM)
                oai_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
            if (rc < 0) {
                stop_running(g);
                return -1;
            }
        }
        if (k > 0)
            return !g->running && g->finish;
        if (l8c_prepare_wait(g->c) == 1)
            continue;
        if (!sleep_on(g, hup_fd, quit_fd)) {
            stop_running(g);
            return -ECONNABORTED;
        }
    }
}

void oai_gen_end(struct oai_gen *g)
{
    stop_running(g);
    oai_gen_taken(g);
    free(g->lp);
    free(g->text);
    free(g->held);
    free(g->call_name);
    free(g->call_args);
    l8tok_stop_free(g->stop);
    l8tok_stream_free(g->st);
    l8tok_stream_free(g->one);
    l8tok_ids_free(&g->prompt);
    g->lp = NULL;
    g->text = g->held = g->call_name = g->call_args = NULL;
    g->stop = NULL;
    g->st = g->one = NULL;
}
