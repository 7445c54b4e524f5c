"""Text inputs through the tokenizer: a copy of the fixture cross-encoder with a small
WordPiece tokenizer.json (vocabulary cut to the model's 211 ids). Text requests must
give exactly the results of the same sequences sent as token ids."""
import json
import os
import tempfile

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()

WORDS = ["the", "cat", "sat", "on", "mat", "sluice", "gate", "fish", "water", "dog", "a",
         "is", "what", "##s", "##ing", "river", "open"]


def make_model(tmp):
    src = os.path.abspath(harness.model_dir("bert_cross_encoder"))
    dst = os.path.join(tmp, "ce_text")
    os.mkdir(dst)
    for f in os.listdir(src):
        os.symlink(os.path.join(src, f), os.path.join(dst, f))
    with open(os.path.join(harness.ARGS.fixtures, "tokenizers", "bert_uncased",
                           "tokenizer.json")) as f:
        tok = json.load(f)
    inv = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    vocab = {k: i for k, i in inv[:150]}
    for w in WORDS:
        vocab[w] = len(vocab)
    tok["model"]["vocab"] = vocab
    with open(os.path.join(dst, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    return dst, vocab


with tempfile.TemporaryDirectory() as tmp:
    model, vocab = make_model(tmp)
    ids = lambda text: [vocab[w] for w in text.split()]
    CLS, SEP = vocab["[CLS]"], vocab["[SEP]"]
    with Server(model) as s:
        conn = s.conn()
        st, _, t = s.post("/tokenize", {"prompt": "The cat sat", "return_token_strs": True},
                          conn=conn)
        c.check(st == 200 and t["tokens"] == [CLS] + ids("the cat sat") + [SEP],
                f"/tokenize {st} {t}")
        c.check(t.get("token_strs") == ["[CLS]", "the", "cat", "sat", "[SEP]"], "token_strs")
        c.check(t.get("count") == 5 and t.get("max_model_len") == 64, "count, max_model_len")
        st, _, d = s.post("/detokenize", {"tokens": ids("the cat sat")}, conn=conn)
        c.check(st == 200 and d["prompt"] == "the cat sat", f"/detokenize {d}")

        docs = ["the cat sat on the mat", "fish water", "open the sluice gate"]
        st, _, text = s.post("/score", {"text_1": "what is a cat", "text_2": docs}, conn=conn)
        c.check(st == 200, f"text /score {st} {text}")
        st, _, tids = s.post("/score", {"text_1": ids("what is a cat"),
                                        "text_2": [ids(x) for x in docs]}, conn=conn)
        c.check(st == 200, f"ids /score {st}")
        c.check([x["score"] for x in text["data"]] == [x["score"] for x in tids["data"]],
                "text and token ids give identical scores")
        c.check(text["usage"] == tids["usage"], "same usage")
        st, _, rr = s.post("/v1/rerank", {"query": "what is a cat", "documents": docs},
                           conn=conn)
        c.check(st == 200 and rr["results"][0]["document"]["text"] in docs, f"rerank {rr}")
        st, _, p = s.post("/predict", {"inputs": ["what is a cat", docs[0]]}, conn=conn)
        c.check(st == 200 and abs(p[0]["score"] - text["data"][0]["score"]) < 1e-5,
                f"/predict pair {p}")
        long_doc = " ".join(["water"] * 80)
        st, _, e = s.post("/score", {"text_1": "cat", "text_2": long_doc}, conn=conn)
        c.error_shape(st, e, 400, "text over the limit")
        c.check("64" in e["error"]["message"], f"names the limit: {e}")
        st, _, ok = s.post("/score", {"text_1": "cat", "text_2": long_doc,
                                      "truncate_prompt_tokens": -1}, conn=conn)
        c.check(st == 200 and ok["usage"]["prompt_tokens"] == 64, f"truncated {st} {ok}")
        st, _, ok = s.post("/rerank", {"query": "cat", "texts": [long_doc], "truncate": True},
                           conn=conn)
        c.check(st == 200, f"TEI truncate {st}")
        # An empty document is scored (as Cohere, vLLM and HF do); an empty query is not.
        st, _, ok = s.post("/score", {"text_1": "cat", "text_2": [""]}, conn=conn)
        c.check(st == 200 and isinstance(ok["data"][0]["score"], float), f"empty document {st} {ok}")
        st, _, e = s.post("/score", {"text_1": "", "text_2": ["cat"]}, conn=conn)
        c.error_shape(st, e, 400, "empty query")
c.finish("text")
