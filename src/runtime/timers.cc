#include "runtime/timers.h"

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
  t.total_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t.started).count();
  t.running = false;
}

double Timers::elapsed_ms(const std::string& name) const {
  auto it = timers_.find(name);
  return it == timers_.end() ? 0.0 : it->second.total_ms;
}

std::string Timers::log(const std::vector<std::string>& names) {
  std::string out;
  char buf[64];
  for (const auto& name : names) {
    std::snprintf(buf, sizeof(buf), "%s%s: %.2f", out.empty() ? "" : " | ", name.c_str(), elapsed_ms(name));
    out += buf;
    timers_[name].total_ms = 0;
  }
  return out;
}

void Timers::reset() {
  for (auto& [name, t] : timers_) t.total_ms = 0;
}

}  // namespace deepspeed::runtime
