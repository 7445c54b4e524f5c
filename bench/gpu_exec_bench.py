#!/usr/bin/env python3
"""Execution benchmark on one GPU (issue 5, "Execution"), side by side in one run:

1. Offline throughput of `sluice score` on the headline workload (Qwen3-0.6B-shaped
   Qwen3ForSequenceClassification, bf16, the pairs of rerank_10k.jsonl), shared-prefix
   reuse off and on, for a baseline build (--baseline, e.g. the commit before pipelining)
   and this build; runs interleaved (baseline, new, baseline, new, ...) so drift hits both.
   Scores of the two builds are compared.
2. Served single-request latency at concurrency 1 (`sluice serve` + `sluice bench
   --concurrency 1`, /classify with token ids): requests of 1 document and of 20 documents,
   with `--cuda-graphs off` and `on` (and the baseline build for reference), plus served
   throughput at concurrency 16 (20 documents per request) for both builds.
3. Optionally (--latency-bench), the engine-level latency scan of bench/latency_bench.cc
   on the same model directory: eager vs graph replay per token count.

The model directory is built exactly as bench/peers/hf_gpu_rerank.py builds it (seeded
random weights, saved with transformers), so figures are comparable with that table.

  python3 bench/gpu_exec_bench.py --sluice build/release/sluice --baseline /path/old/sluice \\
      --workload rerank_10k.jsonl --out /tmp/ge --latency-bench build/release/latency_bench
"""
import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
from sluice_client import run_bench, wait_ready  # noqa: E402


def log(*a):
    print(*a, flush=True)


def build_model(out):
    import torch
    from transformers import Qwen3Config, Qwen3ForSequenceClassification
    mdir = os.path.join(out, "qwen3-0.6b-seqcls")
    if os.path.exists(os.path.join(mdir, "config.json")):
        return mdir
    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=151669, hidden_size=1024, intermediate_size=3072,
                      num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                      head_dim=128, max_position_embeddings=40960, rope_theta=1000000.0,
                      rms_norm_eps=1e-6, tie_word_embeddings=True, num_labels=1,
                      pad_token_id=151643)
    model = Qwen3ForSequenceClassification(cfg).to(torch.bfloat16).cuda().eval()
    model.save_pretrained(mdir)
    del model
    torch.cuda.empty_cache()
    return mdir


