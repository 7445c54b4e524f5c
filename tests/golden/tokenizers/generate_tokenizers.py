#!/usr/bin/env python3
"""Generates tokenizer parity fixtures for sluice (tests/fixtures/tokenizers/).

Runs on the GPU machine (needs `tokenizers`; `transformers` and `sentencepiece` are
optional). Trains small tokenizers with HF tokenizers that reproduce real pipelines,
builds a deterministic multilingual corpus and records HF outputs.

Offsets are written as BYTE offsets into the UTF-8 encoding of the input (HF's Python
binding reports code-point offsets; they are converted here), delta-encoded as
[start - prev_end, end - start, ...] to compress well.

Usage: generate_tokenizers.py --out DIR [--corpus-only] [--only NAME,NAME]
(--only trains and writes just those tokenizers, and meta_only.json instead of meta.json)
"""
import argparse
import gzip
import io
import json
import os
import random
import sys
import traceback

SEED = 20261130
N_CORPUS = 20000
N_PAIRS = 1500
N_TRUNC = 1500
N_DECODE = 2000
N_DECODE_KEEP = 500
N_NOSPECIAL = 800
# Tokenizers encoded on the whole corpus; the others use SUBSET (30% of it, all kinds).
FULL = {"bert_uncased", "qwen2", "xlmr", "scripts_bpe", "scripts_only"}


def subset_indices():
    return [i for i in range(N_CORPUS) if i < 40 or i % 10 < 3]

WORDS = (
    "the of and to in is was for on that with as by at from his her it an are were "
    "which be this had not but they have or one their all has been there would who "
    "time year people way day man thing woman life child world school state family "
    "student group country problem hand part place case week company system program "
    "question work government number night point home water room mother area money "
    "story fact month lot right study book eye job word business issue side kind head "
    "house service friend father power hour game line end member law car city name "
    "president team minute idea kid body information back parent face others level "
    "office door health person art war history party result change morning reason "
    "research girl guy moment air teacher force education running jumped quickly "
    "unbelievable tokenization transformer embedding reranker Hello World OpenAI "
    "GPU CUDA NVIDIA don't can't I'll we're they've she'd it's O'Neil café naïve "
    "résumé Zürich São Paulo Ångström façade coöperate jalapeño Straße"
).split()

WHITESPACE = ["\t", "\n", "\x0b", "\x0c", "\r", " ", "\x85", "\xa0", "\u1680",
              "\u2000", "\u2001", "\u2002", "\u2003", "\u2004", "\u2005", "\u2006",
              "\u2007", "\u2008", "\u2009", "\u200a", "\u2028", "\u2029", "\u202f",
              "\u205f", "\u3000", "\r\n", "\u200b", "\ufeff", "\u180e"]
CONTROLS = [chr(c) for c in list(range(0, 32)) + list(range(0x7f, 0xa0))] + [
    "\u200c", "\u200d", "\u200e", "\u200f", "\u2060", "\ufffd", "\ufff9", "\U000e0001"]
EMOJI = ["😀", "😂", "🥲", "👍", "👍🏽", "👍🏿", "👨‍👩‍👧‍👦", "👩🏽‍💻", "🏳️‍🌈", "🇺🇸", "🇰🇷",
         "❤️", "✨", "🔥", "🧑🏻‍🤝‍🧑🏾", "☺︎", "1️⃣", "🫠", "🦀", "🐍"]
