#include "runtime/param_groups.h"

#include <torch/nn/modules/embedding.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "deepspeed/error.h"
#include "moe/expert_params.h"
#include "zero/stage3/construction_shard.h"

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

void split_muon_groups(const std::shared_ptr<torch::nn::Module>& module, std::vector<zero::FlatGroup>& groups) {
  std::unordered_map<const void*, bool> is_muon;  // parameter -> Newton-Schulz updates it
  const auto partitioned = zero::construction_shapes(module);
  for (const auto& named : module->named_modules()) {
    const bool embedding = dynamic_cast<const torch::nn::EmbeddingImpl*>(named.value().get()) != nullptr;
    for (const auto& p : named.value()->named_parameters(/*recurse=*/false)) {
      std::string name = named.key().empty() ? p.key() : named.key() + "." + p.key();
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      const bool by_name = name.find("embed") == std::string::npos && name.find("lm_head") == std::string::npos;
      const auto whole = partitioned.find(p.value().unsafeGetTensorImpl());
      const size_t dims = whole != partitioned.end() ? whole->second.size() : static_cast<size_t>(p.value().dim());
      is_muon[p.value().unsafeGetTensorImpl()] = by_name && !embedding && dims >= 2;
    }
  }
  std::vector<zero::FlatGroup> split;
  for (auto& g : groups) {
    zero::FlatGroup halves[2];  // Muon's, then Adam's
    for (auto& p : g.params) {
      auto it = is_muon.find(p.unsafeGetTensorImpl());
      halves[it != is_muon.end() && it->second ? 0 : 1].params.push_back(p);
    }
    for (int h = 0; h < 2; ++h) {
      if (halves[h].params.empty()) continue;
      halves[h].use_muon = h == 0;
      halves[h].lr = g.lr;
      halves[h].weight_decay = g.weight_decay;
      halves[h].group = g.group;
      split.push_back(std::move(halves[h]));
    }
  }
  groups = std::move(split);
}

}  // namespace deepspeed::runtime
