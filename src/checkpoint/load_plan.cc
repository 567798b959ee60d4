// plan_load: a tag read and checked for one rank of a loading engine (load_plan.h).
#include "checkpoint/load_plan.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "deepspeed/error.h"

namespace deepspeed::checkpoint {

namespace {

c10::IValue entry(const StateDict& state, const char* key, const std::string& file) {
  auto it = state.find(key);
  DS_CHECK_T(CheckpointError, it != state.end(), "checkpoint file ", file, " has no '", key, "'");
  return it->value();
}

c10::impl::GenericDict dict_entry(const StateDict& state, const char* key, const std::string& file) {
  c10::IValue v = entry(state, key, file);
  DS_CHECK_T(CheckpointError, v.isGenericDict(), "checkpoint file ", file, ": '", key, "' is not a dict");
  return v.toGenericDict();
}

// Checks the checksum of every tensor under `value`.
void verify_tensors(const c10::IValue& value, const std::string& path) {
  if (value.isTensor()) {
    verify_tensor(value.toTensor(), path);
  } else if (value.isGenericDict()) {
    for (const auto& e : value.toGenericDict())
      verify_tensors(e.value(), path + "/" + (e.key().isString() ? e.key().toStringRef() : "?"));
  } else if (value.isList()) {
    c10::impl::GenericList list = value.toList();
    for (size_t i = 0; i < list.size(); ++i) verify_tensors(list.get(i), path + "/" + std::to_string(i));
  } else if (value.isTuple()) {
    const auto& items = value.toTupleRef().elements();
    for (size_t i = 0; i < items.size(); ++i) verify_tensors(items[i], path + "/" + std::to_string(i));
  }
}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

std::string joined(const std::vector<std::string>& items, size_t most = SIZE_MAX) {
  std::string s;
  for (size_t i = 0; i < items.size() && i < most; ++i) s += (i ? ", " : "") + items[i];
  if (items.size() > most) s += ", ... (" + std::to_string(items.size()) + " in all)";
  return s;
}

// Throws naming every parameter the checkpoint lacks, holds in another shape, or holds beyond the model (torch's
// strict loading), in one line (a name map that is off shows as a pattern), every rank alike.
void check_parameters(const LoadTarget& t, const PartitionIndex& index, const std::string& where) {
  std::set<std::string> model_names(t.other_ranks_names.begin(), t.other_ranks_names.end());
  for (const auto& g : t.names) model_names.insert(g.begin(), g.end());
  std::vector<std::string> missing, extra, mismatched;
  for (const auto& p : index.params)
    if (!t.may_hold_more && !model_names.count(p.name)) extra.push_back("'" + p.name + "'");
  for (size_t g = 0; g < t.names.size(); ++g)
    for (size_t i = 0; i < t.names[g].size(); ++i) {
      const SavedParam* p = index.find(t.names[g][i]);
      if (p == nullptr)
        missing.push_back("'" + t.names[g][i] + "'");
      else if (p->shape != t.shapes[g][i])
        mismatched.push_back("'" + t.names[g][i] + "' " + shape_str(p->shape) + " vs this model's " +
                             shape_str(t.shapes[g][i]));
    }
  if (missing.empty() && extra.empty() && mismatched.empty()) return;
  std::string msg = "checkpoint " + where + " does not match this model (it holds " +
                    std::to_string(index.params.size()) +
                    " parameters; saved from another model, or names that need a checkpoint_name_map?):";
  if (!missing.empty()) msg += " missing " + joined(missing, 6) + ";";
  if (!extra.empty()) msg += " not in this model " + joined(extra, 6) + ";";
  if (!mismatched.empty()) msg += " shape differs for " + joined(mismatched, 6) + ";";
  msg.pop_back();
  throw CheckpointError(msg);
}

// The copies that fill this rank's fragments (check_parameters passed: every name is in the index).
std::vector<CopyRun> plan_copies(const LoadTarget& t, const PartitionIndex& index) {
  std::vector<CopyRun> runs;
  for (const auto& f : t.fragments) {
    const SavedParam* p = index.find(t.names[f.group][f.index]);
    for (const auto& s : p->fragments) {
      const int64_t lo = std::max(f.begin, s.begin), hi = std::min(f.end, s.end);
      if (lo >= hi) continue;
      runs.push_back(CopyRun{f.group, f.offset + lo - f.begin, &s, lo - s.begin, s.offset + lo - s.begin, hi - lo});
    }
  }
  return runs;
}

// Rank 0's optimizer header (type, step, state names, param_groups, archive) into `out`.
void read_optimizer_header(const c10::impl::GenericDict& opt, const std::string& where, SavedOptimizer& out) {
  out.type = saved_entry(opt, "type", where).toStringRef();
  out.step = saved_entry(opt, "step", where).toInt();
  for (const c10::IValue& n : saved_entry(opt, "state_names", where).toList())
    out.state_names.push_back(n.toStringRef());
  for (const c10::IValue& pg : saved_entry(opt, "param_groups", where).toList()) {
    c10::impl::GenericDict d = pg.toGenericDict();
    out.lrs.push_back(saved_entry(d, "lr", where + " param_groups").toDouble());
    auto m = d.find(std::string("momentum"));
    out.momenta.push_back(m == d.end() ? std::nullopt : std::optional<double>(m->value().toDouble()));
  }
  auto a = opt.find(std::string("client_optimizer_archive"));
  if (a != opt.end()) out.archive = a->value().toTensor();
}

SavedOptimizer read_optimizer(const PartitionIndex& index) {
  SavedOptimizer out;
  for (size_t r = 0; r < index.files.size(); ++r) {
    const std::string& file = index.files[r];
    c10::impl::GenericDict opt = dict_entry(index.states[r], "optimizer_state_dict", file);
    const std::string where = "checkpoint file " + file + ": optimizer_state_dict";
    if (r == 0) read_optimizer_header(opt, where, out);
    const std::vector<at::Tensor> flats = flat_tensor_list(index.states[r], kFp32FlatGroupsKey, file);
    c10::impl::GenericList groups = saved_entry(opt, "state", where).toList();
    DS_CHECK_T(CheckpointError, groups.size() == flats.size(), where, ": 'state' has ", groups.size(),
               " groups, fp32_flat_groups ", flats.size());
    std::vector<std::vector<at::Tensor>> per_state(out.state_names.size());
    for (size_t g = 0; g < groups.size(); ++g) {
      c10::impl::GenericDict s = groups.get(g).toGenericDict();
      for (size_t k = 0; k < out.state_names.size(); ++k) {
        at::Tensor t =
            saved_entry(s, out.state_names[k].c_str(), where + " state[" + std::to_string(g) + "]").toTensor();
        DS_CHECK_T(CheckpointError, t.dim() == 1 && t.scalar_type() == at::kFloat && t.numel() == flats[g].numel(),
                   where, " state[", g, "]['", out.state_names[k], "'] holds ", t.numel(),
                   " elements, its fp32 group ", flats[g].numel());
        per_state[k].push_back(t);
      }
    }
    out.states.push_back(std::move(per_state));
  }
  return out;
}

// The saved optimizer, checked to be the one the target runs.
SavedOptimizer read_matching_optimizer(const LoadTarget::Optimizer& ours, const PartitionIndex& index,
                                       const std::string& path) {
  SavedOptimizer saved = read_optimizer(index);
  // A file that does not name its optimizer (Python DeepSpeed's) must hold the same state tensors.
  DS_CHECK_T(CheckpointError,
             (saved.type.empty() || saved.type == ours.name) && saved.state_names == ours.state_names,
             "checkpoint ", path, " holds the state of optimizer '", saved.type.empty() ? "?" : saved.type, "' (",
             joined(saved.state_names), "), this engine runs '", ours.name, "' (", joined(ours.state_names),
             "); load it with load_optimizer_states=false");
  DS_CHECK_T(CheckpointError, !ours.needs_archive || saved.archive.defined(), "checkpoint ", path,
             " has no client optimizer state; load it with load_optimizer_states=false");
  return saved;
}

// Our own tag: the model file (checksums of what is used only: the fp32 masters come from the rank files) and the
// rank files' index, checked to be one save of the same tensor-parallel size.
void read_own_tag(const LoadTarget& t, const std::string& tag, FileSystem* fs, LoadPlan& plan) {
  plan.model_file = model_states_path(t.dir, tag, t.mp_rank);
  plan.model = load_state(plan.model_file, LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false});
  check_metadata(plan.model, plan.model_file);
  const int64_t saved_tp = plan.model.contains("mp_world_size") ? plan.model.at("mp_world_size").toInt() : 1;
  DS_CHECK_T(CheckpointError, saved_tp == t.tensor_parallel_size || t.tensor_size_checked, "checkpoint file ",
             plan.model_file, " was saved with ", saved_tp, " tensor-parallel ranks (mp_world_size), this engine runs ",
             t.tensor_parallel_size,
             " (tensor_parallel.autotp_size); to change the size, convert it with ds_to_universal and load that "
             "with checkpoint.load_universal");
  plan.index = load_partition_index(t.dir, tag, fs, t.mp_rank);
  const std::string model_run = plan.model.at(kRunIdKey).toStringRef();
  DS_CHECK_T(CheckpointError, plan.index.run_id == model_run, "checkpoint file ", plan.index.files[0],
             " is from another run than ", plan.model_file, " (ds_run_id '", plan.index.run_id, "' vs '", model_run,
             "'): the tag directory mixes two checkpoints");
}

// Recognises the format of <dir>/<tag> and reads its model entries and fp32 partitions into `plan`.
void read_tag(const LoadTarget& t, const std::string& tag, FileSystem* fs, LoadPlan& plan) {
  std::optional<ForeignTag> foreign;
  if (t.universal) {
    // Every parameter whole in its own folder: loadable at any world size, stage, expert layout (experts are saved
    // under their global names) or pipeline layout, and sliced for a tensor-parallel engine.
    foreign = read_universal(t.dir, tag, t.name_map, fs, t.slicer);
  } else if (is_python_deepspeed_tag(t.dir, tag, t.mp_rank, fs)) {
    // Written by Python DeepSpeed: translated into our layout, then loaded like ours.
    DS_CHECK_T(CheckpointError, !t.refuse_python_tags, "checkpoint ", plan.path,
               " was written by Python DeepSpeed: loading its MoE expert files is not supported");
    foreign = read_python_deepspeed_tag(t.dir, tag, t.name_map, t.mp_rank, fs);
  } else {
    read_own_tag(t, tag, fs, plan);
    return;
  }
  plan.model_file = foreign->model_file;
  plan.model = foreign->model;
  plan.index = index_partitions(tag, std::move(foreign->files), std::move(foreign->ranks));
}

// The module's buffers, each checked for presence, shape and checksum.
void read_buffers(const LoadTarget& t, LoadPlan& plan) {
  c10::impl::GenericDict module = dict_entry(plan.model, kModuleKey, plan.model_file);
  for (const auto& [name, ours] : t.buffers) {
    auto it = module.find(name);
    DS_CHECK_T(CheckpointError, it != module.end() && it->value().isTensor(), "checkpoint file ", plan.model_file,
               " has no buffer '", name, "'");
    const at::Tensor saved = it->value().toTensor();
    DS_CHECK_T(CheckpointError, saved.sizes() == ours.sizes(), "checkpoint file ", plan.model_file, ": buffer '",
               name, "' has shape ", shape_str(saved.sizes().vec()), ", this model's is ",
               shape_str(ours.sizes().vec()));
    verify_tensor(saved, std::string(kModuleKey) + "/" + name);
    plan.buffers.emplace_back(ours, saved);
  }
}

// Counters, this rank's RNG state and the requested sections.
void read_training_state(const LoadTarget& t, LoadPlan& plan) {
  const StateDict& model = plan.model;
  plan.global_steps = entry(model, "global_steps", plan.model_file).toInt();
  plan.global_samples =
      model.contains("global_samples") ? model.at("global_samples").toInt() : plan.global_steps * t.train_batch_size;
  if (model.contains("micro_steps")) plan.micro_steps = model.at("micro_steps").toInt();
  if (plan.index.files.size() == static_cast<size_t>(t.world_size) &&
      plan.index.states[t.rank].contains("rng_state"))  // Python DeepSpeed's files have none
    plan.rng = plan.index.states[t.rank].at("rng_state").toTensor();
  if (plan.rng.defined()) verify_tensor(plan.rng, "rng_state");
  for (const std::string& key : t.sections) {
    if (!model.contains(key)) continue;
    verify_tensors(model.at(key), key);
    plan.sections.emplace(key, dict_entry(model, key.c_str(), plan.model_file));
  }
}

// What save_checkpoint was given (with the module alone too).
void read_client_state(LoadPlan& plan) {
  if (!plan.model.contains("client_state")) return;
  verify_tensors(plan.model.at("client_state"), "client_state");
  plan.client_state =
      c10::impl::toTypedDict<std::string, c10::IValue>(dict_entry(plan.model, "client_state", plan.model_file));
}

// The checksums of every record this rank copies from, and of its share of those no rank copies from (at stages
// 1-2 the model file's weights are read by none): each rank checks a share of the model file and the rank files it
// owns (f % world).
void verify_sources(const LoadTarget& t, const LoadPlan& plan) {
  for (const CopyRun& run : plan.runs) {
    verify_tensor(run.saved->source, std::string(kFp32FlatGroupsKey) + "/" + std::to_string(run.saved->group));
    if (!plan.optimizer) continue;
    const auto& saved = plan.optimizer->states[run.saved->rank];
    for (size_t k = 0; k < saved.size(); ++k)
      verify_tensor(saved[k][run.saved->group], "optimizer_state_dict/state/" + std::to_string(run.saved->group) +
                                                    "/" + plan.optimizer->state_names[k]);
  }
  if (plan.optimizer && plan.optimizer->archive.defined())
    verify_tensor(plan.optimizer->archive, "client_optimizer_archive");
  verify_record_share(plan.model, t.rank, t.world_size);
  for (size_t f = static_cast<size_t>(t.rank); f < plan.index.states.size(); f += static_cast<size_t>(t.world_size))
    verify_record_share(plan.index.states[f], 0, 1);
}

std::string latest_file(const LoadTarget& t) {
  return t.universal ? t.dir + "/" + kLatestUniversal : latest_path(t.dir);
}

}  // namespace

