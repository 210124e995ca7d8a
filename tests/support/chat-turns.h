/*
 * chat-turns.h — the `minfer chat` two-turn check shared by the CPU and
 * CUDA suites: turn 2's reply, produced over the KV cache kept from
 * turn 1, must equal a fresh greedy run over the whole conversation on
 * the same backend. The includer defines FIX_GGUF, MINFER_PLUGIN_DIR and
 * MINFER_BUILD_DIR and passes a runtime with the backend's plugin loaded.
 */
#ifndef MINFER_TEST_CHAT_TURNS_H
#define MINFER_TEST_CHAT_TURNS_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "minfer/minfer.h"

/* stdout of cmd (which must exit 0), NUL-terminated; the caller frees it */
static char *run_capture(const char *cmd)
{
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    ck_assert_ptr_nonnull(buf);
    for (size_t got; (got = fread(buf + n, 1, cap - 1 - n, p)) > 0;)
        n += got;
    buf[n] = 0;
    ck_assert_int_eq(pclose(p), 0);
    return buf;
}

/* Runs two chat turns through the CLI on backend (NULL: its default) with
 * n_gen greedy tokens each, checks turn 2 against a fresh run over rt, and
 * returns the CLI's stderr (the caller frees it). */
static char *check_chat_turn2(struct minfer_runtime *rt, const char *backend, int n_gen)
{
    char cmd[1024], errpath[64];
    snprintf(errpath, sizeof errpath, "/tmp/minfer-chat-test-%d.err", (int)getpid());
    snprintf(cmd, sizeof cmd,
             "printf 'Hello there\\nWhat is 2+2?\\n' | MINFER_PLUGIN_PATH=%s %s/bin/minfer chat "
             "-m %s%s%s -n %d --temp 0 -c 256 2>%s",
             MINFER_PLUGIN_DIR, MINFER_BUILD_DIR, FIX_GGUF, backend ? " --backend " : "",
             backend ? backend : "", n_gen, errpath);
    char *out = run_capture(cmd);
    char *nl = strchr(out, '\n');
    ck_assert_ptr_nonnull(nl);
    *nl = 0;
    const char *reply1 = out, *reply2 = nl + 1;
    char *nl2 = strchr(reply2, '\n');
    ck_assert_ptr_nonnull(nl2);
    *nl2 = 0;
    snprintf(cmd, sizeof cmd, "cat %s", errpath);
    char *log = run_capture(cmd);
    unlink(errpath);

    /* fresh: render the conversation, prefill it all, greedy n_gen tokens */
    minfer_status st;
    char err[512];
    struct minfer_model_params mp;
    minfer_model_params_default(&mp);
    mp.backend = backend;
    struct minfer_model *m = minfer_model_load(rt, FIX_GGUF, &mp, &st, err, sizeof err);
    ck_assert_msg(m, "%s", err);
    struct minfer_tokenizer *tok = minfer_tokenizer_from_gguf(minfer_model_gguf(m), &st, err,
                                                              sizeof err);
    ck_assert_ptr_nonnull(tok);
    struct minfer_chat_msg msgs[3] = {
        {"user", "Hello there"}, {"assistant", reply1}, {"user", "What is 2+2?"}};
    char text[4096];
    size_t len;
    ck_assert_int_eq(minfer_chat_render(tok, MINFER_CHAT_UNKNOWN, msgs, 3, true, text,
                                        sizeof text, &len, err, sizeof err),
                     MINFER_OK);
    int32_t ids[512];
    size_t n;
    ck_assert_int_eq(minfer_tokenize(tok, text, len, true, ids, 512, &n), MINFER_OK);
    struct minfer_ctx_params cp;
    minfer_ctx_params_default(&cp);
    cp.n_ctx = 256;
    struct minfer_ctx *c = minfer_ctx_new(m, &cp, &st, err, sizeof err);
    ck_assert_msg(c, "%s", err);
    struct minfer_model_info info = {.struct_size = sizeof info};
    minfer_model_info(m, &info);
    ck_assert_msg(minfer_ctx_decode(c, ids, (int32_t)n, 0) == MINFER_OK, "decode: %s",
                  minfer_ctx_last_error(c));
    int32_t gen[64];
    int ng = 0;
    ck_assert_int_le(n_gen, 64);
    for (; ng < n_gen; ng++) {
        const float *l = minfer_ctx_logits(c, -1);
        gen[ng] = 0;
        for (int32_t i = 1; i < info.n_vocab; i++)
            if (l[i] > l[gen[ng]])
                gen[ng] = i;
        if (minfer_tokenizer_is_eog(tok, gen[ng]))
            break;
        ck_assert_msg(minfer_ctx_decode(c, &gen[ng], 1, 0) == MINFER_OK, "decode: %s",
                      minfer_ctx_last_error(c));
    }
    char fresh[1024];
    size_t flen;
    ck_assert_int_eq(minfer_detokenize(tok, gen, (size_t)ng, false, fresh, sizeof fresh - 1, &flen),
                     MINFER_OK);
    fresh[flen] = 0;
    ck_assert_str_eq(reply2, fresh);
    minfer_ctx_free(c);
    minfer_tokenizer_free(tok);
    minfer_model_free(m);
    free(out);
    return log;
}

#endif
