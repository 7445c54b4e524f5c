// Private to the JSON Schema compiler: the Compiler class, shared by json_schema.cc (the
// driver, $ref, the combinators allOf/anyOf/oneOf and their proofs) and json_schema_values.cc
// (each type's keywords: numbers, strings, arrays, objects, enum/const). Not an interface:
// json_schema.h is.
#pragma once

#include <simdjson.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/json_lexical.h"
#include "structured/json_schema.h"
#include "structured/pushdown.h"

namespace sluice::structured::schema_compiler {

using simdjson::dom::element;
using simdjson::dom::element_type;
using simdjson::dom::object;

using namespace json_text;  // json_lexical.h

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

  StatusOr<ExprP> Run(std::string_view json);

  const std::shared_ptr<RuleSet>& rules() const { return rules_; }

  // Any JSON value: scalars here, nested arrays and objects through calls (any depth, up to
  // the pushdown automaton's limit).
  ExprP AnyValue();

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

  StatusOr<element> Resolve(std::string_view ref, const std::string& ptr);

  // Expands $ref and allOf into the conjunction; false -> nullopt (unsatisfiable).
  // A $ref that is active (the schema it names is being compiled around it) ends the expansion
  // with *call set: the conjunction is a call of that schema's rule (nothing else may constrain
  // it: the automaton cannot intersect a recursive language).
  StatusOr<bool> Expand(std::vector<Conj>* conj, size_t from, std::vector<std::string>* refs,
                        int depth, std::optional<std::string>* call);

  // Compiles the conjunction of the schemas; anyOf/oneOf are distributed over it.
  StatusOr<ExprP> CompileConj(std::vector<Conj> conj, int depth, size_t from = 0);

  StatusOr<ExprP> CompileExpanded(std::vector<Conj> conj, int depth);

  // A call of the rule of schema `ref` (created on first use, compiled by Run). Its finite
  // over-approximation (for oneOf proofs): the JSON types the schema's `type` allows.
  ExprP CallRule(const std::string& ref);

  ExprP TypeApprox(const std::string& ref);

  // A keyword of the conjunction, beside the $ref of conj[i], that would constrain the value
  // (empty: none; $ref and allOf of earlier conjuncts were expanded into the conjunction).
  std::string OtherKeyword(const std::vector<Conj>& conj, size_t i) const;

  static bool IsRefusedKeyword(std::string_view k);

  bool Skipped(const Conj& c, std::string_view kw) const {
    for (const auto& [sp, sk] : skip_) {
      if (sk == kw && sp == c.ptr) return true;
    }
    return false;
  }

  // Required properties of an object schema with the values const/enum allow them (canonical
  // JSON), following $ref at the top and on the property.
  void Discriminators(element s, std::map<std::string, std::set<std::string>>* out, int depth = 0);

  // oneOf is exclusive: no value may match two branches. Scalars: the branches' automata must
  // not intersect (every value a branch accepts has its canonical spelling in the branch's
  // language). Objects: the automata cannot tell (each branch orders keys its own way), so two
  // branches that both admit objects need a discriminator: a property both require whose
  // const/enum values are disjoint. Two branches that both admit arrays are refused.
  Status CheckDisjoint(const std::vector<ExprP>& b, const std::string& ptr,
                       const std::vector<std::optional<element>>* schemas = nullptr);

  static double ToDouble(const element& e) {
    if (e.type() == element_type::INT64) return static_cast<double>(int64_t(e));
    if (e.type() == element_type::UINT64) return static_cast<double>(uint64_t(e));
    return double(e);
  }

  // Every schema keyword of the conjunction merged; no $ref/allOf/anyOf/oneOf left.
  StatusOr<ExprP> CompileFlat(const std::vector<Conj>& conj);

  // enum/const: the values (spelled with the whitespace policy) that the rest of the schema
  // accepts, checked with the compact automaton of the rest.
  StatusOr<ExprP> CompileEnum(const std::vector<Conj>& conj, const std::vector<element>& vals,
                              unsigned types);

  static bool MatchesTypes(const element& v, unsigned types);

  static bool IsValidationKeyword(std::string_view k);

  // A literal value spelled with the whitespace policy.
  ExprP ValueExpr(const element& v);

  template <typename F>
  void ForKey(const std::vector<Conj>& conj, std::string_view kw, F f) {
    for (const Conj& c : conj) {
      if (Skipped(c, kw)) continue;
      element v;
      if (c.o.at_key(kw).get(v) == simdjson::SUCCESS) f(c, v);
    }
  }

  Status IntKeyword(const std::vector<Conj>& conj, std::string_view kw, bool take_max, int64_t* out,
                    bool* set);

  StatusOr<ExprP> CompileNumber(const std::vector<Conj>& conj, unsigned types);

  StatusOr<ExprP> CompileString(const std::vector<Conj>& conj);

  StatusOr<ExprP> CompileArray(const std::vector<Conj>& conj);

  StatusOr<ExprP> CompileObject(const std::vector<Conj>& conj);

  static std::string EscapePtr(const std::string& s);

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

}  // namespace sluice::structured::schema_compiler
