/* spec_check.h - the speculative verification check (l8_seq.n_draft), shared
 * by the cpu engine's test (tests/engine) and the cuda engine's
 * (tests/gpu), so the two cannot check different things.
 *
 * A plain run decodes SC_STEPS tokens from a prompt with one sampling
 * configuration, a mask (ids of one residue mod 3) at every step i with
 * i % 4 == 2. Then for each case, a verification step feeds the token of
 * plain step i0 - 1 and k drafts (plain tokens, some replaced by others)
 * and must give, at every one of its k + 1 samples, bitwise the token and
 * logprob (and the logits, where asked) of the single decode step that
 * feeds the same token at the same position, on the same earlier tokens,
 * with the same history, Philox counter and mask. Where the drafts so far
 * are the plain run's and the earlier tokens were fed as the plain run fed
 * them, that is the plain run's token. Masks are written
 * only when the engine waits for them (l8_engine_set_masks_wait), once a
 * step. token_out is not written. Callers include test.h first. */
#pragma once
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "engine.h"

#define SC_STEPS 12u   /* plain decode steps; a case uses i0 + k <= SC_STEPS of them */
#define SC_MAX_K 8u
#define SC_OTHER 3u    /* the neighbour's prefill chunk in batched cases */

/* The masks' writer: until the engine waits, the masks allow nothing. */
struct sc_late { uint32_t *dst; const uint32_t *src; size_t words; uint32_t calls; };

static void sc_fill(void *ud)
{
    struct sc_late *l = (struct sc_late *)ud;
    memcpy(l->dst, l->src, l->words * 4);
    l->calls++;
}

static inline bool sc_masked(uint32_t step) { return step % 4 == 2; }

/* The mask of plain step `step` at w (W words): its residue's ids, or all. */
static inline void sc_mask(uint32_t *w, uint32_t V, uint32_t step)
{
    const uint32_t W = (V + 31) / 32;
    if (!sc_masked(step)) {
        memset(w, 0xff, (size_t)W * 4);
        return;
    }
    memset(w, 0, (size_t)W * 4);
    for (uint32_t i = step % 3; i < V; i += 3)
        w[i / 32] |= 1u << (i % 32);
}

struct sc_env {
    struct l8_engine *e;
    uint32_t V;
    const uint32_t *prompt;
    uint32_t n_prompt;
    const uint32_t *pages[3];  /* the plain and single steps', the verification's, the neighbour's */
    uint32_t n_pages;
    const uint32_t *other;     /* the neighbour's tokens [SC_OTHER] */
    uint32_t ks;               /* bit k: run the case of k drafts; 0: every k (sc_run) */
    struct sc_late late;
    uint32_t *mask_buf;        /* [SC_MAX_K + 1, W] what the engine reads */
    uint32_t *mask_src;        /* [SC_MAX_K + 1, W] what sc_fill writes there */
};

/* One step with the masks written late: the engine must wait once when a
 * sequence samples with a mask, never otherwise. */
static inline int sc_step(struct sc_env *v, struct l8_seq *s, uint32_t n, uint32_t mask_rows)
{
    const uint32_t W = (v->V + 31) / 32;
    bool masked = false;
    for (uint32_t i = 0; i < n; i++)
        masked |= s[i].sample && s[i].allowed;
    memset(v->mask_buf, 0, (size_t)mask_rows * W * 4);
    v->late = (struct sc_late){ v->mask_buf, v->mask_src, (size_t)mask_rows * W, 0 };
    int r = l8_engine_step(v->e, s, n);
    CHECK(r != 0 || v->late.calls == (masked ? 1u : 0u), "%u mask waits in a step %s masks",
          v->late.calls, masked ? "with" : "without");
    return r;
}

/* The tokens before position P on pages p, no logits, no sample: as the
 * plain run fed them (the prompt in a chunk, then one a step), or all in
 * one chunk, so that their K/V are what the step after them finds on the
 * other side of the comparison. */
