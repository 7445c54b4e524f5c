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
import re
import struct
import threading
import time
import zlib

import harness
from harness import Server, start_fails

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


def bomb_png(w, h):
    """A w x h 1-bit grayscale PNG of zeros: tiny file, w*h pixels once decoded."""
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    co = zlib.compressobj(9)
    row = b"\0" * (1 + (w + 7) // 8)
    idat = b"".join(co.compress(row * 1000) for _ in range(h // 1000)) + co.flush()
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 1, 0, 0, 0, 0)) +
            chunk(b"IDAT", idat) + chunk(b"IEND", b""))


BOMB = bomb_png(30000, 30000)

# Loopback image host: /<file> serves tests/fixtures/images/<file>; /missing 404s;
# /redirect/<file> redirects; /text is not an image.
hits = {"count": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        hits["count"] += 1
        p = self.path.lstrip("/")
        if p.startswith("redirect-to/"):  # redirect-to/<host:port>/<file>
            self.send_response(302)
            self.send_header("Location", "http://" + p[len("redirect-to/"):])
            self.end_headers()
            return
        if p.startswith("redirect/"):
            self.send_response(302)
            self.send_header("Location", "/" + p[len("redirect/"):])
            self.end_headers()
            return
        if p.startswith("slow/"):
            time.sleep(3)
            p = p[len("slow/"):]
        if p == "text":
            body = b"this is not an image"
        elif p == "truncated.jpg":
            with open(os.path.join(IMAGES, "jpeg420.jpg"), "rb") as f:
                body = f.read()[:600]
        elif p == "bomb.png":
            body = BOMB
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
# A second loopback image host on 127.0.0.2: only ever the target of refused redirects.
hits2 = {"count": 0}


class Handler2(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        hits2["count"] += 1
        self.send_response(404)
        self.end_headers()


httpd2 = http.server.ThreadingHTTPServer(("127.0.0.2", 0), Handler2)
threading.Thread(target=httpd2.serve_forever, daemon=True).start()
HOST2 = f"127.0.0.2:{httpd2.server_address[1]}"
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


    # /score (vLLM's shape): text_1 against image items, 1:N; vLLM's {"content": [parts]}.
    def cos_ti(t, i):
        return cos(EXP["texts"][t]["text_embeds"], EXP["images"][i]["image_embeds"])
    st, _, r = s.post("/score", {"text_1": q, "text_2": docs})
    c.check(st == 200, f"score 1:N: {st} {r}")
    if st == 200:
        c.check(r["object"] == "list" and r["id"].startswith("score-") and r["model"], "envelope")
        c.check([d["index"] for d in r["data"]] == list(range(len(docs))), "one score per item")
        c.check(all(d["object"] == "score" for d in r["data"]), "object score")
        for d in r["data"]:
            c.close(d["score"], cos_ti(3, d["index"]), 5e-4, f"score {d['index']} = cosine")
        c.check(r["usage"]["prompt_tokens"] == len(q), f"usage counts the text tokens: {r['usage']}")
    parts = {"content": [{"type": "image_url", "image_url": {"url": f"{HOST}/{f}"}} for f in FILES[:3]]}
    st, _, r = s.post("/v1/score", {"text_1": q, "text_2": parts})
    c.check(st == 200 and len(r["data"]) == 3, f"score with vLLM content parts: {st} {r}")
    if st == 200:
        for d in r["data"]:
            c.close(d["score"], cos_ti(3, d["index"]), 5e-4, f"content part {d['index']}")
    # N:N with queries/documents: pairs by position; a text as {"type": "text"} needs a
    # tokenizer, so ids; image to image (1:1) is 1.
    st, _, r = s.post("/score", {"queries": [texts[0], texts[1]],
                                 "documents": [{"image": f"{HOST}/{FILES[0]}"},
                                               {"type": "image_url", "image_url": f"{HOST}/{FILES[1]}"}]})
    c.check(st == 200 and len(r["data"]) == 2, f"score N:N: {st} {r}")
    if st == 200:
        c.close(r["data"][0]["score"], cos_ti(0, 0), 5e-4, "N:N pair 0")
        c.close(r["data"][1]["score"], cos_ti(1, 1), 5e-4, "N:N pair 1")
    st, _, r = s.post("/score", {"text_1": {"image": f"{HOST}/{FILES[2]}"},
                                 "text_2": {"image": data_uri}})
    c.check(st == 200 and abs(r["data"][0]["score"] - 1) < 1e-5, f"score 1:1 same image: {st} {r}")
    for body, what in [
        ({"text_1": [texts[0], texts[1]], "text_2": docs}, "text_1"),
        ({"text_1": q}, "text_2"),
        ({"text_1": q, "text_2": {"content": [{"type": "video_url", "video_url": {"url": "x"}}]}},
         "video_url"),
        ({"text_1": q, "text_2": {"content": []}}, "content"),
        ({"text_1": q, "text_2": docs, "truncate_prompt_tokens": 5}, "truncate_prompt_tokens"),
        ({"text_1": q, "text_2": [{"type": "image_url", "image_url": {"url": ""}}]}, "image_url"),
    ]:
        st, _, r = s.post("/score", body)
        c.error_shape(st, r, 400, f"/score {json.dumps(body)[:80]}")
        c.check(what in json.dumps(r), f"/score error names '{what}': {r}")

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

    # SSRF: private, link-local/metadata and IPv6 loopback addresses and a name resolving to
    # loopback are refused too, without a connection.
    for url in ["http://10.0.0.1/a.jpg", "http://169.254.169.254/latest/meta-data",
                "http://[::1]:%d/%s" % (httpd.server_address[1], FILES[0]),
                "http://localhost:%d/%s" % (httpd.server_address[1], FILES[0])]:
        before = hits["count"]
        st, _, r = s.post("/v1/embeddings", {"input": [{"image": url}]})
        c.error_shape(st, r, 400, f"refused {url}")
        c.check(hits["count"] == before, f"nothing sent for {url}")

# Limits: bytes per image, total fetch timeout, a truncated JPEG, a decompression bomb
# refused by its header before any pixel memory; duplicates among others; fast decode.
with Server(MODEL, "--allow-private-media-urls", "--max-image-bytes", "200000",
            "--image-fetch-timeout", "1") as s:
    for body, what in [
        ({"input": [{"image": f"{HOST}/slow/{FILES[0]}"}]}, "time"),
        ({"input": [{"image": f"{HOST}/truncated.jpg"}]}, "truncated.jpg"),
        ({"input": [{"image": f"{HOST}/bomb.png"}]}, "pixels"),
    ]:
        t0 = time.time()
        st, _, r = s.post("/v1/embeddings", body)
        c.error_shape(st, r, 400, f"limit {what}")
        c.check(what in json.dumps(r), f"error names '{what}': {r}")
        c.check(time.time() - t0 < 10, f"{what}: answered promptly")
    # Oversize: a data URI is checked against the same per-image limit.
    big = "data:image/png;base64," + base64.b64encode(b"\0" * 300000).decode()
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": big}]})
    c.error_shape(st, r, 400, "oversize image")

with Server(MODEL, "--allow-private-media-urls", "--image-decode", "fast") as s:
    # 50 copies of one image among others: every copy equals the image alone.
    st, _, alone = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/{FILES[4]}"}]})
    mix = [{"image": f"{HOST}/{FILES[4]}"}] * 50 + [{"image": f"{HOST}/{f}"} for f in FILES]
    st2, _, r = s.post("/v1/embeddings", {"input": mix})
    c.check(st == 200 and st2 == 200, f"50 copies: {st} {st2} {r}")
    if st == 200 and st2 == 200:
        e0 = alone["data"][0]["embedding"]
        c.check(all(d["embedding"] == e0 for d in r["data"][:50]), "50 copies = alone")
        c.check(r["data"][50 + 4]["embedding"] == e0, "the copy among the others = alone")
        # fast decode (JPEG DCT scaling) vs transformers' exact pipeline: documented bound.
        worst = 0.0
        for i, im in enumerate(EXP["images"]):
            want = norm(im["image_embeds"])
            got = r["data"][50 + i]["embedding"]
            worst = max(worst, max(abs(a - b) for a, b in zip(got, want)))
        print(f"fast decode: max |embedding - transformers'| = {worst:.2e}", flush=True)
        c.check(worst <= 5e-2, f"fast decode within 5e-2 of exact ({worst})")


# A redirect to a refused address is refused before any byte is sent there: the redirecting
# host (127.0.0.1) is let through by --allowed-media-address, its redirect targets are not.
with Server(MODEL, "--allowed-media-address", "127.0.0.1") as s:
    st, _, r = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/{FILES[0]}"}]})
    c.check(st == 200, f"an allowed address is fetched: {st} {r}")
    for target in [f"{HOST2}/{FILES[0]}", f"10.0.0.1/{FILES[0]}", f"169.254.169.254/latest"]:
        before, before2 = hits["count"], hits2["count"]
        st, _, r = s.post("/v1/embeddings", {"input": [{"image": f"{HOST}/redirect-to/{target}"}]})
        c.error_shape(st, r, 400, f"redirect to {target} refused")
        c.check(hits["count"] == before + 1, "the redirecting host was asked")
        c.check(hits2["count"] == 0, f"nothing was sent to the redirect target {target}")
        c.check("address" in json.dumps(r) or "refused" in json.dumps(r),
                f"the error says why: {r}")

# Offline: `sluice embed` and `sluice score` on the CLIP directory, local files by default.
import subprocess
import tempfile
with tempfile.TemporaryDirectory() as tmp:
    inp = os.path.join(tmp, "in.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps({"image": os.path.join(IMAGES, FILES[0])}) + "\n")
        f.write(json.dumps({"input_ids": texts[1]}) + "\n")
        f.write(json.dumps({"image": data_uri}) + "\n")
    out = os.path.join(tmp, "out.jsonl")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", MODEL, "--input", inp,
                        "--output", out], capture_output=True, text=True, timeout=300)
    c.check(p.returncode == 0, f"sluice embed on CLIP: {p.returncode} {p.stderr[-500:]}")
    # The summary's vision-tower line: the two images, the model's own rate.
    m = re.search(r"vision tower: 2 images in (\d+) forwards, ([\d.]+) s in forwards: "
                  r"([\d.]+) images/s of forward time", p.stderr)
    c.check(m is not None and 1 <= int(m.group(1)) <= 2 and float(m.group(3)) > 0,
            f"offline vision tower summary: {p.stderr[-400:]}")
    if p.returncode == 0:
        rows = [json.loads(l) for l in open(out)]
        c.check([r["index"] for r in rows] == [0, 1, 2], "one line per input")
        c.close(rows[0]["embedding"], norm(EXP["images"][0]["image_embeds"]), 5e-4, "offline image")
        c.close(rows[1]["embedding"], norm(EXP["texts"][1]["text_embeds"]), 1e-4, "offline text ids")
        c.close(rows[2]["embedding"], norm(EXP["images"][2]["image_embeds"]), 5e-4, "offline data URI")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", MODEL, "--input", inp,
                        "--normalize", "off"], capture_output=True, text=True, timeout=300)
    if p.returncode == 0:
        row = json.loads(p.stdout.splitlines()[0])
        c.close(row["embedding"], EXP["images"][0]["image_embeds"], 5e-4, "offline raw projection")
    with open(inp, "w") as f:
        for i in range(4):
            f.write(json.dumps({"query": texts[3], "document": {"image": os.path.join(IMAGES, FILES[i])}}) + "\n")
    p = subprocess.run([harness.ARGS.sluice, "score", "--model", MODEL, "--input", inp],
                       capture_output=True, text=True, timeout=300)
    c.check(p.returncode == 0, f"sluice score on CLIP: {p.returncode} {p.stderr[-500:]}")
    if p.returncode == 0:
        rows = [json.loads(l) for l in p.stdout.splitlines()]
        for i, r in enumerate(rows):
            c.close(r["score"], cos(EXP["texts"][3]["text_embeds"], EXP["images"][i]["image_embeds"]),
                    5e-4, f"offline score {i}")
    # Errors name the line; private URLs refused offline too; classify does not apply.
    with open(inp, "w") as f:
        f.write(json.dumps({"image": os.path.join(IMAGES, FILES[0])}) + "\n")
        f.write(json.dumps({"image": f"{HOST}/{FILES[1]}"}) + "\n")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", MODEL, "--input", inp],
                       capture_output=True, text=True, timeout=300)
    c.check(p.returncode != 0 and "in.jsonl:2" in p.stderr, f"offline refused URL names the line: {p.stderr[-300:]}")
    p = subprocess.run([harness.ARGS.sluice, "classify", "--model", MODEL, "--input", inp],
                       capture_output=True, text=True, timeout=300)
    c.check(p.returncode != 0 and "CLIP" in p.stderr, f"classify on CLIP: {p.stderr[-300:]}")
    # The text engine's settings do nothing for a CLIP model: refused, named, not ignored.
    with open(inp, "w") as f:
        f.write(json.dumps({"image": os.path.join(IMAGES, FILES[0])}) + "\n")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", MODEL, "--input", inp, "--output",
                        os.devnull, "--profile", "--max-num-seqs", "8", "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    c.check(p.returncode != 0 and "--profile" in p.stderr and "--max-num-seqs" in p.stderr and "CLIP" in p.stderr
            and "--max-image-batch" in p.stderr, f"offline text-engine flags refused: {p.stderr[-300:]}")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", MODEL, "--input", inp, "--output",
                        os.devnull, "--threads", "1", "--max-image-batch", "4"],
                       capture_output=True, text=True, timeout=300)
    c.check(p.returncode == 0, f"offline --threads and --max-image-batch apply: {p.stderr[-300:]}")


