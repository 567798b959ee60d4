// How long communication kept training waiting (Stage3Stats' gather and reduce waits, GradReducer::blocked_ms), on
// the device's clock. Each wait is bracketed by two accelerator events recorded on the current (compute) stream:
// on a GPU, where Work::wait returns at once and the compute stream is what waits, the span between them is the
// stall the collective caused; on CPU events read the host clock, so the span is the wait itself. A span is added
// to its total once its end event has completed (at once on CPU; checked without blocking at each new span, and
// with a wait in resolve(), which readers call).
//
// Not thread-safe: used by one stage from the thread running its hooks.
#pragma once

#include <chrono>
#include <memory>
#include <vector>

#include "deepspeed/accelerator.h"

namespace deepspeed::zero {

inline double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

class WaitClock {
 public:
  // One bracketed wait: begin() before it, end(span, &total) after it.
  struct Span {
    std::unique_ptr<accelerator::Event> begin;
  };

  Span begin() {
    Span s{accelerator::get_accelerator().new_event(/*enable_timing=*/true)};
    s.begin->record();
    return s;
  }

  // Adds the span to *total (a counter that outlives this clock's pending spans) once it has completed.
  void end(Span span, double* total) {
    auto end_event = accelerator::get_accelerator().new_event(/*enable_timing=*/true);
    end_event->record();
    pending_.push_back({std::move(span.begin), std::move(end_event), total});
    settle(/*wait=*/false);
  }

  // Adds every pending span to its total, waiting for the device where one has not completed yet.
  void resolve() { settle(/*wait=*/true); }

 private:
  struct Pending {
    std::unique_ptr<accelerator::Event> begin, end;
    double* total;
  };

  void settle(bool wait) {
    size_t done = 0;
    for (; done < pending_.size(); ++done) {
      Pending& p = pending_[done];
      if (!wait && !p.end->query()) break;  // spans complete in order on the one compute stream
      *p.total += p.begin->elapsed_ms(*p.end);
    }
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(done));
  }

  std::vector<Pending> pending_;
};

}  // namespace deepspeed::zero
