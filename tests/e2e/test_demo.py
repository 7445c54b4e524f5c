"""The embedded demo model of `make serve` (models/demo-reranker, trained by
scripts/train_demo_reranker.py): the README's rerank example ranks the relevant document
first with the README's scores, a few more queries of the same kind, and `sluice bench
--input` against it."""
import json
import os
import re
import shutil
import subprocess
import tempfile

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                     "demo-reranker"))

# The README's example (keep the two in step).
QUERY = "How do salmon swim up the river?"
DOCS = ["Traders sell shares at the busy market.",
        "Salmon swim up the cold river every spring.",
        "Farmers open the old sluice gate near the river.",
        "Fishermen sell salmon at the market in winter."]

with Server(MODEL) as s:
    conn = s.conn()
    st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2},
                      conn=conn)
    c.check(st == 200, f"/v1/rerank {st} {r}")
    res = r.get("results", []) if isinstance(r, dict) else []
    c.check(len(res) == 2 and res[0]["index"] == 1, f"README example: {res}")
    c.check(len(res) == 2 and res[0]["relevance_score"] > 0.5 > res[1]["relevance_score"],
            f"README example scores: {res}")
    # The README shows 0.99998975 for the relevant document and ~1.03e-05 for the others
    # (transformers gave 0.9999897480 and 1.0243e-05..1.0258e-05 in training).
    c.check(len(res) == 2 and abs(res[0]["relevance_score"] - 0.99998975) < 1e-6
            and res[1]["relevance_score"] < 1.1e-5, f"README example values: {res}")
    c.check(len(res) >= 1 and res[0].get("document", {}).get("text") == DOCS[1],
            "returned document text")
    c.check(r.get("model") == "demo-reranker", f"model name {r.get('model')}")
    cases = [
        ("where do bees fly?", ["Bees fly over the green meadow every summer.",
                                "Birds fly near the old tower.",
                                "Bees build the wall in winter."], 0),
        ("do bakers sell bread at the market?",
         ["Bakers bake bread in the kitchen.", "Traders sell fruit at the market.",
          "Every morning the bakers sell fresh bread at the busy market."], 2),
    ]
    for q, docs, want in cases:
        st, _, r = s.post("/rerank", {"query": q, "documents": docs}, conn=conn)
        first = r["results"][0]["index"] if st == 200 and r.get("results") else None
        c.check(first == want, f"{q!r}: first {first}, want {want}: {r}")
    st, _, t = s.post("/tokenize", {"prompt": QUERY, "return_token_strs": True}, conn=conn)
    c.check(st == 200 and t.get("token_strs") == ["[CLS]", "how", "do", "salmon", "swim",
                                                  "up", "the", "river", "?", "[SEP]"],
            f"/tokenize {t}")
    # `sluice bench --input`: the bodies of a JSONL file, in order, cycled.
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "requests.jsonl")
        with open(path, "w") as f:
            for q, docs, _ in cases:
                f.write(json.dumps({"query": q, "documents": docs}) + "\n")
            f.write(json.dumps({"query": QUERY, "documents": DOCS}) + "\n")
        out = subprocess.run([harness.ARGS.sluice, "bench", "--port", str(s.port), "--input", path,
                              "--requests", "6", "--concurrency", "2"],
                             capture_output=True, text=True)
        c.check(out.returncode == 0 and "errors: none" in out.stdout, f"bench: {out.stdout}")
        m = re.search(r"requests: (\d+) ok, 6 total in [\d.]+ s: ([\d.]+) req/s, "
                      r"([\d.]+) documents/s", out.stdout)
        # 6 requests cycle the 3 bodies twice: (3 + 3 + 4) x 2 = 20 documents, 20/6 a request.
        c.check(m is not None and m.group(1) == "6" and
                abs(float(m.group(3)) / float(m.group(2)) - 20 / 6) < 0.01,
                f"bench counts: {out.stdout}")

# --dtype int8 and model.json's "dtype": "int8": the start-up log says so, the ranking is
# the same, the scores within 1e-2 of float32's and not all equal to them (not a silent
# float32), and the flag and model.json give the same bits.
def rerank_scores(s):
    st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
    c.check(st == 200, f"int8 rerank {st} {r}")
    return [x["relevance_score"] for x in sorted(r.get("results", []), key=lambda x: x["index"])]


INT8_LOG = "dtype int8 (linear layers int8 per-channel, activations quantised per token)"
with Server(MODEL) as s:
    f32 = rerank_scores(s)
with Server(MODEL, "--dtype", "int8") as s:
    i8 = rerank_scores(s)
    c.check(any(INT8_LOG in line for line in s.log), "--dtype int8 logged at start-up")
c.check(len(i8) == len(DOCS) and max(abs(a - b) for a, b in zip(i8, f32)) <= 1e-2,
        f"int8 scores near float32: {i8} vs {f32}")
c.check(i8 != f32, f"int8 scores differ from float32 (int8 ran): {i8}")
c.check(len(i8) == len(DOCS) and max(range(len(i8)), key=lambda i: i8[i]) == 1,
        f"int8 ranks the relevant document first: {i8}")
with tempfile.TemporaryDirectory() as tmp:
    shutil.copytree(MODEL, os.path.join(tmp, "rr", "1"))
    with open(os.path.join(tmp, "rr", "model.json"), "w") as f:
        json.dump({"dtype": "int8"}, f)
    with Server(None, "--model-repository", tmp) as s:
        c.check(rerank_scores(s) == i8, "model.json dtype int8 = --dtype int8")
        c.check(any(INT8_LOG in line for line in s.log), "model.json int8 logged")

# `make serve` (scripts/serve-demo): both demo models from one process, through the model
# repository models/; requests without "model" go to the one model serving their route.
env = dict(os.environ, PORT="0")
with Server(None, cmd=[os.path.join(os.path.dirname(MODEL), "..", "scripts", "serve-demo"),
                       harness.ARGS.sluice], env=env) as s:
    st, _, r = s.get("/v1/models")
    c.check(st == 200 and sorted(m["id"] for m in r["data"]) == ["demo-chat", "demo-reranker"],
            f"make serve models: {r}")
    st, h, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2})
    c.check(st == 200 and r.get("model") == "demo-reranker" and r["results"][0]["index"] == 1
            and abs(r["results"][0]["relevance_score"] - 0.99998975) < 1e-6,
            f"make serve: the README's rerank: {r}")
    st, _, r = s.post("/v1/chat/completions",
                      {"model": "demo-chat",
                       "messages": [{"role": "user", "content": "Where do salmon swim?"}]})
    c.check(st == 200 and r["choices"][0]["message"]["content"] ==
            "Salmon swim up the cold river.", f"make serve: the README's chat: {r}")
    st, _, r = s.post("/v2/repository/index", {})
    c.check(st == 200 and sorted((e["name"], e.get("state")) for e in r) ==
            [("demo-chat", "READY"), ("demo-reranker", "READY")], f"make serve index: {r}")
c.finish("demo")