# Served: the same from the command line with one model and from a CLIP model's model.json;
# with several models the text flags are for the others, and must reach one.
RERANKER = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                        "demo-reranker"))
err = start_fails("--model", MODEL, "--truncate", "--max-queue-depth", "8", "--cuda-graph-max-tokens", "64")
c.check("--cuda-graph-max-tokens, --truncate, --max-queue-depth" in err and "CLIP" in err,
        f"one CLIP model refuses text-engine flags: {err[-300:]}")
with tempfile.TemporaryDirectory() as repo:
    import shutil
    shutil.copytree(MODEL, os.path.join(repo, "clip", "1"))
    with open(os.path.join(repo, "clip", "model.json"), "w") as f:
        json.dump({"max_num_seqs": 4, "truncate": True}, f)
    err = start_fails("--model-repository", repo)
    c.check("model.json max_num_seqs, model.json truncate" in err and "CLIP" in err,
            f"a CLIP model.json's text-engine settings refused: {err[-300:]}")
with Server(None, "--model", "clip=" + MODEL, "--model", "rr=" + RERANKER, "--max-num-seqs", "8",
            "--truncate", "--max-inputs-per-request", "3", "--image-decode", "fast") as s:
    st, _, r = s.post("/v1/embeddings", {"model": "clip", "input": [{"image": data_uri}] * 4})
    c.check(st == 400 and "3" in json.dumps(r), f"--max-inputs-per-request reaches clip: {st} {r}")
    st, _, r = s.post("/v1/embeddings", {"model": "clip", "input": [{"image": data_uri}]})
    c.check(st == 200, f"clip beside a text model with its flags: {st} {r}")
