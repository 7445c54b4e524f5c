#!/usr/bin/env python3
"""Served vs offline throughput on the same rerank pairs, and the per-stage latency split
(issue 4's performance requirement). Python standard library only.

  1. Writes a MiniLM-L6-shaped cross-encoder (BertForSequenceClassification, hidden 384,
     6 layers, 12 heads, intermediate 1536, one output; seeded random weights) with the
     BERT-uncased WordPiece tokenizer of tests/fixtures/tokenizers/bert_uncased, unless
     --model names an existing directory.
  2. Writes a workload of --requests rerank requests (a query of 6-10 words and
     --documents documents of 60-100 words each, words drawn from that vocabulary):
     requests.jsonl (one /v1/rerank body per line) and pairs.jsonl (the same
     (query, document) pairs in the same order, for `sluice score`).
  3. --reps times, interleaved: offline `sluice score` over pairs.jsonl (engine
     throughput: the "done:" line, i.e. packed forwards only, tokenisation and loading
     excluded), then `sluice bench --input requests.jsonl` against `sluice serve` at
     --concurrency (every request once: end-to-end client throughput, tokenisation and
     HTTP included). Server and offline run under `taskset -c --server-cpus` with
     --threads equal to that many cores; the client under `taskset -c --client-cpus`.
  4. Concurrency 1: --latency-requests requests one at a time; the client's p50, and the
     server's per-stage split from /metrics (sluice_stage_seconds: mean and p50 from the
     histogram's buckets, differences taken around the run).
Prints a markdown summary and writes summary.json to --out.

  python3 bench/serve_vs_offline.py --sluice build/release/sluice --out /tmp/svo \\
      --server-cpus auto --client-cpus auto --requests 60 --reps 3

(`auto`: two CPUs on distinct physical cores for the server and the offline runs, four
CPUs on other cores for the client.)
"""
import argparse
import array
import json
import os
import random
import re
import shutil
import socket
import statistics
import struct
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
STAGES = ["parse", "tokenize", "queue", "compute", "respond"]


# ------------------------------------------------------------------ model and workload

def write_safetensors(path, tensors):
    """tensors: list of (name, shape, fill) where fill(n) returns an array('f') of n."""
    header, blobs, off = {}, [], 0
    for name, shape, fill in tensors:
        n = 1
        for d in shape:
            n *= d
        data = fill(n).tobytes()
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [off, off + len(data)]}
        off += len(data)
        blobs.append(data)
    h = json.dumps(header).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


