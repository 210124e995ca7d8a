/*
 * session-format.h — the bytes of a session file (one sequence's tokens
 * and KV cells) and their parser, kept apart from the context so the
 * parser can be fuzzed alone (tests/fuzz/fuzz-session.c). Internal.
 *
 * Layout (little-endian), SESSION_HEADER_BYTES of header then the payload:
 *    0  magic "MINFERKV"           8 bytes
 *    8  u32 version (1)           12  u32 header bytes
 *   16  u64 hash of the model's tensor names, types and shapes
 *   24  u64 hash of the model's metadata (every key and value)
 *   32  u32 tensors               36  u32 KV type of K   40  u32 of V
 *   44  u32 layers                48  u64 K row elements 56  u64 V row elements
 *   64  u64 K row bytes           72  u64 V row bytes
 *   80  u32 tokens                84  u32 cells          88  u64 payload bytes
 *   96  u64 XXH3-64 of bytes [0, 96) and the payload
 * payload: i32 tokens[tokens], i32 positions[cells] (ascending), then per
 * layer the cells' K rows and then their V rows.
 */
#ifndef MINFER_CORE_SESSION_FORMAT_H
#define MINFER_CORE_SESSION_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "minfer/ir.h"

#define SESSION_MAGIC "MINFERKV"
#define SESSION_VERSION 1u
#define SESSION_HEADER_BYTES 104u
#define SESSION_MAX_LAYERS 4096u

struct session_header {
    uint32_t version;
    uint64_t model_tensors, model_meta; /* fingerprint */
    uint32_t n_tensors;
    uint32_t type_k, type_v, n_layer;
    uint64_t row_k, row_v, row_bytes_k, row_bytes_v;
    uint32_t n_tokens, n_cells;
    uint64_t payload_bytes;
};

/* A parsed file: the header and pointers into the caller's bytes. */
struct session_view {
    struct session_header h;
    const int32_t *tokens;  /* [n_tokens] (unaligned reads: use memcpy) */
    const int32_t *pos;     /* [n_cells] */
    const uint8_t *rows;    /* per layer: K rows [n_cells], then V rows [n_cells] */
};

/* Payload bytes the header's counts imply; UINT64_MAX when they overflow. */
uint64_t session_payload_bytes(const struct session_header *h);

/* Writes h (with its checksum over header and payload) into out[104]. */
void session_header_write(const struct session_header *h, const void *payload, uint8_t *out);

/* Checks buf[len] is a whole, intact session file: magic, version, sizes
 * that add up, the checksum, positions ascending and >= 0. MINFER_ERR_FORMAT
 * (truncated, trailing bytes, corrupt) or MINFER_ERR_UNSUPPORTED (another
 * version) with the reason in why. Reads nothing outside buf. */
minfer_status session_parse(const void *buf, size_t len, struct session_view *out, char *why,
                            size_t why_len);

#endif /* MINFER_CORE_SESSION_FORMAT_H */
