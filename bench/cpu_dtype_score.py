#!/usr/bin/env python3
"""sluice's CPU compute dtypes side by side on the same cross-encoder pairs: `sluice score`
with --dtype float32, bfloat16 and int8 on the same model directory, pairs/s (median of
--reps runs, model loading excluded: sluice's own "done:" line) and each dtype's sigmoid
scores against float32's (max and mean |diff|).

Models: forward_bench's seeded random-weight BertForSequenceClassification directories
(num_labels=1, fp32 checkpoint; `forward_bench --write-only`), MiniLM-L6 and BERT-base
shapes. Pairs: bench/peers/bert_pairs.py (the rerank workload's lengths, ~141 tokens).

  taskset -c 0,1 python3 bench/cpu_dtype_score.py --sluice build/release/sluice \\
      --forward-bench build/release/forward_bench --workload ../shared/bench/rerank_10k.jsonl \\
      --out /tmp/dtype-bench --pairs minilm-l6=512,bert-base=128 --reps 3
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from bert_pairs import load_pairs, write_jsonl  # noqa: E402


def run_score(args, mdir, inp, outp, dtype):
    r = subprocess.run([args.sluice, "score", "--model", mdir, "--input", inp, "--output", outp,
                        "--threads", str(args.threads), "--dtype", dtype],
                       capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"sluice score --dtype {dtype} failed:\n{r.stderr}")
    m = re.search(r"done: (\d+) sequences, (\d+) tokens in ([\d.]+) s", r.stderr)
    kernel = re.search(r"linear layers: (.*)", r.stderr)
    return int(m.group(1)) / float(m.group(3)), kernel.group(1) if kernel else ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--forward-bench", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", default="minilm-l6=512,bert-base=128")
    ap.add_argument("--dtypes", default="float32,bfloat16,int8")
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    counts = dict(kv.split("=") for kv in args.pairs.split(","))
    dtypes = args.dtypes.split(",")
    if dtypes[0] != "float32":
        dtypes.insert(0, "float32")  # the reference of the score differences
    w = subprocess.run([args.forward_bench, "--write-only", "--models", ",".join(counts),
                        "--dir", os.path.join(args.out, "models")],
                       capture_output=True, text=True, check=True)
    dirs = dict(line.split(" ", 1) for line in w.stdout.splitlines())
    rows = []
    for name, n in counts.items():
        pairs = load_pairs(args.workload, int(n))
        tokens = sum(len(p[0]) for p in pairs)
        inp = os.path.join(args.out, name + ".jsonl")
        write_jsonl(pairs, inp)
        ref = None
        for dt in dtypes:
            outp = os.path.join(args.out, f"{name}.{dt}.out.jsonl")
            runs = [run_score(args, dirs[name], inp, outp, dt) for _ in range(args.reps)]
            rates = [r[0] for r in runs]
            scores = [json.loads(line)["score"] for line in open(outp)]
            if ref is None:
                ref = scores
            diffs = [abs(a - b) for a, b in zip(scores, ref)]
            row = {"model": name, "dtype": dt, "pairs": len(pairs), "tokens": tokens,
                   "pairs_per_s": rates, "median": statistics.median(rates),
                   "max_abs_score_diff": max(diffs), "mean_abs_score_diff": statistics.mean(diffs),
                   "score_stdev": statistics.pstdev(scores), "linear_layers": runs[0][1]}
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| model | dtype | pairs (tokens) | pairs/s (median; min-max) | vs float32 | "
          "max / mean |score diff| vs float32 |")
    print("|---|---|---|---|---|---|")
    base = {r["model"]: r["median"] for r in rows if r["dtype"] == "float32"}
    for r in rows:
        print(f"| {r['model']} | {r['dtype']} | {r['pairs']} ({r['tokens']:,}) | "
              f"{r['median']:.1f} ({min(r['pairs_per_s']):.1f}-{max(r['pairs_per_s']):.1f}) | "
              f"{r['median'] / base[r['model']]:.2f}x | {r['max_abs_score_diff']:.1e} / "
              f"{r['mean_abs_score_diff']:.1e} |")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
