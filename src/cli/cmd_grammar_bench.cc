// `sluice grammar-bench --tokenizer DIR --schemas FILE.jsonl [--output results.jsonl]`: the
// MaskBench methodology (JSONSchemaBench) on a corpus of JSON Schemas with test instances, one
// per line: {"id", "schema", "tests": [{"valid", "data"}]}. Per schema: compiled or refused
// (with the reason) and the time to the first mask; per test instance, serialised compactly
// with its keys in an order the constraint accepts, if any (Serialiser), and tokenised, whether
// every token was allowed by the mask and the end of sequence allowed after the last (accepted), or
// which token was refused; the time of every mask. Single-threaded. The summary (stdout) gives
// coverage, correctness (valid instances rejected, invalid ones accepted: both must be 0) and the
// mask-time percentiles.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cli/command.h"
#include "cli/common.h"
#include "structured/constraint.h"
#include "structured/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace sluice::cli {
namespace {

// The first few tokens a fast mask and the reference walk disagree on (a failed --check-masks).
void ShowMaskDifference(const structured::TokenTrie& trie, const std::vector<uint32_t>& fast,
                        const std::vector<uint32_t>& ref) {
  int shown = 0;
  for (size_t w = 0; w < fast.size() && shown < 8; ++w) {
    for (uint32_t dif = fast[w] ^ ref[w]; dif != 0 && shown < 8; dif &= dif - 1, ++shown) {
      const int bit = __builtin_ctz(dif);
      const auto id = static_cast<int32_t>(w * 32 + static_cast<size_t>(bit));
      const std::string* b = trie.bytes(id);
      std::fprintf(stderr, "  token %d: %s by the fast mask, %s by the reference, bytes [%s]\n", id,
                   (fast[w] >> bit) & 1 ? "allowed" : "refused",
                   (ref[w] >> bit) & 1 ? "allowed" : "refused", b ? b->c_str() : "?");
    }
  }
}

struct BenchFlags {
  std::string tokenizer;
  std::string schemas;
  std::string output;
  size_t limit = 0;
  std::string whitespace;
  bool check_masks = false;
  bool no_counted_sharing = false;
  int walks = 0;          // random constrained generations per compiled schema
  int walk_tokens = 128;  // tokens per generation at most
  int walk_threads = 1;   // threads running the walks of one schema at once
};

// The instance serialised compactly (structured::CanonicalJson's spelling) with each object's
// keys in an order the grammar accepts, when there is one: sluice fixes the order of keys (the
// schema's), and a valid value written in another order is a different text of the same value.
// Orders are searched depth-first (document order first) within a budget of steps; when none
// is found, the keys follow in document order (the text is then refused). Returns the state
// after the text (kDead: refused).
struct Serialiser {
  structured::Grammar& g;
  int budget = 200000;

  int32_t Value(int32_t s, simdjson::dom::element e, std::string* out) {
    using simdjson::dom::element_type;
    if (e.type() == element_type::OBJECT) {
      std::vector<std::pair<std::string_view, simdjson::dom::element>> members;
      for (auto [k, v] : simdjson::dom::object(e)) members.emplace_back(k, v);
      std::vector<bool> used(members.size(), false);
      std::string body;
      const int32_t t = s < 0 ? s : g.Run(s, "{");
      Memo memo;
      int32_t r = t < 0 ? structured::Grammar::kDead : Members(t, members, &used, 0, &body, &memo);
      if (r < 0) {  // no order found: document order
        body.clear();
        for (size_t i = 0; i < members.size(); ++i) {
          body += (i ? "," : "") + structured::JsonQuote(members[i].first) + ":";
          Value(structured::Grammar::kDead, members[i].second, &body);
        }
      }
      *out += "{" + body + "}";
      return r < 0 ? r : g.Run(r, "}");
    }
    if (e.type() == element_type::ARRAY) {
      out->push_back('[');
      if (s >= 0) s = g.Run(s, "[");
      bool first = true;
      for (simdjson::dom::element x : simdjson::dom::array(e)) {
        if (!first) {
          out->push_back(',');
          if (s >= 0) s = g.Run(s, ",");
        }
        first = false;
        s = Value(s, x, out);
      }
      out->push_back(']');
      return s < 0 ? s : g.Run(s, "]");
    }
    auto scalar = structured::CanonicalJson(simdjson::minify(e));
    const std::string text = scalar.ok() ? *scalar : std::string("?");
    out->append(text);
    return s < 0 ? s : g.Run(s, text);
  }

