/*
 * test-cli-tools.c — the minfer binary's chat loop, model tools and
 * outputs (issue 18, issue 20 items 3 and 5): chat commands, Ctrl-C and a
 * full context; quantize's refusals; output paths that are FIFOs,
 * directories or symlinks; bench -o formats; completion scripts.
 */
#include <check.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli-run.h"
#include "testutil.h"

/* Lines of stdout (which may hold NUL bytes: the replies are random). */
static int out_lines(void)
{
    int n = 0;
    for (size_t i = 0; i < cli_out_len; i++)
        n += cli_out[i] == '\n';
    return n;
}

static int count(const char *s, const char *needle)
{
    int n = 0;
    for (const char *p = s; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* ---- chat ---- */

START_TEST(chat_commands)
{
    /* Catches an empty line ending the chat (it must do nothing), /clear
     * not forgetting the conversation, a """ block not sent as one message,
     * and input after /bye being answered. */
    int rc = cli_sh("printf 'hello\\n\\n/clear\\n\"\"\"\\nline one\\nline two\\n\"\"\"\\n/nope\\n"
                    "/bye\\nnever\\n' | %s chat -m %s -n 3 --temp 0 -c 512", CLI_BIN, cli_chat);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, cli_err);
    ck_assert_int_eq(count(cli_err, "prefilled]"), 2);
    ck_assert_ptr_nonnull(strstr(cli_err, "conversation cleared"));
    ck_assert_ptr_nonnull(strstr(cli_err, "unknown command /nope"));
    ck_assert_int_eq(out_lines(), 2);
    /* after /clear the conversation is the one two-line message: its
     * tokens are exactly what run renders for that prompt */
    int reused = -1, pre = -1;
    for (const char *q = cli_err; (q = strstr(q, "[chat: ")); q++) {
        int r, n;
        if (sscanf(q, "[chat: %d cached tokens reused, %d prefilled]", &r, &n) == 2)
            reused = r, pre = n;
    }
    ck_assert_int_ge(reused, 0);
    ck_assert_int_eq(cli_sh("%s run -m %s -p 'line one\nline two' -n 1 --json", CLI_BIN,
                            cli_chat), 0);
    cJSON *j = cli_json();
    int32_t ids[512];
    ck_assert_int_eq(cli_json_ids(j, "prompt_ids", ids, 512), reused + pre);
    cJSON_Delete(j);
}
END_TEST

START_TEST(chat_full_context_drops_oldest)
{
    /* Catches a full context ending the session, and the system prompt
     * being dropped with the old turns. */
    int rc = cli_sh("for i in 1 2 3 4 5 6; do echo \"message $i with some words to fill the "
                    "context up quickly\"; done | %s chat -m %s -n 16 --temp 0 -c 160 "
                    "--system 'be brief'", CLI_BIN, cli_chat);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, cli_err);
    ck_assert_int_eq(out_lines(), 6);
    ck_assert_msg(strstr(cli_err, "dropped the") && strstr(cli_err, "kept the system prompt"),
                  "%s", cli_err);
}
END_TEST

START_TEST(chat_ctrl_c)
{
    /* Catches Ctrl-C during a reply ending the chat (it must stop the
     * reply and read the next message), and a second Ctrl-C not leaving. */
    /* stdin is a FIFO this script holds open; each step waits for the
     * chat's own note on stderr, so a slow machine only makes it slower */
    static const char wait_for[] =
        "w() { i=0; until grep -q \"$1\" err; do sleep 0.1; i=$((i+1)); "
        "[ $i -gt 900 ] && break; done; }\n";
    int rc = cli_sh("cd %s && rm -f in && mkfifo in && exec 3<>in\n%s"
                    "%s chat -m %s -n 30000 -c 32768 --temp 0 < in & pid=$!\n"
                    "echo hello >&3; w prefilled; sleep 0.3; kill -INT $pid\n"
                    "w 'reply interrupted'; echo /bye >&3; wait $pid", cli_dir, wait_for, CLI_BIN,
                    cli_chat);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, cli_err);
    ck_assert_msg(strstr(cli_err, "reply interrupted"), "%s", cli_err);
    /* with input still open, Ctrl-C at the prompt (the second one) leaves */
    rc = cli_sh("cd %s && rm -f in && mkfifo in && exec 3<>in\n%s"
                "%s chat -m %s -n 30000 -c 32768 --temp 0 < in & pid=$!\n"
                "echo hello >&3; w prefilled; sleep 0.3; kill -INT $pid\n"
                "w 'reply interrupted'; sleep 0.2; kill -INT $pid\n"
                "i=0; while kill -0 $pid 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; "
                "i=$((i+1)); done\n"
                "if kill -0 $pid 2>/dev/null; then echo still running; kill $pid; fi",
                cli_dir, wait_for, CLI_BIN, cli_chat);
    ck_assert_msg(!strstr(cli_out, "still running"), "a second Ctrl-C did not leave: %s",
                  cli_err);
    ck_assert_msg(strstr(cli_err, "reply interrupted"), "%s", cli_err);
}
END_TEST

