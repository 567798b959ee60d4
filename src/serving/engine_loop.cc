// EngineLoop and RequestStream (engine_loop.h).
#include "serving/engine_loop.h"

#include <cstdio>
#include <exception>
#include <utility>
#include <vector>

#include "serving/openai_request.h"

namespace deepspeed::serving {
namespace {

using Clock = std::chrono::steady_clock;
constexpr auto kRateWindow = std::chrono::seconds(10);
constexpr auto kRateSampleEvery = std::chrono::seconds(1);

}  // namespace

bool RequestStream::pop(inference::TokenEvent* event, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return false;
  *event = events_.front();
  events_.pop_front();
  return true;
}

void RequestStream::push(const inference::TokenEvent& event) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(event);
  }
  cv_.notify_one();
}

std::shared_ptr<RequestStream> EngineLoop::submit(inference::ServeRequest request) {
  auto stream = std::make_shared<RequestStream>();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_ || stop_ || draining_) {
      throw RequestError(
          503, failed_ ? "the engine failed (see the server's log); restart ds_serve" : "the server is shutting down",
          "", "server_error");
    }
  }
  // The callback runs on the stepping thread and only queues: it must not block the other requests' step.
  const int64_t id = engine_.submit(std::move(request), [this, stream](const inference::TokenEvent& e) {
    stream->push(e);
    if (e.finish != inference::FinishReason::kNone) {
      std::lock_guard<std::mutex> lock(mu_);
      --in_flight_;
    }
  });
  {
    std::lock_guard<std::mutex> lock(mu_);
    stream->id_ = id;
    ++in_flight_;
    std::erase_if(open_, [](const std::weak_ptr<RequestStream>& w) { return w.expired(); });
    open_.push_back(stream);
    work_ = true;
  }
  wake_.notify_one();
  return stream;
}

void EngineLoop::cancel(int64_t request_id) {
  engine_.cancel(request_id);
  {
    std::lock_guard<std::mutex> lock(mu_);
    work_ = true;
  }
  wake_.notify_one();
}

void EngineLoop::shutdown() {
  std::vector<int64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
    for (const std::weak_ptr<RequestStream>& weak : open_) {
      if (auto stream = weak.lock()) ids.push_back(stream->id());
    }
  }
  for (const int64_t id : ids) cancel(id);
}

void EngineLoop::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (stop_) return;
      if (failed_) {
        wake_.wait(lock, [&] { return stop_; });
        return;
      }
      work_ = false;
    }
    bool stepped = false;
    try {
      stepped = engine_.step();
    } catch (const std::exception& e) {
      fail_all(e.what());
      continue;
    }
    if (stepped) {
      record_rate_sample();
      continue;
    }
    // Idle: sleep until a submit or cancel (work_ set after the step above started) or stop.
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [&] { return work_ || stop_; });
  }
}

void EngineLoop::fail_all(const std::string& why) {
  std::fprintf(stderr, "ds_serve: error: the engine's step failed, no request is served from now on: %s\n",
               why.c_str());
  std::lock_guard<std::mutex> lock(mu_);
  failed_ = true;
  for (const std::weak_ptr<RequestStream>& weak : open_) {
    if (auto stream = weak.lock()) stream->push({stream->id(), -1, inference::FinishReason::kCancelled});
  }
  open_.clear();
  in_flight_ = 0;
}

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
}

bool EngineLoop::failed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failed_;
}

int64_t EngineLoop::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

void EngineLoop::record_rate_sample() {
  const auto now = Clock::now();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!rate_samples_.empty() && now - rate_samples_.back().first < kRateSampleEvery) return;
  }
  const int64_t generated = engine_.metrics().generated_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  rate_samples_.emplace_back(now, generated);
  // Keep one sample older than the window: the rate's start when the loop slept through it.
  while (rate_samples_.size() > 1 && now - rate_samples_[1].first > kRateWindow) rate_samples_.pop_front();
}

double EngineLoop::tokens_per_second() const {
  const auto now = Clock::now();
  const int64_t generated = engine_.metrics().generated_tokens;
  std::lock_guard<std::mutex> lock(mu_);
  // The oldest sample still inside the window, else the newest one before it.
  const std::pair<Clock::time_point, int64_t>* start = nullptr;
  for (const auto& sample : rate_samples_) {
    if (start == nullptr || now - sample.first >= kRateWindow) start = &sample;
    if (now - sample.first < kRateWindow) break;
  }
  if (start == nullptr) return 0.0;
  const double seconds = std::chrono::duration<double>(now - start->first).count();
  return seconds > 0 ? static_cast<double>(generated - start->second) / seconds : 0.0;
}

}  // namespace deepspeed::serving
