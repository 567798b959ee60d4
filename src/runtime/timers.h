// Named wall-clock timers for `wall_clock_breakdown` (DeepSpeed's forward/backward/step breakdown).
// Each timer sums the intervals between start() and stop() until reset; the accelerator is
// synchronized at both ends so asynchronous device work is counted where it was issued.
// Single-threaded.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace deepspeed::runtime {

class Timers {
 public:
  void start(const std::string& name);
  void stop(const std::string& name);
  // Adds a duration measured elsewhere (e.g. time a reducer spent blocked) to `name`.
  void add(const std::string& name, double ms);
  // Milliseconds accumulated since the last reset; 0 for an unknown name.
  double elapsed_ms(const std::string& name) const;
  void reset();

 private:
  struct Timer {
    std::chrono::steady_clock::time_point started;
    bool running = false;
    double total_ms = 0;
  };
  std::map<std::string, Timer> timers_;
};

// One row of the wall_clock_breakdown table: `depth` indents it under the row above (a part of that
// row).
struct TimerRow {
  std::string name;
  double total_ms = 0;
  int depth = 0;
};

// The breakdown over `steps` optimizer steps ending at `last_step`, as one aligned table:
//   time (ms), steps 11-20            total   per step   share
//     forward                        123.40      12.34   31.2%
//       ...
// `share` is of `iteration_ms` (forward + backward + step).
std::string format_timer_table(const std::vector<TimerRow>& rows, int64_t last_step, int64_t steps,
                               double iteration_ms);

}  // namespace deepspeed::runtime
