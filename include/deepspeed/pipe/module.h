// PipelineModule: a model written as a flat list of layers that a pipeline cuts into stages.
//
// DeepSpeed's PipelineModule, LayerSpec and TiedLayerSpec. The user lists the model's layers as
// specs (a type name and a builder) instead of built modules, so each process builds only the
// layers of its own stage: a model too large for one process can still be described whole on every
// process. The list is cut into `num_stages` contiguous parts by `partition_method` (the same on
// every rank, computed from the specs alone), and the stage's module runs its part's layers in
// order.
//
// Tied layers (TiedLayerSpec with the same key, e.g. the token embedding and the LM head that
// reuses its weight) are built once per stage that uses the key and registered under
// `tied_modules.<key>`; the pipeline engine makes their initial values equal (from the lowest stage
// using the key) and all-reduces their gradients among those stages, so the copies stay identical.
//
// Parameter names follow DeepSpeed: a layer's parameters are `<global layer index>.<name>` (e.g.
// "3.attn.qkv.weight"), a tied module's `tied_modules.<key>.<name>`.
//
// Thread-safety: as torch::nn::Module (none beyond it).
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/pipe/topology.h"

namespace deepspeed::pipe {

// One layer of the list, built on demand. A layer takes one tensor and returns one tensor.
class LayerSpec {
 public:
  using Builder = std::function<torch::nn::AnyModule()>;
  using Function = std::function<at::Tensor(const at::Tensor&)>;

  // `type_name` is what partition_method "type:<regex>" matches (DeepSpeed matches the class name).
  LayerSpec(std::string type_name, Builder build);

  // A module layer built as M(args...) (M is a module holder such as torch::nn::Linear, or an Impl
  // class, which AnyModule copies). The arguments are captured by value.
  template <typename M, typename... Args>
  static LayerSpec of(std::string type_name, Args... args) {
    return LayerSpec(std::move(type_name), [args...] { return torch::nn::AnyModule(M(args...)); });
  }
  // A parameter-free function between layers (DeepSpeed accepts plain callables in the list), e.g.
  // a reshape. It is never built into a module and has no parameters.
  static LayerSpec function(std::string type_name, Function fn);

  const std::string& type_name() const { return type_name_; }
  bool is_function() const { return static_cast<bool>(fn_); }
  const Function& fn() const { return fn_; }
  // Builds the module (a module layer only).
  torch::nn::AnyModule build() const;

  // Set by TiedLayerSpec.
  const std::optional<std::string>& tied_key() const { return tied_key_; }
  using TiedForward = std::function<at::Tensor(torch::nn::Module&, const at::Tensor&)>;
  // How a tied layer runs: forward_fn(module, x), or the module's own forward when unset.
  const TiedForward& tied_forward() const { return tied_forward_; }
  // Names of the tied module's parameters that are shared (DeepSpeed's tied_weight_attr).
  const std::vector<std::string>& tied_weight_attr() const { return tied_weight_attr_; }

 protected:
  std::string type_name_;
  Builder build_;
  Function fn_;
  std::optional<std::string> tied_key_;
  TiedForward tied_forward_;
  std::vector<std::string> tied_weight_attr_;
};

// A layer whose module is shared with every other TiedLayerSpec of the same `key` (all of them must
// build the same module type). Each occurrence may run it differently through `forward_fn`, e.g.
// the LM head as `x.matmul(embedding.weight.t())`. Only the parameters named in `tied_weight_attr`
// are synchronised across stages (DeepSpeed's default: "weight").
class TiedLayerSpec : public LayerSpec {
 public:
  TiedLayerSpec(std::string key, std::string type_name, Builder build,
                TiedForward forward_fn = nullptr,
                std::vector<std::string> tied_weight_attr = {"weight"});
};

using LossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& labels)>;

struct PipelineModuleOptions {
  std::vector<LayerSpec> layers;
  // Exactly one of the two: a stage count (then the topology is
  // PipeDataParallelTopology(num_stages, world_size / num_stages)), or a topology with a "pipe"
  // axis.
  int num_stages = 0;
  std::optional<ProcessTopology> topology;
  // Loss of the last stage's output against the micro-batch's labels; required for training.
  LossFn loss_fn;
  // "parameters" (balance parameter counts; DeepSpeed's default), "uniform" (balance layer counts),
  // "type:<regex>" (balance the layers whose type name matches, case-insensitive), or explicit
  // boundaries "0,3,7,10" (num_stages + 1 ascending layer indices from 0 to the layer count).
  std::string partition_method = "parameters";
  // Layers run under deepspeed::checkpointing::checkpoint in groups of this many (0: off).
  int activation_checkpoint_interval = 0;
  // DeepSpeed's seed_layers/base_seed: when set, layer i is built right after seeding the generator
  // with base_seed + i, so a layer's initial values do not depend on which stage builds it.
  std::optional<uint64_t> base_seed;
};

