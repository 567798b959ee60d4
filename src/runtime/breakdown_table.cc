#include "runtime/breakdown_table.h"

#include <algorithm>
#include <vector>

#include "zero/stage_features.h"

namespace deepspeed::runtime {

void BreakdownTable::start(const zero::Stage& stage) {
  logged_ = stage.stats();
  gathers_ = zero::partitions_parameters(stage);
}

std::string BreakdownTable::next(Timers& timers, const zero::Stage& stage, int64_t global_steps, int64_t steps) {
  // Backward's reduction share: time the reducer kept backward waiting (stages 0-2), or stage 3's waits for its
  // gradient reductions; both are cumulative counters, read as the difference since the last table.
  const zero::Stage3Stats s3 = stage.stats();
  const double reduce = s3.reduce_wait_ms - logged_.reduce_wait_ms;
  const double fwd = timers.elapsed_ms("fwd"), bwd = timers.elapsed_ms("bwd"), step = timers.elapsed_ms("step");
  std::vector<TimerRow> rows = {{"forward", fwd, 0},
                                {"backward", bwd, 0},
                                {"compute", std::max(0.0, bwd - reduce), 1},
                                {"reduce (blocked)", reduce, 1},
                                {"step", step, 0}};
  if (gathers_) {
    // Parts of forward and backward: gathers of parameters needed at once, and what prefetching did not hide.
    rows.push_back({"stage 3 gather (on demand, in fwd/bwd)", s3.gather_ms - logged_.gather_ms, 0});
    rows.push_back({"stage 3 prefetch wait (in fwd/bwd)", s3.prefetch_wait_ms - logged_.prefetch_wait_ms, 0});
  }
  logged_ = s3;
  timers.reset();
  return format_timer_table(rows, global_steps, steps, fwd + bwd + step);
}

}  // namespace deepspeed::runtime
