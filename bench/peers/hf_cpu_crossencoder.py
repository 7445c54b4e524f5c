#!/usr/bin/env python3
"""Side by side on CPU: Hugging Face transformers vs sluice on the same cross-encoder
pairs, both pinned to the same cores (run this script under `taskset -c 0,1`).

For each shape (BERT-base, MiniLM-L6; BertForSequenceClassification, num_labels=1,
fp32, seeded random weights saved as a normal model directory):
  - pairs: the query/document lengths of ../shared/bench/rerank_10k.jsonl (a prefix of
    it), ids folded into BERT's vocabulary, as [CLS] q [SEP] d [SEP] with type ids;
  - HF: length-sorted dynamic padding; batch sizes swept on a warm-up slice, the best is
    timed on all pairs (tokenisation excluded, torch.inference_mode, sdpa attention);
  - sluice: `sluice score` on the same directory and pairs (its own throughput line,
    model loading excluded), then scores are compared with HF's.

  taskset -c 0,1 python3 bench/peers/hf_cpu_crossencoder.py --sluice build/release/sluice \
      --workload .carry/rerank_10k.jsonl --out /tmp/cpu-bench
"""
import argparse
import json
import os
import re
import subprocess
import time

import torch
from transformers import BertConfig, BertForSequenceClassification

from bert_pairs import VOCAB, load_pairs, write_jsonl

SHAPES = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
    "minilm-l6": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                      intermediate_size=1536),
}


@torch.inference_mode()
def hf_run(model, pairs, batch):
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
    scores = [0.0] * len(pairs)
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        L = max(len(pairs[i][0]) for i in idx)
        ids = torch.zeros(len(idx), L, dtype=torch.long)
        types = torch.zeros(len(idx), L, dtype=torch.long)
        mask = torch.zeros(len(idx), L, dtype=torch.long)
        for r, i in enumerate(idx):
            n = len(pairs[i][0])
            ids[r, :n] = torch.tensor(pairs[i][0])
            types[r, :n] = torch.tensor(pairs[i][1])
            mask[r, :n] = 1
        logits = model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits[:, 0]
        for r, i in enumerate(idx):
            scores[i] = float(torch.sigmoid(logits[r]))
    return scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", default="bert-base=256,minilm-l6=1024")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    counts = dict(kv.split("=") for kv in args.pairs.split(","))
    rows = []
    for name, shape in SHAPES.items():
        n = int(counts[name])
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=VOCAB, max_position_embeddings=512, type_vocab_size=2,
                         num_labels=1, **shape)
        model = BertForSequenceClassification(cfg).eval()
        mdir = os.path.join(args.out, name)
        model.save_pretrained(mdir)
        pairs = load_pairs(args.workload, n)
        tokens = sum(len(p[0]) for p in pairs)
        # Sweep batch sizes on a slice, then time the best on all pairs.
        warm = pairs[:min(len(pairs), 64)]
        best_bs, best_rate = None, 0
        for bs in (8, 32, 128):
            hf_run(model, warm[:16], bs)
            t0 = time.perf_counter()
            hf_run(model, warm, bs)
            rate = len(warm) / (time.perf_counter() - t0)
            if rate > best_rate:
                best_bs, best_rate = bs, rate
        hf_rates = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            hf_scores = hf_run(model, pairs, best_bs)
            hf_rates.append(len(pairs) / (time.perf_counter() - t0))
        inp = os.path.join(args.out, name + ".jsonl")
        write_jsonl(pairs, inp)
        sl_rates = []
        for _ in range(args.reps):
            outp = os.path.join(args.out, name + ".out.jsonl")
            r = subprocess.run([args.sluice, "score", "--model", mdir, "--input", inp,
                                "--output", outp, "--threads", str(args.threads)],
                               capture_output=True, text=True, check=True)
            m = re.search(r"done: (\d+) sequences, (\d+) tokens in ([\d.]+) s", r.stderr)
            sl_rates.append(int(m.group(1)) / float(m.group(3)))
        sl_scores = [json.loads(l)["score"] for l in open(outp)]
        diff = max(abs(a - b) for a, b in zip(hf_scores, sl_scores))
        hf_med = sorted(hf_rates)[len(hf_rates) // 2]
        sl_med = sorted(sl_rates)[len(sl_rates) // 2]
        row = {"model": name, "pairs": len(pairs), "tokens": tokens, "hf_batch": best_bs,
               "hf_pairs_per_s": hf_rates, "sluice_pairs_per_s": sl_rates,
               "hf_median": hf_med, "sluice_median": sl_med, "speedup": sl_med / hf_med,
               "max_abs_score_diff": diff}
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| model | pairs (tokens) | HF best (batch) pairs/s | sluice pairs/s | speedup | "
          "max score diff |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['pairs']} ({r['tokens']}) | {r['hf_median']:.1f} "
              f"(bs {r['hf_batch']}; {min(r['hf_pairs_per_s']):.1f}-{max(r['hf_pairs_per_s']):.1f})"
              f" | {r['sluice_median']:.1f} ({min(r['sluice_pairs_per_s']):.1f}-"
              f"{max(r['sluice_pairs_per_s']):.1f}) | {r['speedup']:.2f}x | "
              f"{r['max_abs_score_diff']:.2e} |")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
