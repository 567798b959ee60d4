// AutoTP (deepspeed/tp/auto_tp.h) at tensor-parallel size = world (2 and 4 ranks):
//  - the engine with tensor_parallel.autotp_size = world splits a model written for one device (a Sequential of an
//    embedding, an MLP and an LM head, named as Llama names them) and trains it as a plain LibTorch loop over the
//    whole model does;
//  - the slices auto_tp cuts reassemble (all-gathered along the split dimension) to the original weights exactly;
//  - what it cannot place is listed in one error and nothing is swapped: a layer no pattern names, a layer type it
//    cannot split, a custom module holding its own parameters, a Linear also held by a typed member.
#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/named_any.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/conv.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/error.h"
#include "deepspeed/tp/auto_tp.h"
#include "deepspeed/tp/parallel_linear.h"
#include "tolerance.h"

namespace {

namespace ds = deepspeed;
namespace tp = deepspeed::tp;

constexpr int64_t kVocab = 32, kHidden = 16, kSeq = 8, kBatch = 4;
constexpr int kSteps = 4;
constexpr double kLr = 0.5;

void ensure_comm() {
  if (!ds::comm::is_initialized()) ds::comm::init_distributed();
}

// A language model written for one device: every layer reached through the Sequential.
struct TinyLmImpl : torch::nn::Module {
  TinyLmImpl() {
    at::manual_seed(7);
    net = register_module("net", torch::nn::Sequential({{"embed_tokens", torch::nn::Embedding(kVocab, kHidden)},
                                                        {"up_proj", torch::nn::Linear(kHidden, 4 * kHidden)},
                                                        {"act", torch::nn::GELU()},
                                                        {"down_proj", torch::nn::Linear(4 * kHidden, kHidden)},
                                                        {"lm_head", torch::nn::Linear(kHidden, kVocab)}}));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& y) {
    const at::Tensor logits = net->forward(x);
    return at::cross_entropy_loss(logits.reshape({-1, kVocab}), y.reshape({-1}));
  }
  torch::nn::Sequential net{nullptr};
};
TORCH_MODULE(TinyLm);

std::pair<at::Tensor, at::Tensor> batch(int step) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(100 + step);
  const at::Tensor ids = at::randint(kVocab, {kBatch, kSeq + 1}, gen, at::kLong);
  return {ids.narrow(1, 0, kSeq), ids.narrow(1, 1, kSeq)};
}

std::map<std::string, at::Tensor> snapshot(const torch::nn::Module& m) {
  std::map<std::string, at::Tensor> out;
  for (const auto& item : m.named_parameters()) out[item.key()] = item.value().detach().clone();
  return out;
}

// `local` all-gathered over `group` along `dim` (rank order).
at::Tensor gathered(const at::Tensor& local, int64_t dim, ds::comm::ProcessGroup& group) {
  const at::Tensor moved = local.movedim(dim, 0).contiguous();
  std::vector<int64_t> sizes(moved.sizes().begin(), moved.sizes().end());
  sizes[0] *= group.size();
  at::Tensor out = at::empty(sizes, moved.options());
  group.all_gather_into_tensor(out, moved);
  return out.movedim(0, dim);
}

// Which dimension auto_tp splits: output rows of column-parallel layers and embeddings, input columns of
// row-parallel ones; the rest is whole.
int64_t split_dim(const std::string& name, const at::Tensor& local, const at::Tensor& full) {
  if (local.sizes() == full.sizes()) return -1;
  return name.find("down_proj.weight") != std::string::npos ? 1 : 0;
}

