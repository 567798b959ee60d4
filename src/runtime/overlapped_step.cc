#include "runtime/overlapped_step.h"

#include <utility>

#include "deepspeed/error.h"

namespace deepspeed::runtime {

OverlappedStep::~OverlappedStep() {
  try {
    wait();
  } catch (...) {
  }
}

void OverlappedStep::launch(std::function<void()> work) {
  DS_ASSERT(!pending(), "an overlapped optimizer step is still running");
  result_ = std::async(std::launch::async, std::move(work));
}

void OverlappedStep::wait() {
  if (!result_.valid()) return;
  std::future<void> done = std::move(result_);  // no longer pending, even when it threw
  done.get();
}

}  // namespace deepspeed::runtime
