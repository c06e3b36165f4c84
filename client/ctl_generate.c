/* ctl_generate.c: `llama8ctl generate`, one request streamed (ctl_run_one,
 * which chat shares), and the helpers the daemon commands share (ctl_ipc.h). */
#include "ctl_ipc.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <json-c/json.h>

#include "daemon/model/read_file.h"

/* ---------------------------------------------------------------- shared helpers */

void ctl_req_opts_init(struct ctl_req_opts *o)
{
    memset(o, 0, sizeof(*o));
    l8c_params_init(&o->params);
    o->params.max_new_tokens = 0;   /* ctl_default_max_new, once connected */
    o->params.stop_ids = o->stop;
}

void ctl_default_max_new(struct l8c_params *p, const struct l8c_info *in, size_t n_prompt)
{
    if (!p->max_new_tokens)
        p->max_new_tokens = l8c_max_new_fitting(in, n_prompt, 256);
}

void ctl_req_opts_free(struct ctl_req_opts *o)
{
    for (size_t i = 0; i < o->n_stop_text; i++)
        free(o->stop_text[i]);
    o->n_stop_text = 0;
}

/* --stop-text's argument with \n \t \r \\ read; NULL (message printed) for
 * another escape or an empty text. */
static char *parse_stop_text(const char *arg)
{
    char *t = malloc(strlen(arg) + 1), *o = t;
    if (!t)
        return NULL;
    for (const char *a = arg; *a; a++) {
        if (*a != '\\') {
            *o++ = *a;
            continue;
        }
        switch (*++a) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case '\\': *o++ = '\\'; break;
        default:
            fprintf(stderr, "llama8ctl: --stop-text: unknown escape '\\%.1s' (\\n \\t \\r "
                            "\\\\ are read): %s\n", a, arg);
            free(t);
            return NULL;
        }
    }
    *o = 0;
    if (!t[0]) {
        fprintf(stderr, "llama8ctl: --stop-text: empty\n");
        free(t);
        return NULL;
    }
    return t;
}

static int parse_float(const char *name, const char *arg, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(arg, &end);
    if (errno || *end || !*arg || !isfinite(v)) {
        fprintf(stderr, "llama8ctl: --%s: not a number: %s\n", name, arg);
        return -1;
    }
    *out = v;
    return 1;
}

static int parse_u64(const char *name, const char *arg, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 0);
    if (errno || *end || !*arg || *arg == '-' || v > max) {
        fprintf(stderr, "llama8ctl: --%s: not an integer in [0, %" PRIu64 "]: %s\n", name, max, arg);
        return -1;
    }
    *out = v;
    return 1;
}

int ctl_req_opt(struct ctl_req_opts *o, int opt, const char *arg)
{
    struct l8c_params *p = &o->params;
    uint64_t v;
    int rc;
    switch (opt) {
    case CTL_OPT_SOCKET: o->socket = arg; return 1;
    case CTL_OPT_TOKENIZER: o->tokenizer = arg; return 1;
    case CTL_OPT_TEMP: return parse_float("temperature", arg, &p->temperature);
    case CTL_OPT_TOPP: return parse_float("top-p", arg, &p->top_p);
    case CTL_OPT_MINP: return parse_float("min-p", arg, &p->min_p);
    case CTL_OPT_REP: return parse_float("repetition-penalty", arg, &p->repetition_penalty);
    case CTL_OPT_TOPK:
        if ((rc = parse_u64("top-k", arg, UINT32_MAX, &v)) > 0)
            p->top_k = (uint32_t)v;
        return rc;
    case CTL_OPT_SEED:
        return parse_u64("seed", arg, UINT64_MAX, &p->seed);
    case CTL_OPT_MAXNEW:
        if ((rc = parse_u64("max-new", arg, UINT32_MAX, &v)) > 0 && v == 0) {
            fprintf(stderr, "llama8ctl: --max-new: at least 1\n");
            return -1;
        }
        if (rc > 0)
            p->max_new_tokens = (uint32_t)v;
        return rc;
    case CTL_OPT_STOP:
        if (p->n_stop_ids >= CTL_MAX_STOP) {
            fprintf(stderr, "llama8ctl: at most %d --stop ids\n", CTL_MAX_STOP);
            return -1;
        }
        if ((rc = parse_u64("stop", arg, UINT32_MAX, &v)) > 0)
            o->stop[p->n_stop_ids++] = (uint32_t)v;
        return rc;
    case CTL_OPT_STOP_TEXT:
        if (o->n_stop_text >= CTL_MAX_STOP) {
            fprintf(stderr, "llama8ctl: at most %d --stop-text strings\n", CTL_MAX_STOP);
            return -1;
        }
        if (!(o->stop_text[o->n_stop_text] = parse_stop_text(arg)))
            return -1;
        o->n_stop_text++;
        return 1;
    case CTL_OPT_LOGPROBS: p->logprobs = true; return 1;
    case CTL_OPT_STATS: o->stats = true; return 1;
    case CTL_OPT_IGNORE_EOS: p->ignore_eos = true; return 1;
    case CTL_OPT_NO_SPECULATE: p->no_speculate = true; return 1;
    case CTL_OPT_WAIT: return ctl_wait_opt(arg);
    case CTL_OPT_PRIORITY: {
        char *end;
        long x = strtol(arg, &end, 0);
        if (*end || !*arg || x < INT32_MIN || x > INT32_MAX) {
            fprintf(stderr, "llama8ctl: --priority: not an integer: %s\n", arg);
            return -1;
        }
        p->priority = (int32_t)x;
        return 1;
    }
    }
    return 0;
}

