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

/* ---- runtime and plugins ---- */

/* A runtime is the set of backend plugins found and loaded for this process
 * view, plus a record of every candidate considered (loaded or refused,
 * with the reason). It is immutable once made: any number of threads may
 * read it and use its plugins. Models made from a runtime borrow it; free
 * them before the runtime. Plugin search order: opts->plugin_paths, then
 * $MINFER_PLUGIN_PATH (colon-separated; a directory is scanned for
 * libminfer-*.so, a file is loaded as is), then <dir of libminfer.so>/
 * minfer/backends, then the compile-time install directory. */
struct minfer_runtime;

/* Defined in minfer/backend.h (include it to call
 * minfer_runtime_device_info). */
struct minfer_device_info;

#define MINFER_RUNTIME_NO_ENV 0x1u          /* ignore $MINFER_PLUGIN_PATH */
#define MINFER_RUNTIME_NO_DEFAULT_DIRS 0x2u /* skip the libminfer-relative and install dirs */

struct minfer_runtime_opts {
    uint32_t struct_size;              /* sizeof(struct minfer_runtime_opts) */
    const char *const *plugin_paths;   /* files or directories, searched first */
    size_t n_plugin_paths;
    uint32_t flags;                    /* MINFER_RUNTIME_* */
};

/* Finds and loads plugins. opts may be NULL (defaults). Finding no usable
 * plugin is not an error here (the records say why); only bad arguments
 * and out-of-memory are. Returns NULL on failure with *st set and a
 * message in err[err_len] (either may be NULL/0). Caller frees. */
MINFER_API struct minfer_runtime *minfer_runtime_new(const struct minfer_runtime_opts *opts,
                                                     minfer_status *st, char *err,
                                                     size_t err_len);
/* Shuts down and unloads plugins no other runtime still holds. NULL ok. */
MINFER_API void minfer_runtime_free(struct minfer_runtime *rt);

enum minfer_plugin_state {
    MINFER_PLUGIN_LOADED = 0,    /* usable; the best of its name */
    MINFER_PLUGIN_REJECTED = 1,  /* refused; reason says why */
    MINFER_PLUGIN_SHADOWED = 2,  /* valid, but another plugin of the same name won */
    MINFER_PLUGIN_DUPLICATE = 3, /* same file (by real path) as an earlier candidate */
};

/* One candidate the loader considered. Strings are owned by the runtime
 * and live until minfer_runtime_free; never NULL ("" when unknown). */
struct minfer_plugin_record {
    uint32_t struct_size;        /* set by the caller to sizeof its struct */
    const char *path;            /* as found (file given or dir + entry) */
    const char *origin;          /* "api", "env", "libdir" or "install" */
    const char *name;            /* the plugin's backend name, "" if not reached */
    const char *version;         /* the plugin's own version, "" if not reached */
    uint32_t abi_major, abi_minor; /* what the plugin answered; 0 if not reached */
    int score;                   /* probe result; 0 if not reached or refused */
    bool loaded;                 /* state == MINFER_PLUGIN_LOADED */
    uint32_t state;              /* enum minfer_plugin_state */
    const char *reason;          /* why not loaded; "" when loaded */
    int n_devices;               /* device_count of a loaded plugin, else 0 */
};

/* Number of candidates recorded, in search order. */
MINFER_API size_t minfer_runtime_record_count(const struct minfer_runtime *rt);
/* Copies record i into *out (up to out->struct_size bytes); false if i is
 * out of range or out->struct_size is too small for the header. */
MINFER_API bool minfer_runtime_record(const struct minfer_runtime *rt, size_t i,
                                      struct minfer_plugin_record *out);
/* Directories and files searched, in order, including ones that did not
 * exist; returns NULL past the end. *origin (may be NULL) gets "api",
 * "env", "libdir" or "install". Strings live as long as rt. */
MINFER_API const char *minfer_runtime_search_path(const struct minfer_runtime *rt, size_t i,
                                                  const char **origin);
/* Asks the loaded plugin named backend about one of its devices. The
 * caller sets out->struct_size; at most that many bytes are written.
 * MINFER_ERR_NOT_FOUND if no such backend is loaded, MINFER_ERR_RANGE for
 * a bad device index. */
MINFER_API minfer_status minfer_runtime_device_info(const struct minfer_runtime *rt,
                                                    const char *backend, int device,
                                                    struct minfer_device_info *out);

/* ---- end runtime and plugins ---- */

#ifdef __cplusplus
}
#endif

#endif /* MINFER_H */
