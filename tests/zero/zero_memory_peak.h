// What the ZeRO memory tests share (zero_memory_dist_test.cc, zero_memory_order_dist_test.cc): the process's
// counting CPU allocator, and the peak live tensor bytes of one stage's engine over its training steps.
#pragma once

#include <cstdint>
#include <string>

#include "counting_allocator.h"
#include "deepspeed/deepspeed.h"
#include "deepspeed/zero.h"
#include "tiny_gpt.h"

namespace zero_memory {

inline CountingAllocator& counter() {
  static CountingAllocator c;
  return c;
}

// Peak live bytes above `base` (the bytes live before the model was built) over `steps` training steps of an
// engine built from `config_json` on a GPT of `model` (under zero::Init, which partitions it at stage 3). The peak
// counts from the first step on: initialize's flattening holds the model's own tensors beside the flat buffer for a
// moment, a one-off the stages' formulas do not describe (stage 3 builds under zero::Init and never holds the model).
inline int64_t stage_peak(const std::string& config_json, const deepspeed::models::GPTConfig& model,
                          const at::Tensor& data, int64_t base, int steps) {
  auto cfg = deepspeed::Config::from_string(config_json);
  deepspeed::models::GPT gpt = [&] {
    deepspeed::zero::Init init(cfg);
    return tiny_gpt::make_model(model);
  }();
  auto engine = deepspeed::initialize(gpt, cfg);
  counter().reset_peak();
  tiny_gpt::train(engine, data, steps);
  return counter().peak() - base;
}

}  // namespace zero_memory
