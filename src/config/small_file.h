// Reading a small text input whole (a DeepSpeed config, a hostfile, a .deepspeed_env file), with a
// cap: none of them is ever megabytes, and an unbounded read of a wrong path (/dev/zero, a FIFO
// nobody writes, a multi-gigabyte log) would take the machine's memory or hang before any error
// could name the file. Regular files are sized before reading; pipes and process substitutions
// (`--deepspeed_config <(jq ... cfg.json)`) are read up to the cap; devices, directories and
// sockets are refused. Stateless and thread-safe. Header-only: the launcher reads its files with it
// without linking the config library.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace deepspeed::config {

inline constexpr size_t kSmallFileMaxBytes = 16u << 20;  // 16 MiB: 1,000 times the largest real config

// Reads `path` into `*text`. Returns "" on success, else why not, to follow "cannot read <path>: "
// ("it is a directory", "it is not a regular file or a pipe (a character device)", "it is larger
// than 16 MiB ...", "No such file or directory"). `*text` is unspecified on failure.
inline std::string read_small_file(const std::string& path, std::string* text,
                                   size_t max_bytes = kSmallFileMaxBytes);

namespace small_file_detail {

inline const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

inline std::string too_large(size_t max_bytes) {
  return "it is larger than " + std::to_string(max_bytes >> 20) + " MiB, more than any config, hostfile or env file (a wrong path?)";
}

}  // namespace small_file_detail

inline std::string read_small_file(const std::string& path, std::string* text, size_t max_bytes) {
  text->clear();
  // O_NONBLOCK so opening a FIFO without a writer does not hang here; cleared below for the reads.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::strerror(errno);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return std::strerror(err);
  }
  if (S_ISDIR(st.st_mode)) {
    ::close(fd);
    return "it is a directory";
  }
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode)) {
    ::close(fd);
    return std::string("it is not a regular file or a pipe (") + small_file_detail::file_kind(st.st_mode) + ")";
  }
  if (S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return small_file_detail::too_large(max_bytes);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  char buf[1 << 16];
  std::string why;
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      why = std::strerror(errno);
      break;
    }
    if (n == 0) break;
    if (text->size() + static_cast<size_t>(n) > max_bytes) {
      why = small_file_detail::too_large(max_bytes);
      break;
    }
    text->append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return why;
}

}  // namespace deepspeed::config
