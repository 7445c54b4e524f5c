"""Token-level golden fixtures (part of tests/golden/generate.py; `--only tokenlevel` runs
just these): ModernBERT (base, sequence and token classification), token classifiers of
the BERT family, a late-interaction (ColBERT-style) embedder, and the Hugging Face
token-classification pipeline's outputs for every aggregation strategy.

Writes, under --out:
  models/<name>/, golden/<name>.json   model-level cases, read by tests/golden/golden_test.cc
                                       (token-level cases: per-token probabilities flattened;
                                       late interaction: per-token vectors and "maxsim";
                                       pylate_colbert: PyLate's query expansion, inputs with
                                       "attended", "served" texts and scores for
                                       tests/golden/pylate_test.cc)
  token_classification/<name>/model/   a tiny token classifier with its tokenizer.json
  token_classification/<name>/expected.json
                                       per text: HF's input ids and the pipeline's entities for
                                       each (aggregation_strategy, ignore_labels) variant, read
                                       by tests/golden/pipeline_test.cc
  token_classification/diagnostics.json
                                       versions, and the ModernBERT local-window convention of
                                       the installed transformers checked against a reference
                                       written here (inclusive |i - j| <= local_attention / 2)

Texts whose entities change when the logits move by 1e-4 are left out (the C++ side must
reproduce every label and offset exactly; scores are compared within 1e-4).
"""
import json
import os
import random
import shutil
import string
import traceback

import torch
import torch.nn.functional as F
import transformers

import generate as g

PIPE_TOL = 1e-4
LABELS_NER = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
LABELS_ABSA = ["O", "B-POS", "I-POS", "B-NEG", "I-NEG"]

# ---------------------------------------------------------------- ModernBERT


def modernbert_config(**kw):
    from transformers import ModernBertConfig
    base = dict(vocab_size=199, hidden_size=48, num_hidden_layers=4, num_attention_heads=4,
                intermediate_size=72, max_position_embeddings=128, local_attention=8,
                global_attn_every_n_layers=3, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                cls_token_id=1, sep_token_id=2, hidden_activation="gelu",
                classifier_activation="gelu", norm_eps=1e-5)
    thetas = kw.pop("thetas", (80000.0, 20000.0))  # not the defaults: they must be read
    base.update(kw)
    try:
        cfg = ModernBertConfig(rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": thetas[0]},
            "sliding_attention": {"rope_type": "default", "rope_theta": thetas[1]}}, **base)
    except TypeError:  # transformers 4.x
        cfg = ModernBertConfig(global_rope_theta=thetas[0], local_rope_theta=thetas[1], **base)
    return g.eager(cfg)


