#!/usr/bin/env python3
"""The GPU headline benchmark (issue 5), side by side on one GPU in one run:
Hugging Face transformers vs sluice (offline `sluice score` and served `sluice serve` +
`sluice bench`) on the same pairs and the same model directory.

1. cuBLAS peak: torch bf16/fp16 matmuls (large square and the model's GEMM shapes).
2. Qwen3-0.6B-shaped Qwen3ForSequenceClassification (num_labels=1; hidden 1024, 28 layers,
   16 heads, 8 KV heads, head_dim 128, intermediate 3072, vocab 151,669), seeded random
   weights, bf16, saved as a normal model directory that sluice then loads.
   Workload: rerank_10k.jsonl (prefix + q + d + suffix per pair). HF paths (sdpa,
   torch.inference_mode, tokenisation excluded, right padding): fixed-256 padding at batch
   32/128, dynamic padding (input order) at batch 32/128, length-sorted dynamic padding at
   batch 128/512.
   sluice offline: `sluice score --device cuda` on the workload file (its own throughput
   line: model loading excluded). sluice served: the same sequences as token ids, 20 per
   request to /classify, `sluice bench` at concurrency 16 over loopback; and single-request
   latency (20 documents, concurrency 1).
   Scores: sluice vs HF bf16 and both vs an fp32 evaluation (HF, the same bf16 weights in
   fp32) on the first pairs.
3. BERT-base- and MiniLM-L6-shaped BertForSequenceClassification cross-encoders on the
   same pairs (ids folded into BERT's vocabulary, [CLS] q [SEP] d [SEP] with type ids,
   same lengths), fp16 and fp32: HF dynamic (batch 128) and length-sorted (batch 512)
   padding vs `sluice score --dtype float16|float32 --device cuda`.

  python3 bench/peers/hf_gpu_rerank.py --sluice .carry/bin/sluice \
      --workload .carry/rerank_10k.jsonl --out /tmp/gpu-bench

Prints markdown tables and writes results.json under --out. scripts/bench-gpu wraps it.
"""
import argparse
import copy
import json
import os
import re
import signal
import statistics
import subprocess
import time

from sluice_client import engine_metrics, run_bench, wait_ready

import torch
from transformers import (BertConfig, BertForSequenceClassification, Qwen3Config,
                          Qwen3ForSequenceClassification)

PAD = 151643  # Qwen's <|endoftext|>, the pad token of Qwen3 rerankers
BERT_SHAPES = {
    "bert-base": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                      intermediate_size=3072),
    "minilm-l6": dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
                      intermediate_size=1536),
}
CLS, SEP, VOCAB = 101, 102, 30522


def log(*a):
    print(*a, flush=True)


def load_workload(path, n):
    with open(path) as f:
        header = json.loads(f.readline())
        pairs = []
        for line in f:
            pairs.append(json.loads(line))
            if len(pairs) == n:
                break
    return header, pairs


def cuda_time(fn, reps=5):
    fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def gemm_peak():
    out = {}
    for dt in (torch.bfloat16, torch.float16):
        best = 0
        shapes = [(8192, 8192, 8192), (16384, 4096, 4096), (65536, 1024, 4096),
                  (65536, 1024, 6144), (65536, 3072, 1024)]
        for m, k, n in shapes:
            a = torch.randn(m, k, device="cuda", dtype=dt)
            b = torch.randn(k, n, device="cuda", dtype=dt)
            t = cuda_time(lambda: a @ b)
            tf = 2 * m * n * k / t / 1e12
            out[f"{str(dt).split('.')[-1]} {m}x{k}x{n}"] = tf
            best = max(best, tf)
        out[f"{str(dt).split('.')[-1]} best"] = best
    return out


def batches(seqs, order, batch, fixed, pad):
    for s in range(0, len(order), batch):
        idx = order[s:s + batch]
        L = fixed or max(len(seqs[i][0]) for i in idx)
        ids = torch.full((len(idx), L), pad, dtype=torch.long)
        types = torch.zeros(len(idx), L, dtype=torch.long)
        mask = torch.zeros(len(idx), L, dtype=torch.long)
        for r, i in enumerate(idx):
            n = len(seqs[i][0])
            ids[r, :n] = torch.tensor(seqs[i][0])
            if seqs[i][1] is not None:
                types[r, :n] = torch.tensor(seqs[i][1])
            mask[r, :n] = 1
        yield idx, ids.cuda(non_blocking=True), types.cuda(non_blocking=True), mask.cuda(
            non_blocking=True)


