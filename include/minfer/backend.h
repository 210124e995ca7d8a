/*
 * minfer/backend.h — the plugin ABI: the only header a backend plugin needs.
 *
 * A plugin is a shared object exporting one symbol, minfer_plugin_entry.
 * The core offers its ABI (major, minor); the plugin answers with the
 * version it will speak and a table of functions that begins with its own
 * struct_size. The core never reads a slot at or past struct_size and
 * treats such slots as absent. docs/plugin-abi.md gives each slot's
 * contract in full.
 *
 * ABI changelog
 *   1.0  first version: probe, devices, create/destroy, supports_op,
 *        buffers, weights, execute_node, graph_replay, synchronize,
 *        copy_cells, last_error, get_proc, shutdown.
 *   1.1  no new slots; ir.h gains ops 15..21 (ATTENTION_LISTS for many
 *        sequences in one pass; GEGLU, TOPK, MOE_WEIGHTS, MUL_MAT_ID,
 *        MOE_SUM, ROPE_DIV) and meanings for ROPE's iparams[1] (layout) and
 *        ATTENTION's iparams[1] (sliding window). The core never sends any
 *        of these to a plugin that answered 1.0.
 *   1.2  host_alloc / host_free (optional): host memory the plugin's
 *        buffer_read fills at the link's full rate; the core keeps the
 *        logits it reads back after every pass there.
 */
#ifndef MINFER_BACKEND_H
#define MINFER_BACKEND_H

#include "device.h"
#include "ir.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MINFER_ABI_MAJOR 1
#define MINFER_ABI_MINOR 2

#if defined(_WIN32)
#define MINFER_PLUGIN_EXPORT __declspec(dllexport)
#else
#define MINFER_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* The name of the one exported entry symbol, for dlsym. */
#define MINFER_PLUGIN_ENTRY_SYMBOL "minfer_plugin_entry"

enum minfer_log_level {
    MINFER_LOG_ERROR = 0,
    MINFER_LOG_WARN = 1,
    MINFER_LOG_INFO = 2,
    MINFER_LOG_DEBUG = 3,
};

/* What the core lends a plugin. Valid from the entry call until shutdown
 * returns. Fields are appended in later minors; check struct_size. */
struct minfer_host {
    uint32_t struct_size;
    uint16_t abi_major, abi_minor;
    /* Thread-safe. Never prints to stdout. */
    void (*log)(int level, const char *fmt, ...)
#if defined(__GNUC__)
        __attribute__((format(printf, 2, 3)))
#endif
        ;
};

/* struct minfer_device_info (the device_info slot's answer) is in
 * device.h, shared with the application API. */

/* Passed to create. Appended in later minors. */
struct minfer_backend_config {
    uint32_t struct_size;
    int32_t device;            /* index below device_count */
    int32_t n_threads;         /* 0 = plugin's choice */
    uint32_t flags;            /* MINFER_BACKEND_CFG_* */
};

/* CUDA Graphs and similar replay off for this instance. */
#define MINFER_BACKEND_CFG_NO_GRAPHS 0x1u

/* Describes a weight to register: host bytes (usually in the mmap) that
 * stay valid and unchanged until the instance is destroyed. */
struct minfer_weight_desc {
    const char *name;          /* unique within the model, e.g. "blk.0.attn_q.weight" */
    uint32_t type;             /* enum minfer_type */
    int64_t ne[MINFER_MAX_DIMS];
    const void *host_data;
    size_t size;               /* bytes */
};

/* A run of nodes the scheduler offers for replay. nodes[first..last] are
 * the nodes of one split, all assigned to this backend; the array lives
 * for the graph's life (identified by uid). */
struct minfer_replay_window {
    uint64_t uid;              /* graph identity; changes when topology does */
    uint32_t first, last;      /* inclusive node indices */
    int32_t nt_hint;           /* tokens in this pass (1 for decode) */
    uint64_t generation;       /* bumps when buffer addresses or KV layout change */
    const struct minfer_node *nodes;
};

