// The search loop: ask the tuner, run the trial, record it, decide whether to go on.
#include <cmath>
#include <exception>

#include "autotuning/autotuning.h"
#include "deepspeed/error.h"

namespace deepspeed::autotuning {
namespace {

bool better(double a, double b, bool higher) { return higher ? a > b : a < b; }

// After `oom` ran out of memory: the untried candidates of the same stage and offload with a
// larger micro batch need at least as much memory (more activations, same model states), so they
// are recorded as pruned instead of run.
void skip_larger_micro_batches(const SearchSpace& space, const Candidate& oom,
                               std::vector<TrialResult>* history) {
  for (const Candidate& c : space.candidates) {
    if (c.zero_stage != oom.zero_stage || c.offload_optimizer != oom.offload_optimizer ||
        c.offload_param != oom.offload_param || c.micro_batch <= oom.micro_batch) {
      continue;
    }
    bool seen = false;
    for (const TrialResult& r : *history) seen = seen || r.candidate == c;
    if (seen) continue;
    TrialResult skipped;
    skipped.candidate = c;
    skipped.status = TrialStatus::kPruned;
    skipped.detail = "micro batch " + std::to_string(oom.micro_batch) + " of " + oom.name() +
                     " ran out of memory";
    history->push_back(skipped);
  }
}

// Runs one trial; whatever run_trial does, the result describes `c`.
TrialResult run_one(const RunTrial& run_trial, const Candidate& c) {
  TrialResult result;
  try {
    result = run_trial(c);
  } catch (const std::exception& e) {
    result = TrialResult{};
    result.status = TrialStatus::kFailed;
    result.detail = e.what();
  }
  result.candidate = c;
  if (result.status == TrialStatus::kOk && !std::isfinite(result.metric)) {
    result.status = TrialStatus::kFailed;
    result.detail = "reported a non-finite metric";
  }
  return result;
}

}  // namespace

bool higher_is_better(const std::string& metric) {
  if (metric == "throughput" || metric == "flops") return true;
  if (metric == "latency") return false;
  throw ConfigError("autotuning.metric: expected one of latency, throughput, flops, got \"" +
                    metric + "\"");
}

std::vector<TrialResult> tune(const SearchSpace& space, const config::AutotuningConfig& autotuning,
                              const RunTrial& run_trial, uint64_t seed) {
  std::unique_ptr<Tuner> tuner = make_tuner(autotuning.tuner_type, autotuning.metric, seed);
  return tune(space, autotuning, *tuner, run_trial);
}

std::vector<TrialResult> tune(const SearchSpace& space, const config::AutotuningConfig& autotuning,
                              Tuner& tuner, const RunTrial& run_trial) {
  const bool higher = higher_is_better(autotuning.metric);
  DS_CHECK_T(ConfigError, autotuning.tuner_num_trials >= 1,
             "autotuning.tuner_num_trials: must be >= 1, got ", autotuning.tuner_num_trials);
  DS_CHECK_T(ConfigError, autotuning.tuner_early_stopping >= 1,
             "autotuning.tuner_early_stopping: must be >= 1, got ",
             autotuning.tuner_early_stopping);
  DS_CHECK(static_cast<bool>(run_trial), "autotuning::tune: run_trial is empty");

  std::vector<TrialResult> history;
  int trials = 0;
  std::optional<double> best;
  int since_best = 0;  // trials since the best improved; counted once something succeeded
  while (trials < autotuning.tuner_num_trials) {
    const std::optional<size_t> pick = tuner.next(space.candidates, history);
    if (!pick) break;
    // A Tuner may be the caller's: a broken contract is their bug, reported as such.
    DS_CHECK(*pick < space.candidates.size(), "autotuning::tune: the tuner returned index ", *pick,
             " of a space of ", space.candidates.size());
    const Candidate& c = space.candidates[*pick];
    for (const TrialResult& r : history) {
      DS_CHECK(r.candidate != c, "autotuning::tune: the tuner picked ", c.name(), " again");
    }

    history.push_back(run_one(run_trial, c));
    ++trials;
    const TrialResult& result = history.back();
    if (result.status == TrialStatus::kOutOfMemory) skip_larger_micro_batches(space, c, &history);

    if (result.status == TrialStatus::kOk && (!best || better(result.metric, *best, higher))) {
      best = result.metric;
      since_best = 0;
    } else if (best) {
      if (++since_best >= autotuning.tuner_early_stopping) break;
    }
  }
  return history;
}

std::optional<TrialResult> best_trial(const std::vector<TrialResult>& results,
                                      const std::string& metric) {
  const bool higher = higher_is_better(metric);
  std::optional<TrialResult> best;
  for (const TrialResult& r : results) {
    if (r.status != TrialStatus::kOk) continue;
    if (!best || better(r.metric, best->metric, higher)) best = r;
  }
  return best;
}

}  // namespace deepspeed::autotuning
