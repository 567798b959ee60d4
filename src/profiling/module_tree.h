// The module tree the flops profiler charges operators to: every module of a root in pre-order,
// with its path, short type name, own arguments (from pretty_print), parameter count, and where to
// find it from a module pointer (a ModuleScope) or a parameter (an operator's input).
//
// Thread-safety: built once per start_profile, then read by the profiling thread only.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace deepspeed::profiling::detail {

struct ModuleNode {
  std::string name;  // dotted path; "" for the root
  std::string key;   // the last path component (what the parent registered it as)
  std::string type;  // "Linear", "GPTBlock"
  std::string args;  // what pretty_print shows inside its parentheses ("in_features=64, ...") or ""
  int depth = 0;
  int parent = -1;
  int end = 0;  // one past its last descendant: the subtree is [index, end)
  std::vector<int> children;
  int64_t params = 0;  // its parameters and its descendants' (each tensor once)
  // What was charged to this module itself (not its descendants).
  int64_t flops = 0;
  int64_t macs = 0;
  double seconds = 0;
};

class ModuleTree {
 public:
  // `numel`: a parameter's element count (null: numel()), for partitioned parameters.
  explicit ModuleTree(const torch::nn::Module& root,
                      const std::function<int64_t(const at::Tensor&)>& numel = nullptr);

  const std::vector<ModuleNode>& nodes() const { return nodes_; }
  std::vector<ModuleNode>& nodes() { return nodes_; }
  // The node of `module` (a ZeRO-3 unit's wrapped module maps to its unit), or -1.
  int find_module(const torch::nn::Module* module) const;
  // The node that registered `t` (or the tensor `t` is a view of) as a parameter, or -1.
  int find_param_owner(const at::Tensor& t) const;
  bool contains(int ancestor, int node) const {
    return node >= ancestor && node < nodes_[ancestor].end;
  }
  // Totals over the subtree of `node`: its own charges plus its descendants'.
  int64_t subtree_flops(int node) const;
  int64_t subtree_macs(int node) const;
  double subtree_seconds(int node) const;

 private:
  void add(const torch::nn::Module& module, const std::string& name, const std::string& key,
           int depth, int parent);

  std::function<int64_t(const at::Tensor&)> numel_;
  std::vector<ModuleNode> nodes_;
  std::unordered_map<const torch::nn::Module*, int> by_module_;
  std::unordered_map<const c10::TensorImpl*, int> by_param_;
};

// "torch::nn::LinearImpl" -> "Linear"; templates keep their short argument ("ShardedImpl<a::BImpl>"
// -> "Sharded<B>").
std::string short_type_name(const std::string& name);

}  // namespace deepspeed::profiling::detail
