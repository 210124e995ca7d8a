/*
 * test-gguf.c — the GGUF reader.
 *
 * Reader refusals: a small valid image is built in memory (by hand, not
 * by our writer, so a writer bug cannot hide a reader bug), then one
 * field is corrupted per test: one test per refusal class, including the
 * classes behind llama.cpp's published GGUF advisories (string length
 * overflow, huge n_dims, tensor/KV counts larger than the file,
 * element-count x type-size overflow, alignment 0 or not a power of two,
 * a tensor offset past the end, an array whose element type lies). Each
 * checks the status and that the message names the field, value and
 * offset. The real fixture model checks facts a converter wrote. The
 * writer is tested in test-gguf-write.c.
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
#include "gguf-image.h"
#include "testutil.h"

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

/* Writes m to path: minfer_gguf_open_flags reads files, not memory. */
static void write_image(const char *path, const struct img *m)
{
    FILE *f = fopen(path, "wb");
    ck_assert_msg(f, "cannot create %s", path);
    ck_assert_uint_eq(fwrite(m->b, 1, m->n, f), m->n);
    ck_assert_int_eq(fclose(f), 0);
}

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
    write_image(path, &m);
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
    write_image(path, &m);
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
    return s;
}