  // One object's search: (state, members used) already found to have no accepted order, so
  // that a failing suffix is not searched again in every order of the members before it, and
  // each member's value serialised from a state once (its own search is not repeated).
  struct Memo {
    std::set<std::pair<int32_t, std::vector<bool>>> dead;
    std::map<std::pair<int32_t, size_t>, std::pair<int32_t, std::string>> values;
  };

  // The members not used yet, in some accepted order, from state s (after `done` of them).
  int32_t Members(int32_t s,
                  const std::vector<std::pair<std::string_view, simdjson::dom::element>>& m,
                  std::vector<bool>* used, size_t done, std::string* out, Memo* memo) {
    if (done == m.size()) return g.Run(s, "}") >= 0 ? s : structured::Grammar::kDead;
    if (memo->dead.count({s, *used})) return structured::Grammar::kDead;
    // The members that may come next (key and value accepted), tried first where they leave
    // the most other remaining keys acceptable: a constraint that keeps the schema's property
    // order finds the instance's members in that order at once, without trying the orders of
    // optional members that lead nowhere (exponential in the members).
    struct Next {
      size_t i;
      int32_t state;
      std::string text;
      int score;
    };
    std::vector<Next> next;
    for (size_t i = 0; i < m.size(); ++i) {
      if ((*used)[i] || --budget < 0) continue;
      std::string t = (done ? "," : "") + structured::JsonQuote(m[i].first) + ":";
      int32_t ks = g.Run(s, t);
      if (ks < 0) continue;
      auto [it, fresh] = memo->values.try_emplace({ks, i});
      if (fresh) it->second.first = Value(ks, m[i].second, &it->second.second);
      ks = it->second.first;
      if (ks < 0) continue;
      int score = 0;
      for (size_t j = 0; j < m.size(); ++j) {
        if (j == i || (*used)[j]) continue;
        if (g.Run(ks, "," + structured::JsonQuote(m[j].first) + ":") >= 0) ++score;
      }
      next.push_back({i, ks, t + it->second.second, score});
    }
    std::stable_sort(next.begin(), next.end(),
                     [](const Next& a, const Next& b) { return a.score > b.score; });
    for (const Next& n : next) {
      (*used)[n.i] = true;
      std::string rest;
      const int32_t r = Members(n.state, m, used, done + 1, &rest, memo);
      (*used)[n.i] = false;
      if (r >= 0) {
        *out += n.text + rest;
        return r;
      }
    }
    if (budget >= 0) memo->dead.insert({s, *used});  // a search cut by the budget proves nothing
    return structured::Grammar::kDead;
  }
};

double Pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
}

