#include "swap/aio_request.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "swap/aio.h"

namespace deepspeed::swap {

void AlignedFree::operator()(char* p) const { std::free(p); }

AlignedBytes aligned_alloc_bytes(int64_t bytes) {
  void* p = nullptr;
  int64_t size = std::max<int64_t>(padded_bytes(bytes), kAioAlignment);
  int rc = posix_memalign(&p, kAioAlignment, static_cast<size_t>(size));
  DS_CHECK_T(AioError, rc == 0 && p != nullptr, "aio: cannot allocate an aligned buffer of ", size,
             " bytes: ", std::strerror(rc));
  std::memset(p, 0, static_cast<size_t>(size));
  return AlignedBytes(static_cast<char*>(p));
}

int64_t AioTracker::add_request() {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_++;
}

void AioTracker::finish_request(int64_t seq, std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error.empty()) errors_.emplace_back(seq, std::move(error));
  finished_beyond_.insert(seq);
  const int64_t before = finished_prefix_;
  auto it = finished_beyond_.begin();
  while (it != finished_beyond_.end() && *it == finished_prefix_) {
    ++finished_prefix_;
    it = finished_beyond_.erase(it);
  }
  if (finished_prefix_ != before) cv_.notify_all();
}

int64_t AioTracker::submitted() {
  std::lock_guard<std::mutex> lock(mu_);
  return submitted_;
}

int64_t AioTracker::wait_for(int64_t count, std::vector<std::string>* errors) {
  std::unique_lock<std::mutex> lock(mu_);
  count = std::min(count, submitted_);
  cv_.wait(lock, [&] { return finished_prefix_ >= count; });
  errors->clear();
  std::vector<std::pair<int64_t, std::string>> later;
  for (auto& e : errors_) {
    if (e.first < count) {
      errors->push_back(std::move(e.second));
    } else {
      later.push_back(std::move(e));
    }
  }
  errors_.swap(later);
  const int64_t n = std::max<int64_t>(0, count - reported_);
  reported_ = std::max(reported_, count);
  return n;
}

int64_t AioTracker::wait_all(std::vector<std::string>* errors) {
  return wait_for(std::numeric_limits<int64_t>::max(), errors);
}

AioRequest::~AioRequest() {
  if (fd >= 0) ::close(fd);
}

void AioRequest::fail(const std::string& message) {
  std::lock_guard<std::mutex> lock(mu);
  if (error.empty()) error = message;
}

void AioRequest::saw_eof(int64_t at) {
  std::lock_guard<std::mutex> lock(mu);
  eof_at = std::min(eof_at, at);
}

void AioRequest::chunk_done() {
  if (pending_chunks.fetch_sub(1) == 1) finalize();
}

void AioRequest::finalize() {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(mu);
    message = error;
    if (message.empty() && is_read && eof_at < file_offset + bytes) {
      message =
          detail::str_cat("aio: short read of '", path, "': needed ", bytes, " bytes at offset ",
                          file_offset, " but the file ends at byte ", eof_at,
                          " (truncated swap file, or read before the write finished?)");
    }
  }
  if (fd >= 0) {
    // A failed close of a written file can mean lost data (e.g. NFS); do not swallow it.
    if (::close(fd) != 0 && message.empty() && !is_read) {
      message =
          detail::str_cat("aio: closing '", path, "' after writing failed: ", std::strerror(errno));
    }
    fd = -1;
  }
  if (message.empty() && is_read && bounce_copy_bytes > 0) {
    std::memcpy(user_ptr + bounce_user_offset, bounce.get(),
                static_cast<size_t>(bounce_copy_bytes));
  }
  AioTracker* t = tracker;
  bounce.reset();
  tensor = at::Tensor();  // release the caller's storage before reporting, so wait() returning
                          // means done
  t->finish_request(seq, std::move(message));
}

std::vector<AioChunk> split_request(const std::shared_ptr<AioRequest>& request,
                                    int64_t block_size) {
  std::vector<AioChunk> chunks;
  AioRequest& r = *request;
  // The part that goes straight from/to the tensor: everything before the bounce part.
  int64_t direct_bytes = r.bounce_bytes > 0 ? r.bounce_user_offset : r.bytes;
  for (int64_t off = 0; off < direct_bytes; off += block_size) {
    chunks.push_back(
        {request, r.user_ptr + off, std::min(block_size, direct_bytes - off), r.file_offset + off});
  }
  for (int64_t off = 0; off < r.bounce_bytes; off += block_size) {
    chunks.push_back({request, r.bounce.get() + off, std::min(block_size, r.bounce_bytes - off),
                      r.file_offset + r.bounce_user_offset + off});
  }
  r.pending_chunks = static_cast<int64_t>(chunks.size());
  return chunks;
}

}  // namespace deepspeed::swap
