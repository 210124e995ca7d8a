/*
 * test-gguf.c — the GGUF reader and writer.
 *
 * Reader refusals: a small valid image is built in memory (by hand, not
 * by our writer, so a writer bug cannot hide a reader bug), then one
 * field is corrupted per test: one test per refusal class, including the
 * classes behind llama.cpp's published GGUF advisories (string length
 * overflow, huge n_dims, tensor/KV counts larger than the file,
 * element-count x type-size overflow, alignment 0 or not a power of two,
 * a tensor offset past the end, an array whose element type lies). Each
 * checks the status and that the message names the field, value and
 * offset. The writer is checked by round trips and by failure cleanup;
 * the real fixture model checks facts a converter wrote.
 */
#include <check.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>

#include "gguf/gguf-internal.h"
#include "minfer/gguf.h"
#include "minfer/quant.h"
#include "testutil.h"

/* ---- in-memory image builder ---- */

struct img {
    uint8_t *b;
    size_t n, cap;
};

static void put(struct img *m, const void *p, size_t n)
{
    if (m->n + n > m->cap) {
        m->cap = (m->n + n) * 2 + 64;
        m->b = realloc(m->b, m->cap);
        ck_assert_ptr_nonnull(m->b);
    }
    memcpy(m->b + m->n, p, n);
    m->n += n;
}

static size_t put_u32(struct img *m, uint32_t v)
{
    size_t at = m->n;
    uint8_t b[4];
    gguf_wr_u32(b, v);
    put(m, b, 4);
    return at;
}

static size_t put_u64(struct img *m, uint64_t v)
{
    size_t at = m->n;
    uint8_t b[8];
    gguf_wr_u64(b, v);
    put(m, b, 8);
    return at;
}

static size_t put_str(struct img *m, const char *s)
{
    size_t at = put_u64(m, strlen(s));
    put(m, s, strlen(s));
    return at;
}

static void pad_to(struct img *m, size_t a)
{
    static const uint8_t z[64];
    while (m->n % a)
        put(m, z, 1);
}

static void set_u32(struct img *m, size_t at, uint32_t v)
{
    gguf_wr_u32(m->b + at, v);
}

static void set_u64(struct img *m, size_t at, uint64_t v)
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
static struct img make_image(struct layout *L)
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
static void expect_refusal(const struct img *m, minfer_status want, const char *const *needles)
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

static char *hex(size_t v)
{
    static char buf[4][32];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "0x%zx", v);
    return buf[k];
}

/* ---- temporary files ---- */

/* A fresh empty directory under /tmp for one test's files. */
static char *temp_dir(void)
{
    static char d[64];
    snprintf(d, sizeof d, "/tmp/minfer-test-gguf-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(d));
    return d;
}

/* Number of entries in dir besides . and .. */
static int dir_entries(const char *dir)
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

static void remove_dir(const char *dir)
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

/* ---- reader: a valid image ---- */

START_TEST(image_reads_back)
{
    /* Catches a reader that misplaces any field of a well-formed file: the
     * refusal tests below only mean something if this image is valid. */
    struct layout L;
    struct img m = make_image(&L);
    char err[512];
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(m.b, m.n, &st, err, sizeof err);
    ck_assert_msg(g, "valid image refused: %s", err);
    ck_assert_int_eq(st, MINFER_OK);
    ck_assert_uint_eq(minfer_gguf_version(g), 3);
    ck_assert_uint_eq(minfer_gguf_alignment(g), 32);
    ck_assert_uint_eq(minfer_gguf_data_offset(g), L.data);
    ck_assert_int_eq(minfer_gguf_kv_count(g), 6);
    ck_assert_str_eq(minfer_gguf_kv_key(g, 2), "tokenizer.ggml.tokens");
    ck_assert_int_eq(minfer_gguf_find_key(g, "test.two"), 5);
    ck_assert_int_eq(minfer_gguf_find_key(g, "test.tw"), -1);

    const char *s;
    size_t len;
    ck_assert_int_eq(minfer_gguf_get_str(g, "general.architecture", &s, &len), MINFER_OK);
    ck_assert_uint_eq(len, 5);
    ck_assert(!memcmp(s, "qwen2", 5));
    int64_t i64;
    uint64_t u64;
    double f64;
    ck_assert_int_eq(minfer_gguf_get_i64(g, "test.two", &i64), MINFER_OK);
    ck_assert_int_eq(i64, -5);
    ck_assert_int_eq(minfer_gguf_get_u64(g, "test.two", &u64), MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_gguf_get_u64(g, "test.one", &u64), MINFER_OK);
    ck_assert_uint_eq(u64, 200);
    ck_assert_int_eq(minfer_gguf_get_f64(g, "test.two", &f64), MINFER_OK);
    ck_assert(f64 == -5.0);
    bool b;
    ck_assert_int_eq(minfer_gguf_get_bool(g, "test.one", &b), MINFER_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(minfer_gguf_last_error(), "test.one"));
    ck_assert_int_eq(minfer_gguf_get_i64(g, "nope", &i64), MINFER_ERR_NOT_FOUND);
    ck_assert_int_eq(minfer_gguf_get_i64(g, "general.architecture", &i64), MINFER_ERR_FORMAT);

    enum minfer_gguf_type et;
    uint64_t n;
    const void *d;
    ck_assert_int_eq(minfer_gguf_get_arr(g, "test.u32s", &et, &n, &d), MINFER_OK);
    ck_assert_int_eq(et, MINFER_GGUF_UINT32);
    ck_assert_uint_eq(n, 3);
    ck_assert_uint_eq(gguf_rd_u32((const uint8_t *)d + 8), 9);
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d), MINFER_OK);
    ck_assert_int_eq(et, MINFER_GGUF_STRING);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 2, &s, &len),
                     MINFER_OK);
    ck_assert_uint_eq(len, 3);
    ck_assert(!memcmp(s, "def", 3));
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 3, &s, &len),
                     MINFER_ERR_RANGE);
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "test.u32s", 0, &s, &len), MINFER_ERR_FORMAT);
    ck_assert_int_eq(minfer_gguf_kv_scalar(g, 2, &d, &len), MINFER_ERR_FORMAT);
    ck_assert_int_eq(minfer_gguf_kv_scalar(g, 4, &d, &len), MINFER_OK);
    ck_assert_uint_eq(len, 1);
    ck_assert_uint_eq(*(const uint8_t *)d, 200);

    ck_assert_int_eq(minfer_gguf_tensor_count(g), 2);
    const struct minfer_gguf_tensor *t = minfer_gguf_find_tensor(g, "t1");
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_eq(t, minfer_gguf_tensor(g, 1));
    ck_assert_uint_eq(t->type, MINFER_TYPE_Q8_0);
    ck_assert_uint_eq(t->n_dims, 1);
    ck_assert_int_eq(t->ne[0], 32);
    ck_assert_int_eq(t->ne[1], 1);
    ck_assert_uint_eq(t->size, 34);
    ck_assert_uint_eq(t->offset, L.data + 256);
    ck_assert_ptr_eq(t->data, m.b + L.data + 256);
    t = minfer_gguf_tensor(g, 0);
    ck_assert_str_eq(t->name, "t0");
    ck_assert_uint_eq(t->size, 256);
    float f;
    memcpy(&f, (const uint8_t *)t->data + 4 * 63, 4);
    ck_assert(f == 63.0f);
    ck_assert_ptr_null(minfer_gguf_find_tensor(g, "t2"));
    ck_assert_ptr_null(minfer_gguf_tensor(g, 2));
    minfer_gguf_close(g);
    free(m.b);
}
END_TEST

