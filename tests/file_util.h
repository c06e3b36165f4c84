/* file_util.h - whole files in and out, for every test suite. */
#pragma once
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* dir/name, malloc'd. */
static inline char *t_path(const char *dir, const char *name)
{
    char *p;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        abort();
    return p;
}

/* Whole file into memory (NUL-terminated); NULL on error. */
static inline uint8_t *t_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return NULL;
    }
    b[n] = 0;
    fclose(f);
    if (len)
        *len = (size_t)n;
    return b;
}
