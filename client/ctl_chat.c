/* ctl_chat.c: `llama8ctl chat`, a conversation at a prompt.
 *
 * On a terminal the line is edited with libedit (history kept in
 * $XDG_STATE_HOME/llama8/chat_history), a paste of several lines is one
 * message (what is already waiting when a line ends belongs to it), Ctrl-C
 * cancels the reply being written (or the line being typed) and keeps the
 * conversation, Ctrl-D ends it. From a pipe, each line is a message and an
 * empty line or EOF ends. Either way a block between lines of three
 * quotes (""") is one message, and /commands act on the conversation
 * instead of going to the model. Every turn re-sends the whole
 * conversation (the prefix cache makes that cheap); when it outgrows the
 * context, the oldest turns are dropped, with a note. */
#include "ctl_ipc.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <termios.h>
#include <unistd.h>

#include <editline/readline.h>
#include <json-c/json.h>

#include "daemon/model/read_file.h"

#define CHAT_MAX_MSGS CTL_MAX_MESSAGES
#define CHAT_FILE_MAX (16u << 20)

static void chat_usage(FILE *f)
{
    fprintf(f,
        "Usage: llama8ctl chat [OPTIONS]\n"
        "Talk with the model. Each message is re-sent with the whole conversation (the\n"
        "daemon's prefix cache makes that cheap); when the conversation outgrows the\n"
        "context, its oldest turns are dropped, with a note.\n"
        "On a terminal: line editing and history; a pasted block of lines is one message;\n"
        "Ctrl-C cancels the reply being written (the conversation stays); Ctrl-D ends.\n"
        "From a pipe: each line is a message; an empty line or EOF ends.\n"
        "A block between two lines of \"\"\" is one message. Commands:\n"
        "  /help                  these commands\n"
        "  /clear                 forget the conversation (the system message stays)\n"
        "  /system TEXT           set the system message (/system alone: remove it)\n"
        "  /save FILE             write the conversation as JSON (what --messages reads)\n"
        "  /load FILE             continue the conversation of FILE\n"
        "  /tool RESULT           with --tools: RESULT answers the tool call just made (sent\n"
        "                         as the ipython message; the model replies to it)\n"
        "  //TEXT                 the message /TEXT\n\n"
        "  --system TEXT          a system message\n"
        "  --date TEXT            the system header's \"Today Date: TEXT\" (default\n"
        "                         $" L8CHAT_DATE_ENV ", else today's local date as Meta's\n"
        "                         template writes it: \"07 Dec 2026\")\n"
        TOOLS_HELP
        CTL_COMMON_HELP
        "  -h, --help\n\n");
    ctl_socket_help(f);
}

/* chat's own options (below CTL_OPT_BASE, past ctl_ipc.h's CMD_ ids). */
enum { CHAT_DATE = 900 };
struct chat_args {
    const char *system;   /* --system */
    const char *date;     /* --date: l8chat_opts.today_date (NULL: today's) */
};

static bool chat_opt(int opt, const char *arg, void *ctx)
{
    struct chat_args *a = ctx;
    if (opt == CMD_SYSTEM)
        a->system = arg;
    else if (opt == CHAT_DATE)
        a->date = arg;
    else
        return false;
    return true;
}

/* The conversation: msgs[i].content is owned[i] (malloc'd). A system message,
 * when there is one, is msgs[0]. */
struct conv {
    struct l8chat_msg msgs[CHAT_MAX_MSGS];
    char *owned[CHAT_MAX_MSGS];
    size_t n;
    bool has_system;
};

static int conv_add(struct conv *cv, enum l8chat_role role, const char *text, size_t len)
{
    char *t = cv->n < CHAT_MAX_MSGS ? malloc(len + 1) : NULL;
    if (!t)
        return -ENOMEM;
    memcpy(t, text, len);
    t[len] = 0;
    cv->owned[cv->n] = t;
    cv->msgs[cv->n++] = (struct l8chat_msg){ role, t, len };
    return 0;
}

