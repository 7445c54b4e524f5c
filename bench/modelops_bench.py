#!/usr/bin/env python3
"""Model operations figures of docs/benchmarks.md ("Model operations"), on the demo reranker:

  switch   p99 latency of /v1/rerank at concurrency 16 while the default version switches
           every --every seconds, against the same run with no switch: (a) default switches
           between two loaded versions (version policy all: the switch alone), (b) red-black
           loads (latest 1: each switch loads and warms the other version, then the old one
           drains and unloads, on the same cores as the traffic)
  protocol throughput of the same synthetic rerank workload (token ids) through /v1/rerank,
           KServe v2 HTTP /v2/models/rr/infer and KServe v2 gRPC ModelInfer

The server runs with --threads 1 (tests/e2e/harness.py). Each figure is one `sluice bench` run (C++ load generator, keep-alive HTTP or one gRPC channel
per client); runs alternate to spread the noise of a shared machine.

  python3 bench/modelops_bench.py --sluice build/release/sluice [--duration 15] [--reps 2]
      [--only switch|protocol] [--policies all,latest] [--switch-to other|same]
      [--window 0.1] [--keep-logs] [--client SLUICE]

--only runs one half; the switching runs log every request (`sluice bench --latency-log`)
and report the requests in flight within --window seconds of a switch call apart from the
others (where a switch's cost lands, less noisy than whole-run p99s); --switch-to same calls
the switch with the version already the default (the control path alone); --client runs the
load from another binary (an older --sluice lacks --latency-log). The summary prints gRPC /
HTTP per rep and switching - steady p99 per rep.
"""
import argparse
import bisect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))
import harness  # noqa: E402

RERANKER = os.path.join(ROOT, "models", "demo-reranker")


def bench(sluice, port, duration, conc, extra):
    cmd = [sluice, "bench", "--port", str(port), "--duration", str(duration), "--concurrency",
           str(conc), "--documents", "8", "--doc-tokens", "24", "--query-tokens", "8",
           "--vocab", "400"] + extra
    p = subprocess.run(cmd, capture_output=True, text=True)
    out = p.stdout
    m = re.search(r"requests: (\d+) ok, (\d+) total in ([\d.]+) s: ([\d.]+) req/s", out)
    lat = re.search(r"latency: p50 ([\d.]+) ms, p95 ([\d.]+) ms, p99 ([\d.]+) ms", out)
    errs = re.search(r"errors: (.*)", out)
    return {"cmd": " ".join(cmd), "req_s": float(m.group(4)) if m else None,
            "p50": float(lat.group(1)) if lat else None, "p99": float(lat.group(3)) if lat else None,
            "errors": errs.group(1) if errs else out + p.stderr}


def post(s, path, body):
    st, _, r = s.post(path, body)
    return st


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sluice", default=os.path.join(ROOT, "build", "release", "sluice"))
    p.add_argument("--client", default=None,
                   help="the sluice binary whose `sluice bench` sends the load (default: "
                   "--sluice; an older --sluice may lack --latency-log)")
    p.add_argument("--duration", type=float, default=15)
    p.add_argument("--every", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--only", choices=("all", "switch", "protocol"), default="all",
                   help="switch: the steady/switching runs only; protocol: the three protocol "
                   "runs only (on the latest-1 server)")
    p.add_argument("--keep-logs", action="store_true",
                   help="keep the switching runs' --latency-log files and switch times")
    p.add_argument("--window", type=float, default=0.1,
                   help="seconds after a switch call whose requests count as near it")
    p.add_argument("--policies", default="all,latest",
                   help="version policies of the switch runs: all (default switches between two "
                   "loaded versions), latest (red-black loads)")
    p.add_argument("--switch-to", choices=("other", "same"), default="other",
                   help="same: each switch call names the version already the default (the "
                   "control path without a change of version, to tell its cost from the "
                   "version change's)")
    p.add_argument("--server-arg", action="append", default=[],
                   help="an extra `sluice serve` argument (repeatable), e.g. "
                   "--server-arg=--switch-placement-ms=0")
    a = p.parse_args()
    a.client = a.client or a.sluice
    harness.ARGS = argparse.Namespace(sluice=a.sluice, fixtures=os.path.join(ROOT, "tests",
                                                                            "fixtures"))
    results = {}
    policies = ("latest",) if a.only == "protocol" else tuple(a.policies.split(","))
    for policy in policies:
        repo = tempfile.mkdtemp(prefix="sluice-bench-")
        try:
            os.makedirs(os.path.join(repo, "rr"))
            for v in (1, 2):
                shutil.copytree(RERANKER, os.path.join(repo, "rr", str(v)))
            vp = {"all": {}} if policy == "all" else {"latest": {"num_versions": 1}}
            with open(os.path.join(repo, "rr", "model.json"), "w") as f:
                json.dump({"version_policy": vp}, f)
            with harness.Server(None, "--model-repository", repo, "--model-control", "explicit",
                                "--load-model", "rr", "--grpc-port", "0", *a.server_arg) as s:
                gport = next(int(l.rsplit(":", 1)[1]) for l in s.log if "gRPC (KServe v2)" in l)
                bench(a.client, s.port, 2, a.concurrency, ["--endpoint", "/v1/rerank"])  # warm
                for rep in range(a.reps):
                    if a.only != "protocol":
                        switch_runs(a, s, policy, results)
                    if policy == "latest" and a.only != "switch":
                        protocol_runs(a, s, gport, results)
        finally:
            shutil.rmtree(repo, ignore_errors=True)
    report(results)


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))] if v else None


