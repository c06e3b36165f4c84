/* test_golden.c - the CPU engine against the external golden reference.
 *
 * tests/golden/tiny-llama31-fp8/reference.safetensors holds logits that
 * llama.cpp computed from the same weights in f32 (cross-checked by an f64
 * implementation; see reference.json and tests/golden/README.md). Checks:
 *   exact: every stored position's relative L2 error <= 2e-4 (<= 2e-3
 *          past position 8192); greedy continuations of case1 and case3
 *          identical; case4 argmax equal wherever the reference margin is
 *          >= 1e-3;
 *   fp8:   per case, mean relative L2 error <= 0.12 and argmax agreement
 *          >= 80% (per-token FP8 activation rounding is noise of ~0.07),
 *          measured with an f32 KV pool (opts.kv_f32) so that only the
 *          activation rounding differs from the reference;
 *   fp8 with the bf16 KV pool (the engine's default, as on the GPU): per
 *          case mean relative error <= 0.12, argmax agreement >= 80% over
 *          all positions of all cases together (bf16 K/V adds its own
 *          noise; per case that lands within a position or two of 80% on
 *          the 64-position case, so per-case figures are printed only);
 *   fp8/lmfp8: the same with lm_head quantized to FP8 at load
 *          (opts.lm_head_fp8), against the same bounds.
 * Prints the measured errors for every configuration.
 * usage: test_golden GOLDEN_DIR [exact|fp8|all] */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "engine.h"
#include "model.h"
#include "safetensors.h"
#include "reference.h"

#define PAGE_SIZE 16u
#define CHUNK 512u
#define GREEDY_N 32u
#define N_CASES 5
#define EXACT_TOL 2e-4
#define EXACT_TOL_LONG 2e-3
#define LONG_POS 8192u
#define MARGIN_MIN 1e-3f
#define FP8_MEAN_TOL 0.12
#define FP8_ARGMAX_MIN 0.80

static uint64_t pooled_agree, pooled_n;

static void run_numerics(const struct l8_model *m, const struct l8_tensor_set *ref,
                         enum l8_numerics num, bool kv_f32, bool lm_head_fp8)
{
    const char *nname = num == L8_NUMERICS_EXACT ? "exact" : kv_f32 ? "fp8/kvf32"
                        : lm_head_fp8 ? "fp8/lmfp8" : "fp8/kvbf16";
    /* Per-case argmax criterion only where the noise figure applies. */
    const bool per_case_argmax = num == L8_NUMERICS_FP8 && kv_f32;
    const uint32_t V = m->cfg.vocab;
    const uint32_t max_S = 9000 + GREEDY_N;
    const uint32_t n_pages = (max_S + PAGE_SIZE - 1) / PAGE_SIZE;
    struct l8_engine_opts o = { .numerics = num, .page_size = PAGE_SIZE, .n_pages = n_pages,
                                .max_step_tokens = CHUNK, .max_seqs = 1, .nthreads = 0,
                                .kv_f32 = kv_f32, .lm_head_fp8 = lm_head_fp8 };
    struct l8_engine *e;
    char err[L8_ERRLEN];
    if (l8_engine_create(m, L8_BACKEND_CPU, &o, &e, err) < 0) {
        printf("engine: %s\n", err);
        exit(1);
    }
    uint32_t *pages = malloc(sizeof(uint32_t) * n_pages);
    for (uint32_t i = 0; i < n_pages; i++)
        pages[i] = i;
    float *logits = malloc(sizeof(float) * (size_t)max_S * V);
    uint32_t *tok = malloc(sizeof(uint32_t) * max_S);