CJK_COMMON = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坏兴切"
KANA = [chr(c) for c in range(0x3041, 0x3097)] + [chr(c) for c in range(0x30a1, 0x30fb)] + ["ー", "、", "。", "「", "」"]
ARABIC = [chr(c) for c in range(0x0621, 0x064B)]
ARABIC_MARKS = [chr(c) for c in range(0x064B, 0x0653)]
CYRILLIC = [chr(c) for c in range(0x0410, 0x0450)] + ["ё", "Ё", "і", "ї", "є"]
DEVA = [chr(c) for c in range(0x0905, 0x093A)]
DEVA_MARKS = [chr(c) for c in range(0x093E, 0x094D)] + ["\u094d", "\u0902", "\u0903"]
COMBINING = [chr(c) for c in range(0x0300, 0x0370)] + ["\u20dd", "\u0e31", "\u1ab0"]
LATIN_EXT = "àáâãäåæçèéêëìíîïðñòóôõöøùúûüýþÿĀāĂăĄąĆćČčĎďĐđĒēĘęĚěĞğĠġĦħĪīİıĲĳĶķĹĺĽľŁłŃńŇňŌōŐőŒœŘřŚśŞşŠšŢţŤťŪūŮůŰűŸŹźŻżŽžǅǈǋǲẞﬁﬂ①²³½™℃Ⅻｶﾞﾟ㍿ＡＢＣ１２３"
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + ["…", "—", "–", "«", "»", "¿", "¡", "·", "•", "€", "£", "¥", "©", "®", "§", "¶", "†", "‰", "′", "″", "„", "“", "”", "‘", "’", "‹", "›", "※", "〜"]
SPECIAL_LITERALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                    "[CLS]", "[SEP]", "[MASK]", "[UNK]", "[PAD]", "<s>", "</s>", "<mask>", "<unk>",
                    "<pad>", "<|begin_of_text|>", "<|eot_id|>", "<0x41>", "▁", "Ġ", "##"]


def hangul(r):
    return chr(r.randint(0xAC00, 0xD7A3))


