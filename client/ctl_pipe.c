/* ctl_pipe.c: `llama8ctl pipe`: requests as JSON lines on stdin, their
 * events as JSON lines on stdout, any number in flight over one connection.
 * For editors and scripts that keep one process for a session: one
 * connection and one tokenizer load, concurrent requests, cancel by id. */
#include "ctl_ipc.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The longest request line: a long conversation's text, with room. */
#define PIPE_MAX_LINE (64u << 20)

enum preq_state {
    PQ_WAITING,     /* not yet submitted: the client's max_requests, or the rings full */
    PQ_RUNNING,     /* submitted; its events are shown */
    PQ_ENDING,      /* a stop string ended it: cancelled, its last events not shown */
};

struct preq {
    struct preq *next;
    json_object *id;                /* the caller's id, echoed in every event */
    enum preq_state state;
    bool cancel;                    /* a cancel to send */
    uint64_t rid;                   /* the daemon's id, once submitted */
    l8tok_ids prompt;               /* until submitted */
    struct l8c_params params;
    uint32_t stop_ids[CTL_MAX_STOP];
    const char *c_key;              /* the constraint's key, or NULL */
    char *c_text;                   /* its text (params.constraint_text), malloc'd */
    struct ctl_tools tools;         /* "tools" and "tool_choice" */
    bool tool_choice;               /* "tool_choice" given */
    bool tools_on;                  /* offered: the reply, collected, may be a call */
    char *text;                     /* the reply's text so far, with tools_on */
    size_t text_len, text_cap;
    struct ctl_stream s;
};

struct pipe {
    struct l8c_client *c;
    const struct l8c_info *info;
    l8tok *tok;
    struct preq *head;              /* every request not yet ended, in arrival order */
    uint32_t running;               /* submitted and not ended */
    bool eof;                       /* stdin ended */
    bool full;                      /* a submit or cancel found the rings full */
    char *line;                     /* the line read so far */
    uint64_t line_no;               /* of the line taken last, from 1 */
    size_t len, cap;
    bool skip;                      /* dropping the rest of a line past PIPE_MAX_LINE */
};

/* ---------------------------------------------------------------- output */

/* An error of ours about a request line (id may be NULL: JSON null). */
__attribute__((format(printf, 3, 4)))
static void say_error(json_object *id, const char *error, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctl_print_json(ctl_error_json("id", json_object_get(id), error, msg));
}

static void say_ready(const struct l8c_info *in)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "event", json_object_new_string("ready"));
    json_object_object_add(o, "model", json_object_new_string(in->model_name));
    json_object_object_add(o, "model_dir", json_object_new_string(in->model_dir));
    json_object_object_add(o, "backend", json_object_new_string(in->backend));
    json_object_object_add(o, "context_length", json_object_new_int64(in->context_length));
    json_object_object_add(o, "max_prompt_tokens", json_object_new_int64(in->max_prompt_tokens));
    json_object_object_add(o, "max_new_tokens", json_object_new_int64(in->max_new_tokens));
    json_object_object_add(o, "max_requests", json_object_new_int64(in->max_requests));
    json_object_object_add(o, "max_priority", json_object_new_int64(in->max_priority));
    ctl_print_json(o);
}

/* ---------------------------------------------------------------- requests */

static void preq_free(struct preq *q)
{
    json_object_put(q->id);
    free(q->c_text);
    free(q->text);
    ctl_tools_free(&q->tools);
    l8tok_ids_free(&q->prompt);
    l8tok_stop_free(q->s.stop);
    l8tok_stream_free(q->s.st);
    ctl_stream_free(&q->s);
    free(q);
}

/* Remove q (at *pp in the list) and free it. */
static void preq_end(struct pipe *P, struct preq **pp)
{
    struct preq *q = *pp;
    *pp = q->next;
    if (q->state != PQ_WAITING)
        P->running--;
    preq_free(q);
}

static struct preq **find_id(struct pipe *P, json_object *id)
{
    for (struct preq **pp = &P->head; *pp; pp = &(*pp)->next)
        if ((*pp)->state != PQ_ENDING && json_object_equal((*pp)->id, id))
            return pp;
    return NULL;
}

static struct preq **find_rid(struct pipe *P, uint64_t rid)
{
    for (struct preq **pp = &P->head; *pp; pp = &(*pp)->next)
        if ((*pp)->state != PQ_WAITING && (*pp)->rid == rid)
            return pp;
    return NULL;
}

