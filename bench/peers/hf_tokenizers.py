#!/usr/bin/env python3
"""Single-thread tokenisation speed, side by side: HF tokenizers (Rust, Python binding)
vs sluice's tokenizer (bench/tokenizer_bench.cc), same corpus, same tokenizer.json, same
core. Run under `taskset -c N` so both use one core.

HF is measured two ways: `encode(text)` per text (one Python call per text) and
`encode_batch(texts)` with RAYON_NUM_THREADS=1 (one call per pass; the Rust loop without
per-text Python overhead). The ratio is taken against HF's faster way.

  taskset -c 2 python3 bench/peers/hf_tokenizers.py --bench build/release/tokenizer_bench \
      --models tests/fixtures/tokenizers/bert_uncased,tests/fixtures/tokenizers/qwen2
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from tokenizers import Tokenizer  # noqa: E402


def read_corpus(path):
    opener = gzip.open if path.endswith(".gz") else open
    texts = []
    with opener(path, "rt", encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            v = json.loads(line)
            texts.append(v if isinstance(v, str) else v["text"])
    return texts


def timed(fn, seconds):
    tokens, passes = 0, 0
    t0 = time.perf_counter()
    while True:
        tokens += fn()
        passes += 1
        el = time.perf_counter() - t0
        if el >= seconds:
            return tokens / el, tokens // passes


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--corpus", default="tests/fixtures/tokenizers/corpus.jsonl.gz")
    ap.add_argument("--seconds", type=float, default=3.0)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    texts = read_corpus(args.corpus)
    rows = []
    for model in args.models.split(","):
        tok = Tokenizer.from_file(os.path.join(model, "tokenizer.json"))
        single = lambda: sum(len(tok.encode(t).ids) for t in texts)  # noqa: E731
        batch = lambda: sum(len(e.ids) for e in tok.encode_batch(texts))  # noqa: E731
        hf_single = [timed(single, args.seconds) for _ in range(args.reps)]
        hf_batch = [timed(batch, args.seconds) for _ in range(args.reps)]
        sl = []
        for _ in range(args.reps):
            out = subprocess.run([args.bench, "--model", model, "--corpus", args.corpus,
                                  "--seconds", str(args.seconds)],
                                 capture_output=True, text=True, check=True).stdout
            rate = float(re.search(r"tokens/s=([\d.]+)", out).group(1))
            passes = int(re.search(r"passes=(\d+)", out).group(1))
            total = int(re.search(r"tokens=(\d+)", out).group(1))
            sl.append((rate, total // passes))
        med = lambda xs: sorted(x[0] for x in xs)[len(xs) // 2]  # noqa: E731
        best_hf = max(med(hf_single), med(hf_batch))
        row = {"model": os.path.basename(model), "texts": len(texts),
               "tokens_per_pass": {"hf": hf_batch[0][1], "sluice": sl[0][1]},
               "hf_encode": [x[0] for x in hf_single], "hf_encode_batch_1thread": [x[0] for x in hf_batch],
               "sluice": [x[0] for x in sl], "speedup_vs_best_hf": med(sl) / best_hf}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| tokenizer | tokens/pass (HF / sluice) | HF encode tok/s | HF encode_batch (1 thread) "
          "tok/s | sluice tok/s | sluice / best HF |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        f = lambda xs: f"{sorted(xs)[len(xs) // 2] / 1e6:.2f}M ({min(xs) / 1e6:.2f}-{max(xs) / 1e6:.2f})"  # noqa: E731
        print(f"| {r['model']} | {r['tokens_per_pass']['hf']} / {r['tokens_per_pass']['sluice']} | "
              f"{f(r['hf_encode'])} | {f(r['hf_encode_batch_1thread'])} | {f(r['sluice'])} | "
              f"{r['speedup_vs_best_hf']:.2f}x |")


if __name__ == "__main__":
    main()
