// GPT-style training samples from a tokenized corpus, as Megatron's GPTDataset makes them: the corpus's sequences
// (documents) repeated for as many epochs as the samples asked for need, shuffled per epoch, concatenated, and cut
// into windows of sequence_length + 1 tokens (a window's last token is the next window's first: inputs and
// next-token targets), then the windows shuffled. The same seed gives megatron-core's samples in megatron-core's
// order (its NumPy RandomState is reproduced draw for draw), so a run may move between the two.
//
//   auto corpus = std::make_shared<deepspeed::data::IndexedDataset>("data/corpus_text_document");
//   deepspeed::data::GPTDataset train(corpus, {.sequence_length = 2048, .num_samples = 1000000, .seed = 1234});
//   at::Tensor tokens = train.get(i);   // int64 [2049]
//
// The three indices (document order, sample boundaries, sample order) are built once and cached in one file beside
// the corpus (or in cache_dir), named after everything that determines them; a later run with the same corpus and
// options maps it instead of building again, other options get another file. The file is written atomically, so a
// killed build leaves only a temporary file, and a cache file that does not match its own header is rebuilt.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/data/indexed_dataset.h"
#include "deepspeed/data/token_dataset.h"

namespace deepspeed::checkpoint {
class MappedFile;
}

namespace deepspeed::data {

struct GPTDatasetOptions {
  int64_t sequence_length = 0;  // tokens per sample's input; each sample holds one more (the last target)
  int64_t num_samples = -1;     // samples wanted (more epochs when one is not enough); -1: one epoch's worth
  uint32_t seed = 1234;         // Megatron's --seed (its default)
  // The corpus sequences [first_sequence, end_sequence) this dataset draws from (a train/valid/test split; Megatron's
  // split of "969,30,1" hands each dataset such a range). end_sequence -1: to the end.
  int64_t first_sequence = 0;
  int64_t end_sequence = -1;
  // Where the cached indices go; "": a "cache" folder beside the corpus's files.
  std::string cache_dir;
};

class GPTDataset : public TokenDataset {
 public:
  // Builds or loads the indices. DataError naming the corpus for options it cannot serve (a sequence length below 2,
  // an empty or out-of-range split, a corpus too small for one sample).
  GPTDataset(std::shared_ptr<const IndexedDataset> corpus, const GPTDatasetOptions& options);
  ~GPTDataset() override;
  GPTDataset(GPTDataset&&) noexcept;
  GPTDataset& operator=(GPTDataset&&) noexcept;

  // Samples available: at least options.num_samples (a few more when the last epoch holds more whole windows).
  int64_t size() const override { return num_samples_; }
  int64_t sample_length() const override { return options_.sequence_length + 1; }
  int64_t num_epochs() const { return num_epochs_; }
  int64_t sequence_length() const { return options_.sequence_length; }
  // The cache file the indices live in, and whether this construction found it (true) or built it.
  const std::string& cache_path() const { return cache_path_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }

  // Sample `i` (0 <= i < size(), after the shuffle): sequence_length + 1 token ids into `out`.
  void read(int64_t i, int64_t* out) const override;
  at::Tensor get(int64_t i) const;

 private:
  void build(const std::string& path, int64_t tokens_per_epoch) const;
  bool load(const std::string& path);

  std::shared_ptr<const IndexedDataset> corpus_;
  GPTDatasetOptions options_;
  int64_t num_epochs_ = 0;
  int64_t num_samples_ = 0;
  std::string cache_path_;
  bool loaded_from_cache_ = false;
  std::shared_ptr<const checkpoint::MappedFile> cache_;
  const int32_t* document_index_ = nullptr;  // sequences in epoch-shuffled order
  const int64_t* sample_index_ = nullptr;    // [size() + 1][2]: (position in document_index_, offset) per boundary
  const int64_t* shuffle_index_ = nullptr;   // [size()]: which window sample i is
};

}  // namespace deepspeed::data
