// ds_plot's reading side: the metrics a csv_monitor run directory holds and a check of each file's
// layout.
//
// The layout is the one src/monitor/csv_monitor.cc writes (DeepSpeed's): <output_path>/<job_name>/
// Train_Samples_<metric>.csv, a header `step,<metric>` then rows `<global samples>,<value>` (values
// as %.17g, so `nan` and `inf` are valid). Errors are PlotError with a one-line message naming the
// file (and line).
#pragma once

#include <cstddef>
#include <map>
#include <stdexcept>
#include <string>

namespace deepspeed::plot {

class PlotError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// metric name -> CSV path for every Train_Samples_<metric>.csv directly in `run_dir`, sorted by
// name. Empty when there is none; throws PlotError when the directory cannot be read.
std::map<std::string, std::string> find_metrics(const std::string& run_dir);

// Checks the header and every row of one metric's file; returns the number of data rows (at least
// 1).
size_t check_metric_csv(const std::string& path);

}  // namespace deepspeed::plot