// Layer boundaries of a partition: stage s runs layers [parts[s], parts[s + 1]).
using Partition = std::vector<int>;

// DeepSpeed's partition_uniform: num_items split into num_parts contiguous parts whose sizes differ
// by at most one, the larger parts first.
Partition partition_uniform(int num_items, int num_parts);
// Contiguous parts that minimise the heaviest part's total weight (DeepSpeed's partition_balanced).
// Among optimal splits the earlier parts take as many items as the optimum allows (10 equal weights
// in 3 parts: 0,4,8,10). Every part is non-empty when there are at least num_parts items.
Partition partition_balanced(const std::vector<double>& weights, int num_parts);
// The partition `method` gives `layers` for `num_stages` stages. Throws deepspeed::Error for an
// unknown method, a regex that matches no layer, bad explicit boundaries, or fewer layers than
// stages. "parameters" builds each module layer once, one at a time, to count its parameters.
Partition partition_layers(const std::vector<LayerSpec>& layers, int num_stages,
                           const std::string& method);

class PipelineModuleImpl : public torch::nn::Module {
 public:
  // This process's stage of the pipeline: the topology from the options and the stage from
  // deepspeed::comm's global rank (starting the world group if needed). Throws deepspeed::Error
  // when the world size is not a multiple of num_stages, or the topology's size is not the world
  // size.
  explicit PipelineModuleImpl(PipelineModuleOptions options);
  // Stage `stage_id` of a `num_stages`-stage split, without asking deepspeed::comm: for references
  // and tests (num_stages 1 builds the whole model in one process).
  PipelineModuleImpl(PipelineModuleOptions options, int num_stages, int stage_id);

  // This stage's layers in order, with activation checkpointing every
  // activation_checkpoint_interval layers while training.
  at::Tensor forward(const at::Tensor& x);
  // options().loss_fn(output, labels); throws when no loss_fn was given.
  at::Tensor loss(const at::Tensor& output, const at::Tensor& labels) const;

  int num_stages() const { return num_stages_; }
  int stage_id() const { return stage_id_; }
  // The topology (num_stages x world/num_stages when built from a stage count; for the second
  // constructor, num_stages x 1).
  const ProcessTopology& topology() const { return *topology_; }
  const Partition& parts() const { return parts_; }
  int num_layers() const { return static_cast<int>(specs_.size()); }
  // The global layer index range of this stage.
  int local_start() const { return parts_[stage_id_]; }
  int local_stop() const { return parts_[stage_id_ + 1]; }
  // This stage's module of global layer `index` (nullptr for a function layer or a tied layer);
  // throws for an index outside this stage.
  std::shared_ptr<torch::nn::Module> layer(int index) const;
  // Keys of the tied modules this stage uses, sorted.
  std::vector<std::string> tied_keys() const;
  // The stages that use tied `key`, ascending (computed from the specs: the same on every rank).
  std::vector<int> tied_stages(const std::string& key) const;
  // This stage's copy of the tied module's shared parameters (tied_weight_attr), in attr order.
  std::vector<at::Tensor> tied_parameters(const std::string& key) const;
  const PipelineModuleOptions& options() const { return options_; }
  // The config's pipeline.activation_checkpoint_interval, when set, overrides the module's (as in DeepSpeed).
  void set_activation_checkpoint_interval(int interval);

 private:
  void build(int num_stages, int stage_id);

  PipelineModuleOptions options_;
  std::vector<LayerSpec> specs_;
  std::optional<ProcessTopology> topology_;
  int num_stages_ = 1;
  int stage_id_ = 0;
  Partition parts_;
  // One entry per local layer: the built module (null for functions), or the tied key.
  struct LocalLayer {
    int index = 0;
    torch::nn::AnyModule module;
    std::shared_ptr<torch::nn::Module> tied;  // the shared module for a tied layer
  };
  std::vector<LocalLayer> local_;
};
TORCH_MODULE(PipelineModule);

}  // namespace deepspeed::pipe
