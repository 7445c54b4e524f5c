#!/usr/bin/env python3
"""CLIP image ranking, side by side on one GPU in one run (issue 18): sluice serve end to end
vs Hugging Face transformers CLIPModel + CLIPImageProcessor behind a 16-thread
download/decode pool, on the same model directory and the same photos.

Model: a CLIP ViT-L/14-336-shaped CLIPModel (vision hidden 1024, 24 layers, 16 heads, MLP
4096, 336 px, patch 14; text hidden 768, 12 layers; projection 768), seeded random weights,
saved as a normal model directory with CLIPImageProcessor's preprocessor_config.json
(shortest edge 336, center crop 336, bicubic). Photos: --photos (>= 200) distinct synthetic
photos of 3-4 MB (4032x3024 JPEGs: smooth colour fields, edges and sensor noise, encoded by
PIL at the quality that lands in 3-4 MB), served by a local HTTP server on loopback (4
processes on one port, SO_REUSEPORT, keep-alive, bytes from memory). Requests: a text query
(token ids) and 10 image URLs each, cycling over the photos; the feature cache is off
(--image-cache-mb 0), so every image is fetched, decoded, resized and embedded.

1. Served end to end, bf16 and fp32: `sluice serve --device cuda` driven by `sluice bench`
   (/v1/rerank), img/s and p50/p95 at concurrency 1 and 16.
2. HF's optimised Python path: per request, 10 downloads + PIL decodes + CLIPImageProcessor
   (one image each) on a shared 16-thread pool, then one get_image_features forward of the
   10 (and the query's get_text_features), cosine similarity; C client threads, the GPU
   under a lock; img/s and p50 at concurrency 1 and 16 (no HTTP in front of HF: in its
   favour).
3. Model only: HF get_image_features on pre-processed batches of 10 and 64 (bf16, fp32);
   sluice: `sluice embed` on 336x336 PNGs (decode negligible) with --max-image-batch 64.
4. Decode rate per core: `sluice embed --device cpu --threads 1 --image-decode-threads 1`
   on a tiny CLIP of the same 336 px processor over the photos (forward negligible),
   --image-decode exact vs fast; PIL decode + CLIPImageProcessor on one thread next to it.

  python3 bench/peers/hf_clip.py --sluice build/release/sluice --out $OUT/clip-bench

Prints a markdown table and writes results.json under --out. --tiny runs the sluice parts
on a tiny model and fewer, smaller photos (no GPU; without torch/PIL the model and the
JPEGs are written by this script itself): the local check of the script.
"""
import argparse
import io
import json
import math
import os
import random
import re
import signal
import socket
import statistics
import struct
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sluice_client import run_bench, wait_ready  # noqa: E402

VIT_L_336 = dict(
    vision=dict(hidden_size=1024, intermediate_size=4096, num_hidden_layers=24,
                num_attention_heads=16, image_size=336, patch_size=14),
    text=dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
              num_attention_heads=12, vocab_size=49408, max_position_embeddings=77),
    projection_dim=768)
TINY_336 = dict(
    vision=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                num_attention_heads=2, image_size=336, patch_size=14),
    text=dict(hidden_size=32, intermediate_size=64, num_hidden_layers=1,
              num_attention_heads=2, vocab_size=49408, max_position_embeddings=77),
    projection_dim=16)
QUERY = [49406, 320, 1746, 3701, 530, 518, 3144, 49407]  # <sot> ... <eot>
PREPROCESSOR = {
    "crop_size": {"height": 336, "width": 336}, "do_center_crop": True,
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "CLIPImageProcessor", "resample": 3,
    "rescale_factor": 1 / 255, "size": {"shortest_edge": 336}}


def log(*a):
    print(*a, flush=True)


# ---------------------------------------------------------------------------------------
# Model directories


def build_model(path, shape, seed):
    if os.path.exists(os.path.join(path, "model.safetensors")):
        return path
    os.makedirs(path, exist_ok=True)
    try:
        import torch
        from transformers import CLIPConfig, CLIPModel
    except ImportError:
        write_clip_without_torch(path, shape, seed)
    else:
        cfg = CLIPConfig(text_config=dict(shape["text"], eos_token_id=2),
                         vision_config=shape["vision"], projection_dim=shape["projection_dim"])
        torch.manual_seed(seed)
        CLIPModel(cfg).eval().save_pretrained(path, safe_serialization=True)
    with open(os.path.join(path, "preprocessor_config.json"), "w") as f:
        json.dump(PREPROCESSOR, f, indent=2)
    return path


