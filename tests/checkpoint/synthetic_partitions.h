// Synthetic ZeRO checkpoints written per the fp32 partition contract (include/deepspeed/checkpoint.h) by hand, not by
// the engine: five parameters in two flat groups, cut into any number of rank files. The consolidation, universal
// and load-plan tests read them back against the original tensors.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace synthetic_partitions {

namespace ckpt = deepspeed::checkpoint;

struct Original {
  std::string name;
  at::Tensor value;
  int group;
};

inline std::vector<Original> originals() {
  at::manual_seed(3);
  return {{"embed.weight", at::randn({7, 5}), 0},
          {"embed.bias", at::randn({13}), 0},
          {"blocks.0.attn.weight", at::randn({4, 4, 3}), 1},
          {"blocks.0.scale", at::randn({}), 1},
          {"blocks.0.ln.bias", at::randn({9}), 1}};
}

// Writes one rank file per partition: group g's flat fp32 buffer (params back to back, then `pad`
// zeros) is cut at cuts[g] (world_size + 1 increasing offsets). `drop` names a parameter whose
// last-rank fragment is left out.
// `adam`: the rank files also carry Adam's states (exp_avg = 2 x the weight, exp_avg_sq = 3 x its magnitude, at
// the same offsets) and the model file what an export to DeepSpeed's layout reads (param_shapes, config, counters);
// `dtype` is the model file's; `zero_extra` and `config_extra`: more keys of the saved config's zero_optimization
// and top level (JSON members, each followed by a comma).
inline void write_partitioned(const std::string& dir, const std::string& tag, int world_size,
                       const std::vector<std::vector<int64_t>>& cuts,
                       const std::string& drop = "", bool adam = false, const std::string& dtype = "fp32",
                       const std::string& zero_extra = "", const std::string& config_extra = "") {
  std::vector<Original> params = originals();
  for (int r = 0; r < world_size; ++r) {
    c10::List<at::Tensor> groups;
    c10::impl::GenericList slices(c10::AnyType::get());
    for (int g = 0; g < 2; ++g) {
      std::vector<at::Tensor> flat_parts;
      std::vector<std::pair<const Original*, int64_t>> offsets;  // param, offset in the flat group
      int64_t off = 0;
      for (const Original& p : params) {
        if (p.group != g) continue;
        offsets.emplace_back(&p, off);
        flat_parts.push_back(p.value.reshape({-1}));
        off += p.value.numel();
      }
      int64_t padded = cuts[g].back();
      flat_parts.push_back(at::zeros({padded - off}));
      at::Tensor flat = at::cat(flat_parts);
      int64_t lo = cuts[g][r], hi = cuts[g][r + 1];
      groups.push_back(flat.narrow(0, lo, hi - lo).clone());
      c10::impl::GenericList group_slices(c10::AnyType::get());
      for (const auto& [p, start] : offsets) {
        int64_t b = std::max(lo, start), e = std::min(hi, start + p->value.numel());
        if (b >= e) continue;
        if (p->name == drop && r == world_size - 1) continue;
        c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
        d.insert(std::string("name"), p->name);
        d.insert(std::string("shape"), c10::List<int64_t>(p->value.sizes()));
        d.insert(std::string("begin"), b - start);
        d.insert(std::string("end"), e - start);
        d.insert(std::string("offset"), b - lo);
        group_slices.push_back(d);
      }
      slices.push_back(group_slices);
    }
    ckpt::StateDict s = ckpt::make_state_dict();
    ckpt::stamp_metadata(s, "synthetic");
    s.insert(ckpt::kPartitionCountKey, static_cast<int64_t>(world_size));
    s.insert(ckpt::kDpRankKey, static_cast<int64_t>(r));
    s.insert(ckpt::kFp32FlatGroupsKey, groups);
    s.insert(ckpt::kParamSlicesKey, slices);
    if (adam) {
      c10::impl::GenericList states = ckpt::make_any_list(), param_groups = ckpt::make_any_list();
      for (const at::Tensor& g : groups) {
        c10::impl::GenericDict st = ckpt::make_any_dict();
        st.insert(std::string("exp_avg"), g * 2);
        st.insert(std::string("exp_avg_sq"), g.abs() * 3);
        states.push_back(st);
        c10::impl::GenericDict pg = ckpt::make_any_dict();
        pg.insert(std::string("lr"), 0.004);
        pg.insert(std::string("weight_decay"), param_groups.empty() ? 0.05 : 0.0);
        param_groups.push_back(pg);
      }
      c10::impl::GenericDict opt = ckpt::make_any_dict();
      opt.insert(std::string("type"), std::string("fused cpu adamw"));
      opt.insert(std::string("step"), int64_t{5});
      opt.insert(std::string("state_names"), c10::List<std::string>({"exp_avg", "exp_avg_sq"}));
      opt.insert(std::string("state"), states);
      opt.insert(std::string("param_groups"), param_groups);
      s.insert("optimizer_state_dict", opt);
    }
    ckpt::save_state(ckpt::optim_states_path(dir, tag, r), s);
  }
  ckpt::StateDict model = ckpt::make_state_dict();
  ckpt::StateDict module = ckpt::make_state_dict();
  module.insert("norm.running_mean", at::arange(3, at::kDouble));
  model.insert(ckpt::kModuleKey, module);
  model.insert(ckpt::kBufferNamesKey, c10::List<std::string>({"norm.running_mean"}));
  if (adam) {
    c10::impl::GenericList shapes = ckpt::make_any_list();
    for (int g = 0; g < 2; ++g) {
      c10::impl::GenericDict group = ckpt::make_any_dict();
      for (const Original& p : params)
        if (p.group == g) group.insert(p.name, c10::List<int64_t>(p.value.sizes()));
      shapes.push_back(group);
    }
    model.insert("param_shapes", shapes);
    model.insert("dtype", dtype);
    model.insert("zero_stage", int64_t{2});
    model.insert("dp_world_size", static_cast<int64_t>(world_size));
    model.insert("global_steps", int64_t{5});
    model.insert("global_samples", int64_t{40});
    model.insert("ds_config", std::string(R"({)" + config_extra + R"("optimizer": {"type": "AdamW", "params": {
        "lr": 0.01, "betas": [0.8, 0.99], "eps": 1e-7, "weight_decay": 0.05}}, "zero_optimization": {)" +
                                          zero_extra + R"("sub_group_size": 15}})"));
    c10::impl::GenericDict scheduler = ckpt::make_any_dict();
    scheduler.insert(std::string("last_batch_iteration"), int64_t{4});
    model.insert("lr_scheduler", scheduler);
    ckpt::StateDict client = ckpt::make_state_dict();
    client.insert("epoch", int64_t{3});
    model.insert("client_state", client);
  }
  ckpt::stamp_metadata(model, "synthetic");
  ckpt::save_state(ckpt::model_states_path(dir, tag), model);
  ckpt::write_latest(dir, tag);
}

}  // namespace synthetic_partitions
