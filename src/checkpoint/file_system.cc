// The POSIX FileSystem and the crash-safe write protocol every checkpoint file goes through.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/writer_identity.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {
namespace {

std::string errno_text() { return std::strerror(errno); }

std::string parent_dir(const std::string& path) {
  size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

class PosixWritableFile : public WritableFile {
 public:
  PosixWritableFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }

  void append(const char* data, size_t size) override {
    while (size > 0) {
      ssize_t n = ::write(fd_, data, size);
      if (n < 0 && errno == EINTR) continue;
      DS_CHECK_T(CheckpointError, n > 0, "cannot write ", path_, ": ", errno_text());
      data += n;
      size -= static_cast<size_t>(n);
    }
  }
  void sync() override {
    DS_CHECK_T(CheckpointError, ::fsync(fd_) == 0, "cannot fsync ", path_, ": ", errno_text());
  }
  void close() override {
    int fd = fd_;
    fd_ = -1;
    DS_CHECK_T(CheckpointError, ::close(fd) == 0, "cannot close ", path_, ": ", errno_text());
  }

 private:
  std::string path_;
  int fd_;
};

class PosixFileSystem : public FileSystem {
 public:
  std::unique_ptr<WritableFile> new_writable_file(const std::string& path) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    DS_CHECK_T(CheckpointError, fd >= 0, "cannot create ", path, ": ", errno_text());
    return std::make_unique<PosixWritableFile>(path, fd);
  }
  void rename_file(const std::string& from, const std::string& to) override {
    DS_CHECK_T(CheckpointError, ::rename(from.c_str(), to.c_str()) == 0, "cannot rename ", from,
               " to ", to, ": ", errno_text());
  }
  void sync_dir(const std::string& dir) override {
    int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DS_CHECK_T(CheckpointError, fd >= 0, "cannot open directory ", dir, ": ", errno_text());
    int rc = ::fsync(fd);
    std::string err = errno_text();
    ::close(fd);
    DS_CHECK_T(CheckpointError, rc == 0, "cannot fsync directory ", dir, ": ", err);
  }
  void remove_file(const std::string& path) override {
    DS_CHECK_T(CheckpointError, ::unlink(path.c_str()) == 0 || errno == ENOENT, "cannot remove ",
               path, ": ", errno_text());
  }
  void create_dirs(const std::string& dir) override {
    if (dir.empty() || dir == "/" || dir == ".") return;
    struct stat st;
    if (::stat(dir.c_str(), &st) == 0) {
      DS_CHECK_T(CheckpointError, S_ISDIR(st.st_mode), dir, " exists and is not a directory");
      return;
    }
    create_dirs(parent_dir(dir));
    DS_CHECK_T(CheckpointError, ::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST,
               "cannot create directory ", dir, ": ", errno_text());
  }
  bool file_exists(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0;
  }
  std::vector<char> read_file(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) throw CheckpointError("checkpoint file " + path + " is missing");
    DS_CHECK_T(CheckpointError, fd >= 0, "cannot open ", path, ": ", errno_text());
    struct stat st;
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      throw CheckpointError("cannot stat " + path + ": " + errno_text());
    }
    std::vector<char> bytes(static_cast<size_t>(st.st_size));
    size_t done = 0;
    while (done < bytes.size()) {
      ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        std::string err = n == 0 ? "unexpected end of file" : errno_text();
        ::close(fd);
        throw CheckpointError("cannot read " + path + ": " + err);
      }
      done += static_cast<size_t>(n);
    }
    ::close(fd);
    return bytes;
  }
  bool is_dir(const std::string& path) override {
    struct stat st;
    return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
  }
  void remove_dir(const std::string& dir) override {
    DS_CHECK_T(CheckpointError, ::rmdir(dir.c_str()) == 0 || errno == ENOENT,
               "cannot remove directory ", dir, ": ", errno_text());
  }
  std::vector<std::string> list_dir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr && errno == ENOENT)
      throw CheckpointError("checkpoint directory " + dir + " is missing");
    DS_CHECK_T(CheckpointError, d != nullptr, "cannot list ", dir, ": ", errno_text());
    std::vector<std::string> names;
    while (dirent* e = ::readdir(d)) {
      std::string name = e->d_name;
      if (name != "." && name != "..") names.push_back(name);
    }
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

FileSystem* default_file_system() {
  // Leaked on purpose: checkpoints may be written from static destructors of user code.
  static FileSystem* fs = new PosixFileSystem();
  return fs;
}

std::string temporary_path(const std::string& path) {
  return path + ".tmp." + std::to_string(::getpid()) + "." + this_host();
}

void write_file_atomic(const std::string& path, const std::function<void(WritableFile&)>& write,
                       FileSystem* fs) {
  if (fs == nullptr) fs = default_file_system();
  const std::string tmp = temporary_path(path);
  try {
    std::unique_ptr<WritableFile> file = fs->new_writable_file(tmp);
    write(*file);
    file->sync();
    file->close();
    fs->rename_file(tmp, path);
  } catch (...) {
    try {
      fs->remove_file(tmp);
    } catch (...) {
      // The original error is the one worth reporting; a leftover temporary never has a final name.
    }
    throw;
  }
  // Without this the rename itself may not survive a power loss, and `latest` could point at a lost
  // file.
  fs->sync_dir(parent_dir(path));
}

void write_file_atomic(const std::string& path, const char* data, size_t size, FileSystem* fs) {
  write_file_atomic(
      path,
      [&](WritableFile& file) {
        // Chunked so a huge file never asks the kernel for one multi-GiB write.
        constexpr size_t kChunk = size_t{64} << 20;
        for (size_t pos = 0; pos < size; pos += kChunk)
          file.append(data + pos, std::min(kChunk, size - pos));
      },
      fs);
}

}  // namespace deepspeed::checkpoint
