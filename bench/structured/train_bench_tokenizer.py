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
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from bench_corpus import LLAMA3_SPLIT, texts  # noqa: E402


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
