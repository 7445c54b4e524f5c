"""Plugins per model (docs/plugins.md "Plugins per model"): a repository whose models list
their plugins in model.json "plugins" (every version loads them) and sluice.json "plugins"
(a version's own, added to model.json's); IO processors and logits processors visible only
on the models that load them, with routing to the one model that has an IO processor and
errors naming the model and what it has; bad plugin entries in model.json failing that load
(400 naming the field and the file) while the old version keeps serving; unload and reload
of models with plugins; --plugin applying to the --model entries only; start-up failures
naming the file."""
import json
import os
import shutil
import subprocess
import tempfile

import harness
from harness import Server

harness.parse_args()
c = harness.Checker()
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
RERANKER = os.path.join(ROOT, "models", "demo-reranker")
CHAT = os.path.join(ROOT, "models", "demo-chat")
PLUGINS = os.path.join(os.path.dirname(os.path.abspath(harness.ARGS.sluice)), "plugins")
KW = os.path.join(PLUGINS, "keyword_rerank.so")
FSM = os.path.join(PLUGINS, "fsm_logits.so")
MINOR0 = os.path.join(PLUGINS, "test_plugin_minor0.so")

QUERY = "How do salmon swim up the river?"
DOCS = ["Traders sell shares at the busy market.",
        "Salmon swim up the cold river every spring.",
        "Fishermen sell salmon at the market in winter."]
BODY = {"query": QUERY, "documents": DOCS, "keywords": ["salmon"], "boost": 0.5}
FSM_ARGS = {"fsm": {"states": [{"allow": [11], "else": 0}]}}  # only token 11, always


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f)


def kw(s, model=None, path="/plugins/keyword_rerank"):
    body = dict(BODY)
    if model:
        body["model"] = model
    return s.post(path, body)


def served(h):
    return h.get("sluice-model"), h.get("sluice-model-version")


def msg(r):
    return r.get("error", {}).get("message", "") if isinstance(r, dict) else str(r)


def fails_to_start(args, want, what):
    p = subprocess.run([harness.ARGS.sluice, "serve", "--port", "0", "--threads", "1"] + args,
                       capture_output=True, text=True, timeout=120)
    c.check(p.returncode != 0 and all(w in p.stderr for w in want),
            f"{what}: rc {p.returncode}, stderr {p.stderr[-600:]}")


def completion(s, model, lps=True):
    body = {"model": model, "prompt": [1, 2, 3], "max_tokens": 4, "temperature": 0,
            "ignore_eos": True}
    if lps:
        body.update({"logits_processors": ["fsm"], "extra_args": FSM_ARGS})
    return s.post("/v1/completions", body)


