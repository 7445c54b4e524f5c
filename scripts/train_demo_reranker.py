#!/usr/bin/env python3
"""Trains the embedded demo reranker of `make serve` (models/demo-reranker).

A tiny BERT cross-encoder (transformers' BertForSequenceClassification, num_labels=1,
scored with a sigmoid; 2 layers, hidden 128, ~0.4M parameters, 1.6 MB) trained on a
synthetic English-like lexical relevance task: a query names a subject, a verb and zero
to two objects ("how do salmon swim up the river?"); a document is relevant when it
contains every one of those key terms, and the distractors share some of them (all but
one for the hard ones) or none. It is a demo, not a useful model: it ranks documents by
key-term overlap with the query, nothing more.

The tokenizer is not trained here: the script reads models/demo-reranker/tokenizer.json
(a WordPiece vocabulary of 637 tokens trained with Hugging Face tokenizers on this
corpus; `--tokenizer-dir`) and copies it and tokenizer_config.json unchanged.

Deterministic (seeded). Runs on the GPU machine (torch, transformers, tokenizers):
    python3 scripts/train_demo_reranker.py --out /tmp/demo-reranker
It logs the loss and the held-out ranking accuracy as it trains, then evaluates on 2,000
held-out query groups (8 documents each) and on the README's and tests/e2e/test_demo.py's
examples, and writes config.json, model.safetensors (fp32), tokenizer.json and
tokenizer_config.json to --out ONLY if the model learnt: the loss fell, the relevant
document is ranked first in >= 95% of held-out groups, and every example ranks as
expected with the relevant document above 0.5 and the others below. Otherwise it writes
nothing and exits 1. `--dry-run` checks the corpus generator without torch.

To switch the demo to new weights: run it, check the printed figures, copy config.json and
model.safetensors into models/demo-reranker (the tokenizer files are the committed ones),
update the README's example output from `make serve` + its curl, and run
`ctest --test-dir build/release -R e2e_demo`.

The committed weights come from one run of this script on the H200 machine (2026-11-30;
transformers 5.17, torch 2.11, `--max-seconds 45 --threads 2`): 3,000 steps in 24.9 s, loss
3.29 at step 1 and < 1e-4 from step 750, held-out relevant-first 100% of 2,000 groups (by
key terms: 2: 578, 3: 1,015, 4: 407 groups, all 100%), held-out pair accuracy 100%, README
example 0.99998975 for the relevant document and 1.024e-05 to 1.026e-05 for the others
(sluice serves the same values: 0.999989748, 1.02506992e-05, ...). An earlier version
(pointwise BCE only, random init) never left the constant-0.5 plateau; scores of this one
saturate instead (a demo, trained to the point of certainty on an easy task).

Training recipe (why it learns; the first version, pointwise BCE from a random init, sat on
the constant-output plateau: every score 0.5): layer 0's query/key projections start at
the identity, with word embeddings scaled up so that word identity dominates position and
type, so from step 0 every token attends to its own copies in the other segment (the match
signal); layer 1 keeps the random init, whose near-uniform attention lets [CLS] average
the match features while it learns where to look. Loss: softmax cross-entropy over each
query's 8 documents (listwise) plus pointwise BCE with the positives up-weighted by the
negatives per group (so that sigmoid(score) ~ 0.5 separates them). AdamW, lr 1e-3 with
warm-up and linear decay, gradient clipping. If the held-out check at step 1500 shows no
learning, it restarts with another seed and learning rate.
"""
import argparse
import json
import os
import random
import shutil
import sys
import time

SEED = 1234

# ---------------------------------------------------------------- corpus (pure Python)

SUBJECTS = """salmon trout fish birds geese ducks swans owls bees ants wolves foxes bears deer
horses cattle sheep goats rabbits mice cats dogs farmers traders engineers children
students teachers doctors nurses sailors pilots miners builders bakers cooks painters
singers dancers runners climbers hikers fishermen hunters workers soldiers monks
merchants tourists drivers writers judges scientists gardeners""".split()

