/*
 * gguf-image.h — helpers the GGUF suites share (test-gguf.c reads,
 * test-gguf-write.c writes): a hand-built in-memory GGUF image with the
 * offsets of the fields the refusal tests corrupt, refusal assertions,
 * per-test temporary directories and the fixture model's path. Built by
 * hand, not by our writer, so a writer bug cannot hide a reader bug.
 */
#ifndef MINFER_TEST_GGUF_IMAGE_H
#define MINFER_TEST_GGUF_IMAGE_H

#include <check.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "gguf/gguf-internal.h"
#include "minfer/gguf.h"

/* ---- in-memory image builder ---- */

struct img {
    uint8_t *b;
    size_t n, cap;
};

static inline void put(struct img *m, const void *p, size_t n)
{
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2 + 64;
        m->b = realloc(m->b, m->cap);
        ck_assert_ptr_nonnull(m->b);
    }
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static inline size_t put_u32(struct img *m, uint32_t v)
{
    size_t at = m->n;
    uint8_t b[4];
    gguf_wr_u32(b, v);
    put(m, b, 4);
    return at;
}

static inline size_t put_u64(struct img *m, uint64_t v)
{
    size_t at = m->n;
    uint8_t b[8];
    gguf_wr_u64(b, v);
    put(m, b, 8);
    return at;
}

static inline size_t put_str(struct img *m, const char *s)
{
    size_t at = put_u64(m, strlen(s));
    put(m, s, strlen(s));
    return at;
}

static inline void pad_to(struct img *m, size_t a)
{
    static const uint8_t z[64];
    while (m->n % a)
        put(m, z, 1);
}

static inline void set_u32(struct img *m, size_t at, uint32_t v)
{
    gguf_wr_u32(m->b + at, v);
}

static inline void set_u64(struct img *m, size_t at, uint64_t v)
{
    gguf_wr_u64(m->b + at, v);
}

/* Offsets of the fields the tests corrupt. */
struct layout {
    size_t version, n_tensors, n_kv;
    size_t arch_keylen, arch_type, arch_strlen;
    size_t align_type, align_val;
    size_t tok_type, tok_elem_type, tok_len, tok_el1_len;
    size_t u32s_len;
    size_t one_key, two_key;
    size_t t0_name, t0_ndims, t0_ne0, t0_ne1, t0_type, t0_off;
    size_t t1_name, t1_type, t1_ne0, t1_off;
    size_t data;
};

/* A valid v3 image: 6 keys (string, u32 alignment, string array, u32
 * array, u8, i64) and two tensors (f32 [32, 2], q8_0 [32]). */
static inline struct img make_image(struct layout *L)
{
    struct img m = {0};
    put(&m, "GGUF", 4);
    L->version = put_u32(&m, 3);
    L->n_tensors = put_u64(&m, 2);
    L->n_kv = put_u64(&m, 6);

    L->arch_keylen = put_str(&m, "general.architecture");
    L->arch_type = put_u32(&m, MINFER_GGUF_STRING);
    L->arch_strlen = put_str(&m, "qwen2");

    put_str(&m, "general.alignment");
    L->align_type = put_u32(&m, MINFER_GGUF_UINT32);
    L->align_val = put_u32(&m, 32);

    put_str(&m, "tokenizer.ggml.tokens");
    L->tok_type = put_u32(&m, MINFER_GGUF_ARRAY);
    L->tok_elem_type = put_u32(&m, MINFER_GGUF_STRING);
    L->tok_len = put_u64(&m, 3);
    put_str(&m, "a");
    L->tok_el1_len = put_str(&m, "bc");
    put_str(&m, "def");

    put_str(&m, "test.u32s");
    put_u32(&m, MINFER_GGUF_ARRAY);
    put_u32(&m, MINFER_GGUF_UINT32);
    L->u32s_len = put_u64(&m, 3);
    put_u32(&m, 7);
    put_u32(&m, 8);
    put_u32(&m, 9);

    L->one_key = put_str(&m, "test.one");
    put_u32(&m, MINFER_GGUF_UINT8);
    uint8_t u8v = 200;
    put(&m, &u8v, 1);
    L->two_key = put_str(&m, "test.two");
    put_u32(&m, MINFER_GGUF_INT64);
    put_u64(&m, (uint64_t)-5);

    L->t0_name = put_str(&m, "t0");
    L->t0_ndims = put_u32(&m, 2);
    L->t0_ne0 = put_u64(&m, 32);
    L->t0_ne1 = put_u64(&m, 2);
    L->t0_type = put_u32(&m, MINFER_TYPE_F32);
    L->t0_off = put_u64(&m, 0);

    L->t1_name = put_str(&m, "t1");
    put_u32(&m, 1);
    L->t1_ne0 = put_u64(&m, 32);
    L->t1_type = put_u32(&m, MINFER_TYPE_Q8_0);
    L->t1_off = put_u64(&m, 256);

    pad_to(&m, 32);
    L->data = m.n;
    for (int i = 0; i < 64; i++) {
        float f = (float)i;
        put(&m, &f, 4);
    }
    uint8_t q[34];
    for (int i = 0; i < 34; i++)
        q[i] = (uint8_t)i;
    put(&m, q, sizeof q);
    pad_to(&m, 32);
    return m;
}

/* Opens m and asserts it is refused with want, the message holding every
 * string in needles (NULL-terminated). */
static inline void expect_refusal(const struct img *m, minfer_status want, const char *const *needles)
{
    char err[1024] = "";
    minfer_status st = MINFER_OK;
    struct minfer_gguf *g = minfer_gguf_open_memory(m->b, m->n, &st, err, sizeof err);
    ck_assert_msg(g == NULL, "corrupt image accepted");
    ck_assert_msg(st == want, "status %d (%s), expected %d; message: %s", st,
                  minfer_status_str(st), want, err);
    for (const char *const *n = needles; n && *n; n++)
        ck_assert_msg(strstr(err, *n), "message lacks '%s': %s", *n, err);
}

#define REFUSE(m, st, ...)                                                                 \
    do {                                                                                   \
        const char *const needles_[] = {__VA_ARGS__, NULL};                                \
        expect_refusal(m, st, needles_);                                                   \
    } while (0)

static inline char *hex(size_t v)
{
    static char buf[4][32];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "0x%zx", v);
    return buf[k];
}

/* ---- temporary files ---- */

/* A fresh empty directory under /tmp for one test's files. */
static inline char *temp_dir(void)
{
    static char d[64];
    snprintf(d, sizeof d, "/tmp/minfer-test-gguf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

/* Number of entries in dir besides . and .. */
static inline int dir_entries(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

static inline void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char p[512];
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(dir);
}

/* ---- reader: the fixture model ---- */

static inline char *fixture_path(void)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/models/fixture-A-f16.gguf", MINFER_FIXTURES_DIR);
    return access(p, R_OK) == 0 ? p : NULL;
}

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}
#endif
