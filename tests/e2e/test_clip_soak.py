"""Image memory soak (label slow): 1,000 /v1/rerank requests of 10 large images each (3000x2000
JPEGs, 18 MB of RGB once decoded, 1,000 distinct by content among 10,000 image slots, so
about a thousand full decodes and the rest cache hits after fetch and hash), at concurrency
16, fetched from a loopback HTTP server. RSS after the last 500 requests grows by less than
10% over RSS after the first 500, and the peak (VmHWM) stays under 1.5 GiB: the decode pool,
the bounded queue of pre-processed images and the per-request fetch limits bound memory
whatever the load. The JPEGs are written here (baseline, grayscale, a fixed Huffman table):
no image library needed."""
import http.server
import os
import random
import struct
import threading
import time

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
MODEL = os.path.join(harness.ARGS.fixtures, "clip", "clip_quickgelu", "model")


def jpeg_gray(w, h, seed, coeffs=10):
    """A valid baseline JPEG, w x h, grayscale, random AC coefficients in every block."""
    rng = random.Random(seed)

    def seg(m, d):
        return b"\xff" + bytes([m]) + struct.pack(">H", len(d) + 2) + d
    dqt = seg(0xDB, b"\x00" + bytes([8] * 64))
    sof = seg(0xC0, struct.pack(">BHHB", 8, h, w, 1) + bytes([1, 0x11, 0]))
    # DC: category 0 only, code "0"; AC: EOB "00", (run 0, size 4) "01".
    dht_dc = seg(0xC4, bytes([0x00]) + bytes([1] + [0] * 15) + bytes([0]))
    dht_ac = seg(0xC4, bytes([0x10]) + bytes([0, 2] + [0] * 14) + bytes([0x00, 0x04]))
    sos = seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0]))
    variants = ["0" + "".join("01" + format(rng.randrange(16), "04b") for _ in range(coeffs)) + "00"
                for _ in range(256)]
    s = "".join(rng.choices(variants, k=((w + 7) // 8) * ((h + 7) // 8)))
    s += "1" * (-len(s) % 8)
    data = int(s, 2).to_bytes(len(s) // 8, "big").replace(b"\xff", b"\xff\x00")
    return b"\xff\xd8" + dqt + sof + dht_dc + dht_ac + sos + data + b"\xff\xd9"


BASE = jpeg_gray(3000, 2000, 1)
N_DISTINCT = 1000


def image(i):
    # Distinct content per index (a comment segment), the same pixels: each is a cache miss.
    com = b"\xff\xfe" + struct.pack(">H", 2 + 8) + struct.pack(">Q", i)
    return BASE[:2] + com + BASE[2:]


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):
        pass

    def do_GET(self):
        body = image(int(self.path.strip("/").split(".")[0]))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "image/jpeg")
        self.end_headers()
        self.wfile.write(body)


class ImageHost(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 512  # every connection the server opens at once is accepted


httpd = ImageHost(("127.0.0.1", 0), Handler)
threading.Thread(target=httpd.serve_forever, daemon=True).start()
HOST = f"http://127.0.0.1:{httpd.server_address[1]}"


def status_kb(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def run(s, n, seed):
    errors = []
    lock = threading.Lock()
    todo = list(range(n))

    def worker(t):
        rng = random.Random(seed * 100 + t)
        conn = s.conn(timeout=300)
        while True:
            with lock:
                if not todo:
                    return
                todo.pop()
            docs = [{"image": f"{HOST}/{rng.randrange(N_DISTINCT)}.jpg"} for _ in range(10)]
            st, _, r = s.post("/v1/rerank", {"query": [5, 6, 7, 2], "documents": docs,
                                             "return_documents": False}, conn=conn)
            if st != 200 or len(r.get("results", [])) != 10:
                errors.append((st, str(r)[:200]))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


t0 = time.time()
# Generous fetch timeouts: the point is memory, and the Python image host is slow on a busy
# machine.
with Server(MODEL, "--allow-private-media-urls", "--image-workers", "16",
            "--image-fetch-timeout", "300", "--image-connect-timeout", "60",
            "--image-fetch-concurrency", "4") as s:
    errors = run(s, 200, 1)
    first = status_kb(s.proc.pid, "VmRSS")
    errors += run(s, 300, 2)
    before = status_kb(s.proc.pid, "VmRSS")
    errors += run(s, 500, 3)
    after = status_kb(s.proc.pid, "VmRSS")
    peak = status_kb(s.proc.pid, "VmHWM")
    m = s.metrics()
    print(f"RSS after 200 requests {first / 1024:.0f} MiB, after 500 {before / 1024:.0f} MiB, "
          f"after 1000 {after / 1024:.0f} MiB, "
          f"peak {peak / 1024:.0f} MiB; {m.get('sluice_images_embedded_total', 0):.0f} images "
          f"embedded in {m.get('sluice_image_forwards_total', 0):.0f} forwards "
          f"({m.get('sluice_image_forwards_coalesced_total', 0):.0f} across requests); "
          f"{time.time() - t0:.0f} s", flush=True)
    c.check(not errors, f"every request answered 200 with 10 results: {errors[:3]}")
    c.check(after < before * 1.10, f"RSS grows by less than 10%: {before} -> {after} kB")
    c.check(peak < 1536 * 1024, f"peak RSS under 1.5 GiB: {peak} kB")
    c.check(m.get("sluice_images_embedded_total", 0) >= 500, "large images were decoded and embedded")
    c.check(m.get("sluice_image_cache_hits_total", 0) > 0, "repeated images hit the cache")

httpd.shutdown()
c.finish("e2e_clip_soak")
