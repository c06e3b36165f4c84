/* test_sampler.c - the sampler against the definition in sampler.h.
 *
 * Philox4x32-10 against the Random123 known-answer vectors; greedy and its
 * tie rule; top_k = 1 equal to greedy; the repetition penalty (each
 * distinct id once, divide positives, multiply negatives); top_p and min_p
 * cut points with ties (lower id first); a chi-square test of the sampled
 * distribution; and the heap/partial-selection path against a plain
 * full-sort implementation of the definition on a 128,256-token vocabulary. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "sampler.h"

static struct l8_sampling params(float temp, uint32_t top_k, float top_p, float min_p,
                                 float rep, uint64_t seed)
{
    return (struct l8_sampling){ .temperature = temp, .top_k = top_k, .top_p = top_p,
                                 .min_p = min_p, .repetition_penalty = rep, .seed = seed };
}

static void test_philox(void)
{
    uint32_t out[4];
    const uint32_t k0[2] = { 0, 0 }, c0[4] = { 0, 0, 0, 0 };
    l8_philox4x32_10(k0, c0, out);
    CHECK(out[0] == 0x6627e8d5u && out[1] == 0xe169c58du && out[2] == 0xbc57ac4cu
          && out[3] == 0x9b00dbd8u, "philox zero KAT: %08x %08x %08x %08x",
          out[0], out[1], out[2], out[3]);
    const uint32_t k1[2] = { 0xffffffffu, 0xffffffffu };
    const uint32_t c1[4] = { 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu };
    l8_philox4x32_10(k1, c1, out);
    CHECK(out[0] == 0x408f276du && out[1] == 0x41c83b0eu && out[2] == 0xa20bc7c6u
          && out[3] == 0x6d5451fdu, "philox ones KAT: %08x %08x %08x %08x",
          out[0], out[1], out[2], out[3]);
    /* Random123 pi vector: key {0xa4093822, 0x299f31d0},
     * ctr {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}. */
    const uint32_t k2[2] = { 0xa4093822u, 0x299f31d0u };
    const uint32_t c2[4] = { 0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u };
    l8_philox4x32_10(k2, c2, out);
    CHECK(out[0] == 0xd16cfe09u && out[1] == 0x94fdccebu && out[2] == 0x5001e420u
          && out[3] == 0x24126ea1u, "philox pi KAT: %08x %08x %08x %08x",
          out[0], out[1], out[2], out[3]);
    /* uniform: seed -> key (lo, hi), index -> counter (lo, hi, 0, 0), top 24 bits. */
    const uint64_t seed = 0x0123456789abcdefull, idx = 0xfedcba9876543210ull;
    const uint32_t k3[2] = { 0x89abcdefu, 0x01234567u };
    const uint32_t c3[4] = { 0x76543210u, 0xfedcba98u, 0, 0 };
    l8_philox4x32_10(k3, c3, out);
    float u = l8_philox_uniform(seed, idx);
    CHECK(u == (float)(out[0] >> 8) / 16777216.0f, "uniform from word 0");
    float lo = 1, hi = 0;
    for (uint64_t i = 0; i < 100000; i++) {
        float v = l8_philox_uniform(7, i);
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    CHECK(lo >= 0.0f && hi < 1.0f && lo < 1e-3f && hi > 0.999f, "uniform range [%g, %g]", lo, hi);
}

static void test_greedy(void)
{
    struct l8_sampler *s = l8_sampler_new(16);
    float l[16];
    for (int i = 0; i < 16; i++)
        l[i] = (float)(i % 5) * 0.25f;
    l[5] = 3.0f;
    l[9] = 3.0f;
    struct l8_sampling g = params(0, 0, 1, 0, 1, 1);
    float lp;
    uint32_t id = l8_sample(s, l, &g, NULL, 0, NULL, 0, &lp);
    CHECK(id == 5, "greedy tie -> lowest id: %u", id);
    double z = 0;
    for (int i = 0; i < 16; i++)
        z += exp((double)l[i] - 3.0);
    CHECK(fabs(lp - (float)(-log(z))) < 1e-6, "logprob %g vs %g", lp, -log(z));
    /* top_k = 1 is greedy at any temperature and seed, ties included. */
    for (uint64_t i = 0; i < 50; i++) {
        struct l8_sampling k1 = params(1.5f, 1, 1, 0, 1, i * 77);
        CHECK(l8_sample(s, l, &k1, NULL, 0, NULL, i, NULL) == 5, "top_k=1 != greedy");
    }
    l8_sampler_free(s);

    /* Random logits, bigger vocabulary. */
    const uint32_t V = 1000;
    s = l8_sampler_new(V);
    float *r = malloc(sizeof(float) * V);
    for (uint64_t t = 0; t < 20; t++) {
        uint32_t best = 0;
        for (uint32_t i = 0; i < V; i++) {
            r[i] = (l8_philox_uniform(99 + t, i) - 0.5f) * 10.0f;
            if (r[i] > r[best])
                best = i;
        }
        struct l8_sampling k1 = params(0.7f, 1, 0.9f, 0.05f, 1, t);
        CHECK(l8_sample(s, r, &k1, NULL, 0, NULL, t, NULL) == best, "top_k=1 != argmax");
        CHECK(l8_sample(s, r, &g, NULL, 0, NULL, t, NULL) == best, "greedy != argmax");
    }
    free(r);
    l8_sampler_free(s);
}

