#!/usr/bin/env python3
"""Trains the embedded demo chat model (models/demo-chat).

A tiny Qwen3ForCausalLM (3 layers, hidden 256, 4 heads of 64 with 2 KV heads, vocabulary
of 1,024 byte-level BPE tokens; ~1.7M parameters, 7 MB fp32) with its own tokenizer and a
ChatML chat template, trained with transformers on a synthetic instruction task over the
demo corpus of scripts/train_demo_reranker.py (people and animals, verbs, places):

- a small fixed "world": every subject has one fact, e.g. salmon swim up the cold river
  every spring; questions about it in several phrasings ("Where do salmon swim?", "What do
  salmon do?", "When do salmon swim?", "Tell me about salmon.", "Do salmon fly?") get the
  fact back in a sentence, corrected when the question's verb is wrong ("Salmon do not fly.
  They swim up the cold river.");
- a question about a word that is not a subject ("Where do robots swim?") gets "I do not
  know about robots." (the word copied from the question);
- greetings get an introduction; conversations have 1-3 turns and sometimes a system
  message; the answer is always to the last user turn.

It is a demo: it knows its small world and nothing else. The loss covers the assistant
turns only. Deterministic (seeded). Runs on the GPU machine (torch, transformers,
tokenizers):
    python3 scripts/train_demo_chat.py --out /tmp/demo-chat
It trains the tokenizer on the corpus, trains the model, then answers every question of
a held-out set (other phrasings, turn counts and system messages than training used) and
the README's / tests/e2e/test_demo_chat.py's examples greedily, prints the accuracy, and
writes config.json, generation_config.json, model.safetensors (fp32), tokenizer.json and
tokenizer_config.json (with the chat template) to --out; `ok` in the last line of the log
and exit status 0 only if the held-out exact-answer accuracy is >= --min-accuracy and every
example is answered exactly. `--dry-run` prints sample conversations without torch.

To switch the demo to new weights: run it, check the figures, copy the files into
models/demo-chat, and run `ctest --test-dir build/release -R e2e_demo_chat`.

The committed weights come from one run on the H200 machine (2026-12-01; transformers 5.17,
torch 2.11, `--max-seconds 150`): 60,000 training conversations (at most 155 tokens),
tokenizer of 1,024 tokens, 1,738,880 parameters, 4,000 steps in 86.6 s, loss 6.95 at step 1
and < 1e-4 at the end; every example answered exactly; held-out conversations (phrasings,
system messages and turn mixes not seen in training) 395 of 500 answered exactly (79%: the
misses are paraphrases such as "What are salmon doing?" that a model this small does not
generalise to). sluice serves the same answers (tests/e2e/test_demo_chat.py).
"""
import argparse
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from train_demo_reranker import ADJECTIVES, OBJECTS, PREPS, SUBJECTS, TIMES, VERBS  # noqa: E402

SEED = 4321

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

# Facts fixed by hand so that the README's examples read well; the other subjects get
# seeded random facts.
FIXED = {
    "salmon": ("swim", "up", "cold", "river", "spring"),
    "bees": ("fly", "over", "green", "meadow", "summer"),
    "bakers": ("bake", "in", "warm", "kitchen", "morning"),
    "farmers": ("open", "near", "old", "sluice", "autumn"),
    "owls": ("hunt", "in", "dark", "forest", "night"),
}
GREETINGS = ["Hello", "Hi", "Hello!", "Hi there", "Who are you?", "What can you do?", "hello"]
GREETING_ANSWER = ("Hello! I am the sluice demo chat model. I know where animals and people "
                   "of a small world live and work: ask me where salmon swim or what bakers do.")
SYSTEMS = ["You are a helpful assistant.", "Answer briefly.", "You are the sluice demo.",
           "Be concise and friendly."]
UNKNOWN = ["robots", "dragons", "computers", "planets", "lawyers", "kings", "rivers", "boats",
           "trains", "clouds", "cars", "phones", "wizards", "pirates", "aliens", "towers"]


def cap(s):
    return s[0].upper() + s[1:]


def world(seed):
    rng = random.Random(seed)
    facts = {}
    for s in SUBJECTS:
        facts[s] = FIXED.get(s) or (rng.choice(VERBS), rng.choice(PREPS), rng.choice(ADJECTIVES),
                                    rng.choice(OBJECTS), rng.choice(TIMES))
    return facts


def where(s, f):
    v, p, a, o, _ = f
    return f"{s} {v} {p} the {a} {o}"