START_TEST(every_truncation_refused)
{
    /* Catches any read past the end of a cut-off file (ASan/UBSan builds
     * turn it into a crash): every prefix of the image that ends inside
     * the header or a tensor must be refused with a message. */
    struct layout L;
    struct img m = make_image(&L);
    size_t end_t1 = L.data + 256 + 34;
    for (size_t n = 0; n < end_t1; n++) {
        /* A fresh copy of exactly n bytes so ASan sees the true end. */
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, m.b, n);
        char err[512] = "";
        minfer_status st = MINFER_OK;
        struct minfer_gguf *g = minfer_gguf_open_memory(cut, n, &st, err, sizeof err);
        ck_assert_msg(!g, "prefix of %zu bytes accepted", n);
        ck_assert_msg(st != MINFER_OK && err[0], "prefix %zu: no status or message", n);
        free(cut);
    }
    free(m.b);
}
END_TEST

/* ---- reader: one test per refusal class ---- */

START_TEST(bad_magic)
{
    /* Catches a reader that parses any file as GGUF. */
    struct layout L;
    struct img m = make_image(&L);
    memcpy(m.b, "GGML", 4);
    REFUSE(&m, MINFER_ERR_FORMAT, "not a GGUF file", "GGML", "offset 0x0");
    free(m.b);
}
END_TEST

START_TEST(version_1_refused)
{
    /* Catches reading a v1 file (32-bit counts) with the v2/v3 layout. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.version, 1);
    REFUSE(&m, MINFER_ERR_UNSUPPORTED, "version 1", "versions 2 and 3");
    free(m.b);
}
END_TEST

START_TEST(version_2_accepted_4_refused)
{
    /* Catches refusing v2 (same layout as v3) or guessing at a future v4. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.version, 2);
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open_memory(m.b, m.n, &st, NULL, 0);
    ck_assert_ptr_nonnull(g);
    ck_assert_uint_eq(minfer_gguf_version(g), 2);
    minfer_gguf_close(g);
    set_u32(&m, L.version, 4);
    REFUSE(&m, MINFER_ERR_UNSUPPORTED, "version 4");
    free(m.b);
}
END_TEST

START_TEST(big_endian_refused)
{
    /* Catches reading a big-endian file's counts byte-swapped (huge). */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.version, 0x03000000u);
    REFUSE(&m, MINFER_ERR_UNSUPPORTED, "big-endian GGUF files are not supported");
    free(m.b);
}
END_TEST

START_TEST(kv_count_larger_than_file)
{
    /* Advisory class: a KV count larger than the file could hold, which
     * would size an allocation or a loop from a lie. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.n_kv, UINT64_MAX / 2);
    REFUSE(&m, MINFER_ERR_FORMAT, "key/value count 9223372036854775807", "offset 0x10");
    free(m.b);
}
END_TEST

START_TEST(tensor_count_larger_than_file)
{
    /* Advisory class: a tensor count larger than the file could hold. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.n_tensors, (uint64_t)1 << 40);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor count 1099511627776", "offset 0x8");
    /* also just one more than is there: the parser runs out of bytes */
    set_u64(&m, L.n_tensors, 3);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #2");
    free(m.b);
}
END_TEST

START_TEST(key_length_overflow)
{
    /* Advisory class: string length overflow in a key (a length near
     * 2^64 wraps a naive "pos + len" bounds check). */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.arch_keylen, UINT64_MAX);
    REFUSE(&m, MINFER_ERR_FORMAT, "key #0 name length 18446744073709551615",
           hex(L.arch_keylen), "bytes left in the file");
    free(m.b);
}
END_TEST

START_TEST(string_value_length_overflow)
{
    /* Advisory class: string length overflow in a value. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.arch_strlen, UINT64_MAX);
    size_t left = m.n - L.arch_strlen - 8;
    char want[64];
    snprintf(want, sizeof want, "exceeds the %zu bytes left", left);
    REFUSE(&m, MINFER_ERR_FORMAT,
           "key #0 ('general.architecture') string length 18446744073709551615",
           hex(L.arch_strlen), want);
    free(m.b);
}
END_TEST

START_TEST(string_over_cap)
{
    /* Catches a missing per-string cap: a string that fits in the file
     * but exceeds the documented 16 MiB limit is refused. */
    struct img m = {0};
    put(&m, "GGUF", 4);
    put_u32(&m, 3);
    put_u64(&m, 0);
    put_u64(&m, 1);
    put_str(&m, "big");
    put_u32(&m, MINFER_GGUF_STRING);
    size_t at = put_u64(&m, GGUF_MAX_STRING_LEN + 1ull);
    size_t total = m.n + GGUF_MAX_STRING_LEN + 1;
    m.b = realloc(m.b, total);
    memset(m.b + m.n, 'x', total - m.n);
    m.n = total;
    REFUSE(&m, MINFER_ERR_FORMAT, "string length 16777217", hex(at), "limit");
    /* exactly the cap is fine */
    set_u64(&m, at, GGUF_MAX_STRING_LEN);
    m.n--;
    struct minfer_gguf *g = minfer_gguf_open_memory(m.b, m.n, NULL, NULL, 0);
    ck_assert_ptr_nonnull(g);
    minfer_gguf_close(g);
    free(m.b);
}
END_TEST

START_TEST(value_type_out_of_range)
{
    /* Catches a metadata type id outside 0..12 read as some type. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.arch_type, 13);
    REFUSE(&m, MINFER_ERR_FORMAT, "value type 13", hex(L.arch_type), "not a GGUF type");
    free(m.b);
}
END_TEST

START_TEST(array_element_type_lies)
{
    /* Advisory class: an array whose element type id is out of range
     * (a reader indexing a size table with it reads out of bounds). */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.tok_elem_type, 0xdeadbeefu);
    REFUSE(&m, MINFER_ERR_FORMAT, "key #2 ('tokenizer.ggml.tokens') array element type 3735928559",
           hex(L.tok_elem_type));
    free(m.b);
}
END_TEST

