#!/usr/bin/env python3
"""Generation benchmark (issue 12), side by side in one run on the GPU machine: Hugging Face
transformers `generate` (dynamic cache, sdpa) and HF continuous batching (`generate_batch`,
paged sdpa, under torch.no_grad) vs `sluice generate`, on random-weight Qwen3-0.6B- and
Qwen3-8B-shaped causal LMs (bf16) saved as normal model directories.

Sections (--only, comma list; default all):
  copy     device-to-device copy bandwidth (the weight-streaming bound's denominator)
  decode   batch-1 decode, 128-token prompt, 256 new tokens: ms/token, HF generate vs
           sluice (inter-token latency p50), vs the bound weight bytes / copy bandwidth
  thru     512 requests, prompts of 128..1,024 tokens, 128 new tokens each, all submitted at
           once: output tokens/s, HF generate_batch vs sluice (0.6B shape)
  prefix   512 requests sharing a 1,000-token system prompt (+ 32 own tokens, 16 new):
           sluice TTFT p50 with and without prefix caching
  preempt  the thru load with a KV cache of a quarter of its need: every request finishes;
           outputs compared with the unconstrained greedy run; throughput cost
  cpu      0.6B shape fp32, batch-1 decode on 2 pinned cores: HF generate vs sluice --device cpu

Prints a markdown summary and writes results.json under --out:
  python3 bench/peers/hf_generate.py --sluice .carry/bin/sluice --out $OUT/gen
"""
import argparse
import json
import os
import random
import re
import subprocess
import time
import traceback

import torch
from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

SHAPES = {
    "0.6b": dict(hidden_size=1024, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128, intermediate_size=3072,
                 tie_word_embeddings=True),
    "8b": dict(hidden_size=4096, num_hidden_layers=36, num_attention_heads=32,
               num_key_value_heads=8, head_dim=128, intermediate_size=12288,
               tie_word_embeddings=False),
}
VOCAB = 151936


def log(*a):
    print(*a, flush=True)


def make_model(shape, path, dtype=torch.bfloat16):
    """A seeded random-weight Qwen3ForCausalLM saved under path (skipped if present)."""
    if os.path.exists(os.path.join(path, "config.json")):
        return
    cfg = Qwen3Config(vocab_size=VOCAB, max_position_embeddings=4096, rms_norm_eps=1e-6,
                      rope_theta=1000000.0, bos_token_id=None, eos_token_id=None,
                      pad_token_id=0, **SHAPES[shape])
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = Qwen3ForCausalLM(cfg).to(dtype)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n:
                p.fill_(1.0)
            else:
                p.normal_(0, 0.02)
    model.generation_config = GenerationConfig(eos_token_id=None, pad_token_id=0)
    model.save_pretrained(path, safe_serialization=True)
    del model
    torch.cuda.empty_cache()


def weight_bytes(path):
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path)
               if f.endswith(".safetensors"))


def copy_bandwidth():
    x = torch.empty(4 << 30, dtype=torch.uint8, device="cuda")
    y = torch.empty_like(x)
    for _ in range(3):
        y.copy_(x)
    torch.cuda.synchronize()
    t = time.perf_counter()
    n = 20
    for _ in range(n):
        y.copy_(x)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    del x, y
    torch.cuda.empty_cache()
    # A copy reads and writes every byte: the bandwidth a weight read can have.
    return 2 * (4 << 30) * n / dt


def write_jsonl(path, reqs):
    with open(path, "w") as f:
        for r in reqs:
            f.write(json.dumps(r) + "\n")