def write_clip_without_torch(path, shape, seed):
    """A random-weight CLIPModel directory (transformers' tensor names) in pure Python."""
    rng = random.Random(seed)
    tensors = {}

    def t(name, *dims, scale=0.02, const=None):
        n = math.prod(dims) if dims else 1
        vals = [const] * n if const is not None else [rng.gauss(0, scale) for _ in range(n)]
        tensors[name] = (list(dims), struct.pack(f"<{n}f", *vals))

    def tower(prefix, c):
        h, m = c["hidden_size"], c["intermediate_size"]
        for i in range(c["num_hidden_layers"]):
            p = f"{prefix}.encoder.layers.{i}."
            for ln in ("layer_norm1", "layer_norm2"):
                t(p + ln + ".weight", h, const=1.0)
                t(p + ln + ".bias", h, const=0.0)
            for proj in ("q_proj", "k_proj", "v_proj", "out_proj"):
                t(p + f"self_attn.{proj}.weight", h, h)
                t(p + f"self_attn.{proj}.bias", h)
            t(p + "mlp.fc1.weight", m, h)
            t(p + "mlp.fc1.bias", m)
            t(p + "mlp.fc2.weight", h, m)
            t(p + "mlp.fc2.bias", h)

    v, x, P = shape["vision"], shape["text"], shape["projection_dim"]
    tower("vision_model", v)
    tower("text_model", x)
    grid = v["image_size"] // v["patch_size"]
    t("vision_model.embeddings.class_embedding", v["hidden_size"])
    t("vision_model.embeddings.patch_embedding.weight", v["hidden_size"], 3, v["patch_size"],
      v["patch_size"])
    t("vision_model.embeddings.position_embedding.weight", grid * grid + 1, v["hidden_size"])
    for ln in ("pre_layrnorm", "post_layernorm"):
        t(f"vision_model.{ln}.weight", v["hidden_size"], const=1.0)
        t(f"vision_model.{ln}.bias", v["hidden_size"], const=0.0)
    t("text_model.embeddings.token_embedding.weight", x["vocab_size"], x["hidden_size"])
    t("text_model.embeddings.position_embedding.weight", x["max_position_embeddings"],
      x["hidden_size"])
    t("text_model.final_layer_norm.weight", x["hidden_size"], const=1.0)
    t("text_model.final_layer_norm.bias", x["hidden_size"], const=0.0)
    t("visual_projection.weight", P, v["hidden_size"])
    t("text_projection.weight", P, x["hidden_size"])
    t("logit_scale", const=2.6592)
    header, off = {}, 0
    for k, (dims, data) in tensors.items():
        header[k] = {"dtype": "F32", "shape": dims, "data_offsets": [off, off + len(data)]}
        off += len(data)
    hb = json.dumps(header).encode()
    hb += b" " * (-len(hb) % 8)
    with open(os.path.join(path, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb)
        for _, data in tensors.values():
            f.write(data)
    cfg = {"architectures": ["CLIPModel"], "model_type": "clip", "projection_dim": P,
           "logit_scale_init_value": 2.6592,
           "text_config": dict(x, hidden_act="quick_gelu", layer_norm_eps=1e-5, eos_token_id=2,
                               bos_token_id=1, pad_token_id=1, model_type="clip_text_model"),
           "vision_config": dict(v, hidden_act="quick_gelu", layer_norm_eps=1e-5,
                                 num_channels=3, model_type="clip_vision_model")}
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)


# ---------------------------------------------------------------------------------------
# Photos


