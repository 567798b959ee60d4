// Tokenizer::from_file (deepspeed/data/tokenizer.h): which implementation a path names.
#include <filesystem>

#include "data/tokenizers.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

namespace {

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::from_file(const std::string& path) {
  namespace fs = std::filesystem;
  if (fs::is_directory(path)) {  // a model folder: its tokenizer.json (the fast tokenizer) first, as transformers
    if (fs::exists(path + "/tokenizer.json")) return load_tokenizer_json(path + "/tokenizer.json");
    if (fs::exists(path + "/tokenizer.model")) return load_sentencepiece(path + "/tokenizer.model");
    throw DataError(path + ": no tokenizer.json or tokenizer.model in the folder");
  }
  DS_CHECK_T(DataError, fs::exists(path), path, ": no such file");
  if (ends_with(path, ".json")) return load_tokenizer_json(path);
  if (ends_with(path, ".model")) return load_sentencepiece(path);
  throw DataError(path + ": neither a tokenizer.json nor a SentencePiece .model");
}

}  // namespace deepspeed::data
