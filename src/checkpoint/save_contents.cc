#include "checkpoint/save_contents.h"

#include <ATen/ATen.h>

#include <cstring>

#include "checkpoint/partition_index.h"

namespace deepspeed::checkpoint {

namespace {

// The optimizer_state_dict of a rank file: type, step, state names, each group's states (empty where this rank
// does not write the group) and hyperparameters, a client optimizer's archive.
c10::impl::GenericDict optimizer_dict(const RankFileContents& c, const std::vector<bool>& writes) {
  c10::impl::GenericDict opt = make_any_dict();
  if (!c.optimizer) return opt;
  const RankFileContents::Optimizer& o = *c.optimizer;
  const at::Tensor empty = at::empty({0}, at::kFloat);
  opt.insert(std::string("type"), o.type);
  opt.insert(std::string("step"), o.step);
  opt.insert(std::string("state_names"), c10::List<std::string>(o.state_names));
  c10::impl::GenericList states = make_any_list();
  c10::impl::GenericList param_groups = make_any_list();
  for (size_t g = 0; g < c.masters.size(); ++g) {
    c10::impl::GenericDict s = make_any_dict();
    for (size_t k = 0; k < o.state_names.size(); ++k)
      s.insert(o.state_names[k], writes[g] ? c.states.at(g).at(k) : empty);
    states.push_back(s);
    c10::impl::GenericDict pg = make_any_dict();
    pg.insert(std::string("lr"), o.lrs.at(g));
    if (o.momenta.at(g)) pg.insert(std::string("momentum"), *o.momenta[g]);
    if (o.weight_decays.at(g)) pg.insert(std::string("weight_decay"), *o.weight_decays[g]);
    param_groups.push_back(pg);
  }
  opt.insert(std::string("state"), states);
  opt.insert(std::string("param_groups"), param_groups);
  if (!o.archive.empty() && (c.config->zero.stage >= 1 || c.rank == 0)) {
    at::Tensor bytes = at::empty({static_cast<int64_t>(o.archive.size())}, at::kByte);
    std::memcpy(bytes.data_ptr(), o.archive.data(), o.archive.size());
    opt.insert(std::string("client_optimizer_archive"), bytes);
  }
  return opt;
}

}  // namespace

StateDict rank_file(const std::string& run_id, const RankFileContents& c) {
  StateDict state = make_state_dict();
  stamp_metadata(state, run_id);
  const bool partitioned = c.config->zero.stage >= 1;
  std::vector<bool> writes;
  for (size_t g = 0; g < c.masters.size(); ++g) writes.push_back(partitioned || c.first_copy.at(g));
  state.insert(kPartitionCountKey, static_cast<int64_t>(c.world_size));
  state.insert(kDpRankKey, static_cast<int64_t>(c.rank));
  state.insert("zero_stage", static_cast<int64_t>(c.config->zero.stage));
  const at::Tensor empty = at::empty({0}, at::kFloat);
  c10::List<at::Tensor> flat;
  for (size_t g = 0; g < c.masters.size(); ++g) flat.push_back(writes[g] ? c.masters[g] : empty);
  state.insert(kFp32FlatGroupsKey, flat);
  // One list each: c10 lists are shared handles, so filling the vector with copies of one would give every group
  // the same list.
  std::vector<c10::impl::GenericList> per_group;
  for (size_t g = 0; g < c.masters.size(); ++g) per_group.push_back(make_any_list());
  for (const auto& f : c.fragments)
    if (writes[f.group])
      per_group[f.group].push_back(param_slice_entry(c.names[f.group][f.index], f.shape, f.begin, f.end, f.offset));
  c10::impl::GenericList slices = make_any_list();
  for (auto& l : per_group) slices.push_back(l);
  state.insert(kParamSlicesKey, slices);
  state.insert("optimizer_state_dict", optimizer_dict(c, writes));
  state.insert("rng_state", c.rng);
  return state;
}

StateDict model_file(const std::string& run_id, const ModelFileContents& c) {
  StateDict state = make_state_dict();
  stamp_metadata(state, run_id);
  // The module as torch's state_dict names it.
  StateDict module = make_state_dict();
  for (const auto& item : c.params) module.insert(item.key(), item.value());
  std::vector<std::string> buffer_names;
  for (const auto& [name, buffer] : c.buffers) {
    module.insert(name, buffer);
    buffer_names.push_back(name);
  }
  state.insert(kModuleKey, module);
  state.insert(kBufferNamesKey, c10::List<std::string>(buffer_names));
  c10::impl::GenericList param_shapes = make_any_list();
  for (size_t g = 0; g < c.names.size(); ++g) {
    c10::impl::GenericDict group = make_any_dict();
    for (size_t i = 0; i < c.names[g].size(); ++i) group.insert(c.names[g][i], c10::List<int64_t>(c.shapes[g][i]));
    param_shapes.push_back(group);
  }
  state.insert("param_shapes", param_shapes);
  state.insert("global_steps", c.global_steps);
  state.insert("global_samples", c.global_samples);
  // Not in DeepSpeed's file: lets a resume at another global batch say so (load_plan.h: saved_batch).
  state.insert("train_batch_size", c.train_batch_size);
  state.insert("micro_steps", c.micro_steps);
  state.insert("skipped_steps", c.skipped_steps);
  state.insert("dp_world_size", c.dp_world_size);
  state.insert("mp_world_size", c.tensor_parallel_size);
  if (c.tensor_parallel_size > 1) {
    c10::impl::GenericDict layout = make_any_dict();
    for (const auto& [name, split] : c.tensor_parallel_layout)
      layout.insert(name, c10::List<int64_t>({split.first, split.second}));
    state.insert(std::string(kTensorParallelLayoutKey), layout);
  }
  state.insert("zero_stage", static_cast<int64_t>(c.config->zero.stage));
  state.insert("dtype", c.dtype);
  state.insert("ds_config", c.config_json);
  for (const auto& [key, value] : c.sections) state.insert(key, value);
  state.insert("client_state", c.client_state);
  return state;
}

}  // namespace deepspeed::checkpoint
