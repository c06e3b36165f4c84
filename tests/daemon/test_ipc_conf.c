/* test_ipc_conf: llama8d.conf parsing and flag precedence. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../test.h"

#include "conf.h"
#include "proto/l8_shm.h"

/* l8d_conf_compare's calls, as "key was->now live|restart;" */
static char changes[1024];
static void note_change(const char *key, const char *was, const char *now, bool live, void *ctx)
{
    (void)ctx;
    size_t n = strlen(changes);
    snprintf(changes + n, sizeof changes - n, "%s %s->%s %s;", key, was, now,
             live ? "live" : "restart");
}

int main(void)
{
    alarm(60);  /* a config read that hangs (a FIFO, /dev/zero) fails instead */
    struct l8d_conf c;
    char err[L8D_ERRLEN] = "";
    l8d_conf_defaults(&c);
    const char *text = "# comment\n\nmodel = /m\n  kv_pages=128\nmax_batch = 8 \n"
                       "numerics = fp8\nlog_level = debug\nsocket_mode = 0600\nbackend = cpu\n";
    CHECK(l8d_conf_parse_text(&c, text, "t.conf", err) == 0, "%s", err);
    CHECK(!strcmp(c.model, "/m") && c.kv_pages == 128 && c.max_batch == 8, "values");
    CHECK(c.numerics == L8_NUMERICS_FP8 && c.log_level == L8_LOG_DEBUG, "enums");
    CHECK(c.socket_mode == 0600 && c.backend == L8_BACKEND_CPU, "mode/backend");

    l8d_conf_defaults(&c);
    CHECK(l8d_conf_parse_text(&c, "model = /m\nkv_pagez = 3\n", "x.conf", err) == -EINVAL, "unknown");
    CHECK(!strcmp(err, "x.conf:2: unknown key 'kv_pagez'"), "message: %s", err);
    CHECK(l8d_conf_parse_text(&c, "\n\nmax_batch = -1\n", "x.conf", err) == -EINVAL, "negative");
    CHECK(strncmp(err, "x.conf:3: max_batch: bad value '-1'", 34) == 0, "message: %s", err);
    /* strtoull skips \f \v \r and takes a sign: -2^64+1 would have been 1 */
    CHECK(l8d_conf_parse_text(&c, "max_batch = \f-18446744073709551615\n", "x.conf", err) ==
          -EINVAL, "a sign behind a form feed");
    CHECK(l8d_conf_parse_text(&c, "kv_mib = +5\n", "x.conf", err) == -EINVAL, "a plus sign");
    /* kv_mib: 16 TiB at most (its bytes fit 64 bits with room to spare). */
    CHECK(l8d_conf_parse_text(&c, "kv_mib = 16777216\n", "x.conf", err) == 0 &&
          c.kv_mib == 16777216, "kv_mib 2^24: %s", err);
    CHECK(l8d_conf_parse_text(&c, "kv_mib = 17592186044416\n", "x.conf", err) == -EINVAL &&
          !strcmp(err, "x.conf:1: kv_mib = 17592186044416: must be in [0, 16777216]"),
          "kv_mib 2^44: %s", err);
    CHECK(l8d_conf_parse_text(&c, "max_batch\n", "x.conf", err) == -EINVAL, "no '='");
    CHECK(!strcmp(err, "x.conf:1: expected 'key = value'"), "message: %s", err);
    CHECK(l8d_conf_parse_text(&c, "numerics = fast\n", "x.conf", err) == -EINVAL, "bad enum");

    /* prefix_cache: per user unless told otherwise. */
    l8d_conf_defaults(&c);
    CHECK(c.prefix_cache == L8D_PREFIX_CACHE_USER, "prefix_cache default %d", (int)c.prefix_cache);
    CHECK(l8d_conf_parse_text(&c, "prefix_cache = shared\n", "t.conf", err) == 0 &&
          c.prefix_cache == L8D_PREFIX_CACHE_SHARED, "shared: %s", err);
    CHECK(l8d_conf_parse_text(&c, "prefix_cache = off\n", "t.conf", err) == 0 &&
          c.prefix_cache == L8D_PREFIX_CACHE_OFF, "off: %s", err);
    CHECK(l8d_conf_parse_text(&c, "prefix_cache = uid\n", "x.conf", err) == -EINVAL &&
          strstr(err, "x.conf:1: prefix_cache: bad value 'uid' (user|shared|off"), "message: %s",
          err);

    /* spin_us: auto (decided by the engine in use) unless given, in µs up to 1 s. */
    l8d_conf_defaults(&c);
    CHECK(c.spin_us == L8D_AUTO, "spin_us default is auto");
    CHECK(l8d_conf_parse_text(&c, "spin_us = 250\n", "t.conf", err) == 0 &&
          c.spin_us == 250, "spin_us 250: %s", err);
    CHECK(l8d_conf_parse_text(&c, "spin_us = auto\n", "t.conf", err) == 0 && c.spin_us == L8D_AUTO,
          "spin_us auto: %s", err);
    CHECK(l8d_conf_parse_text(&c, "spin_us = 0\n", "t.conf", err) == 0 &&
          c.spin_us == 0, "spin_us 0: %s", err);
    CHECK(l8d_conf_parse_text(&c, "spin_us = 1000000\n", "t.conf", err) == 0 &&
          c.spin_us == 1000000, "spin_us 1 s: %s", err);
    CHECK(l8d_conf_parse_text(&c, "spin_us = 1000001\n", "x.conf", err) == -EINVAL &&
          !strcmp(err, "x.conf:1: spin_us = 1000001: must be auto or in [0, 1000000]"),
          "message: %s", err);
    CHECK(l8d_conf_parse_text(&c, "spin_us = on\n", "x.conf", err) == -EINVAL, "spin_us on");

    /* The cpu engine's FP8 lm_head: off unless asked for. */
    l8d_conf_defaults(&c);
    CHECK(!c.lm_head_fp8, "lm_head_fp8 defaults to false");
    CHECK(l8d_conf_parse_text(&c, "lm_head_fp8 = true\n", "t.conf", err) == 0 && c.lm_head_fp8,
          "lm_head_fp8 = true: %s", err);
    CHECK(l8d_conf_parse_text(&c, "lm_head_fp8 = fp8\n", "x.conf", err) == -EINVAL &&
          strstr(err, "x.conf:1: lm_head_fp8: bad value 'fp8' (BOOL"), "message: %s", err);

    /* The cuda engine's measuring switches: off by default (the measured
     * crossover, graphs, PDL, no profile); gemv_max_m auto or a row count. */
    l8d_conf_defaults(&c);
    CHECK(c.gemv_max_m == L8D_AUTO && c.cuda_graphs && c.cuda_pdl && !c.profile_file[0],
          "measuring defaults: gemv_max_m %s, cuda_graphs %d, cuda_pdl %d, profile_file '%s'",
          c.gemv_max_m == L8D_AUTO ? "auto" : "N", c.cuda_graphs, c.cuda_pdl, c.profile_file);
    CHECK(l8d_conf_parse_text(&c, "gemv_max_m = 0\ncuda_graphs = false\ncuda_pdl = no\n"
                              "profile_file = /tmp/p.json\n", "t.conf", err) == 0 &&
          c.gemv_max_m == 0 && !c.cuda_graphs && !c.cuda_pdl &&
          !strcmp(c.profile_file, "/tmp/p.json"), "measuring keys: %s", err);
    CHECK(l8d_conf_parse_text(&c, "gemv_max_m = 4294967294\n", "t.conf", err) == 0 &&
          c.gemv_max_m == 4294967294u, "gemv_max_m 2^32 - 2: %s", err);
    CHECK(l8d_conf_parse_text(&c, "gemv_max_m = auto\n", "t.conf", err) == 0 &&
          c.gemv_max_m == L8D_AUTO,
          "gemv_max_m auto: %s", err);
    CHECK(l8d_conf_parse_text(&c, "gemv_max_m = 4294967295\n", "x.conf", err) == -EINVAL &&
          !strcmp(err, "x.conf:1: gemv_max_m = 4294967295: must be auto or in [0, 4294967294]"),
          "message: %s", err);
    CHECK(c.gemv_max_m == L8D_AUTO, "a refused gemv_max_m changed it");
    CHECK(l8d_conf_parse_text(&c, "gemv_max_m = -1\n", "x.conf", err) == -EINVAL, "gemv_max_m -1");
    CHECK(l8d_conf_parse_text(&c, "\ncuda_graphs = off\n", "x.conf", err) == -EINVAL &&
          strstr(err, "x.conf:2: cuda_graphs: bad value 'off' (BOOL"), "message: %s", err);
    CHECK(l8d_conf_parse_text(&c, "cuda_pdl = 2\n", "x.conf", err) == -EINVAL &&
          strstr(err, "x.conf:1: cuda_pdl: bad value '2' (BOOL"), "message: %s", err);
    char *argvm[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--gemv-max-m", "8",
                      "--cuda-graphs=0", "--cuda-pdl", "false", "--profile-file", "/tmp/q.json",
                      NULL };
    CHECK(l8d_conf_from_args(&c, 12, argvm, err) == 0 &&
              c.gemv_max_m == 8 && !c.cuda_graphs && !c.cuda_pdl &&
              !strcmp(c.profile_file, "/tmp/q.json"),
          "measuring flags: %s", err);
    char *argvg[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--gemv-max-m", "x",
                      NULL };
    CHECK(l8d_conf_from_args(&c, 7, argvg, err) == -EINVAL &&
              strstr(err, "gemv_max_m: bad value 'x'"),
          "--gemv-max-m x: %s", err);

    /* speculate: auto unless told; draft_max 8, within [1, 16]. */
    l8d_conf_defaults(&c);
    CHECK(c.speculate == L8D_SPECULATE_AUTO && c.draft_max == 8, "speculate default %d, %u",
          (int)c.speculate, c.draft_max);
    char *argvs[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--speculate",
                      "ngram", "--draft-max", "16", NULL };
    CHECK(l8d_conf_from_args(&c, 9, argvs, err) == 0 && c.speculate == L8D_SPECULATE_NGRAM &&
              c.draft_max == 16, "--speculate ngram --draft-max 16: %s", err);
    CHECK(l8d_conf_parse_text(&c, "speculate = eagle\n", "x.conf", err) == -EINVAL &&
              strstr(err, "x.conf:1: speculate: bad value 'eagle' (auto|ngram|off"),
          "speculate eagle: %s", err);
    char *argvd[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--draft-max", "17",
                      NULL };
    CHECK(l8d_conf_from_args(&c, 7, argvd, err) == -EINVAL &&
              !strcmp(err, "draft_max = 17: must be in [1, 16]"), "--draft-max 17: %s", err);
    argvd[6] = "0";
    CHECK(l8d_conf_from_args(&c, 7, argvd, err) == -EINVAL, "--draft-max 0: %s", err);

    /* tune_file: systemd's CacheDirectory= (the first of a list) by default,
     * nowhere without it, and an empty value means nowhere. */
    setenv("CACHE_DIRECTORY", "/var/cache/llama8d:/var/cache/other", 1);
    l8d_conf_defaults(&c);
    CHECK(!strcmp(c.tune_file, "/var/cache/llama8d/tune"), "tune_file default: %s", c.tune_file);
    CHECK(l8d_conf_parse_text(&c, "tune_file =\n", "t.conf", err) == 0 && !c.tune_file[0],
          "empty tune_file: '%s'", c.tune_file);
    unsetenv("CACHE_DIRECTORY");
    l8d_conf_defaults(&c);
    CHECK(!c.tune_file[0], "tune_file without CACHE_DIRECTORY: %s", c.tune_file);

    /* File then flags: flags win; --config must exist when given. */
    FILE *f = fopen("/tmp/l8ipc-test.conf", "w");
    fputs("model = /from-file\nmax_batch = 4\npage_size = 32\n", f);
    fclose(f);
    char *argv1[] = { "llama8d", "--config", "/tmp/l8ipc-test.conf", "--max-batch", "16",
                      "--max-step-tokens=64", NULL };
    CHECK(l8d_conf_from_args(&c, 6, argv1, err) == 0, "%s", err);
    CHECK(!strcmp(c.model, "/from-file") && c.max_batch == 16 && c.page_size == 32 &&
          c.max_step_tokens == 64, "precedence");
    char *argv2[] = { "llama8d", "--config", "/tmp/l8ipc-test.conf", "--bogus", "1", NULL };
    CHECK(l8d_conf_from_args(&c, 5, argv2, err) == -EINVAL, "bogus flag");
    CHECK(strstr(err, "unknown option '--bogus'"), "message: %s", err);
    /* Unknown before anything else: not "needs a value" as the last
     * argument, and named without its value. */
    char *argv2b[] = { "llama8d", "--model", "/m", "--frobnicate", NULL };
    CHECK(l8d_conf_from_args(&c, 4, argv2b, err) == -EINVAL &&
          !strcmp(err, "unknown option '--frobnicate' (see --help)"), "an unknown last flag: %s",
          err);
    char *argv2c[] = { "llama8d", "--model", "/m", "--frob=1", NULL };
    CHECK(l8d_conf_from_args(&c, 4, argv2c, err) == -EINVAL &&
          !strcmp(err, "unknown option '--frob' (see --help)"), "an unknown flag=value: %s", err);
    char *argv3[] = { "llama8d", "--config", "/nonexistent/llama8d.conf", "--model", "/m", NULL };
    CHECK(l8d_conf_from_args(&c, 5, argv3, err) == -EINVAL, "missing config");
    char *argv3d[] = { "llama8d", "--config", "/tmp", "--model", "/m", NULL };
    CHECK(l8d_conf_from_args(&c, 5, argv3d, err) == -EINVAL &&
          strstr(err, "/tmp: is a directory, not a regular file"), "a directory as the config: %s",
          err);
    /* What is not a regular file is refused at once, named: /dev/zero (its read would never
     * end), a FIFO (its open would wait for a writer); /dev/null is an empty file. */
    char *argv3z[] = { "llama8d", "--config", "/dev/zero", "--model", "/m", NULL };
    CHECK(l8d_conf_from_args(&c, 5, argv3z, err) == -EINVAL &&
          strstr(err, "/dev/zero: is a character device, not a regular file"), "/dev/zero: %s",
          err);
    char fifo[] = "/tmp/l8ipc-test.fifo";
    unlink(fifo);
    REQUIRE(mkfifo(fifo, 0600) == 0);
    char *argv3f[] = { "llama8d", "--config", fifo, "--model", "/m", NULL };
    CHECK(l8d_conf_from_args(&c, 5, argv3f, err) == -EINVAL &&
          strstr(err, "/tmp/l8ipc-test.fifo: is a FIFO, not a regular file"), "a FIFO: %s", err);
    unlink(fifo);
    REQUIRE(truncate("/tmp/l8ipc-test.conf", L8D_CONF_MAX + 1) == 0);
    CHECK(l8d_conf_from_args(&c, 5, (char *[]){ "llama8d", "--config", "/tmp/l8ipc-test.conf",
                                                "--model", "/m", NULL }, err) == -EINVAL &&
          strstr(err, "is larger than 1048576 bytes"), "over the bound: %s", err);
    char *argv4[] = { "llama8d", "--config", "/dev/null", NULL };
    CHECK(l8d_conf_from_args(&c, 3, argv4, err) == -EINVAL && strstr(err, "no model"), "no model");
    char *argv5[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--max-batch", "64",
                      "--max-step-tokens", "32", NULL };
    CHECK(l8d_conf_from_args(&c, 9, argv5, err) == -EINVAL, "step budget < batch");
    char *argv6[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--max-batch",
                      "65537", "--max-step-tokens", "70000", NULL };
    CHECK(l8d_conf_from_args(&c, 9, argv6, err) == -EINVAL &&
              !strcmp(err, "max_batch = 65537: must be in [1, 65536]"), "max_batch 65537: %s", err);
    char *argv7[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--max-clients",
                      "1048576", "--admin-clients", "1", NULL };
    CHECK(l8d_conf_from_args(&c, 9, argv7, err) == -EINVAL &&
              strstr(err, "max_clients + admin_clients must be at most 1048576"),
          "max_clients + admin_clients past 2^20: %s", err);
    remove("/tmp/l8ipc-test.conf");

    /* Each number within its range where it is set; the message names the
     * key, the value given and the range. */
    static const struct { const char *line, *err; } ranges[] = {
        { "max_requests_per_client = 600000",
          "max_requests_per_client = 600000: must be in [1, 65536]" },
        { "max_requests_per_client = 1073741824",
          "max_requests_per_client = 1073741824: must be in [1, 65536]" },
        { "max_requests_per_client = 99999999999999999999",
          "max_requests_per_client = 99999999999999999999: must be in [1, 65536]" },
        { "max_ctx = 1", "max_ctx = 1: must be 0 or in [2, 16777216]" },
        { "page_size = 0", "page_size = 0: must be in [1, 4096]" },
        { "max_clients = 0", "max_clients = 0: must be in [1, 1048576]" },
        { "max_clients_per_uid = 1048577", "max_clients_per_uid = 1048577: must be in [1, 1048576]" },
        { "max_requests_per_uid = 0", "max_requests_per_uid = 0: must be in [1, 1048576]" },
        { "eq_entries = 96", "eq_entries = 96: must be a power of two in [64, 1048576]" },
        { "threads = 4097", "threads = 4097: must be in [0, 4096]" },
        { "socket_mode = 10000", "socket_mode = 10000: must be in [0, 07777]" },
        { "max_batch = 0x10", "max_batch: bad value '0x10': must be a decimal number in [1, 65536]" },
        { "max_ctx = 1e3",
          "max_ctx: bad value '1e3': must be a decimal number, 0 or in [2, 16777216]" },
        { "spin_us = 0x10", "spin_us: bad value '0x10': must be auto or a decimal number in [0, 1000000]" },
        { "socket_mode = 0668", "socket_mode: bad value '0668': must be an octal mode in [0, 07777]" },
    };
    for (size_t i = 0; i < sizeof ranges / sizeof ranges[0]; i++) {
        char line[128], want[L8D_ERRLEN];
        l8d_conf_defaults(&c);
        struct l8d_conf before = c;
        snprintf(line, sizeof line, "model = /m\n%s\n", ranges[i].line);
        snprintf(want, sizeof want, "r.conf:2: %s", ranges[i].err);
        CHECK(l8d_conf_parse_text(&c, line, "r.conf", err) == -EINVAL && !strcmp(err, want),
              "%s: '%s', not '%s'", ranges[i].line, err, want);
        CHECK(!memcmp((char *)&c + offsetof(struct l8d_conf, grammar_cache),
                      (char *)&before + offsetof(struct l8d_conf, grammar_cache),
                      offsetof(struct l8d_conf, given) - offsetof(struct l8d_conf, grammar_cache)),
              "%s: a refused value changed the configuration", ranges[i].line);
    }
    /* Decimal, leading zeros and all (strtoull's base 0 read 010 as 8);
     * socket_mode alone is octal. The ends of a range are in it. */
    l8d_conf_defaults(&c);
    CHECK(l8d_conf_parse_text(&c, "max_batch = 010\nmax_ctx = 0064\nsocket_mode = 600\n"
                              "max_requests_per_client = 65536\nmax_ctx = 2\n", "t.conf", err) == 0 &&
              c.max_batch == 10 && c.max_ctx == 2 && c.socket_mode == 0600 &&
              c.max_requests_per_client == 65536, "decimal: %s (max_batch %u)", err, c.max_batch);
    CHECK(l8d_conf_parse_text(&c, "max_ctx = 0\nkv_pages = 0\n", "t.conf", err) == 0 &&
          c.max_ctx == 0, "max_ctx 0: %s", err);

    /* A NUL byte is an error on its line, not the end of the file. */
    l8d_conf_defaults(&c);
    static const char nul3[] = "max_batch = 8\n# x\nmax_ctx = 64\0\nmax_ctx = 1\n",
                      nul_end[] = "max_batch = 8\n\0";
    CHECK(l8d_conf_parse(&c, nul3, sizeof nul3 - 1, "n.conf", err) == -EINVAL &&
          !strcmp(err, "n.conf:3: NUL byte"), "a NUL: %s", err);
    CHECK(c.max_batch == 8 && c.max_ctx == 0, "the lines before the NUL: %u, %u", c.max_batch,
          c.max_ctx);
    CHECK(l8d_conf_parse(&c, nul_end, sizeof nul_end - 1, "n.conf", err) == -EINVAL &&
          !strcmp(err, "n.conf:2: NUL byte"), "a NUL at the end: %s", err);
    f = fopen("/tmp/l8ipc-nul.conf", "w");
    REQUIRE(f && fwrite("model = /m\nmax_batch = 8\0\n", 1, 26, f) == 26 && fclose(f) == 0);
    char *argvn[] = { "llama8d", "--config", "/tmp/l8ipc-nul.conf", NULL };
    CHECK(l8d_conf_from_args(&c, 3, argvn, err) == -EINVAL &&
          !strcmp(err, "/tmp/l8ipc-nul.conf:2: NUL byte"), "a NUL in the file: %s", err);
    remove("/tmp/l8ipc-nul.conf");
    /* A string too long says so. */
    char longsock[200];
    memset(longsock, 'a', sizeof longsock);
    memcpy(longsock, "socket = /", 10);
    longsock[10 + 108] = 0;
    CHECK(l8d_conf_parse_text(&c, longsock, "s.conf", err) == -EINVAL &&
          !strcmp(err, "s.conf:1: socket: a value of 109 bytes is too long (at most 107)"),
          "a long socket: %s", err);

    /* Per-uid shares: 64 connections, 1024 requests by default, lowered to
     * max_clients / max_requests when those are smaller; given above them,
     * refused. max_clients_per_uid is live, max_requests_per_uid is not. */
    char *argvu[] = { "llama8d", "--config", "/dev/null", "--model", "/m", "--max-clients", "8",
                      "--max-requests", "100", NULL, NULL, NULL };
    CHECK(l8d_conf_from_args(&c, 5, argvu, err) == 0 && c.max_clients_per_uid == 64 &&
          c.max_requests_per_uid == 1024, "per-uid defaults: %s", err);
    CHECK(l8d_conf_from_args(&c, 9, argvu, err) == 0 && c.max_clients_per_uid == 8 &&
          c.max_requests_per_uid == 100, "per-uid defaults lowered: %u, %u: %s",
          c.max_clients_per_uid, c.max_requests_per_uid, err);
    argvu[9] = "--max-clients-per-uid";
    argvu[10] = "9";
    CHECK(l8d_conf_from_args(&c, 11, argvu, err) == -EINVAL &&
          !strcmp(err, "max_clients_per_uid = 9: must be at most max_clients (8)"),
          "max_clients_per_uid 9 of 8: %s", err);
    argvu[10] = "8";
    CHECK(l8d_conf_from_args(&c, 11, argvu, err) == 0 && c.max_clients_per_uid == 8,
          "max_clients_per_uid 8 of 8: %s", err);
    argvu[9] = "--max-requests-per-uid";
    argvu[10] = "101";
    CHECK(l8d_conf_from_args(&c, 11, argvu, err) == -EINVAL &&
          !strcmp(err, "max_requests_per_uid = 101: must be at most max_requests (100)"),
          "max_requests_per_uid 101 of 100: %s", err);

    /* The start-up derivation: each size within what a client accepts,
     * and a setting no client could be served with refused by name, even
     * past the parser (no spin in a power-of-two loop). */
    struct l8d_sizes z;
    l8d_conf_defaults(&c);
    CHECK(l8d_conf_derive(&c, 131072, &z, err) == 0 && z.max_ctx == 131072 &&
          z.max_prompt == 131071 && z.max_new == 131071 && z.sq_entries == 128 &&
          z.eq_entries == 4096 && z.ctx_pages == 8192, "defaults: %s", err);
    struct l8_shm_hdr h;
    CHECK(z.shm_size == l8_shm_layout(z.sq_entries, z.eq_entries, z.arena_size, &h) &&
          z.shm_size && z.arena_size >= 131071 * 4 + L8_MAX_CONSTRAINT, "shm %llu, arena %u",
          (unsigned long long)z.shm_size, z.arena_size);
    c.max_ctx = 64;
    c.max_new_tokens = 100;
    CHECK(l8d_conf_derive(&c, 131072, &z, err) == 0 && z.max_ctx == 64 && z.max_new == 63,
          "max_ctx 64: %u, %u: %s", z.max_ctx, z.max_new, err);
    c.max_ctx = 0;
    CHECK(l8d_conf_derive(&c, 2, &z, err) == 0 && z.max_ctx == 2 && z.max_prompt == 1 &&
          z.max_new == 1, "a model of 2 positions: %s", err);
    CHECK(l8d_conf_derive(&c, 1, &z, err) == -EINVAL &&
          strstr(err, "the model's max_position_embeddings (1) is less than the 2 positions"),
          "a model of 1 position: %s", err);
    c.max_requests_per_client = 65536;
    CHECK(l8d_conf_derive(&c, 0, &z, err) == 0 && z.sq_entries == 131072 &&
          z.max_ctx == L8D_MAX_CTX, "65536 requests a client: %s", err);
    const uint32_t past[] = { 600000, 1u << 30, (1u << 31) + 1, UINT32_MAX };
    for (size_t i = 0; i < sizeof past / sizeof past[0]; i++) {
        c.max_requests_per_client = past[i];
        CHECK(l8d_conf_derive(&c, 131072, &z, err) == -EINVAL &&
              strstr(err, "max_requests_per_client = ") && strstr(err, ": must be in [1, 65536]"),
              "max_requests_per_client %u: %s", past[i], err);
    }
    l8d_conf_defaults(&c);
    c.eq_entries = 96;
    CHECK(l8d_conf_derive(&c, 131072, &z, err) == -EINVAL &&
          !strcmp(err, "eq_entries = 96: must be a power of two in [64, 1048576]"), "%s", err);
    l8d_conf_defaults(&c);
    c.kv_pages = 1u << 24;
    c.page_size = 4096;
    CHECK(l8d_conf_derive(&c, 131072, &z, err) == -EINVAL &&
          strstr(err, "kv_pages = 16777216 of page_size = 4096"), "a pool past 2^31: %s", err);

    /* A reload: each key that differs, both values as the file spells them,
     * and whether it applies at once; take_live copies those and no other. */
    struct l8d_conf a, b;
    l8d_conf_defaults(&a);
    l8d_conf_defaults(&b);
    CHECK(l8d_conf_compare(&a, &b, note_change, NULL) == 0 && !changes[0], "equal: %s", changes);
    CHECK(l8d_conf_parse_text(&b, "log_level = debug\nkv_mib = 512\nspin_us = 30\n"
                              "socket_mode = 0600\nbackend = cuda\nmodel = /m2\n"
                              "hello_timeout_ms = 7\nno_warmup = yes\n", "t.conf", err) == 0,
          "%s", err);
    CHECK(l8d_conf_compare(&a, &b, note_change, NULL) == 8, "8 keys differ: %s", changes);
    CHECK(!strcmp(changes, "model ->/m2 restart;kv_mib 0->512 restart;"
                           "socket_mode 0660->0600 restart;hello_timeout_ms 5000->7 live;"
                           "log_level info->debug live;spin_us auto->30 live;"
                           "backend auto->cuda restart;no_warmup false->true restart;"),
          "changes: %s", changes);
    l8d_conf_take_live(&a, &b);
    CHECK(a.log_level == L8_LOG_DEBUG && a.hello_timeout_ms == 7 &&
              a.spin_us == 30 && a.kv_mib == 0 && !a.model[0] && a.backend == L8_BACKEND_AUTO &&
              a.socket_mode == 0660 && !a.no_warmup,
          "take_live");
    changes[0] = 0;
    CHECK(l8d_conf_compare(&a, &b, note_change, NULL) == 5 && !strstr(changes, "live"),
          "after take_live, the restart keys differ: %s", changes);
    if (t_failures)
        return 1;
    printf("ok\n");
    return 0;
}
