#!/usr/bin/env python3
"""Generates sluice's generation parity fixtures with Hugging Face transformers.

Runs on the GPU machine (transformers, torch); the references run on its CPU. Writes, under
--out (tests/fixtures/generation):
  <name>/model/         a tiny seeded random-weight causal LM (config.json, safetensors,
                        generation_config.json, tokenizer.json copied from the tokenizer
                        fixtures so that text prompts and stop strings work)
  <name>/expected.json  {"dtype", "prompts": [[ids]], "greedy": [{"tokens", "top_ids",
                        "top_logprobs", "gap"} per prompt] (HF generate, greedy, no eos),
                        "greedy_f32": same from the checkpoint computed in fp32 (bf16 cases),
                        "prompt_logprobs": per prompt, per position >= 1 the logprob of the
                        prompt token and the top 3 (fp32 cases), "eos": {"prompt", "tokens"}
                        greedy with generation_config's eos ids}
  sampling.json         raw next-token logits (llama3_scaled) of a few prompts and, per setting, the
                        distribution transformers' processors/warpers give (penalties that
                        transformers lacks, presence/frequency/logit_bias, by their formulas)

Greedy continuations use HF `generate` with eager attention and the dynamic cache. This
script is the only way these fixtures change:
    python3 tests/golden/generate_generation.py --out tests/fixtures/generation
"""
import argparse
import json
import os
import random
import shutil

import torch
import transformers
from transformers import (GenerationConfig, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config,
                          Qwen3ForCausalLM)
from transformers.generation.logits_process import (LogitsProcessorList, MinPLogitsWarper,
                                                    RepetitionPenaltyLogitsProcessor,
                                                    TemperatureLogitsWarper, TopKLogitsWarper,
                                                    TopPLogitsWarper)

HERE = os.path.dirname(os.path.abspath(__file__))
TOKENIZERS = os.path.join(HERE, "..", "fixtures", "tokenizers")
NEW_TOKENS = 40
TOP = 5
V5 = int(transformers.__version__.split(".")[0]) >= 5


