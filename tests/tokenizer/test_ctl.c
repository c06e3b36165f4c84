/* `llama8ctl tokenize` / `detokenize` as a user runs them: output, exit codes, errors.
 * argv[1]: the llama8ctl executable; argv[2]: the real tokenizer.json. */
#include <errno.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../test.h"

static const char *ctl, *tokjson;

struct result {
    int status; /* exit code, or -1 */
    char out[65536];
    size_t out_len;
    char err[8192];
};

static void drain(int fd, char *buf, size_t cap, size_t *len)
{
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
        if (n == cap - 1)
            break;
    }
    buf[n] = 0;
    if (len)
        *len = n;
    close(fd);
}

/* Run llama8ctl with args (NULL-terminated) and input on stdin; env NULL: the
 * tokenizer in LLAMA8_TOKENIZER is not set. */
static void run(struct result *r, const char *input, size_t input_len, char **env, ...)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = (char *)ctl;
    va_list ap;
    va_start(ap, env);
    char *a;
    while ((a = va_arg(ap, char *)) && argc < 31)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    int in[2], out[2], err[2];
    if (pipe(in) || pipe(out) || pipe(err)) {
        perror("pipe");
        exit(1);
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in[0], 0);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_adddup2(&fa, err[1], 2);
    posix_spawn_file_actions_addclose(&fa, in[1]);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addclose(&fa, err[0]);
    static char *no_env[] = {NULL};
    posix_spawnattr_t at;   /* the child gets SIGPIPE back as it would from a shell */
    sigset_t def;
    sigemptyset(&def);
    sigaddset(&def, SIGPIPE);
    posix_spawnattr_init(&at);
    posix_spawnattr_setsigdefault(&at, &def);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    pid_t pid;
    if (posix_spawn(&pid, ctl, &fa, &at, argv, env ? env : no_env) != 0) {
        perror("posix_spawn");
        exit(1);
    }
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&at);
    close(in[0]);
    close(out[1]);
    close(err[1]);
    /* A child that fails before reading its stdin closes the pipe: EPIPE
     * (SIGPIPE is ignored in main), not a failure of the test. */
    if (input_len && write(in[1], input, input_len) != (ssize_t)input_len && errno != EPIPE)
        perror("write");
    close(in[1]);
    drain(out[0], r->out, sizeof(r->out), &r->out_len);
    drain(err[0], r->err, sizeof(r->err), NULL);
    int st;
    waitpid(pid, &st, 0);
    r->status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