static bool get_u64(json_object *v, uint64_t max, uint64_t *out)
{
    if (!json_object_is_type(v, json_type_int))
        return false;
    errno = 0;
    if (json_object_get_int64(v) < 0)
        return false;
    uint64_t x = json_object_get_uint64(v);
    if (errno || x > max)
        return false;
    *out = x;
    return true;
}

static bool get_float(json_object *v, float *out)
{
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return false;
    double d = json_object_get_double(v);
    if (!isfinite(d) || fabs(d) > 3.0e38)
        return false;
    *out = (float)d;
    return true;
}

/* An array of at most max token ids. */
static bool get_ids(json_object *v, size_t max, uint32_t *ids, size_t *n)
{
    if (!json_object_is_type(v, json_type_array) || json_object_array_length(v) > max)
        return false;
    *n = json_object_array_length(v);
    for (size_t i = 0; i < *n; i++) {
        uint64_t x;
        if (!get_u64(json_object_array_get_idx(v, i), UINT32_MAX, &x))
            return false;
        ids[i] = (uint32_t)x;
    }
    return true;
}

/* The request's sampling and length keys into q; -1 (said why) if one is
 * bad, 0 if key is not one of them, 1 taken. */
static int take_param(struct preq *q, json_object *id, const char *key, json_object *v)
{
    struct l8c_params *p = &q->params;
    uint64_t x;
    bool ok;
    if (!strcmp(key, "max_new")) {
        ok = get_u64(v, UINT32_MAX, &x) && x >= 1;
        p->max_new_tokens = (uint32_t)x;
    } else if (!strcmp(key, "temperature")) {
        ok = get_float(v, &p->temperature);
    } else if (!strcmp(key, "top_p")) {
        ok = get_float(v, &p->top_p);
    } else if (!strcmp(key, "min_p")) {
        ok = get_float(v, &p->min_p);
    } else if (!strcmp(key, "repetition_penalty")) {
        ok = get_float(v, &p->repetition_penalty);
    } else if (!strcmp(key, "top_k")) {
        ok = get_u64(v, UINT32_MAX, &x);
        p->top_k = (uint32_t)x;
    } else if (!strcmp(key, "seed")) {
        ok = get_u64(v, UINT64_MAX, &p->seed);
    } else if (!strcmp(key, "priority")) {
        ok = json_object_is_type(v, json_type_int) && json_object_get_int64(v) >= INT32_MIN &&
             json_object_get_int64(v) <= INT32_MAX;
        p->priority = (int32_t)json_object_get_int64(v);
    } else if (!strcmp(key, "logprobs") || !strcmp(key, "ignore_eos") ||
               !strcmp(key, "speculate")) {
        ok = json_object_is_type(v, json_type_boolean);
        bool b = json_object_get_boolean(v);
        if (key[0] == 's')
            p->no_speculate = !b;
        else
            *(key[0] == 'l' ? &p->logprobs : &p->ignore_eos) = b;
    } else if (!strcmp(key, "stop")) {
        size_t n = 0;
        ok = get_ids(v, CTL_MAX_STOP, q->stop_ids, &n);
        p->n_stop_ids = (uint32_t)n;
    } else {
        return 0;
    }
    if (!ok)
        say_error(id, "BAD_PARAMS", "\"%s\": %s", key,
                  !strcmp(key, "stop") ? "an array of at most 16 token ids"
                  : !strcmp(key, "logprobs") || !strcmp(key, "ignore_eos") ||
                    !strcmp(key, "speculate") ? "true or false"
                  : !strcmp(key, "max_new") ? "an integer >= 1"
                  : !strcmp(key, "priority") ? "a 32-bit integer"
                  : !strcmp(key, "top_k") || !strcmp(key, "seed") ? "an integer >= 0"
                  : "a number");
    return ok ? 1 : -1;
}

/* The constraint keys: "grammar" (GBNF text), "json_schema" (a JSON Schema,
 * an object or a string of its JSON text), "regex" (a string), "json_object"
 * (true: any JSON value; false: no constraint), one at most. -1 (said why)
 * if one is bad, 0 if key is not one of them, 1 taken. */
