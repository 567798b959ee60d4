// deepspeed::checkpointing against plain LibTorch runs of the same model, seed and batch: a
// residual MLP with dropout and the reference GPT's blocks with dropout. Gradients must be
// bit-identical (same ops on the same values in the same order, with the RNG replayed), and the
// memory claims are checked through a counting CPU allocator and checkpointing's own accounting.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "counting_allocator.h"
#include "deepspeed/accelerator.h"
#include "deepspeed/checkpointing.h"
#include "deepspeed/config.h"
#include "deepspeed/error.h"
#include "gpt.h"

namespace ckpt = deepspeed::checkpointing;

namespace {

// x + fc2(dropout(gelu(fc1(x)))): the activations a plain run keeps are 4x wider than the input.
class ResidualMlpImpl : public torch::nn::Module {
 public:
  ResidualMlpImpl(int64_t width, int64_t hidden, double p) : p_(p) {
    fc1_ = register_module("fc1", torch::nn::Linear(width, hidden));
    fc2_ = register_module("fc2", torch::nn::Linear(hidden, width));
  }
  at::Tensor forward(const at::Tensor& x) {
    return x + fc2_->forward(at::dropout(at::gelu(fc1_->forward(x)), p_, is_training()));
  }

 private:
  double p_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};
TORCH_MODULE(ResidualMlp);

// A stack of blocks, each run plainly or as a checkpointed segment.
struct Stack {
  std::vector<std::function<at::Tensor(const at::Tensor&)>> blocks;
  std::vector<at::Tensor> params;

  at::Tensor forward(at::Tensor x, bool checkpointed) const {
    for (const auto& block : blocks) x = checkpointed ? ckpt::checkpoint(block, x) : block(x);
    return x;
  }
};

Stack mlp_stack(int layers, int64_t width, double p, c10::Device device = at::kCPU) {
  at::manual_seed(3);
  Stack s;
  for (int i = 0; i < layers; ++i) {
    ResidualMlp m(width, 4 * width, p);
    m->to(device);
    s.blocks.push_back([m](const at::Tensor& x) mutable { return m->forward(x); });
    for (const auto& t : m->parameters()) s.params.push_back(t);
  }
  return s;
}

// What one forward/backward produced.
struct Outcome {
  at::Tensor loss;
  at::Tensor input_grad;
  std::vector<at::Tensor> param_grads;
  at::Tensor rng_after;  // the next draw from the CPU generator after backward
};

void zero_grads(const std::vector<at::Tensor>& params) {
  for (auto p : params) p.mutable_grad() = at::Tensor();
}

// One seeded forward (through `forward`) and backward of a weighted sum.
Outcome run_once(const std::vector<at::Tensor>& params, const at::Tensor& input,
                 const std::function<at::Tensor(const at::Tensor&)>& forward) {
  zero_grads(params);
  at::Tensor x = input.detach().clone().requires_grad_(input.requires_grad());
  at::manual_seed(11);
  at::Tensor out = forward(x);
  at::Tensor weights = at::linspace(-1, 1, out.numel()).to(out.device()).view(out.sizes());
  Outcome r;
  r.loss = (out * weights).sum();
  r.loss.backward();
  r.loss = r.loss.detach();
  if (x.requires_grad()) r.input_grad = x.grad();
  for (const auto& p : params)
    r.param_grads.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  r.rng_after = at::rand({4});
  return r;
}

void expect_identical(const Outcome& plain, const Outcome& ck) {
  EXPECT_TRUE(at::equal(plain.loss, ck.loss))
      << plain.loss.item<double>() << " vs " << ck.loss.item<double>();
  ASSERT_EQ(plain.input_grad.defined(), ck.input_grad.defined());
  if (plain.input_grad.defined()) {
    EXPECT_TRUE(at::equal(plain.input_grad, ck.input_grad))
        << "input grad max diff " << (plain.input_grad - ck.input_grad).abs().max().item<double>();
  }
  ASSERT_EQ(plain.param_grads.size(), ck.param_grads.size());
  for (size_t i = 0; i < plain.param_grads.size(); ++i) {
    ASSERT_TRUE(plain.param_grads[i].defined())
        << "parameter " << i << " got no gradient in the plain run";
    ASSERT_TRUE(ck.param_grads[i].defined())
        << "parameter " << i << " got no gradient when checkpointed";
    EXPECT_TRUE(at::equal(plain.param_grads[i], ck.param_grads[i]))
        << "parameter " << i << " max diff "
        << (plain.param_grads[i] - ck.param_grads[i]).abs().max().item<double>();
  }
  // The recomputation replays the forward's random draws without disturbing the stream that
  // follows.
  EXPECT_TRUE(at::equal(plain.rng_after, ck.rng_after));
}

class ActivationCheckpointingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ckpt::configure(deepspeed::config::ActivationCheckpointingConfig{});
    ckpt::reset();
  }
  void TearDown() override {
    ckpt::configure(deepspeed::config::ActivationCheckpointingConfig{});
    ckpt::reset();
  }
};

