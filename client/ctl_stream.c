/* ctl_stream.c: what llama8ctl's streaming commands (generate, chat, pipe)
 * share: a request's reply text through the streaming decoder and the stop
 * strings, and its events as JSON lines. */
#include "ctl_ipc.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

bool ctl_stream_is_stop(const struct ctl_stream *x, uint32_t t)
{
    for (uint32_t i = 0; !x->p->ignore_eos && i < x->info->n_eos; i++)
        if (x->info->eos_ids[i] == t)
            return true;
    for (uint32_t i = 0; i < x->p->n_stop_ids; i++)
        if (x->p->stop_ids[i] == t)
            return true;
    return false;
}

void ctl_stream_reset(struct ctl_stream *x)
{
    if (x->st)
        l8tok_stream_reset(x->st);
    if (x->stop)
        l8tok_stop_reset(x->stop);
}

void ctl_stream_free(struct ctl_stream *x)
{
    free(x->end_text);
    x->end_text = NULL;
    x->end_cap = 0;
}

/* Append n bytes to x->end_text (kept NUL-terminated) at *len. */
static int end_text_add(struct ctl_stream *x, size_t *len, const char *s, size_t n)
{
    if (*len + n + 1 > x->end_cap) {
        char *nb = realloc(x->end_text, *len + n + 1);
        if (!nb)
            return -ENOMEM;
        x->end_text = nb;
        x->end_cap = *len + n + 1;
    }
    if (n)
        memcpy(x->end_text + *len, s, n);
    *len += n;
    x->end_text[*len] = 0;
    return 0;
}

int ctl_stream_text(struct ctl_stream *x, uint32_t token, bool end, const char **t, size_t *tl)
{
    *t = NULL;
    *tl = 0;
    if (!x->tok)
        return 0;
    const char *a = NULL;
    size_t al = 0, len = 0;
    int rc = 0;
    if (end ? l8tok_stream_flush(x->st, &a, &al) < 0
            : l8tok_stream_push(x->st, token, &a, &al) < 0)
        al = 0;
    /* Each piece is borrowed until its owner's next call: copied at once. */
    if (x->stop && (rc = l8tok_stop_push(x->stop, a ? a : "", al, &a, &al)) < 0)
        return rc;
    if (end_text_add(x, &len, a, al) < 0)
        return -ENOMEM;
    if (x->stop && end && rc == 0 &&
        (l8tok_stop_flush(x->stop, &a, &al) < 0 || end_text_add(x, &len, a, al) < 0))
        return -ENOMEM;
    if (len) {
        *t = x->end_text;
        *tl = len;
    }
    return rc;
}

static json_object *event_head(const char *kind, const char *id_key, json_object *id)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "event", json_object_new_string(kind));
    json_object_object_add(o, id_key, id);
    return o;
}

json_object *ctl_event_json(const struct l8_event *e, const char *id_key, json_object *id,
                            uint64_t t_recv, const char *text, size_t text_len)
{
    static const char *const kinds[] = { "?", "token", "done", "error", "started", "waiting" };
    json_object *o = event_head(e->kind <= 5 ? kinds[e->kind] : "?", id_key, id);
    if (e->kind == L8_EV_TOKEN) {
        json_object_object_add(o, "token", json_object_new_int64(e->token));
        json_object_object_add(o, "index", json_object_new_int64(e->index));
        if (!isnan(e->logprob))
            json_object_object_add(o, "logprob", json_object_new_double(e->logprob));
        if (text)
            json_object_object_add(o, "text", json_object_new_string_len(text, (int)text_len));
    } else if (e->kind == L8_EV_DONE) {
        json_object_object_add(o, "reason", json_object_new_string(l8c_done_name(e->reason)));
        json_object_object_add(o, "tokens", json_object_new_int64(e->index));
        if (text)
            json_object_object_add(o, "text", json_object_new_string_len(text, (int)text_len));
    } else if (e->kind == L8_EV_ERROR) {
        char msg[L8C_ERRLEN];
        json_object_object_add(o, "error", json_object_new_string(l8c_err_name(e->code)));
        json_object_object_add(o, "message",
                               text ? json_object_new_string_len(text, (int)text_len)
                                    : json_object_new_string(l8c_error_text(e, msg)));
    } else if (e->kind == L8_EV_STARTED) {
        json_object_object_add(o, "prompt_tokens", json_object_new_int64(e->token));
        json_object_object_add(o, "cached_tokens", json_object_new_int64(e->index));
    } else if (e->kind == L8_EV_WAITING) {
        char msg[L8C_ERRLEN];
        json_object_object_add(o, "why", json_object_new_string(l8c_wait_name(e->reason)));
        if (e->reason == L8_WAIT_PAGES) {
            json_object_object_add(o, "pages_needed", json_object_new_int64(e->token));
            json_object_object_add(o, "pages_free", json_object_new_int64(e->index));
        } else {
            json_object_object_add(o, "ahead", json_object_new_int64(e->index));
        }
        json_object_object_add(o, "message", json_object_new_string(l8c_wait_text(e, msg)));
    }
    json_object_object_add(o, "t_ns", json_object_new_uint64(e->t_ns));
    json_object_object_add(o, "t_recv_ns", json_object_new_uint64(t_recv));
    return o;
}

json_object *ctl_stop_text_done_json(const struct l8_event *e, const char *id_key,
                                     json_object *id)
{
    json_object *o = event_head("done", id_key, id);
    json_object_object_add(o, "reason", json_object_new_string("stop_text"));
    json_object_object_add(o, "tokens", json_object_new_int64((int64_t)e->index + 1));
    json_object_object_add(o, "t_ns", json_object_new_uint64(e->t_ns));
    json_object_object_add(o, "t_recv_ns", json_object_new_uint64(l8c_now_ns()));
    return o;
}

json_object *ctl_error_json(const char *id_key, json_object *id, const char *error,
                            const char *message)
{
    json_object *o = event_head("error", id_key, id);
    json_object_object_add(o, "error", json_object_new_string(error));
    if (message)
        json_object_object_add(o, "message", json_object_new_string(message));
    return o;
}

void ctl_print_json(json_object *o)
{
    puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN));
    fflush(stdout);
    json_object_put(o);
}
