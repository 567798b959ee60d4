// BlendedDataset, parse_data_path and build_gpt_dataset (deepspeed/data/blended_dataset.h): megatron-core's
// build_blending_indices (helpers.cpp) and its blend arithmetic (blended_megatron_dataset_builder.py,
// _get_size_per_split_per_dataset with mid_level_dataset_surplus 0.005).
#include "deepspeed/data/blended_dataset.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "deepspeed/error.h"

namespace deepspeed::data {

DataPath parse_data_path(const std::string& data_path) {
  std::istringstream in(data_path);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  DS_CHECK_T(DataError, !words.empty(), "data_path is empty: give a corpus prefix, or weights and prefixes");
  auto number = [](const std::string& w, double* v) {
    size_t used = 0;
    try {
      *v = std::stod(w, &used);
    } catch (const std::exception&) {
      return false;
    }
    return used == w.size();
  };
  DataPath out;
  double v = 0;
  if (!number(words[0], &v)) {  // prefixes only
    for (const auto& w : words) {
      DS_CHECK_T(DataError, !number(w, &v), "data_path \"", data_path, "\": '", w,
                 "' looks like a weight, but the path starts with a prefix (a weight before every prefix, or none)");
      out.prefixes.push_back(w);
    }
    return out;
  }
  DS_CHECK_T(DataError, words.size() % 2 == 0, "data_path \"", data_path, "\": weight '", words.back(),
             "' has no corpus prefix after it");
  for (size_t i = 0; i < words.size(); i += 2) {
    double weight = 0;
    DS_CHECK_T(DataError, number(words[i], &weight) && std::isfinite(weight) && weight > 0, "data_path \"", data_path,
               "\": '", words[i], "' (before '", words[i + 1], "') is not a positive weight");
    DS_CHECK_T(DataError, !number(words[i + 1], &v), "data_path \"", data_path, "\": '", words[i + 1],
               "' follows a weight but is a number, not a corpus prefix");
    out.weights.push_back(weight);
    out.prefixes.push_back(words[i + 1]);
  }
  double sum = 0;
  for (double w : out.weights) sum += w;
  for (double& w : out.weights) w /= sum;
  return out;
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const TokenDataset>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)) {
  DS_CHECK_T(DataError, !datasets_.empty() && datasets_.size() == weights.size() && datasets_.size() < 32768,
             "BlendedDataset: ", datasets_.size(), " datasets and ", weights.size(), " weights");
  DS_CHECK_T(DataError, size > 0, "BlendedDataset: ", size, " samples");
  double sum = 0;
  for (double w : weights) sum += w;
  for (double& w : weights) w /= sum;
  for (const auto& d : datasets_)
    DS_CHECK_T(DataError, d->sample_length() == datasets_.front()->sample_length(), "BlendedDataset: samples of ",
               d->sample_length(), " and ", datasets_.front()->sample_length(), " tokens cannot be blended");
  // Each sample from the dataset furthest below its share of the samples so far (ties: the first).
  std::vector<int64_t> taken(datasets_.size(), 0);
  dataset_index_.resize(static_cast<size_t>(size));
  dataset_sample_index_.resize(static_cast<size_t>(size));
  for (int64_t i = 0; i < size; ++i) {
    const double at = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * at - static_cast<double>(taken[0]);
    for (size_t d = 1; d < datasets_.size(); ++d) {
      const double error = weights[d] * at - static_cast<double>(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index_[static_cast<size_t>(i)] = static_cast<int16_t>(best);
    dataset_sample_index_[static_cast<size_t>(i)] = taken[best]++;
  }
  for (size_t d = 0; d < datasets_.size(); ++d)
    DS_CHECK_T(DataError, taken[d] <= datasets_[d]->size(), "BlendedDataset: dataset ", d, " holds ",
               datasets_[d]->size(), " samples, but the blend takes ", taken[d], " from it");
}

void BlendedDataset::read(int64_t i, int64_t* out) const {
  DS_CHECK_T(DataError, i >= 0 && i < size(), "BlendedDataset: sample ", i, " of ", size());
  datasets_[static_cast<size_t>(dataset_index_[static_cast<size_t>(i)])]->read(
      dataset_sample_index_[static_cast<size_t>(i)], out);
}

std::shared_ptr<const TokenDataset> build_gpt_dataset(const std::string& data_path, const GPTDatasetOptions& options) {
  const DataPath path = parse_data_path(data_path);
  if (path.prefixes.size() == 1 && path.weights.empty())
    return std::make_shared<GPTDataset>(std::make_shared<IndexedDataset>(path.prefixes[0]), options);
  std::vector<std::shared_ptr<const TokenDataset>> parts;
  std::vector<double> weights = path.weights;
  int64_t size = 0;
  DS_CHECK_T(DataError, options.num_samples > 0, "data_path \"", data_path, "\" blends ", path.prefixes.size(),
             " corpora: the number of samples must be given");
  if (!weights.empty()) {
    for (size_t k = 0; k < path.prefixes.size(); ++k) {
      const double share = std::ceil(static_cast<double>(options.num_samples) * weights[k]);
      GPTDatasetOptions part = options;
      part.num_samples = static_cast<int64_t>(std::ceil(share * (1 + 0.005)));  // Megatron's surplus: never dry
      parts.push_back(std::make_shared<GPTDataset>(std::make_shared<IndexedDataset>(path.prefixes[k]), part));
      size += static_cast<int64_t>(share);
    }
  } else {
    for (const auto& prefix : path.prefixes) {
      GPTDatasetOptions part = options;
      part.num_samples = -1;  // one epoch each, blended by size
      parts.push_back(std::make_shared<GPTDataset>(std::make_shared<IndexedDataset>(prefix), part));
      weights.push_back(static_cast<double>(parts.back()->size()));
      size += parts.back()->size();
    }
    size = std::min(size, options.num_samples);
  }
  return std::make_shared<BlendedDataset>(std::move(parts), std::move(weights), size);
}

}  // namespace deepspeed::data
