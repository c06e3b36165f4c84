/* fail.h - how daemon/model reports failures: a negative errno returned,
 * a message naming the file and the tensor or key written to err. */
#pragma once
#include <errno.h>
#include "config.h"

/* Format the message into err (cut at L8_ERRLEN) and return code. */
int l8_fail_code(char err[L8_ERRLEN], int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define l8_fail(err, ...) l8_fail_code(err, -EINVAL, __VA_ARGS__)
