#!/usr/bin/env python3
"""Served generation side by side (issue 13), one GPU machine run:

for each shape (random-weight Qwen3 models of hf_generate.py):
  1. HF transformers continuous batching (`generate_batch`, paged sdpa, torch.no_grad) on
     --hf-requests prompts of the load below: HF's own serving loop, fed all at once;
  2. `sluice generate` offline on the same distribution, --max-num-seqs = the served
     concurrency, and one request of 128 + 128 tokens (the concurrency-1 reference);
  3. `sluice serve` + `sluice bench --endpoint /v1/completions` (streamed, greedy,
     ignore_eos) at concurrency 1, 16 and 256.
The load: prompts of 128-1,024 random token ids (uniform), 128 new tokens each.
Results: OUT/served.json (and the raw outputs of each command under OUT).

  python3 bench/peers/served_generate.py --sluice /tmp/sluice-dev/bin/sluice --out $OUT/sg
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_generate as hg  # noqa: E402  (torch, transformers; the model shapes)


def bench_load(n, seed):
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        plen = rng.randint(128, 1024)
        reqs.append([rng.randrange(5, 100000) for _ in range(plen)])
    return reqs


def parse_bench(txt):
    m = re.search(r"requests: (\d+) ok, (\d+) total in ([\d.]+) s: ([\d.]+) req/s, ([\d.]+) "
                  r"output tokens/s", txt)
    t = re.search(r"TTFT: p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms", txt)
    i = re.search(r"inter-token latency: p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms", txt)
    if not (m and t and i):
        return {"error": txt[-2000:]}
    return {"ok": int(m.group(1)), "total": int(m.group(2)), "seconds": float(m.group(3)),
            "req_per_s": float(m.group(4)), "tok_per_s": float(m.group(5)),
            "ttft_p50_ms": float(t.group(1)), "ttft_p95_ms": float(t.group(2)),
            "ttft_p99_ms": float(t.group(3)), "itl_p50_ms": float(i.group(1)),
            "itl_p95_ms": float(i.group(2)), "itl_p99_ms": float(i.group(3))}


def wait_ready(port, proc, timeout=300):
    t = time.time()
    while time.time() - t < timeout:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return True
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    return False


def served(sluice, model, out, port, runs):
    log = open(os.path.join(out, "serve.log"), "w")
    proc = subprocess.Popen([sluice, "serve", "--model", model, "--device", "cuda",
                             "--max-model-len", "2048", "--port", str(port)],
                            stdout=log, stderr=subprocess.STDOUT)
    res = {}
    try:
        if not wait_ready(port, proc):
            return {"error": "server did not start: " + open(log.name).read()[-2000:]}
        for name, conc, nreq, prompt in runs:
            cmd = [sluice, "bench", "--port", str(port), "--endpoint", "/v1/completions",
                   "--vocab", "100000", "--concurrency", str(conc), "--requests", str(nreq),
                   "--prompt-tokens", prompt, "--output-tokens", "128", "--seed", "3"]
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
            open(os.path.join(out, f"bench_{name}.txt"), "w").write(r.stdout + r.stderr)
            res[name] = parse_bench(r.stdout + r.stderr)
            hg.log(name, res[name])
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="/tmp/gen-models")
    ap.add_argument("--shapes", default="0.6b,8b")
    ap.add_argument("--hf-requests", default="0.6b:256,8b:128")
    ap.add_argument("--skip-hf", action="store_true")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    hf_n = dict(kv.split(":") for kv in a.hf_requests.split(","))
    results = {}
    port = 8011
    for shape in a.shapes.split(","):
        path = os.path.join(a.models, shape)
        t = time.time()
        hg.make_model(shape, path)
        r = {"model_build_s": time.time() - t, "weight_bytes": hg.weight_bytes(path)}
        out = os.path.join(a.out, shape)
        os.makedirs(out, exist_ok=True)
        load = bench_load(1024, seed=7)
        if not a.skip_hf:
            n = int(hf_n.get(shape, 128))
            r["hf_generate_batch"] = dict(hg.hf_continuous(path, load[:n], 128), requests=n)
            hg.log(shape, "hf", r["hf_generate_batch"])
        inputs = os.path.join(out, "off.jsonl")
        hg.write_jsonl(inputs, [{"prompt_token_ids": p, "max_tokens": 128, "ignore_eos": True}
                                for p in load])
        cuda = ["--device", "cuda", "--max-model-len", "2048"]
        r["offline_256"] = hg.run_sluice(a.sluice, path, inputs, os.path.join(out, "off.out"),
                                         [*cuda, "--max-num-seqs", "256"])
        hg.log(shape, "offline_256", r["offline_256"])
        inputs16 = os.path.join(out, "off16.jsonl")
        hg.write_jsonl(inputs16, [{"prompt_token_ids": p, "max_tokens": 128, "ignore_eos": True}
                                  for p in load[:256]])
        r["offline_16"] = hg.run_sluice(a.sluice, path, inputs16, os.path.join(out, "off16.out"),
                                        [*cuda, "--max-num-seqs", "16"])
        hg.log(shape, "offline_16", r["offline_16"])
        one = os.path.join(out, "one.jsonl")
        hg.write_jsonl(one, [{"prompt_token_ids": load[0][:128], "max_tokens": 128,
                              "ignore_eos": True}])
        r["offline_1"] = [hg.run_sluice(a.sluice, path, one, os.path.join(out, "one.out"), cuda)
                          for _ in range(3)]
        hg.log(shape, "offline_1", r["offline_1"])
        r["served"] = served(a.sluice, path, out, port,
                             [("c1", 1, 16, "128"), ("c16", 16, 256, "128:1024"),
                              ("c256", 256, 1024, "128:1024"), ("c256_b", 256, 1024, "128:1024")])
        port += 1
        results[shape] = r
        json.dump(results, open(os.path.join(a.out, "served.json"), "w"), indent=1)
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
