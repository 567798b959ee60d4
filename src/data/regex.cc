// Regex (regex.h) on PCRE2's 8-bit library.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "data/regex.h"

#include <pcre2.h>

#include "deepspeed/error.h"

namespace deepspeed::data {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() {
    if (code != nullptr) pcre2_code_free(code);
  }
};

namespace {

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

}  // namespace

Regex::Regex(const std::string& pattern, const std::string& where) : impl_(std::make_unique<Impl>()), where_(where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  impl_->code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                              &error, &offset, nullptr);
  DS_CHECK_T(DataError, impl_->code != nullptr, where, ": the regex does not compile at offset ", offset, ": ",
             pcre2_message(error));
  pcre2_jit_compile(impl_->code, PCRE2_JIT_COMPLETE);  // best effort: the interpreter runs without it
}

Regex::~Regex() = default;

std::vector<std::pair<size_t, size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(impl_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;
  uint32_t options = 0;  // the UTF check runs on the first call only: later offsets stay on character boundaries
  while (at <= text.size()) {
    const int rc = pcre2_match(impl_->code, subject, text.size(), at, options, match, nullptr);
    options = PCRE2_NO_UTF_CHECK;
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(match);
      throw DataError(where_ + ": " + pcre2_message(rc) + " (the text is not valid UTF-8?)");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      at = end;
    } else {  // an empty match: step over one UTF-8 character
      if (begin >= text.size()) break;
      at = begin + 1;
      while (at < text.size() && (static_cast<unsigned char>(text[at]) & 0xC0) == 0x80) ++at;
    }
  }
  pcre2_match_data_free(match);
  return out;
}

}  // namespace deepspeed::data
