// The tree-walking renderer: scopes, statements, expressions, macros, globals; and the
// Template API (template.h).
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "chat/ast.h"
#include "chat/builtins.h"
#include "chat/template.h"

namespace sluice::chat {
namespace {

constexpr int64_t kMaxRange = 100000;  // jinja2's sandbox MAX_RANGE

struct Scope {
  Scope* parent = nullptr;
  std::unordered_map<std::string, Value> vars;
  const Value* Find(const std::string& name) const {
    for (const Scope* s = this; s; s = s->parent) {
      auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};

enum class Flow { kNormal, kBreak, kContinue };

bool HasLine(const Status& s) { return s.message().rfind("template error at line ", 0) == 0; }

class Renderer {
 public:
  Renderer(const Value& context, const RenderOptions& opts) : ctx_(context), opts_(opts) {
    InitGlobals();
  }

  Status Run(const Body& body, std::string* out) {
    Scope root;
    root_ = &root;
    return Exec(body, root, out);
  }

 private:
  Status At(int line, const Status& s) {
    if (s.ok() || HasLine(s)) return s;
    return InvalidArgument("template error at line " + std::to_string(line) + ": " + s.message());
  }

  void InitGlobals() {
    globals_["range"] = Value::Func("range", [this](CallArgs& a) -> StatusOr<Value> {
      int64_t start = 0, stop, step = 1;
      for (const auto& v : a.pos) {
        if (!v.is_int())
          return InvalidArgument("'" + TypeName(v) +
                                 "' object cannot be interpreted as an integer");
      }
      if (a.pos.size() == 1) {
        stop = a.pos[0].AsInt();
      } else if (a.pos.size() == 2 || a.pos.size() == 3) {
        start = a.pos[0].AsInt();
        stop = a.pos[1].AsInt();
        if (a.pos.size() == 3) step = a.pos[2].AsInt();
      } else {
        return InvalidArgument("range expected 1 to 3 integer arguments");
      }
      if (step == 0) return InvalidArgument("range() arg 3 must not be zero");
      const double span = step > 0 ? static_cast<double>(stop) - static_cast<double>(start)
                                   : static_cast<double>(start) - static_cast<double>(stop);
      const double n = span <= 0 ? 0 : std::ceil(span / std::fabs(static_cast<double>(step)));
      if (n > kMaxRange)
        return OutOfRange(
            "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
      std::vector<Value> items;
      for (int64_t k = 0, v = start; k < static_cast<int64_t>(n); ++k, v += step)
        items.push_back(Value::Int(v));
      (void)this;
      return Value::NewList(std::move(items));
    });
    globals_["dict"] = Value::Func("dict", [](CallArgs& a) -> StatusOr<Value> {
      Value d = Value::NewDict();
      if (!a.pos.empty()) {
        if (a.pos[0].is_dict()) {
          d.dict->items = a.pos[0].dict->items;
        } else {
          ASSIGN_OR_RETURN(auto items, Iterate(a.pos[0]));
          for (const auto& p : items) {
            if (!p.is_list() || p.list->items.size() != 2)
              return InvalidArgument("dictionary update sequence element has wrong length");
            d.dict->Set(p.list->items[0], p.list->items[1]);
          }
        }
      }
      for (auto& [k, v] : a.kw) d.dict->Set(Value::Str(k), v);
      return d;
    });
    globals_["namespace"] = Value::Func("namespace", [](CallArgs& a) -> StatusOr<Value> {
      Value ns = Value::NewNamespace();
      for (const auto& p : a.pos) {
        if (!p.is_dict())
          return InvalidArgument("namespace() positional argument must be a mapping");
        for (const auto& kv : p.dict->items) ns.dict->Set(kv.first, kv.second);
      }
      for (auto& [k, v] : a.kw) ns.dict->Set(Value::Str(k), v);
      return ns;
    });
    globals_["raise_exception"] =
        Value::Func("raise_exception", [](CallArgs& a) -> StatusOr<Value> {
          return InvalidArgument("raise_exception: " + PyStr(a.Get(0, "message")));
        });
    globals_["strftime_now"] = Value::Func("strftime_now", [this](CallArgs& a) -> StatusOr<Value> {
      Value fmt = a.Get(0, "format");
      if (!fmt.is_string()) return InvalidArgument("strftime() argument 1 must be str");
      std::tm tm{};
      if (opts_.now) {
        tm = *opts_.now;
      } else {
        const std::time_t t = std::time(nullptr);
        localtime_r(&t, &tm);
      }
      if (fmt.s.empty()) return Value::Str("");
      std::string buf(256 + fmt.s.size() * 16, '\0');
      const size_t n = std::strftime(buf.data(), buf.size(), fmt.s.c_str(), &tm);
      buf.resize(n);
      return Value::Str(std::move(buf));
    });
  }

  StatusOr<Value> Lookup(const std::string& name, const Scope& scope) {
    if (const Value* v = scope.Find(name)) return *v;
    if (ctx_.is_dict()) {
      if (const Value* v = ctx_.dict->Find(Value::Str(name))) return *v;
    }
    auto it = globals_.find(name);
    if (it != globals_.end()) return it->second;
    return Value::Undefined("'" + name + "' is undefined");
  }

  Status Emit(std::string* out, const std::string& s) {
    if (out->size() + s.size() > opts_.max_output_bytes)
      return OutOfRange("rendered output exceeds max_output_bytes");
    *out += s;
    return Status::Ok();
  }

  Status Exec(const Body& body, Scope& scope, std::string* out) {
    for (const auto& st : body) {
      RETURN_IF_ERROR(At(st->line, ExecOne(*st, scope, out)));
      if (flow_ != Flow::kNormal) return Status::Ok();
    }
    return Status::Ok();
  }

  Status Assign(Scope& scope, const std::vector<std::string>& names, const Value& v) {
    if (names.size() == 1) {
      scope.vars[names[0]] = v;
      return Status::Ok();
    }
    ASSIGN_OR_RETURN(auto items, Iterate(v));
    if (items.size() != names.size())
      return InvalidArgument(items.size() < names.size() ? "not enough values to unpack"
                                                         : "too many values to unpack");
    for (size_t i = 0; i < names.size(); ++i) scope.vars[names[i]] = items[i];
    return Status::Ok();
  }

  Status ExecOne(const Stmt& st, Scope& scope, std::string* out) {
    switch (st.k) {
      case Stmt::K::kText:
        return Emit(out, st.text);
      case Stmt::K::kOutput: {
        ASSIGN_OR_RETURN(Value v, Eval(*st.expr, scope));
        return Emit(out, PyStr(v));
      }
      case Stmt::K::kIf:
        for (size_t i = 0; i < st.bodies.size(); ++i) {
          if (i < st.conds.size()) {
            ASSIGN_OR_RETURN(Value c, Eval(*st.conds[i], scope));
            if (!Truthy(c)) continue;
          }
          return Exec(st.bodies[i], scope, out);
        }
        return Status::Ok();
      case Stmt::K::kFor:
        return ExecFor(st, scope, out);
      case Stmt::K::kSet: {
        ASSIGN_OR_RETURN(Value v, Eval(*st.expr, scope));
        if (!st.attr.empty()) {
          ASSIGN_OR_RETURN(Value ns, Lookup(st.text, scope));
          if (ns.kind != Value::Kind::kNamespace)
            return InvalidArgument("cannot assign attribute on non-namespace object");
          ns.dict->Set(Value::Str(st.attr), v);
          return Status::Ok();
        }
        return Assign(scope, st.names, v);
      }
      case Stmt::K::kSetBlock: {
        std::string captured;
        RETURN_IF_ERROR(Exec(st.bodies[0], scope, &captured));
        Value v = Value::Str(std::move(captured));
        if (st.expr) {
          ASSIGN_OR_RETURN(v, EvalFilterChain(*st.expr, v, scope));
        }
        scope.vars[st.text] = v;
        return Status::Ok();
      }
      case Stmt::K::kMacro:
        scope.vars[st.text] = MakeMacro(st, st.text, nullptr);
        return Status::Ok();
      case Stmt::K::kCallBlock: {
        Value caller = MakeMacro(st, "caller", &scope);
        ASSIGN_OR_RETURN(Value v, EvalCall(*st.expr, scope, &caller));
        return Emit(out, PyStr(v));
      }
      case Stmt::K::kFilterBlock: {
        std::string captured;
        RETURN_IF_ERROR(Exec(st.bodies[0], scope, &captured));
        ASSIGN_OR_RETURN(Value v,
                         EvalFilterChain(*st.expr, Value::Str(std::move(captured)), scope));
        return Emit(out, PyStr(v));
      }
      case Stmt::K::kBreak:
        flow_ = Flow::kBreak;
        return Status::Ok();
      case Stmt::K::kContinue:
        flow_ = Flow::kContinue;
        return Status::Ok();
      case Stmt::K::kWith: {
        Scope inner{&scope, {}};
        for (const auto& [n, e] : st.assigns) {
          ASSIGN_OR_RETURN(Value v, Eval(*e, inner));
          inner.vars[n] = v;
        }
        return Exec(st.bodies[0], inner, out);
      }
      case Stmt::K::kScope:
        return Exec(st.bodies[0], scope, out);
    }
    return Internal("unknown statement");
  }

  Status ExecFor(const Stmt& st, Scope& scope, std::string* out) {
    ASSIGN_OR_RETURN(Value seq, Eval(*st.expr, scope));
    if (seq.is_none()) return InvalidArgument("'NoneType' object is not iterable");
    ASSIGN_OR_RETURN(auto items, Iterate(seq));
    if (st.cond) {
      std::vector<Value> kept;
      for (const auto& x : items) {
        Scope probe{&scope, {}};
        RETURN_IF_ERROR(Assign(probe, st.names, x));
        ASSIGN_OR_RETURN(Value c, Eval(*st.cond, probe));
        if (Truthy(c)) kept.push_back(x);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Scope inner{&scope, {}};
      return Exec(st.bodies[1], inner, out);
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < n; ++i) {
      if (++iterations_ > opts_.max_loop_iterations)
        return OutOfRange("loop iterations exceed max_loop_iterations");
      Scope inner{&scope, {}};
      RETURN_IF_ERROR(Assign(inner, st.names, items[i]));
      Value loop = Value::NewNamespace();
      loop.Set("index", Value::Int(i + 1))
          .Set("index0", Value::Int(i))
          .Set("revindex", Value::Int(n - i));
      loop.Set("revindex0", Value::Int(n - i - 1))
          .Set("first", Value::Bool(i == 0))
          .Set("last", Value::Bool(i == n - 1));
      loop.Set("length", Value::Int(n)).Set("depth", Value::Int(1)).Set("depth0", Value::Int(0));
      if (i > 0) loop.Set("previtem", items[i - 1]);
      if (i + 1 < n) loop.Set("nextitem", items[i + 1]);
      loop.Set("cycle", Value::Func("cycle", [i](CallArgs& a) -> StatusOr<Value> {
                 if (a.pos.empty()) return InvalidArgument("no items for cycling given");
                 return a.pos[static_cast<size_t>(i) % a.pos.size()];
               }));
      inner.vars["loop"] = loop;
      RETURN_IF_ERROR(Exec(st.bodies[0], inner, out));
      if (flow_ == Flow::kBreak) {
        flow_ = Flow::kNormal;
        break;
      }
      flow_ = Flow::kNormal;
    }
    return Status::Ok();
  }

  // A macro (or a call block's caller when `defining_scope` is set) as a callable value.
  Value MakeMacro(const Stmt& st, const std::string& name, Scope* defining_scope) {
    const Stmt* sp = &st;
    return Value::Func(name, [this, sp, defining_scope](CallArgs& a) -> StatusOr<Value> {
      if (++call_depth_ > opts_.max_call_depth) {
        --call_depth_;
        return OutOfRange("macro calls nested deeper than max_call_depth");
      }
      Scope inner{defining_scope ? defining_scope : root_, {}};
      std::vector<Value> varargs;
      for (size_t i = 0; i < a.pos.size(); ++i) {
        if (i < sp->names.size())
          inner.vars[sp->names[i]] = a.pos[i];
        else
          varargs.push_back(a.pos[i]);
      }
      Value kwargs = Value::NewDict();
      for (auto& [k, v] : a.kw) {
        bool param = k == "caller";
        for (const auto& n : sp->names) param = param || n == k;
        if (param)
          inner.vars[k] = v;
        else
          kwargs.Set(k, v);
      }
      for (size_t i = a.pos.size(); i < sp->names.size(); ++i) {
        if (inner.vars.count(sp->names[i])) continue;
        if (i < sp->defaults.size() && sp->defaults[i]) {
          auto d = Eval(*sp->defaults[i], inner);
          if (!d.ok()) {
            --call_depth_;
            return d.status();
          }
          inner.vars[sp->names[i]] = *d;
        } else {
          inner.vars[sp->names[i]] =
              Value::Undefined("parameter '" + sp->names[i] + "' was not provided");
        }
      }
      inner.vars["varargs"] = Value::NewList(std::move(varargs), /*tuple=*/true);
      inner.vars["kwargs"] = kwargs;
      std::string out;
      const Flow saved = flow_;
      flow_ = Flow::kNormal;
      Status s = Exec(sp->bodies[0], inner, &out);
      flow_ = saved;
      --call_depth_;
      RETURN_IF_ERROR(s);
      return Value::Str(std::move(out));
    });
  }

  StatusOr<Value> EvalFilterChain(const Expr& e, const Value& input, Scope& scope) {
    Value in = input;
    if (e.a) {
      ASSIGN_OR_RETURN(in, EvalFilterChain(*e.a, input, scope));
    }
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
    return CallFilter(e.name, in, args, opts_);
  }

  StatusOr<CallArgs> EvalArgs(const Expr& e, Scope& scope) {
    CallArgs args;
    for (const auto& x : e.args) {
      ASSIGN_OR_RETURN(Value v, Eval(*x, scope));
      args.pos.push_back(v);
    }
    for (const auto& [k, x] : e.kwargs) {
      ASSIGN_OR_RETURN(Value v, Eval(*x, scope));
      args.kw.emplace_back(k, v);
    }
    return args;
  }

  StatusOr<Value> EvalCall(const Expr& e, Scope& scope, const Value* caller) {
    ASSIGN_OR_RETURN(Value f, Eval(*e.a, scope));
    if (f.is_undefined()) return UndefinedError(f);
    if (f.kind != Value::Kind::kCallable)
      return InvalidArgument("'" + TypeName(f) + "' object is not callable");
    ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
    if (caller) args.kw.emplace_back("caller", *caller);
    return f.fn->fn(args);
  }

  StatusOr<Value> Eval(const Expr& e, Scope& scope) {
    auto r = EvalInner(e, scope);
    if (!r.ok()) return At(e.line, r.status());
    return r;
  }

  StatusOr<Value> EvalInner(const Expr& e, Scope& scope) {
    switch (e.k) {
      case Expr::K::kConst:
        return e.val;
      case Expr::K::kName:
        return Lookup(e.name, scope);
      case Expr::K::kAttr: {
        ASSIGN_OR_RETURN(Value o, Eval(*e.a, scope));
        return GetAttr(o, e.name);
      }
      case Expr::K::kItem: {
        ASSIGN_OR_RETURN(Value o, Eval(*e.a, scope));
        ASSIGN_OR_RETURN(Value k, Eval(*e.b, scope));
        return GetItem(o, k);
      }
      case Expr::K::kSlice: {
        ASSIGN_OR_RETURN(Value o, Eval(*e.a, scope));
        Value parts[3];
        const Expr* exprs[3] = {e.b.get(), e.c.get(), e.args.empty() ? nullptr : e.args[0].get()};
        for (int k = 0; k < 3; ++k) {
          if (exprs[k]) {
            ASSIGN_OR_RETURN(parts[k], Eval(*exprs[k], scope));
          }
        }
        return SliceOf(o, parts[0], parts[1], parts[2]);
      }
      case Expr::K::kCall:
        return EvalCall(e, scope, nullptr);
      case Expr::K::kFilter: {
        Value in;
        if (e.a) {
          ASSIGN_OR_RETURN(in, Eval(*e.a, scope));
        }
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
        return CallFilter(e.name, in, args, opts_);
      }
      case Expr::K::kTest: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
        ASSIGN_OR_RETURN(CallArgs args, EvalArgs(e, scope));
        ASSIGN_OR_RETURN(bool r, CallTest(e.name, v, args));
        return Value::Bool(r != e.negated);
      }
      case Expr::K::kNeg:
      case Expr::K::kPos: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
        if (v.is_undefined()) return UndefinedError(v);
        if (!v.is_number())
          return InvalidArgument("bad operand type for unary " +
                                 std::string(e.k == Expr::K::kNeg ? "-" : "+") + ": '" +
                                 TypeName(v) + "'");
        if (e.k == Expr::K::kPos) return v.kind == Value::Kind::kFloat ? v : Value::Int(v.AsInt());
        if (v.kind == Value::Kind::kFloat) return Value::Float(-v.f);
        if (v.AsInt() == INT64_MIN) return OutOfRange("integer overflow");
        return Value::Int(-v.AsInt());
      }
      case Expr::K::kNot: {
        ASSIGN_OR_RETURN(Value v, Eval(*e.a, scope));
        return Value::Bool(!Truthy(v));
      }
      case Expr::K::kBinary: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
        ASSIGN_OR_RETURN(Value b, Eval(*e.b, scope));
        return BinaryOp(e.name, a, b, opts_);
      }
      case Expr::K::kConcat: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
        ASSIGN_OR_RETURN(Value b, Eval(*e.b, scope));
        std::string s = PyStr(a) + PyStr(b);
        if (s.size() > opts_.max_output_bytes) return OutOfRange("string exceeds max_output_bytes");
        return Value::Str(std::move(s));
      }
      case Expr::K::kAnd: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
        if (!Truthy(a)) return a;
        return Eval(*e.b, scope);
      }
      case Expr::K::kOr: {
        ASSIGN_OR_RETURN(Value a, Eval(*e.a, scope));
        if (Truthy(a)) return a;
        return Eval(*e.b, scope);
      }
      case Expr::K::kCond: {
        ASSIGN_OR_RETURN(Value c, Eval(*e.b, scope));
        if (Truthy(c)) return Eval(*e.a, scope);
        if (e.c) return Eval(*e.c, scope);
        return Value::Undefined(
            "the inline if-expression evaluated to false and no else section was defined.");
      }
      case Expr::K::kList:
      case Expr::K::kTuple: {
        std::vector<Value> items;
        for (const auto& x : e.args) {
          ASSIGN_OR_RETURN(Value v, Eval(*x, scope));
          items.push_back(v);
        }
        return Value::NewList(std::move(items), e.k == Expr::K::kTuple);
      }
      case Expr::K::kDict: {
        Value d = Value::NewDict();
        for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
          ASSIGN_OR_RETURN(Value k, Eval(*e.args[i], scope));
          ASSIGN_OR_RETURN(Value v, Eval(*e.args[i + 1], scope));
          if (k.is_list() && !k.list->tuple) return InvalidArgument("unhashable type: 'list'");
          if (k.is_dict()) return InvalidArgument("unhashable type: 'dict'");
          d.dict->Set(k, v);
        }
        return d;
      }
      case Expr::K::kCompare: {
        ASSIGN_OR_RETURN(Value left, Eval(*e.a, scope));
        for (size_t i = 0; i < e.ops.size(); ++i) {
          ASSIGN_OR_RETURN(Value right, Eval(*e.args[i], scope));
          const std::string& op = e.ops[i];
          bool r;
          if (op == "==") {
            r = Equal(left, right);
          } else if (op == "!=") {
            r = !Equal(left, right);
          } else if (op == "in" || op == "notin") {
            ASSIGN_OR_RETURN(r, Contains(right, left));
            if (op == "notin") r = !r;
          } else {
            if (left.is_undefined()) return UndefinedError(left);
            if (right.is_undefined()) return UndefinedError(right);
            ASSIGN_OR_RETURN(int c, Compare(left, right));
            r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
          }
          if (!r) return Value::Bool(false);
          left = right;
        }
        return Value::Bool(true);
      }
    }
    return Internal("unknown expression");
  }

