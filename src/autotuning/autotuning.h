// The autotuner's search logic: which configs to try, in what order, when to stop, which one won,
// and the ds_config each trial runs with. DeepSpeed's `deepspeed --autotuning tune|run` explores
// ZeRO stages, micro-batch sizes and offload; each candidate runs as a short real training run that
// reports one metric. Launching those runs is the caller's job (the trial runner passes a
// `run_trial` callback to tune()); nothing here starts a process or touches LibTorch.
//
// The flow:
//   inputs.stages = zero_stages_to_tune(user_config);       // the user's stage, if fixed
//   SearchSpace space = build_search_space(inputs);         // enumerate, prune by model states
//   auto history = tune(space, inputs.autotuning, [&](const Candidate& c) {
//     json cfg = trial_config(user_config, c, world, metric_path);   // run it, read the metric
//     ...
//   });
//   auto best = best_trial(history, metric);                 // -> optimal_config(...)
//   print(results_table(space.pruned + history, metric));
//
// Search space (build_search_space):
//   * ZeRO stages: inputs.stages (all four unless the user's config fixes zero_optimization.stage,
//     see zero_stages_to_tune()).
//   * Offload: the user's own when the config offloads (SearchInputs::user_offload; then only at
//     the stages that allow it, and the user's offload sections are kept as written). Otherwise
//     with autotuning.fast (the default) none, and without it stages 1-3 also try optimizer
//     offload to CPU, and stage 3 optimizer and parameter offload to CPU. NVMe is never tried
//     unasked: it needs a path from the user.
//   * Micro-batch sizes: see tuning_micro_batch_sizes(). Gradient accumulation is 1, or
//     train_batch_size / (micro_batch * world_size) when the user fixes train_batch_size.
//   * Order (what gridsearch walks): stages ascending, then offload (none, optimizer, both), then micro
//     batch ascending. Cheaper communication first, and within a stage and
//     offload choice the small micro batches run first, so one that runs out of memory lets tune()
//     skip the larger ones (see tune()).
//   * Pruning: a candidate whose model states (zero::estimate_model_states_mem_needs for its
//     stage, precision and offload) exceed memory_per_rank_bytes goes to SearchSpace::pruned with
//     TrialStatus::kPruned instead of running. Activations are NOT estimated (they depend on the
//     model's code, not only its size): a candidate that passes may still run out of memory, which
//     the trial reports as kOutOfMemory.
//
// Errors: bad inputs throw deepspeed::ConfigError with one line starting with the config key
// ("autotuning.tuner_type: expected one of ..."); a bad argument that is not a config key throws
// deepspeed::Error. Thread-safety: the free functions are pure; a Tuner is used by one thread.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/config/autotuning_config.h"
#include "deepspeed/zero/memory_estimator.h"

namespace deepspeed::autotuning {

// One configuration to try.
struct Candidate {
  int zero_stage = 0;
  int64_t micro_batch = 1;  // train_micro_batch_size_per_gpu
  int64_t gradient_accumulation = 1;
  zero::OffloadTarget offload_optimizer = zero::OffloadTarget::kNone;  // stages 1-3
  zero::OffloadTarget offload_param = zero::OffloadTarget::kNone;      // stage 3

