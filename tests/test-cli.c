/*
 * test-cli.c — the command line a llama.cpp user expects (issue 18):
 * options, help, version, strict numbers, inapplicable options, the chat
 * template by default, seeds, stop strings, penalties, stop reasons,
 * Ctrl-C and stdout write errors, driven through the minfer binary on two
 * tiny synthetic models (tests/support/cli-run.h).
 */
#include <check.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli-run.h"
#include "testutil.h"

/* ---- help, version, options ---- */

START_TEST(version_and_help)
{
    /* Catches --version/-V/--help/-h missing or exiting non-zero, and a
     * bare `minfer` exiting 0. */
    static const char *const v[] = {"--version", "-V", "version"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(cli_sh("%s %s", CLI_BIN, v[i]), 0);
        ck_assert_msg(!strncmp(cli_out, "minfer " MINFER_VERSION_STRING_EXPECTED,
                               strlen("minfer " MINFER_VERSION_STRING_EXPECTED)),
                      "%s printed: %s", v[i], cli_out);
    }
    static const char *const h[] = {"--help", "-h", "help"};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(cli_sh("%s %s", CLI_BIN, h[i]), 0);
        ck_assert_ptr_nonnull(strstr(cli_out, "usage: minfer COMMAND"));
        ck_assert_ptr_nonnull(strstr(cli_out, "completion"));
    }
    ck_assert_int_eq(cli_sh("%s", CLI_BIN), 2);
    ck_assert_int_eq(cli_sh("%s frobnicate", CLI_BIN), 2);
    ck_assert_int_eq(cli_lines(cli_err), 1);
    ck_assert_ptr_nonnull(strstr(cli_err, "--help"));
}
END_TEST

START_TEST(help_lists_every_accepted_option)
{
    /* Catches an option the parser accepts (the table the completion
     * script is written from) that a command's --help does not list, and a
     * --help that fails. */
    static const char *const cmds[] = {"run", "chat", "eval", "bench", "tokenize",
                                       "detokenize", "info", "quantize", "synth", "backends",
                                       "serve", "completion"};
    ck_assert_int_eq(cli_sh("%s completion bash", CLI_BIN), 0);
    char *script = strdup(cli_out);
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char key[64];
        snprintf(key, sizeof key, "    %s) opts='", cmds[c]);
        const char *p = strstr(script, key);
        ck_assert_msg(p, "completion lacks %s", cmds[c]);
        p += strlen(key);
        const char *end = strchr(p, '\'');
        ck_assert_int_eq(cli_sh("%s %s --help", CLI_BIN, cmds[c]), 0);
        ck_assert_msg(cli_out[0], "%s --help printed nothing", cmds[c]);
        int n = 0;
        while (p < end) {
            while (p < end && *p == ' ')
                p++;
            const char *w = p;
            while (p < end && *p != ' ')
                p++;
            if (p == w)
                break;
            char opt[64];
            snprintf(opt, sizeof opt, "%.*s", (int)(p - w), w);
            /* listed as a word: followed by ',', ' ' or the end of line */
            bool found = false;
            for (const char *q = cli_out; (q = strstr(q, opt)); q++)
                if ((q == cli_out || strchr(" ,", q[-1])) && strchr(", \n", q[strlen(opt)]))
                    found = true;
            ck_assert_msg(found, "minfer %s --help does not list %s", cmds[c], opt);
            n++;
        }
        ck_assert_msg(n > 0 || !strcmp(cmds[c], "completion"), "%s has no options", cmds[c]);
    }
    free(script);
}
END_TEST

START_TEST(malformed_numbers_are_errors)
{
    /* Catches a malformed number silently read as 0 or a prefix (--seed abc,
     * -n 12x), and a parse error that prints the whole usage instead of one
     * line with a hint. */
    static const char *const bad[] = {"--seed abc", "--seed -1", "-n 12x", "-t -1",
                                      "--temp nan", "-c 1e3", "--top-k ''", "--seed=5x",
                                      "--top-p 0.9x", "-b 0", "--repeat-last-n -2",
                                      "-ctk q4_0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cli_sh("%s run -m %s -p hi %s", CLI_BIN, cli_small, bad[i]);
        ck_assert_msg(rc == 2, "%s: exit %d", bad[i], rc);
        ck_assert_msg(cli_lines(cli_err) == 1, "%s: not one line: %s", bad[i], cli_err);
        ck_assert_msg(!strncmp(cli_err, "minfer run: ", 12) && strstr(cli_err, "--help"),
                      "%s: %s", bad[i], cli_err);
    }
    ck_assert_int_eq(cli_sh("%s quantize -t x a b Q8_0", CLI_BIN), 2);
    ck_assert_int_eq(cli_sh("%s synth --shape qwen2.5-0.5b --type Q8_0 -o x --seed 1y",
                            CLI_BIN), 2);
    ck_assert_int_eq(cli_sh("%s info --items -3 %s", CLI_BIN, cli_small), 2);
    ck_assert_int_eq(cli_sh("%s bench -p 8,x", CLI_BIN), 2);
}
END_TEST

