/* ctl_ipc.h: what llama8ctl's daemon commands (generate, chat, status,
 * bench, pipe) share: connecting, the sampling flags, reply text and
 * event printing. */
#pragma once
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdint.h>

#include <json-c/json.h>

#include "ctl.h"
#include "llama8client.h"

/* Exit status when the daemon cannot be reached (CTL_OK, CTL_FAIL and
 * CTL_USAGE are ctl.h's). */
#define CTL_NOCONN 3

/* Long options every request-making command accepts; their ids start at
 * CTL_OPT_BASE so commands can add their own short ones. */
enum {
    CTL_OPT_BASE = 1000,
    CTL_OPT_SOCKET, CTL_OPT_TEMP, CTL_OPT_TOPK, CTL_OPT_TOPP, CTL_OPT_MINP,
    CTL_OPT_REP, CTL_OPT_SEED, CTL_OPT_MAXNEW, CTL_OPT_STOP, CTL_OPT_LOGPROBS,
    CTL_OPT_IGNORE_EOS, CTL_OPT_PRIORITY, CTL_OPT_TOKENIZER, CTL_OPT_STOP_TEXT,
    CTL_OPT_STATS, CTL_OPT_NO_SPECULATE, CTL_OPT_WAIT,
};
#define CTL_COMMON_LONGOPTS \
    {"socket", required_argument, 0, CTL_OPT_SOCKET}, \
    {"tokenizer", required_argument, 0, CTL_OPT_TOKENIZER}, \
    {"temperature", required_argument, 0, CTL_OPT_TEMP}, \
    {"top-k", required_argument, 0, CTL_OPT_TOPK}, \
    {"top-p", required_argument, 0, CTL_OPT_TOPP}, \
    {"min-p", required_argument, 0, CTL_OPT_MINP}, \
    {"repetition-penalty", required_argument, 0, CTL_OPT_REP}, \
    {"seed", required_argument, 0, CTL_OPT_SEED}, \
    {"max-new", required_argument, 0, CTL_OPT_MAXNEW}, \
    {"stop", required_argument, 0, CTL_OPT_STOP}, \
    {"stop-text", required_argument, 0, CTL_OPT_STOP_TEXT}, \
    {"ignore-eos", no_argument, 0, CTL_OPT_IGNORE_EOS}, \
    {"no-speculate", no_argument, 0, CTL_OPT_NO_SPECULATE}, \
    {"priority", required_argument, 0, CTL_OPT_PRIORITY}, \
    {"stats", no_argument, 0, CTL_OPT_STATS}, \
    {"wait", optional_argument, 0, CTL_OPT_WAIT}
/* --wait[=SECONDS], for every command that talks to the daemon. */
#define CTL_WAIT_HELP \
    "  --wait                 wait up to 60 s (--wait=SECONDS: that long) for a daemon\n" \
    "                         that is not listening yet or still loading; without it, a\n" \
    "                         daemon that is not there is an error, and one that is\n" \
    "                         loading is waited for as long as the load goes on\n"
#define CTL_COMMON_HELP \
    "  --socket PATH          daemon socket (default $LLAMA8_SOCKET, else\n" \
    "                         /run/llama8d/llama8d.sock)\n" \
    CTL_WAIT_HELP \
    "  --tokenizer FILE       tokenizer.json or model dir (default: the served model's)\n" \
    "  --temperature T        0 = greedy (default), up to 100\n" \
    "  --top-k K  --top-p P  --min-p P  --repetition-penalty R  --seed S\n" \
    "  --max-new N            new tokens (default 256, or the daemon's limit or the\n" \
    "                         context left after the prompt if lower)\n" \
    "  --stop ID              extra stop token id (repeatable)\n" \
    "  --stop-text TEXT       end the reply where TEXT appears, TEXT not printed\n" \
    "                         (repeatable; the escapes \\n \\t \\r \\\\ are read)\n" \
    "  --ignore-eos           do not stop at the model's end-of-sequence ids\n" \
    "  --no-speculate         no speculative decoding (the same tokens, perhaps slower)\n" \
    "  --priority N           higher runs first (above 0: root and llama8d's user)\n" \
    "  --stats                after each reply, a line on stderr: prompt tokens (from\n" \
    "                         the prefix cache), tokens generated, time to first token\n" \
    "                         and tokens/s after it\n"

