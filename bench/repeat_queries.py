"""Builds a repeated-query rerank workload from rerank_10k.jsonl: every pair's query is
replaced by the query of the first pair of its block of `n` (10,000 pairs -> 10,000 / n
queries x n documents). Usage: repeat_queries.py IN N OUT"""
import json
import sys

src, n, dst = sys.argv[1], int(sys.argv[2]), sys.argv[3]
with open(src) as f, open(dst, "w") as out:
    out.write(f.readline())  # the prefix/suffix header
    q = None
    for i, line in enumerate(f):
        p = json.loads(line)
        if i % n == 0:
            q = p["q"]
        out.write(json.dumps({"q": q, "d": p["d"]}) + "\n")
