// Line-buffered, rank-prefixed output for the launcher.
#include "launcher/rank_output.h"

#include <unistd.h>

#include <cerrno>
#include <map>

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

namespace {

// Whether a progress frame is on the line the cursor is at, per destination (stdout, stderr).
bool& frame_on_screen(int fd) {
  static std::map<int, bool> shown;
  return shown[fd];
}

constexpr char kEraseLine[] = "\x1b[K";

}  // namespace

void RankOutput::emit(const char* line, size_t n) {
  // One write per line keeps lines whole when several ranks share the terminal or a pipe.
  std::string out;
  out.reserve(prefix_.size() + n + 4);
  if (frame_on_screen(dest_fd_)) out.append(kEraseLine);  // the cursor is at the frame's start
  frame_on_screen(dest_fd_) = false;
  out.append(prefix_);
  out.append(line, n);
  out.push_back('\n');
  write_all(dest_fd_, out.data(), out.size());
}

void RankOutput::emit_frame(const char* frame, size_t n) {
  std::string out;
  out.reserve(prefix_.size() + n + 4);
  if (frame_on_screen(dest_fd_)) out.append(kEraseLine);
  out.append(prefix_);
  out.append(frame, n);
  out.push_back('\r');
  write_all(dest_fd_, out.data(), out.size());
  frame_on_screen(dest_fd_) = true;
}

void RankOutput::append(const char* data, size_t n) {
  size_t start = 0;
  for (size_t i = 0; i < n; ++i) {
    const bool newline = data[i] == '\n';
    const bool frame = data[i] == '\r' && !(i + 1 < n && data[i + 1] == '\n');
    if (!newline && !frame) continue;
    // "\r\n" ends a line like "\n": the '\r' is dropped.
    size_t end = i;
    if (newline && i > start && data[i - 1] == '\r') --end;
    pending_.append(data + start, end - start);
    if (newline) {
      emit(pending_.data(), pending_.size());
    } else {
      emit_frame(pending_.data(), pending_.size());
    }
    pending_.clear();
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
