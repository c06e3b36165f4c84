/* test_client_text: libllama8client's one-call layer (l8c_chat_stream,
 * l8c_generate_text, l8c_tokenizer) against a real llama8d on a synthetic
 * checkpoint with the real tokenizer:
 *  - the text equals what the low-level calls give for the same prompt
 *    (chat-encoded, submitted, streamed, special tokens left out), and the
 *    reply's counts are the events';
 *  - a callback that returns nonzero cancels: one piece, reason cancelled;
 *  - parameters NULL in a 64-position context: the reply is what fits;
 *  - refusals say the daemon's code and words; a message that is not UTF-8
 *    is refused before anything is sent.
 * argv: llama8d llama8-mkmodel tokenizer.json */
#include "ipc_helper.h"

#include <sys/wait.h>

static const char *bin_d, *bin_mk, *tokenizer;
static char model[64];

struct text { char buf[65536]; size_t n; int pieces, stop_after; };

static int collect(void *arg, const char *s, size_t len)
{
    struct text *t = arg;
    if (t->n + len < sizeof t->buf) {
        memcpy(t->buf + t->n, s, len);
        t->n += len;
    }
    t->buf[t->n] = 0;
    return ++t->pieces == t->stop_after;
}

/* The same request through the low-level calls: the reference. */
static void low_level(struct l8c_client *c, const char *q, uint32_t max_new, struct text *t,
                      uint32_t *n_prompt, uint32_t *n_tokens)
{
    const l8tok *tok = l8c_tokenizer(c);
    REQUIRE(tok, "tokenizer: %s", l8c_last_error(c, NULL));
    struct l8chat_msg m = { L8CHAT_USER, q, strlen(q) };
    l8tok_ids ids = {0};
    REQUIRE(l8chat_encode(tok, &m, 1, NULL, &ids) == 0, "encode");
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = max_new;
    uint64_t id;
    REQUIRE(l8c_submit(c, ids.ids, (uint32_t)ids.n, &p, &id) == 0, "submit");
    *n_prompt = (uint32_t)ids.n;
    *n_tokens = 0;
    l8tok_stream *st;
    REQUIRE(l8tok_stream_new(tok, &st) == 0, "stream");
    memset(t, 0, sizeof *t);
    for (bool done = false; !done;) {
        struct l8_event ev[64];
        int n = l8c_wait_events(c, ev, 64, 30000);
        REQUIRE(n > 0, "events: %d", n);
        for (int i = 0; i < n; i++) {
            const char *s;
            size_t len;
            if (ev[i].kind == L8_EV_TOKEN) {
                (*n_tokens)++;
                if (!l8tok_is_special(tok, ev[i].token) &&
                    l8tok_stream_push(st, ev[i].token, &s, &len) == 0)
                    collect(t, s, len);
            } else if (ev[i].kind == L8_EV_DONE) {
                if (l8tok_stream_flush(st, &s, &len) == 0)
                    collect(t, s, len);
                done = true;
            }
        }
    }
    l8tok_stream_free(st);
    l8tok_ids_free(&ids);
}

