/*
 * test-gguf-write.c — the GGUF writer and `minfer info`: round trips of
 * every value type and tensor field, a byte-exact copy of the fixture
 * model, chunked fills of a large tensor, and failure cleanup (a failed
 * or disk-full write leaves no file behind and names errno).
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
#include <unistd.h>

#include "gguf-image.h"
#include "minfer/quant.h"
#include "testutil.h"

/* ---- writer ---- */

/* Fill callback: byte k of the tensor is (k * 7 + seed) & 0xff; records
 * that chunks arrive in order. */
struct fill_state {
    uint8_t seed;
    uint64_t next;
    int calls;
    int fail_at_call; /* 0: never */
    const struct minfer_gguf_writer *w; /* when set, checks temp_path */
    const char *empty_dir;              /* when set, must stay empty during the write */
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
    if (f->empty_dir)
        ck_assert_msg(dir_entries(f->empty_dir) == 0, "the temporary has a name in %s",
                      f->empty_dir);
    if (++f->calls == f->fail_at_call)
        return MINFER_ERR_BACKEND;
    uint8_t *d = dst;
    for (size_t i = 0; i < size; i++)
        d[i] = (uint8_t)((offset + i) * 7 + f->seed);
    f->next = offset + size;
    return MINFER_OK;
}

/* A writer holding one f32 tensor whose bytes fill_pattern streams from
 * fs: the start of every test of the streaming path. */
static struct minfer_gguf_writer *streaming_writer(const char *name, int n_dims, const int64_t *ne,
                                                   struct fill_state *fs)
{
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(minfer_gguf_writer_add_tensor(w, name, MINFER_TYPE_F32, n_dims, ne, NULL,
                                                   fill_pattern, fs),
                     MINFER_OK);
    return w;
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
    int64_t ne[2] = {1024, 9 * 256}; /* f32: 9 MiB */
    struct fill_state fs = {.seed = 3};
    struct minfer_gguf_writer *w = streaming_writer("big", 2, ne, &fs);
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
    int64_t ne[2] = {1024, 4096}; /* 16 MiB: several chunks */
    struct fill_state fs = {.seed = 1, .fail_at_call = 3};
    struct minfer_gguf_writer *w = streaming_writer("x", 2, ne, &fs);
    fs.w = w;
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

START_TEST(writer_temporary_is_unnamed)
{
    /* Catches a named temporary (which a killed writer leaves behind): on
     * Linux the data goes to an O_TMPFILE, so the directory holds nothing
     * until the finished file is linked in. */
    char *dir = temp_dir();
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/anon.gguf", dir);
    int64_t ne[2] = {1024, 2048}; /* 8 MiB: the callback runs mid-write */
    struct fill_state fs = {.seed = 3, .empty_dir = dir};
    struct minfer_gguf_writer *w = streaming_writer("x", 2, ne, &fs);
    fs.w = w;
    minfer_status st = minfer_gguf_writer_write(w, path, err, sizeof err);
    ck_assert_msg(st == MINFER_OK, "%s", err);
    ck_assert_int_eq(dir_entries(dir), 1);
    minfer_gguf_writer_free(w);
    remove_dir(dir);
}
END_TEST

START_TEST(writer_output_path_rules)
{
    /* Catches a FIFO, a directory or a dangling symlink at the output path
     * being replaced (or written through), and a symlink replaced by a
     * regular file instead of its target being written. */
    char *dir = temp_dir();
    char fifo[256], sub[256], link[256], target[256], err[512];
    snprintf(fifo, sizeof fifo, "%s/fifo", dir);
    snprintf(sub, sizeof sub, "%s/sub", dir);
    snprintf(link, sizeof link, "%s/link", dir);
    snprintf(target, sizeof target, "%s/target.gguf", dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(mkdir(sub, 0700), 0);
    const char *bad[] = {fifo, sub};
    const char *kind[] = {"a FIFO", "a directory"};
    for (int i = 0; i < 2; i++) {
        struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
        ck_assert_int_eq(minfer_gguf_writer_write(w, bad[i], err, sizeof err),
                         MINFER_ERR_INVALID_ARG);
        ck_assert_msg(strstr(err, kind[i]), "%s", err);
        minfer_gguf_writer_free(w);
    }
    struct stat sb;
    ck_assert(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
    ck_assert_int_eq(symlink("missing", link), 0);
    struct minfer_gguf_writer *w = minfer_gguf_writer_new(3);
    ck_assert_int_eq(minfer_gguf_writer_write(w, link, err, sizeof err), MINFER_ERR_INVALID_ARG);
    ck_assert_int_eq(unlink(link), 0);
    FILE *f = fopen(target, "w");
    fputs("old", f);
    fclose(f);
    ck_assert_int_eq(symlink("target.gguf", link), 0);
    ck_assert_msg(minfer_gguf_writer_write(w, link, err, sizeof err) == MINFER_OK, "%s", err);
    ck_assert(lstat(link, &sb) == 0 && S_ISLNK(sb.st_mode));
    ck_assert(stat(target, &sb) == 0 && sb.st_size > 3);
    minfer_gguf_writer_free(w);
    rmdir(sub);
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
    int64_t ne[1] = {1 << 20}; /* 4 MiB of f32 */
    struct fill_state fs = {.seed = 1};
    struct minfer_gguf_writer *w = streaming_writer("x", 1, ne, &fs);
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

Suite *gguf_write_suite(void);
Suite *gguf_write_suite(void)
{
    Suite *s = suite_create("gguf-write");
    TCase *tc;
    tc = tcase_create("writer");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, writer_round_trip);
    tcase_add_test(tc, writer_copies_fixture_byte_exact);
    tcase_add_test(tc, writer_fill_chunks_large_tensor);
    tcase_add_test(tc, writer_failure_leaves_no_file);
    tcase_add_test(tc, writer_disk_full_reports_errno);
    tcase_add_test(tc, writer_temporary_is_unnamed);
    tcase_add_test(tc, writer_output_path_rules);
    suite_add_tcase(s, tc);
    tc = tcase_create("info");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, info_cli_reads_fixture);
    tcase_add_test(tc, info_cli_reports_refusal);
    suite_add_tcase(s, tc);
    return s;
}
