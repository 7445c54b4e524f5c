"""Image ranking over HTTP with a CLIP model (tests/fixtures/clip/clip_quickgelu, the golden
fixture of tests/golden/clip_test.cc): /v1/embeddings with image inputs (URLs served from a
loopback HTTP server, data URIs, local files) equals transformers' image embeddings
(normalised; 5e-4, see clip_test.cc) and token-id text inputs its text embeddings (1e-4);
/v1/rerank ranks image documents by cosine similarity with the query; the feature cache
hits on repeated images and duplicates in one request agree; the SSRF guard refuses
loopback without --allow-private-media-urls; local files only under
--allowed-local-media-path; every user error is a 4xx naming the problem."""
import base64
import http.server
import json
import math
import os
import threading

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
CLIP = os.path.join(harness.ARGS.fixtures, "clip", "clip_quickgelu")
MODEL = os.path.join(CLIP, "model")
IMAGES = os.path.join(harness.ARGS.fixtures, "images")
with open(os.path.join(CLIP, "expected.json")) as f:
    EXP = json.load(f)


def norm(v):
    n = math.sqrt(sum(x * x for x in v))
    return [x / n for x in v]


def cos(a, b):
    return sum(x * y for x, y in zip(norm(a), norm(b)))


# Loopback image host: /<file> serves tests/fixtures/images/<file>; /missing 404s;
# /redirect/<file> redirects; /text is not an image.
hits = {"count": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        hits["count"] += 1
        p = self.path.lstrip("/")
        if p.startswith("redirect/"):
            self.send_response(302)
            self.send_header("Location", "/" + p[len("redirect/"):])
            self.end_headers()
            return
        if p == "text":
            body = b"this is not an image"
        else:
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
FILES = [im["file"] for im in EXP["images"]]

with Server(MODEL, "--allow-private-media-urls", "--allowed-local-media-path", IMAGES) as s:
    # Images by URL, all in one request: transformers' embeddings (normalised by default).
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/{f}"} for f in FILES]})
    c.check(st == 200, f"embeddings of images: {st} {r}")
    if st == 200:
        c.check(len(r["data"]) == len(FILES), "one embedding per image")
        for i, im in enumerate(EXP["images"]):
            c.close(r["data"][i]["embedding"], norm(im["image_embeds"]), 5e-4, f"image {im['file']}")
            c.check(r["data"][i]["index"] == i, "index")
    # Raw projections with normalize: false.
    st, _, raw = s.post("/v1/embeddings", {"input": {"image": f"{HOST}/{FILES[0]}"},
                                           "normalize": False})
    c.check(st == 200, f"normalize false: {st} {raw}")
    if st == 200:
        c.close(raw["data"][0]["embedding"], EXP["images"][0]["image_embeds"], 5e-4, "raw image embedding")
    # Texts as token ids (the fixture has no tokenizer.json).
    texts = [t["ids"] for t in EXP["texts"]]
    st, _, r = s.post("/v1/embeddings", {"input": texts})
    c.check(st == 200, f"token-id texts: {st} {r}")
    if st == 200:
        for i, t in enumerate(EXP["texts"]):
            c.close(r["data"][i]["embedding"], norm(t["text_embeds"]), 1e-4, f"text {i}")
        c.check(r["usage"]["prompt_tokens"] == sum(len(t) for t in texts), "usage counts tokens")
    # One token-id input (a flat list).
    st, _, r = s.post("/v1/embeddings", {"input": texts[1]})
    c.check(st == 200 and len(r["data"]) == 1, f"flat token ids: {st} {r}")
    # Mixed: text ids and images in one request; base64 encoding.
    st, _, r = s.post("/v1/embeddings", {"input": [texts[2], {"image": f"{HOST}/{FILES[1]}"}],
                                         "encoding_format": "base64"})
    c.check(st == 200, f"mixed base64: {st} {r}")
    if st == 200:
        import struct
        v = list(struct.unpack("<%df" % len(EXP["images"][1]["image_embeds"]),
                               base64.b64decode(r["data"][1]["embedding"])))
        c.close(v, norm(EXP["images"][1]["image_embeds"]), 5e-4, "base64 image embedding")

    # data: URI and a local file give the URL's embedding.
    with open(os.path.join(IMAGES, FILES[2]), "rb") as f:
        data_uri = "data:image/png;base64," + base64.b64encode(f.read()).decode()
    st, _, a = s.post("/v1/embeddings", {"input": [{"image": data_uri},
                                                   {"image": os.path.join(IMAGES, FILES[2])},
                                                   {"image": f"{HOST}/{FILES[2]}"}]})
    c.check(st == 200, f"data URI and local file: {st} {a}")
    if st == 200:
        c.check(a["data"][0]["embedding"] == a["data"][1]["embedding"] == a["data"][2]["embedding"],
                "data URI = local file = URL")

    # Cache: the same images again are hits, not recomputed; duplicates in one request agree.
    m0 = s.metrics()
    before = hits["count"]
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/{FILES[3]}"}] * 3 +
                                         [{"image": f"{HOST}/redirect/{FILES[3]}"}]})
    c.check(st == 200, f"duplicates: {st} {r}")
    if st == 200:
        e = [d["embedding"] for d in r["data"]]
        c.check(e[0] == e[1] == e[2] == e[3], "duplicates and the redirected copy are identical")
    m1 = s.metrics()
    emb0 = m0.get("sluice_images_embedded_total", 0)
    emb1 = m1.get("sluice_images_embedded_total", 0)
    c.check(emb1 - emb0 <= 1, f"four copies of one image embed at most once ({emb1 - emb0})")
    st, _, r2 = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/{FILES[3]}"}]})
    m2 = s.metrics()
    c.check(m2.get("sluice_images_embedded_total", 0) == emb1, "a cached image is not recomputed")
    c.check(m2.get("sluice_image_cache_hits_total", 0) > m1.get("sluice_image_cache_hits_total", 0),
            "cache hit counted")
    c.check(hits["count"] > before, "images are fetched (content is hashed, not the URL)")
    if st == 200:
        c.check(r2["data"][0]["embedding"] == r["data"][0]["embedding"], "hit = computed")

    # Rerank: a text query (token ids) against image documents, by cosine similarity.
    q = texts[3]
    docs = [{"image": f"{HOST}/{f}"} for f in FILES]
    st, _, r = s.post("/v1/rerank", {"query": q, "documents": docs, "top_n": 3})
    c.check(st == 200, f"rerank: {st} {r}")
    if st == 200:
        want = sorted(range(len(FILES)), key=lambda i: -cos(EXP["texts"][3]["text_embeds"],
                                                          EXP["images"][i]["image_embeds"]))
        got = [x["index"] for x in r["results"]]
        c.check(len(got) == 3, "top_n 3")
        c.check(got == want[:3], f"rerank order {got} vs transformers' {want[:3]}")
        for x in r["results"]:
            c.close(x["relevance_score"], cos(EXP["texts"][3]["text_embeds"],
                                              EXP["images"][x["index"]]["image_embeds"]), 5e-4,
                    "relevance score = cosine similarity")
            c.check(x["document"] == {"image": docs[x["index"]]["image"]}, "document echoed")
    st, _, r = s.post("/v1/rerank", {"query": q, "documents": docs, "return_documents": False})
    c.check(st == 200 and all("document" not in x for x in r["results"]) and
            len(r["results"]) == len(docs), f"return_documents false: {st}")

    # Errors: 4xx naming the problem, the server keeps serving.
    for body, status, what in [
        ({"input": [{"image": f"{HOST}/missing.jpg"}]}, 400, "404"),
        ({"input": [{"image": f"{HOST}/text"}]}, 400, "not"),
        ({"input": [{"image": "ftp://example.com/x.jpg"}]}, 400, "ftp"),
        ({"input": [{"image": "/etc/passwd"}]}, 400, "passwd"),
        ({"input": [{"image": ""}]}, 400, "image"),
        ({"input": [{"image": "x", "text": "y"}]}, 400, "exactly one"),
        ({"input": [{"video": "x"}]}, 400, "video"),
        ({"input": "a text without a tokenizer"}, 400, "tokenizer"),
        ({"input": [[1, 100000]]}, 400, "vocabulary"),
        ({"input": []}, 400, "input"),
        ({"input": [{"image": data_uri}], "dimensions": 8}, 400, "dimensions"),
        ({"input": [{"image": data_uri}], "encoding_format": "int8"}, 400, "encoding_format"),
        ({}, 400, "input"),
        ({"query": q, "documents": []}, 400, "documents"),
        ({"query": q, "documents": docs, "top_n": 0}, 400, "top_n"),
        ({"query": q}, 400, "documents"),
    ]:
        path = "/v1/rerank" if "query" in body else "/v1/embeddings"
        st, _, r = s.post(path, body)
        c.error_shape(st, r, status, f"{path} {json.dumps(body)[:80]}")
        c.check(what in json.dumps(r), f"error names '{what}': {r}")
    m = s.metrics()
    c.check(m.get("sluice_image_fetch_failures_total", 0) >= 3, "fetch failures counted")
    st, _, r = s.post("/v1/embeddings", {"input": {"image": f"{HOST}/{FILES[0]}"}})
    c.check(st == 200, "still serving after the errors")

# Without --allow-private-media-urls: loopback URLs are refused before any byte is sent;
# without --allowed-local-media-path: no local files.
with Server(MODEL) as s:
    before = hits["count"]
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/{FILES[0]}"}]})
    c.error_shape(st, r, 400, "loopback refused")
    c.check("127.0.0.1" in json.dumps(r) or "address" in json.dumps(r), f"names the address: {r}")
    c.check(hits["count"] == before, "nothing was sent to the refused address")
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": os.path.join(IMAGES, FILES[0])}]})
    c.error_shape(st, r, 400, "local file refused")
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": data_uri}]})
    c.check(st == 200, f"data URIs need no fetch: {st}")

httpd.shutdown()
c.finish("e2e_clip")
