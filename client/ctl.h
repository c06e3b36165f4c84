/* ctl.h: llama8ctl's commands.  Each command is one file (ctl_<name>.c) with one entry
 * point, listed in the table in llama8ctl.c.  A command gets argv with argv[0] = its own
 * name (so getopt_long works as in a main), prints its own errors, and returns an exit
 * status: CTL_OK, CTL_FAIL (the operation failed: bad input, unreadable model, daemon
 * error) or CTL_USAGE (bad command line). */
#ifndef LLAMA8_CTL_H
#define LLAMA8_CTL_H

#include <stddef.h>

#include <json-c/json.h>

#include "llama8_tokenizer.h"

enum { CTL_OK = 0, CTL_FAIL = 1, CTL_USAGE = 2 };

struct ctl_cmd {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary; /* one line for `llama8ctl --help` */
};

int ctl_tokenize(int argc, char **argv);
int ctl_detokenize(int argc, char **argv);

/* Shared helpers (llama8ctl.c). */
/* Read all of fd 0 into a malloc'd buffer (NUL-terminated, *len bytes);
 * negative errno, -EFBIG past max bytes (0: CTL_STDIN_MAX, 1 GiB). */
#define CTL_STDIN_MAX (1u << 30)
int ctl_read_stdin(char **buf, size_t *len, size_t max);
/* argv[from..argc) joined by single spaces, malloc'd (*len bytes, NUL-terminated; ""
 * when there are none); NULL when out of memory. */
char *ctl_join_args(int from, int argc, char **argv, size_t *len);
/* A bad command line: getopt has said what (as "llama8ctl COMMAND: ..."),
 * or extra names an argument left over; then one line pointing at
 * --help. Returns CTL_USAGE. */
int ctl_usage_error(const char *extra);
/* The tokenizer path: the option's value, else $LLAMA8_TOKENIZER, else $LLAMA8_MODEL
 * (a model directory); NULL if none is set. */
const char *ctl_tokenizer_path(const char *opt);
/* l8tok_load(path), saying on stderr why not (the file a directory stands
 * for, what the error means), then hint (or nothing). Returns its result. */
int ctl_tokenizer_load(const char *path, const char *hint, l8tok **out);

/* How many bytes of s (at most max) to quote in a message without cutting
 * a UTF-8 character in two: for "%.*s". */
int ctl_quote_len(const char *s, int max);

/* s[0..n) as one JSON value, strictly (no comments or trailing commas),
 * in valid UTF-8 (so whatever is echoed back is too), with nothing after it
 * but white space; NULL with *why set (json-c's reason) otherwise. */
json_object *ctl_parse_json(const char *s, size_t n, const char **why);

/* Messages from a JSON array of {"role": "system"|"user"|"assistant"|"ipython"|"tool",
 * "content": TEXT} (at most CTL_MAX_MESSAGES); an assistant message with "tool_calls"
 * (one call, {"function": {"name", "arguments"}}) and no content gets the call's text
 * as its "content" (added to root). *msgs is malloc'd, the contents borrowed from root.
 * -EINVAL (why says what is wrong), -ENOMEM. */
#define CTL_MAX_MESSAGES 4096
#define CTL_WHY_LEN 160
int ctl_parse_messages(json_object *root, struct l8chat_msg **msgs, size_t *n,
                       char why[CTL_WHY_LEN]);

#endif /* LLAMA8_CTL_H */
