/* openai_request.c - OpenAI request bodies into struct oai_request
 * (openai_request.h): one handler per field, from a table that says which
 * endpoint has it; the fields that depend on others (tool_choice on tools
 * and response_format, max_tokens on max_completion_tokens) are settled
 * after every field was read. */
#include "openai_request.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l8_json.h"

/* s was cut at size - 1 bytes: drop a character the cut left partial, so
 * that what is sent back as JSON stays UTF-8. */
static void uncut(char *s, int written, size_t size)
{
    if (written < 0 || (size_t)written < size)
        return;
    size_t n = strlen(s), i = n;
    while (i > 0 && ((unsigned char)s[i - 1] & 0xc0) == 0x80)
        i--;
    if (i == 0)
        return;
    unsigned char lead = (unsigned char)s[i - 1];
    size_t need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
    if (n - (i - 1) < need)
        s[i - 1] = 0;
}

void oai_error_set(struct oai_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    uncut(e->param, snprintf(e->param, sizeof e->param, "%s", param ? param : ""),
          sizeof e->param);
    va_list ap;
    va_start(ap, fmt);
    uncut(e->message, vsnprintf(e->message, sizeof e->message, fmt, ap), sizeof e->message);
    va_end(ap);
}

void oai_request_free(struct oai_request *r)
{
    for (size_t i = 0; i < r->n_msgs; i++)
        free(r->msgs[i].content);
    free(r->msgs);
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_stop; i++)
        free(r->stop[i]);
    free(r->constraint_text);
    for (size_t i = 0; i < r->n_tools; i++)
        free(r->tools[i]);
    free(r->tools);
    memset(r, 0, sizeof *r);
}

/* ---------------------------------------------------------------- helpers */

struct parse {
    struct oai_request r;
    struct oai_error *err;
    json_object *tools;            /* the "tools" array, for a named tool_choice */
    json_object *tool_choice;      /* settled after the loop */
    int64_t max_tokens, max_completion_tokens;   /* 0: not given */
};

__attribute__((format(printf, 3, 4)))
static int bad(struct parse *P, const char *param, const char *fmt, ...)
{
    struct oai_error *e = P->err;
    oai_error_set(e, 400, "invalid_request_error", NULL, param, "%s", "");
    va_list ap;
    va_start(ap, fmt);
    uncut(e->message, vsnprintf(e->message, sizeof e->message, fmt, ap), sizeof e->message);
    va_end(ap);
    return -EINVAL;
}

static int nomem(struct parse *P)
{
    oai_error_set(P->err, 500, "server_error", NULL, NULL, "out of memory");
    return -ENOMEM;
}

/* What v is, for messages: "a string", "null", ... */
static const char *kind(json_object *v)
{
    switch (json_object_get_type(v)) {
    case json_type_null: return "null";
    case json_type_boolean: return "a boolean";
    case json_type_double: return "a number";
    case json_type_int: return "an integer";
    case json_type_object: return "an object";
    case json_type_array: return "an array";
    case json_type_string: return "a string";
    }
    return "?";
}

/* How many bytes of s (at most max) to quote without cutting a UTF-8
 * character: the error's text must stay valid UTF-8. */
static int quote_len(const char *s, int max)
{
    int n = (int)strnlen(s, (size_t)max + 1);
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)
        max--;
    return max;
}

static bool is_number(json_object *v)
{
    return json_object_is_type(v, json_type_int) || json_object_is_type(v, json_type_double);
}

/* A number in [lo, hi] into *out. */
static int number_in(struct parse *P, const char *name, json_object *v, double lo, double hi,
                     float *out)
{
    if (!is_number(v))
        return bad(P, name, "%s: a number from %g to %g, not %s", name, lo, hi, kind(v));
    double d = json_object_get_double(v);
    if (!(d >= lo && d <= hi))
        return bad(P, name, "%s: %g is outside [%g, %g]", name, d, lo, hi);
    *out = (float)d;
    return 0;
}

/* An integer in [lo, hi] into *out. */
static int int_in(struct parse *P, const char *name, json_object *v, int64_t lo, int64_t hi,
                  int64_t *out)
{
    if (!json_object_is_type(v, json_type_int))
        return bad(P, name, "%s: an integer, not %s", name, kind(v));
    int64_t x = json_object_get_int64(v);
    if (x < lo || x > hi)
        return bad(P, name, "%s: %lld is outside [%lld, %lld]", name, (long long)x,
                   (long long)lo, (long long)hi);
    *out = x;
    return 0;
}

