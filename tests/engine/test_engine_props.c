/* test_engine_props.c - properties of the CPU engine on the golden model.
 *
 * For both numerics:
 *  - a sequence's logits are bitwise the same alone and batched with other
 *    sequences (prefill chunks and decode rows at other positions);
 *  - whole-prompt prefill, chunked prefill and token-by-token decode give
 *    the same logits (bitwise);
 *  - a sequence scattered over non-contiguous pages gives the same logits
 *    as on contiguous pages (bitwise), and the page size changes nothing;
 *  - the thread count changes nothing (bitwise), also for long decode rows
 *    whose attention the engine splits over threads;
 *  - the same seed gives the same sampled tokens;
 *  - a token mask written only when the engine waits for it (the daemon
 *    computes masks while the step runs) is the one sampled with, the
 *    unmasked sequence beside it samples as alone, and a step without
 *    masks never waits;
 *  - speculative verification (spec_check.h): each of the k + 1 samples of
 *    a step with k = 1 .. 8 drafts is bitwise the token and logprob of its
 *    single decode step, greedy and sampled, masked, alone and batched,
 *    in a chunk with the earlier tokens; malformed ones fail with -EINVAL;
 *  - malformed steps fail with -EINVAL and write no KV page;
 *  - the same in fp8 numerics with the FP8 lm_head (opts.lm_head_fp8),
 *    which the cuda backend refuses;
 *  - l8_engine_memory: the model's weights, the pool's pages, scratch, and
 *    no device.
 * usage: test_engine_props GOLDEN_DIR */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "engine.h"
#include "model.h"
#include "reference.h"
#include "spec_check.h"

#define PS 16u
#define NPAGES 64u
#define LA 40u
#define LB 25u
#define LC 60u

static const struct l8_model *M;
static uint32_t V;
static uint32_t ta[LA + 8], tb[LB + 8], tc[LC + 8];

static bool LM_FP8;    /* engines with opts.lm_head_fp8 */

/* What the engine reports holding: the model's weight bytes, exactly the
 * pool's pages (f32 in exact numerics, bf16 in fp8), some scratch, no GPU. */
static void check_memory(const struct l8_engine *e, enum l8_numerics num)
{
    const struct l8_config *c = &M->cfg;
    const struct l8_engine_mem *mem = l8_engine_memory(e);
    const uint64_t page = (uint64_t)c->n_layers * 2 * c->n_kv_heads * l8_engine_page_size(e) *
                          c->head_dim * (num == L8_NUMERICS_EXACT ? 4 : 2);
    /* The FP8 lm_head's codes and f32 scales are weights the engine holds. */
    const uint64_t lmq = LM_FP8 ? (uint64_t)M->lm_head.rows * (M->lm_head.cols + sizeof(float)) : 0;
    CHECK(mem->weights == M->weight_bytes + lmq, "memory: weights %llu, the model's %llu + %llu",
          (unsigned long long)mem->weights, (unsigned long long)M->weight_bytes,
          (unsigned long long)lmq);
    CHECK(mem->kv_pool == page * l8_engine_n_pages(e), "memory: kv pool %llu, %u pages of %llu",
          (unsigned long long)mem->kv_pool, l8_engine_n_pages(e), (unsigned long long)page);
    CHECK(mem->work > 0 && mem->device_used == 0 && mem->device_total == 0,
          "memory: work %llu, device %llu of %llu", (unsigned long long)mem->work,
          (unsigned long long)mem->device_used, (unsigned long long)mem->device_total);
}

static struct l8_engine *mk(enum l8_numerics num, uint32_t page_size, int threads)
{
    struct l8_engine_opts o = { .numerics = num, .page_size = page_size,
                                .n_pages = NPAGES * PS / page_size, .max_step_tokens = 256,
                                .max_seqs = 4, .nthreads = threads, .lm_head_fp8 = LM_FP8 };
    struct l8_engine *e;
    char err[L8_ERRLEN];
    if (l8_engine_create(M, L8_BACKEND_CPU, &o, &e, err) < 0) {
        printf("engine: %s\n", err);
        exit(1);
    }
    check_memory(e, num);
    return e;
}

static struct l8_seq seq(const uint32_t *tok, uint32_t n, uint32_t pos, const uint32_t *pages,
                         enum l8_logits lg, float *out)
{
    return (struct l8_seq){ .tokens = tok, .n_tokens = n, .pos = pos, .pages = pages,
                            .n_pages = 16, .logits = lg, .logits_out = out };
}