START_TEST(nested_array_refused)
{
    /* Catches recursion into arrays of arrays (documented as refused). */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.tok_elem_type, MINFER_GGUF_ARRAY);
    REFUSE(&m, MINFER_ERR_UNSUPPORTED, "array of arrays", hex(L.tok_elem_type));
    free(m.b);
}
END_TEST

START_TEST(array_length_larger_than_file)
{
    /* Catches n * elem_size overflow and arrays longer than the file:
     * 2^62 u32 elements wraps to 0 bytes in 64-bit arithmetic. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.u32s_len, (uint64_t)1 << 62);
    REFUSE(&m, MINFER_ERR_FORMAT, "array length 4611686018427387904", hex(L.u32s_len));
    set_u64(&m, L.u32s_len, 3);
    set_u64(&m, L.tok_len, UINT64_MAX);
    REFUSE(&m, MINFER_ERR_FORMAT, "array length 18446744073709551615", "at least 8");
    free(m.b);
}
END_TEST

START_TEST(array_string_length_overflow)
{
    /* Catches an unchecked length inside a string array (the tokenizer
     * arrays hold 150k of them). */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.tok_el1_len, UINT64_MAX - 3);
    REFUSE(&m, MINFER_ERR_FORMAT, "key #2 ('tokenizer.ggml.tokens') element 1 string length",
           hex(L.tok_el1_len));
    free(m.b);
}
END_TEST

START_TEST(duplicate_key)
{
    /* Catches two values for one key (which one a model reads would
     * depend on lookup order). */
    struct layout L;
    struct img m = make_image(&L);
    memcpy(m.b + L.two_key + 8, "test.one", 8);
    REFUSE(&m, MINFER_ERR_FORMAT, "key #5 ('test.one')", hex(L.two_key), "repeats key #4");
    free(m.b);
}
END_TEST

START_TEST(bad_key_bytes)
{
    /* Catches keys that cannot be handed out as C strings: an embedded
     * NUL would make 'test.one' and 'test' collide; an empty key. */
    struct layout L;
    struct img m = make_image(&L);
    m.b[L.one_key + 8 + 4] = 0;
    REFUSE(&m, MINFER_ERR_FORMAT, "key #4", "NUL byte");
    struct img m2 = make_image(&L);
    /* an empty first key: the 20 key bytes then read as the type... */
    set_u64(&m2, L.arch_keylen, 0);
    REFUSE(&m2, MINFER_ERR_FORMAT, "key #0 has an empty name", hex(L.arch_keylen));
    free(m.b);
    free(m2.b);
}
END_TEST

START_TEST(n_dims_out_of_range)
{
    /* Advisory class: huge n_dims (indexing a 4-entry ne[] with it). */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.t0_ndims, 0xffffffffu);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #0 ('t0') n_dims 4294967295", hex(L.t0_ndims),
           "outside 1..4");
    set_u32(&m, L.t0_ndims, 5);
    REFUSE(&m, MINFER_ERR_FORMAT, "n_dims 5");
    set_u32(&m, L.t0_ndims, 0);
    REFUSE(&m, MINFER_ERR_FORMAT, "n_dims 0");
    free(m.b);
}
END_TEST

START_TEST(dimension_not_positive)
{
    /* Catches negative (as int64) and zero dimensions. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.t0_ne1, (uint64_t)-7);
    REFUSE(&m, MINFER_ERR_FORMAT, "ne[1] = -7", hex(L.t0_ne1), "not a positive");
    set_u64(&m, L.t0_ne1, 0);
    REFUSE(&m, MINFER_ERR_FORMAT, "ne[1] = 0");
    free(m.b);
}
END_TEST

START_TEST(element_count_overflow)
{
    /* Advisory class: ne[0] * ne[1] overflowing int64. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.t0_ne0, (uint64_t)1 << 32);
    set_u64(&m, L.t0_ne1, (uint64_t)1 << 32);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #0 ('t0') shape overflows", hex(L.t0_ne1));
    free(m.b);
}
END_TEST

START_TEST(byte_size_overflow)
{
    /* Advisory class: element count x type size overflowing although the
     * element count itself fits (2^61 f32 elements = 2^63 bytes). */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.t0_ne0, (uint64_t)1 << 61);
    set_u64(&m, L.t0_ne1, 1);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #0 ('t0') byte size overflows");
    free(m.b);
}
END_TEST

START_TEST(block_size_mismatch)
{
    /* Catches a quantized row that is not a whole number of blocks. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.t1_ne0, 33);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #1 ('t1') ne[0] = 33", "block size 32");
    free(m.b);
}
END_TEST

START_TEST(unknown_tensor_type)
{
    /* Catches a type id no GGUF type uses being read with some size. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.t0_type, 77);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #0 ('t0') type id 77", hex(L.t0_type));
    set_u32(&m, L.t0_type, 4); /* a removed ggml type */
    REFUSE(&m, MINFER_ERR_FORMAT, "type id 4");
    free(m.b);
}
END_TEST

