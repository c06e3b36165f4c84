/* cuda_profile.c - the CUDA engine's step profile. See cuda_profile.h. */
#include "cuda_profile.h"

#include <json-c/json.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <syslog.h>

#include "l8_kernels.h"
#include "proto/l8_clock.h"

#define PROF_EVENTS 4096          /* marks per step; a step with more is dropped */
#define PROF_HOLD_US 30000u       /* > the host's queueing of a step (~1 ms at 8B) */

static const char *const phase_name[L8_PH_N] = {
    "start", "upload", "embed", "attn_norm", "qkv", "rope_kv", "attention", "quantize",
    "o", "mlp_norm", "gate_up", "silu", "down", "logits", "sample",
};

struct prof_kind {
    uint64_t steps, host_bound, tokens;
    double us[L8_PH_N];
    uint64_t calls[L8_PH_N];
    double queue_ms_max;          /* longest host queueing of a step */
};

struct l8_cuda_prof {
    cudaStream_t st;
    l8_engine_log_fn *log;        /* the engine's (engine.h) */
    void *log_ud;
    char *path;
    cudaEvent_t ev[PROF_EVENTS];
    uint8_t ph[PROF_EVENTS];
    uint32_t n;
    bool prefill, overflow;
    uint32_t tokens;
    double t0;                    /* the hold's launch, l8_now_s() */
    double queue_ms;              /* the step's queueing, from t0 to its last mark */
    double weight_bytes[L8_PH_N]; /* per call */
    double flop_per_token[L8_PH_N];
    struct prof_kind kind[2];     /* [0] decode, [1] prefill */
};

