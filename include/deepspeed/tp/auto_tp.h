// AutoTP: split a model written for one device over a tensor-parallel group by swapping its torch::nn::Linear and
// torch::nn::Embedding submodules for the layers of parallel_linear.h, sliced from their full weights.
//
// A policy names, by patterns on parameter names as DeepSpeed's `tensor_parallel.partition_config.layer_specs` does
// (e.g. ".*\\.q_proj\\.weight$"), which layers are column-parallel (attention q/k/v, MLP up/gate), row-parallel
// (attention output, MLP down), vocabulary-parallel (token embeddings) or kept whole ("skip": position embeddings).
// AutoTpPolicy::defaults() knows the names of the common transformer layouts (GPT-2, Llama, BERT, Falcon, ...).
//
// What a C++ model must allow: LibTorch calls a submodule through whatever holds it, so a layer can be swapped only
// where its parent calls it through the module tree: a torch::nn::Sequential, ModuleList or ModuleDict, or a parent
// that looks its children up by name. A layer also held by a typed member of its parent (`torch::nn::Linear fc_`)
// would still run whole after the swap; auto_tp names every such layer in its error instead of swapping anything
// (build such a model with deepspeed::tp layers directly, as models/gpt.h does). An attention whose q/k/v are split
// must take its head count from its input's width (heads/T per rank), as Hugging Face's models do.
//
// Errors (deepspeed::Error, nothing swapped): a Linear or Embedding no pattern places, a layer type the policy cannot
// split (a Conv, a custom module holding its own parameters) unless a "skip" pattern names it, a split the layer
// type has no form for (an Embedding as row-parallel), sizes that do not divide by the group size, and the typed
// holders above; all of them listed in one message.
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::tp {

enum class Partition {
  kColumn,  // output features split (Linear); the layer's input gradient is all-reduced in backward
  kRow,     // input features split (Linear); the output all-reduced in forward
  kVocab,   // rows split (Embedding: the vocabulary); a Linear LM head becomes column-parallel with gathered output
  kSkip,    // kept whole on every rank
};
// "column", "row", "vocab", "skip" (DeepSpeed's partition_type names, plus vocab); anything else is an error naming it.
Partition parse_partition(const std::string& name);

struct LayerSpec {
  std::vector<std::string> patterns;  // ECMAScript regexes searched in "<module path>.weight"
  Partition partition = Partition::kColumn;
  // Column: the output is this many equal blocks fused in one layer (q, k and v: 3), each split over the group
  // (DeepSpeed's "shape": [k, -1] with partition_dim 0).
  int64_t fused_parts = 1;
  bool gather_output = false;  // column: all-gather the output features (every rank gets the whole output)
};

struct AutoTpPolicy {
  std::vector<LayerSpec> specs;  // the first spec with a matching pattern places a layer
  // A Linear or Embedding no spec names: kept whole (DeepSpeed's strict_mode false) instead of an error.
  bool keep_unmatched = false;
  static AutoTpPolicy defaults();
};

// What auto_tp did, by module path.
struct AutoTpResult {
  std::vector<std::string> column, row, vocab, kept;
};

// Swaps the layers of `model`'s tree as `policy` places them, over `group` (this rank must be a member). Not
// collective: every rank of the group slices the same full weights (build the model from the same seed on each).
AutoTpResult auto_tp(torch::nn::Module& model, const comm::ProcessGroup& group,
                     const AutoTpPolicy& policy = AutoTpPolicy::defaults());

}  // namespace deepspeed::tp