  const Value& ctx_;
  const RenderOptions& opts_;
  std::unordered_map<std::string, Value> globals_;
  Scope* root_ = nullptr;
  Flow flow_ = Flow::kNormal;
  size_t iterations_ = 0;
  int call_depth_ = 0;
};

}  // namespace

StatusOr<Template> Template::Parse(std::string_view text) {
  // jinja2: newlines normalised to \n; one trailing newline dropped (keep_trailing_newline=False).
  std::string src;
  src.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\r') {
      src += '\n';
      if (i + 1 < text.size() && text[i + 1] == '\n') ++i;
    } else {
      src += text[i];
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  ASSIGN_OR_RETURN(Body body, ParseTemplate(src));
  Template t;
  t.body_ = std::make_shared<const Body>(std::move(body));
  return t;
}

StatusOr<std::string> Template::Render(const Value& context, const RenderOptions& options) const {
  Renderer r(context, options);
  std::string out;
  RETURN_IF_ERROR(r.Run(*body_, &out));
  return out;
}

Value FromJson(simdjson::dom::element el) {
  switch (el.type()) {
    case simdjson::dom::element_type::ARRAY: {
      Value v = Value::NewList();
      simdjson::dom::array arr;
      if (el.get(arr) != simdjson::SUCCESS) return v;
      for (simdjson::dom::element x : arr) v.Append(FromJson(x));
      return v;
    }
    case simdjson::dom::element_type::OBJECT: {
      Value v = Value::NewDict();
      simdjson::dom::object obj;
      if (el.get(obj) != simdjson::SUCCESS) return v;
      for (simdjson::dom::key_value_pair kv : obj)
        v.dict->Set(Value::Str(std::string(kv.key)), FromJson(kv.value));
      return v;
    }
    case simdjson::dom::element_type::INT64:
      return Value::Int(el.get_int64().value_unsafe());
    case simdjson::dom::element_type::UINT64:
      return Value::Float(static_cast<double>(el.get_uint64().value_unsafe()));
    case simdjson::dom::element_type::DOUBLE:
      return Value::Float(el.get_double().value_unsafe());
    case simdjson::dom::element_type::STRING:
      return Value::Str(std::string(el.get_string().value_unsafe()));
    case simdjson::dom::element_type::BOOL:
      return Value::Bool(el.get_bool().value_unsafe());
    default:
      return Value::None();
  }
}

StatusOr<Value> ParseJson(std::string_view json) {
  simdjson::dom::parser parser;
  simdjson::padded_string padded(json);
  simdjson::dom::element el;
  if (parser.parse(padded).get(el) != simdjson::SUCCESS) return InvalidArgument("invalid JSON");
  return FromJson(el);
}

}  // namespace sluice::chat
