/* test_sched_engine: the scheduler driving the real CPU engine.
 *
 * Twelve requests (prompts of 1 to 150 tokens, some sharing a prefix, one
 * repeated exactly; greedy and seeded sampling; one with a stop id) run
 * together through l8_sched + l8_engine with a pool too small for all of
 * them at once, so steps mix decodes with chunked prefills, later
 * requests reuse cached prefix pages and the youngest are preempted and
 * recomputed. Each stream must equal the same request run alone on the
 * engine without the scheduler: one prefill step, then one decode step
 * per token. The CPU engine is bitwise batch-invariant (engine_cpu.c), so
 * equality is exact. Twice: plainly, and speculating (up to 8 drafts a
 * decode row, one job's prompt repeating itself for drafts to be found),
 * the engine verifying them: the streams are the same.
 * usage: test_sched_engine MODEL_DIR */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "engine.h"
#include "kvpool.h"
#include "model.h"
#include "scheduler.h"

#define N_REQ 12
#define MAX_NEW 40
#define PAGE 16
#define MAX_PROMPT 160

struct job {
    uint32_t prompt[MAX_PROMPT];
    uint32_t n_prompt, max_new;
    struct l8_sampling sp;
    uint32_t stop;             /* L8_SCHED_NO_TOKEN: none */
    uint32_t want[MAX_NEW], n_want;
    uint32_t got[MAX_NEW], n_got;
    int done, reason;
};

static struct job jobs[N_REQ];

static void on_event(void *ctx, const struct l8_sched_event *ev)
{
    struct job *j = &jobs[ev->id];
    if (ev->kind == L8_SCHED_EV_TOKEN) {
        if (ev->index != j->n_got || j->n_got >= MAX_NEW || j->done)
            t_failures++;
        else
            j->got[j->n_got++] = ev->token;
    } else if (ev->kind == L8_SCHED_EV_DONE) {
        j->done++;
        j->reason = ev->reason;
    } else {
        fprintf(stderr, "request %llu: engine error %d\n", (unsigned long long)ev->id, ev->error);
        t_failures++;
    }
}

/* The request alone: prompt in one step on pages 0.., then decodes. */
static int run_alone(struct l8_engine *e, struct job *j)
{
    uint32_t toks[MAX_PROMPT + MAX_NEW], pages[(MAX_PROMPT + MAX_NEW) / PAGE + 1];
    for (uint32_t i = 0; i < sizeof(pages) / sizeof(pages[0]); i++)
        pages[i] = i;
    memcpy(toks, j->prompt, j->n_prompt * sizeof(uint32_t));
    uint32_t n = j->n_prompt, pos = 0;
    j->n_want = 0;
    while (j->n_want < j->max_new) {
        struct l8_seq q = {
            .tokens = toks + pos, .n_tokens = n - pos, .pos = pos,
            .pages = pages, .n_pages = (n + PAGE - 1) / PAGE,
            .logits = L8_LOGITS_NONE, .sample = true, .sampling = &j->sp,
            .history = toks, .n_history = n, .sample_index = j->n_want,
        };
        int rc = l8_engine_step(e, &q, 1);
        if (rc < 0)
            return rc;
        j->want[j->n_want++] = q.token_out;
        toks[n] = q.token_out;
        pos = n++;
        if (q.token_out == j->stop)
            break;
    }
    return 0;
}

/* The jobs through the scheduler on e, drafting up to draft_max tokens a
 * decode row (0: no speculation): every stream equal to its run alone. */