static int take_constraint(struct preq *q, json_object *id, const char *key, json_object *v)
{
    static const struct { const char *key; int kind; const char *what; } keys[] = {
        { "grammar", L8C_CONSTRAINT_GBNF, "a string of GBNF text" },
        { "json_schema", L8C_CONSTRAINT_JSON_SCHEMA,
          "a JSON Schema: an object, or a string of its JSON text" },
        { "regex", L8C_CONSTRAINT_REGEX, "a string" },
        { "json_object", L8C_CONSTRAINT_JSON, "true or false" },
    };
    size_t k = 0;
    while (k < sizeof keys / sizeof keys[0] && strcmp(key, keys[k].key))
        k++;
    if (k == sizeof keys / sizeof keys[0])
        return 0;
    const int kind = keys[k].kind;
    const char *t = NULL;
    size_t n = 0;
    bool ok;
    if (kind == L8C_CONSTRAINT_JSON) {
        ok = json_object_is_type(v, json_type_boolean);
        if (ok && !json_object_get_boolean(v))
            return 1;   /* false: no constraint, and no conflict with another key */
    } else if (kind == L8C_CONSTRAINT_JSON_SCHEMA && json_object_is_type(v, json_type_object)) {
        ok = true;
        t = json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN);
        n = strlen(t);
    } else {
        ok = json_object_is_type(v, json_type_string);
        if (ok) {
            t = json_object_get_string(v);
            n = (size_t)json_object_get_string_len(v);
        }
    }
    if (!ok) {
        say_error(id, "BAD_PARAMS", "\"%s\": %s", key, keys[k].what);
        return -1;
    }
    if (q->c_key) {
        say_error(id, "BAD_MESSAGE", "\"%s\" and \"%s\": give one constraint at most", q->c_key,
                  key);
        return -1;
    }
    q->c_key = keys[k].key;
    q->params.constraint = kind;
    if (t) {
        /* The line's JSON is freed once it is taken: the text is copied. */
        if (!(q->c_text = malloc(n + 1))) {
            say_error(id, "INTERNAL", "out of memory");
            return -1;
        }
        memcpy(q->c_text, t, n);
        q->c_text[n] = 0;
        q->params.constraint_text = q->c_text;
        q->params.constraint_len = n;
    }
    return 1;
}

/* "tools" (an array of tool definitions) and "tool_choice" ("auto",
 * "required", "none"). -1 (said why) if one is bad, 0 if key is not one of
 * them, 1 taken. */
static int take_tools(struct preq *q, json_object *id, const char *key, json_object *v)
{
    if (!strcmp(key, "tool_choice")) {
        if (!json_object_is_type(v, json_type_string) ||
            ctl_tool_choice_parse(json_object_get_string(v), &q->tools.choice) < 0) {
            say_error(id, "BAD_PARAMS", "\"tool_choice\": \"auto\", \"required\" or \"none\"");
            return -1;
        }
        q->tool_choice = true;
        return 1;
    }
    if (strcmp(key, "tools"))
        return 0;
    char why[CTL_WHY_LEN];
    int rc = ctl_tools_take(&q->tools, v, why);
    if (rc < 0) {
        say_error(id, rc == -ENOMEM ? "INTERNAL" : "BAD_PARAMS", "\"tools\": %s",
                  rc == -ENOMEM ? "out of memory" : why);
        return -1;
    }
    return 1;
}

/* The stop strings of "stop_text" (an array of non-empty strings). */
static int take_stop_text(struct preq *q, json_object *id, json_object *v)
{
    size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
    const char *s[CTL_MAX_STOP];
    bool ok = n >= 1 && n <= CTL_MAX_STOP;
    for (size_t i = 0; ok && i < n; i++) {
        json_object *e = json_object_array_get_idx(v, i);
        ok = json_object_is_type(e, json_type_string) && json_object_get_string_len(e) > 0 &&
             strlen(json_object_get_string(e)) == (size_t)json_object_get_string_len(e);
        s[i] = ok ? json_object_get_string(e) : NULL;
    }
    if (!ok) {
        say_error(id, "BAD_PARAMS", "\"stop_text\": an array of 1 to %d non-empty strings "
                  "without NUL", CTL_MAX_STOP);
        return -1;
    }
    if (l8tok_stop_new(s, n, &q->s.stop) < 0) {
        say_error(id, "INTERNAL", "out of memory");
        return -1;
    }
    return 0;
}

/* The prompt from exactly one of "messages", "text" (+ "system"), "raw"
 * and "ids". */