START_TEST(inapplicable_options_are_errors)
{
    /* Catches an option silently ignored by a command it cannot apply to. */
    static const char *const bad[] = {
        "eval -m M -p hi -o X --temp 1", "bench -m M --chat", "chat -m M --json",
        "tokenize -m M -p hi -n 5", "run -m M -p hi --all", "detokenize -m M --ids 1 --raw",
        "info --seed 1 M", "run -m M --ids 1,2 --chat", "run -m M -p hi --raw --chat",
        "bench -m M --shape qwen3-0.6b"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char cmd[512], *m;
        snprintf(cmd, sizeof cmd, "%s", bad[i]);
        while ((m = strstr(cmd, " M")) && (m[2] == ' ' || !m[2])) {
            char rest[512];
            snprintf(rest, sizeof rest, "%s", m + 2);
            snprintf(m, sizeof cmd - (size_t)(m - cmd), " %s%s", cli_chat, rest);
        }
        int rc = cli_sh("%s %s", CLI_BIN, cmd);
        ck_assert_msg(rc == 2 && cli_lines(cli_err) == 1, "%s: exit %d: %s", bad[i], rc, cli_err);
    }
    /* model-dependent: --system/--chat need a template, --no-think Qwen3 */
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi --system be -n 1", CLI_BIN, cli_small), 2);
    ck_assert_ptr_nonnull(strstr(cli_err, "chat template"));
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi --chat -n 1", CLI_BIN, cli_small), 2);
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi --no-think -n 1", CLI_BIN, cli_chat), 2);
    ck_assert_ptr_nonnull(strstr(cli_err, "Qwen3"));
    ck_assert_int_eq(cli_sh("%s chat -m %s </dev/null", CLI_BIN, cli_small), 1);
    ck_assert_ptr_nonnull(strstr(cli_err, "chat template"));
}
END_TEST

START_TEST(llama_cpp_spellings)
{
    /* Catches a llama.cpp long form (or --opt=value) that is refused or
     * means something else than the short one. */
    ck_assert_int_eq(cli_sh("%s run -m %s -c 128 -n 3 -b 16 -t 1 -ctk f16 -ctv f16 --temp 0 "
                            "--raw -p hello --json", CLI_BIN, cli_small), 0);
    char *a = strdup(cli_out);
    ck_assert_int_eq(cli_sh("%s run --model %s --ctx-size 128 --n-predict=3 --batch-size 16 "
                            "--threads 1 --cache-type-k f16 --cache-type-v=f16 "
                            "--temperature 0 --raw --prompt hello --json", CLI_BIN, cli_small),
                     0);
    cJSON *ja = cJSON_Parse(a), *jb = cli_json();
    int32_t ia[8], ib[8];
    int na = cli_json_ids(ja, "generated_ids", ia, 8);
    int nb = cli_json_ids(jb, "generated_ids", ib, 8);
    ck_assert_int_eq(na, 3);
    ck_assert_int_eq(nb, 3);
    ck_assert_mem_eq(ia, ib, sizeof ia[0] * 3);
    cJSON_Delete(ja);
    cJSON_Delete(jb);
    free(a);
    /* "--" ends the options: what follows is text even when it starts with - */
    ck_assert_int_eq(cli_sh("%s tokenize -m %s -- --help", CLI_BIN, cli_small), 0);
    ck_assert_str_eq(cli_out, "[45, 45, 104, 101, 108, 112]\n"); /* byte ids */
}
END_TEST

