/* embed.cu - embedding gather to the f32 residual stream. */
#include "common.cuh"

#define EMBED_THREADS 256

static __global__ void embed_kernel(const void *__restrict__ table, enum l8k_dtype dt,
                                    uint32_t vocab, uint32_t H, const int32_t *__restrict__ ids,
                                    float *__restrict__ out)
{
    l8k_pdl_wait();
    l8k_pdl_allow();
    int32_t id = ids[blockIdx.x];
    float *o = out + (size_t)blockIdx.x * H;
    if (id < 0 || (uint32_t)id >= vocab) {
        for (uint32_t i = threadIdx.x; i < H; i += blockDim.x)
            o[i] = __int_as_float(0x7fc00000);
        return;
    }
    if (dt == L8K_BF16) {
        const uint16_t *row = (const uint16_t *)table + (size_t)id * H;
        for (uint32_t i = threadIdx.x; i < H; i += blockDim.x)
            o[i] = l8k_bf16_to_float(row[i]);
    } else {
        const float *row = (const float *)table + (size_t)id * H;
        for (uint32_t i = threadIdx.x; i < H; i += blockDim.x)
            o[i] = row[i];
    }
}

extern "C" int l8k_embed(const void *table, enum l8k_dtype table_dt, uint32_t vocab, uint32_t H,
                         const int32_t *ids, uint32_t T, float *out, cudaStream_t st)
{
    if (!table || !ids || !out || H == 0 || (table_dt != L8K_BF16 && table_dt != L8K_F32))
        return -EINVAL;
    if (T == 0)
        return 0;
    return l8k_launch("embed_kernel", embed_kernel, dim3(T), dim3(EMBED_THREADS), st, table,
                      table_dt, vocab, H, ids, out);
}
