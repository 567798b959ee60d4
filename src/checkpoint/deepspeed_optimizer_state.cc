// DeepSpeed's optimizer states as our optimizer_state_dict entry (deepspeed_optimizer_state.h).
#include "checkpoint/deepspeed_optimizer_state.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <optional>

#include "checkpoint/python_pickle.h"

namespace deepspeed::checkpoint::deepspeed_files {
namespace {

using GenericDict = c10::impl::GenericDict;
using GenericList = c10::impl::GenericList;

// A step count: a 0-d tensor or a number; -1 for none.
int64_t step_value(const std::optional<c10::IValue>& step) {
  if (!step || step->isNone()) return -1;
  if (step->isTensor()) return static_cast<int64_t>(step->toTensor().item<double>());
  if (step->isInt() || step->isDouble()) return static_cast<int64_t>(as_double(*step));
  return -1;
}

// One flat buffer's per-element optimizer state (exp_avg, ...) cut to the buffer's length (DeepSpeed pads them); the
// names it holds go to `names`.
GenericDict flat_state(const std::optional<c10::IValue>& s, const at::Tensor& flat, const std::string& where,
                       std::vector<std::string>* names) {
  GenericDict ours = make_any_dict();
  if (s && s->isGenericDict())
    for (const auto& e : s->toGenericDict()) {
      if (!e.key().isString() || !e.value().isTensor() || e.value().toTensor().dim() == 0) continue;
      const std::string name = e.key().toStringRef();
      at::Tensor t = flat_fp32(e.value(), where + " state '" + name + "'");
      DS_CHECK_T(CheckpointError, t.numel() >= flat.numel(), where, " state '", name, "' holds ", t.numel(),
                 " elements, its fp32 partition ", flat.numel());
      ours.insert(name, t.narrow(0, 0, flat.numel()));
      names->push_back(name);
    }
  return ours;
}

// Our optimizer_state_dict entry from its parts; an empty param_groups leaves the learning rates to the schedule.
c10::IValue our_optimizer(const std::vector<std::string>& names, int64_t step, const GenericList& states,
                          const GenericList& param_groups) {
  GenericDict opt = make_any_dict();
  opt.insert(std::string("type"), std::string());  // DeepSpeed's files do not say; the state names must match
  opt.insert(std::string("step"), std::max<int64_t>(step, 0));
  opt.insert(std::string("state_names"), c10::List<std::string>(names));
  opt.insert(std::string("state"), states);
  opt.insert(std::string("param_groups"), param_groups);
  return opt;
}

}  // namespace

double as_double(const c10::IValue& v) { return v.isDouble() ? v.toDouble() : static_cast<double>(v.toInt()); }

c10::IValue need(const c10::IValue& d, const std::string& key, const std::string& where) {
  DS_CHECK_T(CheckpointError, d.isGenericDict(), where, " is a ", d.tagKind(), ", not a dict");
  std::optional<c10::IValue> v = dict_get(d, key);
  DS_CHECK_T(CheckpointError, v.has_value(), where, " has no '", key, "'");
  return *v;
}

GenericList need_list(const c10::IValue& d, const std::string& key, const std::string& where) {
  c10::IValue v = need(d, key, where);
  DS_CHECK_T(CheckpointError, v.isList(), where, ": '", key, "' is a ", v.tagKind(), ", not a list");
  return v.toList();
}

at::Tensor flat_fp32(const c10::IValue& v, const std::string& where) {
  DS_CHECK_T(CheckpointError, v.isTensor(), where, " is a ", v.tagKind(), ", not a tensor");
  at::Tensor t = v.toTensor();
  DS_CHECK_T(CheckpointError, t.scalar_type() == at::kFloat, where, " is ", t.scalar_type(), ", not float32");
  return t.reshape({-1});
}

int64_t step_of(const std::optional<c10::IValue>& state, const c10::IValue& param_group) {
  std::optional<c10::IValue> step = state ? dict_get(*state, c10::IValue(std::string("step"))) : std::nullopt;
  if (!step) step = dict_get(param_group, c10::IValue(std::string("step")));
  return step_value(step);
}

c10::IValue optimizer_entry(const c10::IValue& base, const std::vector<at::Tensor>& flats, const std::string& where) {
  DS_CHECK_T(CheckpointError, base.isGenericDict(), where, " is a ", base.tagKind(),
             ", not a torch optimizer state_dict");
  GenericList groups = need_list(base, "param_groups", where);
  c10::IValue states = need(base, "state", where);
  std::vector<std::string> names;
  GenericList state_list = make_any_list(), param_groups = make_any_list();
  int64_t step = -1;
  size_t f = 0;  // the flat buffer the next parameter of the param groups is
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string gw = where + " param_groups[" + std::to_string(g) + "]";
    for (const c10::IValue& id : need_list(groups.get(g), "params", gw)) {
      DS_CHECK_T(CheckpointError, f < flats.size(), where, ": its param groups list more parameters than the ",
                 flats.size(), " flat fp32 buffers");
      std::optional<c10::IValue> s = dict_get(states, id);
      std::vector<std::string> group_names;
      state_list.push_back(flat_state(s, flats[f], gw, &group_names));
      if (f == 0) names = group_names;
      DS_CHECK_T(CheckpointError, group_names == names, gw, " holds other state tensors than the first buffer's");
      step = std::max(step, step_of(s, groups.get(g)));
      GenericDict pg = make_any_dict();
      pg.insert(std::string("lr"), as_double(need(groups.get(g), "lr", gw)));
      param_groups.push_back(pg);
      ++f;
    }
  }
  DS_CHECK_T(CheckpointError, f == flats.size(), where, "'s param groups hold ", f, " parameters, the fp32 partition ",
             flats.size(), " flat buffers");
  return our_optimizer(names, step, state_list, param_groups);
}

c10::IValue elastic_optimizer_entry(const c10::IValue& osd, const std::vector<at::Tensor>& flats,
                                    const std::string& where) {
  const std::string bw = where + " base_optimizer_state";
  GenericList groups = need(osd, "base_optimizer_state", where).toList();
  DS_CHECK_T(CheckpointError, groups.size() == flats.size(), bw, " (elastic) lists ", groups.size(),
             " groups, single_partition_of_fp32_groups ", flats.size());
  std::vector<std::string> names;
  GenericList state_list = make_any_list();
  int64_t step = -1;
  for (size_t g = 0; g < groups.size(); ++g) {
    const std::string gw = bw + "[" + std::to_string(g) + "]";
    DS_CHECK_T(CheckpointError, groups.get(g).isGenericDict(), gw, " is a ", groups.get(g).tagKind(), ", not a dict");
    std::vector<std::string> group_names;
    state_list.push_back(flat_state(groups.get(g), flats[g], gw, &group_names));
    if (g == 0) names = group_names;
    DS_CHECK_T(CheckpointError, group_names == names, gw, " holds other state tensors than the first group's");
    step = std::max(step, step_value(dict_get(groups.get(g), c10::IValue(std::string("step")))));
  }
  step = std::max(step, step_value(dict_get(osd, c10::IValue(std::string("base_optimizer_state_step")))));
  return our_optimizer(names, step, state_list, make_any_list());
}

}  // namespace deepspeed::checkpoint::deepspeed_files
