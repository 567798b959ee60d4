// AutoTP (deepspeed/tp/auto_tp.h): place each layer by the policy, check every swap can take effect, then swap.
#include "deepspeed/tp/auto_tp.h"

#include <torch/nn/modules/batchnorm.h>
#include <torch/nn/modules/container/any.h>
#include <torch/nn/modules/container/moduledict.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <memory>
#include <regex>
#include <sstream>
#include <utility>

#include "deepspeed/error.h"
#include "deepspeed/tp/parallel_linear.h"

namespace deepspeed::tp {

Partition parse_partition(const std::string& name) {
  if (name == "column") return Partition::kColumn;
  if (name == "row") return Partition::kRow;
  if (name == "vocab") return Partition::kVocab;
  if (name == "skip") return Partition::kSkip;
  throw ConfigError(detail::str_cat("tensor_parallel: partition_type must be column, row, vocab or skip, got '", name,
                                    "'"));
}

namespace {

// "(^|\.)(a|b)\.weight$": a layer named a or b anywhere in the tree, DeepSpeed's pattern form.
std::string named(const std::string& alternatives) { return "(^|\\.)(" + alternatives + ")\\.weight$"; }

LayerSpec spec(std::string pattern, Partition p, int64_t fused = 1, bool gather = false) {
  return LayerSpec{{std::move(pattern)}, p, fused, gather};
}

const char* partition_name(Partition p) {
  switch (p) {
    case Partition::kColumn: return "column";
    case Partition::kRow: return "row";
    case Partition::kVocab: return "vocab";
    case Partition::kSkip: return "skip";
  }
  return "?";
}

bool is_whole_kind(const torch::nn::Module& m) {
  return dynamic_cast<const torch::nn::LayerNormImpl*>(&m) || dynamic_cast<const torch::nn::GroupNormImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&m) || dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&m) ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&m);
}

bool is_split_kind(const torch::nn::Module& m) {
  return dynamic_cast<const ColumnParallelLinearImpl*>(&m) || dynamic_cast<const RowParallelLinearImpl*>(&m) ||
         dynamic_cast<const VocabParallelEmbeddingImpl*>(&m);
}

struct Placement {
  std::string path;                      // in the model's tree
  std::shared_ptr<torch::nn::Module> layer;
  const LayerSpec* spec = nullptr;
};

const LayerSpec* find_spec(const AutoTpPolicy& policy, const std::string& path,
                           std::vector<std::regex>& compiled) {
  const std::string key = path + ".weight";
  size_t k = 0;
  for (const LayerSpec& s : policy.specs) {
    for (size_t i = 0; i < s.patterns.size(); ++i, ++k)
      if (std::regex_search(key, compiled[k])) return &s;
  }
  return nullptr;
}

std::string parent_of(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? "" : path.substr(0, dot);
}

std::string leaf_of(const std::string& path) {
  const auto dot = path.rfind('.');
  return dot == std::string::npos ? path : path.substr(dot + 1);
}

// The layer that replaces `p.layer`, sliced from it; collects what makes that impossible into `problems`.
std::shared_ptr<torch::nn::Module> make_split(const Placement& p, const comm::ProcessGroup& group,
                                              std::vector<std::string>& problems) {
  auto* linear = dynamic_cast<torch::nn::LinearImpl*>(p.layer.get());
  auto* embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(p.layer.get());
  const Partition part = p.spec->partition;
  try {
    if (linear != nullptr) {
      torch::nn::Linear full(std::static_pointer_cast<torch::nn::LinearImpl>(p.layer));
      if (part == Partition::kColumn || part == Partition::kVocab)
        return ColumnParallelLinear(full, group, p.spec->gather_output || part == Partition::kVocab,
                                    p.spec->fused_parts).ptr();
      if (part == Partition::kRow) return RowParallelLinear(full, group).ptr();
    } else if (embedding != nullptr && part == Partition::kVocab) {
      return VocabParallelEmbedding(embedding->weight, group).ptr();
    }
  } catch (const Error& e) {
    problems.push_back(p.path + ": " + e.what());
    return nullptr;
  }
  problems.push_back(p.path + " (" + p.layer->name() + "): a " + (linear ? "Linear" : "layer of this type") +
                     " cannot be split as \"" + partition_name(part) + "\"" +
                     (embedding ? " (an Embedding splits by vocabulary: \"vocab\", or stays whole: \"skip\")" : ""));
  return nullptr;
}

