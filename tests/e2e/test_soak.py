"""Memory soak (label slow): RSS after warm-up vs after 20,000 mixed requests (valid
score/rerank/TEI requests of varied sizes, malformed ones, 404s) at concurrency 16
must grow by less than 5%."""
import random
import threading

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def body(rng):
    k = rng.randrange(10)
    docs = [[rng.randrange(5, 200) for _ in range(rng.randrange(1, 50))]
            for _ in range(rng.randrange(1, 30))]
    q = [rng.randrange(5, 200) for _ in range(rng.randrange(1, 10))]
    if k < 4:
        return "/score", {"text_1": q, "text_2": docs}, 200
    if k < 7:
        return "/v1/rerank", {"query": q, "documents": docs, "top_n": 3}, 200
    if k < 8:
        return "/rerank", {"query": q, "texts": docs, "return_text": True}, 200
    if k < 9:
        return "/score", {"text_1": q, "text_2": docs, "bogus": 1}, 400
    return "/nope", {}, 404


def run(s, n, seed):
    errors = []

    def worker(t):
        rng = random.Random(seed * 100 + t)
        conn = s.conn()
        for _ in range(n // 16):
            path, b, want = body(rng)
            st, _, _ = s.post(path, b, conn=conn)
            if st != want:
                errors.append((path, st, want))

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return errors


with Server("bert_cross_encoder", "--workers", "2") as s:
    errors = run(s, 10000, 1)  # allocator pools settle within the first ~5,000
    before = rss_kb(s.proc.pid)
    errors += run(s, 20000, 2)
    after = rss_kb(s.proc.pid)
    growth = (after - before) / before
    print(f"RSS after warm-up {before} kB, after 20,000 requests {after} kB ({100 * growth:+.2f}%)")
    c.check(not errors, f"{len(errors)} unexpected statuses, e.g. {errors[:3]}")
    c.check(growth < 0.05, f"RSS grew {100 * growth:.2f}% (limit 5%)")
c.finish("soak")