static int last_reused(void)
{
    int reused = -1;
    for (const char *q = cli_err; (q = strstr(q, "[chat: ")); q++) {
        int r, n;
        if (sscanf(q, "[chat: %d cached tokens reused, %d prefilled]", &r, &n) == 2)
            reused = r;
    }
    return reused;
}

START_TEST(chat_sessions)
{
    /* Catches chat --session not resuming (the saved conversation and its
     * cache must be reused, not recomputed), /save and /load not round
     * tripping, a session of another model or cache type being accepted,
     * and a session written over a FIFO. */
    char ses[128], ses2[128], q8[128], fifo[128];
    snprintf(ses, sizeof ses, "%s/c.session", cli_dir);
    snprintf(ses2, sizeof ses2, "%s/c2.session", cli_dir);
    snprintf(q8, sizeof q8, "%s/chat-q8.gguf", cli_dir);
    snprintf(fifo, sizeof fifo, "%s/ses-fifo", cli_dir);
    int rc = cli_sh("printf 'hello there\\nsecond message\\n' | %s chat -m %s -n 4 --temp 0 "
                    "-c 512 --session %s --system 'be brief'", CLI_BIN, cli_chat, ses);
    ck_assert_msg(rc == 0 && strstr(cli_err, "saved"), "exit %d: %s", rc, cli_err);
    int saved = 0;
    ck_assert_int_eq(sscanf(strstr(cli_err, "[chat: saved"), "[chat: saved %d", &saved), 1);
    rc = cli_sh("printf 'third\\n/save %s\\n' | %s chat -m %s -n 4 --temp 0 -c 512 --session %s",
                ses2, CLI_BIN, cli_chat, ses);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, cli_err);
    ck_assert_msg(strstr(cli_err, "(5 messages)"), "not resumed: %s", cli_err);
    /* all but the re-tokenized reply comes from the file, nothing recomputed */
    ck_assert_msg(last_reused() >= saved - 8, "reused %d of %d saved tokens: %s", last_reused(),
                  saved, cli_err);
    rc = cli_sh("printf '/load %s\\nfourth\\n' | %s chat -m %s -n 4 --temp 0 -c 512", ses2,
                CLI_BIN, cli_chat);
    ck_assert_msg(rc == 0 && strstr(cli_err, "(7 messages)"), "exit %d: %s", rc, cli_err);
    ck_assert_int_gt(last_reused(), 40);
    /* another cache type: refused by name, the chat goes on */
    ck_assert_int_eq(cli_sh("%s quantize %s %s Q8_0", CLI_BIN, cli_chat, q8), 0);
    rc = cli_sh("printf '/load %s\\nhello\\n' | %s chat -m %s -n 2 --temp 0 -c 512 -ctk f32 "
                "-ctv f32", ses, CLI_BIN, cli_chat);
    ck_assert_msg(rc == 0 && strstr(cli_err, "KV cache") && out_lines() == 1, "exit %d: %s", rc,
                  cli_err);
    /* another model: --session that cannot be resumed is an error */
    rc = cli_sh("printf 'hello\\n' | %s chat -m %s -n 2 -c 512 --session %s", CLI_BIN, q8, ses);
    ck_assert_msg(rc == 1 && strstr(cli_err, "another model"), "exit %d: %s", rc, cli_err);
    /* a FIFO is neither loaded (no hang) nor replaced */
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    rc = cli_sh("printf 'hello\\n/save %s\\n' | timeout 20 %s chat -m %s -n 2 -c 512", fifo,
                CLI_BIN, cli_chat);
    ck_assert_msg(rc == 0 && strstr(cli_err, "a FIFO"), "exit %d: %s", rc, cli_err);
    rc = cli_sh("printf 'hello\\n' | timeout 20 %s chat -m %s -n 2 -c 512 --session %s", CLI_BIN,
                cli_chat, fifo);
    ck_assert_msg(rc == 1 && strstr(cli_err, "not a regular file"), "exit %d: %s", rc, cli_err);
    struct stat sb;
    ck_assert(lstat(fifo, &sb) == 0 && S_ISFIFO(sb.st_mode));
}
END_TEST

