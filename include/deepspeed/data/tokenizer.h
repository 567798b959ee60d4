// Text to token ids with a model's own tokenizer, as Hugging Face `tokenizers` computes them, for preprocessing
// corpora (ds_preprocess) and fine-tuning data.
//
//   auto tok = deepspeed::data::Tokenizer::from_file("Llama-3.2-1B");          // the folder or its tokenizer.json
//   std::vector<int64_t> ids = tok->encode("Hello world", /*add_special_tokens=*/false);
//
// Built: SentencePiece models (`tokenizer.model`: Llama 2, Mistral), through Debian's libsentencepiece, the BOS first
// with add_special_tokens; and byte-level BPE `tokenizer.json` files (GPT-2, Llama 3, Qwen2 style): added and
// special tokens split out first, the normalizer (Unicode normal forms NFC, NFD, NFKC, NFKD through ICU, and Sequences
// of them: Qwen2 asks for NFC), the pre-tokenizer (ByteLevel with or without GPT-2's regex,
// Split on a regex with the Isolated or Removed behaviour, and Sequences of them; the regexes run on PCRE2 with Unicode
// classes), BPE merges by rank (ignore_merges as Llama 3 sets it), and the TemplateProcessing / ByteLevel
// post-processors. Anything else a tokenizer.json asks for (another model type or normalizer, another pre-tokenizer or
// split behaviour, byte fallback, subword prefixes) is refused by key and value with DataError naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace deepspeed::data {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  // Token ids of `text` (UTF-8; DataError for invalid UTF-8). add_special_tokens: the post-processor's tokens too
  // (a BOS), as `tokenizers`' encode(text, add_special_tokens=True).
  virtual std::vector<int64_t> encode(std::string_view text, bool add_special_tokens = false) const = 0;
  // Ids run 0 .. vocab_size() - 1 (added tokens included).
  virtual int64_t vocab_size() const = 0;
  // The id of a token string (a special token such as "<|end_of_text|>"), if the vocabulary has it.
  virtual std::optional<int64_t> token_id(const std::string& token) const = 0;

  // A tokenizer.json, a tokenizer.model, or a folder holding one (tokenizer.json first, as transformers prefers the
  // fast tokenizer). DataError naming the file for what is missing or not built.
  static std::unique_ptr<Tokenizer> from_file(const std::string& path);
};

}  // namespace deepspeed::data
