#include "moe/expert_params.h"

#include <map>

#include "deepspeed/moe/layer.h"

namespace deepspeed::moe {

namespace {

// Calls fn(prefix, experts, layer index) for every Experts module, in module order.
template <typename Fn>
void for_each_experts(torch::nn::Module& model, const Fn& fn) {
  int64_t layer = 0;
  for (const auto& item : model.named_modules()) {
    auto* experts = dynamic_cast<ExpertsImpl*>(item.value().get());
    if (experts != nullptr) fn(item.key(), *experts, layer++);
  }
}

// "<local>.<rest>" -> (local, "<rest>")
std::pair<int64_t, std::string> split_local(const std::string& name) {
  const size_t dot = name.find('.');
  return {std::stoll(name.substr(0, dot)), dot == std::string::npos ? "" : name.substr(dot)};
}

}  // namespace

ExpertNames expert_names(torch::nn::Module& model) {
  ExpertNames out;
  for_each_experts(model, [&](const std::string& prefix, ExpertsImpl& experts, int64_t) {
    const std::string base = (prefix.empty() ? "" : prefix + ".") + "deepspeed_experts.";
    const int64_t total = experts.num_local_experts() * experts.ep_size();
    for (const auto& p : experts.deepspeed_experts->named_parameters(/*recurse=*/true)) {
      auto [local, rest] = split_local(p.key());
      out.global[p.value().unsafeGetTensorImpl()] =
          base + std::to_string(experts.first_expert() + local) + rest;
      // Every expert has the same structure: local expert 0's names stand for all of them.
      if (local == 0)
        for (int64_t e = 0; e < total; ++e) out.all.push_back(base + std::to_string(e) + rest);
    }
  });
  return out;
}

std::vector<LocalExpert> local_experts(torch::nn::Module& model) {
  std::vector<LocalExpert> out;
  const ExpertNames names = expert_names(model);
  for_each_experts(model, [&](const std::string&, ExpertsImpl& experts, int64_t layer) {
    for (int64_t i = 0; i < experts.num_local_experts(); ++i) {
      LocalExpert e;
      e.layer = layer;
      e.expert = experts.first_expert() + i;
      e.writer = expert_groups(experts.ep_size()).expert_data_parallel.rank() == 0;
      for (const auto& p :
           experts.deepspeed_experts->ptr(static_cast<size_t>(i))->parameters(/*recurse=*/true))
        e.params.emplace_back(names.global.at(p.unsafeGetTensorImpl()), p);
      out.push_back(std::move(e));
    }
  });
  return out;
}

std::vector<ExpertParams> find_expert_params(torch::nn::Module& model) {
  std::map<int, ExpertParams> by_ep;
  for (const auto& m : model.modules(/*include_self=*/true)) {
    auto* experts = dynamic_cast<ExpertsImpl*>(m.get());
    if (experts == nullptr || experts->ep_size() == 1) continue;
    const ExpertGroups& groups = expert_groups(experts->ep_size());
    ExpertParams& entry = by_ep[experts->ep_size()];
    entry.group = groups.expert_data_parallel;
    for (const auto& p : experts->parameters(/*recurse=*/true))
      if (p.requires_grad()) entry.params.push_back(p);
  }
  std::vector<ExpertParams> out;
  for (auto& [ep, entry] : by_ep)
    if (!entry.params.empty()) out.push_back(std::move(entry));
  return out;
}

}  // namespace deepspeed::moe
