/*
 * cmd-tokenize.c — `minfer tokenize` and `minfer detokenize`: text to ids
 * and back with a GGUF's tokenizer alone (no backend, no weights read).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-opts.h"
#include "commands.h"
#include "minfer/gguf.h"
#include "minfer/minfer.h"

/* ---- shared ---- */

static struct minfer_tokenizer *open_tokenizer(const char *cmd, const char *path)
{
    minfer_status st;
    char err[512];
    struct minfer_gguf *g = minfer_gguf_open(path, &st, err, sizeof err);
    if (!g) {
        fprintf(stderr, "minfer %s: %s\n", cmd, err);
        return NULL;
    }
    struct minfer_tokenizer *tok = minfer_tokenizer_from_gguf(g, &st, err, sizeof err);
    minfer_gguf_close(g);
    if (!tok)
        fprintf(stderr, "minfer %s: %s: %s\n", cmd, path, err);
    return tok;
}

/* Reads a whole stream, exact bytes, NUL-terminated (the NUL is not counted). */
static char *read_stream(const char *cmd, FILE *f, const char *name, size_t *n)
{
    size_t cap = 1 << 16, len = 0;
    char *b = malloc(cap);
    while (b) {
        size_t r = fread(b + len, 1, cap - len - 1, f);
        len += r;
        if (len < cap - 1) {
            if (ferror(f)) {
                fprintf(stderr, "minfer %s: error reading %s: %s\n", cmd, name, strerror(errno));
                free(b);
                b = NULL;
            }
            break;
        }
        char *nb = cap <= SIZE_MAX / 2 ? realloc(b, cap * 2) : NULL;
        if (!nb) {
            free(b);
            b = NULL;
            fprintf(stderr, "minfer %s: %s is too large to read into memory\n", cmd, name);
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

static char *read_file(const char *cmd, const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "minfer %s: cannot open %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    char *b = read_stream(cmd, f, path, n);
    fclose(f);
    return b;
}

/* ---- tokenize ---- */

static void tokenize_usage(FILE *f)
{
    fprintf(f, "usage: minfer tokenize -m MODEL.gguf (-p TEXT | -f FILE) [--no-special]\n"
               "  prints the token ids as a JSON array (no BOS added)\n"
               "  Special tokens written in the text (<|im_start|>) become their control-token\n"
               "  ids, as in minfer run; --no-special keeps them plain text.\n");
    cli_print_options(f, CMD_TOKENIZE);
}

int cmd_tokenize(int argc, char **argv)
{
    const char *model = NULL, *text = NULL, *file = NULL;
    bool special = true;
    struct cli_args a = {"tokenize", CMD_TOKENIZE, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        switch (id) {
        case OPT_HELP: tokenize_usage(stdout); return 0;
        case OPT_MODEL: model = v; break;
        case OPT_PROMPT: text = v; break;
        case OPT_FILE: file = v; break;
        case OPT_SPECIAL: special = true; break;
        case OPT_NO_SPECIAL: special = false; break;
        case CLI_POSITIONAL:
            if (!text && !file) {
                text = v;
                break;
            }
            return cli_usage_error("tokenize", "unexpected argument '%s'", v);
        default: return 2;
        }
    }
    if (!model)
        return cli_usage_error("tokenize", "no model (-m FILE)");
    if (!text == !file)
        return cli_usage_error("tokenize", "give exactly one of -p TEXT or -f FILE");
    int rc = 1;
    char *buf = NULL;
    int32_t *ids = NULL;
    size_t len;
    if (file) {
        if (!(buf = read_file("tokenize", file, &len)))
            return 1;
        text = buf;
    } else {
        len = strlen(text);
    }
    struct minfer_tokenizer *tok = open_tokenizer(a.cmd, model);
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
    rc = cli_stdout_done("tokenize");
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
               "  minfer tokenize ... | minfer detokenize -m MODEL --ids - round-trips\n");
    cli_print_options(f, CMD_DETOKENIZE);
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
    struct cli_args a = {"detokenize", CMD_DETOKENIZE, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        switch (id) {
        case OPT_HELP: detokenize_usage(stdout); return 0;
        case OPT_MODEL: model = v; break;
        case OPT_IDS: list = v; break;
        case OPT_SKIP_SPECIAL: skip = true; break;
        case CLI_POSITIONAL: return cli_usage_error("detokenize", "unexpected argument '%s'", v);
        default: return 2;
        }
    }
    if (!model || !list)
        return cli_usage_error("detokenize", "need -m FILE and --ids LIST");
    size_t n;
    char *in = NULL;
    if (!strcmp(list, "-")) {
        size_t len;
        if (!(in = read_stream("detokenize", stdin, "stdin", &len)))
            return 1;
        list = in;
    }
    int32_t *ids = parse_ids(list, &n);
    free(in);
    if (!ids)
        return 2;
    int rc = 1;
    char *text = NULL;
    struct minfer_tokenizer *tok = open_tokenizer(a.cmd, model);
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
    rc = cli_stdout_done("detokenize");
out:
    minfer_tokenizer_free(tok);
    free(ids);
    free(text);
    return rc;
}
