#include "swap/storage_probe.h"

#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <sys/statfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>

#include "swap/aio.h"

namespace deepspeed::swap {
namespace {

std::string errno_text(const char* what, int err) {
  return std::string(what) + ": " + std::strerror(err);
}

std::string kernel_release() {
  struct utsname u;
  if (uname(&u) != 0) return "unknown";
  return std::string(u.sysname) + " " + u.release;
}

// Linux >= 6.6 can switch io_uring off for everyone (2) or for unprivileged processes (1).
std::string io_uring_sysctl_hint() {
  std::ifstream f("/proc/sys/kernel/io_uring_disabled");
  int value = 0;
  if (f >> value && value != 0) return "kernel.io_uring_disabled=" + std::to_string(value);
  return "a container's seccomp profile may block it";
}

struct FreeDeleter {
  void operator()(void* p) const { free(p); }
};

std::unique_ptr<char, FreeDeleter> aligned_block() {
  void* p = nullptr;
  if (posix_memalign(&p, kAioAlignment, kAioAlignment) != 0) return nullptr;
  return std::unique_ptr<char, FreeDeleter>(static_cast<char*>(p));
}

// A name of our own in `dir`; O_EXCL below makes sure the file is ours.
std::string probe_path(const std::string& dir) {
  static std::atomic<int> counter{0};
  return dir + "/.ds_report_odirect_" + std::to_string(getpid()) + "_" + std::to_string(counter++);
}

// The write-then-read on an open O_DIRECT descriptor; empty on success, else what failed.
std::string write_and_read_back(int fd) {
  auto out = aligned_block();
  auto in = aligned_block();
  if (!out || !in) return "posix_memalign failed";
  for (int64_t i = 0; i < kAioAlignment; ++i) out.get()[i] = static_cast<char>(i * 7 + 1);
  std::memset(in.get(), 0, kAioAlignment);
  ssize_t n = pwrite(fd, out.get(), kAioAlignment, 0);
  if (n < 0) return errno_text("write", errno);
  if (n != kAioAlignment) return "write: short write of " + std::to_string(n) + " bytes";
  n = pread(fd, in.get(), kAioAlignment, 0);
  if (n < 0) return errno_text("read", errno);
  if (n != kAioAlignment) return "read: short read of " + std::to_string(n) + " bytes";
  if (std::memcmp(out.get(), in.get(), kAioAlignment) != 0)
    return "read back different bytes than written";
  return "";
}

// statfs f_type magic numbers (linux/magic.h) of the file systems swap directories tend to live on.
struct FsName {
  unsigned long magic;
  const char* name;
};
constexpr FsName kFileSystems[] = {
    {0xEF53, "ext2/3/4"},  {0x58465342, "xfs"},       {0x9123683E, "btrfs"}, {0x01021994, "tmpfs"},
    {0x858458F6, "ramfs"}, {0x794C7630, "overlayfs"}, {0xF2F52010, "f2fs"},  {0x2FC12FC1, "zfs"},
    {0x6969, "nfs"},       {0xFF534D42, "cifs"},      {0x65735546, "fuse"},  {0x9FA0, "proc"},
    {0x62656572, "sysfs"}};

std::string file_system(const std::string& dir) {
  struct statfs s;
  if (statfs(dir.c_str(), &s) != 0) return errno_text("statfs", errno);
  const unsigned long magic = static_cast<unsigned long>(s.f_type);
  char type[32];
  std::snprintf(type, sizeof(type), "type 0x%lx", magic);
  std::string name = type;
  for (const FsName& fs : kFileSystems) {
    if (fs.magic == magic) name = fs.name;
  }
  const uint64_t free_bytes = static_cast<uint64_t>(s.f_bavail) * static_cast<uint64_t>(s.f_bsize);
  return name + ", " + std::to_string(free_bytes >> 20) + " MiB free";
}

}  // namespace

ProbeResult probe_io_uring() {
  struct io_uring ring;
  int rc = io_uring_queue_init(4, &ring, 0);
  if (rc < 0) {
    return {false, errno_text("io_uring_queue_init", -rc) + " (" + io_uring_sysctl_hint() +
                       "; NVMe offload needs io_uring)"};
  }
  std::string failure;
  struct io_uring_sqe* sqe = io_uring_get_sqe(&ring);
  if (sqe == nullptr) {
    failure = "io_uring_get_sqe returned no entry";
  } else {
    io_uring_prep_nop(sqe);
    rc = io_uring_submit(&ring);
    struct io_uring_cqe* cqe = nullptr;
    if (rc < 0) {
      failure = errno_text("io_uring_submit", -rc);
    } else if ((rc = io_uring_wait_cqe(&ring, &cqe)) < 0) {
      failure = errno_text("io_uring_wait_cqe", -rc);
    } else {
      if (cqe->res < 0) failure = errno_text("no-op request", -cqe->res);
      io_uring_cqe_seen(&ring, cqe);
    }
  }
  io_uring_queue_exit(&ring);
  if (!failure.empty()) return {false, failure};
  return {true, "io_uring_queue_init and a no-op request succeeded"};
}

ProbeResult probe_o_direct(const std::string& dir) {
  std::string path;
  int fd = -1;
  for (int attempt = 0; attempt < 100 && fd < 0; ++attempt) {
    path = probe_path(dir);
    do {
      fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_DIRECT | O_CLOEXEC, 0600);
    } while (fd < 0 && errno == EINTR);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd < 0) {
    const int err = errno;
    // Some file systems create the file and only then refuse O_DIRECT.
    if (err != EEXIST) ::unlink(path.c_str());
    std::string hint;
    if (err == EINVAL)
      hint =
          " (this file system does not do direct I/O; the NVMe swapper falls back to buffered I/O)";
    if (err == EACCES || err == EPERM || err == EROFS)
      hint = " (the directory is not writable by this user)";
    return {false, errno_text("open(O_DIRECT)", err) + hint};
  }
  const std::string failure = write_and_read_back(fd);
  ::close(fd);
  ::unlink(path.c_str());
  if (!failure.empty())
    return {false, failure + " (the NVMe swapper needs aligned direct I/O here)"};
  return {true, std::to_string(kAioAlignment) + "-byte aligned write and read-back with O_DIRECT"};
}

ReportSection storage_report(const std::string& dir, const std::string& dir_note) {
  ReportSection section{"Storage (NVMe offload)", {}};
  auto& lines = section.lines;
  lines.emplace_back("kernel", kernel_release());
  lines.emplace_back("io_uring", probe_io_uring().str());
  char* real = realpath(dir.c_str(), nullptr);
  lines.emplace_back("probed directory",
                     std::string(real ? real : dir.c_str()) + " (" + dir_note + ")");
  free(real);
  lines.emplace_back("file system", file_system(dir));
  lines.emplace_back("O_DIRECT", probe_o_direct(dir).str());
  return section;
}

}  // namespace deepspeed::swap
