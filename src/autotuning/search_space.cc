// The candidates to try: stages x offload choices x micro-batch sizes, pruned by the estimated
// memory of their model states.
#include <algorithm>
#include <nlohmann/json.hpp>
#include <limits>
#include <optional>
#include <set>
#include <utility>

#include "autotuning/autotuning.h"
#include "deepspeed/error.h"

namespace deepspeed::autotuning {
namespace {

using zero::OffloadTarget;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string key(const char* name) { return std::string("autotuning.") + name; }

// The offload choices tried at `stage`: see the top of autotuning.h. The user's own offload, when
// the config sets one, is the only choice, at the stages that allow it.
std::vector<std::pair<OffloadTarget, OffloadTarget>> offload_choices(const SearchInputs& in,
                                                                     int stage) {
  if (in.offload) {
    const auto [opt, param] = *in.offload;
    const bool allowed = (opt == OffloadTarget::kNone || stage >= 1) &&
                         (param == OffloadTarget::kNone || stage == 3);
    if (!allowed) return {};
    return {*in.offload};
  }
  std::vector<std::pair<OffloadTarget, OffloadTarget>> choices = {
      {OffloadTarget::kNone, OffloadTarget::kNone}};
  if (in.autotuning.fast || stage == 0) return choices;
  choices.push_back({OffloadTarget::kCpu, OffloadTarget::kNone});
  // ZeRO-3 offload as Hugging Face's example configures it: parameters and optimizer in host memory. (NVMe needs a
  // path from the user: never tried unasked.)
  if (stage == 3) choices.push_back({OffloadTarget::kCpu, OffloadTarget::kCpu});
  return choices;
}

void check_inputs(const SearchInputs& in) {
  const config::AutotuningConfig& at = in.autotuning;
  higher_is_better(at.metric);  // throws for an unknown metric
  DS_CHECK(in.world_size >= 1, "autotuning: world_size must be >= 1, got ", in.world_size);
  DS_CHECK_T(ConfigError, in.num_params >= 1, key("model_info.num_params"),
             ": must be >= 1 (give it, or profile the model first), got ", in.num_params);
  DS_CHECK_T(ConfigError, at.min_train_micro_batch_size_per_gpu >= 1,
             key("min_train_micro_batch_size_per_gpu"), ": must be >= 1, got ",
             at.min_train_micro_batch_size_per_gpu);
  DS_CHECK_T(
      ConfigError, at.max_train_micro_batch_size_per_gpu >= at.min_train_micro_batch_size_per_gpu,
      key("max_train_micro_batch_size_per_gpu"),
      ": must be >= min_train_micro_batch_size_per_gpu (", at.min_train_micro_batch_size_per_gpu,
      "), got ", at.max_train_micro_batch_size_per_gpu);
  DS_CHECK_T(ConfigError, at.num_tuning_micro_batch_sizes >= 1, key("num_tuning_micro_batch_sizes"),
             ": must be >= 1, got ", at.num_tuning_micro_batch_sizes);
  DS_CHECK_T(ConfigError, at.min_train_batch_size >= 1, key("min_train_batch_size"),
             ": must be >= 1, got ", at.min_train_batch_size);
  DS_CHECK_T(ConfigError, !at.max_train_batch_size || *at.max_train_batch_size >= 1,
             key("max_train_batch_size"), ": must be >= 1, got ",
             at.max_train_batch_size.value_or(0));
  DS_CHECK_T(ConfigError, !in.train_batch_size || *in.train_batch_size >= 1,
             "train_batch_size: must be >= 1, got ", in.train_batch_size.value_or(0));
  DS_CHECK(!in.stages.empty(), "autotuning: no ZeRO stage to tune");
  std::set<int> seen;
  for (int stage : in.stages) {
    DS_CHECK_T(ConfigError, stage >= 0 && stage <= 3,
               "zero_optimization.stage: expected 0, 1, 2 or 3, got ", stage);
    DS_CHECK(seen.insert(stage).second, "autotuning: ZeRO stage ", stage, " listed twice");
  }
}

// Keeps `n` of the ascending `sizes`: the smallest, the largest and the rest evenly spread
// between. Why not simply the n largest, which are usually the fastest? Nothing here knows the
// activation memory, so nothing knows which large sizes fit: with the default bounds (1..1024) the
// three largest are 256, 512 and 1024, which could all run out of memory and leave no result. The
// smallest almost always fits; the largest is the fastest when it fits; the spread covers the
// middle; and tune() skips the sizes above one that ran out of memory. Users who know their limit
// narrow max_train_micro_batch_size_per_gpu and then get the largest sizes tried.
std::vector<int64_t> spread(const std::vector<int64_t>& sizes, int n) {
  const size_t m = sizes.size();
  if (m <= static_cast<size_t>(n)) return sizes;
  if (n == 1) return {sizes.back()};
  std::vector<int64_t> kept;
  for (int i = 0; i < n; ++i) {
    // Index round(i * (m - 1) / (n - 1)): strictly increasing because m > n.
    const size_t index = (static_cast<size_t>(i) * (m - 1) * 2 + (n - 1)) / (2 * (n - 1));
    kept.push_back(sizes[index]);
  }
  return kept;
}

}  // namespace

std::string Candidate::name() const {
  std::string s = "z" + std::to_string(zero_stage) + "_mbs" + std::to_string(micro_batch) + "_gas" +
                  std::to_string(gradient_accumulation);
  if (offload_optimizer != OffloadTarget::kNone) {
    s += std::string("_offopt-") + zero::offload_target_name(offload_optimizer);
  }
  if (offload_param != OffloadTarget::kNone) {
    s += std::string("_offparam-") + zero::offload_target_name(offload_param);
  }
  return s;
}

bool Candidate::operator==(const Candidate& o) const {
  return zero_stage == o.zero_stage && micro_batch == o.micro_batch &&
         gradient_accumulation == o.gradient_accumulation &&
         offload_optimizer == o.offload_optimizer && offload_param == o.offload_param;
}

std::optional<std::pair<zero::OffloadTarget, zero::OffloadTarget>> user_offload(
    const nlohmann::ordered_json& user_config) {
  auto target_of = [](const nlohmann::ordered_json& zero, const char* section, const char* alias) {
    if (zero.contains(section) && zero[section].is_object() && zero[section].contains("device") &&
        zero[section]["device"].is_string()) {
      const std::string d = zero[section]["device"].get<std::string>();
      if (d == "cpu") return OffloadTarget::kCpu;
      if (d == "nvme") return OffloadTarget::kNvme;
      return OffloadTarget::kNone;
    }
    return zero.contains(alias) && zero[alias].is_boolean() && zero[alias].get<bool>()
               ? OffloadTarget::kCpu
               : OffloadTarget::kNone;
  };
  if (!user_config.is_object() || !user_config.contains("zero_optimization") ||
      !user_config["zero_optimization"].is_object()) {
    return std::nullopt;
  }
  const nlohmann::ordered_json& zero = user_config["zero_optimization"];
  const auto choice = std::make_pair(target_of(zero, "offload_optimizer", "cpu_offload"),
                                     target_of(zero, "offload_param", "cpu_offload_param"));
  if (choice.first == OffloadTarget::kNone && choice.second == OffloadTarget::kNone) {
    return std::nullopt;
  }
  return choice;
}

std::vector<int> zero_stages_to_tune(const nlohmann::ordered_json& user_config) {
  if (user_config.is_object()) {
    auto zero = user_config.find("zero_optimization");
    if (zero != user_config.end() && zero->is_object()) {
      auto stage = zero->find("stage");
      if (stage != zero->end() && stage->is_number_integer()) {
        const int64_t s = stage->get<int64_t>();
        DS_CHECK_T(ConfigError, s >= 0 && s <= 3,
                   "zero_optimization.stage: expected 0, 1, 2 or 3, got ", s);
        return {static_cast<int>(s)};
      }
    }
  }
  return {0, 1, 2, 3};
}

std::vector<int64_t> tuning_micro_batch_sizes(const SearchInputs& in) {
  check_inputs(in);
  const config::AutotuningConfig& at = in.autotuning;
  const int64_t world = in.world_size;
  int64_t lo = at.min_train_micro_batch_size_per_gpu;
  int64_t hi = at.max_train_micro_batch_size_per_gpu;
  // Which keys set the bounds, for the error when nothing is left between them.
  std::string lo_key = key("min_train_micro_batch_size_per_gpu");
  std::string hi_source = key("max_train_micro_batch_size_per_gpu");
  int64_t per_rank = 0;  // train_batch_size / world_size when fixed
  if (in.train_batch_size) {
    DS_CHECK_T(ConfigError, *in.train_batch_size % world == 0,
               "train_batch_size: must be a multiple of the data-parallel world size (", world,
               "), got ", *in.train_batch_size);
    per_rank = *in.train_batch_size / world;
    if (per_rank < hi) {
      hi = per_rank;
      hi_source =
          detail::str_cat("train_batch_size ", *in.train_batch_size, " / world size ", world);
    }
  } else {
    if (ceil_div(at.min_train_batch_size, world) > lo) {
      lo = ceil_div(at.min_train_batch_size, world);
      lo_key = key("min_train_batch_size");
    }
    if (at.max_train_batch_size && *at.max_train_batch_size / world < hi) {
      hi = *at.max_train_batch_size / world;
      hi_source = detail::str_cat(key("max_train_batch_size"), " ", *at.max_train_batch_size,
                                  " / world size ", world);
    }
  }
  DS_CHECK_T(ConfigError, lo <= hi, lo_key, ": asks for micro batches of at least ", lo,
             " per rank, but ", hi_source, " allows at most ", hi);
  // Each trial's train_batch_size is a micro batch times the world: it must fit in 64 bits.
  DS_CHECK_T(ConfigError, hi <= std::numeric_limits<int64_t>::max() / world, hi_source, " ", hi, " * world size ",
             world, " overflows a 64-bit integer: give batch sizes a machine can run");

  std::set<int64_t> sizes = {lo, hi};
  for (int64_t p = 1; p <= hi; p *= 2) {
    if (p >= lo) sizes.insert(p);
    if (p > hi / 2) break;  // the next doubling would pass hi (and could overflow)
  }
  std::vector<int64_t> kept;
  for (int64_t size : sizes) {
    if (per_rank == 0 || per_rank % size == 0) kept.push_back(size);
  }
  DS_CHECK_T(ConfigError, !kept.empty(), "train_batch_size: no micro-batch size in [", lo, ", ", hi,
             "] (a power of two or a bound) divides train_batch_size / world size = ", per_rank);
  return spread(kept, at.num_tuning_micro_batch_sizes);
}

SearchSpace build_search_space(const SearchInputs& in) {
  const std::vector<int64_t> micro_batches = tuning_micro_batch_sizes(in);  // validates `in`
  std::vector<int> stages = in.stages;
  std::sort(stages.begin(), stages.end());

  SearchSpace space;
  for (int stage : stages) {
    for (const auto& [offload_optimizer, offload_param] : offload_choices(in, stage)) {
      const zero::MemoryEstimate estimate = zero::estimate_model_states_mem_needs(
          in.num_params, in.world_size, stage, in.precision, offload_optimizer, offload_param,
          in.largest_layer_params, in.reduce_bucket_size);
      const int64_t needed = in.host_is_device ? estimate.host_and_device() : estimate.total();
      const bool fits = in.memory_per_rank_bytes <= 0 || needed <= in.memory_per_rank_bytes;
      for (int64_t mbs : micro_batches) {
        Candidate c;
        c.zero_stage = stage;
        c.micro_batch = mbs;
        c.gradient_accumulation =
            in.train_batch_size ? *in.train_batch_size / (mbs * in.world_size) : 1;
        c.offload_optimizer = offload_optimizer;
        c.offload_param = offload_param;
        if (fits) {
          space.candidates.push_back(c);
          continue;
        }
        TrialResult pruned;
        pruned.candidate = c;
        pruned.status = TrialStatus::kPruned;
        pruned.detail =
            detail::str_cat("model states need ", zero::format_bytes(needed), " (", needed,
                            " B) per rank, ", zero::format_bytes(in.memory_per_rank_bytes), " (",
                            in.memory_per_rank_bytes, " B) available");
        space.pruned.push_back(pruned);
      }
    }
  }
  return space;
}

}  // namespace deepspeed::autotuning
