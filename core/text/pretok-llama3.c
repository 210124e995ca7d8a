/*
 * pretok-llama3.c — the Llama 3 pre-tokenizer (tokenizer.ggml.pre =
 * "llama-bpe", as llama.cpp's converter names it): the GPT-4 style split
 * with digits in groups of up to three, no normaliser, and whole-piece
 * vocabulary lookup before merging (its tokenizer.json sets ignore_merges).
 * \s is Unicode White_Space, as in pretok-qwen2.c.
 */
#include "tokenizer.h"

const struct tok_pretok tok_pretok_llama3 = {
    .name = "llama-bpe",
    .regex = {"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
              "|\\p{N}{1,3}"
              "| ?[^" TOK_WS "\\p{L}\\p{N}]+[\\r\\n]*"
              "|[" TOK_WS "]*[\\r\\n]+"
              "|[" TOK_WS "]+(?![^" TOK_WS "])"
              "|[" TOK_WS "]+"},
    .nfc = false,
    .ignore_merges = true,
};
