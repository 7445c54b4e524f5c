#!/usr/bin/env python3
"""The C API gives the CLI's results bit for bit: for every golden fixture model of a pooling
task (score, embed, classify) and for the embedded demo reranker (text pairs, token-id pairs
with the pair template, truncation), `sluice score|embed|classify` writes its JSONL output,
and one client of the in-process library runs the same inputs:

  --client c       tests/capi/capi_parity_client.c (the C API directly)
  --client python  bindings/python/sluice.py (ctypes)
  --client java    bindings/java (JNI), tests/capi/ParityClient.java

With --device cuda (a CUDA build on the GPU machine) both sides run on the GPU.
Every float must have the CLI's exact float32 bits (the CLI prints %.9g, which reads back to
the same float32); labels must be the same. Tokenize: the ids, type ids and offsets of
`sluice tokenize` for texts and text pairs, with and without special tokens. The C and Java clients read a job file written
here and print hexadecimal float bits; the Python client is this process.
"""

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile

THREADS = 2
DEVICE = "cpu"

DEMO_PAIRS = [
    ("what do bees make?", "Bees make honey in the hive."),
    ("what do bees make?", "The river runs past the old mill."),
    ("where is the mill?", "The old mill stands by the river."),
    ("where is the mill?", ""),
    ("Ünïcode quëry ✓", "émigré café naïve — 東京 👋"),
    ("how long?", " ".join(["a very long document about bees and rivers"] * 80)),
]


TOKENIZE = [("How do salmon swim?", None, True), ("How do salmon swim?", "Salmon swim.", True),
            ("How do salmon swim?", "Salmon swim.", False), ("Ünïcode ✓ 東京 👋", None, True),
            ("", None, True), ("  spaced   out  ", "", True)]


def cli_tokenize(sluice, model, text, pair, special):
    """(ids, type ids, offsets) from `sluice tokenize`'s table."""
    cmd = [sluice, "tokenize", "--model", model]
    if pair is not None:
        cmd += ["--pair", pair]
    if not special:
        cmd.append("--no-special")
    r = subprocess.run(cmd + ["--", text], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"CLI failed: {' '.join(cmd)}\n{r.stderr}")
    ids, types, offs = [], [], []
    for line in r.stdout.splitlines()[2:]:
        p = line.split()
        if not p or p[0] == "ids:":
            break
        ids.append(int(p[1]))
        types.append(int(p[2]))
        a, b = p[4].strip("()").split(",")
        offs += [int(a), int(b)]
    return ids, types, offs


def f32_bits(x):
    if x is None:  # the CLI writes a non-finite float as null
        return None
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def cli_expected(sluice, model, task, lines, extra):
    """Runs `sluice <task>`; returns per input (rows, values bits, label, logits bits)."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(json.dumps(line, ensure_ascii=False) + "\n")
        cmd = [sluice, task, "--model", model, "--input", inp, "--output", out,
               "--threads", str(THREADS), "--device", DEVICE] + extra
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise SystemExit(f"CLI failed: {' '.join(cmd)}\n{r.stderr}")
        res = []
        with open(out, encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                if task == "score":
                    res.append((1, [f32_bits(o["score"])], None, None))
                elif task == "embed":
                    if "embedding" in o:
                        res.append((1, [f32_bits(v) for v in o["embedding"]], None, None))
                    else:
                        rows = o["embeddings"]
                        res.append((len(rows), [f32_bits(v) for r_ in rows for v in r_], None,
                                    None))
                else:
                    res.append((1, [f32_bits(v) for v in o["probs"]],
                                (o["label"], o.get("labels", [])),
                                [f32_bits(v) for v in o["logits"]]))
        return res


class Case:
    """One model, task and input list; inputs are ("ids", ids, types), ("text", a) or
    ("pair", a, b); jsonl holds the CLI's input lines for the same inputs."""

    def __init__(self, name, model, task, inputs, jsonl, truncate=False, normalize=None,
                 dimensions=0):
        self.name, self.model, self.task = name, model, task
        self.inputs, self.jsonl = inputs, jsonl
        self.truncate, self.normalize, self.dimensions = truncate, normalize, dimensions

    def cli_flags(self):
        f = ["--truncate"] if self.truncate else []
        if self.normalize is not None:
            f += ["--normalize", "on" if self.normalize else "off"]
        if self.dimensions:
            f += ["--dimensions", str(self.dimensions)]
        return f


