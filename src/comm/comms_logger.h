// The comms logger: per (op, message size) counts, latency and bandwidth of completed collectives,
// after DeepSpeed's comms_logger. Work::Impl records each op once when it completes (at wait() for
// async ops, so latency covers issue to completion).
//
// Thread-safety: all methods may be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/comm.h"

namespace deepspeed::comm::detail {

// DeepSpeed's bus-bandwidth factor for `op` on `world_size` ranks (all_reduce 2(n-1)/n;
// all_gather*, reduce_scatter*, all_to_all* (n-1)/n; others 1).
double busbw_factor(const std::string& op, int world_size);

class CommsLogger {
 public:
  static CommsLogger& instance();

  void configure(const CommsLoggerOptions& options);
  // Whether a completed `op` should be recorded (enabled, and prof_all or listed in prof_ops).
  bool should_log(const std::string& op) const;
  // `detail` is printed on verbose lines in debug mode (group and sequence number).
  void record(const std::string& op, int64_t msg_bytes, double latency_ms, int world_size,
              const std::string& detail);

  std::vector<CommsStat> stats() const;
  std::vector<CommsGroupStat> group_stats() const;
  std::string summary() const;
  void reset();

 private:
  struct Entry {
    int64_t count = 0;
    double total_ms = 0;
    double factor = 1;  // busbw factor of the latest record (world size is fixed per group)
  };
  mutable std::mutex mu_;
  CommsLoggerOptions options_;
  std::map<std::pair<std::string, int64_t>, Entry> entries_;
  std::map<std::pair<std::string, int>, CommsGroupStat> by_group_;  // (op, group size)
};

}  // namespace deepspeed::comm::detail
