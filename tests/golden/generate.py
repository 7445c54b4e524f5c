#!/usr/bin/env python3
"""Generates sluice's golden parity fixtures with Hugging Face transformers.

Runs on the GPU machine (transformers, sentence-transformers, torch); the reference
forward passes themselves run on its CPU in fp32 (eager attention, no TF32) or in bf16
for bf16 checkpoints, one sequence at a time so no padding is involved.

Writes, under --out:
  models/<name>/     a tiny seeded random-weight model directory, saved the normal way
                     (config.json, model.safetensors or shards, sentence-transformers
                     modules, sluice.json where the case needs one)
  golden/<name>.json {"model", "task", "dtype", "inputs": [{"ids", "type_ids"}],
                      "outputs": [[...] per input], "raw": [[...]] (logits, if any),
                      "tolerance", "notes", extra per-case fields}

The C++ test tests/golden/golden_test.cc runs every case through sluice's engine and
compares with the stated tolerance. This script is the only way fixtures change:
    python3 tests/golden/generate.py --out tests/fixtures
Token-level cases (ModernBERT, token classifiers, late interaction, the token-classification
pipeline) are in generate_tokenlevel.py; `--only tokenlevel` writes just those,
`--only base` just the cases of this file.
"""
import argparse
import copy
import json
import math
import os
import random
import shutil

import torch
import torch.nn.functional as F
import transformers
from transformers import (BertConfig, BertForSequenceClassification, BertModel, Qwen3Config,
                          Qwen3ForCausalLM, Qwen3ForSequenceClassification, Qwen3Model,
                          RobertaConfig, RobertaForSequenceClassification, RobertaModel,
                          XLMRobertaConfig, XLMRobertaForSequenceClassification,
                          XLMRobertaModel)

torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False

N_INPUTS = 64
FP32_TOL = 1e-4


def seeded(seed):
    torch.manual_seed(seed)
    random.seed(seed)


def init_weights(model, seed, std=0.08):
    """Random weights large enough that every layer matters (HF's init is near zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "LayerNorm" in name or "norm" in name.lower():
                if name.endswith("bias"):
                    p.copy_(torch.randn(p.shape, generator=g) * 0.05)
                else:
                    p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def make_inputs(seed, vocab_lo, vocab_hi, max_len, pairs=False, avoid=()):
    """64 sequences: varied lengths (1..max_len), with duplicates."""
    rng = random.Random(seed)
    seqs = []
    lengths = [1, 2, 3, max_len] + [rng.randint(1, max_len) for _ in range(N_INPUTS - 4)]
    for i, n in enumerate(lengths):
        if i in (10, 20, 30, 40):  # duplicates of earlier inputs
            seqs.append(dict(seqs[i // 10]))
            continue
        ids = []
        while len(ids) < n:
            t = rng.randint(vocab_lo, vocab_hi - 1)
            if t not in avoid:
                ids.append(t)
        types = []
        if pairs:
            cut = rng.randint(0, n)
            types = [0] * cut + [1] * (n - cut)
        seqs.append({"ids": ids, "type_ids": types})
    return seqs


@torch.no_grad()
def hidden_states(model, inp):
    ids = torch.tensor([inp["ids"]])
    kwargs = {}
    if inp.get("type_ids"):
        kwargs["token_type_ids"] = torch.tensor([inp["type_ids"]])
    return model(input_ids=ids, **kwargs)


def save(model, out, name, shard=None):
    path = os.path.join(out, "models", name)
    shutil.rmtree(path, ignore_errors=True)
    kw = {"max_shard_size": shard} if shard else {}
    model.save_pretrained(path, safe_serialization=True, **kw)
    return path


def reload(model_cls, path, dtype):
    """The reference runs the saved checkpoint loaded the way users load it (this keeps
    buffers such as RoPE's inv_freq in fp32 for bf16 checkpoints, as from_pretrained does)."""
    return model_cls.from_pretrained(path, dtype=dtype, attn_implementation="eager").eval()


def write_case(out, name, case):
    os.makedirs(os.path.join(out, "golden"), exist_ok=True)
    case["model"] = name
    case["transformers_version"] = transformers.__version__
    with open(os.path.join(out, "golden", name + ".json"), "w") as f:
        json.dump(case, f, separators=(",", ":"))


def tolist(t):
    return [float(x) for x in t.reshape(-1).tolist()]


def activation(logits, num_labels, problem_type):
    if num_labels == 1 or problem_type == "multi_label_classification":
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)


# ---------------------------------------------------------------- classifiers


