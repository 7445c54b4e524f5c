"""The embedded demo model of `make serve` (models/demo-reranker): the README's rerank
example ranks the relevant document first, and a few more queries of the same kind."""
import os

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                     "demo-reranker"))

# The README's example (keep the two in step).
QUERY = "How do salmon swim up the river?"
DOCS = ["Traders sell shares at the busy market.",
        "Salmon swim up the cold river every spring.",
        "Farmers open the old sluice gate near the river.",
        "Fishermen sell salmon at the market in winter."]

with Server(MODEL) as s:
    conn = s.conn()
    st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS, "top_n": 2},
                      conn=conn)
    c.check(st == 200, f"/v1/rerank {st} {r}")
    res = r.get("results", []) if isinstance(r, dict) else []
    c.check(len(res) == 2 and res[0]["index"] == 1, f"README example: {res}")
    c.check(len(res) == 2 and res[0]["relevance_score"] > 0.5 > res[1]["relevance_score"],
            f"README example scores: {res}")
    c.check(len(res) >= 1 and res[0].get("document", {}).get("text") == DOCS[1],
            "returned document text")
    c.check(r.get("model") == "demo-reranker", f"model name {r.get('model')}")
    cases = [
        ("where do bees fly?", ["Bees fly over the green meadow every summer.",
                                "Birds fly near the old tower.",
                                "Bees build the wall in winter."], 0),
        ("do bakers sell bread at the market?",
         ["Bakers bake bread in the kitchen.", "Traders sell fruit at the market.",
          "Every morning the bakers sell fresh bread at the busy market."], 2),
    ]
    for q, docs, want in cases:
        st, _, r = s.post("/rerank", {"query": q, "documents": docs}, conn=conn)
        first = r["results"][0]["index"] if st == 200 and r.get("results") else None
        c.check(first == want, f"{q!r}: first {first}, want {want}: {r}")
    st, _, t = s.post("/tokenize", {"prompt": QUERY, "return_token_strs": True}, conn=conn)
    c.check(st == 200 and t.get("token_strs") == ["[CLS]", "how", "do", "salmon", "swim",
                                                  "up", "the", "river", "?", "[SEP]"],
            f"/tokenize {t}")
c.finish("demo")