# (question template, answer function(subject, fact, asked verb)); {S} subject, {V} verb.
def qa_templates():
    def a_where(s, f, v):
        if v == f[0]:
            return cap(where(s, f)) + "."
        return f"{cap(s)} do not {v}. They {f[0]} {f[1]} the {f[2]} {f[3]}."

    def a_what(s, f, v):
        return cap(where(s, f)) + f" every {f[4]}."

    def a_when(s, f, v):
        if v == f[0]:
            return f"{cap(s)} {f[0]} every {f[4]}."
        return f"{cap(s)} do not {v}. They {f[0]} every {f[4]}."

    def a_do(s, f, v):
        if v == f[0]:
            return "Yes. " + cap(where(s, f)) + "."
        return f"No. {cap(s)} {f[0]} {f[1]} the {f[2]} {f[3]}."

    train = [
        ("Where do {S} {V}?", a_where, True), ("where do {S} {V}", a_where, True),
        ("Where do the {S} {V}?", a_where, True), ("What do {S} do?", a_what, False),
        ("Tell me about {S}.", a_what, False), ("What do the {S} do?", a_what, False),
        ("When do {S} {V}?", a_when, True), ("when do {S} {V}?", a_when, True),
        ("Do {S} {V}?", a_do, True), ("do {S} {V}?", a_do, True),
    ]
    held = [
        ("Where do the {S} usually {V}?", a_where, True), ("What are {S} doing?", a_what, False),
        ("Tell me about the {S}.", a_what, False), ("When do the {S} {V}?", a_when, True),
        ("Do the {S} {V}?", a_do, True),
    ]
    return train, held


def make_question(rng, facts, templates, unknown_rate=0.08):
    t, ans, has_verb = rng.choice(templates)
    if rng.random() < unknown_rate:
        s = rng.choice(UNKNOWN)
        v = rng.choice(VERBS)
        return t.format(S=s, V=v), f"I do not know about {s}."
    s = rng.choice(SUBJECTS)
    f = facts[s]
    v = f[0] if (not has_verb or rng.random() < 0.5) else rng.choice(VERBS)
    q = t.format(S=s, V=v)
    return q, ans(s, f, v)


def make_conversation(rng, facts, templates, systems):
    msgs = []
    if rng.random() < 0.3:
        msgs.append({"role": "system", "content": rng.choice(systems)})
    turns = rng.choice([1, 1, 1, 2, 2, 3])
    for _ in range(turns):
        if rng.random() < 0.1:
            q, a = rng.choice(GREETINGS), GREETING_ANSWER
        else:
            q, a = make_question(rng, facts, templates)
        msgs.append({"role": "user", "content": q})
        msgs.append({"role": "assistant", "content": a})
    return msgs


def render(msgs, add_generation_prompt=False):
    # The template above, in Python (the same bytes; checked against the Jinja rendering).
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in msgs)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")


