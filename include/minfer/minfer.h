/*
 * minfer/minfer.h — the application API: runtime and plugins, models,
 * contexts, tokens, sampling.
 *
 * Ownership: every _new/_load returns an object the caller frees with the
 * matching _free; _free(NULL) is a no-op. Constructors return NULL on
 * failure, set *st and write a message into err[err_len] when given.
 */
#ifndef MINFER_H
#define MINFER_H

#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(_WIN32)
#define MINFER_API __declspec(dllexport)
#else
#define MINFER_API __attribute__((visibility("default")))
#endif

/* Version of the library, e.g. "0.1.0". Static string. */
MINFER_API const char *minfer_version(void);
/* Static text for a status code, e.g. "device out of memory". */
MINFER_API const char *minfer_status_str(minfer_status st);

/* Name of an element type ("q4_K", "f16"), or "unknown(N)" in a static
 * per-thread buffer for ids this build does not know. */
MINFER_API const char *minfer_type_name(uint32_t type);
/* Parses a type name case-insensitively; false if unknown. */
MINFER_API bool minfer_type_from_name(const char *name, uint32_t *type);

/* ---- sections below are filled in by their modules ---- */

#ifdef __cplusplus
}
#endif

#endif /* MINFER_H */
