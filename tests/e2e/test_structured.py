"""Structured outputs on the embedded demo chat model (models/demo-chat): hundreds of random
(temperature 1) constrained generations over chat and completions, every one that ends with
"stop" validated by an independent validator (python3-jsonschema) or checked against its
regex / choice / grammar; streaming gives the same text as non-streaming for the same seed;
several constraints or an unsupported feature are 400 naming the field and the feature; chat
tool calls under tool_choice "required" / a named function / strict tools parse and their
arguments validate against the function's schema."""
import json
import os
import re
import threading

import jsonschema

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
MODEL = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "models",
                                     "demo-chat"))
MSGS = [{"role": "user", "content": "Where do salmon swim?"}]

SCHEMAS = [
    {"type": "object",
     "properties": {"animal": {"type": "string", "maxLength": 12},
                    "place": {"enum": ["river", "lake", "meadow", "forest"]},
                    "count": {"type": "integer", "minimum": 1, "maximum": 50}},
     "required": ["animal", "place"], "additionalProperties": False},
    {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,8}$"},
     "minItems": 1, "maxItems": 4},
    {"type": "object",
     "properties": {"when": {"type": "string", "format": "date"},
                    "score": {"type": "number", "exclusiveMinimum": 0, "maximum": 10},
                    "ok": {"type": "boolean"},
                    "note": {"anyOf": [{"type": "null"}, {"type": "string", "maxLength": 6}]}},
     "required": ["when", "score", "ok", "note"], "additionalProperties": False},
    {"$defs": {"pet": {"type": "object", "properties": {"name": {"type": "string", "minLength": 1,
                                                                 "maxLength": 8},
                                                        "legs": {"enum": [2, 4]}},
                       "required": ["name", "legs"], "additionalProperties": False}},
     "type": "object", "properties": {"pets": {"type": "array", "items": {"$ref": "#/$defs/pet"},
                                               "maxItems": 3}},
     "required": ["pets"], "additionalProperties": False},
    {"oneOf": [{"type": "integer", "minimum": 0, "maximum": 999},
               {"type": "string", "enum": ["many", "few"]}]},
]

results = []
lock = threading.Lock()


def run(s, route, body):
    st, _, b = s.post(route, body)
    with lock:
        results.append((route, body, st, b))


