// Engine::save_checkpoint and the engine's state as a save hands it to the checkpoint writer
// (checkpoint/save_contents.h: what each rank writes, and which rank writes a master every rank holds). Loading:
// engine_checkpoint_load.cc.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <unordered_map>

#include "checkpoint/deepspeed_export.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/safetensors_writer.h"
#include "checkpoint/save_contents.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/tp/parallel_linear.h"
#include "moe/expert_params.h"
#include "runtime/engine_impl.h"
#include "runtime/rank_agreement.h"
#include "runtime/state_sections.h"
#include "zero/stage_features.h"

namespace deepspeed {

namespace ckpt = checkpoint;


namespace {

// checkpoint.save_layout python_deepspeed: where our own files of a save go first.
constexpr const char* kStagingSuffix = ".deepspeed_cpp_staging";

}  // namespace

int64_t EngineImpl::global_samples() const {
  // A schedule whose step spans several iterations of train_batch_size samples each (update windows with
  // gradient_accumulation_steps 1) counts iterations.
  const int64_t since = iterations_->counts_iterations() ? micro_steps_ - micro_steps_at_load_
                                                         : global_steps_ - steps_at_load_;
  return samples_at_load_ + since * config_.train_batch_size.value();
}

void EngineImpl::check_step_closed(const char* what) const { step_->check_nothing_started(what); }

void EngineImpl::check_boundary(const char* what) const {
  check_step_closed(what);
  const int64_t gas = config_.gradient_accumulation_steps.value();
  DS_CHECK(micro_steps_ % gas == 0, what,
           ": call it at a gradient accumulation boundary (after the step() that ",
           "completes a global step); this is micro step ", micro_steps_ % gas, " of ", gas);
}

EngineImpl::CheckpointState EngineImpl::checkpoint_state() { return step_->checkpoint_state(); }

void EngineImpl::commit_checkpoint_state(const CheckpointState& state) { step_->commit_checkpoint_state(state); }

std::vector<zero::MasterFragment> EngineImpl::master_fragments() const {
  return stage_->master_fragments();
}

std::vector<std::vector<std::string>> EngineImpl::parameter_names() const { return names_by_group(false); }

std::vector<std::vector<std::string>> EngineImpl::parameter_names_or_positions() const { return names_by_group(true); }

std::vector<std::vector<std::string>> EngineImpl::names_by_group(bool positions_for_unnamed) const {
  std::unordered_map<const void*, std::string> names;
  for (const auto& item : module_->named_parameters(/*recurse=*/true))
    names.emplace(item.value().unsafeGetTensorImpl(),
                  item.key());  // a tied weight keeps its first name
  // Experts split over ranks are saved under their global names (moe/expert_params.h).
  if (layout_.experts)
    for (const auto& [impl, name] : moe::expert_names(*module_).global) names[impl] = name;
  std::vector<std::vector<std::string>> out(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g)
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      auto it = names.find(groups_[g].params[i].unsafeGetTensorImpl());
      if (it == names.end() && positions_for_unnamed) {
        out[g].push_back("group " + std::to_string(g) + " parameter " + std::to_string(i));
        continue;
      }
      DS_ASSERT(it != names.end(), "parameter ", i, " of group ", g,
                " is not a parameter of the module");
      out[g].push_back(it->second);
    }
  return out;
}

runtime::TensorSlicing EngineImpl::tensor_slicing() const {
  if (!layout_.tensor_parallel) return pipeline_slicing_;
  const comm::ProcessGroup& tensor = layout_.model_parallel;
  return runtime::TensorSlicing{tensor.rank(), tensor.size(), tp::split_layout(*module_)};
}

std::vector<std::vector<std::vector<int64_t>>> EngineImpl::parameter_shapes() const {
  return stage_->param_shapes();
}