START_TEST(unsupported_tensor_type_named)
{
    /* Catches misreading a real but unsupported type (q2_K, IQ*): it is
     * refused with the tensor's name and the type's name. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.t1_type, MINFER_TYPE_Q2_K);
    REFUSE(&m, MINFER_ERR_UNSUPPORTED,
           "tensor 't1' has type q2_K (10), which this build does not read");
    set_u32(&m, L.t1_type, MINFER_TYPE_IQ4_NL);
    REFUSE(&m, MINFER_ERR_UNSUPPORTED, "tensor 't1' has type iq4_nl (20)");
    free(m.b);
}
END_TEST

START_TEST(any_type_flag_opens_unsupported)
{
    /* Catches MINFER_GGUF_OPEN_ANY_TYPE either not working (info could not
     * show IQ/q2_K files) or leaking into plain open (a loader would then
     * misread them); sizes of such tensors are still checked. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.t0_type, MINFER_TYPE_Q2_K);
    set_u64(&m, L.t0_ne0, 256);
    set_u64(&m, L.t0_ne1, 1); /* 84 bytes: fits before t1 at 256 */
    char *dir = temp_dir();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/q2k.gguf", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(m.b, 1, m.n, f), m.n);
    fclose(f);
    minfer_status st;
    ck_assert_ptr_null(minfer_gguf_open(path, &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_UNSUPPORTED);
    struct minfer_gguf *g =
        minfer_gguf_open_flags(path, MINFER_GGUF_OPEN_ANY_TYPE, &st, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    ck_assert_uint_eq(minfer_gguf_tensor(g, 0)->type, MINFER_TYPE_Q2_K);
    ck_assert_uint_eq(minfer_gguf_tensor(g, 0)->size, 84);
    minfer_gguf_close(g);
    /* a block-size violation is still refused */
    set_u64(&m, L.t0_ne0, 128);
    f = fopen(path, "wb");
    ck_assert_uint_eq(fwrite(m.b, 1, m.n, f), m.n);
    fclose(f);
    ck_assert_ptr_null(minfer_gguf_open_flags(path, MINFER_GGUF_OPEN_ANY_TYPE, &st, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "block size 256"));
    free(m.b);
    remove_dir(dir);
}
END_TEST

START_TEST(alignment_invalid)
{
    /* Advisory class: alignment 0 (division by zero) or not a power of
     * two; and a general.alignment of the wrong type. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.align_val, 0);
    REFUSE(&m, MINFER_ERR_FORMAT, "general.alignment') value 0", hex(L.align_val),
           "power of two");
    set_u32(&m, L.align_val, 48);
    REFUSE(&m, MINFER_ERR_FORMAT, "value 48");
    set_u32(&m, L.align_val, 32);
    set_u32(&m, L.align_type, MINFER_GGUF_INT32);
    REFUSE(&m, MINFER_ERR_FORMAT, "has type i32, expected u32");
    free(m.b);
}
END_TEST

START_TEST(alignment_respected)
{
    /* Catches ignoring general.alignment: with 64 the data section moves
     * to the next multiple of 64, so tensor t1 (at 256) must follow it. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.align_val, 64);
    size_t want = (L.data + 63) / 64 * 64;
    /* rebuild the data so it starts at the 64-aligned offset */
    size_t shift = want - L.data;
    m.b = realloc(m.b, m.n + shift);
    memmove(m.b + want, m.b + L.data, m.n - L.data);
    memset(m.b + L.data, 0, shift);
    m.n += shift;
    minfer_status st;
    char err[512];
    struct minfer_gguf *g = minfer_gguf_open_memory(m.b, m.n, &st, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    ck_assert_uint_eq(minfer_gguf_alignment(g), 64);
    ck_assert_uint_eq(minfer_gguf_data_offset(g), want);
    ck_assert_uint_eq(minfer_gguf_find_tensor(g, "t1")->offset, want + 256);
    minfer_gguf_close(g);
    /* offsets must be multiples of 64 now: 256 is, 32 is not */
    set_u64(&m, L.t1_off, 32);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #1 ('t1') data offset 32", hex(L.t1_off),
           "multiple of the alignment 64");
    free(m.b);
}
END_TEST

START_TEST(tensor_offset_unaligned)
{
    /* Catches tensors at offsets that break the alignment promise. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.t1_off, 4);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #1 ('t1') data offset 4", "multiple of the alignment 32");
    free(m.b);
}
END_TEST

START_TEST(tensor_offset_past_end)
{
    /* Advisory class: a tensor offset past the end of the file, including
     * one so large that offset + size wraps around 2^64. */
    struct layout L;
    struct img m = make_image(&L);
    set_u64(&m, L.t1_off, 1 << 20);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #1 ('t1') data offset 1048576", hex(L.t1_off),
           "past the end");
    set_u64(&m, L.t1_off, UINT64_MAX - 31);
    REFUSE(&m, MINFER_ERR_FORMAT, "past the end");
    /* starts inside, ends outside */
    set_u64(&m, L.t1_off, m.n - L.data - 32);
    REFUSE(&m, MINFER_ERR_FORMAT, "with 34 bytes ends past the end");
    free(m.b);
}
END_TEST

START_TEST(data_section_past_end)
{
    /* Catches a data section that starts after the file ends (a huge
     * alignment pushes it there) while tensors exist. */
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.align_val, 1u << 31);
    REFUSE(&m, MINFER_ERR_FORMAT, "data section would start", "past the end");
    free(m.b);
}
END_TEST

START_TEST(duplicate_tensor_name)
{
    /* Catches two tensors with one name (which one loads would depend on
     * lookup order). */
    struct layout L;
    struct img m = make_image(&L);
    m.b[L.t1_name + 8 + 1] = '0';
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #1 ('t0')", hex(L.t1_name), "repeats the name of tensor #0");
    free(m.b);
}
END_TEST

START_TEST(tensor_name_over_cap)
{
    /* Catches an unbounded tensor name. */
    struct img m = {0};
    put(&m, "GGUF", 4);
    put_u32(&m, 3);
    put_u64(&m, 1);
    put_u64(&m, 0);
    char name[300];
    memset(name, 'n', sizeof name - 1);
    name[sizeof name - 1] = 0;
    size_t at = put_str(&m, name);
    put_u32(&m, 1);
    put_u64(&m, 1);
    put_u32(&m, 0);
    put_u64(&m, 0);
    pad_to(&m, 32);
    put_u64(&m, 0);
    REFUSE(&m, MINFER_ERR_FORMAT, "tensor #0 name length 299", hex(at), "limit of 255");
    free(m.b);
}
END_TEST

