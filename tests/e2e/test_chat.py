"""OpenAI /v1/chat/completions on the qwen3 generation fixture with the Qwen3-style chat
template of tests/fixtures/chat_templates (--chat-template): greedy output equals the
offline engine on the rendered prompt, streaming equals non-streaming, template fields
(chat_template, chat_template_kwargs, add_generation_prompt, tools) change the prompt,
reasoning parsing in the served path, logprobs, errors naming the field or template line,
/tokenize with messages, sluice chat-template."""
import json
import os
import subprocess
import tempfile

import harness
from harness import Server

args = harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(args.fixtures, "generation", "qwen3", "model"))
TEMPLATES = json.load(open(os.path.join(args.fixtures, "chat_templates", "cases.json")))["templates"]
tmp = tempfile.TemporaryDirectory()
TEMPLATE = os.path.join(tmp.name, "qwen3.jinja")
open(TEMPLATE, "w").write(TEMPLATES["qwen3"])
MSGS = [{"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello world"}]


def offline(ids, n):
    inp, out = os.path.join(tmp.name, "in.jsonl"), os.path.join(tmp.name, "out.jsonl")
    with open(inp, "w") as f:
        f.write(json.dumps({"prompt_token_ids": ids, "max_tokens": n, "temperature": 0,
                            "ignore_eos": True}) + "\n")
    r = subprocess.run([args.sluice, "generate", "--model", MODEL, "--input", inp, "--output",
                        out, "--threads", "1"], capture_output=True, text=True)
    c.check(r.returncode == 0, "offline: " + r.stderr[-300:])
    return json.loads(open(out).readline()) if r.returncode == 0 else {}


def sse_chat(s, body):
    conn = s.conn()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(body),
                 headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read().decode()
    conn.close()
    events = [e[6:] for e in data.split("\n\n") if e.startswith("data: ")]
    return r.status, events


