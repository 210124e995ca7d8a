#!/usr/bin/env python3
"""make-seeds.py — writes the GGUF fuzz seed corpus (tests/fuzz/corpus-gguf).

Small valid files that between them use every metadata type, arrays of
each, string arrays, v2 and v3, a non-default alignment and tensors of
every type the reader accepts, so the fuzzer starts from deep paths.
Run from anywhere: python3 tests/fuzz/make-seeds.py
"""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus-gguf")

# (block size, bytes per block) of the tensor types the reader accepts
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
         8: (32, 34), 9: (32, 36), 12: (256, 144), 13: (256, 176), 14: (256, 210),
         15: (256, 292), 24: (1, 1), 25: (1, 2), 26: (1, 4), 27: (1, 8), 28: (1, 8),
         30: (1, 2)}
# named GGUF types the reader refuses unless asked to describe them
OTHER = {10: (256, 84), 16: (256, 66), 20: (32, 18), 34: (256, 54), 39: (32, 17)}
SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?",
          10: "<Q", 11: "<q", 12: "<d"}


def gstr(s):
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def value(t, v):
    if t == 8:
        return gstr(v)
    if t == 9:
        et, items = v
        out = struct.pack("<IQ", et, len(items))
        return out + b"".join(value(et, x) for x in items)
    return struct.pack(SCALAR[t], v)


def gguf(kvs, tensors, version=3, align=32):
    """kvs: [(key, type, value)]; tensors: [(name, type, ne list)]."""
    head = b"GGUF" + struct.pack("<IQQ", version, len(tensors), len(kvs))
    for k, t, v in kvs:
        head += gstr(k) + struct.pack("<I", t) + value(t, v)
    data = b""
    for i, (name, t, ne) in enumerate(tensors):
        blk, size = TYPES.get(t) or OTHER[t]
        n = 1
        for d in ne:
            n *= d
        nbytes = n // blk * size
        head += gstr(name) + struct.pack("<I", len(ne)) + b"".join(struct.pack("<Q", d) for d in ne)
        head += struct.pack("<IQ", t, len(data))
        data += bytes((i * 31 + j) & 0xFF for j in range(nbytes))
        data += b"\0" * (-len(data) % align)
    head += b"\0" * (-len(head) % align)
    return head + data


def main():
    os.makedirs(OUT, exist_ok=True)
    seeds = {}
    seeds["empty-v3.gguf"] = gguf([], [])
    every = [("s.%d" % t, t, v) for t, v in
             [(0, 200), (1, -3), (2, 60000), (3, -300), (4, 4000000000), (5, -7), (6, 1.5),
              (7, True), (10, 2**63), (11, -(2**40)), (12, 3.25)]]
    every += [("s.str", 8, "hello"), ("s.empty", 8, "")]
    every += [("a.%d" % t, 9, (t, [v, v])) for t, v in
              [(0, 1), (1, -1), (2, 2), (3, -2), (4, 3), (5, -3), (6, 0.5), (7, False),
               (10, 4), (11, -4), (12, 0.25)]]
    every += [("a.str", 9, (8, ["x", "", "yz"])), ("a.none", 9, (5, []))]
    seeds["every-value-type.gguf"] = gguf(every, [("t.f32", 0, [4, 2]), ("t.q8_0", 8, [32])])
    seeds["every-value-type-v2.gguf"] = gguf(every, [("t.f32", 0, [4, 2])], version=2)
    seeds["every-tensor-type.gguf"] = gguf(
        [("general.alignment", 4, 64)],
        [("t.%d" % t, t, [TYPES[t][0] * (1 if TYPES[t][0] > 1 else 3), 2]) for t in TYPES],
        align=64)
    seeds["unsupported-types.gguf"] = gguf(
        [("general.architecture", 8, "llama")],
        [("u.%d" % t, t, [OTHER[t][0], 1]) for t in OTHER])
    toks = ["!", "\"", "a", "b", "ab", "Ġ", "Ġa", "<|im_end|>"]
    seeds["qwen2-like.gguf"] = gguf(
        [("general.architecture", 8, "qwen2"), ("qwen2.block_count", 4, 1),
         ("qwen2.rope.freq_base", 6, 10000.0),
         ("tokenizer.ggml.model", 8, "gpt2"),
         ("tokenizer.ggml.tokens", 9, (8, toks)),
         ("tokenizer.ggml.token_type", 9, (5, [1] * len(toks))),
         ("tokenizer.ggml.merges", 9, (8, ["a b", "Ġ a"])),
         ("tokenizer.ggml.eos_token_id", 4, 7),
         ("tokenizer.ggml.add_bos_token", 7, False),
         ("tokenizer.chat_template", 8, "{% for m in messages %}{{ m.content }}{% endfor %}")],
        [("token_embd.weight", 1, [32, 8]), ("blk.0.attn_norm.weight", 0, [32]),
         ("blk.0.attn_q.weight", 12, [256, 2]), ("blk.0.ffn_down.weight", 14, [256, 1]),
         ("output_norm.weight", 0, [32])])
    for name, blob in seeds.items():
        with open(os.path.join(OUT, name), "wb") as f:
            f.write(blob)
        print("%s: %d bytes" % (name, len(blob)))


if __name__ == "__main__":
    main()
