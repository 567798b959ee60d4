// PipelineEngine checkpoints in DeepSpeed's pipeline layout:
//   <dir>/<tag>/layer_<index:02d>-model_states.pt                  one per module layer (tied modules at their first
//                                                                   index): the layer's own state dict
//   <dir>/<tag>/mp_rank_<mp:02d>_model_states.pt                    the stage's engine state (module, counters, ...)
//   <dir>/<tag>/zero_pp_rank_<dp>_mp_rank_<mp:02d>_optim_states.pt  the stage's optimizer partitions
//   <dir>/latest                                                     written last, once every stage is done
// Each stage saves and loads its own files through its engine, which names them by its rank in the model replica
// (DeepSpeed's model-parallel rank): the stage, or with a "model" axis of T tensor ranks stage * T + tensor rank;
// then each tensor rank also writes its own slices of the layers as layer_<index>-model_<t:02d>-model_states.pt
// (DeepSpeed's name for them). Layer files are written by data-parallel rank 0 of the stage (and tensor rank)
// holding the layer. A load checks that the checkpoint's layer partition and tensor size are this pipeline's before
// anything is overwritten.
#include <ATen/ATen.h>

#include <cstdio>
#include <set>

#include "checkpoint/universal.h"
#include "deepspeed/checkpoint.h"
#include "deepspeed/error.h"
#include "pipe/pipeline_engine_impl.h"
#include "runtime/rank_agreement.h"