static int boolean(struct parse *P, const char *name, json_object *v, bool *out)
{
    if (!json_object_is_type(v, json_type_boolean))
        return bad(P, name, "%s: true or false, not %s", name, kind(v));
    *out = json_object_get_boolean(v);
    return 0;
}

/* A copy of string v (its length, NUL bytes included) into *s, *len. */
static int copy_string(struct parse *P, json_object *v, char **s, size_t *len)
{
    size_t n = (size_t)json_object_get_string_len(v);
    char *c = malloc(n + 1);
    if (!c)
        return nomem(P);
    memcpy(c, json_object_get_string(v), n);
    c[n] = 0;
    *s = c;
    if (len)
        *len = n;
    return 0;
}

/* ---------------------------------------------------------------- messages */

/* A content: a string, or an array of text parts joined by newlines. */
static int content_text(struct parse *P, const char *at, json_object *v, struct oai_message *m)
{
    char param[96];
    snprintf(param, sizeof param, "%s.content", at);
    if (json_object_is_type(v, json_type_string))
        return copy_string(P, v, &m->content, &m->len);
    if (!json_object_is_type(v, json_type_array))
        return bad(P, param, "%s: a string or an array of text parts, not %s", param, kind(v));
    size_t n = json_object_array_length(v), len = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *part = json_object_array_get_idx(v, i), *type, *text;
        snprintf(param, sizeof param, "%s.content[%zu]", at, i);
        if (!json_object_object_get_ex(part, "type", &type) ||
            !json_object_is_type(type, json_type_string))
            return bad(P, param, "%s: a part {\"type\": \"text\", \"text\": STRING}", param);
        const char *t = json_object_get_string(type);
        if (strcmp(t, "text"))
            return bad(P, param, "%s: parts of type \"%.*s\" are not taken: the model reads "
                       "text only", param, quote_len(t, 40), t);
        if (!json_object_object_get_ex(part, "text", &text) ||
            !json_object_is_type(text, json_type_string))
            return bad(P, param, "%s.text: a string", param);
        len += (size_t)json_object_get_string_len(text) + (i > 0);
    }
    if (!(m->content = malloc(len + 1)))
        return nomem(P);
    m->len = 0;
    for (size_t i = 0; i < n; i++) {
        json_object *text;
        json_object_object_get_ex(json_object_array_get_idx(v, i), "text", &text);
        size_t tl = (size_t)json_object_get_string_len(text);
        if (i > 0)
            m->content[m->len++] = '\n';
        memcpy(m->content + m->len, json_object_get_string(text), tl);
        m->len += tl;
    }
    m->content[m->len] = 0;
    return 0;
}

/* An assistant turn's tool_calls (one: Llama 3.1's format has one call a
 * turn) as its content, the call's text as the chat template writes it. */
static int tool_call_text(struct parse *P, const char *at, json_object *calls,
                          struct oai_message *m)
{
    char param[96];
    snprintf(param, sizeof param, "%s.tool_calls", at);
    if (!json_object_is_type(calls, json_type_array) || json_object_array_length(calls) != 1)
        return bad(P, param, "%s: an array of one call (Llama 3.1 makes one call a turn)",
                   param);
    json_object *fn, *name, *args;
    snprintf(param, sizeof param, "%s.tool_calls[0].function", at);
    if (!json_object_object_get_ex(json_object_array_get_idx(calls, 0), "function", &fn) ||
        !json_object_object_get_ex(fn, "name", &name) ||
        !json_object_is_type(name, json_type_string) || !json_object_get_string_len(name) ||
        !json_object_object_get_ex(fn, "arguments", &args))
        return bad(P, param, "%s: {\"name\": STRING, \"arguments\": JSON object text}", param);
    const char *a = json_object_is_type(args, json_type_string)
                    ? json_object_get_string(args)
                    : json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN);
    int rc = l8chat_format_tool_call(json_object_get_string(name), a, &m->content);
    if (rc == -EINVAL)
        return bad(P, param, "%s.arguments: not a JSON object", param);
    if (rc < 0)
        return nomem(P);
    m->len = strlen(m->content);
    return 0;
}

