// Text to token ids and back with a model's own tokenizer, as Hugging Face `tokenizers` computes them, for
// preprocessing corpora (ds_preprocess), fine-tuning data and showing generated text (ds_generate).
//
//   auto tok = deepspeed::data::Tokenizer::from_file("Llama-3.2-1B");          // the folder or its tokenizer.json
//   std::vector<int64_t> ids = tok->encode("Hello world", /*add_special_tokens=*/false);
//   std::string text = tok->decode(ids, /*skip_special_tokens=*/true);        // "Hello world"
//
// Built: SentencePiece models (`tokenizer.model`: Llama 2, Mistral), through Debian's libsentencepiece, the BOS first
// with add_special_tokens; and byte-level BPE `tokenizer.json` files (GPT-2, Llama 3, Qwen2 style): added and
// special tokens split out first, the normalizer (Unicode normal forms NFC, NFD, NFKC, NFKD through ICU, and Sequences
// of them: Qwen2 asks for NFC), the pre-tokenizer (ByteLevel with or without GPT-2's regex,
// Split on a regex with the Isolated or Removed behaviour, and Sequences of them; the regexes run on PCRE2 with Unicode
// classes), BPE merges by rank (ignore_merges as Llama 3 sets it), and the TemplateProcessing / ByteLevel
// post-processors. Anything else a tokenizer.json asks for (another model type or normalizer, another pre-tokenizer or
// split behaviour, byte fallback, subword prefixes) is refused by key and value with DataError naming the file.
// Decoding follows the tokenizer.json's decoder: ByteLevel (alone or in a Sequence) or none; any other decoder leaves
// encode working and makes decode throw DataError. SentencePiece decodes through the library's own Decode.
//
// Thread safety: a loaded Tokenizer is immutable to its callers; encode and decode may run on many threads at once.
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
  // The text of `ids`, as `tokenizers`' decode(ids, skip_special_tokens=...): each id's token (added tokens as their
  // content) through the decoder; bytes that are not UTF-8 (a character cut by the end of `ids`) come out as U+FFFD,
  // one per ill-formed subpart as Rust's String::from_utf8_lossy. skip_special_tokens drops the special added tokens
  // (SentencePiece: the control pieces such as BOS and EOS; its Decode renders them as nothing either way, where
  // transformers' Llama tokenizers write "<s>" unless skipped). DataError naming the id and vocab_size() for an id
  // outside 0 .. vocab_size() - 1 (where `tokenizers` drops it silently).
  virtual std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const = 0;
  // Ids run 0 .. vocab_size() - 1 (added tokens included).
  virtual int64_t vocab_size() const = 0;
  // The id of a token string (a special token such as "<|end_of_text|>"), if the vocabulary has it.
  virtual std::optional<int64_t> token_id(const std::string& token) const = 0;

  // A tokenizer.json, a tokenizer.model, or a folder holding one (tokenizer.json first, as transformers prefers the
  // fast tokenizer). DataError naming the file for what is missing or not built.
  static std::unique_ptr<Tokenizer> from_file(const std::string& path);
};

}  // namespace deepspeed::data