START_TEST(info_takes_m)
{
    /* Catches info refusing -m FILE (the spelling every other command uses). */
    ck_assert_int_eq(cli_sh("%s info %s --no-tensors", CLI_BIN, cli_small), 0);
    char *a = strdup(cli_out);
    ck_assert_int_eq(cli_sh("%s info -m %s --no-tensors", CLI_BIN, cli_small), 0);
    ck_assert_str_eq(a, cli_out);
    free(a);
    ck_assert_int_eq(cli_sh("%s info -m %s %s", CLI_BIN, cli_small, cli_small), 2);
}
END_TEST

START_TEST(special_tokens_agree)
{
    /* Catches tokenize and run disagreeing on whether <|im_start|> written
     * in the text is the control token, and --no-special not flipping both. */
    ck_assert_int_eq(cli_sh("%s tokenize -m %s -p '<|im_start|>'", CLI_BIN, cli_chat), 0);
    ck_assert_str_eq(cli_out, "[151644]\n");
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p '<|im_start|>' -n 1 --json", CLI_BIN,
                            cli_chat), 0);
    cJSON *j = cli_json();
    int32_t ids[16];
    ck_assert_int_eq(cli_json_ids(j, "prompt_ids", ids, 16), 1);
    ck_assert_int_eq(ids[0], 151644);
    cJSON_Delete(j);
    ck_assert_int_eq(cli_sh("%s tokenize -m %s -p '<|im_start|>' --no-special", CLI_BIN,
                            cli_chat), 0);
    char plain[256];
    snprintf(plain, sizeof plain, "%s", cli_out);
    ck_assert_str_ne(plain, "[151644]\n");
    ck_assert_int_eq(cli_sh("%s run -m %s --raw --no-special -p '<|im_start|>' -n 1 --json",
                            CLI_BIN, cli_chat), 0);
    j = cli_json();
    int n = cli_json_ids(j, "prompt_ids", ids, 16);
    char got[256];
    size_t o = 0;
    o += (size_t)snprintf(got + o, sizeof got - o, "[");
    for (int i = 0; i < n; i++)
        o += (size_t)snprintf(got + o, sizeof got - o, i ? ", %d" : "%d", ids[i]);
    snprintf(got + o, sizeof got - o, "]\n");
    ck_assert_str_eq(got, plain);
    cJSON_Delete(j);
}
END_TEST

/* ---- prompts and generation ---- */

static bool has_id(const int32_t *ids, int n, int32_t id)
{
    for (int i = 0; i < n; i++)
        if (ids[i] == id)
            return true;
    return false;
}

START_TEST(chat_template_by_default)
{
    /* Catches run/eval not applying a model's chat template by default,
     * --raw not turning it off, and a model without one not running raw. */
    int32_t ids[256];
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi -n 1 --json", CLI_BIN, cli_chat), 0);
    cJSON *j = cli_json();
    int n = cli_json_ids(j, "prompt_ids", ids, 256);
    ck_assert_msg(has_id(ids, n, 151644) && has_id(ids, n, 151645), "no ChatML around -p");
    cJSON_Delete(j);
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi -n 1 --json --raw", CLI_BIN, cli_chat), 0);
    j = cli_json();
    n = cli_json_ids(j, "prompt_ids", ids, 256);
    ck_assert_msg(!has_id(ids, n, 151644), "--raw still wrapped the prompt");
    cJSON_Delete(j);
    char out[128];
    snprintf(out, sizeof out, "%s/logits.bin", cli_dir);
    ck_assert_int_eq(cli_sh("%s eval -m %s -p hi -o %s", CLI_BIN, cli_chat, out), 0);
    ck_assert_ptr_nonnull(strstr(cli_out, "151644"));
    ck_assert_int_eq(cli_sh("%s eval -m %s -p hi -o %s --raw", CLI_BIN, cli_chat, out), 0);
    ck_assert_ptr_null(strstr(cli_out, "151644"));
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi -n 1 --json", CLI_BIN, cli_small), 0);
    j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "prompt_ids", ids, 256), 2); /* 'h' 'i' */
    cJSON_Delete(j);
}
END_TEST

static unsigned long long json_seed(void)
{
    const char *p = strstr(cli_out, "\"seed\":");
    ck_assert_msg(p, "no seed in %s", cli_out);
    return strtoull(p + 7, NULL, 10);
}