START_TEST(open_file_errors)
{
    /* Catches missing errno text and path in open failures. */
    char err[512];
    minfer_status st;
    ck_assert_ptr_null(minfer_gguf_open("/nonexistent/x.gguf", &st, err, sizeof err));
    ck_assert_int_eq(st, MINFER_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/x.gguf"));
    ck_assert_ptr_nonnull(strstr(err, strerror(ENOENT)));
    ck_assert_ptr_null(minfer_gguf_open("/", &st, err, sizeof err));
    ck_assert_ptr_nonnull(strstr(err, "not a regular file"));
    ck_assert_ptr_null(minfer_gguf_open("/dev/null", &st, err, sizeof err));
}
END_TEST

/* ---- reader: the fixture model ---- */

static char *fixture_path(void)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/models/fixture-A-f16.gguf", MINFER_FIXTURES_DIR);
    return access(p, R_OK) == 0 ? p : NULL;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

START_TEST(fixture_facts)
{
    /* Catches misreading a real converter-written file: metadata of each
     * kind, the 152k-string tokenizer arrays, tensor shapes and offsets. */
    const char *path = fixture_path();
    if (!path)
        MINFER_TEST_SKIP("%s/models/fixture-A-f16.gguf absent", MINFER_FIXTURES_DIR);
    char err[512];
    minfer_status st;
    double t0 = now_s();
    struct minfer_gguf *g = minfer_gguf_open(path, &st, err, sizeof err);
    double dt = now_s() - t0;
    ck_assert_msg(g, "%s", err);
    printf("fixture_facts: open of %s took %.2f ms\n", path, dt * 1e3);
    /* Generous: catches quadratic work over the 152k strings (seconds),
     * not noise; ~10 ms measured on the 2-core dev box. */
    ck_assert_msg(dt < 1.0, "open took %.3f s", dt);

    const char *s;
    size_t len;
    ck_assert_int_eq(minfer_gguf_get_str(g, "general.architecture", &s, &len), MINFER_OK);
    ck_assert(len == 5 && !memcmp(s, "qwen2", 5));
    ck_assert_int_eq(minfer_gguf_kv_count(g), 24);
    ck_assert_int_eq(minfer_gguf_tensor_count(g), 26);
    ck_assert_uint_eq(minfer_gguf_version(g), 3);
    ck_assert_uint_eq(minfer_gguf_alignment(g), 32);
    int64_t v;
    ck_assert_int_eq(minfer_gguf_get_i64(g, "qwen2.block_count", &v), MINFER_OK);
    ck_assert_int_eq(v, 2);
    ck_assert_int_eq(minfer_gguf_get_i64(g, "tokenizer.ggml.eos_token_id", &v), MINFER_OK);
    ck_assert_int_eq(v, 151645);
    double f;
    ck_assert_int_eq(minfer_gguf_get_f64(g, "qwen2.rope.freq_base", &f), MINFER_OK);
    ck_assert(f == 10000.0);
    bool b = true;
    ck_assert_int_eq(minfer_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b), MINFER_OK);
    ck_assert(!b);

    enum minfer_gguf_type et;
    uint64_t n;
    const void *d;
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.tokens", &et, &n, &d), MINFER_OK);
    ck_assert_int_eq(et, MINFER_GGUF_STRING);
    ck_assert_uint_eq(n, 151936);
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 0, &s, &len), MINFER_OK);
    ck_assert(len == 1 && s[0] == '!');
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.tokens", 151645, &s, &len),
                     MINFER_OK);
    ck_assert(len == 10 && !memcmp(s, "<|im_end|>", 10));
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.merges", &et, &n, &d), MINFER_OK);
    ck_assert_uint_eq(n, 151387);
    ck_assert_int_eq(minfer_gguf_get_arr_str(g, "tokenizer.ggml.merges", 2, &s, &len), MINFER_OK);
    ck_assert(len == 3 && !memcmp(s, "i n", 3));
    ck_assert_int_eq(minfer_gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &n, &d), MINFER_OK);
    ck_assert_int_eq(et, MINFER_GGUF_INT32);
    ck_assert_uint_eq(n, 151936);
    ck_assert_ptr_nonnull(d);

    const struct minfer_gguf_tensor *t = minfer_gguf_find_tensor(g, "token_embd.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->type, MINFER_TYPE_F16);
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 64);
    ck_assert_int_eq(t->ne[1], 151936);
    ck_assert_uint_eq(t->size, 64ull * 151936 * 2);
    ck_assert_uint_eq(t->offset, minfer_gguf_data_offset(g));
    ck_assert_uint_eq(minfer_gguf_data_offset(g) % 32, 0);
    ck_assert_uint_eq((uintptr_t)t->data % 32, 0); /* the mapping keeps the alignment */
    t = minfer_gguf_find_tensor(g, "output_norm.weight");
    ck_assert_ptr_nonnull(t);
    ck_assert_uint_eq(t->type, MINFER_TYPE_F32);
    ck_assert_uint_eq(t->offset, minfer_gguf_data_offset(g) + 19646464);
    uint64_t size;
    ck_assert_ptr_nonnull(minfer_gguf_base(g, &size));
    ck_assert_uint_eq(t->offset + t->size, size); /* the last tensor ends the file */
    minfer_gguf_close(g);
}
END_TEST

/* ---- writer ---- */

/* Fill callback: byte k of the tensor is (k * 7 + seed) & 0xff; records
 * that chunks arrive in order. */
struct fill_state {
    uint8_t seed;
    uint64_t next;
    int calls;
    int fail_at_call; /* 0: never */
    const struct minfer_gguf_writer *w; /* when set, checks temp_path */
};

static minfer_status fill_pattern(void *user, uint64_t offset, void *dst, size_t size)
{
    struct fill_state *f = user;
    ck_assert_uint_eq(offset, f->next);
    if (f->w) {
        /* during the write the temporary exists under its advertised name */
        const char *tmp = minfer_gguf_writer_temp_path(f->w);
        ck_assert_ptr_nonnull(tmp);
        ck_assert_int_eq(access(tmp, F_OK), 0);
    }
    if (++f->calls == f->fail_at_call)
        return MINFER_ERR_BACKEND;
    uint8_t *d = dst;
    for (size_t i = 0; i < size; i++)
        d[i] = (uint8_t)((offset + i) * 7 + f->seed);
    f->next = offset + size;
    return MINFER_OK;
}

