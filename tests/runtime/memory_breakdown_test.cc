// memory_breakdown (DeepSpeed's key): the lines DeepSpeed's see_memory_usage prints, before and after each forward,
// backward and step, with the peaks reset after each print.
#include "runtime/memory_observer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/nn/modules/linear.h>

#include <sstream>
#include <string>
#include <vector>

#include "deepspeed/comm.h"
#include "deepspeed/deepspeed.h"

namespace deepspeed::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

constexpr int64_t kGiB = int64_t{1} << 30;

TEST(MemoryBreakdown, LinesGiveTheDevicesAndTheHostsMemoryInGiB) {
  accelerator::MemoryStats device, host;
  device.allocated_bytes = 3 * kGiB / 2;
  device.peak_allocated_bytes = 2 * kGiB;
  device.reserved_bytes = 3 * kGiB;
  device.peak_reserved_bytes = 4 * kGiB + kGiB / 4;
  host.total_bytes = 16 * kGiB;
  host.available_bytes = 4 * kGiB;
  EXPECT_EQ(memory_usage_lines("Engine before forward", device, host),
            "Engine before forward\n"
            "MA 1.50 GB  Max_MA 2.00 GB  CA 3.00 GB  Max_CA 4.25 GB\n"
            "CPU Virtual Memory:  used = 12.00 GB, percent = 75.0%\n");
}

// Each hook prints its point with the counters read then, and resets the peak after printing; each observer takes
// its side of the phases (the engine adds the "before" one first and the "after" one last).
TEST(MemoryBreakdown, EachHookPrintsItsPointThenResetsThePeak) {
  std::vector<std::string> events;
  int64_t reading = 0;
  MemoryCounters counters{[&] {
                            accelerator::MemoryStats s;
                            s.allocated_bytes = ++reading * kGiB;
                            return s;
                          },
                          [&] { events.push_back("reset"); }};
  auto print = [&](const std::string& lines) { events.push_back(lines); };
  MemoryObserver before(counters, print, MemoryObserver::Points::kBefore);
  MemoryObserver after(counters, print, MemoryObserver::Points::kAfter);
  for (StepObserver* o : {static_cast<StepObserver*>(&before), static_cast<StepObserver*>(&after)}) {
    o->begin_forward(0);
    o->end_forward();
    o->begin_backward();
    o->end_backward();
    o->begin_step();
    o->end_step(true, 1);
  }
  const char* points[] = {"Engine before forward", "Engine before backward", "Engine before step",
                          "Engine after forward",  "Engine after backward",  "Engine after step"};
  ASSERT_EQ(events.size(), 12u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_THAT(events[2 * i], StartsWith(std::string(points[i]) + "\nMA " + std::to_string(i + 1) + ".00 GB"));
    EXPECT_EQ(events[2 * i + 1], "reset");
  }
}

// The engine with memory_breakdown: on rank 0, the six points of every micro-step in order (gas 2, 2 steps), each
// with a reading (on CPU, MA and CA are the RSS: more than nothing); without the key, none.
TEST(MemoryBreakdown, TheEngineReportsEveryMicroStepsSixPoints) {
  if (!comm::is_initialized()) comm::init_distributed();
  for (const bool on : {true, false}) {
    at::manual_seed(5);
    auto net = std::make_shared<torch::nn::LinearImpl>(16, 4);
    auto engine = initialize(net, Config::from_string(std::string(R"({"train_micro_batch_size_per_gpu": 4,
        "gradient_accumulation_steps": 2, "steps_per_print": 1000, "memory_breakdown": )") +
                                                     (on ? "true" : "false") +
                                                     R"(, "optimizer": {"type": "AdamW", "params": {"lr": 0.01}}})"));
    ::testing::internal::CaptureStdout();
    for (int micro = 0; micro < 4; ++micro) {
      at::Tensor loss = engine.forward(at::randn({4, 16}).to(engine.device())).pow(2).mean();
      engine.backward(loss);
      engine.step();
    }
    const std::string out = ::testing::internal::GetCapturedStdout();
    std::istringstream lines(out);
    std::vector<std::string> points;
    for (std::string line; std::getline(lines, line);) {
      if (line.rfind("Engine ", 0) != 0) continue;
      points.push_back(line);
      std::string ma, cpu;
      ASSERT_TRUE(std::getline(lines, ma) && std::getline(lines, cpu)) << out;
      EXPECT_THAT(ma, StartsWith("MA "));
      const size_t ca = ma.find("  CA ");
      ASSERT_NE(ca, std::string::npos) << ma;
      // The allocator holds at least what is allocated (on CPU both are the RSS, more than nothing).
      EXPECT_GE(std::stod(ma.substr(ca + 5)), std::stod(ma.substr(3))) << ma;
      if (engine.device().is_cpu()) {
        EXPECT_GT(std::stod(ma.substr(3)), 0.0) << ma;
      }
      EXPECT_THAT(cpu, StartsWith("CPU Virtual Memory:  used = "));
    }
    if (!on) {
      EXPECT_TRUE(points.empty()) << out;
      continue;
    }
    ASSERT_EQ(points.size(), 24u) << out;
    const char* expected[] = {"Engine before forward",  "Engine after forward", "Engine before backward",
                              "Engine after backward", "Engine before step",   "Engine after step"};
    for (size_t i = 0; i < points.size(); ++i) EXPECT_EQ(points[i], expected[i % 6]) << i;
  }
}

}  // namespace
}  // namespace deepspeed::runtime
