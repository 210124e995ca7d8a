/*
 * fuzz-session.c — libFuzzer target for the session file parser
 * (core/model/session-format.c): parses the input and, when it is
 * accepted, reads every token, position and KV row byte it points at and
 * checks the promises the parser makes (counts that add up to the input,
 * positions ascending). Any out-of-bounds read is ASan's to find.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/session-format.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint8_t sink;

#define CHECK(c)                                                                           \
    do {                                                                                   \
        if (!(c))                                                                          \
            __builtin_trap();                                                              \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct session_view v;
    char why[256];
    minfer_status st = session_parse(data, size, &v, why, sizeof why);
    if (st != MINFER_OK) {
        CHECK(why[0] != 0); /* every refusal says why */
        return 0;
    }
    const struct session_header *h = &v.h;
    CHECK(SESSION_HEADER_BYTES + h->payload_bytes == size);
    CHECK(session_payload_bytes(h) == h->payload_bytes);
    uint8_t acc = 0;
    int32_t prev = -1;
    for (uint32_t i = 0; i < h->n_tokens; i++) {
        int32_t t;
        memcpy(&t, v.tokens + i, sizeof t);
        acc ^= (uint8_t)t;
    }
    for (uint32_t i = 0; i < h->n_cells; i++) {
        int32_t p;
        memcpy(&p, v.pos + i, sizeof p);
        CHECK(p > prev);
        prev = p;
    }
    uint64_t rows = (uint64_t)h->n_layer * h->n_cells * (h->row_bytes_k + h->row_bytes_v);
    for (uint64_t i = 0; i < rows; i++)
        acc ^= v.rows[i];
    sink = acc;
    return 0;
}
