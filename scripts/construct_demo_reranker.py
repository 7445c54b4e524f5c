#!/usr/bin/env python3
"""Writes the weights of the embedded demo reranker (models/demo-reranker) by hand.

Stop-gap for scripts/train_demo_reranker.py: its first GPU run stayed on the
constant-output plateau (held-out: relevant document first in 12% of groups), and there
was no device time left for the fixed script. This writes, with the standard library
only and deterministically, a BertForSequenceClassification (2 layers, hidden 128) whose
weights are set analytically so that it scores a (query, document) pair by the share of
the query's key terms (the content words of the training corpus) found in the document:
  embeddings  a 30-dim code per content word, content/segment/[CLS]/constant flags, every
              feature mirrored (+f at d, -f at d+64) so LayerNorm's mean is exactly 0
  layer 0     head 0: each token attends to the document tokens with its own code (else to
              [CLS] or itself) and writes "matched" or "unmatched" (same norm either way)
  layer 1     head 0: [CLS] averages "matched" over the query's content tokens
  pooler +    tanh and a linear map of that average; FFNs are zero
  classifier
The tokenizer (tokenizer.json, tokenizer_config.json) is the one the GPU run trained with
Hugging Face tokenizers on the synthetic corpus; it is read from --tokenizer-dir.
    python3 scripts/construct_demo_reranker.py --tokenizer-dir models/demo-reranker \\
        --out models/demo-reranker
"""
import argparse
import array
import json
import math
import os
import random
import shutil
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_demo_reranker import OBJECTS, SUBJECTS, VERBS  # noqa: E402

H, HALF, LAYERS, INTER, POS, HEAD = 128, 64, 2, 256, 256, 32
CODE = 30                       # dims 0..29: word code
CONTENT, TYPE1, CLS, MATCH, AVG, ONE, FILL, NOMATCH = 40, 41, 42, 43, 44, 45, 46, 47
LAM, MU, NU = 8.0, 20.0, 40.0  # layer 0: code match, document bonus, [CLS] sink
RHO = 15.0                      # layer 1: attend to the query's content tokens
SEED = 1234


def zeros(*shape):
    n = 1
    for s in shape:
        n *= s
    return [0.0] * n


def put(vec, d, val):
    """A mirrored feature: +val at d, -val at d + 64."""
    vec[d] += val
    vec[d + HALF] -= val