def fixture_cases(fixtures):
    cases = []
    gdir = os.path.join(fixtures, "golden")
    for fn in sorted(os.listdir(gdir)):
        g = json.load(open(os.path.join(gdir, fn)))
        task = g.get("task")
        if task not in ("score", "embed", "classify"):
            continue
        model = os.path.join(fixtures, "models", g.get("model", fn[:-5]))
        inputs, jsonl = [], []
        for x in g["inputs"]:
            ids, types = x["ids"], x.get("type_ids")
            inputs.append(("ids", ids, types))
            line = {"input_ids": ids}
            if types is not None:
                line["token_type_ids"] = types
            jsonl.append(line)
        cases.append(Case(fn[:-5], model, task, inputs, jsonl))
        if task == "embed" and fn.startswith("bert_st_mean"):
            cases.append(Case(fn[:-5] + "/normalize-off", model, task, inputs, jsonl,
                              normalize=False))
        if task == "embed" and g.get("dimensions"):  # a Matryoshka model
            cases.append(Case(fn[:-5] + "/dimensions", model, task, inputs, jsonl,
                              dimensions=g["dimensions"]))
    return cases


def demo_cases(demo, examples):
    cases = []
    pairs = DEMO_PAIRS
    cases.append(Case("demo/text-pairs", demo, "score",
                      [("pair", q, d) for q, d in pairs],
                      [{"query": q, "document": d} for q, d in pairs], truncate=True))
    cases.append(Case("demo/text-pairs-short", demo, "score",
                      [("pair", q, d) for q, d in pairs[:5]],
                      [{"query": q, "document": d} for q, d in pairs[:5]]))
    cases.append(Case("demo/texts", demo, "score", [("text", q + " " + d) for q, d in pairs[:5]],
                      [{"text": q + " " + d} for q, d in pairs[:5]]))
    # Token-id pairs with the CLI's prefix/separator/suffix header, assembled here.
    path = os.path.join(examples, "demo_pairs.jsonl")
    tmpl = {"prefix": [], "separator": [], "suffix": []}
    inputs, jsonl = [], []
    for line in open(path):
        o = json.loads(line)
        if "q" not in o:
            tmpl = {k: o.get(k, []) for k in ("prefix", "separator", "suffix")}
            jsonl.append(o)
            continue
        first = tmpl["prefix"] + o["q"] + tmpl["separator"]
        second = o["d"] + tmpl["suffix"]
        inputs.append(("ids", first + second, [0] * len(first) + [1] * len(second)))
        jsonl.append(o)
    cases.append(Case("demo/id-pairs", demo, "score", inputs, jsonl))
    return cases


