/*
 * cmd-info.c — `minfer info FILE`: prints a GGUF file's header, every
 * metadata key with its value (arrays abbreviated after N elements, long
 * strings shortened) and the tensor table (name, type, shape, bytes,
 * offset), in the spirit of gguf-dump. A file the reader refuses is
 * reported with the reader's message and exit status 1.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-opts.h"
#include "commands.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "minfer/quant.h"

struct info_opts {
    uint64_t max_items;   /* array elements shown */
    size_t max_str;       /* string bytes shown */
    bool no_kv, no_tensors;
};

/* ---- values ---- */

/* Prints s quoted, escaping control bytes, shortened to max bytes. */
static void print_str(const char *s, size_t len, size_t max)
{
    size_t n = len < max ? len : max;
    putchar('"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", stdout); break;
        case '\\': fputs("\\\\", stdout); break;
        case '\n': fputs("\\n", stdout); break;
        case '\t': fputs("\\t", stdout); break;
        case '\r': fputs("\\r", stdout); break;
        default:
            if (c < 0x20 || c == 0x7f)
                printf("\\x%02x", c);
            else
                putchar(c);
        }
    }
    putchar('"');
    if (n < len)
        printf("... (%zu bytes)", len);
}

static uint64_t le(const unsigned char *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* One scalar of type t stored little-endian at p. */
static void print_scalar(enum minfer_gguf_type t, const void *data)
{
    const unsigned char *p = data;
    switch (t) {
    case MINFER_GGUF_UINT8: printf("%" PRIu64, le(p, 1)); break;
    case MINFER_GGUF_INT8: printf("%d", (int)(int8_t)le(p, 1)); break;
    case MINFER_GGUF_UINT16: printf("%" PRIu64, le(p, 2)); break;
    case MINFER_GGUF_INT16: printf("%d", (int)(int16_t)le(p, 2)); break;
    case MINFER_GGUF_UINT32: printf("%" PRIu64, le(p, 4)); break;
    case MINFER_GGUF_INT32: printf("%" PRId32, (int32_t)le(p, 4)); break;
    case MINFER_GGUF_UINT64: printf("%" PRIu64, le(p, 8)); break;
    case MINFER_GGUF_INT64: printf("%" PRId64, (int64_t)le(p, 8)); break;
    case MINFER_GGUF_BOOL: fputs(p[0] ? "true" : "false", stdout); break;
    case MINFER_GGUF_FLOAT32: {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, sizeof f);
        printf("%.9g", f);
        break;
    }
    case MINFER_GGUF_FLOAT64: {
        uint64_t u = le(p, 8);
        double f;
        memcpy(&f, &u, sizeof f);
        printf("%.17g", f);
        break;
    }
    default: fputs("?", stdout);
    }
}

static int scalar_size(enum minfer_gguf_type t)
{
    switch (t) {
    case MINFER_GGUF_UINT8: case MINFER_GGUF_INT8: case MINFER_GGUF_BOOL: return 1;
    case MINFER_GGUF_UINT16: case MINFER_GGUF_INT16: return 2;
    case MINFER_GGUF_UINT32: case MINFER_GGUF_INT32: case MINFER_GGUF_FLOAT32: return 4;
    default: return 8;
    }
}

static void print_kv(const struct minfer_gguf *g, int64_t i, const struct info_opts *o)
{
    enum minfer_gguf_type t = minfer_gguf_kv_type(g, i);
    const void *d;
    size_t len;
    if (t != MINFER_GGUF_ARRAY) {
        printf("%5" PRId64 ": %-44s %-8s = ", i, minfer_gguf_kv_key(g, i),
               minfer_gguf_type_name(t));
        if (minfer_gguf_kv_scalar(g, i, &d, &len) != MINFER_OK)
            fputs("?", stdout);
        else if (t == MINFER_GGUF_STRING)
            print_str(d, len, o->max_str);
        else
            print_scalar(t, d);
        putchar('\n');
        return;
    }
    enum minfer_gguf_type et;
    uint64_t n;
    if (minfer_gguf_kv_arr(g, i, &et, &n, &d) != MINFER_OK)
        return;
    char tn[32];
    snprintf(tn, sizeof tn, "[%s]", minfer_gguf_type_name(et));
    printf("%5" PRId64 ": %-44s %-8s = %" PRIu64 " items [", i, minfer_gguf_kv_key(g, i), tn, n);
    for (uint64_t j = 0; j < n && j < o->max_items; j++) {
        if (j)
            fputs(", ", stdout);
        if (et == MINFER_GGUF_STRING) {
            const char *s;
            if (minfer_gguf_kv_arr_str(g, i, j, &s, &len) == MINFER_OK)
                print_str(s, len, o->max_str);
        } else {
            print_scalar(et, (const unsigned char *)d + j * (uint64_t)scalar_size(et));
        }
    }
    if (n > o->max_items)
        fputs(", ...", stdout);
    puts("]");
}

