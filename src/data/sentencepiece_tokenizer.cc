// SentencePiece models (tokenizer.model: Llama 2, Mistral, ...) through Debian's libsentencepiece: the library's own
// Encode, so the ids are SentencePiece's; add_special_tokens puts the model's BOS first, as transformers' Llama and
// Mistral tokenizers do; decode is the library's Decode, which renders control pieces (BOS, EOS) as nothing.
#include <sentencepiece_processor.h>

#include "data/tokenizers.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

namespace {

class SentencePieceTokenizer : public Tokenizer {
 public:
  explicit SentencePieceTokenizer(const std::string& file) : file_(file) {
    const auto status = sp_.Load(file);
    DS_CHECK_T(DataError, status.ok(), file, ": not a SentencePiece model (", status.ToString(), ")");
  }

  std::vector<int64_t> encode(std::string_view text, bool add_special_tokens) const override {
    std::vector<int> ids;
    const auto status = sp_.Encode(text, &ids);
    DS_CHECK_T(DataError, status.ok(), file_, ": cannot encode (", status.ToString(), ")");
    std::vector<int64_t> out;
    out.reserve(ids.size() + 1);
    if (add_special_tokens && sp_.bos_id() >= 0) out.push_back(sp_.bos_id());
    out.insert(out.end(), ids.begin(), ids.end());
    return out;
  }

  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const override {
    std::vector<int> kept;
    kept.reserve(ids.size());
    for (const int64_t id : ids) {
      // Checked here so that the message names the id and the vocabulary size.
      DS_CHECK_T(DataError, id >= 0 && id < vocab_size(), file_, ": cannot decode token id ", id,
                 ", the vocabulary size is ", vocab_size());
      if (skip_special_tokens && sp_.IsControl(static_cast<int>(id))) continue;
      kept.push_back(static_cast<int>(id));
    }
    std::string text;
    const auto status = sp_.Decode(kept, &text);
    DS_CHECK_T(DataError, status.ok(), file_, ": cannot decode (", status.ToString(), ")");
    return text;
  }

  int64_t vocab_size() const override { return sp_.GetPieceSize(); }

  std::optional<int64_t> token_id(const std::string& token) const override {
    const int id = sp_.PieceToId(token);
    // PieceToId answers unk_id for a piece it does not know.
    if (id == sp_.unk_id() && sp_.IdToPiece(id) != token) return std::nullopt;
    return id;
  }

 private:
  std::string file_;
  sentencepiece::SentencePieceProcessor sp_;
};

}  // namespace

std::unique_ptr<Tokenizer> load_sentencepiece(const std::string& file) {
  return std::make_unique<SentencePieceTokenizer>(file);
}

}  // namespace deepspeed::data
