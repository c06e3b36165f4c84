/* fail.c - failure messages for daemon/model. */
#include "fail.h"

#include <stdarg.h>
#include <stdio.h>

int l8_fail_code(char err[L8_ERRLEN], int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, L8_ERRLEN, fmt, ap);
    va_end(ap);
    return code;
}