def write_job(cases, path, demo):
    """The job file of the C and Java clients: one section per case, then a tokenize section
    of `tok TEXT-HEX PAIR-HEX|~ 0|1` lines (~: no pair; 1: with special tokens)."""
    with open(path, "w") as f:
        for c in cases:
            f.write(f"model {c.model}\ntask {c.task}\nthreads {THREADS}\ndevice {DEVICE}\n")
            f.write(f"truncate {1 if c.truncate else 0}\n")
            f.write(f"normalize {-1 if c.normalize is None else int(c.normalize)}\n")
            f.write(f"dimensions {c.dimensions}\n")
            for x in c.inputs:
                if x[0] == "ids":
                    types = x[2] if x[2] is not None else []
                    f.write("ids %d %s %d %s\n" % (len(x[1]), " ".join(map(str, x[1])),
                                                   len(types), " ".join(map(str, types))))
                elif x[0] == "text":
                    f.write("text %s\n" % x[1].encode().hex())
                else:
                    f.write("pair %s %s\n" % (x[1].encode().hex() or "-",
                                              x[2].encode().hex() or "-"))
            f.write("run\n")
        f.write(f"model {demo}\ntask tokenize\n")
        for text, pair, special in TOKENIZE:
            f.write("tok %s %s %d\n" % (text.encode().hex() or "-",
                                       "~" if pair is None else (pair.encode().hex() or "-"),
                                       int(special)))
        f.write("run\n")


def parse_tokens(text):
    """Lines `K i n ids... types... offsets...` -> {i: (ids, types, offsets)}."""
    out = {}
    for line in text.splitlines():
        p = line.split()
        if p and p[0] == "K":
            i, n = int(p[1]), int(p[2])
            v = list(map(int, p[3:]))
            out[i] = (v[:n], v[n:2 * n], v[2 * n:4 * n])
    return out


def parse_client_output(text, cases):
    """Lines `V job i rows dim hex...`, `L job i label-hex hex...` (best label, logits) and
    `T job i label-hex...` (labels over their thresholds) -> per case, per input."""
    got = [[None] * len(c.inputs) for c in cases]
    labels = [[None] * len(c.inputs) for c in cases]
    for line in text.splitlines():
        p = line.split()
        if not p:
            continue
        if p[0] == "V":
            j, i, rows = int(p[1]), int(p[2]), int(p[3])
            got[j][i] = (rows, [int(h, 16) for h in p[5:]])
        elif p[0] == "L":
            j, i = int(p[1]), int(p[2])
            labels[j][i] = ((bytes.fromhex(p[3]).decode() if p[3] != "-" else "", []),
                            [int(h, 16) for h in p[4:]])
        elif p[0] == "T":
            j, i = int(p[1]), int(p[2])
            labels[j][i][0][1].extend(bytes.fromhex(h).decode() for h in p[3:])
    return got, labels


def python_client(cases, lib, binding):
    sys.path.insert(0, binding)
    import sluice  # noqa: E402  (bindings/python/sluice.py)
    sluice.load_library(lib)

    def bits(v):
        return struct.unpack("<I", struct.pack("<f", v))[0]

    got, labels = [], []
    for c in cases:
        m = sluice.Model(c.model, task=c.task, threads=THREADS, device=DEVICE)
        ins = []
        for x in c.inputs:
            if x[0] == "ids":
                ins.append({"ids": x[1], "type_ids": x[2]} if x[2] is not None else x[1])
            elif x[0] == "text":
                ins.append(x[1])
            else:
                ins.append((x[1], x[2]))
        g, lab = [], []
        if c.task == "score":
            if all(x[0] == "pair" for x in c.inputs) and not c.truncate:
                s = m.score_pairs([x[1] for x in c.inputs], [x[2] for x in c.inputs])
            else:
                s = m.score(ins, truncate=c.truncate)
            g = [(1, [bits(v)]) for v in s]
            lab = [None] * len(s)
        elif c.task == "embed":
            for e in m.embed(ins, normalize=c.normalize, dimensions=c.dimensions,
                             truncate=c.truncate):
                if m.multi_vector:
                    g.append((len(e), [bits(v) for r in e for v in r]))
                else:
                    g.append((1, [bits(v) for v in e]))
                lab.append(None)
        else:
            for r in m.classify(ins, truncate=c.truncate):
                g.append((1, [bits(v) for v in r["probs"]]))
                lab.append(((r["label"], r["labels"]), [bits(v) for v in r["logits"]]))
        m.close()
        got.append(g)
        labels.append(lab)
    return got, labels