c10::IValue saved_entry(const c10::impl::GenericDict& d, const char* key, const std::string& where) {
  auto it = d.find(std::string(key));
  DS_CHECK_T(CheckpointError, it != d.end(), where, " has no '", key, "'");
  return it->value();
}

std::optional<std::vector<std::pair<double, std::optional<double>>>> SavedOptimizer::group_hyperparameters(
    size_t groups) const {
  const bool same_groups = lrs.size() == groups;
  const bool one_value = !lrs.empty() && std::all_of(lrs.begin(), lrs.end(), [&](double lr) { return lr == lrs[0]; }) &&
                         std::all_of(momenta.begin(), momenta.end(),
                                     [&](const std::optional<double>& m) { return m == momenta[0]; });
  if (!same_groups && !one_value) return std::nullopt;
  std::vector<std::pair<double, std::optional<double>>> out;
  for (size_t g = 0; g < groups; ++g) {
    const size_t s = same_groups ? g : 0;
    out.emplace_back(lrs[s], momenta[s]);
  }
  return out;
}

bool nothing_to_load(const LoadTarget& target, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string latest = latest_file(target);
  if (target.tag || fs->file_exists(latest)) return false;
  if (target.rank == 0)
    std::fprintf(stderr,
                 "deepspeed: warning: load_checkpoint: no file %s; nothing loaded (pass a tag to load a specific "
                 "checkpoint)\n",
                 latest.c_str());
  return true;
}

