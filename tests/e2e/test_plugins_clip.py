"""IO-processor plugins on a CLIP model (docs/plugins.md, "Ranking heads on CLIP features"):
the clip_adapter example (POST /plugins/clip_rank) on the tiny CLIP fixture, copied into a
temporary model directory with a clip_adapter.json head, a sluice.json "plugins" entry and a
word-level tokenizer.json. Its scores equal the head's formula computed here from the
/v1/embeddings outputs of the same server (1e-5), sorted, with top_n; duplicates of one image
(URL, redirect, data: URI, local file) score identically; a text query equals its token ids;
/pooling with "io_processor" wraps the same results; bad inputs are 400s naming the field or
the image source; a head that does not fit refuses the model at start-up; clip_rank does not
load on a text model nor a text plugin on a CLIP model; keyword_rerank built against the ABI
1.1 header still loads and answers as the current build does."""
import base64
import http.server
import json
import math
import os
import shutil
import tempfile
import threading

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
CLIP = os.path.join(harness.ARGS.fixtures, "clip", "clip_quickgelu")
IMAGES = os.path.abspath(os.path.join(harness.ARGS.fixtures, "images"))
with open(os.path.join(CLIP, "expected.json")) as f:
    EXP = json.load(f)
FILES = [im["file"] for im in EXP["images"]]
P = EXP["projection_dim"]
PLUGINS = os.path.join(os.path.dirname(os.path.abspath(harness.ARGS.sluice)), "plugins")
ADAPTER = os.path.join(PLUGINS, "clip_adapter.so")
RERANKER = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                        "demo-reranker"))


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        p = self.path.lstrip("/")
        if p.startswith("redirect/"):
            self.send_response(302)
            self.send_header("Location", "/" + p[len("redirect/"):])
            self.end_headers()
            return
        path = os.path.join(IMAGES, os.path.basename(p))
        if not os.path.exists(path):
            self.send_response(404)
            self.end_headers()
            return
        with open(path, "rb") as f:
            body = f.read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
HOST = f"http://127.0.0.1:{httpd.server_address[1]}"

