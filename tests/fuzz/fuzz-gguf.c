/*
 * fuzz-gguf.c — libFuzzer target for the GGUF reader: opens the input
 * with minfer_gguf_open_memory and, when it is accepted, walks every key,
 * array element and tensor through the public getters, checking the
 * promises the reader makes (tensors inside the buffer and aligned, a
 * message on every refusal). Any out-of-bounds read is ASan's to find.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "gguf/gguf-internal.h"
#include "minfer/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

#define CHECK(c)                                                                           \
    do {                                                                                   \
        if (!(c))                                                                          \
            __builtin_trap();                                                              \
    } while (0)

static void walk_kv(const struct minfer_gguf *g, int64_t i)
{
    const char *key = minfer_gguf_kv_key(g, i);
    CHECK(key && minfer_gguf_find_key(g, key) == i);
    enum minfer_gguf_type t = minfer_gguf_kv_type(g, i);
    const void *d;
    size_t len;
    int64_t i64;
    uint64_t u64;
    double f64;
    bool b;
    const char *s;
    (void)minfer_gguf_get_i64(g, key, &i64);
    (void)minfer_gguf_get_u64(g, key, &u64);
    (void)minfer_gguf_get_f64(g, key, &f64);
    (void)minfer_gguf_get_bool(g, key, &b);
    if (minfer_gguf_get_str(g, key, &s, &len) == MINFER_OK && len)
        sink ^= (uint8_t)(s[0] ^ s[len - 1]);
    if (t != MINFER_GGUF_ARRAY) {
        CHECK(minfer_gguf_kv_scalar(g, i, &d, &len) == MINFER_OK);
        if (len)
            sink ^= ((const uint8_t *)d)[len - 1];
        return;
    }
    enum minfer_gguf_type et;
    uint64_t n;
    CHECK(minfer_gguf_get_arr(g, key, &et, &n, &d) == MINFER_OK);
    if (et == MINFER_GGUF_STRING) {
        for (uint64_t j = 0; j < n; j++) {
            /* every element of short arrays, a sample of long ones */
            if (n > 256 && j > 128 && j < n - 128)
                j = n - 128;
            CHECK(minfer_gguf_kv_arr_str(g, i, j, &s, &len) == MINFER_OK);
            if (len)
                sink ^= (uint8_t)(s[0] ^ s[len - 1]);
        }
        CHECK(minfer_gguf_kv_arr_str(g, i, n, &s, &len) != MINFER_OK);
    } else if (n) {
        CHECK(d != NULL);
        sink ^= ((const uint8_t *)d)[0];
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    minfer_status st = MINFER_OK;
    struct minfer_gguf *g = minfer_gguf_open_memory(data, size, &st, err, sizeof err);
    if (!g && st == MINFER_ERR_UNSUPPORTED) /* the describing tools' path */
        g = minfer_gguf_open_memory_flags(data, size, MINFER_GGUF_OPEN_ANY_TYPE, &st, err,
                                          sizeof err);
    if (!g) {
        CHECK(st != MINFER_OK && err[0]);
        return 0;
    }
    CHECK(st == MINFER_OK);
    uint64_t a = minfer_gguf_alignment(g);
    CHECK(a && !(a & (a - 1)));
    for (int64_t i = 0; i < minfer_gguf_kv_count(g); i++)
        walk_kv(g, i);
    for (int64_t i = 0; i < minfer_gguf_tensor_count(g); i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        CHECK(minfer_gguf_find_tensor(g, t->name) == t);
        CHECK(t->n_dims >= 1 && t->n_dims <= 4 && t->size > 0);
        CHECK(t->offset <= size && t->size <= size - t->offset);
        CHECK((t->offset - minfer_gguf_data_offset(g)) % a == 0);
        const uint8_t *p = t->data;
        sink ^= (uint8_t)(p[0] ^ p[t->size - 1]);
    }
    minfer_gguf_close(g);
    return 0;
}