  // Stable and filesystem-safe, used as the experiment's directory name:
  // "z2_mbs4_gas1", "z3_mbs8_gas2_offopt-cpu_offparam-cpu".
  std::string name() const;
  bool operator==(const Candidate& o) const;
  bool operator!=(const Candidate& o) const { return !(*this == o); }
};

enum class TrialStatus {
  kOk,           // ran and reported `metric`
  kFailed,       // the run failed (non-zero exit, no metric, run_trial threw)
  kOutOfMemory,  // the run ran out of memory
  kTimeout,      // the run exceeded its time limit
  kPruned,       // never ran: predicted not to fit, or a smaller micro batch already ran out
};

// "ok", "failed", "out_of_memory", "timeout", "pruned".
const char* trial_status_name(TrialStatus status);

struct TrialResult {
  Candidate candidate;
  TrialStatus status = TrialStatus::kFailed;
  double metric = 0;   // meaningful only for kOk; unit as the metric's (samples/s, s/step, flops)
  std::string detail;  // why it did not succeed: "exit code 1", "pruned: model states need ..."
};

struct SearchInputs {
  config::AutotuningConfig autotuning;
  int world_size = 1;  // data-parallel ranks of a trial (the caller divides out autotuning.mp_size)
  int64_t num_params = 0;  // parameters one data-parallel rank trains (model_info.num_params)
  zero::Precision precision = zero::Precision::kFp32;
  // Bytes one rank may use for model states; candidates estimated above it are pruned. <= 0: no
  // pruning (the memory is unknown).
  int64_t memory_per_rank_bytes = 0;
  // true on a CPU-only run, where "device" and host memory are the same RAM: the estimate is
  // MemoryEstimate::host_and_device() (offload then saves nothing). false on an accelerator: only
  // the device-resident MemoryEstimate::total() counts against memory_per_rank_bytes.
  bool host_is_device = true;
  // Passed to the estimator as-is (see memory_estimator.h): stage 2 buckets, stage 3 gathered
  // layer. 0 leaves them out.
  int64_t reduce_bucket_size = 0;
  int64_t largest_layer_params = 0;
  // The user's train_batch_size when fixed: micro_batch * gradient_accumulation * world_size must
  // equal it. It overrides autotuning.min/max_train_batch_size.
  std::optional<int64_t> train_batch_size;
  std::vector<int> stages = {0, 1, 2, 3};
  // The offload the user's config sets (user_offload()), tuned as is; nullopt: the tuner chooses.
  std::optional<std::pair<zero::OffloadTarget, zero::OffloadTarget>> offload;
};

struct SearchSpace {
  std::vector<Candidate> candidates;  // in gridsearch order (see the top of this file)
  std::vector<TrialResult> pruned;    // kPruned, with the estimate and the limit in `detail`
};

// The ZeRO stages to tune: the user's zero_optimization.stage when it is an integer 0-3 (they chose
// it; DeepSpeed's autotuner likewise tunes only a stage the user fixed), otherwise 0, 1, 2 and 3.
std::vector<int> zero_stages_to_tune(const nlohmann::ordered_json& user_config);

// The (optimizer, parameter) offload targets the user's zero_optimization sets (device cpu/nvme,
// or the deprecated cpu_offload / cpu_offload_param flags); nullopt when it offloads nothing.
std::optional<std::pair<zero::OffloadTarget, zero::OffloadTarget>> user_offload(
    const nlohmann::ordered_json& user_config);

// The micro-batch sizes to try, ascending:
//   * bounds: lo = min_train_micro_batch_size_per_gpu, hi = max_train_micro_batch_size_per_gpu;
//     without a fixed train_batch_size also lo >= ceil(min_train_batch_size / world_size) and
//     hi <= max_train_batch_size / world_size (if set); with one, hi <= train_batch_size /
//     world_size and only sizes dividing train_batch_size / world_size are kept;
//   * values: lo, hi and the powers of two between them;
//   * at most num_tuning_micro_batch_sizes of them, always the smallest and the largest and the
//     rest evenly spread between (see search_space.cc for why not simply the largest).
// Throws ConfigError naming the keys when no size is left (e.g. min above max, or nothing divides
// a fixed train_batch_size).
std::vector<int64_t> tuning_micro_batch_sizes(const SearchInputs& inputs);

// Enumerates and prunes the candidates (rules at the top of this file). Throws ConfigError for
// invalid inputs: num_params < 1 (autotuning.model_info.num_params), bad micro-batch bounds,
// metric not latency/throughput/flops, a stage outside 0-3.
SearchSpace build_search_space(const SearchInputs& inputs);

// throughput and flops: higher is better; latency: lower is better. Other names throw ConfigError
// naming autotuning.metric.
bool higher_is_better(const std::string& metric);

// Picks which candidate to run next. Contract: next() returns the index in `space` of a candidate
// that is not in `history` (whatever its status there), or std::nullopt when it has none left to
// offer. `history` holds every result so far, in order, including kPruned ones tune() skipped.
class Tuner {
 public:
  virtual ~Tuner();
  virtual std::optional<size_t> next(const std::vector<Candidate>& space,
                                     const std::vector<TrialResult>& history) = 0;
};

// "gridsearch": the space in order. "random": a shuffle of the space, fixed by `seed`.
// "model_based": a few random picks (kModelBasedInitialTrials successful ones), then the untried
// candidate with the best metric predicted by a least-squares fit of the successful trials on
// (1, stage, log2 micro_batch, optimizer offloaded, parameters offloaded); ties go to the earlier
// candidate. Other types throw ConfigError naming autotuning.tuner_type; a bad metric throws as in
// higher_is_better().
inline constexpr int kModelBasedInitialTrials = 3;
std::unique_ptr<Tuner> make_tuner(const std::string& type, const std::string& metric,
                                  uint64_t seed);

using RunTrial = std::function<TrialResult(const Candidate&)>;
inline constexpr uint64_t kDefaultTunerSeed = 42;

// Runs the search: asks the tuner for the next candidate and calls run_trial on it, until
//   * run_trial has been called autotuning.tuner_num_trials times,
//   * the tuner has nothing left, or
//   * autotuning.tuner_early_stopping consecutive trials did not strictly improve the best metric
//     (counted from the first successful trial on: while nothing has succeeded yet, e.g. every
//     stage-0 candidate runs out of memory, the search goes on).
// A trial that fails, runs out of memory or times out is recorded and the search goes on; so is a
// run_trial that throws std::exception (recorded as kFailed with the message) or reports kOk with
// a non-finite metric (kFailed). After a kOutOfMemory, the untried candidates with the same stage
// and offload and a larger micro batch are recorded as kPruned without running (they need more
// activation memory) and do not count as trials. The result's candidate is always the one asked.
// Returns the history in order: every trial run and every candidate skipped that way (not
// space.pruned). Throws ConfigError for bad tuner_type / metric / tuner_num_trials /
// tuner_early_stopping.
std::vector<TrialResult> tune(const SearchSpace& space, const config::AutotuningConfig& autotuning,
                              const RunTrial& run_trial, uint64_t seed = kDefaultTunerSeed);
// The same with a tuner of the caller's (autotuning.tuner_type is then ignored).
std::vector<TrialResult> tune(const SearchSpace& space, const config::AutotuningConfig& autotuning,
                              Tuner& tuner, const RunTrial& run_trial);

// The best kOk trial by `metric` (the earliest among equals); std::nullopt when none succeeded.
std::optional<TrialResult> best_trial(const std::vector<TrialResult>& results,
                                      const std::string& metric);

// The ds_config a trial runs with: `user_config` (a JSON object) with every key kept except
//   * zero_optimization.stage = the candidate's; when the candidate's offload is the user's own
//     (user_offload()) the user's sections stay as written; otherwise offload_optimizer /
//     offload_param present with device "cpu" when the candidate offloads (the user's other keys
//     in them kept), removed otherwise, and the deprecated cpu_offload / cpu_offload_param aliases
//     removed;
//   * train_micro_batch_size_per_gpu, gradient_accumulation_steps and train_batch_size =
//     micro_batch * gradient_accumulation * world_size;
//   * autotuning.enabled = true, autotuning.metric_path = `metric_path`, and autotuning.metric,
//     start_profile_step and end_profile_step the user's or DeepSpeed's defaults, so the engine
//     writes the metric there.
nlohmann::ordered_json trial_config(const nlohmann::ordered_json& user_config,
                                    const Candidate& candidate, int world_size,
                                    const std::string& metric_path);

// The winner as DeepSpeed's ds_config_optimal.json: trial_config() with autotuning.enabled = false
// and no autotuning.metric_path, so training with it does not profile.
nlohmann::ordered_json optimal_config(const nlohmann::ordered_json& user_config,
                                      const Candidate& candidate, int world_size);

// An aligned text table, one row per result in the given order: name, stage, micro batch,
// gradient accumulation, offload, the metric (kOk rows) and status with detail; the best row
// (best_trial) is marked with '*', and a last line names the best or says none succeeded.
std::string results_table(const std::vector<TrialResult>& results, const std::string& metric);

}  // namespace deepspeed::autotuning
