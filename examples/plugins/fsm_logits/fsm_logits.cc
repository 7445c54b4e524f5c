// fsm_logits: a sluice logits-processor plugin (docs/plugins.md). Each request gives, in its
// "extra_args", a finite-state machine over token ids; at every step the row may only sample
// the tokens its current state allows, and each sampled token moves it to the next state. The
// kind of stateful rule a recommendation prompt needs ("an item id is one of these token
// sequences, then a separator, at most 5 items").
//
//   "logits_processors": ["fsm"],
//   "extra_args": {"fsm": {"start": 0, "states": [
//       {"allow": [11, 12], "next": {"11": 1, "12": 2}},   // only 11 or 12, then state 1 or 2
//       {"allow": [7], "else": 0},                         // only 7, then back to 0
//       {}                                                 // anything, stay
//   ]}}
//
// A state's "allow" lists the tokens it permits (absent: every token); "next" maps a token to
// the state it leads to; "else" is the state any other token leads to (absent: stay).
//
// Built against the installed header only: include/sluice/plugin.h (plain C ABI). simdjson
// parses extra_args. Threading: validate runs on request threads (pure), update_state on the
// engine thread, fill_allowed / fill_bitmask for distinct rows concurrently (reads its row
// only). Built against an ABI 1.1 header (the fsm_logits_abi11 test build) it has no
// fill_allowed and sluice asks for bitmasks only.
#include <simdjson.h>
#include <sluice/plugin.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace {

constexpr size_t kMaxStates = 1 << 16;
constexpr size_t kMaxTokens = 1 << 20;  // all "allow" and "next" entries together

struct State {
  bool any = true;
  std::vector<int32_t> allow;                     // sorted
  std::vector<std::pair<int32_t, int32_t>> next;  // sorted by token
  int32_t other = -1;                             // -1: stay
};

struct Fsm {
  std::vector<State> states;
  int32_t start = 0;

  bool Allowed(int32_t s, int32_t t) const {
    const State& st = states[static_cast<size_t>(s)];
    return st.any || std::binary_search(st.allow.begin(), st.allow.end(), t);
  }
  int32_t Next(int32_t s, int32_t t) const {
    const State& st = states[static_cast<size_t>(s)];
    auto it = std::lower_bound(st.next.begin(), st.next.end(), std::make_pair(t, INT32_MIN));
    if (it != st.next.end() && it->first == t) return it->second;
    return st.other >= 0 ? st.other : s;
  }
};

bool ParseToken(std::string_view key, int32_t vocab, int32_t* out) {
  if (key.empty() || key.size() > 10) return false;
  int64_t v = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  if (v >= vocab) return false;
  *out = static_cast<int32_t>(v);
  return true;
}