/* ---- quantize and output paths ---- */

START_TEST(quantize_refusals)
{
    /* Catches quantize overwriting its input (directly, through a symlink
     * or a hard link) and silently requantizing a quantized model. */
    char in[128], out[128], link[128];
    snprintf(in, sizeof in, "%s/q-in.gguf", cli_dir);
    snprintf(out, sizeof out, "%s/q-out.gguf", cli_dir);
    snprintf(link, sizeof link, "%s/q-link.gguf", cli_dir);
    ck_assert_int_eq(cli_sh("cp %s %s && ln -sf %s %s", cli_chat, in, in, link), 0);
    ck_assert_int_eq(cli_sh("%s quantize %s %s Q8_0", CLI_BIN, in, in), 1);
    ck_assert_ptr_nonnull(strstr(cli_err, "is the input file"));
    ck_assert_int_eq(cli_sh("%s quantize %s %s Q8_0", CLI_BIN, in, link), 1);
    ck_assert_ptr_nonnull(strstr(cli_err, "through a link"));
    ck_assert_int_eq(cli_sh("%s info %s --no-kv", CLI_BIN, in), 0); /* intact */
    ck_assert_int_eq(cli_sh("%s quantize %s %s Q4_0", CLI_BIN, cli_small, out), 1);
    ck_assert_msg(strstr(cli_err, "already quantized") && strstr(cli_err, "--allow-requantize"),
                  "%s", cli_err);
    ck_assert_int_ne(access(out, F_OK), 0);
    ck_assert_int_eq(cli_sh("%s quantize --allow-requantize %s %s Q4_0", CLI_BIN, cli_small,
                            out), 0);
    ck_assert_int_eq(cli_sh("%s quantize %s %s Q8_0 && ls %s", CLI_BIN, in, out, cli_dir), 0);
    ck_assert_msg(!strstr(cli_out, ".tmp"), "a temporary was left: %s", cli_out);
}
END_TEST

START_TEST(output_paths_never_replace_special_files)
{
    /* Catches a writer replacing a FIFO or a directory with a regular file
     * (as -o /dev/full once was), and a symlinked output replaced by a
     * regular file instead of its target being written. */
    char fifo[128], dir[128], target[128], link[128];
    snprintf(fifo, sizeof fifo, "%s/fifo", cli_dir);
    snprintf(dir, sizeof dir, "%s/adir", cli_dir);
    snprintf(target, sizeof target, "%s/target.gguf", cli_dir);
    snprintf(link, sizeof link, "%s/link.gguf", cli_dir);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    ck_assert_int_eq(mkdir(dir, 0700), 0);
    const char *writers[] = {
        "quantize %s %s Q8_0", /* in, out */
        "eval -m %s -p hi -o %s",
    };
    for (int w = 0; w < 2; w++) {
        const char *bad[] = {fifo, dir};
        for (int b = 0; b < 2; b++) {
            char c[512];
            snprintf(c, sizeof c, writers[w], cli_chat, bad[b]);
            int rc = cli_sh("%s %s", CLI_BIN, c);
            ck_assert_msg(rc == 1, "%s: exit %d", c, rc);
            ck_assert_msg(strstr(cli_err, b ? "a directory" : "a FIFO"), "%s: %s", c, cli_err);
        }
    }
    /* synth: also checks that --arch comes from --shape (no --arch given) */
    ck_assert_int_eq(cli_sh("%s synth --shape qwen2.5-0.5b --type Q4_0 -o %s", CLI_BIN, fifo), 1);
    ck_assert_msg(strstr(cli_err, "a FIFO"), "%s", cli_err);
    struct stat sb;
    ck_assert_int_eq(lstat(fifo, &sb), 0);
    ck_assert(S_ISFIFO(sb.st_mode));
    ck_assert_int_eq(lstat(dir, &sb), 0);
    ck_assert(S_ISDIR(sb.st_mode));
    /* a symlink is followed: the target is written, the link kept */
    for (int w = 0; w < 2; w++) {
        ck_assert_int_eq(cli_sh("rm -f %s; echo old > %s; ln -sf %s %s", link, target, target,
                                link), 0);
        char c[512];
        snprintf(c, sizeof c, writers[w], cli_chat, link);
        ck_assert_msg(cli_sh("%s %s", CLI_BIN, c) == 0, "%s: %s", c, cli_err);
        ck_assert_int_eq(lstat(link, &sb), 0);
        ck_assert_msg(S_ISLNK(sb.st_mode), "%s replaced the symlink", c);
        ck_assert_int_eq(stat(target, &sb), 0);
        ck_assert_msg(sb.st_size > 4, "%s left the target unwritten", c);
    }
    /* a dangling symlink is refused */
    ck_assert_int_eq(cli_sh("rm -f %s; ln -s %s/missing %s", link, cli_dir, link), 0);
    ck_assert_int_eq(cli_sh("%s quantize %s %s Q8_0", CLI_BIN, cli_chat, link), 1);
}
END_TEST