static void conv_drop(struct conv *cv, size_t from, size_t count)
{
    for (size_t i = from; i < from + count; i++)
        free(cv->owned[i]);
    memmove(cv->msgs + from, cv->msgs + from + count, (cv->n - from - count) * sizeof *cv->msgs);
    memmove(cv->owned + from, cv->owned + from + count,
            (cv->n - from - count) * sizeof *cv->owned);
    cv->n -= count;
}

static void conv_clear(struct conv *cv, bool keep_system)
{
    size_t base = keep_system && cv->has_system ? 1 : 0;
    conv_drop(cv, base, cv->n - base);
    cv->has_system = base == 1;
}

static int conv_set_system(struct conv *cv, const char *text)
{
    if (cv->has_system) {
        conv_drop(cv, 0, 1);
        cv->has_system = false;
    }
    if (!text || !*text)
        return 0;
    if (cv->n == CHAT_MAX_MSGS)
        return -E2BIG;
    /* In front: add at the end, then rotate it there. */
    int rc = conv_add(cv, L8CHAT_SYSTEM, text, strlen(text));
    if (rc < 0)
        return rc;
    struct l8chat_msg m = cv->msgs[cv->n - 1];
    char *o = cv->owned[cv->n - 1];
    memmove(cv->msgs + 1, cv->msgs, (cv->n - 1) * sizeof *cv->msgs);
    memmove(cv->owned + 1, cv->owned, (cv->n - 1) * sizeof *cv->owned);
    cv->msgs[0] = m;
    cv->owned[0] = o;
    cv->has_system = true;
    return 0;
}

static void conv_free(struct conv *cv)
{
    conv_drop(cv, 0, cv->n);
}

/* /save FILE: the messages as --messages reads them. */
static int conv_save(const struct conv *cv, const char *path)
{
    json_object *arr = json_object_new_array();
    for (size_t i = 0; arr && i < cv->n; i++) {
        json_object *m = json_object_new_object();
        json_object_object_add(m, "role",
                               json_object_new_string(l8chat_role_name(cv->msgs[i].role)));
        json_object_object_add(m, "content", json_object_new_string_len(cv->msgs[i].content,
                                                                      (int)cv->msgs[i].len));
        json_object_array_add(arr, m);
    }
    FILE *f = arr ? fopen(path, "w") : NULL;
    int rc = f ? 0 : -errno;
    if (f) {
        fputs(json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PRETTY |
                                                      JSON_C_TO_STRING_NOSLASHESCAPE), f);
        fputc('\n', f);
        if (fclose(f) != 0)
            rc = -errno;
    }
    json_object_put(arr);
    return rc;
}

/* /load FILE: the conversation of FILE in place of this one. */
static int conv_load(struct conv *cv, const char *path, char *why, size_t whylen)
{
    char *text, err[512];
    size_t len;
    if (l8_read_file(path, CHAT_FILE_MAX, &text, &len, err, sizeof err) < 0) {
        snprintf(why, whylen, "%s", err);
        return -EINVAL;
    }
    const char *bad;
    json_object *root = ctl_parse_json(text, len, &bad);
    free(text);
    struct l8chat_msg *m = NULL;
    size_t n = 0;
    char w[CTL_WHY_LEN];
    int rc = root ? ctl_parse_messages(root, &m, &n, w) : -EINVAL;
    if (!root)
        snprintf(why, whylen, "%s is not JSON: %s", path, bad);
    else if (rc < 0)
        snprintf(why, whylen, "%s: %s", path, rc == -ENOMEM ? "out of memory" : w);
    if (rc == 0) {
        conv_clear(cv, false);
        for (size_t i = 0; i < n && rc == 0; i++)
            rc = conv_add(cv, m[i].role, m[i].content, m[i].len);
        cv->has_system = cv->n && cv->msgs[0].role == L8CHAT_SYSTEM;
        if (rc < 0)
            snprintf(why, whylen, "out of memory");
    }
    free(m);
    json_object_put(root);
    return rc;
}

