#include "gpt.h"

#include <ATen/ATen.h>
#include <torch/nn/init.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "deepspeed/profiling/flops_profiler.h"
#include "deepspeed/sequence/loss.h"
#include "deepspeed/sequence/tiling.h"
#include "gpt_init.h"
#include "gpt_moe.h"

namespace deepspeed::models {

int64_t GPTConfig::num_parameters() const {
  int64_t h = hidden;
  const int64_t b = bias ? 1 : 0;
  int64_t per_block = 2 * (2 * h)              // two LayerNorms
                      + (h * 3 * h + 3 * h * b)  // qkv
                      + (h * h + h * b)          // attention projection
                      + (h * 4 * h + 4 * h * b)  // MLP up
                      + (4 * h * h + h * b);     // MLP down
  int64_t total = vocab_size * h + seq_len * h + layers * per_block + 2 * h;
  if (!tied_head) total += vocab_size * h;
  const int64_t mlp = (h * 4 * h + 4 * h * b) + (4 * h * h + h * b);
  for (int64_t i = 0; i < num_moe_blocks(); ++i) {
    // The MLP becomes experts_of(i) MLPs and a gate; a residual MoE keeps one dense MLP and adds its mixer.
    total += (experts_of(i) - 1) * mlp + h * experts_of(i);
    if (moe.use_residual) total += mlp + 2 * h + 2;
  }
  return total;
}

int64_t GPTConfig::experts_of(int64_t moe_block) const {
  return moe.num_experts.size() == 1 ? moe.num_experts[0] : moe.num_experts.at(static_cast<size_t>(moe_block));
}

CausalSelfAttentionImpl::CausalSelfAttentionImpl(const GPTConfig& cfg)
    : heads_(cfg.heads), dropout_(cfg.dropout) {
  qkv_ = register_module("qkv", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden, 3 * cfg.hidden).bias(cfg.bias)));
  proj_ = register_module("proj", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden, cfg.hidden).bias(cfg.bias)));
  if (cfg.sequence_parallel.is_member()) {
    // Whole sequences of heads / P heads arrive batch-first ([b, t, h, d]); attend() works head-first.
    ulysses_ = register_module(
        "ulysses", deepspeed::sequence::DistributedAttention(
                       [this](const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
                         return attend(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)).transpose(1, 2);
                       },
                       cfg.sequence_parallel));
  }
}

at::Tensor CausalSelfAttentionImpl::attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  const int64_t t = q.size(2);
  auto scores = at::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(q.size(3))));
  auto future = at::ones({t, t}, q.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
  auto att = maybe_dropout(at::softmax(scores, -1), dropout_, is_training());
  return at::matmul(att, v);
}

void CausalSelfAttentionImpl::split(const deepspeed::comm::ProcessGroup& group) {
  tp_qkv_ = deepspeed::tp::ColumnParallelLinear(qkv_, group, /*gather_output=*/false, /*fused_parts=*/3);
  tp_proj_ = deepspeed::tp::RowParallelLinear(proj_, group);
  replace_module("qkv", tp_qkv_);
  replace_module("proj", tp_proj_);
  qkv_ = nullptr;
  proj_ = nullptr;
}

at::Tensor CausalSelfAttentionImpl::forward(const at::Tensor& x) {
  deepspeed::profiling::ModuleScope scope(*this);  // the flops profiler charges the attention products here
  const int64_t b = x.size(0), t = x.size(1), d = x.size(2) / heads_;
  const at::Tensor fused = tp_qkv_ ? tp_qkv_->forward(x) : qkv_->forward(x);
  const int64_t h = fused.size(-1) / (3 * d);  // this rank's heads: all, or heads / T
  at::Tensor y;
  if (ulysses_) {
    const at::Tensor qkv = fused.view({b, t, 3, h, d});  // this rank's tokens, every head
    y = ulysses_->forward(qkv.select(2, 0), qkv.select(2, 1), qkv.select(2, 2)).reshape({b, t, h * d});
  } else {
    auto qkv = fused.view({b, t, 3, h, d}).permute({2, 0, 3, 1, 4});  // [3, b, h, t, d]
    y = attend(qkv[0], qkv[1], qkv[2]).transpose(1, 2).reshape({b, t, h * d});
  }
  return maybe_dropout(tp_proj_ ? tp_proj_->forward(y) : proj_->forward(y), dropout_, is_training());
}

