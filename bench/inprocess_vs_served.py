#!/usr/bin/env python3
"""In-process (the C API through the ctypes binding) vs served (`sluice serve` over HTTP)
throughput on the same rerank pairs, measured side by side in one run.

Workload (bench/serve_vs_offline.py's generator): --requests rerank requests of a query and
--documents documents, words drawn from the model's vocabulary; requests.jsonl holds the
/v1/rerank bodies, and this process keeps the same (query, document) pairs in the same order.

Paths, each --reps times, interleaved (in-process, served, in-process, served, ...):
  inproc-request   one sluice_score_pairs call per request (its --documents pairs), one
                   caller thread: an embedded service scoring a request at a time
  inproc-c16       --concurrency caller threads, one request per call (calls on one model
                   are serialised, so this measures the binding's and the lock's overhead)
  inproc-all       every pair in one call (the engine packs them into full batches)
  served-c1        `sluice bench --concurrency 1 --input requests.jsonl` against `sluice serve`
  served-c16       the same at --concurrency (the server batches across requests)
The model (in-process) and the server run with --threads equal to the CPUs of
--server-cpus, pinned there (this process is pinned to them while it scores); the HTTP
client is pinned to --client-cpus. Pairs/s = pairs / wall time of the pass; the summary is
the median over repetitions (min-max beside it), and the ratios in-process / served per
repetition (inproc-request / served-c1, inproc-all / served-c16) with their median.

  python3 bench/inprocess_vs_served.py --sluice build/release/sluice \\
      --lib build/release/libsluice.so --out /tmp/ivs --requests 40 --reps 5
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "bindings", "python"))
import serve_vs_offline as svo  # noqa: E402
import sluice  # noqa: E402


def load_requests(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def inproc_request(model, reqs):
    t0 = time.perf_counter()
    for r in reqs:
        model.score_pairs([r["query"]] * len(r["documents"]), r["documents"])
    return time.perf_counter() - t0


def inproc_concurrent(model, reqs, concurrency):
    nxt = [0]
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = nxt[0]
                nxt[0] += 1
            if i >= len(reqs):
                return
            r = reqs[i]
            model.score_pairs([r["query"]] * len(r["documents"]), r["documents"])

    ts = [threading.Thread(target=worker) for _ in range(concurrency)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return time.perf_counter() - t0


def inproc_all(model, reqs):
    qs = [r["query"] for r in reqs for _ in r["documents"]]
    ds = [d for r in reqs for d in r["documents"]]
    t0 = time.perf_counter()
    model.score_pairs(qs, ds)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "release", "sluice"))
    ap.add_argument("--lib", default=os.path.join(ROOT, "build", "release", "libsluice.so"))
    ap.add_argument("--model", default=os.path.join(ROOT, "models", "demo-reranker"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--server-cpus", default="0")
    ap.add_argument("--client-cpus", default="1")
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--documents", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    if args.server_cpus == "auto" or args.client_cpus == "auto":
        args.server_cpus, args.client_cpus = svo.pick_cpus()
    args.threads = svo.cpu_count(args.server_cpus)
    os.makedirs(args.out, exist_ok=True)
    svo.make_workload(args.out, args.model, args.requests, args.documents)
    req_path = os.path.join(args.out, "requests.jsonl")
    reqs = load_requests(req_path)
    pairs = sum(len(r["documents"]) for r in reqs)

    cpus = {int(c) for part in args.server_cpus.split(",")
            for c in range(int(part.partition("-")[0]),
                           int(part.partition("-")[2] or part.partition("-")[0]) + 1)}
    os.sched_setaffinity(0, cpus)  # the library's threads inherit it
    sluice.load_library(args.lib)
    model = sluice.Model(args.model, task="score", threads=args.threads)
    inproc_request(model, reqs[:2])  # warm-up

    port = svo.free_port()
    server = subprocess.Popen(["taskset", "-c", args.server_cpus, args.sluice, "serve",
                               "--model", args.model, "--port", str(port), "--threads",
                               str(args.threads)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                svo.http_get(port, "/health")  # 200 once loaded
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise SystemExit("sluice serve did not become ready")
        svo.bench(args, port, 1, 2, req_path)  # warm-up
        runs = {k: [] for k in ("inproc-request", "inproc-c16", "inproc-all", "served-c1",
                                "served-c16")}
        for rep in range(args.reps):
            runs["inproc-request"].append(pairs / inproc_request(model, reqs))
            runs["inproc-c16"].append(pairs / inproc_concurrent(model, reqs, args.concurrency))
            runs["inproc-all"].append(pairs / inproc_all(model, reqs))
            runs["served-c1"].append(svo.bench(args, port, 1, len(reqs), req_path)["pairs_per_s"])
            runs["served-c16"].append(
                svo.bench(args, port, args.concurrency, len(reqs), req_path)["pairs_per_s"])
            print(f"rep {rep + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs.items()),
                  flush=True)
    finally:
        server.terminate()
        server.wait()
        model.close()

    med = {k: statistics.median(v) for k, v in runs.items()}
    per_rep = {
        "request_vs_served_c1": [a / b for a, b in zip(runs["inproc-request"], runs["served-c1"])],
        "all_vs_served_c16": [a / b for a, b in zip(runs["inproc-all"], runs["served-c16"])],
    }
    summary = {"model": args.model, "requests": len(reqs), "documents": args.documents,
               "pairs": pairs, "threads": args.threads, "server_cpus": args.server_cpus,
               "client_cpus": args.client_cpus, "reps": args.reps, "runs": runs,
               "median": med,
               "ratios_per_rep": per_rep,
               "ratio_request_vs_served_c1": statistics.median(per_rep["request_vs_served_c1"]),
               "ratio_all_vs_served_c16": statistics.median(per_rep["all_vs_served_c16"])}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\n{len(reqs)} requests x {args.documents} documents = {pairs} pairs, "
          f"{args.threads} thread(s) on CPUs {args.server_cpus}, {args.reps} repetitions\n")
    print("| path | pairs/s, median | min-max |")
    print("|---|---|---|")
    for k, v in runs.items():
        print(f"| {k} | {med[k]:.1f} | {min(v):.1f}-{max(v):.1f} |")
    for k, v in per_rep.items():
        print(f"\n{k} (per repetition): median {statistics.median(v):.3f}, "
              f"min-max {min(v):.3f}-{max(v):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
