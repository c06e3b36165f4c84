/* llama8ctl: command-line client of llama8d.  main() only dispatches: each command lives
 * in its own ctl_<name>.c and is one line in the table below. */
#include "ctl.h"
#include "ctl_ipc.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/model/read_file.h"
#include "l8_build.h"
#include "l8_json.h"

static const struct ctl_cmd commands[] = {
    {"tokenize", ctl_tokenize, "text -> token ids (no daemon needed)"},
    {"detokenize", ctl_detokenize, "token ids -> text (no daemon needed)"},
    {"generate", ctl_generate, "prompt -> streamed reply from llama8d"},
    {"chat", ctl_chat, "interactive conversation with llama8d"},
    {"status", ctl_status, "what llama8d is doing"},
    {"clients", ctl_clients, "who is connected to llama8d and what each is doing"},
    {"reload", ctl_reload, "llama8d reads its configuration again (root, its user)"},
    {"bench", ctl_bench, "latency and throughput of llama8d"},
    {"pipe", ctl_pipe, "JSON-lines requests on stdin, events on stdout (for editors)"},
    {"suggest", ctl_suggest, "a description -> one shell command (for the shell key)"},
    {"explain", ctl_explain, "a failed command's output on stdin -> why, and the fix"},
};

#define N_COMMANDS (sizeof(commands) / sizeof(commands[0]))

/* "llama8ctl COMMAND": the command's argv[0], so that getopt's messages
 * name it. */
static char ctl_cmd[64] = "llama8ctl";

int ctl_usage_error(const char *extra)
{
    if (extra)
        fprintf(stderr, "%s: unexpected argument '%s'\n", ctl_cmd, extra);
    fprintf(stderr, "Try '%s --help'.\n", ctl_cmd);
    return CTL_USAGE;
}

char *ctl_join_args(int from, int argc, char **argv, size_t *len)
{
    size_t total = 1, n = 0;
    for (int i = from; i < argc; i++)
        total += strlen(argv[i]) + 1;
    char *b = malloc(total);
    if (!b)
        return NULL;
    for (int i = from; i < argc; i++) {
        if (i > from)
            b[n++] = ' ';
        size_t l = strlen(argv[i]);
        memcpy(b + n, argv[i], l);
        n += l;
    }
    b[n] = '\0';
    if (len)
        *len = n;
    return b;
}

int ctl_read_stdin(char **buf, size_t *len, size_t max)
{
    size_t cap = 1 << 16, n = 0;
    if (!max || max > CTL_STDIN_MAX)
        max = CTL_STDIN_MAX;
    char *b = malloc(cap);
    if (!b)
        return -ENOMEM;
    for (;;) {
        if (cap - n < 4096) {
            char *nb = realloc(b, cap * 2);
            if (!nb) {
                free(b);
                return -ENOMEM;
            }
            b = nb;
            cap *= 2;
        }
        ssize_t r = read(0, b + n, cap - n - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            int e = errno;
            free(b);
            return -e;
        }
        if (r == 0)
            break;
        if ((n += (size_t)r) > max) {
            free(b);
            return -EFBIG;
        }
    }
    b[n] = 0;
    *buf = b;
    *len = n;
    return 0;
}

int ctl_quote_len(const char *s, int max)
{
    int n = (int)strnlen(s, (size_t)max + 1);
    if (n <= max)
        return n;
    while (max > 0 && ((unsigned char)s[max] & 0xc0) == 0x80)   /* s[max]: the first left out */
        max--;
    return max;
}