START_TEST(seed_random_and_reported)
{
    /* Catches a fixed default seed, a seed missing from --json/-v, and a
     * reported seed that does not reproduce the run. */
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 8 --temp 1.5 --ignore-eos --json",
                            CLI_BIN,
                            cli_small), 0);
    unsigned long long s1 = json_seed();
    cJSON *j = cli_json();
    int32_t g1[8], g2[8];
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g1, 8), 8);
    cJSON_Delete(j);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 8 --temp 1.5 --ignore-eos --json",
                            CLI_BIN,
                            cli_small), 0);
    ck_assert_msg(json_seed() != s1, "two runs drew the same seed %llu", s1);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 8 --temp 1.5 --ignore-eos --json "
                            "--seed %llu",
                            CLI_BIN, cli_small, s1), 0);
    ck_assert_int_eq(json_seed(), s1);
    j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g2, 8), 8);
    cJSON_Delete(j);
    ck_assert_mem_eq(g1, g2, sizeof g1);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 2 -v --seed 18446744073709551615",
                            CLI_BIN, cli_small), 0);
    ck_assert_msg(strstr(cli_err, "seed 18446744073709551615"), "-v: %s", cli_err);
}
END_TEST

START_TEST(stop_strings)
{
    /* Catches a stop string that is printed, text after it, a partial
     * match printed and never retracted, and stop_reason not "stop". */
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 24 --temp 0 --json", CLI_BIN,
                            cli_small),
                     0);
    cJSON *j = cli_json();
    const char *t = cJSON_GetObjectItemCaseSensitive(j, "text")->valuestring;
    size_t tl = strlen(t);
    ck_assert_msg(tl >= 8, "greedy text too short to test: '%s'", t);
    /* the stop: the whole UTF-8 characters from the middle of the text */
    size_t a = tl / 2, b;
    while (a > 0 && ((unsigned char)t[a] & 0xc0) == 0x80)
        a--;
    b = a + 1;
    while (b < tl && ((unsigned char)t[b] & 0xc0) == 0x80)
        b++;
    char stop[16], want[256];
    snprintf(stop, sizeof stop, "%.*s", (int)(b - a), t + a);
    const char *first = strstr(t, stop);
    snprintf(want, sizeof want, "%.*s", (int)(first - t), t);
    char *full = strdup(t);
    cJSON_Delete(j);
    for (int json = 0; json < 2; json++) {
        ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 24 --temp 0 %s --stop '%s' "
                                "--stop 'never-in-text'", CLI_BIN, cli_small,
                                json ? "--json" : "", stop), 0);
        if (json) {
            j = cli_json();
            ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "text")->valuestring, want);
            ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "stop_reason")->valuestring,
                             "stop");
            cJSON_Delete(j);
        } else {
            size_t n = strlen(cli_out);
            ck_assert_msg(n && cli_out[n - 1] == '\n', "no final newline");
            cli_out[n - 1] = 0;
            ck_assert_str_eq(cli_out, want);
        }
    }
    /* a stop string that starts like the text's tail but never completes:
     * held back while it might match, then printed in full */
    char partial[32];
    snprintf(partial, sizeof partial, "%s\x01zz", stop);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hello -n 24 --temp 0 --stop '%s'", CLI_BIN,
                            cli_small, partial), 0);
    size_t n = strlen(cli_out);
    cli_out[n - 1] = 0;
    ck_assert_str_eq(cli_out, full);
    ck_assert_ptr_nonnull(strstr(cli_err, "stop: length"));
    free(full);
}
END_TEST

START_TEST(penalties_see_the_prompt)
{
    /* Catches penalties applied only to generated tokens: with every id
     * but one (256) in the prompt and a huge presence penalty over the
     * whole context, greedy decoding must pick that one id. */
    char ids[2048];
    size_t o = 0;
    for (int i = 0; i < 300; i++)
        if (i != 256)
            o += (size_t)snprintf(ids + o, sizeof ids - o, o ? ",%d" : "%d", i);
    int32_t g[4], g0;
    ck_assert_int_eq(cli_sh("%s run -m %s --ids %s -n 1 --temp 0 --json --ignore-eos", CLI_BIN,
                            cli_small, ids), 0);
    cJSON *j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g, 4), 1);
    cJSON_Delete(j);
    g0 = g[0];
    ck_assert_msg(g0 != 256, "greedy picks 256 anyway: the test proves nothing");
    ck_assert_int_eq(cli_sh("%s run -m %s --ids %s -n 1 --temp 0 --json --ignore-eos "
                            "--presence-penalty 1000 --repeat-last-n -1", CLI_BIN, cli_small, ids),
                     0);
    j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g, 4), 1);
    cJSON_Delete(j);
    ck_assert_msg(g[0] == 256, "picked prompt id %d despite the penalty", g[0]);
    /* the window is the last N ids: 0 turns the penalty off */
    ck_assert_int_eq(cli_sh("%s run -m %s --ids %s -n 1 --temp 0 --json --ignore-eos "
                            "--presence-penalty 1000 --repeat-last-n 0", CLI_BIN, cli_small, ids),
                     0);
    j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g, 4), 1);
    cJSON_Delete(j);
    ck_assert_int_eq(g[0], g0);
}
END_TEST

