/* test_ipc_streams: 32 client processes x 4 requests of mixed lengths on
 * the real llama8d (CPU engine); every stream must equal what llama8-run
 * computes in-process for the same request, greedy and seeded. The daemon
 * speculates (--speculate ngram), llama8-run does not: the same streams.
 * argv: llama8d llama8-run model-dir */
#include "ipc_helper.h"

#define N_CLIENTS 32
#define N_REQ 4
#define MAX_PROMPT 160

struct spec {
    uint32_t prompt[MAX_PROMPT];
    uint32_t n_prompt, max_new;
    bool seeded;
    uint64_t seed;
    uint32_t expect[64];
    uint32_t n_expect;
};

static struct spec specs[N_CLIENTS][N_REQ];

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void make_spec(struct spec *s, int c, int r, uint32_t vocab, int32_t bos)
{
    uint64_t h = mix((uint64_t)c * 131 + (uint64_t)r);
    s->n_prompt = 2 + (uint32_t)(h % (MAX_PROMPT - 2));
    s->max_new = 1 + (uint32_t)((h >> 20) % 24);
    s->seeded = r % 2 == 1;
    s->seed = h >> 8;
    for (uint32_t i = 0; i < s->n_prompt; i++)
        s->prompt[i] = (uint32_t)(mix(h + i + 1) % vocab);
    if (r == 2)     /* a prompt that repeats itself: speculation drafts from it */
        for (uint32_t i = s->n_prompt / 2; i < s->n_prompt; i++)
            s->prompt[i] = s->prompt[i - s->n_prompt / 2];
    if (bos >= 0)
        s->prompt[0] = (uint32_t)bos;
}

static void set_params(const struct spec *s, struct l8c_params *p)
{
    l8c_params_init(p);
    p->max_new_tokens = s->max_new;
    if (s->seeded) {
        p->temperature = 0.8f;
        p->top_k = 40;
        p->top_p = 0.9f;
        p->seed = s->seed;
    }
}

/* The reference: llama8-run, in-process, one request alone. */
static void run_reference(const char *run, const char *model, struct spec *s)
{
    char cmd[8192];
    int n = snprintf(cmd, sizeof(cmd), "%s --model %s --threads 1 --max-new %u --tokens ", run,
                     model, s->max_new);
    for (uint32_t i = 0; i < s->n_prompt; i++)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n, "%s%u", i ? "," : "", s->prompt[i]);
    if (s->seeded)
        n += snprintf(cmd + n, sizeof(cmd) - (size_t)n,
                      " --temperature 0.8 --top-k 40 --top-p 0.9 --seed %llu",
                      (unsigned long long)s->seed);
    snprintf(cmd + n, sizeof(cmd) - (size_t)n, " 2>/dev/null");
    FILE *f = popen(cmd, "r");
    REQUIRE(f, "popen llama8-run");
    char line[65536];
    REQUIRE(fgets(line, sizeof(line), f), "no output from: %s", cmd);
    REQUIRE(pclose(f) == 0, "llama8-run failed: %s", cmd);
    s->n_expect = 0;
    for (char *p = line; *p;) {
        if (*p < '0' || *p > '9') {
            p++;
            continue;
        }
        char *end;
        unsigned long v = strtoul(p, &end, 10);
        if (s->n_expect < 64)
            s->expect[s->n_expect++] = (uint32_t)v;
        p = end;
    }
    REQUIRE(s->n_expect >= 1 && s->n_expect <= s->max_new, "llama8-run gave %u tokens", s->n_expect);
}