static inline int sc_feed(struct sc_env *v, const uint32_t *tok, uint32_t P, const uint32_t *p,
                          bool one_chunk)
{
    for (uint32_t pos = 0; pos < P;) {
        const uint32_t n = one_chunk ? P : pos ? 1 : v->n_prompt;
        struct l8_seq s = { .tokens = tok + pos, .n_tokens = n, .pos = pos, .pages = p,
                            .n_pages = v->n_pages };
        int r = sc_step(v, &s, 1, 0);
        if (r)
            return r;
        pos += n;
    }
    return 0;
}

struct sc_case {
    uint32_t k, i0;
    uint32_t wrong;        /* bit j: draft j (1 .. k) is not the plain run's */
    bool batched;          /* beside the neighbour's prefill chunk */
    bool whole;            /* the earlier tokens in the same chunk (a prefill chunk whose
                              last k tokens are drafts) */
    enum l8_logits logits;
};

/* The plain run: full[n_prompt + i] = g[i] gets token i of SC_STEPS, lp[i]
 * its logprob. Returns the failures. */
static inline int sc_plain(struct sc_env *v, const struct l8_sampling *sp, uint32_t *full,
                           float *lp)
{
    memcpy(full, v->prompt, (size_t)v->n_prompt * 4);
    for (uint32_t i = 0; i < SC_STEPS; i++) {
        const uint32_t pos = i ? v->n_prompt + i - 1 : 0, n = i ? 1 : v->n_prompt;
        struct l8_seq s = { .tokens = full + pos, .n_tokens = n, .pos = pos, .pages = v->pages[0],
                            .n_pages = v->n_pages, .sample = true, .sampling = sp,
                            .history = full, .n_history = v->n_prompt + i, .sample_index = i,
                            .allowed = sc_masked(i) ? v->mask_buf : NULL };
        sc_mask(v->mask_src, v->V, i);
        if (sc_step(v, &s, 1, 1) != 0) {
            CHECK(0, "plain step %u failed", i);
            return 1;
        }
        full[v->n_prompt + i] = s.token_out;
        lp[i] = s.logprob_out;
    }
    return 0;
}