LoadPlan plan_load(const LoadTarget& t, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  LoadPlan plan;
  // A universal checkpoint's tag is in latest_universal (ds_to_universal writes it), as DeepSpeed reads it.
  const std::string tag =
      t.tag.value_or("").empty() ? read_latest(t.dir, fs, t.universal ? kLatestUniversal : "latest") : *t.tag;
  plan.path = tag_dir(t.dir, tag);
  read_tag(t, tag, fs, plan);
  check_parameters(t, plan.index, plan.path);
  plan.runs = plan_copies(t, plan.index);
  read_buffers(t, plan);
  if (t.full && t.optimizer) plan.optimizer = read_matching_optimizer(*t.optimizer, plan.index, plan.path);
  plan.saved_batch =
      plan.model.contains("train_batch_size") ? plan.model.at("train_batch_size").toInt() : t.train_batch_size;
  if (t.full) read_training_state(t, plan);
  read_client_state(plan);
  verify_sources(t, plan);
  return plan;
}

void copy_masters(const LoadPlan& plan, const std::vector<at::Tensor>& masters,
                  const std::vector<std::vector<at::Tensor>>& states) {
  for (const CopyRun& run : plan.runs) {
    masters[run.group].narrow(0, run.offset, run.n).copy_(run.saved->source.narrow(0, run.source_index, run.n));
    if (!plan.optimizer) continue;
    const auto& saved = plan.optimizer->states[run.saved->rank];
    for (size_t k = 0; k < saved.size(); ++k)
      states[run.group][k]
          .narrow(0, run.offset, run.n)
          .copy_(saved[k][run.saved->group].narrow(0, run.saved_offset, run.n));
  }
}

}  // namespace deepspeed::checkpoint
