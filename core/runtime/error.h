/*
 * error.h — the one way core code reports a failure: format the message
 * into an error buffer (the caller's err[err_len], or the object's own,
 * e.g. a context's c->err) and return the status, so a failure reads
 * `return errf(err, err_len, MINFER_ERR_FORMAT, "...", ...);`.
 * A subsystem that adds context to every message of its own (the GGUF
 * parser's "gguf: FILE: ", a plugin's last error, a graph's first
 * failure) wraps these functions instead of formatting by hand.
 * docs/decisions/core-error-idiom.md says why.
 */
#ifndef MINFER_CORE_ERROR_H
#define MINFER_CORE_ERROR_H

#include <stdarg.h>
#include <stddef.h>

#include "minfer/ir.h"

/* Writes the formatted message into err[err_len] (when err is non-NULL and
 * err_len > 0, truncating) and returns st. */
minfer_status errf(char *err, size_t err_len, minfer_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* errf with a va_list, for the wrappers above. */
minfer_status verrf(char *err, size_t err_len, minfer_status st, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Appends the formatted message to what err already holds (a context
 * prefix a wrapper wrote with errf), truncating; returns st. */
minfer_status verrf_append(char *err, size_t err_len, minfer_status st, const char *fmt,
                           va_list ap) __attribute__((format(printf, 4, 0)));

#endif