constexpr int64_t kBatch = 16;
constexpr int64_t kWidth = 32;

TEST_F(ActivationCheckpointingTest, MlpWithDropoutMatchesPlainRunBitForBit) {
  Stack s = mlp_stack(3, kWidth, 0.3);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  Outcome plain = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, false); });
  Outcome ck = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, true); });
  expect_identical(plain, ck);

  // Dropout really was active (so the comparison above depended on replaying the RNG).
  Outcome other = run_once(s.params, x, [&](const at::Tensor& in) {
    at::manual_seed(12);
    return s.forward(in, false);
  });
  EXPECT_FALSE(at::equal(plain.loss, other.loss));

  ckpt::CheckpointStats st = ckpt::stats();
  EXPECT_EQ(st.forwards, 3);
  EXPECT_EQ(st.recomputes, 3);
  EXPECT_EQ(st.live_segments, 0);
  EXPECT_EQ(st.saved_bytes, 0);
  EXPECT_EQ(st.peak_saved_bytes, 3 * kBatch * kWidth * 4);
}

TEST_F(ActivationCheckpointingTest, GptBlocksWithDropoutMatchPlainRunBitForBit) {
  deepspeed::models::GPTConfig cfg;
  cfg.vocab_size = 50;
  cfg.seq_len = 12;
  cfg.hidden = 32;
  cfg.heads = 4;
  cfg.dropout = 0.2;
  at::manual_seed(5);
  torch::nn::Embedding wte(cfg.vocab_size, cfg.hidden);
  Stack s;
  for (auto& p : wte->parameters()) s.params.push_back(p);
  for (int i = 0; i < 3; ++i) {
    deepspeed::models::GPTBlock block(cfg);
    s.blocks.push_back([block](const at::Tensor& h) mutable { return block->forward(h); });
    for (auto& p : block->parameters()) s.params.push_back(p);
  }
  at::Tensor tokens = at::randint(cfg.vocab_size, {4, cfg.seq_len}, at::kLong);
  // The first segment's input comes from the embedding; the token ids themselves need no gradient.
  auto model = [&](bool checkpointed) {
    return [&, checkpointed](const at::Tensor& ids) {
      return s.forward(wte->forward(ids), checkpointed);
    };
  };
  Outcome plain = run_once(s.params, tokens, model(false));
  Outcome ck = run_once(s.params, tokens, model(true));
  expect_identical(plain, ck);
  EXPECT_EQ(ckpt::stats().recomputes, 3);
}

TEST_F(ActivationCheckpointingTest, NestedCheckpointsMatchPlainRun) {
  Stack s = mlp_stack(4, kWidth, 0.25);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  // Two outer segments, each holding two checkpointed blocks.
  auto nested = [&](const at::Tensor& in) {
    at::Tensor h = in;
    for (int outer = 0; outer < 2; ++outer) {
      h = ckpt::checkpoint(
          [&, outer](const at::Tensor& v) {
            at::Tensor y = ckpt::checkpoint(s.blocks[2 * outer], v);
            return ckpt::checkpoint(s.blocks[2 * outer + 1], y);
          },
          h);
    }
    return h;
  };
  Outcome plain = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, false); });
  Outcome ck = run_once(s.params, x, nested);
  expect_identical(plain, ck);
  // Outer forwards run the inner blocks without a graph; each outer recomputation checkpoints its
  // two blocks.
  ckpt::CheckpointStats st = ckpt::stats();
  EXPECT_EQ(st.forwards, 2 + 4);
  EXPECT_EQ(st.recomputes, 2 + 4);
  EXPECT_EQ(st.live_segments, 0);
}

