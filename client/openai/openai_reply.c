/* openai_reply.c - OpenAI's reply objects (openai_reply.h). */
#include "openai_reply.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

static void hex_id(char *out, size_t size, const char *prefix, const uint8_t *r, size_t n)
{
    size_t k = (size_t)snprintf(out, size, "%s", prefix);
    for (size_t i = 0; i < n && k + 2 < size; i++, k += 2)
        snprintf(out + k, size - k, "%02x", r[i]);
}

int oai_meta_init(struct oai_meta *m, enum oai_endpoint ep, const char *model)
{
    uint8_t r[24];
    if (getrandom(r, sizeof r, 0) != sizeof r)
        return -1;
    m->endpoint = ep;
    hex_id(m->id, sizeof m->id, ep == OAI_CHAT ? "chatcmpl-" : "cmpl-", r, 12);
    hex_id(m->call_id, sizeof m->call_id, "call_", r + 12, 12);
    m->created = (int64_t)time(NULL);   /* a timestamp in the reply, not a timing */
    m->model = model;
    return 0;
}

void oai_buf_free(struct oai_buf *b)
{
    free(b->s);
    *b = (struct oai_buf){0};
}

char *oai_json_text(json_object *o, size_t *len)
{
    if (!o)
        return NULL;
    size_t n;
    const char *t = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE, &n);
    char *c = t ? malloc(n + 1) : NULL;
    if (c) {
        memcpy(c, t, n + 1);
        *len = n;
    }
    json_object_put(o);
    return c;
}

/* ---------------------------------------------------------------- pieces */

static json_object *str(const char *s, size_t n)
{
    return json_object_new_string_len(s, (int)n);
}

static const char *finish_name(enum oai_finish f)
{
    return f == OAI_FINISH_LENGTH ? "length" : f == OAI_FINISH_TOOL_CALLS ? "tool_calls" : "stop";
}

static json_object *usage_json(const struct oai_gen *g)
{
    json_object *u = json_object_new_object(), *d = json_object_new_object();
    json_object_object_add(u, "prompt_tokens", json_object_new_int64(g->prompt_tokens));
    json_object_object_add(u, "completion_tokens", json_object_new_int64(g->completion_tokens));
    json_object_object_add(u, "total_tokens",
                           json_object_new_int64((int64_t)g->prompt_tokens + g->completion_tokens));
    json_object_object_add(d, "cached_tokens", json_object_new_int64(g->cached_tokens));
    json_object_object_add(u, "prompt_tokens_details", d);
    return u;
}

/* The token's own bytes, as numbers (OpenAI's "bytes"). */
static json_object *token_bytes(const struct oai_gen *g, uint32_t id)
{
    json_object *a = json_object_new_array();
    const char *b;
    size_t n;
    if (l8tok_token_bytes(g->tok, id, &b, &n) == 0)
        for (size_t i = 0; i < n; i++)
            json_object_array_add(a, json_object_new_int((unsigned char)b[i]));
    return a;
}

/* g's new log-probabilities: chat's {"content": [...], "refusal": null},
 * completions' {"tokens", "token_logprobs", "top_logprobs": null}; null
 * when none were asked for. */
static json_object *logprobs_json(const struct oai_gen *g)
{
    if (!g->p.logprobs)
        return NULL;
    json_object *o = json_object_new_object(), *content = json_object_new_array();
    json_object *tokens = json_object_new_array(), *lps = json_object_new_array();
    for (size_t i = 0; i < g->n_lp; i++) {
        const struct oai_logprob *e = &g->lp[i];
        if (g->req->endpoint == OAI_COMPLETIONS) {
            json_object_array_add(tokens, str(e->token, e->len));
            json_object_array_add(lps, json_object_new_double(e->logprob));
            continue;
        }
        json_object *t = json_object_new_object();
        json_object_object_add(t, "token", str(e->token, e->len));
        json_object_object_add(t, "logprob", json_object_new_double(e->logprob));
        json_object_object_add(t, "bytes", token_bytes(g, e->id));
        json_object_object_add(t, "top_logprobs", json_object_new_array());
        json_object_array_add(content, t);
    }
    if (g->req->endpoint == OAI_COMPLETIONS) {
        json_object_put(content);
        json_object_object_add(o, "tokens", tokens);
        json_object_object_add(o, "token_logprobs", lps);
        json_object_object_add(o, "top_logprobs", NULL);
    } else {
        json_object_put(tokens);
        json_object_put(lps);
        json_object_object_add(o, "content", content);
        json_object_object_add(o, "refusal", NULL);
    }
    return o;
}

