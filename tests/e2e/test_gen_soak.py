"""Generation soak (label slow): 64 clients, streaming and not, mixed lengths, some clients
disconnecting mid-stream and some sending bad requests, for --seconds (default 60) against
the qwen3 generation fixture: afterwards no KV blocks or requests are left, and RSS after
the run is within 5% of RSS after a warm-up run of the same mix."""
import json
import os
import random
import socket
import sys
import threading
import time

import harness
from harness import Server

SECONDS = 60
if "--seconds" in sys.argv:
    i = sys.argv.index("--seconds")
    SECONDS = float(sys.argv[i + 1])
    del sys.argv[i:i + 2]
args = harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(args.fixtures, "generation", "qwen3", "model"))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def one(s, rng, stats):
    kind = rng.random()
    body = {"prompt": [rng.randrange(5, 5000) for _ in range(rng.randrange(1, 200))],
            "max_tokens": rng.randrange(1, 64), "temperature": rng.choice([0, 0.8]),
            "seed": rng.randrange(1 << 30), "n": rng.choice([1, 1, 2]), "ignore_eos": True}
    if kind < 0.05:
        body["temperature"] = -1  # a bad request: 400
        st, _, _ = s.post("/v1/completions", body)
        stats["bad" if st == 400 else "errors"] += 1
        return
    if kind < 0.5:
        st, _, b = s.post("/v1/completions", body)
        stats["ok" if st == 200 else "errors"] += 1
        return
    body["stream"] = True
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=60)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    if kind < 0.6:  # goes away after the first bytes
        sock.recv(64)
        sock.close()
        stats["dropped"] += 1
        return
    buf = b""
    while not buf.endswith(b"data: [DONE]\n\n\r\n0\r\n\r\n"):
        more = sock.recv(65536)
        if not more:
            break
        buf += more
    sock.close()
    stats["ok" if b"data: [DONE]" in buf else "errors"] += 1


def run(s, seconds, seed):
    stats = {"ok": 0, "bad": 0, "dropped": 0, "errors": 0}
    lock = threading.Lock()
    deadline = time.time() + seconds

    def worker(t):
        rng = random.Random(seed * 1000 + t)
        local = {k: 0 for k in stats}
        while time.time() < deadline:
            try:
                one(s, rng, local)
            except Exception:  # noqa: BLE001
                local["errors"] += 1
        with lock:
            for k in stats:
                stats[k] += local[k]

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return stats


def settle(s):
    for _ in range(100):
        m = s.metrics()
        if m.get('sluice_kv_cache_blocks_in_use{model="model",version="1"}') == 0 and \
                m.get('sluice_num_requests{model="model",version="1"}') == 0:
            return m
        time.sleep(0.1)
    return s.metrics()


# A KV cache small enough that the warm-up touches all of it (a fresh block is first-touch
# memory, not growth).
with Server(MODEL, "--max-queue-depth", "1024", "--kv-cache-memory", str(32 << 20)) as s:
    warm = run(s, max(5.0, SECONDS / 6), 1)
    settle(s)
    before = rss_kb(s.proc.pid)
    stats = run(s, SECONDS, 2)
    m = settle(s)
    after = rss_kb(s.proc.pid)
    print(f"warm-up {warm}; run {stats}; RSS {before} -> {after} kB", flush=True)
    c.check(stats["errors"] == 0, f"errors: {stats}")
    c.check(stats["ok"] > 100 and stats["dropped"] > 0 and stats["bad"] > 0, f"mix: {stats}")
    c.check(m.get('sluice_kv_cache_blocks_in_use{model="model",version="1"}') == 0, "no KV blocks left")
    c.check(m.get('sluice_num_requests{model="model",version="1"}') == 0, "no requests left")
    c.check(after <= before * 1.05, f"RSS grew {before} -> {after} kB (> 5%)")
c.finish("e2e_gen_soak")
