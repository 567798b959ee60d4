// Several corpora sampled in proportion, as Megatron's --data-path "0.7 corpusA 0.3 corpusB" blends them: each
// corpus a GPTDataset asked for its share of the samples (plus Megatron's 0.5% surplus), and the blend's sample i
// taken from the corpus furthest below its share so far (megatron-core's build_blending_indices), so the same
// data path, seed and sample count give megatron-core's samples in its order.
//
//   auto train = deepspeed::data::build_gpt_dataset("0.7 data/web_text_document 0.3 data/code_text_document",
//                                                  {.sequence_length = 4096, .num_samples = 1000000});
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "deepspeed/data/gpt_dataset.h"
#include "deepspeed/data/token_dataset.h"

namespace deepspeed::data {

struct DataPath {
  std::vector<std::string> prefixes;
  std::vector<double> weights;  // normalised to sum to 1; empty when the path gives none
};

// Megatron's --data-path: "PREFIX", "PREFIX1 PREFIX2 ..." (no weights: blended by their sizes) or "W1 PREFIX1 W2
// PREFIX2 ..." (weights positive numbers, normalised). DataError naming the entry for a weight that is not a positive
// number, a weight without a prefix, or an empty path.
DataPath parse_data_path(const std::string& data_path);

class BlendedDataset : public TokenDataset {
 public:
  // `size` samples over `datasets` in proportion to `weights` (normalised). DataError when the datasets' sample
  // lengths differ or one holds fewer samples than the blend takes from it.
  BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights, int64_t size);
  int64_t size() const override { return static_cast<int64_t>(dataset_index_.size()); }
  int64_t sample_length() const override { return datasets_.front()->sample_length(); }
  void read(int64_t i, int64_t* out) const override;
  // Which dataset sample i comes from.
  int64_t dataset_of(int64_t i) const { return dataset_index_[static_cast<size_t>(i)]; }

 private:
  std::vector<std::shared_ptr<const TokenDataset>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

// The training samples of a data path, as megatron-core's BlendedMegatronDatasetBuilder makes them: one corpus, its
// GPTDataset; with weights, one GPTDataset per corpus asked for ceil(ceil(N * w) * 1.005) samples and a blend of
// sum(ceil(N * w)) samples; without, each corpus one epoch, blended by their sizes, min(N, their total) samples. N
// is options.num_samples, which a blend needs (DataError otherwise).
std::shared_ptr<const TokenDataset> build_gpt_dataset(const std::string& data_path, const GPTDatasetOptions& options);

}  // namespace deepspeed::data