TEST(AutoTp, EngineTrainsTheSplitModelAsThePlainLoop) {
  ensure_comm();
  const int world = ds::comm::get_world_size();
  // Reference: the whole model, torch autograd, SGD written out.
  TinyLm ref;
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);
    for (auto& p : ref->parameters()) p.mutable_grad() = at::Tensor();
    ref->forward(x, y).backward();
    at::NoGradGuard no_grad;
    for (auto& p : ref->parameters()) p.sub_(p.grad() * kLr);
  }
  const auto want = snapshot(*ref);

  TinyLm model;
  auto engine = ds::initialize(model, ds::Config::from_string(
      R"({"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000,
          "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
          "tensor_parallel": {"autotp_size": )" + std::to_string(world) + "}}"));
  EXPECT_EQ(engine.dp_world_size(), 1);
  EXPECT_NE(model->net[1]->as<tp::ColumnParallelLinearImpl>(), nullptr) << "up_proj was not swapped";
  EXPECT_NE(model->net[3]->as<tp::RowParallelLinearImpl>(), nullptr) << "down_proj was not swapped";
  for (int s = 0; s < kSteps; ++s) {
    auto [x, y] = batch(s);  // every tensor rank sees the whole batch
    at::Tensor loss = engine.forward(x.to(engine.device()), y.to(engine.device()));
    engine.backward(loss);
    engine.step();
  }
  ds::comm::ProcessGroup world_group = ds::comm::get_world_group();
  // Sums regrouped over the ranks (the MLP's 4 x hidden products, the vocabulary's softmax) through kSteps SGD steps.
  const double bound = tolerance::reordered(tolerance::kFp32Epsilon, 4 * kHidden, kSteps);
  for (const auto& [name, local] : snapshot(*model)) {
    const at::Tensor& full = want.at(name);
    const int64_t dim = split_dim(name, local, full);
    const at::Tensor got = dim < 0 ? local : gathered(local, dim, world_group);
    EXPECT_WITHIN(tolerance::relative_max_error(got, full), bound) << name;
  }
}

TEST(AutoTp, SlicesReassembleToTheOriginalWeights) {
  ensure_comm();
  TinyLm model;
  const auto original = snapshot(*model);
  ds::comm::ProcessGroup group = ds::comm::get_world_group();
  const tp::AutoTpResult result = tp::auto_tp(*model, group);
  EXPECT_EQ(result.column, std::vector<std::string>{"net.up_proj"});
  EXPECT_EQ(result.row, std::vector<std::string>{"net.down_proj"});
  EXPECT_EQ(result.vocab, (std::vector<std::string>{"net.embed_tokens", "net.lm_head"}));
  int split = 0;
  for (const auto& [name, local] : snapshot(*model)) {
    const at::Tensor& full = original.at(name);
    const int64_t dim = split_dim(name, local, full);
    if (dim >= 0) {
      ++split;
      EXPECT_EQ(local.size(dim) * group.size(), full.size(dim)) << name;
    }
    EXPECT_TRUE(at::equal(dim < 0 ? local : gathered(local, dim, group), full)) << name;
  }
  EXPECT_EQ(split, 6);  // embedding, up weight + bias, down weight, head weight + bias; down's bias stays whole
}

// A module with a parameter of its own, of a type auto_tp does not know.
struct ScaleImpl : torch::nn::Module {
  ScaleImpl() { gain = register_parameter("gain", at::ones({kHidden})); }
  at::Tensor forward(const at::Tensor& x) { return x * gain; }
  at::Tensor gain;
};
TORCH_MODULE(Scale);