static int take_prompt(struct pipe *P, struct preq *q, json_object *id, json_object *root,
                       const struct l8chat_opts *co)
{
    static const char *const kinds[] = { "messages", "text", "raw", "ids" };
    json_object *v = NULL, *sys = NULL;
    int kind = -1;
    for (int k = 0; k < 4; k++) {
        json_object *x;
        if (!json_object_object_get_ex(root, kinds[k], &x))
            continue;
        if (kind >= 0) {
            say_error(id, "BAD_MESSAGE", "\"%s\" and \"%s\": give one prompt", kinds[kind],
                      kinds[k]);
            return -1;
        }
        kind = k;
        v = x;
    }
    if (kind < 0) {
        say_error(id, "BAD_MESSAGE", "no prompt: give \"messages\", \"text\", \"raw\" or \"ids\"");
        return -1;
    }
    if (json_object_object_get_ex(root, "system", &sys) &&
        (kind != 1 || !json_object_is_type(sys, json_type_string))) {
        say_error(id, "BAD_MESSAGE", "\"system\": a string, with \"text\" only");
        return -1;
    }
    if (co->n_tools && kind >= 2) {
        say_error(id, "BAD_MESSAGE", "\"tools\" are offered in the chat format: with "
                  "\"messages\" or \"text\", not \"%s\"", kinds[kind]);
        return -1;
    }
    if (kind != 0 && kind != 3 && !json_object_is_type(v, json_type_string)) {
        say_error(id, "BAD_MESSAGE", "\"%s\": a string", kinds[kind]);
        return -1;
    }
    int rc = 0;
    if (kind == 0) {
        struct l8chat_msg *m = NULL;
        size_t n = 0;
        char why[CTL_WHY_LEN];
        if ((rc = ctl_parse_messages(v, &m, &n, why)) < 0) {
            say_error(id, "BAD_MESSAGE", "\"messages\": %s", rc == -ENOMEM ? "out of memory" : why);
            return -1;
        }
        rc = l8chat_encode(P->tok, m, n, co, &q->prompt);
        free(m);
    } else if (kind == 1) {
        struct l8chat_msg m[2];
        size_t n = 0;
        if (sys)
            m[n++] = (struct l8chat_msg){ L8CHAT_SYSTEM, json_object_get_string(sys),
                                          (size_t)json_object_get_string_len(sys) };
        m[n++] = (struct l8chat_msg){ L8CHAT_USER, json_object_get_string(v),
                                      (size_t)json_object_get_string_len(v) };
        rc = l8chat_encode(P->tok, m, n, co, &q->prompt);
    } else if (kind == 2) {
        if (P->info->bos_id >= 0)
            rc = l8tok_ids_push(&q->prompt, (uint32_t)P->info->bos_id);
        if (rc == 0)
            rc = l8tok_encode(P->tok, json_object_get_string(v),
                              (size_t)json_object_get_string_len(v), L8TOK_ENCODE_DEFAULT,
                              &q->prompt);
    } else {
        size_t n = json_object_is_type(v, json_type_array) ? json_object_array_length(v) : 0;
        bool ok = json_object_is_type(v, json_type_array);
        for (size_t i = 0; ok && i < n && rc == 0; i++) {
            uint64_t x;
            ok = get_u64(json_object_array_get_idx(v, i), UINT32_MAX, &x);
            if (ok)
                rc = l8tok_ids_push(&q->prompt, (uint32_t)x);
        }
        if (!ok) {
            say_error(id, "BAD_MESSAGE", "\"ids\": an array of token ids");
            return -1;
        }
    }
    if (rc < 0) {
        say_error(id, rc == -ENOMEM ? "INTERNAL" : "BAD_MESSAGE", "the prompt: %s",
                  rc == -EILSEQ ? "not valid UTF-8" : strerror(-rc));
        return -1;
    }
    return 0;
}

/* A request line (root is an object without "cancel"): parsed and queued,
 * or answered with an error event. */