struct minfer_backend; /* a plugin's instance, opaque to the core */

struct minfer_backend_iface {
    /* -- header, ABI 1.0 -- */
    uint32_t struct_size;      /* sizeof as the plugin was compiled */
    uint16_t abi_major, abi_minor;
    const char *name;          /* "cpu", "cuda", ...; plugin-owned */
    const char *version;       /* the plugin's own version string */

    /* Cheap and baseline-ISA: can this plugin run here? Returns a score
     * (0 = cannot; higher wins among plugins of the same name) and, when
     * 0, writes why into why[why_len]. No heavy initialisation. */
    int (*probe)(char *why, size_t why_len);

    /* Devices this plugin drives; valid after a non-zero probe. */
    int (*device_count)(void);
    minfer_status (*device_info)(int device, struct minfer_device_info *out);

    /* Instances. create sets *out to NULL on failure; destroy(NULL) is a
     * no-op. One instance is used by one thread at a time. */
    minfer_status (*create)(const struct minfer_backend_config *cfg,
                            struct minfer_backend **out);
    void (*destroy)(struct minfer_backend *be);

    /* True iff execute_node can run this node exactly as given (op, types,
     * shapes, strides). Must not depend on tensor contents. */
    bool (*supports_op)(struct minfer_backend *be, const struct minfer_node *node);

    /* Buffers in the backend's address space. alloc sets *base to an
     * address usable as tensor data; freed only by buffer_free of the same
     * instance. write/read copy between host memory and backend memory
     * and are ordered with execution on the instance. */
    minfer_status (*buffer_alloc)(struct minfer_backend *be, size_t size, void **base);
    void (*buffer_free)(struct minfer_backend *be, void *base);
    minfer_status (*buffer_write)(struct minfer_backend *be, void *dst,
                                  const void *src_host, size_t size);
    minfer_status (*buffer_read)(struct minfer_backend *be, void *dst_host,
                                 const void *src, size_t size);

    /* Makes a weight usable by execute_node and sets *data to its address
     * in the backend's space (a CPU backend may return host_data itself).
     * Registering the same name and size again returns the same address. */
    minfer_status (*weight_register)(struct minfer_backend *be,
                                     const struct minfer_weight_desc *w, void **data);

    /* Runs one node. A node the backend cannot run as given is an error
     * naming the node and the values, never a silent approximation. */
    minfer_status (*execute_node)(struct minfer_backend *be, const struct minfer_node *node);

    /* OPTIONAL (NULL = never replays). Offered before each split; sets
     * *replayed when the backend ran the whole window itself (from a
     * captured graph). When *replayed is false the scheduler runs the
     * window with execute_node. */
    minfer_status (*graph_replay)(struct minfer_backend *be,
                                  const struct minfer_replay_window *w, bool *replayed);

    /* Waits until all work queued on the instance is done; reports the
     * first deferred error. */
    minfer_status (*synchronize)(struct minfer_backend *be);

    /* OPTIONAL. Copies n cells of row_bytes each inside a KV buffer, from
     * cell src to cell dst (used to fork sequences). */
    minfer_status (*copy_cells)(struct minfer_backend *be, void *kv_base, size_t row_bytes,
                                uint32_t src, uint32_t dst, uint32_t n);

    /* Text of the instance's last error, or "" — owned by the instance,
     * valid until its next call. be may be NULL for errors of create. */
    const char *(*last_error)(struct minfer_backend *be);

    /* OPTIONAL. Extension lookup by name; NULL when unknown. */
    void *(*get_proc)(const char *name);

    /* Called once before dlclose, after every instance was destroyed. */
    void (*shutdown)(void);

    /* -- ABI 1.2 -- */