static void test_text(const char *sock)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(sock, "text", &c, err) == 0, "connect: %s", err);
    static struct text want, got;
    uint32_t n_prompt, n_tokens;
    low_level(c, "Why is the sky blue?", 40, &want, &n_prompt, &n_tokens);
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = 40;
    struct l8c_reply r;
    memset(&got, 0, sizeof got);
    int rc = l8c_generate_text(c, "Why is the sky blue?", &p, collect, &got, &r);
    CHECK(rc == 0 && got.n == want.n && !memcmp(got.buf, want.buf, want.n) && want.n > 0,
          "l8c_generate_text: rc %d, %zu bytes '%s', want %zu '%s'", rc, got.n, got.buf, want.n,
          want.buf);
    CHECK(r.prompt_tokens == n_prompt && r.tokens == n_tokens && r.cached_tokens > 0 &&
          r.error == 0 && !strcmp(l8c_done_name(r.reason), n_tokens == 40 ? "length" : "eos"),
          "reply: %u prompt (%u cached), %u tokens, reason %s; want %u, %u", r.prompt_tokens,
          r.cached_tokens, r.tokens, l8c_done_name(r.reason), n_prompt, n_tokens);

    /* A callback that says stop after its first piece. */
    memset(&got, 0, sizeof got);
    got.stop_after = 1;
    rc = l8c_generate_text(c, "Why is the sky blue?", &p, collect, &got, &r);
    CHECK(rc == 0 && got.pieces == 1 && !strcmp(l8c_done_name(r.reason), "cancelled") &&
          !strncmp(got.buf, want.buf, got.n), "a stop from the callback: rc %d, %d pieces, %s",
          rc, got.pieces, l8c_done_name(r.reason));

    /* Refusals, in the daemon's words. */
    p.top_p = 5;
    rc = l8c_generate_text(c, "hi", &p, collect, &got, &r);
    CHECK(rc == -EIO && r.error == L8_ERR_BAD_PARAMS && !strncmp(r.message, "BAD_PARAMS: ", 12),
          "a bad top_p: rc %d, error %d, '%s'", rc, r.error, r.message);
    struct l8chat_msg bad = { L8CHAT_USER, "\xff\xfe", 2 };
    rc = l8c_chat_stream(c, &bad, 1, NULL, collect, &got, &r);
    CHECK(rc == -EILSEQ && strstr(r.message, "UTF-8"), "a message that is not UTF-8: rc %d, %s",
          rc, r.message);
    /* A system message, then the user's: the chat format of both. */
    struct l8chat_msg two[2] = { { L8CHAT_SYSTEM, "Be brief.", 9 }, { L8CHAT_USER, "hi", 2 } };
    memset(&got, 0, sizeof got);
    rc = l8c_chat_stream(c, two, 2, NULL, collect, &got, &r);
    CHECK(rc == 0 && r.prompt_tokens > 0 && r.tokens > 0, "two messages: rc %d, %s", rc,
          r.message);
    l8c_close(c);
}

/* Parameters NULL where the context is 64 positions: what fits. */
static void test_small_context(void)
{
    struct tdaemon d;
    static const char *const extra[] = { "--max-ctx", "64", NULL };
    tdaemon_start(&d, bin_d, model, extra);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "text", &c, err) == 0, "connect: %s", err);
    static struct text got;
    struct l8c_reply r;
    int rc = l8c_generate_text(c, "hi", NULL, collect, &got, &r);
    CHECK(rc == 0 && r.prompt_tokens + r.tokens == 64 && !strcmp(l8c_done_name(r.reason), "length"),
          "NULL parameters in 64 positions: rc %d (%s), %u + %u tokens, %s", rc, r.message,
          r.prompt_tokens, r.tokens, l8c_done_name(r.reason));
    l8c_close(c);
    CHECK(tdaemon_stop(&d) == 0, "the small daemon's exit");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 4, "usage: test_client_text llama8d llama8-mkmodel tokenizer.json");
    bin_d = argv[1];
    bin_mk = argv[2];
    tokenizer = argv[3];
    char dir[] = "/tmp/l8text-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(model, sizeof model, "%s/model", dir);
    pid_t p = fork();
    if (p == 0) {
        execl(bin_mk, bin_mk, "--preset", "tiny", "--seed", "3", "--out", model, "--tokenizer",
              tokenizer, "--quiet", (char *)NULL);
        _exit(127);
    }
    int st;
    REQUIRE(waitpid(p, &st, 0) == p && WIFEXITED(st) && WEXITSTATUS(st) == 0, "llama8-mkmodel");
    struct tdaemon d;
    tdaemon_start(&d, bin_d, model, NULL);
    test_text(d.sock);
    CHECK(tdaemon_stop(&d) == 0, "llama8d's exit");
    test_small_context();
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (t_failures)
        return 1;
    printf("ok\n");
    return 0;
}
