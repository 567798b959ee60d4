#include "profiling/module_tree.h"

#include <sstream>
#include <unordered_set>

#include "deepspeed/zero.h"

namespace deepspeed::profiling::detail {
namespace {

std::string strip_impl(std::string s) {
  const size_t colon = s.rfind("::");
  if (colon != std::string::npos) s = s.substr(colon + 2);
  if (s.size() > 4 && s.compare(s.size() - 4, 4, "Impl") == 0) s.resize(s.size() - 4);
  return s;
}

// The text inside the outermost parentheses of what pretty_print writes, e.g. Linear's
// "in_features=64, out_features=192, bias=true"; "" for modules that print only their name.
std::string pretty_args(const torch::nn::Module& module) {
  std::ostringstream os;
  module.pretty_print(os);
  const std::string s = os.str();
  const size_t open = s.find('(');
  const size_t close = s.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close <= open) return "";
  return s.substr(open + 1, close - open - 1);
}

}  // namespace

std::string short_type_name(const std::string& name) {
  const size_t lt = name.find('<');
  if (lt == std::string::npos || name.back() != '>') return strip_impl(name);
  return strip_impl(name.substr(0, lt)) + "<" +
         short_type_name(name.substr(lt + 1, name.size() - lt - 2)) + ">";
}

ModuleTree::ModuleTree(const torch::nn::Module& root,
                       const std::function<int64_t(const at::Tensor&)>& numel) {
  numel_ = numel;
  add(root, "", "", 0, -1);
}

void ModuleTree::add(const torch::nn::Module& raw, const std::string& name, const std::string& key,
                     int depth, int parent) {
  const int index = static_cast<int>(nodes_.size());
  nodes_.emplace_back();
  {
    ModuleNode& node = nodes_.back();
    node.name = name;
    node.key = key;
    node.depth = depth;
    node.parent = parent;
    node.type = short_type_name(raw.name());
    node.args = pretty_args(raw);
    std::unordered_set<const c10::TensorImpl*> seen;
    for (const auto& p : raw.parameters(/*recurse=*/true))
      if (seen.insert(p.unsafeGetTensorImpl()).second)
        node.params += numel_ ? numel_(p) : p.numel();
  }
  by_module_.emplace(&raw, index);
  if (const auto* unit = dynamic_cast<const zero::UnitBase*>(&raw)) {
    // A ZeRO-3 unit adopts its wrapped module's children; the wrapped module's own forward (and
    // ModuleScope) is the unit's.
    if (auto inner = unit->wrapped()) {
      by_module_.emplace(inner.get(), index);
      nodes_[index].type = short_type_name(inner->name());
    }
  }
  for (const auto& item : raw.named_parameters(/*recurse=*/false))
    by_param_.emplace(item.value().unsafeGetTensorImpl(), index);
  for (const auto& child : raw.named_children()) {
    const std::string child_name = name.empty() ? child.key() : name + "." + child.key();
    const int child_index = static_cast<int>(nodes_.size());
    nodes_[index].children.push_back(child_index);
    add(*child.value(), child_name, child.key(), depth + 1, index);
  }
  nodes_[index].end = static_cast<int>(nodes_.size());
}

int ModuleTree::find_module(const torch::nn::Module* module) const {
  auto it = by_module_.find(module);
  return it == by_module_.end() ? -1 : it->second;
}

int ModuleTree::find_param_owner(const at::Tensor& t) const {
  auto it = by_param_.find(t.unsafeGetTensorImpl());
  if (it != by_param_.end()) return it->second;
  if (!t.is_view()) return -1;
  it = by_param_.find(t._base().unsafeGetTensorImpl());
  return it == by_param_.end() ? -1 : it->second;
}

int64_t ModuleTree::subtree_flops(int node) const {
  int64_t sum = 0;
  for (int i = node; i < nodes_[node].end; ++i) sum += nodes_[i].flops;
  return sum;
}

int64_t ModuleTree::subtree_macs(int node) const {
  int64_t sum = 0;
  for (int i = node; i < nodes_[node].end; ++i) sum += nodes_[i].macs;
  return sum;
}

double ModuleTree::subtree_seconds(int node) const {
  double sum = 0;
  for (int i = node; i < nodes_[node].end; ++i) sum += nodes_[i].seconds;
  return sum;
}

}  // namespace deepspeed::profiling::detail
