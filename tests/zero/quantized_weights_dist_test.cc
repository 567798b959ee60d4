// ZeRO++ qwZ (zero_quantized_weights) across real ranks: the weights a unit's forward sees are its exact values
// quantized block-wise (within half a step of each block's scale, the same on every rank), GatheredParameters still
// reads the exact ones, the all-gathers carry 1 byte per element plus the scales (bf16: about half the bytes, fp32 a
// quarter, from the comms logger), and training stays within a measured bound of exact stage 3 after 10 steps.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "tiny_gpt.h"
#include "tolerance.h"

namespace {

constexpr int64_t kIn = 16, kOut = 300;

// A unit whose forward on the identity returns its weight, transposed, exactly (each output is one weight times 1).
struct ProbeNetImpl : torch::nn::Module {
  ProbeNetImpl() {
    a = register_module(
        "a", deepspeed::zero::shard(torch::nn::Linear(torch::nn::LinearOptions(kIn, kOut).bias(false))));
    head = register_module("head", torch::nn::Linear(kOut, 1));
  }
  at::Tensor forward(const at::Tensor& x, const at::Tensor& y) {
    at::Tensor h = a->forward(x);
    seen = h.detach().clone();
    return at::mse_loss(head->forward(at::tanh(h)), y);
  }
  std::shared_ptr<deepspeed::zero::ShardedImpl<torch::nn::LinearImpl>> a;
  torch::nn::Linear head{nullptr};
  at::Tensor seen;
};
TORCH_MODULE(ProbeNet);

std::string probe_config(bool quantized, const std::string& precision = "") {
  return std::string(R"({"train_micro_batch_size_per_gpu": 16, "steps_per_print": 1000,
      "optimizer": {"type": "SGD", "params": {"lr": 0.05}},)") +
         (precision.empty() ? "" : "\"" + precision + "\": {\"enabled\": true},") +
         R"("zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "zero_quantized_weights": )" +
         (quantized ? "true" : "false") + "}}";
}

at::Tensor weight_of(const ProbeNet& net) { return net->a->parameters().at(0); }

TEST(QuantizedWeights, ForwardSeesTheQuantizedWeightsAndGatheredParametersTheExactOnes) {
  tiny_gpt::ensure_comm();
  at::manual_seed(5);
  ProbeNet net;
  auto engine = deepspeed::initialize(net, deepspeed::Config::from_string(probe_config(true)));
  const at::Tensor eye = at::eye(kIn).to(engine.device()), target = at::zeros({kIn, 1}).to(engine.device());
  // A first step records the unit order, so from now on the schedule keeps `a` gathered from its forward to its
  // backward (it comes back within stage3_max_reuse_distance).
  engine.backward(engine.forward(eye, target));
  engine.step();
  at::Tensor exact;
  {
    deepspeed::zero::GatheredParameters gathered(*net);
    exact = weight_of(net).detach().clone();
  }
  at::Tensor loss = engine.forward(eye, target);
  const at::Tensor seen = net->seen.t();
  const double err = (seen - exact).abs().max().item<double>();
  if (engine.world_size() == 1) {
    EXPECT_EQ(err, 0.0) << "one rank sends nothing, so nothing is quantized";
  } else {
    // Half of the coarsest block's step (the largest magnitude over 127), plus fp32's roundings of x / s and q * s.
    const double half_step = exact.abs().max().item<double>() / 127 / 2;
    EXPECT_LE(err, half_step * (1 + 4 * tolerance::kFp32Epsilon));
    EXPECT_GT(err, half_step / 4) << "the forward must run on quantized weights";
  }
  {
    // Kept gathered through int8, so gathered again exactly. The unit only: the root unit stays gathered from
    // forward to backward (the engine's own schedule).
    deepspeed::zero::GatheredParameters gathered(std::vector<at::Tensor>{weight_of(net)});
    EXPECT_TRUE(at::equal(weight_of(net), exact)) << "GatheredParameters reads the exact values";
  }
  engine.backward(loss);
  engine.step();
  // And after a step that gathered it through int8 in forward and backward: int8 holds at most 255 values per block
  // (the weight's 4800 elements make 3-4 blocks at any world size: at most 1020 values), while the exact weights
  // are nearly all distinct.
  deepspeed::zero::GatheredParameters gathered(*net);
  EXPECT_GT(std::get<0>(at::_unique(weight_of(net))).numel(), 4000);
}

