/*
 * tokenizer-norm.c — the normalisation steps of the encode pipeline:
 * UTF-8 decoding and repair (invalid input becomes U+FFFD, never an
 * error) and NFC for pre-tokenizers that ask for it.
 */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tokenizer.h"

/* ---- UTF-8 ---- */

int tok_utf8_next(const uint8_t *s, size_t n, uint32_t *cp)
{
    uint8_t c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    int len;
    uint32_t v;
    uint8_t lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
        v = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        v = c & 0x0F;
        if (c == 0xE0)
            lo = 0xA0; /* no overlongs */
        if (c == 0xED)
            hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        v = c & 0x07;
        if (c == 0xF0)
            lo = 0x90;
        if (c == 0xF4)
            hi = 0x8F; /* <= U+10FFFF */
    } else {
        return -1; /* continuation byte, C0, C1, F5..FF */
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return 0; /* valid so far, cut short */
        uint8_t b = s[i];
        uint8_t l = i == 1 ? lo : 0x80, h = i == 1 ? hi : 0xBF;
        if (b < l || b > h)
            return -i; /* the maximal subpart ends before this byte */
        v = (v << 6) | (b & 0x3F);
    }
    *cp = v;
    return len;
}

int tok_utf8_put(uint32_t cp, char *out)
{
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* Returns a valid-UTF-8 version of s[n]: s itself when already valid
 * (*owned = NULL), else a malloc'd copy with every maximal invalid subpart
 * (and a cut-off tail) replaced by U+FFFD. */
minfer_status tok_utf8_repair(const char *s, size_t n, const char **out, size_t *out_n,
                                char **owned)
{
    const uint8_t *u = (const uint8_t *)s;
    size_t i = 0, bad = 0;
    uint32_t cp;
    while (i < n) {
        if (u[i] < 0x80) {
            i++;
            continue;
        }
        int r = tok_utf8_next(u + i, n - i, &cp);
        if (r > 0) {
            i += (size_t)r;
        } else {
            bad++;
            i += r < 0 ? (size_t)-r : n - i;
        }
    }
    *owned = NULL;
    if (!bad) {
        *out = s;
        *out_n = n;
        return MINFER_OK;
    }
    if (n > (SIZE_MAX - 1) / 3)
        return MINFER_ERR_NO_MEMORY;
    char *d = malloc(3 * n + 1); /* each bad byte becomes at most 3 */
    if (!d)
        return MINFER_ERR_NO_MEMORY;
    size_t o = 0;
    i = 0;
    while (i < n) {
        int r = u[i] < 0x80 ? 1 : tok_utf8_next(u + i, n - i, &cp);
        if (r > 0) {
            memcpy(d + o, s + i, (size_t)r);
            o += (size_t)r;
            i += (size_t)r;
        } else {
            o += (size_t)tok_utf8_put(0xFFFD, d + o);
            i += r < 0 ? (size_t)-r : n - i;
        }
    }
    *owned = d;
    *out = d;
    *out_n = o;
    return MINFER_OK;
}

/* Code points that NFC leaves alone and that never combine with what
 * precedes them: starters below U+0300 (nothing there decomposes or is a
 * second element of a composition), CJK unified ideographs and Hangul
 * syllables. NFC of a text is the concatenation of NFC of the spans cut
 * just before such a code point. */
#define NFC_MAX_MARKS 256

static bool nfc_inert(uint32_t cp)
{
    return cp < 0x300 || (cp >= 0x4E00 && cp <= 0x9FFF) || (cp >= 0xAC00 && cp <= 0xD7A3);
}

/* NFC of valid UTF-8 s[n]: *out = s when nothing changes (*owned NULL),
 * else a malloc'd copy. Only spans around non-inert code points are handed
 * to utf8proc, so mostly-ASCII or CJK text costs one scan. */
minfer_status tok_nfc(const char *s, size_t n, const char **out, size_t *out_n, char **owned)
{
    const uint8_t *u = (const uint8_t *)s;
    char *d = NULL;
    size_t dn = 0, dcap = 0, copied = 0; /* s[0..copied) is already in d */
    size_t prev = 0;                     /* start of the previous code point */
    *owned = NULL;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int r = u[i] < 0x80 ? (cp = u[i], 1) : tok_utf8_next(u + i, n - i, &cp);
        if (r <= 0)
            return MINFER_ERR_INVALID_ARG; /* callers repair UTF-8 first */
        if (nfc_inert(cp)) {
            prev = i;
            i += (size_t)r;
            continue;
        }
        /* span: the previous code point (it may compose with this one) up to
         * the next inert one. utf8proc orders a run of combining marks in
         * quadratic time, so a run longer than NFC_MAX_MARKS (no text has
         * one: Unicode's stream-safe format caps runs at 30) is cut there. */
        size_t a = prev < copied ? copied : (i > 0 ? prev : 0), b = i + (size_t)r;
        size_t marks = utf8proc_get_property((utf8proc_int32_t)cp)->combining_class != 0;
        while (b < n) {
            int rb = u[b] < 0x80 ? (cp = u[b], 1) : tok_utf8_next(u + b, n - b, &cp);
            if (rb <= 0)
                return MINFER_ERR_INVALID_ARG;
            if (nfc_inert(cp))
                break;
            if (utf8proc_get_property((utf8proc_int32_t)cp)->combining_class == 0)
                marks = 0;
            else if (++marks > NFC_MAX_MARKS)
                break;
            b += (size_t)rb;
        }
        utf8proc_uint8_t *norm = NULL;
        utf8proc_ssize_t m = utf8proc_map(u + a, (utf8proc_ssize_t)(b - a), &norm,
                                          UTF8PROC_STABLE | UTF8PROC_COMPOSE);
        if (m < 0) {
            free(d);
            return m == UTF8PROC_ERROR_NOMEM ? MINFER_ERR_NO_MEMORY : MINFER_ERR_INVALID_ARG;
        }
        bool same = (size_t)m == b - a && !memcmp(norm, u + a, b - a);
        if (!same) {
            size_t need = dn + (a - copied) + (size_t)m + (n - b);
            if (need > dcap) {
                size_t cap = need + need / 2 + 64;
                char *nd = realloc(d, cap);
                if (!nd) {
                    free(norm);
                    free(d);
                    return MINFER_ERR_NO_MEMORY;
                }
                d = nd;
                dcap = cap;
            }
            memcpy(d + dn, s + copied, a - copied);
            dn += a - copied;
            memcpy(d + dn, norm, (size_t)m);
            dn += (size_t)m;
            copied = b;
        }
        free(norm);
        prev = b; /* the next code point is inert: it starts a fresh span */
        i = b;
    }
    if (!d) {
        *out = s;
        *out_n = n;
        return MINFER_OK;
    }
    if (dn + (n - copied) > dcap) { /* cannot happen: need counted the tail */
        free(d);
        return MINFER_ERR_STATE;
    }
    memcpy(d + dn, s + copied, n - copied);
    dn += n - copied;
    *owned = d;
    *out = d;
    *out_n = dn;
    return MINFER_OK;
}