def classifier_case(out, name, model_cls, config, seed, pairs, dtype=torch.float32,
                    sluice_json=None, shard=None, vocab_lo=3, avoid=(), inputs=None):
    seeded(seed)
    model = model_cls(config).eval()
    init_weights(model, seed)
    model = model.to(dtype)
    path = save(model, out, name, shard)
    model = reload(model_cls, path, dtype)
    if sluice_json:
        with open(os.path.join(path, "sluice.json"), "w") as f:
            json.dump(sluice_json, f)
    if inputs is None:
        inputs = make_inputs(seed, vocab_lo, config.vocab_size, 40, pairs, avoid)
    outputs, raw, outputs_f32 = [], [], []
    model_f32 = reload(model_cls, path, torch.float32) if dtype != torch.float32 else None
    for inp in inputs:
        logits = hidden_states(model, inp).logits[0].float()
        cal = logits
        if sluice_json and "calibration" in sluice_json:
            mean = torch.tensor(sluice_json["calibration"]["mean"])
            std = torch.tensor(sluice_json["calibration"]["std"])
            cal = (logits - mean) / std
        raw.append(tolist(cal))
        outputs.append(tolist(activation(cal, config.num_labels, config.problem_type)))
        if model_f32 is not None:
            lf = hidden_states(model_f32, inp).logits[0].float()
            outputs_f32.append(tolist(activation(lf, config.num_labels, config.problem_type)))
    case = {"task": "score" if config.num_labels == 1 else "classify",
            "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
            "inputs": inputs, "outputs": outputs, "raw": raw,
            "labels": [config.id2label[i] for i in range(config.num_labels)],
            "tolerance": FP32_TOL if dtype == torch.float32 else 3e-2}
    if outputs_f32:
        case["outputs_f32"] = outputs_f32  # same bf16 weights, computed in fp32
    if sluice_json and "thresholds" in sluice_json:
        case["thresholds"] = sluice_json["thresholds"]
    write_case(out, name, case)


def eager(config):
    """Plain matmul-softmax attention: the most literal fp32 reference."""
    config._attn_implementation = "eager"
    return config


def bert_config(**kw):
    base = dict(vocab_size=211, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                intermediate_size=80, max_position_embeddings=64, type_vocab_size=2,
                hidden_act="gelu", pad_token_id=0)
    base.update(kw)
    return eager(BertConfig(**base))


def roberta_config(cls=RobertaConfig, **kw):
    base = dict(vocab_size=203, hidden_size=40, num_hidden_layers=2, num_attention_heads=5,
                intermediate_size=72, max_position_embeddings=66, type_vocab_size=1,
                hidden_act="gelu", pad_token_id=1, bos_token_id=0, eos_token_id=2)
    base.update(kw)
    return eager(cls(**base))


def qwen3_config(**kw):
    base = dict(vocab_size=307, hidden_size=40, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=16, intermediate_size=72,
                max_position_embeddings=128, rms_norm_eps=1e-6, rope_theta=10000.0,
                tie_word_embeddings=False, pad_token_id=306)
    base.update(kw)
    return eager(Qwen3Config(**base))


# ---------------------------------------------------------------- embedders


def st_type(module, legacy):
    """modules.json type: 2.x-5.x spelling, or the installed (6.x) class path."""
    if legacy:
        return "sentence_transformers.models." + type(module).__name__
    return type(module).__module__.rsplit(".", 1)[0] + "." + type(module).__name__


def st_modules(path, pooling_mode, dense=None, normalize=False, hidden=None, legacy=False):
    """Writes a sentence-transformers layout with ST's own module classes."""
    from sentence_transformers import models as stm
    mods = [{"idx": 0, "name": "0", "path": "",
             "type": "sentence_transformers.models.Transformer" if legacy
             else "sentence_transformers.base.models.Transformer"}]
    pool = stm.Pooling(hidden, pooling_mode=pooling_mode)
    os.makedirs(os.path.join(path, "1_Pooling"), exist_ok=True)
    pool.save(os.path.join(path, "1_Pooling"))
    mods.append({"idx": 1, "name": "1", "path": "1_Pooling", "type": st_type(pool, legacy)})
    modules = [pool]
    if dense is not None:
        os.makedirs(os.path.join(path, "2_Dense"), exist_ok=True)
        dense.save(os.path.join(path, "2_Dense"))
        mods.append({"idx": 2, "name": "2", "path": "2_Dense", "type": st_type(dense, legacy)})
        modules.append(dense)
    if normalize:
        n = stm.Normalize()
        mods.append({"idx": len(mods), "name": str(len(mods)),
                     "path": f"{len(mods)}_Normalize", "type": st_type(n, legacy)})
        os.makedirs(os.path.join(path, mods[-1]["path"]), exist_ok=True)
        modules.append(n)
    with open(os.path.join(path, "modules.json"), "w") as f:
        json.dump(mods, f, indent=2)
    with open(os.path.join(path, "sentence_bert_config.json"), "w") as f:
        json.dump({"max_seq_length": 48, "do_lower_case": False}, f)
    return modules


