#!/usr/bin/env python3
"""Generates the CLIP parity fixtures (tests/fixtures/clip/) with Hugging Face transformers.

Runs on the GPU machine (torch, transformers, Pillow); the reference forward passes run on
its CPU in fp32 (eager attention, no TF32). For each case it saves a tiny seeded
random-weight model directory (config.json, model.safetensors, preprocessor_config.json)
and expected.json with:
  - images: for the image fixtures of tests/fixtures/images (decoded by transformers'
    load_image, i.e. with EXIF orientation), the CRC-32 of the slow CLIPImageProcessor's
    float32 pixel values (checks sluice's media/preprocess against transformers itself), the
    first values, and the image embeddings (image_embeds, projected; unnormalised);
  - texts: token-id inputs (with the case's eos convention) and their text embeddings;
  - logits_per_image for every (image, text) pair, and logit_scale.
Cases: quick_gelu towers with the legacy eos rule (eos_token_id 2: pooled at argmax of the
ids), gelu towers with an explicit eos id and odd sizes (30x30 images, 6x6 patches, heads
of 10), and the vision/text towers saved alone as CLIPVisionModelWithProjection /
CLIPTextModelWithProjection.

    python3 tests/golden/generate_clip.py --out tests/fixtures/clip
"""
import argparse
import json
import os
import random
import struct
import zlib

import torch
from PIL import Image
from transformers import (CLIPConfig, CLIPImageProcessor, CLIPModel, CLIPTextConfig,
                          CLIPTextModelWithProjection, CLIPVisionConfig,
                          CLIPVisionModelWithProjection)
from transformers.image_utils import load_image

torch.backends.cuda.matmul.allow_tf32 = False
HERE = os.path.dirname(os.path.abspath(__file__))
IMAGES = os.path.join(HERE, "..", "fixtures", "images")
IMAGE_FILES = ["jpeg420.jpg", "jpeg444.jpg", "png_rgb.png", "png_palette.png", "webp_lossy.webp",
               "exif6_jpg.jpg", "png_gray16.png", "jpeg_gray.jpg"]


def init_weights(model, seed, std=0.08):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name or "pre_layrnorm" in name:
                p.copy_((1.0 if name.endswith("weight") else 0.0) +
                        torch.randn(p.shape, generator=g) * 0.1)
            elif name.endswith("logit_scale"):
                p.fill_(2.6592)  # CLIP's init, log(1 / 0.07)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def crc_f32(t):
    return zlib.crc32(struct.pack("<%df" % t.numel(), *t.flatten().tolist())) & 0xFFFFFFFF


def texts(seed, vocab, max_len, eos, n=6):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        length = rng.randint(2, max_len)
        ids = [rng.randrange(3, vocab - 1) for _ in range(length - 1)] + [eos]
        if i == 0:
            ids = [1, eos]  # shortest
        out.append(ids)
    out.append(list(out[2]))  # a duplicate
    return out


def case(out, name, text_cfg, vision_cfg, proj, size, crop, seed, resample=3):
    cfg = CLIPConfig(text_config=text_cfg.to_dict(), vision_config=vision_cfg.to_dict(),
                     projection_dim=proj)
    cfg._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = CLIPModel(cfg).eval()
    init_weights(model, seed)
    path = os.path.join(out, name, "model")
    model.save_pretrained(path, safe_serialization=True)
    proc = CLIPImageProcessor(size={"shortest_edge": size}, crop_size={"height": crop, "width": crop},
                              resample=resample)
    proc.save_pretrained(path)
    images = []
    with torch.no_grad():
        for f in IMAGE_FILES:
            img = load_image(os.path.join(IMAGES, f))
            pv = proc(images=img, return_tensors="pt")["pixel_values"]
            emb = model.get_image_features(pixel_values=pv)
            if not torch.is_tensor(emb):
                emb = emb.pooler_output if hasattr(emb, "pooler_output") else emb[0]
            images.append({"file": f, "pixel_crc32": crc_f32(pv[0]), "pixel_head": pv[0].flatten()[:8].tolist(),
                           "image_embeds": emb[0].tolist(), "pv": pv})
        eos = text_cfg.eos_token_id
        tx = texts(seed + 1, text_cfg.vocab_size, text_cfg.max_position_embeddings, eos)
        text_out = []
        for ids in tx:
            emb = model.get_text_features(input_ids=torch.tensor([ids]))
            if not torch.is_tensor(emb):
                emb = emb.pooler_output if hasattr(emb, "pooler_output") else emb[0]
            text_out.append({"ids": ids, "text_embeds": emb[0].tolist()})
        for im in images:
            im.pop("pv")
        ie = torch.tensor([im["image_embeds"] for im in images])
        te = torch.tensor([t["text_embeds"] for t in text_out])
        ie = ie / ie.norm(dim=-1, keepdim=True)
        te = te / te.norm(dim=-1, keepdim=True)
        logits = (model.logit_scale.exp() * ie @ te.t()).tolist()
    exp = {"transformers": __import__("transformers").__version__, "images": images,
           "texts": text_out, "logits_per_image": logits,
           "logit_scale": float(model.logit_scale), "tolerance": 1e-4,
           "eos_token_id": eos, "projection_dim": proj}
    with open(os.path.join(out, name, "expected.json"), "w") as f:
        json.dump(exp, f)
    print(f"{name}: {len(images)} images, {len(text_out)} texts")
    return model, path


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(HERE, "..", "fixtures", "clip"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    t1 = CLIPTextConfig(vocab_size=300, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                        num_attention_heads=4, max_position_embeddings=16, hidden_act="quick_gelu",
                        eos_token_id=2, bos_token_id=1, pad_token_id=0)
    v1 = CLIPVisionConfig(hidden_size=48, intermediate_size=96, num_hidden_layers=2,
                          num_attention_heads=4, image_size=32, patch_size=8, hidden_act="quick_gelu")
    model, _ = case(args.out, "clip_quickgelu", t1, v1, 24, 32, 32, 11)
    t2 = CLIPTextConfig(vocab_size=257, hidden_size=40, intermediate_size=72, num_hidden_layers=3,
                        num_attention_heads=4, max_position_embeddings=20, hidden_act="gelu",
                        eos_token_id=256, bos_token_id=255, pad_token_id=0)
    v2 = CLIPVisionConfig(hidden_size=40, intermediate_size=56, num_hidden_layers=3,
                          num_attention_heads=4, image_size=30, patch_size=6, hidden_act="gelu")
    case(args.out, "clip_gelu_odd", t2, v2, 20, 34, 30, 12, resample=2)
    # The towers alone, in their own layouts (same weights as clip_quickgelu).
    vis = CLIPVisionModelWithProjection(CLIPVisionConfig(**{**v1.to_dict(), "projection_dim": 24}))
    vis.vision_model.load_state_dict(model.vision_model.state_dict())
    vis.visual_projection.load_state_dict(model.visual_projection.state_dict())
    vis.save_pretrained(os.path.join(args.out, "clip_quickgelu", "vision_model"),
                        safe_serialization=True)
    txt = CLIPTextModelWithProjection(CLIPTextConfig(**{**t1.to_dict(), "projection_dim": 24}))
    txt.text_model.load_state_dict(model.text_model.state_dict())
    txt.text_projection.load_state_dict(model.text_projection.state_dict())
    txt.save_pretrained(os.path.join(args.out, "clip_quickgelu", "text_model"),
                        safe_serialization=True)
    CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}).save_pretrained(
        os.path.join(args.out, "clip_quickgelu", "vision_model"))


if __name__ == "__main__":
    main()