def score_once(sluice, mdir, inp, outp, extra):
    r = subprocess.run([sluice, "score", "--model", mdir, "--input", inp, "--output", outp,
                        "--device", "cuda", "--max-batch-tokens", "65536", "--max-num-seqs",
                        "1024"] + extra, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{sluice} score failed:\n" + r.stderr[-3000:])
    m = re.search(r"done: (\d+) sequences, (\d+) tokens in ([\d.]+) s", r.stderr)
    return int(m.group(1)) / float(m.group(3)), r.stderr


def scores(path):
    return [json.loads(line)["score"] for line in open(path)]


def bench(sluice, port, bodies, conc, nreq):
    r = run_bench(sluice, port, bodies, conc, nreq)
    if not r.pop("errors_none"):
        raise RuntimeError("bench failed:\n" + r["text"][-2000:])
    r.pop("text")
    return r


def serve(sluice, mdir, extra, port, out, name, runs):
    """Starts a server, runs [(key, bodies, concurrency, requests)], stops it."""
    log_path = os.path.join(out, f"serve-{name}.log")
    srv = subprocess.Popen([sluice, "serve", "--model", mdir, "--device", "cuda", "--port",
                            str(port), "--max-batch-tokens", "65536", "--max-num-seqs", "1024"]
                           + extra, stdout=open(log_path, "w"), stderr=subprocess.STDOUT)
    try:
        wait_ready(srv, port, log_path)
        res = {}
        for key, bodies, conc, nreq in runs:
            bench(sluice, port, bodies, conc, min(nreq, 20))  # warm-up (first-use effects)
            res[key] = bench(sluice, port, bodies, conc, nreq)
            log(f"  {name} {key}: {json.dumps(res[key])}")
        return res
    finally:
        srv.send_signal(signal.SIGTERM)
        try:
            srv.wait(timeout=30)
        except subprocess.TimeoutExpired:
            srv.kill()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--baseline", help="a sluice binary to compare with (e.g. before the change)")
    ap.add_argument("--workload", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--latency-requests", type=int, default=200)
    ap.add_argument("--latency-bench", help="path of the latency_bench binary (optional)")
    ap.add_argument("--skip", default="", help="comma list of: offline, served, scan")
    args = ap.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    os.makedirs(args.out, exist_ok=True)
    results = {}
    t_start = time.time()
    mdir = build_model(args.out)
    log(f"model directory {mdir} ({time.time() - t_start:.1f} s)")

    with open(args.workload) as f:
        header = json.loads(f.readline())
        pairs = [json.loads(line) for line in f]
    prefix, suffix = header.get("prefix", []), header.get("suffix", [])
    seqs = [prefix + p["q"] + p["d"] + suffix for p in pairs]
    inp = os.path.join(args.out, "workload.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps(header) + "\n")
        for p in pairs:
            f.write(json.dumps({"q": p["q"], "d": p["d"]}) + "\n")
    results["workload"] = {"pairs": len(seqs), "tokens": sum(map(len, seqs))}
    builds = [("new", args.sluice)] + ([("baseline", args.baseline)] if args.baseline else [])

    if "offline" not in skip:
        rates = {(b, m): [] for b, _ in builds for m in ("off", "on")}
        for rep in range(args.reps):
            for mode in ("off", "on"):
                for b, path in reversed(builds):
                    outp = os.path.join(args.out, f"scores.{b}.{mode}.jsonl")
                    rate, err = score_once(path, mdir, inp, outp, ["--prefix-reuse", mode])
                    rates[(b, mode)].append(rate)
                    if rep == 0 and b == "new":
                        log("\n".join(line for line in err.splitlines()
                                      if "graphs" in line or "warmed" in line))
                    log(f"offline {b} prefix-reuse {mode}: {rate:.1f} pairs/s")
        results["offline"] = {f"{b} {m}": v for (b, m), v in rates.items()}
        if args.baseline:
            for mode in ("off", "on"):
                a = scores(os.path.join(args.out, f"scores.new.{mode}.jsonl"))
                b = scores(os.path.join(args.out, f"scores.baseline.{mode}.jsonl"))
                d = [abs(x - y) for x, y in zip(a, b)]
                results[f"offline score diff new vs baseline {mode}"] = [max(d), sum(d) / len(d)]
                log(f"scores new vs baseline, prefix-reuse {mode}: max {max(d):.3g} mean "
                    f"{sum(d) / len(d):.3g}")

    if "served" not in skip:
        b1 = os.path.join(args.out, "bodies1.jsonl")
        b20 = os.path.join(args.out, "bodies20.jsonl")
        with open(b1, "w") as f:
            for s in seqs[:1000]:
                f.write(json.dumps({"input": [s]}) + "\n")
        with open(b20, "w") as f:
            for s in range(0, len(seqs), 20):
                f.write(json.dumps({"input": seqs[s:s + 20]}) + "\n")
        n = args.latency_requests
        lat_runs = [("1 doc c1", b1, 1, n), ("20 docs c1", b20, 1, n)]
        served = {}
        port = 8200
        served["new graphs off"] = serve(args.sluice, mdir, ["--cuda-graphs", "off"], port, args.out,
                                         "graphs-off", lat_runs)
        served["new graphs on"] = serve(args.sluice, mdir, ["--cuda-graphs", "on",
                                                            "--cuda-graph-max-tokens", "4096"],
                                        port + 1,
                                        args.out, "graphs-on",
                                        lat_runs + [("20 docs c16", b20, 16, len(seqs) // 20)])
        if args.baseline:
            served["baseline"] = serve(args.baseline, mdir, [], port + 2, args.out, "baseline",
                                       lat_runs + [("20 docs c16", b20, 16, len(seqs) // 20)])
        results["served"] = served

    if "scan" not in skip and args.latency_bench:
        r = subprocess.run([args.latency_bench, "--model", mdir, "--reps", "30"],
                           capture_output=True, text=True)
        results["latency_scan"] = r.stdout
        log(r.stdout + r.stderr[-2000:])

    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)

    # ---- summary ----
    med = statistics.median
    log(f"\n## Execution benchmark ({results['workload']['pairs']} pairs, "
        f"{results['workload']['tokens']} tokens), {time.time() - t_start:.0f} s in all\n")
    if "offline" in results:
        log("| build | --prefix-reuse | pairs/s median (min-max) |\n|---|---|---|")
        for key, v in results["offline"].items():
            b, m = key.split()
            log(f"| {b} | {m} | {med(v):.1f} ({min(v):.1f}-{max(v):.1f}) |")
    if "served" in results:
        log("\n| server | request | p50 ms | p95 ms | docs/s |\n|---|---|---|---|---|")
        for name, res in results["served"].items():
            for key, r in res.items():
                log(f"| {name} | {key} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} | "
                    f"{r['docs_per_s']:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