with Server(MODEL, "--chat-template", TEMPLATE) as s:
    def chat(body, want=200):
        st, _, b = s.post("/v1/chat/completions", body)
        c.check(st == want, f"{body}: {st} {b}")
        return b

    # The rendered prompt (/tokenize with messages) through the offline engine = the chat.
    st, _, tok = s.post("/tokenize", {"messages": MSGS})
    c.check(st == 200 and tok["count"] > 5, f"/tokenize messages {tok}")
    b = chat({"messages": MSGS, "max_completion_tokens": 12, "temperature": 0,
              "ignore_eos": True})
    off = offline(tok["tokens"], 12)
    msg = b["choices"][0]["message"]
    c.check(b["object"] == "chat.completion" and b["id"].startswith("chatcmpl-"), "shape")
    c.check(msg["role"] == "assistant" and (msg["content"] or "") == off.get("text", "").strip()
            or msg["content"] == off.get("text"), f"chat {msg} vs offline {off.get('text')!r}")
    c.check(b["usage"]["prompt_tokens"] == tok["count"] and
            b["usage"]["completion_tokens"] == 12, f"usage {b['usage']}")
    # Streaming = non-streaming.
    st, events = sse_chat(s, {"messages": MSGS, "max_completion_tokens": 12, "temperature": 0,
                              "ignore_eos": True, "stream": True,
                              "stream_options": {"include_usage": True}})
    chunks = [json.loads(e) for e in events if e != "[DONE]"]
    c.check(st == 200 and events[-1] == "[DONE]", "stream ends with [DONE]")
    c.check(chunks and chunks[0]["choices"][0]["delta"].get("role") == "assistant",
            "first chunk has the role")
    content = "".join(ch["choices"][0]["delta"].get("content", "") for ch in chunks
                      if ch["choices"])
    c.check(content == (msg["content"] or ""), f"stream {content!r} vs {msg['content']!r}")
    c.check(chunks[-1]["usage"]["completion_tokens"] == 12, "usage chunk")
    # Template fields change the prompt.
    def count(body):
        st, _, t = s.post("/tokenize", body)
        c.check(st == 200, f"/tokenize {body}: {t}")
        return t.get("tokens", [])
    base = count({"messages": MSGS})
    c.check(count({"messages": MSGS, "add_generation_prompt": False}) != base,
            "add_generation_prompt")
    c.check(count({"messages": MSGS, "chat_template_kwargs": {"enable_thinking": False}}) != base,
            "chat_template_kwargs.enable_thinking")
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {
        "type": "object", "properties": {"city": {"type": "string"}}}}}]
    c.check(len(count({"messages": MSGS, "tools": tools})) > len(base), "tools rendered")
    c.check(count({"messages": MSGS, "tools": tools, "tool_choice": "none"}) == base,
            "tool_choice none leaves tools out")
    own = count({"messages": MSGS, "chat_template": "{% for m in messages %}{{ m.content }}"
                 "{% endfor %}"})
    st, _, plain = s.post("/tokenize", {"prompt": "You are terse.hello world",
                                        "add_special_tokens": False})
    c.check(own == plain["tokens"], "per-request chat_template")
    cont = count({"messages": MSGS + [{"role": "assistant", "content": "Sure"}],
                  "add_generation_prompt": False, "continue_final_message": True})
    c.check(len(cont) > len(base), "continue_final_message")
    # Reasoning in the served path: force <think> (id 6000) first.
    b = chat({"messages": MSGS, "max_completion_tokens": 3, "temperature": 0,
              "logit_bias": {"6000": 100}, "ignore_eos": True})
    m = b["choices"][0]["message"]
    c.check(isinstance(m.get("reasoning_content"), str) and m["content"] is None,
            f"reasoning_content: {m}")
    # Logprobs.
    b = chat({"messages": MSGS, "max_completion_tokens": 4, "temperature": 0, "logprobs": True,
              "top_logprobs": 2, "ignore_eos": True})
    lp = b["choices"][0]["logprobs"]["content"]
    c.check(len(lp) == 4 and all(len(e["top_logprobs"]) == 2 and e["logprob"] <= 0 and
                                 isinstance(e["bytes"], list) for e in lp), f"logprobs {lp}")
    b = chat({"messages": MSGS, "max_completion_tokens": 4, "n": 2, "temperature": 1,
              "seed": 1})
    c.check(len(b["choices"]) == 2, "n = 2")
    b = chat({"messages": MSGS, "max_tokens": 3, "ignore_eos": True,
              "response_format": {"type": "text"}, "parallel_tool_calls": True,
              "user": "chat-user-7"})
    c.check(b["usage"]["completion_tokens"] == 3, "max_tokens (deprecated name)")
    c.check(s.logged("chat-user-7"), "user recorded in the server log")
    st, _, b = s.post("/v1/chat/completions", {"messages": MSGS, "parallel_tool_calls": False})
    c.check(st == 400 and "parallel_tool_calls" in json.dumps(b), f"parallel_tool_calls {b}")
    # Errors.
    for body, want, needle in [
        ({"messages": [{"role": "bot", "content": "x"}]}, 400, "role"),
        ({"messages": [{"role": "tool", "content": "x"}]}, 400, "tool_call_id"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                     "image_url": {"url": "x"}}]}]}, 400,
         "image_url"),
        ({"messages": MSGS, "tool_choice": "required"}, 400, "tool_choice"),
        ({"messages": MSGS, "response_format": {"type": "yaml"}}, 400, "response_format.type"),
        ({"messages": MSGS, "frobnicate": True}, 400, "frobnicate"),
        ({"messages": MSGS, "chat_template": "line one\n{{ raise_exception('boom') }}"}, 400,
         "boom"),
        ({"messages": MSGS, "chat_template": "{% if %}"}, 400, "line 1"),
        ({"messages": MSGS, "model": "other"}, 404, "other"),
        ({"messages": MSGS, "max_completion_tokens": 100000}, 400, "512"),
    ]:
        st, _, b = s.post("/v1/chat/completions", body)
        c.error_shape(st, b, want, f"{body}")
        c.check(needle in json.dumps(b), f"{body}: names {needle!r}: {b}")

# sluice chat-template prints the rendering.
mfile = os.path.join(tmp.name, "messages.json")
json.dump({"messages": MSGS, "add_generation_prompt": True}, open(mfile, "w"))
r = subprocess.run([args.sluice, "chat-template", "--model", MODEL, "--chat-template", TEMPLATE,
                    "--messages", mfile], capture_output=True, text=True)
c.check(r.returncode == 0 and "<|im_start|>user\nhello world<|im_end|>" in r.stdout and
        r.stdout.rstrip("\n").endswith("<|im_start|>assistant"), f"chat-template: {r.stdout!r} "
                                                                  f"{r.stderr[-300:]}")
r = subprocess.run([args.sluice, "chat-template", "--model", MODEL, "--messages", mfile],
                   capture_output=True, text=True)
c.check(r.returncode != 0 and "chat template" in r.stderr, f"no template: {r.stderr[-200:]}")
c.finish("e2e_chat")
