// /metrics in Prometheus' text exposition format (version 0.0.4): the engine's queue, running requests and KV
// blocks, token totals and the recent tokens/s, and the server's requests by endpoint and HTTP status.
//
// RequestCounters is shared by the HTTP threads (thread-safe); prometheus_text is a plain function.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "deepspeed/inference/ragged_engine.h"

namespace deepspeed::serving {

// Requests answered, by endpoint and HTTP status, and streams cut short by their client.
class RequestCounters {
 public:
  void count(const std::string& endpoint, int status);
  void count_disconnect();
  std::map<std::pair<std::string, int>, int64_t> by_status() const;
  int64_t disconnects() const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, int64_t> counts_;
  int64_t disconnects_ = 0;
};

std::string prometheus_text(const inference::EngineMetrics& engine, double tokens_per_second,
                            const RequestCounters& requests);

}  // namespace deepspeed::serving