def run_sluice(sluice, model, inputs, out, extra=(), env=None, cpus=None):
    cmd = [sluice, "generate", "--model", model, "--input", inputs, "--output", out, *extra]
    if cpus:
        cmd = ["taskset", "-c", cpus] + cmd
    t = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    txt = r.stdout + r.stderr
    if r.returncode != 0:
        raise RuntimeError("sluice generate failed:\n" + txt[-3000:])
    m = re.search(r"generated (\d+) tokens for (\d+) requests in ([\d.]+) s: ([\d.]+) output "
                  r"tokens/s; prompt tokens computed (\d+); TTFT p50 ([\d.]+) ms p99 ([\d.]+) "
                  r"ms; inter-token latency p50 ([\d.]+) ms p99 ([\d.]+) ms; (\d+) steps, (\d+) "
                  r"preemptions; prefix cache hits (\d+) of (\d+) tokens", txt)
    mem = re.search(r"device memory in use at the end: (\d+) MiB of (\d+) MiB; KV cache (\d+) "
                    r"MiB", txt)
    kv = re.search(r"KV cache: (\d+) blocks", txt)
    g = m.groups()
    res = {"tokens": int(g[0]), "requests": int(g[1]), "seconds": float(g[2]),
           "tok_per_s": float(g[3]), "prompt_tokens": int(g[4]), "ttft_p50_ms": float(g[5]),
           "ttft_p99_ms": float(g[6]), "itl_p50_ms": float(g[7]), "itl_p99_ms": float(g[8]),
           "steps": int(g[9]), "preemptions": int(g[10]), "prefix_hits": int(g[11]),
           "prefix_queries": int(g[12]), "wall_s": wall,
           "kv_blocks": int(kv.group(1)) if kv else None}
    if mem:
        res.update(mem_used_mib=int(mem.group(1)), kv_mib=int(mem.group(3)))
    return res


def outputs(path):
    return [json.loads(line)["token_ids"] for line in open(path)]


def hf_decode(path, prompt, new_tokens):
    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                             attn_implementation="sdpa").cuda().eval()
    ids = torch.tensor([prompt], device="cuda")

    def gen(n):
        gc = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, generation_config=gc)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    gen(8)  # warm-up
    t1 = min(gen(1) for _ in range(2))
    tn = gen(new_tokens)
    peak = torch.cuda.max_memory_allocated()
    del model
    torch.cuda.empty_cache()
    return {"ms_per_token": 1e3 * (tn - t1) / (new_tokens - 1), "peak_mib": peak >> 20}


def hf_continuous(path, prompts, new_tokens):
    model = None
    for impl in ("paged|sdpa", "sdpa_paged"):
        try:
            model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.bfloat16,
                                                     attn_implementation=impl).cuda().eval()
            break
        except Exception as e:  # noqa: BLE001 - try the other spelling
            log("attn_implementation", impl, "failed:", e)
    gc = GenerationConfig(max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, eos_token_id=None, pad_token_id=0)
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    t = time.perf_counter()
    with torch.no_grad():
        out = model.generate_batch(inputs=prompts, generation_config=gc, progress_bar=False)
    torch.cuda.synchronize()
    dt = time.perf_counter() - t
    toks = sum(len(o.generated_tokens) for o in out.values())
    peak = torch.cuda.max_memory_allocated()
    del model
    torch.cuda.empty_cache()
    return {"tok_per_s": toks / dt, "tokens": toks, "seconds": dt, "peak_mib": peak >> 20}