static int role_of(struct parse *P, const char *at, json_object *o, enum l8chat_role *role)
{
    char param[96];
    json_object *v;
    snprintf(param, sizeof param, "%s.role", at);
    if (!json_object_object_get_ex(o, "role", &v) || !json_object_is_type(v, json_type_string))
        return bad(P, param, "%s: missing (system, developer, user, assistant or tool)", param);
    const char *r = json_object_get_string(v);
    if (!strcmp(r, "developer")) {
        *role = L8CHAT_SYSTEM;   /* OpenAI's newer name for it */
        return 0;
    }
    if (!strcmp(r, "function"))
        return bad(P, param, "%s: \"function\" messages are OpenAI's old form: give \"tools\" "
                   "and \"tool\" messages", param);
    if (l8chat_role_parse(r, role) < 0)
        return bad(P, param, "%s: \"%.*s\" is not system, developer, user, assistant or tool",
                   param, quote_len(r, 40), r);
    return 0;
}

static int take_message(struct parse *P, size_t i, json_object *o, struct oai_message *m)
{
    char at[48];
    snprintf(at, sizeof at, "messages[%zu]", i);
    if (!json_object_is_type(o, json_type_object))
        return bad(P, at, "%s: an object {\"role\": ..., \"content\": ...}, not %s", at, kind(o));
    int rc = role_of(P, at, o, &m->role);
    if (rc < 0)
        return rc;
    json_object *content = NULL, *calls = NULL;
    json_object_object_get_ex(o, "content", &content);
    json_object_object_get_ex(o, "tool_calls", &calls);
    if (calls && m->role != L8CHAT_ASSISTANT) {
        char param[96];
        snprintf(param, sizeof param, "%s.tool_calls", at);
        return bad(P, param, "%s: only an assistant message has tool calls", param);
    }
    /* The template writes a turn with tool calls as the call alone. */
    if (calls && !(json_object_is_type(calls, json_type_array) &&
                   json_object_array_length(calls) == 0))
        return tool_call_text(P, at, calls, m);
    if (content)
        return content_text(P, at, content, m);
    if (m->role == L8CHAT_ASSISTANT)
        return (m->content = calloc(1, 1)) ? 0 : nomem(P);
    char param[96];
    snprintf(param, sizeof param, "%s.content", at);
    return bad(P, param, "%s: missing", param);
}