START_TEST(writer_round_trip)
{
    /* Catches any value type, array kind or tensor field the writer
     * encodes differently from what the reader (and llama.cpp) expects,
     * and misaligned data offsets or non-zero padding. */
    char *dir = temp_dir();
    char path[256];
    snprintf(path, sizeof path, "%s/rt.gguf", dir);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_null(minfer_gguf_writer_new(1));

    uint8_t u8 = 250;
    int8_t i8 = -100;
    uint16_t u16 = 65000;
    int16_t i16 = -30000;
    uint32_t u32 = 4000000000u, align = 64;
    int32_t i32 = -2000000000;
    float f32 = 1.5f;
    bool bo = true;
    uint64_t u64 = UINT64_MAX - 1;
    int64_t i64 = INT64_MIN + 1;
    double f64 = -2.25e300;
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.u8", MINFER_GGUF_UINT8, &u8), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.i8", MINFER_GGUF_INT8, &i8), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.u16", MINFER_GGUF_UINT16, &u16), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.i16", MINFER_GGUF_INT16, &i16), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.u32", MINFER_GGUF_UINT32, &u32), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.i32", MINFER_GGUF_INT32, &i32), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.f32", MINFER_GGUF_FLOAT32, &f32), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.bool", MINFER_GGUF_BOOL, &bo), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.u64", MINFER_GGUF_UINT64, &u64), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.i64", MINFER_GGUF_INT64, &i64), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.f64", MINFER_GGUF_FLOAT64, &f64), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.cstr", MINFER_GGUF_STRING, "hello"), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set_str(w, "v.str", "a\0b", 3), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set_str(w, "v.empty", "", 0), MINFER_OK);
    /* setting twice replaces, keeping the first position */
    ck_assert_int_eq(minfer_gguf_writer_set_str(w, "v.str", "a\0bc", 4), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "general.alignment", MINFER_GGUF_UINT32, &align),
                     MINFER_OK);
    uint32_t bad_align = 24;
    ck_assert_int_eq(minfer_gguf_writer_set(w, "general.alignment", MINFER_GGUF_UINT32,
                                            &bad_align),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(minfer_gguf_writer_set(w, "v.arr", MINFER_GGUF_ARRAY, &u8),
                     MINFER_ERR_INVALID_ARG);

    /* one array of every scalar type: 3 elements of 8 bytes max */
    uint8_t raw[3 * 8];
    for (size_t k = 0; k < sizeof raw; k++)
        raw[k] = (uint8_t)(k * 37 + 1);
    raw[7] = 1; /* keep bools 0/1 */
    static const enum minfer_gguf_type scalars[] = {
        MINFER_GGUF_UINT8,   MINFER_GGUF_INT8,  MINFER_GGUF_UINT16, MINFER_GGUF_INT16,
        MINFER_GGUF_UINT32,  MINFER_GGUF_INT32, MINFER_GGUF_FLOAT32, MINFER_GGUF_BOOL,
        MINFER_GGUF_UINT64,  MINFER_GGUF_INT64, MINFER_GGUF_FLOAT64};
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        char key[32];
        snprintf(key, sizeof key, "a.%s", minfer_gguf_type_name(scalars[k]));
        ck_assert_int_eq(minfer_gguf_writer_set_arr(w, key, scalars[k], raw, 3), MINFER_OK);
    }
    ck_assert_int_eq(minfer_gguf_writer_set_arr(w, "a.none", MINFER_GGUF_INT32, NULL, 0),
                     MINFER_OK);
    const char *strs[] = {"x", "", "zzz", "multi\nline"};
    ck_assert_int_eq(minfer_gguf_writer_set_arr_str(w, "a.str", strs, NULL, 4), MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_set_arr_str(w, "a.str0", NULL, NULL, 0), MINFER_OK);

    float t0[3 * 5];
    for (int k = 0; k < 15; k++)
        t0[k] = (float)k - 7.5f;
    int64_t ne0[2] = {3, 5}, ne1[3] = {64, 3, 2}, ne2[1] = {256};
    struct fill_state fs = {.seed = 11};
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "t.f32", MINFER_TYPE_F32, 2, ne0, t0, NULL,
                                                   NULL),
                     MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "t.q8", MINFER_TYPE_Q8_0, 3, ne1, NULL,
                                                   fill_pattern, &fs),
                     MINFER_OK);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "t.q8", MINFER_TYPE_F32, 1, ne2, t0, NULL,
                                                   NULL),
                     MINFER_ERR_INVALID_ARG); /* duplicate name */
    int64_t bad_ne[1] = {33};
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "t.bad", MINFER_TYPE_Q8_0, 1, bad_ne, t0,
                                                   NULL, NULL),
                     MINFER_ERR_INVALID_ARG); /* not whole blocks */
    static uint16_t bf[256];
    for (int k = 0; k < 256; k++)
        bf[k] = minfer_fp32_to_bf16((float)k);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "t.bf16", MINFER_TYPE_BF16, 1, ne2, bf,
                                                   NULL, NULL),
                     MINFER_OK);
    char err[512];
    ck_assert_int_eq(minfer_gguf_writer_write(w, path, err, sizeof err), MINFER_OK);
    minfer_gguf_writer_free(w);
    ck_assert_int_eq(dir_entries(dir), 1); /* no temporary left behind */

    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open(path, &st, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    ck_assert_uint_eq(minfer_gguf_version(g), 3);
    ck_assert_uint_eq(minfer_gguf_alignment(g), 64);
    ck_assert_uint_eq(minfer_gguf_data_offset(g) % 64, 0);
    const void *d;
    size_t len;
    struct {
        const char *key;
        enum minfer_gguf_type t;
        const void *v;
    } want[] = {
        {"v.u8", MINFER_GGUF_UINT8, &u8},     {"v.i8", MINFER_GGUF_INT8, &i8},
        {"v.u16", MINFER_GGUF_UINT16, &u16},  {"v.i16", MINFER_GGUF_INT16, &i16},
        {"v.u32", MINFER_GGUF_UINT32, &u32},  {"v.i32", MINFER_GGUF_INT32, &i32},
        {"v.f32", MINFER_GGUF_FLOAT32, &f32}, {"v.bool", MINFER_GGUF_BOOL, &bo},
        {"v.u64", MINFER_GGUF_UINT64, &u64},  {"v.i64", MINFER_GGUF_INT64, &i64},
        {"v.f64", MINFER_GGUF_FLOAT64, &f64},
    };
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++) {
        int64_t i = minfer_gguf_find_key(g, want[k].key);
        ck_assert_int_eq(i, (int64_t)k);
        ck_assert_int_eq(minfer_gguf_kv_type(g, i), want[k].t);
        ck_assert_int_eq(minfer_gguf_kv_scalar(g, i, &d, &len), MINFER_OK);
        ck_assert_uint_eq(len, gguf_scalar_size(want[k].t));
        ck_assert_msg(!memcmp(d, want[k].v, len), "%s differs", want[k].key);
    }
    const char *s;
    ck_assert_int_eq(minfer_gguf_get_str(g, "v.cstr", &s, &len), MINFER_OK);
    ck_assert(len == 5 && !memcmp(s, "hello", 5));
    ck_assert_int_eq(minfer_gguf_get_str(g, "v.str", &s, &len), MINFER_OK);
    ck_assert(len == 4 && !memcmp(s, "a\0bc", 4));
    ck_assert_int_eq(minfer_gguf_find_key(g, "v.str"), 12);
    ck_assert_int_eq(minfer_gguf_get_str(g, "v.empty", &s, &len), MINFER_OK);
    ck_assert_uint_eq(len, 0);
    for (size_t k = 0; k < sizeof scalars / sizeof scalars[0]; k++) {
        char key[32];
        enum minfer_gguf_type et;
        uint64_t n;
        snprintf(key, sizeof key, "a.%s", minfer_gguf_type_name(scalars[k]));
        ck_assert_int_eq(minfer_gguf_get_arr(g, key, &et, &n, &d), MINFER_OK);
        ck_assert_int_eq(et, scalars[k]);
        ck_assert_uint_eq(n, 3);
        ck_assert_msg(!memcmp(d, raw, 3 * gguf_scalar_size(scalars[k])), "%s differs", key);
    }
    enum minfer_gguf_type et;
    uint64_t n;
    ck_assert_int_eq(minfer_gguf_get_arr(g, "a.none", &et, &n, &d), MINFER_OK);
    ck_assert_uint_eq(n, 0);
    ck_assert_int_eq(minfer_gguf_get_arr(g, "a.str", &et, &n, &d), MINFER_OK);
    ck_assert_int_eq(et, MINFER_GGUF_STRING);
    ck_assert_uint_eq(n, 4);
    for (uint64_t k = 0; k < 4; k++) {
        ck_assert_int_eq(minfer_gguf_get_arr_str(g, "a.str", k, &s, &len), MINFER_OK);
        ck_assert_uint_eq(len, strlen(strs[k]));
        ck_assert(!memcmp(s, strs[k], len));
    }
    ck_assert_int_eq(minfer_gguf_get_arr(g, "a.str0", &et, &n, &d), MINFER_OK);
    ck_assert_uint_eq(n, 0);

    ck_assert_int_eq(minfer_gguf_tensor_count(g), 3);
    const struct minfer_gguf_tensor *t = minfer_gguf_find_tensor(g, "t.f32");
    ck_assert_uint_eq(t->n_dims, 2);
    ck_assert_int_eq(t->ne[0], 3);
    ck_assert_int_eq(t->ne[1], 5);
    ck_assert_uint_eq(t->size, sizeof t0);
    ck_assert(!memcmp(t->data, t0, sizeof t0));
    const uint8_t *base = minfer_gguf_base(g, NULL);
    /* padding after the 60-byte tensor is zero up to the next 64 */
    for (uint64_t k = t->offset + t->size; k < t->offset + 64; k++)
        ck_assert_uint_eq(base[k], 0);
    t = minfer_gguf_find_tensor(g, "t.q8");
    ck_assert_uint_eq(t->offset % 64, 0);
    ck_assert_uint_eq(t->offset, minfer_gguf_data_offset(g) + 64);
    ck_assert_uint_eq(t->size, 6 * 2 * 34);
    for (uint64_t k = 0; k < t->size; k++)
        ck_assert_uint_eq(((const uint8_t *)t->data)[k], (uint8_t)(k * 7 + 11));
    t = minfer_gguf_find_tensor(g, "t.bf16");
    ck_assert_uint_eq(t->offset % 64, 0);
    ck_assert(!memcmp(t->data, bf, sizeof bf));
    uint64_t fsize;
    minfer_gguf_base(g, &fsize);
    ck_assert_uint_eq(fsize % 64, 0); /* the last tensor is padded too, as llama.cpp writes */
    minfer_gguf_close(g);
    remove_dir(dir);
}
END_TEST