namespace deepspeed::pipe {
namespace {

namespace ckpt = deepspeed::checkpoint;

// Where the pipeline's layer partition and tensor size are kept (in the stage's client state, removed on load).
constexpr const char* kPartsKey = "ds_pipeline_parts";
constexpr const char* kTensorSizeKey = "ds_pipeline_tensor_parallel_size";

// DeepSpeed's name: the rank's coordinates other than pipe and data (here the tensor rank) when there are any.
std::string layer_file(const std::string& dir, const std::string& tag, int index, const PipeGridRanks& grid) {
  char name[64];
  if (grid.model_parallel_size > 1) {
    std::snprintf(name, sizeof(name), "/layer_%02d-model_%02d-model_states.pt", index, grid.model_parallel_id);
  } else {
    std::snprintf(name, sizeof(name), "/layer_%02d-model_states.pt", index);
  }
  return ckpt::tag_dir(dir, tag) + name;
}

// The stage module's parameters and buffers under `prefix`, renamed relative to it (values copied: a view would
// drag its whole flat buffer into the file).
ckpt::StateDict sub_state_dict(const torch::nn::Module& m, const std::string& prefix) {
  ckpt::StateDict out = ckpt::make_state_dict();
  for (const auto& item : m.named_parameters())
    if (item.key().rfind(prefix, 0) == 0) out.insert(item.key().substr(prefix.size()), item.value().detach().clone());
  for (const auto& item : m.named_buffers())
    if (item.key().rfind(prefix, 0) == 0) out.insert(item.key().substr(prefix.size()), item.value().detach().clone());
  return out;
}

std::string parts_text(const std::vector<int64_t>& parts) {
  std::string s;
  for (int64_t p : parts) s += (s.empty() ? "" : ",") + std::to_string(p);
  return "[" + s + "]";
}

}  // namespace

std::string PipelineEngineImpl::save_checkpoint(const std::string& dir, const std::optional<std::string>& tag_in,
                                                const std::optional<checkpoint::StateDict>& client_state) {
  DS_CHECK(!dir.empty(), "save_checkpoint: save_dir is empty");
  const std::string tag = tag_in.value_or(ckpt::default_tag(impl_->global_steps()));
  runtime::check_same_on_all_ranks(world_, tag, "save_checkpoint: the tag");
  ckpt::StateDict client = client_state ? client_state->copy() : ckpt::make_state_dict();
  client.insert_or_assign(kPartsKey, std::vector<int64_t>(module_->parts().begin(), module_->parts().end()));
  if (grid_.model_parallel_size > 1)
    client.insert_or_assign(kTensorSizeKey, static_cast<int64_t>(grid_.model_parallel_size));

  // Each layer once: by data-parallel rank 0 of its stage; a tied module at the first index of its key.
  runtime::all_ranks_or_none(world_, "save_checkpoint", [&] {
    if (grid_.data_parallel_id != 0) return;
    ckpt::default_file_system()->create_dirs(ckpt::tag_dir(dir, tag));
    std::set<std::string> seen;
    for (int i = 0; i < module_->num_layers(); ++i) {
      const LayerSpec& spec = module_->options().layers[static_cast<size_t>(i)];
      std::string prefix;
      if (spec.tied_key()) {
        if (!seen.insert(*spec.tied_key()).second) continue;  // not the key's first index
        prefix = "tied_modules." + *spec.tied_key() + ".";
      } else if (!spec.is_function()) {
        prefix = std::to_string(i) + ".";
      } else {
        continue;
      }
      if (i < module_->local_start() || i >= module_->local_stop()) continue;
      ckpt::save_state(layer_file(dir, tag, i, grid_), sub_state_dict(*module_, prefix));
    }
  });
  impl_->save_checkpoint(dir, tag, client, /*save_latest=*/false);
  // Every stage's files are durable (the collective is the barrier): only now may `latest` name the tag.
  runtime::all_ranks_or_none(world_, "save_checkpoint", [&] {
    if (world_.rank() == 0) ckpt::write_latest(dir, tag);
  });
  return tag;
}

std::optional<LoadCheckpointResult> PipelineEngineImpl::load_checkpoint(const std::string& dir,
                                                                        const LoadCheckpointOptions& options) {
  // A universal checkpoint holds every parameter whole, so any stage count and tensor size loads it: each stage's
  // engine takes its layers' parameters, each tensor rank its slices (its tag is in latest_universal).
  const bool universal = impl_->config().checkpoint.load_universal;
  const std::string latest = universal ? dir + "/" + ckpt::kLatestUniversal : ckpt::latest_path(dir);
  if (!options.tag && !ckpt::default_file_system()->file_exists(latest)) {
    if (world_.rank() == 0)
      std::fprintf(stderr, "deepspeed: warning: load_checkpoint: no file %s; nothing loaded\n", latest.c_str());
    return std::nullopt;
  }
  if (universal) {
    auto result = impl_->load_checkpoint(dir, options);
    if (result) (void)result->client_state.erase(kPartsKey);
    return result;
  }
  // Before anything is overwritten, on every rank: the checkpoint must split the layers as this pipeline does.
  std::string tag;
  runtime::all_ranks_or_none(world_, "load_checkpoint", [&] {
    tag = ckpt::resolve_tag(dir, options.tag);
    const std::string file = ckpt::model_states_path(dir, tag, grid_.stage_id);
    ckpt::StateDict model = ckpt::load_state(file);
    std::vector<int64_t> saved;
    int64_t saved_tensor_size = 1;
    if (model.contains("client_state")) {
      auto client = model.at("client_state").toGenericDict();
      // A plain pickled list (as torch.save writes, and as we write since LibTorch 2.x's torch.load refuses typed
      // ones): its elements are ints of no declared list type.
      if (client.contains(kPartsKey))
        for (const c10::IValue& part : client.at(kPartsKey).toList()) saved.push_back(part.toInt());
      if (client.contains(kTensorSizeKey)) saved_tensor_size = client.at(kTensorSizeKey).toInt();
    }
    const std::vector<int64_t> mine(module_->parts().begin(), module_->parts().end());
    DS_CHECK_T(ckpt::CheckpointError, !saved.empty(), "checkpoint file ", file,
               " was not saved by a pipeline (no ", kPartsKey, ")");
    DS_CHECK_T(ckpt::CheckpointError, saved == mine, "checkpoint ", ckpt::tag_dir(dir, tag),
               " splits the layers as ", parts_text(saved), " (", saved.size() - 1, " stages); this pipeline as ",
               parts_text(mine), ": load it into the same stage count and partition_method");
    // The model-parallel rank files of another tensor size hold other stages' or other slices' states.
    DS_CHECK_T(ckpt::CheckpointError, saved_tensor_size == grid_.model_parallel_size, "checkpoint ",
               ckpt::tag_dir(dir, tag), " was saved by a pipeline with ", saved_tensor_size,
               " tensor-parallel ranks; this one has ", grid_.model_parallel_size,
               ": load it at the same tensor size, or convert it with ds_to_universal and load that with "
               "checkpoint.load_universal");
  });
  LoadCheckpointOptions stage_options = options;
  stage_options.tag = tag;
  auto result = impl_->load_checkpoint(dir, stage_options);
  if (result) {
    (void)result->client_state.erase(kPartsKey);  // absent in a checkpoint of one part
    (void)result->client_state.erase(kTensorSizeKey);
  }
  return result;
}

std::string PipelineEngine::save_checkpoint(const std::string& save_dir, const std::optional<std::string>& tag,
                                            const std::optional<checkpoint::StateDict>& client_state) {
  return impl_->save_checkpoint(save_dir, tag, client_state);
}

std::optional<LoadCheckpointResult> PipelineEngine::load_checkpoint(const std::string& load_dir,
                                                                    const LoadCheckpointOptions& options) {
  return impl_->load_checkpoint(load_dir, options);
}

}  // namespace deepspeed::pipe
