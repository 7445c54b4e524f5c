"""Helpers the GPU benchmark scripts share to drive a running `sluice serve`: wait for
readiness, run `sluice bench` and parse its summary, read the engine counters of /metrics.
"""
import re
import subprocess
import time
import urllib.request


def wait_ready(srv, port, log_path, timeout_s=120.0):
    """Waits for GET /ready = 200; raises if the server process exits or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=1) as r:
                if r.status == 200:
                    return
        except Exception:
            pass
        if srv.poll() is not None:
            raise RuntimeError("server exited:\n" + open(log_path).read()[-3000:])
        time.sleep(0.1)
    raise RuntimeError("server not ready")


def run_bench(sluice, port, bodies, concurrency, requests, endpoint="/classify"):
    """`sluice bench` against the server: throughput, latency percentiles, whether every
    request succeeded, and the tool's output (`text`)."""
    r = subprocess.run([sluice, "bench", "--port", str(port), "--endpoint", endpoint,
                        "--input", bodies, "--concurrency", str(concurrency), "--requests",
                        str(requests)], capture_output=True, text=True)
    txt = r.stdout + r.stderr
    m = re.search(r"([\d.]+) req/s, ([\d.]+) documents/s", txt)
    lat = re.search(r"p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms", txt)
    if not m or not lat:
        raise RuntimeError("sluice bench failed:\n" + txt[-2000:])
    return {"req_per_s": float(m.group(1)), "docs_per_s": float(m.group(2)),
            "p50_ms": float(lat.group(1)), "p95_ms": float(lat.group(2)),
            "p99_ms": float(lat.group(3)), "errors_none": "errors: none" in txt, "text": txt}


def engine_metrics(port):
    """The server's unlabelled engine counters from /metrics (name -> value)."""
    names = ("sluice_batches_total", "sluice_batch_size_sum", "sluice_batch_tokens_sum",
             "sluice_engine_busy_seconds_total")
    vals = {}
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in names:
                vals[parts[0]] = float(parts[1])
    return vals