/* ---------------------------------------------------------------- input */

static volatile sig_atomic_t interrupted;

static void on_sigint(int sig)
{
    (void)sig;
    interrupted = 1;
}

/* A Ctrl-D typed while a reply streams reaches the terminal in cooked mode,
 * where the line discipline turns it into an end-of-file mark that libedit
 * then misreads: that Ctrl-D is lost and the next one becomes text. With
 * VEOF off outside the editor the key stays a byte, which the editor reads
 * as Ctrl-D. The terminal gets its setting back however chat ends. */
static struct termios tty_saved;
static volatile sig_atomic_t tty_changed;

static void tty_restore(void)
{
    if (tty_changed)
        tcsetattr(0, TCSADRAIN, &tty_saved);
    tty_changed = 0;
}

static void on_fatal(int sig)
{
    tty_restore();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void tty_keep_ctrl_d(void)
{
    struct termios t;
    if (tcgetattr(0, &tty_saved) < 0)
        return;
    t = tty_saved;
    t.c_cc[VEOF] = _POSIX_VDISABLE;
    if (tcsetattr(0, TCSADRAIN, &t) < 0)
        return;
    tty_changed = 1;
    atexit(tty_restore);
    struct sigaction sa = { .sa_handler = on_fatal };
    sigemptyset(&sa.sa_mask);
    static const int fatal[] = { SIGTERM, SIGHUP, SIGQUIT };
    for (size_t i = 0; i < sizeof fatal / sizeof fatal[0]; i++)
        sigaction(fatal[i], &sa, NULL);
}

struct input {
    bool tty;
    bool eof;         /* a Ctrl-D came with the rest of a paste: end after it */
    char *line;       /* getline's, from a pipe */
    size_t cap;
    char history[PATH_MAX + 16];
};

/* One line without its newline (malloc'd), or NULL at the end (EOF, or
 * *cancelled: Ctrl-C on a terminal). */
static char *read_line(struct input *in, const char *prompt, bool *cancelled)
{
    *cancelled = false;
    if (in->tty) {
        interrupted = 0;
        char *l = readline(prompt);
        if (!l && interrupted) {
            *cancelled = true;
            interrupted = 0;
        }
        return l;
    }
    ssize_t n = getline(&in->line, &in->cap, stdin);
    if (n < 0)
        return NULL;
    while (n && (in->line[n - 1] == '\n' || in->line[n - 1] == '\r'))
        in->line[--n] = 0;
    return strdup(in->line);
}

/* More typed or pasted input already waiting (a terminal only): a paste of
 * several lines arrives at once, so what waits when a line ends is its rest. */
static bool more_waiting(const struct input *in)
{
    struct pollfd p = { 0, POLLIN, 0 };
    return in->tty && poll(&p, 1, 0) == 1;
}

static int append(char **msg, size_t *len, const char *s)
{
    size_t n = strlen(s);
    char *t = realloc(*msg, *len + n + 2);
    if (!t)
        return -ENOMEM;
    if (*len)
        t[(*len)++] = '\n';
    memcpy(t + *len, s, n + 1);
    *len += n;
    *msg = t;
    return 0;
}

/* The next message: a line, a paste of lines, or a """ block. NULL at the
 * end of input; *cancelled for a Ctrl-C at the prompt. */
static char *read_message(struct input *in, bool *cancelled)
{
    *cancelled = false;
    if (in->eof)
        return NULL;
    char *l = read_line(in, "> ", cancelled);
    if (!l)
        return NULL;
    char *msg = NULL;
    size_t len = 0;
    if (!strcmp(l, "\"\"\"")) {
        free(l);
        for (;;) {
            if (!(l = read_line(in, "... ", cancelled))) {
                if (!*cancelled && !msg)    /* EOF in an empty block */
                    msg = strdup("");
                if (*cancelled) {
                    free(msg);
                    msg = NULL;
                }
                return msg;
            }
            if (!strcmp(l, "\"\"\"")) {
                free(l);
                return msg ? msg : strdup("");
            }
            if (append(&msg, &len, l) < 0) {
                free(l);
                free(msg);
                return NULL;
            }
            free(l);
        }
    }
    msg = l;
    len = strlen(l);
    while (more_waiting(in)) {
        bool c;
        char *next = read_line(in, "", &c);
        if (!next) {
            in->eof = !c;
            break;
        }
        int rc = append(&msg, &len, next);
        free(next);
        if (rc < 0)
            break;
    }
    if (in->tty && *msg)
        add_history(msg);
    return msg;
}

static void history_path(struct input *in)
{
    const char *state = getenv("XDG_STATE_HOME"), *home = getenv("HOME");
    char dir[PATH_MAX];
    in->history[0] = 0;
    if (state && *state)
        snprintf(dir, sizeof dir, "%s/llama8", state);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.local/state/llama8", home);
    else
        return;
    /* mkdir -p of the last two levels is enough for the usual layouts. */
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = 0;
        mkdir(parent, 0700);
    }
    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return;
    snprintf(in->history, sizeof in->history, "%s/chat_history", dir);
}