# A word-level tokenizer whose words map to the ids of EXP["texts"][1] (+ </s>, id 2).
WORDS = {"a": 238, "red": 119, "bicycle": 288, "on": 3, "grass": 77}
TEXT = "a red bicycle on grass"
TEXT_IDS = EXP["texts"][1]["ids"]
assert [WORDS[w] for w in TEXT.split()] + [2] == TEXT_IDS
TOKENIZER = {
    "version": "1.0", "truncation": None, "padding": None,
    "added_tokens": [{"id": 2, "content": "</s>", "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True}],
    "normalizer": None, "pre_tokenizer": {"type": "WhitespaceSplit"},
    "post_processor": {
        "type": "TemplateProcessing",
        "single": [{"Sequence": {"id": "A", "type_id": 0}},
                   {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "pair": [{"Sequence": {"id": "A", "type_id": 0}}, {"Sequence": {"id": "B", "type_id": 0}},
                 {"SpecialToken": {"id": "</s>", "type_id": 0}}],
        "special_tokens": {"</s>": {"id": "</s>", "ids": [2], "tokens": ["</s>"]}}},
    "decoder": None,
    "model": {"type": "WordLevel", "vocab": dict(WORDS, **{"<pad>": 0, "<s>": 1, "</s>": 2,
                                                           "<unk>": 4}),
              "unk_token": "<unk>"},
}

# The head: weights, an image prior and a bias (all non-trivial so that each counts).
HEAD = {"weights": [1.5 + 0.25 * math.sin(i) for i in range(P)],
        "image_weights": [0.3 * math.cos(1.7 * i) for i in range(P)],
        "bias": -0.2}


def make_model(root, name, head, plugins=True, tokenizer=True):
    d = os.path.join(root, name)
    os.makedirs(d)
    for f in ("config.json", "model.safetensors", "preprocessor_config.json"):
        shutil.copy(os.path.join(CLIP, "model", f), d)
    if head is not None:
        with open(os.path.join(d, "clip_adapter.json"), "w") as f:
            f.write(head if isinstance(head, str) else json.dumps(head))
    if plugins:
        with open(os.path.join(d, "sluice.json"), "w") as f:
            json.dump({"plugins": [ADAPTER]}, f)
    if tokenizer:
        with open(os.path.join(d, "tokenizer.json"), "w") as f:
            json.dump(TOKENIZER, f)
    return d


def formula(head, q, x):
    logit = head.get("bias", 0) + sum(w * a * b for w, a, b in zip(head["weights"], q, x))
    logit += sum(u * b for u, b in zip(head.get("image_weights", [0] * P), x))
    return 1 / (1 + math.exp(-logit)), sum(a * b for a, b in zip(q, x))


def embeddings(s, items):
    st, _, r = s.post("/v1/embeddings", {"input": items})
    c.check(st == 200, f"/v1/embeddings {st} {str(r)[:300]}")
    return [d["embedding"] for d in r["data"]] if st == 200 else []


def expected(head, q, xs):
    """[(index, score, cosine)] sorted as the plugin sorts (stable: ties keep order)."""
    out = [(i,) + formula(head, q, x) for i, x in enumerate(xs)]
    return sorted(out, key=lambda t: -t[1])


def check_results(r, want, what, tol=1e-5):
    res = r.get("results") if isinstance(r, dict) else None
    ok = isinstance(res, list) and len(res) == len(want)
    if ok:
        for g, w in zip(res, want):
            ok = ok and set(g) == {"index", "score", "cosine"} and g["index"] == w[0] and \
                abs(g["score"] - w[1]) <= tol and abs(g["cosine"] - w[2]) <= tol
    c.check(ok, f"{what}: got {res}, want {want}")


tmp = tempfile.mkdtemp(prefix="sluice-clip-plugin-")
try:
    model = make_model(tmp, "clipranker", HEAD)
    urls = [f"{HOST}/{f}" for f in FILES]
    with Server(model, "--allow-private-media-urls", "--allowed-local-media-path", IMAGES) as s:
        c.check(any("IO processors: clip_rank" in line for line in s.log),
                "start-up log names the IO processor")
        c.check(any("clip_adapter.so (ABI 1.3)" in line for line in s.log),
                "the example is an ABI 1.3 plugin (this header)")
        q_ids = EXP["texts"][3]["ids"]
        emb = embeddings(s, [q_ids] + [{"image": u} for u in urls])
        q, xs = emb[0], emb[1:]
        want = expected(HEAD, q, xs)
        st, _, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": urls})
        c.check(st == 200, f"/plugins/clip_rank {st} {r}")
        check_results(r, want, "scores = the head's formula on /v1/embeddings outputs")
        c.check(len({x[0] for x in want}) == len(FILES) and
                [x[1] for x in want] == sorted([x[1] for x in want], reverse=True),
                "the expectation is a full ranking")
        # The order is the head's, not CLIP's cosine order (the head matters).
        by_cos = sorted(range(len(xs)), key=lambda i: -want[[w[0] for w in want].index(i)][2])
        c.check([w[0] for w in want] != by_cos, "the head's order differs from the cosine order")
        # top_n keeps the first n of the same ranking.
        st, _, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": urls, "top_n": 3})
        c.check(st == 200, f"top_n {st} {r}")
        check_results(r, want[:3], "top_n 3")
        st, _, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": urls, "top_n": 100})
        check_results(r, want, "top_n over the count: every image")
        # "model" routes the request (the served name, or name:version).
        for ref in ("clipranker", "clipranker:1"):
            st, _, r = s.post("/plugins/clip_rank", {"model": ref, "query": q_ids, "images": urls})
            check_results(r, want, f"model {ref}")
        st, _, r = s.post("/plugins/clip_rank", {"model": "other", "query": q_ids, "images": urls})
        c.error_shape(st, r, 404, "model of another name")
        # A text query (the tokenizer) is its token ids.
        emb_t = embeddings(s, [TEXT])
        c.check(bool(emb_t) and emb_t[0] == embeddings(s, [TEXT_IDS])[0],
                "/v1/embeddings: the text = its ids")
        st, _, r_text = s.post("/plugins/clip_rank", {"query": TEXT, "images": urls[:4]})
        st2, _, r_ids = s.post("/plugins/clip_rank", {"query": TEXT_IDS, "images": urls[:4]})
        c.check(st == 200 and st2 == 200 and r_text == r_ids, f"text query = ids: {r_text} {r_ids}")
        if emb_t:
            check_results(r_text, expected(HEAD, emb_t[0], xs[:4]), "text query scores")
        # Duplicates: one image by URL, redirect, data: URI and local path: identical scores.
        with open(os.path.join(IMAGES, FILES[2]), "rb") as f:
            data_uri = "data:image/png;base64," + base64.b64encode(f.read()).decode()
        dups = [urls[2], f"{HOST}/redirect/{FILES[2]}", data_uri, os.path.join(IMAGES, FILES[2]),
                urls[2], urls[5]]
        st, _, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": dups})
        c.check(st == 200, f"duplicates {st} {str(r)[:300]}")
        if st == 200:
            by = {x["index"]: (x["score"], x["cosine"]) for x in r["results"]}
            c.check(by[0] == by[1] == by[2] == by[3] == by[4], f"copies score identically: {by}")
            c.check([x["index"] for x in r["results"] if x["index"] < 5] == [0, 1, 2, 3, 4],
                    f"ties keep the request's order: {r['results']}")
            check_results(r, expected(HEAD, q, [xs[2]] * 5 + [xs[5]]), "duplicates' scores")
        # /pooling with "io_processor": the same results under "data", in the envelope.
        st, _, r = s.post("/pooling", {"model": "clipranker", "io_processor": "clip_rank",
                                       "data": {"query": q_ids, "images": urls}})
        c.check(st == 200 and r.get("object") == "io_processor" and
                r.get("io_processor") == "clip_rank" and r.get("model") == "clipranker",
                f"/pooling envelope {st} {str(r)[:300]}")
        if st == 200:
            check_results(r["data"], want, "/pooling data")
            c.check(r["usage"]["prompt_tokens"] == len(q_ids), f"usage: {r['usage']}")
        # Bad input: 400 naming the field (or the image source); the server keeps serving.
        for body, what in [
            ({"images": urls}, "query: is required"),
            ({"query": q_ids}, "images: is required"),
            ({"query": q_ids, "images": []}, "images: must be a non-empty list"),
            ({"query": q_ids, "images": "x.png"}, "images: must be a non-empty list"),
            ({"query": q_ids, "images": [urls[0], 7]}, "images[1]: must be a non-empty string"),
            ({"query": q_ids, "images": [urls[0], ""]}, "images[1]: must be a non-empty string"),
            ({"query": "", "images": urls}, "query: must not be empty"),
            ({"query": 5, "images": urls}, "query: must be a string or a list of token ids"),
            ({"query": [1, -2], "images": urls}, "query: token ids must be non-negative"),
            ({"query": [], "images": urls}, "query: sequence[0]: no token ids"),
            ({"query": [5] * 17, "images": urls}, "query: \"sequence[0]\" has 17 tokens"),
            ({"query": "a " * 20, "images": urls}, "query: \"sequence[0]\" has 21 tokens"),
            ({"query": q_ids, "images": urls, "top_n": 0}, "top_n: must be an integer >= 1"),
            ({"query": q_ids, "images": urls, "top_n": "2"}, "top_n: must be an integer >= 1"),
            ({"query": q_ids, "images": urls, "model": 3}, "model: must be a string"),
            ({"query": q_ids, "images": urls, "documents": []}, "unknown field \"documents\""),
            ({"query": q_ids, "images": [urls[0], f"{HOST}/missing.png"]},
             f"{HOST}/missing.png: HTTP status 404"),
            ({"query": q_ids, "images": ["/etc/passwd"]}, "/etc/passwd"),
            ({"query": q_ids, "images": ["ftp://example.invalid/x.png"]}, "ftp://example.invalid"),
            ({"query": q_ids, "images": ["data:image/png;base64,!!!"]}, "invalid base64"),
        ]:
            st, _, r = s.post("/plugins/clip_rank", body)
            c.error_shape(st, r, 400, f"clip_rank {json.dumps(body)[:90]}")
            m = r["error"]["message"] if isinstance(r, dict) and "error" in r else ""
            c.check(what in m and m.startswith("clip_rank: "), f"error names '{what}': {r}")
        st, _, r = s.post("/plugins/clip_rank", "{not json")
        c.error_shape(st, r, 400, "clip_rank: not JSON")
        st, _, r = s.post("/plugins/nope", {"query": q_ids, "images": urls})
        c.error_shape(st, r, 404, "unknown IO processor")
        c.check("clip_rank" in r["error"]["message"], f"404 lists the processors: {r}")
        st, _, r = s.post("/pooling", {"data": {}})
        c.error_shape(st, r, 400, "/pooling without io_processor on a CLIP model")
        c.check("io_processor" in r["error"]["message"], f"names io_processor: {r}")
        st, _, r = s.post("/pooling", {"io_processor": "nope", "data": {}})
        c.error_shape(st, r, 400, "/pooling with an unknown io_processor")
        c.check("clip_rank" in r["error"]["message"], f"lists the processors: {r}")
        st, _, r = s.post("/pooling", {"io_processor": "clip_rank", "data": {}, "input": 1})
        c.error_shape(st, r, 400, "/pooling with an unknown field")
        c.check("input" in r["error"]["message"], f"names the field: {r}")
        st, _, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": urls})
        check_results(r, want, "same answer after the errors")
        # The built-in CLIP routes are unchanged.
        st, _, r = s.post("/v1/rerank", {"query": q_ids, "documents": [{"image": urls[0]}]})
        c.check(st == 200 and abs(r["results"][0]["relevance_score"] - formula(HEAD, q, xs[0])[1])
                < 1e-5, f"/v1/rerank still the cosine: {st} {r}")

    # A head without image_weights and bias (their defaults, 0), loaded with --plugin on a
    # model without sluice.json: a different head gives the formula's different scores.
    head2 = {"weights": HEAD["weights"]}
    model2 = make_model(tmp, "plain", head2, plugins=False, tokenizer=False)
    with Server(model2, "--plugin", ADAPTER, "--allow-private-media-urls") as s:
        emb = embeddings(s, [q_ids] + [{"image": u} for u in urls])
        st, _, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": urls})
        c.check(st == 200, f"--plugin on a CLIP model: {st} {r}")
        check_results(r, expected(head2, emb[0], emb[1:]), "defaults: image_weights 0, bias 0")
        st, _, r = s.post("/plugins/clip_rank", {"query": TEXT, "images": urls[:1]})
        c.error_shape(st, r, 400, "a text query without tokenizer.json")
        c.check("query" in r["error"]["message"] and "tokenizer" in r["error"]["message"],
                f"names the query and the tokenizer: {r}")

    # A repository model: model.json "plugins" loads the library for both versions, each
    # reading its own head from its version directory (model_dir): one library, two heads.
    repo = os.path.join(tmp, "repo")
    make_model(os.path.join(repo, "clip"), "1", HEAD, plugins=False, tokenizer=False)
    make_model(os.path.join(repo, "clip"), "2", head2, plugins=False, tokenizer=False)
    os.makedirs(os.path.join(repo, "clip", "lib"))
    shutil.copy(ADAPTER, os.path.join(repo, "clip", "lib", "clip_adapter.so"))
    with open(os.path.join(repo, "clip", "model.json"), "w") as f:
        json.dump({"version_policy": {"all": {}}, "plugins": ["lib/clip_adapter.so"]}, f)
    with Server(None, "--model-repository", repo, "--model-control", "explicit",
                "--load-model", "*", "--allow-private-media-urls") as s:
        st, _, r = s.post("/v1/embeddings", {"model": "clip:1",
                                             "input": [q_ids] + [{"image": u} for u in urls]})
        emb = [d["embedding"] for d in r["data"]] if st == 200 else [[0] * P]
        for ref, head in (("clip:1", HEAD), ("clip:2", head2), ("clip", head2)):
            st, h, r = s.post("/plugins/clip_rank", {"model": ref, "query": q_ids, "images": urls})
            c.check(st == 200, f"repository {ref}: {st} {r}")
            check_results(r, expected(head, emb[0], emb[1:]), f"repository {ref}: its own head")
        st, h, r = s.post("/plugins/clip_rank", {"query": q_ids, "images": urls[:2]})
        c.check(st == 200 and h.get("sluice-model") == "clip", f"routed without model: {st} {h}")

    # Heads that do not fit refuse the model at start-up, naming the file and the problem.
    for i, (head, msg) in enumerate([
        (None, "clip_adapter.json"),
        ("{not json", "clip_adapter.json"),
        ({"weights": [1.0] * (P - 1)}, f"weights has {P - 1} values; the model's projection_dim "
                                       f"is {P}"),
        ({"weights": [1.0] * P, "image_weights": [0.0] * (P + 1)}, "image_weights has"),
        ({"weights": [1.0] * P, "bias": "x"}, "bias must be a finite number"),
        ({"bias": 1}, "weights is required"),
        ({"weights": [1.0] * P, "scale": 2}, "scale is not a field of the head"),
    ]):
        d = make_model(tmp, f"bad{i}", head)
        try:
            with Server(d, timeout=60):
                c.check(False, f"head {head!r:.60}: the server started")
        except RuntimeError as e:
            c.check("IO processor clip_rank refused model" in str(e) and msg in str(e),
                    f"head {str(head)[:60]}: start-up error names '{msg}': {str(e)[-400:]}")

    # clip_rank needs a CLIP model; a text plugin does not load on a CLIP model.
    try:
        with Server("bert_st_mean_dense", "--plugin", ADAPTER, timeout=60):
            c.check(False, "clip_rank on a text embedder: the server started")
    except RuntimeError as e:
        c.check("IO processor clip_rank needs a model with task clip" in str(e),
                f"clip_rank on a text embedder: {str(e)[-400:]}")
    try:
        with Server(model2, "--plugin", os.path.join(PLUGINS, "keyword_rerank.so"), timeout=60):
            c.check(False, "keyword_rerank on a CLIP model: the server started")
    except RuntimeError as e:
        c.check("IO processor keyword_rerank needs a model with task score; model \"plain\" is "
                "served with task clip" in str(e), f"keyword_rerank on CLIP: {str(e)[-400:]}")
finally:
    shutil.rmtree(tmp, ignore_errors=True)

# A plugin built against the ABI 1.1 header loads and answers as the current build does.
body = {"query": "How do salmon swim?", "documents": ["Salmon swim up the river.",
                                                      "Traders sell shares."],
        "keywords": ["salmon"], "boost": 0.5}
answers = []
for lib, abi in (("keyword_rerank_abi11.so", "1.1"), ("keyword_rerank.so", "1.3")):
    with Server(RERANKER, "--plugin", os.path.join(PLUGINS, lib)) as s:
        c.check(any(f"{lib} (ABI {abi})" in line for line in s.log), f"{lib} is ABI {abi}")
        st, _, r = s.post("/plugins/keyword_rerank", body)
        c.check(st == 200 and len(r.get("results", [])) == 2, f"{lib}: {st} {r}")
        answers.append(r)
        st, _, r = s.post("/plugins/keyword_rerank", {"query": "x"})
        c.error_shape(st, r, 400, f"{lib}: bad input")
c.check(answers[0] == answers[1], f"ABI 1.1 build = current build: {answers}")
c.finish("plugins_clip")
