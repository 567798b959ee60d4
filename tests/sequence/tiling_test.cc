// Sequence tiling (deepspeed/sequence/tiling.h) against the untiled computation in plain LibTorch: a SwiGLU MLP
// through tiled_compute and a head's cross-entropy through tiled_cross_entropy_sum give the same output or loss and
// the same gradient of the input and of every weight, at tile sizes that divide the rows and that do not (the last
// tile shorter), one row, and more than all of them. Each weight's gradient reaches autograd once per backward (a hook
// counts), which ZeRO's reduction hooks rely on. The GPT and the Llama family take the tiles their configs ask for
// (their loss's graph holds one tiled MLP per block and the tiled loss), so a setting cannot be silently ignored.
#include "deepspeed/sequence/tiling.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/nn/modules/linear.h>

#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "deepspeed/models/llama.h"
#include "gpt.h"
#include "tolerance.h"

namespace {

namespace ds = deepspeed::sequence;

constexpr int64_t kBatch = 2, kSeq = 37, kHidden = 16, kInner = 24, kVocab = 50;

struct Mlp {
  torch::nn::Linear gate{torch::nn::LinearOptions(kHidden, kInner).bias(false)};
  torch::nn::Linear up{torch::nn::LinearOptions(kHidden, kInner).bias(false)};
  torch::nn::Linear down{torch::nn::LinearOptions(kInner, kHidden).bias(true)};
  at::Tensor operator()(const at::Tensor& x) { return down(at::silu(gate(x)) * up(x)); }
  std::vector<at::Tensor> weights() { return {gate->weight, up->weight, down->weight, down->bias}; }
  void zero_grad() {
    for (auto& w : weights()) w.mutable_grad() = at::Tensor();
  }
};

// Counts how often autograd accumulates a weight's gradient: the hook ZeRO's reducers hang on each parameter.
struct AccumulationCounter : torch::autograd::FunctionPostHook {
  explicit AccumulationCounter(int* calls) : calls_(calls) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& outputs,
                                            const torch::autograd::variable_list&) override {
    ++*calls_;
    return outputs;
  }
  int* calls_;
};

// The gradients of x and `weights`, copied out.
std::vector<at::Tensor> grads_of(const at::Tensor& x, const std::vector<at::Tensor>& weights) {
  std::vector<at::Tensor> out{x.grad().clone()};
  for (const auto& w : weights) out.push_back(w.grad().clone());
  return out;
}

TEST(SequenceTiling, MlpOutputAndEveryGradientEqualTheUntiledOnes) {
  at::manual_seed(5);
  Mlp mlp;
  const at::Tensor x0 = at::randn({kBatch, kSeq, kHidden}), probe = at::randn({kBatch, kSeq, kHidden});
  at::Tensor x = x0.clone().requires_grad_(true);
  const at::Tensor want = mlp(x);
  (want * probe).sum().backward();
  const auto want_grads = grads_of(x, mlp.weights());
  // Each output row is the same dot products (tiling changes no sum within a row, but a matmul kernel may block a
  // smaller matrix otherwise: a reordered sum of kInner terms); a weight's gradient sums its rows' terms in tiles.
  const double row_bound = tolerance::reordered(tolerance::kFp32Epsilon, kInner, 1);
  const double grad_bound = tolerance::reordered(tolerance::kFp32Epsilon, kBatch * kSeq, 1);
  for (int64_t tile : {int64_t{1}, int64_t{5}, int64_t{16}, kBatch * kSeq, int64_t{1000}}) {
    SCOPED_TRACE(tile);
    mlp.zero_grad();
    int hook_calls = 0;
    auto accumulator = torch::autograd::impl::grad_accumulator(mlp.gate->weight);
    const auto key = accumulator->add_post_hook(std::make_unique<AccumulationCounter>(&hook_calls));
    at::Tensor xt = x0.clone().requires_grad_(true);
    const at::Tensor got = ds::tiled_compute([&](const at::Tensor& t) { return mlp(t); }, xt, mlp.weights(), tile);
    ASSERT_EQ(got.sizes(), want.sizes());
    EXPECT_WITHIN(tolerance::relative_max_error(got, want), row_bound);
    (got * probe).sum().backward();
    EXPECT_EQ(hook_calls, 1) << "the weight's gradient was accumulated once";
    accumulator->del_post_hook(key);
    const auto got_grads = grads_of(xt, mlp.weights());
    for (size_t i = 0; i < got_grads.size(); ++i)
      EXPECT_WITHIN(tolerance::relative_max_error(got_grads[i], want_grads[i]), grad_bound) << "gradient " << i;
  }
  // Without grad mode: the tiles joined, nothing recorded.
  at::NoGradGuard no_grad;
  const at::Tensor plain = ds::tiled_compute([&](const at::Tensor& t) { return mlp(t); }, x0, mlp.weights(), 7);
  EXPECT_FALSE(plain.requires_grad());
  EXPECT_WITHIN(tolerance::relative_max_error(plain, want), row_bound);
}