# Latencies of the switching runs by the time their request started after the last switch
# call (policy -> bin -> ms), pooled over reps: a switch's cost shows as a shift of the first
# bin against the last, which one stall somewhere in a run does not fake.
SINCE_BINS = ((0.0, 0.05, "0-50 ms"), (0.05, 0.1, "50-100 ms"), (0.1, float("inf"), ">= 100 ms"))
SINCE = {}


def since_switch(log, starts, policy):
    starts = sorted(starts)
    bins = SINCE.setdefault(policy, {label: [] for _, _, label in SINCE_BINS})
    with open(log) as f:
        for line in f:
            t0, lat = map(float, line.split())
            i = bisect.bisect_right(starts, t0) - 1
            if i < 0:
                continue
            dt = t0 - starts[i]
            for lo, hi, label in SINCE_BINS:
                if lo <= dt < hi:
                    bins[label].append(lat * 1e3)


def near_switches(log, windows, after):
    """The requests of a --latency-log that were in flight during a switch call or up to
    `after` seconds after it, against the others: where the switch's cost lands."""
    near, other, slow = [], [], []
    with open(log) as f:
        for line in f:
            t0, lat = map(float, line.split())
            hits = [(a, b) for a, b in windows if t0 <= b + after and t0 + lat >= a]
            (near if hits else other).append(lat * 1e3)
            if hits:
                a, b = hits[0]
                slow.append((round(lat * 1e3, 2), round((t0 - a) * 1e3, 2), round((b - a) * 1e3, 2)))
    slow.sort(reverse=True)
    # The slowest near requests as (latency, start after the switch call began, that call's
    # duration), ms: a slow request inside a slow call points at the server's switch path.
    return {"near_n": len(near), "near_p50": pct(near, 0.5), "near_p99": pct(near, 0.99),
            "near_max": max(near) if near else None, "other_p99": pct(other, 0.99),
            "other_n": len(other), "near_slowest": slow[:5]}