// References to `layer` besides auto_tp's own (`ours`) and its parent's: its parent's registry entry and, in a
// container, the container's slot. More than that is an alias the swap would not reach (a typed member).
bool swappable(const std::shared_ptr<torch::nn::Module>& layer, const torch::nn::Module& parent, long ours) {
  const bool container = dynamic_cast<const torch::nn::SequentialImpl*>(&parent) ||
                         dynamic_cast<const torch::nn::ModuleListImpl*>(&parent) ||
                         dynamic_cast<const torch::nn::ModuleDictImpl*>(&parent);
  return layer.use_count() <= ours + 1 + (container ? 1 : 0);
}

void swap_in(torch::nn::Module& parent, const std::string& name, const std::shared_ptr<torch::nn::Module>& old,
             const std::shared_ptr<torch::nn::Module>& fresh) {
  if (auto* seq = dynamic_cast<torch::nn::SequentialImpl*>(&parent)) {
    for (auto& slot : *seq) {
      if (slot.ptr() != old) continue;
      if (auto col = std::dynamic_pointer_cast<ColumnParallelLinearImpl>(fresh)) slot = torch::nn::AnyModule(col);
      else if (auto row = std::dynamic_pointer_cast<RowParallelLinearImpl>(fresh)) slot = torch::nn::AnyModule(row);
      else slot = torch::nn::AnyModule(std::dynamic_pointer_cast<VocabParallelEmbeddingImpl>(fresh));
    }
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(&parent)) {
    for (auto& slot : *list)
      if (slot == old) slot = fresh;
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(&parent)) {
    dict->update({{name, fresh}});  // replaces its slot and the registry entry
    return;
  }
  parent.replace_module(name, fresh);
}

}  // namespace

AutoTpPolicy AutoTpPolicy::defaults() {
  AutoTpPolicy p;
  // Fused q/k/v first: its name would not match the column list, but order states the intent.
  p.specs.push_back(spec(named("qkv|qkv_proj|query_key_value|Wqkv|c_attn"), Partition::kColumn, 3));
  p.specs.push_back(spec(named("q_proj|k_proj|v_proj|query|key|value|up_proj|gate_proj|gate_up_proj|w1|w3|fc1|fc|"
                               "c_fc|dense_h_to_4h|intermediate\\.dense"),
                         Partition::kColumn));
  p.specs.push_back(spec(named("o_proj|out_proj|proj|c_proj|down_proj|w2|fc2|fc_proj|dense_4h_to_h|dense"),
                         Partition::kRow));
  p.specs.push_back(spec(named("embed_tokens|wte|word_embeddings|tok_embeddings"), Partition::kVocab));
  p.specs.push_back(spec(named("lm_head|embed_out|output"), Partition::kVocab));
  p.specs.push_back(spec(named("wpe|position_embeddings|embed_positions|token_type_embeddings"), Partition::kSkip));
  return p;
}

