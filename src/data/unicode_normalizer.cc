// See unicode_normalizer.h.
#include "data/unicode_normalizer.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/utf8.h>

#include <nlohmann/json.hpp>

#include "deepspeed/error.h"

namespace deepspeed::data {

UnicodeNormalizer::UnicodeNormalizer(const nlohmann::json& spec, const std::string& where) : where_(where) {
  add(spec);
}

void UnicodeNormalizer::add(const nlohmann::json& spec) {
  const std::string type = spec.is_object() ? spec.value("type", "") : spec.dump();
  if (type == "Sequence") {
    for (const auto& step : spec.at("normalizers")) add(step);
  } else if (type == "NFC") {
    forms_.push_back(Form::kNfc);
  } else if (type == "NFD") {
    forms_.push_back(Form::kNfd);
  } else if (type == "NFKC") {
    forms_.push_back(Form::kNfkc);
  } else if (type == "NFKD") {
    forms_.push_back(Form::kNfkd);
  } else {
    throw DataError(where_ + ": type \"" + type + "\" is not supported (NFC, NFD, NFKC, NFKD, Sequence)");
  }
}

std::string UnicodeNormalizer::apply(std::string_view text) const {
  // ICU would replace a byte that is not UTF-8 with U+FFFD without a word: refuse it, as the regex step does.
  const auto* bytes = reinterpret_cast<const uint8_t*>(text.data());
  const auto length = static_cast<int32_t>(text.size());
  for (int32_t i = 0; i < length;) {
    const int32_t at = i;
    UChar32 c = 0;
    U8_NEXT(bytes, i, length, c);
    DS_CHECK_T(DataError, c >= 0, where_, ": the text is not valid UTF-8 at byte ", at);
  }
  std::string out(text);
  for (const Form form : forms_) {
    UErrorCode status = U_ZERO_ERROR;
    const icu::Normalizer2* n = form == Form::kNfc    ? icu::Normalizer2::getNFCInstance(status)
                                : form == Form::kNfd  ? icu::Normalizer2::getNFDInstance(status)
                                : form == Form::kNfkc ? icu::Normalizer2::getNFKCInstance(status)
                                                      : icu::Normalizer2::getNFKDInstance(status);
    DS_CHECK_T(DataError, U_SUCCESS(status), where_, ": ICU has no normalizer: ", u_errorName(status));
    std::string next;
    icu::StringByteSink<std::string> sink(&next);
    n->normalizeUTF8(0, icu::StringPiece(out.data(), static_cast<int32_t>(out.size())), sink, nullptr, status);
    DS_CHECK_T(DataError, U_SUCCESS(status), where_, ": normalizing failed: ", u_errorName(status));
    out = std::move(next);
  }
  return out;
}

}  // namespace deepspeed::data
