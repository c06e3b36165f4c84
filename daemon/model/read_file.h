/* read_file.h - the one way llama8 opens a file it reads: the checkpoint's
 * JSON files and shards, llama8d.conf, the tune cache and tokens files
 * (daemon, its tools) and tokenizer.json with its table cache
 * (libllama8client compiles this file too). Only a regular file, or a link
 * to one, of a bounded size is read: a FIFO, a device, a socket or a
 * directory is refused at once with what it is, where an open() or a read
 * would block or never end (a FIFO, /dev/zero). */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct stat;

/* What st is when l8_read_file refuses it unread: "a FIFO", "a character
 * device", "a block device", "a socket", "a directory"; NULL for a regular
 * file and for /dev/null (read as empty). */
const char *l8_file_kind(const struct stat *st);

/* Open path for reading (close-on-exec, never blocking on a FIFO) if it is
 * a regular file of at most max bytes. Returns the descriptor, its size in
 * *size (may be NULL), or a negative errno: from open(), -EISDIR (a
 * directory), -EINVAL (another kind of file), -EFBIG (over max), with the
 * message naming path in err (errlen bytes; err may be NULL). */
int l8_open_regular(const char *path, uint64_t max, uint64_t *size, char *err, size_t errlen);

/* Read such a file whole into a malloc'd, NUL-terminated buffer (*out, *len
 * without the NUL; len may be NULL). /dev/null is read as an empty file
 * (`llama8d --config /dev/null`: no configuration file). Returns 0, or a negative errno as
 * l8_open_regular's, -EIO for a read error or a file that changed size while
 * read, with the message in err; nothing is written to *out on failure. */
int l8_read_file(const char *path, size_t max, char **out, size_t *len, char *err,
                 size_t errlen);