static void test_repetition(void)
{
    struct l8_sampler *s = l8_sampler_new(3);
    struct l8_sampling g = params(0, 0, 1, 0, 2.0f, 0);
    float lp;
    /* Positive logit divided, once per distinct id: 4/2 = 2 > 1.5; applying
     * it twice would give 1 < 1.5. */
    const float a[3] = { 4.0f, 0.0f, 1.5f };
    const uint32_t h[4] = { 0, 0, 0, 1 };
    uint32_t id = l8_sample(s, a, &g, h, 4, NULL, 0, &lp);
    CHECK(id == 0, "penalty applied once per distinct id: %u", id);
    double z = exp(2.0) + exp(0.0) + exp(1.5);
    CHECK(fabs(lp - (float)(2.0 - log(z))) < 1e-6, "logprob after penalty %g", lp);
    /* Negative logit multiplied: -1 * 2 = -2 < -1.5. */
    const float b[3] = { -1.0f, -1.5f, -3.0f };
    const uint32_t h2[1] = { 0 };
    id = l8_sample(s, b, &g, h2, 1, NULL, 0, NULL);
    CHECK(id == 1, "negative logit multiplied: %u", id);
    /* Penalty 1 is off; history out of range ignored. */
    struct l8_sampling off = params(0, 0, 1, 0, 1.0f, 0);
    CHECK(l8_sample(s, a, &off, h, 4, NULL, 0, NULL) == 0, "penalty 1 off");
    /* The caller's logits are not modified, and the marks are cleared:
     * a second call without history sees the original logits. */
    CHECK(a[0] == 4.0f, "logits not modified");
    const float c[3] = { 1.9f, 0.0f, 1.0f };
    CHECK(l8_sample(s, c, &g, NULL, 0, NULL, 0, NULL) == 0, "marks cleared");
    l8_sampler_free(s);
}

/* Distribution of tokens over n draws. */
static void histogram(struct l8_sampler *s, const float *l, const struct l8_sampling *p,
                      uint32_t V, uint32_t n, uint32_t *count)
{
    memset(count, 0, sizeof(uint32_t) * V);
    for (uint32_t i = 0; i < n; i++)
        count[l8_sample(s, l, p, NULL, 0, NULL, i, NULL)]++;
}

