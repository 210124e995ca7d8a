/*
 * error.c — formatting errors into caller buffers (see error.h).
 */
#include "error.h"

#include <stdarg.h>
#include <stdio.h>

minfer_status errf(char *err, size_t err_len, minfer_status st, const char *fmt, ...)
{
    if (err && err_len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_len, fmt, ap);
        va_end(ap);
    }
    return st;
}