with Server(MODEL, "--max-model-len", "512") as s:
    jobs = []
    for i, schema in enumerate(SCHEMAS):
        for seed in range(13):
            if seed % 2:
                body = {"messages": MSGS, "n": 8, "seed": 1000 * i + seed, "temperature": 1.0,
                        "max_tokens": 160,
                        "response_format": {"type": "json_schema",
                                            "json_schema": {"name": f"s{i}", "schema": schema,
                                                            "strict": True}}}
                jobs.append(("/v1/chat/completions", body))
            else:
                body = {"prompt": "Salmon swim", "n": 8, "seed": 1000 * i + seed,
                        "temperature": 1.0, "max_tokens": 160, "guided_json": schema}
                jobs.append(("/v1/completions", body))
    threads = [threading.Thread(target=run, args=(s, r, b)) for r, b in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    outputs = stopped = 0
    for route, body, st, b in results:
        c.check(st == 200, f"{route}: status {st}: {b}")
        if st != 200:
            continue
        schema = body.get("guided_json") or body["response_format"]["json_schema"]["schema"]
        for ch in b["choices"]:
            outputs += 1
            text = ch["message"]["content"] if "message" in ch else ch["text"]
            if ch["finish_reason"] != "stop":
                c.check(ch["finish_reason"] == "length", f"finish_reason {ch['finish_reason']}")
                continue
            stopped += 1
            try:
                value = json.loads(text)
                jsonschema.validate(value, schema,
                                    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
            except Exception as e:  # noqa: BLE001 - any failure is a failed check
                c.check(False, f"output does not validate: {text!r}: {e}")
    print(f"{outputs} constrained JSON outputs, {stopped} ended by the constraint", flush=True)
    c.check(outputs >= 500, f"{outputs} outputs, want >= 500")
    c.check(stopped >= 0.9 * outputs, f"only {stopped} of {outputs} ended with stop")

    # Regex, choice, grammar, json_object (structured_outputs and guided_* spellings).
    checks = [
        ({"structured_outputs": {"regex": "(salmon|owls) (swim|hunt) [0-9]{1,2}"}},
         lambda t: re.fullmatch(r"(salmon|owls) (swim|hunt) [0-9]{1,2}", t)),
        ({"guided_choice": ["river", "lake", "the sea"]}, lambda t: t in ("river", "lake", "the sea")),
        ({"guided_grammar": 'root ::= "SELECT " col (", " col)? " FROM " tbl\n'
                            'col ::= [a-z]{1,6}\ntbl ::= "animals" | "places"\n'},
         lambda t: re.fullmatch(r"SELECT [a-z]{1,6}(, [a-z]{1,6})? FROM (animals|places)", t)),
        ({"response_format": {"type": "json_object"}, "max_tokens": 200},
         lambda t: isinstance(json.loads(t), dict)),
        ({"structured_outputs": {"json": {"type": "object", "properties": {"a": {"type": "integer"}},
                                          "required": ["a"], "additionalProperties": False},
                                 "whitespace_pattern": "[ ]?"}},
         lambda t: json.loads(t).keys() == {"a"}),
    ]
    for extra, ok in checks:
        for seed in range(3):
            body = dict({"prompt": "Owls", "n": 4, "seed": seed, "temperature": 1.0,
                         "max_tokens": 60}, **extra)
            st, _, b = s.post("/v1/completions", body)
            c.check(st == 200, f"{extra}: {st} {b}")
            if st != 200:
                continue
            for ch in b["choices"]:
                if ch["finish_reason"] == "stop":
                    try:
                        good = ok(ch["text"])
                    except Exception:  # noqa: BLE001
                        good = False
                    c.check(bool(good), f"{extra}: {ch['text']!r}")

    # Streaming: the same text as non-streaming for the same seed.
    for extra in [{"guided_json": SCHEMAS[0]}, {"guided_regex": "[a-z]{2,5} [0-9]{2}"}]:
        body = dict({"messages": MSGS, "seed": 7, "temperature": 1.0, "max_tokens": 80}, **extra)
        st, _, b = s.post("/v1/chat/completions", body)
        want = b["choices"][0]["message"]["content"]
        conn = s.conn()
        conn.request("POST", "/v1/chat/completions", body=json.dumps(dict(body, stream=True)),
                     headers={"Content-Type": "application/json"})
        data = conn.getresponse().read().decode()
        conn.close()
        got = ""
        for line in data.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                for ch in json.loads(line[6:]).get("choices", []):
                    got += ch.get("delta", {}).get("content") or ""
        c.check(got == want, f"stream {got!r} vs {want!r}")

    # Errors: 400 naming the field and the feature.
    for body, needle in [
        ({"prompt": "x", "guided_json": {}, "guided_regex": "a"}, "several structured-output"),
        ({"prompt": "x", "guided_json": {"type": "object", "properties": {"a": {"not": {}}}}},
         "guided_json: json_schema: /properties/a/not: keyword \"not\" is not supported"),
        ({"prompt": "x", "guided_json": {"type": "string", "format": "hostname"}}, "hostname"),
        ({"prompt": "x", "guided_regex": "(a)\\1"}, "backreference"),
        ({"prompt": "x", "guided_grammar": "root ::= root \"x\" | \"x\"\n"}, "left recursion"),
        ({"prompt": "x", "guided_json": {}, "min_tokens": 2}, "min_tokens"),
        ({"prompt": "x", "response_format": {"type": "yaml"}}, "response_format.type"),
    ]:
        st, _, b = s.post("/v1/completions", body)
        c.error_shape(st, b, 400, f"{body}")
        c.check(needle in json.dumps(b).replace('\\"', '"'), f"{body}: names {needle!r}: {b}")

    # Tool calls: the demo model knows nothing of tools; the constraint alone makes its output a
    # tool call the chat parser reads, with arguments valid under the function's schema.
    weather = {"type": "object",
               "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 10},
                              "unit": {"enum": ["celsius", "fahrenheit"]},
                              "days": {"type": "integer", "minimum": 1, "maximum": 7}},
               "required": ["city", "unit"], "additionalProperties": False}
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": weather,
                                               "strict": True}},
             {"type": "function", "function": {"name": "get_time"}}]
    schemas = {"get_weather": weather,
               "get_time": {"type": "object", "additionalProperties": False}}
    calls = {}
    for choice in ({"type": "function", "function": {"name": "get_weather"}}, "required"):
        for seed in range(6):
            body = {"messages": MSGS, "tools": tools, "tool_choice": choice, "n": 4,
                    "seed": seed, "temperature": 1.0, "max_tokens": 300}
            st, _, b = s.post("/v1/chat/completions", body)
            c.check(st == 200, f"tool_choice {choice}: {st} {b}")
            if st != 200:
                continue
            for ch in b["choices"]:
                if ch["finish_reason"] == "length":
                    continue
                msg = ch["message"]
                c.check(ch["finish_reason"] == "tool_calls" and msg["tool_calls"]
                        and msg["content"] is None, f"tool_choice {choice}: {ch}")
                for tc in msg.get("tool_calls") or []:
                    name = tc["function"]["name"]
                    if isinstance(choice, dict):
                        c.check(name == "get_weather", f"named: {name}")
                    calls[name] = calls.get(name, 0) + 1
                    try:
                        jsonschema.validate(json.loads(tc["function"]["arguments"]), schemas[name])
                    except Exception as e:  # noqa: BLE001
                        c.check(False, f"{name} arguments do not validate: {tc}: {e}")
    print(f"tool calls: {calls}", flush=True)
    c.check(calls.get("get_weather", 0) >= 10, f"tool calls made: {calls}")
    # Streaming gives the same call.
    body = {"messages": MSGS, "tools": tools, "seed": 3, "temperature": 1.0, "max_tokens": 300,
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}}
    st, _, b = s.post("/v1/chat/completions", body)
    conn = s.conn()
    conn.request("POST", "/v1/chat/completions", body=json.dumps(dict(body, stream=True)),
                 headers={"Content-Type": "application/json"})
    data = conn.getresponse().read().decode()
    conn.close()
    streamed = [tc for line in data.splitlines()
                if line.startswith("data: ") and line != "data: [DONE]"
                for ch in json.loads(line[6:]).get("choices", [])
                for tc in ch.get("delta", {}).get("tool_calls") or []]
    want = b["choices"][0]["message"].get("tool_calls") or []
    c.check(len(streamed) == len(want) and all(
        x["function"]["arguments"] == y["function"]["arguments"] for x, y in zip(streamed, want)),
        f"streamed tool calls {streamed} vs {want}")
    # strict under auto: text, or calls whose strict arguments validate.
    texts = ended = 0
    for seed in range(6):
        body = {"messages": MSGS, "tools": tools, "n": 4, "seed": seed, "temperature": 1.0,
                "max_tokens": 300}
        st, _, b = s.post("/v1/chat/completions", body)
        c.check(st == 200, f"strict auto: {st} {b}")
        for ch in b.get("choices", []):
            if ch["finish_reason"] == "length":
                continue
            ended += 1
            for tc in ch["message"].get("tool_calls") or []:
                if tc["function"]["name"] == "get_weather":
                    try:
                        jsonschema.validate(json.loads(tc["function"]["arguments"]), weather)
                    except Exception as e:  # noqa: BLE001
                        c.check(False, f"strict auto arguments do not validate: {tc}: {e}")
            if "<tool_call>" not in (ch["message"]["content"] or ""):
                texts += 1
            else:
                c.check(False, f"strict auto: a broken call left in the content: {ch}")
    c.check(ended > 0 and texts == ended,
            f"strict auto: every choice is text or parsed calls ({texts} of {ended})")
    for body, needle in [
        ({"messages": MSGS, "tools": tools, "tool_choice": "required",
          "response_format": {"type": "json_object"}}, "tool_choice, response_format"),
        ({"messages": MSGS, "tool_choice": "required"}, "needs"),
        ({"messages": MSGS, "tools": tools,
          "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
        ({"messages": MSGS, "tools": [{"type": "function", "function": {
            "name": "f", "strict": True, "parameters": {"type": "object", "properties": {
                "a": {"not": {}}}}}}]}, "tools[0].function.parameters"),
    ]:
        st, _, b = s.post("/v1/chat/completions", body)
        c.error_shape(st, b, 400, f"{body}")
        c.check(needle in json.dumps(b).replace('\\"', '"'), f"{body}: names {needle!r}: {b}")

c.finish("e2e_structured")
