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

namespace {

// The output whose progress frame is on the line the cursor is at (null: none). One for stdout and
// stderr: they normally share the terminal, and a line on either must not land on top of a bar.
const RankOutput* frame_owner = nullptr;

constexpr char kEraseLine[] = "\x1b[K";

}  // namespace

void RankOutput::emit(const char* line, size_t n) {
  // One write per line keeps lines whole when several ranks share the terminal or a pipe.
  std::string out;
  out.reserve(prefix_.size() + n + 4);
  if (frame_owner != nullptr) out.append(kEraseLine);  // the cursor is at the frame's start
  frame_owner = nullptr;
  out.append(prefix_);
  out.append(line, n);
  out.push_back('\n');
  write_all(dest_fd_, out.data(), out.size());
  if (observer_) observer_(std::string(line, n));
}

void RankOutput::emit_frame(const char* frame, size_t n) {
  std::string out;
  out.reserve(prefix_.size() + n + 4);
  if (frame_owner != nullptr) out.append(kEraseLine);
  out.append(prefix_);
  out.append(frame, n);
  out.push_back('\r');
  write_all(dest_fd_, out.data(), out.size());
  frame_owner = this;
  last_frame_.assign(frame, n);
}

void RankOutput::append(const char* data, size_t n) {
  size_t start = 0;
  if (n > 0 && cr_ended_read_) {
    // The previous read ended in '\r' and its text went out as a frame; a '\n' now makes it a line
    // after all
    // ("\r\n"): end the frame's line, or, if another line erased the frame meanwhile, write it
    // again as a line.
    cr_ended_read_ = false;
    if (data[0] == '\n') {
      if (frame_owner == this) {
        write_all(dest_fd_, "\n", 1);
        frame_owner = nullptr;
      } else {
        emit(last_frame_.data(), last_frame_.size());
      }
      start = 1;
    }
  }
  for (size_t i = start; i < n; ++i) {
    if (data[i] != '\n' && data[i] != '\r') continue;
    if (data[i] == '\r' && i + 1 < n && data[i + 1] == '\n')
      continue;  // "\r\n" ends a line like "\n"
    size_t end = i;
    if (data[i] == '\n' && i > start && data[i - 1] == '\r') --end;  // the '\r' is dropped
    pending_.append(data + start, end - start);
    if (data[i] == '\r') {
      emit_frame(pending_.data(), pending_.size());
      cr_ended_read_ = i + 1 == n;
    } else {
      emit(pending_.data(), pending_.size());
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
  if (frame_owner == this) {  // leave the last frame on screen, as a line
    write_all(dest_fd_, "\n", 1);
    frame_owner = nullptr;
  }
  if (pending_.empty()) return;
  emit(pending_.data(), pending_.size());
  pending_.clear();
}

}  // namespace deepspeed::launcher