/* ---- bench ---- */

START_TEST(bench_output_formats)
{
    /* Catches -o json not being an array of rows with llama-bench's fields,
     * jsonl rows that do not parse, a csv without its header, and md
     * losing its table. */
    ck_assert_int_eq(cli_sh("%s bench -m %s -p 8 -n 4 -r 2 -o json", CLI_BIN, cli_small), 0);
    cJSON *a = cJSON_Parse(cli_out);
    ck_assert_msg(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 2, "%s", cli_out);
    static const char *const keys[] = {"model", "backend", "threads", "test", "n_prompt",
                                       "n_gen", "avg_ts", "stddev_ts", "samples_ts", "size",
                                       "params"};
    for (int r = 0; r < 2; r++) {
        const cJSON *row = cJSON_GetArrayItem(a, r);
        for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++)
            ck_assert_msg(cJSON_GetObjectItemCaseSensitive(row, keys[k]), "row %d lacks %s", r,
                          keys[k]);
        ck_assert_double_gt(cJSON_GetObjectItemCaseSensitive(row, "avg_ts")->valuedouble, 0);
    }
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(a, 0), "n_prompt")
                         ->valueint, 8);
    ck_assert_int_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(a, 1), "n_gen")
                         ->valueint, 4);
    cJSON_Delete(a);
    ck_assert_int_eq(cli_sh("%s bench -m %s -p 8 -n 4 -r 2 -o jsonl", CLI_BIN, cli_small), 0);
    ck_assert_int_eq(cli_lines(cli_out), 2);
    char *nl = strchr(cli_out, '\n');
    *nl = 0;
    a = cJSON_Parse(cli_out);
    ck_assert_msg(cJSON_IsObject(a), "%s", cli_out);
    cJSON_Delete(a);
    ck_assert_int_eq(cli_sh("%s bench -m %s -p 8 -n 4 -r 2 -o csv", CLI_BIN, cli_small), 0);
    ck_assert_int_eq(cli_lines(cli_out), 3);
    ck_assert_ptr_nonnull(strstr(cli_out, "model,size,params,backend,threads,test,n_prompt,"
                                          "n_gen,avg_ts,stddev_ts\n"));
    ck_assert_int_eq(cli_sh("%s bench -m %s -p 8 -n 4 -r 2", CLI_BIN, cli_small), 0);
    ck_assert_int_eq(cli_lines(cli_out), 4);
    ck_assert_ptr_nonnull(strstr(cli_out, "| pp8 |"));
    ck_assert_int_eq(cli_sh("%s bench -m %s -o yaml", CLI_BIN, cli_small), 2);
    /* --parallel with nothing to time: a row of zeros per count, as
     * llama.cpp's batched-bench, not a full cache (its warm-up step had no
     * cells: the context was sized 0 + 1) */
    ck_assert_msg(cli_sh("%s bench -m %s -t 1 --parallel 1,3 -p 0 -n 0", CLI_BIN, cli_small) == 0,
                  "%s", cli_err);
    ck_assert_int_eq(cli_lines(cli_out), 4);
}
END_TEST