static int step(struct l8_engine *e, struct l8_seq *s, uint32_t n)
{
    int r = l8_engine_step(e, s, n);
    if (r < 0 && r != -EINVAL)
        printf("step failed %d\n", r);
    return r;
}

static double max_rel(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]) / (fabs((double)b[i]) + 1e-6);
        m = d > m ? d : m;
    }
    return m;
}

static const uint32_t pa[16] = { 0, 1, 2, 3 }, pb[16] = { 10, 11 }, pc[16] = { 20, 21, 22, 23, 24 };
static const uint32_t pscatter[16] = { 41, 7, 63, 30 };   /* non-contiguous, out of order */

/* Reference: A alone, whole prompt, then one decode row. */
static void reference(struct l8_engine *e, float *la, float *la2)
{
    struct l8_seq s = seq(ta, LA, 0, pa, L8_LOGITS_ALL, la);
    CHECK(step(e, &s, 1) == 0, "reference prefill");
    s = seq(ta + LA, 1, LA, pa, L8_LOGITS_LAST, la2);
    CHECK(step(e, &s, 1) == 0, "reference decode");
}

static void props(enum l8_numerics num)
{
    const char *nn = num == L8_NUMERICS_EXACT ? "exact" : LM_FP8 ? "fp8/lm_head fp8" : "fp8";
    const size_t szA = (size_t)LA * V;
    float *la = malloc(sizeof(float) * szA), *la2 = malloc(sizeof(float) * V);
    float *x = malloc(sizeof(float) * szA), *x2 = malloc(sizeof(float) * V);
    float *junk = malloc(sizeof(float) * (size_t)LC * V);
    struct l8_engine *e = mk(num, PS, 0);
    reference(e, la, la2);
    l8_engine_destroy(e);

    /* Batched: C's first chunk, A whole, B whole in one step; then B
     * decoding, A decoding and C's second chunk in one step. */
    e = mk(num, PS, 0);
    struct l8_seq b1[3] = { seq(tc, 30, 0, pc, L8_LOGITS_LAST, junk),
                            seq(ta, LA, 0, pa, L8_LOGITS_ALL, x),
                            seq(tb, LB, 0, pb, L8_LOGITS_NONE, NULL) };
    CHECK(step(e, b1, 3) == 0, "batched prefill");
    CHECK(memcmp(x, la, sizeof(float) * szA) == 0, "%s: batched prefill logits differ (max rel %.3g)",
          nn, max_rel(x, la, szA));
    struct l8_seq b2[3] = { seq(tb + LB, 1, LB, pb, L8_LOGITS_LAST, junk),
                            seq(ta + LA, 1, LA, pa, L8_LOGITS_LAST, x2),
                            seq(tc + 30, 30, 30, pc, L8_LOGITS_ALL, junk + V) };
    CHECK(step(e, b2, 3) == 0, "batched decode");
    CHECK(memcmp(x2, la2, sizeof(float) * V) == 0, "%s: batched decode logits differ (max rel %.3g)",
          nn, max_rel(x2, la2, V));
    l8_engine_destroy(e);

    /* Chunked prefill (chunks of 7) and token-by-token. */
    e = mk(num, PS, 0);
    for (uint32_t p = 0; p < LA; p += 7) {
        uint32_t n = LA - p < 7 ? LA - p : 7;
        struct l8_seq s = seq(ta + p, n, p, pa, L8_LOGITS_ALL, x + (size_t)p * V);
        CHECK(step(e, &s, 1) == 0, "chunk");
    }
    CHECK(memcmp(x, la, sizeof(float) * szA) == 0, "%s: chunked prefill differs (max rel %.3g)",
          nn, max_rel(x, la, szA));
    l8_engine_destroy(e);
    e = mk(num, PS, 0);
    for (uint32_t p = 0; p < LA; p++) {
        struct l8_seq s = seq(ta + p, 1, p, pa, L8_LOGITS_LAST, x + (size_t)p * V);
        CHECK(step(e, &s, 1) == 0, "token");
    }
    CHECK(memcmp(x, la, sizeof(float) * szA) == 0, "%s: token-by-token differs (max rel %.3g)",
          nn, max_rel(x, la, szA));
    l8_engine_destroy(e);

    /* Scattered pages; a different page size; other thread counts. */
    e = mk(num, PS, 0);
    struct l8_seq s = seq(ta, LA, 0, pscatter, L8_LOGITS_ALL, x);
    CHECK(step(e, &s, 1) == 0, "scattered");
    CHECK(memcmp(x, la, sizeof(float) * szA) == 0, "%s: scattered pages differ (max rel %.3g)",
          nn, max_rel(x, la, szA));
    s = seq(ta + LA, 1, LA, pscatter, L8_LOGITS_LAST, x2);
    CHECK(step(e, &s, 1) == 0 && memcmp(x2, la2, sizeof(float) * V) == 0,
          "%s: scattered decode differs", nn);
    l8_engine_destroy(e);
    static const uint32_t p8[16] = { 9, 2, 14, 5, 0, 11, 7 };  /* page size 8: 7 pages */
    e = mk(num, 8, 0);
    s = seq(ta, LA, 0, p8, L8_LOGITS_ALL, x);
    CHECK(step(e, &s, 1) == 0 && memcmp(x, la, sizeof(float) * szA) == 0,
          "%s: page size 8 differs", nn);
    l8_engine_destroy(e);
    for (int th = 1; th <= 3; th++) {
        e = mk(num, PS, th);
        s = seq(ta, LA, 0, pa, L8_LOGITS_ALL, x);
        CHECK(step(e, &s, 1) == 0 && memcmp(x, la, sizeof(float) * szA) == 0,
              "%s: %d threads differ (max rel %.3g)", nn, th, max_rel(x, la, szA));
        l8_engine_destroy(e);
    }

    /* Malformed steps: -EINVAL, and no KV page written (A's next decode is
     * unchanged after a rejected step that would have overwritten A's
     * pages with other tokens). */
    e = mk(num, PS, 0);
    s = seq(ta, LA, 0, pa, L8_LOGITS_NONE, NULL);
    CHECK(step(e, &s, 1) == 0, "prefill");
    uint32_t bad_tok[4] = { 1, 2, 5000, 3 };
    uint32_t bad_pages[16] = { 0, NPAGES };
    struct l8_seq bad[2];
    bad[0] = seq(tc, 20, 0, pa, L8_LOGITS_NONE, NULL);       /* valid, over A's pages */
    bad[1] = seq(bad_tok, 4, 0, pb, L8_LOGITS_NONE, NULL);   /* token >= vocab */
    CHECK(step(e, bad, 2) == -EINVAL, "token >= vocab accepted");
    bad[1] = seq(tb, 20, 0, bad_pages, L8_LOGITS_NONE, NULL);  /* page >= n_pages */
    CHECK(step(e, bad, 2) == -EINVAL, "page >= n_pages accepted");
    bad[1] = seq(tb, 20, 0, pb, L8_LOGITS_NONE, NULL);
    bad[1].n_pages = 1;                                        /* table too short */
    CHECK(step(e, bad, 2) == -EINVAL, "short page table accepted");
    bad[1] = seq(tb, 0, 0, pb, L8_LOGITS_NONE, NULL);          /* no tokens */
    CHECK(step(e, bad, 2) == -EINVAL, "empty sequence accepted");
    bad[1] = seq(tb, 20, M->cfg.max_pos - 10, pb, L8_LOGITS_NONE, NULL); /* past max_pos */
    CHECK(step(e, bad, 2) == -EINVAL, "pos + n_tokens > max_pos accepted");
    bad[1] = seq(tb, 20, 0, pb, L8_LOGITS_ALL, NULL);          /* logits without buffer */
    CHECK(step(e, bad, 2) == -EINVAL, "logits without a buffer accepted");
    bad[1] = seq(tb, 20, 0, pb, L8_LOGITS_NONE, NULL);
    bad[1].sample = true;                                      /* sample without params */
    CHECK(step(e, bad, 2) == -EINVAL, "sample without parameters accepted");
    static uint32_t many[300];
    bad[1] = seq(many, 240, 0, pb, L8_LOGITS_NONE, NULL);      /* > max_step_tokens total */
    CHECK(step(e, bad, 2) == -EINVAL, "too many step tokens accepted");
    struct l8_seq five[5];
    for (int i = 0; i < 5; i++)
        five[i] = seq(tb, 1, 0, pb, L8_LOGITS_NONE, NULL);
    CHECK(step(e, five, 5) == -EINVAL, "more than max_seqs accepted");
    s = seq(ta + LA, 1, LA, pa, L8_LOGITS_LAST, x2);
    CHECK(step(e, &s, 1) == 0 && memcmp(x2, la2, sizeof(float) * V) == 0,
          "%s: a rejected step changed the KV pool", nn);
    l8_engine_destroy(e);

    /* Same seed, same tokens; the sampled token follows the definition
     * (greedy with temperature 0 equals the argmax of the logits). */
    uint32_t run[2][24];
    for (int r = 0; r < 2; r++) {
        e = mk(num, PS, 0);
        struct l8_sampling sp = { .temperature = 0.9f, .top_k = 50, .top_p = 0.95f,
                                  .min_p = 0.01f, .repetition_penalty = 1.1f, .seed = 42 };
        uint32_t hist[LA + 24];
        memcpy(hist, ta, sizeof(uint32_t) * LA);
        s = seq(ta, LA, 0, pa, L8_LOGITS_NONE, NULL);
        s.sample = true; s.sampling = &sp; s.history = hist; s.n_history = LA;
        CHECK(step(e, &s, 1) == 0, "sample prefill");
        CHECK(ref_decode(e, hist, LA, s.token_out, pa, s.n_pages, &sp, 24, run[r]) == 24,
              "sample decode");
        l8_engine_destroy(e);
    }
    CHECK(memcmp(run[0], run[1], sizeof(run[0])) == 0, "%s: same seed, different tokens", nn);
    uint32_t distinct = 0;
    for (int k = 0; k < 24; k++)
        distinct += run[0][k] != run[0][0];
    CHECK(distinct > 0, "%s: sampling produced one token only", nn);
    printf("%s: properties checked\n", nn);
    free(la); free(la2); free(x); free(x2); free(junk);
}

