// MappedFile (mapped_file.h): open, fstat, mmap read-only, close the descriptor (the mapping keeps the file).
#include "checkpoint/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "deepspeed/error.h"

namespace deepspeed::checkpoint {

std::shared_ptr<const MappedFile> MappedFile::open(const std::string& path) {
  std::shared_ptr<MappedFile> file(new MappedFile());
  file->path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DS_CHECK(fd >= 0, path, ": cannot open: ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(path + ": cannot stat: " + std::strerror(err));
  }
  file->size_ = static_cast<size_t>(st.st_size);
  if (file->size_ == 0) {
    ::close(fd);
    return file;
  }
  void* p = ::mmap(nullptr, file->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  DS_CHECK(p != MAP_FAILED, path, ": cannot map: ", std::strerror(err));
  file->data_ = static_cast<const char*>(p);
  return file;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<char*>(data_), size_);
}

void MappedFile::drop_pages(size_t begin, size_t end) const {
  if (data_ == nullptr || end <= begin) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t first = reinterpret_cast<uintptr_t>(data_ + begin) / page * page;
  const uintptr_t last = reinterpret_cast<uintptr_t>(data_ + end);
  // Only whole pages inside the mapping; a page shared with a neighbour's bytes is dropped too (a re-read, no loss).
  ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

}  // namespace deepspeed::checkpoint