def make_model(out, tokenizer_dir, seed=7):
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        vocab = len(json.load(f)["model"]["vocab"])
    H, L, heads, inter, maxpos = 384, 6, 12, 1536, 512
    rng = random.Random(seed)
    pool = array.array("f", (rng.gauss(0.0, 0.02) for _ in range(1 << 16)))

    def normal(n):
        reps = -(-n // len(pool))
        start = rng.randrange(len(pool))
        a = (pool[start:] + pool[:start]) * reps
        return a[:n]

    def const(v):
        return lambda n: array.array("f", [v]) * n

    t = [("bert.embeddings.word_embeddings.weight", (vocab, H), normal),
         ("bert.embeddings.position_embeddings.weight", (maxpos, H), normal),
         ("bert.embeddings.token_type_embeddings.weight", (2, H), normal),
         ("bert.embeddings.LayerNorm.weight", (H,), const(1.0)),
         ("bert.embeddings.LayerNorm.bias", (H,), const(0.0))]
    for i in range(L):
        p = f"bert.encoder.layer.{i}."
        for m in ("query", "key", "value"):
            t += [(p + f"attention.self.{m}.weight", (H, H), normal),
                  (p + f"attention.self.{m}.bias", (H,), const(0.0))]
        t += [(p + "attention.output.dense.weight", (H, H), normal),
              (p + "attention.output.dense.bias", (H,), const(0.0)),
              (p + "attention.output.LayerNorm.weight", (H,), const(1.0)),
              (p + "attention.output.LayerNorm.bias", (H,), const(0.0)),
              (p + "intermediate.dense.weight", (inter, H), normal),
              (p + "intermediate.dense.bias", (inter,), const(0.0)),
              (p + "output.dense.weight", (H, inter), normal),
              (p + "output.dense.bias", (H,), const(0.0)),
              (p + "output.LayerNorm.weight", (H,), const(1.0)),
              (p + "output.LayerNorm.bias", (H,), const(0.0))]
    t += [("bert.pooler.dense.weight", (H, H), normal), ("bert.pooler.dense.bias", (H,), const(0.0)),
          ("classifier.weight", (1, H), normal), ("classifier.bias", (1,), const(0.0))]
    os.makedirs(out, exist_ok=True)
    write_safetensors(os.path.join(out, "model.safetensors"), t)
    cfg = {"architectures": ["BertForSequenceClassification"], "model_type": "bert",
           "vocab_size": vocab, "hidden_size": H, "num_hidden_layers": L,
           "num_attention_heads": heads, "intermediate_size": inter,
           "max_position_embeddings": maxpos, "type_vocab_size": 2, "hidden_act": "gelu",
           "layer_norm_eps": 1e-12, "pad_token_id": 0, "id2label": {"0": "LABEL_0"},
           "label2id": {"LABEL_0": 0}, "dtype": "float32"}
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    shutil.copyfile(os.path.join(tokenizer_dir, "tokenizer.json"),
                    os.path.join(out, "tokenizer.json"))


def make_workload(out, tokenizer_dir, requests, documents, seed=11):
    with open(os.path.join(tokenizer_dir, "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    words = sorted(w for w in vocab if w.isalpha() and w.isascii() and len(w) >= 3)
    rng = random.Random(seed)

    def sentence_run(n):
        ws = [rng.choice(words) for _ in range(n)]
        out_, k = [], 0
        while k < n:
            m = min(n - k, rng.randint(8, 14))
            s = " ".join(ws[k:k + m])
            out_.append(s[0].upper() + s[1:] + ".")
            k += m
        return " ".join(out_)

    with open(os.path.join(out, "requests.jsonl"), "w") as fr, \
            open(os.path.join(out, "pairs.jsonl"), "w") as fp:
        for _ in range(requests):
            q = " ".join(rng.choice(words) for _ in range(rng.randint(6, 10))) + "?"
            docs = [sentence_run(rng.randint(60, 100)) for _ in range(documents)]
            fr.write(json.dumps({"query": q, "documents": docs, "return_documents": False}) + "\n")
            for d in docs:
                fp.write(json.dumps({"query": q, "document": d}) + "\n")


# ------------------------------------------------------------------ running

def pick_cpus(n_server=2, n_client=4):
    """Server CPUs on distinct physical cores (no SMT siblings), from CPU 2 up; client CPUs
    on other physical cores."""
    allowed = sorted(os.sched_getaffinity(0))

    def core(c):
        try:
            with open(f"/sys/devices/system/cpu/cpu{c}/topology/thread_siblings_list") as f:
                return f.read().strip()
        except OSError:
            return str(c)

    server, client, used = [], [], set()
    for c in [c for c in allowed if c >= 2] + [c for c in allowed if c < 2]:
        if core(c) in used:
            continue
        if len(server) < n_server:
            server.append(c)
        elif len(client) < n_client:
            client.append(c)
        used.add(core(c))
    return ",".join(map(str, server)), ",".join(map(str, client))


def cpu_count(spec):
    """CPUs in a taskset list such as "2,3" or "2-5,8"."""
    n = 0
    for part in spec.split(","):
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return n


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stdout}\n{r.stderr}\n")
        raise SystemExit(1)
    return r.stdout + r.stderr


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def http_get(port, path):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
        return r.read().decode()


def parse_metrics(text):
    """{(stage, le): cumulative count}, {stage: (sum, count)}."""
    buckets, totals = {}, {}
    for line in text.splitlines():
        m = re.match(r'sluice_stage_seconds_bucket\{stage="(\w+)",le="([^"]+)"\} (\d+)', line)
        if m:
            le = float("inf") if m.group(2) == "+Inf" else float(m.group(2))
            buckets[(m.group(1), le)] = int(m.group(3))
            continue
        m = re.match(r'sluice_stage_seconds_(sum|count)\{stage="(\w+)"\} (\S+)', line)
        if m:
            s, c = totals.get(m.group(2), (0.0, 0))
            if m.group(1) == "sum":
                s = float(m.group(3))
            else:
                c = int(m.group(3))
            totals[m.group(2)] = (s, c)
    return buckets, totals


def counter(text, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", text, re.M)
    return float(m.group(1)) if m else 0.0


def stage_split(before, after):
    """Per stage: mean and p50 (linear interpolation inside the bucket) over the requests
    between the two scrapes."""
    b0, t0 = parse_metrics(before)
    b1, t1 = parse_metrics(after)
    out = {}
    for st in STAGES:
        s = t1.get(st, (0, 0))[0] - t0.get(st, (0, 0))[0]
        n = t1.get(st, (0, 0))[1] - t0.get(st, (0, 0))[1]
        les = sorted(le for (stg, le) in b1 if stg == st)
        cum = [(le, b1[(st, le)] - b0.get((st, le), 0)) for le in les]
        p50, prev_le, prev_c = float("nan"), 0.0, 0
        for le, c in cum:
            if n and c >= n / 2:
                if le == float("inf"):
                    p50 = prev_le
                else:
                    frac = (n / 2 - prev_c) / max(1, c - prev_c)
                    p50 = prev_le + (le - prev_le) * frac
                break
            prev_le, prev_c = le, c
        out[st] = {"mean_ms": 1e3 * s / n if n else float("nan"), "p50_ms": 1e3 * p50,
                   "count": n}
    return out


def bench(args, port, concurrency, requests, input_path):
    out = run(["taskset", "-c", args.client_cpus, args.sluice, "bench", "--port", str(port),
               "--endpoint", "/v1/rerank", "--concurrency", str(concurrency), "--requests",
               str(requests), "--input", input_path])
    m = re.search(r"requests: (\d+) ok, (\d+) total in ([\d.]+) s: ([\d.]+) req/s, "
                  r"([\d.]+) documents/s", out)
    lat = re.search(r"latency: p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms", out)
    if not m or int(m.group(1)) != requests or "errors: none" not in out:
        sys.stderr.write(out)
        raise SystemExit("bench: errors or missing output")
    return {"pairs_per_s": float(m.group(5)), "seconds": float(m.group(3)),
            "p50_ms": float(lat.group(1)), "p95_ms": float(lat.group(2)),
            "p99_ms": float(lat.group(3))}


def offline(args, model, pairs, batch_tokens=8192):
    out = run(["taskset", "-c", args.server_cpus, args.sluice, "score", "--model", model,
               "--threads", str(args.threads), "--input", pairs, "--output", "/dev/null",
               "--max-batch-tokens", str(batch_tokens)])
    m = re.search(r"done: (\d+) sequences, (\d+) tokens in ([\d.]+) s", out)
    if not m:
        sys.stderr.write(out)
        raise SystemExit("sluice score: no done line")
    n, tokens, secs = int(m.group(1)), int(m.group(2)), float(m.group(3))
    return {"pairs_per_s": n / secs, "tokens": tokens, "pairs": n, "seconds": secs}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default=os.path.join(ROOT, "build", "release", "sluice"))
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", help="existing cross-encoder directory (default: make one)")
    ap.add_argument("--tokenizer-dir",
                    default=os.path.join(ROOT, "tests", "fixtures", "tokenizers", "bert_uncased"))
    ap.add_argument("--server-cpus", default="0,1")
    ap.add_argument("--client-cpus", default="2")
    ap.add_argument("--requests", type=int, default=80)
    ap.add_argument("--documents", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--latency-requests", type=int, default=20)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--serve-args", default="", help="extra `sluice serve` flags")
    ap.add_argument("--offline-batch-tokens", type=int, default=6144,
                    help="one extra offline run with this token budget (0 = none)")
    args = ap.parse_args()
    if args.server_cpus == "auto":
        args.server_cpus, auto_client = pick_cpus()
        if args.client_cpus == "auto":
            args.client_cpus = auto_client
    print(f"server/offline CPUs {args.server_cpus}, client CPUs {args.client_cpus}", flush=True)
    args.threads = cpu_count(args.server_cpus)
    os.makedirs(args.out, exist_ok=True)
    t0 = time.time()
    model = args.model or os.path.join(args.out, "minilm-l6-ce")
    if not args.model:
        make_model(model, args.tokenizer_dir)
    make_workload(args.out, args.tokenizer_dir, args.requests, args.documents)
    reqs = os.path.join(args.out, "requests.jsonl")
    pairs = os.path.join(args.out, "pairs.jsonl")
    print(f"model and workload ready in {time.time() - t0:.1f}s", flush=True)

    port = free_port()
    log = open(os.path.join(args.out, "serve.log"), "w")
    server = subprocess.Popen(
        ["taskset", "-c", args.server_cpus, args.sluice, "serve", "--model", model, "--port",
         str(port), "--threads", str(args.threads)] + args.serve_args.split(),
        stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(600):
            try:
                http_get(port, "/ready")
                break
            except Exception:
                if server.poll() is not None:
                    raise SystemExit("sluice serve exited; see serve.log")
                time.sleep(0.1)
        bench(args, port, args.concurrency, min(args.requests, args.concurrency), reqs)  # warm-up
        results = []
        for rep in range(args.reps):
            off = offline(args, model, pairs)
            m0 = http_get(port, "/metrics")
            srv = bench(args, port, args.concurrency, args.requests, reqs)
            m1 = http_get(port, "/metrics")
            busy = counter(m1, "sluice_engine_busy_seconds_total") - counter(
                m0, "sluice_engine_busy_seconds_total")
            batches = counter(m1, "sluice_batches_total") - counter(m0, "sluice_batches_total")
            srv["engine_utilisation"] = busy / srv["seconds"]
            srv["engine_busy_s"] = busy
            srv["batches"] = batches
            srv["tokens_per_batch"] = (counter(m1, "sluice_tokens_total") - counter(
                m0, "sluice_tokens_total")) / max(1, batches)
            results.append({"offline": off, "served": srv,
                            "ratio": srv["pairs_per_s"] / off["pairs_per_s"]})
            if rep == 0 and args.offline_batch_tokens:
                # Offline at the served batches' size (the server keeps requests whole, so its
                # batches are smaller than the budget): does batch size alone move the rate?
                alt = offline(args, model, pairs, args.offline_batch_tokens)
                results[-1]["offline_alt"] = alt
                print(f"rep {rep}: offline with --max-batch-tokens {args.offline_batch_tokens}: "
                      f"{alt['pairs_per_s']:.1f} pairs/s", flush=True)
            print(f"rep {rep}: offline {off['pairs_per_s']:.1f} pairs/s ({off['seconds']:.2f} s), "
                  f"served {srv['pairs_per_s']:.1f} pairs/s (c={args.concurrency}; "
                  f"{srv['seconds']:.2f} s, engine busy {busy:.2f} s = "
                  f"{100 * srv['engine_utilisation']:.1f}%, {batches:.0f} batches of "
                  f"{srv['tokens_per_batch']:.0f} tokens), ratio {results[-1]['ratio']:.3f}",
                  flush=True)
        lat = []
        for rep in range(args.reps):
            before = http_get(port, "/metrics")
            b = bench(args, port, 1, args.latency_requests, reqs)
            split = stage_split(before, http_get(port, "/metrics"))
            lat.append({"client": b, "stages": split})
            print(f"rep {rep}: c=1 p50 {b['p50_ms']:.2f} ms; "
                  + ", ".join(f"{s} {split[s]['p50_ms']:.2f}/{split[s]['mean_ms']:.2f}"
                              for s in STAGES) + " (p50/mean ms)", flush=True)
        metrics = http_get(port, "/metrics")
        with open(os.path.join(args.out, "metrics.txt"), "w") as f:
            f.write(metrics)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()

    def med(xs):
        return statistics.median(xs), min(xs), max(xs)

    ro = med([r["offline"]["pairs_per_s"] for r in results])
    rs = med([r["served"]["pairs_per_s"] for r in results])
    rr = med([r["ratio"] for r in results])
    tok = results[0]["offline"]["tokens"] / results[0]["offline"]["pairs"]
    print()
    print(f"pairs: {args.requests} requests x {args.documents} documents = "
          f"{results[0]['offline']['pairs']} pairs, {tok:.1f} tokens per pair")
    print("| | median | min-max |")
    print("|---|---|---|")
    print(f"| offline `sluice score`, pairs/s | {ro[0]:.1f} | {ro[1]:.1f}-{ro[2]:.1f} |")
    print(f"| served, c={args.concurrency}, pairs/s | {rs[0]:.1f} | {rs[1]:.1f}-{rs[2]:.1f} |")
    print(f"| served / offline (per rep) | {rr[0]:.3f} | {rr[1]:.3f}-{rr[2]:.3f} |")
    ut = med([r["served"]["engine_utilisation"] for r in results])
    print(f"| served: engine busy / wall | {ut[0]:.3f} | {ut[1]:.3f}-{ut[2]:.3f} |")
    eff = med([r["served"]["pairs_per_s"] / r["served"]["engine_utilisation"] /
               r["offline"]["pairs_per_s"] for r in results])
    print(f"| served pairs per busy second / offline | {eff[0]:.3f} | {eff[1]:.3f}-{eff[2]:.3f} |")
    p50 = med([x["client"]["p50_ms"] for x in lat])
    print(f"| c=1 client p50 latency, ms | {p50[0]:.2f} | {p50[1]:.2f}-{p50[2]:.2f} |")
    for s in STAGES:
        m_ = med([x["stages"][s]["mean_ms"] for x in lat])
        p_ = med([x["stages"][s]["p50_ms"] for x in lat])
        print(f"| c=1 {s}, p50 / mean ms | {p_[0]:.3f} / {m_[0]:.3f} | "
              f"{p_[1]:.3f}-{p_[2]:.3f} / {m_[1]:.3f}-{m_[2]:.3f} |")
    summary = {"args": vars(args), "tokens_per_pair": tok, "throughput": results,
               "latency_c1": lat, "offline_median": ro[0], "served_median": rs[0],
               "ratio_median": rr[0], "ratio_min": rr[1], "ratio_max": rr[2]}
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()
