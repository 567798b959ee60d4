#include "zero/stage3/prefetch_coordinator.h"

#include <algorithm>

namespace deepspeed::zero {

void PrefetchCoordinator::begin_pass() {
  if (in_pass_) end_pass();  // a forward without backward (evaluation) still ends its pass
  in_pass_ = true;
  recording_.clear();
  recording_backward_ = static_cast<size_t>(-1);
  pos_ = 0;
  following_ = !trace_.empty();
}

bool PrefetchCoordinator::on_fetch(int id) {
  if (!in_pass_) begin_pass();
  bool ok = true;
  if (following_) {
    if (pos_ >= trace_.size() || trace_[pos_] != id) {
      following_ = false;
      ++invalidations_;
      ok = false;
    }
  }
  recording_.push_back(id);
  ++pos_;
  return ok;
}

void PrefetchCoordinator::begin_backward() {
  if (in_pass_ && recording_backward_ == static_cast<size_t>(-1)) recording_backward_ = recording_.size();
}

void PrefetchCoordinator::end_pass() {
  if (!in_pass_) return;
  in_pass_ = false;
  following_ = false;
  trace_ = recording_;
  trace_backward_ = std::min(recording_backward_, trace_.size());
}

std::vector<int> PrefetchCoordinator::upcoming(size_t max_count, bool within_forward) const {
  std::vector<int> out;
  if (!following_) return out;
  const size_t end = within_forward && pos_ <= trace_backward_ ? trace_backward_ : trace_.size();
  for (size_t i = pos_; i < end && out.size() < max_count; ++i) out.push_back(trace_[i]);
  return out;
}

}  // namespace deepspeed::zero