TEST(SequenceTiling, CrossEntropyAndItsGradientsEqualTheUntiledOnes) {
  at::manual_seed(6);
  torch::nn::Linear head(torch::nn::LinearOptions(kHidden, kVocab).bias(false));
  const at::Tensor h0 = at::randn({kBatch, kSeq, kHidden});
  at::Tensor targets = at::randint(kVocab, {kBatch, kSeq}, at::kLong);
  targets.index_put_({0, at::indexing::Slice(0, 9)}, -100);  // a prompt: ignored
  targets.index_put_({1, kSeq - 1}, -100);
  at::Tensor h = h0.clone().requires_grad_(true);
  const at::Tensor want =
      at::cross_entropy_loss(head(h).reshape({-1, kVocab}), targets.reshape({-1}), {}, at::Reduction::Sum, -100);
  (want * 0.37).backward();  // an incoming gradient that is not 1 (a mean's 1/count, a loss scale)
  const auto want_grads = grads_of(h, {head->weight});
  // The loss sums kBatch * kSeq token losses in tiles; each token's is the same log-sum-exp over the vocabulary.
  const double bound = tolerance::reordered(tolerance::kFp32Epsilon, kBatch * kSeq + kVocab, 1);
  for (int64_t tile : {int64_t{1}, int64_t{8}, int64_t{30}, int64_t{500}}) {
    SCOPED_TRACE(tile);
    head->weight.mutable_grad() = at::Tensor();
    at::Tensor ht = h0.clone().requires_grad_(true);
    const at::Tensor got =
        ds::tiled_cross_entropy_sum([&](const at::Tensor& t) { return head(t); }, ht, targets, {head->weight}, tile);
    EXPECT_WITHIN(std::abs(got.item<double>() - want.item<double>()) / want.item<double>(), bound);
    (got * 0.37).backward();
    const auto got_grads = grads_of(ht, {head->weight});
    for (size_t i = 0; i < got_grads.size(); ++i)
      EXPECT_WITHIN(tolerance::relative_max_error(got_grads[i], want_grads[i]), bound) << "gradient " << i;
  }
  EXPECT_THROW(ds::tiled_cross_entropy_sum([&](const at::Tensor& t) { return head(t); }, h0, targets.narrow(1, 0, 3),
                                           {head->weight}, 4),
               std::invalid_argument);
  EXPECT_THROW(ds::tiled_compute([&](const at::Tensor& t) { return head(t); }, h0, {head->weight}, 0),
               std::invalid_argument);
}

}  // namespace

namespace {

// How many nodes of `loss`'s autograd graph have a name containing `what` (custom functions are named after their
// class).
int graph_nodes_named(const at::Tensor& loss, const std::string& what) {
  std::vector<torch::autograd::Node*> stack{loss.grad_fn().get()};
  std::set<torch::autograd::Node*> seen;
  int found = 0;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find(what) != std::string::npos) ++found;
    for (const auto& edge : node->next_edges()) stack.push_back(edge.function.get());
  }
  return found;
}

TEST(SequenceTiling, ModelsTakeTheTilesTheirConfigsAskFor) {
  const at::Tensor tokens = at::randint(64, {2, 12}, at::kLong), targets = at::randint(64, {2, 12}, at::kLong);
  deepspeed::models::GPTConfig gpt;
  gpt.vocab_size = 64;
  gpt.seq_len = 12;
  gpt.layers = 3;
  gpt.hidden = 16;
  gpt.heads = 2;
  deepspeed::models::LlamaConfig llama = deepspeed::models::LlamaConfig::from_json(
      R"({"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 16, "intermediate_size": 24,
          "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1})");
  for (int64_t tile : {int64_t{0}, int64_t{5}}) {
    SCOPED_TRACE(tile);
    gpt.tiled_mlp_tokens = gpt.tiled_loss_tokens = tile;
    llama.tiled_mlp_tokens = llama.tiled_loss_tokens = tile;
    const at::Tensor g = deepspeed::models::GPT(gpt)->forward(tokens, targets);
    const at::Tensor l = deepspeed::models::LlamaForCausalLM(llama)->forward(tokens, targets);
    EXPECT_EQ(graph_nodes_named(g, "TiledCompute"), tile > 0 ? gpt.layers : 0);
    EXPECT_EQ(graph_nodes_named(g, "TiledLoss"), tile > 0 ? 1 : 0);
    EXPECT_EQ(graph_nodes_named(l, "TiledCompute"), tile > 0 ? llama.num_hidden_layers : 0);
    EXPECT_EQ(graph_nodes_named(l, "TiledLoss"), tile > 0 ? 1 : 0);
  }
  gpt.tiled_mlp_tokens = -1;
  EXPECT_THROW(deepspeed::models::GPT{gpt}, std::invalid_argument);
}

}  // namespace