/* The masks' writer (l8_engine_set_masks_wait): until the engine waits,
 * the mask allows nothing; then the ids of one residue mod 3. */
struct late_mask { uint32_t *mask, words, calls, residue; };

static void fill_late(void *ud)
{
    struct late_mask *lm = ud;
    memset(lm->mask, 0, lm->words * 4);
    for (uint32_t i = lm->residue; i < V; i += 3)
        lm->mask[i / 32] |= 1u << (i % 32);
    lm->calls++;
}

static void masks_late(enum l8_numerics num)
{
    const char *nn = num == L8_NUMERICS_EXACT ? "exact" : "fp8";
    const uint32_t W = (V + 31) / 32, N = 12;
    struct late_mask lm = { calloc(W, 4), W, 0, 1 };
    float *la = malloc(sizeof(float) * V);
    uint32_t ha[LA + N], hb[LB + N], alone[N];
    struct l8_sampling greedy = { .temperature = 0, .top_p = 1, .repetition_penalty = 1 };
    struct l8_sampling hot = { .temperature = 0.9f, .top_k = 40, .top_p = 0.95f,
                               .repetition_penalty = 1.1f, .seed = 7 };
    /* B alone, unmasked, as the reference for B beside a masked A. */
    struct l8_engine *e = mk(num, PS, 0);
    l8_engine_set_masks_wait(e, fill_late, &lm);
    memcpy(hb, tb, sizeof(uint32_t) * LB);
    for (uint32_t k = 0, pos = 0, n = LB; k < N; k++) {
        struct l8_seq b = seq(hb + pos, n, pos, pb, L8_LOGITS_NONE, NULL);
        b.sample = true; b.sampling = &hot; b.history = hb; b.n_history = pos + n;
        b.sample_index = k;
        CHECK(step(e, &b, 1) == 0, "B alone");
        hb[pos + n] = alone[k] = b.token_out;
        pos += n;
        n = 1;
    }
    CHECK(lm.calls == 0, "%s: %u mask waits in steps without a mask", nn, lm.calls);
    l8_engine_destroy(e);

    e = mk(num, PS, 0);
    l8_engine_set_masks_wait(e, fill_late, &lm);
    memcpy(ha, ta, sizeof(uint32_t) * LA);
    uint32_t off = 0, differ = 0;
    for (uint32_t k = 0, pa0 = 0, na = LA, pb0 = 0, nb = LB; k < N; k++) {
        memset(lm.mask, 0, W * 4);
        struct l8_seq two[2] = { seq(ha + pa0, na, pa0, pa, L8_LOGITS_LAST, la),
                                 seq(hb + pb0, nb, pb0, pb, L8_LOGITS_NONE, NULL) };
        two[0].sample = true; two[0].sampling = &greedy; two[0].allowed = lm.mask;
        two[0].history = ha; two[0].n_history = pa0 + na;
        two[1].sample = true; two[1].sampling = &hot; two[1].history = hb;
        two[1].n_history = pb0 + nb; two[1].sample_index = k;
        CHECK(step(e, two, 2) == 0, "masked step");
        CHECK(lm.calls == k + 1, "%s: step %u: %u mask waits", nn, k, lm.calls);
        /* greedy under the mask: the argmax of the allowed logits */
        uint32_t best = lm.residue;
        for (uint32_t i = lm.residue; i < V; i += 3)
            best = la[i] > la[best] ? i : best;
        off += two[0].token_out % 3 != lm.residue;
        differ += two[0].token_out != best;
        CHECK(two[1].token_out == alone[k], "%s: step %u: unmasked B sampled %u beside a "
              "masked A, %u alone", nn, k, two[1].token_out, alone[k]);
        ha[pa0 + na] = two[0].token_out;
        hb[pb0 + nb] = two[1].token_out;
        pa0 += na; pb0 += nb;
        na = nb = 1;
    }
    CHECK(off == 0 && differ == 0, "%s: masked greedy: %u of %u tokens outside the mask, %u "
          "not its argmax", nn, off, N, differ);
    l8_engine_destroy(e);
    free(lm.mask);
    free(la);
    printf("%s: masks written while the step runs: checked\n", nn);
}

