"""Model operations (docs/model-ops.md): a model repository with several names and versions
in one server, routing by `model` ("name", "name:version") and KServe paths, metadata and
404s naming what is served, the repository API (index, load with a config override,
unload, default) with idempotency, failure isolation and path-traversal refusal, red-black
switches and rollback under concurrent load (concurrency 16: no failed request, no answer
from a version that was not ready), versioned side-by-side serving, metrics labels, and
100 load/unload cycles without memory growth."""
import json
import os
import shutil
import tempfile
import threading
import time

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RERANKER = os.path.join(ROOT, "models", "demo-reranker")
CHAT = os.path.join(ROOT, "models", "demo-chat")

QUERY = "How do salmon swim up the river?"
DOCS = ["Traders sell shares at the busy market.",
        "Salmon swim up the cold river every spring."]
V1_SCORE = 0.99998975  # the README's score of DOCS[1] (sigmoid of the logit)


def add_version(repo, name, version, src=RERANKER, calibrate=None, corrupt=False):
    d = os.path.join(repo, name, str(version))
    shutil.copytree(src, d)
    if calibrate:  # a distinct version: logits / std before the sigmoid
        with open(os.path.join(d, "sluice.json"), "w") as f:
            json.dump({"calibration": {"mean": [0.0], "std": [calibrate]}}, f)
    if corrupt:  # weights cut short: the load fails
        p = os.path.join(d, "model.safetensors")
        with open(p, "r+b") as f:
            f.truncate(os.path.getsize(p) // 2)
    return d


def rerank(s, model=None, conn=None):
    body = {"query": QUERY, "documents": DOCS}
    if model:
        body["model"] = model
    st, h, r = s.post("/v1/rerank", body, conn=conn)
    score = None
    if st == 200:
        score = {x["index"]: x["relevance_score"] for x in r["results"]}[1]
    return st, h.get("sluice-model-version"), score, r


def version_of_score(score):
    if score is None:
        return None
    return 1 if abs(score - V1_SCORE) < 1e-6 else 2 if 0.99 < score < 0.9999 else 3


class Load:
    """16 clients sending reranks until stopped; every response recorded."""

    def __init__(self, s, n=16, model="rr"):
        self.s, self.stop, self.records, self.lock = s, threading.Event(), [], threading.Lock()
        self.threads = [threading.Thread(target=self.run, args=(model,)) for _ in range(n)]
        for t in self.threads:
            t.start()

    def run(self, model):
        conn = self.s.conn()
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                st, ver, score, body = rerank(self.s, model, conn=conn)
            except Exception as e:  # a dropped connection is a failed request
                st, ver, score, body = -1, None, None, str(e)
                conn = self.s.conn()
            with self.lock:
                self.records.append((t0, time.monotonic(), st, ver, score, body))

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join()
        return self.records


def switch_under_load(s, what, action, expect_before, expect_after):
    load = Load(s)
    time.sleep(0.5)
    t_call = time.monotonic()
    st, _, r = action()
    t_done = time.monotonic()
    time.sleep(0.5)
    recs = load.finish()
    c.check(st == 200, f"{what}: {st} {r}")
    failed = [r for r in recs if r[2] != 200]
    c.check(len(recs) > 100 and not failed,
            f"{what}: {len(recs)} requests, {len(failed)} failed: {failed[:3]}")
    bad = [r for r in recs if r[3] is None or int(r[3]) != version_of_score(r[4])]
    c.check(not bad, f"{what}: header and score disagree: {bad[:3]}")
    early = [r for r in recs if r[1] < t_call and int(r[3] or 0) != expect_before]
    c.check(not early, f"{what}: answers from {expect_after} before the switch: {early[:3]}")
    late = [r for r in recs if r[0] > t_done and int(r[3] or 0) != expect_after]
    c.check(not late, f"{what}: answers from the old version after the switch: {late[:3]}")
    c.check(any(int(r[3]) == expect_after for r in recs if r[3]), f"{what}: new version served")
    return recs


def index(s, **body):
    st, _, r = s.post("/v2/repository/index", body)
    return {(e["name"], e.get("version")): e for e in r} if st == 200 else {}


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    os.makedirs(repo)
    add_version(repo, "rr", 1)
    with open(os.path.join(repo, "rr", "model.json"), "w") as f:
        json.dump({"version_policy": {"latest": {"num_versions": 1}}}, f)
    add_version(repo, "chat", 1, src=CHAT)
    add_version(repo, "pair", 1)
    add_version(repo, "pair", 2, calibrate=4.0)
    with open(os.path.join(repo, "pair", "model.json"), "w") as f:
        json.dump({"version_policy": {"all": {}}, "default_version": 1}, f)
    # Links out of the repository: a name and a version.
    outside = os.path.join(tmp, "outside")
    shutil.copytree(RERANKER, os.path.join(outside, "1"))
    os.symlink(outside, os.path.join(repo, "escape"))
    os.makedirs(os.path.join(repo, "linkver"))
    os.symlink(os.path.join(outside, "1"), os.path.join(repo, "linkver", "1"))

    # --- model-control none: the whole repository loads (the links fail the start) ---
    with tempfile.TemporaryDirectory() as tmp2:
        repo2 = os.path.join(tmp2, "repo")
        add_version(repo2, "a", 1)
        add_version(repo2, "b", 1)
        with Server(None, "--model-repository", repo2) as s:
            st, _, r = s.get("/v1/models")
            c.check(st == 200 and sorted(m["id"] for m in r["data"]) == ["a", "b"],
                    f"control none loads the repository: {r}")
            st, _, r = s.post("/v2/repository/models/a/unload", {})
            c.error_shape(st, r, 403, "control none refuses unload")
            c.check("--model-control explicit" in r["error"]["message"], f"403 says why: {r}")
            st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
            c.error_shape(st, r, 400, "two scoring models, no model named")
            c.check('"a"' in r["error"]["message"] and '"b"' in r["error"]["message"],
                    f"400 names the served models: {r}")

    with Server(None, "--model-repository", repo, "--model-control", "explicit",
                "--load-model", "rr", "--load-model", "chat", "--load-model", "pair") as s:
        c.check(any("switch placement hold 150 ms" in l for l in s.log),
                "start-up logs the switch placement hold (--switch-placement-ms default)")
        # --- listing and metadata ---
        st, _, r = s.get("/v1/models")
        ids = {m["id"]: m for m in r.get("data", [])}
        c.check(st == 200 and sorted(ids) == ["chat", "pair", "rr"], f"/v1/models {r}")
        c.check(ids.get("chat", {}).get("task") == "generate" and
                ids.get("rr", {}).get("task") == "score", f"tasks listed: {ids}")
        c.check([v["version"] for v in ids.get("pair", {}).get("versions", [])] == ["1", "2"],
                f"versions listed: {ids.get('pair')}")
        st, _, r = s.get("/v2/models/pair")
        c.check(st == 200 and r.get("versions") == ["1", "2"] and r.get("default_version") == "1"
                and r.get("platform") == "sluice", f"/v2/models/pair {r}")
        st, _, r = s.get("/v2/models/pair/versions/2")
        c.check(st == 200 and r.get("versions") == ["2"], f"/v2/models/pair/versions/2 {r}")
        st, _, r = s.get("/v2/models/pair/versions/2/ready")
        c.check(st == 200, f"version ready {st}")
        st, _, r = s.get("/v2/models/pair/versions/7/ready")
        c.check(st == 404, f"unknown version not ready: {st}")
        st, _, r = s.get("/v2/models/nope")
        c.error_shape(st, r, 404, "unknown model metadata")
        c.check('"rr"' in r["error"]["message"] and '"chat"' in r["error"]["message"],
                f"404 names what is served: {r}")
        ix = index(s)
        c.check(ix.get(("rr", "1"), {}).get("state") == "READY", f"index rr: {ix}")
        c.check(("escape", None) in ix and ("linkver", None) in ix, f"index lists names: {ix}")
        ready = index(s, ready=True)
        c.check(all(e.get("state") == "READY" for e in ready.values()) and
                ("escape", None) not in ready, f"index ready only: {ready}")

        # --- routing ---
        st, ver, score, r = rerank(s, "rr")
        c.check(st == 200 and ver == "1" and abs(score - V1_SCORE) < 1e-6,
                f"rerank on rr: {st} {ver} {r}")
        st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
        c.error_shape(st, r, 400, "two scoring models, no model named")
        st, _, r = s.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "Where do salmon swim?"}],
                           "max_tokens": 8, "temperature": 0})
        c.check(st == 200 and r.get("model") == "chat", f"chat without model goes to chat: {r}")
        st, _, r = s.post("/v1/chat/completions",
                          {"model": "chat:1", "max_tokens": 4, "temperature": 0,
                           "messages": [{"role": "user", "content": "Where do salmon swim?"}]})
        c.check(st == 200, f"chat:1 {st} {r}")
        st, _, r = s.post("/tokenize", {"prompt": "salmon"})
        c.error_shape(st, r, 400, "/tokenize with several models and no model")
        st, _, r = s.post("/tokenize", {"prompt": "salmon", "model": "rr"})
        c.check(st == 200 and r.get("count", 0) > 0, f"/tokenize model rr: {r}")
        st, ver, score, r = rerank(s, "pair:2")
        c.check(st == 200 and ver == "2" and version_of_score(score) == 3,
                f"pinned pair:2: {ver} {score}")
        st, ver, score, r = rerank(s, "pair")
        c.check(st == 200 and ver == "1" and abs(score - V1_SCORE) < 1e-6,
                f"pair's default is model.json's default_version 1: {ver} {score}")
        st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "nope"})
        c.error_shape(st, r, 404, "unknown model")
        c.check('"pair" (versions 1, 2; default 1)' in r["error"]["message"],
                f"404 lists names and versions: {r}")
        st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "rr:9"})
        c.error_shape(st, r, 404, "unknown version")
        st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "model": "rr:x"})
        c.error_shape(st, r, 404, "malformed version")
        st, _, r = s.post("/v1/completions", {"model": "rr", "prompt": "salmon"})
        c.check(st == 400 and "generation" in json.dumps(r), f"completions on a scorer: {r}")

        # --- repository API: traversal, malformed input, idempotency ---
        for path in ["/v2/repository/models/../load", "/v2/repository/models/..%2Frr/load",
                     "/v2/repository/models/%2Fetc/load", "/v2/repository/models/.hidden/load",
                     "/v2/repository/models/a..b/load"]:
            st, _, r = s.post(path, {})
            c.check(st in (400, 404) and isinstance(r, dict) and "error" in r,
                    f"{path}: {st} {r}")
        st, _, r = s.post("/v2/repository/models/escape/load", {})
        c.error_shape(st, r, 400, "a name linked out of the repository")
        c.check("out of the repository" in r["error"]["message"], f"says why: {r}")
        st, _, r = s.post("/v2/repository/models/linkver/load", {})
        c.error_shape(st, r, 404, "a version linked out of its directory is not a version")
        st, _, r = s.get("/v2/models/escape")
        c.check(st == 404, "escape not served")
        for body, what in [("{", "bad JSON"), ({"parameters": 3}, "parameters not an object"),
                           ({"parameters": {"config": 3}}, "config not an object"),
                           ({"parameters": {"config": "{\"bogus\": 1}"}}, "unknown config field"),
                           ({"parameters": {"config": {"version_policy": {"latest": {}}}}},
                            "latest without num_versions"),
                           ({"force": True}, "unknown field")]:
            st, _, r = s.post("/v2/repository/models/rr/load", body)
            c.error_shape(st, r, 400, f"load: {what}")
        st, _, r = s.post("/v2/repository/models/rr/default", {})
        c.error_shape(st, r, 400, "default without version")
        st, _, r = s.post("/v2/repository/models/rr/default", {"version": "0"})
        c.error_shape(st, r, 400, "default version 0")
        st, _, r = s.get("/v2/repository/models/rr/load")
        c.check(st == 405, f"GET on load: {st}")
        st, _, r = s.post("/v2/repository/models/nope/load", {})
        c.error_shape(st, r, 404, "load of a name not in the repository")
        st, _, r = s.post("/v2/repository/models/nope/unload", {})
        c.error_shape(st, r, 404, "unload of a name not in the repository")
        before = s.metrics().get('sluice_model_loads_total{model="rr",version="1",result="ok"}')
        for _ in range(2):
            st, _, r = s.post("/v2/repository/models/rr/load", {})
            c.check(st == 200, f"load again is a no-op: {st} {r}")
        m = s.metrics()
        c.check(m.get('sluice_model_loads_total{model="rr",version="1",result="ok"}') == before
                == 1, f"no reload: {before}")

        # --- config override: a load changes the model's limits ---
        st, _, r = s.post("/v2/repository/models/pair/load",
                          {"parameters": {"config": {"max_inputs_per_request": 1,
                                                     "default_version": 2,
                                                     "version_policy": {"specific":
                                                                        {"versions": [2]}}}}})
        c.check(st == 200, f"load with override: {st} {r}")
        st, ver, score, r = rerank(s, "pair")
        c.check(st == 400 and "1" in json.dumps(r), f"override limit applies: {st} {r}")
        st, _, r = s.get("/v2/models/pair")
        c.check(r.get("versions") == ["2"], f"specific [2]: version 1 unloaded: {r}")
        st, _, r = s.post("/v2/repository/models/pair/load", {})
        c.check(st == 200, "load back to model.json")
        st, _, r = s.get("/v2/models/pair")
        c.check(r.get("versions") == ["1", "2"] and r.get("default_version") == "1",
                f"back to all, default 1: {r}")

        # --- versioned: pinned clients side by side while the default moves ---
        results = {}

        def pinned(model):
            conn = s.conn()
            got = [rerank(s, model, conn=conn) for _ in range(40)]
            results[model] = got

        ts = [threading.Thread(target=pinned, args=(m,)) for m in ("pair:1", "pair:2")]
        for t in ts:
            t.start()
        st, _, r = s.post("/v2/repository/models/pair/default", {"version": 2})
        for t in ts:
            t.join()
        c.check(st == 200, f"pair default -> 2: {r}")
        for model, want in (("pair:1", 1), ("pair:2", 3)):
            got = results.get(model, [])
            c.check(len(got) == 40 and all(g[0] == 200 and version_of_score(g[2]) == want
                                           for g in got), f"{model} pinned: {got[:2]}")
        st, ver, _, _ = rerank(s, "pair")
        c.check(ver == "2", f"pair default moved: {ver}")
        st, _, r = s.get("/v2/models/pair")
        c.check(r.get("versions") == ["1", "2"], f"all: both still served: {r}")

        # --- red-black: version 2 of rr arrives, is loaded under load ---
        add_version(repo, "rr", 2, calibrate=2.0)
        switch_under_load(s, "red-black 1 -> 2",
                          lambda: s.post("/v2/repository/models/rr/load", {}), 1, 2)
        st, _, r = s.get("/v2/models/rr")
        c.check(r.get("versions") == ["2"], f"latest 1: version 1 unloaded: {r}")
        ix = index(s)
        c.check(ix.get(("rr", "1"), {}).get("state") == "UNAVAILABLE" and
                ix.get(("rr", "2"), {}).get("state") == "READY", f"index after switch: {ix}")
        # Rollback and roll forward, under load.
        switch_under_load(s, "rollback 2 -> 1",
                          lambda: s.post("/v2/repository/models/rr/default", {"version": 1}), 2, 1)
        st, _, r = s.get("/v2/models/rr")
        c.check(r.get("versions") == ["1"], f"rollback unloads 2: {r}")
        switch_under_load(s, "forward 1 -> 2",
                          lambda: s.post("/v2/repository/models/rr/default", {"version": "2"}),
                          1, 2)
        st, _, r = s.post("/v2/repository/models/rr/default", {"version": 5})
        c.error_shape(st, r, 404, "default to a version not on disk")
        st, ver, _, _ = rerank(s, "rr")
        c.check(ver == "2", f"still 2 after the refused default: {ver}")

        # --- a failed load leaves the serving version untouched ---
        add_version(repo, "rr", 3, corrupt=True)
        load = Load(s, n=4)
        time.sleep(0.2)
        st, _, r = s.post("/v2/repository/models/rr/load", {})
        recs = load.finish()
        c.check(st in (400, 500) and "version 3" in json.dumps(r), f"corrupt load fails: {st} {r}")
        c.check(recs and all(x[2] == 200 and x[3] == "2" for x in recs),
                f"version 2 served throughout: {[x for x in recs if x[2] != 200][:2]}")
        ix = index(s)
        c.check(ix.get(("rr", "3"), {}).get("state") == "UNAVAILABLE" and
                ix.get(("rr", "3"), {}).get("reason"), f"index shows the failure: {ix}")
        c.check(ix.get(("rr", "2"), {}).get("state") == "READY", "2 still ready")
        m = s.metrics()
        c.check(m.get('sluice_model_loads_total{model="rr",version="3",result="error"}') == 1,
                "failed load counted")
        shutil.rmtree(os.path.join(repo, "rr", "3"))

        # --- metrics: model and version labels ---
        m = s.metrics()
        c.check(m.get('sluice_requests_total{model="rr",version="2",route="/v1/rerank",'
                      'code="200"}', 0) > 100, "requests by model and version")
        key = 'sluice_model_default_switches_total{model="rr",version="1"}'
        c.check(m.get(key) == 1, f"switches to 1 counted: {m.get(key)}")
        c.check(m.get('sluice_model_unloads_total{model="rr",version="1"}') == 2,
                "unloads counted")
        c.check(m.get('sluice_model_version_ready{model="pair",version="2"}') == 1,
                "ready gauge")
        c.check(m.get('sluice_model_default_version{model="rr"}') == 2, "default gauge")
        c.check('sluice_batches_total{model="pair",version="1"}' in m, "engine series labelled")
        c.check(m.get('sluice_num_requests{model="chat",version="1"}') == 0,
                "generation series labelled")
        _, _, text = s.get("/metrics")
        helps = [l for l in text.splitlines() if l.startswith("# TYPE sluice_requests_total ")]
        c.check(len(helps) == 1, f"one TYPE line per family: {len(helps)}")

        # --- unload, idempotent; then 100 load/unload cycles ---
        for _ in range(2):
            st, _, r = s.post("/v2/repository/models/pair/unload", {})
            c.check(st == 200, f"unload pair: {st} {r}")
        st, ver, _, r = rerank(s, "pair")
        c.check(st == 404, f"unloaded pair: {st}")
        st, _, r = s.get("/v2/models/pair/ready")
        c.check(st == 404, f"unloaded pair not ready: {st}")

        def cycles(n):
            ok = True
            for _ in range(n):
                a, _, _ = s.post("/v2/repository/models/pair/load", {})
                b = rerank(s, "pair:2")[0]
                d, _, _ = s.post("/v2/repository/models/pair/unload", {})
                ok = ok and a == 200 and b == 200 and d == 200
            return ok

        c.check(cycles(10), "warm-up cycles")
        rss0 = rss_kb(s.proc.pid)
        c.check(cycles(100), "100 load/unload cycles")
        rss1 = rss_kb(s.proc.pid)
        if harness.rss_meaningful():
            c.check(rss1 < rss0 * 1.05, f"RSS {rss0} -> {rss1} kB over 100 cycles (< 5%)")
        else:
            print(f"RSS {rss0} -> {rss1} kB over 100 cycles; check not applied: ASan's "
                  "quarantine holds freed memory", flush=True)
        st, _, r = s.post("/v2/repository/models/rr/unload", {})
        st, _, r = s.get("/v1/models")
        c.check(st == 200 and [m["id"] for m in r["data"]] == ["chat"], f"only chat left: {r}")

    # --- --model NAME=PATH, repeatable: one scoring and one generation model ---
    with Server(None, "--model", "r=" + RERANKER, "--model", "c=" + CHAT) as s:
        st, _, r = s.get("/v1/models")
        c.check(sorted(m["id"] for m in r.get("data", [])) == ["c", "r"], f"--model entries: {r}")
        st, ver, score, r = rerank(s)
        c.check(st == 200 and ver == "1" and abs(score - V1_SCORE) < 1e-6 and
                r.get("model") == "r", f"rerank without model goes to the scorer: {st} {r}")
        st, _, r = s.post("/v1/chat/completions",
                          {"messages": [{"role": "user", "content": "Where do salmon swim?"}],
                           "max_tokens": 4, "temperature": 0})
        c.check(st == 200 and r.get("model") == "c", f"chat without model goes to c: {r}")
    # --- --model NAME=PATH where PATH holds versions (and model.json) ---
    with Server(None, "--model", "v=" + os.path.join(repo, "rr")) as s:
        st, _, r = s.get("/v2/models/v")
        c.check(st == 200 and r.get("versions") == ["2"], f"v: latest 1 of its versions: {r}")
        st, ver, score, r = rerank(s)
        c.check(st == 200 and ver == "2" and version_of_score(score) == 2, f"v serves 2: {r}")
    # --- --model-memory-budget: a load that does not fit is refused with the numbers ---
    weights = 396417 * 4  # the demo reranker's parameters in f32
    with tempfile.TemporaryDirectory() as tmp3:
        repo3 = os.path.join(tmp3, "repo")
        add_version(repo3, "a", 1)
        add_version(repo3, "b", 1)
        with Server(None, "--model-repository", repo3, "--model-control", "explicit",
                    "--load-model", "a", "--model-memory-budget", str(weights * 5 // 2)) as s:
            m = s.metrics()
            key = 'sluice_model_memory_bytes{model="a",version="1"}'
            c.check(m.get(key) == weights, f"a charged its weights: {m.get(key)}")
            st, _, r = s.post("/v2/repository/models/b/load", {})
            c.check(st == 200, f"b fits beside a: {st} {r}")
            # A red-black switch needs both versions resident: a 1 -> 2 does not fit beside b.
            add_version(repo3, "a", 2)
            st, _, r = s.post("/v2/repository/models/a/load", {})
            c.error_shape(st, r, 400, "a's switch over the budget")
            msg = r["error"]["message"]
            c.check("--model-memory-budget" in msg and '"b" version 1' in msg and "MiB" in msg,
                    f"the refusal has the numbers: {msg}")
            st, ver, _, _ = rerank(s, "a")
            c.check(st == 200 and ver == "1", f"a 1 still serves: {st} {ver}")
            c.check(index(s).get(("a", "2"), {}).get("state") == "UNAVAILABLE", "a 2 refused")
            st, _, r = s.post("/v2/repository/models/b/unload", {})
            st, _, r = s.post("/v2/repository/models/a/load", {})
            c.check(st == 200, f"a's switch fits once b is unloaded: {st} {r}")
            st, ver, _, _ = rerank(s, "a")
            c.check(st == 200 and ver == "2", f"a 2 serves: {st} {ver}")

    # --- bad start-up configurations fail with the reason ---
    for args, want in [(["--model", "bad..name=" + RERANKER], "contains \"..\""),
                       (["--model", "x=" + RERANKER, "--model", "x=" + RERANKER], "twice"),
                       (["--model-repository", os.path.join(tmp, "none")], "not a directory"),
                       (["--model-repository", repo, "--load-model", "rr"], "explicit"),
                       (["--model-repository", repo, "--model-control", "explicit",
                         "--load-model", "zzz"], "zzz"),
                       (["--model", RERANKER, "--switch-placement-ms", "-1"],
                        "--switch-placement-ms"),
                       (["--model", RERANKER, "--switch-placement-ms", "10001"],
                        "--switch-placement-ms")]:
        import subprocess
        p = subprocess.run([harness.ARGS.sluice, "serve", "--port", "0"] + args,
                           capture_output=True, text=True, timeout=60)
        c.check(p.returncode != 0 and want in p.stderr, f"{args}: {p.returncode} {p.stderr}")

c.finish("e2e_modelops")
