#include "swap/aio_request.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "deepspeed/swap/aio.h"

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

void AioTracker::add_request() {
  std::lock_guard<std::mutex> lock(mu_);
  ++in_flight_;
}

void AioTracker::finish_request(std::string error) {
  std::lock_guard<std::mutex> lock(mu_);
  --in_flight_;
  ++finished_;
  if (!error.empty()) errors_.push_back(std::move(error));
  if (in_flight_ == 0) cv_.notify_all();
}

int64_t AioTracker::wait_all(std::vector<std::string>* errors) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return in_flight_ == 0; });
  int64_t n = finished_;
  finished_ = 0;
  errors->swap(errors_);
  errors_.clear();
  return n;
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
  t->finish_request(std::move(message));
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