START_TEST(context_cut_and_stop_reason)
{
    /* Catches -n beyond the context silently shortened (no message with the
     * numbers), a stop_reason that does not say why generation ended, and
     * --ignore-eos not generating past the end token. */
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p 0123456789 -c 32 -n 100 --json --ignore-eos",
                            CLI_BIN,
                            cli_small), 0);
    ck_assert_msg(strstr(cli_err, "-n 100") && strstr(cli_err, "32") &&
                  strstr(cli_err, "at most 22"), "%s", cli_err);
    cJSON *j = cli_json();
    int32_t g[64];
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g, 64), 22);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "stop_reason")->valuestring, "context");
    cJSON_Delete(j);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p 0123456789 -n 3 --json --ignore-eos",
                            CLI_BIN, cli_small), 0);
    j = cli_json();
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "stop_reason")->valuestring, "length");
    cJSON_Delete(j);
    /* eos: every id but <|endoftext|> (256) is in the prompt and penalised away */
    char ids[2048];
    size_t o = 0;
    for (int i = 0; i < 300; i++)
        if (i != 256)
            o += (size_t)snprintf(ids + o, sizeof ids - o, o ? ",%d" : "%d", i);
    ck_assert_int_eq(cli_sh("%s run -m %s --ids %s -n 3 --temp 0 --json --presence-penalty 1000 "
                            "--repeat-last-n -1", CLI_BIN, cli_small, ids), 0);
    j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g, 64), 1);
    ck_assert_int_eq(g[0], 256);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "stop_reason")->valuestring, "eos");
    cJSON_Delete(j);
    ck_assert_int_eq(cli_sh("%s run -m %s --ids %s -n 3 --temp 0 --json --presence-penalty 1000 "
                            "--repeat-last-n -1 --ignore-eos", CLI_BIN, cli_small, ids), 0);
    j = cli_json();
    ck_assert_int_eq(cli_json_ids(j, "generated_ids", g, 64), 3);
    ck_assert_int_eq(g[0], 256);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "stop_reason")->valuestring, "length");
    cJSON_Delete(j);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p 0123456789 -c 8", CLI_BIN, cli_small), 1);
    ck_assert_ptr_nonnull(strstr(cli_err, "context holds 8"));
}
END_TEST

START_TEST(run_ctrl_c)
{
    /* Catches Ctrl-C losing the generated text, the newline or the
     * timings, and --json printing nothing or invalid JSON. */
    for (int json = 0; json < 2; json++) {
        /* -v's settings line comes after loading: interrupt mid-generation */
        int rc = cli_sh("cd %s\n%s run -m %s -c 32768 -n -1 --ignore-eos --raw -p hello -v %s "
                        "& pid=$!\n"
                        "i=0; until grep -q seed err; do sleep 0.1; i=$((i+1)); "
                        "[ $i -gt 900 ] && break; done\n"
                        "sleep 0.5; kill -INT $pid; wait $pid", cli_dir, CLI_BIN, cli_small,
                        json ? "--json" : "");
        ck_assert_msg(rc == 130, "exit %d: %s", rc, cli_err);
        if (json) {
            cJSON *j = cli_json();
            ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(j, "stop_reason")->valuestring,
                             "interrupted");
            int32_t g[4];
            ck_assert_int_gt(cli_json_ids(j, "generated_ids", g, 4), 0);
            cJSON_Delete(j);
        } else {
            size_t n = cli_out_len;
            ck_assert_msg(n > 1 && cli_out[n - 1] == '\n', "no text and newline (%zu bytes)", n);
            ck_assert_msg(strstr(cli_err, "prompt:") && strstr(cli_err, "stop: interrupted"),
                          "%s", cli_err);
        }
    }
}
END_TEST

