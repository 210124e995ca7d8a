/*
 * cli-run.h — driving the minfer binary from the CLI suites (test-cli.c,
 * test-cli-tools.c): two tiny synthetic models made once per suite, a
 * shell runner that captures stdout, stderr and the exit status, and the
 * JSON helpers the checks share. Header-only (static functions).
 */
#ifndef MINFER_TEST_CLI_RUN_H
#define MINFER_TEST_CLI_RUN_H

#include <check.h>
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CLI_BIN MINFER_BUILD_DIR "/bin/minfer"

static char cli_dir[64];         /* per-suite temporary directory */
static char cli_small[128];      /* qwen2, 300-id byte vocabulary, no chat template, Q8_0 */
static char cli_chat[128];       /* qwen2, built-in Qwen vocabulary with ChatML, F16 */
static char *cli_out, *cli_err;  /* the last run's stdout and stderr */
static size_t cli_out_len;       /* bytes of stdout (it may hold NULs) */

/* GPT-2's byte-to-unicode table: the vocabulary spelling of byte b. */
static int cli_byte_char(int b, char *out)
{
    int cp;
    if ((b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff)) {
        cp = b;
    } else {
        int n = 0;
        for (int x = 0; x < b; x++)
            if (!((x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff)))
                n++;
        cp = 256 + n;
    }
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    out[0] = (char)(0xc0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3f));
    return 2;
}

static char *cli_slurp(const char *path, size_t *len)
{
    *len = 0;
    FILE *f = fopen(path, "rb");
    if (!f)
        return strdup("");
    size_t cap = 1 << 16, n = 0;
    char *b = malloc(cap);
    for (size_t got; (got = fread(b + n, 1, cap - n - 1, f)) > 0;) {
        n += got;
        if (n + 1 == cap)
            b = realloc(b, cap *= 2);
    }
    b[n] = 0;
    *len = n;
    fclose(f);
    return b;
}

/* Runs a shell command line (printf-style); stdout and stderr land in
 * cli_out / cli_err (it runs as a script: any quoting works). Returns the
 * exit status, 128 + N for a signal. */
__attribute__((format(printf, 1, 2))) static int cli_sh(const char *fmt, ...)
{
    char script[128], full[512];
    snprintf(script, sizeof script, "%s/cmd.sh", cli_dir);
    FILE *f = fopen(script, "w");
    ck_assert_ptr_nonnull(f);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    fputc('\n', f);
    fclose(f);
    snprintf(full, sizeof full, "MINFER_PLUGIN_PATH='%s' sh %s >%s/out 2>%s/err",
             MINFER_PLUGIN_DIR, script, cli_dir, cli_dir);
    int st = system(full);
    free(cli_out);
    free(cli_err);
    char p[128];
    snprintf(p, sizeof p, "%s/out", cli_dir);
    cli_out = cli_slurp(p, &cli_out_len);
    size_t n;
    snprintf(p, sizeof p, "%s/err", cli_dir);
    cli_err = cli_slurp(p, &n);
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    return 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
}

static int cli_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* The JSON object run --json printed (asserts it parses). */
static cJSON *cli_json(void)
{
    cJSON *j = cJSON_Parse(cli_out);
    ck_assert_msg(j, "not JSON: %s (stderr: %s)", cli_out, cli_err);
    return j;
}

static int cli_json_ids(const cJSON *j, const char *key, int32_t *ids, int cap)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(j, key);
    ck_assert_msg(cJSON_IsArray(a), "no %s array", key);
    int n = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, a)
        if (n < cap)
            ids[n++] = (int32_t)it->valuedouble;
    return n;
}

static void cli_setup(void)
{
    snprintf(cli_dir, sizeof cli_dir, "/tmp/minfer-cli-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(cli_dir));
    /* a byte-level tokenizer.json: ids 0..255 are the bytes, 256 <|endoftext|> */
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", cli_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fprintf(f, "{\"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    for (int b = 0; b < 256; b++) {
        char ch[2];
        int n = cli_byte_char(b, ch);
        fprintf(f, "%s\"", b ? ", " : "");
        if (n == 1 && (ch[0] == '"' || ch[0] == '\\'))
            fputc('\\', f);
        fwrite(ch, 1, (size_t)n, f);
        fprintf(f, "\": %d", b);
    }
    fprintf(f, "}}, \"added_tokens\": [{\"id\": 256, \"content\": \"<|endoftext|>\", "
               "\"special\": true}]}\n");
    fclose(f);
    snprintf(cli_small, sizeof cli_small, "%s/small.gguf", cli_dir);
    snprintf(cli_chat, sizeof cli_chat, "%s/chat.gguf", cli_dir);
    int rc = cli_sh("%s synth --arch qwen2 --shape custom:n_embd=64,n_layer=2,n_head=4,"
                    "n_head_kv=2,head_dim=16,n_ff=128,n_ctx=32768,n_vocab=300 --type Q8_0 "
                    "--tokenizer %s -o %s", CLI_BIN, path, cli_small);
    ck_assert_msg(rc == 0, "synth small: %s", cli_err);
    rc = cli_sh("%s synth --arch qwen2 --shape custom:n_embd=64,n_layer=2,n_head=4,"
                "n_head_kv=2,head_dim=16,n_ff=128,n_ctx=32768 --type F16 -o %s", CLI_BIN,
                cli_chat);
    ck_assert_msg(rc == 0, "synth chat: %s", cli_err);
}

static void cli_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", cli_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", cli_dir);
    free(cli_out);
    free(cli_err);
    cli_out = cli_err = NULL;
}

#endif
