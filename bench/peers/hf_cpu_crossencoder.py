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
  - --peers adds the other columns of issue 19's table: HF bf16 autocast (`hf-bf16`),
    ONNX Runtime fp32 (`ort-fp32`: torch.onnx.export of the same model) and ONNX Runtime
    int8 dynamic quantisation (`ort-int8`: onnxruntime.quantization.quantize_dynamic, QInt8
    weights), each with the same dynamic padding and batch sweep as HF, intra-op threads =
    --threads; --sluice-dtypes runs `sluice score --dtype` for each. Every column's max |score
    difference| against HF fp32 is reported.

  taskset -c 0,1 python3 bench/peers/hf_cpu_crossencoder.py --sluice build/release/sluice \
      --workload .carry/rerank_10k.jsonl --out /tmp/cpu-bench \
      [--peers hf-bf16,ort-fp32,ort-int8 --sluice-dtypes float32,bfloat16,int8]
      [--single-docs 20]
"""
import argparse
import json
import math
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


def batches(pairs, batch):
    """Length-sorted dynamic padding: (indices, ids, types, mask) as int64 tensors."""
    order = sorted(range(len(pairs)), key=lambda i: len(pairs[i][0]))
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
        yield idx, ids, types, mask


def hf_bf16_run(model, pairs, batch):
    with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
        return hf_run_inner(model, pairs, batch)


@torch.inference_mode()
def hf_run(model, pairs, batch):
    return hf_run_inner(model, pairs, batch)


def hf_run_inner(model, pairs, batch):
    scores = [0.0] * len(pairs)
    for idx, ids, types, mask in batches(pairs, batch):
        logits = model(input_ids=ids, token_type_ids=types, attention_mask=mask).logits[:, 0]
        logits = logits.float()
        for r, i in enumerate(idx):
            scores[i] = float(torch.sigmoid(logits[r]))
    return scores


def ort_session(model, mdir, int8, threads):
    import onnxruntime as ort
    path = os.path.join(mdir, "model.onnx")
    if not os.path.exists(path):
        ids = torch.ones(2, 16, dtype=torch.long)
        kw = dict(input_names=["input_ids", "attention_mask", "token_type_ids"],
                  output_names=["logits"], opset_version=17,
                  dynamic_axes={n: {0: "b", 1: "t"} for n in
                                ("input_ids", "attention_mask", "token_type_ids")})
        try:
            torch.onnx.export(model, (ids, ids, torch.zeros_like(ids)), path, dynamo=False, **kw)
        except TypeError:  # older torch: no dynamo argument
            torch.onnx.export(model, (ids, ids, torch.zeros_like(ids)), path, **kw)
    if int8:
        from onnxruntime.quantization import QuantType, quantize_dynamic
        qpath = os.path.join(mdir, "model.int8.onnx")
        if not os.path.exists(qpath):
            quantize_dynamic(path, qpath, weight_type=QuantType.QInt8)
        path = qpath
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])


def ort_run(sess, pairs, batch):
    scores = [0.0] * len(pairs)
    for idx, ids, types, mask in batches(pairs, batch):
        out = sess.run(None, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                              "token_type_ids": types.numpy()})[0][:, 0]
        for r, i in enumerate(idx):
            scores[i] = 1.0 / (1.0 + math.exp(-float(out[r])))
    return scores


def best_batch(run, pairs, full_warmup):
    """Sweeps batch sizes on a slice and returns the best; full_warmup then runs all pairs once
    untimed at that batch (with dynamic padding every new length builds new kernels in
    PyTorch/oneDNN: without it the first timed repetition pays for them)."""
    warm = pairs[:min(len(pairs), 64)]
    best_bs, best_rate = None, 0
    for bs in (8, 32, 128):
        run(warm[:16], bs)
        t0 = time.perf_counter()
        run(warm, bs)
        rate = len(warm) / (time.perf_counter() - t0)
        if rate > best_rate:
            best_bs, best_rate = bs, rate
    if full_warmup:
        run(pairs, best_bs)
    return best_bs


def timed_once(run, pairs, bs):
    """(pairs/s, scores) of one timed pass."""
    t0 = time.perf_counter()
    scores = run(pairs, bs)
    return len(pairs) / (time.perf_counter() - t0), scores


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pairs", default="bert-base=256,minilm-l6=1024")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--peers", default="", help="comma list of: hf-bf16,ort-fp32,ort-int8")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of: " + ",".join(SHAPES))
    ap.add_argument("--sluice-dtypes", default="float32",
                    help="comma list of sluice score --dtype values; DTYPE:VAR=VALUE runs that "
                         "dtype with an environment variable set (e.g. "
                         "bfloat16:SLUICE_CPU_ACTIVATIONS=f32; several joined by '+': "
                         "int8:A=1+B=2)")
    ap.add_argument("--fp32-once", action="store_true",
                    help="run HF fp32 (the accuracy reference) once before the rounds instead "
                         "of in every round: its batch sweep and one timed pass (the slowest "
                         "column; no per-round fp32 ratios then)")
    ap.add_argument("--single-docs", type=int, default=0,
                    help="also time (MiniLM-L6) one request of this many pairs (query 16 + document 120 "
                         "token ids, `sluice bench`'s shape) as one HF batch, fp32 and bf16 "
                         "autocast: p50/p95 over --single-reps forwards (tokenisation excluded)")
    ap.add_argument("--single-reps", type=int, default=30)
    ap.add_argument("--no-full-warmup", action="store_true",
                    help="skip the untimed pass over all pairs of each HF/ORT column before the "
                         "timed rounds (runs before 2026-12-07 had none)")
    args = ap.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    dtypes = [d for d in args.sluice_dtypes.split(",") if d]
    torch.set_num_threads(args.threads)
    os.makedirs(args.out, exist_ok=True)
    counts = dict(kv.split("=") for kv in args.pairs.split(","))
    rows = []
    for name, shape in SHAPES.items():
        if name not in args.shapes.split(","):
            continue
        n = int(counts[name])
        torch.manual_seed(0)
        cfg = BertConfig(vocab_size=VOCAB, max_position_embeddings=512, type_vocab_size=2,
                         num_labels=1, **shape)
        model = BertForSequenceClassification(cfg).eval()
        mdir = os.path.join(args.out, name)
        model.save_pretrained(mdir)
        pairs = load_pairs(args.workload, n)
        tokens = sum(len(p[0]) for p in pairs)
        # Every column is prepared first (batch sweeps, warm-ups), then timed in rounds: each
        # round times every column once, in an order rotated per round, so that a host's drift
        # between calls (up to 2x on the GPU machine's CPU) lands on all columns alike.
        row = {"model": name, "pairs": len(pairs), "tokens": tokens}
        hf_run_fn = lambda p, b: hf_run(model, p, b)  # noqa: E731
        hf_bs = best_batch(hf_run_fn, pairs, not args.no_full_warmup)
        row["hf_batch"] = hf_bs
        timers = [("hf-fp32", lambda: timed_once(hf_run_fn, pairs, hf_bs), hf_bs)]
        once = {}
        if args.fp32_once:
            once["hf-fp32"] = timers.pop()[1]()
        for peer in peers:
            if peer == "hf-bf16":
                run = lambda p, b: hf_bf16_run(model, p, b)  # noqa: E731
            elif peer in ("ort-fp32", "ort-int8"):
                sess = ort_session(model, mdir, peer == "ort-int8", args.threads)
                run = lambda p, b, sess=sess: ort_run(sess, p, b)  # noqa: E731
            else:
                raise SystemExit("unknown peer " + peer)
            bs = best_batch(run, pairs, not args.no_full_warmup)
            timers.append((peer, lambda run=run, bs=bs: timed_once(run, pairs, bs), bs))
        inp = os.path.join(args.out, name + ".jsonl")
        write_jsonl(pairs, inp)
        if args.single_docs > 0 and name == "minilm-l6":
            row["single"] = single_request(model, args.single_docs, args.single_reps)
        for variant in dtypes:
            dtype, _, env_kv = variant.partition(":")
            env = dict(os.environ)
            for kv in filter(None, env_kv.split("+")):
                k, _, v = kv.partition("=")
                env[k] = v
            outp = os.path.join(args.out, f"{name}.{variant.replace(':', '.')}.out.jsonl")

            def sluice_once(dtype=dtype, env=env, outp=outp, variant=variant):
                r = subprocess.run([args.sluice, "score", "--model", mdir, "--input", inp,
                                    "--output", outp, "--threads", str(args.threads),
                                    "--dtype", dtype], capture_output=True, text=True, check=True,
                                   env=env)
                m = re.search(r"done: (\d+) sequences, (\d+) tokens in ([\d.]+) s", r.stderr)
                k = re.search(r"linear layers: (.*)", r.stderr)
                if k:
                    row[f"sluice-{variant}_kernel"] = k.group(1)
                return (int(m.group(1)) / float(m.group(3)),
                        [json.loads(line)["score"] for line in open(outp)])
            timers.append((f"sluice-{variant}", sluice_once, None))
        rates = {c: [] for c, _, _ in timers}
        scores = {}
        for c, (rate, sc) in once.items():
            rates[c] = [rate]
            scores[c] = sc
        row["rounds"] = []  # per round {column: pairs/s}: paired ratios within a round
        for rep in range(args.reps):
            k = rep % len(timers)
            for col, fn, _ in timers[k:] + timers[:k]:
                rate, sc = fn()
                rates[col].append(rate)
                scores[col] = sc
            row["rounds"].append({c: rates[c][-1] for c, _, _ in timers})
        hf_scores = scores["hf-fp32"]
        row["hf_pairs_per_s"] = rates["hf-fp32"]
        row["hf_median"] = med(rates["hf-fp32"])
        cols = [(c, rates[c], bs, scores[c]) for c, _, bs in timers if c != "hf-fp32"]
        for col, rates, bs, scores in cols:
            d = [abs(a - b) for a, b in zip(hf_scores, scores)]
            row[col] = {"pairs_per_s": rates, "median": med(rates), "batch": bs,
                        "vs_hf_fp32": med(rates) / row["hf_median"],
                        "max_abs_score_diff": max(d), "mean_abs_score_diff": sum(d) / len(d)}
        # The original columns' names (sluice fp32).
        if "sluice-float32" in row:
            row["sluice_pairs_per_s"] = row["sluice-float32"]["pairs_per_s"]
            row["sluice_median"] = row["sluice-float32"]["median"]
            row["speedup"] = row["sluice-float32"]["vs_hf_fp32"]
            row["max_abs_score_diff"] = row["sluice-float32"]["max_abs_score_diff"]
        row["columns"] = [c[0] for c in cols]
        rows.append(row)
        print(json.dumps(row), flush=True)
    print("\n| model | pairs (tokens) | HF fp32 (batch) | " +
          " | ".join(rows[0]["columns"]) + " |")
    print("|---|---|---|" + "---|" * len(rows[0]["columns"]))
    for r in rows:
        cells = [f"{r[c]['median']:.1f} ({min(r[c]['pairs_per_s']):.1f}-"
                 f"{max(r[c]['pairs_per_s']):.1f}; {r[c]['vs_hf_fp32']:.2f}x; max diff "
                 f"{r[c]['max_abs_score_diff']:.1e})" for c in r["columns"]]
        print(f"| {r['model']} | {r['pairs']} ({r['tokens']}) | {r['hf_median']:.1f} "
              f"(bs {r['hf_batch']}) | " + " | ".join(cells) + " |")
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(rows, f, indent=1)


def single_request(model, docs, reps):
    """One request of `docs` pairs ([CLS] 16 ids [SEP] 120 ids [SEP]) as one batch: p50/p95 ms
    of the forward (fp32, bf16 autocast), after 3 warm-ups."""
    g = torch.Generator().manual_seed(7)
    ids = torch.randint(5, 200, (docs, 139), generator=g)
    ids[:, 0], ids[:, 17], ids[:, 138] = 101, 102, 102
    types = torch.zeros_like(ids)
    types[:, 18:] = 1
    mask = torch.ones_like(ids)
    out = {}
    for name, ctx in (("hf_fp32", lambda: torch.autocast("cpu", enabled=False)),
                      ("hf_bf16", lambda: torch.autocast("cpu", dtype=torch.bfloat16))):
        ms = []
        with torch.inference_mode(), ctx():
            for i in range(reps + 3):
                t0 = time.perf_counter()
                model(input_ids=ids, token_type_ids=types, attention_mask=mask)
                if i >= 3:
                    ms.append((time.perf_counter() - t0) * 1e3)
        ms.sort()
        out[name] = {"p50_ms": ms[len(ms) // 2], "p95_ms": ms[min(len(ms) - 1, int(len(ms) * 0.95))]}
    print(json.dumps({"single_request_docs": docs, **out}), flush=True)
    return out


def med(xs):
    """The median (of an even count: the mean of the middle two; before 2026-12-06 the upper
    one, so the tables of runs with --reps 2 show the faster repetition as the median)."""
    s = sorted(xs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


if __name__ == "__main__":
    main()