#define RUN(r, in, ...) run((r), (in), strlen(in), env, __VA_ARGS__, (char *)NULL)

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LLAMA8CTL TOKENIZER_JSON\n", argv[0]);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    ctl = argv[1];
    tokjson = argv[2];
    char envvar[4096];
    snprintf(envvar, sizeof(envvar), "LLAMA8_TOKENIZER=%s", tokjson);
    /* The tokenizer's table cache, where meson puts it (each run would otherwise parse the
     * tokenizer.json: half a second a run). */
    const char *cache = getenv("LLAMA8_TOKENIZER_CACHE");
    char cachevar[4096];
    snprintf(cachevar, sizeof(cachevar), "LLAMA8_TOKENIZER_CACHE=%s", cache ? cache : "off");
    char *env[] = {envvar, cachevar, NULL};
    static struct result r;
    char *t = (char *)tokjson;

    RUN(&r, "", "tokenize", "-t", t, "Hello", "world");
    CHECK(r.status == 0 && !strcmp(r.out, "9906 1917\n"), "args: %d '%s' %s", r.status, r.out, r.err);
    RUN(&r, "Hello world", "tokenize", "--tokenizer", t, "--json");
    CHECK(r.status == 0 && !strcmp(r.out, "[9906,1917]\n"), "stdin --json: '%s'", r.out);
    RUN(&r, "Hello world", "tokenize");
    CHECK(r.status == 0 && !strcmp(r.out, "9906 1917\n"), "LLAMA8_TOKENIZER: '%s'", r.out);
    RUN(&r, "<|eot_id|>", "tokenize");
    CHECK(r.status == 0 && !strcmp(r.out, "128009\n"), "special: '%s'", r.out);
    RUN(&r, "<|eot_id|>", "tokenize", "--no-special");
    CHECK(r.status == 0 && !strcmp(r.out, "27 91 68 354 851 91 29\n"), "--no-special: '%s'", r.out);
    RUN(&r, "Hello!", "tokenize", "--chat", "--json", "--date", "26 Jul 2024");
    CHECK(r.status == 0 && !strcmp(r.out, "[128000,128006,9125,128007,271,38766,1303,33025,2696,25,6790,"
                                          "220,2366,18,198,15724,2696,25,220,1627,10263,220,2366,19,271,"
                                          "128009,128006,882,128007,271,9906,0,128009,128006,78191,128007,271]\n"),
          "--chat: '%s' %s", r.out, r.err);
    RUN(&r, "What is the capital of France?", "tokenize", "--chat", "--system", "You are a helpful assistant.");
    CHECK(r.status == 0 && strstr(r.out, " 2675 527 264 11190 18328 13 128009 ") &&
              strstr(r.out, " 3923 374 279 6864 315 9822 30 128009 128006 78191 128007 271\n"),
          "--chat --system: '%s'", r.out);
    RUN(&r, "[{\"role\":\"user\",\"content\":\"Hello!\"},{\"role\":\"assistant\",\"content\":\"Hi.\"}]",
        "tokenize", "--chat", "--messages", "--no-generation-prompt");
    CHECK(r.status == 0 && strstr(r.out, " 9906 0 128009 128006 78191 128007 271 13347 13 128009\n"),
          "--messages: '%s' %s", r.out, r.err);
    RUN(&r, "Hi", "tokenize", "--chat", "--date", "01 Jan 2025");
    CHECK(r.status == 0 && !strstr(r.out, " 1627 10263 "), "--date changes the date: '%s'", r.out);

    RUN(&r, "ok \xe2\x28\xa1", "tokenize");
    CHECK(r.status == 1 && strstr(r.err, "byte offset 3"), "invalid UTF-8: %d %s", r.status, r.err);
    RUN(&r, "[{\"role\":\"robot\",\"content\":\"x\"}]", "tokenize", "--chat", "--messages");
    CHECK(r.status == 1 && strstr(r.err, "message 0: role \"robot\""), "bad role: %d %s", r.status,
          r.err);
    /* --messages takes one strict JSON value and nothing after it */
    static const char *const not_json[][2] = {
        { "[{\"role\":\"user\",\"content\":\"x\"}] x", "unexpected character, at byte 33 ('x')" },
        { "[{\"role\":\"user\",\"content\":\"x\"},]", "at byte 32 (']')" },
        { "[{\"role\":\"user\",/*c*/\"content\":\"x\"}]", "a key must be a quoted string, at byte 17" },
        { "[{\"role\":\"user\",\"content\":\"\xff\"}]", "invalid UTF-8, at byte 28" },
        { "[{\"role\":\"user\"", "it ends too early" },
    };
    for (size_t i = 0; i < sizeof not_json / sizeof not_json[0]; i++) {
        RUN(&r, not_json[i][0], "tokenize", "--chat", "--messages");
        CHECK(r.status == 1 && strstr(r.err, "not JSON") && strstr(r.err, not_json[i][1]),
              "--messages %s: %d %s", not_json[i][0], r.status, r.err);
    }
    RUN(&r, "", "tokenize", "--bogus");
    CHECK(r.status == 2, "unknown option: %d", r.status);
    RUN(&r, "", "tokenize", "--system", "x", "y");
    CHECK(r.status == 2, "--system without --chat: %d", r.status);
    RUN(&r, "", "tokenize", "--help");
    CHECK(r.status == 0 && strstr(r.out, "Usage: llama8ctl tokenize"), "tokenize --help");
    RUN(&r, "", "tokenize", "-t", "/nonexistent/tokenizer.json", "x");
    CHECK(r.status == 1 && strstr(r.err, "No such file"), "missing tokenizer: %d %s", r.status, r.err);
    /* A directory stands for its tokenizer.json, and the message names that file; a
     * file that is not a tokenizer.json says so, not "Invalid argument". */
    RUN(&r, "", "tokenize", "-t", "/sys", "x");
    CHECK(r.status == 1 && strstr(r.err, "tokenizer /sys/tokenizer.json: No such file"),
          "a directory without one: %d %s", r.status, r.err);
    RUN(&r, "", "tokenize", "-t", "/dev/null", "x");
    CHECK(r.status == 1 && strstr(r.err, "/dev/null: not a tokenizer.json"), "/dev/null: %d %s",
          r.status, r.err);
    /* What is not a regular file is named, at once: a device, a FIFO (no writer). */
    RUN(&r, "", "tokenize", "-t", "/dev/zero", "x");
    CHECK(r.status == 1 && strstr(r.err, "tokenizer /dev/zero: is a character device, not a "
                                  "regular file"), "/dev/zero: %d %s", r.status, r.err);
    char fifo[64];
    snprintf(fifo, sizeof fifo, "/tmp/l8ctl-test-%d.fifo", (int)getpid());
    if (mkfifo(fifo, 0600) == 0) {
        RUN(&r, "", "tokenize", "-t", fifo, "x");
        CHECK(r.status == 1 && strstr(r.err, "is a FIFO, not a regular file"), "a FIFO: %d %s",
              r.status, r.err);
        unlink(fifo);
    }
    run(&r, "x", 1, NULL, "tokenize", (char *)NULL);
    CHECK(r.status == 2 && strstr(r.err, "no tokenizer"), "no tokenizer configured: %d %s", r.status, r.err);

    RUN(&r, "", "detokenize", "9906", "1917");
    CHECK(r.status == 0 && !strcmp(r.out, "Hello world"), "detokenize args: '%s'", r.out);
    RUN(&r, "9906, 1917\n128009\n", "detokenize");
    CHECK(r.status == 0 && !strcmp(r.out, "Hello world<|eot_id|>"), "detokenize stdin: '%s'", r.out);
    RUN(&r, "[9906,1917]", "detokenize", "--json");
    CHECK(r.status == 0 && !strcmp(r.out, "{\"text\":\"Hello world\"}\n"), "detokenize --json: '%s'", r.out);
    /* 76460 225 is "😃" in the golden emoji case: the first token alone is the start of
     * the character: its raw bytes in plain mode, one U+FFFD in JSON. */
    RUN(&r, "", "detokenize", "76460", "225");
    CHECK(r.status == 0 && !strcmp(r.out, "\xf0\x9f\x98\x83"), "whole emoji: '%s'", r.out);
    RUN(&r, "", "detokenize", "76460");
    CHECK(r.status == 0 && r.out_len > 0 && r.out_len < 4 && (unsigned char)r.out[0] == 0xf0,
          "raw bytes: %zu", r.out_len);
    RUN(&r, "[76460]", "detokenize", "--json");
    CHECK(r.status == 0 && !strcmp(r.out, "{\"text\":\"\xef\xbf\xbd\"}\n"), "lossy JSON: '%s'", r.out);
    RUN(&r, "", "detokenize", "9906", "999999");
    CHECK(r.status == 1 && strstr(r.err, "999999"), "bad id: %d %s", r.status, r.err);
    RUN(&r, "12 abc", "detokenize");
    CHECK(r.status == 2, "not a number: %d", r.status);
    RUN(&r, "", "detokenize", "--help");
    CHECK(r.status == 0 && strstr(r.out, "Usage: llama8ctl detokenize"), "detokenize --help");

    /* generate's constraints, refused before any daemon is asked (the socket
     * leads nowhere: a command line that passes exits 3). */
    const char *nosock = "/nonexistent/llama8d.sock";
    RUN(&r, "", "generate", "--socket", nosock, "--grammar", "a.gbnf", "--regex", "x", "hi");
    CHECK(r.status == 2 && strstr(r.err, "--grammar and --regex: give one constraint at most"),
          "--grammar --regex: %d %s", r.status, r.err);
    RUN(&r, "", "generate", "--socket", nosock, "--json-object", "--json-schema", "s.json", "hi");
    CHECK(r.status == 2 && strstr(r.err, "--json-object and --json-schema: give one constraint"),
          "--json-object --json-schema: %d %s", r.status, r.err);
    RUN(&r, "", "generate", "--socket", nosock, "--regex", "a", "--regex", "b", "hi");
    CHECK(r.status == 2 && strstr(r.err, "--regex given twice"), "--regex twice: %d %s", r.status,
          r.err);
    RUN(&r, "", "generate", "--socket", nosock, "--grammar", "/nonexistent/g.gbnf", "hi");
    CHECK(r.status == 1 && strstr(r.err, "llama8ctl: --grammar /nonexistent/g.gbnf: No such file"),
          "unreadable --grammar: %d %s", r.status, r.err);
    RUN(&r, "", "generate", "--socket", nosock, "--json-schema", "/sys", "hi");
    CHECK(r.status == 1 && strstr(r.err, "--json-schema /sys: is a directory, not a regular file"),
          "a directory as --json-schema: %d %s", r.status, r.err);
    char cfile[64];
    snprintf(cfile, sizeof cfile, "/tmp/l8ctl-test-%d.gbnf", (int)getpid());
    if (mkfifo(cfile, 0600) == 0) {
        /* No writer: an open() or read() that waited would hang here. */
        RUN(&r, "", "generate", "--socket", nosock, "--grammar", cfile, "hi");
        CHECK(r.status == 1 && strstr(r.err, "is a FIFO, not a regular file"),
              "a FIFO as --grammar: %d %s", r.status, r.err);
        unlink(cfile);
    }
    FILE *f = fopen(cfile, "w");
    CHECK(f != NULL, "%s: %s", cfile, strerror(errno));
    if (f) {
        /* 1 MiB is the protocol's bound (L8_MAX_CONSTRAINT): one byte more is refused. */
        for (int i = 0; i < (1 << 20); i++)
            fputc(i % 64 ? 'x' : '\n', f);
        fclose(f);
        RUN(&r, "", "generate", "--socket", nosock, "--grammar", cfile, "hi");
        CHECK(r.status == 3, "a 1 MiB --grammar goes to the daemon: %d %s", r.status, r.err);
        f = fopen(cfile, "a");
        fputc('x', f);
        fclose(f);
        RUN(&r, "", "generate", "--socket", nosock, "--grammar", cfile, "hi");
        CHECK(r.status == 1 && strstr(r.err, "is larger than 1048576 bytes (1048577)"),
              "a --grammar over 1 MiB: %d %s", r.status, r.err);
        unlink(cfile);
    }
    RUN(&r, "", "generate", "--socket", nosock, "--regex", "(yes|no)", "hi");
    CHECK(r.status == 3 && strstr(r.err, "no llama8d listening"), "--regex, no daemon: %d %s",
          r.status, r.err);
    /* --tools and --tool-choice (generate's and chat's shared option loop):
     * a file that is not a tools array, or not a regular file, and the
     * choices, said before any daemon is asked. */
    char tfile[64];
    snprintf(tfile, sizeof tfile, "/tmp/l8ctl-tools-%d.json", (int)getpid());
    static const char *const bad_tools[][2] = {
        { "{\"name\": \"f\"}", "not a JSON array of tool definitions" },
        { "[]", "0 tools (give 1 to 128)" },
        { "[1]", "tool 0 is not a JSON object" },
        { "[{\"type\": \"function\", \"function\": {}}]", "a tool without a name" },
        { "[{\"name\": \"f\"},]", "not JSON" },
    };
    for (size_t i = 0; i < sizeof bad_tools / sizeof bad_tools[0]; i++) {
        FILE *tf = fopen(tfile, "w");
        CHECK(tf != NULL, "%s: %s", tfile, strerror(errno));
        if (!tf)
            break;
        fputs(bad_tools[i][0], tf);
        fclose(tf);
        for (int k = 0; k < 2; k++) {
            RUN(&r, "", k ? "chat" : "generate", "--socket", nosock, "--tools", tfile, "hi");
            CHECK(r.status == 1 && strstr(r.err, "llama8ctl: --tools ") &&
                  strstr(r.err, bad_tools[i][1]), "%s --tools '%s': %d %s", k ? "chat" : "generate",
                  bad_tools[i][0], r.status, r.err);
        }
    }
    if (unlink(tfile) == 0 && mkfifo(tfile, 0600) == 0) {
        RUN(&r, "", "chat", "--socket", nosock, "--tools", tfile);
        CHECK(r.status == 1 && strstr(r.err, "is a FIFO, not a regular file"),
              "a FIFO as --tools: %d %s", r.status, r.err);
        unlink(tfile);
    }
    RUN(&r, "", "generate", "--socket", nosock, "--tools", "/nonexistent/t.json", "hi");
    CHECK(r.status == 1 && strstr(r.err, "llama8ctl: --tools /nonexistent/t.json: No such file"),
          "unreadable --tools: %d %s", r.status, r.err);
    FILE *tf = fopen(tfile, "w");
    CHECK(tf != NULL, "%s: %s", tfile, strerror(errno));
    if (tf) {
        fputs("[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": "
              "{\"type\": \"object\"}}}, {\"name\": \"g\"}]", tf);
        fclose(tf);
        RUN(&r, "", "generate", "--socket", nosock, "--tools", tfile, "--tool-choice", "maybe", "hi");
        CHECK(r.status == 2 && strstr(r.err, "--tool-choice: auto, required or none, not: maybe"),
              "--tool-choice maybe: %d %s", r.status, r.err);
        RUN(&r, "", "chat", "--socket", nosock, "--tool-choice", "required");
        CHECK(r.status == 2 && strstr(r.err, "--tool-choice needs --tools FILE"),
              "--tool-choice without --tools: %d %s", r.status, r.err);
        RUN(&r, "", "generate", "--socket", nosock, "--tools", tfile, "--tool-choice", "required",
            "--json-schema", "s.json", "hi");
        CHECK(r.status == 2 &&
              strstr(r.err, "--tool-choice required and --json-schema: give one constraint"),
              "--tool-choice required --json-schema: %d %s", r.status, r.err);
        RUN(&r, "", "generate", "--socket", nosock, "--tools", tfile, "--raw", "hi");
        CHECK(r.status == 2 && strstr(r.err, "--tools are offered in the chat format: it "
                                               "excludes --raw"), "--tools --raw: %d %s",
              r.status, r.err);
        /* A good file, each choice, and a constraint beside auto: on to the daemon. */
        static const char *const choices[] = { "auto", "required", "none" };
        for (int k = 0; k < 3; k++) {
            RUN(&r, "", "generate", "--socket", nosock, "--tools", tfile, "--tool-choice",
                choices[k], "hi");
            CHECK(r.status == 3, "--tools --tool-choice %s: %d %s", choices[k], r.status, r.err);
        }
        RUN(&r, "", "chat", "--socket", nosock, "--tools", tfile, "--regex", "x");
        CHECK(r.status == 2, "chat has no --regex: %d %s", r.status, r.err);
        RUN(&r, "", "generate", "--socket", nosock, "--tools", tfile, "--regex", "x", "hi");
        CHECK(r.status == 3, "--tools (auto) --regex: %d %s", r.status, r.err);
        unlink(tfile);
    }
    RUN(&r, "", "chat", "--help");
    CHECK(r.status == 0 && strstr(r.out, "--tools FILE") && strstr(r.out, "--tool-choice") &&
          strstr(r.out, "/tool RESULT") && strstr(r.out, "tool call: NAME ARGUMENTS"),
          "chat --help: %s", r.out);

    RUN(&r, "", "generate", "--help");
    CHECK(r.status == 0 && strstr(r.out, "--grammar FILE") && strstr(r.out, "--json-schema FILE") &&
          strstr(r.out, "--regex RE") && strstr(r.out, "--json-object") &&
          strstr(r.out, "--tools FILE") && strstr(r.out, "\"event\":\"tool_call\""),
          "generate --help: %s",
          r.out);

    RUN(&r, "", "--help");
    CHECK(r.status == 0 && strstr(r.out, "tokenize") && strstr(r.out, "detokenize"), "--help");
    RUN(&r, "", "frobnicate");
    CHECK(r.status == 2 && strstr(r.err, "unknown command"), "unknown command: %d", r.status);
    run(&r, "", 0, env, (char *)NULL);
    CHECK(r.status == 2, "no command: %d", r.status);

    return t_result("test_ctl");
}