def python_tokens(demo):
    import sluice  # noqa: E402
    out = {}
    with sluice.Model(demo, threads=THREADS) as m:
        for i, (text, pair, special) in enumerate(TOKENIZE):
            t = m.tokenize(text, pair, special)
            out[i] = (t["ids"], t["type_ids"], [x for o in t["offsets"] for x in o])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sluice", required=True)
    ap.add_argument("--fixtures", required=True)
    ap.add_argument("--demo", required=True)
    ap.add_argument("--client", choices=["c", "python", "java"], required=True)
    ap.add_argument("--client-bin")
    ap.add_argument("--lib")
    ap.add_argument("--binding")
    ap.add_argument("--java")
    ap.add_argument("--classpath")
    ap.add_argument("--jni-dir")
    ap.add_argument("--device", default="cpu", help="cpu or cuda[:N], for both sides")
    a = ap.parse_args()
    global DEVICE
    DEVICE = a.device
    examples = os.path.join(os.path.dirname(os.path.abspath(a.demo)), "..", "examples")
    cases = fixture_cases(a.fixtures) + demo_cases(a.demo, examples)
    tasks = sorted({c.task for c in cases})
    assert tasks == ["classify", "embed", "score"], tasks
    if a.client == "python":
        got, labels = python_client(cases, a.lib, a.binding)
        tokens = python_tokens(a.demo)
    else:
        with tempfile.TemporaryDirectory() as d:
            job = os.path.join(d, "job.txt")
            write_job(cases, job, a.demo)
            if a.client == "c":
                cmd = [a.client_bin, job]
            else:
                cmd = [a.java, "-Djava.library.path=" + a.jni_dir, "-cp", a.classpath,
                       "ParityClient", job]
            r = subprocess.run(cmd, capture_output=True, text=True)
            if r.returncode != 0:
                raise SystemExit(f"client failed ({r.returncode}): {' '.join(cmd)}\n"
                                 f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
            got, labels = parse_client_output(r.stdout, cases)
            tokens = parse_tokens(r.stdout)
    failures = 0
    values = 0
    for j, c in enumerate(cases):
        exp = cli_expected(a.sluice, c.model, c.task, c.jsonl, c.cli_flags())
        if len(exp) != len(c.inputs):
            raise SystemExit(f"{c.name}: CLI gave {len(exp)} outputs for {len(c.inputs)} inputs")
        for i, (rows, vals, label, logits) in enumerate(exp):
            g = got[j][i]
            ok = g is not None and g[0] == rows and len(g[1]) == len(vals)
            if ok:
                for e, v in zip(vals, g[1]):
                    if e is None:
                        ok = ok and (v & 0x7F800000) == 0x7F800000  # non-finite
                    else:
                        ok = ok and e == v
            if ok and c.task == "classify":
                gl = labels[j][i]
                ok = gl is not None and gl[0][0] == label[0] and gl[1] == logits
                ok = ok and list(gl[0][1]) == list(label[1])
            values += len(vals)
            if not ok:
                failures += 1
                if failures <= 10:
                    print(f"MISMATCH {c.name} input {i}: CLI rows={rows} {vals[:4]}... label="
                          f"{label}; client {g if g is None else (g[0], g[1][:4])} "
                          f"{labels[j][i]}")
    for i, (text, pair, special) in enumerate(TOKENIZE):
        exp = cli_tokenize(a.sluice, a.demo, text, pair, special)
        if tokens.get(i) != exp or not exp[0] and text:
            failures += 1
            print(f"MISMATCH tokenize {text!r} {pair!r} special={special}: CLI {exp}, "
                  f"client {tokens.get(i)}")
    n_inputs = sum(len(c.inputs) for c in cases)
    print(f"{a.client} client: {len(cases)} cases ({', '.join(tasks)}), {n_inputs} inputs, "
          f"{values} floats compared with the CLI's, {len(TOKENIZE)} tokenizations: "
          f"{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
