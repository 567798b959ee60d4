// A read-only memory mapping of a whole file, shared by the readers that must not pull a large file into memory
// (safetensors weights, tokenized corpora): the kernel reads a page when it is first touched, and drop_pages gives
// touched pages back so a reader's resident memory does not grow with what it has already copied.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

namespace deepspeed::checkpoint {

class MappedFile {
 public:
  // Maps `path` whole. Throws deepspeed::Error naming the file and the system's reason when it cannot be opened or
  // mapped. An empty file maps to data() == nullptr, size() == 0.
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::string& path() const { return path_; }
  const char* data() const { return data_; }
  size_t size() const { return size_; }
  // Gives back the whole pages of bytes [begin, end) this process touched (they stay in the page cache, so a later
  // read costs a page fault, not a disk read).
  void drop_pages(size_t begin, size_t end) const;

 private:
  MappedFile() = default;
  std::string path_;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace deepspeed::checkpoint
