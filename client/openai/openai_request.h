/* openai_request.h - the body of an OpenAI API request, parsed and checked:
 * POST /v1/chat/completions and /v1/completions into struct oai_request,
 * or an OpenAI-shaped error that names the field that is wrong.
 *
 * Pure: no daemon, no tokenizer, no I/O (tests/fuzz/fuzz_openai.c). What
 * only llama8d knows (its limits, whether a schema compiles) is checked by
 * the caller once connected.
 *
 * Fields llama8d cannot honour are refused with a 400 naming them, never
 * ignored: n or best_of other than 1, top_logprobs or completions'
 * logprobs above 0, frequency_penalty or presence_penalty other than 0
 * (llama8d has repetition_penalty, a different rule: given as an
 * extension), a non-empty logit_bias, echo, suffix, non-text content.
 * Fields that change nothing here are taken (user, metadata, store,
 * service_tier, parallel_tool_calls: one call at most, as Llama 3.1's
 * format has). Unknown fields are refused, as OpenAI's API refuses them.
 * A null value is the field left out. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llama8client.h"

enum oai_endpoint {
    OAI_CHAT,          /* /v1/chat/completions */
    OAI_COMPLETIONS,   /* /v1/completions */
};

#define OAI_MAX_STOP 16        /* stop strings (OpenAI: 4) */
#define OAI_MAX_TOOLS 128
#define OAI_MAX_MESSAGES 4096
#define OAI_MAX_PROMPT_IDS (1u << 20)

enum oai_tool_choice {
    OAI_TOOLS_AUTO,       /* offered; the model calls one or answers */
    OAI_TOOLS_NONE,       /* not offered (n_tools is 0) */
    OAI_TOOLS_REQUIRED,   /* the reply is a call of one (constraint) */
    OAI_TOOLS_NAMED,      /* the reply is a call of the one named (constraint) */
};

struct oai_message {
    enum l8chat_role role;
    char *content;         /* len bytes (+ NUL), malloc'd */
    size_t len;
};

struct oai_request {
    enum oai_endpoint endpoint;
    struct oai_message *msgs;      /* chat: n_msgs >= 1 */
    size_t n_msgs;
    char *prompt;                  /* completions: the text (+ NUL), or */
    size_t prompt_len;
    uint32_t *prompt_ids;          /* its token ids, prompt NULL */
    size_t n_prompt_ids;
    /* Sampling, as struct l8c_params has it. OpenAI's defaults:
     * temperature 1, top_p 1; the extensions top_k, min_p and
     * repetition_penalty default to off. */
    float temperature, top_p, min_p, repetition_penalty;
    uint32_t top_k;
    bool has_seed;
    uint64_t seed;
    uint32_t max_tokens;           /* 0: not given (as many as the daemon allows) */
    char *stop[OAI_MAX_STOP];      /* non-empty, NUL-free, malloc'd */
    size_t n_stop;
    bool logprobs;                 /* the chosen tokens' log-probabilities */
    bool stream;
    bool include_usage;            /* stream_options.include_usage */
    /* The constraint (enum l8c_constraint) from response_format or
     * tool_choice, its text (malloc'd, or NULL) and the field it came
     * from, for messages. */
    int constraint;
    char *constraint_text;
    size_t constraint_len;
    const char *constraint_param;
    char **tools;                  /* n_tools tool definitions as JSON texts, malloc'd */
    size_t n_tools;
    enum oai_tool_choice tool_choice;
};

/* An error as OpenAI writes it: {"error": {"message", "type", "param",
 * "code"}} with its HTTP status. */
struct oai_error {
    int status;
    const char *type;      /* "invalid_request_error", "server_error", ... */
    const char *code;      /* NULL: null */
    char param[96];        /* "": null */
    char message[512];
};

__attribute__((format(printf, 6, 7)))
void oai_error_set(struct oai_error *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...);

/* body[0..len) for endpoint ep into *out (the caller's: oai_request_free),
 * or -EINVAL with err saying why (status 400) or -ENOMEM (status 500);
 * *out is then untouched. */
int oai_request_parse(enum oai_endpoint ep, const char *body, size_t len,
                      struct oai_request *out, struct oai_error *err);
void oai_request_free(struct oai_request *r);
