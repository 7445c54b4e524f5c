"""Model cache (docs/model-ops.md, "Model cache"): `sluice pull` from a directory, .tar and
.tar.gz archives and a loopback HTTP server; hits, the manifest, SHA-256 checks (a mismatch is
discarded), an interrupted download resumed with a Range request, concurrent pulls coalescing
into one download, a truncated archive, path traversal and links in an archive, a full disk
(simulated with RLIMIT_FSIZE) failing cleanly, LRU eviction under --cache-max-bytes, and
`sluice serve --model NAME=URL --model-cache DIR` serving the pulled model."""
import hashlib
import http.server
import io
import json
import os
import resource
import signal
import subprocess
import tarfile
import tempfile
import threading

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RERANKER = os.path.join(ROOT, "models", "demo-reranker")
WORK = tempfile.mkdtemp(prefix="sluice-cache-")


def pull(source, cache, *extra, preexec_fn=None):
    p = subprocess.run([harness.ARGS.sluice, "pull", source, "--cache", cache] + list(extra),
                       capture_output=True, text=True, preexec_fn=preexec_fn)
    if p.returncode == 0:
        return 0, json.loads(p.stdout.strip().splitlines()[-1])
    return p.returncode, p.stderr + p.stdout


def make_tar(path, mode="w:gz", top="demo-reranker", extra=None):
    with tarfile.open(path, mode) as t:
        t.add(RERANKER, arcname=top)
        for info, data in extra or []:
            t.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def same_tree(a, b):
    for name in os.listdir(b):
        p = os.path.join(b, name)
        if os.path.isfile(p):
            q = os.path.join(a, name)
            if not os.path.isfile(q) or sha(p) != sha(q):
                return False
    return True


def leftovers(cache):
    return [x for x in os.listdir(os.path.join(cache, "tmp")) if not x.endswith(".part")]


# --- loopback HTTP: Range support, a mode that cuts the body short, a request log ---
FILES = {}
LOG = []
CUT = {"bytes": None}


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        data = FILES.get(self.path)
        rng = self.headers.get("Range")
        LOG.append((self.path, rng))
        if data is None:
            self.send_response(404)
            self.end_headers()
            return
        start = int(rng.split("=")[1].split("-")[0]) if rng else 0
        body = data[start:]
        self.send_response(206 if rng else 200)
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if CUT["bytes"] is not None and not rng:
            self.wfile.write(body[:CUT["bytes"]])
            self.wfile.flush()
            self.connection.shutdown(2)  # the connection drops mid-body
            return
        self.wfile.write(body)


httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
BASE = f"http://127.0.0.1:{httpd.server_address[1]}"

