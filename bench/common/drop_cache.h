// Evicting a file from the page cache, so a timed read goes to the disk (both checkpoint benchmarks use it).
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>

namespace deepspeed::bench {

// Flushes `path`'s dirty pages and drops its cached ones; a missing file is ignored.
inline void drop_cache(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

}  // namespace deepspeed::bench
