"""Malformed-input mix: >= 1,000 requests at concurrency 16 (truncated JSON, wrong types,
{}, empty strings and lists, invalid UTF-8, lone surrogates, huge numbers, 10k-deep
nesting, oversized bodies, unknown fields, bad routes/methods, built-in IO processors by name
through /pooling "io_processor" and /plugins/NAME). Each gets the right 4xx
with a JSON error; the server never crashes and serves a valid request right after."""
import json
import socket
import threading

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
lock = threading.Lock()

VALID = {"text_1": [5, 6, 7], "text_2": [8, 9]}
BAD = [
    ("/score", b'{"text_1": [1, 2', 400),
    ("/score", b'{"text_1": [1], "text_2": [2]', 400),
    ("/score", b"{}", 400),
    ("/score", b"[]", 400),
    ("/score", b"null", 400),
    ("/score", b"", 400),
    ("/score", b'{"text_1": "", "text_2": [1]}', 400),
    ("/score", b'{"text_1": [], "text_2": [1]}', 400),
    ("/score", b'{"text_1": [1], "text_2": []}', 400),
    ("/score", b'{"text_1": [], "text_2": [[1]]}', 400),
    ("/score", b'{"text_1": 5, "text_2": [1]}', 400),
    ("/score", b'{"text_1": [1.5], "text_2": [1]}', 400),
    ("/score", b'{"text_1": [-1], "text_2": [1]}', 400),
    ("/score", b'{"text_1": [1], "text_2": [99999]}', 400),
    ("/score", b'{"text_1": [1], "text_2": [1e400]}', 400),
    ("/score", b'{"text_1": [1], "text_2": [123456789012345678901234567890]}', 400),
    ("/score", b'{"text_1": [[1], [2]], "text_2": [[1], [2], [3]]}', 400),
    ("/score", b'{"text_1": [1], "text_2": [2], "bogus": 1}', 400),
    ("/score", b'{"text_1": "\xff\xfe", "text_2": [1]}', 400),
    ("/score", b'{"text_1": "\\ud800", "text_2": [1]}', 400),
    ("/score", b'{"text_1": "\\udc00x", "text_2": [1]}', 400),
    ("/score", b"[" * 10000 + b"]" * 10000, 400),
    ("/score", b'{"a":' * 10000 + b"1" + b"}" * 10000, 400),
    ("/score", b'{"text_1": [1], "text_2": [2], "truncate_prompt_tokens": 0}', 400),
    ("/v1/rerank", b'{"query": [1], "documents": "x"}', 400),
    ("/v1/rerank", b'{"query": [1], "documents": [{"txt": [1]}]}', 400),
    ("/v1/rerank", b'{"query": [1], "documents": [[1]], "top_n": 0}', 400),
    ("/v1/rerank", b'{"query": [1], "documents": [[1]], "top_n": "3"}', 400),
    ("/v1/rerank", b'{"query": [1], "documents": [[1]], "return_documents": 1}', 400),
    ("/rerank", b'{"query": [1], "texts": [[1]], "raw_scores": "yes"}', 400),
    ("/v1/embeddings", b'{"input": [[1]]}', 400),   # wrong task for a scorer
    ("/classify", b'{"input": []}', 400),
    ("/score", b'{"text_1": "a", "text_2": [1]}', 400),  # mixes text and ids
    ("/score", b'{"text_1": [1], "text_2": [2]}' + b" " * 70000, 413),
    ("/score", b"x" * 200000, 413),
    ("/nope", b"{}", 404),
    # Built-in IO processors by name (/pooling "io_processor", /plugins/NAME).
    ("/pooling", b'{"io_processor": "score"}', 400),
    ("/pooling", b'{"io_processor": "score", "data": [1]}', 400),
    ("/pooling", b'{"io_processor": "score", "data": {"text_1": [1, 2}}', 400),
    ("/pooling", b'{"io_processor": "score", "data": {"text_1": [1], "text_2": [99999]}}', 400),
    ("/pooling", b'{"io_processor": "score", "data": {"text_1": "\\ud800", "text_2": [1]}}', 400),
    ("/pooling", b'{"io_processor": "score", "data": {}, "bogus": 1}', 400),
    ("/pooling", b'{"io_processor": "nope", "data": {}}', 400),
    ("/pooling", b'{"io_processor": 5, "data": {}}', 400),
    ("/plugins/score", b'{"text_1": [1], "text_2": [2], "bogus": 1}', 400),
    ("/plugins/rerank", b'"x"', 400),
    ("/plugins/nope", b"{}", 404),
]


def worker(tid, n, results):
    s = server
    conn = s.conn()
    for k in range(n):
        path, body, want = BAD[(tid * 7 + k) % len(BAD)]
        try:
            st, _, resp = s.post(path, body, conn=conn)
        except Exception as e:  # the connection closes after 413: reconnect
            st, resp = None, str(e)
        if want == 413 or st is None:
            conn.close()
            conn = s.conn()
        ok = (st == want and isinstance(resp, dict) and resp.get("error", {}).get("code") == want
              and isinstance(resp["error"].get("message"), str))
        if not ok:
            with lock:
                results.append(f"{path} {body[:60]!r}: got {st} {str(resp)[:200]}, want {want}")
        st, _, resp = s.post("/score", VALID, conn=conn)
        if st != 200:
            with lock:
                results.append(f"valid request after {body[:40]!r}: {st} {resp}")


with Server("bert_cross_encoder", "--max-body-bytes", "65536") as server:
    errors = []
    threads = [threading.Thread(target=worker, args=(t, 32, errors)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for e in errors[:20]:
        print("FAIL:", e)
    c.check(not errors, f"{len(errors)} wrong answers out of {16 * 32 * 2}")
    c.check(server.proc.poll() is None, "server alive")
    m = server.metrics()
    # (the one-model view of harness.metrics: keys without the model/version labels)
    n400 = sum(v for k, v in m.items() if k.startswith("sluice_requests_total") and
               'code="400"' in k and 'model="' not in k)
    n200 = m.get('sluice_requests_total{route="/score",code="200"}', 0)
    c.check(n200 == 16 * 32, f"200s counted {n200}")
    want400 = sum(1 for t in range(16) for k in range(32) if BAD[(t * 7 + k) % len(BAD)][2] == 400)
    c.check(n400 == want400, f"400s counted {n400} vs {want400}")
    # Wrong method / 405 and malformed HTTP (answered with a JSON 400, connection closed).
    st, _, e = server.request("PUT", "/score", b"{}")
    c.error_shape(st, e, 405, "PUT /score")
    for raw in [b"GARBAGE\r\n\r\n", b"POST /score HTTP/1.1\r\nContent-Length: abc\r\n\r\n"]:
        sock = socket.create_connection(("127.0.0.1", server.port))
        sock.sendall(raw)
        sock.settimeout(10)
        data = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        sock.close()
        head, _, body = data.partition(b"\r\n\r\n")
        c.check(head.startswith(b"HTTP/1.1 400") and b"Connection: close" in head,
                f"malformed HTTP {raw!r}: {head!r}")
        c.check(json.loads(body)["error"]["code"] == 400, f"malformed HTTP body {body!r}")
    st, _, ok = server.post("/score", VALID)
    c.check(st == 200, "valid request after malformed HTTP")
c.finish("malformed")