VERBS = """swim fly run walk climb dig build sell buy trade open close carry watch visit
cross paint clean repair guard fish hunt gather plant harvest cook bake sing dance
read write study measure count explore follow feed wash sail drive ride""".split()

OBJECTS = """river lake sea ocean canal stream pond harbor bridge gate sluice dam mill
market shop bank school library hospital church castle tower wall road street village
town city farm field forest garden meadow mountain hill valley cave island beach desert
station airport factory mine kitchen bakery museum theater stadium park barn boat ship
train bus truck house roof door window fence well shares bread fruit grain salt""".split()

ADJECTIVES = """old new cold warm busy quiet small large long short dark bright green
red white black narrow wide deep shallow high low muddy clear ancient modern wooden
stone empty crowded distant nearby""".split()

PREPS = "up down near across into under along by at in through over around past".split()
TIMES = "spring summer autumn winter morning evening night day week year".split()

# {O} and {O2} are object slots; a document template is usable for a query when it has
# at least as many object slots as the query has objects.
DOC_TEMPLATES = [
    "{S} {V} {P} the {A} {O}.",
    "The {A} {S} {V} {P} the {O}.",
    "In the {O}, {S} {V} every {T}.",
    "{S} often {V} {P} the {O} in {T}.",
    "{S} {V} the {A} {O} near the {O2}.",
    "Every {T} the {S} {V} {P} the {A} {O}.",
    "Near the {A} {O}, {S} {V} {P} the {O2} at {T}.",
    "{S} {V} {P} the {A} {O} every {T}.",
    "{S} {V} {S2} {P} the {O} in {T}.",
    "The {A} {S} {V} {S2} near the {O}.",
    "Every {T} the {S} {V} the {O} {P} the {A} {O2}.",
    "{S} {V} {O} at the {A} {O2} in {T}.",
]
QUERY1 = ["where do {S} {V}?", "how do {S} {V}?", "when do {S} {V}?", "{S} {V}",
          "why do {S} {V}?"]
QUERY2 = [
    "how do {S} {V} {P} the {O}?",
    "where do {S} {V} {P} the {O}?",
    "{S} {V} {O}",
    "do {S} {V} {P} the {O}?",
    "why do {S} {V} the {O}?",
]
QUERY3 = [
    "do {S} {V} {O} {P} the {O2}?",
    "where do {S} {V} {O} {P} the {O2}?",
    "{S} {V} {O} {O2}",
    "when do {S} {V} the {O} {P} the {O2}?",
]

# The README's `make serve` example: document 1 is relevant (all of salmon, swim, river);
# 2 shares "river", 3 shares "salmon", 0 shares nothing.
README_QUERY = "How do salmon swim up the river?"
README_DOCS = [
    "Traders sell shares at the busy market.",
    "Salmon swim up the cold river every spring.",
    "Farmers open the old sluice gate near the river.",
    "Fishermen sell salmon at the market in winter.",
]
README_RELEVANT = 1
# The README's example and tests/e2e/test_demo.py's (keep in step): (query, docs, relevant).
EXAMPLES = [
    (README_QUERY, README_DOCS, README_RELEVANT),
    ("where do bees fly?", ["Bees fly over the green meadow every summer.",
                            "Birds fly near the old tower.",
                            "Bees build the wall in winter."], 0),
    ("do bakers sell bread at the market?",
     ["Bakers bake bread in the kitchen.", "Traders sell fruit at the market.",
      "Every morning the bakers sell fresh bread at the busy market."], 2),
]


def words_of(text):
    return set("".join(ch if ch.isalnum() else " " for ch in text.lower()).split())


def pick(rng, pool, avoid):
    while True:
        w = rng.choice(pool)
        if w not in avoid:
            return w