/* [{"index": 0, "id", "type": "function", "function": {"name", "arguments"}}] */
static json_object *tool_calls_json(const struct oai_meta *m, const struct oai_gen *g,
                                    bool stream)
{
    json_object *call = json_object_new_object(), *fn = json_object_new_object();
    if (stream)
        json_object_object_add(call, "index", json_object_new_int(0));
    json_object_object_add(call, "id", json_object_new_string(m->call_id));
    json_object_object_add(call, "type", json_object_new_string("function"));
    json_object_object_add(fn, "name", json_object_new_string(g->call_name));
    json_object_object_add(fn, "arguments", json_object_new_string(g->call_args));
    json_object_object_add(call, "function", fn);
    json_object *a = json_object_new_array();
    json_object_array_add(a, call);
    return a;
}

/* {"id", "object", "created", "model", "choices": [choice]}; choice NULL:
 * no choices (the usage chunk). */
static json_object *envelope(const struct oai_meta *m, const char *object, json_object *choice)
{
    json_object *o = json_object_new_object(), *choices = json_object_new_array();
    json_object_object_add(o, "id", json_object_new_string(m->id));
    json_object_object_add(o, "object", json_object_new_string(object));
    json_object_object_add(o, "created", json_object_new_int64(m->created));
    json_object_object_add(o, "model", json_object_new_string(m->model));
    if (choice)
        json_object_array_add(choices, choice);
    json_object_object_add(o, "choices", choices);
    return o;
}

static json_object *choice_head(void)
{
    json_object *c = json_object_new_object();
    json_object_object_add(c, "index", json_object_new_int(0));
    return c;
}

/* ---------------------------------------------------------------- whole replies */

json_object *oai_reply_whole(const struct oai_meta *m, const struct oai_gen *g)
{
    json_object *c = choice_head();
    const char *object = "text_completion";
    if (m->endpoint == OAI_CHAT) {
        json_object *msg = json_object_new_object();
        bool call = g->finish == OAI_FINISH_TOOL_CALLS;
        json_object_object_add(msg, "role", json_object_new_string("assistant"));
        json_object_object_add(msg, "content", call ? NULL : str(g->text ? g->text : "",
                                                                 g->text_len));
        if (call)
            json_object_object_add(msg, "tool_calls", tool_calls_json(m, g, false));
        json_object_object_add(msg, "refusal", NULL);
        json_object_object_add(c, "message", msg);
        object = "chat.completion";
    } else {
        json_object_object_add(c, "text", str(g->text ? g->text : "", g->text_len));
    }
    json_object_object_add(c, "logprobs", logprobs_json(g));
    json_object_object_add(c, "finish_reason", json_object_new_string(finish_name(g->finish)));
    json_object *o = envelope(m, object, c);
    json_object_object_add(o, "usage", usage_json(g));
    return o;
}

/* ---------------------------------------------------------------- streams */

static int sse_add(struct oai_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = (b->len + n + 1) * 2;
        char *nb = realloc(b->s, cap);
        if (!nb)
            return -ENOMEM;
        b->s = nb;
        b->cap = cap;
    }
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = 0;
    return 0;
}

/* "data: JSON\n\n"; takes o. */
static int sse_json(struct oai_buf *b, json_object *o)
{
    size_t n;
    char *t = oai_json_text(o, &n);
    int rc = t && sse_add(b, "data: ", 6) == 0 && sse_add(b, t, n) == 0 &&
             sse_add(b, "\n\n", 2) == 0 ? 0 : -ENOMEM;
    free(t);
    return rc;
}

