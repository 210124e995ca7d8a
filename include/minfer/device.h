/*
 * minfer/device.h — what one device a backend plugin drives looks like,
 * as the application (minfer.h: minfer_runtime_device_info) and the plugin
 * (backend.h: the device_info slot) both see it. Its own header so that an
 * application needs no plugin ABI header and a plugin needs only
 * backend.h (docs/decisions/device-info-header.md).
 *
 * Growth: fields are appended; the caller sets struct_size to the size of
 * the struct it was compiled with and the writer fills at most that many
 * bytes, so old callers and new plugins (and the reverse) agree.
 */
#ifndef MINFER_DEVICE_H
#define MINFER_DEVICE_H

#include <stdint.h>

/* One device a plugin can drive. Strings are owned by the plugin and live
 * until shutdown. */
struct minfer_device_info {
    uint32_t struct_size;      /* set by the caller to sizeof its struct */
    char name[128];            /* e.g. "NVIDIA H200" or the CPU model */
    char description[128];     /* free text: ISA, driver, ... */
    uint64_t memory_total;     /* bytes; 0 if unknown */
    uint64_t memory_free;      /* bytes; 0 if unknown */
    int32_t cc_major, cc_minor;/* compute capability; 0 when not a GPU */
    uint32_t is_gpu;           /* 1 for discrete accelerators */
};

#endif /* MINFER_DEVICE_H */