START_TEST(stdout_write_errors)
{
    /* Catches a command exiting 0 when its output could not be written
     * (a full disk: /dev/full as stdout, opened by the shell). */
    static const char *const cmds[] = {
        "tokenize -m %s -p hello", "detokenize -m %s --ids 104,105", "run -m %s -p hi -n 2",
        "run -m %s -p hi -n 2 --json", "info %s", "--version"};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++) {
        char c[256];
        snprintf(c, sizeof c, cmds[i], cli_small);
        int rc = cli_sh("%s %s >/dev/full", CLI_BIN, c);
        ck_assert_msg(rc == 1, "%s: exit %d", c, rc);
        ck_assert_msg(strstr(cli_err, "cannot write to stdout"), "%s: %s", c, cli_err);
    }
}
END_TEST

START_TEST(prompts_file_refusals)
{
    /* Catches `run --prompts` taking a line with both "prompt" and "ids"
     * (one silently ignored), an id past the vocabulary reported without
     * its file and line (or only by the decode), and broken JSON reported
     * as "not an object" without a column. The good file runs. */
    static const struct {
        const char *text, *says;
    } cases[] = {
        {"{\"prompt\": \"hi\"}\n{\"ids\": [1, 2], \"prompt\": \"x\"}\n", "line 2 has both"},
        {"{\"ids\": [1, 2]}\n\n{\"ids\": [3, 99999]}\n", "line 3: ids[1] = 99999 is outside"},
        {"{\"prompt\": \"hi\"\n", "line 1 is not valid JSON (at column"},
        {"[1, 2]\n", "line 1 is not a JSON object"},
        {"{\"prompt\": \"hi\"}\n{\"ids\": [1, 2]}\n", NULL},
    };
    char path[128];
    snprintf(path, sizeof path, "%s/prompts.jsonl", cli_dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(cases[i].text, f);
        fclose(f);
        int rc = cli_sh("%s run -m %s --raw -n 1 --prompts %s", CLI_BIN, cli_small, path);
        if (!cases[i].says) {
            ck_assert_msg(rc == 0, "case %zu: exit %d: %s", i, rc, cli_err);
            continue;
        }
        ck_assert_msg(rc == 1 && strstr(cli_err, path) && strstr(cli_err, cases[i].says),
                      "case %zu: exit %d: %s", i, rc, cli_err);
    }
}
END_TEST

START_TEST(threads_above_cpus_warn)
{
    /* Catches -t above the online CPUs passing silently. */
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hi -n 1 -t %ld", CLI_BIN, cli_small,
                            cpus + 1), 0);
    ck_assert_msg(strstr(cli_err, "warning") && strstr(cli_err, "online CPUs"), "%s", cli_err);
    ck_assert_int_eq(cli_sh("%s run -m %s --raw -p hi -n 1 -t 1", CLI_BIN, cli_small), 0);
    ck_assert_ptr_null(strstr(cli_err, "online CPUs"));
}
END_TEST

Suite *cli_suite(void);
Suite *cli_suite(void)
{
    Suite *s = suite_create("cli");
    TCase *tc = tcase_create("options");
    tcase_add_unchecked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, version_and_help);
    tcase_add_test(tc, help_lists_every_accepted_option);
    tcase_add_test(tc, malformed_numbers_are_errors);
    tcase_add_test(tc, inapplicable_options_are_errors);
    tcase_add_test(tc, llama_cpp_spellings);
    tcase_add_test(tc, info_takes_m);
    tcase_add_test(tc, special_tokens_agree);
    tcase_add_test(tc, threads_above_cpus_warn);
    suite_add_tcase(s, tc);
    tc = tcase_create("generation");
    tcase_add_unchecked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, chat_template_by_default);
    tcase_add_test(tc, seed_random_and_reported);
    tcase_add_test(tc, stop_strings);
    tcase_add_test(tc, penalties_see_the_prompt);
    tcase_add_test(tc, context_cut_and_stop_reason);
    tcase_add_test(tc, run_ctrl_c);
    tcase_add_test(tc, stdout_write_errors);
    tcase_add_test(tc, prompts_file_refusals);
    suite_add_tcase(s, tc);
    return s;
}
