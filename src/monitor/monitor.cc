#include "monitor/monitor.h"

#include <cstdio>
#include <exception>

#include "deepspeed/error.h"
#include "monitor/csv_monitor.h"
#include "monitor/tensorboard_monitor.h"

namespace deepspeed::monitor {

MonitorMaster::MonitorMaster(const config::Config& config, int rank) {
  const auto& m = config.monitor;
  if (rank != 0) return;
  if (m.tensorboard.enabled)
    writers_.push_back(
        std::make_unique<TensorBoardMonitor>(m.tensorboard.output_path, m.tensorboard.job_name));
  if (m.csv_monitor.enabled)
    writers_.push_back(
        std::make_unique<CsvMonitor>(m.csv_monitor.output_path, m.csv_monitor.job_name));
}

void MonitorMaster::write_events(const std::vector<Event>& events) {
  // Only rank 0 writes: an exception here would stop rank 0 alone and leave the others waiting in
  // their next collective. A monitor that cannot write is reported once and turned off; training
  // goes on.
  try {
    for (auto& w : writers_) w->write_events(events);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepspeed: warning: monitor turned off: %s\n", e.what());
    writers_.clear();
  }
}

}  // namespace deepspeed::monitor
