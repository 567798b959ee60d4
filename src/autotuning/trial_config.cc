// The ds_config of one trial, and of the winner: the user's config with the candidate's knobs.
#include <nlohmann/json.hpp>

#include "autotuning/autotuning.h"
#include "deepspeed/error.h"

namespace deepspeed::autotuning {
namespace {

using Json = nlohmann::ordered_json;

// `parent[key]` as an object: kept if it is one, replaced otherwise (absent, null, or a value our
// parser would reject anyway).
Json& object_at(Json& parent, const char* key) {
  Json& child = parent[key];
  if (!child.is_object()) child = Json::object();
  return child;
}

// Sets zero_optimization.<section>.device to `target`, keeping the user's other keys there, or
// removes the section when the candidate does not offload.
void set_offload(Json& zero, const char* section, zero::OffloadTarget target) {
  if (target == zero::OffloadTarget::kNone) {
    zero.erase(section);
    return;
  }
  object_at(zero, section)["device"] = zero::offload_target_name(target);
}

void check_candidate(const Candidate& c, int world_size) {
  DS_CHECK(world_size >= 1, "trial_config: world_size must be >= 1, got ", world_size);
  DS_CHECK(c.zero_stage >= 0 && c.zero_stage <= 3, "trial_config: ", c.name(),
           ": ZeRO stage must be 0-3");
  DS_CHECK(c.micro_batch >= 1 && c.gradient_accumulation >= 1, "trial_config: ", c.name(),
           ": micro batch and gradient accumulation must be >= 1");
  DS_CHECK(c.offload_optimizer == zero::OffloadTarget::kNone || c.zero_stage >= 1,
           "trial_config: ", c.name(), ": optimizer offload needs ZeRO stage 1-3");
  DS_CHECK(c.offload_param == zero::OffloadTarget::kNone || c.zero_stage == 3,
           "trial_config: ", c.name(), ": parameter offload needs ZeRO stage 3");
}

}  // namespace

nlohmann::ordered_json trial_config(const nlohmann::ordered_json& user_config,
                                    const Candidate& candidate, int world_size,
                                    const std::string& metric_path) {
  DS_CHECK(user_config.is_object(),
           "trial_config: the user's ds_config must be a JSON object, got ",
           user_config.type_name());
  check_candidate(candidate, world_size);
  Json cfg = user_config;

  // Assigning an existing key keeps its place, so the file still reads like the user's.
  cfg["train_batch_size"] = candidate.micro_batch * candidate.gradient_accumulation * world_size;
  cfg["train_micro_batch_size_per_gpu"] = candidate.micro_batch;
  cfg["gradient_accumulation_steps"] = candidate.gradient_accumulation;

  const auto users = user_offload(user_config);
  const bool keep_users_offload = users && users->first == candidate.offload_optimizer &&
                                  users->second == candidate.offload_param;
  Json& zero = object_at(cfg, "zero_optimization");
  zero["stage"] = candidate.zero_stage;
  if (!keep_users_offload) {
    // The deprecated aliases would turn offload back on, or clash with the sections set below.
    zero.erase("cpu_offload");
    zero.erase("cpu_offload_param");
    set_offload(zero, "offload_optimizer", candidate.offload_optimizer);
    set_offload(zero, "offload_param", candidate.offload_param);
  }
  // Partial optimizer offload (ratio < 1) is stage 3 only; elsewhere the parser would reject it.
  if (candidate.zero_stage != 3 && zero.contains("offload_optimizer")) {
    zero["offload_optimizer"].erase("ratio");
  }
  // compute_grad_norm false holds at stages 1-2 without optimizer offload only (config/feature_gate.cc); the
  // trials elsewhere compute the norm rather than fail at initialize.
  const bool offloads_optimizer = zero.contains("offload_optimizer") && zero["offload_optimizer"].is_object() &&
                                  zero["offload_optimizer"].value("device", "none") != "none";
  if ((candidate.zero_stage != 1 && candidate.zero_stage != 2) || offloads_optimizer) zero.erase("compute_grad_norm");

  Json& at = object_at(cfg, "autotuning");
  const config::AutotuningConfig defaults;
  at["enabled"] = true;
  if (!at.contains("metric")) at["metric"] = defaults.metric;
  if (!at.contains("start_profile_step")) at["start_profile_step"] = defaults.start_profile_step;
  if (!at.contains("end_profile_step")) at["end_profile_step"] = defaults.end_profile_step;
  at["metric_path"] = metric_path;
  return cfg;
}

nlohmann::ordered_json optimal_config(const nlohmann::ordered_json& user_config,
                                      const Candidate& candidate, int world_size) {
  Json cfg = trial_config(user_config, candidate, world_size, "");
  cfg["autotuning"]["enabled"] = false;
  cfg["autotuning"].erase("metric_path");
  return cfg;
}

}  // namespace deepspeed::autotuning