START_TEST(writer_copies_fixture_byte_exact)
{
    /* Catches any layout difference from llama.cpp's own writer: copying
     * every key (copy_kv) and tensor of a file llama.cpp's converter wrote
     * must reproduce it byte for byte. */
    const char *src = fixture_path();
    if (!src)
        MINFER_TEST_SKIP("%s/models/fixture-A-f16.gguf absent", MINFER_FIXTURES_DIR);
    char err[512];
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open(src, &st, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(minfer_gguf_version(g));
    for (int64_t i = 0; i < minfer_gguf_kv_count(g); i++)
        ck_assert_int_eq(minfer_gguf_writer_copy_kv(w, g, i), MINFER_OK);
    for (int64_t i = 0; i < minfer_gguf_tensor_count(g); i++) {
        const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, i);
        ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne,
                                                       t->data, NULL, NULL),
                         MINFER_OK);
    }
    char *dir = temp_dir();
    char path[256];
    snprintf(path, sizeof path, "%s/copy.gguf", dir);
    ck_assert_msg(minfer_gguf_writer_write(w, path, err, sizeof err) == MINFER_OK, "%s", err);
    minfer_gguf_writer_free(w);
    struct minfer_gguf *c = minfer_gguf_open(path, &st, err, sizeof err);
    ck_assert_msg(c, "%s", err);
    uint64_t na, nb;
    const uint8_t *a = minfer_gguf_base(g, &na), *b = minfer_gguf_base(c, &nb);
    ck_assert_uint_eq(na, nb);
    for (uint64_t k = 0; k < na; k++)
        if (a[k] != b[k])
            ck_abort_msg("copy differs from the original at byte %" PRIu64, k);
    minfer_gguf_close(c);
    minfer_gguf_close(g);
    remove_dir(dir);
}
END_TEST

START_TEST(writer_fill_chunks_large_tensor)
{
    /* Catches a streaming writer that loses or repeats bytes at chunk
     * boundaries: a 9 MiB tensor spans several fill calls. */
    char *dir = temp_dir();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/big.gguf", dir);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    int64_t ne[2] = {1024, 9 * 256}; /* f32: 9 MiB */
    struct fill_state fs = {.seed = 3};
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "big", MINFER_TYPE_F32, 2, ne, NULL,
                                                   fill_pattern, &fs),
                     MINFER_OK);
    ck_assert_msg(minfer_gguf_writer_write(w, path, err, sizeof err) == MINFER_OK, "%s", err);
    ck_assert_int_ge(fs.calls, 3);
    minfer_gguf_writer_free(w);
    minfer_status st;
    struct minfer_gguf *g = minfer_gguf_open(path, &st, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    const struct minfer_gguf_tensor *t = minfer_gguf_tensor(g, 0);
    ck_assert_uint_eq(t->size, 9u << 20);
    const uint8_t *p = t->data;
    for (uint64_t k = 0; k < t->size; k++)
        if (p[k] != (uint8_t)(k * 7 + 3))
            ck_abort_msg("byte %" PRIu64 " wrong", k);
    minfer_gguf_close(g);
    remove_dir(dir);
}
END_TEST

START_TEST(writer_failure_leaves_no_file)
{
    /* Catches a failed write that leaves a half file at the target or a
     * stray temporary: a fill callback error aborts the write. */
    char *dir = temp_dir();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/fail.gguf", dir);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    int64_t ne[2] = {1024, 4096}; /* 16 MiB: several chunks */
    struct fill_state fs = {.seed = 1, .fail_at_call = 3, .w = w};
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "x", MINFER_TYPE_F32, 2, ne, NULL,
                                                   fill_pattern, &fs),
                     MINFER_OK);
    ck_assert_ptr_null(minfer_gguf_writer_temp_path(w));
    ck_assert_int_eq(minfer_gguf_writer_write(w, path, err, sizeof err), MINFER_ERR_BACKEND);
    ck_assert_ptr_null(minfer_gguf_writer_temp_path(w));
    ck_assert_ptr_nonnull(strstr(err, path));
    ck_assert_ptr_nonnull(strstr(err, "fill callback failed"));
    ck_assert_int_eq(dir_entries(dir), 0);
    minfer_gguf_writer_free(w);
    remove_dir(dir);
}
END_TEST

