/*
 * pretok-qwen2.c — the Qwen2 pre-tokenizer (tokenizer.ggml.pre = "qwen2";
 * Qwen2, Qwen2.5, Qwen3): NFC, then one regex, as the model's
 * tokenizer.json states it. Like GPT-4's split but digits go one at a time.
 */
#include "tokenizer.h"

const struct tok_pretok tok_pretok_qwen2 = {
    .name = "qwen2",
    .regex = {"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
              "|\\p{N}"
              "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+"
              "|\\s+(?!\\S)"
              "|\\s+"},
    .nfc = true,
};