ckpt::StateDict EngineImpl::optim_state_dict(const std::string& run_id,
                                             const CheckpointState& train_state) const {
  at::NoGradGuard no_grad;
  ckpt::RankFileContents c;
  c.config = &config_;
  c.rank = layout_.data_parallel.rank();
  c.world_size = layout_.data_parallel.size();
  c.masters = train_state.masters;
  c.states = train_state.states;
  // MoE experts: the first rank holding them.
  for (size_t g = 0; g < c.masters.size(); ++g)
    c.first_copy.push_back(zero::copies_group(groups_[g], layout_.data_parallel).rank() == 0);
  c.fragments = master_fragments();
  c.names = parameter_names();
  if (optimizer_) {
    ckpt::RankFileContents::Optimizer o;
    o.type = optimizer_->name();
    o.step = optimizer_->step_count();
    o.state_names = optimizer_->state_names();
    for (size_t g = 0; g < c.masters.size(); ++g) {
      o.lrs.push_back(optimizer_->lr(g));
      o.momenta.push_back(optimizer_->momentum(g));
      o.weight_decays.push_back(optimizer_->weight_decay(g));
    }
    o.archive = optimizer_->archive();
    c.optimizer = std::move(o);
  }
  c.rng = accelerator::get_accelerator().get_rng_state();
  return ckpt::rank_file(run_id, c);
}

std::optional<ckpt::StateDict> EngineImpl::module_parameters(bool gather) const {
  at::NoGradGuard no_grad;
  if (!zero::partitions_parameters(*stage_)) {
    // Experts split over ranks go to their own files (save_expert_files): under their local names here they
    // would stand for rank 0's experts only.
    std::unordered_map<const void*, std::string> experts;
    if (layout_.experts) experts = moe::expert_names(*module_).global;
    ckpt::StateDict params = ckpt::make_state_dict();
    for (const auto& item : module_->named_parameters(/*recurse=*/true))
      if (!experts.count(item.value().unsafeGetTensorImpl())) params.insert(item.key(), item.value());
    return params;
  }
  if (!gather) return std::nullopt;
  // One unit gathered at a time; rank 0 keeps copies of what it needs.
  std::unordered_map<const void*, at::Tensor> copies;
  for (const auto& params : zero::feature<zero::GatheredUnits>(*stage_)->gather_units()) {
    zero::GatheredParameters gathered(params, /*modifier_rank=*/-1);
    if (layout_.data_parallel.rank() == 0)
      for (const auto& p : params) copies.emplace(p.unsafeGetTensorImpl(), p.detach().clone());
  }
  ckpt::StateDict out = ckpt::make_state_dict();
  if (layout_.data_parallel.rank() == 0)
    for (const auto& item : module_->named_parameters(/*recurse=*/true))
      out.insert(item.key(), copies.at(item.value().unsafeGetTensorImpl()));
  return out;
}

ckpt::StateDict EngineImpl::model_state_dict(const std::string& run_id,
                                             const std::optional<ckpt::StateDict>& client_state,
                                             const std::optional<ckpt::StateDict>& params) const {
  at::NoGradGuard no_grad;
  ckpt::ModelFileContents c;
  c.config = &config_;
  c.config_json = config_.dump();
  // Without gathered parameters, partitioned parameters live in the rank files only.
  if (params) c.params = *params;
  for (const auto& item : module_->named_buffers(/*recurse=*/true))
    if (item.value().defined()) c.buffers.emplace_back(item.key(), item.value());
  c.names = parameter_names();
  c.shapes = parameter_shapes();
  c.global_steps = global_steps_;
  c.global_samples = global_samples();
  c.train_batch_size = config_.train_batch_size.value();
  c.micro_steps = micro_steps_;
  c.skipped_steps = skipped_steps();
  c.dp_world_size = layout_.data_parallel.size();
  runtime::TensorSlicing slicing = tensor_slicing();
  c.tensor_parallel_size = slicing.size;
  c.tensor_parallel_layout = std::move(slicing.layout);
  c.dtype = runtime::dtype_name(dtype_);
  if (const char* key = iterations_->section_key()) c.sections.emplace_back(key, iterations_->section());
  if (scheduler_) c.sections.emplace_back(runtime::kSchedulerSection, runtime::scheduler_section(*scheduler_));
  if (scaler_) c.sections.emplace_back(runtime::kLossScalerSection, runtime::loss_scaler_section(*scaler_));
  if (client_state) c.client_state = *client_state;
  return ckpt::model_file(run_id, c);
}

