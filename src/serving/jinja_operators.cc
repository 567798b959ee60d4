#include "serving/jinja_operators.h"

#include <cmath>

namespace deepspeed::serving::jinja {

namespace {

bool operators_is_int(const Value& v) { return v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool; }

[[noreturn]] void operators_unsupported(const std::string& op, const Value& left, const Value& right) {
  if (op == "+" && left.is_string()) {
    throw RenderError("can only concatenate str (not \"" + right.type_name() + "\") to str");
  }
  if (op == "+" && left.is_list()) {
    throw RenderError("can only concatenate list (not \"" + right.type_name() + "\") to list");
  }
  throw RenderError("unsupported operand type(s) for " + op + ": '" + left.type_name() + "' and '" + right.type_name() +
                    "'");
}

Value operators_repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value(out);
  }
  List out;
  for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return Value::list(std::move(out));
}

int64_t operators_int_pow(int64_t base, int64_t exp) {
  int64_t result = 1;
  for (int64_t i = 0; i < exp; ++i) result *= base;
  return result;
}

// + - * / // % ** on two numbers, with Python's int/float rules (// and % floor).
Value operators_arith(const std::string& op, const Value& l, const Value& r) {
  const bool ints = operators_is_int(l) && operators_is_int(r);
  if (op == "/" || op == "//" || op == "%") {
    if (r.as_float() == 0)
      throw RenderError(ints && op != "/" ? "integer division or modulo by zero" : "division by zero");
  }
  if (ints && op != "/" && !(op == "**" && r.as_int() < 0)) {
    const int64_t a = l.as_int();
    const int64_t b = r.as_int();
    if (op == "+") return Value(a + b);
    if (op == "-") return Value(a - b);
    if (op == "*") return Value(a * b);
    if (op == "**") return Value(operators_int_pow(a, b));
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
    return op == "//" ? Value(q) : Value(a - q * b);
  }
  const double a = l.as_float();
  const double b = r.as_float();
  if (op == "+") return Value(a + b);
  if (op == "-") return Value(a - b);
  if (op == "*") return Value(a * b);
  if (op == "/") return Value(a / b);
  if (op == "**") return Value(std::pow(a, b));
  const double q = std::floor(a / b);
  if (op == "//") return Value(q);
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return Value(m);
}

// Python's < on numbers, strings (code point order, which UTF-8 byte order keeps) and lists.
bool operators_less(const Value& l, const Value& r, const std::string& op) {
  if (l.is_number() && r.is_number()) {
    if (operators_is_int(l) && operators_is_int(r)) return l.as_int() < r.as_int();
    return l.as_float() < r.as_float();
  }
  if (l.is_string() && r.is_string()) return l.as_string() < r.as_string();
  if (l.is_list() && r.is_list()) {
    const List& a = l.as_list();
    const List& b = r.as_list();
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      if (!values_equal(a[i], b[i])) return operators_less(a[i], b[i], op);
    }
    return a.size() < b.size();
  }
  throw RenderError("'" + op + "' not supported between instances of '" + l.type_name() + "' and '" + r.type_name() +
                    "'");
}

bool operators_contains(const Value& item, const Value& container) {
  switch (container.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!item.is_string()) {
        throw RenderError("'in <string>' requires string as left operand, not " + item.defined_or_throw().type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& v : container.as_list()) {
        if (values_equal(v, item)) return true;
      }
      return false;
    case Value::Kind::kMap:
      return item.is_string() && container.as_map().find(item.as_string()) != nullptr;
    default:
      throw RenderError("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace

Value binary_op(const std::string& op, const Value& left, const Value& right) {
  if (op == "~") return Value(value_str(left) + value_str(right));
  left.defined_or_throw();
  right.defined_or_throw();
  if (left.is_number() && right.is_number()) return operators_arith(op, left, right);
  if (op == "+" && left.is_string() && right.is_string()) return Value(left.as_string() + right.as_string());
  if (op == "+" && left.is_list() && right.is_list()) {
    List out = left.as_list();
    out.insert(out.end(), right.as_list().begin(), right.as_list().end());
    return Value::list(std::move(out));
  }
  if (op == "*" && (left.is_string() || left.is_list()) && operators_is_int(right)) {
    return operators_repeat(left, right.as_int());
  }
  if (op == "*" && operators_is_int(left) && (right.is_string() || right.is_list())) {
    return operators_repeat(right, left.as_int());
  }
  if (op == "%" && left.is_string()) throw UnsupportedError("printf-style string formatting ('...' % value)");
  operators_unsupported(op, left, right);
}

Value unary_op(const std::string& op, const Value& operand) {
  operand.defined_or_throw();
  if (!operand.is_number()) {
    throw RenderError("bad operand type for unary " + op + ": '" + operand.type_name() + "'");
  }
  if (operand.kind() == Value::Kind::kFloat) return Value(op == "-" ? -operand.as_float() : operand.as_float());
  return Value(op == "-" ? -operand.as_int() : operand.as_int());
}

bool compare_values(const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return values_equal(left, right);
  if (op == "!=") return !values_equal(left, right);
  if (op == "in") return operators_contains(left, right);
  if (op == "notin") return !operators_contains(left, right);
  left.defined_or_throw();
  right.defined_or_throw();
  if (op == "<") return operators_less(left, right, op);
  if (op == ">") return operators_less(right, left, op);
  if (op == "<=") return !operators_less(right, left, op);
  return !operators_less(left, right, op);  // >=
}

}  // namespace deepspeed::serving::jinja
