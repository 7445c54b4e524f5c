"""IO-processor plugins (docs/plugins.md): `sluice serve --plugin keyword_rerank.so` on the
demo reranker. POST /plugins/keyword_rerank and /pooling with "io_processor" give the model's
scores (those of /v1/rerank) plus the keyword boost, in the right order, with duplicates and
top_n; malformed bodies are 400 JSON with the plugin's message and the server keeps serving;
unknown processors are 404/400 naming the registered ones; a plugin that does not fit the
model stops start-up naming the file; the built-in processors (rerank, rerank-v2, score,
classify, tokenize; embeddings, embed, pooling on an embedder) answer /pooling with
"io_processor" and /plugins/NAME as their own routes do, errors included; a plugin taking a
built-in's name stops start-up naming it; RSS does not grow over 2,000 requests (the plugin's
per-request state, ~10 kB each, is freed on every path: success, errors, disconnects)."""
import json
import os
import socket
import struct
import threading

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                     "demo-reranker"))
PLUGINS = os.path.join(os.path.dirname(os.path.abspath(harness.ARGS.sluice)), "plugins")
PLUGIN = os.path.join(PLUGINS, "keyword_rerank.so")

QUERY = "How do salmon swim up the river?"
DOCS = ["Traders sell shares at the busy market.",
        "Salmon swim up the cold river every spring.",
        "Farmers open the old sluice gate near the river.",
        "Fishermen sell salmon at the market in winter."]


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def model_scores(s, conn, query, docs):
    st, _, r = s.post("/v1/rerank", {"query": query, "documents": docs,
                                     "return_documents": False}, conn=conn)
    c.check(st == 200, f"/v1/rerank {st} {r}")
    return {x["index"]: x["relevance_score"] for x in r.get("results", [])}


def expect(model, docs, keywords, boost):
    """(index, combined score, matched keywords) sorted as the plugin must sort them."""
    out = []
    for i, d in enumerate(docs):
        words = [w.strip(".,?!").lower() for w in d.split()]
        matched = [k for k in keywords if k.lower() in words]
        out.append((i, f32(f32(model[i]) + f32(f32(boost) * len(matched))), matched))
    return sorted(out, key=lambda t: -t[1])  # stable: ties keep index order


def check_results(res, want, what):
    got = [(x["index"], x["score"], x["keywords"]) for x in res]
    ok = len(got) == len(want) and all(
        g[0] == w[0] and abs(g[1] - w[1]) <= 1e-6 and g[2] == w[2] for g, w in zip(got, want))
    c.check(ok, f"{what}: got {got}, want {want}")


BUILTINS = ("built-in IO processors: embeddings, embed, pooling, classify, predict, score, "
            "rerank, rerank-v2, token-classify, absa, tokenize, detokenize")


def envelope_free(r):
    """A response without what differs between two calls (its id and creation time)."""
    return {k: v for k, v in r.items() if k not in ("id", "created")} if isinstance(r, dict) else r


def same_as_route(s, conn, good, bad):
    """Each (processor, route, body): POST /pooling {"io_processor", "data"} and
    /plugins/NAME answer what the route answers; bad bodies fail with its status and message."""
    model = s.get("/v1/models")[2]["data"][0]["id"]
    for name, route, b in good:
        st, _, want = s.post(route, b, conn=conn)
        c.check(st == 200, f"{route} {st} {want}")
        st, _, r = s.post("/pooling", {"model": model, "io_processor": name, "data": b}, conn=conn)
        c.check(st == 200 and r.get("object") == "io_processor" and r.get("io_processor") == name
                and r.get("model") == model and envelope_free(r.get("data")) == envelope_free(want),
                f"/pooling io_processor {name} = {route}: {st} {r} vs {want}")
        tokens = want.get("usage", {}).get("total_tokens") if isinstance(want, dict) else None
        if tokens is not None:
            c.check(r.get("usage", {}).get("total_tokens") == tokens,
                    f"/pooling io_processor {name}: usage {r.get('usage')} vs {want['usage']}")
        st, _, r = s.post("/plugins/" + name, b, conn=conn)
        c.check(st == 200 and envelope_free(r) == envelope_free(want),
                f"/plugins/{name} = {route}: {st} {r} vs {want}")
    for name, route, b in bad:
        st, _, want = s.post(route, b, conn=conn)
        c.check(st >= 400, f"{route} {b}: {st} {want}")
        st2, _, r = s.post("/pooling", {"io_processor": name, "data": b}, conn=conn)
        c.check(st2 == st and r == want, f"/pooling io_processor {name} {b}: {st2} {r} vs {want}")
        st2, _, r = s.post("/plugins/" + name, b, conn=conn)
        c.check(st2 == st and r == want, f"/plugins/{name} {b}: {st2} {r} vs {want}")


