#!/usr/bin/python3
"""Generates the image decode and resize parity fixtures (tests/fixtures/images/).

Reference: Pillow (Debian python3-pil), the library Hugging Face image processors decode and
resize with (CLIPImageProcessor: PIL decode, convert("RGB"), PIL bicubic resize of the
shortest edge, center crop). Synthetic images (gradients, noise, sharp edges; seeded) of odd
sizes are encoded as JPEG (4:2:0, 4:4:4, progressive, grayscale), PNG (RGB, RGBA, palette,
grayscale, gray+alpha, 16-bit RGB) and WebP (lossy, lossless, with alpha); for each encoded
file the fixture records what Pillow decodes it to (after convert("RGB")) and what
Image.resize gives for several target sizes and filters (bicubic, bilinear; up and down,
one axis only, both). The C++ test (tests/unit/media/) must produce the same bytes.

Usage: /usr/bin/python3 tests/golden/generate_images.py [--out tests/fixtures/images]
Files: <name>.<ext> (the encoded image), <name>.rgb (decoded RGB, row-major: the test
compares bytes and reports the first difference), and cases.json (per image: file, mode,
width, height, CRC-32 of the decoded RGB, and resize cases with their output size, filter
and the CRC-32 (zlib's) of the resized RGB). The exif* images carry EXIF orientations 2-8
in JPEG, PNG and WebP; their expected pixels are ImageOps.exif_transpose's, as transformers'
load_image applies it.
"""
import argparse
import io
import json
import os
import random
import struct
import zlib

from PIL import Image

HERE = os.path.dirname(os.path.abspath(__file__))


