#include "serving/jinja_parser.h"

#include <set>

#include "serving/jinja_expression_parser.h"
#include "serving/jinja_lexer.h"

namespace deepspeed::serving::jinja {

namespace {

// Jinja2 tags (core and extensions) the renderer does not implement: refused as unsupported, not as unknown.
const std::set<std::string>& parser_unsupported_tags() {
  static const std::set<std::string> tags = {"block", "extends",   "include", "import",     "from",
                                             "call",  "filter",    "with",    "autoescape", "do",
                                             "trans", "pluralize", "print",   "endwith"};
  return tags;
}

// The statements between and inside tags; the expressions come from ExpressionParser.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  Body parse_root() {
    std::string end;
    Body body = parse_body({}, end);
    return body;
  }

 private:
  // Statements up to a {% tag %} named in `ends`, which is left as the current token (its name); `found` gets it.
  Body parse_body(const std::set<std::string>& ends, std::string& found) {
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == TT::kEof) {
        if (ends.empty()) return body;
        fail("unexpected end of template, expected '" + *ends.rbegin() + "'", t.offset);
      }
      if (t.type == TT::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->offset = t.offset;
        s->text = t.text;
        body.push_back(std::move(s));
        next();
      } else if (t.type == TT::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->offset = t.offset;
        s->expr = parse_tuple();
        expect(TT::kVarEnd, "'}}'");
        body.push_back(std::move(s));
      } else {
        next();  // {%
        if (cur().type == TT::kName && ends.count(cur().text) != 0) {
          found = cur().text;
          return body;
        }
        body.push_back(parse_statement());
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& t = cur();
    if (t.type != TT::kName) fail("tag name expected, got " + describe(t), t.offset);
    const std::string tag = t.text;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) fail("'" + tag + "' outside a loop", t.offset);
      auto s = std::make_unique<Stmt>();
      s->kind = tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      s->offset = next().offset;
      expect(TT::kBlockEnd, "'%}'");
      return s;
    }
    if (tag == "generation") {
      auto s = std::make_unique<Stmt>();
      s->kind = Stmt::Kind::kScope;
      s->offset = next().offset;
      expect(TT::kBlockEnd, "'%}'");
      s->body = parse_block_until("endgeneration");
      return s;
    }
    if (parser_unsupported_tags().count(tag) != 0) refuse("tag '{% " + tag + " %}'", t.offset);
    fail("unknown tag '" + tag + "'", t.offset);
  }

  // A body closed by {% end %} (nothing else may close it), with the end tag consumed.
  Body parse_block_until(const char* end) {
    std::string found;
    Body body = parse_body({end}, found);
    next();
    expect(TT::kBlockEnd, "'%}'");
    return body;
  }

  StmtPtr parse_if() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kIf;
    s->offset = next().offset;
    ExprPtr cond = parse_tuple();
    while (true) {
      expect(TT::kBlockEnd, "'%}'");
      std::string found;
      Body body = parse_body({"elif", "else", "endif"}, found);
      s->branches.emplace_back(std::move(cond), std::move(body));
      next();
      if (found == "elif") {
        cond = parse_tuple();
      } else if (found == "else") {
        expect(TT::kBlockEnd, "'%}'");
        s->branches.emplace_back(nullptr, parse_block_until("endif"));
        return s;
      } else {
        expect(TT::kBlockEnd, "'%}'");
        return s;
      }
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = is_op("(");
    if (paren) next();
    names.push_back(expect_name());
    while (is_op(",")) {
      next();
      if (cur().type != TT::kName) break;
      names.push_back(expect_name());
    }
    if (paren) expect_op(")");
    return names;
  }

  StmtPtr parse_for() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kFor;
    s->offset = next().offset;
    s->targets = parse_targets();
    if (!is_name("in")) fail("expected 'in', got " + describe(cur()), cur().offset);
    next();
    s->expr = parse_tuple(false);
    if (is_name("if")) {
      next();
      s->cond = parse_expression();
    }
    if (is_name("recursive")) refuse("recursive for loop", cur().offset);
    expect(TT::kBlockEnd, "'%}'");
    ++loop_depth_;
    std::string found;
    s->body = parse_body({"else", "endfor"}, found);
    --loop_depth_;
    next();
    expect(TT::kBlockEnd, "'%}'");
    if (found == "else") s->else_body = parse_block_until("endfor");
    return s;
  }

  StmtPtr parse_set() {
    auto s = std::make_unique<Stmt>();
    s->offset = next().offset;
    if (cur().type == TT::kName && peek().type == TT::kOp && peek().text == ".") {
      s->targets.push_back(next().text);
      next();
      s->attr = expect_name();
    } else {
      s->targets = parse_targets();
    }
    if (is_op("=")) {
      next();
      s->kind = Stmt::Kind::kSet;
      s->expr = parse_tuple();
      expect(TT::kBlockEnd, "'%}'");
      return s;
    }
    if (!s->attr.empty() || s->targets.size() != 1) fail("expected '='", cur().offset);
    if (is_op("|")) refuse("filtered block set '{% set x | filter %}'", cur().offset);
    expect(TT::kBlockEnd, "'%}'");
    s->kind = Stmt::Kind::kSetBlock;
    s->body = parse_block_until("endset");
    return s;
  }

  StmtPtr parse_macro() {
    auto s = std::make_unique<Stmt>();
    s->kind = Stmt::Kind::kMacro;
    s->offset = next().offset;
    s->name = expect_name();
    expect_op("(");
    while (!is_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (is_op(")")) break;
      s->params.push_back(expect_name());
      ExprPtr def;
      if (is_op("=")) {
        next();
        def = parse_expression();
      } else if (!s->defaults.empty() && s->defaults.back() != nullptr) {
        fail("non-default argument follows default argument", cur().offset);
      }
      s->defaults.push_back(std::move(def));
    }
    next();
    expect(TT::kBlockEnd, "'%}'");
    const int saved_depth = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_block_until("endmacro");
    loop_depth_ = saved_depth;
    return s;
  }

  int loop_depth_ = 0;
};

}  // namespace

Template parse_template(const std::string& source, const std::string& source_name) {
  Template t;
  t.source_name = source_name;
  t.source = normalize_newlines(source);
  t.body = Parser(lex_template(t.source)).parse_root();
  return t;
}

}  // namespace deepspeed::serving::jinja
