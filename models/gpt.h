// The reference GPT-2-style decoder used by the examples, tests and benchmarks: token + position embeddings, N
// pre-LayerNorm blocks of causal self-attention and MLP, a final LayerNorm and an LM head tied to the token
// embedding (or untied, to match the parameter count of other frameworks' references).
//
// Only the public LibTorch API is used here, as a user's model would. Dropout defaults to 0 so runs of different
// parallel layouts are comparable number for number.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/models/llama.h"
#include "deepspeed/sequence/layer.h"
#include "deepspeed/tp/parallel_linear.h"
#include "deepspeed/zero.h"

namespace deepspeed::models {

// The GPT-MoE variant (DeepSpeed's Megatron-DeepSpeed GPT-MoE): blocks 1, 3, 5, ... replace their MLP by a
// deepspeed::moe::MoE layer of experts shaped like that MLP, and the loss adds aux_loss_coef x the layers'
// load-balancing losses.
struct GPTMoEConfig {
  // Experts per MoE block: one count for all, or one per MoE block (PR-MoE's pyramid, e.g. {4, 8}). Empty: dense.
  std::vector<int64_t> num_experts;
  int64_t ep_size = 1;
  int64_t top_k = 1;
  double capacity_factor = 1.0;
  double eval_capacity_factor = 1.0;
  int64_t min_capacity = 4;
  bool use_residual = false;  // Residual MoE (PR-MoE)
  bool drop_tokens = true;
  bool use_rts = true;
  bool top2_2nd_expert_sampling = true;
  std::string noisy_gate_policy = "None";
  double aux_loss_coef = 0.01;
  // Experts are initialised from their own generator, seeded by (seed, block, expert id), so the same experts come
  // out whichever ep_size splits them over ranks.
  uint64_t seed = 1234;
  bool enabled() const { return !num_experts.empty(); }
};

struct GPTConfig {
  int64_t vocab_size = 256;  // byte-level tokens by default
  int64_t seq_len = 128;     // context length (position embeddings)
  int64_t layers = 4;
  int64_t hidden = 128;
  int64_t heads = 4;
  double dropout = 0.0;
  bool tied_head = true;  // LM head shares the token embedding's weight
  // Biases in the Linear layers, as GPT-2 has. Without them no parameter has a structurally zero gradient (the
  // attention's key bias does: softmax ignores a constant added to every key), which exact comparisons need.
  bool bias = true;
  // Each block is a ZeRO-3 unit (deepspeed::zero::shard): at stage 3 its parameters are gathered only while it runs;
  // inside a zero::Init scope each block is partitioned as soon as it is built. A pass-through at stages 0-2. With an
  // untied head the token embedding and the head are units too.
  bool shard_blocks = false;
  // When set, each layer draws its initial values from its own generator, seeded with init_seed + the layer's index
  // in the pipeline layer list (gpt_pipe.h: 0 the embeddings, 1..layers the blocks, layers + 2 an untied head), as
  // DeepSpeed's seed_layers does: the GPT and its pipeline split at any stage count then start from the same values.
  // Unset: the global generator, in parameter order (the values then depend on what drew from it before).
  std::optional<uint64_t> init_seed;
  GPTMoEConfig moe;
  // Tensor parallelism (Megatron's layout) over this group when set: the model is built whole, initialised as
  // without it, then each block's q/k/v and MLP up layers become column-parallel (heads and MLP width split over the
  // group), its attention output and MLP down row-parallel, the token embedding (and an untied head)
  // vocabulary-parallel, and the loss the vocabulary-parallel cross-entropy. Needs heads, 4 x hidden and vocab_size
  // divisible by the group size, no MoE, no shard_blocks and dropout 0 (dropout inside the split layers would need a
  // per-rank random stream). Build it over deepspeed::tp::tensor_parallel_groups(T).tensor_parallel and train with
  // tensor_parallel.autotp_size T.
  deepspeed::comm::ProcessGroup tensor_parallel;
  // Ulysses sequence parallelism over this group when set: forward takes this rank's part of each sequence (P equal
  // consecutive parts in group-rank order, so rank r's tokens sit at positions r*t .. (r+1)*t - 1) and the attention
  // exchanges it for whole sequences of heads / P heads (deepspeed::sequence::DistributedAttention); the loss is the
  // mean over the whole sequences' counted positions (targets not -100), the same on every rank of the group
  // (deepspeed/sequence/loss.h). Weights are whole. Needs heads divisible by the group size, dropout 0, no tensor
  // parallelism and no MoE. Build it over deepspeed::sequence::sequence_parallel_groups(P).sequence_parallel and
  // train with sequence_parallel_size P.
  deepspeed::comm::ProcessGroup sequence_parallel;
  // Sequence tiling, ALST's memory half (deepspeed/sequence/tiling.h): each dense block's MLP runs
  // `tiled_mlp_tokens` positions at a time, the head and loss `tiled_loss_tokens` at a time, so no [seq, 4 x hidden]
  // or [seq, vocab] tensor exists beyond one tile's. 0: untiled. Not with tensor parallelism; the tiled loss not with
  // an untied head that is a ZeRO-3 unit (shard_blocks).
  int64_t tiled_mlp_tokens = 0;
  int64_t tiled_loss_tokens = 0;
  // Number of MoE blocks (every other block, starting with block 1).
  int64_t num_moe_blocks() const { return moe.enabled() ? layers / 2 : 0; }
  // Experts of the i-th MoE block.
  int64_t experts_of(int64_t moe_block) const;
  // Number of parameters this configuration creates (tied weights counted once).
  int64_t num_parameters() const;
};

// Causal multi-head self-attention over [batch, seq, hidden].
class CausalSelfAttentionImpl : public torch::nn::Module {
 public:
  explicit CausalSelfAttentionImpl(const GPTConfig& cfg);
  at::Tensor forward(const at::Tensor& x);
  // Incremental decoding (GPTImpl::decode): x's keys and values written to keys / values [batch, heads, capacity,
  // head_dim] at [start, start + seq), then x attends to [0, start + seq) where `mask` allows (undefined: causally).
  at::Tensor forward_cached(const at::Tensor& x, const at::Tensor& mask, at::Tensor& keys, at::Tensor& values,
                            int64_t start);
  // Replaces q/k/v by their column-parallel and the output projection by its row-parallel form over `group`.
  void split(const deepspeed::comm::ProcessGroup& group);

