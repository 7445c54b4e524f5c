// JSON Schema to a grammar expression: the driver, $ref resolution (recursive references
// become rules), the combinators (allOf merged, anyOf/oneOf distributed or proved exclusive)
// and the public functions of json_schema.h. Each type's keywords: json_schema_values.cc.
#include "structured/json_schema.h"

#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <functional>
#include <map>
#include <optional>
#include <set>

#include "structured/formats.h"
#include "structured/json_lexical.h"
#include "structured/json_schema_compiler.h"
#include "structured/pushdown.h"
#include "structured/regex.h"

namespace sluice::structured {
namespace schema_compiler {

StatusOr<ExprP> Compiler::Run(std::string_view json) {
  padded_ = simdjson::padded_string(json);
  if (parser_.parse(padded_).get(root_) != simdjson::SUCCESS) {
    return InvalidArgument("json_schema: the schema is not valid JSON");
  }
  // Drafts 3 to 7: the keywords beside a "$ref" are ignored (the reference replaces the
  // object); from 2019-09 they apply beside it. The root's "$schema" decides.
  element sv;
  if (root_.type() == element_type::OBJECT &&
      object(root_).at_key("$schema").get(sv) == simdjson::SUCCESS &&
      sv.type() == element_type::STRING) {
    const std::string_view uri(sv);
    for (const char* d : {"draft-03", "draft-04", "draft-05", "draft-06", "draft-07"}) {
      if (uri.find(d) != std::string_view::npos) legacy_ref_ = true;
    }
  }
  ASSIGN_OR_RETURN(ExprP main, CompileAt(root_, ""));
  // The rules recursive $refs call, each the target schema alone (with its own ref active, so
  // that the reference inside calls the rule again); compiling one may add more.
  for (size_t i = 0; i < pending_.size(); ++i) {
    const std::string ref = pending_[i];
    ASSIGN_OR_RETURN(element t, Resolve(ref, ""));
    active_refs_ = {ref};
    skip_.clear();
    auto body = CompileAt(t, ref.substr(1));
    active_refs_.clear();
    if (!body.ok()) return body.status();
    rules_->bodies[static_cast<size_t>(ref_rule_[ref])] = *body;
  }
  return WithRules(main, rules_);
}

// Any JSON value: scalars here, nested arrays and objects through calls (any depth, up to
// the pushdown automaton's limit).
ExprP Compiler::AnyValue() {
  if (any_) return any_;
  const int arr = rules_->Add("(any JSON array)"), obj = rules_->Add("(any JSON object)");
  const ExprP any_bytes = Star(Bytes({{0, 255}}));
  any_ = Alt({Literal("null"), Literal("true"), Literal("false"), AnyNumber(), AnyString(),
              Ref(rules_, arr, Concat({Byte('['), any_bytes})),
              Ref(rules_, obj, Concat({Byte('{'), any_bytes}))});
  rules_->bodies[static_cast<size_t>(arr)] =
      Concat({Byte('['), ws_, List(any_, comma_, 0, -1), ws_, Byte(']')});
  rules_->bodies[static_cast<size_t>(obj)] = AnyObject(any_);
  return any_;
}

StatusOr<element> Compiler::Resolve(std::string_view ref, const std::string& ptr) {
  if (ref.empty() || ref[0] != '#') {
    return Refuse(ptr,
                  "$ref \"" + std::string(ref) + "\": only local references (#/...) are supported");
  }
  std::string p;  // percent-decoding of the fragment
  for (size_t i = 1; i < ref.size(); ++i) {
    if (ref[i] == '%' && i + 2 < ref.size()) {
      p.push_back(static_cast<char>(std::stoi(std::string(ref.substr(i + 1, 2)), nullptr, 16)));
      i += 2;
    } else {
      p.push_back(ref[i]);
    }
  }
  if (!p.empty() && p[0] != '/') {
    return Refuse(ptr, "$ref \"" + std::string(ref) + "\": anchors are not supported");
  }
  element target;
  if (p.empty()) return root_;
  if (root_.at_pointer(p).get(target) != simdjson::SUCCESS) {
    return Refuse(ptr, "$ref \"" + std::string(ref) + "\" does not resolve");
  }
  return target;
}

// Expands $ref and allOf into the conjunction; false -> nullopt (unsatisfiable).
// A $ref that is active (the schema it names is being compiled around it) ends the expansion
// with *call set: the conjunction is a call of that schema's rule (nothing else may constrain
// it: the automaton cannot intersect a recursive language).
StatusOr<bool> Compiler::Expand(std::vector<Conj>* conj, size_t from,
                                std::vector<std::string>* refs, int depth,
                                std::optional<std::string>* call) {
  if (depth > 64) return Refuse((*conj)[0].ptr, "$ref/allOf/anyOf nesting too deep");
  for (size_t i = from; i < conj->size(); ++i) {
    Conj c = (*conj)[i];
    element v;
    if (c.o.at_key("$ref").get(v) == simdjson::SUCCESS) {
      if (v.type() != element_type::STRING) return Refuse(c.ptr + "/$ref", "must be a string");
      const std::string ref{std::string_view(v)};
      if (std::find(refs->begin(), refs->end(), ref) != refs->end()) {
        return Refuse(c.ptr + "/$ref",
                      "$ref \"" + ref + "\" refers to itself before any value is read");
      }
      const bool active =
          std::find(active_refs_.begin(), active_refs_.end(), ref) != active_refs_.end();
      // A schema found recursive once is called wherever nothing else constrains it (no
      // inlining along every path of the reference graph).
      if (active || (ref_rule_.count(ref) && OtherKeyword(*conj, i).empty())) {
        const std::string other = OtherKeyword(*conj, i);
        if (!other.empty()) {
          return Refuse(c.ptr + "/$ref", "recursive $ref \"" + ref + "\" beside keyword \"" +
                                             other + "\" is not supported");
        }
        *call = ref;
        return true;
      }
      refs->push_back(ref);
      ASSIGN_OR_RETURN(element t, Resolve(ref, c.ptr + "/$ref"));
      const std::string tptr = ref.substr(1);
      if (legacy_ref_) {  // the target replaces this object, its other keywords ignored
        if (t.type() == element_type::BOOL) {
          if (!bool(t)) return false;
          conj->erase(conj->begin() + static_cast<std::ptrdiff_t>(i));
        } else if (t.type() == element_type::OBJECT) {
          (*conj)[i] = {object(t), tptr};
        } else {
          return Refuse(tptr, "a schema must be an object or a boolean");
        }
        --i;  // the replacement's own $ref and allOf next
        continue;
      }
      if (t.type() == element_type::BOOL) {
        if (!bool(t)) return false;
      } else if (t.type() == element_type::OBJECT) {
        conj->push_back({object(t), tptr});
      } else {
        return Refuse(tptr, "a schema must be an object or a boolean");
      }
    }
    if (c.o.at_key("allOf").get(v) == simdjson::SUCCESS) {
      if (v.type() != element_type::ARRAY) return Refuse(c.ptr + "/allOf", "must be an array");
      size_t k = 0;
      for (element s : simdjson::dom::array(v)) {
        const std::string sp = c.ptr + "/allOf/" + std::to_string(k++);
        if (s.type() == element_type::BOOL) {
          if (!bool(s)) return false;
          continue;
        }
        if (s.type() != element_type::OBJECT)
          return Refuse(sp, "a schema must be an object or a boolean");
        conj->push_back({object(s), sp});
      }
    }
  }
  return true;
}

// Compiles the conjunction of the schemas; anyOf/oneOf are distributed over it.
StatusOr<ExprP> Compiler::CompileConj(std::vector<Conj> conj, int depth, size_t from) {
  std::vector<std::string> refs;
  std::optional<std::string> call;
  ASSIGN_OR_RETURN(bool sat, Expand(&conj, from, &refs, depth, &call));
  if (call) return CallRule(*call);
  if (!sat) return Nothing();
  const size_t active_before = active_refs_.size();
  active_refs_.insert(active_refs_.end(), refs.begin(), refs.end());
  auto result = CompileExpanded(std::move(conj), depth);
  active_refs_.resize(active_before);
  return result;
}

StatusOr<ExprP> Compiler::CompileExpanded(std::vector<Conj> conj, int depth) {
  // Refuse what cannot be enforced.
  for (const Conj& c : conj) {
    for (auto [k, v] : c.o) {
      if (IsRefusedKeyword(k)) {
        if ((k == "then" || k == "else") && c.o.at_key("if").error()) continue;
        return Refuse(c.ptr + "/" + std::string(k),
                      "keyword \"" + std::string(k) + "\" is not supported");
      }
      if (k == "uniqueItems" && v.type() == element_type::BOOL && bool(v)) {
        element mx;
        if (c.o.at_key("maxItems").get(mx) == simdjson::SUCCESS && mx.is_number() &&
            ToDouble(mx) <= 1) {
          continue;
        }
        return Refuse(c.ptr + "/uniqueItems", "keyword \"uniqueItems\": true is not supported");
      }
    }
  }
  // Distribute the first anyOf / oneOf.
  for (size_t i = 0; i < conj.size(); ++i) {
    for (const char* kw : {"anyOf", "oneOf"}) {
      element v;
      if (Skipped(conj[i], kw) || conj[i].o.at_key(kw).get(v) != simdjson::SUCCESS) continue;
      const std::string kp = conj[i].ptr + "/" + kw;
      if (v.type() != element_type::ARRAY) return Refuse(kp, "must be an array");
      // The conjunction without this keyword: the same objects, minus kw on this one.
      std::vector<ExprP> branches;
      std::vector<std::optional<element>> branch_schemas;
      size_t k = 0;
      for (element s : simdjson::dom::array(v)) {
        const std::string sp = kp + "/" + std::to_string(k++);
        std::vector<Conj> next = conj;
        skip_.push_back({conj[i].ptr, kw});
        if (s.type() == element_type::BOOL) {
          if (!bool(s)) {
            skip_.pop_back();
            continue;
          }
        } else if (s.type() == element_type::OBJECT) {
          next.push_back({object(s), sp});
        } else {
          skip_.pop_back();
          return Refuse(sp, "a schema must be an object or a boolean");
        }
        const size_t from = conj.size();
        auto b = CompileConj(std::move(next), depth + 1, from);
        skip_.pop_back();
        if (!b.ok()) return b.status();
        branches.push_back(*b);
        branch_schemas.push_back(s.type() == element_type::OBJECT ? std::optional<element>(s)
                                                                  : std::nullopt);
      }
      if (std::string_view(kw) == "oneOf")
        RETURN_IF_ERROR(CheckDisjoint(branches, kp, &branch_schemas));
      return Alt(std::move(branches));
    }
  }
  return CompileFlat(conj);
}

// A call of the rule of schema `ref` (created on first use, compiled by Run). Its finite
// over-approximation (for oneOf proofs): the JSON types the schema's `type` allows.
ExprP Compiler::CallRule(const std::string& ref) {
  auto it = ref_rule_.find(ref);
  int idx;
  if (it != ref_rule_.end()) {
    idx = it->second;
  } else {
    idx = rules_->Add("$ref " + ref);
    ref_rule_[ref] = idx;
    pending_.push_back(ref);
  }
  return Ref(rules_, idx, TypeApprox(ref));
}

ExprP Compiler::TypeApprox(const std::string& ref) {
  const ExprP any_bytes = Star(Bytes({{0, 255}}));
  auto t = Resolve(ref, "");
  element ty;
  if (!t.ok() || t->type() != element_type::OBJECT ||
      object(*t).at_key("type").get(ty) != simdjson::SUCCESS)
    return any_bytes;
  std::vector<std::string_view> names;
  if (ty.type() == element_type::STRING) names.push_back(std::string_view(ty));
  if (ty.type() == element_type::ARRAY) {
    for (element x : simdjson::dom::array(ty)) {
      if (x.type() != element_type::STRING) return any_bytes;
      names.push_back(std::string_view(x));
    }
  }
  std::vector<ExprP> alts;
  for (std::string_view n : names) {
    if (n == "object")
      alts.push_back(Concat({Byte('{'), any_bytes}));
    else if (n == "array")
      alts.push_back(Concat({Byte('['), any_bytes}));
    else if (n == "string")
      alts.push_back(AnyString());
    else if (n == "number" || n == "integer")
      alts.push_back(AnyNumber());
    else if (n == "boolean")
      alts.push_back(Alt({Literal("true"), Literal("false")}));
    else if (n == "null")
      alts.push_back(Literal("null"));
    else
      return any_bytes;
  }
  return alts.empty() ? any_bytes : Alt(std::move(alts));
}

// A keyword of the conjunction, beside the $ref of conj[i], that would constrain the value
// (empty: none; $ref and allOf of earlier conjuncts were expanded into the conjunction).
std::string Compiler::OtherKeyword(const std::vector<Conj>& conj, size_t i) const {
  for (size_t j = 0; j < conj.size(); ++j) {
    for (auto [k, v] : conj[j].o) {
      (void)v;
      if (j == i && (k == "$ref" || legacy_ref_)) continue;  // legacy: siblings ignored
      if (j < i && (k == "$ref" || k == "allOf")) continue;
      if (Skipped(conj[j], k)) continue;
      if (IsValidationKeyword(k) || IsRefusedKeyword(k) || k == "anyOf" || k == "oneOf" ||
          k == "allOf" || k == "$ref")
        return std::string(k);
    }
  }
  return "";
}

bool Compiler::IsRefusedKeyword(std::string_view k) {
  static const std::set<std::string_view> kRefused = {"not",
                                                      "if",
                                                      "then",
                                                      "else",
                                                      "dependencies",
                                                      "dependentRequired",
                                                      "dependentSchemas",
                                                      "contains",
                                                      "minContains",
                                                      "maxContains",
                                                      "propertyNames",
                                                      "unevaluatedProperties",
                                                      "unevaluatedItems",
                                                      "$dynamicRef",
                                                      "$recursiveRef"};
  return kRefused.count(k) != 0;
}

// Required properties of an object schema with the values const/enum allow them (canonical
// JSON), following $ref at the top and on the property.
void Compiler::Discriminators(element s, std::map<std::string, std::set<std::string>>* out,
                              int depth) {
  if (depth > 16 || s.type() != element_type::OBJECT) return;
  object o(s);
  element v;
  if (o.at_key("$ref").get(v) == simdjson::SUCCESS && v.type() == element_type::STRING) {
    auto t = Resolve(std::string_view(v), "");
    if (t.ok()) Discriminators(*t, out, depth + 1);
  }
  std::set<std::string> req;
  if (o.at_key("required").get(v) == simdjson::SUCCESS && v.type() == element_type::ARRAY) {
    for (element x : simdjson::dom::array(v)) {
      if (x.type() == element_type::STRING) req.insert(std::string(std::string_view(x)));
    }
  }
  element props;
  if (o.at_key("properties").get(props) != simdjson::SUCCESS ||
      props.type() != element_type::OBJECT)
    return;
  for (auto [k, ps] : object(props)) {
    const std::string name(k);
    if (!req.count(name)) continue;
    element p = ps;
    for (int hop = 0; hop < 16 && p.type() == element_type::OBJECT; ++hop) {
      element r;
      if (object(p).at_key("$ref").get(r) != simdjson::SUCCESS || r.type() != element_type::STRING)
        break;
      auto t = Resolve(std::string_view(r), "");
      if (!t.ok()) break;
      p = *t;
    }
    if (p.type() != element_type::OBJECT) continue;
    std::set<std::string> vals;
    bool has = false;
    element c;
    if (object(p).at_key("const").get(c) == simdjson::SUCCESS) {
      vals.insert(Canonical(c));
      has = true;
    }
    if (object(p).at_key("enum").get(c) == simdjson::SUCCESS && c.type() == element_type::ARRAY) {
      const bool had = has;
      has = true;
      std::set<std::string> ev;
      for (element x : simdjson::dom::array(c)) ev.insert(Canonical(x));
      if (!had) {
        vals = ev;
      } else {
        std::set<std::string> both;
        for (const std::string& x : vals) {
          if (ev.count(x)) both.insert(x);
        }
        vals = both;
      }
    }
    if (has) (*out)[name] = vals;
  }
}

// oneOf is exclusive: no value may match two branches. Scalars: the branches' automata must
// not intersect (every value a branch accepts has its canonical spelling in the branch's
// language). Objects: the automata cannot tell (each branch orders keys its own way), so two
// branches that both admit objects need a discriminator: a property both require whose
// const/enum values are disjoint. Two branches that both admit arrays are refused.
Status Compiler::CheckDisjoint(const std::vector<ExprP>& b, const std::string& ptr,
                               const std::vector<std::optional<element>>* schemas) {
  const std::string what = schemas ? "oneOf" : "patternProperties";
  std::vector<std::unique_ptr<Dfa>> alone(b.size());
  for (size_t i = 0; i < b.size(); ++i) {
    auto nfa = BuildNfa(b[i], {2'000'000, 100'000});
    if (!nfa.ok())
      return Refuse(ptr, what + ": could not prove the branches exclusive (too large)");
    alone[i] = std::make_unique<Dfa>(*nfa, 100000);
  }
  for (size_t i = 0; i < b.size(); ++i) {
    for (size_t j = i + 1; j < b.size(); ++j) {
      const std::string pair = "branches " + std::to_string(i) + " and " + std::to_string(j);
      auto starts = [&](size_t k, char c) {
        return alone[k]->Next(alone[k]->start(), static_cast<uint8_t>(c)) >= 0;
      };
      if (starts(i, '[') && starts(j, '[')) {
        return Refuse(
            ptr, what + ": " + pair + " both admit arrays (their exclusiveness cannot be proved)");
      }
      if (starts(i, '{') && starts(j, '{')) {
        bool discriminated = false;
        if (schemas && (*schemas)[i] && (*schemas)[j]) {
          std::map<std::string, std::set<std::string>> di, dj;
          Discriminators(*(*schemas)[i], &di);
          Discriminators(*(*schemas)[j], &dj);
          for (const auto& [name, vi] : di) {
            auto it = dj.find(name);
            if (it == dj.end()) continue;
            bool common = false;
            for (const std::string& x : vi) common |= it->second.count(x) > 0;
            if (!common) discriminated = true;
          }
        }
        if (!discriminated) {
          return Refuse(ptr, what + ": " + pair +
                                 " both admit objects; oneOf over objects needs a property both "
                                 "require with different const/enum values (or use anyOf)");
        }
      }
      auto nfa = BuildNfa(And(b[i], b[j]), {2'000'000, 100'000});
      if (!nfa.ok())
        return Refuse(ptr, what + ": could not prove " + pair + " exclusive (too large)");
      Dfa d(*nfa, 100000);
      // Any accepting state reachable, objects and arrays aside (handled above)?
      std::vector<int32_t> q = {d.start()};
      std::set<int32_t> seen = {d.start()};
      bool overlap = false;
      for (size_t h = 0; h < q.size() && !overlap; ++h) {
        if (d.Accepting(q[h])) {
          overlap = true;
          break;
        }
        for (int by = 0; by < 256; ++by) {
          if (h == 0 && (by == '{' || by == '[')) continue;
          const int32_t t = d.Next(q[h], static_cast<uint8_t>(by));
          if (t >= 0 && seen.insert(t).second) q.push_back(t);
        }
        if (d.overflowed()) break;
      }
      if (overlap || d.overflowed()) {
        return Refuse(ptr, what + ": " + pair +
                               (overlap ? " both match some values (oneOf would exclude them; "
                                          "use anyOf or make the branches exclusive)"
                                        : " could not be proved exclusive (too large)"));
      }
    }
  }
  return Status::Ok();
}

}  // namespace schema_compiler

using schema_compiler::Compiler;
using simdjson::dom::element;
using namespace json_text;  // json_lexical.h

std::string JsonQuote(std::string_view s) {
  std::string out;
  AppendQuoted(s, &out);
  return out;
}

StatusOr<std::string> CanonicalJson(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  element root;
  if (parser.parse(padded).get(root) != simdjson::SUCCESS) return InvalidArgument("not valid JSON");
  return Canonical(root);
}

StatusOr<ExprP> CompileJsonSchema(std::string_view schema_json, const JsonOptions& options) {
  Compiler c(options);
  return c.Run(schema_json);
}

ExprP JsonObjectExpr(const JsonOptions& options) {
  Compiler c(options);
  return WithRules(c.AnyObject(c.AnyValue()), c.rules());
}

}  // namespace sluice::structured