int ctl_plain_opts(int argc, char **argv, void (*usage)(FILE *), const char **sock, bool *json)
{
    enum { O_SOCKET = 1, O_WAIT };
    static const struct option lo[] = {
        {"json", no_argument, 0, 'j'}, {"socket", required_argument, 0, O_SOCKET},
        {"wait", optional_argument, 0, O_WAIT}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    int opt;
    optind = 1;
    while ((opt = getopt_long(argc, argv, json ? "hj" : "h", json ? lo : lo + 1, NULL)) != -1) {
        switch (opt) {
        case 'j': *json = true; break;
        case O_SOCKET: *sock = optarg; break;
        case O_WAIT:
            if (ctl_wait_opt(optarg) < 0)
                return CTL_USAGE;
            break;
        case 'h': usage(stdout); return CTL_OK;
        default: return ctl_usage_error(NULL);
        }
    }
    if (optind < argc)
        return ctl_usage_error(argv[optind]);
    return -1;
}

int ctl_req_getopt(int argc, char **argv, const struct option *lo, struct ctl_req_opts *o,
                   struct ctl_tools *tools, bool (*own)(int opt, const char *arg, void *ctx),
                   void *ctx, void (*usage)(FILE *))
{
    int opt, rc;
    const char *file = NULL, *choice = NULL;
    *tools = (struct ctl_tools){0};
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (opt == CMD_TOOLS) {
            file = optarg;
            continue;
        }
        if (opt == CMD_TOOL_CHOICE) {
            choice = optarg;   /* read after the loop: a --help after it still helps */
            continue;
        }
        if ((rc = ctl_req_opt(o, opt, optarg)) > 0 || (rc == 0 && own(opt, optarg, ctx)))
            continue;
        ctl_req_opts_free(o);
        if (rc < 0)
            return CTL_USAGE;
        if (opt != 'h')
            return ctl_usage_error(NULL);
        usage(stdout);
        return CTL_OK;
    }
    if (choice && ctl_tool_choice_parse(choice, &tools->choice) < 0) {
        fprintf(stderr, "llama8ctl: --tool-choice: auto, required or none, not: %s\n", choice);
        ctl_req_opts_free(o);
        return CTL_USAGE;
    }
    if (choice && !file) {
        fprintf(stderr, "llama8ctl: --tool-choice needs --tools FILE\n");
        ctl_req_opts_free(o);
        return CTL_USAGE;
    }
    if (file && ctl_tools_load(tools, file) < 0) {
        ctl_req_opts_free(o);
        return CTL_FAIL;
    }
    return -1;
}

const char *ctl_why(struct l8c_client *c, int rc)
{
    const char *e = l8c_last_error(c, NULL);
    return e[0] ? e : strerror(-rc);
}

/* While the daemon loads: a progress bar on a terminal, else one line. */
struct load_view {
    bool tty, shown;
};

static void show_loading(void *arg, const struct l8c_loading *l)
{
    struct load_view *v = arg;
    if (!v->tty) {
        if (!v->shown)
            fprintf(stderr, "llama8ctl: llama8d is loading %s (%s); waiting\n", l->model_name,
                    l->stage);
        v->shown = true;
        return;
    }
    v->shown = true;
    char bar[31] = "";
    int pct = -1;
    if (l->weight_bytes) {
        pct = (int)(l->placed_bytes * 100 / l->weight_bytes);
        int fill = pct * 30 / 100;
        for (int i = 0; i < 30; i++)
            bar[i] = i < fill ? '#' : '.';
        bar[30] = 0;
    }
    if (pct >= 0)
        fprintf(stderr, "\r\033[Kllama8d: loading %s: [%s] %3d%% %s", l->model_name, bar, pct,
                l->stage);
    else
        fprintf(stderr, "\r\033[Kllama8d: loading %s: %s", l->model_name, l->stage);
}

int ctl_wait_s = -1;

int ctl_wait_opt(const char *arg)
{
    uint64_t v = 60;
    if (arg && parse_u64("wait", arg, 86400, &v) < 0)
        return -1;
    ctl_wait_s = (int)v;
    return 1;
}

