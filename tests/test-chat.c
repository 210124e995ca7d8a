/*
 * test-chat.c — chat template recognition and ChatML rendering: the
 * fixture model's own template and prompt (P2), Qwen2/Qwen2.5 default
 * system prompts, Qwen3 <think> handling of past turns, tool turns,
 * unrecognised templates and forcing, buffer sizing.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "minfer/gguf.h"
#include "minfer/minfer.h"
#include "testutil.h"
#include "text/tokenizer.h"

#define FIX MINFER_FIXTURES_DIR

static char out[4096];

static const char *render(const struct minfer_tokenizer *tok, enum minfer_chat_format f,
                          const struct minfer_chat_msg *m, size_t n, bool gen)
{
    size_t len;
    char err[256];
    minfer_status st = minfer_chat_render(tok, f, m, n, gen, out, sizeof out, &len, err, sizeof err);
    ck_assert_msg(st == MINFER_OK, "render: %s", err);
    ck_assert_uint_eq(strlen(out), len);
    return out;
}

/* A tokenizer object holding only a template, enough for the chat code. */
static struct minfer_tokenizer tmpl_tok(const char *tmpl)
{
    struct minfer_tokenizer t;
    memset(&t, 0, sizeof t);
    t.chat_template = (char *)tmpl;
    t.chat_template_len = strlen(tmpl);
    ck_assert_int_eq(tok_chat_init(&t), MINFER_OK);
    return t;
}

START_TEST(fixture_prompt_p2)
{
    /* Catches any byte of difference from transformers' apply_chat_template
     * with the fixture model's own (Qwen3-style) template: the P2 prompt of
     * fixture-A.json, rendered and tokenized to the same ids. */
    FILE *f = fopen(FIX "/models/fixture-A-f16.gguf", "rb");
    if (!f)
        MINFER_TEST_SKIP("no fixtures at %s", FIX);
    fclose(f);
    minfer_status st;
    char err[256];
    struct minfer_gguf *g = minfer_gguf_open(FIX "/models/fixture-A-f16.gguf", &st, err, sizeof err);
    ck_assert_msg(g, "%s", err);
    struct minfer_tokenizer *tok = minfer_tokenizer_from_gguf(g, &st, err, sizeof err);
    minfer_gguf_close(g);
    ck_assert_msg(tok, "%s", err);
    ck_assert_int_eq(minfer_tokenizer_chat_format(tok), MINFER_CHAT_CHATML);
    struct minfer_chat_msg m[] = {{"user", "Hello! 你好, 世界 🌍"}};
    const char *want = "<|im_start|>user\nHello! 你好, 世界 🌍<|im_end|>\n<|im_start|>assistant\n";
    ck_assert_str_eq(render(tok, MINFER_CHAT_UNKNOWN, m, 1, true), want);
    static const int32_t ids[] = {151644, 872, 198, 9707, 0, 220, 108386, 11, 220, 99489, 11162,
                                  234, 235, 151645, 198, 151644, 77091, 198};
    int32_t got[64];
    size_t n;
    ck_assert_int_eq(minfer_tokenize(tok, out, strlen(out), true, got, 64, &n), MINFER_OK);
    ck_assert_uint_eq(n, sizeof ids / sizeof ids[0]);
    ck_assert_mem_eq(got, ids, sizeof ids);
    minfer_tokenizer_free(tok);
}
END_TEST

/* Abridged from Qwen2.5's tokenizer_config.json (Jinja escapes as stored). */
static const char qwen25[] =
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == "
    "'system' %}\n        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- 'You are "
    "Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}\n    {%- endif %}\n{%- else "
    "%}\n    {%- if messages[0]['role'] == 'system' %}\n        {{- '<|im_start|>system\\n' + "
    "messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n        {{- "
    "'<|im_start|>system\\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
    "assistant.<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n";
/* Qwen2's, whose JSON stored real newlines inside the literals. */
static const char qwen2[] =
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ "
    "'<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' "
    "+ message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if "
    "add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}";

