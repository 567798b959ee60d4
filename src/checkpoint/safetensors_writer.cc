// Builds safetensors headers and small safetensors files (see safetensors_writer.h).
#include "checkpoint/safetensors_writer.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

std::string safetensors_dtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "F32";
    case at::kDouble:
      return "F64";
    case at::kHalf:
      return "F16";
    case at::kBFloat16:
      return "BF16";
    case at::kLong:
      return "I64";
    case at::kInt:
      return "I32";
    case at::kShort:
      return "I16";
    case at::kChar:
      return "I8";
    case at::kByte:
      return "U8";
    case at::kBool:
      return "BOOL";
    default:
      break;
  }
  throw CheckpointError(std::string("safetensors has no dtype for ") + c10::toString(dtype));
}

std::string safetensors_header(const std::vector<SafetensorsEntry>& entries,
                               const std::vector<std::pair<std::string, std::string>>& metadata) {
  // Ordered so the header lists tensors in file order, which makes the file easy to inspect by eye.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& kv : metadata) meta[kv.first] = kv.second;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const SafetensorsEntry& e : entries) {
    DS_CHECK_T(CheckpointError, !header.contains(e.name), "tensor '", e.name,
               "' appears twice in a safetensors file");
    uint64_t numel = 1;
    for (int64_t d : e.shape) numel *= static_cast<uint64_t>(d);
    uint64_t nbytes = numel * c10::elementSize(e.dtype);
    header[e.name] = {{"dtype", safetensors_dtype(e.dtype)},
                      {"shape", e.shape},
                      {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string json = header.dump();
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, at::Tensor>>& tensors,
                      const std::vector<std::pair<std::string, std::string>>& metadata) {
  std::vector<SafetensorsEntry> entries;
  std::vector<at::Tensor> data;
  for (const auto& [name, t] : tensors) {
    data.push_back(t.detach().to(at::kCPU).contiguous());
    entries.push_back({name, t.scalar_type(), t.sizes().vec()});
  }
  const std::string header = safetensors_header(entries, metadata);
  write_file_atomic(path, [&](WritableFile& f) {
    f.append(header.data(), header.size());
    for (const at::Tensor& t : data) f.append(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.nbytes()));
  });
}

void save_weights_file(const std::string& path, const StateDict& state) {
  // As DeepSpeed's save_16bit_model, which makes save_dir first.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  if (!parent.empty()) std::filesystem::create_directories(parent);
  const std::string ext = ".safetensors";
  if (path.size() < ext.size() || path.compare(path.size() - ext.size(), ext.size(), ext) != 0) {
    save_state(path, state);
    return;
  }
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  for (const auto& item : state) {
    DS_CHECK_T(CheckpointError, item.value().isTensor(), path, ": '", item.key(),
               "' is not a tensor; a safetensors file holds tensors only");
    tensors.emplace_back(item.key(), item.value().toTensor().detach().cpu());
  }
  save_safetensors(path, tensors, {{"format", "pt"}});
}

}  // namespace deepspeed::checkpoint
