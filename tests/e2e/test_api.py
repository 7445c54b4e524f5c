"""Every route and shape against the golden fixtures (token-id inputs: the fixture models
have no tokenizer), usage, health, models, metrics counts, auth."""
import base64
import json
import os
import shutil
import struct
import subprocess
import tempfile
import threading

import harness
from harness import Server, golden, split_pair

harness.parse_args()
c = harness.Checker()


def usable_pairs(g):
    out = []
    for i, inp in enumerate(g["inputs"]):
        q, d = split_pair(inp)
        types = inp.get("type_ids") or []
        if not q or not d:
            continue
        if types and types != [0] * len(q) + [1] * len(d):
            continue
        out.append((i, q, d))
    return out


def cross_encoder(name):
    g = golden(name)
    tol = g["tolerance"]
    pairs = usable_pairs(g)
    c.check(len(pairs) >= 20, f"{name}: {len(pairs)} usable pairs")
    with Server(name, "--max-batch-tokens", "256") as s:
        conn = s.conn()
        # /score N:N, all pairs in one request.
        st, _, body = s.post("/score", {"text_1": [q for _, q, _ in pairs],
                                        "text_2": [d for _, _, d in pairs]}, conn=conn)
        c.check(st == 200, f"{name} /score: {st} {body}")
        scores = [x["score"] for x in body["data"]]
        for (i, _, _), got in zip(pairs, scores):
            c.close(got, g["outputs"][i][0], tol, f"{name} /score input {i}")
        want_tokens = sum(len(q) + len(d) for _, q, d in pairs)
        c.check(body["usage"]["prompt_tokens"] == want_tokens, f"{name} usage {body['usage']}")
        # queries/documents spelling, 1:1, and each pair alone equals the batched result
        # bit for bit... within 1e-5 (batch invariance); duplicates bit-identical.
        for (i, q, d), batched in list(zip(pairs, scores))[:8]:
            st, _, one = s.post("/score", {"queries": q, "documents": d}, conn=conn)
            c.check(st == 200 and len(one["data"]) == 1, f"{name} 1:1 {st}")
            c.close(one["data"][0]["score"], batched, 1e-5, f"{name} alone vs batched {i}")
        _, q0, d0 = pairs[0]
        st, _, dup = s.post("/score", {"text_1": q0, "text_2": [d0] * 5 + [p[2] for p in pairs]},
                            conn=conn)
        vals = [x["score"] for x in dup["data"][:5]]
        c.check(len(set(vals)) == 1, f"{name} duplicates differ: {vals}")
        # 1:N via /v1/rerank (Cohere/Jina) and /rerank (TEI): same scores as /score 1:N.
        docs = [p[2] for p in pairs[:10]]
        st, _, one_n = s.post("/score", {"text_1": q0, "text_2": docs}, conn=conn)
        ref = [x["score"] for x in one_n["data"]]
        c.close(ref[0], g["outputs"][pairs[0][0]][0], tol, f"{name} 1:N first")
        st, _, rr = s.post("/v1/rerank", {"model": name, "query": q0, "documents": docs,
                                          "top_n": 3}, conn=conn)
        c.check(st == 200 and len(rr["results"]) == 3, f"{name} /v1/rerank: {st} {rr}")
        order = sorted(range(len(ref)), key=lambda k: -ref[k])
        c.check([r["index"] for r in rr["results"]] == order[:3], f"{name} rerank order")
        for r in rr["results"]:
            c.check(r["relevance_score"] == ref[r["index"]], f"{name} rerank score {r}")
            # Token-id documents echo as their text: none without a tokenizer.
            c.check("document" not in r, f"{name} rerank document of ids without a tokenizer")
        c.check(rr["usage"]["total_tokens"] > 0, f"{name} rerank usage")
        st, _, rr = s.post("/rerank", {"query": q0, "documents": [{"text": d} for d in docs],
                                       "return_documents": False}, conn=conn)
        c.check(st == 200 and len(rr["results"]) == 10 and "document" not in rr["results"][0],
                f"{name} /rerank cohere {st}")
        st, _, tei = s.post("/rerank", {"query": q0, "texts": docs, "return_text": True},
                            conn=conn)
        c.check(st == 200 and isinstance(tei, list) and len(tei) == 10, f"{name} TEI rerank {st}")
        c.check([t["index"] for t in tei] == order, f"{name} TEI order")
        c.check(all(t["score"] == ref[t["index"]] and "text" not in t for t in tei),
                f"{name} TEI scores")
        st, _, raw = s.post("/rerank", {"query": q0, "texts": docs, "raw_scores": True},
                            conn=conn)
        c.check(st == 200, f"{name} TEI raw {st}")
        if "raw" in g:
            first = [t for t in raw if t["index"] == 0][0]
            c.close(first["score"], g["raw"][pairs[0][0]][0], tol * 10, f"{name} TEI raw_scores")
        # Wrong task on this model.
        st, _, e = s.post("/v1/embeddings", {"input": [q0]}, conn=conn)
        c.error_shape(st, e, 400, f"{name} embeddings on a scorer")
        return s.metrics()


