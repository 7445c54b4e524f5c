"""Backpressure (a full queue answers 429 fast, with Retry-After), client disconnect
(queued work dropped, counted in metrics), drain on SIGTERM (in-flight requests complete,
readiness 503, exit 0)."""
import socket
import json
import threading
import time

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()

# A heavy request: 1000 documents of 60 tokens on the tiny cross-encoder.
HEAVY = {"text_1": [5, 6, 7], "text_2": [[(i * 7 + k) % 200 + 1 for k in range(57)]
                                         for i in range(1000)]}


def backpressure():
    with Server("bert_cross_encoder", "--max-queue-depth", "2", "--workers", "4") as s:
        results = []
        lock = threading.Lock()

        def client():
            t0 = time.monotonic()
            st, h, body = s.post("/score", HEAVY)
            with lock:
                results.append((st, h, body, time.monotonic() - t0))

        threads = [threading.Thread(target=client) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        ok = [r for r in results if r[0] == 200]
        full = [r for r in results if r[0] == 429]
        c.check(len(ok) + len(full) == 16, f"only 200/429: {[r[0] for r in results]}")
        c.check(len(ok) >= 2 and len(full) >= 1, f"{len(ok)} ok, {len(full)} 429")
        for st, h, body, _ in full:
            c.check(h.get("retry-after") == "1", "Retry-After")
            c.error_shape(st, body, 429, "queue full")
        if full and ok:
            c.check(max(r[3] for r in full) < max(r[3] for r in ok), "429 answers come fast")
        m = s.metrics()
        c.check(m.get('sluice_requests_total{route="/score",code="429"}') == len(full),
                "429s counted")


def disconnect():
    with Server("bert_cross_encoder", "--workers", "4") as s:
        body = json.dumps(HEAVY).encode()
        # Keep the engine busy, then queue requests whose clients hang up at once.
        busy = [threading.Thread(target=lambda: s.post("/score", HEAVY)) for _ in range(3)]
        for t in busy:
            t.start()
        for _ in range(5):
            sock = socket.create_connection(("127.0.0.1", s.port))
            sock.sendall(b"POST /score HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
            sock.close()
        for t in busy:
            t.join()
        deadline = time.monotonic() + 30
        cancelled = 0
        while time.monotonic() < deadline:
            m = s.metrics()
            cancelled = m.get("sluice_requests_cancelled_total", 0)
            if cancelled >= 1 and m.get("sluice_requests_in_flight") == 0:
                break
            time.sleep(0.05)
        c.check(cancelled >= 1, f"cancelled requests counted: {cancelled}")
        n499 = m.get('sluice_requests_total{route="/score",code="499"}', 0)
        c.check(n499 == 5, f"499 count {n499}")
        # Fewer sequences ran than were submitted: dropped work never reached the engine.
        batches_tokens = m.get("sluice_tokens_total", 0)
        c.check(batches_tokens < 8 * 60000, f"tokens {batches_tokens}: queued work was dropped")


def drain():
    s = Server("bert_cross_encoder", "--workers", "4", "--shutdown-timeout", "60")
    results = []
    lock = threading.Lock()
    started = threading.Barrier(9)

    def client():
        conn = s.conn()
        started.wait()
        try:
            st, _, _ = s.post("/score", HEAVY, conn=conn)
        except Exception as e:
            st = repr(e)
        with lock:
            results.append(st)

    threads = [threading.Thread(target=client) for _ in range(8)]
    for t in threads:
        t.start()
    started.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and s.metrics().get("sluice_requests_in_flight", 0) < 8:
        time.sleep(0.01)
    s.signal()
    # Readiness turns 503 at once (the signal is asynchronous: poll until it lands).
    ready_after = None
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            ready_after, _, _ = s.get("/ready")
        except OSError as e:
            ready_after = repr(e)
        if ready_after != 200:
            break
        time.sleep(0.005)
    for t in threads:
        t.join()
    rc = s.wait(90)
    c.check(rc == 0, f"exit code {rc}")
    c.check(ready_after == 503, f"/ready during drain: {ready_after}")
    c.check(results.count(200) == 8, f"in-flight requests completed: {results}")
    c.check(s.logged("draining"), "drain logged")


backpressure()
disconnect()
drain()
c.finish("backpressure")
