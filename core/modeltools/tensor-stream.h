/*
 * tensor-stream.h — feeds the GGUF writer's fill callback with tensor rows
 * produced in parallel (by quantize and synth). A tensor is described by
 * its row size, row count and a function that produces rows [r0, r1) into
 * a buffer; the stream answers the writer's arbitrary (offset, size)
 * requests by producing whole windows of rows on n worker threads,
 * directly into the writer's buffer when the request is row-aligned.
 */
#ifndef MINFER_TENSOR_STREAM_H
#define MINFER_TENSOR_STREAM_H

#include <pthread.h>

#include "minfer/minfer.h"

/* Produces rows [r0, r1) of one tensor into dst (row_bytes each).
 * scratch is this worker's private buffer of the stream's scratch size.
 * Called concurrently for disjoint ranges; must be thread-safe. */
typedef minfer_status (*tstream_rows_fn)(void *user, int64_t r0, int64_t r1, void *dst,
                                         void *scratch, char *err, size_t err_len);

struct tstream;

struct tstream_tensor {
    struct tstream *s;
    const char *name;  /* for messages */
    size_t row_bytes;
    int64_t n_rows;
    tstream_rows_fn rows;
    void *user;
};

/* n_threads <= 0: one per online CPU. scratch_bytes: per-worker scratch.
 * total: bytes of all tensors, for progress. NULL on allocation failure. */
struct tstream *tstream_new(int n_threads, size_t scratch_bytes, uint64_t total,
                            minfer_progress_fn progress, void *progress_user);
/* Optional: fills fail with MINFER_ERR_STATE ("cancelled") once *cancel is
 * nonzero; checked before each window of rows. */
void tstream_set_cancel(struct tstream *s, const volatile int *cancel);
void tstream_free(struct tstream *s);

/* The minfer_gguf_fill_fn to pass with a struct tstream_tensor * as user. */
minfer_status tstream_fill(void *user, uint64_t offset, void *dst, size_t size);

/* err for a failed minfer_gguf_writer_write of path (status st, message
 * writer_msg): the first reason a row function (or the cancel check)
 * reported, when there is one (the writer's message only wraps it: "the
 * fill callback failed ..."), else the writer's. Returns st. */
minfer_status tstream_write_failed(const struct tstream *s, minfer_status st, const char *path,
                                   const char *writer_msg, char *err, size_t err_len);

/* Number of worker threads the stream uses. */
int tstream_threads(const struct tstream *s);

/* Online CPUs (at least 1). */
int tstream_default_threads(void);

#endif
