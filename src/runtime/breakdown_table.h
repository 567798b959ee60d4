// wall_clock_breakdown's table: the engine's timers since the last table (forward, backward and its reduction share,
// step) and the ZeRO stage's waits (stage 3's gathers and prefetch waits), printed with the log line.
#pragma once

#include <cstdint>
#include <string>

#include "deepspeed/zero.h"
#include "runtime/timers.h"
#include "zero/stage.h"

namespace deepspeed::runtime {

class BreakdownTable {
 public:
  // The stage's cumulative wait counters now: the next table counts from here (not from construction's gathers).
  void start(const zero::Stage& stage);
  // The table over `steps` steps ending at `global_steps`; then resets `timers` and starts the next table.
  std::string next(Timers& timers, const zero::Stage& stage, int64_t global_steps, int64_t steps);

 private:
  zero::Stage3Stats logged_;  // the cumulative wait counters as of the last table
  bool gathers_ = false;      // the stage gathers parameters between uses (fixed for its life)
};

}  // namespace deepspeed::runtime
