#!/usr/bin/env python3
"""make-tokenizer-seeds.py — writes tests/fuzz/corpus-tokenizer: text seeds
(byte 0 = options) and small GGUF files carrying only tokenizer.* metadata
(byte-level BPE, qwen2 and llama-bpe, ChatML templates), so fuzz-tokenizer
starts deep in both the text pipeline and the metadata loader.
Run from anywhere: python3 tests/fuzz/make-tokenizer-seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus-tokenizer")


def gstr(b):
    b = b.encode() if isinstance(b, str) else b
    return struct.pack("<Q", len(b)) + b


def kv_str(k, v):
    return gstr(k) + struct.pack("<I", 8) + gstr(v)


def kv_u32(k, v):
    return gstr(k) + struct.pack("<II", 4, v)


def kv_bool(k, v):
    return gstr(k) + struct.pack("<I?", 7, v)


def kv_strs(k, vs):
    return gstr(k) + struct.pack("<IIQ", 9, 8, len(vs)) + b"".join(gstr(v) for v in vs)


def kv_i32s(k, vs):
    return gstr(k) + struct.pack("<IIQ", 9, 5, len(vs)) + b"".join(struct.pack("<i", v) for v in vs)


def byte_tokens():
    out, nxt = [], 256
    for b in range(256):
        printable = 0x21 <= b <= 0x7E or 0xA1 <= b <= 0xAC or b >= 0xAE
        cp = b if printable else nxt
        if not printable:
            nxt += 1
        out.append(chr(cp).encode())
    return out


def gguf(pre, template):
    toks = byte_tokens() + [b"he", b"ll", b"hell", b"hello", b"\xc4\xa0w", b"<|im_start|>",
                            b"<|im_end|>", b"<think>", b"[PAD]"]
    types = [1] * 261 + [3, 3, 4, 5]
    merges = [b"h e", b"l l", b"he ll", b"hell o", b"\xc4\xa0 w"]
    kvs = [kv_str("tokenizer.ggml.model", "gpt2"), kv_str("tokenizer.ggml.pre", pre),
           kv_strs("tokenizer.ggml.tokens", toks), kv_i32s("tokenizer.ggml.token_type", types),
           kv_strs("tokenizer.ggml.merges", merges), kv_u32("tokenizer.ggml.eos_token_id", 262),
           kv_u32("tokenizer.ggml.bos_token_id", 261), kv_bool("tokenizer.ggml.add_bos_token", False),
           kv_str("tokenizer.chat_template", template)]
    return b"GGUF" + struct.pack("<IQQ", 3, 0, len(kvs)) + b"".join(kvs)


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {
        "text-plain": b"\x00hello world, 12345 \xe4\xbd\xa0\xe5\xa5\xbd \xf0\x9f\x8c\x8d\n",
        "text-special": b"\x01<|im_start|>user\nhi<think>e\xcc\x81<|im_end|>\n",
        "text-invalid": b"\x00a\xff\xe4\xbd \xed\xa0\x80\xf0\x9f\x99",
        "text-llama3": b"\x02 123456 hello 'll  \t\n\n",
        "gguf-qwen2": gguf("qwen2", "{{- '<|im_start|>system\\nYou are helpful.<|im_end|>\\n' }}"
                                    "<|im_start|>{{ role }}"),
        "gguf-llama3": gguf("llama-bpe", "{%- if '</think>' in reasoning_content %}<|im_end|>"
                                         "<|im_start|>system\n'"),
    }
    for name, data in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    main()
