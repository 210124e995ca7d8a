/*
 * error.c — formatting errors into error buffers (see error.h).
 */
#include "error.h"

#include <stdio.h>
#include <string.h>

minfer_status verrf(char *err, size_t err_len, minfer_status st, const char *fmt, va_list ap)
{
    if (err && err_len)
        vsnprintf(err, err_len, fmt, ap);
    return st;
}

minfer_status errf(char *err, size_t err_len, minfer_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    verrf(err, err_len, st, fmt, ap);
    va_end(ap);
    return st;
}

minfer_status verrf_append(char *err, size_t err_len, minfer_status st, const char *fmt,
                           va_list ap)
{
    if (err && err_len) {
        size_t k = strnlen(err, err_len - 1);
        vsnprintf(err + k, err_len - k, fmt, ap);
    }
    return st;
}
