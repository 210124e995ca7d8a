/*
 * gguf-reader.h — the layout of an open GGUF handle, shared by the reader's
 * two halves: gguf.c fills it while validating the file at open,
 * gguf-query.c answers metadata and tensor queries from it afterwards.
 */
#ifndef MINFER_GGUF_READER_H
#define MINFER_GGUF_READER_H

#include <stdbool.h>
#include <stdint.h>

#include "minfer/gguf.h"

struct gguf_kv {
    const char *key;       /* NUL-terminated, in g->names */
    const uint8_t *kraw;   /* the key's bytes in the file (during open) */
    uint64_t klen;
    uint32_t type;         /* enum minfer_gguf_type */
    uint32_t elem_type;    /* arrays only */
    uint64_t n;            /* arrays: element count; strings: byte length */
    uint64_t off;          /* file offset of the value, after the type tag */
    uint64_t raw_len;      /* bytes of the serialized value */
    const uint8_t *data;   /* scalar value, string bytes or first array element */
    uint64_t *str_index;   /* string arrays: offset of element j's length, from data */
};

struct gguf_tinfo {
    const uint8_t *nraw;   /* name bytes in the file (during open) */
    uint64_t nlen;
    uint64_t info_off;     /* file offset of the tensor info */
    uint64_t off_field;    /* file offset of the tensor's offset field */
    uint64_t rel_off;      /* data offset relative to the data section */
};

struct minfer_gguf {
    const uint8_t *base;
    uint64_t size;
    bool mapped;
    uint32_t version;
    uint64_t alignment;
    uint64_t data_offset;
    int64_t n_kv;
    struct gguf_kv *kv;
    int64_t n_tensors;
    struct minfer_gguf_tensor *tensors;
    struct gguf_tinfo *tinfo; /* freed after open */
    char *names;              /* every key and tensor name, NUL-terminated */
    int64_t *kv_hash;         /* open addressing, -1 empty */
    int64_t *t_hash;
    uint64_t kv_mask, t_mask;
};


#endif /* MINFER_GGUF_READER_H */
