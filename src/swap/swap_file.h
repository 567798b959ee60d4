// A swap file that never outlives its process: created at its path and, where /proc lets the
// process reopen it by descriptor, unlinked at once, so the kernel frees its blocks when the last
// descriptor closes, however the process ends (an error, std::terminate, SIGKILL, a launcher
// stopping the ranks). Its I/O then goes through io_path(), /proc/self/fd/<fd>, which AioHandle
// opens like any path. Without /proc the file keeps its name and the destructor removes it.
//
// Not thread-safe to construct or destroy concurrently with I/O on it; io_path() may be used from
// any thread while the object lives.
#pragma once

#include <string>

namespace deepspeed::swap {

class SwapFile {
 public:
  // Creates (truncating) `path`; throws AioError naming it and `config_key` (the nvme_path key to
  // check) when it cannot be created.
  SwapFile(std::string path, const std::string& config_key);
  ~SwapFile();
  SwapFile(const SwapFile&) = delete;
  SwapFile& operator=(const SwapFile&) = delete;

  int fd() const { return fd_; }
  // The name it was created under, as messages give it.
  const std::string& name() const { return name_; }
  // What to open for I/O: /proc/self/fd/<fd> once unlinked, else name().
  const std::string& io_path() const { return io_path_; }
  bool unlinked() const { return io_path_ != name_; }
  // `message` with every quoted io_path() replaced by the quoted name (aio errors name the path
  // they were given).
  std::string with_name(std::string message) const;

 private:
  std::string name_, io_path_;
  int fd_ = -1;
};

}  // namespace deepspeed::swap