double Us(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

int RunBench(const BenchFlags& f) {
  using Clock = std::chrono::steady_clock;
  auto tok = Tokenizer::FromDirectory(f.tokenizer);
  if (!tok.ok()) return ReportError(tok.status());
  const int n_tok = static_cast<int>((*tok)->vocab_size());
  const int32_t eos = n_tok;  // an id of its own past the vocabulary
  auto t0 = Clock::now();
  auto trie = structured::TokenTrie::FromTokenizer(**tok, n_tok + 1, {eos});
  if (!trie.ok()) return ReportError(trie.status());
  const double trie_ms = Us(t0, Clock::now()) / 1e3;
  std::fprintf(stderr, "tokenizer: %d tokens, trie of %zu nodes built in %.1f ms\n", n_tok,
               (*trie)->num_nodes(), trie_ms);
  std::unique_ptr<std::ofstream> out;
  if (!f.output.empty()) {
    out = std::make_unique<std::ofstream>(f.output);
    if (!*out) return ReportError(InvalidArgument("cannot write " + f.output));
  }
  size_t n_schemas = 0, n_compiled = 0, valid_total = 0, invalid_total = 0;
  size_t valid_accepted = 0, valid_rejected = 0, invalid_accepted = 0, invalid_rejected = 0;
  size_t bad_json = 0;
  std::vector<double> mask_us, compile_ms, walk_mask_us;
  size_t walk_dead = 0;
  double walks_wall_us = 0;  // the walks' wall time, all schemas
  size_t mask_walks = 0;     // masks computed by a walk (not found cached), all schemas
  std::vector<std::string> rejected_ids, accepted_ids;
  std::vector<uint32_t> words(static_cast<size_t>((*trie)->words()));
  std::vector<uint32_t> ref_words(words.size());
  size_t mask_checked = 0, mask_mismatches = 0;
  Status st = ForEachJsonLine(
      f.schemas, "schemas", [&](size_t, const std::string&, simdjson::dom::element line) {
        if (f.limit && n_schemas >= f.limit) return Status::Ok();
        ++n_schemas;
        std::string_view id;
        if (line["id"].get(id) != simdjson::SUCCESS) id = "";
        simdjson::dom::element schema;
        if (line["schema"].get(schema) != simdjson::SUCCESS) {
          return InvalidArgument("line without \"schema\"");
        }
        const std::string schema_text = simdjson::minify(schema);
        structured::ConstraintSpec spec;
        spec.kind = structured::ConstraintSpec::Kind::kJsonSchema;
        spec.text = schema_text;
        spec.field = "schema";
        if (!f.whitespace.empty()) spec.whitespace = f.whitespace;
        const auto c0 = Clock::now();
        StatusOr<std::shared_ptr<structured::Grammar>> g =
            [&]() -> StatusOr<std::shared_ptr<structured::Grammar>> {
          ASSIGN_OR_RETURN(structured::ExprP e, structured::CompileConstraint(spec));
          structured::CompileLimits limits;
          limits.share_counted_masks = !f.no_counted_sharing;
          ASSIGN_OR_RETURN(auto gr, structured::Grammar::Create(e, *trie, limits));
          RETURN_IF_ERROR(gr->FillMask(gr->start(), words.data()));  // time to the first mask
          return gr;
        }();
        const double cms = Us(c0, Clock::now()) / 1e3;
        std::string rec = "{\"id\":" + structured::JsonQuote(id);
        if (!g.ok()) {
          rec +=
              ",\"status\":\"refused\",\"reason\":" + structured::JsonQuote(g.status().message()) +
              "}";
          if (out) *out << rec << "\n";
          return Status::Ok();
        }
        ++n_compiled;
        compile_ms.push_back(cms);
        const size_t masks_before = mask_us.size();
        char buf[128];
        std::snprintf(buf, sizeof(buf), "%.3f", cms);
        rec += ",\"status\":\"compiled\",\"compile_ms\":" + std::string(buf) +
               ",\"pushdown\":" + ((*g)->pushdown() ? "true" : "false") + ",\"tests\":[";
        simdjson::dom::array tests;
        bool first = true;
        if (line["tests"].get(tests) == simdjson::SUCCESS) {
          for (simdjson::dom::element t : tests) {
            bool valid = false;
            if (t["valid"].get(valid) != simdjson::SUCCESS) valid = false;
            simdjson::dom::element data;
            if (t["data"].get(data) != simdjson::SUCCESS) continue;
            std::string text;
            Serialiser{**g}.Value((*g)->start(), data, &text);
            auto enc = (*tok)->Encode(text, false);
            if (!enc.ok()) {
              ++bad_json;
              continue;
            }
            std::vector<int32_t> ids = enc->ids;
            ids.push_back(eos);
            int32_t s = (*g)->start();
            int rejected_at = -1;
            std::string mask_error;  // the mask failed (a limit), not the token
            for (size_t i = 0; i < ids.size(); ++i) {
              const auto m0 = Clock::now();
              Status ms = (*g)->FillMask(s, words.data());
              mask_us.push_back(Us(m0, Clock::now()));
              if (f.check_masks) {  // untimed: the plain walk must give the same mask
                Status rs = (*g)->ReferenceMask(s, ref_words.data());
                ++mask_checked;
                if (rs.ok() != ms.ok() || (ms.ok() && ref_words != words)) {
                  ++mask_mismatches;
                  std::fprintf(stderr, "mask mismatch: schema %.*s, token %zu\n",
                               static_cast<int>(id.size()), id.data(), i);
                  if (ms.ok() && rs.ok()) ShowMaskDifference(**trie, words, ref_words);
                }
              }
              if (!ms.ok()) {
                rejected_at = static_cast<int>(i);
                mask_error = ms.message();
                break;
              }
              const int32_t tid = ids[i];
              if (!((words[static_cast<size_t>(tid) >> 5] >> (tid & 31)) & 1)) {
                rejected_at = static_cast<int>(i);
                break;
              }
              if (tid != eos) s = (*g)->Advance(s, tid);
            }
            const bool accepted = rejected_at < 0;
            if (valid) {
              ++valid_total;
              accepted ? ++valid_accepted : ++valid_rejected;
              if (!accepted) rejected_ids.push_back(std::string(id));
            } else {
              ++invalid_total;
              accepted ? ++invalid_accepted : ++invalid_rejected;
              if (accepted) accepted_ids.push_back(std::string(id));
            }
            if (!first) rec += ",";
            first = false;
            rec += std::string("{\"valid\":") + (valid ? "true" : "false") +
                   ",\"accepted\":" + (accepted ? "true" : "false") +
                   ",\"tokens\":" + std::to_string(ids.size());
            if (!accepted) {
              rec += ",\"rejected_at\":" + std::to_string(rejected_at);
              // Where: the instance's text up to the refused token (its byte offset, the 60
              // bytes before it) and the token's text ("" for end of sequence).
              const size_t at = static_cast<size_t>(rejected_at);
              const size_t off = at < enc->offsets.size() ? enc->offsets[at].first : text.size();
              const size_t from = off > 60 ? off - 60 : 0;
              const size_t end = at < enc->offsets.size() ? enc->offsets[at].second : off;
              rec += ",\"rejected_offset\":" + std::to_string(off) +
                     ",\"before\":" + structured::JsonQuote(text.substr(from, off - from)) +
                     ",\"token\":" + structured::JsonQuote(text.substr(off, end - off));
            }
            if (!mask_error.empty()) rec += ",\"error\":" + structured::JsonQuote(mask_error);
            rec += "}";
          }
        }
        rec += "]";
        if (f.walks > 0) {
          // Generations like a random-weight model's under the constraint: each token drawn
          // uniformly among the allowed ones (the end of sequence included once allowed).
          // Every mask is timed; a state with no allowed token (a dead end the engine let the
          // generation into) is counted and named. --walk-threads: the walks run on that many
          // threads at once against the one grammar (walk w on thread w % N), as the
          // generation engine's mask threads ask it for many requests under one schema.
          struct WalkOut {
            std::vector<double> us;
            int dead = 0, masks = 0;
            size_t checked = 0, mismatches = 0;
          };
          auto one_walk = [&](int w, WalkOut& o, std::vector<uint32_t>& wd,
                              std::vector<uint32_t>& rw) {
            std::mt19937_64 rng((static_cast<uint64_t>(n_schemas) << 16) ^
                                static_cast<uint64_t>(w));
            int32_t s = (*g)->start();
            std::vector<int32_t> walked;
            auto text_so_far = [&] {
              auto t = (*tok)->Decode(walked, false);
              return structured::JsonQuote(t.ok() ? *t : std::string("?"));
            };
            for (int i = 0; i < f.walk_tokens; ++i) {
              const auto m0 = Clock::now();
              Status ms = (*g)->FillMask(s, wd.data());
              o.us.push_back(Us(m0, Clock::now()));
              ++o.masks;
              if (f.check_masks) {
                Status rs = (*g)->ReferenceMask(s, rw.data());
                ++o.checked;
                if (rs.ok() != ms.ok() || (ms.ok() && rw != wd)) {
                  ++o.mismatches;
                  std::fprintf(stderr, "mask mismatch: schema %.*s, walk %d, token %d\n",
                               static_cast<int>(id.size()), id.data(), w, i);
                  if (ms.ok() && rs.ok()) ShowMaskDifference(**trie, wd, rw);
                }
              }
              size_t allowed = 0;
              if (ms.ok()) {
                for (uint32_t x : wd) allowed += static_cast<size_t>(__builtin_popcount(x));
              }
              if (allowed == 0) {
                ++o.dead;
                std::fprintf(stderr, "dead end: schema %.*s, walk %d, token %d: %s after %s\n",
                             static_cast<int>(id.size()), id.data(), w, i,
                             ms.ok() ? "no token allowed" : ms.message().c_str(),
                             text_so_far().c_str());
                break;
              }
              size_t k = std::uniform_int_distribution<size_t>(0, allowed - 1)(rng);
              int32_t tid = -1;
              for (size_t wi = 0; wi < wd.size() && tid < 0; ++wi) {
                const size_t c = static_cast<size_t>(__builtin_popcount(wd[wi]));
                if (k >= c) {
                  k -= c;
                  continue;
                }
                uint32_t x = wd[wi];
                for (size_t j = 0; j < k; ++j) x &= x - 1;
                tid = static_cast<int32_t>(wi * 32 + static_cast<size_t>(__builtin_ctz(x)));
              }
              if (tid == eos) break;
              walked.push_back(tid);
              s = (*g)->Advance(s, tid);
              if (s < 0) {  // an allowed token the automaton refuses: the mask was wrong
                ++o.dead;
                std::fprintf(stderr, "refused allowed token: schema %.*s, walk %d, token %d: %s\n",
                             static_cast<int>(id.size()), id.data(), w, i, text_so_far().c_str());
                break;
              }
            }
          };
          const int nt = std::max(1, std::min(f.walk_threads, f.walks));
          std::vector<WalkOut> outs(static_cast<size_t>(nt));
          const auto w0 = Clock::now();
          if (nt == 1) {
            for (int w = 0; w < f.walks; ++w) one_walk(w, outs[0], words, ref_words);
          } else {
            std::vector<std::thread> threads;
            for (int k = 0; k < nt; ++k) {
              threads.emplace_back([&, k] {
                std::vector<uint32_t> wd(words.size()), rw(words.size());
                for (int w = k; w < f.walks; w += nt)
                  one_walk(w, outs[static_cast<size_t>(k)], wd, rw);
              });
            }
            for (std::thread& t : threads) t.join();
          }
          walks_wall_us += Us(w0, Clock::now());
          int dead = 0, walk_masks = 0;
          for (const WalkOut& o : outs) {
            walk_mask_us.insert(walk_mask_us.end(), o.us.begin(), o.us.end());
            dead += o.dead;
            walk_masks += o.masks;
            mask_checked += o.checked;
            mask_mismatches += o.mismatches;
          }
          walk_dead += static_cast<size_t>(dead);
          rec += ",\"walk_masks\":" + std::to_string(walk_masks) +
                 ",\"walk_dead_ends\":" + std::to_string(dead);
        }
        mask_walks += (*g)->MaskWalks();
        if (mask_us.size() > masks_before) {  // this schema's masks: mean and max
          double sum = 0, mx = 0;
          for (size_t i = masks_before; i < mask_us.size(); ++i) {
            sum += mask_us[i];
            mx = std::max(mx, mask_us[i]);
          }
          std::snprintf(buf, sizeof(buf),
                        ",\"masks\":%zu,\"mask_us_mean\":%.3f,\"mask_us_max\":%.1f",
                        mask_us.size() - masks_before,
                        sum / static_cast<double>(mask_us.size() - masks_before), mx);
          rec += buf;
        }
        rec += "}";
        if (out) *out << rec << "\n";
        return Status::Ok();
      });
  if (!st.ok()) return ReportError(st);
  double mean = 0;
  for (double v : mask_us) mean += v;
  if (!mask_us.empty()) mean /= static_cast<double>(mask_us.size());
  std::printf(
      "{\"schemas\":%zu,\"compiled\":%zu,\"refused\":%zu,\"coverage\":%.4f,"
      "\"valid_tests\":%zu,\"valid_accepted\":%zu,\"valid_rejected\":%zu,"
      "\"invalid_tests\":%zu,\"invalid_rejected\":%zu,\"invalid_accepted\":%zu,\"unserialisable_"
      "tests\":%zu,"
      "\"masks\":%zu,\"mask_us\":{\"mean\":%.2f,\"p50\":%.2f,\"p99\":%.2f,\"max\":%.1f},"
      "\"compile_ms\":{\"p50\":%.3f,\"p99\":%.3f,\"max\":%.1f},\"trie_ms\":%.1f,\"vocab\":%d,"
      "\"mask_walks\":%zu",
      n_schemas, n_compiled, n_schemas - n_compiled,
      n_schemas ? static_cast<double>(n_compiled) / static_cast<double>(n_schemas) : 0.0,
      valid_total, valid_accepted, valid_rejected, invalid_total, invalid_rejected,
      invalid_accepted, bad_json, mask_us.size(), mean, Pct(mask_us, 0.5), Pct(mask_us, 0.99),
      mask_us.empty() ? 0.0 : *std::max_element(mask_us.begin(), mask_us.end()),
      Pct(compile_ms, 0.5), Pct(compile_ms, 0.99),
      compile_ms.empty() ? 0.0 : *std::max_element(compile_ms.begin(), compile_ms.end()), trie_ms,
      n_tok, mask_walks);
  if (f.walks > 0) {
    double wm = 0;
    for (double v : walk_mask_us) wm += v;
    if (!walk_mask_us.empty()) wm /= static_cast<double>(walk_mask_us.size());
    size_t over1 = 0, over4 = 0;
    for (double v : walk_mask_us) {
      over1 += v > 1000.0;
      over4 += v > 4000.0;
    }
    std::printf(
        ",\"walks\":{\"per_schema\":%d,\"masks\":%zu,\"dead_ends\":%zu,"
        "\"masks_over_1ms\":%zu,\"masks_over_4ms\":%zu,\"threads\":%d,\"wall_s\":%.3f,"
        "\"mask_us\":{\"mean\":%.2f,\"p50\":%.2f,\"p99\":%.2f,\"p999\":%.1f,\"max\":%.1f}}",
        f.walks, walk_mask_us.size(), walk_dead, over1, over4, std::max(1, f.walk_threads),
        walks_wall_us * 1e-6, wm, Pct(walk_mask_us, 0.5), Pct(walk_mask_us, 0.99),
        Pct(walk_mask_us, 0.999),
        walk_mask_us.empty() ? 0.0 : *std::max_element(walk_mask_us.begin(), walk_mask_us.end()));
  }
  if (f.check_masks) {
    std::printf(",\"masks_checked\":%zu,\"mask_mismatches\":%zu", mask_checked, mask_mismatches);
  }
  std::printf("}\n");
  return (f.check_masks && mask_mismatches) || walk_dead ? 1 : 0;
}

const Registrar kRegistrar{Command{
    "grammar-bench",
    "Structured outputs on a JSON Schema corpus: coverage, correctness, mask time per token",
    [](CLI::App* sub) {
      auto f = std::make_shared<BenchFlags>();
      sub->add_option("--tokenizer", f->tokenizer, "Directory with tokenizer.json (byte-level BPE)")
          ->required();
      sub->add_option("--schemas", f->schemas, "JSONL corpus: {id, schema, tests: [{valid, data}]}")
          ->required();
      sub->add_option("--output", f->output, "Per-schema results (JSONL)");
      sub->add_option("--limit", f->limit, "Only the first N schemas (0 = all)");
      sub->add_flag("--check-masks", f->check_masks,
                    "Also compute every mask by the plain reference walk (untimed) and count "
                    "differences (exit 1 on any)");
      sub->add_option("--random-walks", f->walks,
                      "Also run N random generations per compiled schema (each token uniform "
                      "among the allowed ones, as a random-weight model samples): mask times "
                      "reported apart, dead ends counted (exit 1 on any)");
      sub->add_option("--walk-tokens", f->walk_tokens, "Tokens per random generation at most");
      sub->add_option("--walk-threads", f->walk_threads,
                      "Run each schema's random generations on N threads at once against its "
                      "one compiled grammar (as the engine's mask threads do for requests "
                      "sharing a schema); walks.wall_s is their wall time")
          ->check(CLI::Range(1, 256));
      sub->add_flag("--no-counted-sharing", f->no_counted_sharing,
                    "Compute the mask of every counted position (maxLength, {m,n}) apart, as "
                    "before masks were shared between them (to measure the sharing)");
      sub->add_option("--whitespace", f->whitespace,
                      "Whitespace regex between JSON tokens (default: none)");
      return [f]() { return RunBench(*f); };
    }}};

}  // namespace
}  // namespace sluice::cli
