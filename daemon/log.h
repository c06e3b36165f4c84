/* log.h - llama8d's logging: stderr, one line per message, with levels.
 *
 * Under journald (JOURNAL_STREAM set and matching stderr) each line starts
 * with sd-daemon's "<N>" priority prefix, so the journal keeps the level;
 * otherwise a readable "llama8d: warning: " prefix. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum l8_log_level { L8_LOG_ERR = 3, L8_LOG_WARNING = 4, L8_LOG_NOTICE = 5,
                    L8_LOG_INFO = 6, L8_LOG_DEBUG = 7 };

void l8_log_init(enum l8_log_level max_level);
void l8_log_set_level(enum l8_log_level max_level);
bool l8_log_enabled(enum l8_log_level level);
/* "err", "warning", "notice", "info", "debug" (or 3..7) -> level; -EINVAL. */
int l8_log_parse_level(const char *s, enum l8_log_level *out);
/* "err" ... "debug": the configuration's spelling. */
const char *l8_log_level_name(enum l8_log_level level);
void l8_log(enum l8_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* The engine's log callback (engine.h's l8_engine_log_fn, syslog's levels,
 * which are these): each line of msg as its own message at level, so the
 * journal keeps the level of every line of a report. ud is unused. */
void l8_log_lines(void *ud, int level, const char *msg);
/* Text someone else chose (a client's name), made fit for a log line: at
 * most cap - 1 bytes of src[0, n), valid UTF-8 characters kept whole, every
 * byte of an ill-formed sequence and every control character (C0, DEL,
 * C1) as '?'. journald shows a line that is not UTF-8 only as a blob. */
void l8_log_text(char *dst, size_t cap, const char *src, size_t n);

/* A message a peer can make repeat (a refused connection, a protocol
 * violation) goes out at most once per L8_LOG_RATE_NS from one place: the
 * first passes, the others are counted. l8_log_ratelimit() says whether
 * this one passes, and then, in *suppressed, how many did not since the
 * last that did. A zeroed struct starts it. */
#define L8_LOG_RATE_NS (10ull * 1000000000ull)
struct l8_ratelimit { uint64_t last_ns, suppressed; bool started; };
bool l8_log_ratelimit(struct l8_ratelimit *rl, uint64_t now_ns, uint64_t *suppressed);
/* "" or " (N more like it not logged)", for the end of that message. */
const char *l8_log_more(char buf[64], uint64_t suppressed);

#define log_err(...)    l8_log(L8_LOG_ERR, __VA_ARGS__)
#define log_warn(...)   l8_log(L8_LOG_WARNING, __VA_ARGS__)
#define log_notice(...) l8_log(L8_LOG_NOTICE, __VA_ARGS__)
#define log_info(...)   l8_log(L8_LOG_INFO, __VA_ARGS__)
#define log_debug(...)  do { if (l8_log_enabled(L8_LOG_DEBUG)) l8_log(L8_LOG_DEBUG, __VA_ARGS__); } while (0)
