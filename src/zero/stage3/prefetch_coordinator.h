// The order in which a training step fetches its stage-3 units (forward and backward), recorded on the first step
// and replayed on the next ones so gathers can be issued ahead of use (stage3_prefetch_bucket_size) and units that
// come back soon can stay gathered (stage3_max_reuse_distance). If a step fetches in a different order (a branch
// taken differently), the coordinator notices at the first divergence, stops predicting for the rest of that step
// and records the new order for the next one.
//
// Not thread-safe; see stage3.h.
#pragma once

#include <cstdint>
#include <vector>

namespace deepspeed::zero {

class PrefetchCoordinator {
 public:
  // A new micro-step starts (its first fetch comes next).
  void begin_pass();
  // Records that unit `id` is fetched now. Returns false when a trace was being followed and this fetch diverges
  // from it (the trace is then dropped and re-recorded).
  bool on_fetch(int id);
  // The pass's backward begins: fetches from here on are the backward's.
  void begin_backward();
  // The recorded trace becomes the prediction for the next pass.
  void end_pass();

  // True while the current pass follows a complete trace from an earlier pass.
  bool following() const { return following_; }
  // Unit ids predicted after the current fetch, nearest first (empty when not following); with
  // `within_forward`, a fetch in the forward sees only the rest of the forward.
  std::vector<int> upcoming(size_t max_count, bool within_forward = false) const;

  int64_t invalidations() const { return invalidations_; }

 private:
  std::vector<int> trace_;      // the previous complete pass
  std::vector<int> recording_;  // this pass so far
  size_t trace_backward_ = 0;   // where the backward's fetches begin in trace_ (its size when it had none)
  size_t recording_backward_ = 0;
  size_t pos_ = 0;              // fetches so far in this pass
  bool following_ = false;
  bool in_pass_ = false;
  int64_t invalidations_ = 0;
};

}  // namespace deepspeed::zero
