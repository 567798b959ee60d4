// Line-buffered, rank-prefixed output for the launcher.
#include "launcher/rank_output.h"

#include <unistd.h>

#include <cerrno>

namespace deepspeed::launcher {

void write_all(int fd, const char* data, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, data, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data += w;
    n -= static_cast<size_t>(w);
  }
}

std::string rank_prefix(int rank) { return "[rank" + std::to_string(rank) + "]: "; }

void RankOutput::emit(const char* line, size_t n) {
  // One write per line keeps lines whole when several ranks share the terminal or a pipe.
  std::string out;
  out.reserve(prefix_.size() + n + 1);
  out.append(prefix_);
  out.append(line, n);
  out.push_back('\n');
  write_all(dest_fd_, out.data(), out.size());
}

void RankOutput::append(const char* data, size_t n) {
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') continue;
    if (pending_.empty()) {
      emit(data + start, i - start);
    } else {
      pending_.append(data + start, i - start);
      emit(pending_.data(), pending_.size());
      pending_.clear();
    }
    start = i + 1;
  }
  pending_.append(data + start, n - start);
  while (pending_.size() >= kMaxLine) {
    emit(pending_.data(), kMaxLine);
    pending_.erase(0, kMaxLine);
  }
}

void RankOutput::flush() {
  if (pending_.empty()) return;
  emit(pending_.data(), pending_.size());
  pending_.clear();
}

}  // namespace deepspeed::launcher
