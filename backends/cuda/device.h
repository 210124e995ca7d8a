/*
 * device.h — the CUDA device layer's C interface. device.c is the only
 * code that calls the CUDA runtime API directly (the kernel launchers in
 * kernels/ only launch and read their own launch error). Nothing here
 * knows IR nodes: the plugin's node-level files (cuda-internal.h) do.
 *
 * Every function that can fail returns minfer_status and writes a message
 * naming what failed into the instance's error text (cu_ctx_error) or the
 * caller's buffer.
 */
#ifndef MINFER_CUDA_DEVICE_H
#define MINFER_CUDA_DEVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- process-wide ---- */

/* Number of CUDA devices, or 0 with "no CUDA device: <runtime text>" in
 * why[why_len]. Calls only cudaGetDeviceCount (no context creation). */
int cu_probe(char *why, size_t why_len);

/* Compute capability of a device (attributes only, no context): 0, or -1
 * when the runtime cannot say. */
int cu_device_cc(int device, int *major, int *minor);

/* Fills *out (name, cc, memory total/free, description). */
minfer_status cu_device_info(int device, struct minfer_device_info *out, char *err,
                             size_t err_len);

/* Frees the process-wide weight registry (every instance already gone). */
void cu_shutdown(void);

/* ---- instances ---- */

struct cu_ctx; /* one device, one non-blocking stream, one pool */

/* Creates an instance on device `device`. NULL on failure with the reason
 * in err[err_len]. */
struct cu_ctx *cu_ctx_new(int device, char *err, size_t err_len);
/* Synchronizes, frees the pool, scratch, staging and weight references,
 * destroys the stream. NULL is a no-op. */
void cu_ctx_free(struct cu_ctx *c);

/* The instance's error text ("" when none); valid until its next call. */
const char *cu_ctx_error(struct cu_ctx *c);
/* Sets the instance's error text (printf-style) and returns st. */
minfer_status cu_ctx_fail(struct cu_ctx *c, minfer_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Clears the error text. */
void cu_ctx_clear_error(struct cu_ctx *c);

/* The launch context kernels use (stream, device limits, error sink). */
struct kctx *cu_ctx_kctx(struct cu_ctx *c);

/* ---- pool ---- */

/* Exact-size reuse pool: a freed buffer is kept and handed to the next
 * request of the same size; memory returns to the driver only at
 * cu_ctx_free. Device OOM -> MINFER_ERR_DEVICE_OOM naming the request;
 * the instance stays usable. `what` names the request in messages. */
minfer_status cu_pool_alloc(struct cu_ctx *c, size_t size, const char *what, void **out);
/* Marks a pool buffer free; an address the pool did not hand out is
 * ignored and reported through the error text. */
void cu_pool_free(struct cu_ctx *c, void *p);
/* Bumps whenever the pool hands out fresh device memory. */
uint64_t cu_pool_generation(const struct cu_ctx *c);

/* Instance scratch slot `slot` (0..CU_SCRATCH_SLOTS-1) of at least size
 * bytes; grows (sync + realloc) on demand. */
#define CU_SCRATCH_SLOTS 5
minfer_status cu_scratch(struct cu_ctx *c, int slot, size_t size, void **out);
/* Whether cu_scratch(c, slot, size) would not grow (true for size 0). */
bool cu_scratch_holds(const struct cu_ctx *c, int slot, size_t size);

/* ---- transfers (ordered on the instance stream) ---- */

/* Host -> device through pinned staging; returns once the host bytes were
 * consumed (the device copy may still be in flight). */
minfer_status cu_write(struct cu_ctx *c, void *dst, const void *src, size_t size);
/* Device -> host through pinned staging, or in one copy when dst is
 * page-locked (cu_host_alloc); waits for all prior work. */
minfer_status cu_read(struct cu_ctx *c, void *dst, const void *src, size_t size);
/* Page-locked host memory (cudaHostAlloc), which cu_read fills by one
 * copy at the link's rate instead of through the staging buffer. */
minfer_status cu_host_alloc(struct cu_ctx *c, size_t size, void **ptr);
void cu_host_free(struct cu_ctx *c, void *ptr);
/* Device -> device, async on the stream. */
minfer_status cu_copy_d2d(struct cu_ctx *c, void *dst, const void *src, size_t size);
/* Fills device memory with a byte value, async on the stream. */
minfer_status cu_memset(struct cu_ctx *c, void *dst, int value, size_t size);

/* Waits for the stream; reports a latched error (named as such, never
 * blamed on a kernel) and any device-side contract violation the kernels
 * flagged since the last sync. */
minfer_status cu_sync(struct cu_ctx *c);

/* ---- weights (process-wide registry, per-instance references) ---- */

/* Uploads size bytes once, keyed by (device, name, size, fingerprint of the
 * bytes); the same key returns the same device address. */
minfer_status cu_weight_register(struct cu_ctx *c, const char *name, const void *host,
                                 size_t size, void **out);

/* ---- graph capture and replay (CUDA Graphs) ---- */

/* Starts capturing the instance's stream (cudaStreamCaptureModeThreadLocal:
 * other threads' captures and calls are unaffected). */
minfer_status cu_capture_begin(struct cu_ctx *c);
/* Ends the capture and instantiates it into *exec (an opaque
 * cudaGraphExec_t). On any failure the capture is ended and discarded, the
 * thread's latched error cleared, *exec is NULL and the error text says
 * what failed; the stream is usable again. */
minfer_status cu_capture_end(struct cu_ctx *c, void **exec);
/* Ends and discards a capture after an error inside the window (no
 * instantiation); clears the latch. Safe when no capture is open. */
void cu_capture_abort(struct cu_ctx *c);
/* True while the instance's stream is capturing. */
bool cu_capturing(struct cu_ctx *c);
/* Launches an instantiated graph on the instance's stream. */
minfer_status cu_graph_launch(struct cu_ctx *c, void *exec);
/* Destroys an instantiated graph (NULL is a no-op). */
void cu_graph_destroy(struct cu_ctx *c, void *exec);
/* Test hook: makes a call that capture forbids (a stream sync), which
 * invalidates the open capture the way a real fault would. */
minfer_status cu_capture_poison(struct cu_ctx *c);

/* ---- fault injection (tests) ---- */

/* The n-th device-layer call from now (allocation, copy, memset, kernel
 * launch, graph capture begin/end, graph launch, sync; process-wide) fails
 * once as the runtime call would, with an error text that says it was
 * injected; 0 disarms. */
void cu_test_fail_nth(uint64_t n);
/* Device-layer calls counted so far (process-wide). */
uint64_t cu_test_calls(void);

/* ---- timing (benchmarks) ---- */

/* Records a start event; cu_timer_stop records the end, waits and returns
 * elapsed milliseconds in *ms. */
minfer_status cu_timer_start(struct cu_ctx *c);
minfer_status cu_timer_stop(struct cu_ctx *c, float *ms);

/* Device memory the driver reports free/total for the instance's device. */
minfer_status cu_mem_info(struct cu_ctx *c, size_t *free_b, size_t *total_b);

#ifdef __cplusplus
}
#endif

#endif /* MINFER_CUDA_DEVICE_H */
