// The three tuners DeepSpeed offers (autotuning.tuner_type): gridsearch, random, model_based.
#include <algorithm>
#include <random>

#include "autotuning/cost_model.h"
#include "autotuning/autotuning.h"
#include "deepspeed/error.h"

namespace deepspeed::autotuning {
namespace {

bool tried(const Candidate& c, const std::vector<TrialResult>& history) {
  for (const TrialResult& r : history) {
    if (r.candidate == c) return true;
  }
  return false;
}

std::vector<size_t> untried(const std::vector<Candidate>& space,
                            const std::vector<TrialResult>& history) {
  std::vector<size_t> out;
  for (size_t i = 0; i < space.size(); ++i) {
    if (!tried(space[i], history)) out.push_back(i);
  }
  return out;
}

class GridSearchTuner : public Tuner {
 public:
  std::optional<size_t> next(const std::vector<Candidate>& space,
                             const std::vector<TrialResult>& history) override {
    for (size_t i = 0; i < space.size(); ++i) {
      if (!tried(space[i], history)) return i;
    }
    return std::nullopt;
  }
};

// Walks a permutation of the space drawn once from `seed`. The shuffle is our own Fisher-Yates on
// mt19937_64 (whose output the standard fixes) rather than std::shuffle, whose result differs
// between standard libraries: a seed should reproduce the same search everywhere.
class RandomTuner : public Tuner {
 public:
  explicit RandomTuner(uint64_t seed) : rng_(seed) {}

  std::optional<size_t> next(const std::vector<Candidate>& space,
                             const std::vector<TrialResult>& history) override {
    if (order_.size() != space.size()) {
      order_.resize(space.size());
      for (size_t i = 0; i < order_.size(); ++i) order_[i] = i;
      for (size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng_() % i]);
    }
    for (size_t i : order_) {
      if (!tried(space[i], history)) return i;
    }
    return std::nullopt;
  }

 private:
  std::mt19937_64 rng_;
  std::vector<size_t> order_;
};

// Random picks until kModelBasedInitialTrials trials succeeded, then the untried candidate the
// cost model ranks best. Only successful trials train the model: a failure has no metric, and
// treating it as 0 (DeepSpeed's choice) would drag predictions for its neighbours rather than mark
// it infeasible.
class ModelBasedTuner : public Tuner {
 public:
  ModelBasedTuner(bool higher_is_better, uint64_t seed)
      : higher_is_better_(higher_is_better), rng_(seed) {}

  std::optional<size_t> next(const std::vector<Candidate>& space,
                             const std::vector<TrialResult>& history) override {
    const std::vector<size_t> open = untried(space, history);
    if (open.empty()) return std::nullopt;

    std::vector<Candidate> xs;
    std::vector<double> ys;
    for (const TrialResult& r : history) {
      if (r.status != TrialStatus::kOk) continue;
      xs.push_back(r.candidate);
      ys.push_back(r.metric);
    }
    if (static_cast<int>(xs.size()) < kModelBasedInitialTrials) return open[rng_() % open.size()];

    CostModel model;
    model.fit(xs, ys);
    size_t best = open.front();
    double best_prediction = model.predict(space[best]);
    for (size_t i : open) {
      const double p = model.predict(space[i]);
      if (higher_is_better_ ? p > best_prediction : p < best_prediction) {
        best = i;
        best_prediction = p;
      }
    }
    return best;
  }

 private:
  bool higher_is_better_;
  std::mt19937_64 rng_;
};

}  // namespace

Tuner::~Tuner() = default;

std::unique_ptr<Tuner> make_tuner(const std::string& type, const std::string& metric,
                                  uint64_t seed) {
  const bool higher = higher_is_better(metric);  // validates the metric
  if (type == "gridsearch") return std::make_unique<GridSearchTuner>();
  if (type == "random") return std::make_unique<RandomTuner>(seed);
  if (type == "model_based") return std::make_unique<ModelBasedTuner>(higher, seed);
  throw ConfigError(
      "autotuning.tuner_type: expected one of gridsearch, random, model_based, got \"" + type +
      "\"");
}

}  // namespace deepspeed::autotuning
