// An independent safetensors reader for tests (name -> tensor), so ds_to_fp32's output is checked
// by code that shares nothing with its writer.
#pragma once

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace deepspeed::checkpoint::testing {

inline std::map<std::string, at::Tensor> read_safetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_GE(bytes.size(), 8u);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  nlohmann::json header = nlohmann::json::parse(std::string(bytes.data() + 8, n));
  const char* data = bytes.data() + 8 + n;
  std::map<std::string, at::ScalarType> dtypes = {{"F32", at::kFloat}, {"F64", at::kDouble}};
  std::map<std::string, at::Tensor> out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    std::vector<int64_t> shape = it.value()["shape"].get<std::vector<int64_t>>();
    uint64_t b = it.value()["data_offsets"][0], e = it.value()["data_offsets"][1];
    EXPECT_LE(8 + n + e, bytes.size());
    at::Tensor t = at::empty(shape, dtypes.at(it.value()["dtype"].get<std::string>()));
    EXPECT_EQ(static_cast<uint64_t>(t.numel() * t.element_size()), e - b) << it.key();
    std::memcpy(t.data_ptr(), data + b, e - b);
    out[it.key()] = t;
  }
  return out;
}

}  // namespace deepspeed::checkpoint::testing