TEST_F(ActivationCheckpointingTest, InputsWithoutGradientsAndNonTensorArguments) {
  Stack s = mlp_stack(1, kWidth, 0.3);
  at::Tensor x = at::randn({kBatch, kWidth});     // no gradient wanted
  at::Tensor keep = at::rand({kBatch, 1}) > 0.3;  // a bool mask
  const double scale = 0.5;                       // a non-tensor argument, captured
  ckpt::SegmentFn segment = [&](const std::vector<at::Tensor>& in) {
    EXPECT_FALSE(in[1].defined());  // an absent optional input passes through as undefined
    at::Tensor y = s.blocks[0](in[0]) * in[2].to(at::kFloat) * scale;
    return std::vector<at::Tensor>{y, at::Tensor(), in[2].sum()};
  };
  auto forward = [&](bool checkpointed) {
    return [&, checkpointed](const at::Tensor& in) {
      std::vector<at::Tensor> args{in, at::Tensor(), keep};
      std::vector<at::Tensor> out = checkpointed ? ckpt::checkpoint(segment, args) : segment(args);
      EXPECT_EQ(out.size(), 3u);
      EXPECT_FALSE(out[1].defined());
      EXPECT_EQ(out[2].item<int64_t>(), keep.sum().item<int64_t>());
      EXPECT_FALSE(out[2].requires_grad());
      return out[0];
    };
  };
  Outcome plain = run_once(s.params, x, forward(false));
  Outcome ck = run_once(s.params, x, forward(true));
  // No input requires a gradient, yet the block's parameters receive theirs.
  expect_identical(plain, ck);
}

TEST_F(ActivationCheckpointingTest, MultiTensorOverloadAndEvaluationWithoutGrad) {
  Stack s = mlp_stack(1, kWidth, 0.0);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  at::Tensor bias = at::randn({kWidth}).requires_grad_(true);
  auto fn = [&](const at::Tensor& a, const at::Tensor& b) { return s.blocks[0](a + b); };
  at::Tensor y = ckpt::checkpoint(fn, x, bias);
  y.sum().backward();
  at::Tensor bias_grad = bias.grad().clone();
  bias.mutable_grad() = at::Tensor();
  fn(x, bias).sum().backward();
  EXPECT_TRUE(at::equal(bias_grad, bias.grad()));

  // Under NoGradGuard nothing is recorded, so nothing is checkpointed.
  ckpt::reset();
  at::NoGradGuard no_grad;
  at::Tensor z = ckpt::checkpoint(s.blocks[0], x);
  EXPECT_FALSE(z.requires_grad());
  EXPECT_EQ(ckpt::stats().forwards, 0);
}

TEST_F(ActivationCheckpointingTest, SegmentMayReturnItsInputAndRetainGraphWorks) {
  Stack s = mlp_stack(1, kWidth, 0.3);
  ckpt::SegmentFn segment = [&](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{in[0], s.blocks[0](in[0])};
  };
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  auto grads_of = [&](bool checkpointed) {
    zero_grads(s.params);
    at::Tensor xi = x.detach().clone().requires_grad_(true);
    at::manual_seed(4);
    std::vector<at::Tensor> out = checkpointed ? ckpt::checkpoint(segment, {xi}) : segment({xi});
    at::Tensor loss = (out[0] * 3).sum() + out[1].pow(2).sum();
    // Twice through a retained graph: gradients double, the recomputation replays the same dropout.
    loss.backward({}, /*retain_graph=*/true);
    loss.backward();
    std::vector<at::Tensor> g{xi.grad().clone()};
    for (const auto& p : s.params) g.push_back(p.grad().clone());
    return g;
  };
  std::vector<at::Tensor> plain = grads_of(false), ck = grads_of(true);
  ASSERT_EQ(plain.size(), ck.size());
  for (size_t i = 0; i < plain.size(); ++i)
    EXPECT_TRUE(at::equal(plain[i], ck[i])) << "gradient " << i;
  EXPECT_EQ(ckpt::stats().recomputes, 2);
  EXPECT_EQ(ckpt::stats().live_segments, 0);
}

TEST_F(ActivationCheckpointingTest, GradApiIsRefusedWithAClearMessage) {
  Stack s = mlp_stack(1, kWidth, 0.0);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  at::Tensor loss = ckpt::checkpoint(s.blocks[0], x).sum();
  try {
    torch::autograd::grad({loss}, {x});
    FAIL() << "torch::autograd::grad through a checkpoint did not throw";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("use backward()"), std::string::npos) << e.what();
  }
}

// Three checkpointed blocks on `device` under `c` (cpu_checkpointing on) against the plain run: bit for bit, with
// every block's input counted in host memory during the forward.
void expect_cpu_checkpointing_matches(deepspeed::config::ActivationCheckpointingConfig c, c10::Device device) {
  c.cpu_checkpointing = true;
  ckpt::configure(c);
  Stack s = mlp_stack(3, kWidth, 0.3, device);
  at::Tensor x = at::randn({kBatch, kWidth}).to(device).requires_grad_(true);
  Outcome plain = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, false); });
  int64_t host_during_forward = -1;
  Outcome ck = run_once(s.params, x, [&](const at::Tensor& in) {
    at::Tensor out = s.forward(in, true);
    host_during_forward = ckpt::stats().host_saved_bytes;
    return out;
  });
  expect_identical(plain, ck);
  EXPECT_EQ(host_during_forward, 3 * kBatch * kWidth * 4);
}

