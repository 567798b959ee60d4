// AioHandle: validates requests, opens their files, splits them into chunks and deals the chunks to
// the workers.
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "swap/aio.h"
#include "swap/aio_file.h"
#include "swap/aio_request.h"
#include "swap/aio_worker.h"

namespace deepspeed::swap {
namespace {

// The fallback warning is printed once per process and directory: a rank opens several handles on
// one swap folder (the optimizer swapper a reader and a writer, stage 3 one for parameters), and
// one line says all there is to say about that folder's file system.
bool first_fallback_in_directory(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  const std::string dir = std::filesystem::path(path).parent_path().string();
  std::lock_guard<std::mutex> lock(mutex);
  return warned.insert(dir).second;
}

// The file's own name for a /proc/self/fd/<n> path (how the optimizer swapper reaches its unlinked
// files), so a warning names the swap file and its folder rather than /proc.
std::string shown_path(const std::string& path) {
  if (path.rfind("/proc/self/fd/", 0) != 0) return path;
  std::error_code ec;
  std::string target = std::filesystem::read_symlink(path, ec).string();
  if (ec || target.empty()) return path;
  const std::string deleted = " (deleted)";
  if (target.size() > deleted.size() &&
      target.compare(target.size() - deleted.size(), deleted.size(), deleted) == 0)
    target.resize(target.size() - deleted.size());
  return target;
}

}  // namespace

class AioHandle::Impl {
 public:
  explicit Impl(const AioOptions& options) : options_(options) {
    DS_CHECK_T(AioError, options.block_size > 0 && options.block_size % kAioAlignment == 0,
               "aio.block_size must be a positive multiple of ", kAioAlignment, ", got ",
               options.block_size);
    DS_CHECK_T(AioError, options.block_size <= (int64_t{1} << 30),
               "aio.block_size must be at most 1 GiB (one io_uring request), got ",
               options.block_size);
    DS_CHECK_T(AioError, options.queue_depth >= 1 && options.queue_depth <= 4096,
               "aio.queue_depth must be in [1, 4096], got ", options.queue_depth);
    DS_CHECK_T(AioError, options.thread_count >= 1 && options.thread_count <= 256,
               "aio.thread_count must be in [1, 256], got ", options.thread_count);
    direct_io_ = options.use_direct_io;
    for (int i = 0; i < options.thread_count; ++i) {
      workers_.push_back(std::make_unique<AioWorker>(options));
    }
  }

  ~Impl() {
    std::vector<std::string> dropped;
    tracker_.wait_all(&dropped);
    workers_.clear();  // joins the threads before the tracker goes away
  }