def synthetic(w, h, seed, mode="RGB"):
    rng = random.Random(seed)
    img = Image.new("RGB", (w, h))
    px = img.load()
    for y in range(h):
        for x in range(w):
            r = (x * 255) // max(1, w - 1)
            g = (y * 255) // max(1, h - 1)
            b = ((x ^ y) * 7 + rng.randrange(0, 48)) & 255
            if (x // 9 + y // 7) % 5 == 0:  # sharp-edged blocks (ringing in resizes)
                r, g, b = 255 - r, 255 - g, 20
            px[x, y] = (r, g, b)
    if mode == "RGB":
        return img
    if mode == "RGBA":
        a = Image.linear_gradient("L").resize((w, h))
        img.putalpha(a)
        return img
    if mode == "L":
        return img.convert("L")
    if mode == "LA":
        out = img.convert("L")
        out.putalpha(Image.linear_gradient("L").resize((w, h)))
        return out
    if mode == "P":
        return img.quantize(colors=61, method=Image.Quantize.MEDIANCUT)
    raise ValueError(mode)


def encode(img, fmt, **kw):
    buf = io.BytesIO()
    img.save(buf, fmt, **kw)
    return buf.getvalue()


def crc(b):
    return zlib.crc32(b) & 0xFFFFFFFF


RESIZES = [
    # (width, height, filter): down both, up both, one axis, aspect change, tiny
    (61, 40, "bicubic"), (224, 224, "bicubic"), (97, 33, "bicubic"), (50, 71, "bicubic"),
    (13, 9, "bicubic"), (300, 157, "bicubic"), (61, 40, "bilinear"), (180, 120, "bilinear"),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "fixtures", "images"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    images = [
        ("jpeg420", synthetic(123, 77, 1), "JPEG", {"quality": 90}),
        ("jpeg444", synthetic(81, 130, 2), "JPEG", {"quality": 95, "subsampling": 0}),
        ("jpeg_progressive", synthetic(150, 101, 3), "JPEG", {"quality": 85, "progressive": True}),
        ("jpeg_gray", synthetic(64, 49, 4, "L"), "JPEG", {"quality": 90}),
        ("jpeg422_odd", synthetic(33, 17, 5), "JPEG", {"quality": 75, "subsampling": 1}),
        ("png_rgb", synthetic(97, 61, 6), "PNG", {}),
        ("png_rgba", synthetic(70, 45, 7, "RGBA"), "PNG", {}),
        ("png_palette", synthetic(55, 88, 8, "P"), "PNG", {}),
        ("png_gray", synthetic(41, 39, 9, "L"), "PNG", {}),
        ("png_gray_alpha", synthetic(30, 52, 10, "LA"), "PNG", {}),
        ("webp_lossy", synthetic(111, 73, 12), "WEBP", {"quality": 80}),
        ("webp_lossless", synthetic(64, 64, 13), "WEBP", {"lossless": True}),
        ("webp_alpha", synthetic(49, 35, 14, "RGBA"), "WEBP", {"quality": 90}),
    ]
    cases = []
    for name, img, fmt, kw in images:
        data = encode(img, fmt, **kw)
        ext = {"JPEG": "jpg", "PNG": "png", "WEBP": "webp"}[fmt]
        fname = f"{name}.{ext}"
        with open(os.path.join(args.out, fname), "wb") as f:
            f.write(data)
        dec = Image.open(io.BytesIO(data))
        dec.load()
        rgb = dec.convert("RGB")
        raw = rgb.tobytes()
        with open(os.path.join(args.out, f"{name}.rgb"), "wb") as f:
            f.write(raw)
        entry = {"name": name, "file": fname, "mode": dec.mode, "width": rgb.width,
                 "height": rgb.height, "rgb": f"{name}.rgb", "crc32": crc(raw), "resizes": []}
        for w, h, flt in RESIZES:
            resample = {"bicubic": Image.Resampling.BICUBIC,
                        "bilinear": Image.Resampling.BILINEAR}[flt]
            out = rgb.resize((w, h), resample=resample).tobytes()
            entry["resizes"].append({"width": w, "height": h, "filter": flt, "crc32": crc(out)})
        cases.append(entry)
        print(f"{fname}: {len(data)} bytes, mode {dec.mode}, {rgb.width}x{rgb.height}")
    # EXIF orientations 2..8 in each container: what transformers' load_image gives
    # (ImageOps.exif_transpose, then convert("RGB")).
    from PIL import ImageOps
    base = synthetic(23, 14, 17)
    for fmt, ext in (("JPEG", "jpg"), ("PNG", "png"), ("WEBP", "webp")):
        for o in range(2, 9):
            ex = Image.Exif()
            ex[0x0112] = o
            kw = {"quality": 92} if fmt != "PNG" else {}
            if fmt == "WEBP":
                kw = {"lossless": True}
            data = encode(base, fmt, exif=ex, **kw)
            name = f"exif{o}_{ext}"
            with open(os.path.join(args.out, f"{name}.{ext}"), "wb") as f:
                f.write(data)
            dec = Image.open(io.BytesIO(data))
            rgb = ImageOps.exif_transpose(dec).convert("RGB")
            raw = rgb.tobytes()
            with open(os.path.join(args.out, f"{name}.rgb"), "wb") as f:
                f.write(raw)
            cases.append({"name": name, "file": f"{name}.{ext}", "mode": dec.mode,
                          "width": rgb.width, "height": rgb.height, "rgb": f"{name}.rgb",
                          "crc32": crc(raw), "resizes": [], "exif_orientation": o})
    # PNGs Pillow cannot write but reads: 16-bit RGB (Pillow keeps the high byte of each
    # sample), 16-bit grayscale (mode "I": convert("RGB") clamps at 255), 16-bit gray+alpha,
    # and 1/2/4-bit grayscale (scaled to 0..255), written here chunk by chunk.
    def raw_png(name, w, h, depth, ctype, row_bytes):
        def chunk(t, d):
            return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
        data = (b"\x89PNG\r\n\x1a\n" +
                chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, ctype, 0, 0, 0)) +
                chunk(b"IDAT", zlib.compress(b"".join(b"\x00" + r for r in row_bytes))) +
                chunk(b"IEND", b""))
        with open(os.path.join(args.out, name + ".png"), "wb") as f:
            f.write(data)
        dec = Image.open(io.BytesIO(data))
        rgb = dec.convert("RGB")
        raw = rgb.tobytes()
        with open(os.path.join(args.out, name + ".rgb"), "wb") as f:
            f.write(raw)
        cases.append({"name": name, "file": name + ".png", "mode": dec.mode, "width": w,
                      "height": h, "rgb": name + ".rgb", "crc32": crc(raw), "resizes": []})

    rng = random.Random(16)
    raw_png("png_gray16", 29, 11, 16, 0,
            [b"".join(struct.pack(">H", rng.choice([0, 7, 255, 256, 1000, 65535, rng.randrange(65536)]))
                      for _ in range(29)) for _ in range(11)])
    raw_png("png_gray_alpha16", 19, 7, 16, 4,
            [b"".join(struct.pack(">HH", rng.randrange(65536), rng.randrange(65536))
                      for _ in range(19)) for _ in range(7)])
    for bits in (1, 2, 4):
        w, h = 21, 9
        per = 8 // bits
        raw_png(f"png_gray{bits}bit", w, h, bits, 0,
                [bytes(rng.randrange(256) for _ in range((w + per - 1) // per)) for _ in range(h)])
    # A 16-bit RGB PNG (Pillow keeps the high byte of each sample).
    w, h = 37, 23
    rows = b""
    rng = random.Random(15)
    for y in range(h):
        rows += b"\x00" + b"".join(struct.pack(">HHH", rng.randrange(65536), (y * 2851) & 65535,
                                               (x * 1777) & 65535) for x in range(w))
    def chunk(t, d):
        return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xffffffff)
    png16 = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 16, 2, 0, 0, 0))
             + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))
    with open(os.path.join(args.out, "png_rgb16.png"), "wb") as f:
        f.write(png16)
    dec = Image.open(io.BytesIO(png16))
    rgb = dec.convert("RGB")
    raw = rgb.tobytes()
    with open(os.path.join(args.out, "png_rgb16.rgb"), "wb") as f:
        f.write(raw)
    cases.append({"name": "png_rgb16", "file": "png_rgb16.png", "mode": dec.mode, "width": w,
                  "height": h, "rgb": "png_rgb16.rgb", "crc32": crc(raw), "resizes": []})
    # CLIP-style pre-processing (transformers' slow CLIPImageProcessor steps, emulated here:
    # PIL resize of the shortest edge, center crop with (size - crop) // 2 offsets, rescale in
    # float64 rounded to float32, (x - mean) / std in float32), as CRC-32s of the float32
    # (little-endian) pixel values [3, H, W]. To be checked against transformers itself on
    # the GPU machine (generate.py's CLIP fixtures).
    def f32(x):
        return struct.unpack("<f", struct.pack("<f", x))[0]

    def clip_pixels(img, shortest, crop_w, crop_h, resample, mean, std, factor):
        w, h = img.size
        short, long_ = (w, h) if w <= h else (h, w)
        nl = int(shortest * long_ / short)
        size = (shortest, nl) if w <= h else (nl, shortest)
        r = img.resize(size, resample=resample)
        top, left = (r.height - crop_h) // 2, (r.width - crop_w) // 2
        r = r.crop((left, top, left + crop_w, top + crop_h))
        px = r.tobytes()
        out = bytearray()
        for ch in range(3):
            m, s = f32(mean[ch]), f32(std[ch])
            for i in range(crop_w * crop_h):
                v = f32(px[3 * i + ch] * factor)
                out += struct.pack("<f", f32(f32(v - m) / s))
        return crc(bytes(out))

    clip_mean, clip_std = [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711]
    configs = [
        {"name": "clip224", "shortest_edge": 224, "crop": [224, 224], "resample": 3,
         "mean": clip_mean, "std": clip_std, "rescale_factor": 1 / 255},
        {"name": "small_bilinear", "shortest_edge": 40, "crop": [32, 24], "resample": 2,
         "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "rescale_factor": 0.00392156862745098},
    ]
    pre = []
    for name in ("jpeg420", "png_rgb", "webp_lossy", "exif6_jpg", "jpeg444"):
        entry = next(c for c in cases if c["name"] == name)
        img = ImageOps.exif_transpose(Image.open(os.path.join(args.out, entry["file"]))).convert("RGB")
        for cfg in configs:
            pre.append({"image": name, "config": cfg["name"],
                        "crc32": clip_pixels(img, cfg["shortest_edge"], cfg["crop"][0], cfg["crop"][1],
                                             cfg["resample"], cfg["mean"], cfg["std"],
                                             cfg["rescale_factor"])})
    with open(os.path.join(args.out, "cases.json"), "w") as f:
        json.dump({"pillow": Image.__version__, "images": cases, "preprocess_configs": configs,
                   "preprocess": pre}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
