// Python DeepSpeed's checkpoint tags in our layout (deepspeed_tag.h).
#include "checkpoint/deepspeed_tag.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "checkpoint/deepspeed_optimizer_state.h"
#include "checkpoint/partition_index.h"
#include "checkpoint/python_pickle.h"

namespace deepspeed::checkpoint {
namespace {

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;
using deepspeed_files::as_double;
using deepspeed_files::elastic_optimizer_entry;
using deepspeed_files::flat_fp32;
using deepspeed_files::need;
using deepspeed_files::need_list;
using deepspeed_files::optimizer_entry;
using deepspeed_files::step_of;

bool is_empty(const std::optional<c10::IValue>& v) {
  if (!v || v->isNone()) return true;
  if (v->isGenericDict()) return v->toGenericDict().empty();
  if (v->isList()) return v->toList().empty();
  return false;
}

std::string mapped(const CheckpointNameMap& map, const std::string& name) { return map ? map(name) : name; }

std::vector<int64_t> shape_of(const c10::IValue& v, const std::string& where) {
  std::vector<int64_t> shape;
  auto add = [&](const c10::IValue& x) {
    DS_CHECK_T(CheckpointError, x.isInt() && x.toInt() >= 0, where, " is not a shape");
    shape.push_back(x.toInt());
  };
  if (v.isTuple()) {
    for (const c10::IValue& x : v.toTupleRef().elements()) add(x);
  } else if (v.isList()) {
    for (const c10::IValue& x : v.toList()) add(x);
  } else {
    DS_CHECK_T(CheckpointError, false, where, " is a ", v.tagKind(), ", not a shape");
  }
  return shape;
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// One group's parameters, as the model file's param_shapes lists them: (checkpoint name, shape).
using GroupShapes = std::vector<std::pair<std::string, std::vector<int64_t>>>;

std::vector<GroupShapes> read_param_shapes(const c10::IValue& model, const std::string& file) {
  const std::string where = "checkpoint file " + file;
  std::vector<GroupShapes> out;
  for (const c10::IValue& group : need_list(model, "param_shapes", where)) {
    DS_CHECK_T(CheckpointError, group.isGenericDict(), where, ": param_shapes[", out.size(), "] is not a dict");
    out.emplace_back();
    for (const auto& e : group.toGenericDict()) {
      DS_CHECK_T(CheckpointError, e.key().isString(), where, ": param_shapes holds a non-string name");
      out.back().emplace_back(e.key().toStringRef(),
                              shape_of(e.value(), where + ": param_shapes '" + e.key().toStringRef() + "'"));
    }
  }
  return out;
}

// partition_count: an int (stage 3) or one per group (stages 1, 2, BF16_Optimizer), all equal here.
int64_t partition_count(const c10::IValue& osd, const std::string& where) {
  c10::IValue v = need(osd, "partition_count", where);
  if (v.isList() && !v.toList().empty()) v = v.toList().get(0);
  DS_CHECK_T(CheckpointError, v.isInt() && v.toInt() >= 1, where, ": partition_count is not a positive count");
  return v.toInt();
}

// The optim-state files of ranks 0..count-1 (DeepSpeed prefixes them bf16_ in bf16 runs).
std::string rank_optim_file(const std::string& dir, const std::string& tag, int rank, int mp_rank, FileSystem* fs) {
  const std::string plain = optim_states_path(dir, tag, rank, mp_rank);
  if (fs->file_exists(plain)) return plain;
  const std::string bf16 = tag_dir(dir, tag) + "/bf16_" + plain.substr(plain.find_last_of('/') + 1);
  DS_CHECK_T(CheckpointError, fs->file_exists(bf16), "checkpoint ", tag_dir(dir, tag), " has no optimizer file of rank ",
             rank, " (", plain, " is missing)");
  return bf16;
}

bool has_any_optim_file(const std::string& dir, const std::string& tag, int mp_rank, FileSystem* fs) {
  const std::string plain = optim_states_path(dir, tag, 0, mp_rank);
  return fs->file_exists(plain) ||
         fs->file_exists(tag_dir(dir, tag) + "/bf16_" + plain.substr(plain.find_last_of('/') + 1));
}

// Rank files are mapped and their records' CRC-32s checked as the loader copies from them (verify_tensor), as our
// own rank files are: every rank maps every rank file, and reads only what its own partition needs. The model file
// is read and checked whole (at stage 0 it holds the masters, which the translation copies).
const LoadOptions kMapped{/*mmap=*/true, nullptr, /*verify_checksums=*/false};

// Keys of DeepSpeed's model file that are not client state.
const std::set<std::string>& engine_keys() {
  static const std::set<std::string> keys = {
      "module", "buffer_names", "optimizer", "param_shapes", "frozen_param_shapes", "shared_params",
      "frozen_param_fragments", "lr_scheduler", "data_sampler", "random_ltd", "sparse_tensor_module_names",
      "skipped_steps", "global_steps", "global_samples", "dp_world_size", "mp_world_size", "ds_config", "ds_version",
      "checkpoint_parallel_dimensions", "universal_checkpoint_info"};
  return keys;
}

// The model file's keys our loader reads. Module tensors keep their (mapped) names; client state is every key the
// engine did not write (DeepSpeed merges it into the top level).
StateDict model_entries(const c10::IValue& m, const std::string& file, const CheckpointNameMap& map) {
  const std::string where = "checkpoint file " + file;
  DS_CHECK_T(CheckpointError, m.isGenericDict(), where, " holds a ", m.tagKind(), ", not a dict");
  DS_CHECK_T(CheckpointError, is_empty(dict_get(m, std::string("frozen_param_shapes"))), where,
             " holds frozen parameters (frozen_param_shapes), which this engine cannot restore");
  for (const char* key : {"data_sampler", "random_ltd"})
    DS_CHECK_T(CheckpointError, is_empty(dict_get(m, std::string(key))), where, " holds '", key,
               "' state (curriculum learning / random-LTD), which this engine cannot restore");
  StateDict out = make_state_dict();
  GenericDict module = make_any_dict();
  c10::IValue saved_module = need(m, "module", where);
  DS_CHECK_T(CheckpointError, saved_module.isGenericDict(), where, ": 'module' is not a dict (a pipeline checkpoint? "
             "its layer_XX-model_states.pt files are not supported)");
  for (const auto& e : saved_module.toGenericDict())
    if (e.key().isString() && e.value().isTensor()) module.insert(mapped(map, e.key().toStringRef()), e.value());
  out.insert(kModuleKey, module);
  std::vector<std::string> buffers;
  if (auto b = dict_get(m, std::string("buffer_names")); b && b->isList())
    for (const c10::IValue& n : b->toList())
      if (n.isString()) buffers.push_back(mapped(map, n.toStringRef()));
  out.insert(kBufferNamesKey, c10::List<std::string>(buffers));
  c10::IValue steps = need(m, "global_steps", where);
  DS_CHECK_T(CheckpointError, steps.isInt(), where, ": global_steps is not an int");
  out.insert("global_steps", steps.toInt());
  for (const char* key : {"global_samples", "skipped_steps"})
    if (auto v = dict_get(m, std::string(key)); v && v->isInt()) out.insert(key, v->toInt());
  if (auto cfg = dict_get(m, std::string("ds_config")))
    if (auto batch = dict_get(*cfg, std::string("train_batch_size")); batch && batch->isInt())
      out.insert("train_batch_size", batch->toInt());
  if (auto s = dict_get(m, std::string("lr_scheduler")); s && s->isGenericDict()) {
    GenericDict ours = make_any_dict();
    ours.insert(std::string("last_batch_iteration"),
                need(*s, "last_batch_iteration", where + ": lr_scheduler").toInt());
    out.insert("lr_scheduler", ours);
  }
  GenericDict client = make_any_dict();
  for (const auto& e : m.toGenericDict())
    if (e.key().isString() && !engine_keys().count(e.key().toStringRef())) client.insert(e.key(), e.value());
  out.insert("client_state", client);
  return out;
}

// DeepSpeed's loss scaler (a DynamicLossScaler object, or FP16_Optimizer's own keys) as our loss_scaler entry.
void add_loss_scaler(StateDict& model, const c10::IValue& scaler) {
  if (!scaler.isGenericDict()) return;
  std::optional<c10::IValue> scale = dict_get(scaler, std::string("cur_scale"));
  if (!scale) return;
  auto get_int = [&](const char* key, int64_t fallback) {
    std::optional<c10::IValue> v = dict_get(scaler, std::string(key));
    return v && v->isInt() ? v->toInt() : fallback;
  };
  GenericDict s = make_any_dict();
  s.insert(std::string("cur_scale"), scale->isTensor() ? scale->toTensor().item<double>() : as_double(*scale));
  s.insert(std::string("cur_iter"), get_int("cur_iter", 0));
  s.insert(std::string("last_overflow_iter"), get_int("last_overflow_iter", -1));
  s.insert(std::string("cur_hysteresis"), get_int("cur_hysteresis", get_int("delayed_shift", 1)));
  s.insert(std::string("skipped_steps"),
           model.contains("skipped_steps") ? model.at("skipped_steps").toInt() : int64_t{0});
  model.insert_or_assign("loss_scaler", s);
}

// Stage 0: the module's parameters in order (buffers and later aliases of a tied weight left out), as the
// optimizer's param groups enumerate them.
std::vector<std::pair<std::string, at::Tensor>> module_parameters(const StateDict& model) {
  std::set<std::string> buffers;
  for (const c10::IValue& n : model.at(kBufferNamesKey).toList()) buffers.insert(n.toStringRef());
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::set<const void*> seen;
  for (const auto& e : model.at(kModuleKey).toGenericDict()) {
    const std::string name = e.key().toStringRef();
    const at::Tensor t = e.value().toTensor();
    if (buffers.count(name) || !seen.insert(t.data_ptr()).second) continue;
    out.emplace_back(name, t);
  }
  return out;
}

// Parameter `index`'s per-element optimizer states (not the step; a 0-d parameter's states are 0-d too) from its
// torch state `s`, appended to per_state[name] at that index (earlier parameters without one are filled later).
void add_element_states(const std::optional<c10::IValue>& s, const at::Tensor& weight, size_t index,
                        const std::string& where, std::map<std::string, std::vector<at::Tensor>>& per_state) {
  if (!s || !s->isGenericDict()) return;
  for (const auto& e : s->toGenericDict()) {
    if (!e.key().isString() || e.key().toStringRef() == "step" || !e.value().isTensor() ||
        (e.value().toTensor().dim() == 0 && weight.dim() != 0))
      continue;
    at::Tensor t = flat_fp32(e.value(), where);
    DS_CHECK_T(CheckpointError, t.numel() == weight.numel(), where, " holds ", t.numel(), " elements, the parameter ",
               weight.numel());
    auto& list = per_state[e.key().toStringRef()];
    list.resize(index, at::Tensor());
    list.push_back(t);
  }
}

// Stage 0 with a per-parameter torch optimizer state: fp32 (`opt` is the torch optimizer's state_dict, the masters
// the module's weights) or bf16/fp16 through the unfused FP16_Optimizer (`fp32_groups` lists each group's fp32
// masters; `opt` is its base optimizer's state_dict).
StateDict stage0_per_param(const StateDict& model, const c10::IValue& opt, const std::optional<GenericList>& fp32_groups,
                           const std::string& file) {
  const std::string where = "checkpoint file " + file + ": optimizer";
  const auto params = module_parameters(model);
  GenericList groups = need_list(opt, "param_groups", where);
  c10::IValue states = need(opt, "state", where);
  std::vector<at::Tensor> flats;
  GenericList slices = make_any_list(), state_list = make_any_list(), param_groups = make_any_list();
  std::vector<std::string> names;
  int64_t step = -1;
  size_t next = 0;
  DS_CHECK_T(CheckpointError, !fp32_groups || fp32_groups->size() == groups.size(), where, ": fp32_groups has ",
             fp32_groups ? fp32_groups->size() : 0, " groups, the optimizer ", groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string gw = where + " param_groups[" + std::to_string(g) + "]";
    GenericList ids = need_list(groups.get(g), "params", gw);
    std::optional<GenericList> masters;
    if (fp32_groups) {
      DS_CHECK_T(CheckpointError, fp32_groups->get(g).isList() && fp32_groups->get(g).toList().size() == ids.size(),
                 where, ": fp32_groups[", g, "] does not hold one master per parameter of param_groups[", g, "]");
      masters = fp32_groups->get(g).toList();
    }
    std::vector<at::Tensor> pieces;
    std::map<std::string, std::vector<at::Tensor>> per_state;
    GenericList group_slices = make_any_list();
    int64_t offset = 0;
    for (const c10::IValue& id : ids) {
      DS_CHECK_T(CheckpointError, next < params.size(), gw, " lists more parameters than the module holds (",
                 params.size(), "): cannot tell which is which");
      const auto& [name, weight] = params[next++];
      if (masters) {
        at::Tensor master = flat_fp32(masters->get(pieces.size()), where + " fp32_groups master of '" + name + "'");
        DS_CHECK_T(CheckpointError, master.numel() == weight.numel(), where, ": the fp32 master of '", name, "' holds ",
                   master.numel(), " elements, the parameter ", weight.numel());
        pieces.push_back(master);
      } else {
        pieces.push_back(weight.to(at::kFloat).reshape({-1}));
      }
      group_slices.push_back(param_slice_entry(name, weight.sizes().vec(), 0, weight.numel(), offset));
      std::optional<c10::IValue> s = dict_get(states, id);
      step = std::max(step, step_of(s, groups.get(g)));
      add_element_states(s, weight, pieces.size() - 1, gw + " state of '" + name + "'", per_state);
      offset += weight.numel();
    }
    at::Tensor flat = pieces.empty() ? at::empty({0}, at::kFloat) : at::cat(pieces);
    GenericDict ours = make_any_dict();
    std::vector<std::string> group_names;
    for (auto& [name, list] : per_state) {
      list.resize(pieces.size(), at::Tensor());
      for (size_t i = 0; i < list.size(); ++i)
        if (!list[i].defined()) list[i] = at::zeros({pieces[i].numel()}, at::kFloat);  // no state yet
      ours.insert(name, at::cat(list));
      group_names.push_back(name);
    }
    if (g == 0) names = group_names;
    DS_CHECK_T(CheckpointError, group_names == names, gw, " holds other state tensors than param group 0");
    flats.push_back(flat);
    slices.push_back(group_slices);
    state_list.push_back(ours);
    GenericDict pg = make_any_dict();
    pg.insert(std::string("lr"), as_double(need(groups.get(g), "lr", gw)));
    param_groups.push_back(pg);
  }
  DS_CHECK_T(CheckpointError, next == params.size(), where, " lists ", next, " parameters, the module holds ",
             params.size(), ": cannot tell which is which");
  GenericDict o = make_any_dict();
  o.insert(std::string("type"), std::string());
  o.insert(std::string("step"), std::max<int64_t>(step, 0));
  o.insert(std::string("state_names"), c10::List<std::string>(names));
  o.insert(std::string("state"), state_list);
  o.insert(std::string("param_groups"), param_groups);
  return partition_rank_file(0, 1, flats, slices, o);
}

// Stage 0, bf16/fp16: FP16_Optimizer keeps one flat fp32 master per group, the module's parameters in order.
StateDict stage0_flat(StateDict& model, const c10::IValue& opt, const std::string& file) {
  const std::string where = "checkpoint file " + file + ": optimizer";
  const auto params = module_parameters(model);
  std::vector<at::Tensor> flats;
  GenericList slices = make_any_list();
  size_t next = 0;
  for (const c10::IValue& f : need_list(opt, "fp32_groups_flat", where)) {
    flats.push_back(flat_fp32(f, where + " fp32_groups_flat[" + std::to_string(flats.size()) + "]"));
    GenericList group_slices = make_any_list();
    int64_t offset = 0;
    while (offset < flats.back().numel()) {
      DS_CHECK_T(CheckpointError, next < params.size(), where, ": fp32_groups_flat holds more elements than the "
                 "module's parameters: cannot tell which is which");
      const auto& [name, weight] = params[next++];
      group_slices.push_back(param_slice_entry(name, weight.sizes().vec(), 0, weight.numel(), offset));
      offset += weight.numel();
    }
    DS_CHECK_T(CheckpointError, offset == flats.back().numel(), where, ": fp32_groups_flat[", flats.size() - 1,
               "] does not end on a parameter boundary");
    slices.push_back(group_slices);
  }
  DS_CHECK_T(CheckpointError, next == params.size(), where, ": fp32_groups_flat covers ", next, " of the module's ",
             params.size(), " parameters");
  add_loss_scaler(model, opt);
  return partition_rank_file(0, 1, flats, slices, optimizer_entry(need(opt, "optimizer_state_dict", where), flats, where));
}

// A rank's flat fp32 groups under `key`: as many as the model file's param_shapes lists.
std::vector<at::Tensor> flat_groups(const c10::IValue& osd, const char* key, size_t expected, const std::string& where) {
  std::vector<at::Tensor> flats;
  for (const c10::IValue& f : need_list(osd, key, where))
    flats.push_back(flat_fp32(f, where + " " + key + "[" + std::to_string(flats.size()) + "]"));
  DS_CHECK_T(CheckpointError, flats.size() == expected, where, ": ", key, " has ", flats.size(),
             " groups, the model file's param_shapes ", expected);
  return flats;
}

// Stages 1 and 2 (and BF16_Optimizer): each rank's partition and where each parameter fragment starts in it.
std::vector<StateDict> zero12_ranks(StateDict& model, const std::vector<GroupShapes>& shapes,
                                    const std::vector<std::string>& files, const std::vector<c10::IValue>& osds,
                                    const CheckpointNameMap& map) {
  std::vector<StateDict> out;
  std::map<std::string, int64_t> consumed;  // elements of each parameter taken by lower ranks
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string where = "checkpoint file " + files[r] + ": optimizer_state_dict";
    const c10::IValue& osd = osds[r];
    const std::vector<at::Tensor> flats = flat_groups(osd, "single_partition_of_fp32_groups", shapes.size(), where);
    GenericList mappings = need_list(osd, "param_slice_mappings", where);
    DS_CHECK_T(CheckpointError, mappings.size() == flats.size(), where, ": param_slice_mappings has ",
               mappings.size(), " groups, the fp32 partition ", flats.size());
    GenericList slices = make_any_list();
    for (size_t g = 0; g < flats.size(); ++g) {
      std::map<std::string, std::vector<int64_t>> group_shapes(shapes[g].begin(), shapes[g].end());
      GenericList group_slices = make_any_list();
      DS_CHECK_T(CheckpointError, mappings.get(g).isGenericDict(), where, ": param_slice_mappings[", g,
                 "] is not a dict");
      for (const auto& e : mappings.get(g).toGenericDict()) {
        const std::string name = e.key().toStringRef();
        const std::string sw = where + " param_slice_mappings '" + name + "'";
        auto shape = group_shapes.find(name);
        DS_CHECK_T(CheckpointError, shape != group_shapes.end(), sw, " is not in param_shapes[", g, "]");
        const int64_t numel = need(e.value(), "numel", sw).toInt(), start = need(e.value(), "start", sw).toInt();
        int64_t& begin = consumed[name];
        DS_CHECK_T(CheckpointError, numel >= 0 && begin + numel <= numel_of(shape->second), sw, ": ", numel,
                   " elements from ", begin, " overrun the parameter's ", numel_of(shape->second));
        group_slices.push_back(param_slice_entry(mapped(map, name), shape->second, begin, begin + numel, start));
        begin += numel;
      }
      slices.push_back(group_slices);
    }
    if (r == 0 && dict_get(osd, std::string("loss_scaler"))) add_loss_scaler(model, need(osd, "loss_scaler", where));
    // A torch state_dict, or a list of the groups' states (zero_optimization.elastic_checkpoint).
    const c10::IValue base = need(osd, "base_optimizer_state", where);
    DS_CHECK_T(CheckpointError, base.isGenericDict() || base.isList(), where, ": base_optimizer_state holds a value "
               "of kind ", base.tagKind(), ", neither a torch optimizer state_dict nor an elastic checkpoint's list of "
               "groups");
    out.push_back(partition_rank_file(static_cast<int64_t>(r), static_cast<int64_t>(files.size()), flats, slices,
                                      base.isList() ? elastic_optimizer_entry(osd, flats, where)
                                                    : optimizer_entry(base, flats, where + " base_optimizer_state")));
  }
  return out;
}

// Stage 3: in each sub-group, every parameter's ceil(numel / N) slice in turn.
std::vector<StateDict> zero3_ranks(StateDict& model, const std::vector<GroupShapes>& shapes,
                                   const std::vector<std::string>& files, const std::vector<c10::IValue>& osds,
                                   const CheckpointNameMap& map) {
  std::vector<StateDict> out;
  const int64_t n = static_cast<int64_t>(files.size());
  for (size_t r = 0; r < files.size(); ++r) {
    const std::string where = "checkpoint file " + files[r] + ": optimizer_state_dict";
    const c10::IValue& osd = osds[r];
    std::vector<at::Tensor> flats;
    for (const c10::IValue& f : need_list(osd, "fp32_flat_groups", where))
      flats.push_back(flat_fp32(f, where + " fp32_flat_groups[" + std::to_string(flats.size()) + "]"));
    // Each group's parameters fill its sub-groups in turn (a sub-group never spans two groups).
    std::vector<GenericList> per_flat;
    for (size_t i = 0; i < flats.size(); ++i) per_flat.push_back(make_any_list());
    size_t f = 0;
    int64_t cursor = 0;
    auto check_full = [&] {
      DS_CHECK_T(CheckpointError, f < flats.size() && cursor == flats[f].numel(), where, ": fp32_flat_groups[", f,
                 "] holds ", f < flats.size() ? flats[f].numel() : 0, " elements, param_shapes' partitions over ", n,
                 " ranks ", cursor);
    };
    for (size_t g = 0; g < shapes.size(); ++g) {
      if (g > 0) {
        check_full();
        ++f;
        cursor = 0;
      }
      for (const auto& [name, shape] : shapes[g]) {
        const int64_t numel = numel_of(shape), part = (numel + n - 1) / n;
        if (f < flats.size() && cursor == flats[f].numel() && cursor > 0) {
          ++f;
          cursor = 0;
        }
        DS_CHECK_T(CheckpointError, f < flats.size(), where, ": fp32_flat_groups has ", flats.size(),
                   " buffers, too few for param_shapes' partitions over ", n, " ranks");
        const int64_t begin = std::min<int64_t>(numel, static_cast<int64_t>(r) * part);
        const int64_t end = std::min(numel, begin + part);
        if (end > begin) per_flat[f].push_back(param_slice_entry(mapped(map, name), shape, begin, end, cursor));
        cursor += part;
      }
    }
    check_full();
    DS_CHECK_T(CheckpointError, f + 1 == flats.size(), where, ": fp32_flat_groups has ", flats.size(),
               " buffers, param_shapes' partitions fill ", f + 1);
    GenericList slices = make_any_list();
    for (const GenericList& l : per_flat) slices.push_back(l);
    if (r == 0 && dict_get(osd, std::string("loss_scaler"))) add_loss_scaler(model, need(osd, "loss_scaler", where));
    out.push_back(partition_rank_file(static_cast<int64_t>(r), n, flats, slices,
                            optimizer_entry(need(osd, "optimizer_state_dict", where), flats,
                                            where + " optimizer_state_dict")));
  }
  return out;
}

}  // namespace

bool is_python_deepspeed_tag(const std::string& dir, const std::string& tag, int mp_rank, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string model = model_states_path(dir, tag, mp_rank);
  if (!fs->file_exists(model)) return fs->file_exists(zero_model_states_path(dir, tag, 0, mp_rank));
  try {
    return !load_state(model, LoadOptions{/*mmap=*/true, nullptr, /*verify_checksums=*/false}).contains(kFormatKey);
  } catch (const CheckpointError&) {
    // torch's C++ unpickler refuses Python objects (torch.Size, DeepSpeed's classes); ours reads them.
    // A sound archive whose pickle torch cannot read is Python's: reading it names what is in the way (a class
    // neither reader knows). A damaged archive is left to the regular loader, which says how it is damaged.
    return is_torch_archive(model);
  }
}

StateDict read_model_states(const std::string& dir, const std::string& tag, const CheckpointNameMap& map,
                            int mp_rank, FileSystem* fs, std::string* file) {
  if (fs == nullptr) fs = default_file_system();
  *file = model_states_path(dir, tag, mp_rank);
  if (!is_python_deepspeed_tag(dir, tag, mp_rank, fs)) {
    StateDict ours = load_state(*file, LoadOptions{/*mmap=*/false, fs, /*verify_checksums=*/true});
    check_metadata(ours, *file);
    return ours;
  }
  if (!fs->file_exists(*file)) *file = zero_model_states_path(dir, tag, 0, mp_rank);
  return model_entries(load_python_torch_file(*file), *file, map);
}

ForeignTag read_python_deepspeed_tag(const std::string& dir, const std::string& tag, const CheckpointNameMap& map,
                                     int mp_rank, FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  ForeignTag out;
  const bool stage3 = !fs->file_exists(model_states_path(dir, tag, mp_rank));
  out.model_file = stage3 ? zero_model_states_path(dir, tag, 0, mp_rank) : model_states_path(dir, tag, mp_rank);
  const c10::IValue model = load_python_torch_file(out.model_file);
  out.model = model_entries(model, out.model_file, map);
  const std::string where = "checkpoint file " + out.model_file;
  if (!has_any_optim_file(dir, tag, mp_rank, fs)) {
    // Stage 0: everything is in the model file.
    DS_CHECK_T(CheckpointError, !stage3, "checkpoint ", tag_dir(dir, tag), " has no optimizer file of rank 0");
    const c10::IValue opt = need(model, "optimizer", where);
    DS_CHECK_T(CheckpointError, opt.isGenericDict(), where, " has no optimizer state ('optimizer' is ", opt.tagKind(),
               ")");
    out.files = {out.model_file};
    if (dict_get(opt, std::string("fp32_groups_flat"))) {  // FP16_Optimizer (fused)
      out.ranks.push_back(stage0_flat(out.model, opt, out.model_file));
    } else if (auto groups = dict_get(opt, std::string("fp32_groups"))) {  // FP16_Optimizer (unfused)
      DS_CHECK_T(CheckpointError, groups->isList(), where, ": optimizer fp32_groups is not a list");
      add_loss_scaler(out.model, opt);
      out.ranks.push_back(stage0_per_param(out.model, need(opt, "optimizer_state_dict", where + ": optimizer"),
                                           groups->toList(), out.model_file));
    } else {
      out.ranks.push_back(stage0_per_param(out.model, opt, std::nullopt, out.model_file));
    }
    return out;
  }
  const std::vector<GroupShapes> shapes = read_param_shapes(model, out.model_file);
  // Rank 0's file says how many ranks wrote; each of them must be there.
  out.files.push_back(rank_optim_file(dir, tag, 0, mp_rank, fs));
  std::vector<c10::IValue> osds;
  osds.push_back(need(load_python_torch_file(out.files[0], kMapped), "optimizer_state_dict",
                      "checkpoint file " + out.files[0]));
  const int64_t count = partition_count(osds[0], "checkpoint file " + out.files[0] + ": optimizer_state_dict");
  for (int r = 1; r < count; ++r) {
    out.files.push_back(rank_optim_file(dir, tag, r, mp_rank, fs));
    const std::string file = out.files.back();
    osds.push_back(need(load_python_torch_file(file, kMapped), "optimizer_state_dict", "checkpoint file " + file));
    const int64_t c = partition_count(osds.back(), "checkpoint file " + file + ": optimizer_state_dict");
    DS_CHECK_T(CheckpointError, c == count, "checkpoint file ", file, ": partition_count is ", c, ", rank 0's ", count);
  }
  const std::optional<c10::IValue> zero_stage = dict_get(osds[0], std::string("zero_stage"));
  const bool flat_per_param = dict_get(osds[0], std::string("fp32_flat_groups")).has_value();
  DS_CHECK_T(CheckpointError, stage3 == flat_per_param, where, ": a ", stage3 ? "stage-3" : "stage-1/2",
             " model file beside ", out.files[0], ", which holds ", flat_per_param ? "stage-3" : "stage-1/2",
             " partitions (zero_stage ", zero_stage ? *zero_stage : c10::IValue("?"), ")");
  out.ranks = stage3 ? zero3_ranks(out.model, shapes, out.files, osds, map)
                     : zero12_ranks(out.model, shapes, out.files, osds, map);
  return out;
}

PartitionIndex load_any_partition_index(const std::string& dir, const std::string& tag, FileSystem* fs,
                                        std::optional<ForeignTag>* translated) {
  translated->reset();
  if (!is_python_deepspeed_tag(dir, tag, 0, fs)) return load_partition_index(dir, tag, fs);
  *translated = read_python_deepspeed_tag(dir, tag, {}, 0, fs);
  return index_partitions(tag, (*translated)->files, (*translated)->ranks);
}

}  // namespace deepspeed::checkpoint