def l2(v):
    n = max(sum(x * x for x in v) ** 0.5, 1e-12)
    return [x / n for x in v]


def st_normalizes(name):
    path = os.path.join(harness.model_dir(name), "modules.json")
    return os.path.exists(path) and "Normalize" in open(path).read()


def embedder(name):
    g = golden(name)
    tol = g["tolerance"]
    ids = [x["ids"] for x in g["inputs"]]
    with Server(name) as s:
        conn = s.conn()
        st, _, body = s.post("/v1/embeddings", {"model": name, "input": ids}, conn=conn)
        c.check(st == 200, f"{name} embeddings {st} {body if st != 200 else ''}")
        for i, item in enumerate(body["data"]):
            c.check(item["index"] == i and item["object"] == "embedding", f"{name} item {i}")
            # Normalised by default (vLLM's rule), whether the model's pipeline ends in
            # Normalize or not.
            c.close(item["embedding"], l2(g["outputs"][i]), tol, f"{name} embedding {i}")
        if not st_normalizes(name):
            st, _, raw = s.post("/v1/embeddings", {"input": ids[:4], "normalize": False}, conn=conn)
            for i, item in enumerate(raw["data"]):
                c.close(item["embedding"], g["outputs"][i], tol, f"{name} normalize false {i}")
        c.check(body["usage"]["prompt_tokens"] == sum(map(len, ids)), f"{name} usage")
        st, _, b64 = s.post("/v1/embeddings", {"input": ids, "encoding_format": "base64"},
                            conn=conn)
        raw = base64.b64decode(b64["data"][3]["embedding"])
        floats = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        as_f32 = [struct.unpack("<f", struct.pack("<f", x))[0] for x in body["data"][3]["embedding"]]
        c.check(floats == as_f32, f"{name} base64 == float")
        st, _, tei = s.post("/embed", {"inputs": ids[:4]}, conn=conn)
        c.check(st == 200 and len(tei) == 4, f"{name} /embed {st}")
        for i in range(4):
            c.check(tei[i] == body["data"][i]["embedding"], f"{name} /embed {i} same as OpenAI")
        st, _, pool = s.post("/pooling", {"input": ids[:2]}, conn=conn)
        c.check(st == 200 and pool["data"][1]["data"] == body["data"][1]["embedding"],
                f"{name} /pooling")
        if g.get("dimensions"):
            dims = g["dimensions"]
            st, _, short = s.post("/v1/embeddings", {"input": ids, "dimensions": dims}, conn=conn)
            c.check(st == 200, f"{name} dimensions {st}")
            for i, item in enumerate(short["data"]):
                c.close(item["embedding"], g["outputs_truncated"][i], tol, f"{name} matryoshka {i}")
        st, _, e = s.post("/v1/embeddings", {"input": ids[0], "dimensions": 100000}, conn=conn)
        c.error_shape(st, e, 400, f"{name} dimensions too large")
        c.check("dimensions" in e["error"]["message"], f"{name} names the field")
        if not g.get("dimensions"):  # not a Matryoshka model: `dimensions` is refused
            st, _, e = s.post("/v1/embeddings", {"input": ids[0], "dimensions": 8}, conn=conn)
            c.error_shape(st, e, 400, f"{name} dimensions on a non-Matryoshka model")
            c.check("Matryoshka" in e["error"]["message"], f"{name} says why: {e}")


def matryoshka_dimensions_list():
    """sluice.json "matryoshka_dimensions": only the listed values are accepted."""
    g = golden("qwen3_st_last")
    ids = [x["ids"] for x in g["inputs"][:4]]
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "m")
        shutil.copytree(harness.model_dir("qwen3_st_last"), model)
        with open(os.path.join(model, "sluice.json"), "w") as f:
            json.dump({"matryoshka_dimensions": [8, g["dimensions"]]}, f)
        with Server(model) as s:
            st, _, ok = s.post("/v1/embeddings", {"input": ids, "dimensions": g["dimensions"]})
            c.check(st == 200, f"listed dimensions {st}")
            for i, item in enumerate(ok["data"]):
                c.close(item["embedding"], g["outputs_truncated"][i], g["tolerance"],
                        f"listed dimensions {i}")
            st, _, e = s.post("/v1/embeddings", {"input": ids, "dimensions": 12})
            c.error_shape(st, e, 400, "dimensions not in matryoshka_dimensions")
            c.check(f"[8, {g['dimensions']}]" in e["error"]["message"], f"lists them: {e}")


