// See comms_logger.h.
#include "comm/comms_logger.h"

#include <algorithm>
#include <cstdio>
#include <iostream>

namespace deepspeed::comm::detail {
namespace {

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string format_bytes(int64_t b) {
  char buf[32];
  if (b >= (int64_t{1} << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(int64_t{1} << 30));
  } else if (b >= (1 << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / double(1 << 20));
  } else if (b >= (1 << 10)) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / double(1 << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld B", static_cast<long long>(b));
  }
  return buf;
}

CommsStat make_stat(const std::string& op, int64_t bytes, int64_t count, double total_ms,
                    double factor) {
  CommsStat s;
  s.op = op;
  s.msg_bytes = bytes;
  s.count = count;
  s.total_latency_ms = total_ms;
  s.avg_latency_ms = count ? total_ms / count : 0;
  // bytes / ms * 1e-6 = GB/s.
  s.algbw_gbps = s.avg_latency_ms > 0 ? bytes / s.avg_latency_ms * 1e-6 : 0;
  s.busbw_gbps = s.algbw_gbps * factor;
  return s;
}

}  // namespace

double busbw_factor(const std::string& op, int n) {
  if (n <= 1) return 1.0;
  if (starts_with(op, "all_reduce")) return 2.0 * (n - 1) / n;
  if (starts_with(op, "all_gather") || starts_with(op, "reduce_scatter") ||
      starts_with(op, "all_to_all")) {
    return double(n - 1) / n;
  }
  return 1.0;
}

CommsLogger& CommsLogger::instance() {
  // Leaked on purpose: ranks may still complete work while static destructors run.
  static CommsLogger* logger = new CommsLogger();
  return *logger;
}

void CommsLogger::configure(const CommsLoggerOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  options_ = options;
}

bool CommsLogger::should_log(const std::string& op) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!options_.enabled) return false;
  if (options_.prof_all) return true;
  return std::find(options_.prof_ops.begin(), options_.prof_ops.end(), op) !=
         options_.prof_ops.end();
}

void CommsLogger::record(const std::string& op, int64_t msg_bytes, double latency_ms,
                         int world_size, const std::string& detail) {
  double factor = busbw_factor(op, world_size);
  bool verbose, debug;
  {
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = entries_[{op, msg_bytes}];
    e.count += 1;
    e.total_ms += latency_ms;
    e.factor = factor;
    CommsGroupStat& g = by_group_[{op, world_size}];
    g.op = op;
    g.group_size = world_size;
    g.bytes += msg_bytes;
    g.count += 1;
    verbose = options_.verbose;
    debug = options_.debug;
  }
  if (!verbose) return;
  CommsStat s = make_stat(op, msg_bytes, 1, latency_ms, factor);
  char line[256];
  std::snprintf(
      line, sizeof(line),
      "comm op: %s | time (ms): %.3f | msg size: %s | algbw (GB/s): %.3f | busbw (GB/s): %.3f",
      op.c_str(), latency_ms, format_bytes(msg_bytes).c_str(), s.algbw_gbps, s.busbw_gbps);
  std::string out = line;
  if (debug) out += " | " + detail;
  std::cout << out << std::endl;
}

std::vector<CommsStat> CommsLogger::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommsStat> out;
  for (const auto& [key, e] : entries_) {
    out.push_back(make_stat(key.first, key.second, e.count, e.total_ms, e.factor));
  }
  return out;
}

std::vector<CommsGroupStat> CommsLogger::group_stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<CommsGroupStat> out;
  for (const auto& [key, g] : by_group_) out.push_back(g);
  return out;
}

std::string CommsLogger::summary() const {
  std::vector<CommsStat> all = stats();
  std::string out;
  char line[256];
  int width = 24;  // the name column fits "<op> total"
  for (const CommsStat& s : all) width = std::max(width, static_cast<int>(s.op.size()) + 6);
  std::snprintf(line, sizeof(line), "%-*s %14s %8s %18s %16s %14s %14s\n", width, "Comm. Op",
                "Message Size", "Count", "Total Latency(ms)", "Avg Latency(ms)", "algbw (GB/s)",
                "busbw (GB/s)");
  out += line;
  auto row = [&](const std::string& name, const std::string& size, int64_t count, double total_ms,
                 double avg_ms, double algbw, double busbw) {
    std::snprintf(line, sizeof(line), "%-*s %14s %8lld %18.3f %16.3f %14.3f %14.3f\n", width,
                  name.c_str(), size.c_str(), static_cast<long long>(count), total_ms, avg_ms,
                  algbw, busbw);
    out += line;
  };
  for (size_t i = 0; i < all.size();) {
    // Like DeepSpeed's table: the op name once, then one row per message size; then (ours) the
    // op's totals: bytes moved, count and latency summed, bandwidth of the whole.
    const std::string op = all[i].op;
    int64_t count = 0, bytes = 0;
    double total_ms = 0, busbw_factor = 1;
    for (; i < all.size() && all[i].op == op; ++i) {
      const CommsStat& s = all[i];
      row(count == 0 ? op : "", format_bytes(s.msg_bytes), s.count, s.total_latency_ms,
          s.avg_latency_ms, s.algbw_gbps, s.busbw_gbps);
      count += s.count;
      bytes += s.msg_bytes * s.count;
      total_ms += s.total_latency_ms;
      if (s.algbw_gbps > 0) busbw_factor = s.busbw_gbps / s.algbw_gbps;
    }
    const double algbw = total_ms > 0 ? bytes / total_ms * 1e-6 : 0;
    row(op + " total", format_bytes(bytes), count, total_ms, count ? total_ms / count : 0, algbw,
        algbw * busbw_factor);
  }
  return out;
}

void CommsLogger::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
  by_group_.clear();
}

}  // namespace deepspeed::comm::detail

namespace deepspeed::comm {

void configure_comms_logger(const CommsLoggerOptions& options) {
  detail::CommsLogger::instance().configure(options);
}
std::vector<CommsStat> comms_stats() { return detail::CommsLogger::instance().stats(); }
std::vector<CommsGroupStat> comms_group_stats() { return detail::CommsLogger::instance().group_stats(); }
std::string log_summary(bool print) {
  std::string s = detail::CommsLogger::instance().summary();
  if (print) std::cout << s << std::flush;
  return s;
}
void reset_comms_logger() { detail::CommsLogger::instance().reset(); }

}  // namespace deepspeed::comm
