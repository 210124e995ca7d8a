/*
 * session-format.c — session file header and parser (see
 * session-format.h for the layout). The checksum is libxxhash's XXH3-64.
 */
#include "session-format.h"

#include <string.h>
#include <xxhash.h>

#include "runtime/error.h"

static uint32_t rd32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static void wr32(uint8_t *p, uint32_t v)
{
    memcpy(p, &v, 4);
}

static void wr64(uint8_t *p, uint64_t v)
{
    memcpy(p, &v, 8);
}

/* a + b and a * b, or UINT64_MAX when they overflow */
static uint64_t add_sat(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
    return a && b > UINT64_MAX / a ? UINT64_MAX : a * b;
}

uint64_t session_payload_bytes(const struct session_header *h)
{
    uint64_t rows = mul_sat(mul_sat(h->n_layer, h->n_cells),
                            add_sat(h->row_bytes_k, h->row_bytes_v));
    uint64_t n = add_sat(add_sat(4ull * h->n_tokens, 4ull * h->n_cells), rows);
    return n >= UINT64_MAX / 2 ? UINT64_MAX : n;
}

static uint64_t checksum(const uint8_t *hdr, const void *payload, uint64_t n)
{
    XXH3_state_t *st = XXH3_createState();
    if (!st) /* no memory: a value no file carries is fine, the caller reports */
        return 0;
    XXH3_64bits_reset(st);
    XXH3_64bits_update(st, hdr, 96);
    XXH3_64bits_update(st, payload, (size_t)n);
    uint64_t v = XXH3_64bits_digest(st);
    XXH3_freeState(st);
    return v;
}

void session_header_write(const struct session_header *h, const void *payload, uint8_t *out)
{
    memset(out, 0, SESSION_HEADER_BYTES);
    memcpy(out, SESSION_MAGIC, 8);
    wr32(out + 8, h->version);
    wr32(out + 12, SESSION_HEADER_BYTES);
    wr64(out + 16, h->model_tensors);
    wr64(out + 24, h->model_meta);
    wr32(out + 32, h->n_tensors);
    wr32(out + 36, h->type_k);
    wr32(out + 40, h->type_v);
    wr32(out + 44, h->n_layer);
    wr64(out + 48, h->row_k);
    wr64(out + 56, h->row_v);
    wr64(out + 64, h->row_bytes_k);
    wr64(out + 72, h->row_bytes_v);
    wr32(out + 80, h->n_tokens);
    wr32(out + 84, h->n_cells);
    wr64(out + 88, h->payload_bytes);
    wr64(out + 96, checksum(out, payload, h->payload_bytes));
}

minfer_status session_parse(const void *buf, size_t len, struct session_view *out, char *why,
                            size_t why_len)
{
    const uint8_t *p = buf;
    memset(out, 0, sizeof *out);
    if (len < 16 || memcmp(p, SESSION_MAGIC, 8)) {
        return errf(why, why_len, MINFER_ERR_FORMAT,
                    len < 8 ? "truncated: %zu bytes, not even a header"
                            : "not a minfer session file (no MINFERKV magic; %zu bytes)",
                    len);
    }
    struct session_header *h = &out->h;
    h->version = rd32(p + 8);
    if (h->version != SESSION_VERSION) {
        return errf(why, why_len, MINFER_ERR_UNSUPPORTED,
                    "session format version %u; this build reads version %u", h->version,
                    SESSION_VERSION);
    }
    if (rd32(p + 12) != SESSION_HEADER_BYTES) {
        return errf(why, why_len, MINFER_ERR_FORMAT, "corrupt: header size %u, expected %u",
                    rd32(p + 12), SESSION_HEADER_BYTES);
    }
    if (len < SESSION_HEADER_BYTES) {
        return errf(why, why_len, MINFER_ERR_FORMAT,
                    "truncated: %zu bytes, the header alone is %u", len, SESSION_HEADER_BYTES);
    }
    h->model_tensors = rd64(p + 16);
    h->model_meta = rd64(p + 24);
    h->n_tensors = rd32(p + 32);
    h->type_k = rd32(p + 36);
    h->type_v = rd32(p + 40);
    h->n_layer = rd32(p + 44);
    h->row_k = rd64(p + 48);
    h->row_v = rd64(p + 56);
    h->row_bytes_k = rd64(p + 64);
    h->row_bytes_v = rd64(p + 72);
    h->n_tokens = rd32(p + 80);
    h->n_cells = rd32(p + 84);
    h->payload_bytes = rd64(p + 88);
    if (h->n_layer < 1 || h->n_layer > SESSION_MAX_LAYERS || h->n_tokens > INT32_MAX ||
        h->n_cells > INT32_MAX) {
        return errf(why, why_len, MINFER_ERR_FORMAT,
                    "corrupt: %u layers, %u tokens, %u cells", h->n_layer, h->n_tokens,
                    h->n_cells);
    }
    uint64_t want = session_payload_bytes(h);
    if (want == UINT64_MAX) {
        return errf(why, why_len, MINFER_ERR_FORMAT, "corrupt: the header's sizes overflow");
    }
    if (want != h->payload_bytes) {
        return errf(why, why_len, MINFER_ERR_FORMAT,
                    "corrupt: payload of %llu bytes, the counts say %llu",
                    (unsigned long long)h->payload_bytes, (unsigned long long)want);
    }
    uint64_t have = len - SESSION_HEADER_BYTES;
    if (have != want) {
        return errf(why, why_len, MINFER_ERR_FORMAT,
                    have < want ? "truncated: %llu payload bytes of %llu"
                                : "corrupt: %llu payload bytes, %llu expected (trailing bytes)",
                    (unsigned long long)have, (unsigned long long)want);
    }
    const uint8_t *pay = p + SESSION_HEADER_BYTES;
    if (checksum(p, pay, want) != rd64(p + 96)) {
        return errf(why, why_len, MINFER_ERR_FORMAT,
                    "corrupt: checksum mismatch (the file changed after it was written)");
    }
    out->tokens = (const int32_t *)pay;
    out->pos = (const int32_t *)(pay + 4ull * h->n_tokens);
    out->rows = pay + 4ull * h->n_tokens + 4ull * h->n_cells;
    int32_t prev = -1;
    for (uint32_t i = 0; i < h->n_cells; i++) {
        int32_t v = (int32_t)rd32((const uint8_t *)out->pos + 4ull * i);
        if (v <= prev || v == INT32_MAX) {
            return errf(why, why_len, MINFER_ERR_FORMAT,
                        "corrupt: position %d at entry %u is not above %d", v, i, prev);
        }
        prev = v;
    }
    return MINFER_OK;
}
