// The serving thread model: one thread steps the RaggedEngine (every forward pass of every request happens there),
// and each HTTP handler thread submits its request and waits on that request's own queue of token events.
//
//   EngineLoop loop(engine);
//   std::thread stepper([&] { loop.run(); });              // steps while there is work, sleeps when idle
//   auto request = loop.submit(std::move(serve_request));   // any thread
//   TokenEvent e;
//   while (request->pop(&e, std::chrono::seconds(1)) ...)   // the handler's thread
//   loop.stop(); stepper.join();
//
// A request cancelled with cancel() (a client that went away, a stop string reached) gets one last event with
// FinishReason::kCancelled once the engine has freed its blocks. The loop also keeps the generated-token rate over
// the last seconds for /metrics.
//
// Thread-safety: submit, cancel, shutdown, tokens_per_second, in_flight and stop from any thread; run on one thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "deepspeed/inference/ragged_engine.h"

namespace deepspeed::serving {

// One request's events, filled by the engine's thread and drained by its handler.
class RequestStream {
 public:
  // Waits up to `timeout` for the next event; false when none came.
  bool pop(inference::TokenEvent* event, std::chrono::milliseconds timeout);
  void push(const inference::TokenEvent& event);
  int64_t id() const { return id_; }

 private:
  friend class EngineLoop;
  int64_t id_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<inference::TokenEvent> events_;
};

class EngineLoop {
 public:
  explicit EngineLoop(inference::RaggedEngine& engine) : engine_(engine) {}
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Submits to the engine (its std::invalid_argument and ConfigError pass through) and wakes the loop.
  std::shared_ptr<RequestStream> submit(inference::ServeRequest request);
  void cancel(int64_t request_id);
  // Refuses new requests (503) and cancels every open one, so their handlers end before the server stops; the
  // loop keeps stepping until stop().
  void shutdown();
  // Steps until stop(); an idle engine sleeps until the next submit or cancel. A step that throws is reported on
  // stderr and ends every open request with kCancelled (the engine's state is then unknown: failed() turns true).
  void run();
  void stop();
  bool failed() const;
  // Requests submitted and not yet ended.
  int64_t in_flight() const;
  // Generated tokens per second over about the last 10 seconds.
  double tokens_per_second() const;

 private:
  void record_rate_sample();
  void fail_all(const std::string& why);

  inference::RaggedEngine& engine_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool work_ = false;
  bool stop_ = false;
  bool draining_ = false;
  bool failed_ = false;
  int64_t in_flight_ = 0;
  std::deque<std::weak_ptr<RequestStream>> open_;  // for shutdown and fail_all; expired ones pruned on submit
  // (time, generated tokens) samples, about one a second, for tokens_per_second.
  std::deque<std::pair<std::chrono::steady_clock::time_point, int64_t>> rate_samples_;
};

}  // namespace deepspeed::serving