    for (int c = 0; c < N_CASES; c++) {
        char name[64];
        snprintf(name, sizeof(name), "case%d.tokens", c);
        const struct l8_tensor *tt = ref_need(ref, name);
        const uint32_t S = (uint32_t)tt->shape[0];
        for (uint32_t i = 0; i < S; i++)
            tok[i] = (uint32_t)((const int32_t *)tt->data)[i];
        double t0 = t_now_s();
        int r = ref_prefill(e, tok, S, pages, n_pages, CHUNK, logits, V);
        double dt = t_now_s() - t0;
        CHECK(r == 0, "%s case%d: step failed %d", nname, c, r);
        if (r < 0)
            continue;

        /* Stored logits: all positions (cases 0-3) or logit_positions (case4). */
        snprintf(name, sizeof(name), "case%d.logits", c);
        const struct l8_tensor *tl = ref_need(ref, name);
        const float *rl = tl->data;
        uint32_t n_rows = (uint32_t)tl->shape[0];
        const int32_t *rows_pos = NULL;
        if (c == 4) {
            snprintf(name, sizeof(name), "case%d.logit_positions", c);
            const struct l8_tensor *tp = l8_st_find(ref, name);
            if (!tp) {
                printf("reference tensor %s missing\n", name);
                exit(1);
            }
            rows_pos = tp->data;
        }
        double maxe = 0, sume = 0, maxe_long = 0;
        uint32_t agree = 0, bad = 0;
        for (uint32_t i = 0; i < n_rows; i++) {
            uint32_t p = rows_pos ? (uint32_t)rows_pos[i] : i;
            const float *a = logits + (size_t)p * V, *b = rl + (size_t)i * V;
            double er = ref_rel_l2(a, b, V);
            sume += er;
            if (p >= LONG_POS) maxe_long = er > maxe_long ? er : maxe_long;
            else maxe = er > maxe ? er : maxe;
            agree += ref_argmax(a, V) == ref_argmax(b, V);
            if (num == L8_NUMERICS_EXACT && er > (p >= LONG_POS ? EXACT_TOL_LONG : EXACT_TOL))
                bad++;
        }
        double mean = sume / n_rows;
        printf("%-10s case%d S=%-5u rows=%-4u max_rel=%.3g%s mean_rel=%.3g argmax_agree=%.3f"
               " (%.2fs)\n", nname, c, S, n_rows, maxe,
               c == 4 ? "" : "", mean, (double)agree / n_rows, dt);
        if (c == 4)
            printf("%-10s case4 max_rel past %u = %.3g\n", nname, LONG_POS, maxe_long);
        if (num == L8_NUMERICS_EXACT)
            CHECK(bad == 0, "exact case%d: %u positions above tolerance (max %.3g / %.3g)",
                  c, bad, maxe, maxe_long);

        if (c == 4) {
            /* Argmax at every position, skipping reference near-ties. */
            const struct l8_tensor *ta = ref_need(ref, "case4.argmax");
            const struct l8_tensor *tm = ref_need(ref, "case4.argmax_margin");
            const int32_t *am = ta->data;
            const float *mg = tm->data;
            uint32_t n_cmp = 0, n_eq = 0, n_all_eq = 0;
            for (uint32_t p = 0; p < S; p++) {
                bool eq = ref_argmax(logits + (size_t)p * V, V) == (uint32_t)am[p];
                n_all_eq += eq;
                if (mg[p] >= MARGIN_MIN) {
                    n_cmp++;
                    n_eq += eq;
                }
            }
            printf("%-10s case4 argmax all positions: %u/%u equal (%u/%u with margin >= %g)\n",
                   nname, n_all_eq, S, n_eq, n_cmp, (double)MARGIN_MIN);
            if (num == L8_NUMERICS_EXACT)
                CHECK(n_eq == n_cmp, "exact case4: argmax differs at %u positions", n_cmp - n_eq);
            else if (per_case_argmax)
                CHECK((double)n_all_eq / S >= FP8_ARGMAX_MIN, "%s case4: argmax agreement %.3f",
                      nname, (double)n_all_eq / S);
            pooled_agree += n_all_eq;
            pooled_n += S;
        } else {
            if (per_case_argmax)
                CHECK((double)agree / n_rows >= FP8_ARGMAX_MIN, "%s case%d: argmax agreement %.3f",
                      nname, c, (double)agree / n_rows);
            pooled_agree += agree;
            pooled_n += n_rows;
        }
        if (num == L8_NUMERICS_FP8)
            CHECK(mean <= FP8_MEAN_TOL, "%s case%d: mean relative error %.3g", nname, c, mean);

        /* Greedy continuation through the engine's sampler (temperature 0). */
        snprintf(name, sizeof(name), "case%d.greedy", c);
        const struct l8_tensor *tg = l8_st_find(ref, name);
        if (!tg)
            continue;
        uint32_t n_g = (uint32_t)tg->shape[0], match;
        CHECK(ref_greedy(e, tok, S, logits + (size_t)(S - 1) * V, V, pages, n_pages, tg->data,
                         n_g, &match),
              "%s case%d greedy step failed", nname, c);
        printf("%-10s case%d greedy: %u/%u leading tokens identical\n", nname, c, match, n_g);
        if (num == L8_NUMERICS_EXACT)
            CHECK(match == n_g, "exact case%d: greedy continuation diverges at %u", c, match);
    }
    if (num == L8_NUMERICS_FP8) {
        double a = (double)pooled_agree / pooled_n;
        printf("%-10s argmax agreement over all positions of all cases: %.3f\n", nname, a);
        CHECK(a >= FP8_ARGMAX_MIN, "%s: pooled argmax agreement %.3f", nname, a);
    }
    pooled_agree = pooled_n = 0;
    free(tok);
    free(logits);
    free(pages);
    l8_engine_destroy(e);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_DIR [exact|fp8|all]\n", argv[0]);
        return 2;
    }
    const char *which = argc > 2 ? argv[2] : "all";
    char path[4096], err[L8_ERRLEN];
    snprintf(path, sizeof(path), "%s/tiny-llama31-fp8", argv[1]);
    struct l8_model *m;
    if (l8_model_load(path, 0, &m, err) < 0) {
        printf("load: %s\n", err);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/tiny-llama31-fp8/reference.safetensors", argv[1]);
    struct l8_tensor_set *ref;
    if (l8_st_open_file(path, &ref, err) < 0) {
        printf("reference: %s\n", err);
        return 1;
    }
    if (strcmp(which, "fp8") != 0)
        run_numerics(m, ref, L8_NUMERICS_EXACT, false, false);
    if (strcmp(which, "exact") != 0) {
        run_numerics(m, ref, L8_NUMERICS_FP8, true, false);
        run_numerics(m, ref, L8_NUMERICS_FP8, false, false);
        run_numerics(m, ref, L8_NUMERICS_FP8, false, true);
    }
    l8_st_close(ref);
    l8_model_free(m);
    printf("%s\n", t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}