def classifier(name):
    g = golden(name)
    tol = g["tolerance"]
    ids = [x["ids"] for x in g["inputs"]]
    with Server(name) as s:
        conn = s.conn()
        st, _, body = s.post("/classify", {"input": ids}, conn=conn)
        c.check(st == 200, f"{name} classify {st}")
        for i, item in enumerate(body["data"]):
            c.close(item["probs"], g["outputs"][i], tol, f"{name} probs {i}")
            best = max(range(len(g["outputs"][i])), key=lambda k: g["outputs"][i][k])
            c.check(item["label"] == g["labels"][best] and item["num_classes"] == len(g["labels"]),
                    f"{name} label {i}")
        st, _, pred = s.post("/predict", {"inputs": [ids[0], ids[1]]}, conn=conn)
        c.check(st == 200 and len(pred) == 2, f"{name} /predict batch {st}")
        c.check(pred[0][0]["label"] == body["data"][0]["label"], f"{name} /predict top label")
        st, _, single = s.post("/predict", {"inputs": ids[0]}, conn=conn)
        c.check(st == 200 and isinstance(single[0], dict), f"{name} /predict single")


def token_level(name):
    g = golden(name)
    with Server(name) as s:
        inputs = [x["ids"] for x in g["inputs"][:10]]
        st, _, body = s.post("/pooling", {"input": inputs, "normalize": False})
        c.check(st == 200, f"{name} /pooling {st}")
        for i, item in enumerate(body["data"]):
            flat = [v for row in item["data"] for v in row]
            c.close(flat, g["outputs"][i], g["tolerance"], f"{name} token-level {i}")
        st, _, norm = s.post("/pooling", {"input": inputs, "task": "token_embed"})
        c.check(st == 200, f"{name} /pooling token_embed {st}")
        for i, (item, raw) in enumerate(zip(norm["data"], body["data"])):
            for row, want in zip(item["data"], raw["data"]):
                c.close(row, l2(want), 1e-6, f"{name} token-level normalised {i}")
        st, _, e = s.post("/v1/embeddings", {"input": g["inputs"][0]["ids"]})
        c.error_shape(st, e, 400, f"{name} token-level on /v1/embeddings")


def service_routes():
    with Server("bert_cross_encoder", "--api-key", "sekret", "--served-model-name", "ce") as s:
        auth = {"Authorization": "Bearer sekret"}
        for path in ["/health", "/ready", "/v2/health/live", "/v2/health/ready",
                     "/v2/models/ce/ready"]:
            st, _, _ = s.get(path)
            c.check(st == 200, f"{path} {st}")
        st, _, e = s.get("/v2/models/other/ready")
        c.error_shape(st, e, 404, "unknown model ready")
        st, _, e = s.get("/v1/models")
        c.error_shape(st, e, 401, "no key")
        st, _, e = s.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        c.error_shape(st, e, 401, "wrong key")
        st, _, models = s.get("/v1/models", headers=auth)
        c.check(st == 200 and models["data"][0]["id"] == "ce", f"/v1/models {models}")
        st, _, e = s.post("/score", {"model": "other", "text_1": [1], "text_2": [2]}, headers=auth)
        c.error_shape(st, e, 404, "unknown model")
        st, _, e = s.get("/nope", headers=auth)
        c.error_shape(st, e, 404, "unknown route")
        st, h, e = s.get("/score", headers=auth)
        c.error_shape(st, e, 405, "GET on POST route")
        c.check(h.get("allow") == "POST", "Allow header")
        st, _, e = s.post("/tokenize", {"prompt": "hello"}, headers=auth)
        c.error_shape(st, e, 400, "tokenize without tokenizer")
        st, _, e = s.post("/score", {"text_1": "a query", "text_2": "a doc"}, headers=auth)
        c.error_shape(st, e, 400, "text without tokenizer")
        st, _, e = s.post("/score", {"text_1": [1] * 40, "text_2": [2] * 40}, headers=auth)
        c.error_shape(st, e, 400, "over the model limit")
        c.check("64" in e["error"]["message"], "names the limit")
        st, _, ok = s.post("/score", {"text_1": [1] * 40, "text_2": [2] * 40,
                                      "truncate_prompt_tokens": -1}, headers=auth)
        c.check(st == 200 and ok["usage"]["prompt_tokens"] == 64, f"truncation {st} {ok}")
        st, _, ok = s.post("/score", {"text_1": [5], "text_2": [6]}, headers=auth)
        c.check(st == 200, "ok request")
        # Server output == offline CLI output, bit for bit (same batch: one request, default budget).
        pairs = usable_pairs(golden("bert_cross_encoder"))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "pairs.jsonl")
            with open(path, "w") as f:
                for _, q, d in pairs:
                    f.write(json.dumps({"q": q, "d": d}) + "\n")
            out = subprocess.run([harness.ARGS.sluice, "score", "--model",
                                  harness.model_dir("bert_cross_encoder"), "--threads", "1",
                                  "--input", path], capture_output=True, text=True, check=True)
        offline = [json.loads(line)["score"] for line in out.stdout.splitlines()]
        st, _, body = s.post("/score", {"text_1": [q for _, q, _ in pairs],
                                        "text_2": [d for _, _, d in pairs]}, headers=auth)
        f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
        c.check(st == 200 and [f32(x["score"]) for x in body["data"]] == [f32(x) for x in offline],
                "server /score == offline sluice score, bit for bit")
        m = s.metrics()
        c.check(m.get('sluice_requests_total{route="/score",code="200"}') == 3, "score 200 count")
        c.check(m.get('sluice_requests_total{route="/score",code="400"}') == 2, "score 400 count")
        c.check(m.get('sluice_requests_total{route="/score",code="404"}') == 1, "score 404 count")
        c.check(m.get('sluice_requests_total{route="/v1/models",code="401"}') == 2, "401 count")
        c.check(m.get("sluice_tokens_total", 0) >= 66, "tokens counted")
        c.check(m.get("sluice_batches_total", 0) >= 4, "batches counted (warm-up + 3)")
        c.check(m.get("sluice_ready") == 1, "ready gauge")
        c.check('sluice_request_duration_seconds_count{route="/score"}' in m, "latency histogram")


