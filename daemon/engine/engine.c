/* engine.c - the engine interface: backend dispatch and step validation.
 *
 * Every step is checked here before a backend sees it, so no backend
 * writes a KV page for a step that breaks the limits of engine.h.
 * The CUDA backend is compiled in when meson's have_cuda block defines
 * L8_ENGINE_CUDA (see meson.build). */
#include "engine.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "l8_build.h"

#define DEFAULT_PAGE_SIZE 16u
#define DEFAULT_MAX_STEP_TOKENS 512u
#define DEFAULT_MAX_SEQS 64u

struct l8_engine {
    const struct l8_engine_ops *ops;
    void *impl;
    const struct l8_model *m;
    struct l8_engine_opts o;    /* defaults resolved */
    uint32_t n_pages;
    struct l8_engine_mem mem;
    l8_masks_wait_fn *masks_wait;
    void *masks_ud;
};

const char *l8_engine_strerror(int rc)
{
    return rc == -EDOM ? "the logits are not finite (NaN or Inf): the model's weights or the "
                         "engine are broken, no token was sampled"
                       : strerror(-rc);
}

const char *l8_backend_name(enum l8_backend b)
{
    switch (b) {
    case L8_BACKEND_CPU: return "cpu";
    case L8_BACKEND_CUDA: return "cuda";
    case L8_BACKEND_AUTO: return "auto";
    }
    return "unknown";
}

void l8_engine_log_stderr(void *ud, int level, const char *msg)
{
    (void)ud;
    (void)level;
    fprintf(stderr, "llama8 %s\n", msg);
}

void l8_engine_logf(l8_engine_log_fn *fn, void *ud, int level, const char *fmt, ...)
{
    char line[4096], *msg = line;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    /* A long report in full when memory allows, else cut where the line ends. */
    if ((size_t)n >= sizeof line && (msg = malloc((size_t)n + 1))) {
        va_start(ap, fmt);
        vsnprintf(msg, (size_t)n + 1, fmt, ap);
        va_end(ap);
    }
    fn(ud, level, msg ? msg : line);
    if (msg != line)
        free(msg);
}

int l8_engine_create(const struct l8_model *m, enum l8_backend backend,
                     const struct l8_engine_opts *opts, struct l8_engine **out,
                     char err[L8_ERRLEN])
{
    const struct l8_engine_ops *ops = NULL;
    if (backend == L8_BACKEND_CPU)
        ops = &l8_engine_cpu_ops;
#if L8_HAVE_CUDA && defined(L8_ENGINE_CUDA)
    else if (backend == L8_BACKEND_CUDA)
        ops = &l8_engine_cuda_ops;
#endif
    if (!ops) {
        snprintf(err, L8_ERRLEN, "backend %s is not built in", l8_backend_name(backend));
        return -ENOTSUP;
    }
    struct l8_engine_opts o = opts ? *opts : (struct l8_engine_opts){ 0 };
    if (o.numerics != L8_NUMERICS_EXACT && o.numerics != L8_NUMERICS_FP8) {
        snprintf(err, L8_ERRLEN, "unknown numerics %d", (int)o.numerics);
        return -EINVAL;
    }
    if (o.kv_f32 && backend != L8_BACKEND_CPU) {
        snprintf(err, L8_ERRLEN, "kv_f32 is a cpu engine option");
        return -ENOTSUP;
    }
    if (o.lm_head_fp8 && backend != L8_BACKEND_CPU) {
        snprintf(err, L8_ERRLEN, "an fp8 lm_head is a cpu engine option");
        return -ENOTSUP;
    }
    if (o.page_size == 0)
        o.page_size = DEFAULT_PAGE_SIZE;
    if (o.max_step_tokens == 0)
        o.max_step_tokens = DEFAULT_MAX_STEP_TOKENS;
    if (o.max_seqs == 0)
        o.max_seqs = DEFAULT_MAX_SEQS;
    if (!o.log)
        o.log = l8_engine_log_stderr;
    if (m->cfg.head_dim % 2 != 0 || m->cfg.n_kv_heads == 0
        || m->cfg.n_heads % m->cfg.n_kv_heads != 0) {
        snprintf(err, L8_ERRLEN, "model heads unusable (head_dim %u, %u heads, %u kv heads)",
                 m->cfg.head_dim, m->cfg.n_heads, m->cfg.n_kv_heads);
        return -EINVAL;
    }
    struct l8_engine *e = calloc(1, sizeof(*e));
    if (!e) {
        snprintf(err, L8_ERRLEN, "out of memory");
        return -ENOMEM;
    }
    e->ops = ops;
    e->m = m;
    e->o = o;
    int r = ops->create(m, &o, &e->impl, &e->n_pages, &e->mem, err);
    if (r < 0) {
        free(e);
        return r;
    }
    *out = e;
    return 0;
}

