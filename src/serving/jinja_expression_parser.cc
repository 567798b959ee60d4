#include "serving/jinja_expression_parser.h"

#include <set>

#include "serving/jinja_builtins.h"

namespace deepspeed::serving::jinja {

ExprPtr make_expr(Expr::Kind kind, size_t offset) {
  auto e = std::make_unique<Expr>();
  e->kind = kind;
  e->offset = offset;
  return e;
}

void ExpressionParser::refuse(const std::string& construct, size_t offset) const {
  throw SyntaxError("unsupported " + construct + " (not implemented by deepspeed-cpp's chat template renderer)", offset,
                    true);
}

std::string ExpressionParser::describe(const Token& t) const {
  switch (t.type) {
    case TT::kEof:
      return "end of template";
    case TT::kBlockEnd:
      return "end of statement block";
    case TT::kVarEnd:
      return "end of print statement";
    case TT::kString:
      return "string";
    default:
      return "'" + t.text + "'";
  }
}

void ExpressionParser::expect_op(const char* op) {
  if (!is_op(op)) fail(std::string("expected '") + op + "', got " + describe(cur()), cur().offset);
  next();
}
void ExpressionParser::expect(TT type, const char* what) {
  if (cur().type != type) fail(std::string("expected ") + what + ", got " + describe(cur()), cur().offset);
  next();
}
std::string ExpressionParser::expect_name() {
  if (cur().type != TT::kName) fail("expected a name, got " + describe(cur()), cur().offset);
  return next().text;
}

// An expression, or several separated by commas (a tuple, kept as a list).
ExprPtr ExpressionParser::parse_tuple(bool with_condexpr) {
  const size_t offset = cur().offset;
  ExprPtr first = with_condexpr ? parse_expression() : parse_or();
  if (!is_op(",")) return first;
  auto list = make_expr(Expr::Kind::kList, offset);
  list->name = "tuple";
  list->args.push_back(std::move(first));
  while (is_op(",")) {
    next();
    if (cur().type == TT::kBlockEnd || cur().type == TT::kVarEnd || is_op("=") || is_op(")")) break;
    list->args.push_back(with_condexpr ? parse_expression() : parse_or());
  }
  return list;
}

ExprPtr ExpressionParser::parse_expression() {
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    auto cond = make_expr(Expr::Kind::kCond, next().offset);
    ExprPtr test = parse_or();
    ExprPtr otherwise;
    if (is_name("else")) {
      next();
      otherwise = parse_expression();
    }
    cond->args.push_back(std::move(expr));
    cond->args.push_back(std::move(test));
    cond->args.push_back(std::move(otherwise));
    expr = std::move(cond);
  }
  return expr;
}