// Bytes of all_gather_into_tensor over two training steps (forward and backward gathers), from the comms logger.
int64_t gathered_bytes(bool quantized, const std::string& precision) {
  tiny_gpt::ensure_comm();
  at::manual_seed(5);
  ProbeNet net;
  auto engine = deepspeed::initialize(net, deepspeed::Config::from_string(probe_config(quantized, precision)));
  deepspeed::comm::CommsLoggerOptions logging;
  logging.enabled = true;
  deepspeed::comm::configure_comms_logger(logging);
  deepspeed::comm::reset_comms_logger();
  for (int step = 0; step < 2; ++step) {
    at::Tensor x = at::randn({16, kIn}).to(engine.device());
    if (precision == "bf16") x = x.to(at::kBFloat16);
    at::Tensor y = at::zeros({16, 1}, x.options());
    engine.backward(engine.forward(x, y));
    engine.step();
  }
  int64_t bytes = 0;
  for (const auto& s : deepspeed::comm::comms_stats())
    if (s.op == "all_gather_into_tensor") bytes += s.msg_bytes * s.count;
  deepspeed::comm::configure_comms_logger({});
  return bytes;
}

// One int8 byte per element instead of the model dtype's, plus a 4-byte scale per block: per 2048 elements, and per
// piece a parameter or padding makes of a partition (the probe's small root partitions of 80-160 elements hold up to 3
// pieces), so under 2% more.
TEST(QuantizedWeights, AllGathersCarryOneBytePerElementPlusScales) {
  tiny_gpt::ensure_comm();
  if (deepspeed::comm::get_world_size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  for (const std::string precision : {"", "bf16"}) {
    const double element = precision.empty() ? 4.0 : 2.0;
    const double ratio = static_cast<double>(gathered_bytes(true, precision)) / gathered_bytes(false, precision);
    EXPECT_GT(ratio, 1 / element) << precision;
    EXPECT_LT(ratio, 1.02 / element) << precision;
  }
}

// The tiny GPT with its blocks as units, SGD at lr 0.5 (each update proportional to the gradient), 10 steps: the
// quantized run against exact stage 3. Every forward and backward runs on weights within half a block step of the
// exact ones (about 1% of a 0.02-scale weight), and the gradients follow; no closed form carries that through the
// network, so measured at both SIMD levels, 2-4 ranks: worst 3.7e-2 at 2 ranks, on a LayerNorm bias (relative to its
// small norm; the matrices stay within 1e-2). Blocks that mixed a LayerNorm's ones with the weights beside them
// (one block per 2048 elements of the flat buffer, as DeepSpeed cuts it) measured 0.16-0.29, a wrong scale or
// placement ~1. The quantization must show: far above the exact layouts' fp32 agreement.
TEST(QuantizedWeights, TrainsWithinAMeasuredBoundOfExactStage3) {
  tiny_gpt::ensure_comm();
  if (deepspeed::comm::get_world_size() == 1) GTEST_SKIP() << "one rank gathers nothing";
  auto run = [](bool quantized) {
    deepspeed::models::GPTConfig c = tiny_gpt::config();
    c.shard_blocks = true;
    deepspeed::models::GPT model = tiny_gpt::make_model(c);
    const std::string json = std::string(R"({"train_micro_batch_size_per_gpu": 2, "steps_per_print": 1000,
        "optimizer": {"type": "SGD", "params": {"lr": 0.5}},
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0, "zero_quantized_weights": )") +
                             (quantized ? "true" : "false") + "}}";
    auto engine = deepspeed::initialize(model, deepspeed::Config::from_string(json));
    tiny_gpt::train(engine, tiny_gpt::dataset(c), 10);
    deepspeed::zero::GatheredParameters full(*model);
    return tiny_gpt::snapshot(model);
  };
  const std::vector<at::Tensor> exact = run(false), quantized = run(true);
  const double err = tiny_gpt::max_relative_error(quantized, exact);
  EXPECT_WITHIN(err, tolerance::measured(3.71e-2, 3.70e-2, /*margin=*/2.0));
  EXPECT_GT(err, 1e-5) << "quantized gathers must change the training";
}

}  // namespace
