// The model_based tuner's cost model: a least-squares fit of the metric on a few features of a
// candidate. Small on purpose: a handful of trials cannot support more than a linear model, and
// DeepSpeed's XGBoost model needs a dependency we do not want for the same job.
//
// Thread-safety: a CostModel is a value; fit() and predict() touch only it.
#pragma once

#include <array>
#include <vector>

#include "autotuning/autotuning.h"

namespace deepspeed::autotuning {

// Features of a candidate: 1 (intercept), ZeRO stage, log2(micro_batch), optimizer offloaded (0/1),
// parameters offloaded (0/1). Gradient accumulation is left out: it is 1, or fixed by the micro
// batch when train_batch_size is (then log2(gas) = const - log2(mbs) would only repeat a column).
inline constexpr int kCostFeatures = 5;
std::array<double, kCostFeatures> cost_features(const Candidate& candidate);

class CostModel {
 public:
  // Fits weights minimising sum (w . x_i - y_i)^2 + ridge * |w without the intercept|^2. The small
  // ridge keeps the system solvable when the trials so far do not vary a feature (then its weight
  // is ~0, so it does not sway predictions). `ys` must be as long as `candidates` and non-empty.
  void fit(const std::vector<Candidate>& candidates, const std::vector<double>& ys);
  double predict(const Candidate& candidate) const;
  const std::array<double, kCostFeatures>& weights() const { return weights_; }

 private:
  std::array<double, kCostFeatures> weights_{};
};

}  // namespace deepspeed::autotuning