TEST_F(ActivationCheckpointingTest, CpuCheckpointingKeepsInputsInHostMemoryAndMatches) {
  expect_cpu_checkpointing_matches({}, at::kCPU);
  EXPECT_EQ(ckpt::stats().host_saved_bytes, 0);
}

deepspeed::config::ActivationCheckpointingConfig contiguous_settings(int slots) {
  deepspeed::config::ActivationCheckpointingConfig c;
  c.partition_activations = true;
  c.contiguous_memory_optimization = true;
  c.number_checkpoints = slots;
  return c;
}

TEST_F(ActivationCheckpointingTest, ContiguousBufferHoldsSavedInputsAndMatches) {
  ckpt::configure(contiguous_settings(4));
  Stack s = mlp_stack(3, kWidth, 0.3);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  Outcome plain = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, false); });
  ckpt::CheckpointStats during;
  Outcome ck = run_once(s.params, x, [&](const at::Tensor& in) {
    at::Tensor out = s.forward(in, true);
    during = ckpt::stats();
    return out;
  });
  expect_identical(plain, ck);
  const int64_t input_bytes = kBatch * kWidth * 4;  // a multiple of the 64-byte slot alignment
  EXPECT_EQ(during.contiguous_slots_in_use, 3);
  EXPECT_EQ(during.contiguous_buffer_bytes, 4 * input_bytes);
  EXPECT_EQ(during.saved_bytes, 3 * input_bytes);
  // Slots come back when backward drops the saved tensors; the buffer is kept for the next step.
  ckpt::CheckpointStats after = ckpt::stats();
  EXPECT_EQ(after.contiguous_slots_in_use, 0);
  EXPECT_EQ(after.contiguous_buffer_bytes, 4 * input_bytes);

  // A second step reuses the same buffer and still matches.
  Outcome again = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, true); });
  expect_identical(plain, again);
  EXPECT_EQ(ckpt::stats().contiguous_buffer_bytes, 4 * input_bytes);

  ckpt::reset();
  EXPECT_EQ(ckpt::stats().contiguous_buffer_bytes, 0);
}

TEST_F(ActivationCheckpointingTest, MoreLiveCheckpointsThanNumberCheckpointsNamesTheKey) {
  ckpt::configure(contiguous_settings(2));
  Stack s = mlp_stack(3, kWidth, 0.0);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  try {
    at::Tensor out = s.forward(x, true);
    FAIL() << "a third live checkpoint with number_checkpoints 2 did not throw";
  } catch (const deepspeed::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("activation_checkpointing.number_checkpoints"),
              std::string::npos)
        << e.what();
  }
  // The two segments that did start were dropped with the failed forward, and their slots with
  // them.
  EXPECT_EQ(ckpt::stats().contiguous_slots_in_use, 0);
  EXPECT_EQ(ckpt::stats().live_segments, 0);
}

TEST_F(ActivationCheckpointingTest, ConfigureFromConfigAndRejectedCombinations) {
  auto cfg = deepspeed::Config::from_string(R"({"train_batch_size": 8, "activation_checkpointing": {
      "partition_activations": true, "cpu_checkpointing": true, "contiguous_memory_optimization": true,
      "number_checkpoints": 6, "synchronize_checkpoint_boundary": true, "profile": true}})");
  ckpt::configure(cfg);
  EXPECT_TRUE(ckpt::is_configured());
  auto s = ckpt::settings();
  EXPECT_TRUE(s.partition_activations && s.cpu_checkpointing && s.contiguous_memory_optimization);
  EXPECT_EQ(s.number_checkpoints.value_or(0), 6);
  EXPECT_TRUE(s.synchronize_checkpoint_boundary && s.profile);

  auto expect_config_error = [](const deepspeed::config::ActivationCheckpointingConfig& c,
                                const char* key) {
    try {
      ckpt::configure(c);
      ADD_FAILURE() << "configure accepted a combination DeepSpeed refuses (" << key << ")";
    } catch (const deepspeed::ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(key), std::string::npos) << e.what();
    }
  };
  auto no_partition = contiguous_settings(4);
  no_partition.partition_activations = false;
  expect_config_error(no_partition, "activation_checkpointing.contiguous_memory_optimization");
  auto no_count = contiguous_settings(4);
  no_count.number_checkpoints.reset();
  expect_config_error(no_count, "activation_checkpointing.number_checkpoints");
  // A refused configure leaves the previous settings in force.
  EXPECT_EQ(ckpt::settings().number_checkpoints.value_or(0), 6);
}

