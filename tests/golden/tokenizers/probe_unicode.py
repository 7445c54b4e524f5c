#!/usr/bin/env python3
"""Derives sluice's per-code-point Unicode tables from Hugging Face tokenizers itself.

HF tokenizers (0.23.2) answers Unicode questions with tables of several vintages: the
unicode_categories crate (Unicode 8: BERT punctuation, "other"/control, Mn), the
unicode-normalization-alignments crate (Unicode 9: NFC/NFD/NFKC/NFKD, StripAccents' combining
marks), Rust's std (char::is_whitespace, is_numeric, to_lowercase), the regex crate (\\w and \\s
of the Whitespace pre-tokenizer and of single_word added tokens), the UnicodeScripts
pre-tokenizer's own script table, and Oniguruma (Split / Replace regexes). Instead of
re-deriving those vintages, every code point U+0000..U+10FFFF (surrogates excluded) is passed
through the HF component inside small probe strings and the answer is recorded.

Two steps:

  probe_unicode.py probe --out DIR
      On the GPU machine (HF tokenizers installed; no internet needed). Writes
      DIR/unicode_probe.json.gz: range sets, sparse maps and the script table. Prints
      progress; results are written after every step, so a partial run still leaves data.

  probe_unicode.py emit --probe FILE --inc src/tokenizer/unicode_tables_hf.inc
      Anywhere (plain Python). Turns the probe into C++ range tables.

The probe file is also committed (tests/fixtures/tokenizers/unicode_probe.json.gz):
tests/unit/tokenizer/unicode_probe_test.cc checks sluice against it for every code point.

Probe strings:
  * pre-tokenizers that split on a character class (BertPreTokenizer, Punctuation,
    WhitespaceSplit, Whitespace, Digits, Split with a one-class regex): "x c1 x c2 x ..." with a
    separator the class never contains; each c ends up removed, isolated, or merged with its
    neighbours, read off the returned offsets.
  * normalizers: "c1 SEP c2 SEP ..." with a separator the normalizer never touches and that
    blocks composition and reordering; the output is split on SEP again.
  * canonical ordering: c + U+0334 (ccc 1) and U+0345 (ccc 240) + c find the non-starters; all
    ordered pairs of non-starters give their relative order (ranks), which is all that canonical
    ordering and composition blocking use.
  * UnicodeScripts: all code points in order give runs of one script; "あ c a" and "a c あ" find
    the characters of script Any (no split, no update of the last script); representatives of
    the runs are compared pairwise ("r g", split iff the scripts differ) to number the scripts.
"""
import argparse
import gzip
import json
import os
import sys
import time
import traceback
import unicodedata

MAX_CP = 0x10FFFF
CHUNK = 1 << 15


def all_cps(max_cp):
    return [c for c in range(max_cp + 1) if not (0xD800 <= c <= 0xDFFF)]


def to_ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] + 1 == c:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def from_ranges(rs):
    s = set()
    for lo, hi in rs:
        s.update(range(lo, hi + 1))
    return s


