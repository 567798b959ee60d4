// Outside fp16, a step whose gradients hold NaN is skipped exactly where DeepSpeed 0.19 skips it and taken where it
// steps on: the cases are tests/zero/nonfinite_cases.json, whose verdicts nonfinite_deepspeed.py checks against
// Python DeepSpeed. One rank's batch carries the NaN; every rank must agree.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "elementwise_net.h"
#include "tiny_gpt.h"

namespace {

using elementwise_net::batch_for;
using elementwise_net::ElementwiseNet;

std::vector<at::Tensor> params_now(const ElementwiseNet& net) {
  deepspeed::zero::GatheredParameters gathered(*net);
  std::vector<at::Tensor> out;
  for (const auto& p : net->parameters()) out.push_back(p.detach().to(at::kCPU, at::kFloat, false, true));
  return out;
}

bool all_finite(const std::vector<at::Tensor>& ps) {
  for (const at::Tensor& p : ps)
    if (!at::isfinite(p).all().item<bool>()) return false;
  return true;
}

TEST(NonFiniteStep, SkippedWhereDeepSpeedSkipsIt) {
  tiny_gpt::ensure_comm();
  const int rank = deepspeed::comm::get_rank();
  const int poisoned = deepspeed::comm::get_world_size() - 1;
  struct Case {
    std::string precision;  // "bf16", "bf16 unchecked" (check_grad_overflow false) or "fp32"
    int stage;
    bool skips;
  };
  std::vector<Case> cases;
  std::ifstream in(DS_NONFINITE_CASES);
  ASSERT_TRUE(in) << DS_NONFINITE_CASES;
  const nlohmann::json table = nlohmann::json::parse(in);
  for (const auto& c : table.at("cases"))
    cases.push_back({c.at("precision").get<std::string>(), c.at("stage").get<int>(), c.at("skips").get<bool>()});
  ASSERT_EQ(cases.size(), 12u);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.precision + " stage " + std::to_string(c.stage));
    const std::string precision =
        c.precision == "fp32" ? ""
                              : std::string(R"(, "bf16": {"enabled": true)") +
                                    (c.precision == "bf16 unchecked" ? R"(, "check_grad_overflow": false)" : "") + "}";
    ElementwiseNet net;
    auto engine = deepspeed::initialize(
        net, deepspeed::Config::from_string(
                 R"({"train_micro_batch_size_per_gpu": 4, "steps_per_print": 1000, "optimizer": {"type": "AdamW",
                     "params": {"lr": 0.01}}, "zero_optimization": {"stage": )" +
                 std::to_string(c.stage) + R"(, "stage3_param_persistence_threshold": 0})" + precision + "}"));
    const at::ScalarType dtype = net->parameters()[0].scalar_type();
    for (int step = 0; step < 3; ++step) {
      at::Tensor t;
      at::Tensor x = batch_for(rank, step, &t).to(dtype);
      t = t.to(dtype);
      if (step == 1 && rank == poisoned) x[0][5] = std::numeric_limits<float>::quiet_NaN();
      const auto before = params_now(net);
      engine.backward(engine.forward(x.to(engine.device()), t.to(engine.device())));
      engine.step();
      const auto after = params_now(net);
      if (step != 1) continue;
      if (c.skips) {
        EXPECT_EQ(engine.skipped_steps(), 1);
        for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(at::equal(before[i], after[i])) << "param " << i;
      } else {
        EXPECT_EQ(engine.skipped_steps(), 0);
        EXPECT_FALSE(all_finite(after)) << "DeepSpeed steps on here, NaN and all";
      }
    }
    // A skipped step moves nothing, so the next one trains on finite values.
    if (c.skips) {
      EXPECT_TRUE(all_finite(params_now(net)));
    }
    EXPECT_EQ(engine.global_steps(), 3);
  }
}

}  // namespace