GPTBlockImpl::GPTBlockImpl(const GPTConfig& cfg) : dropout_(cfg.dropout), mlp_tile_(cfg.tiled_mlp_tokens) {
  ln1_ = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden})));
  attn_ = register_module("attn", CausalSelfAttention(cfg));
  ln2_ = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden})));
  fc_ = register_module("fc", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden, 4 * cfg.hidden).bias(cfg.bias)));
  fc_proj_ =
      register_module("fc_proj", torch::nn::Linear(torch::nn::LinearOptions(4 * cfg.hidden, cfg.hidden).bias(cfg.bias)));
}

void GPTBlockImpl::split(const deepspeed::comm::ProcessGroup& group) {
  attn_->split(group);
  tp_fc_ = deepspeed::tp::ColumnParallelLinear(fc_, group);
  tp_fc_proj_ = deepspeed::tp::RowParallelLinear(fc_proj_, group);
  replace_module("fc", tp_fc_);
  replace_module("fc_proj", tp_fc_proj_);
  fc_ = nullptr;
  fc_proj_ = nullptr;
}

at::Tensor GPTBlockImpl::forward(const at::Tensor& x) {
  deepspeed::profiling::ModuleScope scope(*this);
  auto h = x + attn_->forward(ln1_->forward(x));
  const at::Tensor normed = ln2_->forward(h);
  const at::Tensor m = mlp_tile_ == 0
                           ? mlp(normed)
                           : deepspeed::sequence::tiled_compute([this](const at::Tensor& t) { return mlp(t); }, normed,
                                                                mlp_weights(), mlp_tile_);
  return h + maybe_dropout(m, dropout_, is_training());
}

at::Tensor GPTBlockImpl::mlp(const at::Tensor& normed) {
  const at::Tensor up = at::gelu(tp_fc_ ? tp_fc_->forward(normed) : fc_->forward(normed), "tanh");
  return tp_fc_proj_ ? tp_fc_proj_->forward(up) : fc_proj_->forward(up);
}

std::vector<at::Tensor> GPTBlockImpl::mlp_weights() const {
  std::vector<at::Tensor> out = fc_->parameters();
  for (const auto& p : fc_proj_->parameters()) out.push_back(p);
  return out;
}

GPTImpl::GPTImpl(const GPTConfig& cfg) : cfg_(cfg) {
  check_config(cfg_);
  // With an untied head the token embedding is used once per forward, so it can be a unit of its own (a tied head
  // reads its weight again at the end, outside any unit's forward).
  const bool unit_ends = cfg.shard_blocks && !cfg.tied_head;
  if (unit_ends) {
    wte_unit_ = register_module("wte", deepspeed::zero::shard([&] {
      return torch::nn::Embedding(cfg.vocab_size, cfg.hidden);
    }));
    wte_ = torch::nn::Embedding(std::dynamic_pointer_cast<torch::nn::EmbeddingImpl>(wte_unit_->wrapped()));
  } else {
    wte_ = register_module("wte", torch::nn::Embedding(cfg.vocab_size, cfg.hidden));
  }
  wpe_ = register_module("wpe", torch::nn::Embedding(cfg.seq_len, cfg.hidden));
  blocks_ = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.layers; ++i) {
    if (cfg.moe.enabled() && i % 2 == 1) {
      blocks_->push_back(GPTMoEBlock(cfg, i / 2));
    } else if (cfg.shard_blocks) {
      blocks_->push_back(deepspeed::zero::shard([&] { return GPTBlock(cfg); }));
    } else {
      blocks_->push_back(GPTBlock(cfg));
    }
  }
  ln_f_ = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.hidden})));
  if (unit_ends) {
    lm_head_unit_ = register_module("lm_head", deepspeed::zero::shard([&] {
      return torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden, cfg.vocab_size).bias(false));
    }));
    lm_head_ = torch::nn::Linear(std::dynamic_pointer_cast<torch::nn::LinearImpl>(lm_head_unit_->wrapped()));
  } else if (!cfg.tied_head) {
    lm_head_ = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(cfg.hidden, cfg.vocab_size).bias(false)));
  }
  init_weights();
  if (cfg_.tensor_parallel.is_member()) split_tensor_parallel();
  if (cfg_.sequence_parallel.is_member()) {
    const int p = cfg_.sequence_parallel.size();
    auto require = [&](bool ok, const std::string& what) {
      if (!ok) throw std::invalid_argument("GPT: sequence parallelism over " + std::to_string(p) + " ranks " + what);
    };
    require(cfg_.heads % p == 0, "needs heads (" + std::to_string(cfg_.heads) + ") divisible by it");
    require(!cfg_.moe.enabled(), "does not combine with MoE blocks");
    require(cfg_.dropout == 0.0, "needs dropout 0 (each rank would draw the masks of other tokens)");
  }
}

