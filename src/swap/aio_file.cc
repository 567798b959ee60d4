#include "swap/aio_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "swap/aio.h"

namespace deepspeed::swap {
namespace {

int open_retrying(const std::string& path, int flags) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags, 0644);
  } while (fd < 0 && errno == EINTR);
  return fd;
}

std::string hint(int err, bool for_read) {
  switch (err) {
    case ENOENT:
      return for_read ? " (no such file: was the tensor swapped out to this path?)"
                      : " (does the directory exist? check nvme_path)";
    case EACCES:
    case EPERM:
    case EROFS:
      return " (check nvme_path is a writable directory)";
    case ENOTDIR:
      return " (a component of the path is not a directory: check nvme_path)";
    case EISDIR:
      return " (the path is a directory; swap files must be regular files)";
    default:
      return "";
  }
}

}  // namespace

AioFile open_aio_file(const std::string& path, bool for_read, bool want_direct) {
  const int base = (for_read ? O_RDONLY : (O_WRONLY | O_CREAT)) | O_CLOEXEC;
  AioFile f;
  if (want_direct) {
    f.fd = open_retrying(path, base | O_DIRECT);
    if (f.fd >= 0) {
      f.direct = true;
      return f;
    }
    // EINVAL is how Linux says "this file system does not do O_DIRECT"; anything else is a real
    // error.
    if (errno != EINVAL) {
      const int err = errno;
      throw AioError(detail::str_cat("aio: cannot open '", path, "' for ",
                                     for_read ? "reading" : "writing", ": ", std::strerror(err),
                                     hint(err, for_read)));
    }
    f.fell_back = true;
  }
  f.fd = open_retrying(path, base);
  if (f.fd < 0) {
    const int err = errno;
    throw AioError(detail::str_cat("aio: cannot open '", path, "' for ",
                                   for_read ? "reading" : "writing", ": ", std::strerror(err),
                                   hint(err, for_read)));
  }
  return f;
}

}  // namespace deepspeed::swap
