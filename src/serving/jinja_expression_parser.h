// Jinja2 expressions from a template's tokens, with jinja2's grammar and precedence (or, and, not, comparisons,
// + -, ~, * / // %, **, unary minus, then filters, tests, calls, attributes and subscripts binding tightest). The
// statement parser (jinja_parser.cc) derives from it for the token cursor and the expressions inside tags.
// Filters, tests, methods and globals the renderer lacks are refused here by name (SyntaxError, unsupported).
//
// One parser per template; not shared between threads.
#pragma once

#include <string>
#include <vector>

#include "serving/jinja_ast.h"
#include "serving/jinja_lexer.h"

namespace deepspeed::serving::jinja {

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  using TT = Token::Type;

  const Token& cur() const { return tokens_[pos_]; }
  const Token& peek(size_t n = 1) const { return tokens_[std::min(pos_ + n, tokens_.size() - 1)]; }
  const Token& next() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }
  bool is_op(const char* op) const { return cur().type == TT::kOp && cur().text == op; }
  bool is_name(const char* name) const { return cur().type == TT::kName && cur().text == name; }
  [[noreturn]] void fail(const std::string& message, size_t offset) const { throw SyntaxError(message, offset); }
  [[noreturn]] void refuse(const std::string& construct, size_t offset) const;
  std::string describe(const Token& t) const;
  void expect_op(const char* op);
  void expect(TT type, const char* what);
  std::string expect_name();
  // An expression, or several separated by commas (a tuple, kept as a list).
  ExprPtr parse_tuple(bool with_condexpr = true);
  ExprPtr parse_expression();
  ExprPtr binary(Expr::Kind kind, const std::string& op, ExprPtr left, ExprPtr right, size_t offset);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);

 private:
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_test(ExprPtr node);
  void parse_call_args(Expr& call);

  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

ExprPtr make_expr(Expr::Kind kind, size_t offset);

}  // namespace deepspeed::serving::jinja