#define CTL_MAX_STOP 16

struct ctl_req_opts {
    const char *socket;
    const char *tokenizer;
    struct l8c_params params;
    uint32_t stop[CTL_MAX_STOP];
    char *stop_text[CTL_MAX_STOP];   /* --stop-text, escapes read; malloc'd */
    size_t n_stop_text;
    bool stats;                      /* --stats */
};

void ctl_req_opts_init(struct ctl_req_opts *o);
void ctl_req_opts_free(struct ctl_req_opts *o);
/* Handle one of the common options: 1 handled, 0 not ours, -1 bad value
 * (message printed). */
int ctl_req_opt(struct ctl_req_opts *o, int opt, const char *arg);
/* max_new_tokens left at 0 (the options' default): 256, or the daemon's
 * max_new_tokens where that is lower, or the room the context has after a
 * prompt of n_prompt tokens where that is lower still (at least 1: a
 * prompt that fills the context is refused for itself). */
void ctl_default_max_new(struct l8c_params *p, const struct l8c_info *in, size_t n_prompt);
/* The command line of a daemon command whose only options are --socket
 * PATH, --json (where json is not NULL) and --help, with no arguments: -1
 * to go on, else its exit status (CTL_OK after --help, CTL_USAGE). */
int ctl_plain_opts(int argc, char **argv, void (*usage)(FILE *), const char **sock, bool *json);
/* Why a call on c failed with rc: what the daemon or the library said, else
 * strerror(-rc). */
const char *ctl_why(struct l8c_client *c, int rc);
/* For --help: the socket a command without --socket connects to now, and
 * why ($LLAMA8_SOCKET, else the default), one "socket: ..." paragraph. */
void ctl_socket_help(FILE *f);
/* Connect; prints why not. Returns CTL_OK, CTL_NOCONN or CTL_FAIL. */
int ctl_connect(const char *socket, const char *name, struct l8c_client **out);
/* --wait's SECONDS (-1: not given), which ctl_connect reads; ctl_wait_opt
 * takes the option's argument (NULL: 60): 1, or -1 with the message said. */
extern int ctl_wait_s;
int ctl_wait_opt(const char *arg);
/* Load the tokenizer: --tokenizer, else the served model's directory. */
int ctl_load_tokenizer(const char *opt, const struct l8c_client *c, l8tok **out);
/* Parse "1 2 3" / "1,2,3" into ids (malloc'd). -EINVAL. */
int ctl_parse_ids(const char *s, l8tok_ids *out);

int ctl_generate(int argc, char **argv);
int ctl_chat(int argc, char **argv);
int ctl_status(int argc, char **argv);
int ctl_reload(int argc, char **argv);
int ctl_clients(int argc, char **argv);
int ctl_bench(int argc, char **argv);
int ctl_suggest(int argc, char **argv);
int ctl_explain(int argc, char **argv);

/* One request's reply (ctl_stream.c): its tokens through the streaming
 * decoder and the stop strings to the text shown. */
struct ctl_stream {
    const l8tok *tok;        /* NULL: ids only, no text */
    l8tok_stream *st;
    l8tok_stop *stop;        /* stop strings, or NULL */
    char *end_text;          /* the last event's text (see ctl_stream_text) */
    size_t end_cap;
    const struct l8c_info *info;
    const struct l8c_params *p;
};
/* Whether token ends the reply as a stop id (the model's eos unless
 * ignore_eos, or one of the request's): it adds no text. */
