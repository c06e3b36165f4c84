/* sampler.c - the sampling definition of sampler.h, on the CPU.
 *
 * Arithmetic details that the definition leaves open, fixed here (the GPU
 * sampler should follow them; differences would only matter for values
 * within an f32 rounding of a cut point):
 *   - penalized logits l and tempered logits z = l / temperature are f32;
 *   - the weight of a candidate is w = expf(z - z_top) (f32); its
 *     probability w / S with S the sum (double) of w over the top_k set;
 *   - running sums are double, in candidate order;
 *   - min_p drops candidates with w < min_p * w_top (the same as
 *     p < min_p * p_top);
 *   - logprob_out = l[id] - (l_max + log(sum(exp(l - l_max)))) in double.
 *
 * Only the candidates that matter are ordered: with top_k > 0 a heap
 * selects the top_k; with top_k = 0 the top m are selected (m = 256,
 * doubled until the kept set or the pick is decided inside them), so a
 * 128k vocabulary is not sorted for every token. */
#include "sampler.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define PHILOX_M0 0xD2511F53u
#define PHILOX_M1 0xCD9E8D57u
#define PHILOX_W0 0x9E3779B9u
#define PHILOX_W1 0xBB67AE85u
#define PHILOX_ROUNDS 10
#define SELECT_START 256u

void l8_philox4x32_10(const uint32_t key[2], const uint32_t ctr[4], uint32_t out[4])
{
    uint32_t k0 = key[0], k1 = key[1];
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    for (int r = 0; r < PHILOX_ROUNDS; r++) {
        if (r > 0) {
            k0 += PHILOX_W0;
            k1 += PHILOX_W1;
        }
        uint64_t p0 = (uint64_t)PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n1 = (uint32_t)p1;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        uint32_t n3 = (uint32_t)p0;
        c0 = n0; c1 = n1; c2 = n2; c3 = n3;
    }
    out[0] = c0; out[1] = c1; out[2] = c2; out[3] = c3;
}

float l8_philox_uniform(uint64_t seed, uint64_t index)
{
    const uint32_t key[2] = { (uint32_t)seed, (uint32_t)(seed >> 32) };
    const uint32_t ctr[4] = { (uint32_t)index, (uint32_t)(index >> 32), 0, 0 };
    uint32_t out[4];
    l8_philox4x32_10(key, ctr, out);
    return (float)(out[0] >> 8) * 0x1p-24f;
}

struct l8_sampler {
    uint32_t vocab;
    float *l;           /* [vocab] penalized logits */
    float *z;           /* [vocab] tempered logits */
    uint32_t *cand;     /* [vocab] selected ids, ordered */
    uint8_t *seen;      /* [vocab] repetition-penalty marks, kept all-zero */
};

struct l8_sampler *l8_sampler_new(uint32_t vocab)
{
    struct l8_sampler *s = calloc(1, sizeof(*s));
    if (!s || vocab == 0)
        goto err;
    s->vocab = vocab;
    s->l = malloc(sizeof(float) * vocab);
    s->z = malloc(sizeof(float) * vocab);
    s->cand = malloc(sizeof(uint32_t) * vocab);
    s->seen = calloc(vocab, 1);
    if (!s->l || !s->z || !s->cand || !s->seen)
        goto err;
    return s;
err:
    l8_sampler_free(s);
    return NULL;
}

void l8_sampler_free(struct l8_sampler *s)
{
    if (!s)
        return;
    free(s->l);
    free(s->z);
    free(s->cand);
    free(s->seen);
    free(s);
}

/* Candidate order: higher z first, lower id first on ties. */
static inline bool before(const float *z, uint32_t a, uint32_t b)
{
    return z[a] > z[b] || (z[a] == z[b] && a < b);
}

/* Min-heap on "before": the root is the candidate that comes last. */
static void sift_down(const float *z, uint32_t *h, uint32_t n, uint32_t i)
{
    for (;;) {
        uint32_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && before(z, h[m], h[l]))
            m = l;
        if (r < n && before(z, h[m], h[r]))
            m = r;
        if (m == i)
            return;
        uint32_t t = h[i]; h[i] = h[m]; h[m] = t;
        i = m;
    }
}

/* The first m candidates of all `vocab` in order, into out[0..m). */
static void select_top(const float *z, uint32_t vocab, uint32_t m, uint32_t *out)
{
    for (uint32_t i = 0; i < m; i++)
        out[i] = i;
    for (uint32_t i = m / 2; i-- > 0;)
        sift_down(z, out, m, i);
    for (uint32_t i = m; i < vocab; i++) {
        if (before(z, i, out[0])) {
            out[0] = i;
            sift_down(z, out, m, 0);
        }
    }
    /* Heap sort: repeatedly move the last-in-order to the end. */
    for (uint32_t n = m; n > 1; n--) {
        uint32_t t = out[0]; out[0] = out[n - 1]; out[n - 1] = t;
        sift_down(z, out, n - 1, 0);
    }
}