START_TEST(bench_depth_rows)
{
    /* Catches -d ignored (rows without "@ dD"), a depth row timed from an
     * empty cache instead of after the fill (the context would then not
     * need depth + test cells: -c smaller than that must be refused), and
     * a malformed list accepted. */
    ck_assert_int_eq(cli_sh("%s bench -m %s -p 8 -n 4 -d 0,24 -r 1 -o json", CLI_BIN,
                            cli_small), 0);
    cJSON *a = cJSON_Parse(cli_out);
    ck_assert_msg(cJSON_IsArray(a) && cJSON_GetArraySize(a) == 4, "%s", cli_out);
    static const char *const want[] = {"pp8", "tg4", "pp8 @ d24", "tg4 @ d24"};
    for (int r = 0; r < 4; r++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(a, r), "test");
        ck_assert_msg(cJSON_IsString(t) && !strcmp(t->valuestring, want[r]), "row %d: %s", r,
                      cli_out);
    }
    cJSON_Delete(a);
    ck_assert_int_eq(cli_sh("%s bench -m %s -p 8 -n 0 -d 24 -c 16 -r 1", CLI_BIN, cli_small), 1);
    ck_assert_msg(strstr(cli_err, "depth 24"), "%s", cli_err);
    ck_assert_int_eq(cli_sh("%s bench -m %s -d 4,x", CLI_BIN, cli_small), 2);
}
END_TEST

START_TEST(default_context_is_the_models)
{
    /* Catches the default context still min(4096, the model's) or sized
     * without the backend's free memory: with -v, run says which context
     * it chose and why; the tiny model's KV cache fits, so its own. */
    ck_assert_int_eq(cli_sh("%s run -m %s -p hi -n 1 -v", CLI_BIN, cli_small), 0);
    ck_assert_msg(strstr(cli_err, "tokens, the model's (KV cache"), "%s", cli_err);
}
END_TEST

/* ---- completion ---- */

START_TEST(completion_scripts)
{
    /* Catches a completion script with a syntax error or missing commands. */
    ck_assert_int_eq(cli_sh("%s completion bash > %s/c.bash && bash -n %s/c.bash", CLI_BIN,
                            cli_dir, cli_dir), 0);
    ck_assert_int_eq(cli_sh("%s completion bash", CLI_BIN), 0);
    ck_assert_ptr_nonnull(strstr(cli_out, "complete -o filenames -F _minfer minfer"));
    ck_assert_ptr_nonnull(strstr(cli_out, "--ctx-size"));
    /* completing "minfer ru" offers run */
    ck_assert_int_eq(cli_sh("bash -c 'source %s/c.bash; COMP_WORDS=(minfer ru); COMP_CWORD=1; "
                            "_minfer; echo \"${COMPREPLY[@]}\"'", cli_dir), 0);
    ck_assert_str_eq(cli_out, "run\n");
    ck_assert_int_eq(cli_sh("bash -c 'source %s/c.bash; COMP_WORDS=(minfer run --ctx); "
                            "COMP_CWORD=2; _minfer; echo \"${COMPREPLY[@]}\"'", cli_dir), 0);
    ck_assert_str_eq(cli_out, "--ctx-size\n");
    ck_assert_int_eq(cli_sh("%s completion zsh", CLI_BIN), 0);
    ck_assert_ptr_nonnull(strstr(cli_out, "#compdef minfer"));
    if (cli_sh("command -v zsh") == 0)
        ck_assert_int_eq(cli_sh("%s completion zsh > %s/c.zsh && zsh -n %s/c.zsh", CLI_BIN,
                                cli_dir, cli_dir), 0);
    ck_assert_int_eq(cli_sh("%s completion fish", CLI_BIN), 2);
}
END_TEST

Suite *cli_tools_suite(void);
Suite *cli_tools_suite(void)
{
    Suite *s = suite_create("cli-tools");
    TCase *tc = tcase_create("chat");
    tcase_add_unchecked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, chat_commands);
    tcase_add_test(tc, chat_full_context_drops_oldest);
    tcase_add_test(tc, chat_ctrl_c);
    tcase_add_test(tc, chat_sessions);
    suite_add_tcase(s, tc);
    tc = tcase_create("files");
    tcase_add_unchecked_fixture(tc, cli_setup, cli_teardown);
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, quantize_refusals);
    tcase_add_test(tc, output_paths_never_replace_special_files);
    tcase_add_test(tc, bench_output_formats);
    tcase_add_test(tc, bench_depth_rows);
    tcase_add_test(tc, default_context_is_the_models);
    tcase_add_test(tc, completion_scripts);
    suite_add_tcase(s, tc);
    return s;
}
