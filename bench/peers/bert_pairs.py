"""Cross-encoder pairs of the standard rerank workload for BERT-vocabulary models: the
query/document lengths of ../shared/bench/rerank_10k.jsonl (a prefix of it), ids folded into
the vocabulary, as [CLS] q [SEP] d [SEP] with type ids. The workload's template (40 + 8
tokens) belongs to the causal reranker; the documents are extended by its length so that
the BERT pairs do the same amount of work (mean ~141 tokens per pair)."""
import json

CLS, SEP, VOCAB = 101, 102, 30522


def load_pairs(path, n, max_len=512):
    """The first n pairs as (input_ids, token_type_ids)."""
    pairs = []
    with open(path) as f:
        header = json.loads(f.readline())
        extra = len(header.get("prefix", [])) + len(header.get("suffix", [])) - 3
        for line in f:
            p = json.loads(line)
            q = [1000 + t % (VOCAB - 1000) for t in p["q"]]
            d = [1000 + t % (VOCAB - 1000) for t in p["d"]]
            d = d + [1000 + (7 * i) % (VOCAB - 1000) for i in range(extra)]
            ids = [CLS] + q + [SEP] + d + [SEP]
            types = [0] * (len(q) + 2) + [1] * (len(d) + 1)
            pairs.append((ids[:max_len], types[:max_len]))
            if len(pairs) == n:
                break
    return pairs


def write_jsonl(pairs, path):
    """The pairs as `sluice score` input lines (token ids)."""
    with open(path, "w") as f:
        for ids, types in pairs:
            f.write(json.dumps({"input_ids": ids, "token_type_ids": types}) + "\n")
