/* openai_gen.h - one OpenAI request run on llama8d: its prompt made (the
 * Llama 3.1 chat template for chat, the tokenizer for completions), the
 * request submitted on the HTTP connection's client, and its events turned
 * into the reply's text, log-probabilities, tool call, finish reason and
 * usage as they arrive.
 *
 * The text goes through the same pieces as llama8ctl generate's: the
 * streaming decoder (whole UTF-8 characters), then the stop strings; stop
 * ids add no text. So a greedy reply here is byte for byte llama8ctl's.
 * Where tools are offered, text that may be a tool call ("{" or
 * <|python_tag|> after white space) is held until the reply ends, then
 * given as the call (l8chat_parse_tool_call) or as text. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llama8client.h"
#include "openai_request.h"

enum oai_finish {
    OAI_FINISH_NONE,        /* still running */
    OAI_FINISH_STOP,        /* eos, a stop id or string, the constraint's end */
    OAI_FINISH_LENGTH,      /* max_tokens or the context */
    OAI_FINISH_TOOL_CALLS,  /* the reply is a tool call (call_name, call_args) */
};

/* A chosen token's log-probability; token is its bytes as UTF-8 (bytes
 * that are no character on their own as U+FFFD), malloc'd. */
struct oai_logprob {
    uint32_t id;
    char *token;
    size_t len;
    float logprob;
};

struct oai_gen {
    struct l8c_client *c;          /* borrowed: the connection's */
    const l8tok *tok;              /* borrowed */
    const struct oai_request *req; /* borrowed */
    l8tok_ids prompt;
    struct l8c_params p;
    uint32_t stop_ids[8];          /* with tools: the ids that end a tool turn */
    uint64_t rid;
    bool running;                  /* submitted, its DONE or ERROR not yet seen */
    bool started;                  /* the daemon took it (an event other than ERROR came) */
    bool broken;                   /* the connection to llama8d is gone: close it */
    l8tok_stream *st;              /* the reply's decoder */
    l8tok_stream *one;             /* one token's text, for logprobs */
    l8tok_stop *stop;              /* stop strings, or NULL */
    bool tools_on;                 /* tools offered: the reply may be a call */
    bool may_call;                 /* the text so far may still be a call: held */
    char *held;                    /* that text */
    size_t held_len, held_cap;
    /* What came since oai_gen_taken: new text and log-probabilities. */
    char *text;
    size_t text_len, text_cap;
    struct oai_logprob *lp;
    size_t n_lp, lp_cap;
    char *call_name, *call_args;   /* OAI_FINISH_TOOL_CALLS: the call, malloc'd */
    uint32_t prompt_tokens, cached_tokens, completion_tokens;
    enum oai_finish finish;
};

/* Make r's prompt and submit it on c. 0, or -1 with err said (a 400 for
 * what the daemon's limits refuse, 503 when it is gone); g is then ended
 * already. */
int oai_gen_start(struct oai_gen *g, struct l8c_client *c, const l8tok *tok,
                  const struct oai_request *r, struct oai_error *err);
/* Wait for events and take them: 1 the reply is finished (g->finish), 0
 * more may come (text or log-probabilities may be new), -1 the request
 * failed (err said), -ECONNABORTED hup_fd hung up or quit_fd became
 * readable (the request is cancelled). hup_fd: the HTTP connection's
 * socket (POLLRDHUP), or -1. */
int oai_gen_step(struct oai_gen *g, int hup_fd, int quit_fd, struct oai_error *err);
/* The new text and log-probabilities were taken: clear them. */
void oai_gen_taken(struct oai_gen *g);
/* Cancel what still runs (waiting a little for the daemon to confirm:
 * else g->broken) and free. */
void oai_gen_end(struct oai_gen *g);
/* An l8_err code and the daemon's words as an OpenAI error; param is the
 * field a refused constraint came from. */
void oai_daemon_error(int code, const char *why, const char *param, struct oai_error *err);