@torch.inference_mode()
def hf_run(model, seqs, batch, mode, with_types=False, pad=PAD):
    """mode: fixed256 | dynamic | sorted. Returns (pairs/s, scores in input order)."""
    order = list(range(len(seqs)))
    if mode == "sorted":
        order.sort(key=lambda i: len(seqs[i][0]))
    fixed = 256 if mode == "fixed256" else 0
    scores = [0.0] * len(seqs)
    # Warm-up on one batch of the same shape class (kernels, allocator).
    for idx, ids, types, mask in batches(seqs, order[:batch], batch, fixed, pad):
        kw = dict(token_type_ids=types) if with_types else {}
        model(input_ids=ids, attention_mask=mask, **kw)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    outs = []
    for idx, ids, types, mask in batches(seqs, order, batch, fixed, pad):
        kw = dict(token_type_ids=types) if with_types else {}
        outs.append((idx, model(input_ids=ids, attention_mask=mask, **kw).logits[:, 0]))
    torch.cuda.synchronize()
    el = time.perf_counter() - t0
    for idx, lg in outs:
        for r, v in zip(idx, lg.float().tolist()):
            scores[r] = v
    return len(seqs) / el, scores


def sluice_score(sluice, model_dir, inp, outp, extra, reps):
    rates = []
    for _ in range(reps):
        r = subprocess.run([sluice, "score", "--model", model_dir, "--input", inp, "--output",
                            outp, "--device", "cuda"] + extra, capture_output=True, text=True)
        if r.returncode != 0:
            raise RuntimeError("sluice score failed:\n" + r.stderr[-3000:])
        m = re.search(r"done: (\d+) sequences, (\d+) tokens in ([\d.]+) s", r.stderr)
        rates.append(int(m.group(1)) / float(m.group(3)))
    scores = [json.loads(l)["score"] for l in open(outp)]
    return rates, scores, r.stderr


def score_diff(a, b):
    d = [abs(x - y) for x, y in zip(a, b)]
    return max(d), sum(d) / len(d)


def serve_bench(sluice, model_dir, bodies, extra, port, out):
    log_path = os.path.join(out, "serve.log")
    srv = subprocess.Popen([sluice, "serve", "--model", model_dir, "--device", "cuda", "--port",
                            str(port)] + extra, stdout=open(log_path, "w"),
                           stderr=subprocess.STDOUT)
    try:
        wait_ready(srv, port, log_path)
        res = {}
        for name, conc, nreq in (("c16", 16, len(bodies_lines(bodies))), ("c1", 1, 50)):
            before = engine_metrics(port)
            res[name] = run_bench(sluice, port, bodies, conc, nreq)
            log(f"sluice bench {name}:\n{res[name].pop('text')}")
            # How the engine ran the run: batches, sequences and tokens per batch, and the
            # share of the run's wall time the engine was busy.
            after = engine_metrics(port)
            d = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
            wall = nreq / res[name]["req_per_s"]
            nb = max(d.get("sluice_batches_total", 0.0), 1.0)
            res[name]["engine"] = {
                "batches": d.get("sluice_batches_total", 0.0),
                "seqs_per_batch": d.get("sluice_batch_size_sum", 0.0) / nb,
                "tokens_per_batch": d.get("sluice_batch_tokens_sum", 0.0) / nb,
                "busy_fraction": d.get("sluice_engine_busy_seconds_total", 0.0) / wall}
            log(f"engine during {name}: {res[name]['engine']}")
        return res
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()


