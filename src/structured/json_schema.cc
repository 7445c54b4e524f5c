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
#include "structured/pushdown.h"
#include "structured/regex.h"

namespace sluice::structured {

namespace {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

using namespace json_text;  // json_lexical.h

// ---------------------------------------------------------------- the compiler

enum TypeBit : unsigned {
  kNull = 1,
  kBool = 2,
  kObj = 4,
  kArr = 8,
  kStr = 16,
  kInt = 32,     // integral numbers
  kNonInt = 64,  // other numbers
  kAllTypes = 127,
};

struct Conj {  // one schema object of a conjunction, and where it is
  object o;
  std::string ptr;
};

class Compiler {
 public:
  Compiler(const JsonOptions& o) : opt_(o) {
    ws_ = o.ws ? o.ws : Empty();
    comma_ = Concat({ws_, Byte(','), ws_});
    colon_ = Concat({ws_, Byte(':'), ws_});
  }

  StatusOr<ExprP> Run(std::string_view json) {
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

  const std::shared_ptr<RuleSet>& rules() const { return rules_; }

  // Any JSON value: scalars here, nested arrays and objects through calls (any depth, up to
  // the pushdown automaton's limit).
  ExprP AnyValue() {
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

  ExprP AnyObject(const ExprP& value) {
    const ExprP member = Concat({AnyString(), colon_, value});
    return Concat({Byte('{'), ws_, List(member, comma_, 0, -1), ws_, Byte('}')});
  }

 private:
  static Status Refuse(const std::string& ptr, const std::string& what) {
    return InvalidArgument("json_schema: " + (ptr.empty() ? std::string("/") : ptr) + ": " + what);
  }

  StatusOr<ExprP> CompileAt(const element& e, const std::string& ptr) {
    std::vector<Conj> conj;
    if (e.type() == element_type::BOOL) return bool(e) ? AnyValue() : Nothing();
    if (e.type() != element_type::OBJECT)
      return Refuse(ptr, "a schema must be an object or a boolean");
    conj.push_back({object(e), ptr});
    return CompileConj(std::move(conj), 0);
  }

  StatusOr<element> Resolve(std::string_view ref, const std::string& ptr) {
    if (ref.empty() || ref[0] != '#') {
      return Refuse(
          ptr, "$ref \"" + std::string(ref) + "\": only local references (#/...) are supported");
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
  StatusOr<bool> Expand(std::vector<Conj>* conj, size_t from, std::vector<std::string>* refs,
                        int depth, std::optional<std::string>* call) {
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
  StatusOr<ExprP> CompileConj(std::vector<Conj> conj, int depth, size_t from = 0) {
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

  StatusOr<ExprP> CompileExpanded(std::vector<Conj> conj, int depth) {
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
  ExprP CallRule(const std::string& ref) {
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

  ExprP TypeApprox(const std::string& ref) {
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
  std::string OtherKeyword(const std::vector<Conj>& conj, size_t i) const {
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

  static bool IsRefusedKeyword(std::string_view k) {
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

  bool Skipped(const Conj& c, std::string_view kw) const {
    for (const auto& [sp, sk] : skip_) {
      if (sk == kw && sp == c.ptr) return true;
    }
    return false;
  }

  // Required properties of an object schema with the values const/enum allow them (canonical
  // JSON), following $ref at the top and on the property.
  void Discriminators(element s, std::map<std::string, std::set<std::string>>* out, int depth = 0) {
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
        if (object(p).at_key("$ref").get(r) != simdjson::SUCCESS ||
            r.type() != element_type::STRING)
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
  Status CheckDisjoint(const std::vector<ExprP>& b, const std::string& ptr,
                       const std::vector<std::optional<element>>* schemas = nullptr) {
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
          return Refuse(ptr, what + ": " + pair +
                                 " both admit arrays (their exclusiveness cannot be proved)");
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

  static double ToDouble(const element& e) {
    if (e.type() == element_type::INT64) return static_cast<double>(int64_t(e));
    if (e.type() == element_type::UINT64) return static_cast<double>(uint64_t(e));
    return double(e);
  }

  // Every schema keyword of the conjunction merged; no $ref/allOf/anyOf/oneOf left.
  StatusOr<ExprP> CompileFlat(const std::vector<Conj>& conj) {
    unsigned types = kAllTypes;
    std::optional<std::vector<element>> enums;
    std::string enum_ptr;
    for (const Conj& c : conj) {
      element v;
      if (c.o.at_key("type").get(v) == simdjson::SUCCESS) {
        unsigned t = 0;
        auto one = [&](std::string_view s) -> Status {
          if (s == "null")
            t |= kNull;
          else if (s == "boolean")
            t |= kBool;
          else if (s == "object")
            t |= kObj;
          else if (s == "array")
            t |= kArr;
          else if (s == "string")
            t |= kStr;
          else if (s == "integer")
            t |= kInt;
          else if (s == "number")
            t |= kInt | kNonInt;
          else
            return Refuse(c.ptr + "/type", "unknown type \"" + std::string(s) + "\"");
          return Status::Ok();
        };
        if (v.type() == element_type::STRING) {
          RETURN_IF_ERROR(one(std::string_view(v)));
        } else if (v.type() == element_type::ARRAY) {
          for (element x : simdjson::dom::array(v)) {
            if (x.type() != element_type::STRING)
              return Refuse(c.ptr + "/type", "must hold strings");
            RETURN_IF_ERROR(one(std::string_view(x)));
          }
        } else {
          return Refuse(c.ptr + "/type", "must be a string or an array");
        }
        types &= t;
      }
      for (const char* kw : {"enum", "const"}) {
        if (Skipped(c, kw) || c.o.at_key(kw).get(v) != simdjson::SUCCESS) continue;
        std::vector<element> vals;
        if (std::string_view(kw) == "const") {
          vals.push_back(v);
        } else {
          if (v.type() != element_type::ARRAY) return Refuse(c.ptr + "/enum", "must be an array");
          for (element x : simdjson::dom::array(v)) vals.push_back(x);
        }
        if (!enums) {
          enums = vals;
          enum_ptr = c.ptr + "/" + kw;
        } else {
          std::vector<element> keep;
          for (const element& a : *enums) {
            for (const element& b : vals) {
              if (Canonical(a) == Canonical(b)) {
                keep.push_back(a);
                break;
              }
            }
          }
          enums = keep;
        }
      }
    }
    if (enums) return CompileEnum(conj, *enums, types);
    std::vector<ExprP> alts;
    if (types & kNull) alts.push_back(Literal("null"));
    if (types & kBool) alts.push_back(Alt({Literal("true"), Literal("false")}));
    if (types & (kInt | kNonInt)) {
      ASSIGN_OR_RETURN(ExprP n, CompileNumber(conj, types));
      alts.push_back(n);
    }
    if (types & kStr) {
      ASSIGN_OR_RETURN(ExprP s, CompileString(conj));
      alts.push_back(s);
    }
    if (types & kArr) {
      ASSIGN_OR_RETURN(ExprP a, CompileArray(conj));
      alts.push_back(a);
    }
    if (types & kObj) {
      ASSIGN_OR_RETURN(ExprP o, CompileObject(conj));
      alts.push_back(o);
    }
    return Alt(std::move(alts));
  }

  // enum/const: the values (spelled with the whitespace policy) that the rest of the schema
  // accepts, checked with the compact automaton of the rest.
  StatusOr<ExprP> CompileEnum(const std::vector<Conj>& conj, const std::vector<element>& vals,
                              unsigned types) {
    (void)types;
    std::vector<Conj> rest = conj;
    for (const Conj& c : conj) {
      skip_.push_back({c.ptr, "enum"});
      skip_.push_back({c.ptr, "const"});
    }
    bool trivial = true;  // nothing but type (and annotations) beside the enum
    static const std::set<std::string_view> kTypeOnly = {"type", "enum", "const"};
    for (const Conj& c : conj) {
      for (auto [k, v] : c.o) {
        (void)v;
        if (!kTypeOnly.count(k) && IsValidationKeyword(k)) trivial = false;
      }
    }
    JsonOptions compact = opt_;
    compact.ws = nullptr;
    std::optional<Dfa> dfa;
    std::optional<Pda> pda;  // the rest of the schema is recursive
    Status st;
    if (!trivial) {
      Compiler sub(compact);
      sub.root_ = root_;
      sub.skip_ = skip_;
      auto e = sub.CompileFlat(rest);
      if (!e.ok()) {
        st = e.status();
      } else {
        auto nfa = BuildNfa(*e, {}, /*pushdown=*/true);
        if (!nfa.ok()) {
          st = nfa.status();
        } else if ((*nfa)->pushdown()) {
          pda.emplace(*nfa, 200000);
        } else {
          dfa.emplace(*nfa, 200000);
        }
      }
    }
    for (size_t i = 0; i < conj.size(); ++i) {
      skip_.pop_back();
      skip_.pop_back();
    }
    RETURN_IF_ERROR(st);
    std::vector<ExprP> alts;
    for (const element& v : vals) {
      const std::string canon = Canonical(v);
      if (!MatchesTypes(v, types)) continue;
      if (dfa && !dfa->Matches(canon)) continue;
      if (pda && !pda->Matches(canon)) continue;
      alts.push_back(ValueExpr(v));
    }
    return Alt(std::move(alts));
  }

  static bool MatchesTypes(const element& v, unsigned types) {
    switch (v.type()) {
      case element_type::NULL_VALUE:
        return types & kNull;
      case element_type::BOOL:
        return types & kBool;
      case element_type::OBJECT:
        return types & kObj;
      case element_type::ARRAY:
        return types & kArr;
      case element_type::STRING:
        return types & kStr;
      case element_type::INT64:
      case element_type::UINT64:
        return types & kInt;
      case element_type::DOUBLE: {
        const double d = double(v);
        return (std::floor(d) == d) ? (types & kInt) != 0 : (types & kNonInt) != 0;
      }
    }
    return false;
  }

  static bool IsValidationKeyword(std::string_view k) {
    static const std::set<std::string_view> kKw = {"type",
                                                   "enum",
                                                   "const",
                                                   "multipleOf",
                                                   "maximum",
                                                   "exclusiveMaximum",
                                                   "minimum",
                                                   "exclusiveMinimum",
                                                   "maxLength",
                                                   "minLength",
                                                   "pattern",
                                                   "maxItems",
                                                   "minItems",
                                                   "uniqueItems",
                                                   "maxProperties",
                                                   "minProperties",
                                                   "required",
                                                   "prefixItems",
                                                   "items",
                                                   "additionalItems",
                                                   "properties",
                                                   "patternProperties",
                                                   "additionalProperties",
                                                   "format"};
    return kKw.count(k) != 0;
  }

  // A literal value spelled with the whitespace policy.
  ExprP ValueExpr(const element& v) {
    switch (v.type()) {
      case element_type::OBJECT: {
        std::vector<ExprP> members;
        for (auto [k, x] : object(v)) {
          std::string q;
          AppendQuoted(k, &q);
          members.push_back(Concat({Literal(q), colon_, ValueExpr(x)}));
        }
        std::vector<ExprP> parts = {Byte('{'), ws_};
        for (size_t i = 0; i < members.size(); ++i) {
          if (i) parts.push_back(comma_);
          parts.push_back(members[i]);
        }
        parts.push_back(ws_);
        parts.push_back(Byte('}'));
        return Concat(std::move(parts));
      }
      case element_type::ARRAY: {
        std::vector<ExprP> parts = {Byte('['), ws_};
        bool first = true;
        for (element x : simdjson::dom::array(v)) {
          if (!first) parts.push_back(comma_);
          first = false;
          parts.push_back(ValueExpr(x));
        }
        parts.push_back(ws_);
        parts.push_back(Byte(']'));
        return Concat(std::move(parts));
      }
      default:
        return Literal(Canonical(v));
    }
  }

  template <typename F>
  void ForKey(const std::vector<Conj>& conj, std::string_view kw, F f) {
    for (const Conj& c : conj) {
      if (Skipped(c, kw)) continue;
      element v;
      if (c.o.at_key(kw).get(v) == simdjson::SUCCESS) f(c, v);
    }
  }

  Status IntKeyword(const std::vector<Conj>& conj, std::string_view kw, bool take_max, int64_t* out,
                    bool* set) {
    Status st;
    ForKey(conj, kw, [&](const Conj& c, const element& v) {
      if (!v.is_number() || ToDouble(v) < 0 || std::floor(ToDouble(v)) != ToDouble(v)) {
        st = Refuse(c.ptr + "/" + std::string(kw), "must be a non-negative integer");
        return;
      }
      const int64_t x = static_cast<int64_t>(std::min(ToDouble(v), 1e15));
      if (!*set) {
        *out = x;
      } else {
        *out = take_max ? std::max(*out, x) : std::min(*out, x);
      }
      *set = true;
    });
    return st;
  }

  StatusOr<ExprP> CompileNumber(const std::vector<Conj>& conj, unsigned types) {
    Bound lo, hi;
    Status st;
    auto tighten = [&](Bound* b, double v, bool excl, bool lower) {
      if (!b->set ||
          (lower ? (v > b->v || (v == b->v && excl)) : (v < b->v || (v == b->v && excl)))) {
        b->set = true;
        b->v = v;
        b->excl = excl;
      }
    };
    for (const Conj& c : conj) {
      element v;
      bool draft4_min_excl = false, draft4_max_excl = false;
      if (c.o.at_key("exclusiveMinimum").get(v) == simdjson::SUCCESS &&
          v.type() == element_type::BOOL) {
        draft4_min_excl = bool(v);
      }
      if (c.o.at_key("exclusiveMaximum").get(v) == simdjson::SUCCESS &&
          v.type() == element_type::BOOL) {
        draft4_max_excl = bool(v);
      }
      for (const char* kw : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
        if (c.o.at_key(kw).get(v) != simdjson::SUCCESS) continue;
        if (v.type() == element_type::BOOL) continue;  // draft-04 modifier
        if (!v.is_number()) return Refuse(c.ptr + "/" + kw, "must be a number");
        const double x = ToDouble(v);
        const std::string_view k(kw);
        if (k == "minimum") tighten(&lo, x, draft4_min_excl, true);
        if (k == "maximum") tighten(&hi, x, draft4_max_excl, false);
        if (k == "exclusiveMinimum") tighten(&lo, x, true, true);
        if (k == "exclusiveMaximum") tighten(&hi, x, true, false);
      }
      if (c.o.at_key("multipleOf").get(v) == simdjson::SUCCESS) {
        if (!(v.is_number() && ToDouble(v) == 1)) {
          return Refuse(c.ptr + "/multipleOf", "keyword \"multipleOf\" is not supported (only 1)");
        }
        types &= ~static_cast<unsigned>(kNonInt);
      }
    }
    if (!(types & kNonInt)) {  // integers only: bounds round inwards
      if (lo.set && std::fabs(lo.v) < 1e15) {
        const double c = std::ceil(lo.v);
        lo.excl = lo.excl && c == lo.v;
        lo.v = c;
      }
      if (hi.set && std::fabs(hi.v) < 1e15) {
        const double f = std::floor(hi.v);
        hi.excl = hi.excl && f == hi.v;
        hi.v = f;
      }
    }
    for (Bound* b : {&lo, &hi}) {
      if (b->set && (std::floor(b->v) != b->v || std::fabs(b->v) > 1e15)) {
        const std::string which = b == &lo ? "minimum" : "maximum";
        return Refuse(conj[0].ptr, "a non-integral or huge " + which + " (" + std::to_string(b->v) +
                                       ") is not supported");
      }
    }
    if (!(types & kNonInt)) {  // integers only
      if (!lo.set && !hi.set) return AnyInteger();
      std::optional<int64_t> l, h;
      if (lo.set) l = static_cast<int64_t>(lo.v) + (lo.excl ? 1 : 0);
      if (hi.set) h = static_cast<int64_t>(hi.v) - (hi.excl ? 1 : 0);
      return IntegerRange(l, h);
    }
    if (!lo.set && !hi.set) return AnyNumber();
    return BoundedNumber(lo, hi);
  }

  StatusOr<ExprP> CompileString(const std::vector<Conj>& conj) {
    int64_t mn = 0, mx = -1;
    bool mn_set = false, mx_set = false;
    RETURN_IF_ERROR(IntKeyword(conj, "minLength", true, &mn, &mn_set));
    RETURN_IF_ERROR(IntKeyword(conj, "maxLength", false, &mx, &mx_set));
    if (!mx_set) mx = -1;
    if (mx >= 0 && mn > mx) return Nothing();
    if (mn > 10000 || mx > 10000) {
      return Refuse(conj[0].ptr, "minLength/maxLength over 10000 are not supported");
    }
    ExprP e = Concat(
        {Quote(), Repeat(StringChar(), static_cast<int>(mn), static_cast<int>(mx)), Quote()});
    Status st;
    std::vector<ExprP> constraints;
    ForKey(conj, "pattern", [&](const Conj& c, const element& v) {
      if (!st.ok()) return;
      if (v.type() != element_type::STRING) {
        st = Refuse(c.ptr + "/pattern", "must be a string");
        return;
      }
      auto r = ParseRegex(std::string_view(v), RegexMode::kSearch);
      if (!r.ok()) {
        st = Refuse(c.ptr + "/pattern", r.status().message());
        return;
      }
      constraints.push_back(Concat({Quote(), JsonEncode(*r), Quote()}));
    });
    ForKey(conj, "format", [&](const Conj& c, const element& v) {
      if (!st.ok()) return;
      if (v.type() != element_type::STRING) {
        st = Refuse(c.ptr + "/format", "must be a string");
        return;
      }
      auto r = FormatRegex(std::string_view(v));
      if (!r.ok()) {
        st = Refuse(c.ptr + "/format", r.status().message());
        return;
      }
      constraints.push_back(Concat({Quote(), JsonEncode(*r), Quote()}));
    });
    RETURN_IF_ERROR(st);
    if (constraints.empty()) return e;
    ExprP acc = constraints[0];
    for (size_t i = 1; i < constraints.size(); ++i) acc = And(acc, constraints[i]);
    if (mn_set || mx >= 0) acc = And(acc, e);
    return acc;
  }

  StatusOr<ExprP> CompileArray(const std::vector<Conj>& conj) {
    int64_t mn = 0, mx = -1;
    bool mn_set = false, mx_set = false;
    RETURN_IF_ERROR(IntKeyword(conj, "minItems", true, &mn, &mn_set));
    RETURN_IF_ERROR(IntKeyword(conj, "maxItems", false, &mx, &mx_set));
    if (!mx_set) mx = -1;
    if (mn > 1000 || mx > 1000)
      return Refuse(conj[0].ptr, "minItems/maxItems over 1000 are not supported");
    // Per conjunct: its prefix schemas and its schema for the other items (null: any).
    struct Part {
      std::vector<std::pair<element, std::string>> prefix;
      std::optional<std::pair<element, std::string>> rest;
    };
    std::vector<Part> parts;
    size_t max_prefix = 0;
    for (const Conj& c : conj) {
      Part p;
      element v;
      const bool has_prefix = c.o.at_key("prefixItems").get(v) == simdjson::SUCCESS;
      if (has_prefix) {
        if (v.type() != element_type::ARRAY)
          return Refuse(c.ptr + "/prefixItems", "must be an array");
        size_t k = 0;
        for (element s : simdjson::dom::array(v)) {
          p.prefix.emplace_back(s, c.ptr + "/prefixItems/" + std::to_string(k++));
        }
      }
      element items;
      if (c.o.at_key("items").get(items) == simdjson::SUCCESS) {
        if (items.type() == element_type::ARRAY) {  // draft-04 tuple form
          if (has_prefix) return Refuse(c.ptr + "/items", "items as an array beside prefixItems");
          size_t k = 0;
          for (element s : simdjson::dom::array(items)) {
            p.prefix.emplace_back(s, c.ptr + "/items/" + std::to_string(k++));
          }
          element add;
          if (c.o.at_key("additionalItems").get(add) == simdjson::SUCCESS) {
            p.rest = std::make_pair(add, c.ptr + "/additionalItems");
          }
        } else {
          p.rest = std::make_pair(items, c.ptr + "/items");
        }
      }
      max_prefix = std::max(max_prefix, p.prefix.size());
      parts.push_back(std::move(p));
    }
    auto schema_at = [&](size_t pos) -> StatusOr<ExprP> {  // nullopt pos = the rest
      std::vector<Conj> cs;
      for (const Part& p : parts) {
        const std::pair<element, std::string>* s = nullptr;
        if (pos < p.prefix.size()) {
          s = &p.prefix[pos];
        } else if (p.rest) {
          s = &*p.rest;
        }
        if (!s) continue;
        if (s->first.type() == element_type::BOOL) {
          if (!bool(s->first)) return Nothing();
          continue;
        }
        if (s->first.type() != element_type::OBJECT)
          return Refuse(s->second, "a schema must be an object or a boolean");
        cs.push_back({object(s->first), s->second});
      }
      if (cs.empty()) return AnyValue();
      return CompileConj(std::move(cs), 0);
    };
    std::vector<ExprP> prefix;
    for (size_t i = 0; i < max_prefix; ++i) {
      ASSIGN_OR_RETURN(ExprP e, schema_at(i));
      prefix.push_back(e);
    }
    ASSIGN_OR_RETURN(ExprP rest, schema_at(max_prefix));
    // A(i): i items so far (all prefix positions).
    const int64_t P = static_cast<int64_t>(max_prefix);
    ExprP tail;
    {
      const int64_t rmin = std::max<int64_t>(0, mn - P);
      const int64_t rmax = mx < 0 ? -1 : mx - P;
      if (rmax == 0 || rest->kind == Expr::Kind::kNothing) {
        tail = rmin == 0 ? Empty() : Nothing();
      } else if (rmax >= 0 && rmax < rmin) {
        tail = Nothing();
      } else {
        ExprP list = List(rest, comma_, static_cast<int>(std::max<int64_t>(1, rmin)),
                          static_cast<int>(rmax));
        ExprP with = P > 0 ? Concat({comma_, list}) : list;
        tail = rmin == 0 ? Alt({Empty(), with}) : with;
      }
    }
    ExprP acc = tail;
    for (int64_t i = P - 1; i >= 0; --i) {
      // Before prefix item i: the array may end (when i >= min items) or go on.
      ExprP item =
          i > 0 ? Concat({comma_, prefix[static_cast<size_t>(i)]}) : prefix[static_cast<size_t>(i)];
      std::vector<ExprP> alts;
      if (i >= mn) alts.push_back(Empty());
      if (mx < 0 || i < mx) alts.push_back(Concat({item, acc}));
      acc = Alt(std::move(alts));
    }
    return Concat({Byte('['), ws_, acc, ws_, Byte(']')});
  }

  StatusOr<ExprP> CompileObject(const std::vector<Conj>& conj) {
    int64_t mn = 0, mx = -1;
    bool mn_set = false, mx_set = false;
    RETURN_IF_ERROR(IntKeyword(conj, "minProperties", true, &mn, &mn_set));
    RETURN_IF_ERROR(IntKeyword(conj, "maxProperties", false, &mx, &mx_set));
    if (!mx_set) mx = -1;
    if (mn > 32 || mx > 32)
      return Refuse(conj[0].ptr, "minProperties/maxProperties over 32 are not supported");
    // Declared names in schema order, and each conjunct's view of the others.
    std::vector<std::string> names;
    std::map<std::string, std::vector<Conj>> schemas;
    std::map<std::string, bool> forbidden;
    std::set<std::string> required;
    struct Others {
      const Conj* c;
      std::set<std::string> own;
      std::optional<element> additional;  // absent or true: any
      std::vector<std::pair<std::string, element>> patterns;
    };
    std::vector<Others> others;
    Status st;
    for (const Conj& c : conj) {
      Others o{&c, {}, std::nullopt, {}};
      element v;
      if (c.o.at_key("properties").get(v) == simdjson::SUCCESS) {
        if (v.type() != element_type::OBJECT)
          return Refuse(c.ptr + "/properties", "must be an object");
        for (auto [k, s] : object(v)) {
          const std::string name(k);
          const std::string sp = c.ptr + "/properties/" + EscapePtr(name);
          if (!schemas.count(name) && !forbidden.count(name)) names.push_back(name);
          o.own.insert(name);
          if (s.type() == element_type::BOOL) {
            if (!bool(s)) forbidden[name] = true;
            schemas[name];
            continue;
          }
          if (s.type() != element_type::OBJECT)
            return Refuse(sp, "a schema must be an object or a boolean");
          schemas[name].push_back({object(s), sp});
        }
      }
      if (c.o.at_key("required").get(v) == simdjson::SUCCESS) {
        if (v.type() != element_type::ARRAY) return Refuse(c.ptr + "/required", "must be an array");
        for (element x : simdjson::dom::array(v)) {
          if (x.type() != element_type::STRING)
            return Refuse(c.ptr + "/required", "must hold strings");
          required.insert(std::string(std::string_view(x)));
        }
      }
      if (c.o.at_key("additionalProperties").get(v) == simdjson::SUCCESS) {
        if (!(v.type() == element_type::BOOL && bool(v))) o.additional = v;
      }
      if (c.o.at_key("patternProperties").get(v) == simdjson::SUCCESS) {
        if (v.type() != element_type::OBJECT)
          return Refuse(c.ptr + "/patternProperties", "must be an object");
        for (auto [k, s] : object(v)) o.patterns.emplace_back(std::string(k), s);
      }
      others.push_back(std::move(o));
    }
    for (const std::string& r : required) {
      if (!schemas.count(r)) {
        names.push_back(r);
        schemas[r];
      }
    }
    // Schema order; required names that no `properties` declares come last.
    std::vector<ObjectMember> members;
    std::vector<std::pair<std::string, ExprP>> pattern_keys;  // for extra members
    for (const std::string& name : names) {
      std::vector<Conj> cs = schemas[name];
      bool bad = forbidden.count(name) > 0;
      for (const Others& o : others) {
        if (o.own.count(name)) continue;
        // patternProperties of this conjunct that match the name apply; else additional.
        bool matched = false;
        for (const auto& [pat, s] : o.patterns) {
          auto re = ParseRegex(pat, RegexMode::kSearch);
          if (!re.ok()) return Refuse(o.c->ptr + "/patternProperties", re.status().message());
          auto nfa = BuildNfa(*re);
          if (!nfa.ok()) return Refuse(o.c->ptr + "/patternProperties", nfa.status().message());
          Dfa d(*nfa, 100000);
          if (!d.Matches(name)) continue;
          matched = true;
          if (s.type() == element_type::BOOL) {
            if (!bool(s)) bad = true;
          } else if (s.type() == element_type::OBJECT) {
            cs.push_back({object(s), o.c->ptr + "/patternProperties/" + EscapePtr(pat)});
          }
        }
        if (!matched && o.additional) {
          if (o.additional->type() == element_type::BOOL) {
            bad = true;
          } else if (o.additional->type() == element_type::OBJECT) {
            cs.push_back({object(*o.additional), o.c->ptr + "/additionalProperties"});
          } else {
            return Refuse(o.c->ptr + "/additionalProperties", "must be a schema");
          }
        }
      }
      const bool req = required.count(name) > 0;
      if (bad) {
        if (req) return Nothing();
        continue;
      }
      ExprP value;
      if (cs.empty()) {
        value = AnyValue();
      } else {
        ASSIGN_OR_RETURN(value, CompileConj(std::move(cs), 0));
      }
      std::string q;
      AppendQuoted(name, &q);
      members.push_back({Concat({Literal(q), colon_, value}), req});
    }
    // Extra members: keys not declared.
    ExprP extra;
    {
      bool any_patterns = false, all_closed = false;
      std::vector<Conj> extra_schemas;
      for (const Others& o : others) {
        if (!o.patterns.empty()) any_patterns = true;
        if (o.additional) {
          if (o.additional->type() == element_type::BOOL) {
            all_closed = true;
          } else if (o.additional->type() == element_type::OBJECT) {
            extra_schemas.push_back({object(*o.additional), o.c->ptr + "/additionalProperties"});
          }
        }
      }
      if (any_patterns) {
        // Keys matching a pattern: supported when one conjunct has patterns, the others
        // allow anything, and additionalProperties is false there.
        const Others* po = nullptr;
        for (const Others& o : others) {
          if (o.patterns.empty()) continue;
          if (po)
            return Refuse(o.c->ptr + "/patternProperties",
                          "patternProperties in several allOf branches are not supported");
          po = &o;
        }
        for (const Others& o : others) {
          if (&o != po && o.additional) {
            return Refuse(po->c->ptr + "/patternProperties",
                          "patternProperties combined with another branch's additionalProperties "
                          "is not supported");
          }
        }
        std::vector<ExprP> keyed;
        std::vector<ExprP> key_langs, raw_langs;
        const ExprP not_declared = StringExcluding(names);
        for (const auto& [pat, s] : po->patterns) {
          const std::string pp = po->c->ptr + "/patternProperties/" + EscapePtr(pat);
          auto re = ParseRegex(pat, RegexMode::kSearch);
          if (!re.ok()) return Refuse(pp, re.status().message());
          ExprP raw = Concat({Quote(), JsonEncode(*re), Quote()});
          ExprP key = And(raw, not_declared);
          raw_langs.push_back(raw);
          key_langs.push_back(key);
          ExprP value;
          if (s.type() == element_type::BOOL) {
            value = bool(s) ? AnyValue() : Nothing();
          } else if (s.type() == element_type::OBJECT) {
            ASSIGN_OR_RETURN(value, CompileConj({{object(s), pp}}, 0));
          } else {
            return Refuse(pp, "a schema must be an object or a boolean");
          }
          keyed.push_back(Concat({key, colon_, value}));
        }
        // A key matching two patterns must satisfy both schemas: refuse overlaps.
        Status dj = CheckDisjoint(key_langs, po->c->ptr + "/patternProperties");
        if (!dj.ok()) {
          return Refuse(po->c->ptr + "/patternProperties",
                        "overlapping patterns are not supported");
        }
        // Keys no pattern matches take additionalProperties (absent: anything).
        const bool closed = po->additional && po->additional->type() == element_type::BOOL;
        if (!closed) {
          ExprP value;
          if (!po->additional) {
            value = AnyValue();
          } else if (po->additional->type() == element_type::OBJECT) {
            ASSIGN_OR_RETURN(
                value,
                CompileConj({{object(*po->additional), po->c->ptr + "/additionalProperties"}}, 0));
          } else {
            return Refuse(po->c->ptr + "/additionalProperties", "must be a schema");
          }
          keyed.push_back(Concat({AndNot(not_declared, Alt(raw_langs)), colon_, value}));
        }
        extra = Alt(std::move(keyed));
      } else if (!all_closed) {
        ExprP value;
        if (extra_schemas.empty()) {
          value = AnyValue();
        } else {
          ASSIGN_OR_RETURN(value, CompileConj(std::move(extra_schemas), 0));
        }
        extra = Concat({StringExcluding(names), colon_, value});
      }
    }
    return Object(Concat({Byte('{'), ws_}), comma_, Concat({ws_, Byte('}')}), std::move(members),
                  extra, static_cast<int>(mn), static_cast<int>(mx));
  }

  static std::string EscapePtr(const std::string& s) {
    std::string o;
    for (char c : s) {
      if (c == '~') {
        o += "~0";
      } else if (c == '/') {
        o += "~1";
      } else {
        o.push_back(c);
      }
    }
    return o;
  }

  JsonOptions opt_;
  ExprP ws_, comma_, colon_;
  simdjson::dom::parser parser_;
  simdjson::padded_string padded_;
  element root_;
  std::shared_ptr<RuleSet> rules_ = std::make_shared<RuleSet>();
  ExprP any_;
  std::map<std::string, int> ref_rule_;  // recursive $ref -> its rule
  std::vector<std::string> pending_;     // rules still to compile
  std::vector<std::string> active_refs_;
  bool legacy_ref_ = false;  // drafts 3-7: keywords beside $ref are ignored
  std::vector<std::pair<std::string, std::string_view>> skip_;  // keywords consumed by distribution
};

}  // namespace

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