static void run_sched(struct l8_engine *e, uint32_t vocab, uint32_t draft_max)
{
    struct l8_sched *s = NULL;
    for (int i = 0; i < N_REQ; i++) {
        jobs[i].n_got = 0;
        jobs[i].done = jobs[i].reason = 0;
    }
    struct l8_sched_opts so = { .n_pages = l8_engine_n_pages(e), .page_size = PAGE,
                                .max_step_tokens = 64, .max_seqs = 6, .max_ctx = 512,
                                .vocab = vocab, .on_event = on_event, .draft_max = draft_max,
                                .verify_rows = l8_engine_verify_rows(e) };
    CHECK(l8_sched_new(&so, &s) == 0);
    if (!s)
        return;
    for (int i = 0; i < N_REQ; i++) {
        struct l8_sched_req r = {
            .owner = (uint64_t)i % 4, .id = (uint64_t)i, .prompt = jobs[i].prompt,
            .n_prompt = jobs[i].n_prompt, .sampling = jobs[i].sp,
            .max_new_tokens = jobs[i].max_new,
            .stop_ids = &jobs[i].stop, .n_stop = jobs[i].stop != L8_SCHED_NO_TOKEN,
            .speculate = true,
        };
        CHECK(l8_sched_submit(s, &r, NULL) == 0);
    }
    uint32_t steps = 0, max_tokens = 0;
    for (;;) {
        struct l8_seq *seqs;
        uint32_t n, total = 0;
        CHECK(l8_sched_build_step(s, &seqs, &n) == 0);
        if (n == 0)
            break;
        for (uint32_t i = 0; i < n; i++)
            total += seqs[i].n_tokens;
        CHECK(total <= 64);
        if (total > max_tokens)
            max_tokens = total;
        int rc = l8_engine_step(e, seqs, n);
        CHECK(rc == 0);
        CHECK(l8_sched_step_done(s, seqs, n, rc, 0) == 0);
        CHECK(l8_kvpool_check(l8_sched_pool(s)) == 0);
        if (++steps > 5000 || t_failures)
            break;
    }
    CHECK(l8_sched_idle(s));
    for (int i = 0; i < N_REQ; i++) {
        struct job *j = &jobs[i];
        bool same = j->n_got == j->n_want && !memcmp(j->got, j->want, j->n_want * sizeof(uint32_t));
        int want_reason = j->n_want < j->max_new ? L8_SCHED_DONE_STOP : L8_SCHED_DONE_LENGTH;
        if (!same || j->done != 1 || j->reason != want_reason) {
            fprintf(stderr, "job %d (prompt %u, %s): %u tokens, alone %u; done %d reason %d\n", i,
                    j->n_prompt, j->sp.temperature > 0 ? "seeded" : "greedy", j->n_got,
                    j->n_want, j->done, j->reason);
            t_failures++;
        }
    }
    struct l8_sched_stats st;
    l8_sched_get_stats(s, &st);
    printf("draft_max %u: %u steps (at most %u tokens), %llu tokens generated, %llu "
           "preemptions, %llu prompt positions computed, %llu taken from the prefix cache, "
           "%llu drafted, %llu accepted\n", draft_max,
           steps, max_tokens, (unsigned long long)st.tokens_generated,
           (unsigned long long)st.preemptions, (unsigned long long)st.prompt_tokens,
           (unsigned long long)st.cached_tokens, (unsigned long long)st.drafted,
           (unsigned long long)st.accepted);
    /* The scenario must exercise what it claims to. */
    CHECK(st.preemptions > 0);
    CHECK(st.cached_tokens > 0);
    CHECK(jobs[4].n_want < jobs[4].max_new);   /* it did stop */
    CHECK(st.pages_used == 0);
    CHECK(draft_max ? st.drafted > 0 : st.drafted == 0);
    l8_sched_free(s);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_sched_engine MODEL_DIR\n");
        return 1;
    }
    char err[L8_ERRLEN] = "";
    struct l8_model *m = NULL;
    struct l8_engine *e = NULL;
    if (l8_model_load(argv[1], 1, &m, err) < 0) {
        fprintf(stderr, "load %s: %s\n", argv[1], err);
        return 1;
    }
    const uint32_t vocab = m->cfg.vocab;
    /* 14 pages = 224 positions: far less than the jobs need together. */
    struct l8_engine_opts eo = { .numerics = L8_NUMERICS_EXACT, .page_size = PAGE,
                                 .n_pages = 14, .max_step_tokens = 256, .max_seqs = 6,
                                 .nthreads = 2 };
    if (l8_engine_create(m, L8_BACKEND_CPU, &eo, &e, err) < 0) {
        fprintf(stderr, "engine: %s\n", err);
        l8_model_free(m);
        return 1;
    }

    /* The jobs: deterministic pseudo-random prompts. */
    uint64_t rng = 0x1234567;
    uint32_t system[48];
    for (uint32_t i = 0; i < 48; i++) {
        rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
        system[i] = 3 + (uint32_t)(rng >> 33) % (vocab - 3);
    }
    static const uint32_t lens[N_REQ] = {1, 7, 64, 150, 40, 33, 48, 90, 17, 64, 120, 5};
    for (int i = 0; i < N_REQ; i++) {
        struct job *j = &jobs[i];
        j->n_prompt = lens[i];
        j->max_new = 8 + (uint32_t)(i * 5) % (MAX_NEW - 7);
        for (uint32_t t = 0; t < j->n_prompt; t++) {
            rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
            j->prompt[t] = 3 + (uint32_t)(rng >> 33) % (vocab - 3);
        }
        /* odd jobs start with the shared 48-token "system prompt" */
        if (i % 2 && j->n_prompt > 48)
            memcpy(j->prompt, system, sizeof(system));
        j->prompt[0] = 1;   /* bos */
        j->sp = (struct l8_sampling){ .temperature = 0, .top_k = 0, .top_p = 1,
                                      .min_p = 0, .repetition_penalty = 1, .seed = 0 };
        if (i % 3 == 2)
            j->sp = (struct l8_sampling){ .temperature = 0.9f, .top_k = 50, .top_p = 0.95f,
                                          .min_p = 0.01f, .repetition_penalty = 1.1f,
                                          .seed = 1000 + i };
        j->stop = L8_SCHED_NO_TOKEN;
    }
    memcpy(&jobs[9], &jobs[2], sizeof(jobs[2]));   /* an exact repeat */
    jobs[9].max_new = 12;

    for (int i = 0; i < N_REQ; i++) {
        if (run_alone(e, &jobs[i]) < 0) {
            fprintf(stderr, "job %d alone: engine step failed\n", i);
            t_failures++;
        }
        if (i == 4) {
            /* stop at its 4th token: the reference run is redone with it */
            jobs[i].stop = jobs[i].want[3];
            run_alone(e, &jobs[i]);
        }
        if (i == 10) {
            /* for speculation to find drafts: job 1's prompt, its reply and
             * its prompt again, the reply likely to follow once more */
            struct job *j = &jobs[i], *o = &jobs[1];
            j->n_prompt = 0;
            memcpy(j->prompt, o->prompt, o->n_prompt * 4);
            memcpy(j->prompt + o->n_prompt, o->want, o->n_want * 4);
            memcpy(j->prompt + o->n_prompt + o->n_want, o->prompt, o->n_prompt * 4);
            j->n_prompt = 2 * o->n_prompt + o->n_want;
            run_alone(e, j);
        }
    }

    run_sched(e, vocab, 0);
    run_sched(e, vocab, 8);
    l8_engine_destroy(e);
    l8_model_free(m);
    if (t_failures) {
        fprintf(stderr, "test_sched_engine: %d failures\n", t_failures);
        return 1;
    }
    printf("test_sched_engine: ok (%d streams equal to their runs alone)\n", N_REQ);
    return 0;
}
