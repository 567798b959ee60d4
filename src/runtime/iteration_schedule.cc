// Gradient accumulation, the default IterationSchedule (iteration_schedule.h): a window of gradient_accumulation_steps
// iterations ends in one optimizer step.
#include "runtime/iteration_schedule.h"

#include <utility>

namespace deepspeed::runtime {

std::unique_ptr<IterationSchedule> make_zenflow_iterations(IterationParts parts, const IterationRequest& request);

namespace {

class GradientAccumulation final : public IterationSchedule {
 public:
  GradientAccumulation(int64_t steps, IterationActions actions) : steps_(steps), actions_(std::move(actions)) {}

  bool ends_window(int64_t i) const override { return (i + 1) % steps_ == 0; }
  int64_t loss_divisor() const override { return steps_; }
  void run(int64_t /*i*/, bool ends_window) override {
    if (ends_window) actions_.optimizer_step();
  }
  int64_t resume(int64_t steps, std::optional<int64_t> /*saved_iterations*/,
                 const std::optional<c10::impl::GenericDict>& /*section*/, const std::string& /*where*/) override {
    return steps * steps_;
  }

 private:
  int64_t steps_;
  IterationActions actions_;
};

}  // namespace

std::unique_ptr<IterationSchedule> make_iteration_schedule(IterationParts parts, const IterationRequest& request) {
  if (parts.config->zero.zenflow) return make_zenflow_iterations(std::move(parts), request);
  const int64_t steps = parts.config->gradient_accumulation_steps.value();
  return std::make_unique<GradientAccumulation>(steps, std::move(parts.actions));
}

}  // namespace deepspeed::runtime