@torch.no_grad()
def st_apply(modules, hidden):
    feats = {"token_embeddings": hidden.unsqueeze(0),
             "attention_mask": torch.ones(1, hidden.shape[0], dtype=torch.long)}
    for m in modules:
        feats = m(feats)
    return feats["sentence_embedding"][0]


def embed_case(out, name, model_cls, config, seed, pooling_mode, dense_out=None,
               normalize=True, dtype=torch.float32, pairs=False, dims=None, vocab_lo=3,
               legacy=False):
    from sentence_transformers import models as stm
    if dims:
        config.is_matryoshka = True  # vLLM's marker: `dimensions` is accepted only then
    seeded(seed)
    model = model_cls(config).eval()
    init_weights(model, seed)
    model = model.to(dtype)
    path = save(model, out, name)
    model = reload(model_cls, path, dtype)
    dense = None
    if dense_out:
        dense = stm.Dense(config.hidden_size, dense_out, bias=True)
        init_weights(dense, seed + 1, std=0.15)
    modules = st_modules(path, pooling_mode, dense, normalize, config.hidden_size, legacy)
    inputs = make_inputs(seed, vocab_lo, config.vocab_size, 40, pairs)
    outputs, truncated = [], []
    for inp in inputs:
        h = hidden_states(model, inp).last_hidden_state[0].float()
        e = st_apply(modules, h)
        outputs.append(tolist(e))
        if dims:
            truncated.append(tolist(F.normalize(e[:dims], dim=-1)))
    case = {"task": "embed", "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
            "inputs": inputs, "outputs": outputs,
            "tolerance": FP32_TOL if dtype == torch.float32 else 3e-2}
    if dims:
        case["dimensions"] = dims
        case["outputs_truncated"] = truncated
    write_case(out, name, case)


def token_level_case(out, name, model_cls, config, seed, pooling, step_token=None):
    """ALL / STEP pooling through sluice.json: raw last hidden states per token."""
    seeded(seed)
    model = model_cls(config).eval()
    init_weights(model, seed)
    path = save(model, out, name)
    sj = {"pooling": pooling}
    if step_token is not None:
        sj["step_token_id"] = step_token
    with open(os.path.join(path, "sluice.json"), "w") as f:
        json.dump(sj, f)
    inputs = make_inputs(seed, 3, config.vocab_size, 24)
    if step_token is not None:
        rng = random.Random(seed)
        for inp in inputs:
            for i in range(len(inp["ids"])):
                if rng.random() < 0.25:
                    inp["ids"][i] = step_token
    outputs, indices = [], []
    for inp in inputs:
        h = hidden_states(model, inp).last_hidden_state[0].float()
        if step_token is None:
            outputs.append(tolist(h))
        else:
            idx = [i for i, t in enumerate(inp["ids"]) if t == step_token]
            indices.append(idx)
            outputs.append(tolist(h[idx]) if idx else [])
    case = {"task": "embed", "dtype": "f32", "inputs": inputs, "outputs": outputs,
            "token_level": True, "tolerance": FP32_TOL}
    if step_token is not None:
        case["token_indices"] = indices
    write_case(out, name, case)


def pooled_case(out, name, model_cls, config, seed, pooling):
    """Base model with sluice.json pooling (cls/mean/max/last), no normalisation."""
    seeded(seed)
    model = model_cls(config).eval()
    init_weights(model, seed)
    path = save(model, out, name)
    with open(os.path.join(path, "sluice.json"), "w") as f:
        json.dump({"pooling": pooling}, f)
    inputs = make_inputs(seed, 3, config.vocab_size, 40)
    outputs = []
    for inp in inputs:
        h = hidden_states(model, inp).last_hidden_state[0].float()
        p = {"cls": h[0], "mean": h.mean(0), "max": h.max(0).values, "last": h[-1]}[pooling]
        outputs.append(tolist(p))
    write_case(out, name, {"task": "embed", "dtype": "f32", "inputs": inputs,
                           "outputs": outputs, "tolerance": FP32_TOL})


# ---------------------------------------------------------------- causal reranker