/* Long decode rows: past the engine's split threshold (512 keys) a step
 * with few attention items splits each decode row's attention over the
 * threads. Token-by-token decode with 2 and 3 threads, alone and next to
 * another decoding sequence, gives the bits of a 1-thread chunked prefill
 * (which never splits), on scattered pages. */
#define LL 600u
#define LL0 520u
#define LPAGES ((LL + PS - 1) / PS)

static void long_decode(enum l8_numerics num)
{
    const char *nn = num == L8_NUMERICS_EXACT ? "exact" : "fp8";
    uint32_t *tok = malloc(sizeof(uint32_t) * (LL + 1));
    float *ref = malloc(sizeof(float) * (size_t)LL * V), *x = malloc(sizeof(float) * V);
    float *junk = malloc(sizeof(float) * V);
    uint32_t perm[NPAGES];
    for (uint32_t i = 0; i < NPAGES; i++)
        perm[i] = (i * 37u + 5u) % NPAGES;          /* a permutation: 37 is odd */
    const uint32_t *lp = perm, *bp = perm + LPAGES; /* B's pages: the rest */
    uint32_t st = 777;
    for (uint32_t i = 0; i <= LL; i++)
        tok[i] = (st = st * 1103515245u + 12345u) % V;
    tok[0] = 1;
    struct l8_engine *e = mk(num, PS, 1);
    for (uint32_t p = 0; p < LL; p += 200) {
        const uint32_t n = LL - p < 200 ? LL - p : 200;
        struct l8_seq s = { .tokens = tok + p, .n_tokens = n, .pos = p, .pages = lp,
                            .n_pages = LPAGES, .logits = L8_LOGITS_ALL,
                            .logits_out = ref + (size_t)p * V };
        CHECK(step(e, &s, 1) == 0, "long reference prefill");
    }
    l8_engine_destroy(e);
    for (int th = 2; th <= 3; th++) {
        for (int with_b = 0; with_b <= 1; with_b++) {
            e = mk(num, PS, th);
            for (uint32_t p = 0; p < LL0; p += 200) {
                const uint32_t n = LL0 - p < 200 ? LL0 - p : 200;
                struct l8_seq s = { .tokens = tok + p, .n_tokens = n, .pos = p, .pages = lp,
                                    .n_pages = LPAGES, .logits = L8_LOGITS_NONE };
                CHECK(step(e, &s, 1) == 0, "long prefill");
            }
            struct l8_seq sb = { .tokens = tb, .n_tokens = LB, .pos = 0, .pages = bp,
                                 .n_pages = 2, .logits = L8_LOGITS_NONE };
            if (with_b)
                CHECK(step(e, &sb, 1) == 0, "B prefill");
            uint32_t diff = 0;
            double worst = 0;
            for (uint32_t p = LL0; p < LL; p++) {
                struct l8_seq s[2] = {
                    { .tokens = tok + p, .n_tokens = 1, .pos = p, .pages = lp,
                      .n_pages = LPAGES, .logits = L8_LOGITS_LAST, .logits_out = x },
                    { .tokens = tb + LB + (p - LL0) % 7, .n_tokens = 1, .pos = LB + (p - LL0) % 7,
                      .pages = bp, .n_pages = 2, .logits = L8_LOGITS_LAST, .logits_out = junk } };
                CHECK(step(e, s, with_b ? 2 : 1) == 0, "long decode");
                if (memcmp(x, ref + (size_t)p * V, sizeof(float) * V) != 0) {
                    diff++;
                    double r = max_rel(x, ref + (size_t)p * V, V);
                    worst = r > worst ? r : worst;
                }
            }
            CHECK(diff == 0, "%s: %d threads%s: %u long decode rows differ from prefill "
                  "(max rel %.3g)", nn, th, with_b ? ", batched" : "", diff, worst);
            l8_engine_destroy(e);
        }
    }
    free(tok); free(ref); free(x); free(junk);
}

