// The HTTP face of ds_serve, the one file that sees cpp-httplib (Debian's libcpp-httplib): routes
//   POST /v1/completions, POST /v1/chat/completions   CompletionService, JSON or server-sent events
//   GET  /v1/models, GET /health, GET /metrics         the model list, 200 or 503, Prometheus text
// and answers every error in OpenAI's JSON shape: 400 for a bad request, 404 for an unknown path or model, 413 for a
// body over max_body_bytes (never held in memory), 411 for a chunked body (its size unbounded), 429 when the queue is
// full, 500 for an exception the handler did not expect. Each connection is served on a pool thread; a streamed request
// holds its thread until it ends or its client goes away (then it is cancelled).
//
//   HttpServer server(service, counters, metrics_text, healthy, {"127.0.0.1", 8000});
//   server.bind();    // ConfigError naming host:port when it cannot listen
//   server.serve();   // blocks until stop(), from any thread
//
// Thread-safety: stop() from any thread; the rest from the thread that owns the server.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "serving/completion_service.h"
#include "serving/serving_metrics.h"

namespace deepspeed::serving {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  size_t max_body_bytes = 16u << 20;
  int threads = 64;  // connections served at once (each streamed request holds one)
};

class HttpServer {
 public:
  HttpServer(CompletionService& service, RequestCounters& counters, std::function<std::string()> metrics_text,
             std::function<bool()> healthy, HttpOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  void bind();
  void serve();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepspeed::serving
