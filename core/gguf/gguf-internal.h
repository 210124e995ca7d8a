/*
 * gguf-internal.h — what the GGUF reader (gguf.c) and writer
 * (gguf-write.c) share inside the core: the reader's limits, the
 * serialized form of a metadata value, and little-endian helpers.
 */
#ifndef MINFER_GGUF_INTERNAL_H
#define MINFER_GGUF_INTERNAL_H

#include <stdint.h>
#include <string.h>

#include "minfer/gguf.h"

/* ---- limits ---- */

/* Longest key (the GGUF spec's own limit). */
#define GGUF_MAX_KEY_LEN 65535u
/* Longest tensor name the reader takes. llama.cpp refuses names of 64
 * bytes or more, so the writer keeps to GGUF_WRITE_MAX_NAME_LEN. */
#define GGUF_MAX_NAME_LEN 255u
#define GGUF_WRITE_MAX_NAME_LEN 63u
/* Longest string value, alone or as an array element. The largest real
 * ones are chat templates (tens of KiB); 16 MiB leaves room for any. */
#define GGUF_MAX_STRING_LEN (16u * 1024u * 1024u)
/* Default and key of the data alignment. */
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_ALIGNMENT_KEY "general.alignment"
/* Smallest encodings: a key/value is a key length (8), one key byte, a
 * type (4) and a 1-byte value; a tensor info a name length (8), one
 * name byte, n_dims (4), one dimension (8), a type (4), an offset (8). */
#define GGUF_MIN_KV_BYTES 14u
#define GGUF_MIN_TENSOR_INFO_BYTES 33u
#define GGUF_HEADER_BYTES 24u

/* ---- little-endian helpers ---- */

static inline uint32_t gguf_rd_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t gguf_rd_u64(const uint8_t *p)
{
    return (uint64_t)gguf_rd_u32(p) | (uint64_t)gguf_rd_u32(p + 4) << 32;
}

static inline void gguf_wr_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void gguf_wr_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Bytes of one scalar of a metadata type; 0 for string, array and ids
 * outside the format. */
static inline uint32_t gguf_scalar_size(uint32_t t)
{
    switch (t) {
    case MINFER_GGUF_UINT8: case MINFER_GGUF_INT8: case MINFER_GGUF_BOOL: return 1;
    case MINFER_GGUF_UINT16: case MINFER_GGUF_INT16: return 2;
    case MINFER_GGUF_UINT32: case MINFER_GGUF_INT32: case MINFER_GGUF_FLOAT32: return 4;
    case MINFER_GGUF_UINT64: case MINFER_GGUF_INT64: case MINFER_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

/* ---- reader internals used by the writer ---- */

/* The serialized value of key i exactly as stored after its type tag
 * (for arrays: element type, count, elements), pointing into the file.
 * Lets the writer copy a key byte for byte. */
minfer_status minfer_gguf_kv_raw(const struct minfer_gguf *g, int64_t i, uint32_t *type,
                                 const uint8_t **bytes, uint64_t *len);

/* minfer_gguf_open_memory with MINFER_GGUF_OPEN_* flags (tests, fuzzing). */
struct minfer_gguf *minfer_gguf_open_memory_flags(const void *data, size_t size, uint32_t flags,
                                                  minfer_status *st, char *err, size_t err_len);

/* Sets the text minfer_gguf_last_error returns (writer argument errors). */
void minfer_gguf_set_last_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* True when the reader accepts tensors of this element type. */
bool minfer_gguf_tensor_type_readable(uint32_t type);

#endif /* MINFER_GGUF_INTERNAL_H */