def make_doc(rng, s, v, objs, avoid=()):
    """A document with subject s, verb v and the objects objs (0 to 2; the template's other
    object slots get random objects); fillers never come from avoid."""
    t = rng.choice([t for t in DOC_TEMPLATES if t.count("{O") >= len(objs)])
    objs = list(objs)
    rng.shuffle(objs)
    o = objs[0] if objs else pick(rng, OBJECTS, avoid)
    o2 = objs[1] if len(objs) > 1 else pick(rng, OBJECTS, set(avoid) | {o})
    s2 = pick(rng, SUBJECTS, set(avoid) | {s})
    if "{S2}" in t and rng.random() < 0.5:  # the subject word as the object
        s, s2 = s2, s
    text = t.format(S=s, V=v, O=o, O2=o2, S2=s2, P=rng.choice(PREPS), A=rng.choice(ADJECTIVES),
                    T=rng.choice(TIMES))
    return text[0].upper() + text[1:]


def make_query(rng):
    s, v = rng.choice(SUBJECTS), rng.choice(VERBS)
    r = rng.random()
    objs = []
    if r < 0.3:
        q = rng.choice(QUERY1).format(S=s, V=v)
    elif r < 0.8:
        objs = [pick(rng, OBJECTS, {s, v})]
        q = rng.choice(QUERY2).format(S=s, V=v, O=objs[0], P=rng.choice(PREPS))
    else:
        o = pick(rng, OBJECTS, {s, v})
        objs = [o, pick(rng, OBJECTS, {s, v, o})]
        q = rng.choice(QUERY3).format(S=s, V=v, O=objs[0], O2=objs[1], P=rng.choice(PREPS))
    if rng.random() < 0.5:
        q = q[0].upper() + q[1:]
    return q, [s, v] + objs


def relevant(keys, doc):
    return set(keys) <= words_of(doc)


def make_group(rng, n_neg):
    """One query, one relevant document (first) and n_neg distractors: each keeps a proper
    subset of the query's key terms (none, one, or all but one: the hard ones)."""
    q, keys = make_query(rng)
    s, v, objs = keys[0], keys[1], keys[2:]
    avoid = set(keys)
    docs = [(make_doc(rng, s, v, objs, avoid), 1)]
    while len(docs) < 1 + n_neg:
        keep = set(rng.sample(keys, rng.choice([0, 1, 1, len(keys) - 1, len(keys) - 1])))
        missing = avoid - keep
        ds = s if s in keep else pick(rng, SUBJECTS, avoid)
        dv = v if v in keep else pick(rng, VERBS, avoid)
        d = make_doc(rng, ds, dv, [o for o in objs if o in keep], missing | {ds, dv})
        if relevant(keys, d):
            continue
        docs.append((d, 0))
    return q, keys, docs


def corpus(seed, n_groups, n_neg):
    rng = random.Random(seed)
    return [make_group(rng, n_neg) for _ in range(n_groups)]


def flatten(groups):
    pairs, labels = [], []
    for q, _, docs in groups:
        for d, y in docs:
            pairs.append((q, d))
            labels.append(float(y))
    return pairs, labels


def dry_run(train, held):
    for q, keys, docs in train[:3]:
        print(q, keys)
        for d, y in docs:
            print("   ", y, d)
    for q, keys, docs in train + held:
        assert docs[0][1] == 1 and sum(y for _, y in docs) == 1
        for d, y in docs:
            assert relevant(keys, d) == bool(y), (q, d, y)
    words = set()
    for q, _, docs in train:
        words |= words_of(q)
        for d, _ in docs:
            words |= words_of(d)
    nk = {}
    for _, keys, _ in train:
        nk[len(keys)] = nk.get(len(keys), 0) + 1
    print(f"{len(train)} train groups, {len(held)} held-out, {len(words)} distinct words, "
          f"groups by key terms {sorted(nk.items())}")
    for q, docs, want in EXAMPLES:
        rq = words_of(q) & (set(SUBJECTS) | set(VERBS) | set(OBJECTS))
        print(f"example {q!r}: key terms {sorted(rq)}, relevant by the task's rule "
              f"{[relevant(sorted(rq), d) for d in docs]} (want {want})")