static uint32_t argmax(const float *l, uint32_t n)
{
    uint32_t best = 0;
    for (uint32_t i = 1; i < n; i++)
        if (l[i] > l[best])
            best = i;
    return best;
}

uint32_t l8_sample(struct l8_sampler *s, const float *logits,
                   const struct l8_sampling *p, const uint32_t *history,
                   uint32_t n_history, const uint32_t *allowed, uint64_t index,
                   float *logprob)
{
    const uint32_t V = s->vocab;
    float *l = s->l;
    memcpy(l, logits, sizeof(float) * V);

    /* 1. Repetition penalty, once per distinct id. */
    if (p->repetition_penalty != 1.0f && p->repetition_penalty > 0.0f) {
        const float rp = p->repetition_penalty;
        for (uint32_t i = 0; i < n_history; i++) {
            uint32_t id = history[i];
            if (id >= V || s->seen[id])
                continue;
            s->seen[id] = 1;
            l[id] = l[id] > 0.0f ? l[id] / rp : l[id] * rp;
        }
        for (uint32_t i = 0; i < n_history; i++)
            if (history[i] < V)
                s->seen[history[i]] = 0;
    }

    /* 1b. The mask. */
    if (allowed)
        for (uint32_t w = 0; w < (V + 31) / 32; w++) {
            uint32_t out = ~allowed[w];     /* the ids left out of word w */
            if (w == V / 32)
                out &= (1u << (V & 31)) - 1;   /* past V: not ids */
            for (; out; out &= out - 1)
                l[w * 32 + (uint32_t)__builtin_ctz(out)] = -INFINITY;
        }

    uint32_t id;
    uint32_t top = argmax(l, V);
    if (p->temperature <= 0.0f) {
        id = top;
    } else {
        float *z = s->z;
        const float temp = p->temperature;
        for (uint32_t i = 0; i < V; i++)
            z[i] = l[i] / temp;
        /* z is monotonic in l, but two l can round to one z: the top of z
         * is the lowest id among them, which argmax over l also gives. */
        const uint32_t K = p->top_k > 0 && p->top_k < V ? p->top_k : V;
        const bool topp_on = p->top_p < 1.0f;
        const double u = (double)l8_philox_uniform(p->seed, index);
        uint32_t *c = s->cand;
        uint32_t m = K < V ? K : (SELECT_START < V ? SELECT_START : V);
        double S = 0.0;   /* sum of w over the top_k set */
        if (K == V) {
            const float zt = z[top];
            for (uint32_t i = 0; i < V; i++)
                if (z[i] != -INFINITY)
                    S += (double)expf(z[i] - zt);
        }
        for (;;) {
            select_top(z, V, m, c);
            const float ztop = z[c[0]];
            if (K < V) {
                S = 0.0;
                for (uint32_t i = 0; i < m; i++)
                    S += (double)expf(z[c[i]] - ztop);
            }
            /* Kept prefix: top_p (shortest prefix reaching it, at least
             * one), then min_p (a prefix too, the order being by w). */
            uint32_t n_keep = m;
            bool decided = (m == K);
            double run = 0.0;
            const float wmin = p->min_p > 0.0f ? p->min_p : 0.0f; /* w_top = 1 */
            for (uint32_t i = 0; i < m; i++) {
                float w = expf(z[c[i]] - ztop);
                if (i > 0 && w < wmin) {
                    n_keep = i;
                    decided = true;
                    break;
                }
                run += (double)w;
                if (topp_on && run / S >= (double)p->top_p) {
                    n_keep = i + 1;
                    decided = true;
                    break;
                }
            }
            if (decided) {
                double total = 0.0;
                for (uint32_t i = 0; i < n_keep; i++)
                    total += (double)expf(z[c[i]] - ztop);
                const double target = u * total;
                id = c[n_keep - 1];
                run = 0.0;
                for (uint32_t i = 0; i < n_keep; i++) {
                    run += (double)expf(z[c[i]] - ztop);
                    if (run > target) {
                        id = c[i];
                        break;
                    }
                }
                break;
            }
            /* The kept set reaches past m. Without top_p/min_p it is the
             * whole top_k set whose total is S: the pick may still fall
             * inside the first m. */
            if (!topp_on && p->min_p <= 0.0f) {
                const double target = u * S;
                bool found = false;
                run = 0.0;
                for (uint32_t i = 0; i < m; i++) {
                    run += (double)expf(z[c[i]] - ztop);
                    if (run > target) {
                        id = c[i];
                        found = true;
                        break;
                    }
                }
                if (found)
                    break;
            }
            m = m * 2 < K ? m * 2 : K;
        }
    }

    if (logprob) {
        const float lmax = l[top];
        double sum = 0.0;
        for (uint32_t i = 0; i < V; i++)
            if (l[i] != -INFINITY)  /* masked out: exp() would give 0, slowly */
                sum += exp((double)l[i] - (double)lmax);
        *logprob = (float)((double)l[id] - ((double)lmax + log(sum)));
    }
    return id;
}
