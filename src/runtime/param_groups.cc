#include "runtime/param_groups.h"

#include <unordered_map>
#include <unordered_set>

#include "deepspeed/error.h"
#include "moe/expert_params.h"

namespace deepspeed::runtime {

std::vector<zero::FlatGroup> make_param_groups(torch::nn::Module& module, std::vector<ParamGroup> given) {
  std::vector<zero::FlatGroup> groups;
  if (given.empty()) {
    zero::FlatGroup g;
    std::unordered_set<const void*> seen;  // tied weights appear once
    for (const auto& p : module.parameters(/*recurse=*/true))
      if (p.requires_grad() && seen.insert(p.unsafeGetTensorImpl()).second) g.params.push_back(p);
    DS_CHECK(!g.params.empty(), "initialize: the model has no parameters that require a gradient");
    groups.push_back(std::move(g));
    return groups;
  }
  for (auto& pg : given) {
    zero::FlatGroup g;
    g.params = std::move(pg.params);
    g.lr = pg.lr;
    g.weight_decay = pg.weight_decay;
    groups.push_back(std::move(g));
  }
  return groups;
}

void split_expert_groups(torch::nn::Module& module, std::vector<zero::FlatGroup>& groups) {
  std::vector<moe::ExpertParams> experts = moe::find_expert_params(module);
  if (experts.empty()) return;
  std::unordered_map<const void*, size_t> which;  // parameter -> entry of `experts`
  for (size_t e = 0; e < experts.size(); ++e)
    for (const auto& p : experts[e].params) which[p.unsafeGetTensorImpl()] = e;
  std::vector<zero::FlatGroup> dense, expert;
  for (auto& g : groups) {
    std::vector<zero::FlatGroup> split(experts.size());
    zero::FlatGroup rest;
    for (auto& p : g.params) {
      auto it = which.find(p.unsafeGetTensorImpl());
      (it == which.end() ? rest : split[it->second]).params.push_back(p);
    }
    for (size_t e = 0; e < split.size(); ++e) {
      if (split[e].params.empty()) continue;
      split[e].group = experts[e].group;
      split[e].lr = g.lr;
      split[e].weight_decay = g.weight_decay;
      expert.push_back(std::move(split[e]));
    }
    if (rest.params.empty()) continue;
    rest.lr = g.lr;
    rest.weight_decay = g.weight_decay;
    dense.push_back(std::move(rest));
  }
  groups = std::move(dense);
  for (auto& g : expert) groups.push_back(std::move(g));
}

}  // namespace deepspeed::runtime
