#!/usr/bin/env python3
"""tokenizer-crosscheck.py — compares `minfer tokenize` with an independent
re-statement of Hugging Face's Qwen2 tokenizer algorithm (NFC, the
pre-tokenizer regex, byte-level BPE by merge rank) on any file: a way to
test megabytes of text when HF itself is not installed.

usage: scripts/tokenizer-crosscheck.py MINFER MODEL.gguf TOKENIZER.json FILE...
  MINFER          the minfer binary (build/bin/minfer)
  MODEL.gguf      a GGUF with the same tokenizer (fixtures/models/fixture-A-f16.gguf)
  TOKENIZER.json  its Hugging Face tokenizer.json (fixtures/tokenizer/tokenizer.json)
Needs python3-regex (Debian) for \\p{L}/\\p{N}. Invalid UTF-8 is replaced
with U+FFFD on both sides. Differences on code points that Python's Unicode
tables and PCRE2's assign differently (new in Unicode 15+) are expected.
Exit status 1 on the first file that differs, with the ids around it.
"""
import json
import subprocess
import sys
import unicodedata

import regex

PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
       r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


class Ref:
    def __init__(self, path):
        tj = json.load(open(path, encoding="utf-8"))
        self.vocab = tj["model"]["vocab"]
        self.ranks = {}
        for i, m in enumerate(tj["model"]["merges"]):
            a, b = m.split(" ", 1) if isinstance(m, str) else m
            self.ranks.setdefault((a, b), i)
        # tokens HF always matches in text (added, not special)
        self.user = {t["content"]: t["id"] for t in tj["added_tokens"] if not t["special"]}
        bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
        cs, n = bs[:], 0
        for b in range(256):
            if b not in bs:
                bs.append(b)
                cs.append(256 + n)
                n += 1
        self.b2u = {b: chr(c) for b, c in zip(bs, cs)}
        self.pat = regex.compile(PAT)
        alts = "|".join(regex.escape(k) for k in sorted(self.user, key=len, reverse=True))
        self.split = regex.compile("(" + alts + ")") if alts else None
        self.cache = {}

    def bpe(self, word):
        if word in self.cache:
            return self.cache[word]
        syms = list(word)
        while len(syms) > 1:
            best = min((self.ranks.get((syms[i], syms[i + 1]), 1 << 62), i)
                       for i in range(len(syms) - 1))
            if best[0] == 1 << 62:
                break
            out, i = [], 0
            while i < len(syms):  # all occurrences, left to right
                if i + 1 < len(syms) and self.ranks.get((syms[i], syms[i + 1])) == best[0]:
                    out.append(syms[i] + syms[i + 1])
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            syms = out
        ids = [self.vocab[s] for s in syms]
        self.cache[word] = ids
        return ids

    def encode(self, text):
        ids = []
        segs = self.split.split(text) if self.split else [text]
        for k, seg in enumerate(segs):
            if k % 2:
                ids.append(self.user[seg])
                continue
            for m in self.pat.finditer(unicodedata.normalize("NFC", seg)):
                ids += self.bpe("".join(self.b2u[b] for b in m.group().encode("utf-8")))
        return ids


def main():
    if len(sys.argv) < 5:
        print(__doc__, file=sys.stderr)
        return 2
    minfer, model, tj = sys.argv[1:4]
    ref = Ref(tj)
    for path in sys.argv[4:]:
        want = ref.encode(open(path, "rb").read().decode("utf-8", "replace"))
        got = json.loads(subprocess.run([minfer, "tokenize", "-m", model, "-f", path],
                                        check=True, capture_output=True).stdout)
        if got == want:
            print(f"{path}: {len(got)} ids, identical")
            continue
        i = next((i for i, (x, y) in enumerate(zip(got, want)) if x != y), min(len(got), len(want)))
        print(f"{path}: differs at id {i} (minfer {len(got)} ids, reference {len(want)})\n"
              f"  minfer    {got[max(0, i - 4):i + 6]}\n  reference {want[max(0, i - 4):i + 6]}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
