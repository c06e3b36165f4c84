/* ctl_shell.c - suggest and explain, the commands behind the shell
 * integrations (client/shell/): each is a generate request with a system
 * message of its own; the request options pass through to generate as
 * given, after the command's defaults, so the user's win. */
#include "ctl_ipc.h"

#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <unistd.h>

/* The tail of a failed command's output that explain sends: its end is
 * where the error is, and a prompt of a few thousand tokens stays quick. */
#define EXPLAIN_MAX_OUTPUT 8192u

enum { SH_SHELL = 1, SH_OS, SH_DIR };

/* generate's argv: argv[0], the command's own words, the request options
 * as given, "--", the text. Strings we made are kept in own for freeing. */
struct gen_argv {
    char **v, **own;
    int n, n_own;
};

static int gv_init(struct gen_argv *a, int argc)
{
    const int cap = 2 * argc + 16;
    a->v = calloc((size_t)cap, sizeof(char *));
    a->own = calloc((size_t)cap, sizeof(char *));
    a->n = a->n_own = 0;
    return a->v && a->own ? 0 : -ENOMEM;
}

static void gv_push(struct gen_argv *a, const char *s)
{
    a->v[a->n++] = (char *)s;
}

/* Pushes a string of ours (NULL: out of memory, pushed as nothing). */
static int gv_push_own(struct gen_argv *a, char *s)
{
    if (!s)
        return -ENOMEM;
    a->own[a->n_own++] = s;
    gv_push(a, s);
    return 0;
}

static void gv_free(struct gen_argv *a)
{
    for (int i = 0; a->own && i < a->n_own; i++)
        free(a->own[i]);
    free(a->own);
    free(a->v);
}

static char *xprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *xprintf(const char *fmt, ...)
{
    va_list ap;
    char *s;
    va_start(ap, fmt);
    int r = vasprintf(&s, fmt, ap);
    va_end(ap);
    return r < 0 ? NULL : s;
}

/* The running system's name: /etc/os-release's PRETTY_NAME, else uname. */
static void os_name(char *out, size_t n)
{
    FILE *f = fopen("/etc/os-release", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "PRETTY_NAME=", 12))
            continue;
        char *v = line + 12, *e = v + strcspn(v, "\n");
        *e = '\0';
        if (*v == '"' || *v == '\'') {
            v++;
            if (e > v && (e[-1] == '"' || e[-1] == '\''))
                e[-1] = '\0';
        }
        if (*v) {
            snprintf(out, n, "%s", v);
            fclose(f);
            return;
        }
    }
    if (f)
        fclose(f);
    struct utsname u;
    if (uname(&u) == 0)
        snprintf(out, n, "%s %s", u.sysname, u.release);
    else
        snprintf(out, n, "Linux");
}

/* The option loop both commands share: the request options are passed
 * on to generate (as --NAME=VALUE), own(opt, optarg, ctx) takes the
 * command's own. Returns -1 to go on, else the exit status. */
static int shell_getopt(int argc, char **argv, const struct option *lo, struct gen_argv *a,
                        bool (*own)(int opt, const char *arg, void *ctx), void *ctx,
                        void (*usage)(FILE *))
{
    int opt, li;
    optind = 1;
    while ((opt = getopt_long(argc, argv, "h", lo, &li)) != -1) {
        if (opt >= CTL_OPT_BASE) {
            int rc = lo[li].has_arg ? gv_push_own(a, xprintf("--%s=%s", lo[li].name, optarg))
                                    : gv_push_own(a, xprintf("--%s", lo[li].name));
            if (rc < 0)
                return CTL_FAIL;
            continue;
        }
        if (opt != 'h' && opt != '?' && own && own(opt, optarg, ctx))
            continue;
        if (opt != 'h')
            return ctl_usage_error(NULL);
        usage(stdout);
        return CTL_OK;
    }
    return -1;
}

/* Runs generate on a's words, "--" and text (ours; freed with a). */
static int run_generate(struct gen_argv *a, char *text)
{
    gv_push(a, "--");
    if (gv_push_own(a, text) < 0)
        return CTL_FAIL;
    return ctl_generate(a->n, a->v);
}

/* ------------------------------------------------------------- suggest */

static void suggest_usage(FILE *f)
{
    fprintf(f,
        "Usage: llama8ctl suggest [OPTIONS] TEXT...\n"
        "Ask llama8d for one shell command that does what TEXT describes (or completes\n"
        "it), printed on one line: what the shell key bindings (llama8.bash, llama8.zsh)\n"
        "put on the command line for review. Nothing is run.\n\n"
        "  --shell NAME           the shell it is for (default: the name of $SHELL, else sh)\n"
        "  --os NAME              the system (default: PRETTY_NAME of /etc/os-release)\n"
        "  --dir NAME             the current directory's name (default: the last part of\n"
        "                         the working directory)\n"
        CTL_COMMON_HELP
        "                         (suggest's default --max-new is 128)\n"
        "  -h, --help\n\n"
        "exit status: 0 done, 1 the request or the daemon failed, 2 bad command line,\n"
        "3 no daemon at the socket\n");
}

struct suggest_args { const char *shell, *os, *dir; };

static bool suggest_opt(int opt, const char *arg, void *ctx)
{
    struct suggest_args *s = ctx;
    switch (opt) {
    case SH_SHELL: s->shell = arg; return true;
    case SH_OS: s->os = arg; return true;
    case SH_DIR: s->dir = arg; return true;
    }
    return false;
}

