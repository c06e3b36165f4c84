/* fuzz_config.c - config.json through l8_config_load, as the daemon reads
 * it. Accepted: the values the engine computes with, as kept (f32), are
 * finite and in range, and RoPE's frequencies come out finite. */
#include "fuzz.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "config.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_write("config.json", data, size);
    struct l8_config c;
    char err[L8_ERRLEN] = "";
    int r = l8_config_load(fuzz_dir(), &c, err);
    if (r != 0) {
        FUZZ_CHECK(r == -EINVAL && err[0] && memchr(err, 0, sizeof err));
        return 0;
    }
    FUZZ_CHECK(c.hidden && c.inter && c.n_layers && c.n_heads && c.n_kv_heads && c.head_dim);
    FUZZ_CHECK(c.n_heads % c.n_kv_heads == 0 && c.head_dim % 2 == 0);
    FUZZ_CHECK(c.n_eos <= L8_MAX_EOS && c.n_ignore <= L8_MAX_IGNORE);
    for (uint32_t i = 0; i < c.n_eos; i++)
        FUZZ_CHECK(c.eos[i] >= 0 && (uint32_t)c.eos[i] < c.vocab);
    FUZZ_CHECK(c.bos == -1 || (c.bos >= 0 && (uint32_t)c.bos < c.vocab));
    FUZZ_CHECK(isfinite(c.rms_eps) && c.rms_eps > 0 && c.rms_eps < 1);
    FUZZ_CHECK(isfinite(c.rope_theta) && c.rope_theta > 1);
    if (c.rope_type == L8_ROPE_LLAMA3)
        FUZZ_CHECK(isfinite(c.rope_factor) && c.rope_factor > 0 && c.rope_low_freq_factor > 0 &&
                   isfinite(c.rope_high_freq_factor) &&
                   c.rope_high_freq_factor > c.rope_low_freq_factor);
    for (uint32_t i = 0; i < c.n_ignore; i++)
        FUZZ_CHECK(memchr(c.ignore[i], 0, sizeof c.ignore[i]));
    float *inv = malloc(sizeof(float) * (c.head_dim / 2));
    FUZZ_CHECK(inv);
    l8_rope_inv_freq(&c, inv);
    for (uint32_t i = 0; i < c.head_dim / 2; i++)
        FUZZ_CHECK(isfinite(inv[i]) && inv[i] >= 0);
    free(inv);
    (void)l8_config_ignores(&c, "lm_head");
    (void)l8_config_ignores(&c, "model.layers.0.mlp.down_proj");
    return 0;
}
