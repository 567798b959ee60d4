#include "monitor/monitor.h"

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
  for (auto& w : writers_) w->write_events(events);
}

}  // namespace deepspeed::monitor