/* One case against the plain run (full, lp) of sp. Returns the failures. */
static inline int sc_run_case(struct sc_env *v, const struct l8_sampling *sp, const uint32_t *full,
                              const struct sc_case *c, const char *what)
{
    const uint32_t V = v->V, W = (V + 31) / 32, k = c->k, np = v->n_prompt;
    const uint32_t P = np + c->i0 - 1;          /* position of the last token */
    const int before = t_failures;
    uint32_t hist[256 + SC_STEPS + SC_MAX_K];
    uint32_t ref_tok[SC_MAX_K + 1];
    float ref_lp[SC_MAX_K + 1];
    float *ref_logits = (float *)malloc((size_t)(SC_MAX_K + 1) * V * 4);
    float *logits = (float *)malloc((size_t)(P + SC_MAX_K + 1) * V * 4);
    struct l8_sample_out out[SC_MAX_K + 1];
    if (!ref_logits || !logits || np + SC_STEPS > 256) {
        CHECK(0, "%s: setup", what);
        free(ref_logits);
        free(logits);
        return 1;
    }
    /* the fed tokens: full's up to P, then the drafts */
    memcpy(hist, full, (size_t)(P + 1) * 4);
    for (uint32_t j = 1; j <= k; j++)
        hist[P + j] = c->wrong >> j & 1 ? (full[P + j] + 1 + j) % V : full[P + j];
    const uint32_t n_hist = np + c->i0 + k;     /* = P + 1 + k */

    /* The single steps, on the plain run's pages, after the earlier tokens
     * fed again as the verification has them. */
    if (sc_feed(v, hist, P, v->pages[0], c->whole) != 0) {
        CHECK(0, "%s: feed", what);
        goto out;
    }
    for (uint32_t j = 0; j <= k; j++) {
        struct l8_seq s = { .tokens = hist + P + j, .n_tokens = 1, .pos = P + j,
                            .pages = v->pages[0], .n_pages = v->n_pages,
                            .logits = L8_LOGITS_LAST, .logits_out = ref_logits + (size_t)j * V,
                            .sample = true, .sampling = sp, .history = hist,
                            .n_history = n_hist - k + j, .sample_index = c->i0 + j,
                            .allowed = sc_masked(c->i0 + j) ? v->mask_buf : NULL };
        sc_mask(v->mask_src, V, c->i0 + j);
        if (sc_step(v, &s, 1, 1) != 0) {
            CHECK(0, "%s: single step %u failed", what, j);
            goto out;
        }
        ref_tok[j] = s.token_out;
        ref_lp[j] = s.logprob_out;
    }

    /* The verification, on its own pages, after its earlier tokens. */
    bool any_mask = false;
    for (uint32_t j = 0; j <= k; j++) {
        sc_mask(v->mask_src + (size_t)j * W, V, c->i0 + j);
        any_mask |= sc_masked(c->i0 + j);
    }
    const uint32_t pos = c->whole ? 0 : P;
    if (!c->whole && sc_feed(v, hist, P, v->pages[1], false) != 0) {
        CHECK(0, "%s: feed", what);
        goto out;
    }
    struct l8_seq s[2] = {
        { .tokens = hist + pos, .n_tokens = P + 1 + k - pos, .pos = pos, .pages = v->pages[1],
          .n_pages = v->n_pages, .logits = c->logits, .logits_out = logits, .sample = true,
          .sampling = sp, .history = hist, .n_history = n_hist, .sample_index = c->i0,
          .allowed = any_mask ? v->mask_buf : NULL, .n_draft = k, .verify_out = out,
          .token_out = 0xdeadu },
        { .tokens = v->other, .n_tokens = SC_OTHER, .pos = 0, .pages = v->pages[2],
          .n_pages = v->n_pages, .sample = true, .sampling = sp, .history = v->other,
          .n_history = SC_OTHER } };
    if (sc_step(v, s, c->batched ? 2 : 1, k + 1) != 0) {
        CHECK(0, "%s: verification step failed", what);
        goto out;
    }
    CHECK(s[0].token_out == 0xdeadu, "%s: token_out written", what);
    bool right = true;   /* the drafts so far are the plain run's */
    for (uint32_t j = 0; j <= k; j++) {
        right = right && !(c->wrong >> j & 1);
        CHECK(out[j].token == ref_tok[j] && memcmp(&out[j].logprob, &ref_lp[j], 4) == 0,
              "%s: sample %u: %u (logprob %.9g), single step %u (%.9g)", what, j, out[j].token,
              out[j].logprob, ref_tok[j], ref_lp[j]);
        CHECK(!right || c->whole || ref_tok[j] == full[P + 1 + j], "%s: sample %u after right "
              "drafts: %u, the plain run's %u", what, j, ref_tok[j], full[P + 1 + j]);
        const float *row = c->logits == L8_LOGITS_ALL ? logits + (size_t)(P - pos + j) * V
                           : c->logits == L8_LOGITS_LAST && j == k ? logits : NULL;
        CHECK(!row || memcmp(row, ref_logits + (size_t)j * V, (size_t)V * 4) == 0,
              "%s: logits at sample %u differ from the single step's", what, j);
    }
out:
    free(ref_logits);
    free(logits);
    return t_failures - before;
}

/* k = 1 .. SC_MAX_K drafts after plain steps 1 .. 3, some wrong (all right
 * at k = 4), with or without logits, alone or beside the neighbour,
 * after a feed of the earlier tokens or in one chunk with them; a case of
 * more rows than l8_engine_verify_rows leaves out the neighbour and the
 * chunk. Prints one line for sp (`what`) and returns the failures. */
