#include "runtime/timers.h"

#include <algorithm>
#include <cstdio>

#include "deepspeed/accelerator.h"
#include "deepspeed/error.h"

namespace deepspeed::runtime {

void Timers::start(const std::string& name) {
  Timer& t = timers_[name];
  DS_ASSERT(!t.running, "timer ", name, " started twice");
  accelerator::get_accelerator().synchronize();
  t.started = std::chrono::steady_clock::now();
  t.running = true;
}

void Timers::stop(const std::string& name) {
  auto it = timers_.find(name);
  DS_ASSERT(it != timers_.end() && it->second.running, "timer ", name, " stopped without start");
  accelerator::get_accelerator().synchronize();
  Timer& t = it->second;
  t.total_ms +=
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t.started)
          .count();
  t.running = false;
}

void Timers::add(const std::string& name, double ms) { timers_[name].total_ms += ms; }

double Timers::elapsed_ms(const std::string& name) const {
  auto it = timers_.find(name);
  return it == timers_.end() ? 0.0 : it->second.total_ms;
}

void Timers::reset() {
  for (auto& [name, t] : timers_) t.total_ms = 0;
}

std::string format_timer_table(const std::vector<TimerRow>& rows, int64_t last_step, int64_t steps,
                               double iteration_ms) {
  std::string title =
      "time (ms), step" +
      std::string(steps > 1 ? "s " + std::to_string(last_step - steps + 1) + "-" : " ") +
      std::to_string(last_step);
  size_t width = title.size();
  for (const auto& r : rows)
    width = std::max(width, 2 + 2 * static_cast<size_t>(r.depth) + r.name.size());
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%-*s %12s %12s %7s\n", static_cast<int>(width), title.c_str(),
                "total", "per step", "share");
  std::string out = buf;
  const double per = steps > 0 ? 1.0 / static_cast<double>(steps) : 0.0;
  for (const auto& r : rows) {
    const std::string label = std::string(2 + 2 * static_cast<size_t>(r.depth), ' ') + r.name;
    const double share = iteration_ms > 0 ? 100.0 * r.total_ms / iteration_ms : 0.0;
    std::snprintf(buf, sizeof(buf), "%-*s %12.2f %12.2f %6.1f%%\n", static_cast<int>(width),
                  label.c_str(), r.total_ms, r.total_ms * per, share);
    out += buf;
  }
  return out;
}

}  // namespace deepspeed::runtime
