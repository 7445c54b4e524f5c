"""OpenAI /v1/completions on a generation model (the qwen3 generation fixture, CPU): greedy
output equals the offline engine's (`sluice generate`), streaming equals non-streaming, a
check per request field showing its effect, SSE framing, errors, a client that disconnects
mid-stream frees its KV blocks, and a mixed concurrent load leaves nothing behind."""
import json
import os
import re
import socket
import subprocess
import tempfile
import threading
import time

import harness
from harness import Server

args = harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(args.fixtures, "generation", "qwen3", "model"))
EXPECTED = json.load(open(os.path.join(args.fixtures, "generation", "qwen3", "expected.json")))
PROMPTS = EXPECTED["prompts"]


def offline(lines):
    """`sluice generate` on the same model: the output lines."""
    with tempfile.TemporaryDirectory() as d:
        inp, out = os.path.join(d, "in.jsonl"), os.path.join(d, "out.jsonl")
        with open(inp, "w") as f:
            for l in lines:
                f.write(json.dumps(l) + "\n")
        r = subprocess.run([args.sluice, "generate", "--model", MODEL, "--input", inp, "--output",
                            out, "--threads", "1"], capture_output=True, text=True)
        c.check(r.returncode == 0, "offline generate: " + r.stderr[-500:])
        return [json.loads(l) for l in open(out)] if r.returncode == 0 else []


def sse(s, body, close_after=None):
    """POSTs a streaming request on a raw socket; returns (status line, headers, events).
    close_after: close the socket after that many events (a client going away)."""
    data = json.dumps(body).encode()
    sock = socket.create_connection(("127.0.0.1", s.port), timeout=30)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(data)).encode() + b"\r\n\r\n" + data)
    f = sock.makefile("rb")
    status = f.readline().decode().strip()
    headers = {}
    while True:
        line = f.readline().decode()
        if line in ("\r\n", ""):
            break
        k, v = line.split(":", 1)
        headers[k.strip().lower()] = v.strip()
    events, buf, framing_ok = [], b"", True
    chunked = headers.get("transfer-encoding") == "chunked"
    while True:
        if chunked:
            size = int(f.readline().strip() or b"0", 16)
            if size == 0:
                f.readline()
                break
            buf += f.read(size)
            f.readline()
        else:
            more = f.read()
            buf += more
            if not more:
                break
        while b"\n\n" in buf:
            ev, buf = buf.split(b"\n\n", 1)
            line = ev.decode()
            framing_ok &= line.startswith("data: ") and "\n" not in line
            events.append(line[6:])
            if close_after is not None and len(events) >= close_after:
                sock.close()
                return status, headers, events, framing_ok
    sock.close()
    return status, headers, events, framing_ok and buf == b""


def stream_texts(events, choices):
    texts = ["" for _ in range(choices)]
    finish = [None] * choices
    for e in events:
        if e == "[DONE]":
            continue
        for ch in json.loads(e)["choices"]:
            texts[ch["index"]] += ch["text"]
            if ch["finish_reason"] is not None:
                finish[ch["index"]] = ch["finish_reason"]
    return texts, finish