json_object *ctl_parse_json(const char *s, size_t n, const char **why)
{
    struct l8json_error e;
    json_object *root = l8json_parse(s, n, &e);
    if (root)
        return root;
    /* Where: the byte on one line (a pipe's request), else line and column. */
    static char buf[200];
    const unsigned char ch = e.offset < n ? (unsigned char)s[e.offset] : 0;
    char at[64] = "";
    if (e.line == 1)
        snprintf(at, sizeof at, ", at byte %u", e.column);
    else if (e.line)
        snprintf(at, sizeof at, ", at line %u, column %u", e.line, e.column);
    if (at[0] && ch >= 0x20 && ch < 0x7f && e.offset < n)
        snprintf(at + strlen(at), sizeof at - strlen(at), " ('%c')", ch);
    snprintf(buf, sizeof buf, "%s%s", e.why, e.offset < n || !e.line ? at : "");
    *why = buf;
    return NULL;
}

/* An assistant message's "tool_calls" (OpenAI's form, one call: the Llama
 * 3.1 template takes no more) as its "content", the call's text as the
 * template writes it, added to o so that it is borrowed from root as the
 * other contents are. -EINVAL (why set), -ENOMEM. */
static int tool_calls_content(json_object *o, json_object *calls, size_t i,
                              char why[CTL_WHY_LEN])
{
    json_object *call, *fn, *name, *args;
    if (!json_object_is_type(calls, json_type_array) || json_object_array_length(calls) != 1) {
        snprintf(why, CTL_WHY_LEN, "message %zu: \"tool_calls\": an array of one call", i);
        return -EINVAL;
    }
    call = json_object_array_get_idx(calls, 0);
    if (!json_object_object_get_ex(call, "function", &fn))
        fn = call;
    if (!json_object_object_get_ex(fn, "name", &name) ||
        !json_object_is_type(name, json_type_string) ||
        (!json_object_object_get_ex(fn, "arguments", &args) &&
         !json_object_object_get_ex(fn, "parameters", &args))) {
        snprintf(why, CTL_WHY_LEN, "message %zu: a tool call is {\"function\": {\"name\": "
                 "STRING, \"arguments\": OBJECT}}", i);
        return -EINVAL;
    }
    const char *a = json_object_is_type(args, json_type_string) ? json_object_get_string(args)
                    : json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN);
    char *text;
    int rc = l8chat_format_tool_call(json_object_get_string(name), a, &text);
    if (rc == -EINVAL)
        snprintf(why, CTL_WHY_LEN, "message %zu: the call's arguments are not a JSON object", i);
    if (rc < 0)
        return rc;
    json_object_object_add(o, "content", json_object_new_string(text));
    free(text);
    return 0;
}