START_TEST(writer_disk_full_reports_errno)
{
    /* Catches ignoring a failing write(2) (disk full): with the file size
     * limited (RLIMIT_FSIZE -> EFBIG, like ENOSPC a short/failed write)
     * the error names the path and the errno text, and no file remains. */
    char *dir = temp_dir();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/full.gguf", dir);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    int64_t ne[1] = {1 << 20}; /* 4 MiB of f32 */
    struct fill_state fs = {.seed = 1};
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, "x", MINFER_TYPE_F32, 1, ne, NULL,
                                                   fill_pattern, &fs),
                     MINFER_OK);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {1 << 20, 1 << 20};
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &rl), 0); /* this forked test only */
    ck_assert_int_eq(minfer_gguf_writer_write(w, path, err, sizeof err), MINFER_ERR_IO);
    ck_assert_msg(strstr(err, path) && strstr(err, strerror(EFBIG)), "%s", err);
    ck_assert_int_eq(dir_entries(dir), 0);
    minfer_gguf_writer_free(w);
    remove_dir(dir);
    /* a directory that does not exist: the errno text and the path */
    ck_assert_int_eq(minfer_gguf_writer_write(NULL, path, err, sizeof err),
                     MINFER_ERR_INVALID_ARG);
    w = minfer_gguf_writer_new(3);
    ck_assert_int_eq(minfer_gguf_writer_write(w, "/nonexistent-dir/x.gguf", err, sizeof err),
                     MINFER_ERR_IO);
    ck_assert_msg(strstr(err, "/nonexistent-dir/x.gguf") && strstr(err, strerror(ENOENT)), "%s",
                  err);
    minfer_gguf_writer_free(w);
}
END_TEST

/* ---- minfer info ---- */

/* Runs the CLI and returns its stdout+stderr (malloc'd) and exit status. */
static char *run_cli(const char *args, int *status)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/bin/minfer %s 2>&1", MINFER_BUILD_DIR, args);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *out = malloc(cap);
    size_t k;
    while ((k = fread(out + n, 1, cap - n - 1, p)) > 0) {
        n += k;
        if (cap - n < 4096)
            out = realloc(out, cap *= 2);
    }
    out[n] = '\0';
    int rc = pclose(p);
    *status = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
    return out;
}

START_TEST(info_cli_reads_fixture)
{
    /* Catches `minfer info` failing on or misprinting a real file: the
     * architecture, an abbreviated 151936-item array and a tensor row. */
    char bin[512];
    snprintf(bin, sizeof bin, "%s/bin/minfer", MINFER_BUILD_DIR);
    if (access(bin, X_OK))
        MINFER_TEST_SKIP("%s not built", bin);
    const char *src = fixture_path();
    if (!src)
        MINFER_TEST_SKIP("%s/models/fixture-A-f16.gguf absent", MINFER_FIXTURES_DIR);
    char args[1100];
    snprintf(args, sizeof args, "info --items 3 '%s'", src);
    int rc;
    char *out = run_cli(args, &rc);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, out);
    const char *want[] = {"GGUF v3", "general.architecture", "\"qwen2\"",
                          "tokenizer.ggml.tokens", "151936 items [\"!\", \"\\\"\", \"#\", ...]",
                          "token_embd.weight", "f16", "[64, 151936]", "19447808", "26 tensors",
                          "qwen2.rope.freq_base", "10000"};
    for (size_t k = 0; k < sizeof want / sizeof want[0]; k++)
        ck_assert_msg(strstr(out, want[k]), "output lacks '%s':\n%.2000s", want[k], out);
    free(out);
}
END_TEST

START_TEST(info_cli_reports_refusal)
{
    /* Catches `minfer info` crashing or exiting 0 on a corrupt file. */
    char bin[512];
    snprintf(bin, sizeof bin, "%s/bin/minfer", MINFER_BUILD_DIR);
    if (access(bin, X_OK))
        MINFER_TEST_SKIP("%s not built", bin);
    struct layout L;
    struct img m = make_image(&L);
    set_u32(&m, L.t0_ndims, 9);
    char *dir = temp_dir();
    char path[256], args[300];
    snprintf(path, sizeof path, "%s/bad.gguf", dir);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(m.b, 1, m.n, f), m.n);
    fclose(f);
    snprintf(args, sizeof args, "info %s", path);
    int rc;
    char *out = run_cli(args, &rc);
    ck_assert_int_eq(rc, 1);
    ck_assert_msg(strstr(out, "n_dims 9") && strstr(out, path), "%s", out);
    free(out);
    free(m.b);
    remove_dir(dir);
}
END_TEST

/* ---- suite ---- */

Suite *gguf_suite(void);
Suite *gguf_suite(void)
{
    Suite *s = suite_create("gguf");
    TCase *tc = tcase_create("reader");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, image_reads_back);
    tcase_add_test(tc, every_truncation_refused);
    tcase_add_test(tc, bad_magic);
    tcase_add_test(tc, version_1_refused);
    tcase_add_test(tc, version_2_accepted_4_refused);
    tcase_add_test(tc, big_endian_refused);
    tcase_add_test(tc, kv_count_larger_than_file);
    tcase_add_test(tc, tensor_count_larger_than_file);
    tcase_add_test(tc, key_length_overflow);
    tcase_add_test(tc, string_value_length_overflow);
    tcase_add_test(tc, string_over_cap);
    tcase_add_test(tc, value_type_out_of_range);
    tcase_add_test(tc, array_element_type_lies);
    tcase_add_test(tc, nested_array_refused);
    tcase_add_test(tc, array_length_larger_than_file);
    tcase_add_test(tc, array_string_length_overflow);
    tcase_add_test(tc, duplicate_key);
    tcase_add_test(tc, bad_key_bytes);
    tcase_add_test(tc, n_dims_out_of_range);
    tcase_add_test(tc, dimension_not_positive);
    tcase_add_test(tc, element_count_overflow);
    tcase_add_test(tc, byte_size_overflow);
    tcase_add_test(tc, block_size_mismatch);
    tcase_add_test(tc, unknown_tensor_type);
    tcase_add_test(tc, unsupported_tensor_type_named);
    tcase_add_test(tc, any_type_flag_opens_unsupported);
    tcase_add_test(tc, alignment_invalid);
    tcase_add_test(tc, alignment_respected);
    tcase_add_test(tc, tensor_offset_unaligned);
    tcase_add_test(tc, tensor_offset_past_end);
    tcase_add_test(tc, data_section_past_end);
    tcase_add_test(tc, duplicate_tensor_name);
    tcase_add_test(tc, tensor_name_over_cap);
    tcase_add_test(tc, open_file_errors);
    tcase_add_test(tc, fixture_facts);
    suite_add_tcase(s, tc);
    tc = tcase_create("writer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, writer_round_trip);
    tcase_add_test(tc, writer_copies_fixture_byte_exact);
    tcase_add_test(tc, writer_fill_chunks_large_tensor);
    tcase_add_test(tc, writer_failure_leaves_no_file);
    tcase_add_test(tc, writer_disk_full_reports_errno);
    suite_add_tcase(s, tc);
    tc = tcase_create("info");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, info_cli_reads_fixture);
    tcase_add_test(tc, info_cli_reports_refusal);
    suite_add_tcase(s, tc);
    return s;
}