with Server(MODEL, "--plugin", PLUGIN, "--workers", "2") as s:
    c.check(any("IO processors: keyword_rerank" in line for line in s.log),
            "start-up log names the IO processor")
    c.check(any('model "demo-reranker" version 1: plugin IO processors: keyword_rerank; '
                + BUILTINS in line for line in s.log),
            "start-up log lists the model's IO processors, plugins and built-ins")
    conn = s.conn()
    model = model_scores(s, conn, QUERY, DOCS)
    for boost, order in ((0.5, [1, 3, 0, 2]), (1.0, [3, 1, 0, 2])):
        body = {"query": QUERY, "documents": DOCS, "keywords": ["salmon", "market"],
                "boost": boost}
        st, h, r = s.post("/plugins/keyword_rerank", body, conn=conn)
        c.check(st == 200 and h.get("content-type", "").startswith("application/json"),
                f"/plugins/keyword_rerank {st} {r}")
        res = r.get("results", []) if isinstance(r, dict) else []
        check_results(res, expect(model, DOCS, ["salmon", "market"], boost), f"boost {boost}")
        c.check([x["index"] for x in res] == order, f"boost {boost}: order {res}")
        for x in res:
            c.check(x["model_score"] == model[x["index"]],
                    f"model_score {x} vs /v1/rerank {model[x['index']]}")
    # top_n, and the default boost (0.1).
    st, _, r = s.post("/plugins/keyword_rerank", {"query": QUERY, "documents": DOCS,
                                                  "keywords": ["River"], "top_n": 2}, conn=conn)
    want = expect(model, DOCS, ["river"], 0.1)[:2]
    check_results(r.get("results", []) if st == 200 else [], want, "top_n 2, default boost")
    # Request order with duplicates: every copy gets the same (bit-identical) score.
    dup = [DOCS[1], DOCS[0], DOCS[1], DOCS[3], DOCS[1], DOCS[0]]
    st, _, r = s.post("/plugins/keyword_rerank", {"query": QUERY, "documents": dup,
                                                  "keywords": ["market"], "boost": 0.25},
                      conn=conn)
    dmodel = {i: model[DOCS.index(d)] for i, d in enumerate(dup)}
    check_results(r.get("results", []) if st == 200 else [], expect(dmodel, dup, ["market"], 0.25),
                  "duplicates")
    # /pooling with "io_processor": the same results under "data", with usage.
    body = {"query": QUERY, "documents": DOCS, "keywords": ["salmon"], "boost": 0.5}
    _, _, direct = s.post("/plugins/keyword_rerank", body, conn=conn)
    st, _, r = s.post("/pooling", {"model": "demo-reranker", "io_processor": "keyword_rerank",
                                   "data": body}, conn=conn)
    c.check(st == 200 and r.get("object") == "io_processor" and r.get("data") == direct
            and r.get("io_processor") == "keyword_rerank" and r.get("model") == "demo-reranker"
            and r.get("usage", {}).get("prompt_tokens", 0) > 0, f"/pooling {st} {r}")
    # The built-ins are IO processors of the same registry: /pooling with "io_processor" NAME
    # and /plugins/NAME answer as their own routes (the response under "data" of the pooling
    # envelope), errors included.
    same_as_route(s, conn, [
        ("rerank", "/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2}),
        ("rerank", "/rerank", {"query": QUERY, "texts": DOCS}),
        ("rerank-v2", "/v2/rerank", {"query": QUERY, "documents": DOCS}),
        ("score", "/score", {"text_1": QUERY, "text_2": DOCS[:2]}),
        ("classify", "/classify", {"input": DOCS[:2]}),
        ("tokenize", "/tokenize", {"prompt": QUERY}),
    ], bad=[
        ("rerank", "/v1/rerank", {"query": QUERY}),
        ("rerank", "/v1/rerank", {"query": QUERY, "documents": DOCS, "foo": 1}),
        ("score", "/score", {"text_1": [QUERY, QUERY], "text_2": DOCS}),
        ("embeddings", "/v1/embeddings", {"input": QUERY}),
        ("token-classify", "/token-classify", {"inputs": QUERY}),
    ])
    # Unknown processors name the registered ones: the plugins' and the built-ins'.
    st, _, r = s.post("/plugins/nope", body, conn=conn)
    c.error_shape(st, r, 404, "/plugins/nope")
    c.check("keyword_rerank" in r["error"]["message"], f"/plugins/nope names it: {r}")
    c.check(BUILTINS in r["error"]["message"], f"/plugins/nope names the built-ins: {r}")
    st, _, r = s.post("/pooling", {"io_processor": "nope", "data": body}, conn=conn)
    c.error_shape(st, r, 400, "/pooling io_processor nope")
    c.check("keyword_rerank" in r["error"]["message"], f"/pooling nope names it: {r}")
    c.check(BUILTINS in r["error"]["message"], f"/pooling nope names the built-ins: {r}")
    st, h, r = s.get("/plugins/keyword_rerank", conn=conn)
    c.error_shape(st, r, 405, "GET /plugins/keyword_rerank")
    # Malformed bodies: 400 JSON with the plugin's message; the server keeps serving.
    long_doc = "salmon " * 2000
    bad = [
        ("not json", "keyword_rerank: the body is not valid JSON"),
        ("[1, 2]", "keyword_rerank: the body must be an object"),
        ({"documents": DOCS, "keywords": ["a"]}, "keyword_rerank: query: is required"),
        ({"query": QUERY, "keywords": ["a"]}, "keyword_rerank: documents: is required"),
        ({"query": QUERY, "documents": DOCS}, "keyword_rerank: keywords: is required"),
        ({"query": QUERY, "documents": "x", "keywords": ["a"]}, "documents: must be a non-empty"),
        ({"query": QUERY, "documents": [DOCS[0], 7], "keywords": ["a"]},
         "keyword_rerank: documents[1]: must be a string"),
        ({"query": QUERY, "documents": DOCS, "keywords": []}, "keywords: must be a non-empty"),
        ({"query": QUERY, "documents": DOCS, "keywords": ["a", ""]}, "keywords[1]: must be"),
        ({"query": QUERY, "documents": DOCS, "keywords": ["a"], "boost": "x"}, "boost: must be"),
        ({"query": QUERY, "documents": DOCS, "keywords": ["a"], "top_n": 0}, "top_n: must be"),
        ({"query": QUERY, "documents": DOCS, "keywords": ["a"], "foo": 1},
         'keyword_rerank: unknown field "foo"'),
        ({"query": QUERY, "documents": [long_doc], "keywords": ["a"]},
         "keyword_rerank: documents[0]:"),
    ]
    for b, msg in bad:
        st, _, r = s.post("/plugins/keyword_rerank", b, conn=conn)
        c.error_shape(st, r, 400, f"malformed {str(b)[:60]}")
        c.check(isinstance(r, dict) and msg in r.get("error", {}).get("message", ""),
                f"malformed {str(b)[:60]}: message {r}")
    st, _, r = s.post("/pooling", {"io_processor": "keyword_rerank"}, conn=conn)
    c.error_shape(st, r, 400, "/pooling without data")
    st, _, r = s.post("/pooling", {"io_processor": "keyword_rerank", "data": body, "x": 1},
                      conn=conn)
    c.error_shape(st, r, 400, "/pooling with an unknown field")
    st, _, r = s.post("/plugins/keyword_rerank", body, conn=conn)
    c.check(st == 200 and r == direct, f"still serving after malformed bodies: {st} {r}")
    m = s.metrics()
    c.check(m.get('sluice_requests_total{route="/plugins/keyword_rerank",code="400"}', 0) >= len(bad),
            "metrics count the plugin route's 400s")

    # Memory: each request's state holds 100 keywords (~10 kB); none of it may stay.
    keywords = ["keyword%03d-%s" % (k, "x" * 80) for k in range(100)] + ["salmon"]
    heavy = {"query": QUERY, "documents": DOCS, "keywords": keywords, "boost": 0.5}
    bodies = [("/plugins/keyword_rerank", heavy, 200),
              ("/pooling", {"io_processor": "keyword_rerank", "data": heavy}, 200),
              ("/plugins/keyword_rerank", dict(heavy, top_n=0), 400),
              ("/plugins/keyword_rerank", dict(heavy, documents=[long_doc]), 400)]
    raw = json.dumps(heavy).encode()

    def disconnect():
        # Sends a request and goes away without reading the answer.
        sk = socket.create_connection(("127.0.0.1", s.port))
        sk.sendall(b"POST /plugins/keyword_rerank HTTP/1.1\r\nHost: x\r\nContent-Type: "
                   b"application/json\r\nContent-Length: %d\r\n\r\n" % len(raw) + raw)
        sk.close()

    def run(n):
        errors = []

        def worker(t):
            wc = s.conn()
            for i in range(n // 4):
                if i % 25 == 24:
                    disconnect()
                    continue
                path, b, want = bodies[(i + t) % len(bodies)]
                st, _, _ = s.post(path, b, conn=wc)
                if st != want:
                    errors.append((path, st, want))

        threads = [threading.Thread(target=worker, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return errors

    errors = run(1000)  # warm-up: allocator pools settle
    before = rss_kb(s.proc.pid)
    errors += run(2000)
    after = rss_kb(s.proc.pid)
    print(f"RSS after warm-up {before} kB, after 2,000 plugin requests {after} kB "
          f"({after - before:+d} kB, {1024 * (after - before) / 2000:+.0f} B/request)", flush=True)
    c.check(not errors, f"{len(errors)} unexpected statuses, e.g. {errors[:3]}")
    if harness.rss_meaningful():
        c.check(after - before < 4096, f"RSS grew {after - before} kB over 2,000 requests "
                                       f"(limit 4,096 kB; a leaked state is ~10 kB each)")
    else:
        print("RSS check not applied: ASan's quarantine holds freed memory", flush=True)
    st, _, r = s.post("/plugins/keyword_rerank", body, conn=s.conn())
    c.check(st == 200 and r == direct, f"same answer after the soak: {st} {r}")

# Plugins that do not fit the model stop start-up, naming the file and the reason.
for plugin, msg in ((os.path.join(PLUGINS, "fsm_logits.so"),
                     "logits processor fsm needs a generation model"),
                    (os.path.join(PLUGINS, "test_plugin_wrong_abi.so"),
                     "test_plugin_wrong_abi.so: plugin ABI version")):
    try:
        with Server(MODEL, "--plugin", plugin, timeout=60):
            c.check(False, f"{plugin}: the server started")
    except RuntimeError as e:
        c.check(msg in str(e), f"{plugin}: start-up error names it: {str(e)[-400:]}")
# A plugin may not take a built-in's name: start-up stops naming the file and the name.
try:
    with Server(MODEL, "--plugin", os.path.join(PLUGINS, "test_plugin_builtin_clash.so"),
                timeout=60):
        c.check(False, "a plugin named rerank: the server started")
except RuntimeError as e:
    c.check("test_plugin_builtin_clash.so: IO processor rerank: the name is reserved by a "
            "built-in IO processor" in str(e), f"a plugin named rerank: {str(e)[-400:]}")
# The embedding built-ins on an embedder, through the same registry.
with Server("bert_st_mean_dense") as s:
    conn = s.conn()
    texts = [[101, 7, 8, 102], [101, 9, 102]]  # token ids: the fixture has no tokenizer
    same_as_route(s, conn, [
        ("embeddings", "/v1/embeddings", {"input": texts}),
        ("embeddings", "/v1/embeddings", {"input": texts[0], "encoding_format": "base64"}),
        ("embeddings", "/v1/embeddings", {"input": texts, "normalize": False}),
        ("embed", "/embed", {"inputs": texts}),
        ("pooling", "/pooling", {"input": texts}),
    ], bad=[
        ("embeddings", "/v1/embeddings", {"input": []}),
        ("embed", "/embed", {"inputs": texts, "truncation_direction": "Left"}),
        ("embeddings", "/v1/embeddings", {"input": ["text"]}),
        ("rerank", "/v1/rerank", {"query": texts[0], "documents": texts}),
    ])
try:
    with Server("bert_st_mean_dense", "--plugin", PLUGIN, timeout=60):
        c.check(False, "keyword_rerank on an embedder: the server started")
except RuntimeError as e:
    c.check("IO processor keyword_rerank needs a model with task score" in str(e),
            f"keyword_rerank on an embedder: {str(e)[-400:]}")
c.finish("plugins")