/* A chunk: chat's {"delta": delta, "logprobs", "finish_reason"}, or
 * completions' {"text", "logprobs", "finish_reason"}. */
static int sse_chunk(struct oai_buf *b, const struct oai_meta *m, json_object *delta,
                     const char *text, size_t len, json_object *logprobs, const char *finish)
{
    json_object *c = choice_head();
    if (m->endpoint == OAI_CHAT)
        json_object_object_add(c, "delta", delta);
    else
        json_object_object_add(c, "text", str(text, len));
    json_object_object_add(c, "logprobs", logprobs);
    json_object_object_add(c, "finish_reason", finish ? json_object_new_string(finish) : NULL);
    return sse_json(b, envelope(m, m->endpoint == OAI_CHAT ? "chat.completion.chunk"
                                                           : "text_completion", c));
}

int oai_sse_open(struct oai_buf *b, const struct oai_meta *m)
{
    if (m->endpoint != OAI_CHAT)
        return 0;
    json_object *d = json_object_new_object();
    json_object_object_add(d, "role", json_object_new_string("assistant"));
    json_object_object_add(d, "content", json_object_new_string(""));
    return sse_chunk(b, m, d, NULL, 0, NULL, NULL);
}

int oai_sse_delta(struct oai_buf *b, const struct oai_meta *m, const struct oai_gen *g)
{
    if (!g->text_len && !g->n_lp)
        return 0;
    json_object *d = NULL;
    if (m->endpoint == OAI_CHAT) {
        d = json_object_new_object();
        json_object_object_add(d, "content", str(g->text ? g->text : "", g->text_len));
    }
    return sse_chunk(b, m, d, g->text ? g->text : "", g->text_len, logprobs_json(g), NULL);
}

int oai_sse_close(struct oai_buf *b, const struct oai_meta *m, const struct oai_gen *g,
                  bool include_usage)
{
    int rc = 0;
    if (g->finish == OAI_FINISH_TOOL_CALLS) {
        json_object *d = json_object_new_object();
        json_object_object_add(d, "tool_calls", tool_calls_json(m, g, true));
        rc = sse_chunk(b, m, d, NULL, 0, NULL, NULL);
    }
    if (rc == 0)
        rc = sse_chunk(b, m, m->endpoint == OAI_CHAT ? json_object_new_object() : NULL, "", 0,
                       NULL, finish_name(g->finish));
    if (rc == 0 && include_usage) {
        json_object *o = envelope(m, m->endpoint == OAI_CHAT ? "chat.completion.chunk"
                                                             : "text_completion", NULL);
        json_object_object_add(o, "usage", usage_json(g));
        rc = sse_json(b, o);
    }
    return rc == 0 ? sse_add(b, "data: [DONE]\n\n", 14) : rc;
}

int oai_sse_error(struct oai_buf *b, const struct oai_error *e)
{
    return sse_json(b, oai_error_json(e));
}

/* ---------------------------------------------------------------- errors, models */

json_object *oai_error_json(const struct oai_error *e)
{
    json_object *o = json_object_new_object(), *err = json_object_new_object();
    json_object_object_add(err, "message", json_object_new_string(e->message));
    json_object_object_add(err, "type", json_object_new_string(e->type));
    json_object_object_add(err, "param", e->param[0] ? json_object_new_string(e->param) : NULL);
    json_object_object_add(err, "code", e->code ? json_object_new_string(e->code) : NULL);
    json_object_object_add(o, "error", err);
    return o;
}

json_object *oai_model_json(const char *model, bool list)
{
    json_object *m = json_object_new_object();
    json_object_object_add(m, "id", json_object_new_string(model));
    json_object_object_add(m, "object", json_object_new_string("model"));
    json_object_object_add(m, "created", json_object_new_int64(0));
    json_object_object_add(m, "owned_by", json_object_new_string("llama8d"));
    if (!list)
        return m;
    json_object *o = json_object_new_object(), *data = json_object_new_array();
    json_object_array_add(data, m);
    json_object_object_add(o, "object", json_object_new_string("list"));
    json_object_object_add(o, "data", data);
    return o;
}