static void test_cuts(void)
{
    enum { V = 4, N = 4000 };
    struct l8_sampler *s = l8_sampler_new(V);
    /* Probabilities 0.5, 0.25, 0.125, 0.125 (ids 2 and 3 tie). */
    const float l[V] = { 0.0f, -logf(2.0f), -logf(4.0f), -logf(4.0f) };
    uint32_t cnt[V];
    struct l8_sampling p;

    p = params(1, 0, 0.7f, 0, 1, 3);      /* prefix 0.5, 0.75 -> {0,1} */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[0] > 0 && cnt[1] > 0 && cnt[2] == 0 && cnt[3] == 0, "top_p 0.7: %u %u %u %u",
          cnt[0], cnt[1], cnt[2], cnt[3]);
    /* Renormalized over the kept set: 2/3 and 1/3. */
    CHECK(fabs(cnt[0] / (double)N - 2.0 / 3) < 0.03, "top_p renormalization %u", cnt[0]);

    p = params(1, 0, 0.8f, 0, 1, 3);      /* 0.5, 0.75, 0.875 -> {0,1,2}; 3 loses the tie */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[2] > 0 && cnt[3] == 0, "top_p 0.8 with tie: %u %u %u %u",
          cnt[0], cnt[1], cnt[2], cnt[3]);

    p = params(1, 0, 0.4f, 0, 1, 3);      /* at least one */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[0] == N, "top_p below the top probability keeps one");

    p = params(1, 0, 1.0f, 0.3f, 1, 3);   /* min_p: drop p < 0.15 -> {0,1} */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[0] > 0 && cnt[1] > 0 && cnt[2] == 0 && cnt[3] == 0, "min_p 0.3: %u %u %u %u",
          cnt[0], cnt[1], cnt[2], cnt[3]);

    p = params(1, 0, 1.0f, 0.2f, 1, 3);   /* threshold 0.1 -> all four */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[2] > 0 && cnt[3] > 0, "min_p 0.2 keeps all: %u %u", cnt[2], cnt[3]);

    p = params(1, 2, 1.0f, 0, 1, 3);      /* top_k 2 */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[2] == 0 && cnt[3] == 0 && cnt[1] > 0, "top_k 2");

    p = params(1, 3, 1.0f, 0, 1, 3);      /* top_k 3: the tie goes to the lower id */
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[2] > 0 && cnt[3] == 0, "top_k 3 tie");

    /* Temperature: a very low one is nearly greedy, a high one flattens. */
    p = params(0.05f, 0, 1.0f, 0, 1, 3);
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[0] == N, "low temperature");
    p = params(100.0f, 0, 1.0f, 0, 1, 3);
    histogram(s, l, &p, V, N, cnt);
    CHECK(cnt[3] > N / 5, "high temperature flattens: %u", cnt[3]);
    l8_sampler_free(s);
}