int ctl_connect(const char *socket, const char *name, struct l8c_client **out)
{
    char err[L8C_ERRLEN];
    struct load_view v = { .tty = isatty(STDERR_FILENO) };
    struct l8c_connect_opts o = { .name = name, .on_loading = show_loading, .arg = &v,
                                  .wait_ms = ctl_wait_s > 0 ? ctl_wait_s * 1000 : 0 };
    uint64_t t0 = l8c_now_ns();
    const uint64_t until = t0 + (uint64_t)(ctl_wait_s > 0 ? ctl_wait_s : 0) * 1000000000u;
    int rc;
    /* --wait: a daemon not listening yet (being started by hand, say) is
     * tried again every 100 ms. */
    for (bool said = false;; said = true) {
        rc = l8c_connect_with(socket, &o, out, err);
        if ((rc != -ENOENT && rc != -ECONNREFUSED) || l8c_now_ns() >= until)
            break;
        if (!said)
            fprintf(stderr, "llama8ctl: waiting up to %d s for llama8d at %s\n", ctl_wait_s,
                    socket ? socket : l8c_default_socket());
        usleep(100000);
    }
    if (v.shown) {
        double s = (double)(l8c_now_ns() - t0) / 1e9;
        if (rc == 0)
            fprintf(stderr, v.tty ? "\r\033[Kllama8d: ready (waited %.1f s)\n"
                                  : "llama8ctl: llama8d ready (waited %.1f s)\n", s);
        else if (v.tty)
            fputc('\n', stderr);
    }
    if (rc == 0)
        return CTL_OK;
    if (rc == -ENOENT || rc == -ECONNREFUSED || rc == -ENAMETOOLONG) {
        fprintf(stderr, "llama8ctl: %s\nllama8ctl: no llama8d listening at %s: is it running? "
                        "(--socket PATH or $LLAMA8_SOCKET choose another)\n",
                err, socket ? socket : l8c_default_socket());
        return CTL_NOCONN;
    }
    fprintf(stderr, "llama8ctl: %s\n", err);
    return CTL_FAIL;
}

int ctl_load_tokenizer(const char *opt, const struct l8c_client *c, l8tok **out)
{
    const char *path = opt ? opt : ctl_tokenizer_path(NULL);
    if (!path && c)
        path = l8c_info(c)->model_dir;
    if (!path) {
        fprintf(stderr, "llama8ctl: no tokenizer: give --tokenizer FILE\n");
        return -ENOENT;
    }
    return ctl_tokenizer_load(path, opt ? NULL : " (give --tokenizer FILE, or --ids)", out);
}