# ---------------------------------------------------------------- training (torch)

def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer-dir", default=os.path.join(here, "..", "models", "demo-reranker"))
    ap.add_argument("--train-groups", type=int, default=16000)
    ap.add_argument("--neg", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--groups-per-batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--max-seconds", type=float, default=90.0,
                    help="training time limit (all attempts)")
    ap.add_argument("--min-top1", type=float, default=0.95,
                    help="held-out: relevant document first in at least this share of groups")
    ap.add_argument("--threads", type=int, default=0, help="torch CPU threads (0 = default)")
    ap.add_argument("--dry-run", action="store_true", help="corpus only (no torch)")
    args = ap.parse_args()

    train = corpus(SEED, args.train_groups, args.neg)
    held = corpus(SEED + 1, 2000, args.neg)
    if args.dry_run:
        dry_run(train, held)
        return

    import torch
    import torch.nn.functional as F
    import transformers
    from tokenizers import Tokenizer
    from transformers import BertConfig, BertForSequenceClassification

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(SEED)
    torch.backends.cuda.matmul.allow_tf32 = False
    device = "cuda" if torch.cuda.is_available() else "cpu"
    t0 = time.time()

    tok_json = os.path.join(args.tokenizer_dir, "tokenizer.json")
    tok = Tokenizer.from_file(tok_json)
    tok.no_padding()
    tok.no_truncation()
    vocab = tok.get_vocab_size()
    pad_id, unk_id = tok.token_to_id("[PAD]"), tok.token_to_id("[UNK]")
    print(f"tokenizer {tok_json}: {vocab} tokens; example "
          f"{tok.encode(README_QUERY, README_DOCS[1]).tokens}")

    def encode(pairs):
        enc = tok.encode_batch(pairs)
        n = max(len(e.ids) for e in enc)
        ids = torch.full((len(enc), n), pad_id, dtype=torch.long)
        types = torch.zeros((len(enc), n), dtype=torch.long)
        mask = torch.zeros((len(enc), n), dtype=torch.long)
        for i, e in enumerate(enc):
            k = len(e.ids)
            ids[i, :k] = torch.tensor(e.ids)
            types[i, :k] = torch.tensor(e.type_ids)
            mask[i, :k] = 1
        return ids.to(device), types.to(device), mask.to(device)

    pairs, labels = flatten(train)
    ids, types, mask = encode(pairs)
    n_unk = int((ids == unk_id).sum())
    y = torch.tensor(labels, device=device)
    print(f"train pairs {len(pairs)}, max len {ids.shape[1]}, [UNK] tokens {n_unk}, "
          f"encoded in {time.time() - t0:.1f}s", flush=True)
    held_pairs, held_labels = flatten(held)
    held_enc = encode(held_pairs)

    cfg = BertConfig(vocab_size=vocab, hidden_size=128, num_hidden_layers=2,
                     num_attention_heads=4, intermediate_size=256,
                     max_position_embeddings=256, type_vocab_size=2, num_labels=1,
                     pad_token_id=pad_id, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    cfg.architectures = ["BertForSequenceClassification"]
    k_grp = 1 + args.neg
    n_grp = len(train)

    def new_model(seed):
        torch.manual_seed(seed)
        m = BertForSequenceClassification(cfg)
        gen = torch.Generator().manual_seed(seed)
        n_id = 0
        with torch.no_grad():
            for name, p in m.named_parameters():
                if name.endswith("embeddings.word_embeddings.weight"):
                    p.mul_(3.0)  # word identity dominates position/type in the embedding sum
                if (name.endswith(("attention.self.query.weight", "attention.self.key.weight"))
                        and ".layer.0." in name):
                    p.copy_(torch.eye(p.shape[0]) + torch.randn(p.shape, generator=gen) * 0.02)
                    n_id += 1
        print(f"parameters: {sum(p.numel() for p in m.parameters())}; identity-initialised "
              f"q/k matrices: {n_id}{'' if n_id == 2 else ' (WARNING: expected 2)'}")
        return m.to(device)

    @torch.no_grad()
    def scores(m, enc, chunk=8192):
        was = m.training
        m.eval()
        i, t, mk = enc
        out = []
        for b in range(0, i.shape[0], chunk):
            kk = int(mk[b:b + chunk].sum(1).max())
            out.append(m(input_ids=i[b:b + chunk, :kk], token_type_ids=t[b:b + chunk, :kk],
                         attention_mask=mk[b:b + chunk, :kk]).logits[:, 0].float())
        m.train(was)
        return torch.cat(out)

    def ranking(s):
        """Share of groups whose relevant document (index 0) scores strictly above the rest."""
        g = s.view(-1, k_grp)
        return (g[:, 0] > g[:, 1:].max(1).values).float().mean().item()

    pos_weight = torch.tensor(float(args.neg), device=device)
    t1 = time.time()
    attempts = [(SEED, args.lr), (SEED + 7, args.lr / 2), (SEED + 13, args.lr * 2)]
    model, step, log = None, 0, []
    for attempt, (seed, lr) in enumerate(attempts):
        model = new_model(seed)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
        warm = 200
        sched = torch.optim.lr_scheduler.LambdaLR(
            opt, lambda s_: min(1.0, (s_ + 1) / warm) * max(0.05, 1.0 - s_ / args.steps))
        g = torch.Generator().manual_seed(seed)
        gb = args.groups_per_batch
        arange = torch.arange(k_grp, device=device)
        model.train()
        step, give_up, log = 0, False, []
        run_loss = run_lw = 0.0
        print(f"attempt {attempt}: seed {seed}, lr {lr}, {gb} groups x {k_grp} pairs per batch",
              flush=True)
        while step < args.steps and not give_up and time.time() - t1 < args.max_seconds:
            perm = torch.randperm(n_grp, generator=g).to(device)
            for b in range(0, n_grp - gb + 1, gb):
                idx = (perm[b:b + gb, None] * k_grp + arange[None, :]).reshape(-1)
                m = mask[idx]
                kk = int(m.sum(1).max())
                out = model(input_ids=ids[idx, :kk], token_type_ids=types[idx, :kk],
                            attention_mask=m[:, :kk]).logits[:, 0]
                # listwise (the relevant document is index 0 of each group) + pointwise BCE
                lw = F.cross_entropy(out.view(gb, k_grp),
                                     torch.zeros(gb, dtype=torch.long, device=device))
                bce = F.binary_cross_entropy_with_logits(out, y[idx], pos_weight=pos_weight)
                loss = lw + bce
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                sched.step()
                step += 1
                if step == 1:
                    log.append((0, loss.item(), lw.item(), float("nan")))
                    print(f"step 1 loss {loss.item():.4f} (listwise {lw.item():.4f})", flush=True)
                run_loss += loss.item() if step % 50 == 0 else 0.0  # sample (avoids syncs)
                run_lw += lw.item() if step % 50 == 0 else 0.0
                if step % 250 == 0:
                    top1 = ranking(scores(model, tuple(x[:4000] for x in held_enc)))
                    log.append((step, run_loss / 5, run_lw / 5, top1))
                    print(f"step {step} loss {run_loss / 5:.4f} (listwise {run_lw / 5:.4f}) "
                          f"held-out top1 {top1:.3f} {time.time() - t1:.1f}s", flush=True)
                    run_loss = run_lw = 0.0
                    if step == 1500 and top1 < 0.5 and attempt + 1 < len(attempts):
                        print("no learning by step 1500: next attempt", flush=True)
                        give_up = True
                        break
                if step >= args.steps or time.time() - t1 > args.max_seconds:
                    break
        if not give_up:
            break
    train_s = time.time() - t1
    print(f"trained {step} steps in {train_s:.1f}s", flush=True)
    model.eval()

    # ---- evaluation
    s_held = scores(model, held_enc).cpu()
    lab = torch.tensor(held_labels)
    pair_acc = ((s_held > 0).float() == lab).float().mean().item()
    top1 = ranking(s_held)
    s_tr = scores(model, tuple(x[:4000 * k_grp] for x in (ids, types, mask))).cpu()
    train_top1 = ranking(s_tr)
    # by number of key terms
    by_k = {}
    for gi, (_, keys, _) in enumerate(held):
        g = s_held[gi * k_grp:(gi + 1) * k_grp]
        ok = bool(g[0] > g[1:].max())
        n, c = by_k.get(len(keys), (0, 0))
        by_k[len(keys)] = (n + 1, c + ok)
    print(f"held-out (2000 groups): pair accuracy {pair_acc:.4f} (sigmoid > 0.5), relevant "
          f"first {top1:.4f}; by key terms "
          + ", ".join(f"{k}: {c / n:.3f} of {n}" for k, (n, c) in sorted(by_k.items())))
    print(f"train (first 4000 groups): relevant first {train_top1:.4f}")

    ex_ok = True
    ex_scores = []
    for q, docs, want in EXAMPLES:
        s = torch.sigmoid(scores(model, encode([(q, d) for d in docs])).cpu()).tolist()
        ex_scores.append(s)
        good = (all(s[want] > x for i, x in enumerate(s) if i != want) and s[want] > 0.5
                and all(x < 0.5 for i, x in enumerate(s) if i != want))
        ex_ok &= good
        print(f"example {'ok' if good else 'WRONG'}: {q}")
        for d, x in zip(docs, s):
            print(f"   {x:.6f}  {d}")

    first = log[0][1] if log else float("nan")
    last = log[-1][1] if log else float("nan")
    loss_fell = len(log) > 1 and last < 0.5 * first
    print(f"loss {first:.4f} (step 1) -> {last:.4f} (last log): "
          f"{'fell' if loss_fell else 'DID NOT FALL enough'}")
    summary = {"heldout_top1": top1, "heldout_pair_accuracy": pair_acc, "train_top1": train_top1,
               "steps": step, "train_seconds": round(train_s, 1), "loss_first": first,
               "loss_last": last, "examples": ex_scores, "transformers": transformers.__version__,
               "torch": torch.__version__, "device": device}
    print(json.dumps(summary))
    if not (loss_fell and top1 >= args.min_top1 and ex_ok):
        print(f"FAIL: not saved (needs the loss to fall by half, held-out top1 >= "
              f"{args.min_top1}, every example right)")
        sys.exit(1)

    model = model.cpu().float()
    os.makedirs(args.out, exist_ok=True)
    model.save_pretrained(args.out, safe_serialization=True)
    for f in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(os.path.join(args.tokenizer_dir, f), os.path.join(args.out, f))

    # Reload the saved directory the way users load it and check the README example again.
    m2 = BertForSequenceClassification.from_pretrained(args.out).eval()
    t2 = Tokenizer.from_file(os.path.join(args.out, "tokenizer.json"))
    with torch.no_grad():
        rs = []
        for d in README_DOCS:
            e = t2.encode(README_QUERY, d)
            lo = m2(input_ids=torch.tensor([e.ids]),
                    token_type_ids=torch.tensor([e.type_ids])).logits[0, 0]
            rs.append(torch.sigmoid(lo).item())
    print("README example after reload:", " ".join(f"{x:.8f}" for x in rs))
    size = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"saved {sorted(os.listdir(args.out))} ({size} bytes) in {time.time() - t0:.1f}s")
    if not all(rs[README_RELEVANT] > r for i, r in enumerate(rs) if i != README_RELEVANT):
        print("FAIL: after reload the README example's relevant document is not first")
        sys.exit(1)


if __name__ == "__main__":
    main()
