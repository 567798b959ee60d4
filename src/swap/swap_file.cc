#include "swap/swap_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "swap/aio.h"

namespace deepspeed::swap {

SwapFile::SwapFile(std::string path, const std::string& config_key) : name_(std::move(path)) {
  fd_ = ::open(name_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DS_CHECK_T(AioError, fd_ >= 0, "cannot create swap file '", name_, "': ", std::strerror(errno),
             " (check ", config_key, ")");
  const std::string by_fd = "/proc/self/fd/" + std::to_string(fd_);
  const int probe = ::open(by_fd.c_str(), O_RDONLY | O_CLOEXEC);
  if (probe >= 0) {
    ::close(probe);
    if (::unlink(name_.c_str()) == 0) io_path_ = by_fd;
  }
  if (io_path_.empty()) io_path_ = name_;
}

SwapFile::~SwapFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!unlinked()) ::unlink(name_.c_str());
}

std::string SwapFile::with_name(std::string message) const {
  if (!unlinked()) return message;
  const std::string from = "'" + io_path_ + "'";
  const std::string to = "'" + name_ + "' (unlinked while in use)";
  for (size_t pos = message.find(from); pos != std::string::npos;
       pos = message.find(from, pos + to.size()))
    message.replace(pos, from.size(), to);
  return message;
}

}  // namespace deepspeed::swap
