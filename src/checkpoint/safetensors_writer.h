// The safetensors container (https://github.com/huggingface/safetensors): an 8-byte little-endian
// header length, a JSON header mapping each tensor name to {dtype, shape, data_offsets}, then the
// raw little-endian bytes. Only the header is built here; callers stream the tensor bytes after it
// in the order the entries were given, so a writer never needs more than one tensor in memory.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

struct SafetensorsEntry {
  std::string name;
  at::ScalarType dtype;
  std::vector<int64_t> shape;
};

// The safetensors dtype name ("F32", "BF16", ...); throws for dtypes the format has no name for.
std::string safetensors_dtype(at::ScalarType dtype);

// The 8-byte length followed by the JSON header (padded with spaces to a multiple of 8 so the data
// that follows stays aligned). Entries' data are laid out back to back in the given order.
// `metadata` goes under
// "__metadata__" (string to string, as the format requires).
std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::vector<std::pair<std::string, std::string>>& metadata);

// Writes named CPU tensors (contiguous copies taken where needed) as one safetensors file, crash-safely
// (write_file_atomic). For a few tensors held in memory anyway: initial weights, small exports.
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata);

// A model's weights file in the format its name says: safetensors for "*.safetensors" (transformers' model file, the
// tensors and nothing else), else torch's zip serialization (save_state). Crash-safe either way; the folder is made
// first if it does not exist.
void save_weights_file(const std::string& path, const StateDict& state);

}  // namespace deepspeed::checkpoint
