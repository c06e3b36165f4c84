/* fuzz.h - what the fuzz targets share. Each target defines
 * LLVMFuzzerTestOneInput: built with -Dfuzz=true (clang) it is a libFuzzer
 * program; otherwise replay.c runs it over its seed files as a test. An
 * input the target rejects must be rejected with a message; an input it
 * accepts must give values the daemon can compute with. A broken rule
 * aborts. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../test.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A broken rule aborts, as libFuzzer wants a crash (REQUIRE's exit would
 * not leave the input behind). */
#define FUZZ_CHECK(c)                                                             \
    do {                                                                          \
        if (!(c)) {                                                               \
            t_report("broken", __FILE__, __LINE__, #c, ": ");                     \
            abort();                                                              \
        }                                                                         \
    } while (0)

/* A private directory for this process's files, made once. */
const char *fuzz_dir(void);
/* Writes size bytes of data to dir/name; returns the path (static). */
const char *fuzz_write(const char *name, const uint8_t *data, size_t size);