void GPTImpl::split_tensor_parallel() {
  const deepspeed::comm::ProcessGroup& g = cfg_.tensor_parallel;
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("GPT: tensor parallelism over " + std::to_string(g.size()) + " ranks " + what);
  };
  require(!cfg_.sequence_parallel.is_member(), "does not combine with sequence parallelism yet");
  require(cfg_.heads % g.size() == 0, "needs heads (" + std::to_string(cfg_.heads) + ") divisible by it");
  require(cfg_.vocab_size % g.size() == 0,
          "needs vocab_size (" + std::to_string(cfg_.vocab_size) + ") divisible by it");
  require(!cfg_.moe.enabled(), "does not combine with MoE blocks");
  require(!cfg_.shard_blocks, "does not combine with ZeRO stage 3 units (shard_blocks)");
  require(cfg_.dropout == 0.0, "needs dropout 0 (the split layers would need a random stream per rank)");
  for (const auto& block : *blocks_) block->as<GPTBlockImpl>()->split(g);
  tp_wte_ = deepspeed::tp::VocabParallelEmbedding(wte_->weight, g);
  replace_module("wte", tp_wte_);
  wte_ = nullptr;
  if (lm_head_) {
    tp_lm_head_ = deepspeed::tp::ColumnParallelLinear(lm_head_, g);
    replace_module("lm_head", tp_lm_head_);
    lm_head_ = nullptr;
  }
}

void GPTImpl::init_weights() {
  // Module by module in registration order (the order of named_parameters()), so the random draws are the same
  // whether or not the blocks are units. A block partitioned at construction (zero::Init) is gathered for its
  // initialization and partitioned again with rank 0's values, one block at a time. With cfg.init_seed each
  // module draws from its pipeline layer's generator (gpt_pipe.h numbers the layers): embeddings 0, block i 1 + i,
  // an untied head layers + 2.
  const std::optional<at::Generator> embeddings = layer_generator(cfg_, 0);  // one stream: wte, then wpe
  {
    // Units partitioned at construction are gathered for their initialization (a no-op otherwise).
    deepspeed::zero::GatheredParameters gathered(wte_unit_ ? static_cast<const torch::nn::Module&>(*wte_unit_) : *wte_,
                                                 /*modifier_rank=*/0);
    init_gpt_weights(*wte_, cfg_.layers, embeddings);
    gathered.release();
  }
  init_gpt_weights(*wpe_, cfg_.layers, embeddings);
  for (int64_t i = 0; i < cfg_.layers; ++i) {
    const std::shared_ptr<torch::nn::Module> block = blocks_->ptr(static_cast<size_t>(i));
    if (auto* moe_block = block->as<GPTMoEBlockImpl>()) {
      moe_block->init_dense_weights(cfg_.layers, layer_generator(cfg_, 1 + i));
      continue;
    }
    deepspeed::zero::GatheredParameters gathered(*block, /*modifier_rank=*/0);
    init_gpt_weights(*block, cfg_.layers, layer_generator(cfg_, 1 + i));
    gathered.release();
  }
  if (lm_head_) {
    deepspeed::zero::GatheredParameters gathered(
        lm_head_unit_ ? static_cast<const torch::nn::Module&>(*lm_head_unit_) : *lm_head_, /*modifier_rank=*/0);
    init_gpt_weights(*lm_head_, cfg_.layers, layer_generator(cfg_, cfg_.layers + 2));
    gathered.release();
  }
}

at::Tensor GPTImpl::logits(const at::Tensor& tokens) {
  const at::Tensor local = local_logits(tokens);
  return tp_wte_ ? deepspeed::tp::gather_from_region(local, cfg_.tensor_parallel) : local;
}

