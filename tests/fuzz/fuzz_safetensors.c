/* fuzz_safetensors.c - one .safetensors file through l8_st_open_file. The
 * reader's source is included so that its mapping is in view: every
 * accepted tensor must lie inside the file's data section, with the bytes
 * its dtype and shape say, names sorted and found by lookup. */
#include "fuzz.h"

#include "../../daemon/model/safetensors.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *path = fuzz_write("model.safetensors", data, size);
    struct l8_tensor_set *s = NULL;
    char err[L8_ERRLEN] = "";
    if (l8_st_open_file(path, &s, err) != 0) {
        FUZZ_CHECK(err[0] && memchr(err, 0, sizeof err));   /* a refusal says why */
        return 0;
    }
    FUZZ_CHECK(s->n_files == 1 && s->files[0].size == size);
    const uint8_t *base = s->files[0].map, *end = base + size;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--)
        hlen = hlen << 8 | base[i];
    const uint8_t *d0 = base + 8 + hlen;
    for (uint32_t i = 0; i < l8_st_count(s); i++) {
        const struct l8_tensor *t = l8_st_at(s, i);
        FUZZ_CHECK(t->name && (unsigned)t->dtype < L8_DTYPE_COUNT && t->n_dims <= L8_MAX_DIMS);
        uint64_t want = l8_dtype_size(t->dtype);
        for (uint32_t d = 0; d < t->n_dims; d++)
            want *= t->shape[d];
        const uint8_t *p = t->data;
        FUZZ_CHECK(want == t->nbytes && p >= d0 && p <= end &&
                   t->nbytes <= (uint64_t)(end - p));
        if (t->nbytes) {   /* touch both ends */
            volatile uint8_t x = p[0];
            x = p[t->nbytes - 1];
            (void)x;
        }
        FUZZ_CHECK(!i || strcmp(l8_st_at(s, i - 1)->name, t->name) < 0);
        FUZZ_CHECK(l8_st_find(s, t->name) == t);
    }
    l8_st_close(s);
    return 0;
}
