#!/usr/bin/env python3
"""Constrained vs unconstrained generation throughput (issue 14's H200 bar: with 256
concurrent constrained requests, output tok/s >= 90% of the same run unconstrained).

`sluice generate` offline (all requests submitted at once, --max-num-seqs concurrent) on a
causal LM, three constrained loads and, for each, an unconstrained twin:

  one_schema  every request under the same JSON Schema (an extraction schema: compiled once,
              then served from the compile cache), response_format json_schema;
  corpus      request i under the i-th schema that `sluice grammar-bench` compiled from the
              MaskBench corpus (--grammar-results), cycled: a distinct schema per request;
  json_object response_format json_object.

A constrained request ends when its grammar accepts (then only EOS is allowed) or at
max_tokens, so its length is not the unconstrained one's. The twin run therefore gives each
request exactly the number of tokens its constrained run produced (max_tokens = that count,
ignore_eos): the same prompts, the same token counts, the same batch; only the masks differ.
Sampling: temperature 0.8, a seed per request. Prompts: 128 random token ids (below the tokenizer's vocabulary).

    python3 bench/structured/constrained_throughput.py --sluice build/release/sluice \\
        --model DIR --tokenizer TOKDIR --schemas schemas.jsonl \\
        --grammar-results results.jsonl --out OUT [--device cuda] [--requests 1024]

--served also serves the model (`sluice serve`, one server for all loads) and sends each
load's bodies with `sluice bench --endpoint /v1/completions --concurrency --max-num-seqs`
three times: constrained (cold: the server has not seen these constraints), constrained
again (warm: compiled grammars and their mask caches kept, as in a server that keeps
serving a schema; the cache holds 128 constraints, so the corpus load stays mostly cold),
and the unconstrained twin.

--model is copied (symlinked weights) with TOKDIR's tokenizer.json and config.json's
eos_token_id set to the tokenizer's end-of-text token. Results: OUT/constrained.json.
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

EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 200},
        "category": {"enum": ["book", "film", "music", "game", "other"]},
        "year": {"type": "integer", "minimum": 1800, "maximum": 2100},
        "rating": {"type": "number", "minimum": 0, "maximum": 5},
        "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 8},
        "summary": {"type": "string"},
    },
    "required": ["name", "category", "year", "tags", "summary"],
    "additionalProperties": False,
}


def prepare_model(src, tokdir, dst):
    os.makedirs(dst, exist_ok=True)
    for f in os.listdir(src):
        s, d = os.path.join(os.path.abspath(src), f), os.path.join(dst, f)
        if os.path.lexists(d):
            os.remove(d)
        if f in ("config.json", "tokenizer.json", "tokenizer_config.json", "sluice.json"):
            continue
        os.symlink(s, d)
    tok = json.load(open(os.path.join(tokdir, "tokenizer.json")))
    eos = None
    for t in tok.get("added_tokens", []):
        if t["content"] in ("<|end_of_text|>", "<|endoftext|>", "<|im_end|>", "</s>"):
            eos = t["id"]
    if eos is None:
        sys.exit("no end-of-text token among the tokenizer's added tokens")
    cfg = json.load(open(os.path.join(src, "config.json")))
    cfg["eos_token_id"] = eos
    if cfg.get("vocab_size", 0) <= max(t["id"] for t in tok.get("added_tokens", [{"id": 0}])):
        sys.exit("the tokenizer's ids exceed the model's vocab_size")
    json.dump(cfg, open(os.path.join(dst, "config.json"), "w"), indent=1)
    os.symlink(os.path.abspath(os.path.join(tokdir, "tokenizer.json")),
               os.path.join(dst, "tokenizer.json"))
    return eos, len(tok["model"]["vocab"])


def run(sluice, model, reqs, path, extra):
    inp = path + ".in.jsonl"
    with open(inp, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")
    cmd = [sluice, "generate", "--model", model, "--input", inp, "--output", path + ".out.jsonl",
           *extra]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    open(path + ".log", "w").write(p.stdout + p.stderr)
    if p.returncode != 0:
        return {"error": (p.stdout + p.stderr)[-3000:]}
    txt = p.stderr
    m = re.search(r"generated (\d+) tokens for (\d+) requests in ([\d.]+) s: ([\d.]+) output "
                  r"tokens/s", txt)
    ph = re.search(r"prepare ([\d.]+) us, launch ([\d.]+) us, wait for the device ([\d.]+) us, "
                   r"apply ([\d.]+) us", txt)
    lp = re.search(r"logits processors: ([\d.]+) us per step \(([\d.]+)% of the step time\), "
                   r"(\d+) masks", txt)
    steps = re.search(r"(\d+) steps, (\d+) preemptions", txt)
    bound = re.search(r"masks outlasted the forward in (\d+) of (\d+) steps with masks "
                      r"\(([\d.]+) ms", txt)
    res = {"tokens": int(m.group(1)), "requests": int(m.group(2)), "seconds": float(m.group(3)),
           "tok_per_s": float(m.group(4))}
    if ph:
        res["step_us"] = {"prepare": float(ph.group(1)), "launch": float(ph.group(2)),
                          "wait": float(ph.group(3)), "apply": float(ph.group(4))}
    if lp:
        res["masks_us_per_step"] = float(lp.group(1))
        res["masks_share_pct"] = float(lp.group(2))
        res["masks"] = int(lp.group(3))
    if bound:
        res["mask_bound_steps"] = int(bound.group(1))
        res["mask_steps"] = int(bound.group(2))
        res["mask_bound_ms"] = float(bound.group(3))
    if steps:
        res["steps"] = int(steps.group(1))
        res["preemptions"] = int(steps.group(2))
    outs = [json.loads(line) for line in open(path + ".out.jsonl")]
    outs.sort(key=lambda o: o["index"])
    res["lengths"] = [len(o["token_ids"]) for o in outs]
    res["finish"] = {}
    for o in outs:
        res["finish"][o["finish_reason"]] = res["finish"].get(o["finish_reason"], 0) + 1
    return res


def serve(sluice, model, port, extra, log):
    proc = subprocess.Popen([sluice, "serve", "--model", model, "--port", str(port), *extra],
                            stdout=open(log, "w"), stderr=subprocess.STDOUT)
    t = time.time()
    while time.time() - t < 300:
        if proc.poll() is not None:
            return None
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                if r.status == 200:
                    return proc
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.5)
    proc.kill()
    return None


def bench(sluice, port, bodies, path, conc):
    with open(path + ".bodies.jsonl", "w") as f:
        for b in bodies:
            f.write(json.dumps(b) + "\n")
    cmd = [sluice, "bench", "--port", str(port), "--endpoint", "/v1/completions", "--input",
           path + ".bodies.jsonl", "--concurrency", str(conc), "--requests", str(len(bodies))]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    txt = p.stdout + p.stderr
    open(path + ".bench.txt", "w").write(txt)
    m = re.search(r"requests: (\d+) ok, (\d+) total in ([\d.]+) s: ([\d.]+) req/s, ([\d.]+) "
                  r"output tokens/s", txt)
    if not m:
        return {"error": txt[-2000:]}
    return {"ok": int(m.group(1)), "total": int(m.group(2)), "seconds": float(m.group(3)),
            "tok_per_s": float(m.group(5))}


def served_body(r):
    b = {"prompt": r["prompt_token_ids"], "max_tokens": r["max_tokens"],
         "temperature": r["temperature"], "seed": r["seed"]}
    for k in ("response_format", "ignore_eos"):
        if k in r:
            b[k] = r[k]
    return b


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--tokenizer", required=True, help="directory with tokenizer.json")
    ap.add_argument("--schemas", required=True, help="the corpus, uncompressed JSONL")
    ap.add_argument("--grammar-results", required=True, help="grammar-bench --output")
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--max-num-seqs", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--loads", default="one_schema,corpus,json_object")
    ap.add_argument("--extra", default="", help="more sluice generate flags, space-separated")
    ap.add_argument("--served", action="store_true", help="also the served runs (see above)")
    ap.add_argument("--port", type=int, default=8031)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    model = os.path.join(a.out, "model")
    eos, vocab = prepare_model(a.model, a.tokenizer, model)
    compiled = {json.loads(line)["id"] for line in open(a.grammar_results)
                if json.loads(line).get("status") == "compiled"}
    corpus = [d["schema"] for d in map(json.loads, open(a.schemas)) if d["id"] in compiled]
    rng = random.Random(11)
    prompts = [[rng.randrange(5, min(100000, vocab)) for _ in range(128)] for _ in range(a.requests)]
    extra = ["--device", a.device, "--max-num-seqs", str(a.max_num_seqs),
             *a.extra.split()]
    served_loads = {}
    results = {"eos_token_id": eos, "corpus_schemas_compiled": len(corpus),
               "requests": a.requests, "max_num_seqs": a.max_num_seqs}

    def base(i):
        return {"prompt_token_ids": prompts[i], "temperature": 0.8, "seed": i,
                "detokenize": False}

    for load in a.loads.split(","):
        reqs = []
        for i in range(a.requests):
            r = base(i)
            r["max_tokens"] = a.max_tokens
            if load == "one_schema":
                r["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "item", "schema": EXTRACTION_SCHEMA}}
            elif load == "corpus":
                r["response_format"] = {"type": "json_schema", "json_schema": {
                    "name": "s%d" % i, "schema": corpus[i % len(corpus)]}}
            elif load == "json_object":
                r["response_format"] = {"type": "json_object"}
            else:
                sys.exit("unknown load " + load)
            reqs.append(r)
        c = run(a.sluice, model, reqs, os.path.join(a.out, load), extra)
        if "error" in c:
            results[load] = {"constrained": c}
            print(load, c["error"][-800:], flush=True)
            continue
        served_loads[load] = (reqs, c["lengths"])
        twin = []
        for i, n in enumerate(c["lengths"]):
            r = base(i)
            r["max_tokens"] = max(n, 1)
            r["ignore_eos"] = True
            twin.append(r)
        u = run(a.sluice, model, twin, os.path.join(a.out, load + "_twin"), extra)
        ratio = c["tok_per_s"] / u["tok_per_s"] if "tok_per_s" in u else None
        for x in (c, u):
            x.pop("lengths", None)
        results[load] = {"constrained": c, "unconstrained_twin": u, "ratio": ratio}
        print(load, json.dumps(results[load]), flush=True)
        json.dump(results, open(os.path.join(a.out, "constrained.json"), "w"), indent=1)
    if a.served and served_loads:
        proc = serve(a.sluice, model, a.port, extra, os.path.join(a.out, "serve.log"))
        if proc is None:
            results["served_error"] = open(os.path.join(a.out, "serve.log")).read()[-2000:]
        else:
            try:
                for load, (reqs, lengths) in served_loads.items():
                    bodies = [served_body(r) for r in reqs]
                    twin = []
                    for r, n in zip(reqs, lengths):
                        b = served_body(r)
                        b.pop("response_format", None)
                        b["max_tokens"] = max(n, 1)
                        b["ignore_eos"] = True
                        twin.append(b)
                    base = os.path.join(a.out, "served_" + load)
                    cold = bench(a.sluice, a.port, bodies, base + "_cold", a.max_num_seqs)
                    warm = bench(a.sluice, a.port, bodies, base + "_warm", a.max_num_seqs)
                    tw = bench(a.sluice, a.port, twin, base + "_twin", a.max_num_seqs)
                    res = {"cold": cold, "warm": warm, "twin": tw}
                    if all("tok_per_s" in x for x in (cold, warm, tw)):
                        res["ratio_cold"] = cold["tok_per_s"] / tw["tok_per_s"]
                        res["ratio_warm"] = warm["tok_per_s"] / tw["tok_per_s"]
                    results.setdefault("served", {})[load] = res
                    print("served", load, json.dumps(res), flush=True)
                    json.dump(results, open(os.path.join(a.out, "constrained.json"), "w"),
                              indent=1)
            finally:
                proc.terminate()
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    proc.kill()
    json.dump(results, open(os.path.join(a.out, "constrained.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