def gen_string(r, i):
    kind = i % 24
    n = r.choice([1, 2, 3, 4, 5, 6, 8, 10, 14])
    if i < 40:  # fixed edge cases first
        fixed = ["", " ", "  ", "\n", "\t\t", "a", "A", ".", "\x00", "\u3000", "\ufeff",
                 "hello world", "Hello  World!", " leading", "trailing ", "   both   ",
                 "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n",
                 "[CLS] hello [SEP] world [SEP]", "a <mask> b", "x<mask>y", "<s>hi</s>",
                 "don't stop", "I'll go", "HELLO'S", "12345678901234567890", "3.14159",
                 "1,000,000.00", "a" * 300, "ab" * 150 + " end", "한국어 텍스트입니다",
                 "日本語のテキストです。", "中文文本测试", "مرحبا بالعالم", "Привет мир",
                 "नमस्ते दुनिया", "👨‍👩‍👧‍👦 family", "e\u0301 vs é", "ﬁ ﬂ ① ㍿", "\r\n\r\n", "\x85\xa0\u2028"]
        return fixed[i]
    parts = []
    if kind <= 5:
        words = [r.choice(WORDS) for _ in range(n + 2)]
        for j, w in enumerate(words):
            if r.random() < 0.15:
                w = w.capitalize() if r.random() < 0.5 else w.upper()
            parts.append(w)
            if r.random() < 0.2:
                parts.append(r.choice(PUNCT))
            if r.random() < 0.1:
                parts.append(str(r.randint(0, 100000)))
        sep = " " if r.random() < 0.9 else r.choice(WHITESPACE)
        return sep.join(parts)
    if kind == 6:  # Korean
        out = []
        for _ in range(n):
            c = r.random()
            if c < 0.6:
                out.append("".join(hangul(r) for _ in range(r.randint(1, 5))))
            elif c < 0.75:
                out.append("".join(chr(r.randint(0x1100, 0x11FF)) for _ in range(r.randint(1, 4))))
            elif c < 0.9:
                out.append("".join(chr(r.randint(0x3131, 0x318E)) for _ in range(r.randint(1, 4))))
            else:
                out.append(r.choice(WORDS) + str(r.randint(0, 99)))
        return " ".join(out)
    if kind == 7:  # Japanese
        return "".join(r.choice(KANA) if r.random() < 0.7 else r.choice(CJK_COMMON) for _ in range(n * 3))
    if kind == 8:  # Chinese
        s = "".join(r.choice(CJK_COMMON) for _ in range(n * 2))
        return s if r.random() < 0.7 else s + "，" + r.choice(WORDS) + "。"
    if kind == 9:  # Arabic
        out = []
        for _ in range(n):
            w = "".join(r.choice(ARABIC) + (r.choice(ARABIC_MARKS) if r.random() < 0.2 else "") for _ in range(r.randint(2, 6)))
            out.append(w)
        return " ".join(out) + (" ١٢٣" if r.random() < 0.2 else "")
    if kind == 10:  # Cyrillic
        return " ".join("".join(r.choice(CYRILLIC) for _ in range(r.randint(2, 9))) for _ in range(n))
    if kind == 11:  # Devanagari
        return " ".join("".join(r.choice(DEVA) + (r.choice(DEVA_MARKS) if r.random() < 0.5 else "") for _ in range(r.randint(1, 5))) for _ in range(n))
    if kind == 12:  # emoji
        return " ".join((r.choice(WORDS) if r.random() < 0.4 else "") + r.choice(EMOJI) * r.randint(1, 2) for _ in range(n))
    if kind == 13:  # combining marks / accents
        out = []
        for _ in range(n):
            w = r.choice(WORDS)
            w = "".join(ch + ("".join(r.choice(COMBINING) for _ in range(r.randint(1, 2))) if r.random() < 0.3 else "") for ch in w)
            if r.random() < 0.5:
                w += "".join(r.choice(LATIN_EXT) for _ in range(r.randint(1, 4)))
            out.append(w)
        return " ".join(out)
    if kind == 14:  # whitespace kinds
        return "".join(r.choice(WHITESPACE) * r.randint(1, 3) + (r.choice(WORDS) if r.random() < 0.6 else "") for _ in range(n))
    if kind == 15:  # control chars
        return "".join(r.choice(CONTROLS) + (r.choice(WORDS) if r.random() < 0.6 else "") for _ in range(n))
    if kind == 16 and i % 48 != 16:
        kind = 23
    if kind == 16:  # long words / long texts
        c = r.random()
        if c < 0.4:
            return "".join(r.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(r.randint(90, 400)))
        if c < 0.5:
            return r.choice(["x", "ab", "한", "中", "é", "😀", " ", "-"]) * r.randint(50, 300)
        return " ".join(r.choice(WORDS) for _ in range(r.randint(40, 160)))
    if kind == 17:  # special-token literals mixed in
        out = []
        for _ in range(n):
            out.append(r.choice(SPECIAL_LITERALS) if r.random() < 0.4 else r.choice(WORDS))
        return r.choice(["", " ", "\n"]).join(out)
    if kind == 18:  # numbers and code
        c = r.random()
        if c < 0.5:
            return " ".join(str(r.randint(0, 10 ** r.randint(1, 12))) + r.choice(["", ".", ",", "%", "px", "st"]) for _ in range(n))
        return r.choice(["def f(x):\n    return x**2\n", "for (int i = 0; i < n; ++i) { a[i] += 1; }",
                         "<div class=\"x\">Hi</div>", "SELECT * FROM t WHERE id=42;", "x = {'a': [1, 2]}\n\n\tpass",
                         "https://example.com/a?b=c&d=e#frag", "user@example.org", "C:\\Users\\me\\file.txt"]) * r.randint(1, 3)
    if kind == 19:  # mixed scripts
        pools = [WORDS, list(CJK_COMMON), KANA, CYRILLIC, ARABIC, EMOJI, PUNCT, [hangul(r) for _ in range(5)], list(LATIN_EXT)]
        return "".join(r.choice(r.choice(pools)) + (" " if r.random() < 0.3 else "") for _ in range(n * 2))
    if kind == 20:  # random code points from the BMP and beyond (no surrogates)
        out = []
        for _ in range(n * 2):
            while True:
                cp = r.choice([r.randint(0x20, 0x2FFF), r.randint(0x3000, 0xD7FF), r.randint(0xE000, 0xFFFD), r.randint(0x10000, 0x10FFFF)])
                if not (0xD800 <= cp <= 0xDFFF):
                    break
            out.append(chr(cp))
        return "".join(out)
    if kind == 21:  # casing + apostrophes (GPT-2 contractions)
        return " ".join(r.choice(["I'M", "You'RE", "it'S", "we'Ve", "he'd", "they'll", "'s", "''", "'", "O'Brien"]) + r.choice(["", " ", "!", "?"]) for _ in range(n))
    if kind == 22:  # hyphens and digits
        return "-".join(r.choice(WORDS) + str(r.randint(0, 999)) for _ in range(n))
    return " ".join(r.choice(WORDS) for _ in range(n)) + r.choice(["", " ", "  ", "\n", " \n "])