def reranker_case(out, name, config, seed, yes_id, no_id, dtype=torch.float32):
    seeded(seed)
    model = Qwen3ForCausalLM(config).eval()
    init_weights(model, seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    model = model.to(dtype)
    path = save(model, out, name)
    model = reload(Qwen3ForCausalLM, path, dtype)
    with open(os.path.join(path, "sluice.json"), "w") as f:
        json.dump({"yes_token_id": yes_id, "no_token_id": no_id}, f)
    inputs = make_inputs(seed, 3, config.vocab_size, 48)
    outputs, raw = [], []
    for inp in inputs:
        logits = hidden_states(model, inp).logits[0, -1].float()
        d = logits[yes_id] - logits[no_id]
        raw.append([float(d)])
        outputs.append([float(torch.sigmoid(d))])
    write_case(out, name, {"task": "score", "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
                           "inputs": inputs, "outputs": outputs, "raw": raw,
                           "tolerance": FP32_TOL if dtype == torch.float32 else 3e-2})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", choices=["all", "base", "tokenlevel"], default="all")
    ap.add_argument("--tokenizers", default=os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                         "..", "fixtures", "tokenizers"),
                    help="the tokenizer fixtures (token classification reuses some)")
    args = ap.parse_args()
    out = args.out
    torch.set_num_threads(4)
    if args.only in ("all", "tokenlevel"):
        import generate_tokenlevel
        generate_tokenlevel.run(out, args.tokenizers)
    if args.only == "tokenlevel":
        return

    # BERT family classifiers / cross-encoders.
    classifier_case(out, "bert_cross_encoder", BertForSequenceClassification,
                    bert_config(num_labels=1), 1, pairs=True, shard="60KB")
    classifier_case(out, "bert_classifier3", BertForSequenceClassification,
                    bert_config(num_labels=3, id2label={0: "neg", 1: "neu", 2: "pos"},
                                label2id={"neg": 0, "neu": 1, "pos": 2},
                                hidden_act="gelu_new", hidden_size=36, num_attention_heads=3),
                    2, pairs=False)
    classifier_case(out, "bert_multilabel_calibrated", BertForSequenceClassification,
                    bert_config(num_labels=4, problem_type="multi_label_classification"), 3,
                    pairs=True,
                    sluice_json={"calibration": {"mean": [0.1, -0.2, 0.0, 0.3],
                                                 "std": [1.5, 0.8, 1.0, 2.0]},
                                 "thresholds": [0.5, 0.4, 0.6, 0.5]})
    classifier_case(out, "bert_cross_encoder_bf16", BertForSequenceClassification,
                    bert_config(num_labels=1), 4, pairs=True, dtype=torch.bfloat16)
    classifier_case(out, "roberta_cross_encoder", RobertaForSequenceClassification,
                    roberta_config(num_labels=1), 5, pairs=False, vocab_lo=3)
    classifier_case(out, "xlmr_classifier2", XLMRobertaForSequenceClassification,
                    roberta_config(XLMRobertaConfig, num_labels=2), 6, pairs=False)
    # Qwen3 sequence classification (score head on the last token).
    classifier_case(out, "qwen3_seqcls", Qwen3ForSequenceClassification,
                    qwen3_config(num_labels=1), 7, pairs=False, avoid=(306,))
    classifier_case(out, "qwen3_seqcls_bf16", Qwen3ForSequenceClassification,
                    qwen3_config(num_labels=1), 8, pairs=False, dtype=torch.bfloat16,
                    avoid=(306,))

    # Embedders with sentence-transformers layouts.
    embed_case(out, "bert_st_mean_dense", BertModel, bert_config(), 11, "mean", dense_out=24)
    embed_case(out, "bert_st_cls_bf16", BertModel, bert_config(), 12, "cls",
               dtype=torch.bfloat16)
    embed_case(out, "xlmr_st_mean", XLMRobertaModel, roberta_config(XLMRobertaConfig), 13,
               "mean", legacy=True)
    embed_case(out, "roberta_st_max", RobertaModel, roberta_config(), 14, "max",
               normalize=False)
    embed_case(out, "qwen3_st_last", Qwen3Model, qwen3_config(), 15, "lasttoken", dims=16)
    embed_case(out, "qwen3_mha_st_mean", Qwen3Model,
               qwen3_config(num_key_value_heads=4, hidden_size=64, head_dim=16), 16, "mean")

    # Token-level and pooling overrides through sluice.json.
    token_level_case(out, "bert_pool_all", BertModel, bert_config(), 21, "all")
    token_level_case(out, "qwen3_pool_step", Qwen3Model, qwen3_config(), 22, "step",
                     step_token=5)
    pooled_case(out, "bert_pool_max", BertModel, bert_config(), 23, "max")
    pooled_case(out, "qwen3_pool_mean", Qwen3Model, qwen3_config(), 24, "mean")

    # Qwen3-Reranker style causal LM: sigmoid(logit(yes) - logit(no)) at the last token.
    reranker_case(out, "qwen3_reranker_tied", qwen3_config(tie_word_embeddings=True), 31,
                  yes_id=17, no_id=23)
    reranker_case(out, "qwen3_reranker", qwen3_config(), 32, yes_id=200, no_id=13)
    reranker_case(out, "qwen3_reranker_bf16", qwen3_config(), 33, yes_id=200, no_id=13,
                  dtype=torch.bfloat16)
    print("wrote fixtures to", out, "with transformers", transformers.__version__)


if __name__ == "__main__":
    main()