struct l8_cuda_prof *l8_prof_create(cudaStream_t st, const char *path, l8_engine_log_fn *log,
                                    void *log_ud)
{
    if (!path || !*path)
        return NULL;
    struct l8_cuda_prof *p = calloc(1, sizeof *p);
    if (!p || !(p->path = strdup(path))) {
        free(p);
        l8_engine_logf(log, log_ud, LOG_WARNING,
                       "cuda: out of memory for the step profile; not profiling");
        return NULL;
    }
    p->st = st;
    p->log = log;
    p->log_ud = log_ud;
    for (uint32_t i = 0; i < PROF_EVENTS; i++)
        if (cudaEventCreate(&p->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            l8_engine_logf(log, log_ud, LOG_WARNING,
                           "cuda: cannot create the profile's events; not profiling");
            while (i--)
                cudaEventDestroy(p->ev[i]);
            free(p->path);
            free(p);
            return NULL;
        }
    return p;
}

void l8_prof_product(struct l8_cuda_prof *p, enum l8_phase ph, uint64_t n, uint64_t k,
                     uint32_t elt_bytes, bool per_token)
{
    if (!p)
        return;
    p->weight_bytes[ph] = (double)n * (double)k * elt_bytes;
    p->flop_per_token[ph] = per_token ? 2.0 * (double)n * (double)k : 0;
}

void l8_prof_begin(struct l8_cuda_prof *p, bool prefill, uint32_t tokens)
{
    if (!p)
        return;
    p->n = 0;
    p->overflow = false;
    p->prefill = prefill;
    p->tokens = tokens;
    p->t0 = l8_now_s();
    if (l8k_hold_stream(PROF_HOLD_US, p->st))
        p->overflow = true;       /* no hold, no profile for this step */
    l8_prof_mark(p, L8_PH_START);
}

void l8_prof_mark(struct l8_cuda_prof *p, enum l8_phase ph)
{
    if (!p)
        return;
    if (p->n == PROF_EVENTS || cudaEventRecord(p->ev[p->n], p->st) != cudaSuccess) {
        p->overflow = true;
        return;
    }
    p->ph[p->n++] = (uint8_t)ph;
    p->queue_ms = (l8_now_s() - p->t0) * 1e3;
}

void l8_prof_end(struct l8_cuda_prof *p, bool ok)
{
    if (!p)
        return;
    const uint32_t n = p->n;
    p->n = 0;
    if (n < 2)
        return;
    /* The caller synchronized the stream; this is for a failed step's sake. */
    if (cudaEventSynchronize(p->ev[n - 1]) != cudaSuccess)
        ok = false;
    if (!ok || p->overflow) {
        cudaGetLastError();
        return;
    }
    struct prof_kind *k = &p->kind[p->prefill];
    double us[L8_PH_N] = { 0 };
    uint64_t calls[L8_PH_N] = { 0 };
    for (uint32_t i = 1; i < n; i++) {
        float ms = 0;
        if (cudaEventElapsedTime(&ms, p->ev[i - 1], p->ev[i]) != cudaSuccess) {
            cudaGetLastError();
            return;
        }
        us[p->ph[i]] += ms * 1e3;
        calls[p->ph[i]]++;
    }
    for (int i = 0; i < L8_PH_N; i++) {
        k->us[i] += us[i];
        k->calls[i] += calls[i];
    }
    k->steps++;
    k->tokens += p->tokens;
    if (p->queue_ms > PROF_HOLD_US * 1e-3)
        k->host_bound++;
    if (p->queue_ms > k->queue_ms_max)
        k->queue_ms_max = p->queue_ms;
}

/* A table's text, appended to as it is made (cut short when full). */
struct table {
    char text[4096];
    size_t used;
};

static void table_say(struct table *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void table_say(struct table *t, const char *fmt, ...)
{
    if (t->used >= sizeof t->text)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(t->text + t->used, sizeof t->text - t->used, fmt, ap);
    va_end(ap);
    t->used += n > 0 ? (size_t)n : 0;
}

/* One kind's table, one message to the log, and its JSON object. */
static json_object *report_kind(const struct l8_cuda_prof *p, const char *name,
                                const struct prof_kind *k)
{
    double total = 0;
    for (int i = 0; i < L8_PH_N; i++)
        total += k->us[i];
    const double per = total / (double)k->steps;
    struct table t = { .used = 0 };
    table_say(&t,
              "cuda profile: %s, %llu steps, %.1f us of GPU time a step (host queued a "
              "step in at most %.2f ms; %llu steps outlasted the %.0f ms hold)\n"
              "  %-10s %8s %10s %7s %8s %8s",
              name, (unsigned long long)k->steps, per, k->queue_ms_max,
              (unsigned long long)k->host_bound, PROF_HOLD_US * 1e-3, "phase", "calls", "us/step",
              "share", "GB/s", "TFLOP/s");
    json_object *o = json_object_new_object(), *arr = json_object_new_array();
    json_object_object_add(o, "kind", json_object_new_string(name));
    json_object_object_add(o, "steps", json_object_new_int64((int64_t)k->steps));
    json_object_object_add(o, "gpu_us_per_step", json_object_new_double(per));
    json_object_object_add(o, "host_bound_steps", json_object_new_int64((int64_t)k->host_bound));
    json_object_object_add(o, "queue_ms_max", json_object_new_double(k->queue_ms_max));
    for (int i = L8_PH_START + 1; i < L8_PH_N; i++) {
        if (!k->calls[i])
            continue;
        const double ups = k->us[i] / (double)k->steps, share = total > 0 ? k->us[i] / total : 0;
        /* weights once per call; FLOP per token, once per layer (call) */
        const double gbs = k->us[i] > 0
                               ? p->weight_bytes[i] * (double)k->calls[i] / (k->us[i] * 1e3)
                               : 0;
        const double tflops = k->us[i] > 0 ? p->flop_per_token[i] * (double)k->tokens *
                                                 ((double)k->calls[i] / (double)k->steps) /
                                                 (k->us[i] * 1e6)
                                           : 0;
        table_say(&t, "\n  %-10s %8.1f %10.1f %6.1f%% ", phase_name[i],
                  (double)k->calls[i] / (double)k->steps, ups, 100 * share);
        if (gbs > 0)
            table_say(&t, "%8.1f ", gbs);
        else
            table_say(&t, "%8s ", "-");
        if (tflops > 0)
            table_say(&t, "%8.2f", tflops);
        else
            table_say(&t, "%8s", "-");
        json_object *r = json_object_new_object();
        json_object_object_add(r, "phase", json_object_new_string(phase_name[i]));
        json_object_object_add(r, "calls_per_step",
                               json_object_new_double((double)k->calls[i] / (double)k->steps));
        json_object_object_add(r, "us_per_step", json_object_new_double(ups));
        json_object_object_add(r, "share", json_object_new_double(share));
        json_object_object_add(r, "weight_gbs", gbs > 0 ? json_object_new_double(gbs) : NULL);
        json_object_object_add(r, "tflops", tflops > 0 ? json_object_new_double(tflops) : NULL);
        json_object_array_add(arr, r);
    }
    json_object_object_add(o, "phases", arr);
    l8_engine_logf(p->log, p->log_ud, LOG_INFO, "%s", t.text);
    return o;
}

void l8_prof_finish(struct l8_cuda_prof *p)
{
    if (!p)
        return;
    json_object *doc = json_object_new_object(), *kinds = json_object_new_array();
    json_object_object_add(doc, "hold_ms", json_object_new_double(PROF_HOLD_US * 1e-3));
    static const char *const kname[2] = { "decode", "prefill" };
    for (int i = 1; i >= 0; i--)
        if (p->kind[i].steps)
            json_object_array_add(kinds, report_kind(p, kname[i], &p->kind[i]));
    json_object_object_add(doc, "kinds", kinds);
    FILE *f = fopen(p->path, "w");
    bool ok = f && fprintf(f, "%s\n",
                           json_object_to_json_string_ext(doc, JSON_C_TO_STRING_PRETTY)) >= 0;
    if (f && fclose(f) != 0)
        ok = false;
    if (!ok)
        l8_engine_logf(p->log, p->log_ud, LOG_ERR, "cuda: cannot write the profile to %s",
                       p->path);
    json_object_put(doc);
    for (uint32_t i = 0; i < PROF_EVENTS; i++)
        cudaEventDestroy(p->ev[i]);
    free(p->path);
    free(p);
}
