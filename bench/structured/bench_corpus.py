"""The training text and pre-tokenisation of the structured-outputs benchmark vocabulary,
shared by train_bench_tokenizer.py (HF tokenizers, on the GPU machine) and make_bench_vocab.py
(no dependencies): the JSON Schema corpus (schemas and instances, compact, in file order) then
every .py file of this Python's standard library in sorted order."""
import json
import lzma
import os
import sysconfig

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def texts(schemas_path):
    opener = lzma.open if schemas_path.endswith(".xz") else open
    with opener(schemas_path, "rt", encoding="utf-8") as f:
        for line in f:
            d = json.loads(line)
            yield json.dumps(d["schema"], separators=(",", ":"), ensure_ascii=False)
            for t in d.get("tests", []):
                yield json.dumps(t["data"], separators=(",", ":"), ensure_ascii=False)
    stdlib = sysconfig.get_paths()["stdlib"]
    files = []
    for root, dirs, names in os.walk(stdlib):
        dirs.sort()
        if "site-packages" in root or "test" in os.path.relpath(root, stdlib).split(os.sep)[:1]:
            continue
        files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".py")]
    for p in sorted(files):
        with open(p, encoding="utf-8", errors="replace") as f:
            yield f.read()
