#include "moe/expert_params.h"

#include <map>

#include "deepspeed/moe/layer.h"

namespace deepspeed::moe {

std::vector<ExpertParams> find_expert_params(torch::nn::Module& model) {
  std::map<int, ExpertParams> by_ep;
  for (const auto& m : model.modules(/*include_self=*/true)) {
    auto* experts = dynamic_cast<ExpertsImpl*>(m.get());
    if (experts == nullptr || experts->ep_size() == 1) continue;
    const ExpertGroups& groups = expert_groups(experts->ep_size());
    ExpertParams& entry = by_ep[experts->ep_size()];
    entry.name = groups.name;
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
