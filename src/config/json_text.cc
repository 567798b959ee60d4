// Config file text -> Json, accepting what DeepSpeed's reader accepts of JSON-shaped text.
//
// DeepSpeed reads config files with hjson (`hjson.load`), so files that are JSON apart from
// comments and commas work there. We read the same JSON-shaped subset, following hjson-py 3.1's
// decoder rule by rule (checked file by file against it in tests/config/json_text_test.cc):
//   - comments `#` and `//` to the end of the line, `/* ... */` anywhere whitespace may stand;
//   - the comma after an object member or array element is optional, and one comma may stand
//     before the closing bracket; two commas in a row are an error;
//   - a number, true, false or null must be followed (after spaces or tabs) by the end of the
//     line, a comma, a closing bracket or a comment: hjson reads `1 2` or `1x` as the start of an
//     unquoted string, never as a number;
//   - an empty file, or one holding only comments, is an empty object;
//   - duplicate keys are an error (DeepSpeed passes hjson a hook that raises on them).
// What makes a file Hjson rather than JSON (unquoted keys, unquoted or single-quoted strings,
// ''' strings, a root object without braces) is an error naming file:line:column and saying
// which Hjson syntax it is, so nothing is read in a way DeepSpeed would read differently.
// Stateless; thread-safe.
#include <charconv>
#include <cmath>
#include <cstring>
#include <set>
#include <vector>

#include "config/json_reader.h"
#include "deepspeed/error.h"
#include "deepspeed/utf8.h"

