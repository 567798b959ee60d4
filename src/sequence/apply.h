// sequence_parallel_size (Ulysses) as a module transform, applied when the engine is built, by runtime::make_layout
// after tensor parallelism (docs/architecture.md: the transforms' order). The model's DistributedAttention layers must
// be built over groups of P ranks (deepspeed::sequence::sequence_parallel_groups); initialize checks them against the
// config. To everything but attention the P ranks of a group are data-parallel replicas holding other tokens of the
// same samples, so the engine keeps the whole world as its data-parallel world (gradients averaged over every rank: the
// mean over all tokens of the global batch when each rank's loss is the mean over its tokens, ZeRO partitions over
// every rank) and counts the global batch over world / P ranks, as DeepSpeed's seq_data_parallel_group does.
#pragma once

#include <torch/nn/module.h>

#include "deepspeed/config.h"

namespace deepspeed::sequence {

// The ranks the model's DistributedAttention layers split sequences over (0: it has none). Throws ConfigError when
// they use groups of different sizes.
int model_degree(const torch::nn::Module& module);

// The ranks splitting each sequence (1 without sequence parallelism); forms the groups the layers use.
int apply(const Config& config);

}  // namespace deepspeed::sequence