def build_corpus():
    r = random.Random(SEED)
    return [gen_string(r, i) for i in range(N_CORPUS)]


def small_alphabet(train):
    """Unigram trainers need every character in the vocabulary: drop the kinds with huge alphabets."""
    return [s for i, s in enumerate(train) if s and not (i < N_CORPUS and i % 24 in (6, 7, 8, 19, 20))]


def train_corpus(corpus):
    r = random.Random(SEED + 1)
    extra = []
    for _ in range(30000):
        extra.append(" ".join(r.choice(WORDS) for _ in range(r.randint(3, 15))))
    return corpus + extra


def byte_offsets(text, offsets):
    pos = [0]
    for ch in text:
        pos.append(pos[-1] + len(ch.encode("utf-8")))
    return [(pos[s], pos[e]) for s, e in offsets]


def delta(offs):
    out, prev = [], 0
    for s, e in offs:
        out += [s - prev, e - s]
        prev = e
    return out


def record(enc, texts):
    """texts: the input(s); offsets of the pair part are relative to the second text."""
    seq_ids = enc.sequence_ids if hasattr(enc, "sequence_ids") else [0] * len(enc.ids)
    offs = []
    for k, (o, sid) in enumerate(zip(enc.offsets, seq_ids)):
        t = texts[sid] if sid is not None else ""
        if sid is None:
            offs.append((o[0], o[1]))  # special tokens: (0, 0)
        else:
            offs.append(byte_offsets(t, [o])[0])
    d = {"ids": enc.ids, "o": delta(offs)}
    if any(enc.type_ids):
        d["t"] = enc.type_ids
    if any(enc.special_tokens_mask):
        d["sm"] = [k for k, v in enumerate(enc.special_tokens_mask) if v]
    return d