/* ---------------------------------------------------------------- turns */

struct chat {
    struct l8c_client *c;
    l8tok *tok;
    l8tok_stream *st;
    l8tok_stop *stop;
    struct ctl_req_opts *o;
    struct ctl_tools *tools;
    struct l8chat_opts co;
    struct conv cv;
    bool tty;
};

/* The conversation encoded, its oldest turns dropped (with a note) while it
 * leaves less room than the reply needs: an explicit --max-new, else
 * 256 or a quarter of the context, whichever is less. -E2BIG when even the
 * last message alone does not fit. */
static int encode_fitting(struct chat *ch, l8tok_ids *ids)
{
    const struct l8c_info *in = l8c_info(ch->c);
    uint32_t room = ch->o->params.max_new_tokens;
    if (!room)
        room = in->context_length / 4 < 256 ? in->context_length / 4 : 256;
    size_t dropped = 0;
    for (;;) {
        ids->n = 0;
        int rc = l8chat_encode(ch->tok, ch->cv.msgs, ch->cv.n, &ch->co, ids);
        if (rc < 0)
            return rc;
        if (ids->n + room <= in->context_length && ids->n <= in->max_prompt_tokens)
            break;
        /* The oldest turn: from the first message after the system one to
         * the next user message (a user message and the replies to it). */
        size_t base = ch->cv.has_system ? 1 : 0, end = base + 1;
        while (end < ch->cv.n && ch->cv.msgs[end].role != L8CHAT_USER)
            end++;
        if (end >= ch->cv.n)
            return -E2BIG;
        dropped += end - base;
        conv_drop(&ch->cv, base, end - base);
    }
    if (dropped)
        fprintf(stderr, "llama8ctl: the conversation outgrew the context (%u tokens): its "
                        "oldest %zu message%s dropped\n", in->context_length, dropped,
                dropped == 1 ? "" : "s");
    return 0;
}

/* A message to the model, and its reply kept: CTL_OK, CTL_FAIL (said;
 * the conversation as it was), or -1 when the connection is gone. */