static int client_main(const char *sock, int c)
{
    struct l8c_client *cl;
    char err[L8C_ERRLEN];
    int rc = l8c_connect(sock, "test_ipc_streams", &cl, err);
    if (rc < 0) {
        fprintf(stderr, "client %d: connect: %s\n", c, err);
        return 1;
    }
    static struct tstream st[N_REQ + 1];
    for (int r = 0; r < N_REQ; r++) {
        struct l8c_params p;
        set_params(&specs[c][r], &p);
        uint64_t id;
        rc = l8c_submit(cl, specs[c][r].prompt, specs[c][r].n_prompt, &p, &id);
        if (rc < 0 || id != (uint64_t)r + 1) {
            fprintf(stderr, "client %d: submit %d: %d\n", c, r, rc);
            return 1;
        }
        st[r + 1].done_reason = -1;
    }
    if (!tcollect(cl, st, N_REQ, N_REQ, 240000)) {
        fprintf(stderr, "client %d: streams did not finish\n", c);
        return 1;
    }
    int bad = 0;
    for (int r = 0; r < N_REQ; r++) {
        const struct spec *s = &specs[c][r];
        const struct tstream *t = &st[r + 1];
        bool same = t->error == 0 && t->n == s->n_expect &&
                    !memcmp(t->tokens, s->expect, s->n_expect * sizeof(uint32_t));
        if (!same) {
            fprintf(stderr, "client %d request %d (%s, prompt %u, new %u): error %d, got %u tokens, "
                    "expected %u; first got %u expected %u\n", c, r, s->seeded ? "seeded" : "greedy",
                    s->n_prompt, s->max_new, t->error, t->n, s->n_expect, t->n ? t->tokens[0] : 0,
                    s->expect[0]);
            bad++;
        }
        uint32_t want_reason = s->n_expect == s->max_new &&
                               !(s->expect[s->n_expect - 1] == 2 || s->expect[s->n_expect - 1] == 3)
                                   ? L8_DONE_LENGTH : 0;
        if (want_reason && t->done_reason != (int)want_reason) {
            fprintf(stderr, "client %d request %d: done reason %d\n", c, r, t->done_reason);
            bad++;
        }
        if (!t->started || t->started_prompt != s->n_prompt) {
            fprintf(stderr, "client %d request %d: STARTED %s (prompt %u, want %u)\n", c, r,
                    t->started ? "wrong" : "missing", t->started_prompt, s->n_prompt);
            bad++;
        }
    }
    l8c_close(cl);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 4, "usage: test_ipc_streams llama8d llama8-run model");
    const char *model = argv[3];
    for (int c = 0; c < N_CLIENTS; c++)
        for (int r = 0; r < N_REQ; r++) {
            make_spec(&specs[c][r], c, r, 2048, 1);
            run_reference(argv[2], model, &specs[c][r]);
        }
    struct tdaemon d;
    /* With spin_us the loop takes most steps' ends from the engine thread's
     * flag and the rest (a spin cut short by a completion, or outlasted by
     * a step) from its eventfd: both ways must deliver the same tokens. */
    const char *extra[] = { "--max-batch", "16", "--max-step-tokens", "256",
                            "--spin-us", "20000", "--speculate", "ngram", NULL };
    tdaemon_start(&d, argv[1], model, extra);
    struct l8c_client *probe;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "probe", &probe, err) == 0, "%s", err);
    CHECK(l8c_info(probe)->vocab_size == 2048, "vocab %u", l8c_info(probe)->vocab_size);
    CHECK(l8c_info(probe)->n_eos == 2, "eos %u", l8c_info(probe)->n_eos);

    pid_t kids[N_CLIENTS];
    for (int c = 0; c < N_CLIENTS; c++) {
        kids[c] = fork();
        REQUIRE(kids[c] >= 0, "fork");
        if (kids[c] == 0) {
            l8c_close(probe);
            _exit(client_main(d.sock, c));
        }
    }
    for (int c = 0; c < N_CLIENTS; c++) {
        int st;
        waitpid(kids[c], &st, 0);
        CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "client %d failed (status %d)", c, st);
    }
    struct l8c_status s;
    REQUIRE(l8c_status(probe, &s, 10000) == 0, "status");
    CHECK(s.requests_done == N_CLIENTS * N_REQ, "requests_done %llu",
          (unsigned long long)s.requests_done);
    CHECK(s.pages_used == 0, "pages still used: %u", s.pages_used);
    CHECK(s.spin_us == 20000, "spin_us %u", s.spin_us);
    CHECK(s.requests_running == 0 && s.requests_waiting == 0, "requests left");
    /* The step split: 128 requests of 1-24 tokens in batches of 16 give
     * decode-only steps and steps with prompt chunks. Every token fed is a
     * prompt token or a sampled one fed back, and each request's last
     * sampled token is never fed (a preempted request recomputes its
     * sampled tokens as prompt tokens, so then only <=). */
    CHECK(s.decode_steps > 0 && s.decode_steps < s.steps, "decode steps %llu of %llu",
          (unsigned long long)s.decode_steps, (unsigned long long)s.steps);
    CHECK(s.decode_rows >= s.decode_steps && s.decode_rows <= 16 * s.decode_steps,
          "decode rows %llu in %llu steps", (unsigned long long)s.decode_rows,
          (unsigned long long)s.decode_steps);
    CHECK(s.decode_time_s > 0 && s.decode_time_s < s.step_time_s, "decode time %.6f of %.6f",
          s.decode_time_s, s.step_time_s);
    /* (and every rejected draft is fed once for nothing) */
    const uint64_t fed = s.prompt_tokens + s.tokens_generated - s.requests_done +
                         s.draft_tokens - s.draft_accepted;
    CHECK(s.preemptions ? s.fed_tokens <= fed : s.fed_tokens == fed,
          "fed %llu tokens: %llu prompt + %llu generated - %llu requests + %llu drafted "
          "- %llu accepted, %llu preemptions",
          (unsigned long long)s.fed_tokens, (unsigned long long)s.prompt_tokens,
          (unsigned long long)s.tokens_generated, (unsigned long long)s.requests_done,
          (unsigned long long)s.draft_tokens, (unsigned long long)s.draft_accepted,
          (unsigned long long)s.preemptions);
    /* Speculation drafted, so the streams above came from verification
     * steps too. */
    CHECK(!strcmp(s.speculate, "ngram") && s.draft_tokens > 0 &&
          s.draft_accepted <= s.draft_tokens, "speculate %s: %llu drafted, %llu accepted",
          s.speculate, (unsigned long long)s.draft_tokens, (unsigned long long)s.draft_accepted);
    printf("speculation: %llu drafted, %llu accepted\n", (unsigned long long)s.draft_tokens,
           (unsigned long long)s.draft_accepted);
    l8c_close(probe);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "llama8d exit %d", rc);
    if (t_failures)
        return 1;
    printf("ok: %d clients x %d requests equal llama8-run\n", N_CLIENTS, N_REQ);
    return 0;
}
