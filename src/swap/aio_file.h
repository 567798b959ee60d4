// Opening swap files for the aio engine: O_DIRECT first, buffered where the file system refuses it,
// and errors that name the file and suggest the fix. Stateless and thread-safe.
#pragma once

#include <string>

namespace deepspeed::swap {

struct AioFile {
  int fd = -1;
  bool direct = false;  // opened with O_DIRECT
  bool fell_back =
      false;  // O_DIRECT was asked for but refused (EINVAL), so the file is open buffered
};

// Opens `path` for reading, or for writing (created 0644 if missing, never truncated). Throws
// AioError naming the path on failure (missing directory, permission denied, a directory, ...).
AioFile open_aio_file(const std::string& path, bool for_read, bool want_direct);

}  // namespace deepspeed::swap
