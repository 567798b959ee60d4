// A PCRE2 regex compiled for UTF-8 text with Unicode character classes (\p{L}, \s, ... as `tokenizers`' Oniguruma
// sees them), for the tokenizer's pre-tokenizers.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace deepspeed::data {

class Regex {
 public:
  // DataError naming `where` and PCRE2's message when the pattern does not compile.
  Regex(const std::string& pattern, const std::string& where);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // The [begin, end) byte ranges of the successive non-overlapping matches in `text` (an empty match moves on by one
  // character). DataError for text that is not valid UTF-8.
  std::vector<std::pair<size_t, size_t>> find_all(std::string_view text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string where_;
};

}  // namespace deepspeed::data