// Parses extra_args' "fsm"; false with *err on anything malformed.
bool Parse(const char* json, size_t len, int32_t vocab, Fsm* fsm, std::string* err) {
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (parser.parse(json, len).get(doc)) return *err = "extra_args is not valid JSON", false;
  simdjson::dom::object args, spec;
  if (doc.get(args)) return *err = "extra_args must be an object", false;
  simdjson::dom::element e;
  if (args["fsm"].get(e)) return *err = "extra_args.fsm is required", false;
  if (e.get(spec)) return *err = "extra_args.fsm must be an object", false;
  simdjson::dom::array states;
  if (spec["states"].get(states)) {
    return *err = "extra_args.fsm.states must be a list of states", false;
  }
  const size_t n = states.size();
  if (n == 0 || n > kMaxStates) {
    return *err = "extra_args.fsm.states: 1 to " + std::to_string(kMaxStates) + " states", false;
  }
  for (auto kv : spec) {
    if (kv.key != "states" && kv.key != "start") {
      return *err = "extra_args.fsm: unknown field \"" + std::string(kv.key) + "\"", false;
    }
  }
  int64_t start = 0;
  if (!spec["start"].get(e) && (e.get(start) || start < 0 || static_cast<size_t>(start) >= n)) {
    return *err = "extra_args.fsm.start must be a state index", false;
  }
  fsm->start = static_cast<int32_t>(start);
  fsm->states.assign(n, State{});
  size_t entries = 0, i = 0;
  for (auto se : states) {
    const std::string where = "extra_args.fsm.states[" + std::to_string(i) + "]";
    State& st = fsm->states[i++];
    simdjson::dom::object so;
    if (se.get(so)) return *err = where + " must be an object", false;
    for (auto kv : so) {
      if (kv.key == "allow") {
        simdjson::dom::array a;
        if (kv.value.get(a)) return *err = where + ".allow must be a list of token ids", false;
        st.any = false;
        for (auto x : a) {
          int64_t t;
          if (x.get(t) || t < 0 || t >= vocab) {
            return *err = where + ".allow: token ids in [0, " + std::to_string(vocab) + ")", false;
          }
          st.allow.push_back(static_cast<int32_t>(t));
        }
        if (st.allow.empty()) return *err = where + ".allow is empty", false;
        entries += st.allow.size();
      } else if (kv.key == "next") {
        simdjson::dom::object no;
        if (kv.value.get(no)) return *err = where + ".next must be an object", false;
        for (auto t : no) {
          int32_t tok;
          int64_t to;
          if (!ParseToken(t.key, vocab, &tok)) {
            return *err = where + ".next: \"" + std::string(t.key) + "\" is not a token id", false;
          }
          if (t.value.get(to) || to < 0 || static_cast<size_t>(to) >= n) {
            return *err = where + ".next." + std::string(t.key) + " must be a state index", false;
          }
          st.next.emplace_back(tok, static_cast<int32_t>(to));
        }
        entries += st.next.size();
      } else if (kv.key == "else") {
        int64_t to;
        if (kv.value.get(to) || to < 0 || static_cast<size_t>(to) >= n) {
          return *err = where + ".else must be a state index", false;
        }
        st.other = static_cast<int32_t>(to);
      } else {
        return *err = where + ": unknown field \"" + std::string(kv.key) + "\"", false;
      }
    }
    if (entries > kMaxTokens) {
      return *err = "extra_args.fsm: more than " + std::to_string(kMaxTokens) + " entries", false;
    }
    std::sort(st.allow.begin(), st.allow.end());
    st.allow.erase(std::unique(st.allow.begin(), st.allow.end()), st.allow.end());
    std::sort(st.next.begin(), st.next.end());
  }
  return true;
}

struct Row {
  std::shared_ptr<const Fsm> fsm;
  int32_t state = 0;
  int64_t consumed = 0;  // output tokens already run through the FSM
  const sluice_token_view* output = nullptr;
  std::string error;
};

struct Instance {
  int32_t vocab = 0;
  std::vector<Row> rows;
};

int Validate(void*, const sluice_request_params* p, sluice_plugin_error* err) {
  Fsm fsm;
  std::string why;
  if (!Parse(p->extra_args, p->extra_args_len, p->vocab_size, &fsm, &why)) {
    return sluice_plugin_fail(err, "%s", why.c_str());
  }
  return 0;
}

void* Create(void*, const sluice_processor_config* c, sluice_plugin_error*) {
  auto* in = new Instance;
  in->vocab = c->vocab_size;
  in->rows.reserve(static_cast<size_t>(c->max_rows));
  return in;
}

void Destroy(void* p) { delete static_cast<Instance*>(p); }

void Advance(Row& r) {
  while (r.error.empty() && r.consumed < r.output->size) {
    const int32_t t = r.output->ids[r.consumed++];
    if (!r.fsm->Allowed(r.state, t)) {
      r.error =
          "token " + std::to_string(t) + " is not allowed in state " + std::to_string(r.state);
      return;
    }
    r.state = r.fsm->Next(r.state, t);
  }
}

