"""KServe Open Inference Protocol v2 over HTTP (docs/model-ops.md): server and model
metadata, POST /v2/models/{name}[/versions/{v}]/infer for scoring (BYTES text and INT64 token
ids), embedding and classification models, FP32 outputs equal to the native routes' answers,
the truncate and top_n parameters, output selection, and errors as {"error": "..."}."""
import os

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RERANKER = os.path.join(ROOT, "models", "demo-reranker")
CHAT = os.path.join(ROOT, "models", "demo-chat")
QUERY = "How do salmon swim up the river?"
DOCS = ["Traders sell shares at the busy market.",
        "Salmon swim up the cold river every spring.",
        "Fishermen sell salmon at the market in winter."]
IDS = [[2, 17, 33, 50, 3], [2, 90, 41, 7, 3]]


def tensor(name, datatype, shape, data):
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}


def kerror(st, body, want, what):
    c.check(st == want and isinstance(body, dict) and isinstance(body.get("error"), str),
            f"{what}: {st} {body}")


with Server(None, "--model", "r=" + RERANKER, "--model",
            "x=" + harness.model_dir("bert_cross_encoder"), "--model",
            "e=" + harness.model_dir("bert_st_mean_dense"), "--model",
            "k=" + harness.model_dir("bert_classifier3"), "--model", "g=" + CHAT) as s:
    st, _, r = s.get("/v2")
    c.check(st == 200 and r.get("name") == "sluice" and "model_repository" in r.get("extensions"),
            f"server metadata {r}")
    st, _, r = s.get("/v2/models/r")
    c.check(st == 200 and [t["name"] for t in r["inputs"]] ==
            ["query", "documents", "query_ids", "document_ids"] and
            [t["name"] for t in r["outputs"]] == ["scores", "indices"], f"score metadata {r}")
    st, _, r = s.get("/v2/models/e")
    c.check(st == 200 and r["outputs"][0]["name"] == "embedding" and
            r["outputs"][0]["shape"][1] > 0, f"embed metadata {r}")
    st, _, r = s.get("/v2/models/g")
    c.check(st == 200 and r["inputs"] == [] and r["task"] == "generate", f"generate metadata {r}")

    # --- score, text: the same scores as /v1/rerank, in document order ---
    st, _, native = s.post("/v1/rerank", {"model": "r", "query": QUERY, "documents": DOCS})
    want = {x["index"]: x["relevance_score"] for x in native["results"]}
    body = {"id": "req-1", "inputs": [tensor("query", "BYTES", [1], [QUERY]),
                                      tensor("documents", "BYTES", [3], DOCS)]}
    st, h, r = s.post("/v2/models/r/infer", body)
    c.check(st == 200 and r.get("model_name") == "r" and r.get("model_version") == "1" and
            r.get("id") == "req-1" and h.get("sluice-model-version") == "1", f"infer r {st} {r}")
    outs = {o["name"]: o for o in r.get("outputs", [])}
    c.check(outs.get("scores", {}).get("datatype") == "FP32" and
            outs["scores"]["shape"] == [3], f"scores tensor {outs}")
    c.close(outs.get("scores", {}).get("data"), [want[i] for i in range(3)], 0,
            "scores equal /v1/rerank")
    c.check(outs.get("indices", {}).get("data") == [0, 1, 2], f"indices in order {outs}")
    body["parameters"] = {"top_n": 1}
    st, _, r = s.post("/v2/models/r/versions/1/infer", body)
    outs = {o["name"]: o for o in r.get("outputs", [])}
    c.check(st == 200 and outs.get("indices", {}).get("data") == [1] and
            outs["scores"]["shape"] == [1], f"top_n 1: {r}")
    # truncate: an over-long document is refused, or cut with truncate true.
    long_doc = " ".join(["salmon swim up the river"] * 80)
    body = {"inputs": [tensor("query", "BYTES", [1], [QUERY]),
                       tensor("documents", "BYTES", [1], [long_doc])]}
    st, _, r = s.post("/v2/models/r/infer", body)
    kerror(st, r, 400, "over-long document")
    body["parameters"] = {"truncate": True}
    st, _, r = s.post("/v2/models/r/infer", body)
    c.check(st == 200, f"truncate true: {st} {r}")

    # --- score, token ids: the same as /v1/rerank on ids ---
    st, _, native = s.post("/v1/rerank", {"model": "x", "query": IDS[0], "documents": IDS})
    want = {x["index"]: x["relevance_score"] for x in native.get("results", [])}
    st, _, r = s.post("/v2/models/x/infer",
                      {"inputs": [tensor("query_ids", "INT64", [1, 5], IDS[0]),
                                  tensor("document_ids", "INT64", [2, 5],
                                         [v for row in IDS for v in row])]})
    outs = {o["name"]: o for o in r.get("outputs", [])}
    c.check(st == 200, f"infer x ids {st} {r}")
    c.close(outs.get("scores", {}).get("data"), [want.get(0), want.get(1)], 0,
            "id scores equal /v1/rerank")

    # --- embed and classify on token ids ---
    st, _, native = s.post("/v1/embeddings", {"model": "e", "input": IDS})
    st, _, r = s.post("/v2/models/e/infer",
                      {"inputs": [tensor("input_ids", "INT64", [2, 5], IDS)]})
    out = r.get("outputs", [{}])[0]
    dim = len(native["data"][0]["embedding"])
    c.check(st == 200 and out.get("name") == "embedding" and out.get("shape") == [2, dim],
            f"embedding tensor {st} {out.get('shape')}")
    c.close(out.get("data"), native["data"][0]["embedding"] + native["data"][1]["embedding"], 0,
            "embeddings equal /v1/embeddings")
    st, _, native = s.post("/classify", {"model": "k", "input": IDS})
    st, _, r = s.post("/v2/models/k/infer",
                      {"inputs": [tensor("input_ids", "INT64", [2, 5], IDS)]})
    outs = {o["name"]: o for o in r.get("outputs", [])}
    c.check(st == 200 and outs.get("probabilities", {}).get("shape") == [2, 3], f"classify {r}")
    c.close(outs.get("probabilities", {}).get("data"),
            native["data"][0]["probs"] + native["data"][1]["probs"], 0, "probs equal /classify")
    c.close(outs.get("logits", {}).get("data"),
            native["data"][0]["logits"] + native["data"][1]["logits"], 0, "logits equal /classify")
    st, _, r = s.post("/v2/models/k/infer",
                      {"inputs": [tensor("input_ids", "INT64", [2, 5], IDS)],
                       "outputs": [{"name": "logits"}]})
    c.check(st == 200 and [o["name"] for o in r["outputs"]] == ["logits"], f"outputs filter {r}")

    # --- errors ---
    good = [tensor("input_ids", "INT64", [2, 5], IDS)]
    for body, want_st, what in [
            ("{", 400, "bad JSON"),
            ({}, 400, "no inputs"),
            ({"inputs": [tensor("pixels", "FP32", [1], [0.5])]}, 400, "unknown input"),
            ({"inputs": [tensor("input_ids", "INT64", [2, 4], IDS)]}, 400, "shape mismatch"),
            ({"inputs": [tensor("input_ids", "FP32", [2, 5], IDS)]}, 400, "wrong datatype"),
            ({"inputs": [dict(good[0], parameters={"binary_data_size": 8})]}, 400, "binary"),
            ({"inputs": good, "outputs": [{"name": "scores"}]}, 400, "unknown output"),
            ({"inputs": good, "parameters": {"top_n": 2}}, 400, "top_n on a classifier"),
            ({"inputs": good, "bogus": 1}, 400, "unknown field"),
            ({"inputs": good + good}, 400, "input twice"),
            ({"inputs": [tensor("input_ids", "INT64", [1, 2], [5, 999])]}, 400, "id past vocab")]:
        st, _, r = s.post("/v2/models/k/infer", body)
        kerror(st, r, want_st, what)
    st, _, r = s.post("/v2/models/r/infer",
                      {"inputs": [tensor("query", "BYTES", [1], [QUERY])]})
    kerror(st, r, 400, "score without documents")
    st, _, r = s.post("/v2/models/nope/infer", {"inputs": good})
    kerror(st, r, 404, "unknown model")
    c.check('"k"' in r.get("error", ""), f"404 names what is served: {r}")
    st, _, r = s.post("/v2/models/k/versions/2/infer", {"inputs": good})
    kerror(st, r, 404, "unknown version")
    st, _, r = s.post("/v2/models/g/infer", {"inputs": good})
    kerror(st, r, 400, "generation model")
    st, _, r = s.get("/v2/models/k/infer")
    c.check(st == 405, f"GET infer: {st}")
    m = s.metrics()
    c.check(m.get('sluice_requests_total{model="k",version="1",route="/v2/models/{name}/infer",'
                  'code="200"}') == 2, "infer counted under its route")

c.finish("e2e_kserve")