static int turn(struct chat *ch, enum l8chat_role role, const char *text)
{
    if (conv_add(&ch->cv, role, text, strlen(text)) < 0) {
        fprintf(stderr, "llama8ctl: the conversation is too long (%d messages); /clear\n",
                CHAT_MAX_MSGS);
        return CTL_FAIL;
    }
    l8tok_ids ids = {0};
    int erc = encode_fitting(ch, &ids);
    if (erc < 0) {
        if (erc == -E2BIG)
            fprintf(stderr, "llama8ctl: this message alone does not fit the context (%u "
                            "tokens)\n", l8c_info(ch->c)->context_length);
        else
            fprintf(stderr, "llama8ctl: encoding: %s\n",
                    erc == -EILSEQ ? "not UTF-8" : strerror(-erc));
        conv_drop(&ch->cv, ch->cv.n - 1, 1);
        l8tok_ids_free(&ids);
        return CTL_FAIL;
    }
    struct ctl_run x = { .s = { .tok = ch->tok, .st = ch->st, .stop = ch->stop,
                                .info = l8c_info(ch->c), .p = &ch->o->params },
                         .collect = true, .stats = ch->o->stats,
                         .tools = ch->co.n_tools ? ch->tools : NULL, .keep_call = true,
                         .interrupt = ch->tty ? &interrupted : NULL };
    interrupted = 0;
    int r = ctl_run_one(ch->c, &x, ids.ids, ids.n);
    ctl_stream_free(&x.s);
    l8tok_ids_free(&ids);
    if (r != CTL_OK) {
        free(x.text);
        free(x.call);
        conv_drop(&ch->cv, ch->cv.n - 1, 1);
        return l8c_last_error(ch->c, NULL)[0] ? -1 : CTL_FAIL;
    }
    if (x.cancelled)
        fprintf(stderr, "llama8ctl: reply cancelled (kept as far as it came)\n");
    /* A call is kept as the template writes an assistant turn with
     * tool_calls. */
    if (x.call) {
        free(x.text);
        x.text = x.call;
    }
    const char *reply = x.text ? x.text : "";
    if (conv_add(&ch->cv, L8CHAT_ASSISTANT, reply, strlen(reply)) < 0)
        conv_drop(&ch->cv, ch->cv.n - 1, 1);
    free(x.text);
    return CTL_OK;
}

/* A line that starts with '/': 1 done here, 0 a message after all (//TEXT:
 * msg points past the first '/'), -1 the connection is gone. */
static int command(struct chat *ch, char *line, const char **msg, enum l8chat_role *role)
{
    char *arg = line + strcspn(line, " ");
    size_t cmd_len = (size_t)(arg - line);
    while (*arg == ' ')
        arg++;
    char why[600];
    int rc;
#define IS(name) (cmd_len == sizeof(name) - 1 && !strncmp(line, name, cmd_len))
    if (line[1] == '/') {
        *msg = line + 1;
        return 0;
    } else if (IS("/help")) {
        chat_usage(stderr);
    } else if (IS("/clear") || IS("/reset")) {
        conv_clear(&ch->cv, true);
        fprintf(stderr, "llama8ctl: the conversation is cleared%s\n",
                ch->cv.has_system ? " (the system message stays)" : "");
    } else if (IS("/system")) {
        if ((rc = conv_set_system(&ch->cv, arg)) < 0)
            fprintf(stderr, "llama8ctl: /system: %s\n", strerror(-rc));
        else
            fprintf(stderr, "llama8ctl: %s\n", *arg ? "the system message is set"
                                                    : "no system message");
    } else if (IS("/save")) {
        if (!*arg)
            fprintf(stderr, "llama8ctl: /save FILE\n");
        else if ((rc = conv_save(&ch->cv, arg)) < 0)
            fprintf(stderr, "llama8ctl: /save %s: %s\n", arg, strerror(-rc));
        else
            fprintf(stderr, "llama8ctl: %zu messages saved to %s\n", ch->cv.n, arg);
    } else if (IS("/load")) {
        if (!*arg)
            fprintf(stderr, "llama8ctl: /load FILE\n");
        else if (conv_load(&ch->cv, arg, why, sizeof why) < 0)
            fprintf(stderr, "llama8ctl: /load: %s\n", why);
        else
            fprintf(stderr, "llama8ctl: %zu messages loaded from %s\n", ch->cv.n, arg);
    } else if (IS("/tool")) {
        const size_t n = ch->cv.n;
        if (!ch->co.n_tools || !n || ch->cv.msgs[n - 1].role != L8CHAT_ASSISTANT || !*arg) {
            fprintf(stderr, "llama8ctl: /tool RESULT answers a reply, with --tools\n");
            return 1;
        }
        *msg = arg;
        *role = L8CHAT_IPYTHON;
        return 0;
    } else {
        fprintf(stderr, "llama8ctl: unknown command %.*s (/help lists them; //TEXT sends "
                        "/TEXT)\n", (int)cmd_len, line);
    }
#undef IS
    return 1;
}

