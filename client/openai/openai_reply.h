/* openai_reply.h - replies in OpenAI's shapes: a whole chat.completion or
 * text_completion, the server-sent events of a streamed one
 * ("data: {...}\n\n", ending "data: [DONE]\n\n"), errors, the model list. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "openai_gen.h"
#include "openai_request.h"

/* What every object of one reply repeats. */
struct oai_meta {
    enum oai_endpoint endpoint;
    char id[48];            /* "chatcmpl-..." or "cmpl-..." */
    char call_id[40];       /* "call_...": a tool call's */
    int64_t created;        /* Unix time */
    const char *model;      /* the daemon's, borrowed */
};
/* A fresh id; -1 if no random bytes could be had. */
int oai_meta_init(struct oai_meta *m, enum oai_endpoint ep, const char *model);

/* Bytes for the wire, appended to; off: how many were sent. */
struct oai_buf {
    char *s;
    size_t len, cap, off;
};
void oai_buf_free(struct oai_buf *b);

/* A JSON value as compact text, malloc'd (*len bytes); NULL out of memory.
 * Takes o. */
char *oai_json_text(json_object *o, size_t *len);

/* The whole reply of a finished g. */
json_object *oai_reply_whole(const struct oai_meta *m, const struct oai_gen *g);

/* Stream events, each "data: ...\n\n", appended to b; -ENOMEM. */
/* The opening chunk (chat: the assistant's role). */
int oai_sse_open(struct oai_buf *b, const struct oai_meta *m);
/* g's new text and log-probabilities, if it has any. */
int oai_sse_delta(struct oai_buf *b, const struct oai_meta *m, const struct oai_gen *g);
/* The end of a finished g: its tool call, the finish reason, the usage
 * (with include_usage), [DONE]. */
int oai_sse_close(struct oai_buf *b, const struct oai_meta *m, const struct oai_gen *g,
                  bool include_usage);
/* An error in place of the rest of the stream. */
int oai_sse_error(struct oai_buf *b, const struct oai_error *e);

json_object *oai_error_json(const struct oai_error *e);
/* GET /v1/models (list) or /v1/models/NAME (one). */
json_object *oai_model_json(const char *model, bool list);