static int f_messages(struct parse *P, const char *name, json_object *v)
{
    if (!json_object_is_type(v, json_type_array))
        return bad(P, name, "messages: an array of {\"role\", \"content\"}, not %s", kind(v));
    size_t n = json_object_array_length(v);
    if (n == 0 || n > OAI_MAX_MESSAGES)
        return bad(P, name, "messages: %zu of them (give 1 to %d)", n, OAI_MAX_MESSAGES);
    if (!(P->r.msgs = calloc(n, sizeof *P->r.msgs)))
        return nomem(P);
    for (; P->r.n_msgs < n; P->r.n_msgs++) {
        int rc = take_message(P, P->r.n_msgs, json_object_array_get_idx(v, P->r.n_msgs),
                              &P->r.msgs[P->r.n_msgs]);
        if (rc < 0) {
            free(P->r.msgs[P->r.n_msgs].content);
            return rc;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- completions' prompt */

static bool all_ints(json_object *a)
{
    for (size_t i = 0; i < json_object_array_length(a); i++)
        if (!json_object_is_type(json_object_array_get_idx(a, i), json_type_int))
            return false;
    return true;
}

static int prompt_ids(struct parse *P, json_object *a)
{
    size_t n = json_object_array_length(a);
    if (n == 0 || n > OAI_MAX_PROMPT_IDS)
        return bad(P, "prompt", "prompt: %zu token ids (give 1 to %u)", n, OAI_MAX_PROMPT_IDS);
    if (!(P->r.prompt_ids = malloc(n * sizeof *P->r.prompt_ids)))
        return nomem(P);
    for (size_t i = 0; i < n; i++) {
        int64_t x = json_object_get_int64(json_object_array_get_idx(a, i));
        if (x < 0 || x > UINT32_MAX)
            return bad(P, "prompt", "prompt[%zu]: %lld is not a token id", i, (long long)x);
        P->r.prompt_ids[i] = (uint32_t)x;
    }
    P->r.n_prompt_ids = n;
    return 0;
}

/* A string, token ids, or an array of one of either. */
static int f_prompt(struct parse *P, const char *name, json_object *v)
{
    if (json_object_is_type(v, json_type_string))
        return copy_string(P, v, &P->r.prompt, &P->r.prompt_len);
    if (json_object_is_type(v, json_type_array) && all_ints(v))
        return prompt_ids(P, v);
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) == 1) {
        json_object *one = json_object_array_get_idx(v, 0);
        if (json_object_is_type(one, json_type_string))
            return copy_string(P, one, &P->r.prompt, &P->r.prompt_len);
        if (json_object_is_type(one, json_type_array) && all_ints(one))
            return prompt_ids(P, one);
    }
    if (json_object_is_type(v, json_type_array) && json_object_array_length(v) > 1)
        return bad(P, name, "prompt: one prompt a request (llama8d gives one choice: send "
                   "each prompt on its own)");
    return bad(P, name, "prompt: a string or an array of token ids, not %s", kind(v));
}

/* ---------------------------------------------------------------- sampling and length */

static int f_temperature(struct parse *P, const char *name, json_object *v)
{
    return number_in(P, name, v, 0, 2, &P->r.temperature);
}

static int f_top_p(struct parse *P, const char *name, json_object *v)
{
    int rc = number_in(P, name, v, 0, 1, &P->r.top_p);
    if (rc == 0 && P->r.top_p == 0)
        return bad(P, name, "top_p: 0 keeps no token: give a number in (0, 1], or "
                   "temperature 0 for the most likely token");
    return rc;
}

static int f_min_p(struct parse *P, const char *name, json_object *v)
{
    return number_in(P, name, v, 0, 1, &P->r.min_p);
}

static int f_repetition_penalty(struct parse *P, const char *name, json_object *v)
{
    int rc = number_in(P, name, v, 0, 100, &P->r.repetition_penalty);
    if (rc == 0 && P->r.repetition_penalty == 0)
        return bad(P, name, "repetition_penalty: a number above 0 (1: off)");
    return rc;
}

static int f_top_k(struct parse *P, const char *name, json_object *v)
{
    int64_t k = 0;
    int rc = int_in(P, name, v, -1, UINT32_MAX, &k);
    P->r.top_k = k < 0 ? 0 : (uint32_t)k;   /* -1: off, as vLLM has it */
    return rc;
}

/* frequency_penalty and presence_penalty: OpenAI's subtract from the
 * logits per occurrence; llama8d's repetition_penalty divides, once per
 * token seen. Not the same: 0 only. */
static int f_penalty(struct parse *P, const char *name, json_object *v)
{
    float x;
    int rc = number_in(P, name, v, -2, 2, &x);
    if (rc == 0 && x != 0)
        return bad(P, name, "%s: llama8d has no such penalty (give 0, or the extension "
                   "repetition_penalty, a multiplier: 1 off, 1.1 mild)", name);
    return rc;
}

static int f_seed(struct parse *P, const char *name, json_object *v)
{
    if (!json_object_is_type(v, json_type_int))
        return bad(P, name, "seed: an integer, not %s", kind(v));
    int64_t s = json_object_get_int64(v);
    /* json-c keeps integers above INT64_MAX as unsigned. */
    P->r.seed = s < 0 ? (uint64_t)s : json_object_get_uint64(v);
    P->r.has_seed = true;
    return 0;
}

static int f_max_tokens(struct parse *P, const char *name, json_object *v)
{
    return int_in(P, name, v, 1, UINT32_MAX, !strcmp(name, "max_tokens") ? &P->max_tokens
                                                                       : &P->max_completion_tokens);
}

/* n and best_of: llama8d makes one reply a request. */
static int f_one(struct parse *P, const char *name, json_object *v)
{
    int64_t n;
    int rc = int_in(P, name, v, 1, 128, &n);
    if (rc == 0 && n != 1)
        return bad(P, name, "%s: 1 only (llama8d gives one choice a request: send %lld "
                   "requests, each with its own seed)", name, (long long)n);
    return rc;
}

static int f_stop(struct parse *P, const char *name, json_object *v)
{
    bool one = json_object_is_type(v, json_type_string);
    if (!one && !json_object_is_type(v, json_type_array))
        return bad(P, name, "stop: a string or an array of strings, not %s", kind(v));
    size_t n = one ? 1 : json_object_array_length(v);
    if (n > OAI_MAX_STOP)
        return bad(P, name, "stop: %zu strings (at most %d)", n, OAI_MAX_STOP);
    for (size_t i = 0; i < n; i++) {
        json_object *s = one ? v : json_object_array_get_idx(v, i);
        if (!json_object_is_type(s, json_type_string))
            return bad(P, name, "stop[%zu]: a string, not %s", i, kind(s));
        if (!json_object_get_string_len(s) ||
            strlen(json_object_get_string(s)) != (size_t)json_object_get_string_len(s))
            return bad(P, name, "stop[%zu]: %s", i, json_object_get_string_len(s)
                       ? "a NUL character (\\u0000) in a stop string" : "an empty string");
        int rc = copy_string(P, s, &P->r.stop[i], NULL);
        if (rc < 0)
            return rc;
        P->r.n_stop++;
    }
    return 0;
}

/* chat's logprobs is a boolean, completions' the number of alternatives. */
static int f_logprobs(struct parse *P, const char *name, json_object *v)
{
    if (P->r.endpoint == OAI_CHAT)
        return boolean(P, name, v, &P->r.logprobs);
    int64_t n;
    int rc = int_in(P, name, v, 0, 5, &n);
    if (rc == 0 && n > 0)
        return bad(P, name, "logprobs: 0 only (the chosen tokens'): llama8d gives no "
                   "alternatives");
    P->r.logprobs = true;
    return rc;
}

static int f_top_logprobs(struct parse *P, const char *name, json_object *v)
{
    int64_t n;
    int rc = int_in(P, name, v, 0, 20, &n);
    if (rc == 0 && n > 0)
        return bad(P, name, "top_logprobs: 0 only: llama8d gives the chosen token's "
                   "log-probability, no alternatives");
    return rc;
}

static int f_logit_bias(struct parse *P, const char *name, json_object *v)
{
    if (!json_object_is_type(v, json_type_object))
        return bad(P, name, "logit_bias: an object, not %s", kind(v));
    if (json_object_object_length(v))
        return bad(P, name, "logit_bias: not supported by llama8d (give {} or leave it out)");
    return 0;
}

static int f_echo(struct parse *P, const char *name, json_object *v)
{
    bool echo = false;
    int rc = boolean(P, name, v, &echo);
    if (rc == 0 && echo)
        return bad(P, name, "echo: false only (llama8d does not send the prompt back)");
    return rc;
}

static int f_suffix(struct parse *P, const char *name, json_object *v)
{
    if (!json_object_is_type(v, json_type_string) || json_object_get_string_len(v))
        return bad(P, name, "suffix: not supported (Llama 3.1 has no fill-in-the-middle)");
    return 0;
}

static int f_stream(struct parse *P, const char *name, json_object *v)
{
    return boolean(P, name, v, &P->r.stream);
}

static int f_stream_options(struct parse *P, const char *name, json_object *v)
{
    if (!json_object_is_type(v, json_type_object))
        return bad(P, name, "stream_options: an object, not %s", kind(v));
    json_object_object_foreach(v, key, x) {
        if (!strcmp(key, "include_usage")) {
            if (boolean(P, "stream_options.include_usage", x, &P->r.include_usage) < 0)
                return -EINVAL;
        } else if (strcmp(key, "include_obfuscation")) {
            return bad(P, name, "stream_options: unknown field \"%.*s\"", quote_len(key, 64), key);
        }
    }
    return 0;
}

/* Fields taken and not needed: who asks, OpenAI's storage and tiers, and
 * parallel_tool_calls (one call at most either way). */
static int f_ignored(struct parse *P, const char *name, json_object *v)
{
    bool b;
    if (!strcmp(name, "user") || !strcmp(name, "service_tier"))
        return json_object_is_type(v, json_type_string) ? 0
               : bad(P, name, "%s: a string, not %s", name, kind(v));
    if (!strcmp(name, "metadata"))
        return json_object_is_type(v, json_type_object) ? 0
               : bad(P, name, "metadata: an object, not %s", kind(v));
    return boolean(P, name, v, &b);
}

static int f_modalities(struct parse *P, const char *name, json_object *v)
{
    for (size_t i = 0; json_object_is_type(v, json_type_array) &&
                       i < json_object_array_length(v); i++) {
        json_object *m = json_object_array_get_idx(v, i);
        if (!json_object_is_type(m, json_type_string) || strcmp(json_object_get_string(m), "text"))
            return bad(P, name, "modalities: [\"text\"] only (the model writes text)");
    }
    return json_object_is_type(v, json_type_array) ? 0
           : bad(P, name, "modalities: an array, not %s", kind(v));
}

static int f_model(struct parse *P, const char *name, json_object *v)
{
    /* One model is served: any name is it (the reply says its name). */
    return json_object_is_type(v, json_type_string) ? 0
           : bad(P, name, "model: a string, not %s", kind(v));
}

/* ---------------------------------------------------------------- constraints and tools */

static int set_constraint(struct parse *P, int kind_, const char *text, const char *param)
{
    size_t n = text ? strlen(text) : 0;
    if (n > L8_MAX_CONSTRAINT)
        return bad(P, param, "%s: its schema is %zu bytes (at most %u)", param, n,
                   L8_MAX_CONSTRAINT);
    if (text && !(P->r.constraint_text = strdup(text)))
        return nomem(P);
    P->r.constraint = kind_;
    P->r.constraint_len = n;
    P->r.constraint_param = param;
    return 0;
}

static int f_response_format(struct parse *P, const char *name, json_object *v)
{
    json_object *type, *js, *schema;
    if (!json_object_object_get_ex(v, "type", &type) ||
        !json_object_is_type(type, json_type_string))
        return bad(P, "response_format.type", "response_format: {\"type\": \"text\" | "
                   "\"json_object\" | \"json_schema\", ...}");
    const char *t = json_object_get_string(type);
    if (!strcmp(t, "text"))
        return 0;
    if (!strcmp(t, "json_object"))
        return set_constraint(P, L8C_CONSTRAINT_JSON, NULL, "response_format");
    if (strcmp(t, "json_schema"))
        return bad(P, "response_format.type", "response_format.type: \"%.*s\" is not text, "
                   "json_object or json_schema", quote_len(t, 40), t);
    if (!json_object_object_get_ex(v, "json_schema", &js) ||
        !json_object_is_type(js, json_type_object))
        return bad(P, "response_format.json_schema", "response_format.json_schema: an object "
                   "{\"name\": ..., \"schema\": {...}}");
    if (!json_object_object_get_ex(js, "schema", &schema) ||
        !json_object_is_type(schema, json_type_object))
        return bad(P, "response_format.json_schema.schema", "response_format.json_schema.schema: "
                   "a JSON Schema object, not %s", schema ? kind(schema) : "missing");
    return set_constraint(P, L8C_CONSTRAINT_JSON_SCHEMA,
                          json_object_to_json_string_ext(schema, JSON_C_TO_STRING_PLAIN),
                          "response_format");
}

/* The name of tools[i] ({"type": "function", "function": {"name", ...}}),
 * or NULL. */
static const char *tool_name(json_object *tool)
{
    json_object *fn, *name;
    if (!json_object_object_get_ex(tool, "function", &fn) ||
        !json_object_object_get_ex(fn, "name", &name) ||
        !json_object_is_type(name, json_type_string) || !json_object_get_string_len(name))
        return NULL;
    return json_object_get_string(name);
}

static int check_tool(struct parse *P, size_t i, json_object *tool)
{
    char param[48];
    json_object *type, *fn, *params;
    snprintf(param, sizeof param, "tools[%zu]", i);
    if (!json_object_object_get_ex(tool, "type", &type) ||
        !json_object_is_type(type, json_type_string) ||
        strcmp(json_object_get_string(type), "function"))
        return bad(P, param, "%s: {\"type\": \"function\", \"function\": {\"name\": ..., "
                   "\"parameters\": {...}}}", param);
    if (!tool_name(tool))
        return bad(P, param, "%s.function.name: a non-empty string", param);
    json_object_object_get_ex(tool, "function", &fn);
    if (json_object_object_get_ex(fn, "parameters", &params) &&
        !json_object_is_type(params, json_type_object))
        return bad(P, param, "%s.function.parameters: a JSON Schema object, not %s", param,
                   kind(params));
    return 0;
}

static int f_tools(struct parse *P, const char *name, json_object *v)
{
    if (!json_object_is_type(v, json_type_array))
        return bad(P, name, "tools: an array of tool definitions, not %s", kind(v));
    size_t n = json_object_array_length(v);
    if (n > OAI_MAX_TOOLS)
        return bad(P, name, "tools: %zu of them (at most %d)", n, OAI_MAX_TOOLS);
    if (n && !(P->r.tools = calloc(n, sizeof *P->r.tools)))
        return nomem(P);
    for (; P->r.n_tools < n; P->r.n_tools++) {
        json_object *t = json_object_array_get_idx(v, P->r.n_tools);
        int rc = check_tool(P, P->r.n_tools, t);
        if (rc < 0)
            return rc;
        /* json-c keeps the keys' order and numbers as written, so the
         * template renders what the client sent. */
        if (!(P->r.tools[P->r.n_tools] = strdup(json_object_to_json_string_ext(t,
                                                JSON_C_TO_STRING_PLAIN))))
            return nomem(P);
    }
    P->tools = v;
    return 0;
}

static int f_tool_choice(struct parse *P, const char *name, json_object *v)
{
    P->tool_choice = v;
    return 0;
}

/* tool_choice, now that the tools are known: "none", "auto", "required",
 * or {"type": "function", "function": {"name": NAME}}. required and a
 * name are the JSON Schema of the calls allowed. */
static int settle_tools(struct parse *P)
{
    json_object *v = P->tool_choice;
    const char *s = json_object_is_type(v, json_type_string) ? json_object_get_string(v) : NULL;
    int c = !v ? OAI_TOOLS_AUTO : !s ? OAI_TOOLS_NAMED
            : !strcmp(s, "auto") ? OAI_TOOLS_AUTO
            : !strcmp(s, "none") ? OAI_TOOLS_NONE
            : !strcmp(s, "required") ? OAI_TOOLS_REQUIRED : -1;
    if (c < 0)
        return bad(P, "tool_choice", "tool_choice: \"auto\", \"none\", \"required\" or "
                   "{\"type\": \"function\", \"function\": {\"name\": NAME}}");
    if (!P->r.n_tools && (c == OAI_TOOLS_REQUIRED || c == OAI_TOOLS_NAMED))
        return bad(P, "tool_choice", "tool_choice: no tools were given to choose from");
    P->r.tool_choice = P->r.n_tools ? (enum oai_tool_choice)c : OAI_TOOLS_NONE;
    if (c == OAI_TOOLS_NONE) {
        for (size_t i = 0; i < P->r.n_tools; i++)
            free(P->r.tools[i]);
        P->r.n_tools = 0;
        return 0;
    }
    if (c == OAI_TOOLS_AUTO)
        return 0;
    if (P->r.constraint)
        return bad(P, "tool_choice", "tool_choice: \"%s\" constrains the reply to a call, "
                   "response_format too: give one of them", s ? s : "function");
    struct l8chat_opts co;
    l8chat_opts_init(&co);
    co.tools = (const char *const *)P->r.tools;
    co.n_tools = P->r.n_tools;
    if (c == OAI_TOOLS_NAMED) {
        json_object *fn, *nm;
        if (!json_object_object_get_ex(v, "function", &fn) ||
            !json_object_object_get_ex(fn, "name", &nm) ||
            !json_object_is_type(nm, json_type_string))
            return bad(P, "tool_choice", "tool_choice: {\"type\": \"function\", \"function\": "
                       "{\"name\": NAME}}");
        const char *want = json_object_get_string(nm);
        size_t i = 0;
        while (i < P->r.n_tools && strcmp(tool_name(json_object_array_get_idx(P->tools, i)), want))
            i++;
        if (i == P->r.n_tools)
            return bad(P, "tool_choice", "tool_choice: no tool is named \"%.*s\"",
                       quote_len(want, 64), want);
        co.tools += i;
        co.n_tools = 1;
    }
    char *schema;
    int rc = l8chat_tools_schema(&co, &schema);
    if (rc < 0)
        return rc == -ENOMEM ? nomem(P) : bad(P, "tools", "tools: a tool without a name");
    rc = set_constraint(P, L8C_CONSTRAINT_JSON_SCHEMA, schema, "tool_choice");
    free(schema);
    return rc;
}

/* ---------------------------------------------------------------- the body */

#define CHAT (1u << OAI_CHAT)
#define COMPL (1u << OAI_COMPLETIONS)
static const struct field {
    const char *name;
    unsigned endpoints;
    int (*take)(struct parse *P, const char *name, json_object *v);
} fields[] = {
    { "model", CHAT | COMPL, f_model },
    { "messages", CHAT, f_messages },
    { "prompt", COMPL, f_prompt },
    { "temperature", CHAT | COMPL, f_temperature },
    { "top_p", CHAT | COMPL, f_top_p },
    { "top_k", CHAT | COMPL, f_top_k },
    { "min_p", CHAT | COMPL, f_min_p },
    { "repetition_penalty", CHAT | COMPL, f_repetition_penalty },
    { "frequency_penalty", CHAT | COMPL, f_penalty },
    { "presence_penalty", CHAT | COMPL, f_penalty },
    { "seed", CHAT | COMPL, f_seed },
    { "max_tokens", CHAT | COMPL, f_max_tokens },
    { "max_completion_tokens", CHAT, f_max_tokens },
    { "n", CHAT | COMPL, f_one },
    { "best_of", COMPL, f_one },
    { "stop", CHAT | COMPL, f_stop },
    { "logprobs", CHAT | COMPL, f_logprobs },
    { "top_logprobs", CHAT, f_top_logprobs },
    { "logit_bias", CHAT | COMPL, f_logit_bias },
    { "echo", COMPL, f_echo },
    { "suffix", COMPL, f_suffix },
    { "stream", CHAT | COMPL, f_stream },
    { "stream_options", CHAT | COMPL, f_stream_options },
    { "response_format", CHAT, f_response_format },
    { "tools", CHAT, f_tools },
    { "tool_choice", CHAT, f_tool_choice },
    { "parallel_tool_calls", CHAT, f_ignored },
    { "user", CHAT | COMPL, f_ignored },
    { "metadata", CHAT, f_ignored },
    { "store", CHAT, f_ignored },
    { "service_tier", CHAT, f_ignored },
    { "modalities", CHAT, f_modalities },
};

static const char *const endpoint_path[] = { "/v1/chat/completions", "/v1/completions" };

static int take_field(struct parse *P, const char *key, json_object *v)
{
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++) {
        if (strcmp(key, fields[i].name))
            continue;
        if (!(fields[i].endpoints & (1u << P->r.endpoint)))
            return bad(P, key, "\"%s\" is a field of %s, not of %s", key,
                       endpoint_path[!P->r.endpoint], endpoint_path[P->r.endpoint]);
        /* null: left out, as OpenAI's clients send what is unset */
        return v ? fields[i].take(P, key, v) : 0;
    }
    return bad(P, key, "unrecognized request argument \"%.*s\"", quote_len(key, 64), key);
}

