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
               "                   [--raw] [--all] [options]\n"
               "Runs the prompt and writes its logits to FILE as little-endian f32, rows x\n"
               "n_vocab; prints the token ids it used as a JSON array. As in run, the prompt\n"
               "goes through the model's chat template unless --raw or --ids.\n");
    cli_print_options(f, CMD_EVAL);
}

static bool little_endian(void)
{
    const uint16_t one = 1;
    return *(const uint8_t *)&one == 1;
}

int cmd_eval(int argc, char **argv)
{
    struct cli_opts o;
    int rc = cli_parse(argc, argv, CMD_EVAL, &o);
    if (rc == 1) {
        usage(stdout);
        return cli_stdout_done("eval");
    }
    if (rc)
        return rc;
    if (!o.out)
        return cli_usage_error("eval", "-o FILE is required");
    if (!little_endian()) {
        fprintf(stderr, "minfer eval: this host is big-endian; the output format is little-endian f32\n");
        return 1;
    }
    struct cli_session s;
    if (cli_open("eval", &o, NULL, true, &s))
        return 1;
    int32_t *ids = NULL;
    size_t n = 0;
    struct cli_out out = {0};
    rc = 1;
    if ((rc = cli_prompt_ids("eval", &o, &s, &ids, &n)) != 0)
        goto out;
    rc = 1;
    minfer_status st = minfer_ctx_decode(s.ctx, ids, (int32_t)n, o.all ? MINFER_DECODE_ALL_LOGITS : 0);
    if (st != MINFER_OK) {
        fprintf(stderr, "minfer eval: prompt of %zu tokens: %s\n", n, minfer_ctx_last_error(s.ctx));
        goto out;
    }
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(s.model, &info);
    if (cli_out_open("eval", o.out, &out))
        goto out;
    int32_t rows = minfer_ctx_n_logits(s.ctx);
    for (int32_t r = 0; r < rows; r++)
        if (fwrite(minfer_ctx_logits(s.ctx, r), sizeof(float), (size_t)info.n_vocab, out.f) !=
            (size_t)info.n_vocab)
            break; /* cli_out_commit reports the error */
    if (cli_out_commit("eval", &out))
        goto out;
    printf("[");
    for (size_t i = 0; i < n; i++)
        printf("%s%d", i ? ", " : "", ids[i]);
    printf("]\n");
    fprintf(stderr, "minfer eval: wrote %d x %d logits to %s\n", rows, info.n_vocab, o.out);
    rc = cli_stdout_done("eval");
out:
    cli_out_abort(&out);
    free(ids);
    cli_close(&s);
    return rc;
}
