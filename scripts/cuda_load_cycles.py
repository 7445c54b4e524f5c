#!/usr/bin/env python3
"""CUDA device memory and host RSS over repeated load/unload cycles of `sluice serve --device
cuda` driven through the repository API (issue 16: "100 load/unload cycles -> RSS growth < 5%
and device memory back to its start"). Standard library + nvidia-smi only.

For each model (default: the demo reranker and the demo chat model of models/), a repository
holding it as version 1 is served with --model-control explicit; after warm-up cycles the
server process's device memory (nvidia-smi --query-compute-apps) and RSS are recorded with the
model unloaded, then N cycles of load -> one request -> unload run, sampling every 10; the end
state (unloaded) is compared with the start. Writes $OUT/cuda_load_cycles.json and .csv and
prints a summary; exits 1 if a check fails.

  source scripts/device-unpack   # (with a device pack) sluice on PATH
  python3 scripts/cuda_load_cycles.py --sluice sluice --out "$OUT"
  python3 scripts/cuda_load_cycles.py --model /models/Qwen3-Reranker-0.6B --task score --out "$OUT"
"""
import argparse
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))


def args_():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", default="sluice")
    p.add_argument("--out", default=os.environ.get("OUT", "/tmp/cuda-load-cycles"))
    p.add_argument("--model", action="append",
                   help="model directory (repeatable; default: models/demo-reranker and "
                        "models/demo-chat)")
    p.add_argument("--task", default=None, help="--task for every model (default: inferred)")
    p.add_argument("--cycles", type=int, default=100)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tolerance-mib", type=float, default=2.0,
                   help="device memory end vs start allowed difference")
    p.add_argument("extra", nargs="*", help="extra sluice serve flags (after --)")
    return p.parse_args()