TEST(AutoTp, WhatCannotBePlacedIsListedAndNothingIsSwapped) {
  ensure_comm();
  torch::nn::Sequential net({{"up_proj", torch::nn::Linear(kHidden, 4 * kHidden)},
                             {"mystery", torch::nn::Linear(4 * kHidden, kHidden)},
                             {"conv", torch::nn::Conv1d(kHidden, kHidden, 1)},
                             {"scale", Scale()}});
  try {
    tp::auto_tp(*net, ds::comm::get_world_group());
    ADD_FAILURE() << "auto_tp must refuse";
  } catch (const ds::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("3 layer(s)"), std::string::npos) << msg;
    EXPECT_NE(msg.find("mystery (Linear): no pattern places it"), std::string::npos) << msg;
    EXPECT_NE(msg.find("\n  conv ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("\n  scale ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("unknown layer type with parameters of its own"), std::string::npos) << msg;
  }
  EXPECT_NE(net[0]->as<torch::nn::LinearImpl>(), nullptr) << "up_proj was swapped although auto_tp failed";
  // A "skip" spec keeps the unknown ones whole and the run goes on.
  tp::AutoTpPolicy policy = tp::AutoTpPolicy::defaults();
  policy.specs.insert(policy.specs.begin(), tp::LayerSpec{{"(^|\\.)(conv|scale|mystery)\\.(weight|gain)$"},
                                                          tp::Partition::kSkip});
  const tp::AutoTpResult result = tp::auto_tp(*net, ds::comm::get_world_group(), policy);
  EXPECT_EQ(result.column, std::vector<std::string>{"up_proj"});
  EXPECT_EQ(result.kept, (std::vector<std::string>{"mystery", "conv", "scale"}));
}

// A parent that calls its layer through a typed member would keep calling the whole one after a swap.
struct TypedImpl : torch::nn::Module {
  TypedImpl() { up_proj = register_module("up_proj", torch::nn::Linear(kHidden, 4 * kHidden)); }
  at::Tensor forward(const at::Tensor& x) { return up_proj(x); }
  torch::nn::Linear up_proj{nullptr};
};
TORCH_MODULE(Typed);

TEST(AutoTp, ALayerHeldByATypedMemberIsRefused) {
  ensure_comm();
  Typed model;
  try {
    tp::auto_tp(*model, ds::comm::get_world_group());
    ADD_FAILURE() << "auto_tp must refuse";
  } catch (const ds::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("\n  up_proj ("), std::string::npos) << msg;
    EXPECT_NE(msg.find("also held outside its parent's module tree"), std::string::npos) << msg;
  }
  EXPECT_NE(model->named_children()["up_proj"]->as<torch::nn::LinearImpl>(), nullptr);
}

TEST(AutoTp, BadPartitionNamesAndPatternsAreConfigErrors) {
  EXPECT_THROW(tp::parse_partition("diagonal"), ds::ConfigError);
  ensure_comm();
  TinyLm model;
  tp::AutoTpPolicy policy;
  policy.specs.push_back(tp::LayerSpec{{"(unclosed"}, tp::Partition::kColumn});
  EXPECT_THROW(tp::auto_tp(*model, ds::comm::get_world_group(), policy), ds::ConfigError);
}

// Cutting and joining for checkpoints across tensor-parallel sizes: slices of fused q/k/v hold each block's part in
// block order, and joining every rank's slices gives the whole tensor back exactly, in either dimension.
TEST(TpPartition, SlicesOfFusedBlocksJoinToTheWhole) {
  const at::Tensor whole = at::arange(12 * 4, at::kFloat).reshape({12, 4});  // 3 blocks of 4 rows
  const at::Tensor r1 = tp::slice_split(whole, 0, /*fused_parts=*/3, /*rank=*/1, /*size=*/2);
  // Rank 1 of 2: rows 2-3 of each block.
  EXPECT_TRUE(at::equal(r1, at::cat({whole.narrow(0, 2, 2), whole.narrow(0, 6, 2), whole.narrow(0, 10, 2)})));
  for (int64_t size : {1, 2, 4}) {
    for (int64_t dim : {0, 1}) {
      const int64_t fused = dim == 0 ? 3 : 1;
      std::vector<at::Tensor> slices;
      for (int64_t r = 0; r < size; ++r) slices.push_back(tp::slice_split(whole, dim, fused, r, size));
      EXPECT_TRUE(at::equal(tp::merge_split(slices, dim, fused), whole)) << "size " << size << " dim " << dim;
    }
  }
  EXPECT_THROW(tp::slice_split(whole, 1, 1, 0, 3), ds::Error);  // 4 columns over 3 ranks
}

}  // namespace
