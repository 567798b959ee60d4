// Output multiplexing: each rank's stdout and stderr arrive on their own pipes and leave through
// the launcher's stdout and stderr (kept separate), one whole line at a time with the rank's prefix
// (`[rank1]: `), so lines of different ranks never mix. A partial last line is written,
// newline-terminated, at flush(). Not thread-safe: the launcher's single poll loop owns every
// RankOutput.
//
// Progress bars (src/runtime/progress.h): a segment ending in '\r' (not "\r\n") is a frame meant to
// be redrawn in place. It is written with the prefix and its '\r' and no newline; the next line
// written to the same destination, by any rank, first erases it ("\x1b[K"), so other ranks'
// lines never land on top of a bar.
#pragma once

#include <cstddef>
#include <functional>
#include <string>
#include <utility>

namespace deepspeed::launcher {

// Writes all of [data, data+n) to fd, retrying on EINTR and short writes. Errors (a closed stdout)
// are dropped: losing output must not stop the launcher from supervising its ranks.
void write_all(int fd, const char* data, size_t n);

class RankOutput {
 public:
  // Lines longer than this are split, so a rank that never writes '\n' cannot grow the launcher's
  // memory.
  static constexpr size_t kMaxLine = 64 * 1024;

  RankOutput(std::string prefix, int dest_fd) : prefix_(std::move(prefix)), dest_fd_(dest_fd) {}

  // Appends bytes read from the rank; writes every line they complete.
  void append(const char* data, size_t n);

  // Writes the pending partial line, if any, followed by '\n'.
  void flush();

  // Called with every whole line (without prefix and newline) after it is written.
  void set_line_observer(std::function<void(const std::string&)> observer) {
    observer_ = std::move(observer);
  }

 private:
  void emit(const char* line, size_t n);
  void emit_frame(const char* frame, size_t n);

  std::string prefix_;
  int dest_fd_;
  std::string pending_;
  bool cr_ended_read_ = false;  // the last read ended in '\r' (its text went out as a frame)
  std::string last_frame_;
  std::function<void(const std::string&)> observer_;
};

// "[rank<N>]: "
std::string rank_prefix(int rank);

}  // namespace deepspeed::launcher