static void verification(enum l8_numerics num)
{
    const char *nn = num == L8_NUMERICS_EXACT ? "exact" : "fp8";
    const struct l8_sampling configs[3] = {
        { .temperature = 0, .top_p = 1, .repetition_penalty = 1 },
        { .temperature = 0.9f, .top_k = 50, .top_p = 0.95f, .min_p = 0.01f,
          .repetition_penalty = 1.1f, .seed = 42 },
        { .temperature = 1.2f, .top_p = 0.9f, .repetition_penalty = 1.3f, .seed = 5 } };
    const char *names[3] = { "greedy", "top-k/top-p/min-p, penalty", "top-p, penalty" };
    struct l8_engine *e = mk(num, PS, 0);
    CHECK(l8_engine_verify_rows(e) == UINT32_MAX, "%s: verify_rows %u", nn,
          l8_engine_verify_rows(e));
    struct sc_env v = { .e = e, .V = V, .prompt = ta, .n_prompt = LA, .pages = { pa, pc, pb },
                        .n_pages = 16, .other = tb };
    CHECK(sc_env_init(&v), "%s: out of memory", nn);
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "%s, %s", nn, names[i]);
        sc_run(&v, &configs[i], what);
    }
    sc_invalid(&v, &configs[1]);
    sc_env_done(&v);
    l8_engine_destroy(e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR\n", argv[0]);
        return 2;
    }
    char path[4096], err[L8_ERRLEN];
    snprintf(path, sizeof(path), "%s/tiny-llama31-fp8", argv[1]);
    struct l8_model *m;
    if (l8_model_load(path, 0, &m, err) < 0) {
        printf("load: %s\n", err);
        return 1;
    }
    M = m;
    V = m->cfg.vocab;
    /* Deterministic pseudo-random prompts. */
    uint32_t st = 12345;
    for (uint32_t i = 0; i < LA + 8; i++) ta[i] = (st = st * 1103515245u + 12345u) % V;
    for (uint32_t i = 0; i < LB + 8; i++) tb[i] = (st = st * 1103515245u + 12345u) % V;
    for (uint32_t i = 0; i < LC + 8; i++) tc[i] = (st = st * 1103515245u + 12345u) % V;
    ta[0] = tb[0] = tc[0] = 1;
    props(L8_NUMERICS_EXACT);
    props(L8_NUMERICS_FP8);
    long_decode(L8_NUMERICS_EXACT);
    long_decode(L8_NUMERICS_FP8);
    masks_late(L8_NUMERICS_EXACT);
    masks_late(L8_NUMERICS_FP8);
    verification(L8_NUMERICS_EXACT);
    verification(L8_NUMERICS_FP8);
    /* The FP8 lm_head keeps every property; it is a cpu engine option. */
    LM_FP8 = true;
    props(L8_NUMERICS_FP8);
    struct l8_engine_opts co = { .numerics = L8_NUMERICS_FP8, .page_size = PS, .n_pages = 4,
                                 .max_step_tokens = 16, .max_seqs = 1, .lm_head_fp8 = true };
    struct l8_engine *ce = NULL;
    CHECK(l8_engine_create(m, L8_BACKEND_CUDA, &co, &ce, err) == -ENOTSUP && !ce &&
          strstr(err, "cpu engine option"), "cuda with lm_head_fp8: %s", err);
    l8_model_free(m);
    printf("%s\n", t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}
