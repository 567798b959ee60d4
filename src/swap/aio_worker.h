// One aio worker thread driving its own io_uring: it takes chunks from its queue, keeps up to
// `queue_depth` of them in flight and completes them into their requests. DeepSpeed's
// `deepspeed_aio_thread`.
//
// Submission policy follows the `aio` config: `single_submit` calls io_uring_submit after every
// request instead of once per batch; `overlap_events` refills free queue slots as soon as any
// request completes, otherwise each batch of up to queue_depth requests is drained completely
// before the next is submitted.
//
// Thread-safety: enqueue() may be called from any thread; everything else runs on the worker's own
// thread. The destructor finishes the queued work before the thread exits.
#pragma once

#include <liburing.h>

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "swap/aio.h"
#include "swap/aio_request.h"

namespace deepspeed::swap {

class AioWorker {
 public:
  // Throws AioError when io_uring cannot be set up (e.g. disabled by the kernel or a seccomp
  // profile).
  explicit AioWorker(const AioOptions& options);
  ~AioWorker();
  AioWorker(const AioWorker&) = delete;
  AioWorker& operator=(const AioWorker&) = delete;

  void enqueue(std::vector<AioChunk> chunks);

 private:
  void run();
  // Moves queued (or retried) chunks into free slots and submits them; returns how many were
  // submitted.
  int submit_ready();
  // Reaps at least one completion (blocking) and then all that are ready.
  void reap();
  void complete(int slot, int result);
  void fail_chunk(AioChunk& chunk, const std::string& why);

  AioOptions options_;
  io_uring ring_;
  std::thread thread_;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<AioChunk> queue_;
  bool stop_ = false;

  // Worker-thread state.
  std::vector<AioChunk> slots_;  // in-flight chunks by slot index (the SQE's user_data)
  std::vector<int> free_slots_;
  std::deque<AioChunk> retry_;  // remainders of partial transfers, submitted before new work
  std::string broken_;  // set when io_uring_submit failed for good: every later chunk fails with it
};

}  // namespace deepspeed::swap
