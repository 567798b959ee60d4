// A directory every rank of the world sees, for a multi-process test: rank 0 creates it under $TMPDIR and broadcasts
// its path; after a barrier rank 0 removes it with everything in it.
#pragma once

#include <ATen/ATen.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>

#include "deepspeed/comm.h"

namespace ds_test {

class SharedTempDir {
 public:
  explicit SharedTempDir(const std::string& prefix = "ds_engine_ckpt") {
    if (!deepspeed::comm::is_initialized()) deepspeed::comm::init_distributed();
    auto world = deepspeed::comm::get_world_group();
    at::Tensor buf = at::zeros({512}, at::kByte);
    if (world.rank() == 0) {
      std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "_XXXXXX")).string();
      if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed: " + tmpl);
      std::memcpy(buf.data_ptr(), tmpl.c_str(), tmpl.size());
    }
    world.broadcast(buf, 0);
    path_ = std::string(static_cast<const char*>(buf.data_ptr()));
  }
  ~SharedTempDir() {
    auto world = deepspeed::comm::get_world_group();
    world.barrier();
    std::error_code ec;
    if (world.rank() == 0) std::filesystem::remove_all(path_, ec);
  }
  SharedTempDir(const SharedTempDir&) = delete;
  SharedTempDir& operator=(const SharedTempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ds_test
