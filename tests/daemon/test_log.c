/* test_log: l8_log_text, which makes a client's chosen text (its name) fit
 * for a log line: valid UTF-8 kept whole, never cut inside a character,
 * each byte of an ill-formed sequence and each control character as '?';
 * the rate limit of lines a peer can make repeat; and the engine's log
 * callback, each line of a message on its own at its level. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>
#include <unistd.h>

#include "../test.h"

#include "log.h"

static void expect(const char *src, size_t n, size_t cap, const char *want)
{
    char out[64];
    memset(out, 'x', sizeof out);
    l8_log_text(out, cap, src, n);
    CHECK(!strcmp(out, want), "cap %zu: got '%s', want '%s'", cap, out, want);
}
#define EXPECT(src, cap, want) expect(src, sizeof(src) - 1, cap, want)

int main(void)
{
    EXPECT("editor", 64, "editor");
    EXPECT("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80", 64, "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
    EXPECT("a\nb\tc\x7f" "d", 64, "a?b?c?d");                 /* C0 and DEL */
    EXPECT("a\xc2\x85" "b\xc2\xa0" "c", 64, "a?b\xc2\xa0" "c"); /* C1 NEL; NBSP stays */
    EXPECT("\xff\xfe", 64, "??");                              /* never UTF-8 */
    EXPECT("\xc0\xaf", 64, "??");                              /* overlong '/' */
    EXPECT("\xed\xa0\x80", 64, "???");                         /* a surrogate */
    EXPECT("\xf4\x90\x80\x80", 64, "????");                    /* past U+10FFFF */
    EXPECT("ab\xe2\x82", 64, "ab??");                          /* cut character */
    /* Truncation at a character boundary, never inside one. */
    EXPECT("ab\xe2\x82\xac", 5, "ab");
    EXPECT("ab\xe2\x82\xac", 6, "ab\xe2\x82\xac");
    EXPECT("abcdef", 4, "abc");
    EXPECT("abc", 1, "");

    /* The rate limit: the first passes, the rest within L8_LOG_RATE_NS are
     * counted, and the next after it passes with their number. */
    struct l8_ratelimit rl = { 0 };
    uint64_t skipped = 99, t = 5;
    char more[64];
    int passed = 0;
    for (int i = 0; i < 1000; i++)
        passed += l8_log_ratelimit(&rl, t + (uint64_t)i * 1000, &skipped);
    CHECK(passed == 1 && skipped == 0 && l8_log_ratelimit(&rl, t + L8_LOG_RATE_NS, &skipped) &&
              skipped == 999 &&
              !strcmp(l8_log_more(more, skipped), " (999 more like it not logged)") &&
              !strcmp(l8_log_more(more, 0), "") &&
              !l8_log_ratelimit(&rl, t + L8_LOG_RATE_NS + 1, &skipped),
          "rate limit: %d passed, %llu skipped", passed, (unsigned long long)skipped);
    /* l8_log_lines: one line each, at the message's level, empty lines
     * dropped, lines past log_level not written. */
    unsetenv("JOURNAL_STREAM");
    l8_log_init(L8_LOG_INFO);
    FILE *cap = tmpfile();
    int saved = dup(STDERR_FILENO);
    REQUIRE(cap && saved >= 0 && dup2(fileno(cap), STDERR_FILENO) >= 0, "cannot capture stderr");
    l8_log_lines(NULL, LOG_INFO, "cuda: a report:\n  row 1\n\n  row 2");
    l8_log_lines(NULL, LOG_WARNING, "cuda: a warning");
    l8_log_lines(NULL, LOG_DEBUG, "cuda: not shown\nat info");
    dup2(saved, STDERR_FILENO);
    close(saved);
    char got[256] = "";
    rewind(cap);
    got[fread(got, 1, sizeof got - 1, cap)] = 0;
    fclose(cap);
    const char *want = "llama8d: cuda: a report:\nllama8d:   row 1\nllama8d:   row 2\n"
                       "llama8d: warning: cuda: a warning\n";
    CHECK(!strcmp(got, want), "l8_log_lines wrote\n%s\nwant\n%s", got, want);
    return t_result("test_log");
}