with Server(MODEL) as s:
    def comp(body, want=200, what=""):
        st, _, b = s.post("/v1/completions", body)
        c.check(st == want, f"{what or body}: status {st}: {b}")
        return b

    # Greedy = the offline engine, token-id prompts of several lengths, in one request.
    base = {"max_tokens": 12, "temperature": 0, "ignore_eos": True}
    off = offline([dict(base, prompt_token_ids=p) for p in PROMPTS])
    b = comp(dict(base, prompt=PROMPTS))
    if off and "choices" in b:
        c.check(len(b["choices"]) == len(PROMPTS), "one choice per prompt")
        for i, ch in enumerate(b["choices"]):
            c.check(ch["text"] == off[i]["text"], f"prompt {i}: served {ch['text']!r} vs offline "
                                                   f"{off[i]['text']!r}")
            c.check(ch["finish_reason"] == "length", "finish_reason length")
        u = b["usage"]
        c.check(u["prompt_tokens"] == sum(map(len, PROMPTS)), f"usage prompt tokens {u}")
        c.check(u["completion_tokens"] == 12 * len(PROMPTS), f"usage completion tokens {u}")
        c.check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], "total")
        c.check(b["object"] == "text_completion" and b["id"].startswith("cmpl-"), "shape")
        c.check(isinstance(b.get("system_fingerprint"), str), "system_fingerprint")

    # Streaming gives the same text as non-streaming (n = 2, seeded sampling, stop strings).
    greedy = comp({"prompt": PROMPTS[3], "max_tokens": 24, "temperature": 0, "ignore_eos": True})
    gtext = greedy["choices"][0]["text"]
    stop = gtext[6:9] if len(gtext) > 9 else "zzz"
    body = {"prompt": PROMPTS[3], "max_tokens": 24, "temperature": 0.9, "seed": 11, "n": 2,
            "stop": [stop, "\u00e9t\u00e9"], "ignore_eos": True}
    ns = comp(body)
    status, hdrs, events, framing = sse(s, dict(body, stream=True,
                                                 stream_options={"include_usage": True}))
    c.check(status.startswith("HTTP/1.1 200"), f"stream status {status}")
    c.check(hdrs.get("content-type", "").startswith("text/event-stream"), f"content type {hdrs}")
    c.check(framing, "SSE framing: every event one 'data: ' line ended by a blank line")
    c.check(events and events[-1] == "[DONE]", "stream ends with [DONE]")
    usage = json.loads(events[-2]) if len(events) >= 2 else {}
    c.check(usage.get("choices") == [] and usage.get("usage", {}).get("completion_tokens", 0) > 0,
            f"usage chunk {usage}")
    texts, finish = stream_texts(events, 2)
    for i in range(2):
        c.check(texts[i] == ns["choices"][i]["text"],
                f"choice {i}: stream {texts[i]!r} vs {ns['choices'][i]['text']!r}")
        c.check(finish[i] == ns["choices"][i]["finish_reason"], f"finish {finish[i]}")
    _, _, events2, _ = sse(s, dict(body, stream=True))
    c.check(all("usage" not in json.loads(e) for e in events2 if e != "[DONE]"),
            "no usage chunk unless asked")

    # A check per field.
    p = PROMPTS[2]

    def text(**kw):
        b = comp(dict({"prompt": p, "max_tokens": 10, "temperature": 0, "ignore_eos": True}, **kw))
        return b["choices"][0]["text"] if "choices" in b else None, b

    g, _ = text()
    t, b = text(max_tokens=4)
    c.check(b["usage"]["completion_tokens"] == 4, "max_tokens")
    c.check(text(temperature=1.0, seed=1)[0] == text(temperature=1.0, seed=1)[0], "seed repeats")
    c.check(len({text(temperature=1.5, seed=k)[0] for k in range(5)}) > 1, "temperature samples")
    c.check(text(temperature=1.0, top_k=1, seed=3)[0] == g, "top_k 1 = greedy")
    c.check(text(temperature=1.0, top_p=1e-6, seed=3)[0] == g, "top_p tiny = greedy")
    c.check(text(temperature=1.0, min_p=1.0, seed=3)[0] == g, "min_p 1 = greedy")
    c.check(text(repetition_penalty=5.0)[0] != g, "repetition_penalty changes the output")
    c.check(text(frequency_penalty=2.0, max_tokens=30)[0] != text(max_tokens=30)[0],
            "frequency_penalty")
    c.check(text(presence_penalty=2.0, max_tokens=30)[0] != text(max_tokens=30)[0],
            "presence_penalty")
    t, b = text(logit_bias={"4000": 100}, logprobs=0, max_tokens=3)
    toks = b["choices"][0]["logprobs"]["tokens"]
    c.check(len(toks) == 3 and len(set(toks)) == 1, f"logit_bias forces one token: {toks}")
    _, b = text(logprobs=2, max_tokens=5)
    lp = b["choices"][0]["logprobs"]
    c.check(len(lp["tokens"]) == 5 and len(lp["token_logprobs"]) == 5 and
            all(1 <= len(d) <= 3 for d in lp["top_logprobs"]) and lp["text_offset"][0] == 0,
            f"logprobs shape {lp}")
    c.check(all(v <= 0 for v in lp["token_logprobs"]), "logprobs <= 0")
    _, b = text(n=3, temperature=1.0, seed=5)
    c.check([ch["index"] for ch in b["choices"]] == [0, 1, 2], "n = 3 choices")
    cut = g[3:6]
    t, b = text(stop=[cut])
    c.check(t == g[:g.find(cut)] and b["choices"][0]["finish_reason"] == "stop" and
            b["choices"][0]["stop_reason"] == cut, f"stop string: {t!r} stop {cut!r} in {g!r}")
    t, _ = text(stop=[cut], include_stop_str_in_output=True)
    c.check(t == g[:g.find(cut) + len(cut)], "include_stop_str_in_output")
    _, b = text(logprobs=0)
    first_ids = b["choices"][0]["logprobs"]["tokens"]
    off1 = offline([{"prompt_token_ids": p, "max_tokens": 10, "temperature": 0,
                     "ignore_eos": True}])
    ids = off1[0]["token_ids"] if off1 else [0, 0, 0]
    _, b = text(stop_token_ids=[ids[2]])
    ch = b["choices"][0]
    c.check(ch["finish_reason"] == "stop" and ch["stop_reason"] == ids[2] and
            b["usage"]["completion_tokens"] == 3, f"stop_token_ids: {ch} {b['usage']}")
    _, b = text(stop_token_ids=[ids[0]], min_tokens=4)
    c.check(b["usage"]["completion_tokens"] >= 4, f"min_tokens {b['usage']}")
    eos = EXPECTED["eos"]
    b = comp({"prompt": eos["prompt"], "max_tokens": 20, "temperature": 0})
    c.check(b["choices"][0]["finish_reason"] == "stop" and
            b["usage"]["completion_tokens"] == len(eos["tokens"]), f"eos stops: {b}")
    b = comp({"prompt": eos["prompt"], "max_tokens": 20, "temperature": 0, "ignore_eos": True})
    c.check(b["choices"][0]["finish_reason"] == "length" and b["usage"]["completion_tokens"] == 20,
            "ignore_eos")
    t1, _ = text(logit_bias={"0": 100}, max_tokens=2, skip_special_tokens=False)
    t2, _ = text(logit_bias={"0": 100}, max_tokens=2)
    c.check(t1 == "<|endoftext|><|endoftext|>" and t2 == "", f"skip_special_tokens {t1!r} {t2!r}")
    _, b = text(prompt_logprobs=1)
    pl = b["choices"][0].get("prompt_logprobs")
    c.check(isinstance(pl, list) and len(pl) == len(p) and pl[0] is None and
            all(isinstance(d, dict) and 1 <= len(d) <= 2 for d in pl[1:]), f"prompt_logprobs {pl}")
    b = comp({"prompt": "hello world", "max_tokens": 3, "temperature": 0, "echo": True,
              "logprobs": 1})
    ch = b["choices"][0]
    c.check(ch["text"].startswith("hello world"), f"echo: {ch['text']!r}")
    c.check(ch["logprobs"]["token_logprobs"][0] is None and
            len(ch["logprobs"]["tokens"]) == b["usage"]["prompt_tokens"] + 3, "echo logprobs")
    comp({"prompt": "hello", "max_tokens": 2, "user": "e2e-user-42"})
    time.sleep(0.2)
    c.check(s.logged("e2e-user-42"), "user recorded in the server log")
    b = comp({"prompt": "hello", "max_tokens": 2, "best_of": 2, "n": 2, "temperature": 1})
    c.check(len(b.get("choices", [])) == 2, "best_of == n accepted")
    b = comp({"prompt": "hello", "max_tokens": 2, "model": "model"})
    c.check("choices" in b, "model field naming the served model")

    # Errors: 400/404 JSON naming the problem; nothing generated.
    for body, want, needle in [
        ({"prompt": "x", "suffix": "y"}, 400, "suffix"),
        ({"prompt": "x", "best_of": 3}, 400, "best_of"),
        ({"prompt": "x", "frobnicate": 1}, 400, "frobnicate"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, 400, "stream_options"),
        ({"prompt": "x", "stream": True, "stream_options": {"x": 1}}, 400, "x"),
        ({"prompt": "x", "temperature": "hot"}, 400, "temperature"),
        ({"prompt": "x", "temperature": -1}, 400, "temperature"),
        ({"prompt": "x", "top_p": 0}, 400, "top_p"),
        ({"prompt": "x", "n": 0}, 400, "n must"),
        ({"prompt": "x", "logprobs": 50}, 400, "logprobs"),
        ({"prompt": "x", "logit_bias": {"abc": 1}}, 400, "logit_bias"),
        ({"prompt": []}, 400, "prompt"),
        ({"prompt": [1, "a"]}, 400, "prompt"),
        ({"prompt": [5, 99999999]}, 400, "99999999"),
        ({"max_tokens": 3}, 400, "prompt"),
        ({"prompt": "x", "max_tokens": 100000}, 400, "512"),
        ({"prompt": "x", "model": "other"}, 404, "other"),
        ({"prompt": "x", "user": "u" * 300}, 400, "user"),
    ]:
        st, _, b = s.post("/v1/completions", body)
        c.error_shape(st, b, want, f"{body}")
        c.check(needle in json.dumps(b), f"{body}: error names {needle!r}: {b}")
    st, _, b = s.post("/v1/completions", "{not json")
    c.error_shape(st, b, 400, "malformed JSON")
    st, _, b = s.post("/v1/rerank", {"query": "a", "documents": ["b"]})
    c.error_shape(st, b, 400, "scoring route on a generation model")
    st, _, b = s.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}]})
    c.check(st == 400 and "chat template" in json.dumps(b),
            f"chat without a template (the fixture has none; tests/e2e/test_chat.py): {st} {b}")
    st, _, b = s.get("/v1/models")
    c.check(st == 200 and b["data"][0]["id"] == "model" and b["data"][0]["task"] == "generate",
            f"/v1/models {b}")

    # vLLM /tokenize and /detokenize on a generation model.
    st, _, b = s.post("/tokenize", {"prompt": "hello world", "return_token_strs": True})
    c.check(st == 200 and b["count"] == len(b["tokens"]) == len(b["token_strs"]) > 0 and
            b["max_model_len"] == 512, f"/tokenize {b}")
    if st == 200:
        st2, _, d = s.post("/detokenize", {"tokens": b["tokens"]})
        c.check(st2 == 200 and d["prompt"] == "hello world", f"/detokenize {d}")
        e = comp({"prompt": b["tokens"], "max_tokens": 1, "echo": True})
        c.check(e["usage"]["prompt_tokens"] == b["count"], "same tokens as completions")
    for body, needle in [({"prompt": "x", "foo": 1}, "foo"), ({}, "prompt"),
                         ({"messages": [{"role": "user", "content": "x"}]}, "chat template"),
                         ({"prompt": "x", "model": "nope"}, "nope")]:
        st, _, b = s.post("/tokenize", body)
        c.check(st in (400, 404) and needle in json.dumps(b), f"/tokenize {body}: {st} {b}")
    st, _, b = s.post("/detokenize", {"tokens": [1, 10 ** 9]})
    c.check(st == 400 and "tokens" in json.dumps(b), f"/detokenize out of range: {b}")

    # A client that goes away mid-stream: its request is cancelled and its blocks freed.
    before = s.metrics()
    key_abort = 'sluice_request_success_total{model="model",version="1",finished_reason="abort"}'
    status, _, events, _ = sse(s, {"prompt": PROMPTS[5], "max_tokens": 480, "temperature": 0,
                                   "ignore_eos": True, "stream": True}, close_after=1)
    c.check(status.startswith("HTTP/1.1 200") and len(events) == 1, "stream started")
    deadline = time.time() + 10
    m = {}
    while time.time() < deadline:
        m = s.metrics()
        if m.get(key_abort, 0) > before.get(key_abort, 0) and \
                m.get('sluice_kv_cache_blocks_in_use{model="model",version="1"}', 1) == 0:
            break
        time.sleep(0.05)
    c.check(m.get(key_abort, 0) == before.get(key_abort, 0) + 1, f"aborted once: {m.get(key_abort)}")
    c.check(m.get('sluice_kv_cache_blocks_in_use{model="model",version="1"}') == 0, "blocks freed")
    c.check(m.get('sluice_requests_cancelled_total{model="model",version="1"}', 0) >=
            before.get('sluice_requests_cancelled_total{model="model",version="1"}', 0) + 1, "cancel counted")
    gen_after = m.get('sluice_generation_tokens_total{model="model",version="1"}', 0)
    time.sleep(0.3)
    c.check(s.metrics().get('sluice_generation_tokens_total{model="model",version="1"}') == gen_after,
            "no tokens generated after the disconnect")

    # Mixed concurrent load (16 clients, streaming and not): all succeed, nothing left over.
    errors = []

    def client(k):
        for j in range(6):
            body = {"prompt": PROMPTS[(k + j) % len(PROMPTS)], "max_tokens": 8 + j,
                    "temperature": 0.7, "seed": k * 100 + j, "ignore_eos": True}
            try:
                if (k + j) % 2:
                    st, _, ev, fr = sse(s, dict(body, stream=True))
                    if not st.startswith("HTTP/1.1 200") or ev[-1] != "[DONE]" or not fr:
                        errors.append((st, ev[-1:]))
                else:
                    st, _, b = s.post("/v1/completions", body)
                    if st != 200 or b["usage"]["completion_tokens"] != 8 + j:
                        errors.append((st, b))
            except Exception as e:  # noqa: BLE001
                errors.append(repr(e))

    threads = [threading.Thread(target=client, args=(k,)) for k in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    c.check(not errors, f"concurrent load errors: {errors[:3]}")
    # The engine publishes its counters after each step: give the last step a moment.
    for _ in range(100):
        m = s.metrics()
        if m.get('sluice_kv_cache_blocks_in_use{model="model",version="1"}') == 0 and \
                m.get('sluice_num_requests{model="model",version="1"}') == 0:
            break
        time.sleep(0.05)
    c.check(m.get('sluice_kv_cache_blocks_in_use{model="model",version="1"}') == 0, "no blocks left")
    c.check(m.get('sluice_num_requests{model="model",version="1"}') == 0, "no requests left")
    for h in ["time_to_first_token_seconds", "inter_token_latency_seconds",
              "e2e_request_latency_seconds", "request_queue_time_seconds",
              "request_prefill_time_seconds", "request_decode_time_seconds",
              "request_prompt_tokens", "request_generation_tokens"]:
        c.check(m.get(f'sluice_{h}_count{{model="model",version="1"}}', 0) > 50, f"histogram {h} observed")

    # sluice bench for generation: streamed requests, TTFT and inter-token latency.
    r = subprocess.run([args.sluice, "bench", "--port", str(s.port), "--endpoint",
                        "/v1/completions", "--concurrency", "4", "--requests", "12",
                        "--prompt-tokens", "8:24", "--output-tokens", "10", "--vocab", "5000"],
                       capture_output=True, text=True, timeout=120)
    c.check(r.returncode == 0 and "12 ok, 12 total" in r.stdout and "errors: none" in r.stdout
            and "TTFT: p50" in r.stdout and "inter-token latency: p50" in r.stdout,
            f"sluice bench /v1/completions: {r.stdout} {r.stderr[-300:]}")
    m = re.search(r"([\d.]+) output tokens/s", r.stdout)
    c.check(m is not None and float(m.group(1)) > 0, "bench reports output tokens/s")

# Scoring-only flags on a generation model are refused by name.
r = subprocess.run([args.sluice, "serve", "--model", MODEL, "--port", "0", "--truncate"],
                   capture_output=True, text=True, timeout=60)
c.check(r.returncode != 0 and "--truncate" in r.stderr, f"--truncate refused: {r.stderr[-300:]}")
c.finish("e2e_completions")
