/* fuzz_conf.c - llama8d's configuration, as the daemon reads it at start:
 *  1. the whole input, NULs included, is llama8d.conf (--config FILE);
 *  2. the input's bytes up to the first NUL are the file, the NUL-separated
 *     strings after it flags given after --config FILE (at most 16);
 *  3. the whole input through the text parser alone.
 * Each configuration accepted then goes through the start-up derivation
 * (l8d_conf_derive) for models of several context lengths, as llama8d does
 * before and after reading the model. Accepted: strings terminated, each
 * limit inside its range, derived sizes a client accepts (l8_shm.h);
 * refused: with a message, and a NUL byte never accepted. */
#include "fuzz.h"

#include <errno.h>
#include <string.h>

#include "conf.h"
#include "proto/l8_shm.h"

/* max_position_embeddings of the models derived against (0: before the
 * model is read); 1 is a model no request fits. */
static const uint32_t model_pos[] = { 0, 1, 2, 64, 131072, L8D_MAX_CTX };

static void check_accepted(const struct l8d_conf *c)
{
    FUZZ_CHECK(memchr(c->model, 0, sizeof c->model) && memchr(c->socket, 0, sizeof c->socket) &&
               memchr(c->tune_file, 0, sizeof c->tune_file) &&
               memchr(c->profile_file, 0, sizeof c->profile_file) &&
               memchr(c->tokenizer, 0, sizeof c->tokenizer) &&
               memchr(c->allowed_group, 0, sizeof c->allowed_group));
    FUZZ_CHECK(c->model[0] && c->eq_entries >= 64 && c->eq_entries <= L8_MAX_RING_ENTRIES &&
               l8_is_pow2(c->eq_entries));
    FUZZ_CHECK(c->max_batch && c->max_step_tokens >= c->max_batch && c->threads >= 0);
    FUZZ_CHECK(c->max_requests_per_client >= 1 &&
               c->max_requests_per_client <= L8D_MAX_REQUESTS_PER_CLIENT);
    FUZZ_CHECK(c->max_ctx == 0 || (c->max_ctx >= L8D_MIN_CTX && c->max_ctx <= L8D_MAX_CTX));
    FUZZ_CHECK(c->page_size >= 1 && c->page_size <= L8D_MAX_PAGE_SIZE);
    FUZZ_CHECK(c->max_clients >= 1 && (uint64_t)c->max_clients + c->admin_clients <=
                                          L8D_MAX_CONNECTIONS);
    FUZZ_CHECK(c->max_clients_per_uid >= 1 && c->max_clients_per_uid <= c->max_clients);
    FUZZ_CHECK(c->max_requests >= 1 && c->max_requests <= L8D_MAX_REQUESTS &&
               c->max_requests_per_uid >= 1 && c->max_requests_per_uid <= c->max_requests);
    FUZZ_CHECK(c->draft_max >= 1 && c->draft_max <= L8D_DRAFT_MAX);
    FUZZ_CHECK(c->socket_mode <= 07777 &&
               (c->spin_us <= L8D_SPIN_MAX_US || c->spin_us == L8D_AUTO));
    FUZZ_CHECK(c->kv_pages <= L8D_MAX_KV_PAGES && c->kv_mib <= L8D_MAX_KV_MIB);

    for (size_t i = 0; i < sizeof model_pos / sizeof model_pos[0]; i++) {
        struct l8d_sizes z;
        char err[L8D_ERRLEN] = "";
        if (l8d_conf_derive(c, model_pos[i], &z, err) < 0) {
            FUZZ_CHECK(err[0] && memchr(err, 0, sizeof err));
            continue;
        }
        FUZZ_CHECK(model_pos[i] != 1);
        const uint32_t pos = model_pos[i] ? model_pos[i] : L8D_MAX_CTX;
        FUZZ_CHECK(z.max_ctx >= L8D_MIN_CTX && z.max_ctx <= pos &&
                   (!c->max_ctx || z.max_ctx <= c->max_ctx));
        FUZZ_CHECK(z.max_prompt == z.max_ctx - 1 && z.max_new >= 1 && z.max_new <= z.max_prompt);
        FUZZ_CHECK((uint64_t)z.ctx_pages * c->page_size >= z.max_ctx);
        FUZZ_CHECK(z.sq_entries >= 2 * (uint64_t)c->max_requests_per_client &&
                   z.eq_entries == c->eq_entries);
        /* The arena holds a longest prompt and a longest constraint. */
        FUZZ_CHECK((uint64_t)z.max_prompt * 4 + L8_MAX_CONSTRAINT <= z.arena_size);
        /* What session.c hands a client, and what the client checks. */
        struct l8_shm_hdr h;
        FUZZ_CHECK(z.shm_size &&
                   l8_shm_layout(z.sq_entries, z.eq_entries, z.arena_size, &h) == z.shm_size &&
                   l8_shm_hdr_valid(&h, z.shm_size));
    }
}

/* From the arguments, as llama8d's start does; accepted or refused. */
static void from_args(int argc, char **argv)
{
    struct l8d_conf c;
    char err[L8D_ERRLEN] = "";
    int rc = l8d_conf_from_args(&c, argc, argv, err);
    if (rc == 0)
        check_accepted(&c);
    else
        FUZZ_CHECK(rc == 1 || (rc == -EINVAL && err[0] && memchr(err, 0, sizeof err)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {   /* defaults must not depend on the environment */
        unsetenv("RUNTIME_DIRECTORY");
        unsetenv("CACHE_DIRECTORY");
        once = true;
    }
    const uint8_t *nul = memchr(data, 0, size);

    /* 1. The whole input is the file. */
    char whole[512];
    snprintf(whole, sizeof whole, "%s", fuzz_write("whole.conf", data, size));
    from_args(3, (char *[]){ "llama8d", "--config", whole, NULL });

    /* 2. A file and flags. */
    const size_t flen = nul ? (size_t)(nul - data) : size;
    const char *path = fuzz_write("llama8d.conf", data, flen);
    char *rest = NULL, *argv[20] = { "llama8d", "--config", (char *)path };
    int argc = 3;
    if (nul) {
        const size_t rl = size - flen - 1;
        FUZZ_CHECK((rest = malloc(rl + 1)));
        memcpy(rest, nul + 1, rl);
        rest[rl] = 0;
        for (char *p = rest; p < rest + rl && argc < 19; p += strlen(p) + 1)
            argv[argc++] = p;
    }
    argv[argc] = NULL;
    for (int i = 3; i < argc; i++)   /* these print and exit: not parsing */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--version"))
            argv[i] = "--x";
    from_args(argc, argv);
    free(rest);

    /* 3. The text parser alone, every byte: a NUL is never accepted. */
    struct l8d_conf c;
    char err[L8D_ERRLEN] = "";
    l8d_conf_defaults(&c);
    int rc = l8d_conf_parse(&c, (const char *)data, size, "fuzz.conf", err);
    FUZZ_CHECK(rc == 0 || (rc == -EINVAL && err[0]));
    FUZZ_CHECK(rc != 0 || !nul);
    return 0;
}