def make_tokenizers(train, only=()):
    from tokenizers import (AddedToken, Regex, Tokenizer, decoders, models, normalizers,
                            pre_tokenizers, processors, trainers)
    toks = {}
    notes = {}

    def want(*names):
        return not only or any(n in only for n in names)

    def wordpiece(lower, name, processing):
        tok = Tokenizer(models.WordPiece(unk_token="[UNK]", max_input_chars_per_word=100))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=None, lowercase=lower)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tr = trainers.WordPieceTrainer(vocab_size=5000, limit_alphabet=800,
                                       special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
        tok.train_from_iterator(train, tr)
        cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
        if processing == "template":
            tok.post_processor = processors.TemplateProcessing(
                single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
                special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        else:
            tok.post_processor = processors.BertProcessing(("[SEP]", sep), ("[CLS]", cls))
        tok.decoder = decoders.WordPiece(prefix="##")
        toks[name] = tok

    qwen_re = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""
    llama3_re = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""

    def bytelevel_bpe(name, regex, specials, normal_added, ignore_merges, normalizer):
        tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
        if normalizer:
            tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)])
        tr = trainers.BpeTrainer(vocab_size=6000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 special_tokens=specials, show_progress=False)
        tok.train_from_iterator(train, tr)
        tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in normal_added])
        tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        return tok

    def bl_model(name, specials, add_prefix_space, normalizer):
        tok = Tokenizer(models.BPE())
        if normalizer:
            tok.normalizer = normalizer
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=add_prefix_space, trim_offsets=True, use_regex=True)
        tr = trainers.BpeTrainer(vocab_size=5000, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                 special_tokens=specials, show_progress=False)
        tok.train_from_iterator(train, tr)
        tok.decoder = decoders.ByteLevel()
        return tok

    def _sec0():
        wordpiece(True, "bert_uncased", "template")
        wordpiece(False, "bert_cased", "bert")

    try:
        if want("bert_uncased", "bert_cased"):
            _sec0()
    except Exception:
        traceback.print_exc()
    def _sec1():
        t = bytelevel_bpe("qwen2", qwen_re, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                          ["<think>", "</think>"], False, normalizers.NFC())
        t.post_processor = processors.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
        toks["qwen2"] = t

    try:
        if want("qwen2"):
            _sec1()
    except Exception:
        traceback.print_exc()
    def _sec2():
        t = bytelevel_bpe("llama3", llama3_re, ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"], [], True, None)
        bos = t.token_to_id("<|begin_of_text|>")
        t.post_processor = processors.Sequence([
            processors.ByteLevel(add_prefix_space=True, trim_offsets=False, use_regex=True),
            processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                          pair="<|begin_of_text|> $A <|begin_of_text|>:1 $B:1",
                                          special_tokens=[("<|begin_of_text|>", bos)])])
        toks["llama3"] = t

    try:
        if want("llama3"):
            _sec2()
    except Exception:
        traceback.print_exc()
    def _sec3():
        t = bl_model("roberta", ["<s>", "<pad>", "</s>", "<unk>", AddedToken("<mask>", lstrip=True, special=True, normalized=False)], True, None)
        t.post_processor = processors.RobertaProcessing(("</s>", t.token_to_id("</s>")), ("<s>", t.token_to_id("<s>")),
                                                        trim_offsets=True, add_prefix_space=True)
        toks["roberta"] = t

    try:
        if want("roberta"):
            _sec3()
    except Exception:
        traceback.print_exc()
    def _sec4():
        t = bl_model("modernbert", ["[UNK]", "[CLS]", "[SEP]", "[PAD]", AddedToken("[MASK]", lstrip=True, special=True, normalized=False)], False, normalizers.NFC())
        t.add_tokens([AddedToken("|||IP_ADDRESS|||", special=False, normalized=True), AddedToken("  ", special=False, normalized=True)])
        cls, sep = t.token_to_id("[CLS]"), t.token_to_id("[SEP]")
        t.post_processor = processors.TemplateProcessing(single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]",
                                                         special_tokens=[("[CLS]", cls), ("[SEP]", sep)])
        toks["modernbert"] = t

    try:
        if want("modernbert"):
            _sec4()
    except Exception:
        traceback.print_exc()
    def _sec5():
        # Llama-2 style: no pre-tokenizer, Prepend/Replace normalizer, byte_fallback + fuse_unk.
        t = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
        t.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        byte_toks = ["<0x%02X>" % b for b in range(256)]
        tr = trainers.BpeTrainer(vocab_size=3000, limit_alphabet=300, special_tokens=["<unk>", "<s>", "</s>"] + byte_toks,
                                 show_progress=False)
        t.train_from_iterator(train[:25000], tr)
        js = json.loads(t.to_str())
        js["added_tokens"] = [a for a in js["added_tokens"] if a["content"] not in byte_toks]
        t = Tokenizer.from_str(json.dumps(js))
        t.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                         special_tokens=[("<s>", t.token_to_id("<s>"))])
        t.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)])
        toks["llama2_bytefallback"] = t

    try:
        if want("llama2_bytefallback"):
            _sec5()
    except Exception:
        traceback.print_exc()
    def _sec6():
        # Misc WordPiece: NFD + StripAccents + Lowercase + Strip + Replace; Split/WhitespaceSplit/Punctuation/Digits.
        t = Tokenizer(models.WordPiece(unk_token="[UNK]", continuing_subword_prefix="##", max_input_chars_per_word=40))
        t.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents(), normalizers.Lowercase(),
                                             normalizers.Strip(left=True, right=True), normalizers.Replace("``", '"'),
                                             normalizers.Replace(Regex(r"\d{4,}"), "<num>")])
        t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Split("-", behavior="merged_with_next"),
                                                   pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Punctuation(behavior="isolated"),
                                                   pre_tokenizers.Digits(individual_digits=True)])
        tr = trainers.WordPieceTrainer(vocab_size=4000, limit_alphabet=500, special_tokens=["[UNK]", "[CLS]", "[SEP]"])
        t.train_from_iterator(train, tr)
        t.decoder = decoders.WordPiece()
        toks["misc_wordpiece"] = t

    try:
        if want("misc_wordpiece"):
            _sec6()
    except Exception:
        traceback.print_exc()
    def _sec7():
        # Misc BPE: NFKC, Whitespace + Digits, continuing prefix and end-of-word suffix.
        t = Tokenizer(models.BPE(unk_token="<unk>", continuing_subword_prefix="##", end_of_word_suffix="</w>"))
        t.normalizer = normalizers.NFKC()
        t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Whitespace(), pre_tokenizers.Digits(individual_digits=False)])
        tr = trainers.BpeTrainer(vocab_size=4000, limit_alphabet=400, special_tokens=["<unk>", "<cls>", "<sep>"],
                                 continuing_subword_prefix="##", end_of_word_suffix="</w>", show_progress=False)
        t.train_from_iterator(train, tr)
        t.post_processor = processors.TemplateProcessing(single="<cls> $A <sep>", pair="<cls> $A <sep> $B:1 <sep>:1",
                                                         special_tokens=[("<cls>", 1), ("<sep>", 2)])
        t.decoder = decoders.BPEDecoder(suffix="</w>")
        toks["misc_bpe"] = t

    try:
        if want("misc_bpe"):
            _sec7()
    except Exception:
        traceback.print_exc()
    def _sec8():
        xlmr, note = make_xlmr(train)
        notes["xlmr"] = note
        toks["xlmr"] = xlmr

    try:
        if want("xlmr"):
            _sec8()
    except Exception:
        traceback.print_exc()
    def _sec9():
        # Unigram with NFKD + Metaspace(prepend_scheme=first), WhitespaceSplit-free.
        t = Tokenizer(models.Unigram())
        t.normalizer = normalizers.Sequence([normalizers.NFKD(), normalizers.Lowercase()])
        t.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        tr = trainers.UnigramTrainer(vocab_size=3000, special_tokens=["<pad>", "<unk>", "<s>", "</s>"], unk_token="<unk>",
                                     show_progress=False)
        t.train_from_iterator(small_alphabet(train), tr)
        t.post_processor = processors.TemplateProcessing(single="$A </s>", pair="$A </s> $B:1 </s>:1",
                                                         special_tokens=[("</s>", t.token_to_id("</s>"))])
        t.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="first", split=True)
        toks["t5_unigram"] = t
    try:
        if want("t5_unigram"):
            _sec9()
    except Exception:
        traceback.print_exc()
    def _sec10():
        # UnicodeScripts (split where the script changes; Hiragana/Katakana count as Han, ' ' and
        # unassigned code points as Any), then Whitespace (regex \w+|[^\w\s]+), on raw text.
        t = Tokenizer(models.BPE(unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.UnicodeScripts(), pre_tokenizers.Whitespace()])
        tr = trainers.BpeTrainer(vocab_size=4000, limit_alphabet=1000, special_tokens=["<unk>", "<s>", "</s>"],
                                 show_progress=False)
        t.train_from_iterator(train, tr)
        t.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> $B:1 </s>:1",
                                                         special_tokens=[("<s>", 1), ("</s>", 2)])
        t.decoder = decoders.BPEDecoder()
        toks["scripts_bpe"] = t

    def _sec11():
        # UnicodeScripts alone: spaces stay inside the pieces; no decoder (tokens joined by ' ').
        t = Tokenizer(models.BPE(unk_token="<unk>"))
        t.pre_tokenizer = pre_tokenizers.UnicodeScripts()
        tr = trainers.BpeTrainer(vocab_size=4000, limit_alphabet=1000, special_tokens=["<unk>", "<cls>", "<sep>"],
                                 show_progress=False)
        t.train_from_iterator(train, tr)
        t.post_processor = processors.TemplateProcessing(single="<cls> $A <sep>", pair="<cls> $A <sep> $B:1 <sep>:1",
                                                         special_tokens=[("<cls>", 1), ("<sep>", 2)])
        toks["scripts_only"] = t

    for names, sec in ((("scripts_bpe",), _sec10), (("scripts_only",), _sec11)):
        try:
            if want(*names):
                sec()
        except Exception:
            traceback.print_exc()
    return toks, notes


