/*
 * cmd-tokenize.c — `minfer tokenize` and `minfer detokenize`: text to ids
 * and back with a GGUF's tokenizer alone (no backend, no weights read).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"

/* ---- shared ---- */

static struct minfer_tokenizer *open_tokenizer(const char *path)
{
    minfer_status st;
    char err[512];
    struct minfer_gguf *g = minfer_gguf_open(path, &st, err, sizeof err);
    if (!g) {
        fprintf(stderr, "minfer: cannot open %s: %s\n", path, err);
        return NULL;
    }
    struct minfer_tokenizer *tok = minfer_tokenizer_from_gguf(g, &st, err, sizeof err);
    minfer_gguf_close(g);
    if (!tok)
        fprintf(stderr, "minfer: %s: %s\n", path, err);
    return tok;
}

/* Reads a whole stream, exact bytes, NUL-terminated (the NUL is not counted). */
static char *read_stream(FILE *f, const char *name, size_t *n)
{
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + len, 1, cap - len - 1, f);
        len += r;
        if (len < cap - 1) {
            if (ferror(f)) {
                fprintf(stderr, "minfer: error reading %s: %s\n", name, strerror(errno));
                free(b);
                b = NULL;
            }
            break;
        }
        char *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
        if (!nb) {
            free(b);
            b = NULL;
            fprintf(stderr, "minfer: %s is too large to read into memory\n", name);
            break;
        }
        b = nb;
        cap *= 2;
    }
    if (b)
        b[len] = 0;
    *n = len;
    return b;
}

static char *read_file(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "minfer: cannot open %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char *b = read_stream(f, path, n);
    fclose(f);
    return b;
}

/* ---- tokenize ---- */

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: minfer tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--special]\n"
               "  prints the token ids as a JSON array\n"
               "  -p TEXT     text to tokenize\n"
               "  -f FILE     tokenize the exact bytes of FILE\n"
               "  --special   match control tokens written in the text (<|im_start|>)\n");
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    bool special = false;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            model = argv[++i];
        else if ((!strcmp(argv[i], "-p") || !strcmp(argv[i], "--prompt")) && i + 1 < argc)
            text = argv[++i];
        else if ((!strcmp(argv[i], "-f") || !strcmp(argv[i], "--file")) && i + 1 < argc)
            file = argv[++i];
        else if (!strcmp(argv[i], "--special"))
            special = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            tokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "minfer tokenize: unexpected argument '%s'\n", argv[i]);
            tokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || (!text == !file)) {
        fprintf(stderr, "minfer tokenize: need -m and exactly one of -p or -f\n");
        tokenize_usage(stderr);
        return 2;
    }
    int rc = 1;
    char *buf = NULL;
    int32_t *ids = NULL;
    size_t len;
    if (file) {
        if (!(buf = read_file(file, &len)))
            return 1;
        text = buf;
    } else {
        len = strlen(text);
    }
    struct minfer_tokenizer *tok = open_tokenizer(model);
    if (!tok)
        goto out;
    /* one id per input byte is enough but for replaced invalid bytes: one
     * pass almost always, a second with the exact count otherwise */
    size_t n, cap = len < (SIZE_MAX / sizeof *ids) - 16 ? len + 16 : len;
    ids = malloc(cap * sizeof *ids);
    minfer_status st = ids ? minfer_tokenize(tok, text, len, special, ids, cap, &n)
                           : MINFER_ERR_NO_MEMORY;
    if (st == MINFER_ERR_RANGE) {
        free(ids);
        ids = malloc((n ? n : 1) * sizeof *ids);
        st = ids ? minfer_tokenize(tok, text, len, special, ids, n, &n) : MINFER_ERR_NO_MEMORY;
    }
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer tokenize: %s\n", minfer_status_str(st));
        goto out;
    }
    putchar('[');
    for (size_t i = 0; i < n; i++)
        printf(i ? ", %d" : "%d", ids[i]);
    printf("]\n");
    rc = 0;