bool ctl_stream_is_stop(const struct ctl_stream *x, uint32_t token);
/* For a new request. */
void ctl_stream_reset(struct ctl_stream *x);
/* Frees end_text (tok, st, stop are the caller's). */
void ctl_stream_free(struct ctl_stream *x);
/* The text a TOKEN (or, with end, the DONE) event adds to the reply: the
 * streaming decoder's, through the stop strings; at the end, what either
 * still holds. *t (valid until the next call) is NULL when there is none.
 * Returns 1 when a stop string ended the reply, 0, or -ENOMEM. */
int ctl_stream_text(struct ctl_stream *x, uint32_t token, bool end, const char **t, size_t *tl);

/* Events as --json lines: {"event": ..., id_key: id, ...}. Each takes
 * ownership of id; ctl_print_json prints one line, flushes, and frees o.
 * text: a token or done event's "text"; for an error event, its "message"
 * instead of l8c_error_text's (the daemon's own, l8c_request_error's). */
json_object *ctl_event_json(const struct l8_event *e, const char *id_key, json_object *id,
                            uint64_t t_recv, const char *text, size_t text_len);
/* The done event of a reply a stop string ended at token event e. */
json_object *ctl_stop_text_done_json(const struct l8_event *e, const char *id_key,
                                     json_object *id);
/* An error of ours (not the daemon's): {"event":"error", ..., "error": error,
 * "message": message}. */
json_object *ctl_error_json(const char *id_key, json_object *id, const char *error,
                            const char *message);
void ctl_print_json(json_object *o);

int ctl_pipe(int argc, char **argv);

/* Custom tools (ctl_tools.c), for the chat-formatted prompts of generate,
 * chat and pipe. */
enum ctl_tool_choice {
    CTL_TOOLS_AUTO,       /* offered; the model may call one or answer */
    CTL_TOOLS_REQUIRED,   /* offered, and the reply constrained to a call of one */
    CTL_TOOLS_NONE,       /* not offered */
};
#define CTL_MAX_TOOLS 128
struct ctl_tools {
    char **texts;                /* n tool definitions as JSON texts, malloc'd */
    size_t n;
    enum ctl_tool_choice choice;
    char *schema;                /* l8chat_tools_schema's, for CTL_TOOLS_REQUIRED */
};
/* "auto" / "required" / "none"; -EINVAL otherwise. */
int ctl_tool_choice_parse(const char *s, enum ctl_tool_choice *out);
/* The tools of arr, a JSON array of 1 to CTL_MAX_TOOLS objects each with a
 * name (OpenAI-style {"type":"function","function":{...}} or the bare
 * function object), into t (its choice kept, its old tools freed).
 * -EINVAL (why says what is wrong), -ENOMEM; t untouched on failure. */
int ctl_tools_take(struct ctl_tools *t, json_object *arr, char why[CTL_WHY_LEN]);
/* --tools FILE: the file read (a regular file, at most 1 MiB) and taken;
 * -1 with the message printed. */
int ctl_tools_load(struct ctl_tools *t, const char *path);
/* Where t has tools and its choice offers them: co's tools, the stop ids
 * that end a turn with tools (<|eot_id|>, <|eom_id|>) added to p's (stop,
 * the array p->stop_ids points to), and for CTL_TOOLS_REQUIRED p's
 * constraint the tools' JSON Schema (t->schema, borrowed). co's tools
 * borrow t. -E2BIG (more than CTL_MAX_STOP stop ids), -EINVAL, -ENOMEM. */
int ctl_tools_apply(const struct ctl_tools *t, const l8tok *tok, struct l8chat_opts *co,
                    struct l8c_params *p, uint32_t stop[CTL_MAX_STOP]);