def bodies_lines(path):
    with open(path) as f:
        return f.readlines()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--pairs", type=int, default=10000)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--max-batch-tokens", type=int, default=65536)
    ap.add_argument("--max-num-seqs", type=int, default=1024)
    ap.add_argument("--skip", default="", help="comma list of: hf, served, bert, fp32ref")
    ap.add_argument("--serve-args", default="",
                    help="extra `sluice serve` arguments for the served rows (space-separated)")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(args.out, exist_ok=True)
    results = {"device": torch.cuda.get_device_name(0), "torch": torch.__version__}
    import transformers
    results["transformers"] = transformers.__version__
    log(f"device {results['device']}, torch {torch.__version__}, transformers "
        f"{transformers.__version__}")

    results["gemm_tflops"] = gemm_peak()
    log("cuBLAS (torch.matmul) TFLOP/s:", json.dumps(results["gemm_tflops"], indent=1))

    header, pairs = load_workload(args.workload, args.pairs)
    prefix, suffix = header.get("prefix", []), header.get("suffix", [])
    seqs = [(prefix + p["q"] + p["d"] + suffix, None) for p in pairs]
    tokens = sum(len(s[0]) for s in seqs)
    results["workload"] = {"pairs": len(seqs), "tokens": tokens}
    inp = os.path.join(args.out, "workload.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps(header) + "\n")
        for p in pairs:
            f.write(json.dumps({"q": p["q"], "d": p["d"]}) + "\n")

    # ---- Qwen3-0.6B-shaped sequence classifier ----
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=151669, hidden_size=1024, intermediate_size=3072,
                      num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                      head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, num_labels=1,
                      pad_token_id=PAD)
    model = Qwen3ForSequenceClassification(cfg).to(torch.bfloat16).cuda().eval()
    mdir = os.path.join(args.out, "qwen3-0.6b-seqcls")
    model.save_pretrained(mdir)
    hf = {}
    hf_scores = None
    if "hf" not in skip:
        for mode, bs in (("fixed256", 32), ("fixed256", 128), ("dynamic", 32), ("dynamic", 128),
                         ("sorted", 128), ("sorted", 512)):
            rate, sc = hf_run(model, seqs, bs, mode)
            hf[f"{mode} b{bs}"] = rate
            log(f"HF {mode} batch {bs}: {rate:.1f} pairs/s")
            if mode == "sorted" and bs == 512:
                hf_scores = sc
    results["qwen3_hf"] = hf
    limits = ["--max-batch-tokens", str(args.max_batch_tokens), "--max-num-seqs",
              str(args.max_num_seqs)]
    sl_rates, sl_scores, sl_log = sluice_score(
        args.sluice, mdir, inp, os.path.join(args.out, "qwen3.out.jsonl"),
        limits + ["--prefix-reuse", "off"], args.reps)
    log(sl_log[-1500:])
    results["qwen3_sluice_offline"] = sl_rates
    log(f"sluice offline (no prefix reuse): {[round(r, 1) for r in sl_rates]} pairs/s")
    pr_rates, pr_scores, pr_log = sluice_score(
        args.sluice, mdir, inp, os.path.join(args.out, "qwen3.prefix.out.jsonl"),
        limits + ["--prefix-reuse", "on"], args.reps)
    log(pr_log[-600:])
    results["qwen3_sluice_offline_prefix"] = pr_rates
    results["qwen3_prefix_vs_full_score_diff"] = score_diff(pr_scores, sl_scores)
    log(f"sluice offline (prefix reuse): {[round(r, 1) for r in pr_rates]} pairs/s; scores vs "
        f"no reuse: max/mean {results['qwen3_prefix_vs_full_score_diff']}")
    # The residual stream in bf16 (--residual-dtype activation: transformers' and vLLM's
    # numerics) instead of sluice's default f32.
    ar_rates, ar_scores, _ = sluice_score(
        args.sluice, mdir, inp, os.path.join(args.out, "qwen3.actres.out.jsonl"),
        limits + ["--prefix-reuse", "off", "--residual-dtype", "activation"], args.reps)
    results["qwen3_sluice_offline_act_residual"] = ar_rates
    log(f"sluice offline (no prefix reuse, bf16 residual): {[round(r, 1) for r in ar_rates]} "
        "pairs/s")
    # sluice's score for num_labels=1 is the raw logit unless the model asks for a sigmoid;
    # compare on whichever scale it reports.
    if hf_scores is not None:
        import math
        raw = any(s < 0 or s > 1 for s in sl_scores)
        ref = hf_scores if raw else [1 / (1 + math.exp(-x)) for x in hf_scores]
        mx, mean = score_diff(sl_scores, ref)
        results["qwen3_score_diff_vs_hf_bf16"] = {"max": mx, "mean": mean,
                                                  "scale": "logit" if raw else "sigmoid"}
        log(f"sluice vs HF bf16 scores ({'logit' if raw else 'sigmoid'}): max {mx:.4f} "
            f"mean {mean:.4f}")
        amx, amean = score_diff(ar_scores, ref)
        results["qwen3_act_residual_score_diff_vs_hf_bf16"] = {"max": amx, "mean": amean}
        log(f"sluice (bf16 residual) vs HF bf16 scores: max {amx:.4f} mean {amean:.4f}")
        if "fp32ref" not in skip:
            n = min(512, len(seqs))
            model32 = model.float()
            _, ref32 = hf_run(model32, seqs[:n], 64, "dynamic")
            ref32 = ref32 if raw else [1 / (1 + math.exp(-x)) for x in ref32]
            results["qwen3_vs_fp32"] = {
                "pairs": n,
                "sluice_max_mean": score_diff(sl_scores[:n], ref32),
                "sluice_bf16_residual_max_mean": score_diff(ar_scores[:n], ref32),
                "hf_bf16_max_mean": score_diff(ref[:n], ref32)}
            log("vs fp32 evaluation of the same weights:", json.dumps(results["qwen3_vs_fp32"]))
            model = model32.to(torch.bfloat16)
    if "served" not in skip:
        bodies = os.path.join(args.out, "bodies.jsonl")
        with open(bodies, "w") as f:
            for s in range(0, len(seqs), 20):
                f.write(json.dumps({"input": [x[0] for x in seqs[s:s + 20]]}) + "\n")
        results["qwen3_sluice_served"] = serve_bench(
            args.sluice, mdir, bodies, limits + ["--prefix-reuse", "off"] + args.serve_args.split(),
            8123, args.out)
        results["qwen3_sluice_served_prefix"] = serve_bench(
            args.sluice, mdir, bodies, limits + ["--prefix-reuse", "on"] + args.serve_args.split(),
            8124, args.out)
    del model
    torch.cuda.empty_cache()

    # ---- BERT-shaped cross-encoders ----
    if "bert" not in skip:
        extra = len(prefix) + len(suffix) - 3
        bert_pairs = []
        for p in pairs:
            q = [1000 + t % (VOCAB - 1000) for t in p["q"]]
            d = [1000 + t % (VOCAB - 1000) for t in p["d"]]
            d = d + [1000 + (7 * i) % (VOCAB - 1000) for i in range(extra)]
            ids = [CLS] + q + [SEP] + d + [SEP]
            types = [0] * (len(q) + 2) + [1] * (len(d) + 1)
            bert_pairs.append((ids[:512], types[:512]))
        binp = os.path.join(args.out, "bert_pairs.jsonl")
        with open(binp, "w") as f:
            for ids, types in bert_pairs:
                f.write(json.dumps({"input_ids": ids, "token_type_ids": types}) + "\n")
        results["bert"] = {}
        for name, shape in BERT_SHAPES.items():
            torch.manual_seed(0)
            bcfg = BertConfig(vocab_size=VOCAB, max_position_embeddings=512, type_vocab_size=2,
                              num_labels=1, **shape)
            bm = BertForSequenceClassification(bcfg).eval()
            bdir = os.path.join(args.out, name)
            bm.save_pretrained(bdir)
            for dt, sdt in ((torch.float16, "float16"), (torch.float32, "float32")):
                m = copy.deepcopy(bm).to(dt).cuda()
                row = {}
                best_scores = None
                for mode, bs in (("dynamic", 128), ("sorted", 512)):
                    rate, sc = hf_run(m, bert_pairs, bs, mode, with_types=True, pad=0)
                    row[f"hf {mode} b{bs}"] = rate
                    best_scores = sc
                rates, sl, _ = sluice_score(args.sluice, bdir, binp,
                                            os.path.join(args.out, f"{name}.{sdt}.out.jsonl"),
                                            ["--dtype", sdt, "--max-batch-tokens",
                                             str(args.max_batch_tokens), "--max-num-seqs",
                                             str(args.max_num_seqs)], args.reps)
                row["sluice"] = rates
                import math
                raw = any(s < 0 or s > 1 for s in sl)
                ref = best_scores if raw else [1 / (1 + math.exp(-x)) for x in best_scores]
                row["score_diff_max_mean"] = score_diff(sl, ref)
                results["bert"][f"{name} {sdt}"] = row
                log(f"{name} {sdt}: {json.dumps(row)}")
                del m

    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    # ---- tables ----
    med = statistics.median
    log("\n## Qwen3-0.6B-shaped Qwen3ForSequenceClassification, bf16, "
        f"{len(seqs)} pairs ({tokens} tokens)\n")
    log("| path | pairs/s |\n|---|---|")
    for k, v in hf.items():
        log(f"| HF transformers {k} | {v:.1f} |")
    sr = results["qwen3_sluice_offline"]
    pr = results["qwen3_sluice_offline_prefix"]
    log(f"| sluice offline (`sluice score --prefix-reuse off`), median of {len(sr)} | "
        f"{med(sr):.1f} ({min(sr):.1f}-{max(sr):.1f}) |")
    log(f"| sluice offline with shared-prefix reuse (`--prefix-reuse on`) | {med(pr):.1f} "
        f"({min(pr):.1f}-{max(pr):.1f}) |")
    ar = results["qwen3_sluice_offline_act_residual"]
    log(f"| sluice offline, bf16 residual stream (`--prefix-reuse off --residual-dtype "
        f"activation`) | {med(ar):.1f} ({min(ar):.1f}-{max(ar):.1f}) |")
    for key, ref, what in (("qwen3_sluice_served", sr, "no prefix reuse"),
                           ("qwen3_sluice_served_prefix", pr, "prefix reuse")):
        if key in results:
            sv = results[key]["c16"]
            log(f"| sluice served ({what}), /classify 20 per request, concurrency 16 | "
                f"{sv['docs_per_s']:.1f} ({sv['docs_per_s'] / med(ref):.0%} of offline) |")
    for key in ("qwen3_sluice_served", "qwen3_sluice_served_prefix"):
        if key in results:
            c1 = results[key]["c1"]
            log(f"\n{key}: single request of 20 documents (concurrency 1): p50 "
                f"{c1['p50_ms']:.2f} ms, p95 {c1['p95_ms']:.2f} ms")
    if hf:
        best = max(hf.values())
        log(f"\nsluice offline / best HF path: {med(sr) / best:.2f}x without prefix reuse, "
            f"{med(pr) / best:.2f}x with it, {med(ar) / best:.2f}x with the bf16 residual")
        n_lin = 28 * (1024 * 4096 + 2048 * 1024 + 1024 * 6144 + 3072 * 1024)
        flop_tok = 2 * n_lin
        tf = med(sr) * tokens / len(seqs) * flop_tok / 1e12
        log(f"sluice linear-layer TFLOP/s: {tf:.0f} = "
            f"{tf / results['gemm_tflops']['bfloat16 best']:.0%} of the measured cuBLAS bf16 "
            f"peak ({results['gemm_tflops']['bfloat16 best']:.0f})")
    if "bert" in results:
        log("\n| model | dtype | HF dynamic b128 | HF sorted b512 | sluice (median) | speedup "
            "vs best HF | max score diff |\n|---|---|---|---|---|---|---|")
        for k, row in results["bert"].items():
            name, dt = k.split()
            bh = max(row["hf dynamic b128"], row["hf sorted b512"])
            log(f"| {name} | {dt} | {row['hf dynamic b128']:.1f} | {row['hf sorted b512']:.1f} | "
                f"{med(row['sluice']):.1f} | {med(row['sluice']) / bh:.2f}x | "
                f"{row['score_diff_max_mean'][0]:.2e} |")


if __name__ == "__main__":
    main()
