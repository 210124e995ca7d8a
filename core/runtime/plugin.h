/*
 * plugin.h — internal view of the loaded backend plugins (core only).
 *
 * The scheduler and model code find a backend here and call its slots
 * through p->iface. p->iface points at the core's own copy of the plugin's
 * table: bytes past the plugin's struct_size (or past what the negotiated
 * minor defines) are zero, so an absent slot is simply NULL. Use
 * PLUGIN_HAS() for optional slots and for any slot added after ABI 1.0.
 *
 * Lifetime: a struct minfer_plugin lives as long as the runtime that
 * returned it. Every instance created through it must be destroyed before
 * minfer_runtime_free.
 */
#ifndef MINFER_CORE_PLUGIN_H
#define MINFER_CORE_PLUGIN_H

#include <stddef.h>

#include "minfer/backend.h"
#include "minfer/minfer.h"

struct minfer_plugin {
    const struct minfer_backend_iface *iface; /* core-owned, zero-padded copy */
    uint32_t iface_size;    /* bytes of the plugin's table that are valid */
    uint16_t abi_minor;     /* negotiated: min(core minor, plugin minor) */
    void *handle;           /* dlopen handle */
    char *path;             /* real path of the .so */
    const char *name;       /* == iface->name, copied and sanitised */
    const char *version;    /* copied and sanitised */
    int score;              /* probe result (> 0) */
};

/* True when the negotiated table has this slot and it is not NULL. */
#define PLUGIN_HAS(p, slot)                                                                \
    (offsetof(struct minfer_backend_iface, slot) +                                         \
             sizeof(((struct minfer_backend_iface *)0)->slot) <=                           \
         (p)->iface_size &&                                                                \
     (p)->iface->slot != NULL)

/* The loaded plugin of that backend name (the highest-scoring candidate),
 * or NULL if none is loaded. */
const struct minfer_plugin *runtime_find_backend(const struct minfer_runtime *rt,
                                                 const char *name);
/* Loaded plugins, in search order (one per backend name). */
size_t runtime_backend_count(const struct minfer_runtime *rt);
const struct minfer_plugin *runtime_backend_at(const struct minfer_runtime *rt, size_t i);

/* The instance's last-error text (be may be NULL for create's errors);
 * never NULL, "" if the plugin says nothing. Valid until the next call on
 * that instance. */
const char *plugin_last_error(const struct minfer_plugin *p, struct minfer_backend *be);

/* Formats "backend 'NAME' WHAT failed: STATUS: LAST_ERROR" into
 * err[err_len] and returns st unchanged, for `return plugin_fail(...)`. */
minfer_status plugin_fail(const struct minfer_plugin *p, struct minfer_backend *be,
                          minfer_status st, const char *what, char *err, size_t err_len);

/* create through the plugin with the error text surfaced: on failure *out
 * is NULL and err holds the plugin's last_error. cfg may be NULL (device 0,
 * default threads). */
minfer_status plugin_create_instance(const struct minfer_plugin *p,
                                     const struct minfer_backend_config *cfg,
                                     struct minfer_backend **out, char *err, size_t err_len);

/* The host table the core lends plugins; its log writes to stderr at or
 * below $MINFER_LOG_LEVEL (error, warn, info, debug; default warn). */
const struct minfer_host *plugin_host(void);
/* Core-side logging through the same sink. */
void plugin_log(int level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

#endif /* MINFER_CORE_PLUGIN_H */
