// Asynchronous file I/O for NVMe offload (DeepSpeed's `aio_handle` / `AsyncIOBuilder`), on
// io_uring.
//
// An AioHandle moves the bytes of CPU tensors to and from files. Each request is split into
// `block_size` chunks that are spread over `thread_count` worker threads, each driving its own
// io_uring with up to `queue_depth` requests in flight. Files are opened with O_DIRECT, which
// bypasses the page cache (swap traffic would only evict useful pages) and needs 4096-byte aligned
// addresses, offsets and lengths:
//   - tensors from aligned_empty() are aligned; any other contiguous CPU tensor works through a
//   bounce buffer;
//   - a tensor whose byte size is not a multiple of 4096 is stored with its last block zero-padded,
//   so the file
//     holds padded_bytes(nbytes) bytes per tensor; reading back only needs the tensor's true bytes
//     to be present (a file written buffered by someone else, exactly nbytes long, reads fine);
//   - file offsets must be multiples of 4096 (kAioAlignment) while direct I/O is on.
// Where the file system refuses O_DIRECT (EINVAL), the file is reopened buffered and one warning is
// printed per process and directory (however many handles use it).
//
// Errors: opening a file fails at once (async_* throws AioError naming the file: missing directory,
// permission,
// ...). Failures of the transfer itself (ENOSPC, EIO, a file shorter than the tensor) are reported
// by wait(), which throws AioError naming the file, the offset and the cause. Nothing is retried
// silently except a legal partial transfer, whose remainder is resubmitted.
//
// Thread-safety: one owner thread calls async_*, sync_*, wait() and wait_for(); the handle's worker
// threads are internal. A buffer must not be touched by the caller between its async_* call and the
// wait() or wait_for() that covers it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>

#include "deepspeed/config/feature_config.h"
#include "deepspeed/error.h"

namespace deepspeed::swap {

// O_DIRECT granularity: addresses, offsets and lengths are multiples of this.
constexpr int64_t kAioAlignment = 4096;

// A failed swap read or write; the message names the file.
class AioError : public Error {
 public:
  using Error::Error;
};

// The `aio` config section (DeepSpeed's names and defaults) plus whether to try O_DIRECT at all.
struct AioOptions {
  int64_t block_size = 1 << 20;  // bytes per submitted request; a multiple of 4096
  int queue_depth = 8;           // requests in flight per worker thread
  int thread_count = 1;          // worker threads, each with its own io_uring
  bool single_submit = false;    // one io_uring_submit per request instead of one per batch
  bool overlap_events =
      true;  // refill the queue as requests complete instead of draining each batch
  bool use_direct_io = true;  // false: buffered I/O from the start (no alignment rules, no warning)
};

// The options for the `aio` section of a DeepSpeed config.
inline AioOptions aio_options_from_config(const config::AioConfig& c) {
  AioOptions o;
  o.block_size = c.block_size;
  o.queue_depth = c.queue_depth;
  o.thread_count = c.thread_count;
  o.single_submit = c.single_submit;
  o.overlap_events = c.overlap_events;
  return o;
}

// `bytes` rounded up to kAioAlignment: the space one tensor of `bytes` bytes takes in a swap file.
inline int64_t padded_bytes(int64_t bytes) {
  return (bytes + kAioAlignment - 1) / kAioAlignment * kAioAlignment;
}

// A 1-D CPU tensor of `numel` elements whose storage starts on a 4096-byte boundary and is padded
// (with zeros) to a multiple of 4096 bytes, so whole-tensor O_DIRECT transfers need no bounce
// buffer. Pinned through the accelerator where pinning is supported (and keeps the alignment).
// DeepSpeed: `new_cpu_locked_tensor`.
at::Tensor aligned_empty(int64_t numel, at::ScalarType dtype);

class AioHandle {
 public:
  // Throws AioError for options out of range (the message names the option and value) or when
  // io_uring cannot be set up.
  explicit AioHandle(const AioOptions& options = AioOptions());
  // Waits for outstanding requests (their errors are dropped: call wait() to see them) and stops
  // the workers.
  ~AioHandle();
  AioHandle(const AioHandle&) = delete;
  AioHandle& operator=(const AioHandle&) = delete;

  // Writes the bytes of `buffer` (contiguous, CPU) to `path` at `file_offset`, creating the file if
  // needed (an existing file is not truncated). Returns once queued.
  void async_pwrite(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);
  // Fills `buffer` (contiguous, CPU) from `path` at `file_offset`. Returns once queued.
  void async_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);

  // Blocks until every request submitted so far has completed; returns how many completed that no
  // earlier wait()/wait_for() counted. Throws AioError naming the file if any of them failed (after
  // all have finished).
  int64_t wait();

  // Requests submitted so far over the handle's life (async_* calls that did not throw). Taken
  // right after some async_* calls, it is the ticket that wait_for() needs to wait for them alone.
  int64_t submitted() const;
  // Blocks until the first `count` requests ever submitted have completed, however many later ones
  // are still in flight; returns how many of them no earlier wait()/wait_for() counted. Throws
  // AioError naming the file if one of those `count` failed; failures of later requests are kept
  // for the wait that covers them. Lets a caller reuse one buffer while the handle keeps others
  // moving (a plain wait() would drain the queue).
  int64_t wait_for(int64_t count);

  // async_* followed by wait() (which also waits for, and reports, earlier requests).
  void sync_pwrite(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);
  void sync_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset = 0);

  // True while every file so far was opened with O_DIRECT; false after a fallback to buffered I/O
  // (or when options.use_direct_io is false).
  bool direct_io() const;
  const AioOptions& options() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepspeed::swap
