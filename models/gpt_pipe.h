// The reference GPT (models/gpt.h) as a pipeline layer list: DeepSpeed's way of writing a model for
// PipelineModule. Layers: the embedding (token + position), one GPTBlock per block, the final
// LayerNorm, and the LM head, which with a tied head is a second occurrence of the embedding
// ("embed") computing x @ wte.weight^T. Each layer is initialised as GPT's init_weights initialises
// it. With GPTConfig::init_seed set, layer i draws from the generator seeded init_seed + i, as GPT(cfg)
// does: every stage count builds the same values as the unsplit GPT of the same config. Without it, the
// layers draw from the global generator (seeded per layer when PipelineModuleOptions::base_seed is set).
// With GPTConfig::tensor_parallel each layer is built and initialised whole, then sliced as GPT(cfg) slices itself
// (the embedding and an untied head vocabulary-parallel, the blocks split): a pipeline with a "model" axis of that
// group's size.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>

#include <vector>

#include "deepspeed/pipe/module.h"
#include "gpt.h"

namespace deepspeed::models {

// Token and position embeddings: tokens [batch, seq] (int64) -> [batch, seq, hidden].
class GPTEmbeddingImpl : public torch::nn::Module {
 public:
  explicit GPTEmbeddingImpl(const GPTConfig& cfg);
  at::Tensor forward(const at::Tensor& tokens);
  // The LM head through the token embedding's weight: [.., hidden] -> [.., vocab] (with tensor parallelism this
  // rank's slice of the vocabulary).
  at::Tensor head(const at::Tensor& x);
  // GPTConfig::tensor_parallel: the token embedding becomes vocabulary-parallel (sliced from the whole one).
  void split(const comm::ProcessGroup& group);

 private:
  GPTConfig cfg_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  tp::VocabParallelEmbedding tp_wte_{nullptr};
};
TORCH_MODULE(GPTEmbedding);

std::vector<pipe::LayerSpec> gpt_pipeline_layers(const GPTConfig& cfg);

// Mean next-token cross-entropy of logits [batch, seq, vocab] against targets [batch, seq].
at::Tensor gpt_pipeline_loss(const at::Tensor& logits, const at::Tensor& targets);
// The loss for `cfg`'s layers: gpt_pipeline_loss, or with GPTConfig::tensor_parallel the vocabulary-parallel
// cross-entropy of each rank's slice of the logits.
pipe::LossFn gpt_pipeline_loss_fn(const GPTConfig& cfg);

}  // namespace deepspeed::models
