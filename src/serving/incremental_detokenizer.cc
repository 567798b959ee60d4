// IncrementalDetokenizer (incremental_detokenizer.h).
#include "serving/incremental_detokenizer.h"

namespace deepspeed::serving {
namespace {

// U+FFFD in UTF-8: what decode writes for bytes that do not (yet) form a character.
constexpr char kReplacement[] = "\xEF\xBF\xBD";

bool ends_with_replacement(const std::string& s) {
  return s.size() >= 3 && s.compare(s.size() - 3, 3, kReplacement) == 0;
}

}  // namespace

std::string IncrementalDetokenizer::decode(size_t from, size_t to) const {
  const std::vector<int64_t> window(ids_.begin() + static_cast<std::ptrdiff_t>(from),
                                    ids_.begin() + static_cast<std::ptrdiff_t>(to));
  return tokenizer_.decode(window, /*skip_special_tokens=*/true);
}

std::string IncrementalDetokenizer::push(int64_t token) {
  ids_.push_back(token);
  const std::string prefix = decode(prefix_offset_, read_offset_);
  const std::string text = decode(prefix_offset_, ids_.size());
  if (text.size() <= prefix.size() || ends_with_replacement(text)) return "";
  prefix_offset_ = read_offset_;
  read_offset_ = ids_.size();
  return text.substr(prefix.size());
}

std::string IncrementalDetokenizer::flush() {
  if (read_offset_ == ids_.size()) return "";
  const std::string prefix = decode(prefix_offset_, read_offset_);
  const std::string text = decode(prefix_offset_, ids_.size());
  prefix_offset_ = read_offset_ = ids_.size();
  return text.size() > prefix.size() ? text.substr(prefix.size()) : "";
}

}  // namespace deepspeed::serving
