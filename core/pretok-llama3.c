/*
 * pretok-llama3.c — the Llama 3 pre-tokenizer (tokenizer.ggml.pre =
 * "llama-bpe", as llama.cpp's converter names it): the GPT-4 style split
 * with digits in groups of up to three, no normaliser, and whole-piece
 * vocabulary lookup before merging (its tokenizer.json sets ignore_merges).
 */
#include "tokenizer.h"

const struct tok_pretok tok_pretok_llama3 = {
    .name = "llama-bpe",
    .regex = {"(?i:'s|'t|'re|'ve|'m|'ll|'d)"
              "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+"
              "|\\p{N}{1,3}"
              "| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*"
              "|\\s*[\\r\\n]+"
              "|\\s+(?!\\S)"
              "|\\s+"},
    .nfc = false,
    .ignore_merges = true,
};
