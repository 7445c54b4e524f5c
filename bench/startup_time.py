#!/usr/bin/env python3
"""Start-up time of `sluice serve` to /ready (issue 16 item 6): a 0.6B bf16 model directory,
the same as a .tar through the model cache (miss, then hits), CUDA graphs included."""
import json, os, subprocess, sys, tarfile, time, urllib.request, socket

sluice, model, out = sys.argv[1], sys.argv[2], sys.argv[3]
work = "/tmp/startup"
os.makedirs(work, exist_ok=True)
tar = os.path.join(work, "qwen3-0.6b.tar")
if not os.path.exists(tar):
    with tarfile.open(tar, "w") as t:
        t.add(model, arcname="qwen3-0.6b")
res = {"tar_bytes": os.path.getsize(tar)}

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def start(name, args):
    port = free_port()
    t0 = time.perf_counter()
    p = subprocess.Popen([sluice, "serve", "--port", str(port), "--device", "cuda",
                          "--max-model-len", "2048", *args], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    ready = None
    while time.perf_counter() - t0 < 120:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as r:
                if r.status == 200:
                    ready = time.perf_counter() - t0
                    break
        except Exception:
            pass
        if p.poll() is not None:
            break
        time.sleep(0.02)
    p.terminate()
    try:
        log = p.communicate(timeout=30)[0]
    except subprocess.TimeoutExpired:
        p.kill(); log = p.communicate()[0]
    lines = [l for l in log.splitlines() if "pulled" in l or "cached" in l or "ready" in l
             or "graph" in l.lower() or "loaded" in l]
    res[name] = {"ready_s": ready, "log": lines[-8:]}
    print(name, ready, flush=True)

cache = os.path.join(work, "cache")
subprocess.run(["rm", "-rf", cache])
start("directory_1", ["--model", model])
start("directory_2", ["--model", model])
start("cache_miss", ["--model", "q=" + tar, "--model-cache", cache])
start("cache_hit_1", ["--model", "q=" + tar, "--model-cache", cache])
start("cache_hit_2", ["--model", "q=" + tar, "--model-cache", cache])
json.dump(res, open(out, "w"), indent=1)