START_TEST(default_system_prompts)
{
    /* Catches Qwen2/2.5 prompts missing the default system turn the model
     * was trained with (or adding it when a system message exists). */
    struct minfer_chat_msg u[] = {{"user", "hi"}};
    struct minfer_tokenizer t = tmpl_tok(qwen25);
    ck_assert_int_eq(t.chat_format, MINFER_CHAT_CHATML);
    ck_assert_str_eq(render(&t, MINFER_CHAT_UNKNOWN, u, 1, true),
                     "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                     "helpful assistant.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                     "<|im_start|>assistant\n");
    struct minfer_chat_msg su[] = {{"system", "Be brief."}, {"user", "hi"}};
    ck_assert_str_eq(render(&t, MINFER_CHAT_UNKNOWN, su, 2, false),
                     "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n");
    free(t.chat_default_system);
    t = tmpl_tok(qwen2);
    ck_assert_str_eq(render(&t, MINFER_CHAT_UNKNOWN, u, 1, false),
                     "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
                     "<|im_start|>user\nhi<|im_end|>\n");
    free(t.chat_default_system);
}
END_TEST

static const char qwen3_like[] =
    "{%- if messages[0].role == 'system' %}{{- '<|im_start|>system\\n' + messages[0].content + "
    "'<|im_end|>\\n' }}{%- endif %}{%- if message.reasoning_content is defined %}{%- endif %}"
    "{%- if '</think>' in message.content %}{%- endif %}";