err = start_fails("--model", "a=" + MODEL, "--model", "b=" + MODEL, "--truncate")
c.check("--truncate" in err and "text scoring model" in err,
        f"a text flag reaching only CLIP models stops start-up: {err[-300:]}")
err = start_fails("--model", "a=" + MODEL, "--model", "b=" + MODEL, "--residual-dtype", "activation")
c.check("--residual-dtype" in err and "every start-up model is a CLIP model" in err,
        f"an engine flag reaching only CLIP models stops start-up: {err[-300:]}")
# And the image flags need a CLIP model.
err = start_fails("--model", RERANKER, "--image-decode", "fast", "--max-image-batch", "4")
c.check("--image-decode, --max-image-batch" in err and "not a CLIP model" in err,
        f"image flags on a text model refused: {err[-300:]}")
err = start_fails("--model", "a=" + RERANKER, "--model", "b=" + RERANKER, "--image-cache-mb", "3")
c.check("--image-cache-mb" in err and "none of the start-up models is a CLIP model" in err,
        f"an image flag reaching no CLIP model stops start-up: {err[-300:]}")
with tempfile.TemporaryDirectory() as tmp:
    inp = os.path.join(tmp, "in.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps({"input_ids": [1, 20, 2]}) + "\n")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", RERANKER, "--input", inp,
                        "--output", os.devnull, "--image-decode", "fast"],
                       capture_output=True, text=True, timeout=300)
    c.check(p.returncode != 0 and "--image-decode" in p.stderr and "not a CLIP model" in p.stderr,
            f"offline image flag on a text model refused: {p.stderr[-300:]}")
    p = subprocess.run([harness.ARGS.sluice, "embed", "--model", RERANKER, "--input", inp,
                        "--output", os.devnull], capture_output=True, text=True, timeout=300)
    c.check(p.returncode == 0, f"the same without it runs: {p.stderr[-300:]}")

httpd.shutdown()
httpd2.shutdown()
c.finish("e2e_clip")
