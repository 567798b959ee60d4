// DeepSpeed's universal checkpoint layout, written from and read into the fp32 partition contract (universal.h).
#include "checkpoint/universal.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "checkpoint/archive_writer.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/python_pickle.h"
#include "deepspeed/tp/partition.h"

namespace deepspeed::checkpoint {
namespace {

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

std::string parent_dir(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? "." : slash == 0 ? "/" : p.substr(0, slash);
}

std::string base_name(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

void write_value(const std::string& path, const c10::IValue& value, FileSystem* fs) {
  write_file_atomic(
      path,
      [&](WritableFile& f) { write_torch_archive(value, [&](const char* d, size_t n) { f.append(d, n); }); }, fs);
}

std::optional<GenericList> lookup_list(const c10::IValue& d, const std::string& key) {
  std::optional<c10::IValue> v = dict_get(d, key);
  if (!v || !v->isList()) return std::nullopt;
  return v->toList();
}

// A file of the universal layout: {"param": tensor} (or, for step.pt, the value itself).
c10::IValue read_value(const std::string& path) { return load_python_torch_file(path); }

at::Tensor param_tensor(const std::string& path) {
  const c10::IValue v = read_value(path);
  DS_CHECK_T(CheckpointError, v.isGenericDict(), "checkpoint file ", path, " holds a ", v.tagKind(),
             ", not {'param': tensor}");
  auto it = v.toGenericDict().find(std::string("param"));
  DS_CHECK_T(CheckpointError, it != v.toGenericDict().end() && it->value().isTensor(), "checkpoint file ", path,
             " has no 'param' tensor");
  at::Tensor t = it->value().toTensor();
  DS_CHECK_T(CheckpointError, t.is_floating_point(), "checkpoint file ", path, ": 'param' is ", t.scalar_type());
  return t.to(at::kFloat).contiguous();
}

// The tensor-parallel size of a pipeline's stages and, per stage, how each split parameter's slices join.
struct TensorLayouts {
  int64_t tensor_size = 1;
  std::vector<std::map<std::string, std::pair<int64_t, int64_t>>> per_stage{1};
};

// The model-parallel ranks are pipeline stages x tensor ranks (stage * T + tensor rank; T is the model file's
// mp_world_size). A stage's tensor ranks hold slices of the same parameters: its first model file names how each
// split parameter's slices join (the others are whole, and equal, on each of them).
TensorLayouts tensor_layouts(const std::string& dir, const std::string& tag, FileSystem* fs, size_t ranks,
                             bool translated) {
  TensorLayouts out;
  if (translated || ranks <= 1) return out;
  // A pipeline with tensor-parallel stages (3D) names its layer files per tensor rank (layer_<L>-model_<t>-...).
  std::string tensor_layer_file;
  for (const std::string& name : fs->list_dir(tag_dir(dir, tag)))
    if (name.rfind("layer_", 0) == 0 && name.find("-model_") != std::string::npos &&
        name.find("-model_") != name.rfind("-model_states.pt"))
      tensor_layer_file = name;
  std::string file;
  const StateDict first = read_model_states(dir, tag, {}, 0, fs, &file);
  if (auto it = first.find("mp_world_size"); it != first.end() && it->value().isInt())
    out.tensor_size = it->value().toInt();
  const int64_t tensor_size = out.tensor_size;
  DS_CHECK_T(CheckpointError, tensor_size >= 1 && static_cast<int64_t>(ranks) % tensor_size == 0, "checkpoint ",
             tag_dir(dir, tag), " holds ", ranks, " model-parallel ranks, not a multiple of ",
             "the tensor-parallel size ", tensor_size, " (mp_world_size in ", file, ")");
  DS_CHECK_T(CheckpointError, tensor_size > 1 || tensor_layer_file.empty(), "checkpoint ", tag_dir(dir, tag),
             " is of a pipeline with tensor-parallel stages (", tensor_layer_file, ") but ", file,
             " records no tensor-parallel size (mp_world_size 1): it was saved before 3D checkpoints recorded it; "
             "load it into the pipeline that saved it");
  out.per_stage.assign(ranks / static_cast<size_t>(tensor_size), {});
  for (size_t g = 0; tensor_size > 1 && g < out.per_stage.size(); ++g) {
    const StateDict model =
        g == 0 ? first : read_model_states(dir, tag, {}, static_cast<int>(g * tensor_size), fs, &file);
    if (auto it = model.find(kTensorParallelLayoutKey); it != model.end())
      for (const auto& e : it->value().toGenericDict()) {
        const c10::IValue& v = e.value();
        const bool ok =
            v.isList() && v.toListRef().size() == 2 && v.toListRef()[0].isInt() && v.toListRef()[1].isInt();
        DS_CHECK_T(CheckpointError, ok, "checkpoint file ", file, ": ", kTensorParallelLayoutKey, "['",
                   e.key().toStringRef(), "'] must be [dimension, fused blocks]");
        out.per_stage[g][e.key().toStringRef()] = {v.toListRef()[0].toInt(), v.toListRef()[1].toInt()};
      }
  }
  return out;
}

// Rank 0's optimizer step (into `step`) and each param group's lr.
GenericList saved_param_groups(const PartitionIndex& index, int64_t* step) {
  GenericList param_groups = make_any_list();
  auto it = index.states[0].find("optimizer_state_dict");
  if (it == index.states[0].end()) return param_groups;
  const GenericDict opt = it->value().toGenericDict();
  if (auto s = opt.find(std::string("step")); s != opt.end()) *step = s->value().toInt();
  if (auto pgs = opt.find(std::string("param_groups")); pgs != opt.end())
    for (const c10::IValue& pg : pgs->value().toList()) {
      GenericDict g = make_any_dict();
      if (auto lr = pg.toGenericDict().find(std::string("lr")); lr != pg.toGenericDict().end())
        g.insert(std::string("lr"), lr->value());
      param_groups.push_back(g);
    }
  return param_groups;
}

// zero/optimizer_state.pt: the param groups and the layout's version. DeepSpeed's stage 3 reads the step and the
// groups from a nested torch optimizer state_dict (its stages 1-2 from the top-level param_groups and each
// parameter's step.pt).
void write_optimizer_state(const std::string& zero, int64_t step, const GenericList& param_groups, FileSystem* fs) {
  GenericDict optimizer_state = make_any_dict();
  optimizer_state.insert(std::string("param_groups"), param_groups);
  optimizer_state.insert(std::string("ds_version"), std::string(kUniversalLayoutVersion));
  GenericDict step_state = make_any_dict(), first = make_any_dict(), nested = make_any_dict();
  first.insert(std::string("step"), at::scalar_tensor(static_cast<double>(step), at::kFloat));
  step_state.insert(int64_t{0}, first);
  nested.insert(std::string("state"), step_state);
  nested.insert(std::string("param_groups"), param_groups);
  optimizer_state.insert(std::string("optimizer_state_dict"), nested);
  write_value(zero + "/optimizer_state.pt", optimizer_state, fs);
}

// The model files as they are: counters, scheduler, buffers and client state, for either engine to read. DeepSpeed
// at stage 3 reads rank 0's zero_pp_rank_0_mp_rank_<mp>_model_states.pt instead: a copy of ours under that name.
void copy_model_files(const std::string& dir, const std::string& tag, const std::string& out_dir, FileSystem* fs) {
  const std::vector<std::string> names = fs->list_dir(tag_dir(dir, tag));
  for (const std::string& name : names)
    if (name.ends_with("model_states.pt") && name.rfind("layer_", 0) != 0) {
      const std::vector<char> bytes = fs->read_file(tag_dir(dir, tag) + "/" + name);
      write_file_atomic(out_dir + "/" + name, bytes.data(), bytes.size(), fs);
      const std::string stage3_name = "zero_pp_rank_0_" + name;
      if (name.rfind("mp_rank_", 0) == 0 && std::find(names.begin(), names.end(), stage3_name) == names.end())
        write_file_atomic(out_dir + "/" + stage3_name, bytes.data(), bytes.size(), fs);
    }
}

// From a pipeline: each stage's model file holds its own buffers; one module for any layout to take them from.
void merge_stage_modules(const std::string& dir, const std::string& tag, const CheckpointNameMap& map, FileSystem* fs,
                         StateDict& model) {
  for (int mp = 1; fs->file_exists(model_states_path(dir, tag, mp)); ++mp) {
    std::string file;
    const StateDict stage = read_model_states(dir, tag, map, mp, fs, &file);
    auto module = stage.find(kModuleKey);
    auto merged = model.find(kModuleKey);
    if (module == stage.end() || merged == model.end()) continue;
    GenericDict into = merged->value().toGenericDict();
    for (const auto& e : module->value().toGenericDict())
      if (!into.contains(e.key())) into.insert(e.key(), e.value());
  }
}

}  // namespace

UniversalStats write_universal(const std::string& dir, const std::string& tag_in, const std::string& out_dir,
                               FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string tag = resolve_tag(dir, tag_in.empty() ? std::nullopt : std::optional<std::string>(tag_in), fs);
  std::optional<ForeignTag> translated;
  // A pipeline's tag holds each stage's rank files under its model-parallel rank: every stage's parameters go into
  // the one universal folder (a tied weight, kept by several stages alike, once).
  std::vector<PartitionIndex> stages;
  stages.push_back(load_any_partition_index(dir, tag, fs, &translated));
  if (!translated)
    for (int mp = 1; fs->file_exists(model_states_path(dir, tag, mp)); ++mp)
      stages.push_back(load_partition_index(dir, tag, fs, mp));
  const PartitionIndex& index = stages[0];
  int64_t step = 0;
  const GenericList param_groups = saved_param_groups(index, &step);

  const TensorLayouts layouts = tensor_layouts(dir, tag, fs, stages.size(), translated.has_value());
  const int64_t tensor_size = layouts.tensor_size;
  const auto& tp_layouts = layouts.per_stage;
  UniversalStats stats;
  std::set<std::string> written;
  const std::string zero = out_dir + "/zero";
  std::vector<std::vector<RankOptimizerStates>> optimizers;
  for (const PartitionIndex& stage : stages) {
    optimizers.push_back(rank_optimizer_states(stage));
    stats.ranks += static_cast<int>(stage.files.size());
  }
  // fp32 and each optimizer state of parameter `p` of stage `s`, in its shape.
  auto values_of = [&](size_t s, const SavedParam& p) {
    std::vector<at::Tensor> v{at::empty({p.numel}, at::kFloat)};
    std::vector<at::Tensor> states;
    for (size_t k = 0; k < optimizers[s][0].names.size(); ++k) states.push_back(at::empty({p.numel}, at::kFloat));
    copy_param_elements(stages[s], optimizers[s], p, 0, p.numel, v[0], states);
    v.insert(v.end(), states.begin(), states.end());
    for (at::Tensor& t : v) t = t.view(p.shape);
    return v;
  };
  const auto tensors = static_cast<size_t>(tensor_size);
  for (size_t g = 0; g < tp_layouts.size(); ++g) {
    const size_t s = g * tensors;  // the stage's first tensor rank: every parameter of the stage is in its list
    const PartitionIndex& stage = stages[s];
    for (const SavedParam& p : stage.params) {
      if (!written.insert(p.name).second) continue;
      const std::string folder = zero + "/" + p.name;
      fs->create_dirs(folder);
      const std::vector<std::string>& names = optimizers[s][0].names;
      std::vector<at::Tensor> values = values_of(s, p);  // fp32, then the states
      if (auto split = tp_layouts[g].find(p.name); split != tp_layouts[g].end()) {
        std::vector<std::vector<at::Tensor>> slices(values.size());
        for (size_t r = 0; r < tensors; ++r) {
          const SavedParam* q = stages[s + r].find(p.name);
          DS_CHECK_T(CheckpointError, q != nullptr, "checkpoint ", tag_dir(dir, tag), ": model-parallel rank ", s + r,
                     " (tensor rank ", r, ") has no slice of '", p.name, "'");
          std::vector<at::Tensor> v = r == 0 ? values : values_of(s + r, *q);
          for (size_t k = 0; k < v.size(); ++k) slices[k].push_back(v[k]);
        }
        for (size_t k = 0; k < values.size(); ++k)
          values[k] = tp::merge_split(slices[k], split->second.first, split->second.second);
      }
      auto write_param = [&](const std::string& file, const at::Tensor& t) {
        GenericDict d = make_any_dict();
        d.insert(std::string("param"), t.contiguous());
        write_value(folder + "/" + file, d, fs);
        stats.bytes += t.numel() * 4;
      };
      write_param("fp32.pt", values[0]);
      for (size_t k = 0; k < names.size(); ++k) write_param(names[k] + ".pt", values[k + 1]);
      if (!names.empty())
        write_value(folder + "/step.pt", at::scalar_tensor(static_cast<double>(step), at::kFloat), fs);
      ++stats.params;
    }
  }
  write_optimizer_state(zero, step, param_groups, fs);
  copy_model_files(dir, tag, out_dir, fs);
  const std::string latest = parent_dir(out_dir) + "/" + kLatestUniversal;
  const std::string out_tag = base_name(out_dir);
  write_file_atomic(latest, out_tag.data(), out_tag.size(), fs);
  return stats;
}

ForeignTag read_universal(const std::string& dir, const std::string& tag, const CheckpointNameMap& map,
                          FileSystem* fs, const ParamSlicer& slicer) {
  if (fs == nullptr) fs = default_file_system();
  const std::string zero = tag_dir(dir, tag) + "/zero";
  DS_CHECK_T(CheckpointError, fs->is_dir(zero), "checkpoint ", tag_dir(dir, tag),
             " is not a universal checkpoint (no zero/ folder): convert it with ds_to_universal, or load it with "
             "checkpoint.load_universal false");
  ForeignTag out;
  out.model = read_model_states(dir, tag, map, 0, fs, &out.model_file);
  merge_stage_modules(dir, tag, map, fs, out.model);
  // The learning rate DeepSpeed's param group 0 had (each of our groups is one parameter).
  std::optional<double> lr;
  const c10::IValue opt = read_value(zero + "/optimizer_state.pt");
  if (auto groups = lookup_list(opt, "param_groups"); groups && !groups->empty())
    if (auto l = dict_get(groups->get(0), std::string("lr")); l && (l->isDouble() || l->isInt()))
      lr = l->isDouble() ? l->toDouble() : static_cast<double>(l->toInt());

  std::vector<at::Tensor> flats;
  GenericList slices = make_any_list(), states = make_any_list(), param_groups = make_any_list();
  std::vector<std::string> state_names;
  int64_t step = 0;
  bool first = true;
  for (const std::string& name : fs->list_dir(zero)) {
    const std::string folder = zero + "/" + name;
    if (!fs->is_dir(folder)) continue;
    std::vector<std::string> names;
    bool has_step = false;
    for (const std::string& file : fs->list_dir(folder)) {
      if (!file.ends_with(".pt")) continue;
      const std::string key = file.substr(0, file.size() - 3);
      if (key == "step")
        has_step = true;
      else if (key != "fp32")
        names.push_back(key);
    }
    std::sort(names.begin(), names.end());
    if (first) state_names = names;
    DS_CHECK_T(CheckpointError, names == state_names, "checkpoint folder ", folder,
               " holds other optimizer states than the first parameter's");
    const std::string mapped = map ? map(name) : name;
    auto mine = [&](const at::Tensor& whole) { return slicer ? slicer(mapped, whole) : whole; };
    const at::Tensor whole_fp32 = param_tensor(folder + "/fp32.pt");
    const at::Tensor fp32 = mine(whole_fp32);
    flats.push_back(fp32.reshape({-1}));
    GenericList group_slices = make_any_list();
    group_slices.push_back(param_slice_entry(mapped, fp32.sizes().vec(), 0, fp32.numel(), 0));
    slices.push_back(group_slices);
    GenericDict s = make_any_dict();
    for (const std::string& k : names) {
      const at::Tensor whole = param_tensor(folder + "/" + k + ".pt");
      DS_CHECK_T(CheckpointError, whole.numel() == whole_fp32.numel(), "checkpoint file ", folder, "/", k,
                 ".pt holds ", whole.numel(), " elements, fp32.pt ", whole_fp32.numel());
      s.insert(k, mine(whole.view(whole_fp32.sizes())).reshape({-1}));
    }
    states.push_back(s);
    if (first && has_step) {
      const c10::IValue v = read_value(folder + "/step.pt");
      step = v.isTensor() ? static_cast<int64_t>(v.toTensor().item<double>())
                          : v.isInt() ? v.toInt() : v.isDouble() ? static_cast<int64_t>(v.toDouble()) : 0;
    }
    GenericDict pg = make_any_dict();
    if (lr) pg.insert(std::string("lr"), *lr);
    param_groups.push_back(pg);
    first = false;
  }
  DS_CHECK_T(CheckpointError, !flats.empty(), "checkpoint ", zero, " holds no parameter folders");
  GenericDict o = make_any_dict();
  o.insert(std::string("type"), std::string());
  o.insert(std::string("step"), step);
  o.insert(std::string("state_names"), c10::List<std::string>(state_names));
  o.insert(std::string("state"), states);
  o.insert(std::string("param_groups"), param_groups);
  out.files = {zero};
  out.ranks.push_back(partition_rank_file(0, 1, flats, slices, o));
  return out;
}

}  // namespace deepspeed::checkpoint