    /* OPTIONAL (both or neither). Host memory that buffer_read and
     * buffer_write move at the link's full rate (page-locked for a GPU,
     * which otherwise copies through a staging buffer): the core keeps
     * there the logits it reads back after every pass. Ordinary host
     * memory to every other use; host_alloc sets *ptr to NULL on failure;
     * freed only by host_free of the same instance, before destroy. */
    minfer_status (*host_alloc)(struct minfer_backend *be, size_t size, void **ptr);
    void (*host_free)(struct minfer_backend *be, void *ptr);

    /* -- later minors append slots here -- */
};

/* The one exported symbol. On entry *abi holds the core's
 * (major << 16 | minor); the plugin writes the version it will speak and
 * returns its table, or NULL to refuse (then *abi says what it wanted). */
typedef const struct minfer_backend_iface *(*minfer_plugin_entry_fn)(
    uint32_t *abi, const struct minfer_host *host);

MINFER_PLUGIN_EXPORT const struct minfer_backend_iface *
minfer_plugin_entry(uint32_t *abi, const struct minfer_host *host);

#define MINFER_ABI_PACK(major, minor) (((uint32_t)(major) << 16) | (uint32_t)(minor))
#define MINFER_ABI_PACK_MAJOR(v) ((uint32_t)(v) >> 16)
#define MINFER_ABI_PACK_MINOR(v) ((uint32_t)(v)&0xffffu)

/* ---- writing a plugin's entry once ---- */

/* The negotiation every entry does: *abi holds the core's offer. Within
 * this header's major, writes back the lower of the two minors and
 * returns true; for another major (or abi NULL) writes this header's
 * version, so the loader can say what the plugin wanted, and returns
 * false. */
static inline bool minfer_plugin_negotiate(uint32_t *abi)
{
    if (!abi)
        return false;
    uint32_t offer = *abi;
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, MINFER_ABI_MINOR);
    if (MINFER_ABI_PACK_MAJOR(offer) != MINFER_ABI_MAJOR)
        return false;
    uint32_t minor = MINFER_ABI_PACK_MINOR(offer);
    if (minor > MINFER_ABI_MINOR)
        minor = MINFER_ABI_MINOR;
    *abi = MINFER_ABI_PACK(MINFER_ABI_MAJOR, minor);
    return true;
}

/* Defines the plugin's table and its exported minfer_plugin_entry (the
 * GST_PLUGIN_DEFINE way), from the name, the version string and the
 * slots as designated initializers; slots left out are NULL (absent).
 * host_slot is a `const struct minfer_host *` variable of the plugin that
 * receives the host table on a successful negotiation. Use once, in one
 * C file of the plugin, after the slot functions:
 *
 *   MINFER_PLUGIN_DEFINE(g_host, "cpu", "0.1.0",
 *                        .probe = cpu_probe, .create = cpu_create, ...);
 */
#define MINFER_PLUGIN_DEFINE(host_slot, name_, version_, ...)                          \
    static const struct minfer_backend_iface minfer_plugin_table_ = {                  \
        .struct_size = sizeof(struct minfer_backend_iface),                            \
        .abi_major = MINFER_ABI_MAJOR,                                                 \
        .abi_minor = MINFER_ABI_MINOR,                                                 \
        .name = (name_),                                                               \
        .version = (version_),                                                         \
        __VA_ARGS__};                                                                  \
    MINFER_PLUGIN_EXPORT const struct minfer_backend_iface *minfer_plugin_entry(       \
        uint32_t *abi, const struct minfer_host *minfer_host_arg_)                     \
    {                                                                                  \
        if (!minfer_plugin_negotiate(abi))                                             \
            return NULL;                                                               \
        (host_slot) = minfer_host_arg_;                                                \
        return &minfer_plugin_table_;                                                  \
    }                                                                                  \
    typedef int minfer_plugin_define_needs_a_semicolon_

#ifdef __cplusplus
}
#endif

#endif /* MINFER_BACKEND_H */
