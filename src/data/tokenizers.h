// The tokenizer implementations behind Tokenizer::from_file (deepspeed/data/tokenizer.h), one file each.
#pragma once

#include <memory>
#include <string>

#include "deepspeed/data/tokenizer.h"

namespace deepspeed::data {

// A Hugging Face tokenizer.json (bpe_tokenizer.cc).
std::unique_ptr<Tokenizer> load_tokenizer_json(const std::string& file);
// A SentencePiece model, tokenizer.model (sentencepiece_tokenizer.cc, on Debian's libsentencepiece).
std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& file);

}  // namespace deepspeed::data