out:
    minfer_tokenizer_free(tok);
    free(ids);
    free(buf);
    return rc;
}

/* ---- detokenize ---- */

static void detokenize_usage(FILE *f)
{
    fprintf(f, "usage: minfer detokenize -m MODEL.gguf --ids 1,2,3 [--skip-special]\n"
               "  prints the text the ids stand for (invalid UTF-8 as U+FFFD)\n"
               "  --ids LIST       ids separated by commas or spaces; [1, 2] is accepted too;\n"
               "                   - reads them from stdin (minfer tokenize ... | minfer detokenize\n"
               "                   -m M --ids -)\n"
               "  --skip-special   leave out control tokens (<|im_end|>)\n");
}

/* Parses "1,2, 3" or "[1, 2, 3]". */
static int32_t *parse_ids(const char *s, size_t *n_out)
{
    size_t n = 0, cap = 16;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) {
        fprintf(stderr, "minfer detokenize: out of memory for the id list\n");
        return NULL;
    }
    while (*s) {
        if (strchr("[], \t\n", *s)) {
            s++;
            continue;
        }
        char *end;
        errno = 0;
        long x = strtol(s, &end, 10);
        if (end == s || errno || x < 0 || x > INT32_MAX) {
            fprintf(stderr, "minfer detokenize: bad id at '%.16s' (expected a number >= 0)\n", s);
            free(v);
            return NULL;
        }
        if (n == cap) {
            int32_t *nv = realloc(v, 2 * cap * sizeof *v);
            if (!nv) {
                fprintf(stderr, "minfer detokenize: out of memory for %zu ids\n", 2 * cap);
                free(v);
                return NULL;
            }
            v = nv;
            cap *= 2;
        }
        v[n++] = (int32_t)x;
        s = end;
    }
    *n_out = n;
    return v;
}

int cmd_detokenize(int argc, char **argv)
{
    const char *model = NULL, *list = NULL;
    bool skip = false;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            model = argv[++i];
        else if (!strcmp(argv[i], "--ids") && i + 1 < argc)
            list = argv[++i];
        else if (!strcmp(argv[i], "--skip-special"))
            skip = true;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            detokenize_usage(stdout);
            return 0;
        } else {
            fprintf(stderr, "minfer detokenize: unexpected argument '%s'\n", argv[i]);
            detokenize_usage(stderr);
            return 2;
        }
    }
    if (!model || !list) {
        fprintf(stderr, "minfer detokenize: need -m and --ids\n");
        detokenize_usage(stderr);
        return 2;
    }
    size_t n;
    char *in = NULL;
    if (!strcmp(list, "-")) {
        size_t len;
        if (!(in = read_stream(stdin, "stdin", &len)))
            return 1;
        list = in;
    }
    int32_t *ids = parse_ids(list, &n);
    free(in);
    if (!ids)
        return 2;
    int rc = 1;
    char *text = NULL;
    struct minfer_tokenizer *tok = open_tokenizer(model);
    if (!tok)
        goto out;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= minfer_tokenizer_n_vocab(tok)) {
            fprintf(stderr, "minfer detokenize: id %d is out of range (vocabulary has %d)\n",
                    ids[i], minfer_tokenizer_n_vocab(tok));
            goto out;
        }
    size_t len;
    minfer_status st = minfer_detokenize(tok, ids, n, !skip, NULL, 0, &len);
    if (st == MINFER_ERR_RANGE) {
        text = malloc(len);
        st = text ? minfer_detokenize(tok, ids, n, !skip, text, len, &len) : MINFER_ERR_NO_MEMORY;
    }
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer detokenize: %s\n", minfer_status_str(st));
        goto out;
    }
    fwrite(text, 1, len, stdout);
    putchar('\n');
    rc = 0;
out:
    minfer_tokenizer_free(tok);
    free(ids);
    free(text);
    return rc;
}