def switch_runs(a, s, policy, results):
    r = bench(a.client, s.port, a.duration, a.concurrency, ["--endpoint", "/v1/rerank"])
    results.setdefault(f"{policy}: steady", []).append(r)
    stop = threading.Event()
    switches = []
    switch_times = []

    def switcher():
        v = 2  # the default after the load: the newest
        while not stop.wait(a.every):
            if a.switch_to == "other":
                v = 3 - v
            t0 = time.time()
            st = post(s, "/v2/repository/models/rr/default", {"version": v})
            switches.append((st, time.time() - t0))
            switch_times.append((time.time(), time.time() - t0))

    t = threading.Thread(target=switcher)
    log = tempfile.mktemp(prefix="sluice-latency-")
    t.start()
    r = bench(a.client, s.port, a.duration, a.concurrency,
              ["--endpoint", "/v1/rerank", "--latency-log", log])
    stop.set()
    t.join()
    r.update(near_switches(log, [(t1 - d, t1) for t1, d in switch_times], a.window))
    since_switch(log, [t1 - d for t1, d in switch_times], policy)
    if a.keep_logs:
        with open(log + ".switches", "w") as f:
            for t1, d in switch_times:
                f.write(f"{t1 - d:.6f} {t1:.6f}\n")
        print(f"latency log {log} (+ .switches)", file=sys.stderr)
    else:
        os.unlink(log)
    r["switches"] = len(switches)
    r["switch_failures"] = sum(st != 200 for st, _ in switches)
    r["switch_seconds_mean"] = (sum(d for _, d in switches) / len(switches)
                                if switches else None)
    r["switch_seconds_max"] = max((d for _, d in switches), default=None)
    results.setdefault(f"{policy}: switching", []).append(r)
    post(s, "/v2/repository/models/rr/load", {})


def protocol_runs(a, s, gport, results):
    for proto, extra in (("/v1/rerank", ["--endpoint", "/v1/rerank"]),
                         ("KServe HTTP", ["--endpoint", "/v2/models/rr/infer"]),
                         ("KServe gRPC", None)):
        if extra is None:
            r = bench(a.client, gport, a.duration, a.concurrency, ["--grpc-model", "rr"])
        else:
            r = bench(a.client, s.port, a.duration, a.concurrency, extra)
        results.setdefault("protocol: " + proto, []).append(r)


def report(results):
    print(json.dumps(results, indent=1))
    print()
    for k, runs in results.items():
        rs = [r["req_s"] for r in runs]
        p99 = [r["p99"] for r in runs]
        extra = ""
        if "switches" in runs[0]:
            extra = (f", {sum(r['switches'] for r in runs)} switches "
                     f"({sum(r['switch_failures'] for r in runs)} failed, mean "
                     f"{sum(r['switch_seconds_mean'] or 0 for r in runs) / len(runs):.3f} s); "
                     f"near a switch: n {[r['near_n'] for r in runs]} p50 "
                     f"{[r['near_p50'] for r in runs]} p99 {[r['near_p99'] for r in runs]} max "
                     f"{[r['near_max'] for r in runs]} ms; the others' p99 "
                     f"{[r['other_p99'] for r in runs]} ms; slowest switch call "
                     f"{[round((r['switch_seconds_max'] or 0) * 1e3, 1) for r in runs]} ms; "
                     f"slowest near requests (ms, started ms after the call began, call ms) "
                     f"{[r['near_slowest'][:3] for r in runs]}")
        print(f"{k:28s} req/s {rs}  p50 {[r['p50'] for r in runs]} ms  p99 {p99} ms  "
              f"errors {[r['errors'] for r in runs]}{extra}")
    for policy, bins in SINCE.items():
        print(f"{policy}: switching runs by start time after the last switch call (all reps):")
        for _, _, label in SINCE_BINS:
            v = bins[label]
            print(f"  {label:10s} n {len(v):6d}  " +
                  "  ".join(f"p{int(q * 100)} {pct(v, q):.2f}" for q in (0.5, 0.9, 0.95, 0.99)
                            if v) + " ms")
    rer = results.get("protocol: /v1/rerank")
    grpc = results.get("protocol: KServe gRPC")
    if rer and grpc:
        ratios = sorted(g["req_s"] / h["req_s"] for g, h in zip(grpc, rer)
                        if g["req_s"] and h["req_s"])
        if ratios:
            print(f"gRPC / HTTP per rep: {[round(x, 3) for x in ratios]}, median "
                  f"{ratios[len(ratios) // 2]:.3f}")
    for policy in ("all", "latest"):
        st, sw = results.get(f"{policy}: steady"), results.get(f"{policy}: switching")
        if st and sw:
            d = sorted(b["p99"] - a["p99"] for a, b in zip(st, sw) if a["p99"] and b["p99"])
            if d:
                print(f"{policy}: switching p99 - steady p99 per rep: {[round(x, 1) for x in d]}"
                      f" ms, median {d[len(d) // 2]:.1f} ms")


if __name__ == "__main__":
    main()
