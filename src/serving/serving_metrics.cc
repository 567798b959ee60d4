// RequestCounters and the Prometheus text of /metrics (serving_metrics.h).
#include "serving/serving_metrics.h"

#include <cstdio>

namespace deepspeed::serving {
namespace {

void metric(std::string& out, const char* name, const char* type, const char* help, double value) {
  char line[64];
  std::snprintf(line, sizeof(line), "%.17g", value);
  out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n" + name + " " + line + "\n";
}

}  // namespace

void RequestCounters::count(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++counts_[{endpoint, status}];
}

void RequestCounters::count_disconnect() {
  std::lock_guard<std::mutex> lock(mu_);
  ++disconnects_;
}

std::map<std::pair<std::string, int>, int64_t> RequestCounters::by_status() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counts_;
}

int64_t RequestCounters::disconnects() const {
  std::lock_guard<std::mutex> lock(mu_);
  return disconnects_;
}

std::string prometheus_text(const inference::EngineMetrics& m, double tokens_per_second,
                            const RequestCounters& requests) {
  std::string out;
  const auto d = [](int64_t v) { return static_cast<double>(v); };
  metric(out, "ds_serve_queue_length", "gauge", "Requests submitted and waiting to be scheduled.", d(m.waiting));
  metric(out, "ds_serve_running_requests", "gauge", "Requests holding KV blocks.", d(m.running));
  metric(out, "ds_serve_kv_blocks_used", "gauge", "KV cache blocks in use.", d(m.kv_blocks_used));
  metric(out, "ds_serve_kv_blocks_total", "gauge", "KV cache blocks in all.", d(m.kv_blocks_total));
  metric(out, "ds_serve_tokens_per_second", "gauge", "Generated tokens per second over the last 10 seconds.",
         tokens_per_second);
  metric(out, "ds_serve_prompt_tokens_total", "counter", "Prompt tokens processed.", d(m.prompt_tokens));
  metric(out, "ds_serve_generated_tokens_total", "counter", "Tokens generated.", d(m.generated_tokens));
  metric(out, "ds_serve_engine_requests_finished_total", "counter", "Requests the engine ended (any reason).",
         d(m.requests_finished));
  metric(out, "ds_serve_forward_passes_total", "counter", "Forward passes of the engine.", d(m.forward_passes));
  metric(out, "ds_serve_busy_seconds_total", "counter", "Seconds spent in forward passes.", m.busy_seconds);
  metric(out, "ds_serve_client_disconnects_total", "counter", "Streams whose client went away; each was cancelled.",
         d(requests.disconnects()));
  out += "# HELP ds_serve_requests_total HTTP requests answered, by endpoint and status.\n";
  out += "# TYPE ds_serve_requests_total counter\n";
  for (const auto& [key, count] : requests.by_status()) {
    out += "ds_serve_requests_total{endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
           std::to_string(count) + "\n";
  }
  return out;
}

}  // namespace deepspeed::serving