void UpdateState(void* p, const sluice_batch_update* u) {
  auto& rows = static_cast<Instance*>(p)->rows;
  const int32_t vocab = static_cast<Instance*>(p)->vocab;
  for (int32_t i = 0; i < u->num_removed; ++i) rows[static_cast<size_t>(u->removed[i])] = Row{};
  if (rows.size() < static_cast<size_t>(u->batch_size)) rows.resize(u->batch_size);
  for (int32_t i = 0; i < u->num_added; ++i) {
    const sluice_added_row& a = u->added[i];
    if (rows.size() <= static_cast<size_t>(a.row)) rows.resize(static_cast<size_t>(a.row) + 1);
    Row& r = rows[static_cast<size_t>(a.row)];
    r = Row{};
    auto fsm = std::make_shared<Fsm>();
    if (!Parse(a.params->extra_args, a.params->extra_args_len, vocab, fsm.get(), &r.error)) {
      fsm.reset();
    } else {
      r.state = fsm->start;
    }
    r.fsm = std::move(fsm);
    r.output = a.output;  // new or reset: the whole output so far runs through the FSM
  }
  for (int32_t i = 0; i < u->num_moved; ++i) {
    const sluice_moved_row& m = u->moved[i];
    if (m.kind == SLUICE_MOVE_SWAP) {
      std::swap(rows[static_cast<size_t>(m.from)], rows[static_cast<size_t>(m.to)]);
    } else {
      rows[static_cast<size_t>(m.to)] = std::move(rows[static_cast<size_t>(m.from)]);
      rows[static_cast<size_t>(m.from)] = Row{};
    }
  }
  rows.resize(static_cast<size_t>(u->batch_size));
  for (Row& r : rows) {
    if (r.fsm) Advance(r);
  }
}

int FillBitmask(void* p, int32_t row, uint32_t* mask, sluice_plugin_error* err) {
  const Instance& in = *static_cast<Instance*>(p);
  const Row& r = in.rows[static_cast<size_t>(row)];
  if (!r.error.empty()) return sluice_plugin_fail(err, "%s", r.error.c_str());
  const State& st = r.fsm->states[static_cast<size_t>(r.state)];
  if (st.any) return 0;
  std::memset(mask, 0, sizeof(uint32_t) * ((static_cast<size_t>(in.vocab) + 31) / 32));
  for (int32_t t : st.allow) mask[t >> 5] |= 1u << (t & 31);
  return 0;
}

#if SLUICE_PLUGIN_ABI_MINOR >= 3
// The same tokens as a list (ABI 1.3): a state allows a few hundred tokens at most in the
// usual rules, so sluice writes no bitmask of the whole vocabulary for the row. A state that
// allows every token, or more than capacity, leaves *count at -1: sluice calls FillBitmask.
int FillAllowed(void* p, int32_t row, int32_t* ids, int32_t capacity, int32_t* count,
                sluice_plugin_error* err) {
  const Instance& in = *static_cast<Instance*>(p);
  const Row& r = in.rows[static_cast<size_t>(row)];
  if (!r.error.empty()) return sluice_plugin_fail(err, "%s", r.error.c_str());
  const State& st = r.fsm->states[static_cast<size_t>(r.state)];
  if (st.any || st.allow.size() > static_cast<size_t>(capacity)) return 0;
  std::copy(st.allow.begin(), st.allow.end(), ids);
  *count = static_cast<int32_t>(st.allow.size());
  return 0;
}
#endif

}  // namespace

extern "C" {

SLUICE_PLUGIN_DECLARE_ABI()

SLUICE_PLUGIN_EXPORT int sluice_plugin_init(const sluice_plugin_host* host,
                                            sluice_plugin_error* err) {
  sluice_logits_processor lp{};
  lp.struct_size = sizeof lp;
  lp.name = "fsm";
  lp.validate = Validate;
  lp.create = Create;
  lp.destroy = Destroy;
  lp.update_state = UpdateState;
  lp.fill_bitmask = FillBitmask;
#if SLUICE_PLUGIN_ABI_MINOR >= 3
  lp.fill_allowed = FillAllowed;
#endif
  return host->register_logits_processor(host->context, &lp, err);
}

}  // extern "C"
