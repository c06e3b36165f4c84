/* stop_text.c - stop strings over streamed text (llama8_tokenizer.h).
 *
 * The matcher keeps the text it has not released yet. After each push it
 * looks for the earliest stop string in it; failing that, it keeps back
 * the longest tail that is a prefix of some stop string and releases the
 * rest. A released byte can never begin a match: from there on the text
 * neither held a whole stop string nor was the start of one. */
#include "llama8_tokenizer.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct l8tok_stop {
    char **stops;
    size_t *lens;
    size_t n;
    char *held;          /* [held_len]: text not released yet */
    size_t held_len, held_cap;
    char *out;           /* what push/flush hand back, NUL-terminated */
    size_t out_cap;
    bool done;           /* a stop string was found */
};

void l8tok_stop_free(l8tok_stop *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++)
        free(s->stops[i]);
    free(s->stops);
    free(s->lens);
    free(s->held);
    free(s->out);
    free(s);
}

int l8tok_stop_new(const char *const *stops, size_t n, l8tok_stop **out)
{
    for (size_t i = 0; i < n; i++)
        if (!stops[i] || !stops[i][0])
            return -EINVAL;
    l8tok_stop *s = calloc(1, sizeof *s);
    if (!s)
        return -ENOMEM;
    s->stops = calloc(n ? n : 1, sizeof *s->stops);
    s->lens = calloc(n ? n : 1, sizeof *s->lens);
    if (!s->stops || !s->lens)
        goto nomem;
    for (; s->n < n; s->n++) {
        if (!(s->stops[s->n] = strdup(stops[s->n])))
            goto nomem;
        s->lens[s->n] = strlen(stops[s->n]);
    }
    *out = s;
    return 0;
nomem:
    l8tok_stop_free(s);
    return -ENOMEM;
}

void l8tok_stop_reset(l8tok_stop *s)
{
    s->held_len = 0;
    s->done = false;
}

bool l8tok_stop_done(const l8tok_stop *s)
{
    return s->done;
}

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    char *b = realloc(*buf, c);
    if (!b)
        return -ENOMEM;
    *buf = b;
    *cap = c;
    return 0;
}

/* Hand back held[0, n) and keep the rest. */
static int release(l8tok_stop *s, size_t n, const char **text, size_t *len)
{
    if (grow(&s->out, &s->out_cap, n + 1) < 0)
        return -ENOMEM;
    if (n)
        memcpy(s->out, s->held, n);
    s->out[n] = 0;
    if (s->held_len > n)
        memmove(s->held, s->held + n, s->held_len - n);
    s->held_len -= n;
    *text = s->out;
    *len = n;
    return 0;
}

/* Does a stop string begin at held[i] and run to the end of held or past it? */
static bool stop_prefix_at(const l8tok_stop *s, size_t i)
{
    size_t tail = s->held_len - i;
    for (size_t k = 0; k < s->n; k++)
        if (s->lens[k] > tail && !memcmp(s->held + i, s->stops[k], tail))
            return true;
    return false;
}

int l8tok_stop_push(l8tok_stop *s, const char *piece, size_t n, const char **text, size_t *len)
{
    if (s->done) {
        *text = "";
        *len = 0;
        return 1;
    }
    /* Room for the largest release first: once the piece is taken, the
     * push cannot fail halfway. */
    if (grow(&s->held, &s->held_cap, s->held_len + n) < 0 ||
        grow(&s->out, &s->out_cap, s->held_len + n + 1) < 0)
        return -ENOMEM;
    if (n)
        memcpy(s->held + s->held_len, piece, n);
    s->held_len += n;
    /* The earliest whole stop string; for ties, either (they start alike). */
    size_t first = SIZE_MAX;
    for (size_t k = 0; k < s->n; k++) {
        if (s->lens[k] > s->held_len)
            continue;
        for (size_t i = 0; i + s->lens[k] <= s->held_len && i < first; i++)
            if (!memcmp(s->held + i, s->stops[k], s->lens[k])) {
                first = i;
                break;
            }
    }
    if (first != SIZE_MAX) {
        s->done = true;
        int rc = release(s, first, text, len);
        s->held_len = 0;
        return rc < 0 ? rc : 1;
    }
    size_t keep = 0;
    for (size_t i = 0; i < s->held_len; i++)
        if (stop_prefix_at(s, i)) {
            keep = s->held_len - i;
            break;
        }
    return release(s, s->held_len - keep, text, len);
}

int l8tok_stop_flush(l8tok_stop *s, const char **text, size_t *len)
{
    return release(s, s->held_len, text, len);
}