try:
    cache = os.path.join(WORK, "cache")
    tgz = make_tar(os.path.join(WORK, "m.tar.gz"))
    tar = make_tar(os.path.join(WORK, "m.tar"), "w")
    # --- local archives and a directory ---
    rc, r = pull(tgz, cache)
    c.check(rc == 0 and not r["hit"] and same_tree(r["path"], RERANKER) and
            r["sha256"] == sha(tgz), f"pull .tar.gz: {r}")
    man = json.load(open(os.path.join(os.path.dirname(r["path"]), ".sluice-manifest.json")))
    c.check(man["root"] == "demo-reranker" and
            {f["path"]: f["sha256"] for f in man["files"]}.get(
                "demo-reranker/model.safetensors") ==
            sha(os.path.join(RERANKER, "model.safetensors")), "manifest holds file SHA-256s")
    rc, r2 = pull(tgz, cache, "--verify")
    c.check(rc == 0 and r2["hit"] and r2["path"] == r["path"], f"second pull is a hit: {r2}")
    rc, r = pull(tar, cache, "--sha256", sha(tar))
    c.check(rc == 0 and same_tree(r["path"], RERANKER), f"pull .tar with its sha256: {r}")
    rc, r = pull(RERANKER, cache)
    c.check(rc == 0 and same_tree(r["path"], RERANKER), f"pull a directory: {r}")
    # .tar.zst (the zstd CLI; two frames concatenated, as `zstd` of a split file writes them)
    zst = os.path.join(WORK, "m.tar.zst")
    subprocess.run(["zstd", "-q", "-f", "-19", tar, "-o", zst], check=True)
    rc, r = pull(zst, cache)
    c.check(rc == 0 and not r["hit"] and same_tree(r["path"], RERANKER) and
            r["sha256"] == sha(zst), f"pull .tar.zst: {r}")
    tdata = open(tar, "rb").read()
    half = len(tdata) // 2
    frames = []
    for i, part in enumerate((tdata[:half], tdata[half:])):
        pth = os.path.join(WORK, f"part{i}")
        open(pth, "wb").write(part)
        subprocess.run(["zstd", "-q", "-f", pth, "-o", pth + ".zst"], check=True)
        frames.append(open(pth + ".zst", "rb").read())
    two = os.path.join(WORK, "two.tzst")
    open(two, "wb").write(frames[0] + frames[1])
    rc, r = pull(two, os.path.join(WORK, "c-zst"))
    c.check(rc == 0 and same_tree(r["path"], RERANKER), f"pull a two-frame .tzst: {r}")
    rc, err = pull(tgz + "#sha256=" + "0" * 64, os.path.join(WORK, "c2"))
    c.check(rc != 0 and "checksum mismatch" in err and
            not os.listdir(os.path.join(WORK, "c2", "models")), f"local checksum mismatch: {err}")
    # A corrupted cached file is noticed by --verify.
    victim = os.path.join(r2["path"], "config.json")
    orig = open(victim, "rb").read()
    with open(victim, "wb") as f:
        f.write(orig.replace(b"{", b"[", 1))
    rc, err = pull(tgz, cache, "--verify")
    c.check(rc != 0 and "the manifest says" in err, f"--verify finds a changed file: {err}")
    with open(victim, "wb") as f:
        f.write(orig)

    # --- broken archives: nothing installed, nothing left behind ---
    c3 = os.path.join(WORK, "c3")
    data = open(tgz, "rb").read()
    cut = os.path.join(WORK, "cut.tar.gz")
    open(cut, "wb").write(data[: len(data) // 2])
    rc, err = pull(cut, c3)
    c.check(rc != 0 and "truncated archive" in err, f"truncated .tar.gz: {err}")
    tdata = open(tar, "rb").read()
    cut_tar = os.path.join(WORK, "cut.tar")
    open(cut_tar, "wb").write(tdata[:4096 + 300])
    rc, err = pull(cut_tar, c3)
    c.check(rc != 0 and "truncated archive" in err, f"truncated .tar: {err}")
    zdata = open(zst, "rb").read()
    cut_zst = os.path.join(WORK, "cut.tar.zst")
    open(cut_zst, "wb").write(zdata[: len(zdata) // 2])
    rc, err = pull(cut_zst, c3)
    c.check(rc != 0 and "truncated archive: the zstd stream is cut short" in err,
            f"truncated .tar.zst: {err}")
    bad_z = bytearray(zdata)
    bad_z[len(bad_z) // 2] ^= 0xFF
    bad_zst = os.path.join(WORK, "bad.tar.zst")
    open(bad_zst, "wb").write(bytes(bad_z))
    rc, err = pull(bad_zst, c3)
    c.check(rc != 0 and "corrupt archive" in err, f"corrupt .tar.zst: {err}")
    bad = bytearray(tdata)
    bad[100] ^= 0x55  # inside the first header
    bad_tar = os.path.join(WORK, "bad.tar")
    open(bad_tar, "wb").write(bytes(bad))
    rc, err = pull(bad_tar, c3)
    c.check(rc != 0 and "header checksum" in err, f"corrupt header: {err}")
    evil = tarfile.TarInfo("../evil.txt")
    evil.size = 3
    rc, err = pull(make_tar(os.path.join(WORK, "evil.tar"), "w", extra=[(evil, b"bad")]), c3)
    c.check(rc != 0 and '".." is refused' in err and not os.path.exists(
        os.path.join(c3, "evil.txt")), f"path traversal: {err}")
    link = tarfile.TarInfo("demo-reranker/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    rc, err = pull(make_tar(os.path.join(WORK, "link.tar"), "w", extra=[(link, None)]), c3)
    c.check(rc != 0 and "links and special files are refused" in err, f"a symlink: {err}")
    c.check(not os.listdir(os.path.join(c3, "models")) and not leftovers(c3),
            f"broken archives leave nothing: {os.listdir(os.path.join(c3, 'tmp'))}")

    # --- full disk (simulated): writes past RLIMIT_FSIZE fail with EFBIG ---
    def small_disk():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (200000, 200000))

    c4 = os.path.join(WORK, "c4")
    rc, err = pull(tgz, c4, preexec_fn=small_disk)
    c.check(rc != 0 and "File too large" in err and
            not os.listdir(os.path.join(c4, "models")) and not leftovers(c4),
            f"full disk fails cleanly: {err}")
    rc, r = pull(tgz, c4)
    c.check(rc == 0 and same_tree(r["path"], RERANKER), "and the next pull succeeds")

    # --- HTTP: checksum, resume, coalescing ---
    FILES["/m.tar.gz"] = data
    url = BASE + "/m.tar.gz"
    c5 = os.path.join(WORK, "c5")
    rc, err = pull(url + "#sha256=" + "1" * 64, c5)
    c.check(rc != 0 and "checksum mismatch" in err and "discarded" in err and
            not os.listdir(os.path.join(c5, "tmp")), f"HTTP checksum mismatch: {err}")
    rc, err = pull(BASE + "/missing.tar.gz", c5)
    c.check(rc != 0 and "HTTP 404" in err, f"HTTP 404: {err}")
    CUT["bytes"] = len(data) // 3
    rc, err = pull(url, c5)
    c.check(rc != 0 and "bytes kept; the next pull resumes them" in err, f"interrupted: {err}")
    CUT["bytes"] = None
    LOG.clear()
    rc, r = pull(url + "#sha256=" + sha(tgz), c5)
    c.check(rc == 0 and r["resumed"] and same_tree(r["path"], RERANKER), f"resumed: {r}")
    c.check(len(LOG) == 1 and LOG[0][1] and LOG[0][1].startswith("bytes=") and
            LOG[0][1] != "bytes=0-", f"resumed with a Range request: {LOG}")
    # Concurrent pulls of one source: one download, every puller gets the entry.
    FILES["/n.tar.gz"] = open(make_tar(os.path.join(WORK, "n.tar.gz"), top="n"), "rb").read()
    LOG.clear()
    procs = [subprocess.Popen([harness.ARGS.sluice, "pull", BASE + "/n.tar.gz", "--cache", c5],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(4)]
    outs = [json.loads(p.communicate()[0].strip()) for p in procs]
    c.check(len({o["path"] for o in outs}) == 1 and sum(not o["hit"] for o in outs) == 1,
            f"concurrent pulls coalesce: {outs}")
    c.check([x for x in LOG if x[0] == "/n.tar.gz"] == [("/n.tar.gz", None)],
            f"one download for four pulls: {LOG}")

    # --- LRU eviction under --cache-max-bytes ---
    c6 = os.path.join(WORK, "c6")
    size = 1606025 + 10000  # an entry of the demo model, with room to spare
    srcs = [make_tar(os.path.join(WORK, f"lru{i}.tar"), "w", top=f"m{i}") for i in range(3)]
    paths = []
    for s in srcs[:2]:
        rc, r = pull(s, c6, "--cache-max-bytes", str(2 * size))
        paths.append(r["path"] if rc == 0 else None)
    pull(srcs[0], c6, "--cache-max-bytes", str(2 * size))  # m0 used again: m1 is the oldest
    rc, r = pull(srcs[2], c6, "--cache-max-bytes", str(2 * size))
    c.check(rc == 0 and r["cache_bytes"] <= 2 * size and os.path.isdir(paths[0]) and
            not os.path.exists(paths[1]), f"LRU evicts m1: {r}")
    rc, err = pull(srcs[1], c6, "--cache-max-bytes", "1000")
    c.check(rc != 0 and "more than --cache-max-bytes" in err, f"larger than the cache: {err}")

    # --- serve from a URL through the cache ---
    c7 = os.path.join(WORK, "c7")
    with Server(None, "--model", "r=" + url + "#sha256=" + sha(tgz), "--model-cache", c7) as s:
        st, _, body = s.post("/v1/rerank", {"model": "r", "query": "How do salmon swim?",
                                            "documents": ["Salmon swim up the river.",
                                                          "Traders sell shares."]})
        c.check(st == 200 and body["results"][0]["index"] == 0, f"serve from a URL: {st} {body}")
        c.check(any("model r: pulled " in line for line in s.log), "start-up logs the pull")
        # While served, the entry is in use: a pull that needs its room is refused.
        rc, err = pull(srcs[0], c7, "--cache-max-bytes", str(size))
        c.check(rc != 0 and "in use" in err, f"a served entry is not evicted: {err}")
    p = subprocess.run([harness.ARGS.sluice, "serve", "--model", "r=" + url, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    c.check(p.returncode != 0 and "--model-cache" in p.stderr + p.stdout,
            "a URL without --model-cache is refused")
    # --- a pulled model naming plugins in its sluice.json: refused unless allowed ---
    kw = os.path.join(os.path.dirname(os.path.abspath(harness.ARGS.sluice)), "plugins",
                      "keyword_rerank.so")
    with open(kw, "rb") as f:
        kw_bytes = f.read()

    def member(name, data):
        info = tarfile.TarInfo("demo-reranker/" + name)
        info.size = len(data)
        info.mode = 0o644
        return info, data

    ptgz = make_tar(os.path.join(WORK, "plug.tar.gz"),
                    extra=[member("kw.so", kw_bytes),
                           member("sluice.json", json.dumps({"plugins": ["kw.so"]}).encode())])
    c9 = os.path.join(WORK, "c9")
    p = subprocess.run([harness.ARGS.sluice, "serve", "--model", "r=" + ptgz, "--model-cache", c9,
                        "--port", "0"], capture_output=True, text=True, timeout=60)
    out = p.stderr + p.stdout
    c.check(p.returncode != 0 and "--allow-pulled-model-plugins" in out and "kw.so" in out,
            f"a pulled model's sluice.json plugins are refused: {out[-400:]}")
    with Server(None, "--model", "r=" + ptgz, "--model-cache", c9,
                "--allow-pulled-model-plugins") as s:
        st, _, body = s.post("/plugins/keyword_rerank",
                             {"query": "How do salmon swim?", "keywords": ["river"],
                              "documents": ["Salmon swim up the river.", "Traders sell shares."]})
        c.check(st == 200 and body.get("results"), f"allowed: the pulled plugin serves {st} {body}")
    # The operator's own --plugin still loads for a pulled model without the flag.
    with Server(None, "--model", "r=" + tgz, "--model-cache", c9, "--plugin", kw) as s:
        st, _, body = s.post("/plugins/keyword_rerank",
                             {"query": "How do salmon swim?", "keywords": ["river"],
                              "documents": ["Salmon swim up the river.", "Traders sell shares."]})
        c.check(st == 200, f"--plugin on a pulled model: {st} {body}")

    # --- a repository's model.json "sources": versions pulled as they load; cache metrics ---
    repo = os.path.join(WORK, "repo")
    os.makedirs(os.path.join(repo, "r"))
    with open(os.path.join(repo, "r", "model.json"), "w") as f:
        json.dump({"version_policy": {"all": {}},
                   "sources": {"1": tgz, "2": url + "#sha256=" + sha(tgz)}}, f)
    c8 = os.path.join(WORK, "c8")
    for attempt in ("miss", "hit"):
        with Server(None, "--model-repository", repo, "--model-cache", c8) as s:
            st, _, body = s.post("/v1/rerank", {"model": "r:2", "query": "How do salmon swim?",
                                                "documents": ["Salmon swim up the river.",
                                                              "Traders sell shares."]})
            c.check(st == 200 and body["results"][0]["index"] == 0,
                    f"a model.json source serves ({attempt}): {st} {body}")
            st, _, text = s.get("/metrics")
            text = text if isinstance(text, str) else text.decode()
            want = f'sluice_model_cache_requests_total{{result="{attempt}"}} 2'
            c.check(st == 200 and want in text and
                    ("sluice_model_cache_bytes_total 0" in text) == (attempt == "hit"),
                    f"cache metrics after the {attempt}es: " +
                    "; ".join(x for x in text.splitlines() if x.startswith("sluice_model_cache")))
            c.check(s.logged('version 2: pulled ' + url, 'version 2: cached ' + url),
                    "the version's pull is logged")
    p = subprocess.run([harness.ARGS.sluice, "serve", "--model-repository", repo, "--port", "0"],
                       capture_output=True, text=True, timeout=60)
    c.check(p.returncode != 0 and "needs --model-cache" in p.stderr + p.stdout,
            f"a source without --model-cache fails its load: {(p.stderr + p.stdout)[-300:]}")
    with open(os.path.join(repo, "r", "model.json"), "w") as f:
        json.dump({"sources": {"1": os.path.join(WORK, "no-such.txt")}}, f)
    p = subprocess.run([harness.ARGS.sluice, "serve", "--model-repository", repo, "--port", "0",
                        "--model-cache", c8], capture_output=True, text=True, timeout=60)
    c.check(p.returncode != 0 and '"sources.1" must be a string naming an archive' in
            p.stderr + p.stdout, f"a bad source is refused: {(p.stderr + p.stdout)[-300:]}")
finally:
    httpd.shutdown()
    subprocess.run(["rm", "-rf", WORK])

c.finish("e2e_cache")