def modernbert_inputs(seed, vocab, max_len=40, long_len=100):
    """[CLS] a [SEP] and [CLS] a [SEP] b [SEP] sequences (ModernBERT has no token types), raw
    ones, lengths 1..max_len and one of long_len: most far longer than the local window."""
    rng = random.Random(seed)
    seqs = []
    for i, n in enumerate([1, 2, 3, max_len] + [rng.randint(1, max_len) for _ in range(g.N_INPUTS - 5)]
                          + [long_len]):
        if i in (10, 20, 30, 40):
            seqs.append(dict(seqs[i // 10]))
            continue
        ids = [rng.randint(5, vocab - 1) for _ in range(n)]
        kind = i % 3
        if kind == 1 and n >= 3:
            ids = [1] + ids[:n - 2] + [2]
        elif kind == 2 and n >= 5:
            cut = rng.randint(1, n - 4)
            ids = [1] + ids[:cut] + [2] + ids[cut:n - 3] + [2]
        seqs.append({"ids": ids, "type_ids": []})
    return seqs


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


@torch.no_grad()
def modernbert_reference(base, ids, inclusive):
    """ModernBERT written out here (eager attention), to check the installed transformers'
    local window convention: inclusive |i - j| <= local_attention // 2, else strict <."""
    cfg = base.config
    heads, H = cfg.num_attention_heads, cfg.hidden_size
    hd = H // heads
    half = cfg.local_attention // 2
    every = getattr(cfg, "global_attn_every_n_layers", 3)
    rp = getattr(cfg, "rope_parameters", None) or {}
    g_theta = (rp.get("full_attention") or {}).get("rope_theta", getattr(cfg, "global_rope_theta", 160000.0))
    l_theta = (rp.get("sliding_attention") or {}).get("rope_theta", getattr(cfg, "local_rope_theta", 10000.0))
    x = base.embeddings.norm(base.embeddings.tok_embeddings(ids))
    T = ids.shape[1]
    pos = torch.arange(T).float()
    dist = (pos[:, None] - pos[None, :]).abs()
    for l, layer in enumerate(base.layers):
        local = l % every != 0
        theta = l_theta if local else g_theta
        inv = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=torch.int64).float() / hd))
        freqs = pos[:, None] * inv[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos(), emb.sin()
        qkv = layer.attn.Wqkv(layer.attn_norm(x)).view(1, T, 3, heads, hd)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        s = (q @ k.transpose(-1, -2)) * hd ** -0.5
        if local:
            ok = dist <= half if inclusive else dist < half
            s = s.masked_fill(~ok, float("-inf"))
        o = (torch.softmax(s, dim=-1) @ v).transpose(1, 2).reshape(1, T, H)
        x = x + layer.attn.Wo(o)
        x = x + layer.mlp(layer.mlp_norm(x))
    return base.final_norm(x)


def window_check(out, name, model_cls):
    """Max |diff| of transformers' ModernBERT against the reference, both conventions."""
    path = os.path.join(out, "models", name)
    model = g.reload(model_cls, path, torch.float32)
    base = model.model if hasattr(model, "model") else model
    ids = torch.tensor([list(range(5, 5 + 60))]) % model.config.vocab_size
    want = base(input_ids=ids).last_hidden_state
    return {c: float((modernbert_reference(base, ids, c == "inclusive") - want).abs().max())
            for c in ("inclusive", "exclusive")}


# ---------------------------------------------------------------- token classification


def token_classifier_case(out, name, model_cls, config, seed, inputs, dtype=torch.float32):
    """Per-token softmax probabilities (what token classification reports), flattened."""
    g.seeded(seed)
    model = model_cls(config).eval()
    g.init_weights(model, seed)
    model = model.to(dtype)
    path = g.save(model, out, name)
    model = g.reload(model_cls, path, dtype)
    outputs, raw = [], []
    for inp in inputs:
        logits = g.hidden_states(model, inp).logits[0].float()
        raw.append(g.tolist(logits))
        outputs.append(g.tolist(torch.softmax(logits, dim=-1)))
    g.write_case(out, name, {
        "task": "token-classify", "dtype": "bf16" if dtype == torch.bfloat16 else "f32",
        "inputs": inputs, "outputs": outputs, "raw": raw, "token_level": True,
        "labels": [config.id2label[i] for i in range(config.num_labels)],
        "tolerance": g.FP32_TOL if dtype == torch.float32 else 3e-2})


def labels_config(labels):
    return dict(num_labels=len(labels), id2label=dict(enumerate(labels)),
                label2id={l: i for i, l in enumerate(labels)})


# ---------------------------------------------------------------- late interaction


def late_interaction_case(out, name, config, seed, dim):
    """BertModel + a sentence-transformers Dense projection (no pooling), sluice.json
    late_interaction: per-token projected vectors, L2-normalised, and MaxSim of pairs."""
    from sentence_transformers import models as stm
    from transformers import BertModel
    g.seeded(seed)
    model = BertModel(config).eval()
    g.init_weights(model, seed)
    path = g.save(model, out, name)
    model = g.reload(BertModel, path, torch.float32)
    dense = stm.Dense(config.hidden_size, dim, bias=False, activation_function=torch.nn.Identity())
    g.init_weights(dense, seed + 1, std=0.15)
    os.makedirs(os.path.join(path, "1_Dense"), exist_ok=True)
    dense.save(os.path.join(path, "1_Dense"))
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Dense", "type": g.st_type(dense, True)}]
    with open(os.path.join(path, "modules.json"), "w") as f:
        json.dump(mods, f, indent=2)
    with open(os.path.join(path, "sluice.json"), "w") as f:
        json.dump({"late_interaction": True}, f)
    inputs = g.make_inputs(seed, 3, config.vocab_size, 24)
    vecs = []
    with torch.no_grad():
        for inp in inputs:
            h = g.hidden_states(model, inp).last_hidden_state[0]
            vecs.append(F.normalize(dense({"sentence_embedding": h})["sentence_embedding"], dim=-1))
    maxsim = []
    for q in range(0, 40, 3):
        d = (q * 7 + 5) % len(inputs)
        maxsim.append([q, d, float((vecs[q] @ vecs[d].T).max(dim=1).values.sum())])
    g.write_case(out, name, {"task": "score", "dtype": "f32", "inputs": inputs,
                             "outputs": [g.tolist(v) for v in vecs], "token_level": True,
                             "maxsim": maxsim, "tolerance": g.FP32_TOL})


# ---------------------------------------------------------------- PyLate ColBERT queries

# Words of train_wordpiece's corpus (short tokenisations, no truncation). The last documents
# carry punctuation: PyLate leaves its skiplist (string.punctuation, each character converted
# with convert_tokens_to_ids, so one missing from the vocabulary is [UNK]) out of documents'
# vectors before MaxSim, and the served scores must do the same.
# 26 inputs: the golden test's batch-invariance check needs at least 22.
PYLATE_QUERIES = ["the food was great", "wait was long", "Boston", "coffee staff", "dirty room",
                  "pasta cold", "offices near Seattle", "friendly staff", "Tokyo Paris",
                  "음식이 맛있고", "the station", "Amazon"]
PYLATE_DOCUMENTS = ["The staff was friendly and the food was delicious",
                    "The wait was too long and the room was dirty",
                    "Great coffee friendly staff",
                    "Seoul Busan Tokyo Paris Boston",
                    "The food at Luigi in Boston was great but the wait was long",
                    "Service was slow the pasta cold still Anna loved the tiramisu",
                    "Microsoft Apple and Amazon all have offices near Seattle",
                    "Prices went up since and the portions shrank",
                    "Try Le Chalet near the station",
                    "음식이 맛있고 직원이 친절합니다",
                    "Google Microsoft Apple Amazon New York",
                    "the pasta was cold and the coffee was great",
                    "The food was great, but the wait was long!",
                    "Service was slow; the pasta cold? still (Anna) loved it..."]


def pylate_case(out, name, seed, query_length=20, document_length=40, dim=16):
    """PyLate's ColBERT with its defaults (query expansion, attend_to_expansion_tokens false),
    emulated with transformers as pylate.models.ColBERT does it (PyLate itself is not needed):
    "[Q] " / "[D] " added to the tokenizer and their ids put after [CLS]; queries padded with
    [MASK] (the pad token) to query_length with attention_mask 0 on the padding, the [MASK]
    tokens' vectors kept; documents cut to document_length, not padded; the Dense projection,
    each token vector L2-normalised; the documents' skiplist tokens (string.punctuation)
    dropped; MaxSim. The model directory carries PyLate's
    config_sentence_transformers.json (no attend_to_expansion_tokens override in sluice.json),
    so sluice must serve PyLate's default. Written as a golden case (inputs with "attended":
    the engine's key limits) plus "served": texts and PyLate's scores for the text path of
    /score, checked by tests/golden/pylate_test.cc."""
    from sentence_transformers import models as stm
    from transformers import BertModel
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # transformers 5 without the alias
        from transformers import TokenizersBackend as PreTrainedTokenizerFast
    raw, specials = train_wordpiece()
    tok = PreTrainedTokenizerFast(tokenizer_object=raw, model_max_length=64, **specials)
    tok.add_tokens(["[Q] ", "[D] "])  # as PyLate does
    q_id, d_id = tok.convert_tokens_to_ids("[Q] "), tok.convert_tokens_to_ids("[D] ")
    mask_id = tok.mask_token_id
    config = g.bert_config(vocab_size=len(tok), max_position_embeddings=64)
    g.seeded(seed)
    model = BertModel(config).eval()
    g.init_weights(model, seed)
    path = g.save(model, out, name)
    tok.save_pretrained(path)
    tok.pad_token = tok.mask_token  # PyLate: the MASK token pads (the query expansion)
    model = g.reload(BertModel, path, torch.float32)
    dense = stm.Dense(config.hidden_size, dim, bias=False, activation_function=torch.nn.Identity())
    g.init_weights(dense, seed + 1, std=0.15)
    os.makedirs(os.path.join(path, "1_Dense"), exist_ok=True)
    dense.save(os.path.join(path, "1_Dense"))
    mods = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Dense", "type": g.st_type(dense, True)}]
    with open(os.path.join(path, "modules.json"), "w") as f:
        json.dump(mods, f, indent=2)
    with open(os.path.join(path, "config_sentence_transformers.json"), "w") as f:
        json.dump({"__version__": {"pylate": "emulated"}, "prompts": {}, "query_prefix": "[Q] ",
                   "document_prefix": "[D] ", "query_length": query_length,
                   "document_length": document_length, "attend_to_expansion_tokens": False,
                   "skiplist_words": list(string.punctuation),  # as PyLate saves it
                   "do_query_expansion": True, "similarity_fn_name": "MaxSim"}, f, indent=2)
    with open(os.path.join(path, "sluice.json"), "w") as f:
        json.dump({"late_interaction": True, "query_prefix": "[Q] ", "document_prefix": "[D] "}, f)

    def pylate_features(text, is_query):
        # ColBERT.preprocess: max_seq_length = length - 1 (room for the prefix id), queries
        # padded to it ("max_length"), then the prefix id inserted after [CLS] (mask 1).
        length = query_length if is_query else document_length
        enc = tok([text], truncation=True, max_length=length - 1,
                  padding="max_length" if is_query else False)
        ids, att = enc["input_ids"][0], enc["attention_mask"][0]
        prefix = q_id if is_query else d_id
        return ids[:1] + [prefix] + ids[1:], att[:1] + [1] + att[1:]

    skiplist = {tok.convert_tokens_to_ids(w) for w in string.punctuation}
    inputs, vecs, kept, served_q, served_d = [], [], [], [], []
    with torch.no_grad():
        for text, is_query in ([(t, True) for t in PYLATE_QUERIES] +
                               [(t, False) for t in PYLATE_DOCUMENTS]):
            ids, att = pylate_features(text, is_query)
            # sluice's text path: the prefix before the text, padded with [MASK] (queries).
            mine = tok(("[Q] " if is_query else "[D] ") + text)["input_ids"]
            if is_query:
                mine = mine + [mask_id] * (query_length - len(mine))
            assert mine == ids, (text, mine, ids)
            assert ids[-1] != mask_id or is_query
            h = model(input_ids=torch.tensor([ids]),
                      attention_mask=torch.tensor([att])).last_hidden_state[0]
            v = F.normalize(dense({"sentence_embedding": h})["sentence_embedding"], dim=-1)
            entry = {"ids": ids}
            if sum(att) < len(att):
                entry["attended"] = sum(att)
                assert att == [1] * sum(att) + [0] * (len(att) - sum(att))
            inputs.append(entry)
            vecs.append(v)
            # ColBERT.encode(is_query=False): the skiplist tokens' vectors are dropped (the
            # golden case keeps every row: the engine's output; the served scores drop them).
            kept.append(v if is_query else v[torch.tensor([t not in skiplist for t in ids])])
            (served_q if is_query else served_d).append(text)
    nq = len(PYLATE_QUERIES)
    maxsim, scores, skipped = [], [], 0.0
    for q in range(nq):
        row = []
        for d in range(len(PYLATE_DOCUMENTS)):
            # The engine's MaxSim over every row (golden_test.cc), PyLate's over the kept rows.
            every = float((vecs[q] @ vecs[nq + d].T).max(dim=1).values.sum())
            s = float((kept[q] @ kept[nq + d].T).max(dim=1).values.sum())
            maxsim.append([q, nq + d, every])
            row.append(s)
            skipped = max(skipped, abs(every - s))
        scores.append(row)
    assert skipped > 1e-3, ("the skiplist changes no score; the fixture would not test it",
                            skipped)
    g.write_case(out, name, {"task": "score", "dtype": "f32", "inputs": inputs,
                             "outputs": [g.tolist(v) for v in vecs], "token_level": True,
                             "maxsim": maxsim, "tolerance": g.FP32_TOL,
                             "served": {"queries": served_q, "documents": served_d,
                                        "query_length": query_length, "scores": scores},
                             "notes": "PyLate ColBERT emulated: document skiplist (string.punctuation; "
                                      "served scores only), query expansion with "
                                      "attend_to_expansion_tokens false"})
    return {"queries": nq, "documents": len(PYLATE_DOCUMENTS)}


# ---------------------------------------------------------------- the pipeline

REVIEWS_EN = [
    "The food at Luigi's in Boston was great but the wait was long.",
    "Maria Rossi and John Smith met at Google in New York.",
    "Service was slow, the pasta cold; still, Anna loved the tiramisu!",
    "We flew from Paris to Tokyo with Air France last May.",
    "Great coffee, friendly staff -- Mr. O'Neil knows every regular by name.",
    "The  room at the Hilton   smelled of smoke and the Wi-Fi kept dropping.",
    "Café au lait at Ångström Bakery: naïve but delightful.",
    "Dr. Chen from Stanford University recommended the steak.",
    "Prices went up 20% since 2023, and the portions shrank.",
    "I'd come back for the view alone 🙂 but not for the noise.",
    "Microsoft, Apple and Amazon all have offices near Seattle.",
    "The waiter (Tom) forgot our order twice.",
    "Zürich's best fondue? Try Le Chalet near the station.",
    "unbelievable tokenization of jalapeño-flavoured résumés",
]
REVIEWS_KO = [
    "음식은 정말 맛있었지만 대기 시간이 너무 길었어요.",
    "서울 강남역 근처 김밥천국에서 김치찌개를 먹었습니다.",
    "직원들이 친절하고 분위기도 좋았어요!",
    "가격이 비싸고 양이 적어서 실망했습니다.",
    "박지성 씨와 함께 부산에 있는 호텔에 묵었어요.",
    "커피는 맛있는데 의자가 불편해요 😅",
    "The 불고기 at Seoul Garden was 최고!",
    "배달이 늦었지만 포장은 깔끔했습니다.",
    "주차 공간이 부족하고 화장실이 더러웠어요.",
    "日本の寿司と韓国の비빔밥、どちらも美味しい。",
]
TRAIN_EXTRA = [
    "The staff was friendly and the food was delicious.",
    "The wait was too long and the room was dirty.",
    "음식이 맛있고 직원이 친절합니다.", "대기 시간이 길고 가격이 비쌉니다.",
    "Seoul Busan Tokyo Paris Boston Seattle New York Google Microsoft Apple Amazon",
    "김밥 김치 불고기 비빔밥 커피 호텔 주차 화장실 배달 포장 분위기 의자",
]


def train_wordpiece():
    """A cased BERT WordPiece tokenizer that knows Korean (word-aware: ## continuations)."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=False, lowercase=False)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=700, min_frequency=1, limit_alphabet=600,
                                        special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    corpus = (REVIEWS_EN[::2] + REVIEWS_KO[::2] + TRAIN_EXTRA) * 3
    tok.train_from_iterator(corpus, trainer)
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok, dict(unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                     pad_token="[PAD]", mask_token="[MASK]")


def fixture_tokenizer(tokenizers_dir, name, specials):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(tokenizers_dir, name, "tokenizer.json")), specials


def to_json(entities):
    out = []
    for e in entities:
        d = {}
        for k, v in e.items():
            if k == "score":
                d[k] = float(v)
            elif k in ("start", "end", "index"):
                d[k] = None if v is None else int(v)
            else:
                d[k] = str(v)
        out.append(d)
    return out


def discrete(results):
    return {k: [(e.get("entity", e.get("entity_group")), e["word"], e["start"], e["end"])
                for e in v] for k, v in results.items()}


def pipeline_case(out, name, model_cls, config, seed, raw_tok, specials, texts, labels,
                  max_length=512):
    from transformers import pipeline
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:  # transformers 5 without the alias
        from transformers import TokenizersBackend as PreTrainedTokenizerFast
    base = os.path.join(out, "token_classification", name)
    shutil.rmtree(base, ignore_errors=True)
    path = os.path.join(base, "model")
    config.vocab_size = raw_tok.get_vocab_size(with_added_tokens=True)
    g.seeded(seed)
    model = model_cls(config).eval()
    g.init_weights(model, seed)
    with torch.no_grad():  # confident, varied labels
        model.classifier.weight.mul_(4.0)
    model.save_pretrained(path, safe_serialization=True)
    tok = PreTrainedTokenizerFast(tokenizer_object=raw_tok, model_max_length=max_length, **specials)
    tok.save_pretrained(path)
    model = g.reload(model_cls, path, torch.float32)
    pipe = pipeline("token-classification", model=model, tokenizer=tok, device="cpu")
    tag = labels[1][2:]
    variants = [("none", None, None), ("simple", "simple", None), ("first", "first", None),
                ("average", "average", None), ("max", "max", None), ("none_all", None, []),
                ("simple_all", "simple", []), ("average_no_tag", "average", ["O", tag]),
                ("first_all", "first", [])]

    def run(text):
        res = {}
        for key, agg, ignore in variants:
            kw = {}
            if agg:
                kw["aggregation_strategy"] = agg
            if ignore is not None:
                kw["ignore_labels"] = ignore
            res[key] = to_json(pipe(text, **kw))
        return res

    cases, dropped = [], []
    for text in texts:
        ref = run(text)
        stable = True
        for s in (1, 2, 3):
            gen = torch.Generator().manual_seed(seed * 10 + s)

            def hook(mod, inp, o):
                return o + (torch.rand(o.shape, generator=gen) * 2 - 1) * PIPE_TOL

            h = model.classifier.register_forward_hook(hook)
            try:
                alt = run(text)
            finally:
                h.remove()
            stable = stable and discrete(alt) == discrete(ref)
        if not stable:
            dropped.append(text)
            continue
        enc = tok(text)
        cases.append({"text": text, "input_ids": enc["input_ids"], "outputs": ref})
    with open(os.path.join(base, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"model": name, "labels": labels, "tolerance": PIPE_TOL,
                   "word_aware": bool(getattr(tok._tokenizer.model, "continuing_subword_prefix", None)),
                   "unk_token_id": tok.unk_token_id,
                   "variants": [{"name": k, "aggregation_strategy": a or "none",
                                 "ignore_labels": i} for k, a, i in variants],
                   "cases": cases, "dropped_unstable": dropped,
                   "transformers_version": transformers.__version__}, f, ensure_ascii=False,
                  indent=1)
    return len(cases), len(dropped)


# ---------------------------------------------------------------- main


def run(out, tokenizers_dir):
    from transformers import (BertForTokenClassification, ModernBertForSequenceClassification,
                              ModernBertForTokenClassification, ModernBertModel,
                              XLMRobertaConfig, XLMRobertaForTokenClassification)
    diag = {"transformers_version": transformers.__version__, "torch_version": torch.__version__,
            "errors": {}}

    def attempt(label, fn):
        try:
            diag[label] = fn()
        except Exception:  # one case failing must not lose the others
            diag["errors"][label] = traceback.format_exc()
            print("FAILED", label, flush=True)

    V = 199
    attempt("modernbert_st_mean", lambda: g.embed_case(
        out, "modernbert_st_mean", ModernBertModel, modernbert_config(), 41, "mean"))
    attempt("window_check", lambda: window_check(out, "modernbert_st_mean", ModernBertModel))
    attempt("modernbert_classifier3", lambda: g.classifier_case(
        out, "modernbert_classifier3", ModernBertForSequenceClassification,
        modernbert_config(**labels_config(["negative", "neutral", "positive"])), 42, pairs=False,
        inputs=modernbert_inputs(42, V)))
    # Odd sizes, every bias, mean pooling, one label (a cross-encoder), 3 layers, every 2nd global.
    attempt("modernbert_cross_encoder_mean", lambda: g.classifier_case(
        out, "modernbert_cross_encoder_mean", ModernBertForSequenceClassification,
        modernbert_config(num_labels=1, hidden_size=36, num_attention_heads=3, intermediate_size=50,
                          num_hidden_layers=3, global_attn_every_n_layers=2, local_attention=6,
                          attention_bias=True, mlp_bias=True, norm_bias=True, classifier_bias=True,
                          classifier_pooling="mean", classifier_activation="gelu_pytorch_tanh",
                          vocab_size=151),
        43, pairs=False, inputs=modernbert_inputs(43, 151)))
    attempt("modernbert_tokcls", lambda: token_classifier_case(
        out, "modernbert_tokcls", ModernBertForTokenClassification,
        modernbert_config(**labels_config(LABELS_ABSA)), 44, modernbert_inputs(44, V)))
    # bf16, head_dim 64 (the CUDA tensor-core attention path), local_attention 32.
    attempt("modernbert_classifier_bf16", lambda: g.classifier_case(
        out, "modernbert_classifier_bf16", ModernBertForSequenceClassification,
        modernbert_config(num_labels=2, hidden_size=128, num_attention_heads=2, intermediate_size=96,
                          num_hidden_layers=3, local_attention=32),
        45, pairs=False, dtype=torch.bfloat16, inputs=modernbert_inputs(45, V, long_len=120)))
    attempt("bert_tokcls_pairs", lambda: token_classifier_case(
        out, "bert_tokcls_pairs", BertForTokenClassification,
        g.bert_config(**labels_config(LABELS_NER)), 46, g.make_inputs(46, 3, 211, 40, pairs=True)))
    attempt("bert_late_interaction", lambda: late_interaction_case(
        out, "bert_late_interaction", g.bert_config(), 47, 16))
    attempt("pylate_colbert", lambda: pylate_case(out, "pylate_colbert", 48))

    texts = REVIEWS_EN + REVIEWS_KO

    def wordpiece_case():
        wp, wp_specials = train_wordpiece()
        return pipeline_case(out, "bert_wordpiece_ko", BertForTokenClassification,
                             g.bert_config(**labels_config(LABELS_ABSA), max_position_embeddings=128),
                             51, wp, wp_specials, texts, LABELS_ABSA)

    def modernbert_case():
        mb, mb_specials = fixture_tokenizer(tokenizers_dir, "modernbert", dict(
            unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]", pad_token="[PAD]",
            mask_token="[MASK]", model_input_names=["input_ids", "attention_mask"]))
        return pipeline_case(out, "modernbert_bytelevel", ModernBertForTokenClassification,
                             modernbert_config(**labels_config(LABELS_NER), max_position_embeddings=256,
                                               local_attention=16, pad_token_id=3),
                             52, mb, mb_specials, texts, LABELS_NER)

    def xlmr_case():
        xl, xl_specials = fixture_tokenizer(tokenizers_dir, "xlmr", dict(
            unk_token="<unk>", cls_token="<s>", sep_token="</s>", pad_token="<pad>",
            mask_token="<mask>", bos_token="<s>", eos_token="</s>"))
        return pipeline_case(out, "xlmr_unigram", XLMRobertaForTokenClassification,
                             g.roberta_config(XLMRobertaConfig, **labels_config(LABELS_NER),
                                              max_position_embeddings=256),
                             53, xl, xl_specials, texts, LABELS_NER)

    attempt("pipeline_bert_wordpiece_ko", wordpiece_case)
    attempt("pipeline_modernbert_bytelevel", modernbert_case)
    attempt("pipeline_xlmr_unigram", xlmr_case)
    os.makedirs(os.path.join(out, "token_classification"), exist_ok=True)
    with open(os.path.join(out, "token_classification", "diagnostics.json"), "w") as f:
        json.dump(diag, f, indent=1, default=str)
    print("token-level fixtures:", json.dumps({k: v for k, v in diag.items() if k != "errors"},
                                              default=str), "errors:", list(diag["errors"]))
