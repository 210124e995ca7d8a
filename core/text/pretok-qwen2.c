/*
 * pretok-qwen2.c — the Qwen2 pre-tokenizer (tokenizer.ggml.pre = "qwen2";
 * Qwen2, Qwen2.5, Qwen3): NFC, then one regex, as the model's
 * tokenizer.json states it. Like GPT-4's split but digits go one at a time.
 *
 * \s is spelled out as Unicode's White_Space set (what Hugging Face's Rust
 * regex means by \s): PCRE2's \s also matches U+180E MONGOLIAN VOWEL
 * SEPARATOR, which stopped being a space in Unicode 6.3.
 */
#include "tokenizer.h"

const struct tok_pretok tok_pretok_qwen2 = {
    .name = "qwen2",
    .regex = {"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
              "|\\p{N}"
              "| ?[^" TOK_WS "\\p{L}\\p{N}]+[\\r\\n]*"
              "|[" TOK_WS "]*[\\r\\n]+"
              "|[" TOK_WS "]+(?![^" TOK_WS "])"
              "|[" TOK_WS "]+"},
    .nfc = true,
};