def prefix_reuse(name):
    """--prefix-reuse on vs off through the API, per query: concurrent /v1/rerank requests
    (each one query over many documents: the query's tokens start every sequence of the
    request) and one /score request whose pairs repeat two queries give identical scores
    with reuse on and off, and /metrics counts one group per query and at least its
    (documents - 1) x query tokens saved (no prefix is shared by a whole batch here: the
    queries differ from their first token)."""
    g = golden(name)
    pairs = usable_pairs(g)
    queries = []
    for _, q, _ in sorted(pairs, key=lambda p: -len(p[1])):
        if len(q) >= 4 and all(q[0] != x[0] for x in queries):
            queries.append(q)
    queries = queries[:4]
    c.check(len(queries) == 4, f"{name}: 4 queries of >= 4 tokens with distinct first tokens")
    docs = [p[2] for p in pairs[:16]]
    half = docs[:8]
    results = {}
    for mode in ("off", "on"):
        with Server(name, "--prefix-reuse", mode) as s:
            got = [None] * len(queries)

            def rerank(i):
                st, _, body = s.post("/v1/rerank", {"query": queries[i], "documents": docs},
                                     conn=s.conn())
                got[i] = (st, body)

            threads = [threading.Thread(target=rerank, args=(i,)) for i in range(len(queries))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            scores = []
            for i, (st, body) in enumerate(got):
                c.check(st == 200, f"{name} prefix-reuse {mode} rerank {i}: {st} {body}")
                scores.append(sorted((r["index"], r["relevance_score"])
                                     for r in body["results"]))
            st, _, body = s.post("/score", {"text_1": [queries[0]] * len(half) +
                                            [queries[1]] * len(half),
                                            "text_2": half + half})
            c.check(st == 200, f"{name} prefix-reuse {mode} /score: {st} {body}")
            scores.append([x["score"] for x in body["data"]])
            results[mode] = scores
            m = s.metrics()
            saved = m.get("sluice_prefix_reuse_tokens_saved_total", -1)
            groups = m.get("sluice_prefix_reuse_groups_total", -1)
            if mode == "on":
                want = sum((len(docs) - 1) * len(q) for q in queries) + \
                    (len(half) - 1) * (len(queries[0]) + len(queries[1]))
                c.check(saved >= want, f"{name}: {saved} prefix tokens saved, want >= {want}")
                c.check(groups >= len(queries) + 2, f"{name}: {groups} groups, one per query")
                c.check(m.get("sluice_prefix_reuse_batches_total", 0) >= 2, "reuse batches")
            else:
                c.check(saved == 0 and groups == 0, f"{name}: no reuse when off ({saved})")
    c.check(results["on"] == results["off"], f"{name}: prefix reuse changes no score")


cross_encoder("bert_cross_encoder")
cross_encoder("qwen3_reranker")
prefix_reuse("qwen3_reranker")
embedder("bert_st_mean_dense")
embedder("qwen3_st_last")
matryoshka_dimensions_list()
classifier("bert_classifier3")
token_level("bert_pool_all")
service_routes()
c.finish("api")
