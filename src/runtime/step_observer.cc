// See step_observer.h.
#include "runtime/step_observer.h"

namespace deepspeed::runtime {

void StepObservers::add(std::unique_ptr<StepObserver> observer) {
  if (observer) list_.push_back(std::move(observer));
}

void StepObservers::begin_forward(int64_t global_steps) {
  for (auto& o : list_) o->begin_forward(global_steps);
}

void StepObservers::end_forward() {
  for (auto& o : list_) o->end_forward();
}

void StepObservers::begin_backward() {
  for (auto& o : list_) o->begin_backward();
}

void StepObservers::end_backward() {
  for (auto& o : list_) o->end_backward();
}

void StepObservers::begin_step() {
  for (auto& o : list_) o->begin_step();
}

void StepObservers::end_step(bool boundary, int64_t global_steps) {
  for (auto& o : list_) o->end_step(boundary, global_steps);
}

void StepObservers::on_report(const StepReport& report) {
  for (auto& o : list_) o->on_report(report);
}

void StepObservers::on_resume(int64_t global_steps) {
  for (auto& o : list_) o->on_resume(global_steps);
}

}  // namespace deepspeed::runtime