def spm_charsmap(model_bytes):
    """Extracts NormalizerSpec.precompiled_charsmap (ModelProto field 3, spec field 2)."""
    def varint(b, i):
        v = s = 0
        while True:
            x = b[i]; i += 1
            v |= (x & 0x7F) << s; s += 7
            if x < 0x80:
                return v, i

    def fields(b):
        i = 0
        while i < len(b):
            key, i = varint(b, i)
            f, wt = key >> 3, key & 7
            if wt == 0:
                v, i = varint(b, i)
            elif wt == 1:
                v = b[i:i + 8]; i += 8
            elif wt == 5:
                v = b[i:i + 4]; i += 4
            elif wt == 2:
                n, i = varint(b, i)
                v = b[i:i + n]; i += n
            else:
                raise ValueError("wire type %d" % wt)
            yield f, v
    for f, v in fields(model_bytes):
        if f == 3:
            for f2, v2 in fields(v):
                if f2 == 2:
                    return bytes(v2)
    return None


def make_xlmr(train):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
    try:
        import sentencepiece as spm
        buf = io.BytesIO()
        spm.SentencePieceTrainer.train(sentence_iterator=iter([x for x in small_alphabet(train) if "\x00" not in x]), model_writer=buf, vocab_size=6000,
                                       model_type="unigram", normalization_rule_name="nmt_nfkc",
                                       character_coverage=0.9995, max_sentence_length=100000, minloglevel=2,
                                       hard_vocab_limit=False)
        model = buf.getvalue()
        sp = spm.SentencePieceProcessor(model_proto=model)
        charsmap = spm_charsmap(model)
        vocab = [("<s>", 0.0), ("<pad>", 0.0), ("</s>", 0.0), ("<unk>", 0.0)]
        vocab += [(sp.id_to_piece(i), sp.get_score(i)) for i in range(3, sp.get_piece_size())]
        vocab += [("<mask>", 0.0)]
        tok = Tokenizer(models.Unigram(vocab, unk_id=3))
        tok.normalizer = normalizers.Sequence([normalizers.Precompiled(charsmap), normalizers.Replace(Regex(" {2,}"), " ")])
        tok.add_special_tokens(["<s>", "<pad>", "</s>", "<unk>"])
        note = "sentencepiece unigram (nmt_nfkc), converted by hand like XLMRobertaConverter"
    except Exception as ex:  # sentencepiece missing or failing
        traceback.print_exc()
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(Regex(" {2,}"), " ")])
        tr = trainers.UnigramTrainer(vocab_size=4000, special_tokens=["<s>", "<pad>", "</s>", "<unk>"], unk_token="<unk>",
                                     show_progress=False)
        tok.train_from_iterator(small_alphabet(train), tr)
        note = "sentencepiece failed (%s): HF UnigramTrainer + NFKC (no Precompiled charsmap)" % ex
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    s, e = tok.token_to_id("<s>"), tok.token_to_id("</s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A </s>", pair="<s> $A </s> </s> $B </s>",
                                                       special_tokens=[("<s>", s), ("</s>", e)])
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always", split=True)
    from tokenizers import AddedToken
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True, normalized=False)])
    return tok, note


