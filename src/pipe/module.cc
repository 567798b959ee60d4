// PipelineModule, LayerSpec and TiedLayerSpec (include/deepspeed/pipe/module.h).
#include "deepspeed/pipe/module.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <set>

#include "deepspeed/checkpointing.h"
#include "deepspeed/comm.h"
#include "deepspeed/error.h"

namespace deepspeed::pipe {

LayerSpec::LayerSpec(std::string type_name, Builder build)
    : type_name_(std::move(type_name)), build_(std::move(build)) {
  DS_CHECK(static_cast<bool>(build_), "LayerSpec \"", type_name_, "\": no builder");
}

LayerSpec LayerSpec::function(std::string type_name, Function fn) {
  DS_CHECK(static_cast<bool>(fn), "LayerSpec::function \"", type_name, "\": no function");
  LayerSpec spec(std::move(type_name), [] { return torch::nn::AnyModule(); });
  spec.fn_ = std::move(fn);
  return spec;
}

torch::nn::AnyModule LayerSpec::build() const {
  DS_CHECK(!is_function(), "LayerSpec \"", type_name_, "\" is a function, not a module");
  torch::nn::AnyModule m = build_();
  DS_CHECK(!m.is_empty(), "LayerSpec \"", type_name_, "\": the builder returned no module");
  return m;
}

TiedLayerSpec::TiedLayerSpec(std::string key, std::string type_name, Builder build,
                             TiedForward forward_fn, std::vector<std::string> tied_weight_attr)
    : LayerSpec(std::move(type_name), std::move(build)) {
  DS_CHECK(!key.empty(), "TiedLayerSpec \"", type_name_, "\": empty key");
  tied_key_ = std::move(key);
  tied_forward_ = std::move(forward_fn);
  tied_weight_attr_ = std::move(tied_weight_attr);
}

PipelineModuleImpl::PipelineModuleImpl(PipelineModuleOptions options)
    : options_(std::move(options)) {
  if (!comm::is_initialized()) comm::init_distributed();
  const int world = comm::get_world_size();
  DS_CHECK((options_.num_stages > 0) != options_.topology.has_value(),
           "pipeline: give exactly one of num_stages and topology");
  if (options_.topology) {
    DS_CHECK(options_.topology->has_axis("pipe"), "pipeline: the topology ",
             options_.topology->to_string(), " has no \"pipe\" axis");
    DS_CHECK(options_.topology->world_size() == world, "pipeline: the topology ",
             options_.topology->to_string(), " has ", options_.topology->world_size(),
             " ranks but the world has ", world);
    topology_ = options_.topology;
  } else {
    DS_CHECK(world % options_.num_stages == 0, "pipeline: world size ", world,
             " is not divisible by num_stages ", options_.num_stages);
    topology_ = PipeDataParallelTopology(options_.num_stages, world / options_.num_stages);
  }
  build(topology_->get_dim("pipe"), topology_->get_coord(comm::get_rank()).get("pipe"));
  if (comm::get_rank() == 0) {
    std::printf("deepspeed: pipeline partition (%s) of %d layers over %d stages:\n",
                options_.partition_method.c_str(), num_layers(), num_stages_);
    for (int s = 0; s < num_stages_; ++s) {
      std::string types;
      for (int i = parts_[s]; i < parts_[s + 1]; ++i)
        types += (types.empty() ? "" : ", ") + specs_[static_cast<size_t>(i)].type_name();
      std::printf("  stage %d: layers %d-%d (%s)\n", s, parts_[s], parts_[s + 1] - 1,
                  types.c_str());
    }
    std::fflush(stdout);
  }
}

PipelineModuleImpl::PipelineModuleImpl(PipelineModuleOptions options, int num_stages, int stage_id)
    : options_(std::move(options)) {
  DS_CHECK(num_stages >= 1 && stage_id >= 0 && stage_id < num_stages, "pipeline: stage ", stage_id,
           " of ", num_stages, " stages does not exist");
  topology_ = PipeDataParallelTopology(num_stages, 1);
  build(num_stages, stage_id);
}

void PipelineModuleImpl::build(int num_stages, int stage_id) {
  specs_ = options_.layers;
  DS_CHECK(!specs_.empty(), "pipeline: no layers");
  num_stages_ = num_stages;
  stage_id_ = stage_id;
  parts_ = partition_layers(specs_, num_stages, options_.partition_method);
  // Tied keys: the index of each key's first occurrence in the whole list (its seed), and the
  // module type it builds.
  std::map<std::string, int> first_index;
  for (int i = 0; i < num_layers(); ++i) {
    const LayerSpec& spec = specs_[static_cast<size_t>(i)];
    const auto& key = spec.tied_key();
    if (!key) continue;
    if (!first_index.count(*key)) {
      first_index[*key] = i;
      continue;
    }
    // Every stage reduces the tie's gradients tensor by tensor: all occurrences must agree on what is shared.
    const LayerSpec& first = specs_[static_cast<size_t>(first_index[*key])];
    DS_CHECK(spec.type_name() == first.type_name() && spec.tied_weight_attr() == first.tied_weight_attr(),
             "pipeline: tied layers \"", *key, "\" at ", first_index[*key], " and ", i,
             " differ in type or tied_weight_attr; every TiedLayerSpec of a key must build the same module and share "
             "the same weights");
  }
  std::shared_ptr<torch::nn::Module> tied_holder;
  std::map<std::string, std::shared_ptr<torch::nn::Module>> tied;
  for (int i = local_start(); i < local_stop(); ++i) {
    const LayerSpec& spec = specs_[static_cast<size_t>(i)];
    LocalLayer layer;
    layer.index = i;
    if (spec.is_function()) {
      local_.push_back(std::move(layer));
      continue;
    }
    if (spec.tied_key()) {
      auto it = tied.find(*spec.tied_key());
      if (it == tied.end()) {
        if (options_.base_seed)
          at::manual_seed(*options_.base_seed +
                          static_cast<uint64_t>(first_index[*spec.tied_key()]));
        torch::nn::AnyModule built = spec.build();
        if (!tied_holder)
          tied_holder = register_module("tied_modules", std::make_shared<torch::nn::Module>());
        tied_holder->register_module(*spec.tied_key(), built.ptr());
        it = tied.emplace(*spec.tied_key(), built.ptr()).first;
        layer.module = std::move(built);
      } else {
        // A later occurrence on this stage: the same module; its own forward unless forward_fn says
        // otherwise.
        for (const auto& l : local_)
          if (l.tied == it->second) layer.module = l.module;
      }
      layer.tied = it->second;
      local_.push_back(std::move(layer));
      continue;
    }
    if (options_.base_seed) at::manual_seed(*options_.base_seed + static_cast<uint64_t>(i));
    layer.module = spec.build();
    register_module(std::to_string(i), layer.module.ptr());
    local_.push_back(std::move(layer));
  }
}

at::Tensor PipelineModuleImpl::forward(const at::Tensor& x) {
  auto run_layer = [this](LocalLayer& layer, const at::Tensor& in) -> at::Tensor {
    const LayerSpec& spec = specs_[static_cast<size_t>(layer.index)];
    if (spec.is_function()) return spec.fn()(in);
    if (layer.tied && spec.tied_forward()) return spec.tied_forward()(*layer.tied, in);
    return layer.module.forward<at::Tensor>(in);
  };
  const int interval = options_.activation_checkpoint_interval;
  at::Tensor h = x;
  if (interval <= 0 || !is_training()) {
    for (auto& layer : local_) h = run_layer(layer, h);
    return h;
  }
  for (size_t start = 0; start < local_.size(); start += static_cast<size_t>(interval)) {
    const size_t stop = std::min(local_.size(), start + static_cast<size_t>(interval));
    // By value: backward calls the segment again after this frame (and `run_layer` with it) is gone.
    h = checkpointing::checkpoint(
        [this, run_layer, start, stop](const at::Tensor& in) {
          at::Tensor y = in;
          for (size_t i = start; i < stop; ++i) y = run_layer(local_[i], y);
          return y;
        },
        h);
  }
  return h;
}

void PipelineModuleImpl::set_activation_checkpoint_interval(int interval) {
  DS_CHECK(interval >= 0, "pipeline: activation_checkpoint_interval must be >= 0, got ", interval);
  options_.activation_checkpoint_interval = interval;
}

at::Tensor PipelineModuleImpl::loss(const at::Tensor& output, const at::Tensor& labels) const {
  DS_CHECK(static_cast<bool>(options_.loss_fn),
           "pipeline: no loss_fn in the PipelineModuleOptions");
  return options_.loss_fn(output, labels);
}

std::shared_ptr<torch::nn::Module> PipelineModuleImpl::layer(int index) const {
  DS_CHECK(index >= local_start() && index < local_stop(), "pipeline: layer ", index,
           " is not on stage ", stage_id_, " (layers ", local_start(), "-", local_stop() - 1, ")");
  const LocalLayer& l = local_[static_cast<size_t>(index - local_start())];
  if (l.tied || l.module.is_empty()) return nullptr;
  return l.module.ptr();
}

std::vector<std::string> PipelineModuleImpl::tied_keys() const {
  std::set<std::string> keys;
  for (const auto& l : local_) {
    const auto& key = specs_[static_cast<size_t>(l.index)].tied_key();
    if (key) keys.insert(*key);
  }
  return {keys.begin(), keys.end()};
}

std::vector<int> PipelineModuleImpl::tied_stages(const std::string& key) const {
  std::vector<int> stages;
  for (int s = 0; s < num_stages_; ++s)
    for (int i = parts_[s]; i < parts_[s + 1]; ++i) {
      const auto& k = specs_[static_cast<size_t>(i)].tied_key();
      if (k && *k == key) {
        stages.push_back(s);
        break;
      }
    }
  return stages;
}

std::vector<at::Tensor> PipelineModuleImpl::tied_parameters(const std::string& key) const {
  std::shared_ptr<torch::nn::Module> module;
  const LayerSpec* spec = nullptr;
  for (const auto& l : local_) {
    const LayerSpec& s = specs_[static_cast<size_t>(l.index)];
    if (s.tied_key() && *s.tied_key() == key) {
      module = l.tied;
      spec = &s;
      break;
    }
  }
  DS_CHECK(module != nullptr, "pipeline: stage ", stage_id_, " holds no tied module \"", key, "\"");
  auto params = module->named_parameters(/*recurse=*/true);
  std::vector<at::Tensor> out;
  for (const std::string& attr : spec->tied_weight_attr()) {
    const at::Tensor* p = params.find(attr);
    DS_CHECK(p != nullptr, "pipeline: tied module \"", key, "\" has no parameter \"", attr,
             "\" (tied_weight_attr)");
    out.push_back(*p);
  }
  return out;
}

}  // namespace deepspeed::pipe
