/* fuzz_st_index.c - model.safetensors.index.json through l8_st_open_dir,
 * beside two fixed valid shards: a.safetensors (x, y) and b.safetensors
 * (z). Accepted: every tensor comes from the shard that holds it. */
#include "fuzz.h"

#include <string.h>

#include "safetensors.h"

/* A shard: the 8-byte header length, the JSON header, dlen data bytes. */
static void put_shard(const char *name, const char *json, size_t dlen)
{
    uint8_t buf[512];
    const size_t n = strlen(json);
    for (int i = 0; i < 8; i++)
        buf[i] = (uint8_t)((uint64_t)n >> (8 * i));
    memcpy(buf + 8, json, n);
    memset(buf + 8 + n, 0x3c, dlen);
    fuzz_write(name, buf, 8 + n + dlen);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {
        put_shard("a.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"y\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[8,12]}}", 12);
        put_shard("b.safetensors", "{\"__metadata__\":{\"format\":\"pt\"},\"z\":{\"dtype\":\"BF16\","
                  "\"shape\":[1,2],\"data_offsets\":[0,4]}}", 4);
        once = true;
    }
    fuzz_write("model.safetensors.index.json", data, size);
    struct l8_tensor_set *s = NULL;
    char err[L8_ERRLEN] = "";
    if (l8_st_open_dir(fuzz_dir(), &s, err) != 0) {
        FUZZ_CHECK(err[0]);
        return 0;
    }
    const uint32_t n = l8_st_count(s);
    FUZZ_CHECK(n >= 1 && n <= 3);
    for (uint32_t i = 0; i < n; i++) {
        const struct l8_tensor *t = l8_st_at(s, i);
        const char *b = strrchr(t->file, '/');
        FUZZ_CHECK(b && !strcmp(b + 1, strcmp(t->name, "z") ? "a.safetensors" : "b.safetensors"));
    }
    l8_st_close(s);
    return 0;
}
