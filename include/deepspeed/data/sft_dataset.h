// Fine-tuning samples from ds_preprocess --sft output: one document (prompt then response) per sample, cut to
// sequence_length + 1 tokens or padded, split into inputs (the first sequence_length) and targets (the next token at
// each position), the targets -100 wherever the loss mask is 0 (the prompt) or the document has ended, as
// transformers' labels are. The loss then counts only the response's tokens.
//
//   deepspeed::data::SftDataset sft("data/chat", {.sequence_length = 1024, .num_samples = 5000});
//   // sample i: 2 * sequence_length ids, [inputs..., targets...]
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "deepspeed/data/indexed_dataset.h"
#include "deepspeed/data/token_dataset.h"

namespace deepspeed::data {

struct SftDatasetOptions {
  int64_t sequence_length = 0;
  int64_t num_samples = -1;  // -1: one epoch (every document once); more: epochs repeat, each reshuffled
  uint32_t seed = 1234;
  int64_t pad_id = 0;  // the inputs past a document's end (their targets are -100)
};

class SftDataset : public TokenDataset {
 public:
  static constexpr int64_t kIgnoreIndex = -100;
  // Opens <prefix>_sft_document and <prefix>_sft_loss_mask_document. DataError naming the mask file when the two do
  // not hold the same sequences, or a mask value is not 0 or 1; naming the prefix for a sequence length below 1.
  SftDataset(const std::string& prefix, const SftDatasetOptions& options);
  int64_t size() const override { return static_cast<int64_t>(order_.size()); }
  // Inputs then targets: 2 * sequence_length ids.
  int64_t sample_length() const override { return 2 * options_.sequence_length; }
  void read(int64_t i, int64_t* out) const override;
  // Which document sample i is.
  int64_t document_of(int64_t i) const { return order_.at(static_cast<size_t>(i)); }

 private:
  std::string prefix_;
  SftDatasetOptions options_;
  std::unique_ptr<IndexedDataset> tokens_, mask_;
  std::vector<int64_t> order_;  // the document of each sample
};

}  // namespace deepspeed::data
