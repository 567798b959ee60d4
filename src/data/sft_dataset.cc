// SftDataset (deepspeed/data/sft_dataset.h).
#include "deepspeed/data/sft_dataset.h"

#include <algorithm>

#include "data/numpy_random.h"
#include "deepspeed/error.h"

namespace deepspeed::data {

SftDataset::SftDataset(const std::string& prefix, const SftDatasetOptions& options)
    : prefix_(prefix), options_(options) {
  DS_CHECK_T(DataError, options_.sequence_length >= 1, prefix, ": sequence_length ", options_.sequence_length);
  tokens_ = std::make_unique<IndexedDataset>(prefix + "_sft_document");
  mask_ = std::make_unique<IndexedDataset>(prefix + "_sft_loss_mask_document");
  const std::string mask_name = mask_->prefix() + ".idx";
  DS_CHECK_T(DataError, mask_->num_sequences() == tokens_->num_sequences(), mask_name, ": ", mask_->num_sequences(),
             " loss masks for ", tokens_->num_sequences(), " documents (not the same ds_preprocess --sft run?)");
  std::vector<int64_t> values;
  for (int64_t d = 0; d < tokens_->num_sequences(); ++d) {
    DS_CHECK_T(DataError, mask_->sequence_length(d) == tokens_->sequence_length(d), mask_name, ": document ", d,
               " has ", tokens_->sequence_length(d), " tokens but ", mask_->sequence_length(d), " mask values");
    values.resize(static_cast<size_t>(mask_->sequence_length(d)));
    mask_->read(d, 0, -1, values.data());
    for (const int64_t v : values)
      DS_CHECK_T(DataError, v == 0 || v == 1, mask_name, ": document ", d, " has mask value ", v, " (0 or 1)");
  }
  // Documents shuffled per epoch, as many epochs as the samples asked for need.
  const int64_t docs = tokens_->num_sequences();
  const int64_t wanted = options_.num_samples < 0 ? docs : options_.num_samples;
  NumpyRandomState rng(options_.seed);
  while (static_cast<int64_t>(order_.size()) < wanted) {
    std::vector<int64_t> epoch(static_cast<size_t>(docs));
    for (int64_t d = 0; d < docs; ++d) epoch[static_cast<size_t>(d)] = d;
    rng.shuffle(epoch);
    order_.insert(order_.end(), epoch.begin(), epoch.end());
  }
  order_.resize(static_cast<size_t>(wanted));
}

void SftDataset::read(int64_t i, int64_t* out) const {
  DS_CHECK_T(DataError, i >= 0 && i < size(), prefix_, ": sample ", i, " of ", size());
  const int64_t seq = options_.sequence_length, doc = order_[static_cast<size_t>(i)];
  const int64_t n = std::min(tokens_->sequence_length(doc), seq + 1);
  std::vector<int64_t> ids(static_cast<size_t>(n)), mask(static_cast<size_t>(n));
  tokens_->read(doc, 0, n, ids.data());
  mask_->read(doc, 0, n, mask.data());
  int64_t* inputs = out;
  int64_t* targets = out + seq;
  for (int64_t t = 0; t < seq; ++t) {
    inputs[t] = t < n ? ids[static_cast<size_t>(t)] : options_.pad_id;
    // The target at t is token t + 1, counted only where the mask trains it.
    targets[t] = t + 1 < n && mask[static_cast<size_t>(t + 1)] == 1 ? ids[static_cast<size_t>(t + 1)] : kIgnoreIndex;
  }
}

}  // namespace deepspeed::data