 private:
  // Causal attention of q, k, v [batch, heads, seq, head_dim] over whole sequences.
  at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);

  int64_t heads_;
  double dropout_;
  torch::nn::Linear qkv_{nullptr}, proj_{nullptr};
  deepspeed::tp::ColumnParallelLinear tp_qkv_{nullptr};  // after split(): heads / T heads' q, k and v
  deepspeed::tp::RowParallelLinear tp_proj_{nullptr};
  deepspeed::sequence::DistributedAttention ulysses_{nullptr};  // GPTConfig::sequence_parallel
};
TORCH_MODULE(CausalSelfAttention);

// One pre-LayerNorm transformer block: x + attn(ln1(x)), then x + mlp(ln2(x)).
class GPTBlockImpl : public torch::nn::Module {
 public:
  explicit GPTBlockImpl(const GPTConfig& cfg);
  at::Tensor forward(const at::Tensor& x);
  // CausalSelfAttentionImpl::forward_cached's arguments.
  at::Tensor forward_cached(const at::Tensor& x, const at::Tensor& mask, at::Tensor& keys, at::Tensor& values,
                            int64_t start);
  // Tensor parallelism over `group` (GPTConfig::tensor_parallel): attention and MLP split, LayerNorms whole.
  void split(const deepspeed::comm::ProcessGroup& group);

 private:
  at::Tensor mlp(const at::Tensor& normed);
  std::vector<at::Tensor> mlp_weights() const;  // the untiled MLP's (tiling is refused with tensor parallelism)