def device_mib(pid):
    """The process's used device memory (MiB) from nvidia-smi, and the device total used
    (-1, -1 without nvidia-smi: a CPU dry run of this script)."""
    if shutil.which("nvidia-smi") is None:
        return -1.0, -1.0
    q = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits"], capture_output=True, text=True)
    proc = 0.0
    for line in q.stdout.splitlines():
        parts = [x.strip() for x in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid):
            proc += float(parts[1])
    t = subprocess.run(["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True)
    total = float(t.stdout.split()[0]) if t.stdout.split() else -1
    return proc, total


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


class Server:
    def __init__(self, cmd):
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.log, self.port = [], None
        ready = threading.Event()

        def pump():
            for line in self.proc.stdout:
                self.log.append(line)
                m = re.search(r"ready: listening on http://[\d.]+:(\d+)", line)
                if m:
                    self.port = int(m.group(1))
                    ready.set()
            ready.set()

        threading.Thread(target=pump, daemon=True).start()
        if not ready.wait(600) or self.port is None:
            self.stop()
            raise RuntimeError("server did not start:\n" + "".join(self.log[-50:]))

    def post(self, path, body):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=600)
        c.request("POST", path, body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        data = r.read()
        c.close()
        return r.status, data

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def request_for(task):
    if task == "generate":
        return "/v1/completions", {"model": "m", "prompt": "Where do salmon swim?",
                                   "max_tokens": 4, "temperature": 0}
    if task == "embed":
        return "/v1/embeddings", {"model": "m", "input": ["salmon swim up the river"]}
    if task == "classify":
        return "/classify", {"model": "m", "input": ["salmon swim up the river"]}
    return "/v1/rerank", {"model": "m", "query": "How do salmon swim?",
                          "documents": ["Salmon swim up the river.", "Traders sell shares."]}


def run_model(a, model_dir, results):
    repo = tempfile.mkdtemp(prefix="sluice-cycles-")
    os.makedirs(os.path.join(repo, "m"))

    def link_or_copy(src, dst):  # a version may not link out of the repository: hard links
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(os.path.abspath(model_dir), os.path.join(repo, "m", "1"),
                    copy_function=link_or_copy)
    cmd = [a.sluice, "serve", "--model-repository", repo, "--model-control", "explicit",
           "--port", "0", "--device", a.device] + (["--task", a.task] if a.task else []) + a.extra
    s = Server(cmd)
    rec = {"model": model_dir, "command": " ".join(cmd), "samples": []}
    try:
        ok, err = True, []
        task = None

        def cycle():
            nonlocal task
            st, body = s.post("/v2/repository/models/m/load", {})
            if st != 200:
                return f"load: {st} {body[:300]!r}"
            if task is None:
                c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
                c.request("GET", "/v2/models/m")
                task = json.loads(c.getresponse().read()).get("task")
                c.close()
            route, body = request_for(task)
            st, resp = s.post(route, body)
            if st != 200:
                return f"request {route}: {st} {resp[:300]!r}"
            st, body = s.post("/v2/repository/models/m/unload", {})
            if st != 200:
                return f"unload: {st} {body[:300]!r}"
            return None

        for _ in range(a.warmup):
            e = cycle()
            if e:
                raise RuntimeError(e)
        time.sleep(0.5)
        d0, t0 = device_mib(s.proc.pid)
        r0 = rss_kb(s.proc.pid)
        rec["samples"].append({"cycle": 0, "device_mib": d0, "device_total_mib": t0, "rss_kb": r0})
        t_start = time.time()
        for i in range(1, a.cycles + 1):
            e = cycle()
            if e:
                err.append(f"cycle {i}: {e}")
                ok = False
                break
            if i % 10 == 0 or i == a.cycles:
                d, t = device_mib(s.proc.pid)
                rec["samples"].append({"cycle": i, "device_mib": d, "device_total_mib": t,
                                       "rss_kb": rss_kb(s.proc.pid)})
        rec["seconds_per_cycle"] = (time.time() - t_start) / max(1, a.cycles)
        time.sleep(0.5)
        d1, t1 = device_mib(s.proc.pid)
        r1 = rss_kb(s.proc.pid)
        rec["end"] = {"device_mib": d1, "device_total_mib": t1, "rss_kb": r1}
        rec["task"] = task
        rec["device_delta_mib"] = d1 - d0
        rec["rss_growth"] = (r1 - r0) / r0 if r0 > 0 else None
        rec["device_ok"] = abs(d1 - d0) <= a.tolerance_mib
        rec["rss_ok"] = rec["rss_growth"] is not None and rec["rss_growth"] < 0.05
        rec["errors"] = err
        rec["ok"] = ok and rec["device_ok"] and rec["rss_ok"]
    finally:
        s.stop()
        rec["log_tail"] = "".join(s.log[-20:])
        shutil.rmtree(repo, ignore_errors=True)
    results.append(rec)


def main():
    a = args_()
    os.makedirs(a.out, exist_ok=True)
    models = a.model or [os.path.join(ROOT, "models", "demo-reranker"),
                         os.path.join(ROOT, "models", "demo-chat")]
    results = []
    for m in models:
        try:
            run_model(a, m, results)
        except Exception as e:  # noqa: BLE001 - recorded, the other models still run
            results.append({"model": m, "ok": False, "errors": [str(e)]})
    gpu = "no nvidia-smi"
    if shutil.which("nvidia-smi"):
        gpu = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                              "--format=csv,noheader"], capture_output=True, text=True).stdout.strip()
    out = {"gpu": gpu, "cycles": a.cycles, "warmup": a.warmup, "results": results}
    with open(os.path.join(a.out, "cuda_load_cycles.json"), "w") as f:
        json.dump(out, f, indent=1)
    with open(os.path.join(a.out, "cuda_load_cycles.csv"), "w") as f:
        f.write("model,cycle,device_mib,device_total_mib,rss_kb\n")
        for r in results:
            for smp in r.get("samples", []):
                f.write(f"{os.path.basename(r['model'])},{smp['cycle']},{smp['device_mib']},"
                        f"{smp['device_total_mib']},{smp['rss_kb']}\n")
    print("GPU:", gpu)
    for r in results:
        print(f"{os.path.basename(r['model'])}: ok={r.get('ok')} task={r.get('task')} "
              f"device {r.get('samples', [{}])[0].get('device_mib')} -> "
              f"{r.get('end', {}).get('device_mib')} MiB (delta {r.get('device_delta_mib')}), "
              f"RSS growth {r.get('rss_growth')}, {r.get('seconds_per_cycle')} s/cycle "
              f"{r.get('errors') or ''}")
    sys.exit(0 if all(r.get("ok") for r in results) else 1)


if __name__ == "__main__":
    main()