def synthetic_photo(i, w, h, lo, hi):
    """A photo-like JPEG of lo..hi bytes (PIL + numpy): colour fields, shapes, noise."""
    import numpy as np
    from PIL import Image, ImageDraw, ImageFilter
    rng = np.random.default_rng(1000 + i)
    small = Image.fromarray(rng.integers(0, 256, (6, 8, 3), dtype=np.uint8))
    img = small.resize((w, h), Image.BICUBIC)
    d = ImageDraw.Draw(img)
    for _ in range(12):
        x0, y0 = int(rng.integers(0, w)), int(rng.integers(0, h))
        r = int(rng.integers(h // 20, h // 4))
        d.ellipse([x0 - r, y0 - r, x0 + r, y0 + r],
                  fill=tuple(int(c) for c in rng.integers(0, 256, 3)))
    img = img.filter(ImageFilter.GaussianBlur(3))
    arr = np.asarray(img).astype(np.int16)
    sigma = 6.0
    for _ in range(8):
        noisy = np.clip(arr + rng.normal(0, sigma, arr.shape), 0, 255).astype(np.uint8)
        for q in (95, 92, 88, 84, 80, 75):
            buf = io.BytesIO()
            Image.fromarray(noisy).save(buf, "JPEG", quality=q)
            if buf.tell() <= hi:
                break
        if lo <= buf.tell() <= hi:
            return buf.getvalue()
        sigma *= 1.6 if buf.tell() < lo else 0.7
    return buf.getvalue()


def jpeg_without_pil(i, w, h, coeffs):
    """A valid grayscale baseline JPEG with random coefficients (no image library)."""
    rng = random.Random(i)

    def seg(m, d):
        return b"\xff" + bytes([m]) + struct.pack(">H", len(d) + 2) + d
    hdr = (seg(0xDB, b"\x00" + bytes([8] * 64)) +
           seg(0xC0, struct.pack(">BHHB", 8, h, w, 1) + bytes([1, 0x11, 0])) +
           seg(0xC4, bytes([0x00]) + bytes([1] + [0] * 15) + bytes([0])) +
           seg(0xC4, bytes([0x10]) + bytes([0, 2] + [0] * 14) + bytes([0x00, 0x04])) +
           seg(0xDA, bytes([1, 1, 0x00, 0, 63, 0])))
    variants = ["0" + "".join("01" + format(rng.randrange(16), "04b") for _ in range(coeffs)) + "00"
                for _ in range(256)]
    s = "".join(rng.choices(variants, k=((w + 7) // 8) * ((h + 7) // 8)))
    s += "1" * (-len(s) % 8)
    data = int(s, 2).to_bytes(len(s) // 8, "big").replace(b"\xff", b"\xff\x00")
    return b"\xff\xd8" + hdr + data + b"\xff\xd9"


def _write_photo(job):
    i, dst, w, h, lo, hi, have_pil, tiny = job
    data = (synthetic_photo(i, w, h, lo, hi) if have_pil else
            jpeg_without_pil(i, w, h, 10 if tiny else 40))
    with open(dst, "wb") as f:
        f.write(data)


def make_photos(out, n, tiny):
    path = os.path.join(out, "photos")
    os.makedirs(path, exist_ok=True)
    names = [f"{i:04d}.jpg" for i in range(n)]
    todo = [i for i in range(n) if not os.path.exists(os.path.join(path, names[i]))]
    try:
        import numpy  # noqa: F401
        import PIL  # noqa: F401
        have_pil = True
    except ImportError:
        have_pil = False
    w, h = (1600, 1200) if tiny else (4032, 3024)
    lo, hi = ((300 << 10, 600 << 10) if tiny else (3 << 20, 4 << 20))

    jobs = [(i, os.path.join(path, names[i]), w, h, lo, hi, have_pil, tiny) for i in todo]
    if todo:
        t0 = time.time()
        if have_pil:
            from multiprocessing import Pool
            with Pool(min(16, os.cpu_count() or 1)) as p:
                p.map(_write_photo, jobs)  # a module-level function: Pool pickles it
        else:
            for j in jobs:
                _write_photo(j)
        log(f"photos: {len(todo)} written in {time.time() - t0:.0f} s "
            f"({'PIL' if have_pil else 'own grayscale JPEG writer'})")
    sizes = [os.path.getsize(os.path.join(path, x)) for x in names]
    log(f"photos: {n} distinct, {min(sizes) / 2**20:.2f}-{max(sizes) / 2**20:.2f} MB, "
        f"{w}x{h}")
    return path, names, sizes


# ---------------------------------------------------------------------------------------
# Image host: processes sharing one loopback port (SO_REUSEPORT), bytes from memory.


def image_host_main(root, port):
    files = {}
    for name in os.listdir(root):
        with open(os.path.join(root, name), "rb") as f:
            files["/" + name] = f.read()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def do_GET(self):
            body = files.get(self.path)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Type", "image/jpeg")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    class S(ThreadingHTTPServer):
        daemon_threads = True
        request_queue_size = 256

        def server_bind(self):
            self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            super().server_bind()

    S(("127.0.0.1", port), H).serve_forever()


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def start_image_host(root, procs):
    port = free_port()
    ps = [subprocess.Popen([sys.executable, os.path.abspath(__file__), "--image-host", root,
                            "--image-host-port", str(port)]) for _ in range(procs)]
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return port, ps
        except OSError:
            time.sleep(0.2)
    raise RuntimeError("image host did not start")


# ---------------------------------------------------------------------------------------
# sluice


def write_bodies(path, urls, requests, per_request=10):
    with open(path, "w") as f:
        for r in range(requests):
            docs = [{"image": urls[(r * per_request + k) % len(urls)]} for k in range(per_request)]
            f.write(json.dumps({"query": QUERY, "documents": docs, "return_documents": False}) + "\n")


def sluice_served(args, model, dtype, urls, out):
    port = free_port()
    logp = os.path.join(out, f"serve-{dtype}.log")
    cmd = [args.sluice, "serve", "--model", model, "--port", str(port), "--device", args.device,
           "--dtype", dtype, "--allow-private-media-urls", "--image-cache-mb", "0",
           "--image-workers", "32", "--image-fetch-concurrency", "10",
           "--image-decode", args.decode]
    if args.max_image_batch:
        cmd += ["--max-image-batch", str(args.max_image_batch)]
    srv = subprocess.Popen(cmd, stdout=open(logp, "w"), stderr=subprocess.STDOUT)
    res = {}
    try:
        wait_ready(srv, port, logp, timeout_s=600)
        bodies = os.path.join(out, "bodies.jsonl")
        write_bodies(bodies, urls, len(urls) // 10 * 10)  # every photo, then cycled
        run_bench(args.sluice, port, bodies, 4, 8, endpoint="/v1/rerank")  # warm-up
        for c, n in ((1, args.requests_c1), (16, args.requests_c16)):
            busy0 = server_metric(port, "sluice_image_forward_seconds_total")
            before = {"server": proc_times(srv.pid),
                      "host": sum_times([proc_times(p.pid) for p in args.host_procs])}
            t0 = time.time()
            r = run_bench(args.sluice, port, bodies, c, n, endpoint="/v1/rerank")
            wall = time.time() - t0
            after = {"server": proc_times(srv.pid),
                     "host": sum_times([proc_times(p.pid) for p in args.host_procs])}
            res[f"c{c}"] = {"img_per_s": r["docs_per_s"], "p50_ms": r["p50_ms"],
                            "p95_ms": r["p95_ms"], "errors_none": r["errors_none"]}
            # The vision engine's busy fraction (1 = the model is the bound).
            busy1 = server_metric(port, "sluice_image_forward_seconds_total")
            if busy0 is not None and busy1 is not None:
                res[f"c{c}"]["engine_busy"] = (busy1 - busy0) / wall
            # Where the CPU went: cores kept busy by the server and by the image host, and the
            # server's CPU and page faults per image (is the run CPU-bound, and on what).
            imgs = n * 10
            for who in ("server", "host"):
                du, ds, df = (after[who][k] - before[who][k] for k in range(3))
                res[f"c{c}"][f"{who}_cores"] = (du + ds) / wall
                res[f"c{c}"][f"{who}_cpu_ms_per_img"] = 1e3 * (du + ds) / imgs
                res[f"c{c}"][f"{who}_system_ms_per_img"] = 1e3 * ds / imgs
                res[f"c{c}"][f"{who}_faults_per_img"] = df / imgs
            log(f"sluice serve {dtype} c={c}: {r['docs_per_s']:.1f} img/s, p50 {r['p50_ms']:.1f} "
                f"ms, p95 {r['p95_ms']:.1f} ms, errors none: {r['errors_none']}; server "
                f"{res[f'c{c}']['server_cores']:.1f} cores busy, "
                f"{res[f'c{c}']['server_cpu_ms_per_img']:.1f} ms CPU "
                f"({res[f'c{c}']['server_system_ms_per_img']:.1f} system) and "
                f"{res[f'c{c}']['server_faults_per_img']:.0f} page faults per image; image host "
                f"{res[f'c{c}']['host_cores']:.1f} cores; vision engine busy "
                f"{100 * res[f'c{c}'].get('engine_busy', float('nan')):.0f}%")
        for k in ("sluice_image_forwards_total", "sluice_images_embedded_total",
                  "sluice_image_forwards_coalesced_total"):
            v = server_metric(port, k)
            if v is not None:
                res[k] = v
    finally:
        srv.send_signal(signal.SIGTERM)
        srv.wait(timeout=120)
    return res


def server_metric(port, name):
    """A counter of sluice's /metrics (summed over its label sets), or None."""
    try:
        with urllib_open(f"http://127.0.0.1:{port}/metrics") as m:
            txt = m.read().decode()
    except OSError:
        return None
    vals = [float(x) for x in re.findall(r"^" + name + r"(?:\{[^}]*\})? ([\d.e+-]+)$", txt, re.M)]
    return sum(vals) if vals else None


def proc_times(pid):
    """(user s, system s, minor page faults) of a process and its threads, from /proc."""
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return (0.0, 0.0, 0)
    tck = os.sysconf("SC_CLK_TCK")
    return (int(f[11]) / tck, int(f[12]) / tck, int(f[7]))


def sum_times(ts):
    return tuple(sum(t[k] for t in ts) for k in range(3))


def urllib_open(url):
    import urllib.request
    return urllib.request.urlopen(url, timeout=30)


def sluice_embed_rate(args, model, lines, extra, what):
    """`sluice embed` over lines; returns inputs/s from its summary line."""
    return sluice_embed_run(args, model, lines, extra, what)[0]


def sluice_embed_run(args, model, lines, extra, what):
    """`sluice embed` over lines: (inputs/s, the vision tower's images/s of forward time or
    None), from its summary lines."""
    inp = os.path.join(args.out, "embed-in.jsonl")
    with open(inp, "w") as f:
        for l in lines:
            f.write(json.dumps(l) + "\n")
    r = subprocess.run([args.sluice, "embed", "--model", model, "--input", inp, "--output",
                        os.devnull] + extra, capture_output=True, text=True)
    m = re.search(r"done: (\d+) inputs in ([\d.]+) s: ([\d.]+) inputs/s", r.stderr)
    if r.returncode != 0 or not m:
        raise RuntimeError(f"sluice embed ({what}) failed:\n{r.stderr[-2000:]}")
    fwd = re.search(r"vision tower: .*: ([\d.]+) images/s of forward time", r.stderr)
    return float(m.group(3)), (float(fwd.group(1)) if fwd else None)


def square_pngs(args, n):
    """336x336 PNGs (decode negligible) for sluice's model-only figure."""
    path = os.path.join(args.out, "square")
    os.makedirs(path, exist_ok=True)
    import zlib
    out = []
    for i in range(n):
        p = os.path.join(path, f"{i:03d}.png")
        if not os.path.exists(p):
            rng = random.Random(i)
            row = bytes(rng.randrange(256) for _ in range(336 * 3))
            raw = b"".join(b"\0" + row[k:] + row[:k] for k in range(336))

            def chunk(t, d):
                return (struct.pack(">I", len(d)) + t + d +
                        struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF))
            png = (b"\x89PNG\r\n\x1a\n" +
                   chunk(b"IHDR", struct.pack(">IIBBBBB", 336, 336, 8, 2, 0, 0, 0)) +
                   chunk(b"IDAT", zlib.compress(raw, 1)) + chunk(b"IEND", b""))
            with open(p, "wb") as f:
                f.write(png)
        out.append(p)
    return out


# ---------------------------------------------------------------------------------------
# Hugging Face


def features(out):
    """get_*_features: a tensor in transformers 4, an output object (projected pooler_output)
    in transformers 5 (as tests/golden/generate_clip.py reads it)."""
    if hasattr(out, "pooler_output"):
        return out.pooler_output
    return out if hasattr(out, "norm") else out[0]


class HfPath:
    def __init__(self, model_dir, dtype, device):
        import torch
        from transformers import CLIPImageProcessor, CLIPModel
        self.torch = torch
        self.dt = {"bfloat16": torch.bfloat16, "float32": torch.float32}[dtype]
        torch.backends.cuda.matmul.allow_tf32 = False
        self.model = CLIPModel.from_pretrained(model_dir, torch_dtype=self.dt).to(device).eval()
        self.proc = CLIPImageProcessor.from_pretrained(model_dir)
        self.device = device
        self.lock = threading.Lock()
        self.pool = ThreadPoolExecutor(16)
        import urllib3
        self.http = urllib3.PoolManager(maxsize=64)
        self.q = torch.tensor([QUERY], device=device)

    def load(self, url):
        from PIL import Image
        data = self.http.request("GET", url).data
        img = Image.open(io.BytesIO(data)).convert("RGB")
        return self.proc(images=img, return_tensors="pt")["pixel_values"]

    def request(self, urls):
        torch = self.torch
        px = torch.cat(list(self.pool.map(self.load, urls)))
        with self.lock, torch.inference_mode():
            img = features(self.model.get_image_features(pixel_values=px.to(self.device, self.dt)))
            txt = features(self.model.get_text_features(input_ids=self.q))
            img = img / img.norm(dim=-1, keepdim=True)
            txt = txt / txt.norm(dim=-1, keepdim=True)
            return (img @ txt.T).float().cpu()

    def served(self, urls, concurrency, requests):
        lat = []
        lk = threading.Lock()
        todo = list(range(requests))

        def client():
            while True:
                with lk:
                    if not todo:
                        return
                    r = todo.pop()
                t0 = time.perf_counter()
                self.request([urls[(r * 10 + k) % len(urls)] for k in range(10)])
                with lk:
                    lat.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        ts = [threading.Thread(target=client) for _ in range(concurrency)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        lat.sort()
        return {"img_per_s": requests * 10 / wall, "p50_ms": 1000 * statistics.median(lat),
                "p95_ms": 1000 * lat[int(0.95 * (len(lat) - 1))]}

    def model_only(self, batch, reps):
        torch = self.torch
        px = torch.randn(batch, 3, 336, 336, device=self.device, dtype=self.dt)
        with torch.inference_mode():
            for _ in range(3):
                self.model.get_image_features(pixel_values=px)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(reps):
                self.model.get_image_features(pixel_values=px)
            torch.cuda.synchronize()
        return batch * reps / (time.perf_counter() - t0)


def hf_decode_rate(photo_dir, names, model_dir, n):
    from PIL import Image
    from transformers import CLIPImageProcessor
    proc = CLIPImageProcessor.from_pretrained(model_dir)
    datas = [open(os.path.join(photo_dir, x), "rb").read() for x in names[:n]]
    t0 = time.perf_counter()
    for d in datas:
        proc(images=Image.open(io.BytesIO(d)).convert("RGB"), return_tensors="pt")
    return n / (time.perf_counter() - t0)


# ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", default="build/release/sluice")
    ap.add_argument("--out", default=os.path.join(os.environ.get("OUT", "/tmp"), "clip-bench"))
    ap.add_argument("--photos", type=int, default=240)
    ap.add_argument("--requests-c1", type=int, default=60)
    ap.add_argument("--requests-c16", type=int, default=400)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--decode", default="exact", choices=["exact", "fast"],
                    help="sluice serve's --image-decode for the served rows")
    ap.add_argument("--max-image-batch", type=int, default=0)
    ap.add_argument("--decode-photos", type=int, default=60, help="photos in the per-core rows")
    ap.add_argument("--skip", default="", help="comma list of: served,hf,model,decode")
    ap.add_argument("--tiny", action="store_true",
                    help="local check: tiny model on CPU, small photos, no HF")
    ap.add_argument("--image-host", help=argparse.SUPPRESS)
    ap.add_argument("--image-host-port", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.image_host:
        image_host_main(args.image_host, args.image_host_port)
        return
    skip = set(filter(None, args.skip.split(",")))
    if args.tiny:
        args.device = "cpu"
        args.dtypes = "float32"
        skip |= {"hf"}
    os.makedirs(args.out, exist_ok=True)
    results = {"photos": args.photos, "device": args.device}
    big = build_model(os.path.join(args.out, "tiny" if args.tiny else "vit-l-14-336"),
                      TINY_336 if args.tiny else VIT_L_336, 0)
    tiny = build_model(os.path.join(args.out, "tiny"), TINY_336, 0)
    photo_dir, names, sizes = make_photos(args.out, args.photos, args.tiny)
    results["photo_mb"] = [min(sizes) / 2**20, max(sizes) / 2**20]
    port, host_procs = start_image_host(photo_dir, 4)
    args.host_procs = host_procs
    urls = [f"http://127.0.0.1:{port}/{x}" for x in names]
    try:
        for dtype in args.dtypes.split(","):
            if "served" not in skip:
                results[f"sluice_served_{dtype}"] = sluice_served(args, big, dtype, urls, args.out)
            if "hf" not in skip:
                hf = HfPath(big, dtype, args.device)
                hf.served(urls, 4, 8)  # warm-up
                row = {}
                for c, n in ((1, args.requests_c1), (16, args.requests_c16)):
                    row[f"c{c}"] = hf.served(urls, c, n)
                    log(f"HF {dtype} c={c}: {row[f'c{c}']['img_per_s']:.1f} img/s, p50 "
                        f"{row[f'c{c}']['p50_ms']:.1f} ms")
                if "model" not in skip:
                    for b in (10, 64):
                        row[f"model_only_b{b}"] = hf.model_only(b, 20 if b == 10 else 5)
                        log(f"HF {dtype} model only, batch {b}: {row[f'model_only_b{b}']:.1f} img/s")
                results[f"hf_{dtype}"] = row
                del hf
            if "model" not in skip:
                # One distinct PNG per input: the embedder computes identical images in flight
                # once (issue 18 item 5), so repeated inputs would time fewer forwards.
                n_in = 640 if not args.tiny else 128
                lines = [{"image": p} for p in square_pngs(args, n_in)]
                rate, fwd = sluice_embed_run(args, big, lines,
                                             ["--device", args.device, "--dtype", dtype,
                                              "--max-image-batch", "64", "--image-cache-mb", "0"],
                                             "model only")
                results[f"sluice_model_only_{dtype}"] = rate
                results[f"sluice_forward_rate_{dtype}"] = fwd
                log(f"sluice {dtype} model only (336x336 PNGs, batches of 64): {rate:.1f} img/s; "
                    f"the vision tower's own rate (images / time in forwards): "
                    f"{fwd if fwd is None else round(fwd, 1)} img/s")
        if "decode" not in skip:
            lines = [{"image": os.path.join(photo_dir, x)} for x in names[:args.decode_photos]]
            for mode in ("exact", "fast"):
                rate = sluice_embed_rate(args, tiny, lines,
                                         ["--device", "cpu", "--threads", "1",
                                          "--image-decode-threads", "1", "--image-cache-mb", "0",
                                          "--image-decode", mode], f"decode {mode}")
                results[f"sluice_decode_{mode}_per_core"] = rate
                log(f"sluice decode {mode}, one core: {rate:.2f} img/s")
            results["fast_over_exact"] = (results["sluice_decode_fast_per_core"] /
                                          results["sluice_decode_exact_per_core"])
            log(f"fast / exact per core: {results['fast_over_exact']:.2f}x")
            if "hf" not in skip:
                r = hf_decode_rate(photo_dir, names, tiny, min(args.decode_photos, 30))
                results["hf_decode_per_core"] = r
                log(f"PIL decode + CLIPImageProcessor, one thread: {r:.2f} img/s")
    finally:
        for p in host_procs:
            p.terminate()
    with open(os.path.join(args.out, "results.json"), "w") as f:
        json.dump(results, f, indent=2)
    log("\n| path | dtype | c=1 img/s | c=1 p50 ms | c=16 img/s | c=16 p50 ms |")
    log("|---|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        for who in ("sluice_served", "hf"):
            r = results.get(f"{who}_{dtype}")
            if r and "c1" in r:
                log(f"| {who} | {dtype} | {r['c1']['img_per_s']:.1f} | {r['c1']['p50_ms']:.1f} | "
                    f"{r['c16']['img_per_s']:.1f} | {r['c16']['p50_ms']:.1f} |")
    log(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