static void take_request(struct pipe *P, json_object *root)
{
    json_object *id = NULL;
    if (json_object_object_get_ex(root, "id", &id) &&
        !json_object_is_type(id, json_type_string) && !json_object_is_type(id, json_type_int)) {
        say_error(NULL, "BAD_MESSAGE", "\"id\": a string or an integer");
        return;
    }
    if (!id) {
        say_error(NULL, "BAD_MESSAGE", "no \"id\": every request needs one (a string or an "
                  "integer), to tell its events apart");
        return;
    }
    if (find_id(P, id)) {
        say_error(id, "DUPLICATE_REQUEST", "a request with this id is still running");
        return;
    }
    struct preq *q = calloc(1, sizeof(*q));
    if (!q) {
        say_error(id, "INTERNAL", "out of memory");
        return;
    }
    q->id = json_object_get(id);
    l8c_params_init(&q->params);
    q->params.max_new_tokens = 0;   /* "max_new", else ctl_default_max_new */
    q->params.stop_ids = q->stop_ids;
    json_object_object_foreach(root, key, v) {
        int r = 0;
        if (!strcmp(key, "id") || !strcmp(key, "messages") || !strcmp(key, "text") ||
            !strcmp(key, "raw") || !strcmp(key, "ids") || !strcmp(key, "system"))
            continue;
        if (!strcmp(key, "stop_text"))
            r = take_stop_text(q, id, v) < 0 ? -1 : 1;
        else if ((r = take_constraint(q, id, key, v)) == 0 &&
                 (r = take_tools(q, id, key, v)) == 0)
            r = take_param(q, id, key, v);
        if (r == 0)
            say_error(id, "BAD_MESSAGE", "unknown key \"%.*s\"", ctl_quote_len(key, 64), key);
        if (r <= 0) {
            preq_free(q);
            return;
        }
    }
    /* The tools: their choice's constraint is the one constraint. */
    struct l8chat_opts co;
    l8chat_opts_init(&co);
    const char *bad = q->tool_choice && !q->tools.n ? "\"tool_choice\" without \"tools\""
                      : q->tools.n && q->tools.choice == CTL_TOOLS_REQUIRED && q->c_key
                      ? "\"tool_choice\": \"required\" is a constraint (the tools' calls): "
                        "give no other" : NULL;
    if (bad) {
        say_error(id, "BAD_MESSAGE", "%s", bad);
        preq_free(q);
        return;
    }
    if (ctl_tools_apply(&q->tools, P->tok, &co, &q->params, q->stop_ids) < 0) {
        say_error(id, "BAD_PARAMS", "\"stop\": no room for the tool turn's stop ids");
        preq_free(q);
        return;
    }
    q->tools_on = co.n_tools > 0;
    if (q->tools_on && q->tools.choice == CTL_TOOLS_REQUIRED)
        q->c_key = "tool_choice";
    if (take_prompt(P, q, id, root, &co) < 0 || l8tok_stream_new(P->tok, &q->s.st) < 0) {
        preq_free(q);
        return;
    }
    /* What the daemon would refuse with a bare error code, refused here with
     * the limit it breaks. */
    ctl_default_max_new(&q->params, P->info, q->prompt.n);
    char why[L8C_ERRLEN];
    int code = l8c_check_request(P->c, q->prompt.ids, (uint32_t)q->prompt.n, &q->params, why);
    if (code) {
        say_error(id, l8c_err_name(code), "%s", why);
        preq_free(q);
        return;
    }
    q->s.tok = P->tok;
    q->s.info = P->info;
    q->s.p = &q->params;
    struct preq **pp = &P->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = q;
}

/* {"cancel": ID}: a waiting request ends at once, a running one when the
 * daemon confirms. */
static void take_cancel(struct pipe *P, json_object *root, json_object *id)
{
    if (!json_object_is_type(id, json_type_string) && !json_object_is_type(id, json_type_int)) {
        say_error(NULL, "BAD_MESSAGE", "\"cancel\": the id of a request, a string or an integer");
        return;
    }
    if (json_object_object_length(root) != 1) {
        say_error(id, "BAD_MESSAGE", "a cancel line has only \"cancel\"");
        return;
    }
    struct preq **pp = find_id(P, id);
    if (!pp) {
        say_error(id, "UNKNOWN_REQUEST", "no request with this id is waiting or running");
        return;
    }
    if ((*pp)->state == PQ_WAITING) {
        uint64_t now = l8c_now_ns();
        struct l8_event e = { .kind = L8_EV_DONE, .reason = L8_DONE_CANCELLED, .t_ns = now };
        ctl_print_json(ctl_event_json(&e, "id", json_object_get((*pp)->id), now, NULL, 0));
        preq_end(P, pp);
        return;
    }
    (*pp)->cancel = true;
}

static void take_line(struct pipe *P, const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && (s[i] == ' ' || s[i] == '\t' || s[i] == '\r'))
        i++;
    P->line_no++;
    if (i == n)
        return;     /* blank lines are allowed */
    const char *why;
    json_object *root = ctl_parse_json(s, n, &why);
    json_object *cancel;
    if (!root) {
        say_error(NULL, "BAD_MESSAGE", "line %" PRIu64 " is not a JSON object: %s", P->line_no,
                  why);
    } else if (!json_object_is_type(root, json_type_object)) {
        say_error(NULL, "BAD_MESSAGE", "line %" PRIu64 " is JSON %s, not an object", P->line_no,
                  json_type_to_name(json_object_get_type(root)));
    } else if (json_object_object_get_ex(root, "cancel", &cancel)) {
        take_cancel(P, root, cancel);
    } else {
        take_request(P, root);
    }
    json_object_put(root);
}

