#include "serving/jinja_renderer.h"

#include <optional>

#include "serving/jinja_builtins.h"
#include "serving/jinja_lexer.h"
#include "serving/jinja_operators.h"

namespace deepspeed::serving::jinja {

namespace {

enum class Flow { kNormal, kBreak, kContinue };

constexpr int kMaxMacroDepth = 100;

class Renderer {
 public:
  Renderer(const Template& tmpl, const Map& variables) : tmpl_(tmpl) {
    scopes_.push_back(make_globals());
    for (const auto& [k, v] : variables.items) scopes_[0].set(k, v);
  }

  std::string run() {
    try {
      exec(tmpl_.body);
    } catch (const RenderError& e) {
      throw RenderError(where() + e.what());
    } catch (const UnsupportedError& e) {
      throw UnsupportedError(where() + "unsupported " + e.what());
    }
    return std::move(out_);
  }

 private:
  std::string where() const {
    return error_offset_ ? source_position(tmpl_.source, *error_offset_) + ": " : std::string();
  }

  // Remembers the innermost node an error passed through: the first catch on the way out is the failing node.
  template <typename F>
  auto located(size_t offset, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const RenderError&) {
      if (!error_offset_) error_offset_ = offset;
      throw;
    } catch (const UnsupportedError&) {
      if (!error_offset_) error_offset_ = offset;
      throw;
    }
  }

  Value lookup(const std::string& name) const {
    // A macro's body sees its own scopes and the template's top level, not its caller's.
    for (size_t i = scopes_.size(); i-- > floor_;) {
      if (const Value* v = scopes_[i].find(name)) return *v;
    }
    if (floor_ > 0) {
      if (const Value* v = scopes_[0].find(name)) return *v;
    }
    return Value::undefined("'" + name + "' is undefined");
  }