  double dropout_;
  int64_t mlp_tile_;  // GPTConfig::tiled_mlp_tokens
  torch::nn::LayerNorm ln1_{nullptr}, ln2_{nullptr};
  CausalSelfAttention attn_{nullptr};
  torch::nn::Linear fc_{nullptr}, fc_proj_{nullptr};
  deepspeed::tp::ColumnParallelLinear tp_fc_{nullptr};
  deepspeed::tp::RowParallelLinear tp_fc_proj_{nullptr};
};
TORCH_MODULE(GPTBlock);
using ShardedGPTBlock = deepspeed::zero::ShardedImpl<GPTBlockImpl>;

class GPTImpl : public torch::nn::Module {
 public:
  explicit GPTImpl(const GPTConfig& cfg);

  // Mean next-token cross-entropy of `tokens` [batch, seq] (int64) against `targets` [batch, seq].
  at::Tensor forward(const at::Tensor& tokens, const at::Tensor& targets);
  // Logits [batch, seq, vocab] (with tensor parallelism gathered from every rank's slice of the vocabulary).
  at::Tensor logits(const at::Tensor& tokens);

  const GPTConfig& config() const { return cfg_; }
  // Incremental decoding for deepspeed::inference::generate (a CachedDecoder of these two): a cache for `batch`
  // sequences of up to `capacity` positions, and the last position's fp32 logits of tokens [batch, seq] at learned
  // `positions` [batch, seq], their keys and values appended. Dense blocks only, without tensor or sequence
  // parallelism or ZeRO-3 units; no gradients.
  deepspeed::models::LlamaKVCache make_kv_cache(int64_t batch, int64_t capacity) const;
  at::Tensor decode(const at::Tensor& tokens, const at::Tensor& positions, deepspeed::models::LlamaKVCache& cache);
  // MoE: the load-balancing losses of the last forward (scalar sum; 0 for a dense model) and the tokens each MoE
  // block sent to each expert ([experts] per MoE block).
  at::Tensor last_aux_loss() const { return aux_loss_; }
  const std::vector<at::Tensor>& last_expert_counts() const { return exp_counts_; }

 private:
  void init_weights();
  void split_tensor_parallel();
  // Logits of this rank's slice of the vocabulary (all of it without tensor parallelism).
  at::Tensor local_logits(const at::Tensor& tokens);
  // The final LayerNorm's output [batch, seq, hidden]: the head's input.
  at::Tensor hidden_states(const at::Tensor& tokens);
  // The LM head (untied, or the token embedding's weight) on hidden states; its weights.
  at::Tensor head(const at::Tensor& h);
  std::vector<at::Tensor> head_weights() const;
  // The cross-entropy of the next-token targets: the mean over counted positions, weighted over the
  // sequence-parallel group when there is one; the head and loss tiled with tiled_loss_tokens.
  at::Tensor lm_loss(const at::Tensor& tokens, const at::Tensor& targets);

  GPTConfig cfg_;
  torch::nn::Embedding wte_{nullptr}, wpe_{nullptr};
  torch::nn::ModuleList blocks_;
  torch::nn::LayerNorm ln_f_{nullptr};
  torch::nn::Linear lm_head_{nullptr};  // only when the head is untied
  deepspeed::tp::VocabParallelEmbedding tp_wte_{nullptr};  // tensor parallelism: the embedding and head's slices
  deepspeed::tp::ColumnParallelLinear tp_lm_head_{nullptr};
  // ZeRO-3 units of the token embedding and the head (shard_blocks with an untied head): gathered only while they
  // run, instead of for the whole step with the other parameters outside the blocks. wte_ and lm_head_ are the
  // modules inside them.
  std::shared_ptr<deepspeed::zero::ShardedImpl<torch::nn::EmbeddingImpl>> wte_unit_;
  std::shared_ptr<deepspeed::zero::ShardedImpl<torch::nn::LinearImpl>> lm_head_unit_;
  at::Tensor aux_loss_;
  std::vector<at::Tensor> exp_counts_;
};
TORCH_MODULE(GPT);

}  // namespace deepspeed::models
