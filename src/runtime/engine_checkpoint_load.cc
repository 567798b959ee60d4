// Engine::load_checkpoint: a checkpoint saved by any number of ranks at any ZeRO stage, loaded into
// this engine.
//
// Every rank maps every rank file of the tag (checkpoint/partition_index.h) and, for each fragment
// of a parameter its own master partition holds, copies the overlapping elements of the saved
// fragments: fp32 masters, and the optimizer state at the same offsets. Parameters are matched by
// name, so world size, stage, partition padding and parameter groups may all differ between save
// and load. Everything that can be wrong with the files (the CRC-32 of every record a rank copies
// from included) is checked on every rank before anything is overwritten, and no rank applies
// anything until every rank's checks pass, so every rank fails alike and the engine keeps its
// state. The model-dtype parameters are then refreshed from the masters (a collective), exactly as
// after an optimizer step, which is why a resumed run is bit-exact.
#include <ATen/ATen.h>
#include <torch/nn/module.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "checkpoint/deepspeed_tag.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/universal.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/tp/partition.h"
#include "moe/expert_params.h"
#include "runtime/engine_checkpoint_util.h"
#include "runtime/engine_impl.h"

namespace deepspeed {

namespace ckpt = checkpoint;
using ckpt::CheckpointError;

namespace {

c10::IValue entry(const ckpt::StateDict& state, const char* key, const std::string& file) {
  auto it = state.find(key);
  DS_CHECK_T(CheckpointError, it != state.end(), "checkpoint file ", file, " has no '", key, "'");
  return it->value();
}

c10::IValue entry(const c10::impl::GenericDict& d, const char* key, const std::string& where) {
  auto it = d.find(std::string(key));
  DS_CHECK_T(CheckpointError, it != d.end(), where, " has no '", key, "'");
  return it->value();
}

c10::impl::GenericDict dict_entry(const ckpt::StateDict& state, const char* key,
                                  const std::string& file) {
  c10::IValue v = entry(state, key, file);
  DS_CHECK_T(CheckpointError, v.isGenericDict(), "checkpoint file ", file, ": '", key,
             "' is not a dict");
  return v.toGenericDict();
}

// Checks the checksum of every tensor under `value` (the client state goes to the caller whole).
void verify_tensors(const c10::IValue& value, const std::string& path) {
  if (value.isTensor()) {
    ckpt::verify_tensor(value.toTensor(), path);
  } else if (value.isGenericDict()) {
    for (const auto& e : value.toGenericDict())
      verify_tensors(e.value(), path + "/" + (e.key().isString() ? e.key().toStringRef() : "?"));
  } else if (value.isList()) {
    c10::impl::GenericList list = value.toList();
    for (size_t i = 0; i < list.size(); ++i)
      verify_tensors(list.get(i), path + "/" + std::to_string(i));
  } else if (value.isTuple()) {
    const auto& items = value.toTupleRef().elements();
    for (size_t i = 0; i < items.size(); ++i)
      verify_tensors(items[i], path + "/" + std::to_string(i));
  }
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// n elements of a saved flat group (rank, group, offset) that belong at `offset` of this rank's
// master `group`.
struct CopyRun {
  size_t group = 0;
  int64_t offset = 0;
  const ckpt::SavedFragment* saved = nullptr;
  int64_t source_index = 0;  // in saved->source
  int64_t saved_offset = 0;  // in the saved rank's flat group
  int64_t n = 0;
};

// The copies that fill this rank's fragments; throws naming the parameter when the checkpoint lacks
// it or its shape differs, and when the checkpoint holds a parameter the model does not have
// (torch's strict loading). `other_ranks_names`: parameters of the model that other ranks hold (MoE experts).
std::vector<CopyRun> plan_copies(const std::vector<zero::MasterFragment>& mine,
                                 const std::vector<std::vector<std::string>>& names,
                                 const std::vector<std::vector<std::vector<int64_t>>>& shapes,
                                 const ckpt::PartitionIndex& index, const std::string& where,
                                 const std::vector<std::string>& other_ranks_names, bool may_hold_more) {
  std::set<std::string> model_names(other_ranks_names.begin(), other_ranks_names.end());
  for (const auto& g : names) model_names.insert(g.begin(), g.end());
  // Every mismatch in one line (a name map that is off shows as a pattern), every rank alike.
  std::vector<std::string> missing, extra, mismatched;
  for (const auto& p : index.params)
    if (!may_hold_more && !model_names.count(p.name)) extra.push_back("'" + p.name + "'");
  for (size_t g = 0; g < names.size(); ++g)
    for (size_t i = 0; i < names[g].size(); ++i) {
      const ckpt::SavedParam* p = index.find(names[g][i]);
      if (p == nullptr)
        missing.push_back("'" + names[g][i] + "'");
      else if (p->shape != shapes[g][i])
        mismatched.push_back("'" + names[g][i] + "' " + shape_str(p->shape) + " vs this model's " +
                             shape_str(shapes[g][i]));
    }
  if (!missing.empty() || !extra.empty() || !mismatched.empty()) {
    auto list = [](const std::vector<std::string>& items) {
      std::string s;
      for (size_t i = 0; i < items.size() && i < 6; ++i) s += (i ? ", " : "") + items[i];
      if (items.size() > 6) s += ", ... (" + std::to_string(items.size()) + " in all)";
      return s;
    };
    std::string msg = "checkpoint " + where + " does not match this model (it holds " +
                      std::to_string(index.params.size()) + " parameters; saved from another model, or names "
                      "that need a checkpoint_name_map?):";
    if (!missing.empty()) msg += " missing " + list(missing) + ";";
    if (!extra.empty()) msg += " not in this model " + list(extra) + ";";
    if (!mismatched.empty()) msg += " shape differs for " + list(mismatched) + ";";
    msg.pop_back();
    throw CheckpointError(msg);
  }
  std::vector<CopyRun> runs;
  for (const auto& f : mine) {
    const ckpt::SavedParam* p = index.find(names[f.group][f.index]);
    for (const auto& s : p->fragments) {
      const int64_t lo = std::max(f.begin, s.begin), hi = std::min(f.end, s.end);
      if (lo >= hi) continue;
      runs.push_back(CopyRun{f.group, f.offset + lo - f.begin, &s, lo - s.begin,
                             s.offset + lo - s.begin, hi - lo});
    }
  }
  return runs;
}

// The optimizer part of every saved rank file: states[rank][k][group], 1-D fp32.
struct SavedOptimizer {
  std::string type;
  int64_t step = 0;
  std::vector<std::string> state_names;
  std::vector<std::vector<std::vector<at::Tensor>>> states;
  std::vector<double> lrs;  // rank 0's param_groups
  std::vector<std::optional<double>> momenta;
  at::Tensor archive;  // a client optimizer's bytes
};

SavedOptimizer read_optimizer(const ckpt::PartitionIndex& index) {
  SavedOptimizer out;
  for (size_t r = 0; r < index.files.size(); ++r) {
    const std::string& file = index.files[r];
    c10::impl::GenericDict opt = dict_entry(index.states[r], "optimizer_state_dict", file);
    const std::string where = "checkpoint file " + file + ": optimizer_state_dict";
    if (r == 0) {
      out.type = entry(opt, "type", where).toStringRef();
      out.step = entry(opt, "step", where).toInt();
      for (const c10::IValue& n : entry(opt, "state_names", where).toList())
        out.state_names.push_back(n.toStringRef());
      for (const c10::IValue& pg : entry(opt, "param_groups", where).toList()) {
        c10::impl::GenericDict d = pg.toGenericDict();
        out.lrs.push_back(entry(d, "lr", where + " param_groups").toDouble());
        auto m = d.find(std::string("momentum"));
        out.momenta.push_back(m == d.end() ? std::nullopt
                                           : std::optional<double>(m->value().toDouble()));
      }
      auto a = opt.find(std::string("client_optimizer_archive"));
      if (a != opt.end()) out.archive = a->value().toTensor();
    }
    const std::vector<at::Tensor> flats =
        ckpt::flat_tensor_list(index.states[r], ckpt::kFp32FlatGroupsKey, file);
    c10::impl::GenericList groups = entry(opt, "state", where).toList();
    DS_CHECK_T(CheckpointError, groups.size() == flats.size(), where, ": 'state' has ",
               groups.size(), " groups, fp32_flat_groups ", flats.size());
    std::vector<std::vector<at::Tensor>> per_state(out.state_names.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      c10::impl::GenericDict s = groups.get(g).toGenericDict();
      for (size_t k = 0; k < out.state_names.size(); ++k) {
        at::Tensor t =
            entry(s, out.state_names[k].c_str(), where + " state[" + std::to_string(g) + "]")
                .toTensor();
        DS_CHECK_T(CheckpointError,
                   t.dim() == 1 && t.scalar_type() == at::kFloat && t.numel() == flats[g].numel(),
                   where, " state[", g, "]['", out.state_names[k], "'] holds ", t.numel(),
                   " elements, its fp32 group ", flats[g].numel());
        per_state[k].push_back(t);
      }
    }
    out.states.push_back(std::move(per_state));
  }
  return out;
}

}  // namespace

std::optional<LoadCheckpointResult> EngineImpl::load_checkpoint(
    const std::string& dir, const LoadCheckpointOptions& options) {
  check_states_resident("load_checkpoint");
  check_boundary("load_checkpoint");
  land_overlapped_step();  // its thread would write masters the load is about to replace
  ckpt::FileSystem* fs = ckpt::default_file_system();
  std::string tag = options.tag.value_or("");
  // A universal checkpoint's tag is in latest_universal (ds_to_universal writes it), as DeepSpeed reads it.
  const bool universal = config_.checkpoint.load_universal;
  const std::string latest =
      universal ? dir + "/" + ckpt::kLatestUniversal : ckpt::latest_path(dir);
  if (tag.empty() && !fs->file_exists(latest)) {
    if (world_.rank() == 0)
      std::fprintf(
          stderr,
          "deepspeed: warning: load_checkpoint: no file %s; nothing loaded (pass a tag to load a "
          "specific checkpoint)\n",
          latest.c_str());
    return std::nullopt;
  }
  const bool full = !options.load_module_only;
  const bool load_optimizer = full && options.load_optimizer_states && optimizer_ != nullptr;
  LoadCheckpointResult result;
  // Read and check everything on every rank before anything is overwritten. Each rank checks the
  // checksums of the records it copies from, so one rank may fail where the others pass: the
  // collective ending this phase makes every rank throw before any of them applies anything.
  std::string model_file;
  ckpt::StateDict model = ckpt::make_state_dict();
  ckpt::PartitionIndex index;
  std::vector<CopyRun> runs;                               // point into index
  std::vector<std::pair<at::Tensor, at::Tensor>> buffers;  // (ours, saved)
  SavedOptimizer saved_opt;
  std::optional<runtime::LossScaler::State> scaler_state;
  std::optional<runtime::LrSchedulerState> scheduler_state;
  int64_t steps = 0, samples = 0, saved_batch = 0;
  const int64_t batch = config_.train_batch_size.value();
  at::Tensor rng;
  std::optional<c10::impl::GenericDict> zenflow_state;  // ZenFlow's selective state, when the file has it
  int64_t saved_micro_steps = 0;
  runtime::all_ranks_or_none(world_, "load_checkpoint", [&] {
    if (tag.empty())
      tag = ckpt::read_latest(dir, fs, universal ? ckpt::kLatestUniversal : "latest");
    result.path = ckpt::tag_dir(dir, tag);
    if (universal) {
      // Every parameter whole in its own folder: loadable at any world size, stage, expert layout (experts are
      // saved under their global names, so each rank takes the ones it holds) or pipeline layout (each stage
      // takes its layers' parameters).
      // A tensor-parallel engine takes its slices of the whole parameters, whatever tensor size saved them.
      ckpt::ParamSlicer slicer;
      if (runtime::TensorSlicing slicing = tensor_slicing(); slicing.size > 1) {
        slicer = [s = std::move(slicing)](const std::string& name, const at::Tensor& whole) {
          auto it = s.layout.find(name);
          return it == s.layout.end() ? whole
                                      : tp::slice_split(whole, it->second.first, it->second.second, s.rank, s.size);
        };
      }
      ckpt::ForeignTag foreign = ckpt::read_universal(dir, tag, options.checkpoint_name_map, fs, slicer);
      model_file = foreign.model_file;
      model = foreign.model;
      index = ckpt::index_partitions(tag, std::move(foreign.files), std::move(foreign.ranks));
    } else if (ckpt::is_python_deepspeed_tag(dir, tag, mp_rank(), fs)) {
      // Written by Python DeepSpeed: translated into our layout, then loaded like ours.
      DS_CHECK_T(CheckpointError, !has_experts_, "checkpoint ", result.path,
                 " was written by Python DeepSpeed: loading its MoE expert files is not supported");
      ckpt::ForeignTag foreign =
          ckpt::read_python_deepspeed_tag(dir, tag, options.checkpoint_name_map, mp_rank(), fs);
      model_file = foreign.model_file;
      model = foreign.model;
      index = ckpt::index_partitions(tag, std::move(foreign.files), std::move(foreign.ranks));
    } else {
      model_file = ckpt::model_states_path(dir, tag, mp_rank());
      // Checksums of what this load uses only (the module's weights in this file are not read: the
      // fp32 masters come from the rank files).
      model = ckpt::load_state(model_file,
                               ckpt::LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
      ckpt::check_metadata(model, model_file);
      const int64_t saved_tp = model.contains("mp_world_size") ? model.at("mp_world_size").toInt() : 1;
      const int64_t our_tp = tensor_slicing().size;
      // A 3D pipeline compared its own record of the tensor size already (its checkpoints from before mp_world_size
      // counted the tensor ranks hold 1 there).
      DS_CHECK_T(CheckpointError, saved_tp == our_tp || pipeline_slicing_.size > 1, "checkpoint file ", model_file,
                 " was saved with ", saved_tp,
                 " tensor-parallel ranks (mp_world_size), this engine runs ", our_tp,
                 " (tensor_parallel.autotp_size); to change the size, convert it with ds_to_universal and load that "
                 "with checkpoint.load_universal");
      index = ckpt::load_partition_index(dir, tag, fs, mp_rank());
      const std::string model_run = model.at(ckpt::kRunIdKey).toStringRef();
      DS_CHECK_T(CheckpointError, index.run_id == model_run, "checkpoint file ", index.files[0],
                 " is from another run than ", model_file, " (ds_run_id '", index.run_id, "' vs '",
                 model_run, "'): the tag directory mixes two checkpoints");
    }

    const auto names = parameter_names();
    runs = plan_copies(master_fragments(), names, parameter_shapes(), index, result.path,
                       has_experts_ ? moe::expert_names(*module_).all : std::vector<std::string>{},
                       /*may_hold_more=*/universal && model_parallel_.is_member());
    c10::impl::GenericDict module = dict_entry(model, ckpt::kModuleKey, model_file);
    for (const auto& item : module_->named_buffers(/*recurse=*/true)) {
      if (!item.value().defined()) continue;
      auto it = module.find(item.key());
      DS_CHECK_T(CheckpointError, it != module.end() && it->value().isTensor(), "checkpoint file ",
                 model_file, " has no buffer '", item.key(), "'");
      const at::Tensor saved = it->value().toTensor();
      DS_CHECK_T(CheckpointError, saved.sizes() == item.value().sizes(), "checkpoint file ",
                 model_file, ": buffer '", item.key(), "' has shape ",
                 shape_str(saved.sizes().vec()), ", this model's is ",
                 shape_str(item.value().sizes().vec()));
      ckpt::verify_tensor(saved, std::string(ckpt::kModuleKey) + "/" + item.key());
      buffers.emplace_back(item.value(), saved);
    }
    if (load_optimizer) {
      saved_opt = read_optimizer(index);
      // A file that does not name its optimizer (Python DeepSpeed's) must hold the same state tensors.
      auto joined = [](const std::vector<std::string>& v) {
        std::string s;
        for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
        return s;
      };
      DS_CHECK_T(CheckpointError,
                 (saved_opt.type.empty() || saved_opt.type == optimizer_->name()) &&
                     saved_opt.state_names == optimizer_->state_names(),
                 "checkpoint ", result.path, " holds the state of optimizer '",
                 saved_opt.type.empty() ? "?" : saved_opt.type, "' (", joined(saved_opt.state_names),
                 "), this engine runs '", optimizer_->name(), "' (", joined(optimizer_->state_names()),
                 "); load it with load_optimizer_states=false");
      DS_CHECK_T(CheckpointError, optimizer_->archive().empty() || saved_opt.archive.defined(),
                 "checkpoint ", result.path,
                 " has no client optimizer state; load it with load_optimizer_states=false");
    }
    if (full && scaler_ && model.contains("loss_scaler")) {
      c10::impl::GenericDict s = model.at("loss_scaler").toGenericDict();
      const std::string where = "checkpoint file " + model_file + ": loss_scaler";
      runtime::LossScaler::State st;
      st.cur_scale = entry(s, "cur_scale", where).toDouble();
      st.cur_iter = entry(s, "cur_iter", where).toInt();
      st.last_overflow_iter = entry(s, "last_overflow_iter", where).toInt();
      st.cur_hysteresis = static_cast<int>(entry(s, "cur_hysteresis", where).toInt());
      st.skipped_steps = entry(s, "skipped_steps", where).toInt();
      scaler_state = st;
    }
    if (full && options.load_lr_scheduler_states && scheduler_ && model.contains("lr_scheduler")) {
      c10::impl::GenericDict s = model.at("lr_scheduler").toGenericDict();
      const std::string where = "checkpoint file " + model_file + ": lr_scheduler";
      // Python DeepSpeed's scheduler state does not name its type.
      const std::string type = s.contains(std::string("type")) ? entry(s, "type", where).toStringRef()
                                                               : std::string(scheduler_->type());
      DS_CHECK_T(CheckpointError, type == scheduler_->type(), where, " is a ", type,
                 ", this engine runs a ", scheduler_->type(),
                 "; load it with load_lr_scheduler_states=false");
      scheduler_state = runtime::LrSchedulerState{entry(s, "last_batch_iteration", where).toInt()};
    }
    steps = full ? entry(model, "global_steps", model_file).toInt() : 0;
    // Samples consumed: as saved, or (a file without them) the steps at this run's batch, as
    // DeepSpeed does.
    samples = full && model.contains("global_samples") ? model.at("global_samples").toInt()
                                                       : steps * batch;
    saved_batch = model.contains("train_batch_size") ? model.at("train_batch_size").toInt() : batch;
    if (full && index.files.size() == static_cast<size_t>(world_.size()) &&
        index.states[world_.rank()].contains("rng_state"))  // Python DeepSpeed's files have none
      rng = index.states[world_.rank()].at("rng_state").toTensor();
    if (rng.defined()) ckpt::verify_tensor(rng, "rng_state");
    for (const CopyRun& run : runs) {
      ckpt::verify_tensor(run.saved->source, std::string(ckpt::kFp32FlatGroupsKey) + "/" +
                                                 std::to_string(run.saved->group));
      if (!load_optimizer) continue;
      const auto& saved = saved_opt.states[run.saved->rank];
      for (size_t k = 0; k < saved.size(); ++k)
        ckpt::verify_tensor(saved[k][run.saved->group], "optimizer_state_dict/state/" +
                                                            std::to_string(run.saved->group) + "/" +
                                                            saved_opt.state_names[k]);
    }
    if (saved_opt.archive.defined())
      ckpt::verify_tensor(saved_opt.archive, "client_optimizer_archive");
    if (model.contains("client_state")) verify_tensors(model.at("client_state"), "client_state");
    // And the records no rank copies from, so that any flipped byte fails the load on some rank: each rank checks a
    // share of the model file (at stages 1-2 its module weights are read by none), and the rest of the rank files
    // it owns (f % world; at the saved world size its own, whose records it mostly checked already).
    ckpt::verify_record_share(model, world_.rank(), world_.size());
    for (size_t f = static_cast<size_t>(world_.rank()); f < index.states.size(); f += static_cast<size_t>(world_.size()))
      ckpt::verify_record_share(index.states[f], 0, 1);
    if (zenflow_ && full && model.contains("zenflow")) {
      verify_tensors(model.at("zenflow"), "zenflow");
      zenflow_state = model.at("zenflow").toGenericDict();
      saved_micro_steps = entry(model, "micro_steps", model_file).toInt();
      zenflow_->load_state_dict(*zenflow_state, model_file, parameter_names(), /*apply=*/false);
    }
    if (model.contains("client_state"))
      result.client_state = c10::impl::toTypedDict<std::string, c10::IValue>(
          model.at("client_state").toGenericDict());
  });
  // Every rank's checks passed: apply (collective too, so an I/O error of the NVMe swapper fails
  // every rank alike).
  bool lrs_restored = false;  // the optimizer's learning rates came from the checkpoint
  runtime::all_ranks_or_none(world_, "load_checkpoint", [&] {
    at::NoGradGuard no_grad;
    CheckpointState live = checkpoint_state();
    const std::vector<at::Tensor>& masters = live.masters;
    const std::vector<std::vector<at::Tensor>>& states = live.states;
    for (const CopyRun& run : runs) {
      masters[run.group]
          .narrow(0, run.offset, run.n)
          .copy_(run.saved->source.narrow(0, run.source_index, run.n));
      if (!load_optimizer) continue;
      const auto& saved = saved_opt.states[run.saved->rank];
      for (size_t k = 0; k < saved.size(); ++k)
        states[run.group][k]
            .narrow(0, run.offset, run.n)
            .copy_(saved[k][run.saved->group].narrow(0, run.saved_offset, run.n));
    }
    commit_checkpoint_state(live);
    for (auto& [ours, saved] : buffers) ours.copy_(saved);
    if (load_optimizer) {
      optimizer_->set_step_count(saved_opt.step);
      // Group by group when the groups correspond; otherwise (Python DeepSpeed's one group, a universal
      // checkpoint's group per parameter) the one value they all share.
      const bool same_groups = saved_opt.lrs.size() == groups_.size();
      const bool one_value =
          !saved_opt.lrs.empty() &&
          std::all_of(saved_opt.lrs.begin(), saved_opt.lrs.end(),
                      [&](double lr) { return lr == saved_opt.lrs[0]; }) &&
          std::all_of(saved_opt.momenta.begin(), saved_opt.momenta.end(),
                      [&](const std::optional<double>& m) { return m == saved_opt.momenta[0]; });
      lrs_restored = same_groups || one_value;
      if (lrs_restored)
        for (size_t g = 0; g < groups_.size(); ++g) {
          const size_t s = same_groups ? g : 0;
          optimizer_->set_lr(g, saved_opt.lrs[s]);
          if (saved_opt.momenta[s]) optimizer_->set_momentum(g, *saved_opt.momenta[s]);
        }
      if (saved_opt.archive.defined()) {
        at::Tensor bytes = saved_opt.archive.contiguous();
        optimizer_->restore_archive(std::string(static_cast<const char*>(bytes.data_ptr()),
                                                static_cast<size_t>(bytes.numel())));
      }
    }
    if (full) {
      global_steps_ = steps;
      steps_at_load_ = steps;
      samples_at_load_ = samples;
      if (saved_batch != batch && world_.rank() == 0) {
        std::printf(
            "deepspeed: load_checkpoint: %s was saved at global batch %lld, this run's is %lld: "
            "resuming after "
            "sample %lld (global_samples(); %s), at step %lld\n",
            result.path.c_str(), static_cast<long long>(saved_batch), static_cast<long long>(batch),
            static_cast<long long>(samples),
            samples % batch == 0
                ? ("data step " + std::to_string(samples / batch) + " at the new batch").c_str()
                : "not a whole number of new global batches",
            static_cast<long long>(steps));
        std::fflush(stdout);
      }
      micro_steps_ = steps * config_.gradient_accumulation_steps.value();
      // ZenFlow counts iterations, not steps; a checkpoint without its state starts it afresh (warm-up first).
      if (zenflow_) {
        micro_steps_ = zenflow_state ? saved_micro_steps : 0;
        if (zenflow_state) {
          zenflow_->load_state_dict(*zenflow_state, model_file, parameter_names());
          zenflow_->resume_at(micro_steps_);  // saved at a window's start
        } else {
          zenflow_->reset();  // the selected values it held are not the loaded model's
        }
      }
      micro_steps_at_load_ = micro_steps_;
      // Losses and clocks of steps before the load belong to no step after it.
      step_loss_sum_ = at::Tensor();
      step_loss_count_ = 0;
      observers_.on_resume(steps);
      if (scaler_state) scaler_->load_state(*scaler_state);
      if (scheduler_state) {
        scheduler_->load_state_dict(*scheduler_state);
        if (!lrs_restored) apply_schedule();  // the schedule's values at the restored position
      }
      if (rng.defined()) accelerator::get_accelerator().set_rng_state(rng);
    }
  });
  // Collective: every rank's restored masters into the parameters, as after an optimizer step.
  stage_->restore_from_masters();
  if (zenflow_) {
    if (!full) {
      zenflow_->reset();  // the module alone was loaded: the selected values held are not its
      zenflow_->resume_at(micro_steps_);  // and a window starts here (the iteration count goes on)
    }
    zenflow_->write_selected_into_parameters();
  }
  if (world_.rank() == 0) {
    std::printf("loaded checkpoint %s\n", result.path.c_str());
    std::fflush(stdout);
  }
  return result;
}

}  // namespace deepspeed
