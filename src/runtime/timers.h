// Named wall-clock timers for `wall_clock_breakdown` (DeepSpeed's forward/backward/step breakdown). Each timer
// sums the intervals between start() and stop() until reset; the accelerator is synchronized at both ends so
// asynchronous device work is counted where it was issued. Single-threaded.
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
  // Milliseconds accumulated since the last reset; 0 for an unknown name.
  double elapsed_ms(const std::string& name) const;
  // "fwd: 12.30 | bwd: 20.10 | step: 3.00" for the named timers (in that order), then resets them.
  std::string log(const std::vector<std::string>& names);
  void reset();

 private:
  struct Timer {
    std::chrono::steady_clock::time_point started;
    bool running = false;
    double total_ms = 0;
  };
  std::map<std::string, Timer> timers_;
};

}  // namespace deepspeed::runtime