class Prober:
    def __init__(self, out_dir, max_cp, budget_s):
        import tokenizers
        from tokenizers import Regex, normalizers, pre_tokenizers
        self.tk, self.Regex, self.N, self.P = tokenizers, Regex, normalizers, pre_tokenizers
        self.out_path = os.path.join(out_dir, "unicode_probe.json.gz")
        self.cps = all_cps(max_cp)
        self.cpset = set(self.cps)
        self.t0 = time.time()
        self.budget = budget_s
        self.data = {"meta": {"tokenizers_version": tokenizers.__version__,
                              "python": sys.version.split()[0],
                              "python_unicodedata": unicodedata.unidata_version,
                              "max_cp": max_cp, "n_cps": len(self.cps),
                              "steps": {}, "errors": []},
                     "sets": {}, "maps": {}}
        r = pre_tokenizers.WhitespaceSplit().pre_tokenize_str("\u00e9 x")
        self.byte_offsets = tuple(r[1][1]) == (3, 4)
        self.data["meta"]["offsets"] = "byte" if self.byte_offsets else "char"
        print("offsets are", self.data["meta"]["offsets"], r, flush=True)

    # ---- helpers ----
    def offs(self, s, pieces):
        o = [tuple(p[1]) for p in pieces]
        if not self.byte_offsets:
            return o
        b2c, b = {}, 0
        for i, ch in enumerate(s):
            b2c[b] = i
            b += len(ch.encode("utf-8"))
        b2c[b] = len(s)
        return [(b2c[x], b2c[y]) for x, y in o]

    def split_classes(self, pretok, sep, cps=None):
        """{cp: 'r' removed | 'i' isolated | 'm' merged} for "sep c sep c ... sep"."""
        cps = self.cps if cps is None else cps
        res = {}
        for i in range(0, len(cps), CHUNK):
            chunk = cps[i:i + CHUNK]
            s = sep + sep.join(map(chr, chunk)) + sep
            cover = bytearray(len(s))
            iso = bytearray(len(s))
            for st, en in self.offs(s, pretok.pre_tokenize_str(s)):
                cover[st:en] = b"\x01" * (en - st)
                if en - st == 1:
                    iso[st] = 1
            for k, c in enumerate(chunk):
                p = 2 * k + 1
                res[c] = "i" if iso[p] else ("m" if cover[p] else "r")
        return res

    def norm_map(self, norm, sep, cps=None):
        """{cp: output} where normalize_str(chr(cp)) != chr(cp), via "c SEP c SEP ..."."""
        cps = self.cps if cps is None else cps
        out = {}
        for i in range(0, len(cps), CHUNK):
            chunk = [c for c in cps[i:i + CHUNK] if chr(c) != sep]
            parts = norm.normalize_str(sep.join(map(chr, chunk))).split(sep)
            if len(parts) != len(chunk):
                print("  separator lost, per-char fallback at", hex(chunk[0]), flush=True)
                parts = [norm.normalize_str(chr(c)) for c in chunk]
            for c, p in zip(chunk, parts):
                if p != chr(c):
                    out[c] = p
        if ord(sep) in set(cps):
            p = norm.normalize_str(sep)
            if p != sep:
                out[ord(sep)] = p
        return out

    def norm_strings(self, norm, strings, sep="\x01"):
        parts = norm.normalize_str(sep.join(strings)).split(sep)
        if len(parts) != len(strings):
            parts = [norm.normalize_str(x) for x in strings]
        return parts

    def save(self):
        tmp = self.out_path + ".tmp"
        with gzip.open(tmp, "wt", encoding="utf-8", compresslevel=9) as f:
            json.dump(self.data, f, ensure_ascii=True, separators=(",", ":"), sort_keys=True)
        os.replace(tmp, self.out_path)

    def step(self, name, fn, optional=False):
        el = time.time() - self.t0
        if optional and el > self.budget:
            print("SKIP %s (%.0fs elapsed)" % (name, el), flush=True)
            self.data["meta"]["errors"].append("skipped " + name)
            return
        t = time.time()
        try:
            fn()
            self.data["meta"]["steps"][name] = round(time.time() - t, 2)
            print("%-14s %6.2fs (total %.1fs)" % (name, time.time() - t, time.time() - self.t0),
                  flush=True)
        except Exception:
            traceback.print_exc()
            self.data["meta"]["errors"].append(name + ": " + traceback.format_exc()[-2000:])
        self.save()

    def put_set(self, name, cps):
        self.data["sets"][name] = to_ranges(cps)

    def put_map(self, name, m):
        self.data["maps"][name] = [[c, m[c]] for c in sorted(m)]

    # ---- steps ----
    def pretokenizers(self):
        P = self.P
        bert = self.split_classes(P.BertPreTokenizer(), "x")
        self.put_set("bert_pre_ws", [c for c, v in bert.items() if v == "r"])
        self.put_set("bert_pre_punct", [c for c, v in bert.items() if v == "i"])
        punct = self.split_classes(P.Punctuation(behavior="isolated"), "x")
        self.put_set("punctuation", [c for c, v in punct.items() if v == "i"])
        wss = self.split_classes(P.WhitespaceSplit(), "x")
        self.put_set("whitespace_split", [c for c, v in wss.items() if v == "r"])
        ws = self.split_classes(P.Whitespace(), "x")
        self.put_set("whitespace_pre_word", [c for c, v in ws.items() if v == "m"])
        self.put_set("whitespace_pre_space", [c for c, v in ws.items() if v == "r"])
        self.put_set("whitespace_pre_other", [c for c, v in ws.items() if v == "i"])
        dig = self.split_classes(P.Digits(individual_digits=True), "x")
        self.put_set("digits", [c for c, v in dig.items() if v == "i"])

    def bert_normalizer(self):
        N = self.N
        clean = self.norm_map(N.BertNormalizer(clean_text=True, handle_chinese_chars=False,
                                               strip_accents=False, lowercase=False), "x")
        self.put_set("clean_removed", [c for c, v in clean.items() if v == ""])
        self.put_set("clean_space", [c for c, v in clean.items() if v == " "] + [0x20])
        other = {c: v for c, v in clean.items() if v not in ("", " ")}
        if other:
            self.put_map("clean_other", other)
        chin = self.norm_map(N.BertNormalizer(clean_text=False, handle_chinese_chars=True,
                                              strip_accents=False, lowercase=False), "\x01")
        self.put_set("chinese", [c for c, v in chin.items() if v == " " + chr(c) + " "])
        other = {c: v for c, v in chin.items() if v != " " + chr(c) + " "}
        if other:
            self.put_map("chinese_other", other)
        strip = self.norm_map(N.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                               strip_accents=True, lowercase=False), "\x01")
        self.put_map("bert_strip_accents", strip)
        lower = self.norm_map(N.BertNormalizer(clean_text=False, handle_chinese_chars=False,
                                               strip_accents=False, lowercase=True), "\x01")
        self.put_map("bert_lowercase", lower)

    def simple_normalizers(self):
        N = self.N
        self.put_map("lowercase", self.norm_map(N.Lowercase(), "\x01"))
        sa = self.norm_map(N.StripAccents(), "\x01")
        self.put_set("strip_accents_removed", [c for c, v in sa.items() if v == ""])
        other = {c: v for c, v in sa.items() if v != ""}
        if other:
            self.put_map("strip_accents_other", other)

    def unicode_normalizers(self):
        N = self.N
        for name, n in (("nfd", N.NFD()), ("nfkd", N.NFKD()), ("nfc", N.NFC()),
                        ("nfkc", N.NFKC())):
            self.put_map(name, self.norm_map(n, "\x01"))

    def canonical_order(self):
        N = self.N
        nfd = dict((c, v) for c, v in self.data["maps"]["nfd"])
        nfd_n = N.NFD()
        cand = [c for c in self.cps if c != 1 and c not in nfd]
        a = self.norm_strings(nfd_n, [chr(c) + "\u0334" for c in cand])
        b = self.norm_strings(nfd_n, ["\u0345" + chr(c) for c in cand])
        ns = [c for c, x, y in zip(cand, a, b) if x != chr(c) + "\u0334" or y != "\u0345" + chr(c)]
        print("  non-starters:", len(ns), flush=True)
        rank = {}
        for m in ns:
            parts = self.norm_strings(nfd_n, [chr(m) + chr(k) for k in ns])
            rank[m] = sum(1 for k, p in zip(ns, parts) if k != m and p == chr(k) + chr(m))
        self.data["ccc_rank"] = [[c, rank[c]] for c in ns]

    def decomposed_sequences(self):
        """HF NFD/NFC of Python's (newer) canonical decompositions and NFKC of its compatibility
        decompositions: checks reordering and composition with marks HF does not know."""
        N = self.N
        seq, seqk = [], []
        for c in self.cps:
            if 0xAC00 <= c <= 0xD7A3 and (c - 0xAC00) % 37:
                continue
            x = unicodedata.normalize("NFD", chr(c))
            if x != chr(c) and "\x01" not in x:
                seq.append((c, x))
            y = unicodedata.normalize("NFKD", chr(c))
            if y != x and "\x01" not in y:
                seqk.append((c, y))
        d = self.norm_strings(N.NFD(), [x for _, x in seq])
        cc = self.norm_strings(N.NFC(), [x for _, x in seq])
        kc = self.norm_strings(N.NFKC(), [y for _, y in seqk])
        self.data["seq_nfd_nfc"] = [[c, x, p, q] for (c, x), p, q in zip(seq, d, cc)]
        self.data["seq_nfkc"] = [[c, y, p] for (c, y), p in zip(seqk, kc)]

    def scripts(self):
        P = self.P
        us = P.UnicodeScripts()

        def starts(s):
            return set(st for st, _ in self.offs(s, us.pre_tokenize_str(s)))

        HAN, LAT = "\u3042", "a"
        any_cps = set()
        for i in range(0, len(self.cps), CHUNK):
            chunk = self.cps[i:i + CHUNK]
            s1 = starts("".join(HAN + chr(c) + LAT for c in chunk))
            s2 = starts("".join(LAT + chr(c) + HAN for c in chunk))
            for k, c in enumerate(chunk):
                if (3 * k + 1) not in s1 and (3 * k + 1) not in s2:
                    any_cps.add(c)
        self.put_set("script_any", any_cps)
        # Runs of one script over all code points in order.
        reps = []  # (first cp of the run, last cp of the run, representative)
        for i in range(0, len(self.cps), CHUNK):
            chunk = self.cps[i:i + CHUNK]
            s = "".join(map(chr, chunk))
            bounds = sorted(starts(s) | {0}) + [len(chunk)]
            for st, en in zip(bounds, bounds[1:]):
                if st >= en:
                    continue
                rep = next((c for c in chunk[st:en] if c not in any_cps), None)
                reps.append((chunk[st], chunk[en - 1], rep))
        combo = P.Sequence([P.Split("\uffff", behavior="removed"), us])
        groups = []  # representative cp of each script
        run_group = []
        for lo, hi, rep in reps:
            if rep is None:
                run_group.append(-1)
                continue
            g = None
            if groups:
                s = "\uffff".join(chr(rep) + chr(x) for x in groups)
                same = [st // 3 for st, en in self.offs(s, combo.pre_tokenize_str(s)) if en - st == 2]
                if len(same) > 1:
                    raise RuntimeError("run of %x matches several scripts %s" % (rep, same))
                g = same[0] if same else None
            if g is None:
                groups.append(rep)
                g = len(groups) - 1
            run_group.append(g)
        table = []  # [lo, hi, script] with script 0 = Any, k + 1 = group k
        for (lo, hi, _), g in zip(reps, run_group):
            for c in range(lo, hi + 1):
                if 0xD800 <= c <= 0xDFFF:
                    continue
                sc = 0 if (c in any_cps or g < 0) else g + 1
                if table and table[-1][2] == sc and table[-1][1] + 1 == c:
                    table[-1][1] = c
                else:
                    table.append([c, c, sc])
        self.data["scripts"] = table
        self.data["script_reps"] = groups
        print("  scripts:", len(groups), "ranges:", len(table), "runs:", len(reps), flush=True)

    def onig_classes(self):
        P, R = self.P, self.Regex
        classes = {"L": r"\p{L}", "N": r"\p{N}", "s": r"\s", "w": r"\w", "d": r"\d", "M": r"\p{M}",
                   "P": r"\p{P}", "S": r"\p{S}", "Lu": r"\p{Lu}", "Ll": r"\p{Ll}", "Lt": r"\p{Lt}",
                   "Lm": r"\p{Lm}", "Lo": r"\p{Lo}", "Nd": r"\p{Nd}", "Z": r"\p{Z}", "C": r"\p{C}"}
        for name, pat in classes.items():
            if time.time() - self.t0 > self.budget + 40:
                self.data["meta"]["errors"].append("skipped onig " + name)
                continue
            try:
                cl = self.split_classes(P.Split(R(pat), behavior="removed"), "\x01")
                self.put_set("onig_" + name, [c for c, v in cl.items() if v == "r"])
            except Exception:
                traceback.print_exc()
                self.data["meta"]["errors"].append("onig " + name)


def probe(args):
    os.makedirs(args.out, exist_ok=True)
    p = Prober(args.out, args.max_cp, args.budget)
    p.step("pretokenizers", p.pretokenizers)
    p.step("bert", p.bert_normalizer)
    p.step("normalizers", p.simple_normalizers)
    p.step("nfx", p.unicode_normalizers)
    p.step("scripts", p.scripts)
    p.step("ccc", p.canonical_order, optional=True)
    p.step("sequences", p.decomposed_sequences, optional=True)
    p.step("onig", p.onig_classes, optional=True)
    print("done in %.1fs; errors: %s" % (time.time() - p.t0, p.data["meta"]["errors"]), flush=True)


# ---------------------------------------------------------------------------------------------
# emit: probe -> C++ tables


def emit(args):
    with gzip.open(args.probe, "rt", encoding="utf-8") as f:
        d = json.load(f)
    meta, sets, maps = d["meta"], d["sets"], d["maps"]
    if meta.get("errors"):
        sys.exit("probe has errors: %s" % meta["errors"])
    maxcp = meta["max_cp"]
    S = {k: from_ranges(v) for k, v in sets.items()}
    M = {k: dict((c, v) for c, v in m) for k, m in maps.items()}
    notes = []

    def check(cond, msg):
        if not cond:
            notes.append(msg)
            print("NOTE:", msg)

    # Consistency of sets that HF computes with the same function in different places.
    check(S["bert_pre_ws"] == S["whitespace_split"], "BertPreTokenizer vs WhitespaceSplit whitespace")
    check(S["bert_pre_punct"] == S["punctuation"], "BertPreTokenizer vs Punctuation punctuation")
    check(S["clean_space"] == S["whitespace_split"], "clean_text whitespace vs char::is_whitespace")
    check(S["whitespace_pre_space"] == S["whitespace_split"], "regex \\s vs char::is_whitespace")
    if "clean_other" in M or "chinese_other" in M or "strip_accents_other" in M:
        sys.exit("unexpected normalizer outputs: %s" % [k for k in M if k.endswith("_other")])
    # BERT strip_accents = NFD, then drop Mn (unicode_categories). Mn of the code points that
    # NFD leaves alone is read directly; check the decomposed ones agree with it.
    nfd = M["nfd"]
    mn = {c for c, v in M["bert_strip_accents"].items() if v == "" and c not in nfd}
    for c, v in M["bert_strip_accents"].items():
        if c in nfd:
            want = "".join(ch for ch in nfd[c] if ord(ch) not in mn)
            check(v == want, "strip_accents of U+%04X: %r vs %r" % (c, v, want))
    # Lowercase: BertNormalizer's lowercase is NormalizedString::lowercase as Lowercase's.
    check(M["bert_lowercase"] == M["lowercase"], "Bert lowercase vs Lowercase")
    multi = {c: v for c, v in M["lowercase"].items() if len(v) != 1}
    # Canonical decompositions: which code points HF decomposes, canonically or compatibly;
    # which are non-starters and in which relative order.
    canon = set(M["nfd"])
    compat = set(M["nfkd"])
    check(canon <= compat, "canonical decomposables not compat decomposable")
    ranks = dict((c, r) for c, r in d.get("ccc_rank", []))
    scripts = d["scripts"]
    reps = d["script_reps"]

    def name_of(cp):
        try:
            return unicodedata.name(chr(cp))
        except ValueError:
            return "U+%04X" % cp

    def rtable(name, cps, comment):
        rs = to_ranges(cps)
        if not rs:
            sys.exit("empty table " + name)
        lines = ["// %s (%d code points, %d ranges)" % (comment, len(cps), len(rs)),
                 "constexpr CpRange %s[] = {" % name]
        row = []
        for lo, hi in rs:
            row.append("{0x%X, 0x%X}," % (lo, hi))
            if len(row) == 6:
                lines.append("    " + " ".join(row))
                row = []
        if row:
            lines.append("    " + " ".join(row))
        lines.append("};")
        return "\n".join(lines)

    out = []
    out.append("// Generated by tests/golden/tokenizers/probe_unicode.py emit from a probe of Hugging Face\n"
               "// tokenizers %s (python %s); do not edit. Regenerate:\n"
               "//   probe_unicode.py probe --out DIR   (GPU machine, HF tokenizers installed)\n"
               "//   probe_unicode.py emit --probe DIR/unicode_probe.json.gz"
               " --inc src/tokenizer/unicode_tables_hf.inc\n"
               "// Each table is what HF itself answered for every code point U+0000..U+%04X.\n"
               "// clang-format off\n" % (meta["tokenizers_version"], meta["python"], maxcp))
    out.append(rtable("kHfWhitespace", S["whitespace_split"],
                      "char::is_whitespace (BertPreTokenizer, WhitespaceSplit, Strip, clean_text, "
                      "regex \\s of added tokens' lstrip/rstrip)"))
    out.append(rtable("kHfPunctuation", S["bert_pre_punct"],
                      "is_bert_punc: ASCII punctuation or unicode_categories P* (BertPreTokenizer, "
                      "Punctuation)"))
    out.append(rtable("kHfBertRemoved", S["clean_removed"],
                      "BertNormalizer clean_text removes: NUL, U+FFFD, unicode_categories "
                      "is_other() except \\t \\n \\r"))
    out.append(rtable("kHfBertMn", mn, "BertNormalizer strip_accents drops after NFD: "
                      "unicode_categories Mn (code points NFD leaves alone)"))
    out.append(rtable("kHfCombiningMark", S["strip_accents_removed"],
                      "StripAccents drops: unicode-normalization-alignments is_combining_mark"))
    out.append(rtable("kHfNumeric", S["digits"], "char::is_numeric (Digits)"))
    out.append(rtable("kHfWordChar", S["whitespace_pre_word"],
                      "regex crate \\w (Whitespace pre-tokenizer, single_word added tokens)"))
    out.append(rtable("kHfChinese", S["chinese"], "BertNormalizer handle_chinese_chars"))
    # Oniguruma's classes (Split/Replace regexes): sluice's PCRE2 gets the code points its own
    # (older) tables miss added to each class (unicode.cc computes the difference at start-up).
    onig = [("L", "L"), ("Lu", "Lu"), ("Ll", "Ll"), ("Lt", "Lt"), ("Lm", "Lm"), ("Lo", "Lo"),
            ("M", "M"), ("N", "N"), ("Nd", "Nd"), ("P", "P"), ("S", "S"), ("Z", "Z"), ("w", "Word")]
    check(S["onig_d"] == S["onig_Nd"], "Oniguruma \\d is not \\p{Nd}")
    for key, name in onig:
        out.append(rtable("kOnig" + name, S["onig_" + key], "Oniguruma \\%s" % (
            "w" if key == "w" else "p{%s}" % key)))
    out.append(rtable("kHfCanonicalDecomposable", canon, "NFD changes the code point"))
    out.append(rtable("kHfCompatDecomposable", compat, "NFKD changes the code point"))
    out.append(rtable("kHfNonStarter", set(ranks), "non-starters of HF's canonical ordering "
                      "(combining class > 0)"))
    # Lowercase: (cp, lower) for every single-code-point change; multi-code-point ones apart.
    lines = ["// char::to_lowercase, single code point results (%d)" % (len(M["lowercase"]) - len(multi)),
             "constexpr CpMap kHfLower[] = {"]
    row = []
    for c in sorted(M["lowercase"]):
        v = M["lowercase"][c]
        if c in multi:
            continue
        row.append("{0x%X, 0x%X}," % (c, ord(v)))
        if len(row) == 6:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    out.append("\n".join(lines))
    lines = ["// char::to_lowercase with several code points",
             "constexpr CpMulti kHfLowerMulti[] = {"]
    for c in sorted(multi):
        cs = [ord(ch) for ch in multi[c]]
        if len(cs) > 3:
            sys.exit("lowercase of U+%04X has %d code points" % (c, len(cs)))
        cs += [0] * (3 - len(cs))
        lines.append("    {0x%X, {0x%X, 0x%X, 0x%X}}," % (c, *cs))
    lines.append("};")
    out.append("\n".join(lines))
    # Combining-class ranks of the non-starters (order-preserving; HF only compares them).
    lines = ["// Rank of each non-starter's combining class among HF's (ranks compare like the classes)",
             "constexpr CpMap kHfCccRank[] = {"]
    row = []
    for c in sorted(ranks):
        row.append("{0x%X, %d}," % (c, ranks[c] + 1))
        if len(row) == 6:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    out.append("\n".join(lines))
    # Scripts.
    lines = ["// UnicodeScripts fixed_script: (first code point, script) runs; script 0 = Any,",
             "// Hiragana/Katakana/U+30FC are Han, ' ' is Any. Scripts are numbered; representative:"]
    for k, r in enumerate(reps):
        lines.append("//   %3d  U+%04X %s" % (k + 1, r, name_of(r)))
    lines.append("constexpr ScriptRun kHfScripts[] = {")
    row = []
    for lo, hi, sc in scripts:
        row.append("{0x%X, %d}," % (lo, sc))
        if len(row) == 8:
            lines.append("    " + " ".join(row))
            row = []
    if row:
        lines.append("    " + " ".join(row))
    lines.append("};")
    out.append("\n".join(lines))
    out.append("// clang-format on\n")
    with open(args.inc, "w", encoding="utf-8") as f:
        f.write("\n\n".join(out))
    print("wrote", args.inc, "notes:", len(notes))


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--out", required=True)
    p.add_argument("--max-cp", type=lambda s: int(s, 0), default=MAX_CP)
    p.add_argument("--budget", type=float, default=120.0,
                   help="seconds after which optional steps are skipped")
    e = sub.add_parser("emit")
    e.add_argument("--probe", required=True)
    e.add_argument("--inc", required=True)
    args = ap.parse_args()
    probe(args) if args.cmd == "probe" else emit(args)


if __name__ == "__main__":
    main()
