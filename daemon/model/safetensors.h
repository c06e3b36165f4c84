/* safetensors.h - mmap'd safetensors files, single or sharded.
 *
 * Format: u64 little-endian header length N, N bytes of JSON
 * {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
 * then the data; offsets are relative to the end of the header.
 * Every tensor is validated on open: known dtype, offsets inside the file,
 * size == product(shape) * dtype size, no two tensors overlapping. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include "config.h"

enum l8_dtype { L8_F32, L8_F16, L8_BF16, L8_F8_E4M3, L8_I32, L8_I64, L8_U8, L8_DTYPE_COUNT };

#define L8_MAX_DIMS 4

struct l8_tensor {
    const char *name;       /* owned by the set */
    const char *file;       /* path of the shard it lives in, owned by the set */
    enum l8_dtype dtype;
    uint32_t n_dims;
    uint64_t shape[L8_MAX_DIMS];
    const void *data;       /* into the read-only mapping */
    uint64_t nbytes;
};

struct l8_tensor_set;       /* all tensors of a checkpoint directory */

/* Open DIR/model.safetensors, or the shards listed in
 * DIR/model.safetensors.index.json (which must map every tensor to the
 * shard that holds it). Returns 0 or -errno / -EINVAL with err set. */
int l8_st_open_dir(const char *dir, struct l8_tensor_set **out, char err[L8_ERRLEN]);
/* Open one .safetensors file. */
int l8_st_open_file(const char *path, struct l8_tensor_set **out, char err[L8_ERRLEN]);
void l8_st_close(struct l8_tensor_set *s);

/* NULL when absent. */
const struct l8_tensor *l8_st_find(const struct l8_tensor_set *s, const char *name);
uint32_t l8_st_count(const struct l8_tensor_set *s);
const struct l8_tensor *l8_st_at(const struct l8_tensor_set *s, uint32_t i);

const char *l8_dtype_name(enum l8_dtype t);   /* "F8_E4M3", ... */
size_t l8_dtype_size(enum l8_dtype t);

/* Writing: a simple writer used by llama8-mkmodel, llama8-run --logits-out
 * and the tests. Tensors are appended in the order given; data is copied
 * by the callback-free API below (whole tensor in memory). */
struct l8_st_writer;
int  l8_st_writer_open(const char *path, struct l8_st_writer **out, char err[L8_ERRLEN]);
/* Declare a tensor; data is written at finish. The pointer must stay valid
 * until l8_st_writer_finish. */
int  l8_st_writer_add(struct l8_st_writer *w, const char *name, enum l8_dtype dt,
                      uint32_t n_dims, const uint64_t *shape, const void *data);
/* Write header and data, close. metadata_json may be NULL ("{}" then) and
 * is written as "__metadata__" (an object of string values). */
int  l8_st_writer_finish(struct l8_st_writer *w, const char *metadata_json, char err[L8_ERRLEN]);

/* Streaming form (for checkpoints larger than memory): the tensor's bytes
 * are produced by fill(ctx, dst, nbytes) at finish, in the order added,
 * into a buffer the writer owns; while one tensor is written the next one
 * is filled, so peak memory is about two of the largest filled tensors.
 * fill returns 0 or a negative errno, which aborts finish. */
typedef int (*l8_st_fill_fn)(void *ctx, void *dst, uint64_t nbytes);
int  l8_st_writer_add_fill(struct l8_st_writer *w, const char *name, enum l8_dtype dt,
                           uint32_t n_dims, const uint64_t *shape,
                           l8_st_fill_fn fill, void *ctx);
/* Bytes of data declared so far (the sum of the tensors' sizes). */
uint64_t l8_st_writer_data_size(const struct l8_st_writer *w);
/* Discard a writer without writing (after a failed add); NULL is a no-op.
 * The file is written to PATH.partial and renamed to PATH only when finish
 * succeeds, so an aborted or failed writer leaves no file behind. */
void l8_st_writer_abort(struct l8_st_writer *w);
