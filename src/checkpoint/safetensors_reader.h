// Reading the safetensors container (the format safetensors_writer.h writes; Hugging Face's weights files): the file
// is memory-mapped, its header parsed and checked whole before any tensor is handed out, and each tensor is a
// read-only CPU view of the mapping, so a reader touches only the bytes it copies (a rank loading its partition of
// a model reads that partition, not the file).
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace deepspeed::checkpoint {

struct SafetensorsTensor {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets into the data that follows the header
  uint64_t end = 0;
};

class SafetensorsFile {
 public:
  // Maps `path` and checks its header: a length that fits the file, JSON, each entry's dtype known, its byte range
  // inside the file and of the size its dtype and shape say. Throws CheckpointError naming the file (and tensor).
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return path_; }
  // The entries in the order of their data.
  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }
  // nullptr when the file has no tensor of that name.
  const SafetensorsTensor* find(const std::string& name) const;
  // The tensor's bytes as a CPU tensor that keeps the mapping alive. Read only: write to a copy.
  at::Tensor tensor(const SafetensorsTensor& entry) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Gives back the pages of `entry`'s bytes this process touched (they stay in the page cache): a loader that has
  // copied a tensor calls it, so the mapping's pages do not add up to a second copy of the model in its RSS.
  void drop_pages(const SafetensorsTensor& entry) const;

 private:
  struct Mapping;
  std::string path_;
  std::shared_ptr<Mapping> mapping_;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsTensor> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// The dtype a safetensors name ("F32", "BF16", ...) stands for; throws CheckpointError naming `where` otherwise.
at::ScalarType safetensors_scalar_type(const std::string& name, const std::string& where);

}  // namespace deepspeed::checkpoint