def hf_cpu_decode(path, prompt, new_tokens):
    torch.set_num_threads(2)
    model = Qwen3ForCausalLM.from_pretrained(path, dtype=torch.float32,
                                             attn_implementation="sdpa").eval()
    ids = torch.tensor([prompt])

    def gen(n):
        gc = GenerationConfig(max_new_tokens=n, min_new_tokens=n, do_sample=False,
                              eos_token_id=None, pad_token_id=0)
        t = time.perf_counter()
        with torch.inference_mode():
            model.generate(ids, generation_config=gc)
        return time.perf_counter() - t

    gen(2)
    t1 = gen(1)
    tn = gen(new_tokens)
    return {"ms_per_token": 1e3 * (tn - t1) / (new_tokens - 1)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--models", default="/tmp/gen-models")
    ap.add_argument("--only", default="copy,decode,thru,prefix,preempt,cpu")
    ap.add_argument("--shapes", default="0.6b,8b")
    ap.add_argument("--skip-hf", action="store_true",
                    help="decode: sluice only (no HF generate timing)")
    ap.add_argument("--variants", default="",
                    help="decode: extra sluice runs with environment settings, e.g. "
                         "'nopdl:SLUICE_CUDA_PDL=0;gemv0:SLUICE_CUDA_GEMV=0'")
    ap.add_argument("--cpu-variants", default="",
                    help="cpu: extra sluice runs 'name:dtype[:ENV=V,...];...', e.g. "
                         "'bf16:bfloat16;bf16fma:bfloat16:SLUICE_CPU_LINEAR=avx512fma'")
    args = ap.parse_args()
    only = set(args.only.split(","))
    os.makedirs(args.out, exist_ok=True)
    res = {}
    rng = random.Random(0)
    paths = {s: os.path.join(args.models, "qwen3-" + s) for s in SHAPES}
    for s in args.shapes.split(","):
        t = time.perf_counter()
        make_model(s, paths[s])
        log(f"model {s}: {weight_bytes(paths[s]) / 2**30:.2f} GiB in {time.perf_counter() - t:.0f} s")
    w = os.path.join(args.out, "work")
    os.makedirs(w, exist_ok=True)

    def section(name, fn):
        if name not in only:
            return
        t = time.perf_counter()
        try:
            res[name] = fn()
        except Exception:  # noqa: BLE001 - one section failing must not lose the others
            res[name] = {"error": traceback.format_exc()[-2000:]}
        log(f"== {name} ({time.perf_counter() - t:.0f} s):", json.dumps(res[name])[:1500])
        with open(os.path.join(args.out, "results.json"), "w") as f:
            json.dump(res, f, indent=1)

    section("copy", lambda: {"bytes_per_s": copy_bandwidth()})
    bw = res.get("copy", {}).get("bytes_per_s", 4.3e12)

    def decode():
        out = {}
        prompt = [rng.randrange(1000, 100000) for _ in range(128)]
        write_jsonl(f"{w}/d.jsonl", [{"prompt_token_ids": prompt, "max_tokens": 256,
                                      "temperature": 0, "ignore_eos": True}])
        variants = [v.split(":", 1) for v in args.variants.split(";") if v]
        for s in args.shapes.split(","):
            flags = ["--device", "cuda", "--max-model-len", "1024"]
            sl = run_sluice(args.sluice, paths[s], f"{w}/d.jsonl", f"{w}/d.out", flags)
            bound_ms = 1e3 * weight_bytes(paths[s]) / bw
            out[s] = {"sluice": sl, "bound_ms": bound_ms,
                      "fraction_of_bound": bound_ms / sl["itl_p50_ms"]}
            for name, env in variants:
                e = dict(os.environ)
                e.update(kv.split("=", 1) for kv in env.split(",") if kv)
                v = run_sluice(args.sluice, paths[s], f"{w}/d.jsonl", f"{w}/d_{name}.out", flags,
                               env=e)
                out[s][name] = {"itl_p50_ms": v["itl_p50_ms"], "itl_p99_ms": v["itl_p99_ms"],
                                "fraction_of_bound": bound_ms / v["itl_p50_ms"],
                                "same_tokens": outputs(f"{w}/d_{name}.out") ==
                                outputs(f"{w}/d.out")}
            if not args.skip_hf:
                hf = hf_decode(paths[s], prompt, 256)
                out[s]["hf"] = hf
                out[s]["speedup_vs_hf"] = hf["ms_per_token"] / sl["itl_p50_ms"]
        return out

    section("decode", decode)
    lens = [rng.randrange(128, 1025) for _ in range(512)]
    thru_prompts = [[rng.randrange(1000, 100000) for _ in range(n)] for n in lens]
    write_jsonl(f"{w}/t.jsonl", [{"prompt_token_ids": p, "max_tokens": 128, "temperature": 0,
                                  "ignore_eos": True} for p in thru_prompts])

    def thru():
        sl = run_sluice(args.sluice, paths["0.6b"], f"{w}/t.jsonl", f"{w}/t.out",
                        ["--device", "cuda", "--max-model-len", "2048"])
        sl2 = run_sluice(args.sluice, paths["0.6b"], f"{w}/t.jsonl", f"{w}/t2.out",
                         ["--device", "cuda", "--max-model-len", "2048"])
        hf = hf_continuous(paths["0.6b"], thru_prompts, 128)
        best = max(sl["tok_per_s"], sl2["tok_per_s"])
        return {"sluice": [sl, sl2], "hf_cb": hf, "speedup": best / hf["tok_per_s"]}

    section("thru", thru)

    def prefix():
        system = [rng.randrange(1000, 100000) for _ in range(1000)]
        write_jsonl(f"{w}/p.jsonl", [{"prompt_token_ids": system + [rng.randrange(1000, 100000)
                                                                   for _ in range(32)],
                                      "max_tokens": 16, "temperature": 0, "ignore_eos": True}
                                     for _ in range(512)])
        on = run_sluice(args.sluice, paths["0.6b"], f"{w}/p.jsonl", f"{w}/p1.out",
                        ["--device", "cuda", "--max-model-len", "2048"])
        off = run_sluice(args.sluice, paths["0.6b"], f"{w}/p.jsonl", f"{w}/p0.out",
                         ["--device", "cuda", "--max-model-len", "2048",
                          "--enable-prefix-caching", "off"])
        return {"on": on, "off": off, "ttft_p50_speedup": off["ttft_p50_ms"] / on["ttft_p50_ms"],
                "same_outputs": outputs(f"{w}/p1.out") == outputs(f"{w}/p0.out")}

    section("prefix", prefix)

    def preempt():
        # KV need of the load: every request's prompt + 128 tokens, in 16-token blocks.
        need_blocks = sum((n + 128 + 15) // 16 for n in lens)
        block_bytes = 2 * 28 * 16 * 8 * 128 * 2
        quarter = need_blocks * block_bytes // 4
        base = ["--device", "cuda", "--max-model-len", "2048"]
        res = {"kv_bytes": quarter}

        def compare(ref_path, got_path):
            ref, got = outputs(ref_path), outputs(got_path)
            same = sum(a == b for a, b in zip(ref, got))
            first_diff = [next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), len(a))
                          for a, b in zip(ref, got) if a != b]
            return {"finished": len(got), "identical": same, "of": len(ref),
                    "median_first_difference": sorted(first_diff)[len(first_diff) // 2]
                    if first_diff else None}

        # Default kernels, then --batch-invariant (both runs of a pair in the same mode).
        for mode, extra in (("default", []), ("batch_invariant", ["--batch-invariant"])):
            full = run_sluice(args.sluice, paths["0.6b"], f"{w}/t.jsonl", f"{w}/f_{mode}.out",
                              base + extra)
            q = run_sluice(args.sluice, paths["0.6b"], f"{w}/t.jsonl", f"{w}/q_{mode}.out",
                           base + extra + ["--kv-cache-memory", str(quarter)])
            res[mode] = {"unconstrained": full, "quarter_kv": q,
                         **compare(f"{w}/f_{mode}.out", f"{w}/q_{mode}.out")}
        return res

    section("preempt", preempt)

    def cpu():
        prompt = [rng.randrange(1000, 100000) for _ in range(128)]
        path32 = paths["0.6b"]
        write_jsonl(f"{w}/c.jsonl", [{"prompt_token_ids": prompt, "max_tokens": 32,
                                      "temperature": 0, "ignore_eos": True}])
        sl = run_sluice(args.sluice, path32, f"{w}/c.jsonl", f"{w}/c.out",
                        ["--device", "cpu", "--threads", "2", "--dtype", "float32",
                         "--max-model-len", "512", "--kv-cache-memory", str(1 << 30)],
                        cpus="0,1")
        r = subprocess.run(["taskset", "-c", "0,1", "python3", __file__, "--hf-cpu", path32,
                            json.dumps(prompt)], capture_output=True, text=True)
        hf = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {
            "error": r.stderr[-2000:]}
        res = {"sluice": sl, "hf": hf, "speedup": hf.get("ms_per_token", 0) / sl["itl_p50_ms"]}
        # --cpu-variants 'name:dtype[:ENV=V,...];...': further sluice runs on the same cores
        # (e.g. bf16 with a forced linear path), each against the same HF fp32 figure.
        for v in [v for v in args.cpu_variants.split(";") if v]:
            name, dtype, *envs = v.split(":")
            e = dict(os.environ)
            for env in envs:
                e.update(kv.split("=", 1) for kv in env.split(",") if kv)
            try:
                x = run_sluice(args.sluice, path32, f"{w}/c.jsonl", f"{w}/c_{name}.out",
                               ["--device", "cpu", "--threads", "2", "--dtype", dtype,
                                "--max-model-len", "512", "--kv-cache-memory", str(1 << 30)],
                               env=e, cpus="0,1")
                res[name] = {"itl_p50_ms": x["itl_p50_ms"], "itl_p99_ms": x["itl_p99_ms"],
                             "speedup": hf.get("ms_per_token", 0) / x["itl_p50_ms"]}
            except Exception as ex:  # noqa: BLE001 - one variant failing keeps the others
                res[name] = {"error": str(ex)[-1500:]}
        return res

    section("cpu", cpu)
    log(json.dumps(res, indent=1)[:6000])


if __name__ == "__main__":
    import sys
    if len(sys.argv) >= 2 and sys.argv[1] == "--hf-cpu":
        print(json.dumps(hf_cpu_decode(sys.argv[2], json.loads(sys.argv[3]), 32)))
    else:
        main()