def init_weights(model, seed, std=0.08):
    """Random weights large enough that every layer matters (HF's init is near zero)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name.lower():
                p.copy_(1.0 + torch.randn(p.shape, generator=g) * 0.1)
            else:
                p.copy_(torch.randn(p.shape, generator=g) * std)


def rope(theta, scaling=None):
    """rope_parameters (transformers 5.x) or rope_theta + rope_scaling (4.x)."""
    if V5:
        params = {"rope_type": "default", "rope_theta": theta}
        if scaling:
            params.update(scaling)
        return {"rope_parameters": params}
    kw = {"rope_theta": theta}
    if scaling:
        kw["rope_scaling"] = scaling
    return kw


def make_prompts(seed, vocab, lengths):
    rng = random.Random(seed)
    prompts = [[rng.randint(10, vocab - 10) for _ in range(n)] for n in lengths]
    prompts.append(list(prompts[2]))  # a duplicate
    return prompts


@torch.no_grad()
def greedy(model, prompt, eos=None, new_tokens=NEW_TOKENS):
    gc = GenerationConfig(max_new_tokens=new_tokens, do_sample=False, eos_token_id=eos,
                          pad_token_id=0, output_logits=True, return_dict_in_generate=True)
    out = model.generate(torch.tensor([prompt]), generation_config=gc)
    tokens = out.sequences[0, len(prompt):].tolist()
    steps = []
    for logits in out.logits:
        lp = torch.log_softmax(logits[0].float(), dim=-1)
        v, i = torch.topk(lp, TOP)
        steps.append((i.tolist(), [float(x) for x in v], float(v[0] - v[1])))
    return {"tokens": tokens, "top_ids": [s[0] for s in steps],
            "top_logprobs": [s[1] for s in steps], "gap": [s[2] for s in steps]}


@torch.no_grad()
def prompt_logprobs(model, prompt):
    logits = model(torch.tensor([prompt])).logits[0].float()
    lp = torch.log_softmax(logits, dim=-1)
    rows = []
    for i in range(1, len(prompt)):
        v, ids = torch.topk(lp[i - 1], 3)
        rows.append({"logprob": float(lp[i - 1, prompt[i]]), "top_ids": ids.tolist(),
                     "top_logprobs": [float(x) for x in v]})
    return rows


def gen_case(out, name, cls, config, seed, tokenizer, dtype=torch.float32, gen_extra=None):
    torch.manual_seed(seed)
    config._attn_implementation = "eager"
    model = cls(config).eval()
    init_weights(model, seed)
    if config.tie_word_embeddings:
        model.tie_weights()
    model = model.to(dtype)
    root = os.path.join(out, name)
    path = os.path.join(root, "model")
    shutil.rmtree(root, ignore_errors=True)
    model.save_pretrained(path, safe_serialization=True)
    if tokenizer:
        shutil.copy(os.path.join(TOKENIZERS, tokenizer, "tokenizer.json"), path)
    model = cls.from_pretrained(path, dtype=dtype, attn_implementation="eager").eval()
    prompts = make_prompts(seed, config.vocab_size, [1, 2, 5, 9, 17, 26, 33, 40])
    case = {"dtype": "bf16" if dtype == torch.bfloat16 else "f32", "prompts": prompts,
            "new_tokens": NEW_TOKENS, "transformers_version": transformers.__version__}
    case["greedy"] = [greedy(model, p) for p in prompts]
    if dtype != torch.float32:
        m32 = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
        case["greedy_f32"] = [greedy(m32, p) for p in prompts]
    else:
        case["prompt_logprobs"] = [prompt_logprobs(model, p) for p in prompts[:4]]
    # generation_config.json: stop tokens taken from the greedy continuation of prompt 0 (the
    # token it emits at step 6, and one it never emits), plus sampling defaults.
    eos = case["greedy"][0]["tokens"][6]
    never = next(t for t in range(3, config.vocab_size) if t not in case["greedy"][0]["tokens"])
    gcfg = {"eos_token_id": [never, eos], "pad_token_id": 0, "do_sample": True,
            "temperature": 0.7, "top_p": 0.9, "top_k": 20}
    if gen_extra:
        gcfg.update(gen_extra)
    with open(os.path.join(path, "generation_config.json"), "w") as f:
        json.dump(gcfg, f, indent=2)
    case["eos"] = {"prompt": prompts[0], "eos_token_id": [never, eos],
                   "tokens": greedy(model, prompts[0], eos=[never, eos])["tokens"]}
    with open(os.path.join(root, "expected.json"), "w") as f:
        json.dump(case, f, separators=(",", ":"))


def sampling_fixture(out, name, cls, seed):
    """Raw logits from an fp32 case (512 tokens: a chi-square test with 10,000 draws stays
    meaningful) and transformers' distributions per setting."""
    path = os.path.join(out, name, "model")
    model = cls.from_pretrained(path, dtype=torch.float32, attn_implementation="eager").eval()
    prompts = make_prompts(seed + 1, model.config.vocab_size, [3, 12, 30])[:3]
    rng = random.Random(seed)
    settings = [
        {"temperature": 1.0},
        {"temperature": 0.7},
        {"temperature": 1.0, "top_k": 20},
        {"temperature": 1.3, "top_p": 0.8},
        {"temperature": 1.0, "min_p": 0.2},
        {"temperature": 0.9, "top_k": 50, "top_p": 0.9, "min_p": 0.05},
        {"temperature": 1.0, "repetition_penalty": 1.5},
        {"temperature": 1.0, "presence_penalty": 1.5, "frequency_penalty": 0.7},
        {"temperature": 0.8, "logit_bias": {"7": 5.0, "11": -100.0, "42": 2.5}},
    ]
    cases = []
    with torch.no_grad():
        for p in prompts:
            raw = model(torch.tensor([p])).logits[0, -1].float()
            # An output history for the penalties (tokens "generated so far").
            history = [rng.randint(10, 200) for _ in range(12)] + [p[-1]] * 3
            dists = []
            for s in settings:
                x = raw.clone().unsqueeze(0)
                ids = torch.tensor([p + history])
                if "repetition_penalty" in s:
                    x = RepetitionPenaltyLogitsProcessor(s["repetition_penalty"])(ids, x)
                if "presence_penalty" in s or "frequency_penalty" in s:
                    counts = torch.bincount(torch.tensor(history), minlength=x.shape[-1]).float()
                    x = x - s.get("presence_penalty", 0.0) * (counts > 0).float()
                    x = x - s.get("frequency_penalty", 0.0) * counts
                for tok, b in s.get("logit_bias", {}).items():
                    x[0, int(tok)] += b
                warpers = LogitsProcessorList()
                if s.get("temperature", 1.0) != 1.0:
                    warpers.append(TemperatureLogitsWarper(s["temperature"]))
                if "top_k" in s:
                    warpers.append(TopKLogitsWarper(s["top_k"]))
                if "top_p" in s:
                    warpers.append(TopPLogitsWarper(s["top_p"]))
                if "min_p" in s:
                    warpers.append(MinPLogitsWarper(s["min_p"]))
                x = warpers(ids, x)
                prob = torch.softmax(x[0], dim=-1)
                nz = torch.nonzero(prob > 0).flatten()
                dists.append({"ids": nz.tolist(), "probs": [float(prob[i]) for i in nz]})
            cases.append({"prompt": p, "history": history, "logits": [float(v) for v in raw],
                          "dists": dists})
    with open(os.path.join(out, "sampling.json"), "w") as f:
        json.dump({"model": name, "settings": settings, "cases": cases,
                   "transformers_version": transformers.__version__}, f, separators=(",", ":"))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    out = args.out
    os.makedirs(out, exist_ok=True)
    torch.set_num_threads(4)
    # head_dim 32 everywhere (the CUDA tensor-core attention path); vocabularies of 512
    # except the qwen3 case, which carries the qwen2 tokenizer (6,000 tokens) for text tests.
    base = dict(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, head_dim=32, intermediate_size=96,
                max_position_embeddings=512, rms_norm_eps=1e-6, tie_word_embeddings=False,
                pad_token_id=0, bos_token_id=None, eos_token_id=None)
    gen_case(out, "qwen3", Qwen3ForCausalLM,
             Qwen3Config(**{**base, "vocab_size": 6016}, **rope(10000.0)), 101, "qwen2")
    gen_case(out, "qwen3_tied_bf16", Qwen3ForCausalLM,
             Qwen3Config(**{**base, "tie_word_embeddings": True}, **rope(1000000.0)), 102,
             None, dtype=torch.bfloat16)
    qwen2 = {k: v for k, v in base.items() if k != "head_dim"}
    qwen2.update(num_attention_heads=2, num_key_value_heads=1)  # head_dim 64 / 2 = 32
    gen_case(out, "qwen2", Qwen2ForCausalLM, Qwen2Config(**qwen2, **rope(10000.0)), 103, None)
    gen_case(out, "llama3_scaled", LlamaForCausalLM,
             LlamaConfig(**base, mlp_bias=True,
                         **rope(500000.0, {"rope_type": "llama3", "factor": 8.0,
                                           "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                           "original_max_position_embeddings": 64})),
             104, None)
    gen_case(out, "llama_linear_bf16", LlamaForCausalLM,
             LlamaConfig(**base, attention_bias=True,
                         **rope(10000.0, {"rope_type": "linear", "factor": 2.0})),
             105, None, dtype=torch.bfloat16)
    gen_case(out, "mistral_window", MistralForCausalLM,
             MistralConfig(**base, sliding_window=12, **rope(10000.0)), 106, None)
    sampling_fixture(out, "llama3_scaled", LlamaForCausalLM, 107)
    print("wrote generation fixtures to", out, "with transformers", transformers.__version__)


if __name__ == "__main__":
    main()
