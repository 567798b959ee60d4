#include "swap/aio_worker.h"

#include <cerrno>
#include <cstring>
#include <utility>

namespace deepspeed::swap {
namespace {

std::string describe(const AioChunk& c) {
  return detail::str_cat("aio: ", c.request->is_read ? "read of '" : "write of '", c.request->path,
                         "' failed at offset ", c.file_offset, " (", c.length, " bytes): ");
}

}  // namespace

AioWorker::AioWorker(const AioOptions& options) : options_(options) {
  int rc = io_uring_queue_init(static_cast<unsigned>(options_.queue_depth), &ring_, 0);
  DS_CHECK_T(AioError, rc == 0, "aio: io_uring_queue_init(queue_depth=", options_.queue_depth,
             ") failed: ", std::strerror(-rc),
             " (is io_uring disabled by the kernel or a container's seccomp profile?)");
  slots_.resize(static_cast<size_t>(options_.queue_depth));
  for (int i = options_.queue_depth - 1; i >= 0; --i) free_slots_.push_back(i);
  thread_ = std::thread([this] { run(); });
}

AioWorker::~AioWorker() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  io_uring_queue_exit(&ring_);
}

void AioWorker::enqueue(std::vector<AioChunk> chunks) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : chunks) queue_.push_back(std::move(c));
  }
  cv_.notify_one();
}

void AioWorker::run() {
  const int depth = options_.queue_depth;
  for (;;) {
    const int in_flight = depth - static_cast<int>(free_slots_.size());
    if (in_flight == 0 && retry_.empty()) {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left to do
    }
    // Without overlap_events a batch is drained completely before the next one goes out.
    if (options_.overlap_events || in_flight == 0) submit_ready();
    if (depth - static_cast<int>(free_slots_.size()) > 0) reap();
  }
}

int AioWorker::submit_ready() {
  int prepared = 0;
  while (!free_slots_.empty()) {
    AioChunk chunk;
    if (!retry_.empty()) {
      chunk = std::move(retry_.front());
      retry_.pop_front();
    } else {
      std::lock_guard<std::mutex> lock(mu_);
      if (queue_.empty()) break;
      chunk = std::move(queue_.front());
      queue_.pop_front();
    }
    if (!broken_.empty()) {
      fail_chunk(chunk, broken_);
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe ==
        nullptr) {  // cannot happen with one SQE per free slot; keep the chunk for the next round
      retry_.push_front(std::move(chunk));
      break;
    }
    const int slot = free_slots_.back();
    free_slots_.pop_back();
    const AioRequest& r = *chunk.request;
    if (r.is_read) {
      io_uring_prep_read(sqe, r.fd, chunk.ptr, static_cast<unsigned>(chunk.length),
                         static_cast<uint64_t>(chunk.file_offset));
    } else {
      io_uring_prep_write(sqe, r.fd, chunk.ptr, static_cast<unsigned>(chunk.length),
                          static_cast<uint64_t>(chunk.file_offset));
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(slot));
    slots_[static_cast<size_t>(slot)] = std::move(chunk);
    ++prepared;
    if (options_.single_submit) {
      int rc;
      while ((rc = io_uring_submit(&ring_)) == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
      }
      if (rc < 0) broken_ = detail::str_cat("io_uring_submit failed: ", std::strerror(-rc));
    }
  }
  if (!options_.single_submit && prepared > 0) {
    int rc;
    while ((rc = io_uring_submit(&ring_)) == -EINTR || rc == -EAGAIN || rc == -EBUSY) {
    }
    if (rc < 0) broken_ = detail::str_cat("io_uring_submit failed: ", std::strerror(-rc));
  }
  if (!broken_.empty()) {
    // The prepared SQEs may or may not have reached the kernel; their chunks fail, and this worker
    // refuses all further work rather than risk completions landing in reused slots.
    for (int slot = 0; slot < options_.queue_depth; ++slot) {
      if (slots_[static_cast<size_t>(slot)].request) {
        fail_chunk(slots_[static_cast<size_t>(slot)], broken_);
        free_slots_.push_back(slot);
      }
    }
  }
  return prepared;
}

void AioWorker::reap() {
  io_uring_cqe* cqe = nullptr;
  int rc;
  while ((rc = io_uring_wait_cqe(&ring_, &cqe)) == -EINTR || rc == -EAGAIN) {
  }
  if (rc < 0) {
    broken_ = detail::str_cat("io_uring_wait_cqe failed: ", std::strerror(-rc));
    submit_ready();  // fails everything in flight
    return;
  }
  unsigned head;
  unsigned seen = 0;
  io_uring_for_each_cqe(&ring_, head, cqe) {
    complete(static_cast<int>(io_uring_cqe_get_data64(cqe)), cqe->res);
    ++seen;
  }
  io_uring_cq_advance(&ring_, seen);
}

void AioWorker::complete(int slot, int result) {
  AioChunk chunk = std::move(slots_[static_cast<size_t>(slot)]);
  slots_[static_cast<size_t>(slot)] = AioChunk();
  if (!chunk.request) return;  // already failed (and its slot freed) when the ring broke
  free_slots_.push_back(slot);
  AioRequest& r = *chunk.request;
  if (result < 0) {
    fail_chunk(chunk, describe(chunk) + std::strerror(-result));
    return;
  }
  if (result == chunk.length) {
    r.chunk_done();
    return;
  }
  // A partial transfer. For reads, 0 bytes (or, under O_DIRECT, an unaligned count) means end of
  // file.
  const bool aligned = !r.direct || result % kAioAlignment == 0;
  if (r.is_read && (result == 0 || !aligned)) {
    r.saw_eof(chunk.file_offset + result);
    r.chunk_done();
    return;
  }
  if (!r.is_read && (result == 0 || !aligned)) {
    fail_chunk(chunk, describe(chunk) + detail::str_cat("short write of ", result, " bytes"));
    return;
  }
  chunk.ptr += result;
  chunk.file_offset += result;
  chunk.length -= result;
  retry_.push_back(std::move(chunk));
}

void AioWorker::fail_chunk(AioChunk& chunk, const std::string& why) {
  const std::string message = why.rfind("aio: ", 0) == 0 ? why : describe(chunk) + why;
  std::shared_ptr<AioRequest> r = std::move(chunk.request);
  chunk = AioChunk();
  r->fail(message);
  r->chunk_done();
}

}  // namespace deepspeed::swap