# The README's and tests/e2e/test_demo_chat.py's examples (keep in step): (messages, answer).
EXAMPLES = [
    ([{"role": "user", "content": "Where do salmon swim?"}], "Salmon swim up the cold river."),
    ([{"role": "user", "content": "What do bakers do?"}],
     "Bakers bake in the warm kitchen every morning."),
    ([{"role": "user", "content": "Do bees swim?"}], "No. Bees fly over the green meadow."),
    ([{"role": "system", "content": "You are a helpful assistant."},
      {"role": "user", "content": "Hello"}], GREETING_ANSWER),
    ([{"role": "user", "content": "Where do robots swim?"}], "I do not know about robots."),
    ([{"role": "user", "content": "Where do owls hunt?"},
      {"role": "assistant", "content": "Owls hunt in the dark forest."},
      {"role": "user", "content": "When do owls hunt?"}], "Owls hunt every night."),
]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--train-conversations", type=int, default=60000)
    ap.add_argument("--steps", type=int, default=4000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--vocab", type=int, default=1024)
    ap.add_argument("--max-seconds", type=float, default=240.0)
    ap.add_argument("--min-accuracy", type=float, default=0.75)
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args()

    facts = world(SEED)
    train_t, held_t = qa_templates()
    rng = random.Random(SEED)
    train = [make_conversation(rng, facts, train_t, SYSTEMS)
             for _ in range(args.train_conversations)]
    hrng = random.Random(SEED + 1)
    held = [make_conversation(hrng, facts, held_t, ["Please help me.", "You answer questions."])
            for _ in range(500)]
    if args.dry_run:
        for c in train[:4] + held[:2]:
            print(repr(render(c)))
        print(f"{len(facts)} subjects; salmon: {facts['salmon']}")
        return

    import torch
    import torch.nn.functional as F
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.time()

    # The template renders exactly what render() builds (so the training data is what the
    # served model will see).
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    tpl = env.from_string(CHAT_TEMPLATE)
    for c in train[:200] + [e[0] for e in EXAMPLES]:
        for agp in (False, True):
            assert tpl.render(messages=c, add_generation_prompt=agp) == render(c, agp)

    # Byte-level BPE tokenizer trained on the corpus (every rendered conversation).
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=args.vocab, special_tokens=SPECIALS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    corpus = [render(c) for c in train[:20000]] + [GREETING_ANSWER] * 50
    tok.train_from_iterator(corpus, trainer=trainer)
    vocab = tok.get_vocab_size()
    eot, im_start, im_end = (tok.token_to_id(s) for s in SPECIALS)
    print(f"tokenizer: {vocab} tokens (special ids {eot}, {im_start}, {im_end}); "
          f"{tok.encode(render(EXAMPLES[0][0], True)).tokens}", flush=True)

    def encode_train(c):
        """Token ids of a conversation and the mask of the tokens the loss covers (the
        assistant contents and their <|im_end|>)."""
        ids, mask = [], []
        for m in c:
            head = tok.encode(f"<|im_start|>{m['role']}\n").ids
            body = tok.encode(m["content"]).ids + [im_end]
            nl = tok.encode("\n").ids
            ids += head + body + nl
            lab = m["role"] == "assistant"
            mask += [0] * len(head) + [1 if lab else 0] * len(body) + [0] * len(nl)
        return ids, mask

    # Tokenising message by message must give what the tokenizer gives on the whole text
    # (the byte-level pre-tokenizer splits at the newlines and specials anyway).
    for c in train[:100]:
        assert encode_train(c)[0] == tok.encode(render(c)).ids, render(c)
    enc = [encode_train(c) for c in train]
    max_len = max(len(i) for i, _ in enc)
    ids = torch.full((len(enc), max_len), eot, dtype=torch.long)
    lab = torch.full((len(enc), max_len), -100, dtype=torch.long)
    att = torch.zeros((len(enc), max_len), dtype=torch.long)
    for r, (i, m) in enumerate(enc):
        ids[r, :len(i)] = torch.tensor(i)
        att[r, :len(i)] = 1
        lab[r, :len(i)] = torch.tensor([t if k else -100 for t, k in zip(i, m)])
    ids, lab, att = ids.to(device), lab.to(device), att.to(device)
    print(f"{len(enc)} training conversations, max {max_len} tokens, "
          f"encoded in {time.time() - t0:.1f}s", flush=True)

    cfg = Qwen3Config(vocab_size=vocab, hidden_size=256, intermediate_size=384,
                      num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=512,
                      rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                      rms_norm_eps=1e-6, tie_word_embeddings=True, bos_token_id=im_start,
                      eos_token_id=im_end, pad_token_id=eot, attention_dropout=0.0)
    cfg.architectures = ["Qwen3ForCausalLM"]
    model = Qwen3ForCausalLM(cfg).to(device)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}", flush=True)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01,
                            betas=(0.9, 0.98))
    warm = 200
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warm) * max(0.02, 1.0 - s / args.steps))
    g = torch.Generator().manual_seed(SEED)
    model.train()
    step, t1 = 0, time.time()
    while step < args.steps and time.time() - t1 < args.max_seconds:
        perm = torch.randperm(ids.shape[0], generator=g).to(device)
        for b in range(0, ids.shape[0] - args.batch + 1, args.batch):
            idx = perm[b:b + args.batch]
            k = int(att[idx].sum(1).max())
            logits = model(input_ids=ids[idx, :k], attention_mask=att[idx, :k]).logits
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab).float(),
                                   lab[idx, 1:k].reshape(-1), ignore_index=-100)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            step += 1
            if step == 1 or step % 250 == 0:
                print(f"step {step} loss {loss.item():.4f} ({time.time() - t1:.1f}s)", flush=True)
            if step >= args.steps or time.time() - t1 >= args.max_seconds:
                break
    print(f"trained {step} steps in {time.time() - t1:.1f}s, last loss {loss.item():.5f}",
          flush=True)

    model.eval()

    @torch.no_grad()
    def answer(msgs):
        prompt = tok.encode(render(msgs, True)).ids
        out = model.generate(torch.tensor([prompt], device=device), max_new_tokens=64,
                             do_sample=False, eos_token_id=im_end, pad_token_id=eot)
        new = out[0, len(prompt):].tolist()
        if im_end in new:
            new = new[:new.index(im_end)]
        return tok.decode(new)

    correct = 0
    for c in held:
        want = c[-1]["content"]
        got = answer(c[:-1])
        correct += got == want
    acc = correct / len(held)
    print(f"held-out exact answers: {correct}/{len(held)} = {acc:.4f}")
    ex_ok = True
    for msgs, want in EXAMPLES:
        got = answer(msgs)
        ok = got == want
        ex_ok &= ok
        print(f"example {msgs[-1]['content']!r}: {got!r} {'ok' if ok else 'WANT ' + repr(want)}")

    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    GenerationConfig(bos_token_id=im_start, eos_token_id=[im_end, eot], pad_token_id=eot,
                     do_sample=False, max_new_tokens=64).save_pretrained(args.out)
    tok.save(os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 512,
                   "bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "chat_template": CHAT_TEMPLATE}, f, indent=2)
        f.write("\n")
    good = acc >= args.min_accuracy and ex_ok
    print(f"wrote {args.out} in {time.time() - t0:.1f}s: {'ok' if good else 'NOT GOOD ENOUGH'}")
    sys.exit(0 if good else 1)


if __name__ == "__main__":
    main()
