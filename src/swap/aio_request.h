// The unit of work inside the aio engine: one async_pread/async_pwrite (AioRequest), split into
// block-sized AioChunks for the workers, and the AioTracker through which finished requests report
// back to the handle.
//
// Thread-safety: a request's chunks complete on any worker; finishing state is guarded by the
// request's own mutex and the last chunk to finish (pending_chunks reaching zero) finalizes it.
// AioTracker is thread-safe.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace deepspeed::swap {

// A 4096-aligned heap block (bounce buffer for unaligned tensors and partial tail blocks).
struct AlignedFree {
  void operator()(char* p) const;
};
using AlignedBytes = std::unique_ptr<char, AlignedFree>;
// Zero-filled; throws AioError when memory is short.
AlignedBytes aligned_alloc_bytes(int64_t bytes);

// Numbers requests in submission order, records which have finished and collects their errors;
// the handle's wait() and wait_for() block on it. Requests finish out of order (chunks complete on
// several workers), so it keeps the count of the finished prefix plus the finished requests
// beyond it.
class AioTracker {
 public:
  // Registers a new request and returns its sequence number (0, 1, 2, ...).
  int64_t add_request();
  // Called once per request, from a worker; `error` empty on success.
  void finish_request(int64_t seq, std::string error);
  // Requests registered so far.
  int64_t submitted();
  // Blocks until requests [0, count) have all finished. Returns how many of them no earlier call
  // reported, and moves their errors (only theirs: later requests keep theirs for a later call)
  // into `errors`.
  int64_t wait_for(int64_t count, std::vector<std::string>* errors);
  // wait_for(submitted()).
  int64_t wait_all(std::vector<std::string>* errors);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t submitted_ = 0;
  int64_t finished_prefix_ = 0;        // requests [0, finished_prefix_) have all finished
  std::set<int64_t> finished_beyond_;  // finished requests numbered above the prefix
  int64_t reported_ = 0;               // requests [0, reported_) were counted by a wait
  std::vector<std::pair<int64_t, std::string>> errors_;  // (sequence number, message)
};

struct AioRequest {
  bool is_read = false;
  bool direct = false;
  std::string path;
  int fd = -1;
  at::Tensor tensor;  // keeps the caller's storage alive until the request finishes
  char* user_ptr = nullptr;
  int64_t bytes = 0;        // true bytes of the tensor
  int64_t file_offset = 0;  // where the tensor starts in the file
  // Bytes [bounce_user_offset, bounce_user_offset + bounce_copy_bytes) of the tensor travel through
  // `bounce` (of bounce_bytes, aligned) instead of straight from/to the tensor.
  AlignedBytes bounce;
  int64_t bounce_bytes = 0;
  int64_t bounce_user_offset = 0;
  int64_t bounce_copy_bytes = 0;

  AioTracker* tracker = nullptr;
  int64_t seq = 0;  // the tracker's number for this request
  std::atomic<int64_t> pending_chunks{0};
  std::mutex mu;
  std::string error;                                     // first failure of any chunk
  int64_t eof_at = std::numeric_limits<int64_t>::max();  // file offset where a read met end of file

  ~AioRequest();
  // Records a chunk failure (first one wins).
  void fail(const std::string& message);
  // Records that a read found end of file at file offset `at`.
  void saw_eof(int64_t at);
  // Called by a worker after a chunk is done (successfully or not); the last one finalizes the
  // request: closes the file, checks the read was complete, copies bounce bytes back and reports to
  // the tracker.
  void chunk_done();

 private:
  void finalize();
};

struct AioChunk {
  std::shared_ptr<AioRequest> request;
  char* ptr = nullptr;
  int64_t length = 0;
  int64_t file_offset = 0;
};

// Splits a prepared request into chunks of at most `block_size` bytes (the direct part straight
// from the tensor, then the bounce part) and sets pending_chunks.
std::vector<AioChunk> split_request(const std::shared_ptr<AioRequest>& request, int64_t block_size);

}  // namespace deepspeed::swap
