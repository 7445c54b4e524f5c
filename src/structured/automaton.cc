#include "structured/automaton.h"

#include <algorithm>
#include <map>

namespace sluice::structured {

namespace {

ExprP Make(Expr e) {
  for (const ExprP& k : e.kids) e.has_ref |= k->has_ref;
  if (e.extra) e.has_ref |= e.extra->has_ref;
  return std::make_shared<const Expr>(std::move(e));
}

// UTF-8 byte-range sequences of the scalar values in [lo, hi] (the utf8-ranges algorithm:
// split until every byte position of a piece is one range).
void Utf8Split(uint32_t lo, uint32_t hi,
               std::vector<std::vector<std::pair<uint8_t, uint8_t>>>* out) {
  if (lo > hi) return;
  if (lo <= 0xDFFF && hi >= 0xD800) {  // no surrogates
    if (lo < 0xD800) Utf8Split(lo, 0xD7FF, out);
    if (hi > 0xDFFF) Utf8Split(0xE000, hi, out);
    return;
  }
  static constexpr uint32_t kMax[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
  for (int n = 0; n < 3; ++n) {
    if (lo <= kMax[n] && hi > kMax[n]) {
      Utf8Split(lo, kMax[n], out);
      Utf8Split(kMax[n] + 1, hi, out);
      return;
    }
  }
  if (hi <= 0x7F) {
    out->push_back({{static_cast<uint8_t>(lo), static_cast<uint8_t>(hi)}});
    return;
  }
  for (int i = 1; i < 4; ++i) {
    const uint32_t m = (1u << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        Utf8Split(lo, lo | m, out);
        Utf8Split((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        Utf8Split(lo, (hi & ~m) - 1, out);
        Utf8Split(hi & ~m, hi, out);
        return;
      }
    }
  }
  std::string a, b;
  AppendUtf8(lo, &a);
  AppendUtf8(hi, &b);
  std::vector<std::pair<uint8_t, uint8_t>> seq;
  for (size_t i = 0; i < a.size(); ++i) {
    seq.emplace_back(static_cast<uint8_t>(a[i]), static_cast<uint8_t>(b[i]));
  }
  out->push_back(std::move(seq));
}

// Whether e may match the empty string (conservatively true for kinds not worked out here).
bool Nullable(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kNothing:
    case Expr::Kind::kBytes:
    case Expr::Kind::kCodepoints:
      return false;
    case Expr::Kind::kConcat:
      for (const ExprP& k : e.kids) {
        if (!Nullable(*k)) return false;
      }
      return true;
    case Expr::Kind::kAlt:
      for (const ExprP& k : e.kids) {
        if (Nullable(*k)) return true;
      }
      return false;
    case Expr::Kind::kRepeat:
      return e.min == 0 || Nullable(*e.kids[0]);
    default:
      return true;
  }
}

class Emitter {
 public:
  Emitter(Nfa* nfa, size_t limit, bool pushdown) : nfa_(nfa), limit_(limit), pushdown_(pushdown) {}
  bool overflow() const { return overflow_; }
  const std::string& error() const { return error_; }

  // Pushdown: emits the bodies of the rules the calls reach (each once).
  void EmitRules() {
    for (size_t i = 0; i < pending_.size() && !overflow_; ++i) {
      const auto [body, slot] = pending_[i];  // a copy: Emit may add rules
      if (!body) {
        Fail("a recursive rule has no body");
        return;
      }
      Emit(*body, nfa_->rule_start[static_cast<size_t>(slot)],
           nfa_->rule_accept[static_cast<size_t>(slot)]);
    }
  }

  int32_t New() {
    if (nfa_->num_states() >= limit_) {
      overflow_ = true;
      return 0;
    }
    return nfa_->AddState();
  }
  void Eps(int32_t a, int32_t b) {
    if (!overflow_) nfa_->eps[static_cast<size_t>(a)].push_back(b);
  }
  void Edge(int32_t a, uint8_t lo, uint8_t hi, int32_t b) {
    if (!overflow_) nfa_->edges[static_cast<size_t>(a)].push_back({lo, hi, b});
  }

  void Emit(const Expr& e, int32_t from, int32_t to) {
    if (overflow_) return;
    switch (e.kind) {
      case Expr::Kind::kEmpty:
        Eps(from, to);
        return;
      case Expr::Kind::kNothing:
        return;
      case Expr::Kind::kBytes:
        for (const auto& [lo, hi] : e.ranges) {
          Edge(from, static_cast<uint8_t>(lo), static_cast<uint8_t>(hi), to);
        }
        return;
      case Expr::Kind::kCodepoints: {
        std::vector<std::vector<std::pair<uint8_t, uint8_t>>> seqs;
        for (const auto& [lo, hi] : e.ranges)
          Utf8Split(lo, std::min<uint32_t>(hi, 0x10FFFF), &seqs);
        for (const auto& seq : seqs) {
          int32_t cur = from;
          for (size_t i = 0; i < seq.size(); ++i) {
            const int32_t next = i + 1 == seq.size() ? to : New();
            Edge(cur, seq[i].first, seq[i].second, next);
            cur = next;
          }
        }
        return;
      }
      case Expr::Kind::kConcat: {
        int32_t cur = from;
        for (size_t i = 0; i < e.kids.size(); ++i) {
          const int32_t next = i + 1 == e.kids.size() ? to : New();
          Emit(*e.kids[i], cur, next);
          cur = next;
        }
        if (e.kids.empty()) Eps(from, to);
        return;
      }
      case Expr::Kind::kAlt: {
        // Each branch between fresh states, so that no branch's loop touches another's.
        for (const ExprP& k : e.kids) {
          const int32_t a = New(), b = New();
          Eps(from, a);
          Emit(*k, a, b);
          Eps(b, to);
        }
        return;
      }
      case Expr::Kind::kRepeat: {
        int32_t cur = from;
        // c_1 .. c_max of a counted repetition (Nfa::Counted).
        const bool counted =
            e.max >= kMinCountedCopies && !e.kids[0]->has_ref && !Nullable(*e.kids[0]);
        std::vector<int32_t> starts;
        for (int i = 0; i < e.min; ++i) {
          const int32_t next = New();
          if (counted) starts.push_back(next);
          Emit(*e.kids[0], cur, next);
          cur = next;
        }
        if (e.max < 0) {
          const int32_t loop = New(), back = New();
          Eps(cur, loop);
          Emit(*e.kids[0], loop, back);
          Eps(back, loop);
          Eps(loop, to);
          return;
        }
        for (int i = e.min; i < e.max; ++i) {
          const int32_t next = New();
          if (counted) starts.push_back(next);
          Eps(cur, to);
          Emit(*e.kids[0], cur, next);
          cur = next;
        }
        Eps(cur, to);
        if (counted) RecordCounted(starts, e.min);
        return;
      }
      case Expr::Kind::kList: {
        if (e.max == 0) {
          Eps(from, to);
          return;
        }
        if (e.min == 0) Eps(from, to);
        const Expr& item = *e.kids[0];
        const Expr& sep = *e.kids[1];
        if (e.min <= 1 && e.max < 0) {  // one copy of each: a -item-> m -sep-> a
          const int32_t a = New(), m = New();
          Eps(from, a);
          Emit(item, a, m);
          Emit(sep, m, a);
          Eps(m, to);
          return;
        }
        int32_t cur = New();
        Emit(item, from, cur);
        const int min_more = std::max(0, e.min - 1);
        for (int i = 0; i < min_more; ++i) {
          const int32_t mid = New(), next = New();
          Emit(sep, cur, mid);
          Emit(item, mid, next);
          cur = next;
        }
        if (e.max < 0) {
          const int32_t loop = New(), mid = New(), back = New();
          Eps(cur, loop);
          Emit(sep, loop, mid);
          Emit(item, mid, back);
          Eps(back, loop);
          Eps(loop, to);
          return;
        }
        for (int i = std::max(1, e.min); i < e.max; ++i) {
          const int32_t mid = New(), next = New();
          Eps(cur, to);
          Emit(sep, cur, mid);
          Emit(item, mid, next);
          cur = next;
        }
        Eps(cur, to);
        return;
      }
      case Expr::Kind::kObject:
        EmitObject(e, from, to);
        return;
      case Expr::Kind::kAnd:
      case Expr::Kind::kAndNot:
        if ((pushdown_ && (e.kids[0]->has_ref || e.kids[1]->has_ref)) ||
            (e.kind == Expr::Kind::kAndNot && e.kids[1]->has_ref)) {
          Fail(
              "a recursive reference inside an intersection (pattern, oneOf proof) is not "
              "supported");
          return;
        }
        EmitAnd(e, from, to);
        return;
      case Expr::Kind::kRules:
        Emit(*e.kids[0], from, to);
        return;
      case Expr::Kind::kRef:
        EmitRef(e, from, to);
        return;
    }
  }

 private:
  void Fail(std::string what) {
    if (!overflow_) error_ = std::move(what);
    overflow_ = true;
  }

  void EmitRef(const Expr& e, int32_t from, int32_t to) {
    const std::shared_ptr<RuleSet> rules = e.ref_rules.lock();
    ExprP body;
    std::string name;
    if (rules && e.min >= 0 && static_cast<size_t>(e.min) < rules->bodies.size()) {
      body = rules->bodies[static_cast<size_t>(e.min)];
      name = rules->names[static_cast<size_t>(e.min)];
    }
    if (!pushdown_) {
      // A superset: the body one level deep, any bytes below (or when it is not known yet).
      if (body && flat_budget_ > 0) {
        --flat_budget_;
        Emit(*body, from, to);
        ++flat_budget_;
        return;
      }
      if (!e.kids.empty()) {
        Emit(*e.kids[0], from, to);
        return;
      }
      const int32_t loop = New();
      Eps(from, loop);
      Edge(loop, 0, 255, loop);
      Eps(loop, to);
      return;
    }
    if (!rules) {
      Fail("a recursive reference outlived its rules");
      return;
    }
    const auto key = std::make_pair(rules.get(), e.min);
    auto it = slots_.find(key);
    int32_t slot;
    if (it != slots_.end()) {
      slot = it->second;
    } else {
      slot = static_cast<int32_t>(nfa_->rule_start.size());
      nfa_->rule_start.push_back(New());
      nfa_->rule_accept.push_back(New());
      nfa_->rule_names.push_back(name);
      slots_.emplace(key, slot);
      pending_.emplace_back(body, slot);
      keep_.push_back(rules);
    }
    if (!overflow_) nfa_->calls.push_back({from, slot, to});
  }

  // State (i, c): before declared member i with c members so far (c saturates at the cap when
  // there is no maximum).
  void EmitObject(const Expr& e, int32_t from, int32_t to) {
    const Expr& open = *e.kids[0];
    const Expr& sep = *e.kids[1];
    const Expr& close = *e.kids[2];
    const size_t n = e.kids.size() - 3;
    const int cap = e.max >= 0 ? e.max : std::max(1, e.min);
    auto bump = [&](int c) { return e.max >= 0 ? c + 1 : std::min(c + 1, cap); };
    std::vector<std::vector<int32_t>> st(n + 1, std::vector<int32_t>(static_cast<size_t>(cap) + 1));
    for (auto& row : st) {
      for (int32_t& s : row) s = New();
    }
    if (overflow_) return;
    Emit(open, from, st[0][0]);
    for (size_t i = 0; i < n; ++i) {
      const Expr& m = *e.kids[3 + i];
      for (int c = 0; c <= cap; ++c) {
        if (!e.required[i]) Eps(st[i][static_cast<size_t>(c)], st[i + 1][static_cast<size_t>(c)]);
        if (e.max >= 0 && c + 1 > e.max) continue;
        const int32_t dst = st[i + 1][static_cast<size_t>(bump(c))];
        if (c == 0) {
          Emit(m, st[i][0], dst);
        } else {
          const int32_t mid = New();
          Emit(sep, st[i][static_cast<size_t>(c)], mid);
          Emit(m, mid, dst);
        }
      }
    }
    std::vector<int32_t>& last = st[n];
    if (e.extra) {
      for (int c = 0; c <= cap; ++c) {
        if (e.max >= 0 && c + 1 > e.max) continue;
        const int32_t dst = last[static_cast<size_t>(bump(c))];
        if (c == 0) {
          Emit(*e.extra, last[0], dst);
        } else {
          const int32_t mid = New();
          Emit(sep, last[static_cast<size_t>(c)], mid);
          Emit(*e.extra, mid, dst);
        }
      }
    }
    const int32_t end = New();
    for (int c = std::max(0, e.min); c <= cap; ++c) Eps(last[static_cast<size_t>(c)], end);
    Emit(close, end, to);
  }

  // Records a counted repetition whose copies were emitted as blocks of one layout (c_k, then
  // the states inside copy k-1; Nfa::Counted), with the bytes a copy reads.
  void RecordCounted(const std::vector<int32_t>& starts, int min) {
    if (overflow_ || starts.size() < 3) return;
    const int32_t stride = starts[1] - starts[0];
    for (size_t k = 1; k < starts.size(); ++k) {
      if (starts[k] - starts[k - 1] != stride) return;
    }
    if (static_cast<int64_t>(nfa_->num_states()) != starts.back() + stride) return;
    Nfa::Counted c;
    c.begin = starts[0];
    c.stride = stride;
    c.copies = static_cast<int>(starts.size());
    c.min = min;
    // Block 2 holds the inside of copy 1 and c_2, whose edges begin copy 2: every edge of a copy.
    for (int32_t q = starts[1]; q < starts[1] + stride; ++q) {
      for (const Nfa::Edge& ed : nfa_->edges[static_cast<size_t>(q)]) {
        for (int b = ed.lo; b <= ed.hi; ++b)
          c.bytes[static_cast<size_t>(b) / 64] |= 1ull << (b % 64);
      }
    }
    nfa_->counted.push_back(c);
  }

  // The product of the kids' DFAs, explored eagerly (bounded), trimmed to the states from
  // which an accepting state is reachable, and written out as NFA states. Without the trim a
  // product state could have transitions and still never accept (e.g. a pattern that needs
  // one more character where maxLength allows none): a token leading there would be allowed
  // and the generation would reach a state with no allowed token.
  void EmitAnd(const Expr& e, int32_t from, int32_t to) {
    constexpr size_t kMaxProduct = 100000;
    std::unique_ptr<Dfa> d[2];
    for (int k = 0; k < 2; ++k) {
      auto nfa = BuildNfa(e.kids[static_cast<size_t>(k)], {limit_, kMaxProduct});
      if (!nfa.ok()) {
        overflow_ = true;
        return;
      }
      d[k] = std::make_unique<Dfa>(*nfa, kMaxProduct);
    }
    struct Run {
      uint8_t lo, hi;
      int32_t to;
    };
    struct PState {
      bool accepting = false;
      std::vector<Run> runs;
    };
    std::unordered_map<uint64_t, int32_t> ids;
    std::vector<std::pair<int32_t, int32_t>> queue;
    std::vector<PState> ps;
    auto id_of = [&](int32_t a, int32_t b) {
      const uint64_t key =
          (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
      auto it = ids.find(key);
      if (it != ids.end()) return it->second;
      const int32_t s = static_cast<int32_t>(queue.size());
      ids.emplace(key, s);
      queue.emplace_back(a, b);
      return s;
    };
    id_of(d[0]->start(), d[1]->start());
    const bool neg = e.kind == Expr::Kind::kAndNot;
    for (size_t q = 0; q < queue.size() && !overflow_; ++q) {
      const auto [a, b] = queue[q];
      PState p;
      p.accepting = d[0]->Accepting(a) && (neg ? !d[1]->Accepting(b) : d[1]->Accepting(b));
      int run_lo = -1;
      int32_t run_to = 0;
      for (int byte = 0; byte <= 256; ++byte) {
        int32_t t = -1;
        if (byte < 256) {
          const int32_t na = d[0]->Next(a, static_cast<uint8_t>(byte));
          const int32_t nb = na < 0 ? Dfa::kDead : d[1]->Next(b, static_cast<uint8_t>(byte));
          // AndNot: the second automaton may die (kDead: it never accepts again).
          if (na >= 0 && (nb >= 0 || neg)) t = id_of(na, nb);
        }
        if (run_lo >= 0 && (t != run_to || t < 0)) {
          p.runs.push_back({static_cast<uint8_t>(run_lo), static_cast<uint8_t>(byte - 1), run_to});
          run_lo = -1;
        }
        if (t >= 0 && run_lo < 0) {
          run_lo = byte;
          run_to = t;
        }
      }
      ps.push_back(std::move(p));
      if (queue.size() > kMaxProduct || d[0]->overflowed() || d[1]->overflowed()) overflow_ = true;
    }
    if (overflow_) return;
    // Co-accessible states: backwards from the accepting ones.
    std::vector<std::vector<int32_t>> preds(ps.size());
    for (size_t s = 0; s < ps.size(); ++s) {
      for (const Run& r : ps[s].runs)
        preds[static_cast<size_t>(r.to)].push_back(static_cast<int32_t>(s));
    }
    std::vector<char> live(ps.size(), 0);
    std::vector<int32_t> work;
    for (size_t s = 0; s < ps.size(); ++s) {
      if (ps[s].accepting) {
        live[s] = 1;
        work.push_back(static_cast<int32_t>(s));
      }
    }
    while (!work.empty()) {
      const int32_t s = work.back();
      work.pop_back();
      for (int32_t p : preds[static_cast<size_t>(s)]) {
        if (!live[static_cast<size_t>(p)]) {
          live[static_cast<size_t>(p)] = 1;
          work.push_back(p);
        }
      }
    }
    if (!live[0]) return;  // the product accepts nothing: no path from `from` to `to`
    std::vector<int32_t> nfa_id(ps.size(), -1);
    for (size_t s = 0; s < ps.size(); ++s) {
      if (live[s]) nfa_id[s] = New();
    }
    Eps(from, nfa_id[0]);
    for (size_t s = 0; s < ps.size(); ++s) {
      if (!live[s]) continue;
      if (ps[s].accepting) Eps(nfa_id[s], to);
      for (const Run& r : ps[s].runs) {
        if (live[static_cast<size_t>(r.to)])
          Edge(nfa_id[s], r.lo, r.hi, nfa_id[static_cast<size_t>(r.to)]);
      }
    }
  }

  Nfa* nfa_;
  size_t limit_;
  bool pushdown_;
  bool overflow_ = false;
  std::string error_;
  int flat_budget_ = 1;
  std::map<std::pair<const RuleSet*, int>, int32_t> slots_;
  std::vector<std::pair<ExprP, int32_t>> pending_;
  std::vector<std::shared_ptr<RuleSet>> keep_;
};

}  // namespace

void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

Ranges Normalize(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& p : r) {
    if (p.first > p.second) continue;
    if (!out.empty() && p.first <= out.back().second + 1) {
      out.back().second = std::max(out.back().second, p.second);
    } else {
      out.push_back(p);
    }
  }
  return out;
}

Ranges Complement(const Ranges& r, uint32_t limit) {
  Ranges n = Normalize(r), out;
  uint32_t next = 0;
  for (const auto& [lo, hi] : n) {
    if (lo > next) out.emplace_back(next, lo - 1);
    next = hi + 1;
    if (hi >= limit) return out;
  }
  if (next <= limit) out.emplace_back(next, limit);
  return out;
}

ExprP Empty() {
  static const ExprP e = Make(Expr{});
  return e;
}
ExprP Nothing() {
  Expr e;
  e.kind = Expr::Kind::kNothing;
  static const ExprP n = Make(e);
  return n;
}
ExprP Bytes(Ranges r) {
  r = Normalize(std::move(r));
  if (r.empty()) return Nothing();
  Expr e;
  e.kind = Expr::Kind::kBytes;
  e.ranges = std::move(r);
  return Make(std::move(e));
}
ExprP Byte(uint8_t b) { return Bytes({{b, b}}); }
ExprP Codepoints(Ranges r) {
  r = Normalize(std::move(r));
  if (r.empty()) return Nothing();
  Expr e;
  e.kind = Expr::Kind::kCodepoints;
  e.ranges = std::move(r);
  return Make(std::move(e));
}
ExprP Literal(std::string_view bytes) {
  std::vector<ExprP> k;
  for (char c : bytes) k.push_back(Byte(static_cast<uint8_t>(c)));
  return Concat(std::move(k));
}
ExprP Concat(std::vector<ExprP> kids) {
  std::vector<ExprP> flat;
  for (ExprP& k : kids) {
    if (k->kind == Expr::Kind::kNothing) return Nothing();
    if (k->kind == Expr::Kind::kEmpty) continue;
    if (k->kind == Expr::Kind::kConcat) {
      flat.insert(flat.end(), k->kids.begin(), k->kids.end());
    } else {
      flat.push_back(std::move(k));
    }
  }
  if (flat.empty()) return Empty();
  if (flat.size() == 1) return flat[0];
  Expr e;
  e.kind = Expr::Kind::kConcat;
  e.kids = std::move(flat);
  return Make(std::move(e));
}
ExprP Alt(std::vector<ExprP> kids) {
  std::vector<ExprP> flat;
  for (ExprP& k : kids) {
    if (k->kind == Expr::Kind::kNothing) continue;
    if (k->kind == Expr::Kind::kAlt) {
      flat.insert(flat.end(), k->kids.begin(), k->kids.end());
    } else {
      flat.push_back(std::move(k));
    }
  }
  if (flat.empty()) return Nothing();
  if (flat.size() == 1) return flat[0];
  Expr e;
  e.kind = Expr::Kind::kAlt;
  e.kids = std::move(flat);
  return Make(std::move(e));
}
ExprP Repeat(ExprP x, int min, int max) {
  if (max == 0) return Empty();
  if (min == 1 && max == 1) return x;
  if (x->kind == Expr::Kind::kEmpty) return x;
  if (x->kind == Expr::Kind::kNothing) return min == 0 ? Empty() : x;
  Expr e;
  e.kind = Expr::Kind::kRepeat;
  e.kids = {std::move(x)};
  e.min = min;
  e.max = max;
  return Make(std::move(e));
}
ExprP Optional(ExprP e) { return Repeat(std::move(e), 0, 1); }
ExprP Star(ExprP e) { return Repeat(std::move(e), 0, -1); }
ExprP List(ExprP item, ExprP sep, int min, int max) {
  if (max == 0) return Empty();
  if (item->kind == Expr::Kind::kNothing) return min == 0 ? Empty() : Nothing();
  Expr e;
  e.kind = Expr::Kind::kList;
  e.kids = {std::move(item), std::move(sep)};
  e.min = min;
  e.max = max;
  return Make(std::move(e));
}
ExprP And(ExprP a, ExprP b) {
  if (a->kind == Expr::Kind::kNothing || b->kind == Expr::Kind::kNothing) return Nothing();
  Expr e;
  e.kind = Expr::Kind::kAnd;
  e.kids = {std::move(a), std::move(b)};
  return Make(std::move(e));
}
ExprP AndNot(ExprP a, ExprP b) {
  if (a->kind == Expr::Kind::kNothing) return Nothing();
  if (b->kind == Expr::Kind::kNothing) return a;
  Expr e;
  e.kind = Expr::Kind::kAndNot;
  e.kids = {std::move(a), std::move(b)};
  return Make(std::move(e));
}
ExprP Object(ExprP open, ExprP sep, ExprP close, std::vector<ObjectMember> members, ExprP extra,
             int min_members, int max_members) {
  Expr e;
  e.kind = Expr::Kind::kObject;
  e.kids = {std::move(open), std::move(sep), std::move(close)};
  for (ObjectMember& m : members) {
    if (m.expr->kind == Expr::Kind::kNothing) {
      if (m.required) return Nothing();
      continue;
    }
    e.kids.push_back(std::move(m.expr));
    e.required.push_back(m.required);
  }
  if (extra && extra->kind != Expr::Kind::kNothing) e.extra = std::move(extra);
  e.min = min_members;
  e.max = max_members;
  return Make(std::move(e));
}

ExprP Ref(const std::shared_ptr<RuleSet>& rules, int index, ExprP approx) {
  Expr e;
  e.kind = Expr::Kind::kRef;
  if (approx) e.kids = {std::move(approx)};
  e.ref_rules = rules;
  e.min = index;
  e.has_ref = true;
  return Make(std::move(e));
}

ExprP WithRules(ExprP main, std::shared_ptr<RuleSet> rules) {
  if (!main->has_ref) return main;
  Expr e;
  e.kind = Expr::Kind::kRules;
  e.kids = {std::move(main)};
  e.rules = std::move(rules);
  return Make(std::move(e));
}

StatusOr<std::shared_ptr<const Nfa>> BuildNfa(const ExprP& e, const CompileLimits& limits,
                                              bool pushdown) {
  auto nfa = std::make_shared<Nfa>();
  Emitter em(nfa.get(), limits.max_nfa_states, pushdown);
  nfa->start = em.New();
  nfa->accept = em.New();
  em.Emit(*e, nfa->start, nfa->accept);
  em.EmitRules();
  if (!em.error().empty()) return InvalidArgument(em.error());
  if (em.overflow()) {
    return Status(StatusCode::kResourceExhausted,
                  "the constraint is too large: its automaton would exceed " +
                      std::to_string(limits.max_nfa_states) + " states");
  }
  return std::shared_ptr<const Nfa>(std::move(nfa));
}

}  // namespace sluice::structured
