// DeepSpeed's csv_monitor: one CSV file per metric under <output_path>/<job_name>/ (as in
// DeepSpeed, the default output_path "" means ./<job_name>), named after the metric with '/' and '
// ' turned into '_'
// ("Train_Samples_train_loss.csv"), holding a "step,<last part of the name>" header and one
// "step,value" row per event. Files are appended to, so a resumed run continues them; the header is
// written when a file is new.
#pragma once

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "monitor/monitor.h"

namespace deepspeed::monitor {

class CsvMonitor : public Writer {
 public:
  // Creates the directory; throws deepspeed::Error naming it when it cannot.
  CsvMonitor(const std::string& output_path, const std::string& job_name);
  ~CsvMonitor() override;
  CsvMonitor(const CsvMonitor&) = delete;
  CsvMonitor& operator=(const CsvMonitor&) = delete;

  void write_events(const std::vector<Event>& events) override;
  const std::string& log_dir() const { return log_dir_; }
  // The file an event of this name goes to.
  std::string file_for(const std::string& name) const;

 private:
  std::string log_dir_;
  std::map<std::string, std::FILE*> files_;  // by metric name, opened on first use
};

}  // namespace deepspeed::monitor