static inline int sc_run(struct sc_env *v, const struct l8_sampling *sp, const char *what)
{
    uint32_t full[256 + SC_STEPS];
    float lp[SC_STEPS];
    if (v->n_prompt + SC_STEPS > 256 || sc_plain(v, sp, full, lp))
        return 1;
    const uint32_t max_rows = l8_engine_verify_rows(v->e);
    int fails = 0;
    uint32_t cases = 0, accepted = 0, drafts = 0;
    for (uint32_t k = 1; k <= SC_MAX_K; k++) {
        if (v->ks && !(v->ks >> k & 1))
            continue;
        struct sc_case c = { .k = k, .i0 = 1 + k % 3, .batched = k % 2,
                             .whole = k % 4 == 2 || k == 1,
                             .logits = k % 3 == 0 ? L8_LOGITS_ALL
                                     : k % 3 == 1 ? L8_LOGITS_LAST : L8_LOGITS_NONE };
        for (uint32_t j = 1; j <= k; j++)
            c.wrong |= (uint32_t)(k != 4 && (j + k) % 3 == 0) << j;
        const uint32_t P = v->n_prompt + c.i0 - 1;
        if ((c.whole ? P + 1 : 1) + k + (c.batched ? SC_OTHER : 0) > max_rows)
            c.whole = false;
        if (1 + k + (c.batched ? SC_OTHER : 0) > max_rows)
            c.batched = false;
        if (1 + k > max_rows)
            continue;
        char name[160];
        snprintf(name, sizeof name, "%s: k %u after step %u (wrong 0x%x%s%s)", what, k, c.i0,
                 c.wrong, c.batched ? ", batched" : "", c.whole ? ", one chunk" : "");
        fails += sc_run_case(v, sp, full, &c, name);
        cases++;
        for (uint32_t j = 1; j <= k && !(c.wrong >> j & 1); j++)
            accepted++;
        drafts += k;
    }
    printf("%s: %u verification steps (%u of %u drafts right), each sample as its single step: "
           "%s\n", what, cases, accepted, drafts, fails ? "NO" : "yes");
    return fails;
}

/* The malformed verifications: -EINVAL. */
static inline void sc_invalid(struct sc_env *v, const struct l8_sampling *sp)
{
    struct l8_sample_out out[4];
    struct l8_seq s = { .tokens = v->prompt, .n_tokens = 3, .pos = 0, .pages = v->pages[1],
                        .n_pages = v->n_pages, .sample = true, .sampling = sp,
                        .history = v->prompt, .n_history = 3, .n_draft = 3,
                        .verify_out = out };
    CHECK(l8_engine_step(v->e, &s, 1) == -EINVAL, "n_draft == n_tokens accepted");
    s.n_draft = 4;
    CHECK(l8_engine_step(v->e, &s, 1) == -EINVAL, "n_draft > n_tokens accepted");
    s.n_draft = 2;
    s.verify_out = NULL;
    CHECK(l8_engine_step(v->e, &s, 1) == -EINVAL, "a verification without verify_out accepted");
    s.verify_out = out;
    s.n_history = 1;
    CHECK(l8_engine_step(v->e, &s, 1) == -EINVAL, "n_history < n_draft accepted");
    s.n_history = 3;
    CHECK(l8_engine_step(v->e, &s, 1) == 0, "a valid verification refused");
}

/* Sets up v's masks and the engine's wait; sc_env_done undoes it. */
static inline bool sc_env_init(struct sc_env *v)
{
    const size_t W = (v->V + 31) / 32;
    v->mask_buf = (uint32_t *)malloc((SC_MAX_K + 1) * W * 4);
    v->mask_src = (uint32_t *)malloc((SC_MAX_K + 1) * W * 4);
    l8_engine_set_masks_wait(v->e, sc_fill, &v->late);
    return v->mask_buf && v->mask_src;
}

static inline void sc_env_done(struct sc_env *v)
{
    l8_engine_set_masks_wait(v->e, NULL, NULL);
    free(v->mask_buf);
    free(v->mask_src);
}
