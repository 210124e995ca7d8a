/*
 * cmd-backends.c — `minfer backends`: lists every backend plugin candidate
 * the loader considered, with its name, version, ABI, path, score and
 * devices, or the reason it was not loaded.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-opts.h"
#include "commands.h"
#include "minfer/minfer.h"

static const char *state_word(uint32_t state)
{
    switch (state) {
    case MINFER_PLUGIN_LOADED: return "loaded";
    case MINFER_PLUGIN_REJECTED: return "rejected";
    case MINFER_PLUGIN_SHADOWED: return "shadowed";
    case MINFER_PLUGIN_DUPLICATE: return "duplicate";
    }
    return "unknown";
}

static void print_bytes(uint64_t b)
{
    if (b >= (1ull << 30))
        printf("%.1f GiB", (double)b / (double)(1ull << 30));
    else
        printf("%.1f MiB", (double)b / (double)(1ull << 20));
}

static void print_devices(const struct minfer_runtime *rt, const struct minfer_plugin_record *r)
{
    for (int d = 0; d < r->n_devices; d++) {
        struct minfer_device_info di;
        memset(&di, 0, sizeof di);
        di.struct_size = sizeof di;
        minfer_status st = minfer_runtime_device_info(rt, r->name, d, &di);
        if (st != MINFER_OK) {
            printf("    device %d: info failed: %s\n", d, minfer_status_str(st));
            continue;
        }
        printf("    device %d: %s", d, di.name[0] ? di.name : "(unnamed)");
        if (di.is_gpu)
            printf(", compute capability %d.%d", (int)di.cc_major, (int)di.cc_minor);
        if (di.memory_total) {
            printf(", ");
            print_bytes(di.memory_total);
            if (di.memory_free) {
                printf(" (");
                print_bytes(di.memory_free);
                printf(" free)");
            }
        }
        if (di.description[0])
            printf(", %s", di.description);
        printf("\n");
    }
}

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer backends [--plugin PATH]... [--no-default-dirs]\n\n"
               "Lists every backend plugin candidate, in search order: --plugin paths,\n"
               "then $MINFER_PLUGIN_PATH, then <dir of libminfer.so>/minfer/backends,\n"
               "then the install directory. PATH is a plugin .so or a directory\n"
               "scanned for libminfer-*.so. Exits 1 when no backend is loaded.\n");
    cli_print_options(f, CMD_BACKENDS);
}

int cmd_backends(int argc, char **argv)
{
    const char **paths = calloc((size_t)argc + 1, sizeof *paths);
    if (!paths) {
        fprintf(stderr, "minfer backends: out of memory\n");
        return 1;
    }
    size_t n_paths = 0;
    uint32_t flags = 0;
    struct cli_args a = {"backends", CMD_BACKENDS, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        switch (id) {
        case OPT_PLUGIN: paths[n_paths++] = v; break;
        case OPT_NO_DEFAULT_DIRS: flags |= MINFER_RUNTIME_NO_DEFAULT_DIRS; break;
        case OPT_HELP:
            usage(stdout);
            free(paths);
            return cli_stdout_done("backends");
        default:
            free(paths);
            return id == CLI_POSITIONAL
                       ? cli_usage_error("backends", "unexpected argument '%s'", v) : 2;
        }
    }
    struct minfer_runtime_opts opts = {
        .struct_size = sizeof opts,
        .plugin_paths = paths,
        .n_plugin_paths = n_paths,
        .flags = flags,
    };
    minfer_status st;
    char err[512];
    struct minfer_runtime *rt = minfer_runtime_new(&opts, &st, err, sizeof err);
    free(paths);
    if (!rt) {
        fprintf(stderr, "minfer backends: %s\n", err);
        return 1;
    }

    int abi_major, abi_minor;
    minfer_plugin_abi(&abi_major, &abi_minor);
    printf("minfer %s, plugin ABI %d.%d\nsearch path:\n", minfer_version(), abi_major, abi_minor);
    const char *sp, *origin;
    for (size_t i = 0; (sp = minfer_runtime_search_path(rt, i, &origin)); i++)
        printf("  %-8s %s\n", origin, sp);

    size_t n = minfer_runtime_record_count(rt), n_loaded = 0;
    printf("candidates: %zu\n", n);
    for (size_t i = 0; i < n; i++) {
        struct minfer_plugin_record r;
        memset(&r, 0, sizeof r);
        r.struct_size = sizeof r;
        if (!minfer_runtime_record(rt, i, &r))
            continue;
        if (r.name[0]) {
            printf("\n%s %s: %s\n", r.name, r.version, state_word(r.state));
        } else {
            const char *base = strrchr(r.path, '/');
            printf("\n[%s]: %s\n", base ? base + 1 : r.path, state_word(r.state));
        }
        printf("  path     %s (%s)\n", r.path, r.origin);
        if (r.abi_major || r.abi_minor)
            printf("  ABI      %u.%u\n", (unsigned)r.abi_major, (unsigned)r.abi_minor);
        if (r.state == MINFER_PLUGIN_LOADED || r.state == MINFER_PLUGIN_SHADOWED)
            printf("  score    %d\n", r.score);
        if (r.loaded) {
            n_loaded++;
            printf("  devices  %d\n", r.n_devices);
            print_devices(rt, &r);
        } else {
            printf("  reason   %s\n", r.reason);
        }
    }
    printf("\n%zu backend%s loaded\n", n_loaded, n_loaded == 1 ? "" : "s");
    minfer_runtime_free(rt);
    if (cli_stdout_done("backends"))
        return 1;
    return n_loaded ? 0 : 1;
}