at::Tensor GPTImpl::hidden_states(const at::Tensor& tokens) {
  const int64_t t = tokens.size(1);
  if (t > cfg_.seq_len) {
    throw std::invalid_argument("GPT: sequence of " + std::to_string(t) + " tokens exceeds seq_len " +
                                std::to_string(cfg_.seq_len));
  }
  // Sequence parallelism: this rank's tokens are part `rank` of P equal parts of each sequence.
  const int64_t first = cfg_.sequence_parallel.is_member() ? cfg_.sequence_parallel.rank() * t : 0;
  if (first + t > cfg_.seq_len) {
    throw std::invalid_argument("GPT: tokens " + std::to_string(first) + ".." + std::to_string(first + t - 1) +
                                " of the sequence exceed seq_len " + std::to_string(cfg_.seq_len));
  }
  auto pos = at::arange(first, first + t, tokens.options().dtype(at::kLong));
  at::Tensor tok = tp_wte_ ? tp_wte_->forward(tokens) : wte_unit_ ? wte_unit_->forward(tokens) : wte_->forward(tokens);
  auto x = maybe_dropout(tok + wpe_->forward(pos), cfg_.dropout, is_training());
  aux_loss_ = at::zeros({}, at::kFloat);
  exp_counts_.clear();
  for (const auto& block : *blocks_) {
    if (auto* unit = block->as<ShardedGPTBlock>()) {
      x = unit->forward(x);
    } else if (auto* moe_block = block->as<GPTMoEBlockImpl>()) {
      x = moe_block->forward(x);
      aux_loss_ = aux_loss_ + moe_block->last_aux_loss;
      exp_counts_.push_back(moe_block->last_exp_counts);
    } else {
      x = block->as<GPTBlockImpl>()->forward(x);
    }
  }
  return ln_f_->forward(x);
}

at::Tensor GPTImpl::head(const at::Tensor& x) {
  if (tp_wte_ && cfg_.tied_head)
    return at::matmul(deepspeed::tp::copy_to_region(x, cfg_.tensor_parallel), tp_wte_->weight.t());
  if (tp_lm_head_) return tp_lm_head_->forward(x);
  if (cfg_.tied_head) return at::matmul(x, wte_->weight.t());
  return lm_head_unit_ ? lm_head_unit_->forward(x) : lm_head_->forward(x);
}

std::vector<at::Tensor> GPTImpl::head_weights() const {
  // (Tiling is refused with tensor parallelism and with the head a unit of its own.)
  return cfg_.tied_head ? std::vector<at::Tensor>{wte_->weight} : lm_head_->parameters();
}

at::Tensor GPTImpl::local_logits(const at::Tensor& tokens) {
  deepspeed::profiling::ModuleScope scope(*this);
  return head(hidden_states(tokens));
}

at::Tensor GPTImpl::lm_loss(const at::Tensor& tokens, const at::Tensor& targets) {
  if (tp_wte_) {
    const at::Tensor out = local_logits(tokens);
    return deepspeed::tp::vocab_parallel_cross_entropy_mean(out.reshape({-1, out.size(-1)}), targets.reshape({-1}),
                                                            cfg_.tensor_parallel);
  }
  if (cfg_.tiled_loss_tokens == 0 && !cfg_.sequence_parallel.is_member()) {
    const at::Tensor out = local_logits(tokens);
    return at::cross_entropy_loss(out.reshape({-1, out.size(-1)}), targets.reshape({-1}));
  }
  at::Tensor sum;
  if (cfg_.tiled_loss_tokens > 0) {
    deepspeed::profiling::ModuleScope scope(*this);
    sum = deepspeed::sequence::tiled_cross_entropy_sum([this](const at::Tensor& t) { return head(t); },
                                                       hidden_states(tokens), targets, head_weights(),
                                                       cfg_.tiled_loss_tokens);
  } else {
    const at::Tensor out = local_logits(tokens);
    sum = at::cross_entropy_loss(out.reshape({-1, out.size(-1)}), targets.reshape({-1}), /*weight=*/{},
                                 at::Reduction::Sum, /*ignore_index=*/-100);
  }
  // Under sequence parallelism the mean over the whole sequences' counted positions, whichever rank holds them.
  return deepspeed::sequence::sequence_parallel_mean(sum, (targets != -100).sum(), cfg_.sequence_parallel);
}

at::Tensor GPTImpl::forward(const at::Tensor& tokens, const at::Tensor& targets) {
  const at::Tensor loss = lm_loss(tokens, targets);
  if (!cfg_.moe.enabled()) return loss;
  return loss + cfg_.moe.aux_loss_coef * aux_loss_.to(loss.scalar_type());
}

}  // namespace deepspeed::models