with tempfile.TemporaryDirectory() as tmp:
    repo = os.path.join(tmp, "repo")
    # kw: versions 1 and 2, model.json lists keyword_rerank (relative to repo/kw/); version 2's
    # sluice.json adds the 1.0 test plugin and lists keyword_rerank again (loaded once).
    for v in (1, 2):
        shutil.copytree(RERANKER, os.path.join(repo, "kw", str(v)))
    os.makedirs(os.path.join(repo, "kw", "lib"))
    shutil.copy(KW, os.path.join(repo, "kw", "lib", "keyword_rerank.so"))
    shutil.copy(MINOR0, os.path.join(repo, "kw", "2", "minor0.so"))
    write_json(os.path.join(repo, "kw", "2", "sluice.json"),
               {"plugins": ["minor0.so", "../lib/keyword_rerank.so"]})
    KW_CONFIG = {"version_policy": {"all": {}}, "plugins": ["lib/keyword_rerank.so"]}
    write_json(os.path.join(repo, "kw", "model.json"), KW_CONFIG)
    # plain: no plugins. sj: its sluice.json lists keyword_rerank (no model.json).
    shutil.copytree(RERANKER, os.path.join(repo, "plain", "1"))
    shutil.copytree(RERANKER, os.path.join(repo, "sj", "1"))
    shutil.copy(KW, os.path.join(repo, "sj", "1", "kw.so"))
    write_json(os.path.join(repo, "sj", "1", "sluice.json"), {"plugins": ["kw.so"]})
    # gen: a generation model whose model.json names fsm_logits by an absolute path inside the
    # repository (repo/_lib: not a model name, so not a model); chat: the same model without.
    os.makedirs(os.path.join(repo, "_lib"))
    shutil.copy(FSM, os.path.join(repo, "_lib", "fsm_logits.so"))
    shutil.copytree(CHAT, os.path.join(repo, "gen", "1"))
    write_json(os.path.join(repo, "gen", "model.json"),
               {"plugins": [os.path.join(repo, "_lib", "fsm_logits.so")]})
    shutil.copytree(CHAT, os.path.join(repo, "chat", "1"))
    # Outside the repository: a library reached by a relative path and by a link.
    outside = os.path.join(tmp, "outside.so")
    shutil.copy(KW, outside)
    os.symlink(outside, os.path.join(repo, "kw", "lib", "link.so"))
    with open(os.path.join(repo, "kw", "lib", "notalib.so"), "w") as f:
        f.write("not a shared library\n")

    with Server(None, "--model-repository", repo, "--model-control", "explicit",
                "--load-model", "*") as s:
        log = "".join(s.log)
        real = os.path.realpath(repo)
        for d, n in (("kw/1", 1), ("kw/2", 2), ("sj/1", 1), ("gen/1", 1)):
            c.check(f"plugins of {real}/{d}: {n} libraries" in log,
                    f"{d} loads {n} plugin libraries: log")
        c.check(f"plugins of {real}/plain" not in log and f"plugins of {real}/chat" not in log,
                "plain and chat load none")
        st, _, r = s.get("/v1/models")
        c.check(st == 200 and sorted(m["id"] for m in r["data"]) ==
                ["chat", "gen", "kw", "plain", "sj"], f"the five models (not _lib): {r}")

        # --- IO processors: on kw (both versions) and sj, not on plain ---
        st, h, want = kw(s, "kw")
        c.check(st == 200 and served(h) == ("kw", "2") and len(want.get("results", [])) == 3,
                f"kw (default version 2): {st} {h} {want}")
        st, h, r = kw(s, "kw:1")
        c.check(st == 200 and served(h) == ("kw", "1") and r == want,
                f"kw:1 serves it too (model.json plugins: every version): {st} {r}")
        st, h, r = kw(s, "sj")
        c.check(st == 200 and served(h) == ("sj", "1") and r == want,
                f"sj (sluice.json plugins on a scoring model): {st} {r}")
        st, _, r = s.post("/pooling", {"model": "sj", "io_processor": "keyword_rerank",
                                       "data": BODY})
        c.check(st == 200 and r.get("data") == want and r.get("model") == "sj",
                f"/pooling on sj: {st} {r}")
        st, _, r = kw(s, "plain")
        c.error_shape(st, r, 404, "/plugins/keyword_rerank on plain")
        c.check('"plain"' in msg(r) and "IO processors: none" in msg(r), f"names plain: {r}")
        st, _, r = s.post("/pooling", {"model": "plain", "io_processor": "keyword_rerank",
                                       "data": BODY})
        c.error_shape(st, r, 400, "/pooling io_processor on plain")
        c.check('"plain"' in msg(r) and "IO processors: none" in msg(r), f"names plain: {r}")
        st, _, r = kw(s)
        c.error_shape(st, r, 400, "no model, two models have it")
        c.check('"kw"' in msg(r) and '"sj"' in msg(r) and '"plain"' not in msg(r),
                f"names the models that have it: {r}")
        st, _, r = s.post("/plugins/nope", BODY)
        c.error_shape(st, r, 404, "/plugins/nope, no model")
        c.check('"kw": keyword_rerank' in msg(r) and '"plain": none' in msg(r),
                f"lists each model's IO processors: {r}")
        c.check("built-in IO processors of the text scoring models: embeddings, embed" in msg(r),
                f"lists the built-ins: {r}")
        # A built-in by name: every scoring model has it, so "model" is required here.
        st, _, r = s.post("/plugins/rerank", {"query": QUERY, "documents": DOCS})
        c.error_shape(st, r, 400, "/plugins/rerank, no model")
        c.check('"model" is required' in msg(r) and '"plain"' in msg(r) and '"kw"' in msg(r),
                f"names the models that have it: {r}")
        st, _, ref = s.post("/v1/rerank", {"model": "plain", "query": QUERY, "documents": DOCS})
        st2, h, r = s.post("/pooling", {"model": "plain", "io_processor": "rerank",
                                        "data": {"query": QUERY, "documents": DOCS}})
        c.check(st == 200 and st2 == 200 and served(h)[0] == "plain" and
                r.get("data", {}).get("results") == ref.get("results"),
                f"/pooling io_processor rerank on plain = /v1/rerank: {st2} {r} vs {ref}")
        st, _, r = s.post("/pooling", {"io_processor": "nope", "data": BODY})
        c.error_shape(st, r, 400, "/pooling io_processor nope, no model")
        st, _, r = s.post("/v1/rerank", {"model": "plain", "query": QUERY, "documents": DOCS})
        c.check(st == 200, f"plain still reranks: {st}")

        # --- logits processors: on gen only ---
        st, h, r = completion(s, "gen")
        text = r.get("choices", [{}])[0].get("text") if st == 200 else None
        st2, _, d = s.post("/detokenize", {"model": "gen", "tokens": [11] * 4})
        c.check(st == 200 and r.get("usage", {}).get("completion_tokens") == 4 and
                st2 == 200 and text == d.get("prompt"), f"fsm on gen: {st} {r} vs {d}")
        st, _, r = completion(s, "chat")
        c.error_shape(st, r, 400, "fsm on chat")
        c.check('unknown logits processor "fsm" on model "chat" (loaded: none)' in msg(r),
                f"names fsm and chat: {r}")
        st, _, r = s.post("/v1/chat/completions",
                          {"model": "chat", "max_tokens": 2, "logits_processors": ["fsm"],
                           "extra_args": FSM_ARGS,
                           "messages": [{"role": "user", "content": "Where do salmon swim?"}]})
        c.error_shape(st, r, 400, "fsm on chat, chat completions")
        c.check('"fsm" on model "chat"' in msg(r), f"names fsm and chat: {r}")
        st, _, r = s.post("/v1/chat/completions",
                          {"model": "gen", "max_tokens": 2, "logits_processors": ["fsm"],
                           "extra_args": FSM_ARGS, "temperature": 0,
                           "messages": [{"role": "user", "content": "Where do salmon swim?"}]})
        c.check(st == 200, f"fsm on gen, chat completions: {st} {r}")
        st, _, r = completion(s, "chat", lps=False)
        c.check(st == 200, f"chat without logits processors: {st} {r}")

        # --- bad plugin entries in model.json: that load fails, the old versions serve ---
        kw_json = os.path.join(repo, "kw", "model.json")
        bad = [({"plugins": ["lib/missing.so"]}, 400, ["plugins[0]", "lib/missing.so",
                                                       "no such file"]),
               ({"plugins": ["lib/keyword_rerank.so", "../../outside.so"]}, 400,
                ["plugins[1]", "../../outside.so", "leaves the repository"]),
               ({"plugins": ["lib/link.so"]}, 400, ["plugins[0]", "lib/link.so",
                                                    "leaves the repository"]),
               ({"plugins": [outside]}, 400, ["plugins[0]", "leaves the repository"]),
               ({"plugins": ["lib"]}, 400, ["plugins[0]", "not a file"]),
               ({"plugins": ["lib/notalib.so"]}, 400, ["notalib.so", "dlopen failed"]),
               ({"plugins": [FSM.replace(PLUGINS, os.path.join(repo, "_lib"))]}, 400,
                ["fsm_logits.so", "logits processor fsm needs a generation model"]),
               ({"plugins": "lib/keyword_rerank.so"}, 400, ['"plugins"', "must be a list"]),
               ({"plugins": [3]}, 400, ['"plugins[0]"', "non-empty string"]),
               ({"plugins": [""]}, 400, ['"plugins[0]"', "non-empty string"]),
               ({"plugins": [], "plugin": []}, 400, ['"plugin"'])]
        for cfg, code, words in bad:
            write_json(kw_json, dict(KW_CONFIG, **cfg))
            st, _, r = s.post("/v2/repository/models/kw/load", {})
            c.error_shape(st, r, code, f"load with {cfg}")
            c.check(all(w in msg(r) for w in words), f"{cfg}: names {words}: {r}")
            st, h, r = kw(s, "kw")
            c.check(st == 200 and served(h) == ("kw", "2") and r == want,
                    f"after {cfg}: the old version serves: {st} {h}")
        st, h, r = kw(s, "kw:1")
        c.check(st == 200 and r == want, "kw:1 serves throughout")
        write_json(kw_json, KW_CONFIG)
        # A load request's override may not name libraries.
        st, _, r = s.post("/v2/repository/models/plain/load",
                          {"parameters": {"config": {"plugins": ["../kw/lib/keyword_rerank.so"]}}})
        c.error_shape(st, r, 400, "override with plugins")
        c.check("plugins" in msg(r) and "model.json" in msg(r), f"says why: {r}")
        st, _, r = kw(s, "plain")
        c.check(st == 404, f"plain still has none: {st}")
        # plain gains the plugin through its own model.json (a changed config reloads it).
        write_json(os.path.join(repo, "plain", "model.json"),
                   {"plugins": ["../kw/lib/keyword_rerank.so"]})
        st, _, r = s.post("/v2/repository/models/plain/load", {})
        c.check(st == 200, f"plain reloads with a plugin: {st} {r}")
        st, h, r = kw(s, "plain")
        c.check(st == 200 and served(h) == ("plain", "1") and r == want,
                f"plain serves keyword_rerank now: {st} {r}")
        os.remove(os.path.join(repo, "plain", "model.json"))
        st, _, r = s.post("/v2/repository/models/plain/load", {})
        st, _, r = kw(s, "plain")
        c.check(st == 404, f"plain without it again: {st}")

        # --- unload and reload of models with plugins ---
        for i in range(3):
            for name in ("kw", "sj", "gen"):
                st, _, r = s.post(f"/v2/repository/models/{name}/unload", {})
                c.check(st == 200, f"cycle {i}: unload {name}: {st} {r}")
            st, _, r = kw(s, "kw")
            c.check(st == 404, f"cycle {i}: kw unloaded: {st}")
            st, _, r = completion(s, "gen")
            c.check(st == 404, f"cycle {i}: gen unloaded: {st}")
            st, _, r = kw(s)
            c.error_shape(st, r, 404, f"cycle {i}: no model has keyword_rerank")
            for name in ("kw", "sj", "gen"):
                st, _, r = s.post(f"/v2/repository/models/{name}/load", {})
                c.check(st == 200, f"cycle {i}: load {name}: {st} {r}")
            for model in ("kw", "kw:1", "sj"):
                st, _, r = kw(s, model)
                c.check(st == 200 and r == want, f"cycle {i}: {model} usable again: {st} {r}")
            st, _, r = completion(s, "gen")
            c.check(st == 200 and r["choices"][0]["text"] == text,
                    f"cycle {i}: fsm on gen again: {st} {r}")
        c.check(s.proc.poll() is None, "the server is alive after the cycles")

    # --- --plugin applies to the --model entries, not to the repository's models ---
    repo2 = os.path.join(tmp, "repo2")
    shutil.copytree(RERANKER, os.path.join(repo2, "plain", "1"))
    with Server(None, "--model-repository", repo2, "--model", "x=" + RERANKER,
                "--plugin", KW) as s:
        st, h, r = kw(s)
        c.check(st == 200 and served(h) == ("x", "1") and r == want,
                f"no model: goes to x, the one that has it: {st} {h} {r}")
        st, _, r = s.post("/pooling", {"io_processor": "keyword_rerank", "data": BODY})
        c.check(st == 200 and r.get("model") == "x" and r.get("data") == want,
                f"/pooling, no model: x: {st} {r}")
        st, _, r = kw(s, "plain")
        c.error_shape(st, r, 404, "--plugin does not reach the repository model")
        st, _, r = s.post("/v1/rerank", {"query": QUERY, "documents": DOCS})
        c.error_shape(st, r, 400, "an ordinary route still needs the model")
    # --model NAME=PATH in the versions layout: PATH/model.json's plugins, for both versions.
    with Server(None, "--model", "v=" + os.path.join(repo, "kw")) as s:
        for model in ("v:1", "v:2"):
            st, h, r = kw(s, model)
            c.check(st == 200 and served(h) == ("v", model[-1]) and r == want,
                    f"{model}: PATH/model.json plugins: {st} {r}")
    # The single-model form, with sluice.json plugins naming the same file as --plugin.
    single = os.path.join(tmp, "single")
    shutil.copytree(RERANKER, single)
    shutil.copy(KW, os.path.join(single, "keyword_rerank.so"))
    write_json(os.path.join(single, "sluice.json"), {"plugins": ["keyword_rerank.so"]})
    with Server(single) as s:
        st, h, r = kw(s)
        c.check(st == 200 and served(h) == ("single", "1") and r == want,
                f"sluice.json plugins, --model DIR: {st} {r}")
    with Server(single, "--plugin", os.path.join(single, "keyword_rerank.so")) as s:
        c.check(any("single: 1 libraries" in line for line in s.log),
                "the same file from --plugin and sluice.json loads once")
        st, _, r = kw(s)
        c.check(st == 200 and r == want, f"--plugin + sluice.json: {st}")

    # --- start-up failures name the file and the reason ---
    fails_to_start(["--model-repository", repo2, "--plugin", KW],
                   ["--plugin applies to the --model entries", "model.json"],
                   "--plugin with only a repository")
    write_json(os.path.join(repo2, "plain", "model.json"), {"plugins": ["missing.so"]})
    fails_to_start(["--model-repository", repo2],
                   ["plain/model.json", "plugins[0]", "missing.so", "no such file"],
                   "a missing model.json plugin at start-up")
    write_json(os.path.join(repo2, "plain", "model.json"), {"plugins": [FSM]})
    fails_to_start(["--model-repository", repo2],
                   ["plain/model.json", "plugins[0]", "leaves the repository"],
                   "a model.json plugin outside the repository at start-up")
    shutil.copy(FSM, os.path.join(repo2, "plain", "fsm_logits.so"))
    write_json(os.path.join(repo2, "plain", "model.json"), {"plugins": ["fsm_logits.so"]})
    fails_to_start(["--model-repository", repo2],
                   ["fsm_logits.so", "logits processor fsm needs a generation model"],
                   "a model.json plugin that does not fit the model at start-up")

c.finish("plugins_per_model")