def encode_all(tok, corpus, idx, pairs, out_path):
    """idx: corpus indices encoded as singles; pairs: (a, b) index pairs."""
    lines = []
    tok.no_truncation()
    texts = [corpus[i] for i in idx]
    single_ids = {}
    for i, enc in zip(idx, tok.encode_batch(texts, add_special_tokens=True)):
        d = record(enc, [corpus[i]]); d["k"] = "s"; d["a"] = i
        single_ids[i] = enc.ids
        lines.append(d)
    for i, enc in zip(idx[:N_NOSPECIAL], tok.encode_batch(texts[:N_NOSPECIAL], add_special_tokens=False)):
        d = record(enc, [corpus[i]]); d["k"] = "s_nosp"; d["a"] = i
        lines.append(d)
    for (a, b) in pairs:
        enc = tok.encode(corpus[a], corpus[b])
        d = record(enc, [corpus[a], corpus[b]]); d["k"] = "p"; d["a"] = a; d["b"] = b
        lines.append(d)
    for strategy, ml in [("longest_first", 24), ("only_first", 20), ("only_second", 20)]:
        tok.enable_truncation(ml, stride=0, strategy=strategy)
        for (a, b) in pairs[:N_TRUNC]:
            try:
                enc = tok.encode(corpus[a], corpus[b])
                d = record(enc, [corpus[a], corpus[b]])
            except Exception:
                d = {"err": True}
            d["k"] = "p_trunc"; d["a"] = a; d["b"] = b; d["strategy"] = strategy; d["max"] = ml
            lines.append(d)
    tok.enable_truncation(16, stride=0, strategy="longest_first")
    for i in idx[:N_TRUNC]:
        enc = tok.encode(corpus[i])
        d = record(enc, [corpus[i]]); d["k"] = "s_trunc"; d["a"] = i; d["strategy"] = "longest_first"; d["max"] = 16
        lines.append(d)
    tok.no_truncation()
    # Decode the ids of the "s" record of the same index (with special tokens).
    for n, i in enumerate(idx[:N_DECODE]):
        ids = single_ids[i]
        d = {"k": "d", "a": i, "skip": tok.decode(ids, skip_special_tokens=True)}
        if n < N_DECODE_KEEP:
            d["keep"] = tok.decode(ids, skip_special_tokens=False)
        lines.append(d)
    with gzip.open(out_path, "wt", encoding="utf-8", compresslevel=9) as f:
        for d in lines:
            f.write(json.dumps(d, ensure_ascii=False, separators=(",", ":")) + "\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--corpus-only", action="store_true")
    ap.add_argument("--only", default="")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    corpus = build_corpus()
    for s in corpus:
        s.encode("utf-8")  # no lone surrogates
    with gzip.open(os.path.join(args.out, "corpus.jsonl.gz"), "wt", encoding="utf-8", compresslevel=9) as f:
        for s in corpus:
            f.write(json.dumps(s, ensure_ascii=False) + "\n")
    r = random.Random(SEED + 2)
    sub = subset_indices()
    pairs = [(r.choice(sub), r.choice(sub)) for _ in range(N_PAIRS)]
    print("corpus", len(corpus), "chars", sum(len(s) for s in corpus))
    if args.corpus_only:
        return
    import tokenizers
    meta = {"tokenizers_version": tokenizers.__version__, "seed": SEED, "n_corpus": N_CORPUS,
            "offsets": "byte offsets into the UTF-8 input, delta-encoded [start-prev_end, end-start]"}
    try:
        import transformers
        meta["transformers_version"] = transformers.__version__
    except ImportError:
        pass
    only = [x for x in args.only.split(",") if x]
    toks, notes = make_tokenizers(train_corpus(corpus), only)
    meta["notes"] = notes
    for name, tok in toks.items():
        if args.only and name not in args.only.split(","):
            continue
        try:
            d = os.path.join(args.out, name)
            os.makedirs(d, exist_ok=True)
            tok.save(os.path.join(d, "tokenizer.json"))
            idx = list(range(N_CORPUS)) if name in FULL else sub
            encode_all(tok, corpus, idx, pairs, os.path.join(d, "expected.jsonl.gz"))
            print(name, "ok", os.path.getsize(os.path.join(d, "expected.jsonl.gz")))
        except Exception:
            traceback.print_exc()
            meta.setdefault("failed", []).append(name)
    if only and "bert_uncased" not in only:
        with open(os.path.join(args.out, "meta_only.json"), "w") as f:
            json.dump(meta, f, indent=1)
        print(json.dumps(meta))
        return
    # vocab.txt-only BERT directory (bert_uncased's vocabulary). The parity test checks it against
    # bert_uncased's expectations: transformers 5's BertTokenizerFast ignores `vocab_file`, so it
    # cannot be used to produce expectations for this directory.
    try:
        d = os.path.join(args.out, "bert_vocab_only")
        os.makedirs(d, exist_ok=True)
        vocab = toks["bert_uncased"].get_vocab()
        with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
            for tkn, _ in sorted(vocab.items(), key=lambda kv: kv[1]):
                f.write(tkn + "\n")
        with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": True, "model_max_length": 512, "tokenizer_class": "BertTokenizer"}, f)
        print("bert_vocab_only ok")
    except Exception:
        traceback.print_exc()
        meta.setdefault("failed", []).append("bert_vocab_only")
    with open(os.path.join(args.out, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
    print(json.dumps(meta))


if __name__ == "__main__":
    main()