AutoTpResult auto_tp(torch::nn::Module& model, const comm::ProcessGroup& group, const AutoTpPolicy& policy) {
  DS_CHECK(group.is_member(), "tp::auto_tp: this rank is not in the tensor-parallel group ", group.name());
  std::vector<std::regex> compiled;
  for (const LayerSpec& s : policy.specs) {
    for (const std::string& pattern : s.patterns) {
      try {
        compiled.emplace_back(pattern, std::regex::ECMAScript);
      } catch (const std::regex_error& e) {
        throw ConfigError(detail::str_cat("tensor_parallel: layer pattern '", pattern,
                                          "' is not a regular expression: ", e.what()));
      }
    }
  }
  auto modules = model.named_modules("", /*include_self=*/false);
  AutoTpResult result;
  std::vector<Placement> placements;
  std::vector<std::string> problems;
  DS_CHECK(!dynamic_cast<torch::nn::LinearImpl*>(&model) && !dynamic_cast<torch::nn::EmbeddingImpl*>(&model),
           "tp::auto_tp: the model itself is a single layer; wrap it in a module that calls it");
  for (auto& item : modules) {
    const std::string& path = item.key();
    const std::shared_ptr<torch::nn::Module>& m = item.value();
    if (m->named_parameters(/*recurse=*/false).is_empty()) continue;
    const LayerSpec* s = find_spec(policy, path, compiled);
    const bool linear = dynamic_cast<torch::nn::LinearImpl*>(m.get()) != nullptr;
    const bool embedding = dynamic_cast<torch::nn::EmbeddingImpl*>(m.get()) != nullptr;
    if (is_split_kind(*m)) {
      problems.push_back(path + " (" + m->name() + "): already split over a group");
    } else if (s != nullptr && s->partition == Partition::kSkip) {
      result.kept.push_back(path);
    } else if (linear || embedding) {
      if (s == nullptr && policy.keep_unmatched)
        result.kept.push_back(path);
      else if (s == nullptr)
        problems.push_back(path + " (" + std::string(linear ? "Linear" : "Embedding") +
                           "): no pattern places it; add a layer spec (column, row, vocab or skip)");
      else
        placements.push_back({path, m, s});
    } else if (is_whole_kind(*m) && s == nullptr) {
      result.kept.push_back(path);
    } else {
      problems.push_back(path + " (" + m->name() + "): " +
                         (s ? std::string("a layer of this type cannot be split as \"") + partition_name(s->partition) +
                                  "\""
                            : std::string("unknown layer type with parameters of its own; name it in a \"skip\" spec "
                                          "to keep it whole")));
    }
  }
  // Every swap must take effect: a layer also held by a typed member would keep running whole.
  for (const Placement& p : placements) {
    const std::string parent_path = parent_of(p.path);
    const torch::nn::Module& parent = parent_path.empty() ? model : *modules[parent_path];
    // Ours: the entry in `modules` and the copy in `placements`.
    if (!swappable(p.layer, parent, 2))
      problems.push_back(p.path + " (" + p.layer->name() + "): also held outside its parent's module tree (a typed "
                         "member such as `torch::nn::Linear fc_` of " + parent.name() + "), whose forward would keep "
                         "running the whole layer; call it through a Sequential, ModuleList or ModuleDict, or build "
                         "the model with deepspeed::tp layers");
  }
  std::vector<std::shared_ptr<torch::nn::Module>> fresh;
  for (const Placement& p : placements) fresh.push_back(make_split(p, group, problems));
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << "tp::auto_tp: " << problems.size() << " layer(s) cannot be placed over " << group.size()
        << " tensor-parallel ranks (nothing was changed):";
    for (const std::string& p : problems) msg << "\n  " << p;
    throw Error(msg.str());
  }
  for (size_t i = 0; i < placements.size(); ++i) {
    const Placement& p = placements[i];
    const std::string parent_path = parent_of(p.path);
    torch::nn::Module& parent = parent_path.empty() ? model : *modules[parent_path];
    swap_in(parent, leaf_of(p.path), p.layer, fresh[i]);
    const Partition part = p.spec->partition;
    (part == Partition::kRow ? result.row : part == Partition::kVocab ? result.vocab : result.column).push_back(p.path);
  }
  return result;
}

}  // namespace deepspeed::tp
