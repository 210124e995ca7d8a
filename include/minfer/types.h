/*
 * minfer/types.h — what the application API (minfer.h) and the plugin
 * ABI (ir.h, backend.h) share: status codes and tensor element type ids.
 * Its own header so that minfer.h does not expose the graph IR
 * (docs/decisions/public-headers.md). Grows only by appending, like ir.h.
 */
#ifndef MINFER_TYPES_H
#define MINFER_TYPES_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- status ---- */

typedef enum minfer_status {
    MINFER_OK = 0,
    MINFER_ERR_INVALID_ARG = -1,   /* a caller passed something malformed */
    MINFER_ERR_NO_MEMORY = -2,     /* host allocation failed */
    MINFER_ERR_DEVICE_OOM = -3,    /* device allocation failed */
    MINFER_ERR_IO = -4,            /* read/write/open/mmap failed */
    MINFER_ERR_FORMAT = -5,        /* a file's contents are malformed */
    MINFER_ERR_UNSUPPORTED = -6,   /* valid, but not handled by this build */
    MINFER_ERR_PLUGIN = -7,        /* a plugin was refused or misbehaved */
    MINFER_ERR_BACKEND = -8,       /* a backend failed while executing */
    MINFER_ERR_NOT_FOUND = -9,     /* a named thing does not exist */
    MINFER_ERR_RANGE = -10,        /* a value is outside its allowed range */
    MINFER_ERR_STATE = -11,        /* call not valid in the object's state */
    MINFER_ERR_FULL = -12,         /* a cache has no room left (the error text names
                                      the sequence and the numbers) */
} minfer_status;

/* ---- element types ---- */

/* Values equal GGML's type ids so a GGUF tensor type maps directly.
 * Types this build cannot read are still named so errors can say which. */
enum minfer_type {
    MINFER_TYPE_F32 = 0,
    MINFER_TYPE_F16 = 1,
    MINFER_TYPE_Q4_0 = 2,
    MINFER_TYPE_Q4_1 = 3,
    MINFER_TYPE_Q5_0 = 6,
    MINFER_TYPE_Q5_1 = 7,
    MINFER_TYPE_Q8_0 = 8,
    MINFER_TYPE_Q8_1 = 9,
    MINFER_TYPE_Q2_K = 10,
    MINFER_TYPE_Q3_K = 11,
    MINFER_TYPE_Q4_K = 12,
    MINFER_TYPE_Q5_K = 13,
    MINFER_TYPE_Q6_K = 14,
    MINFER_TYPE_Q8_K = 15,
    MINFER_TYPE_IQ2_XXS = 16,
    MINFER_TYPE_IQ2_XS = 17,
    MINFER_TYPE_IQ3_XXS = 18,
    MINFER_TYPE_IQ1_S = 19,
    MINFER_TYPE_IQ4_NL = 20,
    MINFER_TYPE_IQ3_S = 21,
    MINFER_TYPE_IQ2_S = 22,
    MINFER_TYPE_IQ4_XS = 23,
    MINFER_TYPE_I8 = 24,
    MINFER_TYPE_I16 = 25,
    MINFER_TYPE_I32 = 26,
    MINFER_TYPE_I64 = 27,
    MINFER_TYPE_F64 = 28,
    MINFER_TYPE_IQ1_M = 29,
    MINFER_TYPE_BF16 = 30,
    MINFER_TYPE_TQ1_0 = 34,
    MINFER_TYPE_TQ2_0 = 35,
    MINFER_TYPE_MXFP4 = 39,
    MINFER_TYPE_COUNT = 40 /* one past the largest id; not a type */
};

/* Most dimensions of a tensor (GGUF's and the IR's). */
#define MINFER_MAX_DIMS 4

#ifdef __cplusplus
}
#endif

#endif /* MINFER_TYPES_H */
