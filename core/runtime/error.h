/*
 * error.h — the one way core code reports a failure to a caller that gave
 * an (err, err_len) buffer.
 */
#ifndef MINFER_CORE_ERROR_H
#define MINFER_CORE_ERROR_H

#include <stddef.h>

#include "minfer/ir.h"

/* Writes the formatted message into err[err_len] (when err is non-NULL and
 * err_len > 0, truncating) and returns st, so a failure reads
 * `return errf(err, err_len, MINFER_ERR_FORMAT, "...", ...);`. */
minfer_status errf(char *err, size_t err_len, minfer_status st, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