std::string EngineImpl::save_checkpoint(const std::string& dir,
                                        const std::optional<std::string>& tag_in,
                                        const std::optional<ckpt::StateDict>& client_state,
                                        bool save_latest) {
  check_states_resident("save_checkpoint");
  check_boundary("save_checkpoint");
  iterations_->check_save_point(micro_steps_, "save_checkpoint");
  // overlap_step: the step in flight lands first, so the checkpoint holds it and a resume continues as this run
  // does from here (its next forward sees the landed parameters).
  land_overlapped_step();
  iterations_->before_save();  // the masters take what the schedule holds apart from them
  DS_CHECK(!dir.empty(), "save_checkpoint: save_dir is empty");
  const std::string tag = tag_in.value_or(ckpt::default_tag(global_steps_));
  DS_CHECK(!tag.empty() && tag.find('/') == std::string::npos && tag != "." && tag != "..",
           "save_checkpoint: tag '", tag, "' must be a plain directory name");
  // With tensor parallelism every tensor rank writes its own files into the same tag: the whole world agrees on the
  // tag and the run id, waits for one cleaner, and names the tag in `latest` once all have written.
  comm::ProcessGroup everyone = layout_.tensor_parallel ? comm::get_world_group() : layout_.data_parallel;
  // (checkpoint.save_layout "python_deepspeed" with tensor parallelism: refused at initialize, check_python_layout.)
  runtime::check_same_on_all_ranks(everyone, tag, "save_checkpoint: the tag");
  const std::string run_id = runtime::make_run_id(everyone);
  // Collective when the stage partitions parameters and gathers them for the save
  // (stage3_gather_16bit_weights_on_model_save).
  const auto params = module_parameters(config_.zero.gather_16bit_weights_on_model_save);
  // checkpoint.save_layout python_deepspeed: our files go to a staging tag, from which every rank writes its part
  // of Python DeepSpeed's layout (checkpoint/deepspeed_export.h); a save killed meanwhile leaves a staging tag that
  // the next save's stale-file pass removes like any partial tag.
  const bool python_layout = config_.checkpoint.save_python_layout;
  const std::string our_tag = python_layout ? tag + kStagingSuffix : tag;
  if (layout_.tensor_parallel) {
    runtime::all_ranks_or_none(everyone, "save_checkpoint", [&] {
      if (comm::get_local_rank() == 0) runtime::remove_stale_checkpoint_files(dir, tag);
    });
  }
  runtime::all_ranks_or_none(everyone, "save_checkpoint", [&] {
    // One process per host clears what killed saves left, before this save writes its own.
    if (!layout_.tensor_parallel && comm::get_local_rank() == 0) runtime::remove_stale_checkpoint_files(dir, tag);
    ckpt::begin_tag_save(dir, our_tag);
    ckpt::save_state(ckpt::optim_states_path(dir, our_tag, layout_.data_parallel.rank(), mp_rank()),
                     optim_state_dict(run_id, checkpoint_state()));
    if (layout_.data_parallel.rank() == 0)
      ckpt::save_state(ckpt::model_states_path(dir, our_tag, mp_rank()),
                       model_state_dict(run_id, client_state, params));
    if (layout_.experts) save_expert_files(dir, our_tag);
  });
  if (python_layout) save_python_layout(dir, our_tag, tag);
  // Every rank's files are durable (the collective above is the barrier): only now may `latest`
  // name the tag.
  if (save_latest)
    runtime::all_ranks_or_none(everyone, "save_checkpoint", [&] {
      if (everyone.rank() == 0) ckpt::write_latest(dir, tag);
    });
  ckpt::end_tag_save(dir, tag);  // complete and named by `latest` (when asked): no longer partial
  if (comm::get_rank() == 0) {
    std::printf("saved checkpoint %s/%s\n", dir.c_str(), tag.c_str());
    std::fflush(stdout);
  }
  return tag;
}

