"""Trains the >= 100k-token byte-level BPE tokenizer the structured-outputs benchmark
(`sluice grammar-bench`, issue 14) measures mask time with: Llama-3-style pre-tokenisation
(its split regex + ByteLevel without a prefix space), a ByteLevel decoder, 128,000 tokens plus
<|begin_of_text|>/<|end_of_text|>. Deterministic: the training text is the JSON Schema corpus
itself (schemas and instances, serialised compactly, in file order) followed by every .py file
of this Python's standard library in sorted order (the JSON-heavy and code-heavy mix of the
text a structured-output model writes).

Run where Hugging Face `tokenizers` is installed (the GPU machine):

    python3 bench/structured/train_bench_tokenizer.py \
        --schemas ../shared/bench/jsonschema/schemas.jsonl.xz --out $OUT/bench-tokenizer-128k

and copy $OUT/bench-tokenizer-128k/tokenizer.json back (it is then the --tokenizer DIR of
`sluice grammar-bench`; docs/benchmarks.md).
"""
import argparse
import json
import lzma
import os
import sysconfig

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def texts(schemas_path):
    opener = lzma.open if schemas_path.endswith(".xz") else open
    with opener(schemas_path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            yield json.dumps(d["schema"], separators=(",", ":"), ensure_ascii=False)
            for t in d.get("tests", []):
                yield json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False)
    stdlib = sysconfig.get_paths()["stdlib"]
    files = []
    for root, dirs, names in os.walk(stdlib):
        dirs.sort()
        if "site-packages" in root or "test" in os.path.relpath(root, stdlib).split(os.sep)[:1]:
            continue
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".py")]
    for p in sorted(files):
        with open(p, encoding="utf-8", errors="replace") as f:
            yield f.read()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--schemas", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--vocab-size", type=int, default=128000)
    a = ap.parse_args()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=a.vocab_size, min_frequency=1, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  special_tokens=["<|begin_of_text|>", "<|end_of_text|>"])
    tok.train_from_iterator(texts(a.schemas), trainer=trainer)
    os.makedirs(a.out, exist_ok=True)
    tok.save(os.path.join(a.out, "tokenizer.json"))
    print(f"{tok.get_vocab_size()} tokens -> {a.out}/tokenizer.json")


if __name__ == "__main__":
    main()
