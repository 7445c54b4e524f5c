// JSON Schema to a grammar expression, each type's keywords (json_schema_compiler.h):
// numbers, strings, arrays, objects, enum/const and the merge of a flat conjunction.
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

namespace sluice::structured::schema_compiler {

// Every schema keyword of the conjunction merged; no $ref/allOf/anyOf/oneOf left.
StatusOr<ExprP> Compiler::CompileFlat(const std::vector<Conj>& conj) {
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
          if (x.type() != element_type::STRING) return Refuse(c.ptr + "/type", "must hold strings");
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
StatusOr<ExprP> Compiler::CompileEnum(const std::vector<Conj>& conj,
                                      const std::vector<element>& vals, unsigned types) {
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

bool Compiler::MatchesTypes(const element& v, unsigned types) {
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

bool Compiler::IsValidationKeyword(std::string_view k) {
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
ExprP Compiler::ValueExpr(const element& v) {
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

Status Compiler::IntKeyword(const std::vector<Conj>& conj, std::string_view kw, bool take_max,
                            int64_t* out, bool* set) {
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

StatusOr<ExprP> Compiler::CompileNumber(const std::vector<Conj>& conj, unsigned types) {
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

StatusOr<ExprP> Compiler::CompileString(const std::vector<Conj>& conj) {
  int64_t mn = 0, mx = -1;
  bool mn_set = false, mx_set = false;
  RETURN_IF_ERROR(IntKeyword(conj, "minLength", true, &mn, &mn_set));
  RETURN_IF_ERROR(IntKeyword(conj, "maxLength", false, &mx, &mx_set));
  if (!mx_set) mx = -1;
  if (mx >= 0 && mn > mx) return Nothing();
  if (mn > 10000 || mx > 10000) {
    return Refuse(conj[0].ptr, "minLength/maxLength over 10000 are not supported");
  }
  ExprP e =
      Concat({Quote(), Repeat(StringChar(), static_cast<int>(mn), static_cast<int>(mx)), Quote()});
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

StatusOr<ExprP> Compiler::CompileArray(const std::vector<Conj>& conj) {
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
      ExprP list =
          List(rest, comma_, static_cast<int>(std::max<int64_t>(1, rmin)), static_cast<int>(rmax));
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

StatusOr<ExprP> Compiler::CompileObject(const std::vector<Conj>& conj) {
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
        return Refuse(po->c->ptr + "/patternProperties", "overlapping patterns are not supported");
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

std::string Compiler::EscapePtr(const std::string& s) {
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

}  // namespace sluice::structured::schema_compiler