int ctl_suggest(int argc, char **argv)
{
    static const struct option lo[] = {
        CTL_COMMON_LONGOPTS,
        {"shell", required_argument, 0, SH_SHELL}, {"os", required_argument, 0, SH_OS},
        {"dir", required_argument, 0, SH_DIR}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    struct gen_argv a;
    struct suggest_args s = {0};
    char os[512], cwd[PATH_MAX], *shell_env = NULL;
    int rc = CTL_FAIL;
    if (gv_init(&a, argc) < 0)
        goto out;
    gv_push(&a, "generate");
    gv_push(&a, "--max-new=128");
    /* One line that starts with a word: the model cannot end the line
     * and go on explaining. */
    gv_push(&a, "--regex=\\S[^\\r\\n]*");
    if ((rc = shell_getopt(argc, argv, lo, &a, suggest_opt, &s, suggest_usage)) >= 0)
        goto out;
    rc = CTL_USAGE;
    char *text = optind < argc ? ctl_join_args(optind, argc, argv, NULL) : NULL;
    if (!text || !text[strspn(text, " \t")]) {
        fprintf(stderr, "llama8ctl suggest: give the text of the command line "
                        "(what the command should do)\n");
        free(text);
        goto out;
    }
    if (!s.shell) {
        const char *e = getenv("SHELL");
        shell_env = e && *e ? strdup(e) : NULL;
        s.shell = shell_env ? basename(shell_env) : "sh";
    }
    if (!s.os) {
        os_name(os, sizeof os);
        s.os = os;
    }
    if (!s.dir) {
        if (getcwd(cwd, sizeof cwd))
            s.dir = strcmp(cwd, "/") ? basename(cwd) : "/";
        else
            s.dir = "(unknown)";
    }
    rc = CTL_FAIL;
    if (gv_push_own(&a, xprintf("--system=You turn a description into a shell command. Reply "
                                "with exactly one %s command line for %s, to be run in a "
                                "directory named %s, that does what the user describes (or "
                                "completes the command they started). Write the command "
                                "alone: no explanation, no quotes or code fences, no prompt "
                                "sign, one line.", s.shell, s.os, s.dir)) < 0) {
        free(text);
        goto out;
    }
    rc = run_generate(&a, text);
out:
    free(shell_env);
    gv_free(&a);
    return rc;
}

/* ------------------------------------------------------------- explain */

static void explain_usage(FILE *f)
{
    fprintf(f,
        "Usage: COMMAND 2>&1 | llama8ctl explain [OPTIONS] [COMMAND...]\n"
        "Ask llama8d why a command failed, from its output on stdin (the last %u bytes\n"
        "of it) and the command line given as COMMAND, and how to fix it.\n\n"
        CTL_COMMON_HELP
        "  -h, --help\n\n"
        "exit status: 0 done, 1 the request or the daemon failed, 2 bad command line\n"
        "(or stdin a terminal), 3 no daemon at the socket\n", EXPLAIN_MAX_OUTPUT);
}

int ctl_explain(int argc, char **argv)
{
    static const struct option lo[] = {
        CTL_COMMON_LONGOPTS, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0},
    };
    struct gen_argv a;
    char *out = NULL, *cmd = NULL;
    size_t len = 0;
    int rc = CTL_FAIL;
    if (gv_init(&a, argc) < 0)
        goto done;
    gv_push(&a, "generate");
    if ((rc = shell_getopt(argc, argv, lo, &a, NULL, NULL, explain_usage)) >= 0)
        goto done;
    if (isatty(0)) {
        fprintf(stderr, "llama8ctl explain: pipe the failed command's output in: "
                        "make 2>&1 | llama8ctl explain make\n");
        rc = CTL_USAGE;
        goto done;
    }
    rc = CTL_FAIL;
    int e = ctl_read_stdin(&out, &len, 0);
    if (e < 0) {
        fprintf(stderr, "llama8ctl explain: reading stdin: %s\n", strerror(-e));
        goto done;
    }
    if (len == 0) {
        fprintf(stderr, "llama8ctl explain: stdin was empty: pipe in the command's output "
                        "(2>&1 for its errors)\n");
        goto done;
    }
    /* The tail, from a character's first byte. */
    size_t from = len > EXPLAIN_MAX_OUTPUT ? len - EXPLAIN_MAX_OUTPUT : 0;
    while (from < len && ((unsigned char)out[from] & 0xc0) == 0x80)
        from++;
    cmd = optind < argc ? ctl_join_args(optind, argc, argv, NULL) : NULL;
    char cut[64] = "";
    if (from)
        snprintf(cut, sizeof cut, "[its first %zu bytes left out]\n", from);
    char *user = cmd ? xprintf("Command: %s\n\nIts output:\n%s%.*s", cmd, cut,
                               (int)(len - from), out + from)
                     : xprintf("Its output:\n%s%.*s", cut, (int)(len - from), out + from);
    gv_push(&a, "--system=The user's shell command failed. From the command and its output, "
                "explain briefly what went wrong and how to fix it; end with the corrected "
                "command where there is one.");
    rc = run_generate(&a, user);
done:
    free(out);
    free(cmd);
    gv_free(&a);
    return rc;
}