  Flow exec(const Body& body) {
    for (const StmtPtr& s : body) {
      const Flow flow = located(s->offset, [&] { return exec_stmt(*s); });
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec_stmt(const Stmt& s) {
    switch (s.kind) {
      case Stmt::Kind::kText:
        out_ += s.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        out_ += value_str(eval(*s.expr));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [cond, body] : s.branches) {
          if (!cond || eval(*cond).truthy()) return exec(body);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        exec_for(s);
        return Flow::kNormal;
      case Stmt::Kind::kSet:
        exec_set(s);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock:
        scopes_.back().set(s.targets[0], Value(capture(s.body)));
        return Flow::kNormal;
      case Stmt::Kind::kMacro:
        define_macro(s);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kScope:
        return exec(s.body);
    }
    return Flow::kNormal;
  }

  std::string capture(const Body& body) {
    std::string saved;
    saved.swap(out_);
    exec(body);
    saved.swap(out_);
    return saved;
  }

  void assign(Map& scope, const std::vector<std::string>& targets, const Value& value) {
    if (targets.size() == 1) {
      scope.set(targets[0], value);
      return;
    }
    const List items = iterate_value(value, "unpacking");
    if (items.size() != targets.size()) {
      throw RenderError(std::string(items.size() > targets.size() ? "too many" : "not enough") +
                        " values to unpack (expected " + std::to_string(targets.size()) + ", got " +
                        std::to_string(items.size()) + ")");
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  void exec_set(const Stmt& s) {
    const Value value = eval(*s.expr);
    if (s.attr.empty()) {
      assign(scopes_.back(), s.targets, value);
      return;
    }
    const Value target = lookup(s.targets[0]);
    if (target.kind() != Value::Kind::kNamespace) {
      throw RenderError("cannot assign attribute on non-namespace object '" + s.targets[0] + "'");
    }
    target.namespace_entries().set(s.attr, value);
  }

  static Value loop_object(size_t i, const List& items) {
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t k = static_cast<int64_t>(i);
    Map loop;
    loop.set("index0", Value(k));
    loop.set("index", Value(k + 1));
    loop.set("revindex0", Value(n - k - 1));
    loop.set("revindex", Value(n - k));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(k == n - 1));
    loop.set("length", Value(n));
    loop.set("depth", Value(1));
    loop.set("depth0", Value(0));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem", k + 1 < n ? items[i + 1] : Value::undefined("there is no next item"));
    return Value::map(std::move(loop));
  }

  void exec_for(const Stmt& s) {
    List items = iterate_value(eval(*s.expr), "for loop");
    if (s.cond) {
      // The loop's `if` filters before `loop` counts, so loop.last and loop.length see only what passes.
      List kept;
      for (const Value& item : items) {
        scopes_.emplace_back();
        assign(scopes_.back(), s.targets, item);
        const bool pass = eval(*s.cond).truthy();
        scopes_.pop_back();
        if (pass) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      scopes_.emplace_back();
      exec(s.else_body);
      scopes_.pop_back();
      return;
    }
    for (size_t i = 0; i < items.size(); ++i) {
      // Each iteration starts from the enclosing scope: a set in the body lasts until the iteration ends.
      scopes_.emplace_back();
      scopes_.back().set("loop", loop_object(i, items));
      assign(scopes_.back(), s.targets, items[i]);
      const Flow flow = exec(s.body);
      scopes_.pop_back();
      if (flow == Flow::kBreak) break;
    }
  }

  void define_macro(const Stmt& s) {
    const Stmt* macro = &s;
    scopes_.back().set(
        s.name, Value::callable(s.name, [this, macro](const CallArgs& args) { return call_macro(*macro, args); }));
  }

  Value call_macro(const Stmt& m, const CallArgs& args) {
    if (args.args.size() > m.params.size()) {
      throw RenderError("macro '" + m.name + "' takes not more than " + std::to_string(m.params.size()) +
                        " argument(s)");
    }
    Map frame;
    for (size_t i = 0; i < m.params.size(); ++i) {
      const Value passed = call_arg(args, i, m.params[i].c_str(), Value());
      if (!passed.is_undefined() || i < args.args.size()) {
        frame.set(m.params[i], passed);
      } else if (m.defaults[i]) {
        frame.set(m.params[i], eval(*m.defaults[i]));
      } else {
        frame.set(m.params[i], Value::undefined("parameter '" + m.params[i] + "' was not provided"));
      }
    }
    for (const auto& kw : args.kwargs) {
      if (frame.find(kw.first) == nullptr)
        throw RenderError("macro '" + m.name + "' takes no keyword argument '" + kw.first + "'");
    }
    // Python stops runaway recursion with RecursionError; without a bound a template recursing on a client's
    // value (a tool schema) would overflow the server's stack.
    if (macro_depth_ >= kMaxMacroDepth) {
      throw RenderError("maximum recursion depth exceeded in macro '" + m.name + "' (" +
                        std::to_string(kMaxMacroDepth) + " nested calls)");
    }
    ++macro_depth_;
    const size_t saved_floor = floor_;
    const size_t saved_depth = scopes_.size();
    floor_ = scopes_.size();
    scopes_.push_back(std::move(frame));
    std::string text;
    try {
      text = capture(m.body);
    } catch (...) {
      scopes_.resize(saved_depth);
      floor_ = saved_floor;
      --macro_depth_;
      throw;
    }
    scopes_.resize(saved_depth);
    floor_ = saved_floor;
    --macro_depth_;
    return Value(text);
  }

  Value eval(const Expr& e) {
    return located(e.offset, [&] { return eval_node(e); });
  }

  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs args;
    const size_t positional_end = e.args.size() - e.kwnames.size();
    for (size_t i = first; i < positional_end; ++i) args.args.push_back(eval(*e.args[i]));
    for (size_t i = 0; i < e.kwnames.size(); ++i)
      args.kwargs.emplace_back(e.kwnames[i], eval(*e.args[positional_end + i]));
    return args;
  }

  std::optional<int64_t> slice_part(const ExprPtr& part) {
    if (!part) return std::nullopt;
    const Value v = eval(*part);
    if (v.is_none()) return std::nullopt;
    if (v.kind() != Value::Kind::kInt && v.kind() != Value::Kind::kBool) {
      throw RenderError("slice indices must be integers or None, not " + v.type_name());
    }
    return v.as_int();
  }

  Value eval_call(const Expr& e) {
    const Value callee = eval(*e.args[0]);
    CallArgs args = eval_args(e, 1);
    if (callee.kind() != Value::Kind::kCallable) {
      callee.defined_or_throw();
      throw RenderError("'" + callee.type_name() + "' object is not callable");
    }
    return callee.as_callable().fn(args);
  }

  Value eval_compare(const Expr& e) {
    Value left = eval(*e.args[0]);
    for (size_t i = 0; i < e.ops.size(); ++i) {
      Value right = eval(*e.args[i + 1]);
      if (!compare_values(e.ops[i], left, right)) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  Value eval_node(const Expr& e);

  const Template& tmpl_;
  std::vector<Map> scopes_;
  size_t floor_ = 0;
  int macro_depth_ = 0;
  std::string out_;
  std::optional<size_t> error_offset_;
};

Value Renderer::eval_node(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.literal;
    case Expr::Kind::kName:
      return lookup(e.name);
    case Expr::Kind::kList: {
      List items;
      for (const ExprPtr& a : e.args) items.push_back(eval(*a));
      return e.name == "tuple" ? Value::tuple(std::move(items)) : Value::list(std::move(items));
    }
    case Expr::Kind::kDict: {
      Map m;
      for (size_t i = 0; i + 1 < e.args.size(); i += 2) {
        const Value key = eval(*e.args[i]);
        if (!key.is_string()) throw UnsupportedError("dict keys other than strings (" + value_repr(key) + ")");
        m.set(key.as_string(), eval(*e.args[i + 1]));
      }
      return Value::map(std::move(m));
    }
    case Expr::Kind::kAttr:
      return get_attribute(eval(*e.args[0]), e.name);
    case Expr::Kind::kItem: {
      const Value obj = eval(*e.args[0]);
      return get_item(obj, eval(*e.args[1]));
    }
    case Expr::Kind::kSlice: {
      const Value obj = eval(*e.args[0]);
      const std::optional<int64_t> start = slice_part(e.args[1]);
      const std::optional<int64_t> stop = slice_part(e.args[2]);
      return slice_value(obj, start, stop, slice_part(e.args[3]));
    }
    case Expr::Kind::kCall:
      return eval_call(e);
    case Expr::Kind::kFilter: {
      const Value input = eval(*e.args[0]);
      return apply_filter(e.name, input, eval_args(e, 1));
    }
    case Expr::Kind::kTest: {
      const Value input = eval(*e.args[0]);
      return Value(apply_test(e.name, input, eval_args(e, 1)) != e.negated);
    }
    case Expr::Kind::kUnary:
      return unary_op(e.name, eval(*e.args[0]));
    case Expr::Kind::kNot:
      return Value(!eval(*e.args[0]).truthy());
    case Expr::Kind::kBinary: {
      const Value left = eval(*e.args[0]);
      return binary_op(e.name, left, eval(*e.args[1]));
    }
    case Expr::Kind::kAnd:
    case Expr::Kind::kOr: {
      Value left = eval(*e.args[0]);
      if (left.truthy() == (e.kind == Expr::Kind::kOr)) return left;
      return eval(*e.args[1]);
    }
    case Expr::Kind::kCompare:
      return eval_compare(e);
    case Expr::Kind::kCond:
      if (eval(*e.args[1]).truthy()) return eval(*e.args[0]);
      return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if's condition was false and it has no else");
  }
  return Value();
}

}  // namespace

std::string render_template(const Template& tmpl, const Map& variables) { return Renderer(tmpl, variables).run(); }

}  // namespace deepspeed::serving::jinja
