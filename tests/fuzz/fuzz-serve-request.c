/*
 * fuzz-serve-request.c — libFuzzer target for minfer serve's request-body
 * parser (tools/serve/request.c), the first code that sees a client's
 * bytes. Input byte 0 picks the route (bit 0: chat, else completions); the
 * rest is the body. Any bytes must parse or be refused without a crash or
 * sanitizer report; a refusal is a 400 with a message and valid error JSON;
 * an accepted request has messages or prompts, non-empty stop strings and
 * in-range sampling fields. Seeds: corpus-serve-request/.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(c) \
    do { \
        if (!(c)) \
            abort(); \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    enum serve_kind kind = (data[0] & 1) ? SERVE_CHAT : SERVE_COMPLETION;
    struct serve_params p;
    struct serve_err e;
    memset(&e, 0, sizeof e);
    if (serve_parse_request(kind, (const char *)data + 1, size - 1, &p, &e) != 0) {
        CHECK(e.status == 400 && e.message[0]);
        char *j = serve_err_json(&e);
        CHECK(j);
        cJSON *back = cJSON_Parse(j);
        CHECK(back && cJSON_GetObjectItem(cJSON_GetObjectItem(back, "error"), "message"));
        cJSON_Delete(back);
        free(j);
        return 0;
    }
    if (kind == SERVE_CHAT) {
        CHECK(p.n_msgs > 0);
        for (size_t i = 0; i < p.n_msgs; i++)
            CHECK(p.msgs[i].role && p.msgs[i].content);
    } else {
        CHECK(p.n_prompts > 0 && p.n_prompts <= 64);
        for (size_t i = 0; i < p.n_prompts; i++)
            CHECK(p.prompt_text[i] || (p.prompt_ids[i] && p.n_prompt_ids[i] > 0));
    }
    for (size_t i = 0; i < p.n_stop; i++)
        CHECK(p.stop[i] && p.stop[i][0]);
    CHECK(p.max_tokens >= -1);
    CHECK(p.sp.temperature >= 0 && p.sp.temperature <= 2);
    CHECK(p.top_logprobs >= 0 && p.top_logprobs <= SERVE_MAX_TOP_LOGPROBS);
    serve_params_free(&p);
    return 0;
}