int ctl_parse_messages(json_object *root, struct l8chat_msg **msgs, size_t *n,
                       char why[CTL_WHY_LEN])
{
    if (!json_object_is_type(root, json_type_array)) {
        snprintf(why, CTL_WHY_LEN, "not an array");
        return -EINVAL;
    }
    size_t k = json_object_array_length(root);
    if (k > CTL_MAX_MESSAGES) {
        snprintf(why, CTL_WHY_LEN, "%zu messages (at most %d)", k, CTL_MAX_MESSAGES);
        return -EINVAL;
    }
    struct l8chat_msg *m = calloc(k ? k : 1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    for (size_t i = 0; i < k; i++) {
        json_object *o = json_object_array_get_idx(root, i), *role, *content, *calls;
        if (json_object_is_type(o, json_type_object) &&
            json_object_object_get_ex(o, "tool_calls", &calls) &&
            json_object_object_get_ex(o, "role", &role) &&
            json_object_is_type(role, json_type_string) &&
            !strcmp(json_object_get_string(role), "assistant") &&
            (!json_object_object_get_ex(o, "content", &content) || !content ||
             (json_object_is_type(content, json_type_string) &&
              !json_object_get_string_len(content)))) {
            int rc = tool_calls_content(o, calls, i, why);
            if (rc < 0) {
                free(m);
                return rc;
            }
        }
        if (!json_object_is_type(o, json_type_object) ||
            !json_object_object_get_ex(o, "role", &role) ||
            !json_object_object_get_ex(o, "content", &content) ||
            !json_object_is_type(role, json_type_string) ||
            !json_object_is_type(content, json_type_string)) {
            snprintf(why, CTL_WHY_LEN, "message %zu is not {\"role\": STRING, \"content\": "
                     "STRING}", i);
            free(m);
            return -EINVAL;
        }
        if (l8chat_role_parse(json_object_get_string(role), &m[i].role) < 0) {
            const char *r = json_object_get_string(role);
            snprintf(why, CTL_WHY_LEN, "message %zu: role \"%.*s\" is not system, user, "
                     "assistant, ipython or tool", i, ctl_quote_len(r, 40), r);
            free(m);
            return -EINVAL;
        }
        m[i].content = json_object_get_string(content);
        m[i].len = (size_t)json_object_get_string_len(content);
    }
    *msgs = m;
    *n = k;
    return 0;
}

const char *ctl_tokenizer_path(const char *opt)
{
    if (opt)
        return opt;
    const char *e = getenv("LLAMA8_TOKENIZER");
    if (e && *e)
        return e;
    e = getenv("LLAMA8_MODEL");
    if (e && *e)
        return e;
    return NULL;
}

int ctl_tokenizer_load(const char *path, const char *hint, l8tok **out)
{
    int rc = l8tok_load(path, out);
    if (rc == 0)
        return 0;
    struct stat st;
    const bool dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
    char file[PATH_MAX + 16];
    snprintf(file, sizeof file, "%s%s", path, dir ? "/tokenizer.json" : "");
    /* What l8tok_load refused without reading: the kind of file, or its size. */
    const char *kind = stat(file, &st) == 0 ? l8_file_kind(&st) : NULL;
    char what[128];
    if (kind)
        snprintf(what, sizeof what, "is %s, not a regular file", kind);
    else
        snprintf(what, sizeof what, "is larger than %u bytes", L8TOK_MAX_FILE);
    const char *why = kind || rc == -EFBIG ? what
                    : rc == -EINVAL ? "not a tokenizer.json (malformed JSON, or a vocabulary "
                                      "or merge that does not parse)"
                    : rc == -ENOTSUP ? "a tokenizer this program does not implement (it reads "
                                       "byte-level BPE with a Split pre-tokenizer, as Llama 3's)"
                    : strerror(-rc);
    fprintf(stderr, "llama8ctl: tokenizer %s: %s%s\n", file, why, hint ? hint : "");
    return rc;
}

void ctl_socket_help(FILE *f)
{
    const char *e = getenv("LLAMA8_SOCKET");
    if (e && *e)
        fprintf(f, "socket: %s (from $LLAMA8_SOCKET; --socket PATH overrides it)\n", e);
    else
        fprintf(f, "socket: %s (the default, as $LLAMA8_SOCKET is not set);\n"
                   "for a llama8d started by hand with --socket PATH, give --socket PATH\n"
                   "or set LLAMA8_SOCKET=PATH\n", l8c_default_socket());
}

static void usage(FILE *f)
{
    fprintf(f, "Usage: llama8ctl COMMAND [OPTIONS] [ARGS]\n"
               "       llama8ctl COMMAND --help\n\ncommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit status: 0 success, 1 the operation failed, 2 bad command line, 3 no daemon\n"
               "(the commands that talk to llama8d)\n\n");
    ctl_socket_help(f);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CTL_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return CTL_OK;
    }
    if (!strcmp(name, "--version")) {
        printf("llama8ctl %s\n", L8_VERSION);
        return CTL_OK;
    }
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, commands[i].name)) {
            snprintf(ctl_cmd, sizeof ctl_cmd, "llama8ctl %s", name);
            argv[1] = ctl_cmd;
            return commands[i].run(argc - 1, argv + 1);
        }
    fprintf(stderr, "llama8ctl: unknown command '%s'\nTry 'llama8ctl --help' for the commands.\n",
            name);
    return CTL_USAGE;
}
