// Work::Impl: one issued collective — the backend operation, the completion step that finishes a
// fallback (divide for AVG, copy back from a staging buffer, local reduction), error context and
// the comms-logger record.
//
// Thread-safety: wait() and is_completed() may be called from any thread; the completion step runs
// exactly once.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <mutex>
#include <string>

#include "comm/c10d_backend.h"
#include "deepspeed/comm.h"

namespace deepspeed::comm::detail {

// What error messages and the logger need to know about one call.
struct CallInfo {
  std::string op;           // "all_reduce"
  std::string description;  // "all_reduce(float[4])"
  std::string label;        // "collective #3" or "p2p #2"
  std::string group_name;   // "world"
  int global_rank = 0;
  int group_size = 1;
  std::chrono::milliseconds timeout{0};
  int64_t msg_bytes = 0;
  bool log = false;
  std::chrono::steady_clock::time_point start;
};

// The backend operation plus what must run after it.
struct Pending {
  BackendWorkPtr work;
  std::function<void()> finalize;  // may be empty
};

// Rewrites a backend failure so it names this rank and the collective: "rank 0 timed out after 2s
// in collective #3 all_reduce(float[4]) on group world: <backend message>". Keeps the exception
// type family (CommTimeoutError for timeouts and lost peers, CommError otherwise).
std::exception_ptr with_context(const CallInfo& info, std::exception_ptr e);

}  // namespace deepspeed::comm::detail

namespace deepspeed::comm {

class Work::Impl {
 public:
  Impl(detail::Pending pending, detail::CallInfo info);

  void wait();
  bool is_completed();

 private:
  // Runs the completion step and the logger once; called with mu_ held.
  void complete_locked();
  [[noreturn]] void fail_locked(std::exception_ptr e);

  std::mutex mu_;
  detail::Pending pending_;
  detail::CallInfo info_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace deepspeed::comm