START_TEST(qwen3_think_turns)
{
    /* Catches reasoning of past assistant turns leaking into the prompt,
     * the last turn after the final query losing its <think> block, and
     * enable_thinking = false not closing the think block, as Qwen3's
     * template renders them; no default system prompt here. */
    struct minfer_tokenizer t = tmpl_tok(qwen3_like);
    ck_assert(t.chat_think);
    ck_assert_ptr_null(t.chat_default_system);
    struct minfer_chat_msg m[] = {
        {"user", "2+2?"},
        {"assistant", "<think>\nadd them\n</think>\n\n4"},
        {"user", "and 3+3?"},
        {"assistant", "<think>\nagain\n</think>\n\n6"},
    };
    ck_assert_str_eq(render(&t, MINFER_CHAT_UNKNOWN, m, 4, false),
                     "<|im_start|>user\n2+2?<|im_end|>\n"
                     "<|im_start|>assistant\n4<|im_end|>\n"
                     "<|im_start|>user\nand 3+3?<|im_end|>\n"
                     "<|im_start|>assistant\n<think>\nagain\n</think>\n\n6<|im_end|>\n");
    /* a last assistant turn without reasoning still gets the empty block */
    struct minfer_chat_msg m2[] = {{"user", "hi"}, {"assistant", "hello"}};
    ck_assert_str_eq(render(&t, MINFER_CHAT_UNKNOWN, m2, 2, false),
                     "<|im_start|>user\nhi<|im_end|>\n"
                     "<|im_start|>assistant\n<think>\n\n</think>\n\nhello<|im_end|>\n");
    /* enable_thinking = -1: Qwen3's empty think block after the prompt */
    struct minfer_chat_opts o = {sizeof o, true, -1};
    size_t n;
    ck_assert_int_eq(minfer_chat_render_opts(&t, MINFER_CHAT_UNKNOWN, m2, 1, &o, out, sizeof out,
                                             &n, NULL, 0),
                     MINFER_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n"
                          "<|im_start|>assistant\n<think>\n\n</think>\n\n");
    o.enable_thinking = 0;
    ck_assert_int_eq(minfer_chat_render_opts(&t, MINFER_CHAT_UNKNOWN, m2, 1, &o, out, sizeof out,
                                             &n, NULL, 0),
                     MINFER_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    /* a template without Qwen3's handling ignores it */
    o.enable_thinking = -1;
    ck_assert_int_eq(minfer_chat_render_opts(NULL, MINFER_CHAT_CHATML, m2, 1, &o, out, sizeof out,
                                             &n, NULL, 0),
                     MINFER_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
}
END_TEST

START_TEST(tool_turns_grouped)
{
    /* Catches consecutive tool results not being merged into one user turn
     * wrapped in <tool_response>, as the Qwen templates do. */
    struct minfer_chat_msg m[] = {{"user", "weather?"}, {"tool", "sunny"}, {"tool", "22C"}};
    ck_assert_str_eq(render(NULL, MINFER_CHAT_CHATML, m, 3, true),
                     "<|im_start|>user\nweather?<|im_end|>\n<|im_start|>user\n<tool_response>\n"
                     "sunny\n</tool_response>\n<tool_response>\n22C\n</tool_response><|im_end|>\n"
                     "<|im_start|>assistant\n");
}
END_TEST

START_TEST(unknown_template_reported_and_forcible)
{
    /* Catches a non-ChatML template being rendered as ChatML silently, and
     * forcing not working; also name lookup and detection. */
    static const char phi3[] =
        "{% for message in messages %}{{'<|' + message['role'] + '|>' + '\\n' + "
        "message['content'] + '<|end|>\\n' }}{% endfor %}";
    struct minfer_tokenizer t = tmpl_tok(phi3);
    ck_assert_int_eq(t.chat_format, MINFER_CHAT_UNKNOWN);
    ck_assert_int_eq(minfer_chat_detect(phi3, strlen(phi3)), MINFER_CHAT_UNKNOWN);
    struct minfer_chat_msg m[] = {{"user", "hi"}};
    size_t n;
    char err[256];
    ck_assert_int_eq(minfer_chat_render(&t, MINFER_CHAT_UNKNOWN, m, 1, true, out, sizeof out, &n,
                                        err, sizeof err),
                     MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "not one this build recognises"));
    ck_assert_str_eq(render(&t, MINFER_CHAT_CHATML, m, 1, true),
                     "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    enum minfer_chat_format f;
    ck_assert(minfer_chat_format_from_name("chatml", &f));
    ck_assert_int_eq(f, MINFER_CHAT_CHATML);
    ck_assert(!minfer_chat_format_from_name("jinja", &f));
    ck_assert_str_eq(minfer_chat_format_name(MINFER_CHAT_CHATML), "chatml");
    ck_assert_int_eq(minfer_chat_render(NULL, MINFER_CHAT_UNKNOWN, m, 1, true, out, sizeof out,
                                        &n, err, sizeof err),
                     MINFER_ERR_UNSUPPORTED);
}
END_TEST

/* Catches: Llama 3 and Gemma templates not recognised, or rendered with
 * the wrong headers, roles ("model"), system placement or untrimmed
 * contents (the strings llama.cpp's renderers of both produce). */
START_TEST(llama3_and_gemma_turns)
{
    static const char llama3[] =
        "{{- bos_token }}{%- for message in messages %}{{- '<|start_header_id|>' + "
        "message['role'] + '<|end_header_id|>\\n\\n' + message['content'] | trim + "
        "'<|eot_id|>' }}";
    static const char gemma[] =
        "{{ bos_token }}{% for m in messages %}{{ '<start_of_turn>' + ('model' if m['role'] == "
        "'assistant' else m['role']) + '\\n' + m['content'] + '<end_of_turn>\\n' }}{% endfor %}";
    struct minfer_tokenizer l3 = tmpl_tok(llama3), gm = tmpl_tok(gemma);
    ck_assert_int_eq(l3.chat_format, MINFER_CHAT_LLAMA3);
    ck_assert_int_eq(gm.chat_format, MINFER_CHAT_GEMMA);
    struct minfer_chat_msg m[] = {{"system", "Be brief."}, {"user", " hi \n"},
                                  {"assistant", "Hello."}, {"user", "bye"}};
    ck_assert_str_eq(render(&l3, MINFER_CHAT_UNKNOWN, m, 4, true),
                     "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
                     "<|start_header_id|>user<|end_header_id|>\n\nbye<|eot_id|>"
                     "<|start_header_id|>assistant<|end_header_id|>\n\n");
    ck_assert_str_eq(render(&gm, MINFER_CHAT_UNKNOWN, m, 4, true),
                     "<start_of_turn>user\nBe brief.\n\nhi<end_of_turn>\n"
                     "<start_of_turn>model\nHello.<end_of_turn>\n"
                     "<start_of_turn>user\nbye<end_of_turn>\n<start_of_turn>model\n");
    enum minfer_chat_format f;
    ck_assert(minfer_chat_format_from_name("gemma", &f) && f == MINFER_CHAT_GEMMA);
    ck_assert(minfer_chat_format_from_name("llama3", &f) && f == MINFER_CHAT_LLAMA3);
    ck_assert_str_eq(minfer_chat_format_name(MINFER_CHAT_LLAMA3), "llama3");
}
END_TEST

struct parsed {
    int n;
    char role[8][16];
    char content[8][64];
    bool complete[8];
};

static int collect(const char *role, const char *content, size_t len, bool complete, void *user)
{
    struct parsed *p = user;
    if (p->n == 8)
        return 1;
    snprintf(p->role[p->n], sizeof p->role[0], "%s", role);
    snprintf(p->content[p->n], sizeof p->content[0], "%.*s", (int)len, content);
    p->complete[p->n++] = complete;
    return 0;
}

/* Catches a resumed chat (a session file holds tokens, not messages)
 * losing or garbling turns in any format: render -> parse gives the
 * messages back (Gemma's system folded into the first user turn), a reply
 * cut short comes back marked incomplete, a bare generation prompt is no
 * message, and text before the first turn (a BOS) is ignored. */
START_TEST(rendered_turns_parse_back)
{
    struct minfer_chat_msg m[] = {{"system", "Be brief."}, {"user", "hi"},
                                  {"assistant", "Hello."}, {"user", "bye"}};
    static const enum minfer_chat_format fmts[] = {MINFER_CHAT_CHATML, MINFER_CHAT_LLAMA3,
                                                   MINFER_CHAT_GEMMA};
    for (size_t f = 0; f < 3; f++) {
        char text[1024];
        snprintf(text, sizeof text, "<bos>%s", render(NULL, fmts[f], m, 4, true));
        size_t base = strlen(text);
        snprintf(text + base, sizeof text - base, "Good");
        struct parsed p = {0};
        char err[128];
        ck_assert_int_eq(minfer_chat_parse(fmts[f], text, strlen(text), collect, &p, err,
                                           sizeof err),
                         MINFER_OK);
        bool gemma = fmts[f] == MINFER_CHAT_GEMMA;
        ck_assert_int_eq(p.n, gemma ? 4 : 5);
        int k = 0;
        if (!gemma) {
            ck_assert_str_eq(p.role[k], "system");
            ck_assert_str_eq(p.content[k++], "Be brief.");
        }
        ck_assert_str_eq(p.role[k], "user");
        ck_assert_str_eq(p.content[k++], gemma ? "Be brief.\n\nhi" : "hi");
        ck_assert_str_eq(p.role[k], "assistant");
        ck_assert_str_eq(p.content[k++], "Hello.");
        ck_assert_str_eq(p.role[k], "user");
        ck_assert_str_eq(p.content[k++], "bye");
        ck_assert(p.complete[k - 1]);
        ck_assert_str_eq(p.role[k], "assistant");
        ck_assert_str_eq(p.content[k], "Good");
        ck_assert(!p.complete[k]);
        /* the generation prompt alone is no message */
        p = (struct parsed){0};
        text[base] = 0;
        ck_assert_int_eq(minfer_chat_parse(fmts[f], text, base, collect, &p, NULL, 0), MINFER_OK);
        ck_assert_int_eq(p.n, gemma ? 3 : 4);
    }
    char err[128];
    ck_assert_int_eq(minfer_chat_parse(MINFER_CHAT_UNKNOWN, "x", 1, collect, &(struct parsed){0},
                                       err, sizeof err),
                     MINFER_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "known: chatml"));
}
END_TEST

START_TEST(buffer_sizing_and_bad_messages)
{
    /* Catches writes past cap, a wrong needed size, and NULL fields read. */
    struct minfer_chat_msg m[] = {{"user", "hello"}};
    char small[8];
    memset(small, 'Z', sizeof small);
    size_t n;
    ck_assert_int_eq(minfer_chat_render(NULL, MINFER_CHAT_CHATML, m, 1, false, small, 4, &n, NULL,
                                        0),
                     MINFER_ERR_RANGE);
    ck_assert_uint_eq(n, strlen("<|im_start|>user\nhello<|im_end|>\n"));
    ck_assert_int_eq(small[4], 'Z');
    struct minfer_chat_msg bad[] = {{"user", NULL}};
    ck_assert_int_eq(minfer_chat_render(NULL, MINFER_CHAT_CHATML, bad, 1, false, out, sizeof out,
                                        &n, NULL, 0),
                     MINFER_ERR_INVALID_ARG);
    ck_assert_str_eq(render(NULL, MINFER_CHAT_CHATML, NULL, 0, true), "<|im_start|>assistant\n");
}
END_TEST

Suite *chat_suite(void);
Suite *chat_suite(void)
{
    Suite *s = suite_create("chat");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, fixture_prompt_p2);
    tcase_add_test(tc, default_system_prompts);
    tcase_add_test(tc, qwen3_think_turns);
    tcase_add_test(tc, tool_turns_grouped);
    tcase_add_test(tc, unknown_template_reported_and_forcible);
    tcase_add_test(tc, llama3_and_gemma_turns);
    tcase_add_test(tc, rendered_turns_parse_back);
    tcase_add_test(tc, buffer_sizing_and_bad_messages);
    suite_add_tcase(s, tc);
    return s;
}