ExprPtr ExpressionParser::binary(Expr::Kind kind, const std::string& op, ExprPtr left, ExprPtr right, size_t offset) {
  auto e = make_expr(kind, offset);
  e->name = op;
  e->args.push_back(std::move(left));
  e->args.push_back(std::move(right));
  return e;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const size_t offset = next().offset;
    left = binary(Expr::Kind::kOr, "or", std::move(left), parse_and(), offset);
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const size_t offset = next().offset;
    left = binary(Expr::Kind::kAnd, "and", std::move(left), parse_not(), offset);
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (is_name("not")) {
    auto e = make_expr(Expr::Kind::kNot, next().offset);
    e->args.push_back(parse_not());
    return e;
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  const size_t offset = cur().offset;
  ExprPtr first = parse_math1();
  auto cmp = make_expr(Expr::Kind::kCompare, offset);
  while (true) {
    static const std::set<std::string> kOps = {"==", "!=", "<", "<=", ">", ">="};
    if (cur().type == TT::kOp && kOps.count(cur().text) != 0) {
      cmp->ops.push_back(next().text);
    } else if (is_name("in")) {
      next();
      cmp->ops.push_back("in");
    } else if (is_name("not") && peek().type == TT::kName && peek().text == "in") {
      next();
      next();
      cmp->ops.push_back("notin");
    } else {
      break;
    }
    cmp->args.push_back(parse_math1());
  }
  if (cmp->ops.empty()) return first;
  cmp->args.insert(cmp->args.begin(), std::move(first));
  return cmp;
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_op("+") || is_op("-")) {
    const Token& op = next();
    left = binary(Expr::Kind::kBinary, op.text, std::move(left), parse_concat(), op.offset);
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_op("~")) {
    const Token& op = next();
    left = binary(Expr::Kind::kBinary, "~", std::move(left), parse_math2(), op.offset);
  }
  return left;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
    const Token& op = next();
    left = binary(Expr::Kind::kBinary, op.text, std::move(left), parse_pow(), op.offset);
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_op("**")) {
    const Token& op = next();
    left = binary(Expr::Kind::kBinary, "**", std::move(left), parse_unary(true), op.offset);
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  ExprPtr node;
  if (is_op("-") || is_op("+")) {
    const Token& op = next();
    node = make_expr(Expr::Kind::kUnary, op.offset);
    node->name = op.text;
    node->args.push_back(parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

ExprPtr parse_primary();
ExprPtr parse_postfix(ExprPtr node);
ExprPtr parse_subscript(ExprPtr node);
ExprPtr parse_filter_expr(ExprPtr node);

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = cur();
  if (t.type == TT::kName) {
    next();
    auto e = make_expr(Expr::Kind::kLiteral, t.offset);
    if (t.text == "true" || t.text == "True") {
      e->literal = Value(true);
    } else if (t.text == "false" || t.text == "False") {
      e->literal = Value(false);
    } else if (t.text == "none" || t.text == "None") {
      e->literal = Value::none();
    } else {
      e->kind = Expr::Kind::kName;
      e->name = t.text;
    }
    return e;
  }
  if (t.type == TT::kString) {
    std::string text;
    while (cur().type == TT::kString) text += next().text;  // adjacent literals join, as in Python
    auto e = make_expr(Expr::Kind::kLiteral, t.offset);
    e->literal = Value(std::move(text));
    return e;
  }
  if (t.type == TT::kInt || t.type == TT::kFloat) {
    next();
    auto e = make_expr(Expr::Kind::kLiteral, t.offset);
    e->literal = t.type == TT::kInt ? Value(t.int_value) : Value(t.float_value);
    return e;
  }
  if (is_op("(")) {
    next();
    if (is_op(")")) {
      next();
      auto empty = make_expr(Expr::Kind::kList, t.offset);
      empty->name = "tuple";
      return empty;
    }
    ExprPtr inner = parse_tuple();
    expect_op(")");
    return inner;
  }
  if (is_op("[") || is_op("{")) {
    const bool is_list = is_op("[");
    next();
    auto e = make_expr(is_list ? Expr::Kind::kList : Expr::Kind::kDict, t.offset);
    const char* close = is_list ? "]" : "}";
    while (!is_op(close)) {
      if (!e->args.empty()) expect_op(",");
      if (is_op(close)) break;
      e->args.push_back(parse_expression());
      if (!is_list) {
        expect_op(":");
        e->args.push_back(parse_expression());
      }
    }
    next();
    return e;
  }
  fail("unexpected " + describe(t), t.offset);
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_op(".")) {
      const size_t offset = next().offset;
      if (cur().type == TT::kInt) {
        auto item = make_expr(Expr::Kind::kItem, offset);
        item->args.push_back(std::move(node));
        auto key = make_expr(Expr::Kind::kLiteral, cur().offset);
        key->literal = Value(next().int_value);
        item->args.push_back(std::move(key));
        node = std::move(item);
        continue;
      }
      auto attr = make_expr(Expr::Kind::kAttr, offset);
      attr->name = expect_name();
      attr->args.push_back(std::move(node));
      node = std::move(attr);
    } else if (is_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_op("(")) {
      auto call = make_expr(Expr::Kind::kCall, cur().offset);
      if (node->kind == Expr::Kind::kAttr && !is_supported_method(node->name)) {
        refuse("method '." + node->name + "()'", node->offset);
      }
      if (node->kind == Expr::Kind::kName && is_unsupported_global(node->name)) {
        refuse("function '" + node->name + "()'", node->offset);
      }
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr node) {
  const size_t offset = next().offset;  // [
  ExprPtr parts[3];
  int part = 0;
  bool is_slice = false;
  while (!is_op("]")) {
    if (is_op(":")) {
      next();
      is_slice = true;
      if (++part > 2) fail("too many ':' in a slice", cur().offset);
      continue;
    }
    if (parts[part]) fail("expected ']', got " + describe(cur()), cur().offset);
    parts[part] = parse_expression();
    if (is_op(",")) refuse("tuple subscript", cur().offset);
  }
  next();
  auto e = make_expr(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, offset);
  e->args.push_back(std::move(node));
  if (!is_slice) {
    if (!parts[0]) fail("expected an index in '[]'", offset);
    e->args.push_back(std::move(parts[0]));
    return e;
  }
  for (auto& p : parts) e->args.push_back(std::move(p));
  return e;
}

void ExpressionParser::parse_call_args(Expr& call) {
  expect_op("(");
  while (!is_op(")")) {
    if (call.args.size() > 1) expect_op(",");
    if (is_op(")")) break;
    if (is_op("*") || is_op("**")) refuse("*args / **kwargs in a call", cur().offset);
    if (cur().type == TT::kName && peek().type == TT::kOp && peek().text == "=") {
      call.kwnames.push_back(next().text);
      next();
      call.args.push_back(parse_expression());
      continue;
    }
    if (!call.kwnames.empty()) fail("positional argument follows keyword argument", cur().offset);
    call.args.push_back(parse_expression());
  }
  next();
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_op("|")) {
      auto f = make_expr(Expr::Kind::kFilter, next().offset);
      const size_t name_offset = cur().offset;
      f->name = expect_name();
      if (!is_supported_filter(f->name)) refuse("filter '" + f->name + "'", name_offset);
      f->args.push_back(std::move(node));
      if (is_op("(")) parse_call_args(*f);
      node = std::move(f);
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_op("(")) {
      auto call = make_expr(Expr::Kind::kCall, cur().offset);
      call->args.push_back(std::move(node));
      parse_call_args(*call);
      node = std::move(call);
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
  auto t = make_expr(Expr::Kind::kTest, next().offset);
  if (is_name("not")) {
    next();
    t->negated = true;
  }
  const size_t name_offset = cur().offset;
  t->name = expect_name();
  if (!is_supported_test(t->name)) refuse("test 'is " + t->name + "'", name_offset);
  t->args.push_back(std::move(node));
  const Token& c = cur();
  const bool arg_start = c.type == TT::kName || c.type == TT::kString || c.type == TT::kInt || c.type == TT::kFloat ||
                         is_op("[") || is_op("{");
  if (is_op("(")) {
    parse_call_args(*t);
  } else if (arg_start && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) fail("you cannot chain multiple tests with is", c.offset);
    t->args.push_back(parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace deepspeed::serving::jinja
