// String helpers for the launcher's parsers.
#include "launcher/text_util.h"

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdlib>

#include "deepspeed/error.h"

namespace deepspeed::launcher {

std::string trim(const std::string& s) {
  size_t b = 0;
  size_t e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

std::vector<std::string> split_whitespace(const std::string& s) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
    size_t j = i;
    while (j < s.size() && !std::isspace(static_cast<unsigned char>(s[j]))) ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    const size_t pos = s.find(sep, start);
    if (pos == std::string::npos) {
      out.push_back(s.substr(start));
      return out;
    }
    out.push_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

bool parse_int(const std::string& s, int* out) {
  if (s.empty()) return false;
  size_t i = (s[0] == '-' || s[0] == '+') ? 1 : 0;
  if (i == s.size()) return false;
  for (size_t k = i; k < s.size(); ++k) {
    if (!std::isdigit(static_cast<unsigned char>(s[k]))) return false;
  }
  errno = 0;
  const long v = std::strtol(s.c_str(), nullptr, 10);
  if (errno == ERANGE || v < INT_MIN || v > INT_MAX) return false;
  *out = static_cast<int>(v);
  return true;
}

bool is_valid_host_name(const std::string& host) {
  if (host.empty() || host[0] == '-') return false;
  for (char c : host) {
    if (!std::isalnum(static_cast<unsigned char>(c)) &&
        std::string(".-_:@").find(c) == std::string::npos) {
      return false;
    }
  }
  return true;
}

std::string sh_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

std::vector<std::string> split_shell_words(const std::string& s, const std::string& what) {
  std::vector<std::string> words;
  std::string word;
  bool in_word = false;
  size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (in_word) words.push_back(word);
      word.clear();
      in_word = false;
      ++i;
      continue;
    }
    in_word = true;
    if (c == '\'') {
      const size_t end = s.find('\'', i + 1);
      DS_CHECK_T(LaunchError, end != std::string::npos, what, ": unterminated ' in '", s, "'");
      word += s.substr(i + 1, end - i - 1);
      i = end + 1;
    } else if (c == '"') {
      ++i;
      while (i < s.size() && s[i] != '"') {
        if (s[i] == '\\' && i + 1 < s.size() &&
            std::string("\"\\$`").find(s[i + 1]) != std::string::npos)
          ++i;
        word += s[i++];
      }
      DS_CHECK_T(LaunchError, i < s.size(), what, ": unterminated \" in '", s, "'");
      ++i;
    } else if (c == '\\' && i + 1 < s.size()) {
      word += s[i + 1];
      i += 2;
    } else {
      word += c;
      ++i;
    }
  }
  if (in_word) words.push_back(word);
  return words;
}

}  // namespace deepspeed::launcher
