/* read_file.h - a whole file into memory, with a cap on its size: the
 * checkpoint's JSON files (config.c, safetensors.c) and the tokenizer
 * llama8-mkmodel copies. */
#pragma once
#include <stddef.h>
#include "config.h"

/* Read a whole regular file of at most max bytes into a malloc'd,
 * NUL-terminated buffer (*out, *len without the NUL; len may be NULL).
 * Returns 0, or a negative errno with the message (naming path) in err;
 * nothing is written to *out on failure. */
int l8_read_file(const char *path, size_t max, char **out, size_t *len,
                 char err[L8_ERRLEN]);