// cpu_checkpointing from the accelerator's device (the GPU check runs it; on a CPU device inputs are in host memory
// already): each checkpointed input goes down into pinned host memory and comes back for the recompute, with and
// without the contiguous buffer, and the result is the plain run's bit for bit.
TEST_F(ActivationCheckpointingTest, CpuCheckpointingFromTheDeviceMatches) {
  const c10::Device device = deepspeed::accelerator::get_accelerator().device();
  if (device.is_cpu()) GTEST_SKIP() << "inputs are in host memory already (runs in the GPU check)";
  for (bool contiguous : {false, true}) {
    SCOPED_TRACE(contiguous ? "contiguous buffer" : "one buffer per input");
    expect_cpu_checkpointing_matches(
        contiguous ? contiguous_settings(3) : deepspeed::config::ActivationCheckpointingConfig{}, device);
    ckpt::reset();
  }
}

TEST_F(ActivationCheckpointingTest, AllOptionsTogetherMatchPlainRun) {
  auto c = contiguous_settings(3);
  c.cpu_checkpointing = true;
  c.synchronize_checkpoint_boundary = true;
  c.profile = true;
  ckpt::configure(c);
  Stack s = mlp_stack(3, kWidth, 0.3);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  Outcome plain = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, false); });
  Outcome ck = run_once(s.params, x, [&](const at::Tensor& in) { return s.forward(in, true); });
  expect_identical(plain, ck);
  ckpt::CheckpointStats st = ckpt::stats();
  EXPECT_EQ(st.synchronizations, 2 * 3);  // at each segment's forward and backward
  EXPECT_GT(st.forward_ms, 0.0);
  EXPECT_GT(st.recompute_ms, 0.0);
  EXPECT_GT(st.backward_ms, 0.0);
  ckpt::reset();
  EXPECT_EQ(ckpt::stats().forward_ms, 0.0);
}

TEST_F(ActivationCheckpointingTest, ProfileOffRecordsNoTimes) {
  Stack s = mlp_stack(2, kWidth, 0.0);
  at::Tensor x = at::randn({kBatch, kWidth}).requires_grad_(true);
  s.forward(x, true).sum().backward();
  ckpt::CheckpointStats st = ckpt::stats();
  EXPECT_EQ(st.recomputes, 2);
  EXPECT_EQ(st.forward_ms, 0.0);
  EXPECT_EQ(st.synchronizations, 0);
}

// The point of it all: a checkpointed forward keeps far fewer bytes alive for backward.
TEST_F(ActivationCheckpointingTest, CheckpointedForwardHoldsFewerBytes) {
  constexpr int kLayers = 4;
  constexpr int64_t kBig = 128, kWide = 64;
  Stack s = mlp_stack(kLayers, kWide, 0.1);
  at::Tensor x = at::randn({kBig, kWide}).requires_grad_(true);
  CountingAllocator counting;
  auto held_after_forward = [&](bool checkpointed, ckpt::CheckpointStats* st) {
    CountingAllocator::Scope scope(&counting);
    const int64_t before = counting.live();
    at::Tensor loss = s.forward(x, checkpointed).sum();
    const int64_t held = counting.live() - before;
    if (st) *st = ckpt::stats();
    loss.backward();
    zero_grads(s.params);
    return held;
  };
  const int64_t plain = held_after_forward(false, nullptr);
  ckpt::CheckpointStats st;
  const int64_t checkpointed = held_after_forward(true, &st);
  const int64_t activation_bytes = kBig * kWide * 4;
  RecordProperty("plain_bytes_held", std::to_string(plain));
  RecordProperty("checkpointed_bytes_held", std::to_string(checkpointed));
  // Checkpointing keeps each segment's input (the previous segment's output) and the last output; a
  // plain run also keeps every hidden activation, dropout mask and GELU input, 4x wider.
  EXPECT_EQ(st.saved_bytes, kLayers * activation_bytes);
  EXPECT_EQ(st.live_segments, kLayers);
  EXPECT_GT(plain, 5 * checkpointed)
      << "plain " << plain << " bytes, checkpointed " << checkpointed;
  EXPECT_GE(checkpointed,
            kLayers * activation_bytes - activation_bytes);  // the counter really counted
}

}  // namespace