int ctl_parse_ids(const char *s, l8tok_ids *out)
{
    while (*s) {
        if (*s == ' ' || *s == ',' || *s == '\n' || *s == '\t' || *s == '\r') {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        unsigned long v = strtoul(s, &end, 10);
        if (end == s || errno || v > UINT32_MAX || *s == '-')
            return -EINVAL;
        if (l8tok_ids_push(out, (uint32_t)v) < 0)
            return -ENOMEM;
        s = end;
    }
    return 0;
}

/* ---------------------------------------------------------------- streaming */

/* generate's and chat's request: the reply, printed or as --json events. */

/* --stats: one line on what the request cost. */
static void print_stats(const struct ctl_run *x, const char *reason)
{
    if (!x->stats)
        return;
    fprintf(stderr, "llama8ctl: %u prompt tokens (%u from the prefix cache), %u generated (%s)",
            x->prompt, x->cached, x->tokens, reason);
    if (x->tokens)
        fprintf(stderr, "; first token %.1f ms after submit",
                (double)(x->t_first - x->t_submit) / 1e6);
    if (x->tokens > 1 && x->t_last > x->t_first)
        fprintf(stderr, ", then %.1f tokens/s",
                (double)(x->tokens - 1) * 1e9 / (double)(x->t_last - x->t_first));
    fputc('\n', stderr);
}

/* The reply's text so far, for chat's history and the tool call. */
static void collect_text(struct ctl_run *x, const char *s, size_t n)
{
    if (n && x->collect) {
        if (x->text_len + n + 1 > x->text_cap) {
            size_t cap = (x->text_len + n + 1) * 2;
            char *nb = realloc(x->text, cap);
            if (!nb)
                return;
            x->text = nb;
            x->text_cap = cap;
        }
        memcpy(x->text + x->text_len, s, n);
        x->text_len += n;
        x->text[x->text_len] = 0;
    }
}

/* A name as the tool call line writes it: as it is where that cannot be
 * misread, else as a JSON string. */
static void print_tool_name(const char *name)
{
    bool plain = name[0] != 0;
    for (const char *c = name; *c; c++)
        plain &= (*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
                 *c == '_' || *c == '.' || *c == '-';
    if (plain) {
        fputs(name, stdout);
        return;
    }
    json_object *s = json_object_new_string(name);
    fputs(json_object_to_json_string_ext(s, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE),
          stdout);
    json_object_put(s);
}

/* The reply ended (reason, for a message): where tools are offered and it
 * is a call of one, say so (--json: the tool_call event, before done; text:
 * the "tool call:" line, after the reply's), and keep it for chat. */
static void show_tool_call(struct ctl_run *x, uint64_t rid, const char *reason)
{
    if (!x->tools)
        return;
    char *name, *args;
    int rc = l8chat_parse_tool_call(x->text ? x->text : "", x->text_len, &name, &args);
    if (rc < 0) {
        if (x->tools->choice == CTL_TOOLS_REQUIRED)
            fprintf(stderr, "llama8ctl: the reply is not a whole tool call (it ended: %s)%s\n",
                    reason, !strcmp(reason, "length") ? ": give a larger --max-new" : "");
        return;
    }
    if (x->json) {
        json_object *ev = ctl_tool_call_event(name, args, "request", json_object_new_uint64(rid));
        if (ev)
            ctl_print_json(ev);
    } else {
        fputs("tool call: ", stdout);
        print_tool_name(name);
        printf(" %s\n", args);
        fflush(stdout);
    }
    if (x->keep_call && l8chat_format_tool_call(name, args, &x->call) < 0)
        x->call = NULL;
    free(name);
    free(args);
}

/* A stop string ended the reply at event e: cancel the request, wait for
 * the daemon to confirm (its events are not shown), and report the end
 * as --json's done event. */
static int end_at_stop_text(struct l8c_client *c, struct ctl_run *x, const struct l8_event *e)
{
    if (x->json)
        show_tool_call(x, e->request_id, "stop_text");
    if (x->json) {
        ctl_print_json(ctl_stop_text_done_json(e, "request",
                                               json_object_new_uint64(e->request_id)));
    } else {
        putchar('\n');
        fflush(stdout);
        show_tool_call(x, e->request_id, "stop_text");
    }
    int rc = l8c_cancel(c, e->request_id);
    struct l8_event ev[64];
    while (rc == 0) {
        int k = l8c_wait_events(c, ev, 64, -1);
        if (k < 0)
            return CTL_FAIL;
        for (int i = 0; i < k; i++)
            if (ev[i].request_id == e->request_id &&
                (ev[i].kind == L8_EV_DONE || ev[i].kind == L8_EV_ERROR))
                return CTL_OK;
    }
    return CTL_FAIL;
}

int ctl_run_one(struct l8c_client *c, struct ctl_run *x, const uint32_t *ids, size_t n)
{
    uint64_t id;
    char why[L8C_ERRLEN];
    struct l8c_params p = *x->s.p;   /* an unset max_new: what fits after this prompt */
    ctl_default_max_new(&p, l8c_info(c), n);
    int code = l8c_check_request(c, ids, (uint32_t)n, &p, why);
    if (code) {
        fprintf(stderr, "llama8ctl: the daemon would refuse this request (%s): %s\n",
                l8c_err_name(code), why);
        return CTL_FAIL;
    }
    x->t_submit = l8c_now_ns();
    x->prompt = (uint32_t)n;
    x->cached = x->tokens = 0;
    int rc = l8c_submit(c, ids, (uint32_t)n, &p, &id);
    if (rc < 0) {
        fprintf(stderr, "llama8ctl: submit: %s\n", rc == -EINVAL ? "bad arguments" : strerror(-rc));
        return CTL_FAIL;
    }
    ctl_stream_reset(&x->s);
    struct l8_event ev[64];
    x->cancelled = false;
    for (;;) {
        /* Watching for an interrupt: wake to look at least every 50 ms. */
        int k = l8c_wait_events(c, ev, 64, x->interrupt ? 50 : -1);
        if (k < 0) {
            fprintf(stderr, "llama8ctl: %s\n", ctl_why(c, k));
            return CTL_FAIL;
        }
        if (x->interrupt && *x->interrupt && !x->cancelled) {
            *x->interrupt = 0;
            x->cancelled = l8c_cancel(c, id) == 0;   /* DONE (cancelled) follows */
        }
        uint64_t now = l8c_now_ns();
        for (int i = 0; i < k; i++) {
            const struct l8_event *e = &ev[i];
            if (e->request_id != id && e->request_id != 0)
                continue;
            const char *t = NULL;
            size_t tl = 0;
            int stopped = 0;
            if (e->kind == L8_EV_STARTED)
                x->cached = e->index;
            if (e->kind == L8_EV_WAITING && !x->json && isatty(STDERR_FILENO)) {
                char msg[L8C_ERRLEN];
                fprintf(stderr, "llama8ctl: waiting %s\n", l8c_wait_text(e, msg));
            }
            if (e->kind == L8_EV_TOKEN) {
                if (x->tokens++ == 0)
                    x->t_first = e->t_ns;
                x->t_last = e->t_ns;
            }
            if (e->kind == L8_EV_TOKEN && !ctl_stream_is_stop(&x->s, e->token)) {
                if (x->s.tok) {
                    stopped = ctl_stream_text(&x->s, e->token, false, &t, &tl);
                } else if (!x->json) {
                    printf("%s%u", e->index ? " " : "", e->token);
                    fflush(stdout);
                }
            }
            /* The end of the stream: a character still held back comes out
             * (as U+FFFD), and text held for a stop string that did not
             * come, in the done event's text with --json. */
            if (e->kind == L8_EV_DONE)
                stopped = ctl_stream_text(&x->s, 0, true, &t, &tl);
            /* A constraint the daemon could not compile: its reason came on
             * the control socket just before the event. */
            const char *why_grammar = e->kind == L8_EV_ERROR && e->code == L8_ERR_BAD_GRAMMAR &&
                                      e->request_id == id ? l8c_request_error(c, id) : NULL;
            if (why_grammar && x->json) {   /* the error event's message */
                t = why_grammar;
                tl = strlen(why_grammar);
            }
            if (stopped < 0) {
                fprintf(stderr, "\nllama8ctl: out of memory\n");
                return CTL_FAIL;
            }
            if (t && e->kind != L8_EV_ERROR)
                collect_text(x, t, tl);
            if (x->json && e->kind == L8_EV_DONE)
                show_tool_call(x, e->request_id, l8c_done_name(e->reason));
            if (x->json) {
                ctl_print_json(ctl_event_json(e, "request", json_object_new_uint64(e->request_id),
                                              now, t, tl));
            } else if (t) {
                fwrite(t, 1, tl, stdout);
                fflush(stdout);
            }
            if (stopped && e->kind == L8_EV_TOKEN) {
                rc = end_at_stop_text(c, x, e);
                print_stats(x, "stop_text");
                return rc;
            }
            if (e->kind == L8_EV_DONE) {
                if (!x->json) {
                    /* Flushed too: a program reading a chat through a pipe
                     * sees where the reply ends before it sends the next line. */
                    putchar('\n');
                    fflush(stdout);
                    show_tool_call(x, e->request_id, l8c_done_name(e->reason));
                }
                print_stats(x, l8c_done_name(e->reason));
                /* A reply cut by max_new looks complete: say so to a person. */
                if (e->reason == L8_DONE_LENGTH && x->say_cut)
                    fprintf(stderr, "llama8ctl: the reply was cut at %u tokens (--max-new N "
                            "for more)\n", e->index);
                return CTL_OK;
            }
            if (e->kind == L8_EV_ERROR) {
                char msg[L8C_ERRLEN];
                if (x->json)
                    ;
                else if (why_grammar)   /* nothing was generated: no line to end */
                    fprintf(stderr, "llama8ctl: %s: %s\n",
                            x->constraint ? x->constraint : "the constraint", why_grammar);
                else
                    fprintf(stderr, "\nllama8ctl: request failed: %s: %s\n", l8c_err_name(e->code),
                            l8c_error_text(e, msg));
                return CTL_FAIL;
            }
        }
    }
}

/* ---------------------------------------------------------------- generate */

static void generate_usage(FILE *f)
{
    fprintf(f,
        "Usage: llama8ctl generate [OPTIONS] [TEXT...]\n"
        "Send TEXT to llama8d as a user message in the Llama 3.1 chat format and print the\n"
        "reply as it is generated. Without TEXT, or with TEXT \"-\", the message is stdin;\n"
        "with TEXT and stdin not a terminal, it is TEXT, a blank line, then stdin:\n"
        "  git diff | llama8ctl generate \"Write a commit message for this diff\"\n"
        "(stdin up to 16 MiB).\n\n"
        "  --stdin-first          stdin first, then a blank line and TEXT\n"
        "  --raw                  no chat format: <|begin_of_text|> + the text's tokens\n"
        "  --ids IDS              the prompt as token ids (\"1 2 3\"); prints ids back\n"
        "  --system TEXT          a system message (chat format)\n"
        "  --messages             stdin is the conversation, a JSON array of\n"
        "                         {\"role\": ROLE, \"content\": TEXT}, ROLE system, user,\n"
        "                         assistant, or ipython (or tool) for a tool's result; an\n"
        "                         assistant turn that called a tool is its call as content\n"
        "                         ({\"name\": NAME, \"parameters\": {...}}), or\n"
        "                         \"tool_calls\": [{\"function\": {\"name\": NAME, \"arguments\":\n"
        "                         {...}}}] instead of content (one call)\n"
        TOOLS_HELP
        "  --grammar FILE         the reply is in the language of FILE's grammar (GBNF, as\n"
        "                         llama.cpp's: root ::= \"yes\" | \"no\")\n"
        "  --json-schema FILE     the reply is JSON valid against FILE's JSON Schema\n"
        "  --regex RE             the whole reply matches the regular expression RE\n"
        "  --json-object          the reply is one JSON value (any)\n"
        "                         (one of these four at most; the reply ends where the\n"
        "                         constraint admits nothing more, reason \"grammar\"; files\n"
        "                         up to 1 MiB; one the daemon cannot compile is refused with\n"
        "                         its reason and where in the text)\n"
        "  --logprobs             each token's log-probability, in --json's token events\n"
        "  --json                 one JSON object per line per event, instead of text:\n"
        "      {\"event\":\"started\",\"request\":ID,\"prompt_tokens\":P,\"cached_tokens\":N,...}\n"
        "                         prefill began; N of the P prompt positions came from the\n"
        "                         prefix cache\n"
        "      {\"event\":\"token\",\"request\":ID,\"token\":T,\"index\":I[,\"logprob\":L][,\"text\":S],...}\n"
        "                         S: the text now complete (absent for stop ids, or while a\n"
        "                         character's bytes are held back)\n"
        "      {\"event\":\"tool_call\",\"request\":ID,\"name\":NAME,\"arguments\":{...}}\n"
        "                         with --tools, a reply that is a tool call, before done\n"
        "      {\"event\":\"done\",\"request\":ID,\"reason\":R,\"tokens\":N[,\"text\":S],...}\n"
        "                         R: eos|stop|length|context|cancelled|grammar (the\n"
        "                         constraint admits no more), or stop_text (the reply ended\n"
        "                         at a --stop-text); N tokens generated (a final stop id\n"
        "                         included); S: bytes held back, as U+FFFD\n"
        "      {\"event\":\"error\",\"request\":ID,\"error\":NAME,\"message\":TEXT,...}\n"
        "                         NAME: the daemon's error code; TEXT: what was wrong\n"
        "                         (BAD_GRAMMAR: the daemon's reason, \"line L, column C: ...\")\n"
        "                         every event also has \"t_ns\" (the daemon's CLOCK_MONOTONIC\n"
        "                         time of the event) and \"t_recv_ns\" (ours, on receipt)\n"
        CTL_COMMON_HELP
        "  -h, --help\n\n"
        "exit status: 0 done, 1 the request or the daemon failed (or a constraint's file\n"
        "could not be read), 2 bad command line, 3 no daemon at the socket\n");
}

/* generate's own options. */
struct gen_args {
    bool raw, json, messages, stdin_first;
    const char *ids, *system;
    /* The constraint: its kind (enum l8c_constraint), option ("--grammar")
     * and argument (a file, the regex, NULL for --json-object); the option
     * of a second one, refused after the loop. */
    int constraint;
    const char *c_opt, *c_arg, *c_second;
};

static bool gen_opt(int opt, const char *arg, void *ctx)
{
    static const struct { int opt, kind; const char *name; } cons[] = {
        { CMD_GRAMMAR, L8C_CONSTRAINT_GBNF, "--grammar" },
        { CMD_JSON_SCHEMA, L8C_CONSTRAINT_JSON_SCHEMA, "--json-schema" },
        { CMD_REGEX, L8C_CONSTRAINT_REGEX, "--regex" },
        { CMD_JSON_OBJECT, L8C_CONSTRAINT_JSON, "--json-object" },
    };
    struct gen_args *g = ctx;
    switch (opt) {
    case CMD_RAW: g->raw = true; return true;
    case CMD_IDS: g->ids = arg; return true;
    case CMD_SYSTEM: g->system = arg; return true;
    case CMD_JSON: g->json = true; return true;
    case CMD_MESSAGES: g->messages = true; return true;
    case CMD_STDIN_FIRST: g->stdin_first = true; return true;
    }
    for (size_t i = 0; i < sizeof cons / sizeof cons[0]; i++) {
        if (cons[i].opt != opt)
            continue;
        if (g->c_opt) {
            if (!g->c_second)
                g->c_second = cons[i].name;
        } else {
            g->constraint = cons[i].kind;
            g->c_opt = cons[i].name;
            g->c_arg = arg;
        }
        return true;
    }
    return false;
}

/* generate's constraint into p: a file's text read (at most
 * L8_MAX_CONSTRAINT bytes, a regular file only) to *text, its option and
 * argument for messages to what. Returns -1 to go on, else the exit status
 * (message printed). */
static int gen_constraint(const struct gen_args *g, struct l8c_params *p, char **text,
                          char *what, size_t what_len)
{
    if (!g->c_opt)
        return -1;
    if (g->c_second) {
        if (!strcmp(g->c_opt, g->c_second))
            fprintf(stderr, "llama8ctl: %s given twice: give one constraint\n", g->c_opt);
        else
            fprintf(stderr, "llama8ctl: %s and %s: give one constraint at most\n", g->c_opt,
                    g->c_second);
        return CTL_USAGE;
    }
    p->constraint = g->constraint;
    if (g->constraint == L8C_CONSTRAINT_JSON) {
        snprintf(what, what_len, "%s", g->c_opt);
        return -1;
    }
    if (g->constraint == L8C_CONSTRAINT_REGEX) {
        if (strlen(g->c_arg) > L8_MAX_CONSTRAINT) {
            fprintf(stderr, "llama8ctl: --regex: longer than %u bytes\n", L8_MAX_CONSTRAINT);
            return CTL_USAGE;
        }
        snprintf(what, what_len, "%s", g->c_opt);
        p->constraint_text = g->c_arg;
        p->constraint_len = strlen(g->c_arg);
        return -1;
    }
    char err[512];
    size_t len;
    if (l8_read_file(g->c_arg, L8_MAX_CONSTRAINT, text, &len, err, sizeof err) < 0) {
        fprintf(stderr, "llama8ctl: %s %s\n", g->c_opt, err);
        return CTL_FAIL;
    }
    snprintf(what, what_len, "%s %s", g->c_opt, g->c_arg);
    p->constraint_text = *text;
    p->constraint_len = len;
    return -1;
}

/* The message: TEXT, stdin, or both (TEXT, a blank line, stdin; stdin_first
 * swaps them) where TEXT is given and stdin is not a terminal. An empty
 * stdin adds nothing. */
#define GEN_STDIN_MAX (16u << 20)
static int read_message(int argc, char **argv, bool stdin_first, bool messages, char **text,
                        size_t *len)
{
    const bool dash = optind + 1 == argc && !strcmp(argv[optind], "-");
    char *arg = NULL, *in = NULL;
    size_t alen = 0, ilen = 0;
    if (optind < argc && !dash && !(arg = ctl_join_args(optind, argc, argv, &alen)))
        return -ENOMEM;
    if (!arg || (!messages && !isatty(0))) {
        int rc = ctl_read_stdin(&in, &ilen, GEN_STDIN_MAX);
        if (rc < 0) {
            if (rc == -EFBIG)
                fprintf(stderr, "llama8ctl: stdin is over %u MiB, more than any context holds\n",
                        GEN_STDIN_MAX >> 20);
            else
                fprintf(stderr, "llama8ctl: reading stdin: %s\n", strerror(-rc));
            free(arg);
            return rc;
        }
    }
    if (!arg || !ilen) {
        *text = arg ? arg : in;
        *len = arg ? alen : ilen;
        free(arg ? in : NULL);
        return 0;
    }
    const char *first = stdin_first ? in : arg, *second = stdin_first ? arg : in;
    size_t n1 = stdin_first ? ilen : alen, n2 = stdin_first ? alen : ilen;
    char *t = malloc(n1 + 2 + n2 + 1);
    if (t) {
        memcpy(t, first, n1);
        memcpy(t + n1, "\n\n", 2);
        memcpy(t + n1 + 2, second, n2);
        t[n1 + 2 + n2] = 0;
        *text = t;
        *len = n1 + 2 + n2;
    }
    free(arg);
    free(in);
    return t ? 0 : -ENOMEM;
}

int ctl_generate(int argc, char **argv)
{
    static const struct option lo[] = {
        CTL_COMMON_LONGOPTS,
        {"raw", no_argument, 0, CMD_RAW}, {"ids", required_argument, 0, CMD_IDS},
        {"system", required_argument, 0, CMD_SYSTEM}, {"json", no_argument, 0, CMD_JSON},
        {"messages", no_argument, 0, CMD_MESSAGES},
        {"stdin-first", no_argument, 0, CMD_STDIN_FIRST},
        {"logprobs", no_argument, 0, CTL_OPT_LOGPROBS},
        {"grammar", required_argument, 0, CMD_GRAMMAR},
        {"json-schema", required_argument, 0, CMD_JSON_SCHEMA},
        {"regex", required_argument, 0, CMD_REGEX},
        {"json-object", no_argument, 0, CMD_JSON_OBJECT}, TOOLS_LONGOPTS,
        {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    struct ctl_req_opts o;
    struct gen_args g = {0};
    struct ctl_tools tools;
    int rc;
    ctl_req_opts_init(&o);
    if ((rc = ctl_req_getopt(argc, argv, lo, &o, &tools, gen_opt, &g, generate_usage)) >= 0)
        return rc;
    const bool raw = g.raw, json = g.json, messages = g.messages;
    const char *ids_arg = g.ids, *system = g.system;
    if (ids_arg && (optind < argc || o.n_stop_text || messages)) {
        fprintf(stderr, "llama8ctl: --ids excludes %s\n", optind < argc ? "TEXT"
                : messages ? "--messages" : "--stop-text");
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        return CTL_USAGE;
    }
    if (tools.n && (ids_arg || raw)) {
        fprintf(stderr, "llama8ctl: --tools are offered in the chat format: it excludes %s\n",
                raw ? "--raw" : "--ids");
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        return CTL_USAGE;
    }
    if (tools.n && tools.choice == CTL_TOOLS_REQUIRED && g.c_opt) {
        fprintf(stderr, "llama8ctl: --tool-choice required and %s: give one constraint at most "
                        "(required is a JSON Schema of the tools' calls)\n", g.c_opt);
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        return CTL_USAGE;
    }
    if (o.params.logprobs && !json) {
        fprintf(stderr, "llama8ctl: --logprobs shows in --json's token events: give --json too\n");
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        return CTL_USAGE;
    }
    if (messages && (optind < argc || raw || system)) {
        fprintf(stderr, "llama8ctl: --messages reads every message from stdin: it excludes %s\n",
                optind < argc ? "TEXT" : raw ? "--raw" : "--system");
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        return CTL_USAGE;
    }
    /* The constraint's file is read before connecting: a file that cannot
     * be read is said at once, without a daemon. */
    char *ctext = NULL, cwhat[600] = "";
    if ((rc = gen_constraint(&g, &o.params, &ctext, cwhat, sizeof cwhat)) >= 0) {
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        return rc;
    }
    struct l8c_client *c = NULL;
    l8tok *tok = NULL;
    l8tok_stream *st = NULL;
    l8tok_stop *stop = NULL;
    l8tok_ids ids = {0};
    char *text = NULL;
    size_t tlen = 0;
    struct l8chat_opts co;
    l8chat_opts_init(&co);
    int erc;
    if (ids_arg && ctl_parse_ids(ids_arg, &ids) < 0) {
        fprintf(stderr, "llama8ctl: --ids: not a list of token ids\n");
        l8tok_ids_free(&ids);   /* the ids parsed before the bad one */
        ctl_req_opts_free(&o);
        ctl_tools_free(&tools);
        free(ctext);
        return CTL_USAGE;
    }
    if (o.n_stop_text &&
        l8tok_stop_new((const char *const *)o.stop_text, o.n_stop_text, &stop) < 0) {
        ctl_req_opts_free(&o);
        free(ctext);
        return CTL_FAIL;
    }
    if ((rc = ctl_connect(o.socket, "llama8ctl generate", &c)) != CTL_OK)
        goto out;
    rc = CTL_FAIL;
    if (!ids_arg) {
        if (ctl_load_tokenizer(o.tokenizer, c, &tok) < 0 || l8tok_stream_new(tok, &st) < 0)
            goto out;
        if ((erc = ctl_tools_apply(&tools, tok, &co, &o.params, o.stop)) < 0) {
            fprintf(stderr, "llama8ctl: --tools: %s\n", erc == -E2BIG
                    ? "no room for the tool turn's stop ids (give fewer --stop)"
                    : "the tokenizer has no <|eot_id|>");
            goto out;
        }
        if (tools.n && tools.choice == CTL_TOOLS_REQUIRED)
            snprintf(cwhat, sizeof cwhat, "--tool-choice required (the schema of --tools' calls)");
        if (read_message(argc, argv, g.stdin_first, messages, &text, &tlen) < 0)
            goto out;
        if (messages) {
            const char *bad;
            json_object *root = ctl_parse_json(text, tlen, &bad);
            struct l8chat_msg *m = NULL;
            size_t nm = 0;
            char why[CTL_WHY_LEN];
            if (!root)
                snprintf(why, sizeof why, "not JSON: %s", bad);
            if (!root || (erc = ctl_parse_messages(root, &m, &nm, why)) < 0) {
                fprintf(stderr, "llama8ctl: --messages: stdin must be a JSON array of "
                                "{\"role\": ..., \"content\": ...}: %s\n", why);
                json_object_put(root);
                goto out;
            }
            erc = l8chat_encode(tok, m, nm, &co, &ids);
            free(m);
            json_object_put(root);
        } else if (raw) {
            const struct l8c_info *in = l8c_info(c);
            if (in->bos_id >= 0)
                l8tok_ids_push(&ids, (uint32_t)in->bos_id);
            erc = l8tok_encode(tok, text, tlen, L8TOK_ENCODE_DEFAULT, &ids);
        } else {
            struct l8chat_msg m[2];
            size_t nm = 0;
            if (system)
                m[nm++] = (struct l8chat_msg){ L8CHAT_SYSTEM, system, strlen(system) };
            m[nm++] = (struct l8chat_msg){ L8CHAT_USER, text, tlen };
            erc = l8chat_encode(tok, m, nm, &co, &ids);
        }
        if (erc < 0) {
            fprintf(stderr, "llama8ctl: encoding the prompt: %s\n",
                    erc == -EILSEQ ? "invalid UTF-8" : strerror(-erc));
            goto out;
        }
    }
    struct ctl_run x = { .s = { .tok = tok, .st = st, .stop = stop, .info = l8c_info(c),
                                   .p = &o.params }, .json = json, .stats = o.stats,
                            .constraint = cwhat[0] ? cwhat : NULL,
                            .tools = co.n_tools ? &tools : NULL, .collect = co.n_tools > 0,
                            .say_cut = !json && isatty(STDERR_FILENO) };
    rc = ctl_run_one(c, &x, ids.ids, ids.n);
    ctl_stream_free(&x.s);
    free(x.text);
    free(x.call);
out:
    free(ctext);
    ctl_tools_free(&tools);
    l8tok_stop_free(stop);
    ctl_req_opts_free(&o);
    free(text);
    l8tok_ids_free(&ids);
    l8tok_stream_free(st);
    l8tok_free(tok);
    l8c_close(c);
    return rc;
}
