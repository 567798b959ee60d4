// A tokenizer.json's normalizer: the Unicode normal forms (NFC, NFD, NFKC, NFKD) and a Sequence of them, through
// ICU (Debian's libicu-dev), the library `tokenizers`' own normal forms agree with (both follow the Unicode
// standard's tables). Qwen2's tokenizers ask for NFC. Any other normalizer type is refused by name.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace deepspeed::data {

class UnicodeNormalizer {
 public:
  // `spec`: the tokenizer.json's "normalizer" object; `where` names it in errors (DataError).
  UnicodeNormalizer(const nlohmann::json& spec, const std::string& where);

  // `text` (UTF-8) in each normal form in turn; DataError naming `where` if it is not UTF-8.
  std::string apply(std::string_view text) const;

 private:
  enum class Form { kNfc, kNfd, kNfkc, kNfkd };
  void add(const nlohmann::json& spec);

  std::string where_;
  std::vector<Form> forms_;  // applied in order
};

}  // namespace deepspeed::data