  void submit(const at::Tensor& buffer, const std::string& path, int64_t file_offset,
              bool is_read) {
    const char* what = is_read ? "async_pread" : "async_pwrite";
    DS_CHECK_T(AioError, buffer.defined(), "aio ", what, " of '", path,
               "': the buffer is undefined");
    DS_CHECK_T(AioError, buffer.device().is_cpu(), "aio ", what, " of '", path,
               "': the buffer must be a CPU tensor, got one on ", buffer.device().str());
    DS_CHECK_T(AioError, buffer.is_contiguous(), "aio ", what, " of '", path,
               "': the buffer must be contiguous");
    DS_CHECK_T(AioError, file_offset >= 0, "aio ", what, " of '", path, "': negative file offset ",
               file_offset);

    AioFile file = open_aio_file(path, is_read, options_.use_direct_io);
    if (file.fell_back) {
      if (direct_io_ && !warned_) {
        warned_ = true;
        const std::string shown = shown_path(path);
        if (first_fallback_in_directory(shown)) {
          std::cerr
              << "deepspeed: warning: O_DIRECT is not supported for '" << shown
              << "'; swapping through the page cache (buffered I/O) instead, which is slower and "
                 "evicts cached data\n";
        }
      }
      direct_io_ = false;
    }
    auto r = std::make_shared<AioRequest>();
    r->fd = file.fd;  // owned by the request from here on
    r->is_read = is_read;
    r->direct = file.direct;
    r->path = path;
    r->tensor = buffer;
    r->user_ptr = static_cast<char*>(buffer.data_ptr());
    r->bytes = static_cast<int64_t>(buffer.nbytes());
    r->file_offset = file_offset;
    r->tracker = &tracker_;
    if (file.direct) {
      DS_CHECK_T(AioError, file_offset % kAioAlignment == 0, "aio ", what, " of '", path,
                 "': file offset ", file_offset, " is not a multiple of ", kAioAlignment,
                 " (required by O_DIRECT; lay tensors out at padded_bytes() boundaries)");
      const bool aligned = reinterpret_cast<uintptr_t>(r->user_ptr) % kAioAlignment == 0;
      // An aligned tensor goes straight to the device except its partial last block; an unaligned
      // one goes whole through a bounce buffer. Either way no byte outside the tensor is ever read
      // or written.
      r->bounce_user_offset = aligned ? r->bytes / kAioAlignment * kAioAlignment : 0;
      r->bounce_copy_bytes = r->bytes - r->bounce_user_offset;
      r->bounce_bytes = padded_bytes(r->bounce_copy_bytes);
      if (r->bounce_bytes > 0) {
        r->bounce = aligned_alloc_bytes(r->bounce_bytes);
        if (!is_read) {
          std::memcpy(r->bounce.get(), r->user_ptr + r->bounce_user_offset,
                      static_cast<size_t>(r->bounce_copy_bytes));
        }
      }
    }

    std::vector<AioChunk> chunks = split_request(r, options_.block_size);
    r->seq = tracker_.add_request();
    if (chunks.empty()) {  // an empty tensor: the open was the whole job
      r->pending_chunks = 1;
      r->chunk_done();
      return;
    }
    // Deal the chunks round-robin so one large request keeps every worker busy, and consecutive
    // small ones spread out too.
    const size_t n = workers_.size();
    std::vector<std::vector<AioChunk>> per_worker(n);
    for (auto& c : chunks) per_worker[next_worker_++ % n].push_back(std::move(c));
    for (size_t i = 0; i < n; ++i) {
      if (!per_worker[i].empty()) workers_[i]->enqueue(std::move(per_worker[i]));
    }
  }

  int64_t wait_for(int64_t count) {
    std::vector<std::string> errors;
    const int64_t n = tracker_.wait_for(count, &errors);
    if (!errors.empty()) {
      std::string message = errors.front();
      if (errors.size() > 1)
        message += detail::str_cat(" (and ", errors.size() - 1, " more failed requests)");
      throw AioError(message);
    }
    return n;
  }

  AioOptions options_;
  bool direct_io_ = true;
  bool warned_ = false;
  size_t next_worker_ = 0;
  AioTracker tracker_;
  std::vector<std::unique_ptr<AioWorker>> workers_;  // declared after tracker_: destroyed first
};

AioHandle::AioHandle(const AioOptions& options) : impl_(std::make_unique<Impl>(options)) {}
AioHandle::~AioHandle() = default;

void AioHandle::async_pwrite(const at::Tensor& buffer, const std::string& path,
                             int64_t file_offset) {
  impl_->submit(buffer, path, file_offset, /*is_read=*/false);
}

void AioHandle::async_pread(const at::Tensor& buffer, const std::string& path,
                            int64_t file_offset) {
  impl_->submit(buffer, path, file_offset, /*is_read=*/true);
}

int64_t AioHandle::wait() { return impl_->wait_for(impl_->tracker_.submitted()); }

int64_t AioHandle::submitted() const { return impl_->tracker_.submitted(); }

int64_t AioHandle::wait_for(int64_t count) {
  DS_CHECK_T(AioError, count >= 0, "aio wait_for: count must be >= 0, got ", count);
  return impl_->wait_for(count);
}

void AioHandle::sync_pwrite(const at::Tensor& buffer, const std::string& path,
                            int64_t file_offset) {
  async_pwrite(buffer, path, file_offset);
  wait();
}

void AioHandle::sync_pread(const at::Tensor& buffer, const std::string& path, int64_t file_offset) {
  async_pread(buffer, path, file_offset);
  wait();
}

bool AioHandle::direct_io() const { return impl_->direct_io_; }
const AioOptions& AioHandle::options() const { return impl_->options_; }

}  // namespace deepspeed::swap
