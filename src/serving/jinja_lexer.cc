#include "serving/jinja_lexer.h"

#include <cstring>

#include "deepspeed/utf8.h"

namespace deepspeed::serving::jinja {

namespace {

// Python's str.isspace for ASCII (what rstrip() and the regexes' \s match in template text).
bool lex_is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }
bool lex_is_digit(char c) { return c >= '0' && c <= '9'; }
bool lex_is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool lex_is_name_char(char c) { return lex_is_name_start(c) || lex_is_digit(c); }

// Reads `count` hex digits at body[i]; false when they are not all there.
bool lex_hex(const std::string& body, size_t i, int count, uint32_t& cp) {
  cp = 0;
  for (int k = 0; k < count; ++k) {
    if (i + k >= body.size()) return false;
    const char c = body[i + k];
    const int d = lex_is_digit(c)          ? c - '0'
                  : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                  : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                           : -1;
    if (d < 0) return false;
    cp = cp * 16 + static_cast<uint32_t>(d);
  }
  return true;
}

// A string literal's body decoded as jinja2 decodes it (Python's unicode-escape).
std::string lex_unescape(const std::string& body, size_t offset) {
  static const char kSimple[] = "\\\\''\"\"a\ab\bf\fn\nr\rt\tv\v";
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    const char e = body[++i];
    const char* simple = std::strchr(kSimple, e);
    uint32_t cp = 0;
    if (e == '\n') continue;  // a backslash at a line's end joins the lines
    if (simple != nullptr && (simple - kSimple) % 2 == 0) {
      out += simple[1];
    } else if (e >= '0' && e <= '7') {
      size_t n = 0;
      while (n < 3 && i + n < body.size() && body[i + n] >= '0' && body[i + n] <= '7')
        cp = cp * 8 + (body[i + n++] - '0');
      i += n - 1;
      append_utf8(out, cp);
    } else if (e == 'x' || e == 'u' || e == 'U') {
      const int count = e == 'x' ? 2 : e == 'u' ? 4 : 8;
      if (!lex_hex(body, i + 1, count, cp))
        throw SyntaxError("truncated \\" + std::string(1, e) + " escape in a string", offset);
      append_utf8(out, cp);
      i += static_cast<size_t>(count);
    } else if (e == 'N') {
      throw SyntaxError("unsupported \\N{...} escape in a string", offset);
    } else {
      out += '\\';
      out += e;
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(const std::string& src) : src_(src) {}

  std::vector<Token> run() {
    size_t pos = 0;
    while (pos < src_.size()) pos = lex_root(pos);
    push(Token::Type::kEof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  void push(Token::Type type, std::string text, size_t offset) {
    Token t;
    t.type = type;
    t.text = std::move(text);
    t.offset = offset;
    tokens_.push_back(std::move(t));
  }

  bool at(size_t i, const char* s) const { return src_.compare(i, std::strlen(s), s) == 0; }

  size_t skip_space(size_t i) const {
    while (i < src_.size() && lex_is_space(src_[i])) ++i;
    return i;
  }

  // The text before a tag, trimmed as the tag's sign and lstrip_blocks say (jinja2's OptionalLStrip).
  void push_text(size_t begin, size_t end, char sign, bool lstrip) {
    std::string text = src_.substr(begin, end - begin);
    if (sign == '-') {
      size_t keep = text.size();
      while (keep > 0 && lex_is_space(text[keep - 1])) --keep;
      text.resize(keep);
    } else if (sign != '+' && lstrip) {
      const size_t nl = text.rfind('\n');
      const size_t line = nl == std::string::npos ? 0 : nl + 1;
      bool blank = line < text.size();
      for (size_t i = line; i < text.size() && blank; ++i) blank = lex_is_space(text[i]);
      if ((line > 0 || line_starting_) && blank) text.resize(line);
    }
    if (!text.empty()) push(Token::Type::kText, std::move(text), begin);
  }

  // After a match ending at `end`: jinja2 lets lstrip_blocks strip a tag at the very start of what follows only
  // when that match ended a line.
  size_t ended(size_t end) {
    line_starting_ = end > 0 && src_[end - 1] == '\n';
    return end;
  }

  size_t lex_root(size_t pos) {
    size_t start = pos;
    while ((start = src_.find('{', start)) != std::string::npos) {
      if (start + 1 < src_.size() && std::strchr("{%#", src_[start + 1]) != nullptr && src_[start + 1] != 0) break;
      ++start;
    }
    if (start == std::string::npos) {
      push(Token::Type::kText, src_.substr(pos), pos);
      return ended(src_.size());
    }
    const char kind = src_[start + 1];
    const char sign =
        start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+') ? src_[start + 2] : 0;
    const size_t body = start + 2 + (sign ? 1 : 0);
    size_t raw_end = 0;
    const bool raw = kind == '%' && raw_begin(body, raw_end);
    push_text(pos, start, sign, kind != '{');
    if (kind == '#') return lex_comment(start, body);
    if (raw) return lex_raw(raw_end);
    push(kind == '{' ? Token::Type::kVarBegin : Token::Type::kBlockBegin, "", start);
    return lex_tag(kind, body);
  }

  // `{% raw %}`: true with `end` after the tag.
  bool raw_begin(size_t i, size_t& end) const {
    i = skip_space(i);
    if (!at(i, "raw")) return false;
    i = skip_space(i + 3);
    if (at(i, "-%}")) {
      end = skip_space(i + 3);
      return true;
    }
    if (at(i, "%}")) {
      end = i + 2;
      return true;
    }
    return false;
  }

  size_t lex_raw(size_t body) {
    for (size_t i = src_.find("{%", body); i != std::string::npos; i = src_.find("{%", i + 1)) {
      const char sign = i + 2 < src_.size() && (src_[i + 2] == '-' || src_[i + 2] == '+') ? src_[i + 2] : 0;
      size_t j = skip_space(i + 2 + (sign ? 1 : 0));
      if (!at(j, "endraw")) continue;
      j = skip_space(j + 6);
      size_t end = 0;
      if (at(j, "+%}")) {
        end = j + 3;
      } else if (at(j, "-%}")) {
        end = skip_space(j + 3);
      } else if (at(j, "%}")) {
        end = j + 2 + (at(j + 2, "\n") ? 1 : 0);
      } else {
        continue;
      }
      ended(body);  // lstrip_blocks looks at how the {% raw %} tag's match ended
      push_text(body, i, sign, true);
      return ended(end);
    }
    throw SyntaxError("missing end of raw directive", body);
  }

  size_t lex_comment(size_t start, size_t body) {
    const size_t close = src_.find("#}", body);
    if (close == std::string::npos) throw SyntaxError("missing end of comment tag", start);
    const char sign = close > body ? src_[close - 1] : 0;
    if (sign == '-') return ended(skip_space(close + 2));
    if (sign == '+') return ended(close + 2);
    return ended(close + 2 + (at(close + 2, "\n") ? 1 : 0));
  }

  // The end of the tag at `i` when one is there (outside brackets), or 0.
  size_t tag_end(char kind, size_t i) const {
    if (kind == '{') {
      if (at(i, "-}}")) return skip_space(i + 3);
      return at(i, "}}") ? i + 2 : 0;
    }
    if (at(i, "+%}")) return i + 3;
    if (at(i, "-%}")) return skip_space(i + 3);
    if (at(i, "%}")) return i + 2 + (at(i + 2, "\n") ? 1 : 0);
    return 0;
  }

  size_t lex_tag(char kind, size_t i) {
    std::string brackets;
    while (true) {
      if (i >= src_.size()) {
        throw SyntaxError(
            kind == '{' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'", i);
      }
      if (brackets.empty()) {
        const size_t end = tag_end(kind, i);
        if (end != 0) {
          push(kind == '{' ? Token::Type::kVarEnd : Token::Type::kBlockEnd, "", i);
          return ended(end);
        }
      }
      if (lex_is_space(src_[i])) {
        ++i;
      } else if (lex_is_digit(src_[i])) {
        i = lex_number(i);
      } else if (lex_is_name_start(src_[i])) {
        size_t j = i;
        while (j < src_.size() && lex_is_name_char(src_[j])) ++j;
        push(Token::Type::kName, src_.substr(i, j - i), i);
        i = j;
      } else if (src_[i] == '\'' || src_[i] == '"') {
        i = lex_string(i);
      } else {
        i = lex_operator(i, brackets);
      }
    }
  }

  size_t lex_digits(size_t i) const {
    while (i < src_.size() &&
           (lex_is_digit(src_[i]) || (src_[i] == '_' && i + 1 < src_.size() && lex_is_digit(src_[i + 1]))))
      ++i;
    return i;
  }

  size_t lex_number(size_t i) {
    size_t j = lex_digits(i);
    bool is_float = false;
    if (j + 1 < src_.size() && src_[j] == '.' && lex_is_digit(src_[j + 1])) {
      j = lex_digits(j + 1);
      is_float = true;
    }
    if (j < src_.size() && (src_[j] == 'e' || src_[j] == 'E')) {
      size_t k = j + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && lex_is_digit(src_[k])) {
        j = lex_digits(k);
        is_float = true;
      }
    }
    std::string text;
    for (size_t k = i; k < j; ++k) {
      if (src_[k] != '_') text += src_[k];
    }
    push(is_float ? Token::Type::kFloat : Token::Type::kInt, text, i);
    try {
      if (is_float) {
        tokens_.back().float_value = std::stod(text);
      } else {
        tokens_.back().int_value = std::stoll(text);
      }
    } catch (const std::out_of_range&) {
      throw SyntaxError("number " + text + " out of range", i);
    }
    return j;
  }

  size_t lex_string(size_t i) {
    const char quote = src_[i];
    size_t j = i + 1;
    while (j < src_.size() && src_[j] != quote) j += src_[j] == '\\' ? 2 : 1;
    if (j >= src_.size()) throw SyntaxError("unterminated string", i);
    push(Token::Type::kString, lex_unescape(src_.substr(i + 1, j - i - 1), i), i);
    return j + 1;
  }

  size_t lex_operator(size_t i, std::string& brackets) {
    static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[",
                                       "]",  "(",  ")",  "{",  "}",  ">",  "<", "=", ".", ":", "|", ",", ";"};
    for (const char* op : kOps) {
      if (!at(i, op)) continue;
      const char c = op[0];
      if (op[1] == 0 && (c == '(' || c == '[' || c == '{')) brackets += c == '(' ? ')' : c == '[' ? ']' : '}';
      if (op[1] == 0 && (c == ')' || c == ']' || c == '}')) {
        if (brackets.empty()) throw SyntaxError(std::string("unexpected '") + c + "'", i);
        if (brackets.back() != c)
          throw SyntaxError(std::string("unexpected '") + c + "', expected '" + brackets.back() + "'", i);
        brackets.pop_back();
      }
      push(Token::Type::kOp, op, i);
      return i + std::strlen(op);
    }
    throw SyntaxError(std::string("unexpected char '") + src_[i] + "'", i);
  }

  const std::string& src_;
  std::vector<Token> tokens_;
  bool line_starting_ = true;
};

}  // namespace

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::vector<Token> lex_template(const std::string& source) { return Lexer(source).run(); }

std::string source_position(const std::string& source, size_t offset) {
  size_t line = 1;
  size_t line_start = 0;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  }
  return std::to_string(line) + ":" + std::to_string(offset - line_start + 1);
}

}  // namespace deepspeed::serving::jinja