void ctl_tools_free(struct ctl_tools *t);
/* A tool call (l8chat_parse_tool_call's name and arguments) as the event
 * {"event":"tool_call", id_key: id, "name": NAME, "arguments": {...}};
 * NULL (out of memory, or arguments that do not parse). Takes ownership of
 * id. */
json_object *ctl_tool_call_event(const char *name, const char *arguments_json,
                                 const char *id_key, json_object *id);

/* generate's and chat's own options (below CTL_OPT_BASE). */
enum { CMD_RAW = 1, CMD_IDS, CMD_SYSTEM, CMD_JSON, CMD_MESSAGES, CMD_GRAMMAR, CMD_JSON_SCHEMA,
       CMD_REGEX, CMD_JSON_OBJECT, CMD_TOOLS, CMD_TOOL_CHOICE, CMD_STDIN_FIRST };

#define TOOLS_LONGOPTS \
    {"tools", required_argument, 0, CMD_TOOLS}, \
    {"tool-choice", required_argument, 0, CMD_TOOL_CHOICE}
#define TOOLS_HELP \
    "  --tools FILE           offer the tools of FILE (a JSON array of tool definitions,\n" \
    "                         {\"type\":\"function\",\"function\":{\"name\":...,\n" \
    "                         \"description\":...,\"parameters\":{JSON Schema}}} or the\n" \
    "                         bare function objects; up to 1 MiB) in the chat format; a\n" \
    "                         reply that is a call of one is followed by the line\n" \
    "                           tool call: NAME ARGUMENTS\n" \
    "                         (ARGUMENTS a JSON object on one line; NAME as a JSON string\n" \
    "                         where it has other than letters, digits, _ . -)\n" \
    "  --tool-choice auto|required|none\n" \
    "                         auto (default): the model may call one or answer;\n" \
    "                         required: the reply is a call of one (a JSON Schema\n" \
    "                         constraint, so no other constraint); none: not offered\n"

/* The option loop of generate and chat: the request options go to o
 * (ctl_req_opt), --tools and --tool-choice to tools (the file read and
 * checked after the loop, before any daemon is asked), the command's own to
 * own(opt, optarg, ctx), which returns false for one it does not know.
 * Returns -1 to go on, else the command's exit status (CTL_OK after --help,
 * CTL_USAGE, CTL_FAIL for a tools file that cannot be read or is not one),
 * o and tools freed then. */
int ctl_req_getopt(int argc, char **argv, const struct option *lo, struct ctl_req_opts *o,
                   struct ctl_tools *tools, bool (*own)(int opt, const char *arg, void *ctx),
                   void *ctx, void (*usage)(FILE *));

/* One request of generate or chat, as it streams. */
struct ctl_run {
    struct ctl_stream s;
    bool json;
    char *text;              /* the reply, collected for chat (may be NULL) */
    size_t text_len, text_cap;
    bool collect;
    bool stats;              /* --stats: the figures below, on stderr at the end */
    bool say_cut;            /* a reply cut by max_new is said on stderr (generate
                                on a terminal) */
    const char *constraint;  /* the constraint's option for messages ("--grammar FILE"),
                                or NULL */
    const struct ctl_tools *tools;   /* offered: a reply that is a call is shown as one */
    char *call;              /* with keep_call: that call as the assistant turn's text
                                (l8chat_format_tool_call), malloc'd */
    bool keep_call;
    uint64_t t_submit, t_first, t_last;   /* CLOCK_MONOTONIC ns, the daemon's for tokens */
    uint32_t prompt, cached, tokens;
    /* chat on a terminal: set (by a SIGINT handler) to cancel the reply;
     * cancelled says it was. NULL: not watched. */
    volatile sig_atomic_t *interrupt;
    bool cancelled;
};
/* Submit one prompt (an unset max_new: what fits after it) and print its
 * events until DONE or ERROR: CTL_OK or CTL_FAIL (the reason printed). */
int ctl_run_one(struct l8c_client *c, struct ctl_run *x, const uint32_t *ids, size_t n);
