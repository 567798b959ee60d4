// Splits a chat template into text and tag tokens as jinja2's lexer does with transformers' settings
// (trim_blocks, lstrip_blocks, keep_trailing_newline off): the whitespace control signs (- and +) and the
// two trimming options decide here which bytes of the text between tags survive, so the renderer prints text
// tokens as they are. Comments vanish here; {% raw %} bodies become text.
//
// Pure functions; no state.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace deepspeed::serving::jinja {

// A template that is not Jinja2 (an unclosed tag, a stray bracket, an unknown token), or, `unsupported`, Jinja2
// the renderer does not implement (an include, a filter it lacks): `offset` into the normalized source says where.
class SyntaxError : public std::runtime_error {
 public:
  SyntaxError(const std::string& message, size_t offset, bool unsupported = false)
      : std::runtime_error(message), offset(offset), unsupported(unsupported) {}
  size_t offset;
  bool unsupported;
};

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type = Type::kEof;
  std::string text;  // text data, a name, a string literal's decoded value, an operator
  size_t offset = 0;
  int64_t int_value = 0;
  double float_value = 0;
};

// jinja2's newline handling: "\r\n" and "\r" become "\n", and one trailing newline is dropped.
std::string normalize_newlines(const std::string& source);

// The tokens of a normalized source, ending with kEof. Throws SyntaxError.
std::vector<Token> lex_template(const std::string& source);

// "line:column" (both from 1) of `offset` in `source`.
std::string source_position(const std::string& source, size_t offset);

}  // namespace deepspeed::serving::jinja
