"""The embedded demo chat model (models/demo-chat, trained by scripts/train_demo_chat.py):
the README's chat examples answer exactly what the model was trained to answer (greedy, the
defaults of its generation_config.json), streaming gives the same text, the chat template
comes from its tokenizer_config.json, and /tokenize with messages shows the rendered
prompt."""
import json
import os

import harness
from harness import Server, start_fails

harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                     "demo-chat"))

GREETING = ("Hello! I am the sluice demo chat model. I know where animals and people of a "
            "small world live and work: ask me where salmon swim or what bakers do.")
# scripts/train_demo_chat.py's EXAMPLES and the README (keep the three in step).
EXAMPLES = [
    ([{"role": "user", "content": "Where do salmon swim?"}], "Salmon swim up the cold river."),
    ([{"role": "user", "content": "What do bakers do?"}],
     "Bakers bake in the warm kitchen every morning."),
    ([{"role": "user", "content": "Do bees swim?"}], "No. Bees fly over the green meadow."),
    ([{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hello"}], GREETING),
    ([{"role": "user", "content": "Where do robots swim?"}], "I do not know about robots."),
    ([{"role": "user", "content": "Where do owls hunt?"},
      {"role": "assistant", "content": "Owls hunt in the dark forest."},
      {"role": "user", "content": "When do owls hunt?"}], "Owls hunt every night."),
]


def stream_text(s, body):
    conn = s.conn()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(dict(body, stream=True)),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    events = [e[6:] for e in data.split("\n\n") if e.startswith("data: ")]
    text, finish = "", None
    for e in events:
        if e == "[DONE]":
            continue
        ch = json.loads(e)["choices"][0]
        text += ch["delta"].get("content") or ""
        finish = ch.get("finish_reason") or finish
    return r.status, text, finish, events[-1:] == ["[DONE]"]


with Server(MODEL) as s:
    log = "".join(s.log)
    c.check("chat template: tokenizer_config.json" in log, "template source logged")
    conn = s.conn()
    for msgs, want in EXAMPLES:
        st, _, r = s.post("/v1/chat/completions", {"model": "demo-chat", "messages": msgs},
                          conn=conn)
        got = r["choices"][0]["message"]["content"] if st == 200 else None
        c.check(got == want, f"{msgs[-1]['content']!r}: {got!r}, want {want!r} ({st} {r})")
        c.check(st == 200 and r["choices"][0]["finish_reason"] == "stop",
                f"finish_reason {r}")
        st2, text, finish, done = stream_text(s, {"messages": msgs})
        c.check(st2 == 200 and text == want and finish == "stop" and done,
                f"streamed {text!r} {finish} {done}")
    # The README's curl example asks for the model by name and a bounded answer.
    st, _, r = s.post("/v1/chat/completions",
                      {"model": "demo-chat", "messages": EXAMPLES[0][0], "max_tokens": 3},
                      conn=conn)
    c.check(st == 200 and r["choices"][0]["finish_reason"] == "length"
            and r["usage"]["completion_tokens"] == 3, f"max_tokens 3: {r}")
    st, _, t = s.post("/tokenize", {"messages": EXAMPLES[0][0], "add_generation_prompt": True,
                                    "return_token_strs": True}, conn=conn)
    c.check(st == 200 and t.get("token_strs", [None])[0] == "<|im_start|>"
            and t["token_strs"][-3:] == ["<|im_start|>", "assistant", "Ċ"], f"/tokenize {t}")

# Flags of one kind of model in a server of several (docs/cli.md): each model takes its kind's.
RERANKER = os.path.join(os.path.dirname(MODEL), "demo-reranker")
with Server(None, "--model", "rr=" + RERANKER, "--model", "chat=" + MODEL,
            "--kv-cache-memory", "8000000", "--max-inputs-per-request", "3") as s:
    log = "".join(s.log)
    c.check("KV cache" in log or "kv" in log.lower(), "the chat model's KV cache is logged")
    st, _, r = s.post("/v1/chat/completions", {"model": "chat", "messages": EXAMPLES[0][0]})
    c.check(st == 200 and r["choices"][0]["message"]["content"] == EXAMPLES[0][1],
            f"mixed server: chat answers {st} {r}")
    st, _, r = s.post("/v1/rerank", {"model": "rr", "query": "salmon", "documents": ["a", "b"]})
    c.check(st == 200 and len(r["results"]) == 2, f"mixed server: rerank {st} {r}")
    st, _, r = s.post("/v1/rerank", {"model": "rr", "query": "salmon",
                                     "documents": ["a", "b", "c", "d"]})
    c.check(st == 400 and "3" in json.dumps(r), f"--max-inputs-per-request 3 reaches rr: {st} {r}")


# Start-up refusals: (flags, phrases the error must contain, what the check is about).
REFUSALS = [
    (["--model", "chat=" + MODEL, "--max-inputs-per-request", "3"],
     ["--max-inputs-per-request", "scoring-model settings"],
     "one generation model refuses a scoring flag"),
    (["--model", "a=" + RERANKER, "--model", "b=" + RERANKER, "--kv-cache-memory", "8000000"],
     ["apply to generation models", "none of the start-up models"],
     "a generation flag reaching no model stops start-up"),
    (["--model", "a=" + MODEL, "--model", "b=" + MODEL, "--max-inputs-per-request", "3"],
     ["--max-inputs-per-request", "none of the start-up models"],
     "a scoring flag reaching no model stops start-up"),
    (["--model", MODEL, "--gpu-memory-utilization", "0.5"],
     ["--gpu-memory-utilization sizes the KV cache from CUDA device memory"],
     "--gpu-memory-utilization on a CPU generation model refused"),
    (["--model", "a=" + MODEL, "--model", "b=" + RERANKER, "--gpu-memory-utilization", "0.5"],
     ["--gpu-memory-utilization sizes the KV cache", "no start-up model is one"],
     "--gpu-memory-utilization reaching no CUDA generation model stops start-up"),
    (["--model", MODEL, "--gpu-memory-utilization", "2"],
     ["must be in (0, 1]"],
     "--gpu-memory-utilization out of range"),
]
for flags, phrases, what in REFUSALS:
    err = start_fails(*flags)
    c.check(all(p in err for p in phrases), f"{what}: {err[-300:]}")

c.finish("demo_chat")