void EngineImpl::save_python_layout(const std::string& dir, const std::string& staging, const std::string& tag) {
  runtime::all_ranks_or_none(layout_.data_parallel, "save_checkpoint", [&] {
    ckpt::begin_tag_save(dir, tag);
    ckpt::DeepSpeedExportOptions options;
    options.world_size = layout_.data_parallel.size();
    options.only_rank = layout_.data_parallel.rank();
    options.write_latest = false;
    ckpt::write_deepspeed_tag(dir, staging, ckpt::tag_dir(dir, tag), options);
  });
  ckpt::end_tag_save(dir, staging);
  // Every rank has read what it needed from the staging tag (the collective above is the barrier).
  runtime::all_ranks_or_none(layout_.data_parallel, "save_checkpoint", [&] {
    if (layout_.data_parallel.rank() != 0) return;
    ckpt::FileSystem* fs = ckpt::default_file_system();
    const std::string staged = ckpt::tag_dir(dir, staging);
    for (const std::string& name : fs->list_dir(staged)) fs->remove_file(staged + "/" + name);
    fs->remove_dir(staged);
  });
}

void EngineImpl::save_expert_files(const std::string& dir, const std::string& tag) const {
  // DeepSpeed's layout: one file per expert, a plain {global name: weight} dict in the model's dtype, written by
  // the first rank holding it. Loading reads the fp32 masters from the rank files instead (bit-exact resume).
  at::NoGradGuard no_grad;
  for (const auto& e : moe::local_experts(*module_)) {
    if (!e.writer) continue;
    ckpt::StateDict state = ckpt::make_state_dict();
    for (const auto& [name, p] : e.params) state.insert(name, p.detach());
    ckpt::save_state(ckpt::expert_model_states_path(dir, tag, e.layer, e.expert, mp_rank()), state);
  }
}

bool EngineImpl::save_16bit_model(const std::string& dir, const std::string& file_name) {
  check_states_resident("save_16bit_model");
  check_no_expert_parallelism("save_16bit_model");
  DS_CHECK(!dir.empty() && !file_name.empty() && file_name.find('/') == std::string::npos,
           "save_16bit_model: save_dir must be set and save_filename a plain file name, got '", dir,
           "' and '", file_name, "'");
  land_overlapped_step();  // the model file holds the latest update
  if (zero::partitions_parameters(*stage_) && !config_.zero.gather_16bit_weights_on_model_save) {
    if (layout_.data_parallel.rank() == 0)
      std::fprintf(stderr,
                   "deepspeed: warning: save_16bit_model: did not save the model %s/%s because "
                   "zero_optimization.stage3_gather_16bit_weights_on_model_save is false; save a "
                   "checkpoint and run ds_to_fp32 to recover the weights\n",
                   dir.c_str(), file_name.c_str());
    return false;
  }
  auto state = *module_parameters(/*gather=*/true);
  for (const auto& item : module_->named_buffers(/*recurse=*/true))
    if (item.value().defined()) state.insert(item.key(), item.value());
  runtime::all_ranks_or_none(layout_.data_parallel, "save_16bit_model", [&] {
    if (layout_.data_parallel.rank() == 0) ckpt::save_weights_file(dir + "/" + file_name, state);
  });
  return true;
}

bool Engine::save_16bit_model(const std::string& save_dir, const std::string& save_filename) {
  return impl_->save_16bit_model(save_dir, save_filename);
}

std::string Engine::save_checkpoint(const std::string& save_dir,
                                    const std::optional<std::string>& tag,
                                    const std::optional<checkpoint::StateDict>& client_state,
                                    bool save_latest) {
  return impl_->save_checkpoint(save_dir, tag, client_state, save_latest);
}

std::optional<LoadCheckpointResult> Engine::load_checkpoint(const std::string& load_dir,
                                                            const LoadCheckpointOptions& options) {
  return impl_->load_checkpoint(load_dir, options);
}

}  // namespace deepspeed