namespace deepspeed::config {
namespace {

// Deeper nesting than any config needs; the limit keeps a hostile file from exhausting the stack.
constexpr int kMaxDepth = 256;

bool is_blank(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

class TextParser {
 public:
  TextParser(const std::string& text, const std::string& source) : t_(text), source_(source) {}

  Json parse_document() {
    check_utf8();
    if (t_.compare(0, 3, "\xEF\xBB\xBF") == 0) pos_ = 3;  // a UTF-8 byte-order mark
    skip_blank();
    if (at_end()) return Json::object();  // hjson: a blank or comment-only file is {}
    if (peek() != '{' && peek() != '[') {
      fail(pos_, "expected '{' to start the config" +
                     hint("a root object without braces is Hjson, not JSON; wrap the file in { }"));
    }
    Json root = parse_value("", 0);
    skip_blank();
    if (!at_end()) fail(pos_, "unexpected " + shown(pos_) + " after the end of the JSON value");
    return root;
  }

 private:
  bool at_end() const { return pos_ >= t_.size(); }
  char peek() const { return t_[pos_]; }
  bool starts_with(size_t at, const char* s) const {
    return t_.compare(at, std::strlen(s), s) == 0;
  }

  [[noreturn]] void fail(size_t at, const std::string& message) const {
    fail_plain(at, "invalid JSON: " + message);
  }

  [[noreturn]] void fail_plain(size_t at, const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < at && i < t_.size(); ++i) {
      if (t_[i] == '\n') {
        ++line;
        column = 1;
      } else if ((static_cast<unsigned char>(t_[i]) & 0xC0) != 0x80) {  // count characters
        ++column;
      }
    }
    throw ConfigError(source_ + ":" + std::to_string(line) + ":" + std::to_string(column) + ": " +
                      message);
  }

  static std::string hint(const std::string& text) { return " (" + text + ")"; }

  // The character at `at` for messages: 'x', or "end of file".
  std::string shown(size_t at) const {
    if (at >= t_.size()) return "end of file";
    const char c = t_[at];
    if (c == '\n' || c == '\r') return "end of line";
    if (static_cast<unsigned char>(c) < 0x20) return "control character";
    return std::string("'") + c + "'";
  }

  // Python decodes the file as UTF-8 before hjson sees it: invalid bytes fail there.
  void check_utf8() const {
    size_t i = 0;
    while (i < t_.size()) {
      const auto c = static_cast<unsigned char>(t_[i]);
      if (c < 0x80) {
        ++i;
        continue;
      }
      const size_t n = (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xE ? 2 : (c >> 3) == 0x1E ? 3 : 0;
      if (n == 0 || i + n >= t_.size()) {  // a lead byte that cannot start, or a cut sequence
        fail_plain(i, "invalid UTF-8 in the file");
      }
      uint32_t cp = c & (0x7F >> (n + 1));
      for (size_t k = 1; k <= n; ++k) {
        const auto cc = static_cast<unsigned char>(t_[i + k]);
        if ((cc & 0xC0) != 0x80) fail_plain(i, "invalid UTF-8 in the file");
        cp = (cp << 6) | (cc & 0x3F);
      }
      const uint32_t min_cp = n == 1 ? 0x80 : n == 2 ? 0x800 : 0x10000;  // shorter form exists
      if (cp < min_cp || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        fail_plain(i, "invalid UTF-8 in the file");
      }
      i += n + 1;
    }
  }

  // Whitespace and comments, as hjson's getNext skips them.
  void skip_blank() {
    while (!at_end()) {
      if (is_blank(peek())) {
        ++pos_;
      } else if (peek() == '#' || starts_with(pos_, "//")) {
        while (!at_end() && peek() != '\n' && peek() != '\r') ++pos_;
      } else if (starts_with(pos_, "/*")) {
        const size_t close = t_.find("*/", pos_ + 2);
        if (close == std::string::npos) fail(pos_, "unterminated /* comment");
        pos_ = close + 2;
      } else {
        return;
      }
    }
  }

  Json parse_value(const std::string& path, int depth) {
    if (depth > kMaxDepth)
      fail(pos_, "nested deeper than " + std::to_string(kMaxDepth) + " levels");
    if (at_end()) fail(pos_, "expected a value, got end of file");
    const char c = peek();
    if (c == '{') return parse_object(path, depth + 1);
    if (c == '[') return parse_array(path, depth + 1);
    if (c == '"') return Json(parse_string());
    if (c == '\'') {
      fail(pos_, "single-quoted strings are Hjson, not JSON; use double quotes");
    }
    if (c == ',' || c == ':' || c == '}' || c == ']') fail(pos_, "unexpected " + shown(pos_));
    return parse_scalar();
  }

  Json parse_object(const std::string& path, int depth) {
    const size_t open = pos_++;
    Json object = Json::object();
    std::set<std::string> seen;
    skip_blank();
    if (!at_end() && peek() == '}') {
      ++pos_;
      return object;
    }
    while (true) {
      if (at_end()) fail(open, "this '{' is never closed");
      if (peek() != '"') {
        if (peek() == '\'') fail(pos_, "single-quoted keys are Hjson, not JSON; use double quotes");
        if (peek() == ',' || peek() == '}' || peek() == ']' || peek() == ':') {
          fail(pos_, "expected a key, got " + shown(pos_));
        }
        fail(pos_, "expected '\"' to start a key, got " + shown(pos_) +
                       hint("unquoted keys are Hjson, not JSON; quote the key"));
      }
      const size_t key_at = pos_;
      const std::string key = parse_string();
      const std::string key_path = join_path(path, key);
      if (!seen.insert(key).second) fail_plain(key_at, key_path + ": duplicate key");
      skip_blank();
      if (at_end() || peek() != ':') fail(pos_, "expected ':' after the key, got " + shown(pos_));
      ++pos_;
      skip_blank();
      object[key] = parse_value(key_path, depth);
      skip_blank();
      if (!at_end() && peek() == ',') {
        ++pos_;
        skip_blank();
      }
      if (!at_end() && peek() == '}') {
        ++pos_;
        return object;
      }
    }
  }

  Json parse_array(const std::string& path, int depth) {
    const size_t open = pos_++;
    Json array = Json::array();
    skip_blank();
    if (!at_end() && peek() == ']') {
      ++pos_;
      return array;
    }
    while (true) {
      if (at_end()) fail(open, "this '[' is never closed");
      array.push_back(parse_value(path + "[" + std::to_string(array.size()) + "]", depth));
      skip_blank();
      if (!at_end() && peek() == ',') {
        ++pos_;
        skip_blank();
      }
      if (!at_end() && peek() == ']') {
        ++pos_;
        return array;
      }
    }
  }

  // Four hex digits at `at`, or -1.
  int64_t hex4(size_t at) const {
    if (at + 4 > t_.size()) return -1;
    int64_t v = 0;
    for (size_t i = at; i < at + 4; ++i) {
      const char c = t_[i];
      const int d = is_digit(c)              ? c - '0'
                    : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                    : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                             : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  // A double-quoted string at pos_ (JSON escapes, plus hjson's \' ).
  std::string parse_string() {
    const size_t open = pos_++;
    std::string out;
    while (true) {
      if (at_end()) fail(open, "unterminated string");
      const char c = t_[pos_];
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) {
        fail(pos_, "control character in a string (write it as an escape such as \\n or \\t)");
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= t_.size()) fail(open, "unterminated string");
      const char e = t_[pos_ + 1];
      // JSON's one-letter escapes, plus hjson's \' (an apostrophe).
      static const char kEscaped[] = "\"\\/'bfnrt";
      static const char kMeaning[] = "\"\\/'\b\f\n\r\t";
      const char* known = e == '\0' ? nullptr : std::strchr(kEscaped, e);
      if (known) {
        out += kMeaning[known - kEscaped];
        pos_ += 2;
        continue;
      }
      if (e != 'u') fail(pos_, std::string("invalid escape \\") + e + " in a string");
      int64_t cp = hex4(pos_ + 2);
      if (cp < 0) fail(pos_, "invalid \\u escape: expected four hex digits");
      size_t next = pos_ + 6;
      if (cp >= 0xD800 && cp <= 0xDBFF && starts_with(next, "\\u")) {
        const int64_t low = hex4(next + 2);
        if (low >= 0xDC00 && low <= 0xDFFF) {
          cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          next += 6;
        }
      }
      if (cp >= 0xD800 && cp <= 0xDFFF) fail(pos_, "\\u escape of a lone UTF-16 surrogate");
      deepspeed::append_utf8(out, static_cast<uint32_t>(cp));
      pos_ = next;
    }
  }

  // Where hjson stops reading an unquoted value: end of line, a comma, a closing bracket or a
  // comment.
  size_t scalar_end(size_t from) const {
    size_t i = from;
    while (i < t_.size()) {
      const char c = t_[i];
      if (c == '\n' || c == '\r' || c == ',' || c == '}' || c == ']' || c == '#') break;
      if (c == '/' && (starts_with(i, "//") || starts_with(i, "/*"))) break;
      ++i;
    }
    return i;
  }

  // JSON's number grammar, the one hjson's NUMBER_RE uses.
  static bool is_json_number(const std::string& s) {
    size_t i = 0;
    if (i < s.size() && s[i] == '-') ++i;
    if (i >= s.size() || !is_digit(s[i])) return false;
    if (s[i] == '0') {
      ++i;
    } else {
      while (i < s.size() && is_digit(s[i])) ++i;
    }
    if (i < s.size() && s[i] == '.') {
      ++i;
      if (i >= s.size() || !is_digit(s[i])) return false;
      while (i < s.size() && is_digit(s[i])) ++i;
    }
    if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
      ++i;
      if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
      if (i >= s.size() || !is_digit(s[i])) return false;
      while (i < s.size() && is_digit(s[i])) ++i;
    }
    return i == s.size();
  }

  // A number, true, false or null, which must fill everything up to where hjson stops reading.
  Json parse_scalar() {
    const size_t start = pos_;
    const size_t end = scalar_end(start);
    size_t last = end;
    while (last > start && (t_[last - 1] == ' ' || t_[last - 1] == '\t')) --last;
    const std::string token = t_.substr(start, last - start);
    pos_ = end;
    if (token == "true") return Json(true);
    if (token == "false") return Json(false);
    if (token == "null") return Json(nullptr);
    if (is_json_number(token)) return number(token, start);
    // Name the first offending character: what a reader of a broken JSON file wants to see.
    size_t bad = start;
    const size_t word = std::min(token.find_first_of(" \t"), token.size());
    if (is_json_number(token.substr(0, word)) || token.substr(0, word) == "true" ||
        token.substr(0, word) == "false" || token.substr(0, word) == "null") {
      bad = start + word;
      while (bad < last && (t_[bad] == ' ' || t_[bad] == '\t')) ++bad;
      fail(bad, "unexpected " + shown(bad) + " after the value (missing comma?)");
    }
    fail(start, "invalid value '" + token.substr(0, 40) + "'" +
                    hint("unquoted strings are Hjson, not JSON; quote strings with \"..\""));
  }

  Json number(const std::string& token, size_t at) const {
    const char* first = token.data();
    const char* last = token.data() + token.size();
    const bool integral = token.find_first_of(".eE") == std::string::npos;
    if (integral) {
      // As nlohmann::json stores them: negative as int64, others as uint64, beyond both a double.
      if (token[0] == '-') {
        int64_t v = 0;
        if (std::from_chars(first, last, v).ec == std::errc()) return Json(v);
      } else {
        uint64_t v = 0;
        if (std::from_chars(first, last, v).ec == std::errc()) return Json(v);
      }
    }
    double d = 0;
    const auto result = std::from_chars(first, last, d);
    if (result.ec == std::errc::result_out_of_range) {
      // Underflow reads as zero in Python too; overflow is an error there (hjson turns the float
      // into an int and Python refuses infinity).
      const size_t e = token.find_first_of("eE");
      const bool tiny = e != std::string::npos && token[e + 1] == '-';
      if (!tiny) fail(at, "number " + token + " is out of range");
      return Json(token[0] == '-' ? -0.0 : 0.0);
    }
    if (result.ec != std::errc() || !std::isfinite(d)) fail(at, "invalid number " + token);
    return Json(d);
  }

  const std::string& t_;
  const std::string& source_;
  size_t pos_ = 0;
};

}  // namespace

Json parse_json_text(const std::string& text, const std::string& source) {
  return TextParser(text, source).parse_document();
}

}  // namespace deepspeed::config
