/*
 * minfer/gguf.h — reading and writing GGUF files (v2 and v3).
 *
 * The reader maps the file and validates every count, size and offset
 * before use: a malformed file is refused with a message naming the field,
 * its value and the byte offset, never read out of bounds. Strings and
 * tensor data returned by the reader point into the mapping and live until
 * minfer_gguf_close. Multi-byte values inside arrays may be unaligned: copy
 * them with memcpy.
 *
 * Limits (documented in core/gguf/gguf.c, which enforces them): keys up to
 * 65535 bytes, tensor names up to 255 (the writer: 63, llama.cpp's
 * limit), string values and array strings up to 16 MiB, arrays as long as
 * the file can hold, no arrays of arrays, n_dims 1..4, dimensions >= 1,
 * general.alignment a u32 power of two (default 32), little-endian v2/v3.
 */
#ifndef MINFER_GGUF_H
#define MINFER_GGUF_H

#include "minfer.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Metadata value types, as numbered in the GGUF format. */
enum minfer_gguf_type {
    MINFER_GGUF_UINT8 = 0,
    MINFER_GGUF_INT8 = 1,
    MINFER_GGUF_UINT16 = 2,
    MINFER_GGUF_INT16 = 3,
    MINFER_GGUF_UINT32 = 4,
    MINFER_GGUF_INT32 = 5,
    MINFER_GGUF_FLOAT32 = 6,
    MINFER_GGUF_BOOL = 7,
    MINFER_GGUF_STRING = 8,
    MINFER_GGUF_ARRAY = 9,
    MINFER_GGUF_UINT64 = 10,
    MINFER_GGUF_INT64 = 11,
    MINFER_GGUF_FLOAT64 = 12,
};

struct minfer_gguf; /* an open, validated file */

struct minfer_gguf_tensor {
    const char *name;            /* NUL-terminated copy, owned by the reader */
    uint32_t type;               /* enum minfer_type */
    uint32_t n_dims;             /* 1..4 */
    int64_t ne[MINFER_MAX_DIMS]; /* unused dims are 1 */
    uint64_t offset;             /* absolute byte offset of the data in the file */
    uint64_t size;               /* bytes */
    const void *data;            /* into the mapping */
};

/* ---- reader ---- */

/* Opens and validates path. On failure returns NULL, sets *st and writes a
 * message (what, value, offset) into err[err_len]. err may be NULL. */
MINFER_API struct minfer_gguf *minfer_gguf_open(const char *path, minfer_status *st,
                                                char *err, size_t err_len);
/* Same over caller memory (not copied; must outlive the handle). */
MINFER_API struct minfer_gguf *minfer_gguf_open_memory(const void *data, size_t size,
                                                       minfer_status *st, char *err,
                                                       size_t err_len);
MINFER_API void minfer_gguf_close(struct minfer_gguf *g); /* NULL is a no-op */

/* minfer_gguf_open with flags. MINFER_GGUF_OPEN_ANY_TYPE also accepts
 * tensors of GGUF types this build cannot compute with (q2_K, the IQ
 * family, ...; their sizes are still checked), for tools such as
 * `minfer info` that only describe a file. Loaders use minfer_gguf_open,
 * which refuses them by name. */
#define MINFER_GGUF_OPEN_ANY_TYPE 0x1u
MINFER_API struct minfer_gguf *minfer_gguf_open_flags(const char *path, uint32_t flags,
                                                      minfer_status *st, char *err,
                                                      size_t err_len);

MINFER_API uint32_t minfer_gguf_version(const struct minfer_gguf *g);
MINFER_API uint64_t minfer_gguf_alignment(const struct minfer_gguf *g);
MINFER_API uint64_t minfer_gguf_data_offset(const struct minfer_gguf *g);
MINFER_API const void *minfer_gguf_base(const struct minfer_gguf *g, uint64_t *size);

/* Metadata by index (0..count-1) or key. find returns -1 when absent. */
MINFER_API int64_t minfer_gguf_kv_count(const struct minfer_gguf *g);
MINFER_API int64_t minfer_gguf_find_key(const struct minfer_gguf *g, const char *key);
MINFER_API const char *minfer_gguf_kv_key(const struct minfer_gguf *g, int64_t i);
MINFER_API enum minfer_gguf_type minfer_gguf_kv_type(const struct minfer_gguf *g, int64_t i);

/* Typed reads by key. MINFER_ERR_NOT_FOUND when absent, MINFER_ERR_FORMAT
 * when the stored type does not fit the request (the message says which),
 * MINFER_ERR_RANGE when the value does not fit the out type.
 * get_i64 accepts every integer type and bool; get_f64 every number. */
MINFER_API minfer_status minfer_gguf_get_i64(const struct minfer_gguf *g, const char *key,
                                             int64_t *out);
MINFER_API minfer_status minfer_gguf_get_u64(const struct minfer_gguf *g, const char *key,
                                             uint64_t *out);
MINFER_API minfer_status minfer_gguf_get_f64(const struct minfer_gguf *g, const char *key,
                                             double *out);
MINFER_API minfer_status minfer_gguf_get_bool(const struct minfer_gguf *g, const char *key,
                                              bool *out);
/* *s is not NUL-terminated; *len is its length in bytes. */
MINFER_API minfer_status minfer_gguf_get_str(const struct minfer_gguf *g, const char *key,
                                             const char **s, size_t *len);
