"""A ~120k-token byte-level BPE tokenizer.json for `sluice grammar-bench` made without Hugging
Face `tokenizers` (the dev VM has none; train_bench_tokenizer.py trains the real one on the GPU
machine). The training text is the same as train_bench_tokenizer.py's (the JSON Schema corpus,
schemas and instances serialised compactly, then this Python's standard library .py files),
split with an approximation of the Llama-3 pre-tokeniser regex (Python `re`: letters are
[^\\W\\d_], digits \\d). The vocabulary is the 256 bytes plus the most frequent pieces (whole
pre-tokens and their prefixes, so it is prefix-closed) up to --vocab-size; each token of
two or more bytes gets the merge (token minus its last byte, last byte), ranked by length then
frequency, so the loader's BPE can produce every token. Not a trained BPE: the mask benchmark
needs a realistic set of byte strings (JSON punctuation runs, words with and without a leading
space, digits, code), not a good segmentation. Deterministic.

    /usr/bin/python3 bench/structured/make_bench_vocab.py \
        --schemas ../shared/bench/jsonschema/schemas.jsonl.xz --out /tmp/bench-vocab-120k
"""
import argparse
import collections
import json
import os
import re
import sys

SPLIT = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\w]?[^\W\d_]+|\d{1,3}| ?[^\s\w]+[\r\n]*"
                   r"|\s*[\r\n]+|\s+(?!\S)|\s+|_+")

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_corpus import LLAMA3_SPLIT, texts  # noqa: E402


def byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schemas", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=119692)
    ap.add_argument("--max-len", type=int, default=32, help="longest token, bytes")
    a = ap.parse_args()
    words = collections.Counter()
    for t in texts(a.schemas):
        words.update(SPLIT.findall(t))
    # Every prefix of a piece counts the piece's frequency (BPE builds a word from its prefixes).
    pieces = collections.Counter()
    for w, c in words.items():
        b = w.encode("utf-8")[: a.max_len]
        for i in range(2, len(b) + 1):
            pieces[b[:i]] += c
    want = a.vocab_size - 256 - 2
    # Most frequent first; ties by bytes. Prefix-closed: a piece's prefixes are at least as
    # frequent, so they come first (or tie, and the shorter sorts first with the key below).
    ranked = sorted(pieces.items(), key=lambda kv: (-kv[1], len(kv[0]), kv[0]))[:want]
    vocab_bytes = [bytes([b]) for b in range(256)] + [p for p, _ in ranked]
    have = set(vocab_bytes)
    for p in vocab_bytes:
        assert p[:-1] in have or len(p) == 1, p
    b2u = byte_to_unicode()
    enc = lambda bs: "".join(b2u[x] for x in bs)
    vocab = {enc(p): i for i, p in enumerate(vocab_bytes)}
    freq = dict(ranked)
    order = sorted(vocab_bytes[256:], key=lambda p: (len(p), -freq[p], p))
    merges = [enc(p[:-1]) + " " + enc(p[-1:]) for p in order]
    n = len(vocab)
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    added = []
    for s in specials:
        vocab[s] = n
        added.append({"id": n, "content": s, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
        n += 1
    tj = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_SPLIT}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    lens = sorted(len(p) for p in vocab_bytes)
    print(f"{n} tokens ({len(pieces)} candidate pieces), median length {lens[len(lens) // 2]} "
          f"bytes, max {lens[-1]} -> {a.out}/tokenizer.json")


if __name__ == "__main__":
    main()
