/* client_text.c - the one-call layer of libllama8client (llama8client.h,
 * "text in, text out"): messages in, the reply's text out through a
 * callback, on the public calls of client.c and the tokenizer. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "llama8client.h"

/* One request's events until its DONE or ERROR. */
static int stream_reply(struct l8c_client *c, const l8tok *tok, uint64_t id, l8c_text_fn *fn,
                        void *arg, struct l8c_reply *out)
{
    l8tok_stream *st = NULL;
    int rc = l8tok_stream_new(tok, &st);
    if (rc < 0) {
        snprintf(out->message, sizeof out->message, "out of memory");
        l8c_cancel(c, id);
        return rc;
    }
    bool cancelled = false;
    for (;;) {
        struct l8_event ev[64];
        int n = l8c_wait_events(c, ev, 64, -1);
        if (n < 0) {
            snprintf(out->message, sizeof out->message, "%s", l8c_last_error(c, NULL));
            rc = n;
            break;
        }
        for (int i = 0; i < n; i++) {
            const struct l8_event *e = &ev[i];
            const char *text;
            size_t len;
            if (e->request_id != id)
                continue;
            if (e->kind == L8_EV_STARTED) {
                out->cached_tokens = e->index;
            } else if (e->kind == L8_EV_TOKEN) {
                out->tokens++;
                if (cancelled || l8tok_is_special(tok, e->token) ||
                    l8tok_stream_push(st, e->token, &text, &len) < 0 || !len)
                    continue;
                if (fn(arg, text, len) != 0) {
                    cancelled = true;
                    l8c_cancel(c, id);   /* DONE (cancelled) follows */
                }
            } else if (e->kind == L8_EV_ERROR) {
                char why[L8C_ERRLEN];
                const char *more = l8c_request_error(c, id);
                out->error = e->code;
                snprintf(out->message, sizeof out->message, "%s: %.200s", l8c_err_name(e->code),
                         more ? more : l8c_error_text(e, why));
                l8tok_stream_free(st);
                return -EIO;
            } else if (e->kind == L8_EV_DONE) {
                out->reason = e->reason;
                if (!cancelled && l8tok_stream_flush(st, &text, &len) == 0 && len)
                    fn(arg, text, len);
                l8tok_stream_free(st);
                return 0;
            }
        }
    }
    l8tok_stream_free(st);
    return rc;
}

int l8c_chat_stream(struct l8c_client *c, const struct l8chat_msg *msgs, size_t n,
                    const struct l8c_params *p, l8c_text_fn *fn, void *arg,
                    struct l8c_reply *out)
{
    struct l8c_reply none;
    if (!out)
        out = &none;
    memset(out, 0, sizeof *out);
    const l8tok *tok = l8c_tokenizer(c);
    if (!tok) {
        snprintf(out->message, sizeof out->message, "%s", l8c_last_error(c, NULL));
        return -ENOENT;
    }
    l8tok_ids prompt = {0};
    int rc = l8chat_encode(tok, msgs, n, NULL, &prompt);
    if (rc < 0) {
        snprintf(out->message, sizeof out->message, "the messages: %s",
                 rc == -EILSEQ ? "not UTF-8" : strerror(-rc));
        l8tok_ids_free(&prompt);
        return rc;
    }
    const struct l8c_info *in = l8c_info(c);
    struct l8c_params q;
    if (p) {
        q = *p;
    } else {
        l8c_params_init(&q);   /* what fits after the prompt, if less */
        q.max_new_tokens = l8c_max_new_fitting(in, prompt.n, q.max_new_tokens);
    }
    out->prompt_tokens = (uint32_t)prompt.n;
    char why[L8C_ERRLEN];
    int code = l8c_check_request(c, prompt.ids, (uint32_t)prompt.n, &q, why);
    uint64_t id;
    if (code) {
        out->error = code;
        snprintf(out->message, sizeof out->message, "%s: %.200s", l8c_err_name(code), why);
        rc = -EIO;
    } else if ((rc = l8c_submit(c, prompt.ids, (uint32_t)prompt.n, &q, &id)) < 0) {
        snprintf(out->message, sizeof out->message, "%s", l8c_last_error(c, NULL));
    } else {
        rc = stream_reply(c, tok, id, fn, arg, out);
    }
    l8tok_ids_free(&prompt);
    return rc;
}

int l8c_generate_text(struct l8c_client *c, const char *text, const struct l8c_params *p,
                      l8c_text_fn *fn, void *arg, struct l8c_reply *out)
{
    struct l8chat_msg m = { L8CHAT_USER, text, strlen(text) };
    return l8c_chat_stream(c, &m, 1, p, fn, arg, out);
}