int ctl_chat(int argc, char **argv)
{
    static const struct option lo[] = {
        CTL_COMMON_LONGOPTS, {"system", required_argument, 0, CMD_SYSTEM},
        {"date", required_argument, 0, CHAT_DATE}, TOOLS_LONGOPTS,
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    struct ctl_req_opts o;
    struct ctl_tools tools;
    struct chat_args args = {0};
    int rc;
    ctl_req_opts_init(&o);
    if ((rc = ctl_req_getopt(argc, argv, lo, &o, &tools, chat_opt, &args, chat_usage)) >= 0)
        return rc;
    const char *system = args.system;
    static struct chat ch;   /* the conversation is large */
    ch.o = &o;
    ch.tools = &tools;
    l8chat_opts_init(&ch.co);
    ch.co.today_date = args.date;   /* NULL: today's, at each turn (a chat past midnight) */
    struct input in = { .tty = isatty(0) && isatty(2) };
    ch.tty = in.tty;
    if ((rc = ctl_connect(o.socket, "llama8ctl chat", &ch.c)) != CTL_OK)
        goto out;
    rc = CTL_FAIL;
    if (ctl_load_tokenizer(o.tokenizer, ch.c, &ch.tok) < 0 ||
        l8tok_stream_new(ch.tok, &ch.st) < 0 ||
        (o.n_stop_text &&
         l8tok_stop_new((const char *const *)o.stop_text, o.n_stop_text, &ch.stop) < 0))
        goto out;
    if (ctl_tools_apply(&tools, ch.tok, &ch.co, &o.params, o.stop) < 0) {
        fprintf(stderr, "llama8ctl: --tools: no room for the tool turn's stop ids (give fewer "
                        "--stop), or a tokenizer without <|eot_id|>\n");
        goto out;
    }
    if (system && conv_set_system(&ch.cv, system) < 0)
        goto out;
    if (in.tty) {
        /* Ctrl-C interrupts (readline returns, the reply is cancelled)
         * instead of ending the program. */
        struct sigaction sa = { .sa_handler = on_sigint };
        sigemptyset(&sa.sa_mask);
        sigaction(SIGINT, &sa, NULL);
        tty_keep_ctrl_d();
        history_path(&in);
        if (in.history[0])
            read_history(in.history);
        fprintf(stderr, "llama8ctl chat with %s: /help for the commands, Ctrl-D to end\n",
                l8c_info(ch.c)->model_name);
    }
    for (;;) {
        bool cancelled;
        char *line = read_message(&in, &cancelled);
        if (!line && cancelled) {
            fputc('\n', stderr);
            continue;
        }
        if (!line || (!in.tty && !*line)) {
            free(line);
            break;
        }
        const char *msg = line;
        enum l8chat_role role = L8CHAT_USER;
        int k = line[0] == '/' ? command(&ch, line, &msg, &role) : 0;
        int r = k == 0 && *msg ? turn(&ch, role, msg) : CTL_OK;
        free(line);
        if (r < 0)
            goto out;   /* the connection is gone (said) */
    }
    if (in.tty)
        fputc('\n', stderr);
    rc = CTL_OK;
out:
    if (in.tty && in.history[0])
        write_history(in.history);
    tty_restore();
    free(in.line);
    conv_free(&ch.cv);
    ctl_tools_free(&tools);
    l8tok_stop_free(ch.stop);
    ctl_req_opts_free(&o);
    l8tok_stream_free(ch.st);
    l8tok_free(ch.tok);
    l8c_close(ch.c);
    return rc;
}
