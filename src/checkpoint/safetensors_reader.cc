// SafetensorsFile (safetensors_reader.h): mmap, then the header's checks, then views.
#include "checkpoint/safetensors_reader.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "checkpoint/mapped_file.h"
#include "deepspeed/checkpoint.h"

namespace deepspeed::checkpoint {

struct SafetensorsFile::Mapping {
  std::shared_ptr<const MappedFile> file;
  const char* data = nullptr;
  size_t size = 0;
};

at::ScalarType safetensors_scalar_type(const std::string& name, const std::string& where) {
  static const std::map<std::string, at::ScalarType> kTypes = {
      {"F64", at::kDouble}, {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"I64", at::kLong},
      {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},  {"U8", at::kByte},       {"BOOL", at::kBool}};
  const auto it = kTypes.find(name);
  DS_CHECK_T(CheckpointError, it != kTypes.end(), where, ": dtype \"", name,
             "\" is not one this reader takes (F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL)");
  return it->second;
}

namespace {

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

// One header entry, checked against the data region of `data_size` bytes.
SafetensorsTensor parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                              uint64_t data_size) {
  const std::string where = path + ": tensor '" + name + "'";
  DS_CHECK_T(CheckpointError,
             e.is_object() && e.contains("dtype") && e["dtype"].is_string() && e.contains("shape") &&
                 e["shape"].is_array() && e.contains("data_offsets") && e["data_offsets"].is_array() &&
                 e["data_offsets"].size() == 2,
             where, ": header entry needs dtype, shape and data_offsets [begin, end]");
  SafetensorsTensor t;
  t.name = name;
  t.dtype = safetensors_scalar_type(e["dtype"].get<std::string>(), where);
  uint64_t numel = 1;
  for (const auto& d : e["shape"]) {
    DS_CHECK_T(CheckpointError, d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where,
               ": shape ", e["shape"].dump(), " is not a list of sizes");
    t.shape.push_back(d.get<int64_t>());
    numel *= d.get<uint64_t>();
  }
  for (const auto& o : e["data_offsets"])
    DS_CHECK_T(CheckpointError, o.is_number_unsigned() || (o.is_number_integer() && o.get<int64_t>() >= 0), where,
               ": data_offsets ", e["data_offsets"].dump(), " are not byte offsets");
  t.begin = e["data_offsets"][0].get<uint64_t>();
  t.end = e["data_offsets"][1].get<uint64_t>();
  DS_CHECK_T(CheckpointError, t.begin <= t.end && t.end <= data_size, where, ": data_offsets [", t.begin, ", ", t.end,
             "] lie outside the file's ", data_size, " bytes of data (truncated file or a wrong header)");
  DS_CHECK_T(CheckpointError, t.end - t.begin == numel * c10::elementSize(t.dtype), where, ": data_offsets hold ",
             t.end - t.begin, " bytes, but ", e["dtype"].get<std::string>(), " of shape ", e["shape"].dump(), " needs ",
             numel * c10::elementSize(t.dtype));
  return t;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), mapping_(std::make_shared<Mapping>()) {
  try {
    mapping_->file = MappedFile::open(path);
  } catch (const Error& e) {  // cannot open or map: a missing weights file is a checkpoint error to callers
    throw CheckpointError(e.what());
  }
  mapping_->data = mapping_->file->data();
  mapping_->size = mapping_->file->size();
  const size_t size = mapping_->size;
  DS_CHECK_T(CheckpointError, size > 0, path, ": empty file, not safetensors");
  DS_CHECK_T(CheckpointError, size >= 8, path, ": ", size, " bytes, shorter than a safetensors header");
  const uint64_t header_len = read_le64(mapping_->data);
  DS_CHECK_T(CheckpointError, header_len <= size - 8, path, ": the header claims ", header_len,
             " bytes, past the end of the ", size, "-byte file (truncated, or not safetensors)");
  data_start_ = 8 + header_len;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(mapping_->data + 8, mapping_->data + data_start_);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": the header is not JSON (" + e.what() + ")");
  }
  DS_CHECK_T(CheckpointError, header.is_object(), path, ": the header is not a JSON object");
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      DS_CHECK_T(CheckpointError, entry.is_object(), path, ": __metadata__ is not an object");
      for (const auto& [k, v] : entry.items())
        if (v.is_string()) metadata_[k] = v.get<std::string>();
      continue;
    }
    tensors_.push_back(parse_entry(path, name, entry, size - data_start_));
  }
  std::sort(tensors_.begin(), tensors_.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin < b.begin; });
  for (size_t i = 0; i < tensors_.size(); ++i) {
    index_[tensors_[i].name] = i;
    DS_CHECK_T(CheckpointError, i == 0 || tensors_[i - 1].end <= tensors_[i].begin, path, ": tensors '",
               tensors_[i - 1].name, "' and '", tensors_[i].name, "' overlap");
  }
}

const SafetensorsTensor* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

void SafetensorsFile::drop_pages(const SafetensorsTensor& entry) const {
  mapping_->file->drop_pages(data_start_ + entry.begin, data_start_ + entry.end);
}

at::Tensor SafetensorsFile::tensor(const SafetensorsTensor& entry) const {
  // from_blob wants a mutable pointer; the pages are mapped read-only, so a write would fault instead of changing
  // the file: callers copy.
  void* p = const_cast<char*>(mapping_->data + data_start_ + entry.begin);
  std::shared_ptr<Mapping> keep = mapping_;
  if (entry.begin == entry.end) return at::empty(entry.shape, at::TensorOptions().dtype(entry.dtype));
  return at::from_blob(
      p, entry.shape, [keep](void*) mutable { keep.reset(); }, at::TensorOptions().dtype(entry.dtype).device(at::kCPU));
}

}  // namespace deepspeed::checkpoint