static void test_chi_square(void)
{
    enum { V = 6, N = 60000 };
    const double prob[V] = { 0.30, 0.25, 0.20, 0.12, 0.08, 0.05 };
    float l[V];
    for (int i = 0; i < V; i++)
        l[i] = (float)log(prob[i]) + 1.0f;   /* a shift changes nothing */
    struct l8_sampler *s = l8_sampler_new(V);
    struct l8_sampling p = params(1, 0, 1, 0, 1, 12345);
    uint32_t cnt[V];
    histogram(s, l, &p, V, N, cnt);
    double chi = 0;
    for (int i = 0; i < V; i++) {
        double e = prob[i] * N;
        chi += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    /* 5 degrees of freedom: P(chi2 > 20.5) = 0.001. */
    printf("chi-square (5 dof) = %.2f\n", chi);
    CHECK(chi < 20.5, "chi-square %.2f", chi);
    /* Same seed, same tokens; another seed, another sequence. */
    uint32_t a = 0, b = 0, d = 0;
    struct l8_sampling p2 = params(1, 0, 1, 0, 1, 54321);
    for (uint32_t i = 0; i < 200; i++) {
        a = l8_sample(s, l, &p, NULL, 0, NULL, i, NULL);
        b = l8_sample(s, l, &p, NULL, 0, NULL, i, NULL);
        CHECK(a == b, "same seed same token");
        d += a != l8_sample(s, l, &p2, NULL, 0, NULL, i, NULL);
    }
    CHECK(d > 50, "different seeds differ (%u/200)", d);
    l8_sampler_free(s);
}

/* ---- a plain full-sort implementation of the definition ---------------- */

static const float *g_z;
static int cmp_cand(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    if (g_z[x] > g_z[y]) return -1;
    if (g_z[x] < g_z[y]) return 1;
    return x < y ? -1 : 1;
}

static uint32_t ref_sample(const float *l, uint32_t V, const struct l8_sampling *p, uint64_t idx)
{
    float *z = malloc(sizeof(float) * V);
    uint32_t *c = malloc(sizeof(uint32_t) * V);
    for (uint32_t i = 0; i < V; i++) {
        z[i] = l[i] / p->temperature;
        c[i] = i;
    }
    g_z = z;
    qsort(c, V, sizeof(uint32_t), cmp_cand);
    uint32_t K = p->top_k ? p->top_k : V;
    double S = 0;
    for (uint32_t i = 0; i < K; i++)
        S += (double)expf(z[c[i]] - z[c[0]]);
    uint32_t n = K;
    double run = 0;
    for (uint32_t i = 0; i < K; i++) {
        float w = expf(z[c[i]] - z[c[0]]);
        if (i > 0 && w < p->min_p) { n = i; break; }
        run += w;
        if (p->top_p < 1.0f && run / S >= p->top_p) { n = i + 1; break; }
    }
    double tot = 0;
    for (uint32_t i = 0; i < n; i++)
        tot += (double)expf(z[c[i]] - z[c[0]]);
    double target = (double)l8_philox_uniform(p->seed, idx) * tot;
    uint32_t id = c[n - 1];
    run = 0;
    for (uint32_t i = 0; i < n; i++) {
        run += (double)expf(z[c[i]] - z[c[0]]);
        if (run > target) { id = c[i]; break; }
    }
    free(z);
    free(c);
    return id;
}

static void test_large_vocab(void)
{
    const uint32_t V = 128256;
    float *l = malloc(sizeof(float) * V);
    /* Logits with a trained model's spread: a few units, some ties. */
    for (uint32_t i = 0; i < V; i++)
        l[i] = roundf((l8_philox_uniform(2024, i) + l8_philox_uniform(2025, i)
                       + l8_philox_uniform(2026, i) - 1.5f) * 6.0f * 64.0f) / 64.0f;
    struct l8_sampler *s = l8_sampler_new(V);
    const struct l8_sampling cfg[] = {
        params(1.0f, 0, 0.9f, 0, 1, 1),
        params(0.7f, 40, 1.0f, 0, 1, 2),
        params(1.0f, 0, 1.0f, 0.05f, 1, 3),
        params(1.2f, 0, 1.0f, 0, 1, 4),        /* no cut: the whole vocabulary */
        params(0.8f, 1000, 0.95f, 0.01f, 1, 5),
        params(1.0f, 0, 0.999f, 0, 1, 6),      /* a kept set far beyond 256 */
    };
    uint32_t mism = 0, total = 0;
    for (size_t k = 0; k < sizeof(cfg) / sizeof(cfg[0]); k++)
        for (uint64_t i = 0; i < 12; i++) {
            uint32_t a = l8_sample(s, l, &cfg[k], NULL, 0, NULL, i, NULL);
            uint32_t b = ref_sample(l, V, &cfg[k], i);
            total++;
            if (a != b) {
                mism++;
                printf("cfg %zu index %llu: %u vs reference %u\n", k, (unsigned long long)i, a, b);
            }
        }
    CHECK(mism == 0, "large vocabulary: %u/%u picks differ from the full-sort definition",
          mism, total);
    free(l);
    l8_sampler_free(s);
}

/* A token mask (constrained decoding): only its ids are chosen, greedy takes
 * the best of them, the logprob is normalized over them, and a sampled
 * choice follows the masked distribution. */
static void test_mask(void)
{
    struct l8_sampler *s = l8_sampler_new(70);
    float l[70];
    for (int i = 0; i < 70; i++)
        l[i] = (float)((i * 37) % 11) * 0.3f;
    l[3] = 9.0f;    /* the best overall, outside the mask */
    uint32_t mask[3] = { 0 };
    for (uint32_t i = 0; i < 70; i++)
        if (i % 4 == 1 || i == 66)
            mask[i >> 5] |= 1u << (i & 31);
    l[66] = 5.0f;   /* the best inside it, past the first word */
    struct l8_sampling g = params(0, 0, 1, 0, 1, 1);
    float lp;
    uint32_t id = l8_sample(s, l, &g, NULL, 0, mask, 0, &lp);
    double z = 0;
    for (uint32_t i = 0; i < 70; i++)
        if (mask[i >> 5] >> (i & 31) & 1)
            z += exp((double)l[i] - 5.0);
    CHECK(id == 66, "greedy under a mask: %u", id);
    CHECK(fabs(lp - (float)(-log(z))) < 1e-6, "masked logprob %g vs %g", lp, -log(z));
    struct l8_sampling t = params(1.0f, 0, 1, 0, 1, 7);
    int outside = 0, hits66 = 0;
    for (uint64_t i = 0; i < 4000; i++) {
        id = l8_sample(s, l, &t, NULL, 0, mask, i, NULL);
        outside += !(mask[id >> 5] >> (id & 31) & 1);
        hits66 += id == 66;
    }
    double p66 = exp(5.0 - 5.0) / z;
    CHECK(outside == 0, "%d of 4000 samples outside the mask", outside);
    CHECK(fabs(hits66 / 4000.0 - p66) < 0.03, "id 66 drawn %.3f of the time, p = %.3f",
          hits66 / 4000.0, p66);
    l8_sampler_free(s);
}

int main(void)
{
    test_mask();
    test_philox();
    test_greedy();
    test_repetition();
    test_cuts();
    test_chi_square();
    test_large_vocab();
    printf("%s\n", t_failures ? "FAILED" : "ok");
    return t_failures ? 1 : 0;
}