def codes(n, rng):
    """n unit vectors in CODE dims, pairwise |cos| <= 0.5 (greedy, seeded)."""
    out = []
    while len(out) < n:
        v = [rng.choice((-1.0, 1.0)) for _ in range(CODE)]
        if all(abs(sum(a * b for a, b in zip(v, u))) <= 0.5 * CODE for u in out):
            out.append(v)
    s = 1.0 / math.sqrt(CODE)
    return [[x * s for x in v] for v in out]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokenizer-dir", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    with open(os.path.join(args.tokenizer_dir, "tokenizer.json")) as f:
        tok = json.load(f)
    vocab = tok["model"]["vocab"]
    V = len(vocab)
    content = sorted(set(SUBJECTS) | set(VERBS) | set(OBJECTS))
    missing = [w for w in content if w not in vocab]
    assert not missing, missing
    rng = random.Random(SEED)
    code = dict(zip(content, codes(len(content), rng)))
    t = {}

    # embeddings: every token has the same norm (sqrt 2 * 3), type 1 adds a flag
    word = zeros(V, H)
    for w, i in vocab.items():
        row = word[i * H:(i + 1) * H]
        if w in code:
            for d in range(CODE):
                put(row, d, code[w][d])
            put(row, CONTENT, 1.0)
        elif w == "[CLS]":
            put(row, CLS, 1.0)
        else:
            put(row, FILL, 1.0)
        put(row, ONE, 1.0)
        word[i * H:(i + 1) * H] = row
    t["bert.embeddings.word_embeddings.weight"] = ([V, H], word)
    t["bert.embeddings.position_embeddings.weight"] = ([POS, H], zeros(POS, H))
    types = zeros(2, H)
    row = types[H:]
    put(row, TYPE1, 1.0)
    types[H:] = row
    t["bert.embeddings.token_type_embeddings.weight"] = ([2, H], types)

    def ln(prefix):
        t[prefix + ".weight"] = ([H], [1.0] * H)
        t[prefix + ".bias"] = ([H], zeros(H))

    ln("bert.embeddings.LayerNorm")

    # After the embedding LayerNorm (norm sqrt 128): type 0 features are x * sqrt(128/6)
    # = 4.62 per unit, type 1 ones x * sqrt(128/8) = 4.0.
    s0, s1 = math.sqrt(128 / 6), math.sqrt(128 / 8)
    for layer in range(LAYERS):
        p = f"bert.encoder.layer.{layer}."
        wq, bq, wk, bk = zeros(H, H), zeros(H), zeros(H, H), zeros(H)
        wv, bv, wo, bo = zeros(H, H), zeros(H), zeros(H, H), zeros(H)
        if layer == 0:
            for d in range(CODE):  # q.k = LAM * code . code (head 0)
                wq[d * H + d] = LAM
                wk[d * H + d] = 1.0
            bq[CODE] = 1.0
            wk[CODE * H + TYPE1] = MU        # document tokens
            bq[CODE + 1] = 1.0
            wk[(CODE + 1) * H + CLS] = NU    # the [CLS] sink
            # value 0: document token (4.0 -> 4.62); value 1: query-side token
            wv[0 * H + TYPE1] = s0 / s1
            wv[1 * H + ONE] = 1.0
            wv[1 * H + TYPE1] = -1.0  # ONE - TYPE1: 4.62 on type 0, 0 on type 1
            put_o = [(MATCH, 0), (NOMATCH, 1)]
        else:
            # [CLS] (any query) attends to the query's content tokens: CONTENT - 2 TYPE1
            bq[0] = 1.0
            wk[0 * H + CONTENT] = RHO
            wk[0 * H + TYPE1] = -2.0 * RHO
            wv[0 * H + MATCH] = 1.0
            put_o = [(AVG, 0)]
        for d, src in put_o:
            wo[d * H + src] = 1.0
            wo[(d + HALF) * H + src] = -1.0
        t[p + "attention.self.query.weight"] = ([H, H], wq)
        t[p + "attention.self.query.bias"] = ([H], bq)
        t[p + "attention.self.key.weight"] = ([H, H], wk)
        t[p + "attention.self.key.bias"] = ([H], bk)
        t[p + "attention.self.value.weight"] = ([H, H], wv)
        t[p + "attention.self.value.bias"] = ([H], bv)
        t[p + "attention.output.dense.weight"] = ([H, H], wo)
        t[p + "attention.output.dense.bias"] = ([H], bo)
        ln(p + "attention.output.LayerNorm")
        t[p + "intermediate.dense.weight"] = ([INTER, H], zeros(INTER, H))
        t[p + "intermediate.dense.bias"] = ([INTER], zeros(INTER))
        t[p + "output.dense.weight"] = ([H, INTER], zeros(H, INTER))
        t[p + "output.dense.bias"] = ([H], zeros(H))
        ln(p + "output.LayerNorm")

    # pooler: tanh(4 * (AVG - 2.15)); classifier: 4 * pooled + 0.2. After the last
    # LayerNorm, AVG is 0 (no key term found), ~1.45 (1 of 3), ~2.0 (2 of 3), ~2.29 (all)
    wp, bp = zeros(H, H), zeros(H)
    wp[0 * H + AVG] = 4.0
    bp[0] = -8.6
    t["bert.pooler.dense.weight"] = ([H, H], wp)
    t["bert.pooler.dense.bias"] = ([H], bp)
    wc = zeros(1, H)
    wc[0] = 4.0
    t["classifier.weight"] = ([1, H], wc)
    t["classifier.bias"] = ([1], [0.2])

    os.makedirs(args.out, exist_ok=True)
    header, blobs, off = {"__metadata__": {"format": "pt"}}, [], 0
    for name in sorted(t):
        shape, data = t[name]
        b = array.array("f", data).tobytes()
        assert len(b) == 4 * math.prod(shape), name
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hj = json.dumps(header, separators=(",", ":")).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(args.out, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    config = {
        "architectures": ["BertForSequenceClassification"], "model_type": "bert",
        "attention_probs_dropout_prob": 0.0, "classifier_dropout": None, "dtype": "float32",
        "hidden_act": "gelu", "hidden_dropout_prob": 0.0, "hidden_size": H,
        "id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "initializer_range": 0.02,
        "intermediate_size": INTER, "layer_norm_eps": 1e-12, "max_position_embeddings": POS,
        "num_attention_heads": H // HEAD, "num_hidden_layers": LAYERS,
        "pad_token_id": vocab["[PAD]"], "type_vocab_size": 2, "vocab_size": V}
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        src, dst = os.path.join(args.tokenizer_dir, name), os.path.join(args.out, name)
        if os.path.abspath(src) != os.path.abspath(dst):
            shutil.copyfile(src, dst)
    print(f"wrote {args.out}: {len(content)} content words, vocabulary {V}")


if __name__ == "__main__":
    main()