void l8_engine_destroy(struct l8_engine *e)
{
    if (!e)
        return;
    e->ops->destroy(e->impl);
    free(e);
}

uint32_t l8_engine_n_pages(const struct l8_engine *e) { return e->n_pages; }
uint32_t l8_engine_page_size(const struct l8_engine *e) { return e->o.page_size; }
const struct l8_engine_mem *l8_engine_memory(const struct l8_engine *e) { return &e->mem; }

static int check_seq(const struct l8_engine *e, const struct l8_seq *s)
{
    const struct l8_config *c = &e->m->cfg;
    const uint32_t ps = e->o.page_size;
    if (s->n_tokens == 0 || !s->tokens || !s->pages)
        return -EINVAL;
    uint64_t end = (uint64_t)s->pos + s->n_tokens;
    if (end > c->max_pos || end > (uint64_t)e->n_pages * ps)
        return -EINVAL;
    if ((uint64_t)s->n_pages * ps < end)
        return -EINVAL;
    for (uint32_t i = 0; i < s->n_tokens; i++)
        if (s->tokens[i] >= c->vocab)
            return -EINVAL;
    const uint32_t used = (uint32_t)((end + ps - 1) / ps);
    for (uint32_t i = 0; i < used; i++)
        if (s->pages[i] >= e->n_pages)
            return -EINVAL;
    if (s->logits != L8_LOGITS_NONE && s->logits != L8_LOGITS_LAST && s->logits != L8_LOGITS_ALL)
        return -EINVAL;
    if (s->logits != L8_LOGITS_NONE && !s->logits_out)
        return -EINVAL;
    if (s->sample && (!s->sampling || (s->n_history && !s->history)))
        return -EINVAL;
    if (s->n_draft && (s->n_draft >= s->n_tokens ||
                       (s->sample && (!s->verify_out || s->n_history < s->n_draft))))
        return -EINVAL;
    return 0;
}

int l8_engine_step(struct l8_engine *e, struct l8_seq *seqs, uint32_t n_seqs)
{
    if (n_seqs == 0 || n_seqs > e->o.max_seqs || !seqs)
        return -EINVAL;
    uint64_t total = 0;
    for (uint32_t i = 0; i < n_seqs; i++) {
        int r = check_seq(e, &seqs[i]);
        if (r < 0)
            return r;
        total += seqs[i].n_tokens;
    }
    if (total > e->o.max_step_tokens)
        return -EINVAL;
    return e->ops->step(e->impl, seqs, n_seqs, e->masks_wait, e->masks_ud);
}

uint32_t l8_engine_verify_rows(const struct l8_engine *e)
{
    return e->ops->verify_rows ? e->ops->verify_rows(e->impl) : UINT32_MAX;
}

void l8_engine_set_masks_wait(struct l8_engine *e, l8_masks_wait_fn *fn, void *ud)
{
    e->masks_wait = fn;
    e->masks_ud = ud;
}
