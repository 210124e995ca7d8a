/*
 * cmd-eval.c — minfer eval: runs a prompt and writes its logits as
 * little-endian f32 rows x n_vocab (the last row, or every row with
 * --all); prints the token ids it used as a JSON array.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli-model.h"
#include "commands.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: minfer eval -m MODEL (PROMPT | -p TEXT | -f FILE | --ids 1,2,3) -o FILE\n"
               "                   [--chat] [--all] [options]\n"
               "  -o FILE            write logits here: f32 little-endian, rows x n_vocab\n"
               "  --all              every prompt position's row (default: the last only)\n"
               "  --chat             wrap the prompt in the model's chat template\n"
               "  --no-special       do not match special tokens written in the text\n");
    cli_common_usage(f);
}

static bool little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

int cmd_eval(int argc, char **argv)
{
    struct cli_opts o;
    int rc = cli_parse(argc, argv, CLI_TAKES_PROMPT | CLI_TAKES_OUT, &o);
    if (rc || !o.out) {
        if (!rc)
            fprintf(stderr, "minfer eval: -o FILE is required\n");
        usage(rc == 1 ? stdout : stderr);
        return rc == 1 ? 0 : 2;
    }
    if (!little_endian()) {
        fprintf(stderr, "minfer eval: this host is big-endian; the output format is little-endian f32\n");
        return 1;
    }
    struct cli_session s;
    if (cli_open("eval", &o, NULL, true, &s))
        return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    FILE *f = NULL;
    rc = 1;
    if (cli_prompt_ids("eval", &o, &s, &ids, &n))
        goto out;
    minfer_status st = minfer_ctx_decode(s.ctx, ids, (int32_t)n, o.all ? MINFER_DECODE_ALL_LOGITS : 0);
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer eval: prompt of %zu tokens: %s\n", n, minfer_ctx_last_error(s.ctx));
        goto out;
    }
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    f = fopen(o.out, "wb");
    if (!f) {
        perror(o.out);
        goto out;
    }
    int32_t rows = minfer_ctx_n_logits(s.ctx);
    for (int32_t r = 0; r < rows; r++)
        if (fwrite(minfer_ctx_logits(s.ctx, r), sizeof(float), (size_t)info.n_vocab, f) !=
            (size_t)info.n_vocab) {
            perror(o.out);
            goto out;
        }
    if (fclose(f) != 0) {
        f = NULL;
        perror(o.out);
        goto out;
    }
    f = NULL;
    printf("[");
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
    fprintf(stderr, "minfer eval: wrote %d x %d logits to %s\n", rows, info.n_vocab, o.out);
    rc = 0;
out:
    if (f)
        fclose(f);
    free(ids);
    cli_close(&s);
    return rc;
}
