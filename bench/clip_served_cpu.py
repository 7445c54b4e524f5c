#!/usr/bin/env python3
"""The served image path's CPU cost per photo, on this machine, without a GPU or PIL.

Distinct camera-like 4032x3024 JPEGs of ~3.3 MB (`jpeg_decode_bench --make`, then copies
with a numbered comment segment: distinct to the content hash, the same decode work) served
from loopback (hf_clip.py's image host), `sluice serve` on a tiny random CLIP with a
336-pixel CLIPImageProcessor (so fetching, hashing, decoding and pre-processing dominate),
`--image-decode fast`, feature cache off, `/v1/rerank` requests of 10 photo URLs through
`sluice bench`. Prints img/s, p50, and the server's CPU time and page faults per photo
(from /proc: steadier than img/s on a shared machine).

  python3 bench/clip_served_cpu.py [--sluice build/release/sluice] [--concurrency 16]
      [--requests 40] [--photos 200] [--repeat 1] [-- extra sluice serve flags]
"""
import argparse
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "peers"))
import hf_clip as H  # noqa: E402


def photos(out, bench_bin, n, distinct=20):
    base = os.path.join(out, "base")
    os.makedirs(base, exist_ok=True)
    for i in range(distinct):
        p = os.path.join(base, f"{i:04d}.jpg")
        if not os.path.exists(p):
            subprocess.run([bench_bin, "--make", p, "--seed", str(i), "--reps", "0"],
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    d = os.path.join(out, f"photos{n}")
    os.makedirs(d, exist_ok=True)
    for i in range(n):
        p = os.path.join(d, f"{i:04d}.jpg")
        if os.path.exists(p):
            continue
        b = open(os.path.join(base, f"{i % distinct:04d}.jpg"), "rb").read()
        com = b"variant %d" % i
        seg = b"\xff\xfe" + (len(com) + 2).to_bytes(2, "big") + com
        open(p, "wb").write(b[:2] + seg + b[2:])
    return d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default="build/release/sluice")
    ap.add_argument("--jpeg-bench", default="build/release/jpeg_decode_bench")
    ap.add_argument("--out", default="/tmp/sluice-clip-cpu")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--photos", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("serve_args", nargs="*")
    a = ap.parse_args()
    model = H.build_model(os.path.join(a.out, "tiny336"), H.TINY_336, 0)
    d = photos(a.out, a.jpeg_bench, a.photos)
    names = sorted(os.listdir(d))
    port, hosts = H.start_image_host(d, 2)
    urls = [f"http://127.0.0.1:{port}/{x}" for x in names]
    bodies = os.path.join(a.out, "bodies.jsonl")
    H.write_bodies(bodies, urls, len(urls) // 10)
    try:
        for _ in range(a.repeat):
            sport = H.free_port()
            logp = os.path.join(a.out, "serve.log")
            cmd = [a.sluice, "serve", "--model", model, "--port", str(sport), "--device", "cpu",
                   "--threads", "1", "--allow-private-media-urls", "--image-cache-mb", "0",
                   "--image-workers", "32", "--image-fetch-concurrency", "10",
                   "--image-decode", "fast", *a.serve_args]
            # The tiny model's CPU forward must not spin OpenMP threads against the decoders
            # (on a GPU there is no CPU forward).
            srv = subprocess.Popen(cmd, stdout=open(logp, "w"), stderr=subprocess.STDOUT,
                                   env=dict(os.environ, OMP_WAIT_POLICY="passive"))
            try:
                H.wait_ready(srv, sport, logp, timeout_s=60)
                H.run_bench(a.sluice, sport, bodies, 2, 4, endpoint="/v1/rerank")  # warm-up
                u0, s0, f0 = H.proc_times(srv.pid)
                t0 = time.time()
                r = H.run_bench(a.sluice, sport, bodies, a.concurrency, a.requests,
                                endpoint="/v1/rerank")
                wall = time.time() - t0
                u1, s1, f1 = H.proc_times(srv.pid)
                n = a.requests * 10
                print(f"{os.path.basename(a.sluice)}: c={a.concurrency} {r['docs_per_s']:.1f} img/s, "
                      f"p50 {r['p50_ms']:.0f} ms, errors none {r['errors_none']}; per photo: CPU "
                      f"{1e3 * (u1 - u0 + s1 - s0) / n:.1f} ms (user {1e3 * (u1 - u0) / n:.1f}, "
                      f"system {1e3 * (s1 - s0) / n:.1f}), {(f1 - f0) / n:.0f} page faults; "
                      f"{wall:.1f} s", flush=True)
            finally:
                srv.send_signal(signal.SIGTERM)
                srv.wait(timeout=60)
    finally:
        for p in hosts:
            p.terminate()


if __name__ == "__main__":
    main()