/* Arrays: element type and count; for numeric arrays *data points at n
 * packed little-endian elements. For string arrays use get_arr_str. */
MINFER_API minfer_status minfer_gguf_get_arr(const struct minfer_gguf *g, const char *key,
                                             enum minfer_gguf_type *elem_type, uint64_t *n,
                                             const void **data);
MINFER_API minfer_status minfer_gguf_get_arr_str(const struct minfer_gguf *g, const char *key,
                                                 uint64_t i, const char **s, size_t *len);
/* The same reads by index, for tools that walk every key. */
MINFER_API minfer_status minfer_gguf_kv_arr(const struct minfer_gguf *g, int64_t i,
                                            enum minfer_gguf_type *elem_type, uint64_t *n,
                                            const void **data);
MINFER_API minfer_status minfer_gguf_kv_arr_str(const struct minfer_gguf *g, int64_t i,
                                                uint64_t j, const char **s, size_t *len);
/* Scalar value by index: *data points at the packed value (or for a string
 * at its bytes, with *len set). */
MINFER_API minfer_status minfer_gguf_kv_scalar(const struct minfer_gguf *g, int64_t i,
                                               const void **data, size_t *len);

/* Tensors. find returns NULL when absent. */
MINFER_API int64_t minfer_gguf_tensor_count(const struct minfer_gguf *g);
MINFER_API const struct minfer_gguf_tensor *minfer_gguf_tensor(const struct minfer_gguf *g,
                                                               int64_t i);
MINFER_API const struct minfer_gguf_tensor *minfer_gguf_find_tensor(const struct minfer_gguf *g,
                                                                    const char *name);

MINFER_API const char *minfer_gguf_type_name(enum minfer_gguf_type t);
/* Bytes of one scalar of a metadata type; 0 for string, array and values
 * outside the format. */
MINFER_API size_t minfer_gguf_scalar_size(enum minfer_gguf_type t);

/* The message of this thread's last failed typed read (get_*, kv_*) or
 * writer call (set*, add_tensor): which key or tensor, what it holds and
 * what was asked. Static per-thread buffer, overwritten by the next
 * failure. */
MINFER_API const char *minfer_gguf_last_error(void);

/* ---- writer ---- */

struct minfer_gguf_writer;

/* Streams a tensor's bytes: called with consecutive chunks until size
 * bytes are produced. Return MINFER_OK or an error to abort the write. */
typedef minfer_status (*minfer_gguf_fill_fn)(void *user, uint64_t offset, void *dst,
                                             size_t size);

MINFER_API struct minfer_gguf_writer *minfer_gguf_writer_new(uint32_t version);
MINFER_API void minfer_gguf_writer_free(struct minfer_gguf_writer *w);
/* Setting a key twice replaces the value. Values are copied. */
MINFER_API minfer_status minfer_gguf_writer_set(struct minfer_gguf_writer *w, const char *key,
                                                enum minfer_gguf_type type, const void *value);
MINFER_API minfer_status minfer_gguf_writer_set_str(struct minfer_gguf_writer *w,
                                                    const char *key, const char *s, size_t len);
MINFER_API minfer_status minfer_gguf_writer_set_arr(struct minfer_gguf_writer *w,
                                                    const char *key,
                                                    enum minfer_gguf_type elem_type,
                                                    const void *data, uint64_t n);
MINFER_API minfer_status minfer_gguf_writer_set_arr_str(struct minfer_gguf_writer *w,
                                                        const char *key,
                                                        const char *const *strs,
                                                        const size_t *lens, uint64_t n);
/* Copies key i of an open file (any type, arrays included). */
MINFER_API minfer_status minfer_gguf_writer_copy_kv(struct minfer_gguf_writer *w,
                                                    const struct minfer_gguf *g, int64_t i);
/* Adds a tensor whose bytes come from data (borrowed until write returns)
 * or, when data is NULL, from fill(user, ...). */
MINFER_API minfer_status minfer_gguf_writer_add_tensor(struct minfer_gguf_writer *w,
                                                       const char *name, uint32_t type,
                                                       uint32_t n_dims, const int64_t *ne,
                                                       const void *data,
                                                       minfer_gguf_fill_fn fill, void *user);
/* Writes path through a temporary beside it that appears under path only
 * once complete: an interrupted or failed write leaves no file. Linux's
 * O_TMPFILE makes the temporary unnamed, so even a killed process leaves
 * nothing (a named path.tmp-* file is the fallback). path must be a regular
 * file or a new name: a device, FIFO, socket or directory is refused
 * (MINFER_ERR_INVALID_ARG, the message names the kind); a symlink is
 * followed and its target replaced, the link kept. */
MINFER_API minfer_status minfer_gguf_writer_write(struct minfer_gguf_writer *w, const char *path,
                                                  char *err, size_t err_len);
/* While minfer_gguf_writer_write runs: the temporary file's path (owned by
 * w), else NULL: /proc/self/fd/N for an unnamed O_TMPFILE (unlinking that
 * fails harmlessly: nothing needs removing), else the named temporary.
 * Reading it is async-signal-safe, so a SIGINT handler can unlink() it and
 * an interrupted run leaves no temporary behind either. */
MINFER_API const char *minfer_gguf_writer_temp_path(const struct minfer_gguf_writer *w);

#ifdef __cplusplus
}
#endif

#endif /* MINFER_GGUF_H */