/* ---- tensors ---- */

static void print_tensors(const struct minfer_gguf *g)
{
    int64_t n = minfer_gguf_tensor_count(g);
    uint64_t total = 0;
    printf("\n%" PRId64 " tensors:\n", n);
    printf("%5s  %-40s %-7s %-28s %14s  %s\n", "#", "name", "type", "shape", "bytes", "offset");
    for (int64_t i = 0; i < n; i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
        char shape[96];
        int k = snprintf(shape, sizeof shape, "[");
        for (uint32_t d = 0; d < t->n_dims && k > 0 && (size_t)k < sizeof shape; d++)
            k += snprintf(shape + k, sizeof shape - (size_t)k, "%s%" PRId64, d ? ", " : "",
                          t->ne[d]);
        if (k > 0 && (size_t)k < sizeof shape)
            snprintf(shape + k, sizeof shape - (size_t)k, "]");
        printf("%5" PRId64 "  %-40s %-7s %-28s %14" PRIu64 "  0x%" PRIx64 "%s\n", i, t->name,
               tr ? tr->name : "?", shape, t->size, t->offset,
               tr && tr->supported ? "" : "  (type not computed by this build)");
        total += t->size;
    }
    printf("total tensor bytes: %" PRIu64 " (%.2f MiB)\n", total, (double)total / (1 << 20));
}

/* ---- command ---- */

static void info_usage(FILE *f)
{
    fprintf(f, "usage: minfer info [options] (-m FILE.gguf | FILE.gguf)\n"
               "Prints a GGUF file's metadata and tensor table.\n");
    cli_print_options(f, CMD_INFO);
}

static bool parse_count(const char *s, uint64_t *out)
{
    char *end;
    if (!s || !*s || *s == '-')
        return false;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return false;
    *out = v ? (uint64_t)v : UINT64_MAX;
    return true;
}

int cmd_info(int argc, char **argv)
{
    struct info_opts o = {8, 160, false, false};
    const char *path = NULL;
    struct cli_args a = {"info", CMD_INFO, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        uint64_t n;
        switch (id) {
        case OPT_HELP: info_usage(stdout); return cli_stdout_done("info");
        case OPT_ITEMS:
        case OPT_CHARS:
            if (!parse_count(v, &n))
                return cli_usage_error("info", "%s needs a whole number >= 0, not '%s'", a.opt,
                                       v);
            if (id == OPT_ITEMS)
                o.max_items = n;
            else
                o.max_str = n > SIZE_MAX ? SIZE_MAX : (size_t)n;
            break;
        case OPT_NO_KV: o.no_kv = true; break;
        case OPT_NO_TENSORS: o.no_tensors = true; break;
        case OPT_MODEL:
        case CLI_POSITIONAL:
            if (path)
                return cli_usage_error("info", "one file at a time ('%s' and '%s')", path, v);
            path = v;
            break;
        default: return 2;
        }
    }
    if (!path)
        return cli_usage_error("info", "no file (-m FILE.gguf)");
    char err[1024];
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_flags(path, MINFER_GGUF_OPEN_ANY_TYPE, &st, err,
                                                   sizeof err);
    if (!g) {
        fprintf(stderr, "minfer info: %s\n", err);
        return 1;
    }
    uint64_t size;
    minfer_gguf_base(g, &size);
    printf("%s: GGUF v%" PRIu32 ", %" PRIu64 " bytes, alignment %" PRIu64
           ", data section at 0x%" PRIx64 "\n",
           path, minfer_gguf_version(g), size, minfer_gguf_alignment(g),
           minfer_gguf_data_offset(g));
    if (!o.no_kv) {
        printf("\n%" PRId64 " key/value pairs:\n", minfer_gguf_kv_count(g));
        for (int64_t i = 0; i < minfer_gguf_kv_count(g); i++)
            print_kv(g, i, &o);
    }
    if (!o.no_tensors)
        print_tensors(g);
    minfer_gguf_close(g);
    return cli_stdout_done("info");
}