/* Read what stdin has; take each whole line. */
static int read_input(struct pipe *P)
{
    char buf[65536];
    ssize_t r = read(0, buf, sizeof buf);
    if (r < 0)
        return errno == EINTR || errno == EAGAIN ? 0 : -errno;
    if (r == 0) {
        P->eof = true;
        if (P->len && !P->skip)
            take_line(P, P->line, P->len);
        P->len = 0;
        return 0;
    }
    for (ssize_t i = 0; i < r;) {
        const char *nl = memchr(buf + i, '\n', (size_t)(r - i));
        size_t k = nl ? (size_t)(nl - (buf + i)) : (size_t)(r - i);
        if (!P->skip && P->len + k > PIPE_MAX_LINE) {
            say_error(NULL, "BAD_MESSAGE", "line %" PRIu64 " is longer than %u bytes: dropped",
                      P->line_no + 1, PIPE_MAX_LINE);
            P->skip = true;
        }
        if (!P->skip) {
            if (P->len + k + 1 > P->cap) {
                size_t cap = (P->len + k + 1) * 2;
                char *nb = realloc(P->line, cap);
                if (!nb)
                    return -ENOMEM;
                P->line = nb;
                P->cap = cap;
            }
            memcpy(P->line + P->len, buf + i, k);
            P->len += k;
        }
        i += (ssize_t)k;
        if (nl) {
            if (!P->skip)
                take_line(P, P->line, P->len);
            else
                P->line_no++;   /* counted as take_line counts */
            P->len = 0;
            P->skip = false;
            i++;
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- the daemon side */

/* Send the cancels asked for, and submit waiting requests in their order
 * while the client's max_requests allows. */
static int send_requests(struct pipe *P)
{
    P->full = false;
    for (struct preq **pp = &P->head; *pp;) {
        struct preq *q = *pp;
        int rc = 0;
        if (q->cancel && q->state != PQ_WAITING) {
            if ((rc = l8c_cancel(P->c, q->rid)) == 0)
                q->cancel = false;
        } else if (q->state == PQ_WAITING && P->running < P->info->max_requests) {
            if ((rc = l8c_submit(P->c, q->prompt.ids, (uint32_t)q->prompt.n, &q->params,
                                 &q->rid)) == 0) {
                q->state = PQ_RUNNING;
                P->running++;
                l8tok_ids_free(&q->prompt);
            } else if (rc == -EINVAL && q->params.constraint_len) {
                say_error(q->id, "PROMPT_TOO_LONG", "%zu prompt tokens and the %zu bytes of "
                          "\"%s\" do not fit the shared-memory arena (%u bytes)", q->prompt.n,
                          q->params.constraint_len, q->c_key, P->info->arena_size);
                preq_end(P, pp);
                continue;
            } else if (rc == -EINVAL) {
                say_error(q->id, "PROMPT_TOO_LONG", "%zu prompt tokens do not fit the "
                          "shared-memory arena (%u bytes)", q->prompt.n, P->info->arena_size);
                preq_end(P, pp);
                continue;
            }
        }
        if (rc == -EAGAIN) {
            P->full = true;     /* retried once the daemon read the ring */
            return 0;
        }
        if (rc < 0)
            return rc;
        pp = &q->next;
    }
    return 0;
}

static int on_event(struct pipe *P, const struct l8_event *e, uint64_t now)
{
    struct preq **pp = find_rid(P, e->request_id);
    if (!pp)
        return 0;   /* the end of a cancelled stop-string reply, or a late answer */
    struct preq *q = *pp;
    const bool last = e->kind == L8_EV_DONE || e->kind == L8_EV_ERROR;
    if (q->state == PQ_ENDING) {
        if (last)
            preq_end(P, pp);
        return 0;
    }
    const char *t = NULL;
    size_t tl = 0;
    int stopped = 0;
    if (e->kind == L8_EV_TOKEN && !ctl_stream_is_stop(&q->s, e->token))
        stopped = ctl_stream_text(&q->s, e->token, false, &t, &tl);
    else if (e->kind == L8_EV_DONE)
        stopped = ctl_stream_text(&q->s, 0, true, &t, &tl);
    if (stopped < 0)
        return stopped;
    if (q->tools_on && t && tl && (e->kind == L8_EV_TOKEN || e->kind == L8_EV_DONE)) {
        if (q->text_len + tl + 1 > q->text_cap) {
            size_t cap = (q->text_len + tl + 1) * 2;
            char *nb = realloc(q->text, cap);
            if (!nb)
                return -ENOMEM;
            q->text = nb;
            q->text_cap = cap;
        }
        memcpy(q->text + q->text_len, t, tl);
        q->text_len += tl;
        q->text[q->text_len] = 0;
    }
    /* The reply ends (its done event, or a stop string's): a tool call is
     * said before the done event. */
    json_object *call = NULL;
    if (q->tools_on && (e->kind == L8_EV_DONE || (stopped && e->kind == L8_EV_TOKEN))) {
        char *name, *args;
        if (l8chat_parse_tool_call(q->text ? q->text : "", q->text_len, &name, &args) == 0) {
            call = ctl_tool_call_event(name, args, "id", json_object_get(q->id));
            free(name);
            free(args);
            if (!call)
                return -ENOMEM;
        }
    }
    if (call && e->kind == L8_EV_DONE)
        ctl_print_json(call);
    /* A constraint the daemon could not compile: the error's message is its
     * reason, sent on the control socket just before the event. */
    const char *why = e->kind == L8_EV_ERROR && e->code == L8_ERR_BAD_GRAMMAR
                      ? l8c_request_error(P->c, e->request_id) : NULL;
    if (why) {
        t = why;
        tl = strlen(why);
    }
    ctl_print_json(ctl_event_json(e, "id", json_object_get(q->id), now, t, tl));
    if (stopped && e->kind == L8_EV_TOKEN) {
        if (call)
            ctl_print_json(call);
        ctl_print_json(ctl_stop_text_done_json(e, "id", json_object_get(q->id)));
        q->state = PQ_ENDING;
        q->cancel = true;
    } else if (last) {
        preq_end(P, pp);
    }
    return 0;
}

/* Every request still open ends with an error event: the connection is gone. */
static void say_gone(struct pipe *P, int rc)
{
    int code = 0;
    const char *msg = l8c_last_error(P->c, &code);
    while (P->head) {
        if (P->head->state != PQ_ENDING)
            say_error(P->head->id, code ? l8c_err_name(code) : "DISCONNECTED", "%s",
                      msg[0] ? msg : strerror(-rc));
        preq_end(P, &P->head);
    }
    fprintf(stderr, "llama8ctl: %s\n", msg[0] ? msg : strerror(-rc));
}

static int pipe_loop(struct pipe *P)
{
    struct l8_event ev[64];
    for (;;) {
        int rc = send_requests(P);
        if (rc < 0)
            return rc;
        if (P->eof && !P->head)
            return 0;
        int k = l8c_poll_events(P->c, ev, 64);
        if (k < 0)
            return k;
        uint64_t now = l8c_now_ns();
        for (int i = 0; i < k; i++)
            if ((rc = on_event(P, &ev[i], now)) < 0)
                return rc;
        if (k > 0 || l8c_prepare_wait(P->c))
            continue;
        struct pollfd pf[3] = { { l8c_event_fd(P->c), POLLIN, 0 },
                                { l8c_ctl_fd(P->c), POLLIN, 0 },
                                { P->eof ? -1 : 0, POLLIN, 0 } };
        /* Rings full: the daemon frees them as it reads, without an event. */
        if (poll(pf, 3, P->full ? 1 : -1) < 0 && errno != EINTR)
            return -errno;
        if (pf[2].revents && (rc = read_input(P)) < 0)
            return rc;
    }
}

static void pipe_usage(FILE *f)
{
    fprintf(f,
        "Usage: llama8ctl pipe [--socket PATH] [--wait] [--tokenizer FILE]\n"
        "Requests as JSON lines on stdin, their events as JSON lines on stdout, any number\n"
        "in flight over one connection: for editors and scripts.\n\n"
        "A request (one line; \"id\" and one prompt are required, the rest optional):\n"
        "  {\"id\":ID, \"messages\":[{\"role\":\"system|user|assistant\",\"content\":S},...]\n"
        "   | \"text\":S [,\"system\":S] | \"raw\":S | \"ids\":[T,...],\n"
        "   \"max_new\":N, \"temperature\":T, \"top_k\":K, \"top_p\":P, \"min_p\":P,\n"
        "   \"repetition_penalty\":R, \"seed\":S, \"stop\":[T,...], \"stop_text\":[S,...],\n"
        "   \"logprobs\":B, \"ignore_eos\":B, \"speculate\":B, \"priority\":N,\n"
        "   \"grammar\":S | \"json_schema\":{...}|S | \"regex\":S | \"json_object\":B,\n"
        "   \"tools\":[TOOL,...], \"tool_choice\":\"auto|required|none\"}\n"
        "  ID: a string or an integer, unique among the requests still running;\n"
        "  \"max_new\" defaults to 256, or the daemon's max_new_tokens or the context\n"
        "  left after the prompt if lower;\n"
        "  \"priority\": higher first; above 0 only for root and llama8d's user;\n"
        "  \"messages\" and \"text\" are chat-formatted, \"raw\" is <|begin_of_text|> + S;\n"
        "  a message's role may also be \"ipython\" (or \"tool\"), a tool's result, and an\n"
        "  assistant message may give \"tool_calls\" (one) for its content, as the\n"
        "  generate command's --messages reads them;\n"
        "  a constraint, one at most, as generate's options of the same names:\n"
        "  \"grammar\" GBNF text, \"json_schema\" a JSON Schema (an object, or a string of\n"
        "  its JSON text), \"regex\" the whole reply's regular expression, \"json_object\"\n"
        "  true for any JSON value; at most 1 MiB of text;\n"
        "  \"tools\": tool definitions as generate --tools FILE holds them, offered with\n"
        "  \"messages\" or \"text\"; \"tool_choice\" as --tool-choice (default \"auto\";\n"
        "  \"required\" is the constraint of the tools' calls, so no other key of one).\n"
        "{\"cancel\":ID} cancels one. Requests past the daemon's per-client limit wait here.\n\n"
        "Events, one JSON object a line: first \"ready\" (model, backend, context_length,\n"
        "  max_prompt_tokens, max_new_tokens, max_requests, max_priority), then with the\n"
        "  request's \"id\" (null for a line without one) as `generate --json`'s:\n"
        "  started, token (with \"text\"), tool_call (with \"tools\", a reply that is a\n"
        "  call: \"name\", \"arguments\" an object; before its done), done (\"reason\":\n"
        "  eos|stop|length|context|cancelled|grammar|stop_text), or error (\"error\": the\n"
        "  daemon's error name, and a \"message\" saying what was wrong, for BAD_GRAMMAR\n"
        "  the daemon's reason with the line and column in the constraint's text; for a\n"
        "  bad line, or one past a limit the daemon announced, BAD_MESSAGE, BAD_PARAMS,\n"
        "  BAD_TOKEN, EMPTY_PROMPT, PROMPT_TOO_LONG, BAD_GRAMMAR (a text over 1 MiB),\n"
        "  DUPLICATE_REQUEST or UNKNOWN_REQUEST without sending it;\n"
        "  DISCONNECTED for each request open when the daemon went away).\n\n"
        "At the end of stdin the requests in flight finish, then it exits.\n\n"
        "  --socket PATH          daemon socket (default $LLAMA8_SOCKET, else\n"
        "                         /run/llama8d/llama8d.sock)\n"
        CTL_WAIT_HELP
        "  --tokenizer FILE       tokenizer.json or model dir (default: the served model's)\n"
        "  -h, --help\n\n"
        "exit status: 0 stdin ended and every request ended, 1 the daemon went away or\n"
        "failed, 2 bad command line, 3 no daemon at the socket\n");
}

int ctl_pipe(int argc, char **argv)
{
    static const struct option lo[] = {
        {"socket", required_argument, 0, CTL_OPT_SOCKET},
        {"wait", optional_argument, 0, CTL_OPT_WAIT},
        {"tokenizer", required_argument, 0, CTL_OPT_TOKENIZER},
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    const char *sock = NULL, *tok_path = NULL;
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (opt) {
        case CTL_OPT_SOCKET: sock = optarg; break;
        case CTL_OPT_WAIT:
            if (ctl_wait_opt(optarg) < 0)
                return CTL_USAGE;
            break;
        case CTL_OPT_TOKENIZER: tok_path = optarg; break;
        case 'h': pipe_usage(stdout); return CTL_OK;
        default: return ctl_usage_error(NULL);
        }
    }
    if (optind < argc)
        return ctl_usage_error(argv[optind]);
    struct pipe P = {0};
    int rc = ctl_connect(sock, "llama8ctl pipe", &P.c);
    if (rc != CTL_OK)
        return rc;
    P.info = l8c_info(P.c);
    if (ctl_load_tokenizer(tok_path, P.c, &P.tok) < 0) {
        l8c_close(P.c);
        return CTL_FAIL;
    }
    say_ready(P.info);
    rc = pipe_loop(&P);
    if (rc < 0)
        say_gone(&P, rc);
    while (P.head)
        preq_end(&P, &P.head);
    free(P.line);
    l8tok_free(P.tok);
    l8c_close(P.c);
    return rc < 0 ? CTL_FAIL : CTL_OK;
}