/* What no one field says: the prompt is there, the two length fields
 * agree, tool_choice fits the tools. */
static int settle(struct parse *P)
{
    if (P->r.endpoint == OAI_CHAT && !P->r.n_msgs)
        return bad(P, "messages", "messages: missing (an array of {\"role\", \"content\"})");
    if (P->r.endpoint == OAI_COMPLETIONS && !P->r.prompt && !P->r.prompt_ids)
        return bad(P, "prompt", "prompt: missing (a string, or an array of token ids)");
    if (P->max_tokens && P->max_completion_tokens && P->max_tokens != P->max_completion_tokens)
        return bad(P, "max_tokens", "max_tokens and max_completion_tokens differ: give one");
    P->r.max_tokens = (uint32_t)(P->max_tokens ? P->max_tokens : P->max_completion_tokens);
    return P->r.endpoint == OAI_CHAT ? settle_tools(P) : 0;
}

int oai_request_parse(enum oai_endpoint ep, const char *body, size_t len,
                      struct oai_request *out, struct oai_error *err)
{
    struct l8json_error je;
    json_object *root = l8json_parse(body, len, &je);
    if (!root) {
        if (je.line)
            oai_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                          "the body is not JSON: line %u, column %u: %s", je.line, je.column,
                          je.why);
        else
            oai_error_set(err, 400, "invalid_request_error", "invalid_json", NULL,
                          "the body is not JSON: %s", je.why);
        return -EINVAL;
    }
    if (!json_object_is_type(root, json_type_object)) {
        oai_error_set(err, 400, "invalid_request_error", NULL, NULL,
                      "the body must be a JSON object, not %s", kind(root));
        json_object_put(root);
        return -EINVAL;
    }
    struct parse P = { .err = err };
    P.r.endpoint = ep;
    P.r.temperature = 1;
    P.r.top_p = 1;
    P.r.repetition_penalty = 1;
    P.r.tool_choice = OAI_TOOLS_NONE;   /* until tools are given */
    int rc = 0;
    json_object_object_foreach(root, key, v) {
        if ((rc = take_field(&P, key, v)) < 0)
            break;
    }
    if (rc == 0)
        rc = settle(&P);
    json_object_put(root);
    if (rc < 0) {
        oai_request_free(&P.r);
        return rc;
    }
    *out = P.r;
    return 0;
}
