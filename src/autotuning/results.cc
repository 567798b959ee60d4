// The results table the autotuner prints and writes at the end of a search.
#include <algorithm>
#include <cstdio>
#include <sstream>

#include "autotuning/autotuning.h"

namespace deepspeed::autotuning {
namespace {

// The column header for the metric, with the unit the engine reports it in.
std::string metric_header(const std::string& metric) {
  if (metric == "throughput") return "throughput (samples/s)";
  if (metric == "latency") return "latency (s/step)";
  return metric;
}

std::string format_metric(double value) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", value);
  return buf;
}

std::string offload_label(const Candidate& c) {
  if (c.offload_optimizer == zero::OffloadTarget::kNone &&
      c.offload_param == zero::OffloadTarget::kNone) {
    return "none";
  }
  std::string label = std::string("optimizer=") + zero::offload_target_name(c.offload_optimizer);
  if (c.offload_param != zero::OffloadTarget::kNone) {
    label += std::string(",param=") + zero::offload_target_name(c.offload_param);
  }
  return label;
}

}  // namespace

const char* trial_status_name(TrialStatus status) {
  switch (status) {
    case TrialStatus::kOk:
      return "ok";
    case TrialStatus::kFailed:
      return "failed";
    case TrialStatus::kOutOfMemory:
      return "out_of_memory";
    case TrialStatus::kTimeout:
      return "timeout";
    case TrialStatus::kPruned:
      return "pruned";
  }
  return "unknown";
}

std::string results_table(const std::vector<TrialResult>& results, const std::string& metric) {
  const std::optional<TrialResult> best = best_trial(results, metric);  // validates `metric`
  // The first kOk row equal to the best is the one marked, as best_trial picks the earliest.
  bool marked = false;

  std::vector<std::vector<std::string>> rows;
  rows.push_back({"", "name", "stage", "mbs", "gas", "offload", metric_header(metric), "status"});
  for (const TrialResult& r : results) {
    const Candidate& c = r.candidate;
    const bool ok = r.status == TrialStatus::kOk;
    const bool is_best =
        ok && !marked && best && r.candidate == best->candidate && r.metric == best->metric;
    marked = marked || is_best;
    std::string status = trial_status_name(r.status);
    if (!r.detail.empty()) status += ": " + r.detail;
    rows.push_back({is_best ? "*" : "", c.name(), std::to_string(c.zero_stage),
                    std::to_string(c.micro_batch), std::to_string(c.gradient_accumulation),
                    offload_label(c), ok ? format_metric(r.metric) : "-", status});
  }

  std::vector<size_t> widths(rows.front().size(), 0);
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::ostringstream os;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) line += " | ";
      // The last column holds free text: no padding after it.
      line += i + 1 == row.size() ? row[i] : row[i] + std::string(widths[i] - row[i].size(), ' ');
    }
    os << line << "\n";
  }
  if (best) {
    os << "best: " << best->candidate.name() << " (" << metric << " " << format_metric(best->metric)
       << ")\n";
  } else {
    os << "best: none, no trial succeeded\n";
  }
  return os.str();
}

}  // namespace deepspeed::autotuning
